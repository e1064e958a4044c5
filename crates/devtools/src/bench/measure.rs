//! Watching a bench run deliver, and measuring it afterwards: at a stand-in
//! (its arrival clock) or from the delivery rows.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use toki_app::Toki;
use toki_model::lateness::Lateness;
use toki_model::{Channel, DeliveryKey, DeliveryStatus, TenantId};
use toki_ports::TenantStores;

use super::results::{GroupLateness, MeasuredAt};
use crate::progress::Progress;
use crate::scenario;
use crate::slack_standin::{Arrival, StandinStats};
use crate::smtp_standin::{MailArrival, SmtpStats};

/// Where arrivals are counted and lateness measured.
pub(super) enum Sink {
    /// The Slack stand-in (its HTTP base).
    Slack(String),
    /// The SMTP stand-in (its HTTP base).
    Smtp(String),
    /// The webhook receiver stand-in (its HTTP base).
    Webhook(String),
    /// The delivery rows (and a Maildir's files for duplicates, if given).
    Rows,
}

/// What a run measured, besides what the bench knows itself.
pub(super) struct Measured {
    pub lateness_ms: Lateness,
    pub missing: u64,
    pub duplicates: u64,
    pub measured_at: MeasuredAt,
    /// The last arrival or delivery, in ms after the due instant.
    pub last_ms: i64,
    pub smtp_sessions: Option<u64>,
    pub throttle_answers: Option<u64>,
    pub max_per_second: Option<u64>,
    pub groups: Vec<GroupLateness>,
    pub per_second: Vec<u64>,
    pub samples_ms: Vec<(String, Vec<i64>)>,
}

impl Measured {
    /// The figures every measure has; the rest empty.
    fn new(
        measured_at: MeasuredAt,
        lateness_ms: Lateness,
        missing: u64,
        duplicates: u64,
        last_ms: i64,
    ) -> Self {
        Measured {
            lateness_ms,
            missing,
            duplicates,
            measured_at,
            last_ms,
            smtp_sessions: None,
            throttle_answers: None,
            max_per_second: None,
            groups: Vec::new(),
            per_second: Vec::new(),
            samples_ms: Vec::new(),
        }
    }
}

/// What the rows' measure needs besides the run: `--maildir`, and whether
/// to collect every delivery's lateness for `--plot`.
pub(super) struct RowsOptions<'a> {
    pub maildir: Option<&'a PathBuf>,
    pub plot: bool,
}

/// A run in progress, as watched and measured: every delivery due at `due`.
pub(super) struct Watch<'a> {
    pub toki: &'a Toki,
    pub sink: &'a Sink,
    pub http: &'a reqwest::Client,
    pub tenants: &'a [TenantId],
    pub channel: Channel,
    pub due: DateTime<Utc>,
    /// Deliveries expected, the large tenant's included.
    pub deliveries: usize,
}

