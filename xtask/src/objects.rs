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

use anyhow::{Context, ensure};

use crate::objects::clouds::Part;
use crate::objects::gcs::LocalRuns;
use crate::objects::scenarios::{
    RESUMED_ARGS, TRAIN_ARGS, one_error_line, resumed_from_the_bucket,
};
use crate::pins::{COMPAT_REQUIREMENTS, MINDINSIGHT_REQUIREMENTS};
use crate::process::{build, expect_success, kill_after, run_limited, skip_or_fail, target_dir};
use crate::readers::StoreReader;
use crate::scenario::{Env, Expected, KillAndResume, Local, Program, Store};
use crate::server::{
    LOOPBACK, S3_REQUIREMENTS, Server, free_port, moto, s3_env, s3_keys, wait_for_port,
};
use crate::venv::{VenvError, ensure_venv};

const TASK: &str = "objects";

/// The S3 part: moto's server at `endpoint`, its bucket `ember`, and runs trained locally.
struct S3<'a> {
    part: Part<'a>,
    endpoint: String,
    local: Local,
}

impl S3<'_> {
    /// Runs `check_s3.py` with `args` against the server at `endpoint`.
    fn script(&self, endpoint: &str, args: &[&str], what: &str) -> anyhow::Result<()> {
        let mut command = Command::new(self.part.python);
        command
            .arg(self.part.root.join("xtask/objects/check_s3.py"))
            .args(args);
        s3_env(&mut command, endpoint);
        let status = command
            .status()
            .with_context(|| format!("starting {what}"))?;
        ensure!(status.success(), "{what} failed ({status})");
        Ok(())
    }

    /// `ember` against the S3 server at `endpoint`, its staging where the part's is.
    fn store_at(&self, endpoint: &str) -> anyhow::Result<Store> {
        Store::new(
            "s3",
            &self.part.store.binary,
            &self.part.store.work,
            |command| {
                s3_env(command, endpoint);
            },
        )
    }

    /// TensorBoard's own S3 reader, pointed at the server at `endpoint`.
    fn reader(&self, endpoint: &str) -> StoreReader<'_> {
        StoreReader {
            cloud: "s3",
            python: self.part.python,
            env: crate::scenario::env_of(|command| s3_env(command, endpoint)),
        }
    }

    /// TensorBoard's S3 reader shows the run at `url` as the local run `local`.
    fn shows_as(&self, endpoint: &str, url: &str, local: &Path) -> anyhow::Result<()> {
        let log = self.part.store.log(url, "loader");
        let said = self
            .reader(endpoint)
            .loads(self.part.root, url, local, &log)?;
        eprintln!("{TASK}: {said}");
        Ok(())
    }

    /// `ember train` with `args` into the local directory `name` of the work directory.
    fn train_locally(&self, args: &[&str], name: &str) -> anyhow::Result<PathBuf> {
        let local = self.local.place(name);
        let mut train = self.local.ember(args);
        train.args(["--logdir", &local]);
        let ran = run_limited(
            train,
            "ember train (local)",
            &self.local.log(&local, "train"),
        )?;
        expect_success(&ran, "ember train into a local directory")?;
        Ok(PathBuf::from(local))
    }

    /// The same run trained locally, as what a run into the store must equal.
    fn expected_locally(&self, args: &[&str], name: &str) -> anyhow::Result<Expected> {
        let local = self.train_locally(args, name)?;
        Expected::of(&self.local, &local.to_string_lossy())
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

    let port = free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let _server = moto(&python, (LOOPBACK, port), &[], &work.join("moto.log"))?;
    let s3 = S3 {
        part: Part {
            root,
            python: &python,
            store: Store::new("s3", &ember, &work, |command| s3_env(command, &endpoint))?,
        },
        endpoint: endpoint.clone(),
        local: Local::new(&ember, &work),
    };
    s3.script(
        &endpoint,
        &["bucket", &endpoint, "ember"],
        "creating the bucket",
    )?;

    let every_kind = s3.expected_locally(TRAIN_ARGS, "local")?;
    scenarios::every_value(
        &s3.part,
        &s3.reader(&endpoint),
        "s3://ember/run",
        &every_kind,
    )?;
    mindinsight(&s3, &target)?;
    killed(&s3)?;
    scenarios::against(&s3.part.store, TASK)?;
    let resumed = resumed_in_the_bucket(&s3)?;
    stopped_past_its_lease(&s3, &resumed)?;
    resumed_for_mindinsight(&s3)?;
    restarted(&s3)?;
    refused(&s3)?;
    unreachable(&s3)?;
    let gcs_work = work.join("gcs");
    std::fs::create_dir_all(&gcs_work)?;
    let locals = LocalRuns {
        every_kind: &every_kind,
        resumed: &resumed,
    };
    gcs::run(root, &target, &ember, &gcs_work, &locals)?;
    let azure_work = work.join("azure");
    std::fs::create_dir_all(&azure_work)?;
    azure::run(root, &target, (&ember, &every_kind), &azure_work)
}

