//! The jobs `cargo xtask slurm` submits, each with `examples/slurm/train.sbatch` as it ships,
//! and what each must end with: the model of the same 2 ranks run by plain `mpirun`, byte for
//! byte, and its log as that run's in `ember inspect` and TensorBoard's loaders, each step once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use super::cluster::{Cluster, TASK};
use crate::mpirun::{RankExits, Transport, mpirun};
use crate::process::{Ran, expect_success, run_limited};
use crate::runs::XorShift;
use crate::scenario::Expected;

/// The run every job trains, given to the script as `EMBER_ARGS`: 60 epochs of the digits on
/// 2 workers a rank (12 steps an epoch), 7 s in a debug build on 2 idle cores: long enough to
/// be stopped several times mid-run.
const RUN_ARGS: &str = "--epochs 60 --devices 2";
/// How long a job may take from its submission to its end, requeues included.
const JOB_LIMIT: Duration = Duration::from_secs(180);
/// How long after `scancel` a process of the job may still run: slurmd's `KillWait` (10 s,
/// between its SIGTERM and its SIGKILL) and 5 s to spare.
const CANCEL_BOUND: Duration = Duration::from_secs(15);
/// The seed of the preemption moments, unless `EMBER_SLURM_SEED` gives another.
const SEED: u64 = 20_261_206;
/// The runs read as the plain `mpirun` one: every job's but its own.
const JOB_RUNS: [&str; 4] = ["plain", "time-limited", "preempted", "cancelled"];

pub(super) struct Jobs<'a> {
    pub(super) cluster: &'a Cluster,
    pub(super) ember: PathBuf,
    pub(super) script: PathBuf,
    pub(super) runs: PathBuf,
}

/// A job as `scontrol show job` tells it.
#[derive(Debug)]
struct JobInfo {
    state: String,
    restarts: u32,
    exit_code: String,
}

impl JobInfo {
    /// Whether the job is over for good: a state it leaves no more. The passing ones
    /// (`SIGNALING` while the time limit's warning goes out, `REQUEUED`, `COMPLETING`, …)
    /// are not.
    fn ended(&self) -> bool {
        matches!(
            self.state.as_str(),
            "COMPLETED"
                | "FAILED"
                | "CANCELLED"
                | "TIMEOUT"
                | "NODE_FAIL"
                | "OUT_OF_MEMORY"
                | "BOOT_FAIL"
                | "DEADLINE"
                | "PREEMPTED"
                | "SPECIAL_EXIT"
        )
    }
}

