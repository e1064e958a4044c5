//! The process's memory: no transparent huge pages, and memory made ready
//! ahead (the bench's Slack stand-in).
//!
//! mimalloc asks the kernel for huge pages on its arenas (`madvise`), and with
//! the kernel's THP in `madvise` mode (Debian's default) each first touch of
//! a fresh 2 MB range faults in and zeroes the whole range. In the daemon
//! that was the largest single cost of a burst: a third of its CPU at 3,000
//! due at once went to zeroing pages, and its peak RSS doubled (BENCHMARKS.md,
//! issue 38). Small pages cost the allocator nothing measurable here.

/// Turns transparent huge pages off for this process (its later faults);
/// call first thing in `main`. A kernel without the switch leaves it on.
pub fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no memory
    // of ours; its failure (an old kernel) only leaves THP as it was.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// mimalloc's `purge_delay` option: v3's `mi_option_purge_delay`, which the
/// bindings do not name (a test checks that it reads v3's default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Faults in `bytes` of mimalloc's memory now and keeps all it holds from
/// going back to the kernel, so that the process's later allocations, up to
/// about that much, land on pages already in rather than on fresh ones the
/// kernel zeroes at their first touch (at a burst, a fifth of the Slack
/// stand-in's CPU: BENCHMARKS.md, issue 38). For a process whose global
/// allocator is mimalloc, first thing in `main`; its RSS then stays at
/// least `bytes`.
pub fn warm(bytes: usize) {
    // SAFETY: sets one of mimalloc's integer options; -1 is "never purge".
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    let mut block = vec![1u8; bytes];
    std::hint::black_box(&mut block);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_warm_sets() {
        // v3's purge delay defaults to 1,000 ms; no other option does.
        // SAFETY: reads one of mimalloc's integer options.
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 1000);
    }
}
