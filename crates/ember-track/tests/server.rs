//! The sink against a stand-in for MLflow's REST API on loopback that can fail on cue: a
//! server that answers 503, one that never answers, a spool at its cap. (The real server is
//! driven by `cargo xtask mlflow`; these are the failure paths it cannot time.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ember_pack::{Record, Tag, Value};
use ember_track::{Continue, MlflowConfig, MlflowSink, SinkReport};
use serde_json::{Value as Json, json};

#[derive(Default)]
struct Received {
    /// `(key, step)` of every metric logged.
    metrics: Vec<(String, i64)>,
    batches: usize,
    ended: bool,
    /// Calls answered 503 while the server was down.
    refused_tries: usize,
    /// Uploads through the artifact proxy: the URL's path and the bytes.
    uploads: Vec<(String, Vec<u8>)>,
}

/// How the stand-in behaves, switched by the test while it runs.
#[derive(Default)]
struct State {
    /// Every call answered 503, as a proxy before a restarting server does.
    down: AtomicBool,
    /// Calls read, and not answered until this is cleared.
    hung: AtomicBool,
    received: Mutex<Received>,
    /// The runs' `artifact_uri`: the proxy's unless a test sets another.
    artifact_uri: Mutex<Option<String>>,
}

/// The stand-in server: one connection at a time, each answered and closed.
struct Server {
    port: u16,
    state: Arc<State>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = Server {
            port: listener.local_addr().unwrap().port(),
            state: Arc::default(),
        };
        let state = Arc::clone(&server.state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                answer(stream.unwrap(), &state);
            }
        });
        server
    }

    fn config(&self) -> MlflowConfig {
        MlflowConfig::new(format!("http://127.0.0.1:{}", self.port))
    }

    fn received(&self) -> std::sync::MutexGuard<'_, Received> {
        self.state.received.lock().unwrap()
    }

    fn set(&self, flag: fn(&State) -> &AtomicBool, on: bool) {
        flag(&self.state).store(on, Ordering::SeqCst);
    }

    /// A sink on a new run in `dir`, once its tags (the first batch) have reached the server.
    fn sink(&self, config: &MlflowConfig, dir: &std::path::Path) -> MlflowSink {
        let sink = MlflowSink::start(config, dir, Continue::No, &[("ember.version", "0")]).unwrap();
        wait_until("the run's tags reach the server", || {
            self.received().batches == 1
        });
        sink
    }
}

/// One request on `stream`, answered as MLflow does, and the connection closed.
fn answer(stream: TcpStream, state: &State) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if first.is_empty() {
            first = line;
            continue;
        }
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    while state.hung.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let path = first.split_whitespace().nth(1).unwrap_or_default();
    let mut received = state.received.lock().unwrap();
    let (status, answer) = if state.down.load(Ordering::SeqCst) {
        received.refused_tries += 1;
        let busy = json!({"error_code": "TEMPORARILY_UNAVAILABLE"});
        ("503 Service Unavailable", busy)
    } else if path.contains("/experiments/get") {
        ("200 OK", json!({"experiment": {"experiment_id": "0"}}))
    } else if path.ends_with("/runs/create") || path.contains("/runs/get") {
        let artifacts = state.artifact_uri.lock().unwrap().clone();
        let artifacts = artifacts.unwrap_or("mlflow-artifacts:/0/run-1/artifacts".into());
        let info = json!({"run_id": "run-1", "artifact_uri": artifacts});
        ("200 OK", json!({"run": {"info": info}}))
    } else if path.starts_with("/api/2.0/mlflow-artifacts/artifacts/") {
        received.uploads.push((path.to_owned(), body));
        ("200 OK", json!({}))
    } else if path.ends_with("/runs/log-batch") {
        let body: Json = serde_json::from_slice(&body).unwrap();
        for metric in body["metrics"].as_array().unwrap() {
            let key = metric["key"].as_str().unwrap().to_owned();
            let step = metric["step"].as_i64().unwrap();
            received.metrics.push((key, step));
        }
        received.batches += 1;
        ("200 OK", json!({}))
    } else if path.ends_with("/runs/update") {
        received.ended = true;
        ("200 OK", json!({}))
    } else {
        let unknown = json!({"error_code": "ENDPOINT_NOT_FOUND", "message": path});
        ("404 Not Found", unknown)
    };
    drop(received);
    let answer = answer.to_string();
    let mut stream = stream;
    // The sink may have given up on a hung call: its connection is gone.
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{answer}",
        answer.len()
    );
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// CPU seconds used so far by this process's threads named as the sink's (`ember-mlflow…`),
/// from /proc (Linux).
fn sink_cpu_seconds() -> f64 {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    let stats = tasks.flatten().filter_map(|task| {
        let name = std::fs::read_to_string(task.path().join("comm")).ok()?;
        name.starts_with("ember-mlflow")
            .then(|| std::fs::read_to_string(task.path().join("stat")).ok())?
    });
    let ticks: u64 = stats
        .map(|stat| {
            // utime and stime: the 12th and 13th fields after the command's `)`.
            let after = stat.rsplit_once(')').unwrap().1;
            let fields: Vec<&str> = after.split_whitespace().collect();
            fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
        })
        .sum();
    ticks as f64 / 100.0
}