impl Jobs<'_> {
    pub(super) fn run_all(&self, root: &Path, target: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.runs)?;
        let reference = self.under_mpirun()?;
        self.plain(&reference)?;
        self.time_limited(&reference)?;
        self.preempted(&reference)?;
        self.cancelled(&reference.0)?;
        crate::readers::tensorboard_reads_as(TASK, (root, target), &self.runs, "mpirun", &JOB_RUNS)
    }

    /// The run under plain `mpirun -n 2`, outside Slurm: what every job must end with. Returns
    /// its log directory and how long it took.
    fn under_mpirun(&self) -> anyhow::Result<(PathBuf, Duration)> {
        let run = self.runs.join("mpirun");
        let ran = self.outside_slurm(&run, "mpirun -n 2 ember train")?;
        eprintln!(
            "{TASK}: the run under plain mpirun -n 2, outside Slurm: {:.1} s",
            ran.elapsed.as_secs_f64()
        );
        Ok((run, ran.elapsed))
    }

    /// The script's job, never stopped.
    fn plain(&self, (reference, _): &(PathBuf, Duration)) -> anyhow::Result<()> {
        let started = Instant::now();
        let id = self.submit("plain", &[], &self.ember)?;
        let info = self.wait_for(id, "to end", JobInfo::ended)?;
        self.same_as(reference, "plain", &info)?;
        ensure!(info.restarts == 0, "the plain job was requeued: {info:?}");
        eprintln!(
            "{TASK}: sbatch of 2 ranks (mpirun inside the allocation): the plain mpirun run's \
             model byte for byte, its values in ember inspect ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// The job with a time limit, warned by `--signal=B:TERM@30` (its batch shell alone): the
    /// script stops the run (SIGTERM to `mpirun`, which passes it on to the ranks) and requeues
    /// the job, which runs the same script again and goes on. Every start the warning stopped
    /// must end with both ranks exiting with 143 (each rank run by a script that keeps its exit
    /// status), their logs closed. Submitted to start half the plain run's length (2 to 20 s)
    /// ahead of slurmctld's check of time limits, so that the warning, due at once, comes then,
    /// mid-run, however fast the machine trains.
    fn time_limited(&self, (reference, length): &(PathBuf, Duration)) -> anyhow::Result<()> {
        let warned_at = (*length / 2).clamp(Duration::from_secs(2), Duration::from_secs(20));
        let exits = RankExits::new(&self.runs.join("time-limited-exits"), &self.ember)?;
        self.cluster.wait_for_tick_phase(warned_at);
        let started = Instant::now();
        let extra = ["--time=1", "--signal=B:TERM@30"];
        let id = self.submit("time-limited", &extra, exits.program())?;
        let info = self.wait_for(id, "to end", JobInfo::ended)?;
        self.same_as(reference, "time-limited", &info)?;
        let printed = self.printed("time-limited")?;
        let signalled = printed.matches("ember-slurm: signalled").count();
        ensure!(
            signalled >= 1 && info.restarts >= 1 && printed.contains("resumed from"),
            "the time-limited job was not signalled, requeued and resumed ({info:?}; a job that \
             ended unsignalled met slurmctld's time-limit check later than {warned_at:?} in):\n{printed}"
        );
        // Each start the warning stopped, then the last, which finished.
        let mut expected = vec![143; signalled];
        expected.push(0);
        let exited: Vec<Vec<i32>> = exits
            .take(2)?
            .iter()
            .map(|runs| runs.iter().map(|exit| exit.status).collect())
            .collect();
        ensure!(
            exited.iter().all(|statuses| *statuses == expected),
            "the ranks of the time-limited job exited with {exited:?} start after start (137: \
             SIGKILL), not {expected:?} each:\n{printed}"
        );
        let unsealed = crate::runs::unsealed_event_files(&self.runs.join("time-limited"))?;
        ensure!(
            unsealed.is_empty(),
            "the time-limited job left event files no rank closed: {unsealed:?}"
        );
        eprintln!(
            "{TASK}: time-limited (--time=1 --signal=B:TERM@30 --requeue), due to be warned {:.1} \
             s in: signalled {signalled} time(s), both ranks exiting with 143 and their logs \
             closed, requeued by its script, {} restart(s), resumed with the same script: the \
             plain run's model byte for byte ({:.1} s)",
            warned_at.as_secs_f64(),
            info.restarts,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// The job preempted by `scontrol requeue` three times, each at a seeded moment of its
    /// start: 1 s and up to half the plain run's length more.
    fn preempted(&self, (reference, length): &(PathBuf, Duration)) -> anyhow::Result<()> {
        let seed = match std::env::var("EMBER_SLURM_SEED") {
            Ok(text) => text.parse().context("EMBER_SLURM_SEED is not a number")?,
            Err(_) => SEED,
        };
        let mut rng = XorShift(seed.max(1));
        let started = Instant::now();
        let id = self.submit("preempted", &[], &self.ember)?;
        let mut moments = Vec::new();
        for restarts in 0..3 {
            let running = |info: &JobInfo| info.state == "RUNNING" && info.restarts == restarts;
            self.wait_for(id, "to run again", running)?;
            // `mpirun` and the ranks take about a second to start training.
            let at = Duration::from_secs(1) + length.mul_f64(rng.unit() / 2.0);
            std::thread::sleep(at);
            self.cluster
                .output("scontrol", &["requeue", &id.to_string()])?;
            moments.push(format!("{:.1} s", at.as_secs_f64()));
        }
        let info = self.wait_for(id, "to end", JobInfo::ended)?;
        self.same_as(reference, "preempted", &info)?;
        let printed = self.printed("preempted")?;
        ensure!(
            info.restarts == 3 && printed.contains("resumed from"),
            "3 requeues, one at least after a checkpoint, but {info:?}:\n{printed}"
        );
        eprintln!(
            "{TASK}: preempted by scontrol requeue at {} into its starts (seed {seed}; \
             EMBER_SLURM_SEED replays one): the plain run's model byte for byte ({:.1} s)",
            moments.join(", "),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// `scancel` of the running job once it has a checkpoint: every process of the job
    /// (`mpirun`, the ranks, the batch shell) gone within [`CANCEL_BOUND`], and nothing left
    /// locked: the same run under plain `mpirun` goes on and ends with the plain run's model.
    fn cancelled(&self, reference: &Path) -> anyhow::Result<()> {
        let run = self.runs.join("cancelled");
        let id = self.submit("cancelled", &[], &self.ember)?;
        let deadline = Instant::now() + JOB_LIMIT;
        while !has_checkpoint(&run.join("checkpoints")) {
            ensure!(
                Instant::now() < deadline && !self.job(id)?.ended(),
                "the job to cancel ended or wrote no checkpoint: {:?}",
                self.job(id)?
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let before = job_processes(id);
        let cancelled = Instant::now();
        self.cluster.output("scancel", &[&id.to_string()])?;
        while !job_processes(id).is_empty() {
            let left = job_processes(id);
            ensure!(
                cancelled.elapsed() < CANCEL_BOUND,
                "{:?} of job {id} still run {CANCEL_BOUND:?} after scancel",
                left
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let gone = cancelled.elapsed();
        self.outside_slurm(&run, "mpirun -n 2 ember train after scancel")?;
        self.same_model_and_values(reference, &run)?;
        eprintln!(
            "{TASK}: scancel: every process of the job ({}) gone in {:.1} s (bound {} s); the \
             run directory not locked: the same command outside Slurm went on and ended with \
             the plain run's model byte for byte",
            names(&before),
            gone.as_secs_f64(),
            CANCEL_BOUND.as_secs()
        );
        Ok(())
    }

    /// The script's command, the run's log directory `run`, under plain `mpirun -n 2`
    /// outside Slurm (`what` names it in errors), to its successful end.
    fn outside_slurm(&self, run: &Path, what: &str) -> anyhow::Result<Ran> {
        let mut job = mpirun(2, Transport::SharedMemory);
        job.arg(&self.ember)
            .args(["train", "--resume-if-any", "--logdir"])
            .arg(run)
            .args(RUN_ARGS.split_whitespace());
        let ran = run_limited(job, what, &run.with_extension("log"))?;
        expect_success(&ran, what)?;
        Ok(ran)
    }

    /// Submits the script for the run `name` (its log directory `runs/<name>`, its output
    /// `runs/<name>.out`) with `extra` options, each rank `program` (`ember`, or a script that
    /// runs it); returns the job's id.
    fn submit(&self, name: &str, extra: &[&str], program: &Path) -> anyhow::Result<u32> {
        let run = self.runs.join(name);
        let out = self
            .cluster
            .command("sbatch")
            .arg("--parsable")
            .arg(format!("--output={}", run.with_extension("out").display()))
            .args(extra)
            .arg(&self.script)
            .env("RUN_DIR", &run)
            .env("EMBER", program)
            .env("EMBER_ARGS", RUN_ARGS)
            // Open MPI asks for consent to run as root; CI runs as root.
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .output()
            .context("starting sbatch")?;
        ensure!(
            out.status.success(),
            "sbatch failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let id = stdout.trim().split(';').next().unwrap_or_default();
        id.parse()
            .with_context(|| format!("sbatch printed `{}`, not a job id", stdout.trim()))
    }

    fn job(&self, id: u32) -> anyhow::Result<JobInfo> {
        let shown = self
            .cluster
            .output("scontrol", &["-o", "show", "job", &id.to_string()])?;
        let fields: BTreeMap<&str, &str> = shown
            .split_whitespace()
            .filter_map(|field| field.split_once('='))
            .collect();
        let field = |key: &str| {
            fields
                .get(key)
                .map(|value| value.to_string())
                .with_context(|| format!("scontrol shows no {key} for job {id}: {shown}"))
        };
        Ok(JobInfo {
            state: field("JobState")?,
            restarts: field("Restarts")?.parse()?,
            exit_code: field("ExitCode")?,
        })
    }

    /// Polls job `id` until `reached`; an error, with the job's output, past [`JOB_LIMIT`] or
    /// when it ended first.
    fn wait_for(
        &self,
        id: u32,
        what: &str,
        reached: impl Fn(&JobInfo) -> bool,
    ) -> anyhow::Result<JobInfo> {
        let deadline = Instant::now() + JOB_LIMIT;
        loop {
            let info = self.job(id)?;
            if reached(&info) {
                return Ok(info);
            }
            if info.ended() || Instant::now() > deadline {
                bail!("job {id} did not come {what}: {info:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What the job of run `name` printed, every start of it (the script appends).
    fn printed(&self, name: &str) -> anyhow::Result<String> {
        let path = self.runs.join(name).with_extension("out");
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }

    /// The job of run `name` completed with exit code 0 and ended with the reference run.
    fn same_as(&self, reference: &Path, name: &str, info: &JobInfo) -> anyhow::Result<()> {
        ensure!(
            info.state == "COMPLETED" && info.exit_code == "0:0",
            "the {name} job ended {info:?}:\n{}",
            self.printed(name).unwrap_or_default()
        );
        self.same_model_and_values(reference, &self.runs.join(name))
    }

    fn same_model_and_values(&self, reference: &Path, run: &Path) -> anyhow::Result<()> {
        Expected::of_dir(&self.ember, reference)?
            .check_dir(&self.ember, run)
            .context("against the plain mpirun run")
    }
}

fn has_checkpoint(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".ember"))
    })
}

/// The processes of job `id` (its environment names it), with their names: the batch shell,
/// `mpirun`, Open MPI's daemons, the ranks.
fn job_processes(id: u32) -> Vec<(u32, String)> {
    let marker = format!("SLURM_JOB_ID={id}");
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|byte| *byte == 0)
                    .any(|var| var == marker.as_bytes())
            })
        })
        .map(|pid| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (pid, name.trim().to_owned())
        })
        .collect()
}

/// `names` counted: `ember ×2, mpirun, slurm_script`.
fn names(processes: &[(u32, String)]) -> String {
    let mut counted: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, name) in processes {
        *counted.entry(name.as_str()).or_default() += 1;
    }
    counted
        .iter()
        .map(|(name, n)| match n {
            1 => (*name).to_owned(),
            n => format!("{name} ×{n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
