//! Dead letters you can act on (`toki redrive`): the dead-lettered messages by
//! tenant, channels and the reason their deliveries failed (read from the
//! tenant's delivery rows), then moved back to the queue, or left where they
//! are on a dry run. Works on both backends.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use toki_model::event::{EventKind, NewEvent};

use serde::Serialize;
use toki_model::error::chain;
use toki_model::{DeliveryStatus, TenantId};
use toki_ports::message;
use toki_ports::{ReceivedMessage, TenantStore, TenantStores};

use crate::table::table;
use crate::toki::Toki;

/// How long listed dead letters stay hidden from other readers while this runs.
const HOLD: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct RedriveOptions {
    /// Only list; move nothing.
    pub dry_run: bool,
    /// Only this tenant's dead letters.
    pub tenant: Option<TenantId>,
    /// At most this many messages.
    pub max: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterGroup {
    pub tenant: String,
    pub channels: String,
    pub reason: String,
    pub messages: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RedriveReport {
    pub groups: Vec<DeadLetterGroup>,
    /// Dead letters looked at.
    pub listed: usize,
    /// Of those, the ones this run was asked about (the tenant filter).
    pub selected: usize,
    /// Moved back to the queue (0 on a dry run).
    pub moved: usize,
    pub dry_run: bool,
}

pub async fn redrive(toki: &Toki, opts: &RedriveOptions) -> anyhow::Result<RedriveReport> {
    let letters = toki.queue.dead_letters(opts.max, HOLD).await?;
    let mut groups: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let mut stores: HashMap<TenantId, Result<Arc<dyn TenantStore>, String>> = HashMap::new();
    let (mut selected, mut others) = (Vec::new(), Vec::new());
    for letter in letters {
        let (tenant, channels, reason) = explain(toki, &letter, &mut stores).await;
        if opts.tenant.as_ref().is_some_and(|t| t.as_str() != tenant) {
            others.push(letter);
            continue;
        }
        *groups.entry((tenant, channels, reason)).or_default() += 1;
        selected.push(letter);
    }
    let listed = selected.len() + others.len();
    toki.queue.release_dead_letters(&others).await?;
    let moved = if opts.dry_run {
        toki.queue.release_dead_letters(&selected).await?;
        0
    } else {
        let moved = toki.queue.redrive(&selected).await?;
        note_redriven(toki, &selected, &stores).await;
        moved
    };
    Ok(RedriveReport {
        groups: groups
            .into_iter()
            .map(|((tenant, channels, reason), messages)| DeadLetterGroup {
                tenant,
                channels,
                reason,
                messages,
            })
            .collect(),
        listed,
        selected: selected.len(),
        moved,
        dry_run: opts.dry_run,
    })
}

/// Each redriven reminder's `delivery.redriven` event, for the tenants
/// whose endpoints want it. Best effort: the redrive itself is done.
async fn note_redriven(
    toki: &Toki,
    letters: &[ReceivedMessage],
    stores: &HashMap<TenantId, Result<Arc<dyn TenantStore>, String>>,
) {
    let now = toki.clock.now();
    let mut by_tenant: HashMap<&TenantId, Vec<NewEvent>> = HashMap::new();
    let reminders: Vec<_> = letters
        .iter()
        .filter_map(|l| message::decode(&l.attributes).ok())
        .collect();
    for r in &reminders {
        by_tenant
            .entry(&r.key.tenant)
            .or_default()
            .push(NewEvent::of_reminder(EventKind::Redriven, r, None, now));
    }
    for (tenant, events) in by_tenant {
        if let Some(Ok(store)) = stores.get(tenant) {
            match store.append_events(&events).await {
                Ok(0) => {}
                Ok(_) => toki.marker().events(tenant).await,
                Err(e) => {
                    tracing::warn!(%tenant, error = %toki_model::error::chain(&e), "redriven events not recorded")
                }
            }
        }
    }
}

/// (tenant, channels, reason) of one dead letter.
async fn explain(
    toki: &Toki,
    letter: &ReceivedMessage,
    stores: &mut HashMap<TenantId, Result<Arc<dyn TenantStore>, String>>,
) -> (String, String, String) {
    let attr = |name: &str| {
        letter
            .attributes
            .get(name)
            .cloned()
            .unwrap_or_else(|| "?".into())
    };
    // The daemon's own verdict, when it dead-lettered the message itself.
    if let Some(reason) = letter.attributes.get(toki_ports::DEAD_LETTER_REASON) {
        return (
            attr(message::ATTR_TENANT),
            attr(message::ATTR_CHANNELS),
            reason.clone(),
        );
    }
    let reminder = match message::decode(&letter.attributes) {
        Ok(r) => r,
        Err(e) => {
            return (
                attr(message::ATTR_TENANT),
                attr(message::ATTR_CHANNELS),
                format!("undecodable: {e}"),
            )
        }
    };
    let tenant = reminder.key.tenant.clone();
    let channels = reminder.channels.encode();
    let store = match stores.get(&tenant) {
        Some(s) => s.clone(),
        None => {
            let s = toki.stores.open(&tenant).await.map_err(|e| chain(&e));
            stores.insert(tenant.clone(), s.clone());
            s
        }
    };
    let reason = match store {
        Err(e) => format!("tenant database unreachable: {e}"),
        Ok(store) => match store.reminder_deliveries(&reminder.key).await {
            Err(e) => format!("tenant database unreachable: {}", chain(&e)),
            Ok(rows) => {
                let failed = rows.iter().find(|o| o.status == DeliveryStatus::Failed);
                let sending = rows.iter().any(|o| o.status == DeliveryStatus::Sending);
                let rows_say = match (failed, sending) {
                    (Some(f), _) => f.detail.clone().unwrap_or_else(|| "failed".into()),
                    (None, true) => "a claim was still held (its holder stopped?)".into(),
                    (None, false) if rows.is_empty() => "no delivery recorded".into(),
                    (None, false) => "its deliveries are final already".into(),
                };
                // No daemon's verdict: the queue's own receive limit moved it.
                format!("moved by the queue's receive limit, never settled by a daemon; its rows: {rows_say}")
            }
        },
    };
    (tenant.to_string(), channels, reason)
}

pub fn render(r: &RedriveReport) -> String {
    let rows: Vec<Vec<String>> = r
        .groups
        .iter()
        .map(|g| {
            vec![
                g.tenant.clone(),
                g.channels.clone(),
                g.reason.clone(),
                g.messages.to_string(),
            ]
        })
        .collect();
    let head = if rows.is_empty() {
        "no dead letters".to_string()
    } else {
        table(&["tenant", "channels", "reason", "messages"], &rows)
    };
    let tail = if r.dry_run {
        format!(
            "dry run: nothing moved; {} would go back to the queue (run again without --dry-run)",
            r.selected
        )
    } else {
        format!("moved {} of {} back to the queue", r.moved, r.selected)
    };
    format!("{head}\n\n{tail}")
}
