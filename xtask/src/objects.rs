//! `cargo xtask objects`: `ember train --logdir s3://bucket/run` against a real S3 server on
//! loopback (moto in server mode), read back by TensorBoard's own S3 reader; then `gs://`
//! against fake-gcs-server and `az://` against Azurite, read back by TensorBoard through fsspec.
//!
//! 1. Makes (or reuses) a venv under the target directory with pinned `moto[server]`, `boto3`
//!    and the compat checker's TensorBoard, and builds `ember` with the `object-store` feature.
//! 2. Starts `python -m moto.server` on a free loopback port and creates a bucket.
//! 3. `ember train` into `s3://ember/run` and, with the same arguments, into a local directory:
//!    TensorBoard's S3 reader (`S3_ENDPOINT`, boto3) shows every value of every kind of the
//!    local run, equal; the projector's files are in the bucket as written; every segment holds
//!    whole records only (`xtask/objects/check_s3.py`). `ember inspect --json --values
//!    s3://ember/run` gives the local run's values.
//! 4. The same in MindInsight's format, through a local sync: `ember pull` of the URL, read by
//!    MindInsight 2.3.1 as the local run (`xtask/resume/check_mindinsight.py`).
//! 5. A run killed with SIGKILL mid-training: every object left holds whole records, and the
//!    loader shows the loss at steps 1..N with none missing.
//! 6. The S3 server killed mid-run and started again a few seconds later (moto's recorder
//!    replays its state), behind a proxy that keeps the endpoint closed until it is back
//!    (`xtask/objects/outage_proxy.py`): nothing is lost.
//! 7. Credentials the server does not know (moto with its IAM checks on): `ember train` fails
//!    at once, in one line saying access was refused, naming the bucket.
//! 8. An endpoint that does not answer: `ember train` fails before training, in one line
//!    naming the log directory.
//! 9. A run killed with SIGKILL, then `ember push`: what its staging directory held reaches the
//!    bucket, every step once, and no staging directory is left. One killed, resumed to its end,
//!    then pushed: nothing the resume rolled back comes back.
//! 10. Two runs into one URL at once, in both formats: both runs' summary files are there.
//! 11. Runs with their checkpoints, command line and model in the bucket, killed with SIGKILL at
//!     seeded moments and resumed from it (`ember train --resume s3://…`): each ends with the
//!     uninterrupted run's model byte for byte (`ember pull`) and its values in `ember inspect`,
//!     each step once; TensorBoard's S3 reader shows the last as the local run. Then the same
//!     in MindInsight's format, pulled and read by MindInsight 2.3.1. Then a run stopped with
//!     SIGSTOP past its lease while `--resume` takes the run over and trains to the end: sent
//!     SIGCONT, it fails with the lost lease's message, and the pulled run is the
//!     uninterrupted one (its model, each step once).
//! 12. The write, read, kill (with `ember push`, and resumed), two-at-once and
//!     resumed-from-the-bucket scenarios against fake-gcs-server (`objects/gcs.rs`), then the
//!     same and refused keys against Azurite, the Azure Storage emulator from the npm registry
//!     (`objects/azure.rs`).
//! 13. TensorBoard itself on each cloud (`objects/clouds.rs`): its loader (its S3 reader; fsspec's
//!     gcsfs and adlfs) shows every value of the `s3://`, `gs://` and `az://` runs as the local
//!     run, and its web page in headless Chromium draws their `train/loss`, each step once.
//!
//! Without Python or PyPI it skips in one line, a failure under `CI=true`.

pub(crate) mod azure;
pub(crate) mod bench;
pub(crate) mod clouds;
pub(crate) mod gcs;
pub(crate) mod scenarios;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::objects::clouds::{Reader, env_of};
use crate::objects::gcs::LocalRuns;
use crate::objects::scenarios::{
    Kills, RESUMED_ARGS, after_kills, inspect, killed_and_resumed, pull, resumed_from_the_bucket,
    train_into,
};
use crate::pins::{COMPAT_REQUIREMENTS, MINDINSIGHT_REQUIREMENTS};
use crate::process::{
    Ran, build, expect_success, kill_after, run_limited, skip_or_fail, target_dir,
};
use crate::server::{
    LOOPBACK, S3_REQUIREMENTS, Server, free_port, moto, s3_env, s3_keys, wait_for_port,
};
use crate::venv::{VenvError, ensure_venv};

