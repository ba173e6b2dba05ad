//! A job stopped by SIGTERM mid-run, as a scheduler's time limit, `timeout`, systemd or a
//! user's `kill` stops one, then resumed: walked in any [`Env`] whose jobs are ranks (`mpirun`
//! on this machine, the network-namespace hosts).

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail, ensure};

use super::{Env, Expected, interrupted_after};

/// Whom a scenario sends SIGTERM.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Signalled<'a> {
    /// The job's launcher, `mpirun`, as the Slurm batch script and `timeout` do: Open MPI
    /// passes it on to every rank a second later and SIGKILLs them a second after that, or as
    /// soon as one has exited (`odls_base_sigkill_timeout`).
    Launcher,
    /// These ranks themselves.
    Ranks(&'a [usize]),
}

impl std::fmt::Display for Signalled<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signalled::Launcher => write!(f, "mpirun"),
            Signalled::Ranks(ranks) => write!(f, "ranks {ranks:?}"),
        }
    }
}

/// A job sent SIGTERM once it has a checkpoint, then resumed to the end: a scenario.
pub(crate) struct StopAndResume<'a> {
    /// The run's name in the [`Env`]; a second try's is `<name>-2`, and so on.
    pub(crate) name: &'a str,
    /// `ember train`'s arguments, the place's `--logdir` added.
    pub(crate) args: &'a [&'a str],
    pub(crate) whom: Signalled<'a>,
    /// How long after the job's first checkpoint each try sends the signal: the next is tried
    /// when a stop lands on a multiple of one of `periods`.
    pub(crate) after: &'a [Duration],
    /// The steps of the job's own checkpoints (an epoch's, its checkpoint period): a stop there
    /// cannot be told from them, so it is not the case at stake.
    pub(crate) periods: &'a [u64],
}

/// How a job sent SIGTERM ended.
pub(crate) struct Stopped {
    /// Where the run is.
    pub(crate) place: String,
    /// The step it says it was interrupted after.
    pub(crate) step: u64,
    pub(crate) output: String,
    /// The launcher's exit.
    pub(crate) status: ExitStatus,
    /// When the signal went.
    pub(crate) sent: SystemTime,
    /// From the signal to the launcher's exit.
    pub(crate) ended_after: Duration,
    /// The file name of the run's newest checkpoint once it stopped.
    pub(crate) newest: String,
}

/// How long a job may take to its first checkpoint, and to end once signalled.
const FIRST_CHECKPOINT: Duration = Duration::from_secs(120);
const TO_END: Duration = Duration::from_secs(60);

impl StopAndResume<'_> {
    /// Stops the job ([`stop`](Self::stop)), lets `check` judge how it ended (what only the
    /// env can tell: its ranks' exit statuses, its files), then resumes it
    /// ([`Stopped::resumed`]).
    pub(crate) fn walk(
        &self,
        env: &dyn Env,
        expected: &Expected,
        check: impl Fn(&Stopped) -> anyhow::Result<()>,
    ) -> anyhow::Result<Stopped> {
        let stopped = self.stop(env)?;
        check(&stopped)?;
        stopped.resumed(env, expected)?;
        Ok(stopped)
    }

    /// Starts the job, sends SIGTERM to [`whom`](Self::whom) a moment of `after` past its first
    /// checkpoint ([`Running::stopped`]); the first stop away from `periods` is the answer.
    pub(crate) fn stop(&self, env: &dyn Env) -> anyhow::Result<Stopped> {
        for (attempt, at) in self.after.iter().enumerate() {
            let place = match attempt {
                0 => env.place(self.name),
                _ => env.place(&format!("{}-{}", self.name, attempt + 1)),
            };
            if let Some(dir) = env.dir(&place) {
                std::fs::remove_dir_all(dir).ok();
            }
            let log = env.log(&place, "stopped");
            let args: Vec<&str> = self
                .args
                .iter()
                .copied()
                .chain(["--logdir", &place])
                .collect();
            let mut job = Running::until_first_checkpoint(env, &args, &place, &log)?;
            std::thread::sleep(*at);
            let stopped = job.stopped(env, self.whom, &place, &log)?;
            if !self
                .periods
                .iter()
                .any(|period| stopped.step.is_multiple_of(*period))
            {
                return Ok(stopped);
            }
        }
        bail!(
            "SIGTERM to {} never stopped the job away from its own checkpoints' steps",
            self.whom
        )
    }
}

