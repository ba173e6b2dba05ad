//! The scenario harness: every task that trains a run, breaks it the way a user's machine does
//! and reads the result back walks through here, in three parts.
//!
//! - [`Env`]: where a run lives and how `ember` reaches it — a local directory ([`Local`],
//!   its training jobs launched under `mpirun` where [`Local::under`] says so), a bucket of a
//!   store server on loopback ([`Store`]: moto's S3, fake-gcs-server, Azurite), or the
//!   network-namespace hosts of `cargo xtask hosts` (its `Check`: the bucket, one rank a host).
//!   A task starts the servers; the `Env` says how a run there is named, started, inspected
//!   and brought to the disk.
//! - A scenario is data: [`KillAndResume`] is the program ([`Program`]), how many seeded
//!   kills, and what the result must equal. [`KillAndResume::walk`] does the walk every
//!   resume scenario did in its own words: an uninterrupted reference run, then runs killed
//!   with SIGKILL at seeded moments, each resumed (or, refused for want of a checkpoint,
//!   restarted, the refusal having changed nothing).
//! - Checks read the result back once: [`Expected`] (the uninterrupted run's model byte for
//!   byte and its values in `ember inspect`), and the real readers in `crate::readers`.
//!
//! Adding a store is one [`Env`] (its place names and environment); adding a scenario for it
//! is a [`KillAndResume`] value and a call to `walk` (docs/architecture.md shows one).

mod env;
mod expected;
mod kills;
mod stop;

pub(crate) use env::{Env, Local, Store, env_of, inspect_json, output_within};
pub(crate) use expected::{Expected, interrupted_after, loss_points, points};
pub(crate) use kills::{AfterKill, KillAndResume, Program, Walked};
pub(crate) use stop::{Running, Signalled, StopAndResume, Stopped};