fn loss(step: i64) -> Record {
    let tag = Tag::new("train/loss").unwrap();
    Record::new(step, 0.0).with(tag, Value::Scalar(1.0 / step as f64))
}

fn steps(received: &Received) -> Vec<i64> {
    received.metrics.iter().map(|(_, step)| *step).collect()
}

#[test]
fn a_server_back_while_the_sink_closes_gets_every_point() {
    let server = Server::start();
    let mut config = server.config();
    config.close_wait = Duration::from_secs(3);
    let dir = tempfile::tempdir().unwrap();
    let sink = server.sink(&config, dir.path());
    server.set(|s| &s.down, true);
    for step in 1..=10 {
        sink.send(&loss(step));
    }
    // Four tries fail, 0.5, 1 and 2 s apart: the next would come 8 s after the fourth, later
    // than the end of the close wait.
    wait_until("four tries", || server.received().refused_tries == 4);
    let closing = std::thread::spawn(move || sink.close());
    std::thread::sleep(Duration::from_millis(500));
    server.set(|s| &s.down, false);
    let report = closing.join().unwrap();

    assert_eq!((report.left, report.sent), (0, 11), "{report:?}");
    let received = server.received();
    assert_eq!(steps(&received), (1..=10).collect::<Vec<_>>());
    assert!(
        received.ended,
        "the run is ended as finished once everything is sent"
    );
}

/// Each of the sink's threads (`ember-mlflow…`), from /proc (Linux): its nice value and its
/// voluntary context switches so far (each time it went to sleep and was woken).
fn sink_threads() -> Vec<(i64, u64)> {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.starts_with("ember-mlflow"))
        })
        .map(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap();
            let after = stat.rsplit_once(')').unwrap().1;
            let nice = after.split_whitespace().nth(16).unwrap().parse().unwrap();
            let status = std::fs::read_to_string(task.path().join("status")).unwrap();
            let switches = status
                .lines()
                .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            (nice, switches)
        })
        .collect()
}

#[test]
fn the_sink_works_on_what_training_leaves_idle_and_a_send_wakes_nobody() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let sink = server.sink(&server.config(), dir.path());
    wait_until("both threads started", || sink_threads().len() == 2);
    let before = sink_threads();
    assert!(
        before.iter().all(|(nice, _)| *nice == 19),
        "the sink's threads run at the lowest priority: {before:?}"
    );
    // A step's scalars handed over one step at a time, as a training loop does (the sink's
    // period is 1 s, so its thread wakes a few times in these 0.3 s).
    for step in 1..=1_000 {
        sink.send(&loss(step));
        std::thread::sleep(Duration::from_micros(300));
    }
    let woken: u64 = sink_threads()
        .iter()
        .zip(&before)
        .map(|((_, after), (_, before))| after - before)
        .sum();
    assert!(
        woken < 20,
        "1,000 sends woke the sink's threads {woken} times"
    );
    let report = sink.close();
    assert_eq!((report.left, report.sent), (0, 1_001), "{report:?}");
    assert_eq!(steps(&server.received()), (1..=1_000).collect::<Vec<_>>());
}

#[test]
fn a_limited_close_wait_leaves_what_a_down_server_did_not_take_for_the_next_start() {
    let server = Server::start();
    let config = server.config();
    assert!(config.close_wait >= Duration::from_secs(30));
    let dir = tempfile::tempdir().unwrap();
    let sink = server.sink(&config, dir.path());
    server.set(|s| &s.down, true);
    for step in 1..=10 {
        sink.send(&loss(step));
    }
    sink.limit_close_wait(Duration::from_secs(1));
    let closing = Instant::now();
    let report = sink.close();
    let took = closing.elapsed();
    assert!(took < Duration::from_secs(5), "the close took {took:?}");
    // The run's tag went before the server went down.
    assert_eq!((report.left, report.sent), (10, 1), "{report:?}");

    // The next start (a resume) sends it all, each step once.
    server.set(|s| &s.down, false);
    let sink = MlflowSink::start(&config, dir.path(), Continue::Yes, &[]).unwrap();
    let report = sink.close();
    assert_eq!((report.left, report.sent), (0, 10), "{report:?}");
    assert_eq!(steps(&server.received()), (1..=10).collect::<Vec<_>>());
}

