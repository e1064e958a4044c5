//! How much rendering one part of a reminder may take: a tenant's template
//! runs in the daemon for every recipient, so instructions, work, CPU time,
//! nesting and output are bounded, and a template that crosses a bound fails
//! instead of taking the machine (`range(100000)` twice nested once took
//! 17 GB; `99999 in range(100000)` in a loop, 27 s of CPU).

use std::fmt::Write as _;
use std::io;

use minijinja::{ErrorKind, Value};
use thiserror::Error;

use super::meter::{metered, Overrun, RenderBudget};
use super::Part;
use crate::domain::Channel;

/// Instructions one render may run (minijinja's fuel). The defaults take
/// about 25, so conditions and filters have room; a loop writing each
/// character of the longest body (10,000) does not fit. A few milliseconds
/// of work at most (3 ms measured in release for a loop spinning it out).
pub const FUEL: u64 = 50_000;

/// How deep loops, conditions and macro calls may nest (minijinja counts a
/// macro call as several levels). Low enough for a blocking thread's stack.
pub const RECURSION_LIMIT: usize = 100;

/// The longest subject a template may render, in bytes: a 500-character
/// title four bytes a character is 2,000; a subject longer than a screen is
/// a mistake.
pub const MAX_SUBJECT_OUTPUT: usize = 4_000;

/// The longest chat or Slack text, in bytes: the longest name, title and
/// body (10,700 characters) escaped for Slack fit with room to spare; Slack
/// cuts a message at 40,000 characters anyway.
pub const MAX_CHAT_OUTPUT: usize = 100_000;

/// The longest mail text or HTML part, in bytes: the longest inputs escaped
/// for HTML (six bytes a character at worst) fit twice.
pub const MAX_MAIL_OUTPUT: usize = 200_000;

/// The most bytes `part` may render to on `channel`, and what to call it.
fn max_output(channel: Channel, part: Part) -> (usize, &'static str) {
    match (part, channel) {
        (Part::Subject, _) => (MAX_SUBJECT_OUTPUT, "mail subject"),
        (Part::Html, _) => (MAX_MAIL_OUTPUT, "mail's HTML part"),
        (Part::Text, Channel::Mail) => (MAX_MAIL_OUTPUT, "mail text"),
        (Part::Text, Channel::Slack) => (MAX_CHAT_OUTPUT, "Slack text"),
        (Part::Text, Channel::Chat) => (MAX_CHAT_OUTPUT, "chat text"),
        (Part::Text, Channel::Webhook) => (MAX_CHAT_OUTPUT, "webhook text"),
    }
}

/// Why a part did not render.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RenderError {
    #[error("uses more than the {FUEL} steps of work a template may take (fuel)")]
    OutOfFuel,
    #[error("renders more than the {max} bytes a {what} may have (output limit)")]
    TooLong { max: usize, what: &'static str },
    #[error("nests deeper than the {RECURSION_LIMIT} levels a template may (recursion limit)")]
    TooDeep,
    /// Past its work or CPU budget (meter.rs).
    #[error("{0}")]
    OverBudget(Overrun),
    #[error(
        "builds a value longer than the {} bytes a template may (value limit)",
        super::language::MAX_VALUE_BYTES
    )]
    TooBig,
    /// Any other failure (an unknown variable, a division by zero): what, and where.
    #[error("{0}")]
    Template(String),
}

impl RenderError {
    /// Whether the template crossed one of the limits (rather than failing
    /// on its data): such a template would do so again on every render.
    pub fn is_limit(&self) -> bool {
        !matches!(self, RenderError::Template(_))
    }

    /// Whether it is a limit on work (instructions, items, bytes, CPU time)
    /// rather than on output: crossed once, the template is not rendered
    /// again for a while (render.rs).
    pub fn is_work(&self) -> bool {
        matches!(self, RenderError::OutOfFuel | RenderError::OverBudget(_))
    }
}

/// The output, kept until it would pass `max` bytes; each write charged.
struct Capped {
    out: Vec<u8>,
    max: usize,
    over: bool,
}

impl io::Write for Capped {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.out.len() + b.len() > self.max {
            self.over = true;
            return Err(io::Error::other("output limit"));
        }
        if !super::meter::charge_bytes(b.len()) {
            return Err(io::Error::other("render budget"));
        }
        self.out.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `template`, `channel`'s `part`, rendered with `vars` within its output
/// limit, `budget` and the environment's fuel and recursion limit.
pub(super) fn render_bounded(
    template: &minijinja::Template<'_, '_>,
    vars: &Value,
    channel: Channel,
    part: Part,
    budget: RenderBudget,
) -> Result<String, RenderError> {
    let (max, what) = max_output(channel, part);
    let mut out = Capped {
        out: Vec::with_capacity(256),
        max,
        over: false,
    };
    let (rendered, overrun) = metered(budget, || template.render_captured_to(vars, &mut out));
    let rendered = match rendered {
        Err(_) if out.over => Err(RenderError::TooLong { max, what }),
        Err(e) => Err(classify(&e)),
        Ok(_) => Ok(()),
    };
    match (overrun, rendered) {
        // Work is walked inside instructions: a walk cut short makes the
        // render's own outcome meaningless.
        (Some(work @ Overrun::Work(_)), _) => Err(RenderError::OverBudget(work)),
        (_, Err(e)) if e.is_limit() && !matches!(e, RenderError::OverBudget(_)) => Err(e),
        (Some(time), _) => Err(RenderError::OverBudget(time)),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => {
            // A text is held until its instant, one a delivery: 100,000 of
            // them with 256 bytes of room each were 26 MB (BENCHMARKS.md).
            // A copy of its length, as allocators keep a block shrunk by
            // less than half where it is.
            // minijinja writes only whole `str`s, so the bytes are UTF-8.
            std::str::from_utf8(&out.out)
                .map(str::to_owned)
                .map_err(|e| RenderError::Template(e.to_string()))
        }
    }
}

/// A minijinja error as a [`RenderError`].
pub(super) fn classify(e: &minijinja::Error) -> RenderError {
    match e.kind() {
        ErrorKind::OutOfFuel => RenderError::OutOfFuel,
        ErrorKind::InvalidOperation if e.detail() == Some("recursion limit exceeded") => {
            RenderError::TooDeep
        }
        ErrorKind::InvalidOperation if e.detail() == Some(super::language::VALUE_LIMIT) => {
            RenderError::TooBig
        }
        _ => RenderError::Template(template_problem(e)),
    }
}

/// A minijinja error as one line for the API: what, and where.
pub(super) fn template_problem(e: &minijinja::Error) -> String {
    let mut s = match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    if let Some(line) = e.line() {
        let _ = write!(s, " (line {line})");
    }
    s
}
