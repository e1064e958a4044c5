//! Progress on a terminal: one line redrawn in place; periodic lines when not a terminal.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant as StdInstant};

/// A single-line progress display on a terminal, periodic lines otherwise.
pub struct Progress {
    enabled: bool,
    tty: bool,
    last: StdInstant,
}

impl Progress {
    pub fn new(enabled: bool) -> Self {
        Progress {
            enabled,
            tty: std::io::stderr().is_terminal(),
            last: StdInstant::now() - Duration::from_secs(60),
        }
    }

    pub fn update(&mut self, line: &str) {
        if !self.enabled {
            return;
        }
        if self.tty {
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        } else if self.last.elapsed() >= Duration::from_secs(2) {
            eprintln!("{line}");
            self.last = StdInstant::now();
        }
    }

    pub fn bar(done: u64, total: u64) -> String {
        let width = 30;
        let filled = (done.min(total) * width as u64)
            .checked_div(total)
            .map_or(width, |f| f as usize);
        format!(
            "[{}{}] {done}/{total}",
            "#".repeat(filled),
            ".".repeat(width - filled)
        )
    }

    pub fn finish(&mut self, line: &str) {
        if !self.enabled {
            return;
        }
        if self.tty {
            eprintln!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }
}
