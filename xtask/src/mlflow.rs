//! `cargo xtask mlflow`: ember's runs read back from a real MLflow tracking server.
//!
//! Starts `mlflow server` (pinned: `pins::MLFLOW_REQUIREMENTS`, in a venv under the target
//! directory) on loopback with a SQLite store, then:
//!
//! 1. `ember train --mlflow URI` into a named experiment (`MLFLOW_EXPERIMENT_NAME`): MLflow's
//!    own Python client (`xtask/mlflow/check_mlflow.py`) returns every scalar of the log as a
//!    metric, each step once with the log's value, the run's hyper-parameters as params; the
//!    run's page in headless Chromium (`xtask/mlflow/check_mlflow_page.py`) draws the loss
//!    chart, each step once with the log's value (a screenshot under `mlflow-check/screenshots`);
//! 2. a URI that does not answer and an experiment that does not exist: each a clear error
//!    before training, no event file written;
//! 3. [`KILLS`] seeded SIGKILLs, each run resumed (the harness's [`KillAndResume`]): every run's
//!    MLflow metrics hold each step once, the log's values;
//! 4. a library user's one call (`SummaryRecordBuilder::mlflow_from_env`): the logging example
//!    built without Burn, and burn-train's `SummaryLogger`, each read back the same way;
//! 5. the server killed mid-run and started again [`OUTAGE`] later: the run goes on meanwhile,
//!    and MLflow holds every step once when it ends;
//! 6. SIGTERM while the server is down: the run exits with 143 within 15 s (its close's wait
//!    for the server cut to 5 s), what the server did not take left in the spool; resumed once
//!    the server is back, MLflow holds every step once;
//! 7. a server behind MLflow's basic-auth app (a server of its own): a run given MLflow's
//!    credential variables is read back the same way, a wrong password is refused before
//!    training, and the password is in no output and no file of either run;
//! 8. `ember train` (built with `--features mpi`) as two ranks of `mpirun`: the job is one
//!    MLflow run, which holds each step of the job's log once.
//!
//! Without Python or PyPI it skips in one line (a failure under `CI=true`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde_json::json;

use crate::pins::MLFLOW_REQUIREMENTS;
use crate::process::{build, expect_success, run_limited, skip_or_fail, target_dir};
use crate::scenario::{AfterKill, Env, KillAndResume, Local, Program};
use crate::server::{LOOPBACK, free_port};
use crate::venv::{VenvError, ensure_venv};

const TASK: &str = "mlflow";

/// Kills of the kill-and-resume scenario.
const KILLS: usize = 10;
/// The kill moments' seed.
const SEED: u64 = 20_261_207;
/// How long the server is away in the outage scenario.
const OUTAGE: Duration = Duration::from_secs(30);
/// The runs of scenarios 1 and 3: 20 epochs of 400 digits on 2 workers (120 steps), a
/// checkpoint every 5 steps; about 2 s in a debug build.
const TRAIN: &[&str] = &[
    "--epochs",
    "20",
    "--subset",
    "400",
    "--devices",
    "2",
    "--checkpoint-every",
    "5",
];

mod bench;
mod server;

use server::Mlflow;

/// What `cargo xtask mlflow` does.
pub(crate) enum Mode {
    /// The scenarios.
    Scenarios,
    /// The side-by-side benchmark, this many rounds.
    Bench(usize),
    /// The Trainer's logging-overhead pairs, sink off and on, this many.
    Overhead(usize),
}

