//! What every scenario uses: the programs, the work directory, the hosts and their launcher,
//! the bucket as a scenario [`Store`](crate::scenario::Store) (`ember pull`, `ember inspect`),
//! and TensorBoard's S3 reader through `xtask/objects/check_s3.py`.

use std::path::Path;
use std::process::Command;

use super::launch::Cluster;
use super::net::Network;
use crate::process::{Ran, expect_success, run_limited};
use crate::scenario::Env;

/// Which build of `ember` the hosts run. CI checks behaviour, which a debug build shows as
/// well, and by the time CI gets here `cargo xtask objects` and `mpi` have built each of its
/// two features in debug; a release build of both rebuilds Burn (about 10 minutes cold), which
/// only the step times of scenario (c), the figures of docs/benchmarks.md, need.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Profile {
    Debug,
    Release,
}

impl Profile {
    /// The profile's directory under the target directory.
    pub(super) fn dir(self) -> &'static str {
        match self {
            Profile::Debug => "debug",
            Profile::Release => "release",
        }
    }
}

pub(super) struct Check<'a> {
    pub(super) root: &'a Path,
    pub(super) python: &'a Path,
    /// `ember` built with `mpi,object-store` (debug, or release with `--release`).
    pub(super) ember: &'a Path,
    /// ember's `mpi_ranks` example, debug (as `cargo xtask mpi` builds it).
    pub(super) ranks: &'a Path,
    /// ember-collective's `allreduce` example, release.
    pub(super) allreduce: &'a Path,
    pub(super) work: &'a Path,
    /// The bucket, as `ember` in the root namespace reaches it (`ember pull`, `ember inspect`).
    pub(super) store: crate::scenario::Store,
    pub(super) network: &'a Network,
    pub(super) cluster: &'a Cluster,
}

impl Check<'_> {
    /// `mpirun` of `program args` with one rank on each host.
    pub(super) fn on_hosts(&self, program: &Path, args: &[&str]) -> Command {
        let mut command = self.cluster.mpirun();
        command.arg(program).args(args);
        command
    }

    /// Runs `command` to its end (bounded), its output in `<work>/<name>.log`, and requires
    /// success.
    pub(super) fn succeed(&self, command: Command, name: &str) -> anyhow::Result<Ran> {
        let ran = run_limited(command, name, &self.work.join(format!("{name}.log")))?;
        expect_success(&ran, name)?;
        Ok(ran)
    }

    /// TensorBoard's own S3 reader shows every value of the run at `url` as of the local run
    /// `local`, and the bucket holds only whole records.
    pub(super) fn tensorboard_same(&self, url: &str, local: &Path) -> anyhow::Result<()> {
        let reader = crate::readers::StoreReader {
            cloud: "s3",
            python: self.python,
            env: crate::scenario::env_of(|command| self.cluster.s3(command)),
        };
        reader.loads(self.root, url, local, &self.log(url, "loader"))?;
        Ok(())
    }
}

/// The hosts as a scenario env: runs live in the bucket, `ember` tools run in the root
/// namespace, and a training job is `mpirun` of one rank on each host.
impl Env for Check<'_> {
    fn name(&self) -> &str {
        "hosts"
    }

    fn work(&self) -> &Path {
        self.work
    }

    fn place(&self, name: &str) -> String {
        self.store.place(name)
    }

    fn ember(&self, args: &[&str]) -> Command {
        self.store.ember(args)
    }

    fn launch(&self, args: &[&str]) -> Command {
        self.on_hosts(self.ember, args)
    }

    fn dir(&self, place: &str) -> Option<std::path::PathBuf> {
        self.store.dir(place)
    }

    fn on_disk(&self, place: &str) -> anyhow::Result<std::path::PathBuf> {
        self.store.on_disk(place)
    }

    fn checkpoint_names(&self, place: &str) -> anyhow::Result<Vec<String>> {
        let run = place.trim_start_matches("s3://ember/");
        super::store::keys(&self.cluster.endpoint, &format!("{run}/checkpoints/"))
    }
}