const TASK: &str = "objects";

/// About five seconds in a debug build: segments shipped at intervals, then the rest at close.
const TRAIN_ARGS: &[&str] = &["train", "--epochs", "20", "--devices", "2"];

/// The paths and programs every scenario uses.
struct Check<'a> {
    root: &'a Path,
    python: &'a Path,
    ember: &'a Path,
    work: &'a Path,
}

impl Check<'_> {
    /// Runs `check_s3.py` with `args` against `endpoint`.
    fn script(&self, endpoint: &str, args: &[&str], what: &str) -> anyhow::Result<()> {
        let mut command = Command::new(self.python);
        command
            .arg(self.root.join("xtask/objects/check_s3.py"))
            .args(args);
        s3_env(&mut command, endpoint);
        let status = command
            .status()
            .with_context(|| format!("starting {what}"))?;
        ensure!(status.success(), "{what} failed ({status})");
        Ok(())
    }

    /// `ember` with `args`, against `endpoint`.
    fn ember(&self, endpoint: &str, args: &[&str]) -> Command {
        let mut command = Command::new(self.ember);
        command.args(args);
        s3_env(&mut command, endpoint);
        command
    }

    /// `ember train` with `args` into the local directory `name` of the work directory.
    fn train_locally(&self, args: &[&str], name: &str) -> anyhow::Result<PathBuf> {
        let local = self.work.join(name);
        let mut train = Command::new(self.ember);
        train.args(args).arg("--logdir").arg(&local);
        expect_success(
            &run_limited(
                train,
                "ember train (local)",
                &self.work.join(format!("{name}.log")),
            )?,
            "ember train into a local directory",
        )?;
        Ok(local)
    }
}

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    debug_assert_eq!(&S3_REQUIREMENTS[..4], COMPAT_REQUIREMENTS);
    let target = target_dir(root);
    let python = match ensure_venv(&target.join("s3-venv"), S3_REQUIREMENTS) {
        Ok(python) => python,
        Err(VenvError::Unavailable(why)) => return skip_or_fail(TASK, &why),
        Err(VenvError::Failed(e)) => return Err(e),
    };
    build(
        root,
        &["build", "-p", "ember-cli", "--features", "object-store"],
    )?;
    let ember = target.join("debug").join("ember");
    let work = target.join("objects-check");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    let check = Check {
        root,
        python: &python,
        ember: &ember,
        work: &work,
    };

    let port = free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let _server = moto(&python, (LOOPBACK, port), &[], &work.join("moto.log"))?;
    check.script(
        &endpoint,
        &["bucket", &endpoint, "ember"],
        "creating the bucket",
    )?;

    let every_kind_local = every_kind(&check, &endpoint)?;
    mindinsight(&check, &target, &endpoint)?;
    killed(&check, &endpoint)?;
    let s3 = |args: &[&str]| {
        let mut command = check.ember(&endpoint, args);
        command.env("TMPDIR", work.join("tmp"));
        command
    };
    crate::objects::scenarios::against(&s3, "s3", &work, TASK)?;
    let resumed_local = resumed_in_the_bucket(&check, &endpoint)?;
    stopped_past_its_lease(&check, &endpoint, &resumed_local)?;
    resumed_for_mindinsight(&check, &endpoint)?;
    restarted(&check)?;
    refused(&check)?;
    unreachable(&check)?;
    let gcs_work = work.join("gcs");
    std::fs::create_dir_all(&gcs_work)?;
    let locals = LocalRuns {
        every_kind: &every_kind_local,
        resumed: &resumed_local,
    };
    crate::objects::gcs::run(root, &target, &ember, &gcs_work, &locals)?;
    let azure_work = work.join("azure");
    std::fs::create_dir_all(&azure_work)?;
    crate::objects::azure::run(root, &target, &ember, &azure_work)
}

