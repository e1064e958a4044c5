//! Toki's values and rules: the domain (tenants, users, schedules, reminders,
//! deliveries), input validation, recurrence and daylight saving time, the
//! index's partitions, time helpers, limit settings, the pure rules of change
//! notices and the debounce, templates, lateness statistics. No tokio and no
//! I/O: everything here is a value or a function of its arguments.

pub mod api_key;
pub mod audit;
pub mod change;
pub mod debounce;
pub mod domain;
pub mod egress;
pub mod erasure;
pub mod error;
pub mod event;
pub mod flow_key;
pub mod idempotency;
pub mod index;
pub mod input;
pub mod lateness;
pub mod limits;
pub mod percent;
pub mod quota;
pub mod recurrence;
pub mod redact;
pub mod retention;
pub mod slack;
pub mod suppression;
pub mod suppression_hash;
pub mod template;
pub mod tenant;
pub mod time;
pub mod webhook;
pub mod webhook_signature;

pub use domain::*;
pub use error::ValidationError;
pub use tenant::TenantRecord;
