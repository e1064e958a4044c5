//! Typed rows of the tenant database and their conversion into the domain.
//! A row that does not convert is corrupt data, named by its column.

use chrono_tz::Tz;
use toki_model::egress::EndpointUrl;
use toki_model::suppression::{ListUnsubscribe, ListedAddress, Suppression, SuppressionReason};
use toki_model::webhook::WebhookSettings;
use toki_model::webhook_signature::WebhookSecret;
use toki_model::ScheduleSnapshot;
use toki_model::{
    from_millis, Channel, ChannelSet, DeliveryCount, DeliveryKey, DeliveryOutcome, DeliveryPurpose,
    DeliveryStatus, DueAt, Instant, Occurrence, Recurrence, ReminderRule, ScheduleId, User, UserId,
};
use toki_ports::{ChatMessage, OwnedDelivery};
use toki_ports::{StoreError, StoreResult};

fn corrupt(column: &str, problem: impl std::fmt::Display) -> StoreError {
    StoreError::corrupt(
        format!("tenant database column {column}"),
        problem.to_string(),
    )
}

pub(crate) fn instant(column: &str, ms: i64) -> StoreResult<Instant> {
    from_millis(column, ms).map_err(|e| corrupt(column, e))
}

fn time_zone(s: &str) -> StoreResult<Tz> {
    s.parse()
        .map_err(|_| corrupt("time_zone", format!("{s:?} is not a time zone")))
}

fn channels_off(s: &str) -> StoreResult<std::collections::BTreeSet<toki_model::Channel>> {
    toki_model::decode_channels_off("channels_off", s).map_err(|e| corrupt("channels_off", e))
}

fn user_id(column: &str, s: &str) -> StoreResult<UserId> {
    UserId::parse_field(column, s).map_err(|e| corrupt(column, e))
}

pub(crate) fn schedule_id(s: &str) -> StoreResult<ScheduleId> {
    ScheduleId::parse_field("schedule_id", s).map_err(|e| corrupt("schedule_id", e))
}

fn status(s: &str) -> StoreResult<DeliveryStatus> {
    s.parse().map_err(|e| corrupt("status", e))
}

fn channel(s: &str) -> StoreResult<Channel> {
    s.parse().map_err(|e| corrupt("channel", e))
}

row! {
    /// The columns that name a delivery, as every table that refers to one has them.
    #[derive(Debug)]
    pub(crate) struct DeliveryKeyRow {
        pub schedule_id: String,
        pub occurrence: i64,
        pub minutes_before: i64,
        pub recipient: String,
        pub channel: String,
    }
}

impl TryFrom<DeliveryKeyRow> for DeliveryKey {
    type Error = StoreError;
    fn try_from(r: DeliveryKeyRow) -> StoreResult<Self> {
        Ok(DeliveryKey {
            schedule: schedule_id(&r.schedule_id)?,
            occurrence: Occurrence(instant("occurrence", r.occurrence)?),
            purpose: DeliveryPurpose::from_code(
                u32::try_from(r.minutes_before).map_err(|e| corrupt("minutes_before", e))?,
            ),
            recipient: user_id("recipient", &r.recipient)?,
            channel: channel(&r.channel)?,
        })
    }
}

row! {
    /// A delivery a claim got, with its budget so far.
    #[derive(Debug)]
    pub(crate) struct OwnedRow {
        #[flatten]
        pub key: DeliveryKeyRow,
        pub failures: i64,
        pub taken_over: bool,
    }
}

impl TryFrom<OwnedRow> for OwnedDelivery {
    type Error = StoreError;
    fn try_from(r: OwnedRow) -> StoreResult<Self> {
        Ok(OwnedDelivery {
            key: r.key.try_into()?,
            failures: u32::try_from(r.failures).map_err(|e| corrupt("failures", e))?,
            taken_over: r.taken_over,
        })
    }
}

/// The bound columns of a delivery key, in the tables' column order.
pub(crate) struct KeyColumns {
    pub schedule_id: String,
    pub occurrence: i64,
    pub minutes_before: i64,
    pub recipient: String,
    pub channel: &'static str,
}

impl KeyColumns {
    /// Binds the five key columns to `row`, in the tables' order.
    pub fn bind<'r, 's>(
        self,
        row: &'r mut super::statement::Row<'s>,
    ) -> &'r mut super::statement::Row<'s> {
        row.bind(self.schedule_id)
            .bind(self.occurrence)
            .bind(self.minutes_before)
            .bind(self.recipient)
            .bind(self.channel)
    }
}

impl From<&DeliveryKey> for KeyColumns {
    fn from(k: &DeliveryKey) -> Self {
        KeyColumns {
            schedule_id: k.schedule.to_string(),
            occurrence: k.occurrence.millis(),
            minutes_before: i64::from(k.purpose.code()),
            recipient: k.recipient.to_string(),
            channel: k.channel.as_str(),
        }
    }
}

