//! glibc's allocator told to keep what training frees, so that the next step reuses it.
//!
//! Burn's CPU backend allocates every operation's result afresh: a step of the 8.5 M-parameter
//! benchmark model allocates and frees megabytes per matrix product, hundreds of times. With
//! glibc's defaults those blocks go back to the kernel (unmapped, or trimmed from the top of a
//! heap) and come back as fresh zeroed pages, one page fault per 4 KiB, and each unmapping
//! interrupts the other cores to flush their TLBs. Each thread that allocates also gets an
//! arena of its own, whose heaps are unmapped whenever they empty, so a tensor made on a
//! device's worker and freed by the optimizer's thread leaves memory no other thread reuses.
//! Under `perf stat` that was three times burn-train's page faults for ember's one-worker run
//! (docs/benchmarks.md, "Data parallel").
//!
//! So the command, before any thread starts, asks for one arena, blocks of up to 32 MiB from
//! the heap rather than from `mmap`, and no trimming: freed memory stays in the process and
//! the next step's tensors reuse it. A process's resident memory stays at its peak instead of
//! shrinking between steps; that is the trade. A user who set glibc's malloc tunables
//! (`GLIBC_TUNABLES=glibc.malloc...`) keeps theirs. Libraries do not touch a process-wide
//! setting: a program of its own built on the `ember` crate sets the same tunables through
//! that variable.

/// Below this, blocks come from the heap (glibc's largest threshold on 64-bit).
const HEAP_BLOCKS_UP_TO: i32 = 32 << 20;

/// Sets the allocator up as above, unless the user chose glibc malloc tunables themselves.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn keep_freed_memory() {
    let user_chose =
        std::env::var("GLIBC_TUNABLES").is_ok_and(|tunables| tunables.contains("glibc.malloc."));
    if user_chose {
        return;
    }
    for (option, value) in [
        (libc::M_ARENA_MAX, 1),
        (libc::M_MMAP_THRESHOLD, HEAP_BLOCKS_UP_TO),
        (libc::M_TRIM_THRESHOLD, i32::MAX),
    ] {
        // SAFETY: `mallopt` only sets allocator parameters, under the allocator's own lock;
        // it is called first thing in `main`, and an option it refuses (returning 0) leaves
        // glibc's default in place, which is correct, only slower.
        unsafe { libc::mallopt(option, value) };
    }
}

/// Other allocators keep their own policies.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn keep_freed_memory() {}
