//! Circuit breakers, one per outside channel (mail, Slack): after `threshold`
//! transient failures in a row the channel opens, and its deliveries wait in
//! the queue (parked, not failed: no budget is used); a probe every
//! `probe_every` finds out when the service answers again, and closing the
//! circuit releases the parked messages at once rather than at their next
//! backoff step. A dead channel never holds up the others.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{debug, info, warn};

use toki_model::domain::Channel;
use toki_model::error::chain;
use toki_ports::channel::ChannelSender;
use toki_ports::DelayQueue;

#[derive(Debug, Clone, PartialEq)]
pub struct BreakerSettings {
    /// Transient failures in a row that open a channel's circuit.
    pub threshold: u32,
    /// How often an open circuit probes its service.
    pub probe_every: Duration,
    /// How long a parked message stays hidden if nothing releases it sooner
    /// (a restarted daemon finds it then).
    pub park_for: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            threshold: 5,
            probe_every: Duration::from_secs(2),
            park_for: Duration::from_secs(300),
        }
    }
}

#[derive(Default)]
struct State {
    failures_in_a_row: u32,
    open: bool,
    /// Receipts of the messages waiting for this channel.
    parked: Vec<String>,
}

#[derive(Default)]
pub struct Breakers {
    settings: BreakerSettings,
    states: Mutex<HashMap<Channel, State>>,
}

impl Breakers {
    pub fn new(settings: BreakerSettings) -> Self {
        Breakers {
            settings,
            states: Mutex::default(),
        }
    }

    pub fn settings(&self) -> &BreakerSettings {
        &self.settings
    }

    /// In-app chat is a row in the tenant's own database, and a webhook an
    /// endpoint of the tenant's: a failure there is that tenant's, not the
    /// channel's, so it never opens a circuit (one tenant's dead endpoint
    /// would park every tenant's webhooks). Their deliveries back off and
    /// are dead-lettered one by one.
    fn breaks(channel: Channel) -> bool {
        !matches!(channel, Channel::Chat | Channel::Webhook)
    }

    pub fn open_channels(&self) -> BTreeSet<Channel> {
        let states = self.states.lock().expect("breakers lock");
        states
            .iter()
            .filter(|(_, s)| s.open)
            .map(|(c, _)| *c)
            .collect()
    }

    pub fn is_open(&self, channel: Channel) -> bool {
        let states = self.states.lock().expect("breakers lock");
        states.get(&channel).is_some_and(|s| s.open)
    }

    /// Counts a channel batch's sends; returns true when this opened the circuit.
    pub fn record(&self, channel: Channel, succeeded: usize, failed: usize) -> bool {
        if !Self::breaks(channel) {
            return false;
        }
        let mut states = self.states.lock().expect("breakers lock");
        let s = states.entry(channel).or_default();
        if succeeded > 0 {
            s.failures_in_a_row = 0;
            return false;
        }
        s.failures_in_a_row = s.failures_in_a_row.saturating_add(failed as u32);
        if !s.open && s.failures_in_a_row >= self.settings.threshold {
            s.open = true;
            return true;
        }
        false
    }

    /// Parks a message on an open channel; false if the circuit closed meanwhile.
    pub fn park(&self, channel: Channel, receipt: String) -> bool {
        let mut states = self.states.lock().expect("breakers lock");
        match states.get_mut(&channel) {
            Some(s) if s.open => {
                s.parked.push(receipt);
                true
            }
            _ => false,
        }
    }

    /// Closes a channel's circuit; returns the parked messages to release.
    pub fn close(&self, channel: Channel) -> Vec<String> {
        let mut states = self.states.lock().expect("breakers lock");
        let s = states.entry(channel).or_default();
        s.open = false;
        s.failures_in_a_row = 0;
        std::mem::take(&mut s.parked)
    }
}

/// Probes an open channel every `probe_every` until it answers; then closes
/// its circuit and makes the messages parked on it visible at once.
pub async fn probe_until_closed(
    channel: Channel,
    sender: Arc<dyn ChannelSender>,
    breakers: Arc<Breakers>,
    queue: Arc<dyn DelayQueue>,
) {
    loop {
        tokio::time::sleep(breakers.settings.probe_every).await;
        match sender.probe().await {
            Ok(()) => break,
            Err(e) => debug!(%channel, error = %e, "probe: still down"),
        }
    }
    let parked = breakers.close(channel);
    info!(%channel, released = parked.len(), "circuit closed: the channel answers again; parked messages come back now");
    for receipt in parked {
        if let Err(e) = queue.change_visibility(&receipt, Duration::ZERO).await {
            warn!(%channel, error = %chain(&e), "releasing a parked message failed; it comes back when its park ends");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_failures_in_a_row_and_releases_on_close() {
        let b = Breakers::new(BreakerSettings {
            threshold: 3,
            ..BreakerSettings::default()
        });
        assert!(!b.record(Channel::Slack, 0, 2));
        assert!(
            !b.record(Channel::Slack, 1, 0),
            "a success resets the count"
        );
        assert!(!b.record(Channel::Slack, 0, 2));
        assert!(
            b.record(Channel::Slack, 0, 1),
            "the third in a row opens it"
        );
        assert!(!b.record(Channel::Slack, 0, 5), "opens once");
        assert_eq!(b.open_channels(), [Channel::Slack].into_iter().collect());
        assert!(b.park(Channel::Slack, "r1".into()));
        assert!(!b.park(Channel::Mail, "r2".into()), "mail is closed");
        assert_eq!(b.close(Channel::Slack), vec!["r1".to_string()]);
        assert!(!b.is_open(Channel::Slack));
        assert!(
            !b.park(Channel::Slack, "r3".into()),
            "closed: nothing parks"
        );
    }

    #[test]
    fn chat_never_opens() {
        let b = Breakers::new(BreakerSettings::default());
        assert!(!b.record(Channel::Chat, 0, 100));
        assert!(b.open_channels().is_empty());
    }
}