async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> anyhow::Result<T> {
    Ok(http
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

impl Watch<'_> {
    /// Deliveries arrived (or delivered) so far.
    async fn done(&self, now: DateTime<Utc>) -> anyhow::Result<u64> {
        Ok(match self.sink {
            Sink::Slack(url) | Sink::Webhook(url) => {
                get_json::<StandinStats>(self.http, &format!("{url}/stats"))
                    .await?
                    .unique
            }
            Sink::Smtp(url) => {
                get_json::<SmtpStats>(self.http, &format!("{url}/stats"))
                    .await?
                    .unique
            }
            Sink::Rows if now >= self.due => self.delivered_rows().await?,
            Sink::Rows => 0,
        })
    }

    /// Waits for the due instant, then for every delivery (or a deadline),
    /// showing where it is on `progress`.
    pub(super) async fn wait(&self, workers: usize, progress: &Progress) -> anyhow::Result<()> {
        let n = self.deliveries;
        let deadline = self.due + chrono::Duration::seconds(60 + (n / 1000) as i64);
        progress.stage("waiting", None);
        let mut delivering = false;
        loop {
            let now = self.toki.clock.now();
            let done = self.done(now).await?;
            if done >= n as u64 || now > deadline {
                return Ok(());
            }
            if now < self.due {
                progress.message(format!(
                    "n={n} w={workers}: due in {:.1} s",
                    (self.due - now).num_milliseconds() as f64 / 1000.0
                ));
            } else {
                if !delivering {
                    progress.stage("delivering", Some(n as u64));
                    progress.message(format!("n={n} w={workers}"));
                    delivering = true;
                }
                progress.set(done);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Counts delivered rows across tenants.
    async fn delivered_rows(&self) -> anyhow::Result<u64> {
        let mut n = 0;
        for t in self.tenants {
            for c in self.toki.stores.open(t).await?.delivery_counts().await? {
                if c.channel == self.channel && c.status == DeliveryStatus::Delivered {
                    n += c.count;
                }
            }
        }
        Ok(n)
    }

    /// Delivered rows per daemon process (in `pids` order), from the claim holder each row names.
    pub(super) async fn delivered_by_daemon(&self, pids: &[u32]) -> anyhow::Result<Vec<u64>> {
        let mut share = vec![0; pids.len()];
        for t in self.tenants {
            for (holder, count) in self
                .toki
                .stores
                .open(t)
                .await?
                .delivered_by_holder()
                .await?
            {
                if let Some(i) = pids.iter().position(|p| p.to_string() == holder) {
                    share[i] += count;
                }
            }
        }
        Ok(share)
    }

    /// Lateness (ms) of every delivered row of the channel, for `--plot`.
    async fn delivered_lateness(&self) -> anyhow::Result<Vec<i64>> {
        let mut late = Vec::new();
        for t in self.tenants {
            for d in self.toki.stores.open(t).await?.deliveries().await? {
                if d.key.channel == self.channel && d.status == DeliveryStatus::Delivered {
                    late.push((d.at - d.due_at.0).num_milliseconds());
                }
            }
        }
        Ok(late)
    }

    /// Lateness from (arrival, due) pairs at a stand-in, the missing, the
    /// duplicates, and the last arrival after the due instant.
    fn at_sink(
        &self,
        at_sink: impl Iterator<Item = (i64, i64)>,
        unique: u64,
        duplicates: u64,
    ) -> Measured {
        let (lat, arrived): (Vec<i64>, Vec<i64>) = at_sink.map(|(a, d)| (a - d, a)).unzip();
        let last = arrived.into_iter().max().unwrap_or(0) - self.due.timestamp_millis();
        Measured::new(
            MeasuredAt::Sink,
            Lateness::from_millis(lat),
            (self.deliveries as u64).saturating_sub(unique),
            duplicates,
            last,
        )
    }

    /// Measures the run at the Slack stand-in: lateness by its arrival
    /// clock, its 429s and pace, and per group when there is a large tenant.
    pub(super) async fn at_slack(
        &self,
        url: &str,
        large_tenant: Option<&TenantId>,
    ) -> anyhow::Result<Measured> {
        let arrivals: Vec<Arrival> = get_json(self.http, &format!("{url}/arrivals")).await?;
        let stats: StandinStats = get_json(self.http, &format!("{url}/stats")).await?;
        let seconds: Vec<(i64, u64)> = get_json(self.http, &format!("{url}/per_second")).await?;
        let at_sink = arrivals.iter().map(|a| (a.arrived_ms, a.due_at_ms));
        let mut m = self.at_sink(at_sink, stats.unique, stats.duplicates);
        m.throttle_answers = Some(stats.rate_limited + stats.throttled);
        m.per_second = self.seconds_from_due(seconds);
        m.max_per_second = Some(stats.max_per_second);
        m.samples_ms.push((
            "all deliveries".into(),
            arrivals
                .iter()
                .map(|a| a.arrived_ms - a.due_at_ms)
                .collect(),
        ));
        if let Some(large) = large_tenant {
            by_group(&arrivals, large, &mut m);
        }
        Ok(m)
    }

    /// Measures the run at the webhook receiver, by its arrival clock.
    pub(super) async fn at_webhook(&self, url: &str) -> anyhow::Result<Measured> {
        let arrivals: Vec<Arrival> = get_json(self.http, &format!("{url}/arrivals")).await?;
        let stats: StandinStats = get_json(self.http, &format!("{url}/stats")).await?;
        let at_sink = arrivals.iter().map(|a| (a.arrived_ms, a.due_at_ms));
        let mut m = self.at_sink(at_sink, stats.unique, stats.duplicates);
        m.samples_ms.push((
            "all deliveries".into(),
            arrivals
                .iter()
                .map(|a| a.arrived_ms - a.due_at_ms)
                .collect(),
        ));
        Ok(m)
    }

    /// Accepted per second, from the due instant's second on.
    fn seconds_from_due(&self, seconds: Vec<(i64, u64)>) -> Vec<u64> {
        let mut per_second: Vec<u64> = Vec::new();
        let first = self.due.timestamp_millis().div_euclid(1000);
        for (second, accepted) in seconds {
            if let Ok(i) = usize::try_from(second - first) {
                if per_second.len() <= i {
                    per_second.resize(i + 1, 0);
                }
                per_second[i] = accepted;
            }
        }
        per_second
    }

    /// Measures the run at the SMTP stand-in, by its arrival clock.
    pub(super) async fn at_smtp(&self, url: &str) -> anyhow::Result<Measured> {
        let arrivals: Vec<MailArrival> = get_json(self.http, &format!("{url}/arrivals")).await?;
        let stats: SmtpStats = get_json(self.http, &format!("{url}/stats")).await?;
        let due_ms = self.due.timestamp_millis();
        // Mails carry no due instant; every bench delivery is due at `due`.
        let at_sink = arrivals.iter().map(|a| (a.arrived_ms, due_ms));
        let mut m = self.at_sink(at_sink, stats.unique, stats.duplicates);
        m.smtp_sessions = Some(stats.connections);
        m.samples_ms.push((
            "all deliveries".into(),
            arrivals.iter().map(|a| a.arrived_ms - due_ms).collect(),
        ));
        Ok(m)
    }

    /// Measures the run from the delivery rows (and a Maildir, for duplicates).
    pub(super) async fn in_rows(
        &self,
        expected: &HashMap<TenantId, HashSet<DeliveryKey>>,
        opts: &RowsOptions<'_>,
    ) -> anyhow::Result<Measured> {
        let sinks = match (opts.maildir, self.channel) {
            (Some(md), Channel::Mail) => {
                Some(scenario::count_mail(&[md.join("new"), md.join("cur")])?)
            }
            _ => None,
        };
        let v = scenario::verify(self.toki, expected, self.due, sinks.as_ref()).await?;
        let mut m = Measured::new(
            MeasuredAt::Rows,
            v.lateness_ms,
            v.missing,
            v.duplicates,
            v.last_delivery_ms,
        );
        if opts.plot {
            m.samples_ms
                .push(("all deliveries".into(), self.delivered_lateness().await?));
        }
        Ok(m)
    }
}

/// Lateness of the large tenant's arrivals and of the others', as groups
/// and as samples.
fn by_group(arrivals: &[Arrival], large: &TenantId, m: &mut Measured) {
    let prefix = format!("{large}/");
    let (big, rest): (Vec<&Arrival>, Vec<&Arrival>) = arrivals
        .iter()
        .partition(|a| a.delivery.starts_with(&prefix));
    for (group, part) in [("large tenant", big), ("other tenants", rest)] {
        let late: Vec<i64> = part.iter().map(|a| a.arrived_ms - a.due_at_ms).collect();
        m.groups.push(GroupLateness {
            group: group.into(),
            deliveries: part.len(),
            lateness_ms: Lateness::from_millis(late.clone()),
        });
        m.samples_ms.push((group.into(), late));
    }
}
