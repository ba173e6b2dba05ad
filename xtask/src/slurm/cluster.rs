//! The cluster `cargo xtask slurm` submits to: `munged`, `slurmctld` and `slurmd` of one node,
//! this machine, started as root with everything under one directory, and stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

/// The name every line the task prints starts with.
pub(super) const TASK: &str = "slurm";

/// How long slurmctld waits between its checks of time limits (`PERIODIC_TIMEOUT`, compiled in).
const TIME_LIMIT_TICK: Duration = Duration::from_secs(30);

/// The daemons of a one-node cluster, stopped (with every job cancelled) when dropped.
pub(super) struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    pub(super) cores: usize,
    /// When slurmctld started: its time-limit checks come every [`TIME_LIMIT_TICK`] from then.
    controller_started: Instant,
    /// The pid files of the daemons started, in the order they were.
    pid_files: Vec<PathBuf>,
}

impl Cluster {
    pub(super) fn start(dir: &Path) -> anyhow::Result<Self> {
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut cluster = Self {
            dir: dir.to_path_buf(),
            conf: dir.join("slurm.conf"),
            cores,
            controller_started: Instant::now(),
            pid_files: Vec::new(),
        };
        let key = dir.join("munge.key");
        daemon(
            Command::new(sbin("mungekey"))
                .arg("--create")
                .arg("--keyfile")
                .arg(&key),
        )?;
        let mut munged = Command::new(sbin("munged"));
        munged
            .arg("--force")
            .arg(format!("--key-file={}", key.display()));
        for (flag, file) in [
            ("socket", "munge.sock"),
            ("log-file", "log/munged.log"),
            ("pid-file", "munged.pid"),
            ("seed-file", "munged.seed"),
        ] {
            munged.arg(format!("--{flag}={}", dir.join(file).display()));
        }
        daemon(&mut munged)?;
        cluster.pid_files.push(dir.join("munged.pid"));
        std::fs::write(&cluster.conf, slurm_conf(dir, &hostname()?, cores)?)?;
        daemon(Command::new(sbin("slurmctld")).arg("-f").arg(&cluster.conf))?;
        cluster.controller_started = Instant::now();
        cluster.pid_files.push(dir.join("slurmctld.pid"));
        daemon(Command::new(sbin("slurmd")).arg("-f").arg(&cluster.conf))?;
        cluster.pid_files.push(dir.join("slurmd.pid"));
        cluster.wait_for_idle_node()?;
        Ok(cluster)
    }

    /// A Slurm command (`sbatch`, `scontrol`, …) of this cluster.
    pub(super) fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }

    /// `program args`, its standard output; an error with its output when it fails.
    pub(super) fn output(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .command(program)
            .args(args)
            .output()
            .with_context(|| format!("starting {program}"))?;
        ensure!(
            out.status.success(),
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn wait_for_idle_node(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(state) = self.output("sinfo", &["-h", "-o", "%T"])
                && state.trim() == "idle"
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the node is not idle 30 s after slurmd started; see {}",
                    self.dir.join("log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until a job submitted now starts about `before` ahead of slurmctld's next check
    /// of time limits, so that a warning due at once is sent `before` into the job, not up to
    /// 30 s later.
    pub(super) fn wait_for_tick_phase(&self, before: Duration) {
        let tick = TIME_LIMIT_TICK.as_secs_f64();
        let phase = self.controller_started.elapsed().as_secs_f64() % tick;
        let aim = tick - before.as_secs_f64();
        let wait = (aim - phase).rem_euclid(tick);
        std::thread::sleep(Duration::from_secs_f64(wait));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.command("scancel").args(["--user", "root"]).status();
        for pid_file in self.pid_files.iter().rev() {
            let Some(pid) = std::fs::read_to_string(pid_file)
                .ok()
                .and_then(|text| text.trim().parse::<u32>().ok())
            else {
                continue;
            };
            stop(pid);
        }
    }
}

/// Stops the jobs and daemons an earlier run of the task left running in `dir` (killed before
/// it could stop them), which would hold the cluster's ports: each daemon by its pid file, and
/// only while that pid is still the daemon's.
pub(super) fn stop_left_over(dir: &Path) {
    // Its jobs first, while its controller can still end them.
    let _ = Command::new("scancel")
        .args(["--user", "root"])
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .stderr(Stdio::null())
        .status();
    for (pid_file, name) in [
        ("slurmd.pid", "slurmd"),
        ("slurmctld.pid", "slurmctld"),
        ("munged.pid", "munged"),
    ] {
        let Some(pid) = std::fs::read_to_string(dir.join(pid_file))
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == name {
            eprintln!("{TASK}: stopping the {name} an earlier run left (pid {pid})");
            stop(pid);
        }
    }
}

/// Ends the daemon `pid` this task started: SIGTERM, and SIGKILL after 10 s.
fn stop(pid: u32) {
    let pid_text = pid.to_string();
    let _ = Command::new("kill").args(["-TERM", &pid_text]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > deadline {
            let _ = Command::new("kill").args(["-KILL", &pid_text]).status();
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs a daemon's start command, which returns once the daemon has forked off.
fn daemon(command: &mut Command) -> anyhow::Result<()> {
    let what = format!("{command:?}");
    let out = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {what}"))?;
    ensure!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// A daemon's program: on `PATH`, or in `/usr/sbin`, where Debian puts it and a non-login
/// shell's `PATH` may not look.
pub(super) fn sbin(tool: &str) -> PathBuf {
    let installed = Path::new("/usr/sbin").join(tool);
    if !crate::process::on_path(tool) && installed.is_file() {
        installed
    } else {
        PathBuf::from(tool)
    }
}

fn hostname() -> anyhow::Result<String> {
    let out = Command::new("hostname").arg("-s").output()?;
    let name = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    ensure!(!name.is_empty(), "hostname -s printed nothing");
    Ok(name)
}

/// The cluster's `slurm.conf`: this machine as its one node, with its cores and half its
/// memory; everything Slurm keeps under `dir`.
fn slurm_conf(dir: &Path, host: &str, cores: usize) -> anyhow::Result<String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .context("no MemTotal in /proc/meminfo")?;
    let d = dir.display();
    Ok(format!(
        "ClusterName=ember-check\n\
         SlurmctldHost={host}\n\
         SlurmUser=root\n\
         SlurmdUser=root\n\
         AuthType=auth/munge\n\
         CredType=cred/munge\n\
         # A requeued job may start again cred_expire seconds after it was stopped (120 by default).\n\
         AuthInfo=socket={d}/munge.sock,cred_expire=5\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         SchedulerType=sched/backfill\n\
         SchedulerParameters=sched_interval=1,bf_interval=1\n\
         SelectType=select/cons_tres\n\
         SelectTypeParameters=CR_Core\n\
         MpiDefault=none\n\
         JobAcctGatherType=jobacct_gather/none\n\
         MailProg=/bin/true\n\
         ReturnToService=2\n\
         KillWait=10\n\
         MinJobAge=600\n\
         StateSaveLocation={d}/state\n\
         SlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/slurmctld.pid\n\
         SlurmdPidFile={d}/slurmd.pid\n\
         SlurmctldLogFile={d}/log/slurmctld.log\n\
         SlurmdLogFile={d}/log/slurmd.log\n\
         SlurmctldPort=16817\n\
         SlurmdPort=16818\n\
         NodeName={host} CPUs={cores} RealMemory={} State=UNKNOWN\n\
         PartitionName=check Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
        total_kib / 1024 / 2
    ))
}
