//! Progress of long work (registering, waiting for the due instant,
//! delivering, migrating) as an indicatif bar on a terminal. Quiet with
//! `--json` or when stderr is not a terminal (a CI log or a pipe gets the
//! final report only).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A style that draws nothing (between stages).
fn blank() -> ProgressStyle {
    ProgressStyle::with_template("").expect("a valid template")
}

/// One bar, re-used stage after stage.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// Shown only when `enabled` and stderr is a terminal.
    pub fn new(enabled: bool) -> Self {
        Self::with_target(enabled && std::io::stderr().is_terminal())
    }

    fn with_target(visible: bool) -> Self {
        let bar = if visible {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        // Nothing is drawn until a stage starts.
        bar.set_style(blank());
        Progress { bar }
    }

    /// Starts a stage: a bar over `total` items, or a spinner with a message
    /// when the stage has no count (waiting for the due instant).
    pub fn stage(&self, name: &str, total: Option<u64>) {
        let style = match total {
            Some(total) => {
                self.bar.set_length(total);
                ProgressStyle::with_template(
                    "{prefix:>12.cyan.bold} [{bar:30.green/dim}] {human_pos}/{human_len} {per_sec:>10} {msg} eta {eta}",
                )
            }
            None => ProgressStyle::with_template("{prefix:>12.cyan.bold} {spinner} {msg}"),
        }
        .expect("a valid template")
        .progress_chars("=> ");
        self.bar.set_style(style);
        self.bar.set_prefix(name.to_owned());
        self.bar.set_position(0);
        self.bar.set_message("");
        self.bar.reset_eta();
        self.bar.enable_steady_tick(Duration::from_millis(120));
    }

    /// Items done in the current stage.
    pub fn set(&self, done: u64) {
        self.bar.set_position(done);
    }

    /// The stage's message (beside the bar or the spinner).
    pub fn message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    /// A line above the bar (kept on the terminal), for what a stage came to.
    pub fn println(&self, line: &str) {
        self.bar.println(line);
    }

    /// Ends the stage: the bar is cleared and `line` stays in its place.
    pub fn finish(&self, line: &str) {
        self.bar.disable_steady_tick();
        self.bar.set_style(blank());
        self.bar.println(line);
    }

    /// Whether anything is drawn.
    pub fn is_visible(&self) -> bool {
        !self.bar.is_hidden()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_when_not_asked_or_not_a_terminal() {
        // Under `cargo test` stderr is captured, never a terminal.
        assert!(!Progress::new(true).is_visible());
        assert!(!Progress::new(false).is_visible());
    }
}