row! {
    /// A delivery row an outcome changed, with its failures since.
    #[derive(Debug)]
    pub(crate) struct ChangedDelivery {
        pub schedule_id: String,
        pub occurrence: i64,
        pub minutes_before: i64,
        pub recipient: String,
        pub channel: String,
        pub failures: i64,
    }
}

impl ChangedDelivery {
    /// The events of the outcomes in `chunk` that changed their row.
    pub fn events(
        chunk: &[DeliveryOutcome],
        changed: Vec<ChangedDelivery>,
    ) -> Vec<toki_model::event::NewEvent> {
        let failures: std::collections::HashMap<(String, i64, i64, String, String), i64> = changed
            .into_iter()
            .map(|c| {
                let key = (
                    c.schedule_id,
                    c.occurrence,
                    c.minutes_before,
                    c.recipient,
                    c.channel,
                );
                (key, c.failures)
            })
            .collect();
        chunk
            .iter()
            .filter_map(|o| {
                let k = KeyColumns::from(&o.key);
                let key = (
                    k.schedule_id,
                    k.occurrence,
                    k.minutes_before,
                    k.recipient,
                    k.channel.to_owned(),
                );
                let failures = *failures.get(&key)?;
                toki_model::event::NewEvent::of_outcome(o, failures as u32)
            })
            .collect()
    }
}

row! {
    #[derive(Debug)]
    pub(crate) struct UserRow {
        pub id: String,
        pub name: String,
        pub email: Option<String>,
        pub slack_user_id: Option<String>,
        pub webhook_url: Option<String>,
        pub time_zone: String,
        pub locale: String,
        pub channels_off: String,
    }
}

impl TryFrom<UserRow> for User {
    type Error = StoreError;
    fn try_from(r: UserRow) -> StoreResult<Self> {
        Ok(User {
            id: user_id("id", &r.id)?,
            name: r.name,
            email: r.email,
            slack_user_id: r.slack_user_id,
            webhook_url: webhook_url(r.webhook_url.as_deref())?,
            time_zone: time_zone(&r.time_zone)?,
            locale: r.locale,
            channels_off: channels_off(&r.channels_off)?,
        })
    }
}

row! {
    #[derive(Debug)]
    pub(crate) struct ScheduleRow {
        pub title: String,
        pub body: String,
        pub starts_at: i64,
        pub time_zone: String,
        pub recurrence: Option<String>,
        pub version: i64,
    }
}

/// The `recurrence` column: the series as JSON, NULL for a one-off.
pub(crate) fn recurrence(json: Option<&str>) -> StoreResult<Option<Recurrence>> {
    json.map(|j| serde_json::from_str(j).map_err(|e| corrupt("recurrence", e)))
        .transpose()
}

pub(crate) fn recurrence_json(r: Option<&Recurrence>) -> Option<String> {
    r.map(|r| serde_json::to_string(r).expect("a recurrence serialises"))
}

impl ScheduleRow {
    pub fn starts_at(&self) -> StoreResult<Instant> {
        instant("starts_at", self.starts_at)
    }
    pub fn time_zone(&self) -> StoreResult<Tz> {
        time_zone(&self.time_zone)
    }
}

row! {
    #[derive(Debug)]
    pub(crate) struct RuleRow {
        pub minutes_before: i64,
        pub channels: String,
    }
}

impl TryFrom<RuleRow> for ReminderRule {
    type Error = StoreError;
    fn try_from(r: RuleRow) -> StoreResult<Self> {
        Ok(ReminderRule {
            minutes_before: u32::try_from(r.minutes_before)
                .map_err(|e| corrupt("minutes_before", e))?,
            channels: ChannelSet::decode("channels", &r.channels)
                .map_err(|e| corrupt("channels", e))?,
        })
    }
}

pub(crate) fn participant(id: &str) -> StoreResult<UserId> {
    user_id("user_id", id)
}

row! {
    #[derive(Debug)]
    pub(crate) struct MirrorRow {
        pub schedule_id: String,
        pub version: i64,
        pub deleted: bool,
        pub mirrored: bool,
    }
}

impl MirrorRow {
    pub fn schedule(&self) -> StoreResult<ScheduleId> {
        schedule_id(&self.schedule_id)
    }
}

