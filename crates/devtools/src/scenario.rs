//! The "09:00 on a Monday" scenario shared by `toki demo` and `toki bench`:
//! N deliveries across T tenants, all due at one whole second, registered
//! through the registrar; then verified against the delivery rows and the sinks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Duration as ChronoDuration, SubsecRound, Utc};
use futures::stream::{self, StreamExt, TryStreamExt};
use serde::Serialize;
use toki_model::input::{RuleInput, ScheduleInput, UserInput};
use toki_model::lateness::Lateness;
use toki_model::time::millis_between;
use toki_model::{Channel, DeliveryKey, DeliveryStatus, ScheduleId, TenantId};
use toki_ports::{Clock, SystemClock, TenantStores};

use toki_app::Toki;

use crate::progress::Progress;

/// Participants per meeting.
pub const MEETING_SIZE: usize = 10;
/// Users per tenant.
pub const USERS_PER_TENANT: usize = 50;
/// The reminder goes out this long before the meeting starts.
pub const MINUTES_BEFORE: u32 = 5;

const TENANT_NAMES: [&str; 8] = [
    "acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka",
];
const ZONES: [&str; 4] = ["Asia/Tokyo", "America/New_York", "Europe/Paris", "UTC"];

pub fn tenant_ids(n: usize) -> Vec<TenantId> {
    (0..n)
        .map(|i| match TENANT_NAMES.get(i) {
            Some(name) => name.parse().expect("valid tenant id"),
            None => format!("tenant-{i}").parse().expect("valid tenant id"),
        })
        .collect()
}

/// One meeting of the scenario.
#[derive(Debug, Clone)]
pub struct Meeting {
    pub tenant: TenantId,
    pub id: ScheduleId,
    pub input: ScheduleInput,
}

/// Plans meetings so that exactly `deliveries` reminders fall due at `due`,
/// channels rotating mail → chat → slack over meetings (unless `channels` narrows them).
pub fn plan_meetings(
    deliveries: usize,
    tenants: &[TenantId],
    channels: &[Channel],
    due: DateTime<Utc>,
) -> Vec<Meeting> {
    let starts_at = (due + ChronoDuration::minutes(i64::from(MINUTES_BEFORE))).to_rfc3339();
    let mut out = Vec::new();
    let mut left = deliveries;
    let mut i = 0;
    let meeting = meeting_size(deliveries, tenants.len());
    while left > 0 {
        let size = left.min(meeting);
        let tenant = tenants[i % tenants.len()].clone();
        let first = (i / tenants.len()) * 7;
        let participants = (0..size)
            .map(|k| format!("user{}", (first + k) % USERS_PER_TENANT))
            .collect();
        let channel = channels[i % channels.len()];
        out.push(Meeting {
            tenant,
            id: format!("meeting-{i}").parse().expect("a valid schedule id"),
            input: ScheduleInput {
                title: format!("Monday stand-up #{i}"),
                body: "Agenda: what shipped, what is next, what is in the way.".into(),
                starts_at: starts_at.clone(),
                time_zone: ZONES[i % ZONES.len()].into(),
                participants,
                reminders: vec![RuleInput {
                    minutes_before: i64::from(MINUTES_BEFORE),
                    channels: vec![channel.to_string()],
                }],
                recurrence: None,
                dst: None,
            },
        });
        left -= size;
        i += 1;
    }
    out
}

pub fn user_input(tenant: &TenantId, j: usize) -> UserInput {
    UserInput {
        name: format!("User {j}"),
        email: Some(format!("user{j}@{tenant}.example.com")),
        slack_user_id: Some(format!(
            "U{}{j:04}",
            tenant.as_str().to_uppercase().replace(['-', '_'], "")
        )),
        webhook_url: None,
        time_zone: ZONES[j % ZONES.len()].into(),
        locale: if j.is_multiple_of(5) {
            "ja".into()
        } else {
            "en".into()
        },
        channels: Default::default(),
    }
}

/// The next whole second at least `lead` ahead.
pub fn due_instant(lead: Duration) -> DateTime<Utc> {
    let t = SystemClock.now() + ChronoDuration::from_std(lead).unwrap_or_default();
    t.trunc_subsecs(0) + ChronoDuration::seconds(1)
}