/// A run into the bucket and the same run on the local disk: every value of every kind in
/// TensorBoard's S3 reader and in `ember inspect` of the URL, and its `train/loss` in
/// TensorBoard's page; returns the local run.
fn every_kind(check: &Check, endpoint: &str) -> anyhow::Result<PathBuf> {
    let local = check.train_locally(TRAIN_ARGS, "local")?;
    let took = train_into(
        &|args| check.ember(endpoint, args),
        TRAIN_ARGS,
        "s3://ember/run",
        &check.work.join("s3.log"),
    )?;
    let local_str = local.to_str().context("a path that is not UTF-8")?;
    check.script(
        endpoint,
        &["compare", "s3://ember/run", local_str],
        "TensorBoard's S3 reader against the local run",
    )?;
    let remote = inspect(&|args| check.ember(endpoint, args), "s3://ember/run")?;
    crate::runs::same_values(
        &crate::process::inspect_json(check.ember, &local)?,
        &remote,
        Path::new("s3://ember/run"),
    )?;
    eprintln!(
        "{TASK}: ember train --logdir s3://ember/run on a loopback S3 server ({:.1} s); ember \
         inspect of the URL gives the local run's values",
        took.as_secs_f64()
    );
    let reader = Reader {
        cloud: "s3",
        python: check.python,
        env: env_of(|command| s3_env(command, endpoint)),
    };
    reader.page_shows(check.root, check.ember, "s3://ember/run", &local)?;
    Ok(local)
}

/// MindInsight through a local sync: `ember pull` of a MindInsight-format run, read by
/// MindInsight 2.3.1 as the same run written locally (scalars, histograms, images, lineage).
fn mindinsight(check: &Check, target: &Path, endpoint: &str) -> anyhow::Result<()> {
    let Some(python) = mindinsight_reader(target)? else {
        return Ok(());
    };
    let args: Vec<&str> = TRAIN_ARGS
        .iter()
        .copied()
        .chain(["--format", "mindinsight"])
        .collect();
    let base = check.work.join("mi");
    std::fs::create_dir_all(&base)?;
    check.train_locally(&args, "mi/local")?;
    let mut train = check.ember(endpoint, &args);
    train.args(["--logdir", "s3://ember/mi"]);
    let ran = run_limited(
        train,
        "ember train --format mindinsight",
        &check.work.join("mi.log"),
    )?;
    expect_success(
        &ran,
        "ember train --format mindinsight --logdir s3://ember/mi",
    )?;
    let pulled = base.join("pulled");
    pull(
        &|args| check.ember(endpoint, args),
        "s3://ember/mi",
        &pulled,
    )?;
    let status = Command::new(&python)
        .arg(check.root.join("xtask/resume/check_mindinsight.py"))
        .arg(&base)
        .args(["local", "pulled"])
        .status()
        .context("starting check_mindinsight.py")?;
    ensure!(
        status.success(),
        "MindInsight does not read the pulled run as the local one ({status})"
    );
    eprintln!(
        "{TASK}: a MindInsight-format run in the bucket, brought back by ember pull, reads in \
         MindInsight 2.3.1 as the same run written locally"
    );
    Ok(())
}

/// The MindInsight venv's Python; `None` (said in one line) where it cannot be made outside CI.
fn mindinsight_reader(target: &Path) -> anyhow::Result<Option<PathBuf>> {
    match ensure_venv(&target.join("compat-mi-venv"), MINDINSIGHT_REQUIREMENTS) {
        Ok(python) => Ok(Some(python)),
        Err(VenvError::Unavailable(why)) => {
            skip_or_fail(TASK, &format!("the MindInsight reader: {why}"))?;
            Ok(None)
        }
        Err(VenvError::Failed(e)) => Err(e),
    }
}

/// Killed with SIGKILL mid-run: only whole records in the bucket, no step missing.
fn killed(check: &Check, endpoint: &str) -> anyhow::Result<()> {
    // Far longer than the six seconds it gets, on any machine: the kill lands mid-run.
    let mut train = check.ember(
        endpoint,
        &[
            "train",
            "--epochs",
            "5000",
            "--subset",
            "400",
            "--devices",
            "2",
        ],
    );
    train.args(["--logdir", "s3://ember/killed"]);
    kill_after(
        train,
        &check.work.join("killed.log"),
        Duration::from_secs(6),
    )?;
    check.script(
        endpoint,
        &["killed", "s3://ember/killed"],
        "reading the killed run",
    )
}

/// Kills of runs in the bucket resumed from the bucket: (`EMBER_RESUME_SEED` replays a seed).
const BUCKET_KILLS: usize = 10;

