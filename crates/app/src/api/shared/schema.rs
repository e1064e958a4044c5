//! What the handlers' `#[utoipa::path]` annotations name: the path
//! parameters, schema mirrors of `toki_model::input`'s types, and the
//! answers routes share.
//!
//! toki-core stays free of utoipa, so its request and view types are
//! described by the mirror types below, with the same fields and serde
//! attributes. `crates/app/tests/openapi.rs` holds each mirror to its real
//! type: a field added to or removed from one without the other fails it.

// The mirrors are never built: they exist for their schemas only.
#![allow(dead_code)]

use utoipa::{IntoParams, IntoResponses, ToSchema};

use super::error::ErrorBody;

// Path parameters. The patterns are those of `toki_model::domain`'s id
// checks (the test holds them to the parsers): a tenant id that does not
// match gets the same 401 as an unknown tenant, a schedule or user id a 422.

#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TenantPath {
    /// The tenant (lowercase letters, digits, `_` and `-`, starting with a letter).
    #[param(pattern = "^[a-z][a-z0-9_-]{0,39}$", example = "acme")]
    tenant: String,
}

#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SchedulePath {
    /// The tenant (lowercase letters, digits, `_` and `-`, starting with a letter).
    #[param(pattern = "^[a-z][a-z0-9_-]{0,39}$", example = "acme")]
    tenant: String,
    /// The schedule's id (letters, digits and `_ - . : @`).
    #[param(pattern = "^[A-Za-z0-9_.:@-]{1,128}$", example = "standup-1")]
    id: String,
}

#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct OccurrencePath {
    /// The tenant (lowercase letters, digits, `_` and `-`, starting with a letter).
    #[param(pattern = "^[a-z][a-z0-9_-]{0,39}$", example = "acme")]
    tenant: String,
    /// The recurring schedule's id (letters, digits and `_ - . : @`).
    #[param(pattern = "^[A-Za-z0-9_.:@-]{1,128}$", example = "standup-1")]
    id: String,
    /// The occurrence, by where the rule puts it: an RFC 3339 instant or a
    /// local date-time in the schedule's zone (`2030-01-21T09:00:00`).
    #[param(example = "2030-01-21T09:00:00")]
    original: String,
}

#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct UserPath {
    /// The tenant (lowercase letters, digits, `_` and `-`, starting with a letter).
    #[param(pattern = "^[a-z][a-z0-9_-]{0,39}$", example = "acme")]
    tenant: String,
    /// The user's id (letters, digits and `_ - . : @`).
    #[param(pattern = "^[A-Za-z0-9_.:@-]{1,128}$", example = "ana")]
    id: String,
}

/// A template's channel and locale (after the tenant, or alone for the defaults).
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TemplateKeyPath {
    /// The channel whose reminders it words.
    #[param(inline)]
    channel: ChannelDoc,
    /// The recipients' locale: a language (`ja`), or a language and region
    /// (`en-GB`); matched without regard to case.
    #[param(
        pattern = "^[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8}){0,3}$",
        max_length = 35,
        example = "ja"
    )]
    locale: String,
}

// Mirrors of `toki_model::input`: same fields, same serde attributes.

/// A reminder template (minijinja). Variables: `name` (the recipient's),
/// `title`, `body`, `starts_at` (`2030-01-21 09:00` in the recipient's
/// zone), `date`, `time`, `time_zone`, `minutes` (before the start),
/// `starts_at_utc` (RFC 3339). Values are escaped for the channel: HTML in
/// `html`, `& < >` in Slack's text; what the template itself says is kept.
#[derive(ToSchema)]
#[schema(as = TemplateInput, example = json!({"subject": "[{{ minutes }} min] {{ title }}", "text": "{{ name }}, {{ title }} starts at {{ time }} ({{ time_zone }}).\n{{ body }}"}))]
#[serde(deny_unknown_fields)]
pub struct TemplateInputDoc {
    /// Mail only: the subject (one line; the default's when absent). At most 1,000 bytes.
    #[serde(default)]
    subject: Option<String>,
    /// The text: mail's plain part, the chat row, the Slack message (mrkdwn). At most 8,000 bytes.
    text: String,
    /// Mail only: the HTML part (absent: the text, escaped). At most 64,000 bytes.
    #[serde(default)]
    html: Option<String>,
}

