//! `cargo xtask objects`: `ember train --logdir s3://bucket/run` against a real S3 server on
//! loopback (moto in server mode), read back by TensorBoard's own S3 reader.
//!
//! 1. Makes (or reuses) a venv under the target directory with pinned `moto[server]`, `boto3`
//!    and the compat checker's TensorBoard, and builds `ember` with the `object-store` feature.
//! 2. Starts `python -m moto.server` on a free loopback port and creates a bucket.
//! 3. `ember train` into `s3://ember/run` and, with the same arguments, into a local directory:
//!    TensorBoard's S3 reader (`S3_ENDPOINT`, boto3) shows every scalar of the local run, equal,
//!    and every object in the bucket holds whole records only
//!    (`xtask/objects/check_s3.py`).
//!    `ember inspect --json --values s3://ember/run` gives the local run's values.
//! 4. A run killed with SIGKILL mid-training: every object left holds whole records, and the
//!    loader shows the loss at steps 1..N with none missing.
//! 5. The store cut away for five seconds mid-run by a proxy (`xtask/objects/outage_proxy.py`):
//!    nothing is lost.
//! 6. An endpoint that does not answer: `ember train` fails before training, in one line
//!    naming the log directory.
//!
//! Without Python or PyPI it skips in one line, a failure under `CI=true`.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::compat::{COMPAT_REQUIREMENTS, VenvError, ensure_venv, skip_or_fail, target_dir};
use crate::process::{build, expect_success, run_limited};

const TASK: &str = "objects";

/// The S3 server and client, pinned as resolved with Python 3.11, beside TensorBoard.
const S3_REQUIREMENTS: &[&str] = &[
    "tensorboard==2.21.0",
    "protobuf==7.36.2",
    "numpy==2.4.6",
    "pillow==12.0.0",
    "moto[server]==5.2.5",
    "boto3==1.44.8",
];

/// About five seconds in a debug build: segments shipped at intervals, then the rest at close.
const TRAIN_ARGS: &[&str] = &["train", "--epochs", "20", "--devices", "2"];

