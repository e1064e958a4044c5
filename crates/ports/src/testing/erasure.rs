//! [`Erasure`] in memory: the same places as the SQL stores, under the
//! store's lock (all or nothing, as a transaction).

use async_trait::async_trait;

use super::store::{next_version, MemoryTenantStore, State};
use crate::erasure::Erasure;
use crate::error::StoreResult;
use toki_model::domain::{DeliveryKey, Instant, ScheduleId, UserId};
use toki_model::erasure::{
    drop_participant, id_needles, json_needles, pseudonymise_event, ErasureReport, SCRUBBED,
    UNFINISHED,
};

#[async_trait]
impl Erasure for MemoryTenantStore {
    async fn erase_user(
        &self,
        user: &UserId,
        pseudonym: &UserId,
        now: Instant,
    ) -> StoreResult<ErasureReport> {
        let mut state = self.enter().await?;
        let mut report = ErasureReport::default();
        let needles = match state.users.remove(user) {
            Some(u) => {
                report.users = 1;
                let listed = u
                    .email
                    .as_deref()
                    .and_then(|e| toki_model::suppression::ListedAddress::parse("email", e).ok());
                if let Some(address) = listed {
                    let s = &mut *state;
                    report.suppressions =
                        s.erased_suppressed
                            .erase(&mut s.suppressed, &s.users, &address);
                }
                json_needles(&u)
            }
            None => id_needles(user),
        };
        leave_schedules(&mut state, user, now, &mut report);
        erase_deliveries(&mut state, user, pseudonym, &mut report);
        let chats = state.chat.len();
        state.chat.retain(|_, m| &m.user != user);
        report.chat_messages = (chats - state.chat.len()) as u64;
        for (baseline, _) in state.baselines.values_mut() {
            if baseline.as_mut().is_some_and(|s| drop_participant(s, user)) {
                report.change_baselines += 1;
            }
        }
        for n in &mut state.notices {
            let before = n.before.as_mut().is_some_and(|s| drop_participant(s, user));
            let after = n.after.as_mut().is_some_and(|s| drop_participant(s, user));
            report.change_notices += u64::from(before || after);
        }
        let keys = state.idempotency.len();
        state.idempotency.retain(|_, row| {
            !row.answer
                .as_ref()
                .is_some_and(|a| needles.iter().any(|n| a.body.contains(n.as_str())))
        });
        report.idempotency_keys = (keys - state.idempotency.len()) as u64;
        report.audit_entries = self
            .audit_now()
            .pseudonymise(user.as_str(), pseudonym.as_str());
        // Taken after `state`, as recording outcomes does.
        for e in self.events().log.values_mut() {
            report.delivery_events += u64::from(pseudonymise_event(&mut e.data, user, pseudonym));
        }
        Ok(report)
    }
}

/// Takes `user` out of every schedule, each moved to its next version.
fn leave_schedules(state: &mut State, user: &UserId, now: Instant, report: &mut ErasureReport) {
    let left: Vec<ScheduleId> = state
        .schedules
        .iter_mut()
        .filter_map(|(id, s)| drop_participant(s, user).then(|| id.clone()))
        .collect();
    for id in &left {
        let version = next_version(state, id, false, now);
        if let Some(s) = state.schedules.get_mut(id) {
            s.version = version;
        }
    }
    report.participations = left.len() as u64;
    report.schedules_changed = left.len() as u64;
}

/// Removes the unfinished deliveries to `user`; keeps the finished ones
/// under `pseudonym`, detail scrubbed.
fn erase_deliveries(
    state: &mut State,
    user: &UserId,
    pseudonym: &UserId,
    report: &mut ErasureReport,
) {
    let theirs: Vec<DeliveryKey> = state
        .deliveries
        .keys()
        .filter(|k| &k.recipient == user)
        .cloned()
        .collect();
    for key in theirs {
        let Some(mut row) = state.deliveries.remove(&key) else {
            continue;
        };
        if UNFINISHED.contains(&row.status) {
            report.deliveries_cancelled += 1;
            continue;
        }
        row.detail = row.detail.map(|_| SCRUBBED.to_owned());
        let key = DeliveryKey {
            recipient: pseudonym.clone(),
            ..key
        };
        state.deliveries.insert(key, row);
        report.deliveries_pseudonymised += 1;
    }
}
