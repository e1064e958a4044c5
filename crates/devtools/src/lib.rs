//! Toki's dev tools: `toki demo` and `toki bench` (the 09:00-on-a-Monday
//! scenario, registered, delivered and verified; `--plot` draws each run's
//! lateness), and stand-ins for Slack's Web API, an SMTP server and a
//! tenant's webhook receiver, each able to fail on request. Not linked by the
//! production binaries.

pub mod bench;
pub mod demo;
pub mod plot;
pub mod progress;
pub mod scenario;
pub mod slack_standin;
pub mod smtp_standin;
pub mod webhook_standin;
