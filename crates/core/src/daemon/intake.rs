//! Intake (pure): decode received messages and set aside those that cannot be
//! worked on now — undecodable, or arrived before their time — grouped by tenant.

use std::collections::BTreeMap;
use std::time::Duration;

use toki_model::domain::{Instant, TenantId};
use toki_model::time::{to_chrono, wait_between};
use toki_ports::message;
use toki_ports::ReceivedMessage;

use super::work::{MessageFate, Work};

/// A batch after intake.
#[derive(Debug, Default)]
pub struct Intake {
    /// Messages to work on, per tenant (each tenant's database is read once).
    pub by_tenant: BTreeMap<TenantId, Vec<Work>>,
    /// Messages that go back to the queue as they are, and why.
    pub set_aside: Vec<(ReceivedMessage, MessageFate)>,
    /// Debounce checks (the timers of [`toki_model::debounce`]), not reminders.
    pub checks: Vec<(ReceivedMessage, message::DebounceCheck)>,
    /// Change notices ([`toki_model::change`]): delivered at once.
    pub notices: Vec<(ReceivedMessage, message::NoticeMessage)>,
}

/// A message may arrive up to this long before `lead` and still be held for
/// its due instant; earlier than that it is hidden again.
const EARLY_SLACK: Duration = Duration::from_secs(1);
/// SQS's longest visibility timeout.
const MAX_HIDE: Duration = Duration::from_secs(12 * 3600);

pub fn intake(messages: Vec<ReceivedMessage>, now: Instant, lead: Duration) -> Intake {
    let mut out = Intake::default();
    for msg in messages {
        match message::decode_debounce_check(&msg.attributes) {
            Some(Ok(check)) => {
                out.checks.push((msg, check));
                continue;
            }
            Some(Err(e)) => {
                let fate = MessageFate::Poison(format!("undecodable debounce check: {e}"));
                out.set_aside.push((msg, fate));
                continue;
            }
            None => {}
        }
        match message::decode_change_notice(&msg.attributes) {
            Some(Ok(notice)) => {
                out.notices.push((msg, notice));
                continue;
            }
            Some(Err(e)) => {
                let fate = MessageFate::Poison(format!("undecodable change notice: {e}"));
                out.set_aside.push((msg, fate));
                continue;
            }
            None => {}
        }
        let reminder = match message::decode(&msg.attributes) {
            Ok(r) => r,
            Err(e) => {
                let fate = MessageFate::Poison(format!("undecodable message: {e}"));
                out.set_aside.push((msg, fate));
                continue;
            }
        };
        let early = reminder.due_at.0 - now;
        if early > to_chrono(lead + EARLY_SLACK) {
            // Arrived before its time (the 900 s delay cap): hide it until lead before due.
            let wait = wait_between(now + to_chrono(lead), reminder.due_at.0).min(MAX_HIDE);
            out.set_aside.push((msg, MessageFate::Early { wait }));
            continue;
        }
        out.by_tenant
            .entry(reminder.key.tenant.clone())
            .or_default()
            .push(Work { msg, reminder });
    }
    out
}