/// Creates the tenants (in bulk: [`Toki::create_tenants`]) and `users` users
/// each, [`toki_app::BULK_CREATE_CONCURRENCY`] tenants at once.
pub async fn create_tenants(toki: &Toki, tenants: &[TenantId], users: usize) -> anyhow::Result<()> {
    toki.create_tenants(tenants, true).await?;
    let registrar = toki.registrar();
    let registrar = &registrar;
    stream::iter(tenants)
        .map(|t| async move {
            for j in 0..users {
                registrar
                    .put_user(t, &format!("user{j}").parse()?, &user_input(t, j))
                    .await
                    .with_context(|| format!("registering user{j} of {t}"))?;
            }
            anyhow::Ok(())
        })
        .buffer_unordered(toki_app::BULK_CREATE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// People in one meeting of a plan of `deliveries` over `tenants`: up to
/// [`MEETING_SIZE`], fewer so that every tenant has a meeting (the shape a
/// SaaS has at 09:00: a few meetings in each of many tenants).
pub fn meeting_size(deliveries: usize, tenants: usize) -> usize {
    MEETING_SIZE.min(deliveries.div_ceil(tenants.max(1))).max(1)
}

/// Users each tenant needs for [`plan_meetings`] of `deliveries` over `tenants`.
pub fn users_needed(deliveries: usize, tenants: usize) -> usize {
    let size = meeting_size(deliveries, tenants);
    let rounds = deliveries.div_ceil(size).div_ceil(tenants.max(1)).max(1);
    ((rounds - 1) * 7 + size).min(USERS_PER_TENANT)
}

/// Meetings per registrar call: one tenant's schedules go in batches.
const REGISTER_BATCH: usize = 500;

/// Registers meetings through the registrar, in batches per tenant; returns
/// every expected delivery key per tenant.
pub async fn register(
    toki: &Toki,
    meetings: Vec<Meeting>,
    progress: &Progress,
) -> anyhow::Result<HashMap<TenantId, HashSet<DeliveryKey>>> {
    let registrar = std::sync::Arc::new(toki.registrar());
    let total = meetings.len() as u64;
    let settings = toki.config.pipeline_settings();
    let mut by_tenant: HashMap<TenantId, Vec<(ScheduleId, ScheduleInput)>> = HashMap::new();
    for m in meetings {
        by_tenant.entry(m.tenant).or_default().push((m.id, m.input));
    }
    // Round robin over the tenants, one batch in flight per tenant database
    // (SQLite serialises its writers).
    let parallel = by_tenant.len().max(1);
    let mut per_tenant: Vec<_> = by_tenant
        .into_iter()
        .map(|(tenant, items)| {
            let chunks: Vec<_> = items.chunks(REGISTER_BATCH).map(<[_]>::to_vec).collect();
            (tenant, chunks.into_iter())
        })
        .collect();
    let mut batches = Vec::new();
    while !per_tenant.is_empty() {
        per_tenant.retain_mut(|(tenant, chunks)| match chunks.next() {
            Some(c) => {
                batches.push((tenant.clone(), c));
                true
            }
            None => false,
        });
    }
    let mut results = stream::iter(batches.into_iter().map(|(tenant, items)| {
        let registrar = registrar.clone();
        async move {
            let r = registrar.put_schedules(&tenant, &items).await;
            (tenant, r)
        }
    }))
    .buffer_unordered(parallel);
    let mut expected: HashMap<TenantId, HashSet<DeliveryKey>> = HashMap::new();
    let mut done = 0;
    progress.stage("registering", Some(total));
    while let Some((tenant, r)) = results.next().await {
        let written = r.with_context(|| format!("registering meetings of {tenant}"))?;
        let now = toki.clock.now();
        for registered in written {
            let registered =
                registered.with_context(|| format!("registering a meeting of {tenant}"))?;
            let reminders = toki_model::index::reminders_for(
                &tenant,
                &registered.schedule,
                now - ChronoDuration::from_std(settings.look_back).unwrap_or_default(),
                now + ChronoDuration::from_std(settings.horizon).unwrap_or_default(),
            )?;
            for reminder in reminders {
                expected
                    .entry(tenant.clone())
                    .or_default()
                    .extend(reminder.deliveries_to(&registered.schedule.participants));
            }
            done += 1;
        }
        progress.set(done);
    }
    progress.finish(&format!("registered {total} meetings"));
    Ok(expected)
}

/// Per-channel figures of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChannelFigures {
    pub channel: String,
    pub expected: u64,
    pub delivered: u64,
    pub missing: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub lateness_ms: Lateness,
}

/// What a run delivered, measured from the delivery rows and the sinks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verification {
    pub deliveries: u64,
    pub delivered: u64,
    pub missing: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub lateness_ms: Lateness,
    pub channels: Vec<ChannelFigures>,
    /// Milliseconds from the due instant to the last delivery.
    pub last_delivery_ms: i64,
}

/// How many times each delivery reached a sink, keyed by `tenant/delivery key`.
pub type SinkCounts = HashMap<String, u64>;