/// `ember train --logdir s3://…` killed with SIGKILL at [`BUCKET_KILLS`] seeded moments and
/// resumed from the bucket (`objects::scenarios::resumed_from_the_bucket`): each with the
/// uninterrupted run's model byte for byte and values; TensorBoard's own S3 reader shows the
/// last one as the local run. Returns the local run, which the Google part compares with too.
fn resumed_in_the_bucket(check: &Check, endpoint: &str) -> anyhow::Result<PathBuf> {
    let local = check.train_locally(RESUMED_ARGS, "resume-local")?;
    let seed = std::env::var("EMBER_RESUME_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_205u64);
    let kills = Kills {
        count: BUCKET_KILLS,
        seed,
        local: &local,
    };
    let ember = |args: &[&str]| check.ember(endpoint, args);
    let (last, after) = resumed_from_the_bucket(&ember, check.ember, "s3", check.work, &kills)?;
    let local_str = local.to_str().context("a path that is not UTF-8")?;
    check.script(
        endpoint,
        &["compare", &last, local_str],
        "TensorBoard's S3 reader against the local run",
    )?;
    eprintln!(
        "{TASK}: {BUCKET_KILLS} runs in the bucket killed with SIGKILL (seed {seed}) and resumed \
         from it ({}): each with the uninterrupted run's model byte for byte and its values in \
         ember inspect, each step once; TensorBoard's S3 reader shows the last as the local run",
        after_kills(&after)
    );
    Ok(local)
}

/// A run into the bucket stopped with SIGSTOP past its lease while `--resume` takes it over
/// (`objects::scenarios::stopped_past_its_lease`); TensorBoard's S3 reader shows the run as the
/// uninterrupted one (`local`) too.
fn stopped_past_its_lease(check: &Check, endpoint: &str, local: &Path) -> anyhow::Result<()> {
    let url = "s3://ember/stopped";
    let checkpointed = || -> anyhow::Result<bool> {
        let keys = s3_keys(endpoint, "ember", "stopped/checkpoints/ckpt-")?;
        Ok(keys.iter().any(|key| key.ends_with(".ember")))
    };
    let ember = |args: &[&str]| check.ember(endpoint, args);
    let lost = crate::objects::scenarios::stopped_past_its_lease(
        &ember,
        (check.ember, local),
        (url, &checkpointed),
        check.work,
    )?;
    let local = local.to_str().context("a path that is not UTF-8")?;
    check.script(
        endpoint,
        &["compare", url, local],
        "TensorBoard's S3 reader against the local run",
    )?;
    eprintln!(
        "{TASK}: a run stopped with SIGSTOP past its lease, taken over by --resume and trained \
         to its end, then continued: it fails ({lost}); the run has the uninterrupted run's \
         model and values, each step once, in ember inspect and TensorBoard's S3 reader"
    );
    Ok(())
}

/// MindInsight-format runs in the bucket killed at [`MI_BUCKET_KILLS`] seeded moments.
const MI_BUCKET_KILLS: usize = 3;

/// `ember train --format mindinsight --logdir s3://…` killed with SIGKILL at seeded moments and
/// resumed from the bucket, then `ember pull`ed: MindInsight 2.3.1 itself
/// (`xtask/resume/check_mindinsight.py`) must show each pulled run's steps once, with the values
/// and lineage of the same run trained locally without a break.
fn resumed_for_mindinsight(check: &Check, endpoint: &str) -> anyhow::Result<()> {
    let args: Vec<&str> = RESUMED_ARGS
        .iter()
        .copied()
        .chain(["--format", "mindinsight"])
        .collect();
    let Some(python) = mindinsight_reader(&target_dir(check.root))? else {
        return Ok(());
    };
    // MindInsight's jobs are the directories of its base directory: these runs alone.
    let base = check.work.join("mi-resumed");
    std::fs::create_dir_all(&base)?;
    check.train_locally(&args, "mi-resumed/reference")?;
    let mut reference = check.ember(endpoint, &args);
    reference.args(["--logdir", "s3://ember/mi-reference"]);
    let ran = run_limited(
        reference,
        "ember train --format mindinsight --logdir s3:// (reference)",
        &check.work.join("mi-reference.log"),
    )?;
    expect_success(&ran, "the uninterrupted MindInsight run into the bucket")?;
    let mut rng = crate::runs::XorShift(20_261_206);
    let mut jobs = Vec::new();
    for kill in 0..MI_BUCKET_KILLS {
        let job = format!("resumed-{kill:02}");
        let url = format!("s3://ember/mi-{job}");
        let run = check.work.join(format!("mi-{job}"));
        let at = ran.elapsed.mul_f64(rng.unit());
        let ember = |args: &[&str]| check.ember(endpoint, args);
        killed_and_resumed(&ember, &args, &url, &run, at)?;
        pull(&ember, &url, &base.join(&job))?;
        jobs.push(job);
    }
    let mut read = Command::new(&python);
    read.arg(check.root.join("xtask/resume/check_mindinsight.py"))
        .arg(&base)
        .arg("reference")
        .args(&jobs);
    let ran = run_limited(
        read,
        "MindInsight on the pulled runs",
        &check.work.join("mi-check.log"),
    )?;
    expect_success(
        &ran,
        "MindInsight reading the resumed runs pulled from the bucket",
    )?;
    eprintln!(
        "{TASK}: {MI_BUCKET_KILLS} MindInsight-format runs in the bucket killed with SIGKILL and \
         resumed from it, pulled with ember pull: MindInsight 2.3.1 shows each step once with the \
         local uninterrupted run's values and lineage ({})",
        ran.output.trim().lines().last().unwrap_or_default()
    );
    Ok(())
}

/// Starts `xtask/objects/outage_proxy.py` on `proxy_port` in front of the server on `port`,
/// closed while `flag` exists, its output to `proxy_log`.
fn outage_proxy(
    check: &Check,
    proxy_port: u16,
    port: u16,
    flag: &Path,
    proxy_log: &Path,
) -> anyhow::Result<Server> {
    let log = std::fs::File::create(proxy_log)?;
    let proxy = Server(
        Command::new(check.python)
            .arg(check.root.join("xtask/objects/outage_proxy.py"))
            .args([proxy_port.to_string(), port.to_string()])
            .arg(flag)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the outage proxy")?,
    );
    wait_for_port(proxy_port, "the outage proxy")?;
    Ok(proxy)
}

/// `ember train` while its S3 server is killed 2 s into the run and started again 3 s later,
/// its state replayed from moto's recorder. A proxy in front keeps the endpoint closed from the
/// kill until the replay is done, as a store's endpoint is down until the store is back. The
/// uploads of that time fail, are tried again, and the run's log in the bucket is whole.
/// Ends the JSON-lines file at `path` with its last whole row: a last row written whole but
/// for its newline gets it, a torn one is cut off.
fn whole_rows_only(path: &Path) -> anyhow::Result<()> {
    let mut bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let lines_end = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |at| at + 1);
    if lines_end == bytes.len() {
        return Ok(());
    }
    if serde_json::from_slice::<serde_json::Value>(&bytes[lines_end..]).is_ok() {
        bytes.push(b'\n');
    } else {
        bytes.truncate(lines_end);
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn restarted(check: &Check) -> anyhow::Result<()> {
    // About 35 s on a quiet machine: still running when the server is back, some 9 s in.
    const ARGS: &[&str] = &["train", "--epochs", "300", "--devices", "2"];
    let local = check.train_locally(ARGS, "local-restart")?;
    let port = free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let recording = check.work.join("moto-recording.jsonl");
    let settings: [(&str, &Path); 2] = [
        ("MOTO_ENABLE_RECORDING", Path::new("True")),
        ("MOTO_RECORDER_FILEPATH", &recording),
    ];
    let moto_log = check.work.join("moto-restarted.log");
    let mut server = moto(check.python, (LOOPBACK, port), &settings, &moto_log)?;
    check.script(
        &endpoint,
        &["bucket", &endpoint, "ember"],
        "creating the bucket",
    )?;

    let proxy_port = free_port()?;
    let flag = check.work.join("store-down");
    let proxy_log = check.work.join("proxy.log");
    let _proxy = outage_proxy(check, proxy_port, port, &flag, &proxy_log)?;
    let mut train = check.ember(&format!("http://127.0.0.1:{proxy_port}"), ARGS);
    train.args(["--logdir", "s3://ember/restarted"]);
    let log = std::fs::File::create(check.work.join("restarted.log"))?;
    let mut child = train
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting ember train")?;
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(&flag, b"down")?;
    drop(server);
    let stopped = Instant::now();
    // Killed mid-write, moto can leave its recording's last row torn, which the next server
    // would append to and its replay refuse: what a crashed store keeps is its whole rows.
    whole_rows_only(&recording)?;
    std::thread::sleep(Duration::from_secs(3));
    server = moto(check.python, (LOOPBACK, port), &settings, &moto_log)?;
    check.script(
        &endpoint,
        &["replay", &endpoint],
        "replaying moto's recording",
    )?;
    let down_for = stopped.elapsed();
    ensure!(
        child.try_wait()?.is_none(),
        "the run ended before its store came back: nothing was shipped across the restart"
    );
    std::fs::remove_file(&flag)?;
    let status = child.wait()?;
    ensure!(
        status.success(),
        "ember train failed across the restart:\n{}",
        std::fs::read_to_string(check.work.join("restarted.log")).unwrap_or_default()
    );
    let cuts = std::fs::read_to_string(&proxy_log)?
        .matches("while down")
        .count();
    ensure!(
        cuts > 0,
        "no upload met the restart: the run shipped nothing while the store was down"
    );
    let local = local.to_str().context("a path that is not UTF-8")?;
    check.script(
        &endpoint,
        &["compare", "s3://ember/restarted", local],
        "reading the run across the restart",
    )?;
    drop(server);
    eprintln!(
        "{TASK}: the S3 server killed mid-run and started again {:.1} s later ({cuts} \
         connections cut or refused meanwhile): nothing lost",
        down_for.as_secs_f64()
    );
    Ok(())
}

/// A server that checks credentials (moto with its IAM checks from the first request) and
/// does not know ember's: one line, at once, saying access was refused and naming the bucket.
fn refused(check: &Check) -> anyhow::Result<()> {
    let port = free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let _server = moto(
        check.python,
        (LOOPBACK, port),
        &[("INITIAL_NO_AUTH_ACTION_COUNT", Path::new("0"))],
        &check.work.join("moto-iam.log"),
    )?;
    let mut train = check.ember(&endpoint, TRAIN_ARGS);
    train.args(["--logdir", "s3://ember/denied"]);
    let ran = run_limited(
        train,
        "ember train with refused credentials",
        &check.work.join("denied.log"),
    )?;
    let line = one_error_line(&ran, "s3://ember/denied", "refused")?;
    ensure!(
        ran.elapsed < Duration::from_secs(10),
        "refused credentials took {:.1} s to report: they must not be retried",
        ran.elapsed.as_secs_f64()
    );
    eprintln!(
        "{TASK}: credentials the store refuses ({:.2} s): {line}",
        ran.elapsed.as_secs_f64()
    );
    Ok(())
}

/// An endpoint nothing answers on: one line, before training.
fn unreachable(check: &Check) -> anyhow::Result<()> {
    let closed = format!("http://127.0.0.1:{}", free_port()?);
    let mut train = check.ember(&closed, TRAIN_ARGS);
    train.args(["--logdir", "s3://ember/nowhere"]);
    let ran = run_limited(
        train,
        "ember train against no server",
        &check.work.join("down.log"),
    )?;
    let line = one_error_line(&ran, "s3://ember/nowhere", "cannot reach")?;
    eprintln!("{TASK}: an endpoint that does not answer: {line}");
    Ok(())
}

/// The one line a failed `ember train` printed, which names `url` and says `what`, before any
/// training.
fn one_error_line(ran: &Ran, url: &str, what: &str) -> anyhow::Result<String> {
    ensure!(!ran.success, "ember train into {url} succeeded");
    let lines: Vec<&str> = ran
        .output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.len() != 1
        || !lines[0].starts_with("error: ")
        || !lines[0].contains(url)
        || !lines[0].contains(what)
    {
        bail!(
            "expected one error line naming {url} and saying `{what}`:\n{}",
            ran.output
        );
    }
    ensure!(
        !ran.output.contains("epoch 1/"),
        "training started although the store cannot be used:\n{}",
        ran.output
    );
    Ok(lines[0].to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_recording_ends_with_its_last_whole_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recording.jsonl");
        for (written, kept) in [
            ("{\"a\":1}\n{\"b\":2}", "{\"a\":1}\n{\"b\":2}\n"),
            ("{\"a\":1}\n{\"b\":", "{\"a\":1}\n"),
            ("{\"a\":1}\n", "{\"a\":1}\n"),
            ("{\"a\"", ""),
        ] {
            std::fs::write(&path, written).unwrap();
            super::whole_rows_only(&path).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), kept, "{written:?}");
        }
    }
}