/// MindInsight through a local sync: `ember pull` of a MindInsight-format run, read by
/// MindInsight 2.3.1 as the same run written locally (scalars, histograms, images, lineage).
fn mindinsight(s3: &S3, target: &Path) -> anyhow::Result<()> {
    let Some(python) = mindinsight_reader(target)? else {
        return Ok(());
    };
    let args = [TRAIN_ARGS, &["--format", "mindinsight"]].concat();
    let base = s3.part.store.work.join("mi");
    std::fs::create_dir_all(&base)?;
    s3.train_locally(&args, "mi/local")?;
    let url = "s3://ember/mi";
    scenarios::train_into(&s3.part.store, &args, url, &s3.part.store.log(url, "train"))?;
    s3.part.store.pull(url, &base.join("pulled"))?;
    let status = Command::new(&python)
        .arg(s3.part.root.join("xtask/resume/check_mindinsight.py"))
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
fn killed(s3: &S3) -> anyhow::Result<()> {
    let url = "s3://ember/killed";
    let mut train = s3.part.store.ember(scenarios::KILLED_ARGS);
    train.args(["--logdir", url]);
    kill_after(
        train,
        &s3.part.store.log(url, "killed"),
        Duration::from_secs(6),
    )?;
    s3.script(&s3.endpoint, &["killed", url], "reading the killed run")
}

/// Kills of runs in the bucket resumed from the bucket: (`EMBER_RESUME_SEED` replays a seed).
const BUCKET_KILLS: usize = 10;

/// `ember train --logdir s3://…` killed with SIGKILL at [`BUCKET_KILLS`] seeded moments and
/// resumed from the bucket (`objects::scenarios::resumed_from_the_bucket`): each with the
/// uninterrupted run's model byte for byte and values; TensorBoard's own S3 reader shows the
/// last one as the local run. Returns the local run, which the Google part compares with too.
fn resumed_in_the_bucket(s3: &S3) -> anyhow::Result<Expected> {
    let expected = s3.expected_locally(RESUMED_ARGS, "resume-local")?;
    let seed = std::env::var("EMBER_RESUME_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_205u64);
    let walked = resumed_from_the_bucket(&s3.part.store, &expected, BUCKET_KILLS, seed)?;
    let last = walked.places.last().context("no run")?;
    s3.shows_as(&s3.endpoint, last, &expected.place())?;
    eprintln!(
        "{TASK}: {BUCKET_KILLS} runs in the bucket killed with SIGKILL (seed {seed}) and resumed \
         from it ({walked}): each with the uninterrupted run's model byte for byte and its \
         values in ember inspect, each step once; TensorBoard's S3 reader shows the last as the \
         local run"
    );
    Ok(expected)
}

/// A run into the bucket stopped with SIGSTOP past its lease while `--resume` takes it over
/// (`objects::scenarios::stopped_past_its_lease`); TensorBoard's S3 reader shows the run as the
/// uninterrupted one (`expected`) too.
fn stopped_past_its_lease(s3: &S3, expected: &Expected) -> anyhow::Result<()> {
    let url = "s3://ember/stopped";
    let checkpointed = || -> anyhow::Result<bool> {
        let keys = s3_keys(&s3.endpoint, "ember", "stopped/checkpoints/ckpt-")?;
        Ok(keys.iter().any(|key| key.ends_with(".ember")))
    };
    let lost = scenarios::stopped_past_its_lease(&s3.part.store, expected, (url, &checkpointed))?;
    s3.shows_as(&s3.endpoint, url, &expected.place())?;
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
/// resumed from the bucket, each the local uninterrupted run (model, values), then `ember
/// pull`ed: MindInsight 2.3.1 itself (`xtask/resume/check_mindinsight.py`) must show each
/// pulled run's steps once, with the values and lineage of the local run.
fn resumed_for_mindinsight(s3: &S3) -> anyhow::Result<()> {
    let args = [&RESUMED_ARGS[1..], &["--format", "mindinsight"]].concat();
    let Some(python) = mindinsight_reader(&target_dir(s3.part.root))? else {
        return Ok(());
    };
    // MindInsight's jobs are the directories of its base directory (where the store's env
    // pulls its runs): these runs alone.
    let store = Store::new(
        "s3",
        &s3.part.store.binary,
        &s3.part.store.work.join("mi-resumed"),
        |command| s3_env(command, &s3.endpoint),
    )?;
    let base = store.work.join("pulled");
    std::fs::create_dir_all(&base)?;
    let reference = base.join("local");
    let mut train = s3.local.ember(&[&["train"], &args[..]].concat());
    train.arg("--logdir").arg(&reference);
    expect_success(
        &run_limited(train, "ember train (local)", &base.join("local.log"))?,
        "the uninterrupted MindInsight run",
    )?;
    let expected = Expected::of(&s3.local, &reference.to_string_lossy())?;
    let walked = KillAndResume {
        program: Program::cli(&args),
        prefix: "mi-",
        kills: MI_BUCKET_KILLS,
        seed: 20_261_206,
        expected: Some(&expected),
    }
    .walk(&store)?;
    let jobs: Vec<&str> = walked
        .places
        .iter()
        .map(|url| url.rsplit('/').next().unwrap_or(url))
        .collect();
    let mut read = Command::new(&python);
    read.arg(s3.part.root.join("xtask/resume/check_mindinsight.py"))
        .arg(&base)
        .arg("local")
        .args(&jobs);
    let ran = run_limited(
        read,
        "MindInsight on the pulled runs",
        &store.work.join("mi-check.log"),
    )?;
    expect_success(
        &ran,
        "MindInsight reading the resumed runs pulled from the bucket",
    )?;
    eprintln!(
        "{TASK}: {MI_BUCKET_KILLS} MindInsight-format runs in the bucket killed with SIGKILL and \
         resumed from it ({walked}), pulled with ember pull: MindInsight 2.3.1 shows each step \
         once with the local uninterrupted run's values and lineage ({})",
        ran.output.trim().lines().last().unwrap_or_default()
    );
    Ok(())
}

/// Starts `xtask/objects/outage_proxy.py` on `proxy_port` in front of the server on `port`,
/// closed while `flag` exists, its output to `proxy_log`.
fn outage_proxy(
    s3: &S3,
    proxy_port: u16,
    port: u16,
    flag: &Path,
    proxy_log: &Path,
) -> anyhow::Result<Server> {
    let log = std::fs::File::create(proxy_log)?;
    let proxy = Server(
        Command::new(s3.part.python)
            .arg(s3.part.root.join("xtask/objects/outage_proxy.py"))
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

/// Moto on `port`, recording every request into `recording`, which `check_s3.py replay`
/// replays into the next server started on it.
fn recorded_moto(s3: &S3, port: u16, recording: &Path) -> anyhow::Result<Server> {
    let settings: [(&str, &Path); 2] = [
        ("MOTO_ENABLE_RECORDING", Path::new("True")),
        ("MOTO_RECORDER_FILEPATH", recording),
    ];
    let log = s3.part.store.work.join("moto-restarted.log");
    moto(s3.part.python, (LOOPBACK, port), &settings, &log)
}

/// `ember train` while its S3 server is killed 2 s into the run and started again 3 s later,
/// its state replayed from moto's recorder. A proxy in front keeps the endpoint closed from the
/// kill until the replay is done, as a store's endpoint is down until the store is back. The
/// uploads of that time fail, are tried again, and the run's log in the bucket is whole.
fn restarted(s3: &S3) -> anyhow::Result<()> {
    // About 20 s in a debug build on a quiet machine: still running when the server is back,
    // some 9 s in. A wide layer makes the steps slow and few (900), so that reading the run
    // back takes seconds, not minutes.
    const ARGS: &[&str] = &[
        "train",
        "--epochs",
        "20",
        "--hidden",
        "1024",
        "--devices",
        "2",
    ];
    let local = s3.train_locally(ARGS, "local-restart")?;
    let work = &s3.part.store.work;
    let port = free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let recording = work.join("moto-recording.jsonl");
    let mut server = recorded_moto(s3, port, &recording)?;
    s3.script(
        &endpoint,
        &["bucket", &endpoint, "ember"],
        "creating the bucket",
    )?;

    let proxy_port = free_port()?;
    let flag = work.join("store-down");
    let proxy_log = work.join("proxy.log");
    let _proxy = outage_proxy(s3, proxy_port, port, &flag, &proxy_log)?;
    let mut train = s3
        .store_at(&format!("http://127.0.0.1:{proxy_port}"))?
        .ember(ARGS);
    train.args(["--logdir", "s3://ember/restarted"]);
    let log = std::fs::File::create(work.join("restarted.log"))?;
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
    server = recorded_moto(s3, port, &recording)?;
    s3.script(
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
        std::fs::read_to_string(work.join("restarted.log")).unwrap_or_default()
    );
    let cuts = std::fs::read_to_string(&proxy_log)?
        .matches("while down")
        .count();
    ensure!(
        cuts > 0,
        "no upload met the restart: the run shipped nothing while the store was down"
    );
    s3.shows_as(&endpoint, "s3://ember/restarted", &local)?;
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
fn refused(s3: &S3) -> anyhow::Result<()> {
    let port = free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let _server = moto(
        s3.part.python,
        (LOOPBACK, port),
        &[("INITIAL_NO_AUTH_ACTION_COUNT", Path::new("0"))],
        &s3.part.store.work.join("moto-iam.log"),
    )?;
    let mut train = s3.store_at(&endpoint)?.ember(TRAIN_ARGS);
    train.args(["--logdir", "s3://ember/denied"]);
    let ran = run_limited(
        train,
        "ember train with refused credentials",
        &s3.part.store.work.join("denied.log"),
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
fn unreachable(s3: &S3) -> anyhow::Result<()> {
    let closed = format!("http://127.0.0.1:{}", free_port()?);
    let mut train = s3.store_at(&closed)?.ember(TRAIN_ARGS);
    train.args(["--logdir", "s3://ember/nowhere"]);
    let ran = run_limited(
        train,
        "ember train against no server",
        &s3.part.store.work.join("down.log"),
    )?;
    let line = one_error_line(&ran, "s3://ember/nowhere", "cannot reach")?;
    eprintln!("{TASK}: an endpoint that does not answer: {line}");
    Ok(())
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
