//! A clock off the true time by an offset a test sets: moved forward from
//! one instant to the next (months of a calendar in seconds).

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{Duration as ChronoDuration, Utc};
use toki_model::Instant;
use toki_ports::Clock;

/// The true time plus an offset.
#[derive(Default)]
pub struct OffsetClock {
    offset_ms: AtomicI64,
}

impl OffsetClock {
    /// From now on the clock reads `t` (then runs on with real time); a `t`
    /// already passed, by the seconds a step took, leaves it as it is.
    pub fn set(&self, t: Instant) {
        let before = self.now();
        if t <= before {
            assert!(
                before - t < ChronoDuration::seconds(10),
                "{before} -> {t}: back in time"
            );
            return;
        }
        self.offset_ms
            .store((t - Utc::now()).num_milliseconds(), Ordering::SeqCst);
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> Instant {
        Utc::now() + ChronoDuration::milliseconds(self.offset_ms.load(Ordering::SeqCst))
    }
}