/// The scenarios, or a benchmark.
pub(crate) fn run(root: &Path, mode: Mode) -> anyhow::Result<()> {
    let bench_rounds = match mode {
        Mode::Bench(rounds) => Some(rounds),
        _ => None,
    };
    let target = target_dir(root);
    let python = match ensure_venv(&target.join("mlflow-venv"), MLFLOW_REQUIREMENTS) {
        Ok(python) => python,
        Err(VenvError::Unavailable(why)) => return skip_or_fail(TASK, &why),
        Err(VenvError::Failed(error)) => return Err(error),
    };
    if let Mode::Overhead(pairs) = mode {
        let work = target.join("mlflow-overhead");
        std::fs::create_dir_all(&work)?;
        let checker = root.join("xtask").join("mlflow").join("check_mlflow.py");
        let mlflow = Mlflow::start(&python, &checker, &work)?;
        return bench::overhead(root, &mlflow, pairs);
    }
    let profile = match bench_rounds {
        Some(_) => "release",
        None => "debug",
    };
    let mut cargo = vec!["build", "-p", "ember-cli"];
    if bench_rounds.is_some() {
        cargo.push("--release");
    }
    build(root, &cargo)?;
    let ember = target.join(profile).join("ember");
    let work = target.join("mlflow-check");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    let checker = root.join("xtask").join("mlflow").join("check_mlflow.py");
    let mut mlflow = Mlflow::start(&python, &checker, &work)?;
    let local = Local::new(&ember, &work);
    if let Some(rounds) = bench_rounds {
        let script = root.join("xtask").join("mlflow").join("bench_mlflow.py");
        let md = bench::run(&mlflow, &ember, &script, rounds)?;
        let path = target.join("bench").join("mlflow.md");
        std::fs::create_dir_all(target.join("bench"))?;
        std::fs::write(&path, &md)?;
        eprintln!(
            "{md}
{TASK}: written to {}",
            path.display()
        );
        return Ok(());
    }

    one_run(root, &mlflow, &local)?;
    refused_before_training(&mlflow, &local)?;
    killed_and_resumed(root, &mlflow, &local)?;
    library(root, &mlflow, &local)?;
    outage(&mut mlflow, &local)?;
    stopped_while_down(&mut mlflow, &local)?;
    authenticated(&python, &checker, &work, &local)?;
    ranks(root, &mlflow, &work)?;
    eprintln!("{TASK}: all scenarios passed");
    Ok(())
}

/// `args` of `ember train`, each run's `--logdir` after them, with `--mlflow URI`.
fn train(mlflow: &Mlflow, args: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    all.extend(["--mlflow".to_owned(), mlflow.uri()]);
    // The event files too: MLflow's client compares them byte for byte with the log's.
    all.push("--mlflow-event-files".to_owned());
    all
}

/// Scenario 1: one run into a named experiment.
fn one_run(root: &Path, mlflow: &Mlflow, local: &Local) -> anyhow::Result<()> {
    mlflow.client("experiment", "ember")?;
    let place = local.place("one");
    let args = train(mlflow, TRAIN);
    let mut command = local.ember(&["train"]);
    command
        .args(&args)
        .args(["--logdir", &place])
        .env("MLFLOW_EXPERIMENT_NAME", "ember")
        // The sink's report at close (what it sent, how far the server was behind) is info.
        .env("RUST_LOG", "ember=info");
    let ran = run_limited(command, "ember train --mlflow", &local.log(&place, "train"))?;
    expect_success(&ran, "ember train --mlflow")?;
    let params = json!({"learning_rate": "0.01", "batch_size": "32", "hidden": "64"});
    let read = mlflow.holds(local, &[(place.as_str(), params)])?;
    eprintln!(
        "{TASK}: ember train --mlflow into experiment `ember` ({:.1} s): MLflow's Python client \
         returns every scalar of the log as a metric, each step once with its value, and the \
         run's hyper-parameters as params: {read}",
        ran.elapsed.as_secs_f64()
    );
    let lag = ran
        .output
        .lines()
        .find_map(|line| line.split_once("mlflow: ").map(|(_, said)| said))
        .filter(|said| said.contains("reached the server"));
    eprintln!(
        "{TASK}: the sink at close: {}",
        lag.context("ember train did not report the sink's lag")?
    );
    if let Some(drawn) = mlflow.page_draws(root, local, &place)? {
        eprintln!("{TASK}: {drawn}");
    }
    Ok(())
}

/// Scenario 2: a URI that does not answer and an experiment that does not exist are errors
/// before training: nothing trained, no event file.
fn refused_before_training(mlflow: &Mlflow, local: &Local) -> anyhow::Result<()> {
    let silent = format!("http://{LOOPBACK}:{}", free_port()?);
    let cases = [
        ("unanswered", silent.as_str(), "ember", "does not answer"),
        (
            "unknown",
            &mlflow.uri(),
            "no-such-experiment",
            "has no experiment `no-such-experiment`",
        ),
    ];
    for (name, uri, experiment, says) in cases {
        let place = local.place(name);
        let mut command = local.ember(&["train"]);
        command
            .args(TRAIN)
            .args(["--mlflow", uri, "--logdir", &place])
            .env("MLFLOW_EXPERIMENT_NAME", experiment);
        let ran = run_limited(command, "ember train --mlflow", &local.log(&place, "train"))?;
        ensure!(
            !ran.success && ran.output.contains(says) && !ran.output.contains("test accuracy"),
            "{name}: ember train --mlflow {uri} did not fail before training saying `{says}`:\n{}",
            ran.output
        );
        let events = crate::runs::file_names(Path::new(&place))
            .into_iter()
            .filter(|file| file.contains("tfevents"))
            .count();
        ensure!(
            events == 0,
            "{name}: {events} event files written before the refusal"
        );
        let line = ran
            .output
            .lines()
            .find(|l| l.contains(says))
            .unwrap_or_default();
        eprintln!("{TASK}: refused before training: {}", line.trim());
    }
    Ok(())
}