row! {
    /// One round trip gives the schedules and their participants (as users)
    /// together: a row is one or the other.
    #[derive(Debug)]
    pub(crate) struct ContextRow {
        pub kind: String,
        pub schedule_id: String,
        // A schedule's columns.
        pub title: Option<String>,
        pub body: Option<String>,
        pub recurrence: Option<String>,
        pub version: Option<i64>,
        // A participant's columns.
        pub user_id: Option<String>,
        pub name: Option<String>,
        pub email: Option<String>,
        pub slack_user_id: Option<String>,
        pub webhook_url: Option<String>,
        pub time_zone: Option<String>,
        pub locale: Option<String>,
        pub channels_off: Option<String>,
        /// A participant's place among its schedule's participants.
        pub position: i64,
    }
}

pub(crate) enum ContextItem {
    Schedule(ScheduleSnapshot),
    /// A participant of a schedule, and its place among them.
    Participant(ScheduleId, i64, User),
    /// The tenant's webhook settings: the schedule's columns carry them
    /// (title: default_url, body: secret, recurrence: previous_secret,
    /// version: previous_until), so they come in the same round trip.
    Webhook(WebhookSettings),
    /// A suppression-list entry of a participant's address (email: the
    /// address, title: the reason, body: the detail, version: since when).
    Suppressed(Suppression),
    /// The tenant's `List-Unsubscribe` (title: url, body: mailto).
    Unsubscribe(ListUnsubscribe),
}

/// A stored endpoint URL (checked when written).
pub(crate) fn webhook_url(s: Option<&str>) -> StoreResult<Option<EndpointUrl>> {
    s.map(|u| EndpointUrl::parse("webhook_url", u).map_err(|e| corrupt("webhook_url", e)))
        .transpose()
}

/// The `webhook_settings` row's columns read back.
pub(crate) fn webhook_settings(
    default_url: Option<&str>,
    secret: &str,
    previous_secret: Option<&str>,
    previous_until: Option<i64>,
) -> StoreResult<WebhookSettings> {
    let secret_of = |s: &str| {
        s.parse::<WebhookSecret>()
            .map_err(|e| corrupt("webhook secret", e))
    };
    let previous = match (previous_secret, previous_until) {
        (Some(s), Some(until)) => Some((secret_of(s)?, instant("previous_until", until)?)),
        _ => None,
    };
    Ok(WebhookSettings {
        default_url: default_url
            .map(|u| EndpointUrl::parse("default_url", u).map_err(|e| corrupt("default_url", e)))
            .transpose()?,
        secret: secret_of(secret)?,
        previous,
    })
}

impl TryFrom<ContextRow> for ContextItem {
    type Error = StoreError;
    fn try_from(r: ContextRow) -> StoreResult<Self> {
        let need = |column: &str, v: Option<String>| v.ok_or_else(|| corrupt(column, "is null"));
        if r.kind == "webhook" {
            let secret = need("body", r.body)?;
            return Ok(ContextItem::Webhook(webhook_settings(
                r.title.as_deref(),
                &secret,
                r.recurrence.as_deref(),
                r.version,
            )?));
        }
        match r.kind.as_str() {
            "suppressed" => return suppressed_item(r).map(ContextItem::Suppressed),
            "unsubscribe" => {
                return Ok(ContextItem::Unsubscribe(ListUnsubscribe {
                    url: r.title,
                    mailto: r.body,
                }))
            }
            _ => {}
        }
        let schedule = schedule_id(&r.schedule_id)?;
        Ok(match r.kind.as_str() {
            "schedule" => ContextItem::Schedule(ScheduleSnapshot {
                id: schedule,
                title: need("title", r.title)?,
                body: r.body.unwrap_or_default(),
                version: r.version.ok_or_else(|| corrupt("version", "is null"))?,
                participants: Vec::new(),
                exceptions: recurrence(r.recurrence.as_deref())?
                    .map(|r| r.exceptions)
                    .unwrap_or_default(),
            }),
            "participant" => ContextItem::Participant(
                schedule,
                r.position,
                User {
                    id: user_id("user_id", &need("user_id", r.user_id)?)?,
                    name: need("name", r.name)?,
                    email: r.email,
                    slack_user_id: r.slack_user_id,
                    webhook_url: webhook_url(r.webhook_url.as_deref())?,
                    time_zone: time_zone(&need("time_zone", r.time_zone)?)?,
                    locale: need("locale", r.locale)?,
                    channels_off: channels_off(&r.channels_off.unwrap_or_default())?,
                },
            ),
            other => return Err(corrupt("kind", format!("{other:?}"))),
        })
    }
}

row! {
    #[derive(Debug)]
    pub(crate) struct DeliveryRow {
        #[flatten]
        pub key: DeliveryKeyRow,
        pub version: i64,
        pub status: String,
        pub due_at: i64,
        pub at: i64,
        pub detail: Option<String>,
    }
}

