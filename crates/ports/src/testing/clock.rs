//! A clock on tokio's time: under `#[tokio::test(start_paused = true)]` it
//! stands still until the test advances it, so a 15-minute wait takes no time.

use chrono::Duration as ChronoDuration;

use crate::Clock;
use toki_model::domain::{from_millis, Instant};

/// `now` = a fixed UTC origin + tokio time elapsed since the clock was made,
/// to the millisecond (as every store keeps instants).
#[derive(Debug, Clone)]
pub struct TokioClock {
    origin: Instant,
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn starting_at(origin: Instant) -> Self {
        TokioClock {
            origin,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        let elapsed = ChronoDuration::from_std(self.start.elapsed()).unwrap_or(ChronoDuration::MAX);
        let t = self.origin + elapsed;
        from_millis("now", t.timestamp_millis()).unwrap_or(t)
    }
}