/// A user: who reminders go to, and how to reach them.
#[derive(ToSchema)]
#[schema(as = UserInput, example = json!({"name": "Ana", "email": "ana@example.com", "time_zone": "Asia/Tokyo"}))]
#[serde(deny_unknown_fields)]
pub struct UserInputDoc {
    /// Their name (1 to 200 characters once trimmed).
    name: String,
    /// Mail reminders' address.
    #[serde(default)]
    email: Option<String>,
    /// Slack reminders' member id: a user id (`U…` or `W…`, like
    /// `U024BE7LH`); a channel's, group's or conversation's is refused.
    #[serde(default)]
    slack_user_id: Option<String>,
    /// The webhook channel's endpoint for this user (https, at most 2,048
    /// characters, on port 443 or a port the operator allows; not an
    /// address the operator's egress policy refuses); unset: the tenant's
    /// default endpoint.
    #[serde(default)]
    #[schema(max_length = 2048)]
    webhook_url: Option<String>,
    /// An IANA time zone.
    #[serde(default)]
    #[schema(default = "UTC")]
    time_zone: String,
    /// Their locale (1 to 35 characters).
    #[serde(default)]
    #[schema(default = "en")]
    locale: String,
    /// Channels turned on or off (`{"slack": false}`): `mail`, `chat`,
    /// `slack`, `webhook`; one not named is on.
    #[serde(default)]
    channels: Option<ChannelSwitchesDoc>,
}

/// Channels turned on (`true`) or off for a user; one not named is on.
#[derive(ToSchema)]
#[schema(as = ChannelSwitches)]
#[serde(deny_unknown_fields)]
pub struct ChannelSwitchesDoc {
    mail: Option<bool>,
    chat: Option<bool>,
    slack: Option<bool>,
    webhook: Option<bool>,
}

/// Every channel, on (`true`) or off, for a user.
#[derive(ToSchema)]
#[schema(as = UserChannels)]
pub struct UserChannelsDoc {
    mail: bool,
    chat: bool,
    slack: bool,
    webhook: bool,
}

/// `PUT /v1/tenants/{tenant}/webhook`.
#[derive(ToSchema)]
#[schema(as = WebhookSettingsInput)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettingsInputDoc {
    /// Where webhook reminders go for users without an endpoint of their
    /// own (https, at most 2,048 characters, on port 443 or a port the
    /// operator allows, not an address the operator's egress policy
    /// refuses); null or absent: none.
    #[serde(default)]
    #[schema(max_length = 2048)]
    default_url: Option<String>,
}

/// The tenant's webhook settings.
#[derive(ToSchema)]
#[schema(as = WebhookSettings)]
pub struct WebhookSettingsViewDoc {
    #[schema(required = true)]
    default_url: Option<String>,
    /// RFC 3339: while a rotated-out secret still signs (beside the new one), until when.
    previous_secret_until: Option<String>,
    /// `whsec_…`, the signing secret: only in the answer that made it (the
    /// first `PUT`, or a rotation). Toki never shows it again.
    #[schema(pattern = "^whsec_[A-Za-z0-9+/=]+$")]
    secret: Option<String>,
}

/// A channel reminders go by.
#[derive(ToSchema)]
#[schema(as = Channel)]
#[serde(rename_all = "lowercase")]
pub enum ChannelDoc {
    Mail,
    Chat,
    Slack,
    Webhook,
}

/// A reminder rule: so many minutes before each occurrence, by these channels.
#[derive(ToSchema)]
#[schema(as = ReminderRule)]
#[serde(deny_unknown_fields)]
pub struct RuleInputDoc {
    /// Minutes before the start (up to 4 weeks); unique within a schedule.
    #[schema(minimum = 0, maximum = 40320)]
    minutes_before: i64,
    /// At least one; a channel given twice counts once.
    #[schema(min_items = 1)]
    channels: Vec<ChannelDoc>,
}

/// Repeats a schedule: an RFC 5545 rule and the local start times left out.
#[derive(ToSchema)]
#[schema(as = Recurrence)]
#[serde(deny_unknown_fields)]
pub struct RecurrenceInputDoc {
    /// `FREQ=WEEKLY;BYDAY=MO,WE;UNTIL=20270101T000000Z`; `COUNT` at most
    /// 1000, `UNTIL` from `starts_at` to 36525 days (100 years) after it.
    rrule: String,
    /// Local start times left out: `2026-12-28T09:00:00`. At most 500, each
    /// from `starts_at` to `UNTIL` (or 36525 days after `starts_at`).
    #[serde(default)]
    #[schema(max_items = 500)]
    exdates: Vec<String>,
}

/// A local time a DST change skips.
#[derive(ToSchema)]
#[schema(as = NonexistentTime)]
#[serde(rename_all = "snake_case")]
pub enum NonexistentTimeDoc {
    ShiftForward,
    Skip,
}

