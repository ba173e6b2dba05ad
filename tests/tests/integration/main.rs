//! ember's cross-crate integration tests, linked once: every area is a module of this one
//! binary, so the workspace builds one test executable that links Burn instead of one per
//! file. Run one area with a filter on its module, e.g.
//! `cargo test -p ember-tests --test integration resume::`.

// The device pool and the one data-parallel driver under the Trainer and burn-train.
mod driver;
mod pool_with_burn;

// The facade and SummaryRecord as users meet them.
mod facade;
mod summary_record;

// The Trainer: summaries, failures and stops, then killed runs resumed.
mod reshard;
mod resume;
mod run;
mod trainer;
mod trainer_failures;

// Ranks as threads of this process (`LocalGroup`); under `mpirun`: `cargo xtask mpi`.
mod ranks;
mod ranks_resume;

// burn-train's own Learner with ember's logger and pool strategy, and its checkpoints.
mod burn_train;
mod burn_train_resume;

// Two distinct devices: logical wgpu devices (`cargo xtask devices`, on lavapipe without a
// GPU) or CUDA devices (`cargo xtask gpu`); each test measures its devices' memory, so the
// suite runs with `--test-threads=1`.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod distinct_devices;
