//! The `ember` binary's allocator: mimalloc, for training and writing at once.
//!
//! Burn's CPU backend allocates every operation's result afresh: a step of the 8.5 M-parameter
//! benchmark model allocates and frees megabytes per matrix product, hundreds of times. With
//! glibc's defaults those blocks go back to the kernel and come back as fresh zeroed pages, and
//! each thread's arena keeps what the others free out of reach. glibc can be told to keep
//! freed memory in one arena shared by every thread (what this binary did before): training
//! then reuses its tensors' memory, but every allocation of the summary writer's threads waits
//! on that arena's one lock, and writing scalars ran 2.5 times slower. No glibc setting served
//! both (docs/benchmarks.md, "Allocator"). mimalloc gives each thread a heap of its own with
//! no global lock, hands a block freed on another thread back to its owner's heap, and keeps
//! freed pages for reuse a while before returning them: the training threads reuse their
//! memory and the writer threads do not wait on them.
//!
//! A library does not choose a process's allocator: a program of its own built on the `ember`
//! crate picks its own (`#[global_allocator]`), this one's included.

/// The process's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
