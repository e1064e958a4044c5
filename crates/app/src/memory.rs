//! The process's memory: no transparent huge pages.
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