#[test]
fn a_server_that_never_answers_holds_up_neither_send_nor_sync() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let sink = server.sink(&server.config(), dir.path());
    server.set(|s| &s.hung, true);
    let (done, finished) = std::sync::mpsc::channel();
    let sink = std::thread::spawn(move || {
        // More than the sink's queue holds: a send that waited on the server would block.
        for step in 1..=20_000 {
            sink.send(&loss(step));
        }
        sink.sync().unwrap();
        done.send(()).unwrap();
        sink
    });
    finished
        .recv_timeout(Duration::from_secs(10))
        .expect("send and sync return while the server holds a request unanswered");
    let sink = sink.join().unwrap();
    // While the request is out, the sink's threads sleep: they wait on the answer, not in a
    // loop (one that polled took 0.07 to 0.5 s of CPU a second here, and most of a core in the
    // Trainer's benchmark against a busy server).
    let before = sink_cpu_seconds();
    std::thread::sleep(Duration::from_secs(2));
    let spent = sink_cpu_seconds() - before;
    assert!(
        spent < 0.03,
        "the sink's threads used {spent} s of CPU in 2 s of waiting"
    );
    let spooled = std::fs::read_to_string(dir.path().join(".ember-mlflow/spool.jsonl")).unwrap();
    assert_eq!(
        spooled.lines().filter(|l| l.starts_with(r#"{"m""#)).count(),
        20_000
    );

    server.set(|s| &s.hung, false);
    let report = sink.close();
    assert_eq!((report.left, report.sent), (0, 20_001), "{report:?}");
    assert_eq!(steps(&server.received()), (1..=20_000).collect::<Vec<_>>());
}

#[test]
fn a_spool_at_its_cap_names_what_it_drops_and_keeps_what_it_took() {
    let server = Server::start();
    let mut config = server.config();
    config.spool_cap = 2_000;
    config.close_wait = Duration::ZERO;
    let dir = tempfile::tempdir().unwrap();
    let sink = server.sink(&config, dir.path());
    server.set(|s| &s.down, true);
    for step in 1..=100 {
        sink.send(&loss(step));
    }
    let report: SinkReport = sink.close();
    let kept = report.left;
    assert!(kept > 0 && kept < 100, "{report:?}");
    let dropped = report.dropped.get("train/loss").copied();
    assert_eq!(dropped, Some(100 - kept), "{report:?}");

    // The next start of the run sends what the spool took: the first points, each once.
    server.set(|s| &s.down, false);
    let resumed = MlflowSink::start(&config, dir.path(), Continue::Yes, &[]).unwrap();
    let report = resumed.close();
    assert_eq!((report.left, report.sent), (0, kept), "{report:?}");
    assert_eq!(
        steps(&server.received()),
        (1..=kept as i64).collect::<Vec<_>>()
    );
}

#[test]
fn the_model_goes_through_the_artifact_proxy_after_what_came_before_it() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.bpk");
    std::fs::write(&model, b"the trained parameters").unwrap();
    let sink = server.sink(&server.config(), dir.path());
    sink.send(&loss(1));
    sink.log_artifact(&model, "model/model.bpk");
    let report = sink.close();

    assert_eq!(
        (report.sent, report.refused, report.left),
        (3, 0, 0),
        "{report:?}"
    );
    let received = server.received();
    assert_eq!(steps(&received), [1]);
    let path = "/api/2.0/mlflow-artifacts/artifacts/0/run-1/artifacts/model/model.bpk";
    assert_eq!(
        received.uploads,
        [(path.to_owned(), b"the trained parameters".to_vec())]
    );
}

#[test]
fn a_server_that_keeps_artifacts_elsewhere_refuses_the_model_and_nothing_else() {
    let server = Server::start();
    *server.state.artifact_uri.lock().unwrap() = Some("s3://bucket/1/run-1/artifacts".into());
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.bpk");
    std::fs::write(&model, b"parameters").unwrap();
    let sink = server.sink(&server.config(), dir.path());
    sink.log_artifact(&model, "model/model.bpk");
    sink.send(&loss(1));
    let report = sink.close();

    assert_eq!((report.sent, report.refused), (2, 1), "{report:?}");
    let why = report.last_failure.unwrap_or_default();
    assert!(
        why.contains("s3://bucket/1/run-1/artifacts") && why.contains("proxy"),
        "{why}"
    );
    let received = server.received();
    assert!(received.uploads.is_empty());
    assert_eq!(steps(&received), [1]);
}