/// Scenario 3: seeded kills, each run resumed.
fn killed_and_resumed(root: &Path, mlflow: &Mlflow, local: &Local) -> anyhow::Result<()> {
    let args = train(mlflow, TRAIN);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let walked = KillAndResume {
        program: Program::cli(&args),
        prefix: "k-",
        kills: KILLS,
        seed: SEED,
        expected: None,
    }
    .walk(local)?;
    let read = mlflow.holds(
        local,
        &walked
            .places
            .iter()
            .map(|place| (place.as_str(), json!({})))
            .collect::<Vec<_>>(),
    )?;
    eprintln!(
        "{TASK}: {KILLS} runs killed with SIGKILL and resumed ({walked}): each MLflow run holds \
         every step once with the uninterrupted run's values: {read}"
    );
    // `places` begins with the uninterrupted run's; `after` tells of the others.
    let resumed = walked.places[1..]
        .iter()
        .zip(&walked.after)
        .find(|(_, after)| **after == AfterKill::Resumed);
    if let Some((place, _)) = resumed
        && let Some(drawn) = mlflow.page_draws(root, local, place)?
    {
        eprintln!("{TASK}: a resumed run: {drawn}");
    }
    Ok(())
}

/// Scenario 4: a library user's one call, `SummaryRecordBuilder::mlflow_from_env`, with
/// `MLFLOW_TRACKING_URI` set: the logging example built without Burn, and burn-train's logger
/// (`SummaryLogger`) in the burn_train example.
fn library(root: &Path, mlflow: &Mlflow, local: &Local) -> anyhow::Result<()> {
    build(
        root,
        &[
            "build",
            "-p",
            "ember",
            "--no-default-features",
            "--example",
            "logging",
        ],
    )?;
    let examples = target_dir(root).join("debug").join("examples");
    let logging = local.place("logging");
    run_example(mlflow, &examples.join("logging"), &logging)?;
    build(root, &["build", "-p", "ember", "--example", "burn_train"])?;
    let burn_train = local.place("burn-train");
    run_example(mlflow, &examples.join("burn_train"), &burn_train)?;
    let burn_train = format!("{burn_train}/tensorboard");
    let read = mlflow.holds(
        local,
        &[
            (logging.as_str(), json!({"optimizer": "sgd", "lr": "0.1"})),
            (burn_train.as_str(), json!({})),
        ],
    )?;
    eprintln!(
        "{TASK}: a library user's one call (mlflow_from_env), built without Burn and under \
         burn-train's SummaryLogger: MLflow holds every scalar each step once: {read}"
    );
    Ok(())
}

/// Runs `example` with its log directory `place`, MLflow's environment set.
fn run_example(mlflow: &Mlflow, example: &Path, place: &str) -> anyhow::Result<()> {
    let mut command = Command::new(example);
    command
        .arg(place)
        .env("MLFLOW_TRACKING_URI", mlflow.uri())
        .env("MLFLOW_EXPERIMENT_NAME", "ember");
    let what = example.file_name().unwrap_or_default().to_string_lossy();
    let ran = run_limited(command, &what, &mlflow.work.join(format!("{what}.log")))?;
    expect_success(&ran, &what)
}

/// Scenario 5: the server killed a moment into a run and started again [`OUTAGE`] later.
fn outage(mlflow: &mut Mlflow, local: &Local) -> anyhow::Result<()> {
    let place = local.place("outage");
    // Long enough to train on through the outage: over a minute in a debug build.
    let args = train(
        mlflow,
        &["--epochs", "1000", "--subset", "400", "--devices", "2"],
    );
    let (mut job, log) = spawn_train(local, &args, &place)?;
    let started = Instant::now();
    first_send(&place, &mut job, &log)?;
    let down = Instant::now();
    stop_server(mlflow)?;
    let refused = || std::net::TcpStream::connect((LOOPBACK, mlflow.port)).is_err();
    std::thread::sleep(OUTAGE);
    ensure!(
        refused(),
        "something answered on the server's port during the outage"
    );
    ensure!(
        job.0.try_wait()?.is_none(),
        "the run ended during the outage; give it more epochs"
    );
    mlflow.serve()?;
    let back = down.elapsed();
    let status = job.0.wait()?;
    let output = std::fs::read_to_string(&log)?;
    ensure!(status.success(), "the run failed:\n{output}");
    let read = mlflow.holds(local, &[(place.as_str(), json!({}))])?;
    eprintln!(
        "{TASK}: the server killed mid-run and started again {:.0} s later: the run trained on \
         (its end {:.0} s after the outage's), and MLflow holds every step once: {read}",
        back.as_secs_f64(),
        started.elapsed().as_secs_f64() - back.as_secs_f64()
    );
    Ok(())
}

