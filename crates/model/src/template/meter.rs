//! The work a render may do besides its instructions. Fuel counts
//! instructions, but one instruction can walk a whole iterable (`x in
//! range(10000)`, `|last`, a loop over a range): each item such a walk
//! touches, each byte a filter reads and each byte written is charged here,
//! and the render's CPU time is held to a budget. The meter lives in a
//! thread-local for the length of one render: minijinja renders on the
//! calling thread, and the hooks (the range, the filters, the variables,
//! the output) have no other way to reach it.

use std::cell::Cell;
use std::time::Duration;

use thiserror::Error;

/// Units of work one render may spend: an item walked, or 64 bytes read by
/// a filter or written. About a millisecond of CPU in a release build.
pub const WORK: u64 = 50_000;

/// The CPU time a template may take to render once, at registration, with
/// the largest inputs: a template over it is refused. The built-in texts
/// take a few microseconds.
pub const REGISTRATION_CPU: Duration = Duration::from_millis(5);

/// The CPU time one render may take at delivery: more room than at
/// registration (a slower or busier machine), still small beside a batch.
pub const DELIVERY_CPU: Duration = Duration::from_millis(25);

/// Bytes a unit of work stands for, where work is counted in bytes.
const BYTES_PER_UNIT: usize = 64;

/// Units charged between two readings of the thread's CPU clock (a system
/// call): often enough to stop a runaway within a fraction of a millisecond.
const UNITS_PER_CLOCK_READ: u64 = 256;

/// What one render may spend: work units and CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderBudget {
    pub work: u64,
    pub cpu: Duration,
    pub cpu_check: CpuCheck,
}

/// When a render's CPU time is compared with its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuCheck {
    /// As it runs (every few hundred units of work) and at its end: a
    /// render past its time stops there. At delivery.
    Throughout,
    /// At its end only, and reported only when the render stayed within
    /// its other limits, which say more about what to change (fuel, work,
    /// output). At registration, where the other limits bound the render.
    AtEnd,
}

impl RenderBudget {
    /// What a template may take when it is registered.
    pub const REGISTRATION: RenderBudget = RenderBudget {
        work: WORK,
        cpu: REGISTRATION_CPU,
        cpu_check: CpuCheck::AtEnd,
    };
    /// What a template may take at delivery.
    pub const DELIVERY: RenderBudget = RenderBudget {
        work: WORK,
        cpu: DELIVERY_CPU,
        cpu_check: CpuCheck::Throughout,
    };
}

/// Why a render was stopped by the meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Overrun {
    #[error("walks or reads more than the {0} units of work a template may (work limit)")]
    Work(u64),
    #[error("takes more than the {} ms of CPU a template may (time limit)", .0.as_millis())]
    Time(Duration),
}

/// The meter of the render running on this thread.
struct Meter {
    budget: RenderBudget,
    started: Duration,
    spent: u64,
    next_clock_read: u64,
    overrun: Option<Overrun>,
}

thread_local! {
    static METER: Cell<Option<Meter>> = const { Cell::new(None) };
}

/// The CPU time this thread has used (Linux and other Unixes; elsewhere
/// nothing is measured and only work is bounded).
fn thread_cpu() -> Duration {
    #[cfg(unix)]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid pointer to a timespec; the clock exists on Unix.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        if rc == 0 {
            return Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
        }
    }
    Duration::ZERO
}

/// Runs `render` under `budget`: what it returned, and the overrun that
/// stopped it, if any (its result is then not to be used).
pub(super) fn metered<R>(budget: RenderBudget, render: impl FnOnce() -> R) -> (R, Option<Overrun>) {
    let meter = Meter {
        budget,
        started: thread_cpu(),
        spent: 0,
        next_clock_read: UNITS_PER_CLOCK_READ,
        overrun: None,
    };
    // A render inside a render (none today) keeps the outer meter
    // afterwards; so does a render that panics.
    struct Restore(Option<Option<Meter>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                METER.set(outer);
            }
        }
    }
    let mut restore = Restore(Some(METER.replace(Some(meter))));
    let out = render();
    let outer = restore.0.take().expect("restored once");
    let mut meter = METER.replace(outer).expect("the meter set above");
    // The instructions between hooks count too: read the clock once more.
    meter.check_time();
    (out, meter.overrun)
}

impl Meter {
    fn charge(&mut self, units: u64) -> bool {
        if self.overrun.is_some() {
            return false;
        }
        self.spent = self.spent.saturating_add(units);
        if self.spent > self.budget.work {
            self.overrun = Some(Overrun::Work(self.budget.work));
            return false;
        }
        if self.spent >= self.next_clock_read && self.budget.cpu_check == CpuCheck::Throughout {
            self.next_clock_read = self.spent + UNITS_PER_CLOCK_READ;
            self.check_time();
        }
        self.overrun.is_none()
    }

    fn check_time(&mut self) {
        if self.overrun.is_none() && thread_cpu().saturating_sub(self.started) > self.budget.cpu {
            self.overrun = Some(Overrun::Time(self.budget.cpu));
        }
    }
}

/// Charges `units` to the render on this thread; false once it is over its
/// budget (the caller stops). Outside a metered render everything is free.
pub(super) fn charge(units: u64) -> bool {
    METER.with(|cell| match cell.take() {
        Some(mut meter) => {
            let ok = meter.charge(units);
            cell.set(Some(meter));
            ok
        }
        None => true,
    })
}

/// Charges the work of reading or writing `bytes` bytes (at least a unit).
pub(super) fn charge_bytes(bytes: usize) -> bool {
    charge(1 + (bytes / BYTES_PER_UNIT) as u64)
}

/// The overrun of the render on this thread so far, if any.
pub(super) fn overrun() -> Option<Overrun> {
    METER.with(|cell| {
        let meter = cell.take();
        let overrun = meter.as_ref().and_then(|m| m.overrun);
        cell.set(meter);
        overrun
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_past_the_budget_is_an_overrun_and_stays_one() {
        let budget = RenderBudget {
            work: 10,
            ..RenderBudget::DELIVERY
        };
        let (charged, overrun) = metered(budget, || {
            let first = (0..10).all(|_| charge(1));
            let eleventh = charge(1);
            let after = charge(0);
            (first, eleventh, after)
        });
        assert_eq!(charged, (true, false, false));
        assert_eq!(overrun, Some(Overrun::Work(10)));
    }

    #[test]
    fn cpu_past_the_budget_is_an_overrun() {
        let budget = RenderBudget {
            work: u64::MAX,
            cpu: Duration::ZERO,
            cpu_check: CpuCheck::AtEnd,
        };
        // Spin until the thread's clock moves: then the budget of zero is past.
        let start = thread_cpu();
        let ((), overrun) = metered(budget, || while thread_cpu() == start {});
        assert_eq!(overrun, Some(Overrun::Time(Duration::ZERO)));
    }

    #[test]
    fn outside_a_render_nothing_is_charged_and_meters_nest() {
        assert!(charge(u64::MAX));
        let tight = RenderBudget {
            work: 1,
            ..RenderBudget::DELIVERY
        };
        let (inner, outer) = metered(tight, || {
            charge(1);
            let (_, inner) = metered(RenderBudget::DELIVERY, || charge(5));
            (inner, charge(1))
        });
        assert_eq!(inner, (None, false));
        assert_eq!(
            outer,
            Some(Overrun::Work(1)),
            "the outer meter goes on after"
        );
    }
}
