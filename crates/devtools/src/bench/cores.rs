//! Which CPUs a bench run's processes run on. The Slack stand-in answers the
//! daemon over loopback; left to the scheduler, the two often share one core
//! (a wakee is placed beside its waker) for the first tens of milliseconds of
//! a burst while the other core idles, which decides much of the spread of
//! 3,000 at once. `--cores separate` gives the stand-ins the last CPU and the
//! daemons the others, as in production, where Slack is not on the daemon's
//! machine: 3,000 at once then spread less and came sooner, but at 30,000
//! and 100,000 one core for the daemon is too few (BENCHMARKS.md, issue 38).
//! So the default stays `shared`, as every earlier figure was measured.

use std::fmt;
use std::process::Command;
use std::str::FromStr;

/// Where the stand-in and the daemons run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cores {
    /// Wherever the scheduler puts them.
    #[default]
    Shared,
    /// The stand-in on the last CPU, the daemons on the others (with one
    /// CPU only: shared).
    Separate,
}

impl FromStr for Cores {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "separate" => Ok(Cores::Separate),
            "shared" => Ok(Cores::Shared),
            _ => Err(format!("--cores: separate or shared, got {s:?}")),
        }
    }
}

impl fmt::Display for Cores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cores::Separate => "separate",
            Cores::Shared => "shared",
        })
    }
}

/// The part of the machine a process is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    StandIn,
    Daemon,
}

impl Cores {
    /// Starts `cmd`'s process on its role's CPUs (as given, if shared).
    pub(super) fn place(self, cmd: &mut Command, role: Role) {
        let Some(cpus) = self.cpus(role).map(|c| cpu_set(&c)) else {
            return;
        };
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec the closure only calls
        // sched_setaffinity(2) on a set built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &cpus) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// The CPUs this process may use, in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid cpu_set_t of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads the set within its size.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|c| unsafe { libc::CPU_ISSET(*c, &set) })
        .collect()
}

impl Cores {
    /// The CPUs `role` is given: separate, the stand-in's is the last
    /// allowed and the daemons' the rest; None when shared or with fewer
    /// than two CPUs (left as they are).
    pub fn cpus(self, role: Role) -> Option<Vec<usize>> {
        if self == Cores::Shared {
            return None;
        }
        let cpus = allowed_cpus();
        let (last, rest) = cpus.split_last()?;
        if rest.is_empty() {
            return None;
        }
        Some(match role {
            Role::StandIn => vec![*last],
            Role::Daemon => rest.to_vec(),
        })
    }
}

fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it
    // (the CPUs come from sched_getaffinity, below CPU_SETSIZE).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus {
        unsafe { libc::CPU_SET(*c, &mut set) };
    }
    set
}