impl TryFrom<DeliveryRow> for DeliveryOutcome {
    type Error = StoreError;
    fn try_from(r: DeliveryRow) -> StoreResult<Self> {
        Ok(DeliveryOutcome {
            key: r.key.try_into()?,
            version: r.version,
            due_at: DueAt(instant("due_at", r.due_at)?),
            status: status(&r.status)?,
            at: instant("at", r.at)?,
            detail: r.detail,
        })
    }
}

row! {
    #[derive(Debug)]
    pub(crate) struct CountRow {
        pub channel: String,
        pub status: String,
        pub n: i64,
    }
}

impl TryFrom<CountRow> for DeliveryCount {
    type Error = StoreError;
    fn try_from(r: CountRow) -> StoreResult<Self> {
        Ok(DeliveryCount {
            channel: channel(&r.channel)?,
            status: status(&r.status)?,
            count: u64::try_from(r.n).map_err(|e| corrupt("count", e))?,
        })
    }
}

row! {
    pub(crate) struct WebhookRow {
        pub default_url: Option<String>,
        pub secret: String,
        pub previous_secret: Option<String>,
        pub previous_until: Option<i64>,
    }
}

row! {
    #[derive(Debug)]
    pub(crate) struct ChatRow {
        #[flatten]
        pub key: DeliveryKeyRow,
        pub version: i64,
        pub body: String,
        pub created_at: i64,
    }
}

impl TryFrom<ChatRow> for ChatMessage {
    type Error = StoreError;
    fn try_from(r: ChatRow) -> StoreResult<Self> {
        let user = user_id("user_id", &r.key.recipient)?;
        Ok(ChatMessage {
            key: r.key.try_into()?,
            version: r.version,
            user,
            text: r.body,
            created_at: instant("created_at", r.created_at)?,
        })
    }
}

/// A schedule as a change notice holds it (JSON), or None.
pub(crate) fn snapshot(
    column: &str,
    json: Option<&str>,
) -> StoreResult<Option<toki_model::Schedule>> {
    json.map(|j| serde_json::from_str(j).map_err(|e| corrupt(column, e)))
        .transpose()
}

pub(crate) fn snapshot_json(schedule: Option<&toki_model::Schedule>) -> Option<String> {
    schedule.map(|s| serde_json::to_string(s).expect("a schedule serialises"))
}

row! {
    /// A frozen change notice.
    #[derive(Debug)]
    pub(crate) struct NoticeRow {
        pub schedule_id: String,
        pub token: String,
        pub edge: String,
        pub at: i64,
        pub before_snapshot: Option<String>,
        pub after_snapshot: Option<String>,
    }
}

impl TryFrom<NoticeRow> for toki_model::change::ChangeNotice {
    type Error = StoreError;
    fn try_from(r: NoticeRow) -> StoreResult<Self> {
        Ok(toki_model::change::ChangeNotice {
            schedule: schedule_id(&r.schedule_id)?,
            edge: r.edge.parse().map_err(|e| corrupt("edge", e))?,
            at: instant("at", r.at)?,
            before: snapshot("before_snapshot", r.before_snapshot.as_deref())?,
            after: snapshot("after_snapshot", r.after_snapshot.as_deref())?,
            token: r.token,
        })
    }
}

row! {
    /// A baseline as a freeze takes it: the snapshot and the last notice's instant.
    #[derive(Debug)]
    pub(crate) struct BaselineRow {
        pub snapshot: Option<String>,
        pub last_notice_at: i64,
    }
}

row! {
    /// A tenant's reminder template.
    #[derive(Debug)]
    pub(crate) struct TemplateRow {
        pub channel: String,
        pub locale: String,
        pub subject: Option<String>,
        pub text: String,
        pub html: Option<String>,
    }
}

impl TryFrom<TemplateRow> for toki_model::template::ReminderTemplate {
    type Error = StoreError;
    fn try_from(r: TemplateRow) -> StoreResult<Self> {
        Ok(Self {
            channel: channel(&r.channel)?,
            locale: r.locale,
            subject: r.subject,
            text: r.text,
            html: r.html,
        })
    }
}

fn suppressed_item(r: ContextRow) -> StoreResult<Suppression> {
    suppression(
        r.email.as_deref().unwrap_or_default(),
        r.title.as_deref().unwrap_or_default(),
        r.body,
        r.version.unwrap_or_default(),
    )
}

/// A `suppressed_addresses` row's columns read back.
pub(crate) fn suppression(
    address: &str,
    reason: &str,
    detail: Option<String>,
    created_at: i64,
) -> StoreResult<Suppression> {
    Ok(Suppression {
        address: ListedAddress::parse("address", address).map_err(|e| corrupt("address", e))?,
        reason: SuppressionReason::parse(reason)
            .ok_or_else(|| corrupt("reason", format!("{reason:?} is not a reason")))?,
        detail,
        at: instant("created_at", created_at)?,
    })
}