pub fn sink_key(tenant: &TenantId, key: &DeliveryKey) -> String {
    format!("{tenant}/{key}")
}

/// Counts mails by their delivery header, in mail folders: lettre's file outbox
/// (`*.eml`) or an SMTP capture's Maildir (`new/`, `cur/`). Missing folders count nothing.
pub fn count_mail(dirs: &[std::path::PathBuf]) -> anyhow::Result<SinkCounts> {
    let header = format!("{}: ", toki_channels::DELIVERY_HEADER);
    let mut counts = SinkCounts::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            if let Some(line) = text.lines().find(|l| l.starts_with(&header)) {
                *counts
                    .entry(line[header.len()..].trim().to_owned())
                    .or_default() += 1;
            }
        }
    }
    Ok(counts)
}

/// Counts the mail outbox (.eml files) and the Slack outbox (JSON lines) by delivery.
pub fn count_outboxes(data_dir: &Path) -> anyhow::Result<SinkCounts> {
    let mut counts = count_mail(&[data_dir.join("outbox").join("mail")])?;
    let slack = data_dir.join("outbox").join("slack.jsonl");
    if slack.exists() {
        for line in std::fs::read_to_string(&slack)?.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).context("reading the Slack outbox")?;
            let p = &v["metadata"]["event_payload"];
            if let (Some(t), Some(d)) = (p["tenant"].as_str(), p["delivery"].as_str()) {
                *counts.entry(format!("{t}/{d}")).or_default() += 1;
            }
        }
    }
    Ok(counts)
}

/// Compares the expected deliveries with the delivery rows, the chat rows
/// and `sinks` (mail and Slack as their receivers saw them).
pub async fn verify(
    toki: &Toki,
    expected: &HashMap<TenantId, HashSet<DeliveryKey>>,
    due: DateTime<Utc>,
    sinks: Option<&SinkCounts>,
) -> anyhow::Result<Verification> {
    let mut v = Verification::default();
    let mut per_channel: BTreeMap<Channel, (ChannelFigures, Vec<i64>)> = BTreeMap::new();
    let mut all_lateness = Vec::new();
    for (tenant, keys) in expected {
        let store = toki.stores.open(tenant).await?;
        let rows = store.deliveries().await?;
        let by_key: HashMap<&DeliveryKey, &toki_model::DeliveryOutcome> =
            rows.iter().map(|r| (&r.key, r)).collect();
        // Chat rows are the chat channel's sink.
        let mut chat_counts: HashMap<DeliveryKey, u64> = HashMap::new();
        let users: HashSet<_> = keys
            .iter()
            .filter(|k| k.channel == Channel::Chat)
            .map(|k| k.recipient.clone())
            .collect();
        for u in users {
            for m in store.chat_messages(&u).await? {
                *chat_counts.entry(m.key).or_default() += 1;
            }
        }
        for key in keys {
            let (fig, lat) = per_channel.entry(key.channel).or_insert_with(|| {
                (
                    ChannelFigures {
                        channel: key.channel.to_string(),
                        ..Default::default()
                    },
                    Vec::new(),
                )
            });
            fig.expected += 1;
            let received = match (key.channel, sinks) {
                (Channel::Chat, _) => chat_counts.get(key).copied().unwrap_or(0),
                (_, Some(sinks)) => sinks.get(&sink_key(tenant, key)).copied().unwrap_or(0),
                // No sink to count at (mail to any SMTP server): the row's word.
                (_, None) => by_key
                    .get(key)
                    .is_some_and(|r| r.status == DeliveryStatus::Delivered)
                    .into(),
            };
            fig.duplicates += received.saturating_sub(1);
            match by_key.get(key) {
                Some(row) if row.status == DeliveryStatus::Delivered && received > 0 => {
                    fig.delivered += 1;
                    let ms = millis_between(row.due_at.0, row.at);
                    lat.push(ms);
                    all_lateness.push(ms);
                    v.last_delivery_ms = v.last_delivery_ms.max(millis_between(due, row.at));
                }
                Some(row) if row.status == DeliveryStatus::Stale => {
                    fig.stale += 1;
                    fig.missing += 1;
                }
                _ => fig.missing += 1,
            }
        }
    }
    for (_, (mut fig, lat)) in per_channel {
        fig.lateness_ms = Lateness::from_millis(lat);
        v.deliveries += fig.expected;
        v.delivered += fig.delivered;
        v.missing += fig.missing;
        v.duplicates += fig.duplicates;
        v.stale += fig.stale;
        v.channels.push(fig);
    }
    v.lateness_ms = Lateness::from_millis(all_lateness);
    Ok(v)
}