/// A local time a DST change repeats.
#[derive(ToSchema)]
#[schema(as = AmbiguousTime)]
#[serde(rename_all = "snake_case")]
pub enum AmbiguousTimeDoc {
    First,
    Last,
    Both,
}

/// What to do with local times a DST change skips or repeats.
#[derive(ToSchema)]
#[schema(as = DstPolicy)]
#[serde(deny_unknown_fields)]
pub struct DstInputDoc {
    /// `shift_forward` (default) or `skip`.
    #[serde(default)]
    nonexistent: Option<NonexistentTimeDoc>,
    /// `first` (default), `last` or `both`.
    #[serde(default)]
    ambiguous: Option<AmbiguousTimeDoc>,
}

/// A schedule (a calendar event), its participants and reminder rules.
#[derive(ToSchema)]
#[schema(as = ScheduleInput, example = json!({
    "title": "Stand-up", "body": "Room 3", "starts_at": "2030-01-07T09:00:00",
    "time_zone": "Asia/Tokyo", "participants": ["ana", "bob"],
    "reminders": [{"minutes_before": 10, "channels": ["mail", "chat"]}],
    "recurrence": {"rrule": "FREQ=WEEKLY;BYDAY=MO;COUNT=10", "exdates": ["2030-01-14T09:00:00"]},
    "dst": {"nonexistent": "shift_forward", "ambiguous": "first"}
}))]
#[serde(deny_unknown_fields)]
pub struct ScheduleInputDoc {
    /// 1 to 500 characters once trimmed.
    title: String,
    #[serde(default)]
    #[schema(max_length = 10000)]
    body: String,
    /// An RFC 3339 instant (`2026-11-23T09:00:00+09:00`) or a local
    /// date-time in `time_zone` (`2026-11-23T09:00:00`); a recurring
    /// schedule's offset must be its zone's. On the zone's wall clock, from
    /// 2000-01-01T00:00:00 to 3653 days (10 years) after now.
    starts_at: String,
    /// An IANA time zone.
    #[serde(default)]
    #[schema(default = "UTC")]
    time_zone: String,
    /// Users of the tenant (registered before), each once.
    #[schema(max_items = 1000)]
    participants: Vec<UserIdDoc>,
    /// At most 20 rules.
    #[schema(max_items = 20)]
    reminders: Vec<RuleInputDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recurrence: Option<RecurrenceInputDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dst: Option<DstInputDoc>,
}

/// A user's id.
#[derive(ToSchema)]
#[schema(as = UserId, pattern = "^[A-Za-z0-9_.:@-]{1,128}$")]
pub struct UserIdDoc(String);

/// A schedule's id.
#[derive(ToSchema)]
#[schema(as = ScheduleId, pattern = "^[A-Za-z0-9_.:@-]{1,128}$")]
pub struct ScheduleIdDoc(String);

/// One item of a batch: the schedule's `id` and its `PUT` body.
#[derive(ToSchema)]
#[schema(as = BatchItemInput)]
pub struct BatchItemDoc {
    id: ScheduleIdDoc,
    #[serde(flatten)]
    schedule: ScheduleInputDoc,
}

/// A change to one occurrence of a series: moved, retitled, or both (at least one field).
#[derive(ToSchema)]
#[schema(as = OccurrenceInput, example = json!({"starts_at": "2030-01-21T10:00:00", "title": "Stand-up (late)"}))]
#[serde(deny_unknown_fields)]
pub struct OccurrenceInputDoc {
    /// An RFC 3339 instant or a local date-time in the schedule's zone.
    #[serde(default)]
    starts_at: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    body: Option<String>,
}

/// One occurrence of a series changed on its own.
#[derive(ToSchema)]
#[schema(as = OccurrenceException)]
pub struct OccurrenceExceptionDoc {
    /// Where the rule puts it: its identity.
    #[schema(format = DateTime)]
    original: String,
    /// Cancelled: no occurrence, no reminders.
    #[serde(default)]
    cancelled: bool,
    /// Moved to this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    starts_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
}

/// One occurrence as the API shows it.
#[derive(ToSchema)]
#[schema(as = Occurrence)]
pub struct OccurrenceViewDoc {
    /// Where the rule puts it: its identity in `/occurrences/{original}`.
    #[schema(format = DateTime)]
    original: String,
    #[schema(format = DateTime)]
    starts_at: String,
    /// `starts_at` on the schedule's wall clock, with its offset.
    #[schema(format = DateTime)]
    local_start: String,
    title: String,
    /// Moved or edited on its own.
    exception: bool,
}

