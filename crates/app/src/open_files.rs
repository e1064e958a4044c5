//! The process's open-file limit. A serving process keeps a few files per
//! tenant it works for (a SQLite tenant database is its file, its WAL and
//! its shared memory) besides its sockets, and the usual soft limit (1,024)
//! is far below the hard one: at start the soft limit is raised to the hard
//! one, and a process that still has less than it should says so, with the
//! command that would give it more.

/// Open files a process should be allowed (what [`raise`] warns below).
pub const WANTED: libc::rlim_t = 65_536;

/// The soft and hard limits after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    pub soft: libc::rlim_t,
    pub hard: libc::rlim_t,
}

/// Raises the soft open-file limit to the hard one; the limits then. Call
/// first thing in `main`. Elsewhere than on Unix, nothing.
pub fn raise() -> Option<OpenFiles> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit read and write the struct we pass.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return None;
            }
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    ..limit
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
        }
        let limits = OpenFiles {
            soft: limit.rlim_cur,
            hard: limit.rlim_max,
        };
        if limits.soft < WANTED {
            tracing::warn!(
                soft = limits.soft,
                hard = limits.hard,
                wanted = WANTED,
                "the open-file limit is low for many tenants: raise it (ulimit -Hn {WANTED}, \
                 or LimitNOFILE={WANTED} in a systemd unit, nofile in a container's ulimits)"
            );
        }
        Some(limits)
    }
    #[cfg(not(unix))]
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limits = super::raise().expect("the limits of a Unix process");
        assert_eq!(limits.soft, limits.hard);
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct we pass.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) }, 0);
        assert_eq!(now.rlim_cur, limits.hard);
    }
}