/// `ember train` of `args` at `place` of `local`, running (its output in the place's log).
fn spawn_train(
    local: &Local,
    args: &[String],
    place: &str,
) -> anyhow::Result<(crate::scenario::Running, std::path::PathBuf)> {
    let log = local.log(place, "train");
    let file = std::fs::File::create(&log)?;
    let mut command = local.ember(&["train"]);
    command.args(args).args(["--logdir", place]);
    let child = command
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .context("starting ember train")?;
    Ok((crate::scenario::Running(child), log))
}

/// Waits until the run at `place` has had something acknowledged by the server.
fn first_send(place: &str, job: &mut crate::scenario::Running, log: &Path) -> anyhow::Result<()> {
    let sent = Path::new(place).join(".ember-mlflow").join("sent");
    let started = Instant::now();
    while !sent.exists() {
        ensure!(
            started.elapsed() < Duration::from_secs(60) && job.0.try_wait()?.is_none(),
            "the run sent nothing to MLflow:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Stops the server and waits until its port refuses connections.
fn stop_server(mlflow: &mut Mlflow) -> anyhow::Result<()> {
    mlflow.server.take();
    let down = Instant::now();
    while std::net::TcpStream::connect((LOOPBACK, mlflow.port)).is_ok() {
        ensure!(
            down.elapsed() < Duration::from_secs(10),
            "the server still answers"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Scenario 6: SIGTERM while the server is down, the run resumed once it is back.
fn stopped_while_down(mlflow: &mut Mlflow, local: &Local) -> anyhow::Result<()> {
    let place = local.place("stopped-down");
    let args = train(
        mlflow,
        &["--epochs", "300", "--subset", "400", "--devices", "2"],
    );
    let (mut job, log) = spawn_train(local, &args, &place)?;
    first_send(&place, &mut job, &log)?;
    stop_server(mlflow)?;
    std::thread::sleep(Duration::from_secs(1));
    let stopped = job.stopped(local, crate::scenario::Signalled::Launcher, &place, &log)?;
    ensure!(
        stopped.status.code() == Some(143) && stopped.ended_after < Duration::from_secs(15),
        "SIGTERM with the server down: exit {:?} after {:.1} s, not 143 within the grace:\n{}",
        stopped.status.code(),
        stopped.ended_after.as_secs_f64(),
        stopped.output
    );
    ensure!(
        stopped.output.contains("left in the spool"),
        "the stopped run did not say what waits in its spool:\n{}",
        stopped.output
    );
    mlflow.serve()?;
    let resume = local.ember(&["train", "--resume", &place]);
    let ran = run_limited(resume, "ember train --resume", &local.log(&place, "resume"))?;
    expect_success(&ran, "ember train --resume")?;
    let read = mlflow.holds(local, &[(place.as_str(), json!({}))])?;
    eprintln!(
        "{TASK}: SIGTERM while the server was down: exit 143 {:.1} s later (the close's wait cut \
         to 5 s), what was unsent left in the spool; resumed once the server was back, MLflow \
         holds every step once: {read}",
        stopped.ended_after.as_secs_f64()
    );
    Ok(())
}

/// Scenario 8: a job of two MPI ranks, one MLflow run.
fn ranks(root: &Path, mlflow: &Mlflow, work: &Path) -> anyhow::Result<()> {
    if let Err(missing) = crate::mpirun::ensure_mpi() {
        return skip_or_fail(TASK, &format!("no MPI job: {missing}"));
    }
    // Last: the debug `ember` the other scenarios ran is now the MPI build.
    build(root, &["build", "-p", "ember-cli", "--features", "mpi"])?;
    let ember = target_dir(root).join("debug").join("ember");
    let mpirun = crate::mpirun::mpirun(2, crate::mpirun::Transport::SharedMemory);
    std::fs::create_dir_all(work.join("ranks"))?;
    let job = Local::new(&ember, &work.join("ranks")).under(&mpirun);
    let experiment = "ember-ranks";
    mlflow.client("experiment", experiment)?;
    let place = job.place("job");
    let args = train(
        mlflow,
        &["--epochs", "10", "--subset", "400", "--devices", "1"],
    );
    let mut command = job.launch(&["train"]);
    command
        .args(&args)
        .args(["--logdir", &place])
        .env("MLFLOW_EXPERIMENT_NAME", experiment);
    let ran = run_limited(
        command,
        "mpirun -n 2 ember train --mlflow",
        &job.log(&place, "train"),
    )?;
    expect_success(&ran, "mpirun -n 2 ember train --mlflow")?;
    let runs = mlflow.client("runs", experiment)?;
    let runs: Vec<&str> = runs.split_whitespace().collect();
    ensure!(
        runs.len() == 1,
        "the job made {} MLflow runs: {runs:?}",
        runs.len()
    );
    let params = json!({"learning_rate": "0.01", "batch_size": "32", "hidden": "64"});
    // Rank 0's record sends: the job's scalars and rank 0's own timings; rank 1's own are in
    // its event files only.
    let read = mlflow.holds_except(&job, &[(place.as_str(), params)], &["rank/1/"])?;
    eprintln!(
        "{TASK}: mpirun -n 2 ember train --mlflow: one MLflow run for the job, holding each step \
         of its log once (rank 1's own timings, rank/1/…, not sent): {read}"
    );
    Ok(())
}

/// Scenario 7: a server behind MLflow's basic-auth app.
fn authenticated(python: &Path, checker: &Path, work: &Path, local: &Local) -> anyhow::Result<()> {
    // Made up here, so that finding it anywhere means it leaked.
    let password = format!("ember-secret-{}-{}", std::process::id(), SEED);
    let mlflow =
        Mlflow::start_with_auth(python, checker, &work.join("auth"), ("admin", &password))?;
    let args = train(&mlflow, TRAIN);
    let run = |name: &str, password: &str| -> anyhow::Result<(String, crate::process::Ran)> {
        let place = local.place(name);
        let mut command = local.ember(&["train"]);
        command
            .args(&args)
            .args(["--logdir", &place])
            .env("MLFLOW_TRACKING_USERNAME", "admin")
            .env("MLFLOW_TRACKING_PASSWORD", password);
        let ran = run_limited(command, "ember train --mlflow", &local.log(&place, "train"))?;
        Ok((place, ran))
    };
    let (place, ran) = run("auth", &password)?;
    expect_success(&ran, "ember train --mlflow with MLflow's credentials")?;
    let params = json!({"learning_rate": "0.01", "batch_size": "32", "hidden": "64"});
    let read = mlflow.holds(local, &[(place.as_str(), params)])?;
    let wrong = format!("{password}-wrong");
    let (refused_place, refused) = run("auth-refused", &wrong)?;
    let says = "refused the credentials";
    ensure!(
        !refused.success
            && refused.output.contains(says)
            && !refused.output.contains("test accuracy"),
        "a wrong password was not refused before training saying `{says}`:\n{}",
        refused.output
    );
    for (what, output) in [
        ("the run", &ran.output),
        ("the refused run", &refused.output),
    ] {
        ensure!(
            !output.contains(&password),
            "{what} printed the password:\n{output}"
        );
    }
    for place in [&place, &refused_place] {
        if let Some(file) = file_holding(Path::new(place), password.as_bytes())? {
            anyhow::bail!("{} holds the password", file.display());
        }
    }
    let line = refused
        .output
        .lines()
        .find(|l| l.contains(says))
        .unwrap_or_default();
    eprintln!(
        "{TASK}: behind MLflow's basic-auth app, with MLFLOW_TRACKING_USERNAME/PASSWORD: {read}; \
         a wrong password: {}; the password in no output and no file of either run",
        line.trim()
    );
    Ok(())
}

/// The first file under `dir` whose bytes contain `needle`.
fn file_holding(dir: &Path, needle: &[u8]) -> anyhow::Result<Option<std::path::PathBuf>> {
    let mut directories: Vec<_> = dir
        .exists()
        .then(|| dir.to_path_buf())
        .into_iter()
        .collect();
    while let Some(at) = directories.pop() {
        for entry in std::fs::read_dir(&at)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                directories.push(entry.path());
            } else if kind.is_file() {
                let bytes = std::fs::read(entry.path())?;
                if bytes.windows(needle.len()).any(|window| window == needle) {
                    return Ok(Some(entry.path()));
                }
            }
        }
    }
    Ok(None)
}