/// A schedule as the API shows it: a `GET` of it can be `PUT` back.
#[derive(ToSchema)]
#[schema(as = Schedule)]
pub struct ScheduleViewDoc {
    id: String,
    title: String,
    body: String,
    /// A one-off's instant (RFC 3339); a series' local start, as given.
    starts_at: String,
    time_zone: String,
    participants: Vec<String>,
    reminders: Vec<RuleInputDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recurrence: Option<RecurrenceInputDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dst: Option<DstInputDoc>,
    /// Occurrences moved, edited or cancelled on their own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    exceptions: Vec<OccurrenceExceptionDoc>,
    /// Goes up by one with every write.
    version: i64,
}

/// A user as the API shows it.
#[derive(ToSchema)]
#[schema(as = User)]
pub struct UserViewDoc {
    id: String,
    name: String,
    #[schema(required = true)]
    email: Option<String>,
    #[schema(required = true)]
    slack_user_id: Option<String>,
    /// Absent when the user has none.
    webhook_url: Option<String>,
    time_zone: String,
    locale: String,
    /// Every channel, on (`true`) or off for this user.
    channels: UserChannelsDoc,
}

// Answers shared by routes, in their `responses(...)`.

/// What any `/v1/tenants/{tenant}/...` route may answer besides its own.
#[derive(IntoResponses)]
pub enum TenantErrors {
    /// A missing, wrong, expired or revoked API key, an unknown tenant or a
    /// malformed tenant id: they look the same, so tenant ids cannot be probed.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// A valid key of a suspended tenant (`tenant_suspended`).
    #[response(status = 403)]
    Suspended(ErrorBody),
    /// Over the tenant's API rate or requests at once (`field` names the
    /// limit), or too many failed authentications from this address;
    /// nothing was done: retry after `Retry-After` seconds.
    #[response(
        status = 429,
        headers(("Retry-After" = u64, description = "Seconds to wait before retrying (rounded up)"))
    )]
    TooManyRequests(ErrorBody),
    /// A backend cannot be reached, or a batch took longer than its budget
    /// to validate and expand (`field`: `schedules`); nothing was written:
    /// retry (a batch in smaller batches).
    #[response(status = 503)]
    Unavailable(ErrorBody),
    /// Ours (logged): nothing was written.
    #[response(status = 500)]
    Internal(ErrorBody),
}

/// What a route with a JSON body may answer about the body itself.
#[derive(IntoResponses)]
pub enum BodyErrors {
    /// The body is not JSON, or not the route's shape: a missing, unknown
    /// or mistyped field (`field` names it), an object given as an array.
    #[response(status = 400)]
    BadJson(ErrorBody),
    /// The body is larger than the route takes (256 KiB; 8 MiB for a batch).
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The body is not declared `Content-Type: application/json`.
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody),
}

/// The header of a non-idempotent write (see [`super::idempotency`]).
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyKeyHeader {
    /// Makes the write safe to retry: a repeat of the request (same method,
    /// path and body) with the same key within 24 h gets the first answer
    /// back (status and body, with `Idempotent-Replayed: true`) and writes
    /// nothing. 1 to 255 printable ASCII characters; per tenant.
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = "^[ -~]{1,255}$",
        example = "9f1c2a7e-batch-42"
    )]
    idempotency_key: Option<String>,
}

/// [`BodyErrors`] for a route that takes an `Idempotency-Key`, and its 409.
/// (Its 422s, a key reused on another request and a new key beyond the
/// tenant's `max_idempotency_keys` (`cap_reached`), are in the route's own 422.)
#[derive(IntoResponses)]
pub enum IdempotentBodyErrors {
    /// The body is not JSON, or not the route's shape (`bad_json`, `field`
    /// names what does not fit); or the `Idempotency-Key` is not 1 to 255
    /// printable ASCII characters, or is given twice (`bad_header`, `field`:
    /// `Idempotency-Key`). Nothing was written.
    #[response(status = 400)]
    BadJson(ErrorBody),
    /// A request with this `Idempotency-Key` is still in progress
    /// (`in_progress`, `field`: `Idempotency-Key`): retry once it has
    /// finished. One in progress for 5 minutes is taken to have failed.
    #[response(status = 409)]
    InProgress(ErrorBody),
    /// The body is larger than the route takes (256 KiB; 8 MiB for a batch).
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The body is not declared `Content-Type: application/json`.
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody),
}