/// The moto server, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
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
    let log = std::fs::File::create(work.join("moto.log"))?;
    let _server = Server(
        Command::new(&python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting moto's S3 server")?,
    );
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        ensure!(
            started.elapsed() < Duration::from_secs(60),
            "moto's S3 server did not listen on {endpoint} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let script = root.join("xtask/objects/check_s3.py");
    let env = |command: &mut Command, endpoint: &str| {
        command
            .env("AWS_ACCESS_KEY_ID", "ember")
            .env("AWS_SECRET_ACCESS_KEY", "ember-secret")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .env("S3_ENDPOINT", endpoint)
            .env("TF_CPP_MIN_LOG_LEVEL", "3");
    };
    let check = |args: &[&str], what: &str| -> anyhow::Result<()> {
        let mut command = Command::new(&python);
        command.arg(&script).args(args);
        env(&mut command, &endpoint);
        let status = command
            .status()
            .with_context(|| format!("starting {what}"))?;
        ensure!(status.success(), "{what} failed ({status})");
        Ok(())
    };
    check(&["bucket", &endpoint, "ember"], "creating the bucket")?;

    // A run into the bucket and the same run on the local disk.
    let local = work.join("local");
    let mut train = Command::new(&ember);
    train.args(TRAIN_ARGS).arg("--logdir").arg(&local);
    expect_success(
        &run_limited(train, "ember train (local)", &work.join("local.log"))?,
        "ember train into a local directory",
    )?;
    let mut train = Command::new(&ember);
    train.args(TRAIN_ARGS).args(["--logdir", "s3://ember/run"]);
    env(&mut train, &endpoint);
    let ran = run_limited(train, "ember train --logdir s3://", &work.join("s3.log"))?;
    expect_success(&ran, "ember train --logdir s3://ember/run")?;
    let local_str = local.to_str().context("a path that is not UTF-8")?;
    check(
        &["compare", "s3://ember/run", local_str],
        "TensorBoard's S3 reader against the local run",
    )?;
    // ember's own reader of the URL: the same values as the local run.
    let mut inspect = Command::new(&ember);
    inspect.args(["inspect", "--json", "--values", "s3://ember/run"]);
    env(&mut inspect, &endpoint);
    let out = inspect.output().context("starting ember inspect")?;
    ensure!(
        out.status.success(),
        "ember inspect s3://ember/run failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let remote: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing ember inspect --json")?;
    crate::resume::same_values(
        &crate::process::inspect_json(&ember, &local)?,
        &remote,
        Path::new("s3://ember/run"),
    )?;
    eprintln!(
        "{TASK}: ember train --logdir s3://ember/run on a loopback S3 server ({:.1} s); ember \
         inspect of the URL gives the local run's values",
        ran.elapsed.as_secs_f64()
    );

    // Killed with SIGKILL mid-run.
    let mut train = Command::new(&ember);
    train
        .args([
            "train",
            "--epochs",
            "200",
            "--subset",
            "400",
            "--devices",
            "2",
        ])
        .args(["--logdir", "s3://ember/killed"]);
    env(&mut train, &endpoint);
    let log = std::fs::File::create(work.join("killed.log"))?;
    let mut child = train
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting ember train")?;
    std::thread::sleep(Duration::from_secs(6));
    ensure!(
        child.try_wait()?.is_none(),
        "the run to kill ended before it was killed"
    );
    child.kill()?;
    child.wait()?;
    check(&["killed", "s3://ember/killed"], "reading the killed run")?;

    // The store goes away for five seconds mid-run and comes back: nothing is lost.
    outage(&python, root, &ember, &work, port, &env, &check)?;

    // An endpoint nothing answers on: one line, before training.
    let closed = format!("http://127.0.0.1:{}", free_port()?);
    let mut train = Command::new(&ember);
    train
        .args(TRAIN_ARGS)
        .args(["--logdir", "s3://ember/nowhere"]);
    env(&mut train, &closed);
    let ran = run_limited(
        train,
        "ember train against no server",
        &work.join("down.log"),
    )?;
    ensure!(!ran.success, "ember train succeeded with no S3 server");
    let lines: Vec<&str> = ran
        .output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.len() != 1
        || !lines[0].starts_with("error: ")
        || !lines[0].contains("s3://ember/nowhere")
    {
        bail!(
            "a down endpoint must give one error line naming the log directory:\n{}",
            ran.output
        );
    }
    ensure!(
        !ran.output.contains("epoch 1/"),
        "training started although the store is down:\n{}",
        ran.output
    );
    eprintln!("{TASK}: an endpoint that does not answer: {}", lines[0]);
    Ok(())
}

/// `ember train` through a proxy that cuts the store away from 2 s to 7 s into the run: the
/// uploads of that time fail, are tried again, and the run's log in the bucket is whole.
fn outage(
    python: &Path,
    root: &Path,
    ember: &Path,
    work: &Path,
    port: u16,
    env: &dyn Fn(&mut Command, &str),
    check: &dyn Fn(&[&str], &str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    const ARGS: &[&str] = &["train", "--epochs", "100", "--devices", "2"];
    let local = work.join("local-outage");
    let mut train = Command::new(ember);
    train.args(ARGS).arg("--logdir").arg(&local);
    expect_success(
        &run_limited(train, "ember train (local)", &work.join("local-outage.log"))?,
        "ember train into a local directory",
    )?;

    let proxy_port = free_port()?;
    let flag = work.join("store-down");
    let proxy_log = work.join("proxy.log");
    let log = std::fs::File::create(&proxy_log)?;
    let _proxy = Server(
        Command::new(python)
            .arg(root.join("xtask/objects/outage_proxy.py"))
            .args([proxy_port.to_string(), port.to_string()])
            .arg(&flag)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the outage proxy")?,
    );
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", proxy_port)).is_err() {
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the outage proxy did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut train = Command::new(ember);
    train.args(ARGS).args(["--logdir", "s3://ember/outage"]);
    env(&mut train, &format!("http://127.0.0.1:{proxy_port}"));
    let log = std::fs::File::create(work.join("outage.log"))?;
    let mut child = train
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting ember train")?;
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(&flag, b"down")?;
    std::thread::sleep(Duration::from_secs(5));
    std::fs::remove_file(&flag)?;
    let status = child.wait()?;
    ensure!(
        status.success(),
        "ember train failed across the outage:\n{}",
        std::fs::read_to_string(work.join("outage.log")).unwrap_or_default()
    );
    let cuts = std::fs::read_to_string(&proxy_log)?
        .matches("while down")
        .count();
    ensure!(
        cuts > 0,
        "no upload met the outage: the run ended before it, or shipped nothing in it"
    );
    let local = local.to_str().context("a path that is not UTF-8")?;
    check(
        &["compare", "s3://ember/outage", local],
        "reading the run across the outage",
    )?;
    eprintln!(
        "{TASK}: the store cut away for 5 s mid-run ({cuts} connections cut or refused): nothing lost"
    );
    Ok(())
}
