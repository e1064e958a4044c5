//! The process's open-file limit. A serving process keeps a few files per
//! tenant it works for (a SQLite tenant database is its file, its WAL and
//! its shared memory) besides its sockets, and the usual soft limit (1,024)
//! is far below the hard one: at start the soft limit is raised to the hard
//! one, and a process that still has less than it should says so, with the
//! command that would give it more.

/// Descriptors besides the tenants' and the API's: the control database,
/// logs, the channels' and the queue's connections.
const HEADROOM: usize = 512;

/// Open files a process with `config` may need (what [`raise`] warns
/// below): three for each tenant database it keeps open or has in use (a
/// SQLite file, its WAL and shared memory), one per API connection per
/// listener (the API and the operator's), and headroom. Bounded whatever
/// the number of tenants.
pub fn wanted(config: &crate::Config) -> libc::rlim_t {
    let tenants = config.database.max_open_tenants + toki_sql::SQLITE_IN_USE as usize;
    (3 * tenants + 2 * config.http.max_connections + HEADROOM) as libc::rlim_t
}

/// The soft and hard limits after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    pub soft: libc::rlim_t,
    pub hard: libc::rlim_t,
}

/// Raises the soft open-file limit to the hard one; the limits then. Call
/// first thing in `main`. Elsewhere than on Unix, nothing.
pub fn raise(wanted: libc::rlim_t) -> Option<OpenFiles> {
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
        if limits.soft < wanted {
            tracing::warn!(
                soft = limits.soft,
                hard = limits.hard,
                wanted,
                "the open-file limit is below what this process may hold (tenant databases kept \
                 open and in use, API connections): raise it (ulimit -Hn {wanted}, or \
                 LimitNOFILE={wanted} in a systemd unit, nofile in a container's ulimits), or \
                 lower database.max_open_tenants or http.max_connections"
            );
        }
        Some(limits)
    }
    #[cfg(not(unix))]
    None
}

#[cfg(test)]
mod tests {
    /// What a process may hold follows its bounds, not its tenants: at the
    /// defaults (32 kept open, 64 in use, 1,024 API connections) 2,848.
    #[test]
    fn the_files_wanted_follow_the_bounds() {
        let mut config = crate::Config::default();
        assert_eq!(super::wanted(&config), 3 * (32 + 64) + 2 * 1024 + 512);
        config.database.max_open_tenants = 1000;
        config.http.max_connections = 10;
        assert_eq!(super::wanted(&config), 3 * (1000 + 64) + 2 * 10 + 512);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limits = super::raise(1).expect("the limits of a Unix process");
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