impl Stopped {
    /// `--resume` of the stopped run, which must go on from the stop's checkpoint and end as
    /// `expected`, each step once.
    pub(crate) fn resumed(&self, env: &dyn Env, expected: &Expected) -> anyhow::Result<()> {
        let ran = expected.resumed_to_the_end(env, &self.place)?;
        ensure!(
            ran.output.contains(&self.newest),
            "the job stopped at step {} did not go on from the stop's checkpoint {}:\n{}",
            self.step,
            self.newest,
            ran.output
        );
        Ok(())
    }
}

/// A job started in the background, killed when dropped: a failed check leaves no job running.
pub(crate) struct Running(pub(crate) Child);

impl Running {
    /// `env`'s job of `ember ARGS` (`args` name the place), its output into `log`, once its
    /// first whole checkpoint (rank 0's, written after every rank's part) is at `place`.
    pub(crate) fn until_first_checkpoint(
        env: &dyn Env,
        args: &[&str],
        place: &str,
        log: &std::path::Path,
    ) -> anyhow::Result<Self> {
        let file = std::fs::File::create(log)?;
        let mut job = env.launch(args);
        let mut job = Running(
            job.stdout(file.try_clone()?)
                .stderr(file)
                .spawn()
                .context("starting the job")?,
        );
        let started = Instant::now();
        while env.newest_checkpoint(place)?.is_none() {
            ensure!(
                job.0.try_wait()?.is_none() && started.elapsed() < FIRST_CHECKPOINT,
                "the job ended or hung before its first checkpoint:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(match env.dir(place) {
                Some(_) => 5,
                None => 100,
            }));
        }
        Ok(job)
    }

    /// Sends SIGTERM to `whom` of the job writing `place` (its output in `log`) and waits
    /// (bounded) for it to end. It must not end as a finished job, and must say where it
    /// stopped.
    pub(crate) fn stopped(
        &mut self,
        env: &dyn Env,
        whom: Signalled<'_>,
        place: &str,
        log: &std::path::Path,
    ) -> anyhow::Result<Stopped> {
        let sent = SystemTime::now();
        match whom {
            Signalled::Launcher => terminate(self.0.id())?,
            Signalled::Ranks(ranks) => {
                for rank in ranks {
                    let pid = crate::runs::rank_process(place, *rank)
                        .with_context(|| format!("finding rank {rank} of the job"))?;
                    terminate(pid)?;
                }
            }
        }
        let status = self.ended_within(TO_END, "after SIGTERM")?;
        let ended_after = sent.elapsed().unwrap_or_default();
        let output = std::fs::read_to_string(log)?;
        ensure!(
            !status.success(),
            "SIGTERM to {whom}: the job ended as a finished one:\n{output}"
        );
        let step = interrupted_after(&output)
            .with_context(|| format!("the stopped job did not say where it stopped:\n{output}"))?;
        let newest = env
            .newest_checkpoint(place)?
            .with_context(|| format!("no checkpoint of {place} after the stop"))?;
        Ok(Stopped {
            place: place.to_owned(),
            step,
            output,
            status,
            sent,
            ended_after,
            newest,
        })
    }

    /// The job's exit, waited for at most `bound`.
    fn ended_within(&mut self, bound: Duration, what: &str) -> anyhow::Result<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait()? {
                return Ok(status);
            }
            ensure!(started.elapsed() < bound, "the job went on {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn terminate(pid: u32) -> anyhow::Result<()> {
    let sent = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    ensure!(sent.success(), "kill -TERM {pid} failed");
    Ok(())
}
