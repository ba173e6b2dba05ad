//! A server that fails mid-run and answers again while the sink closes: the sink's backoff,
//! grown while the server was away, must not outlast the close wait.
//!
//! The server is a stand-in for MLflow's REST API on loopback (the real server is driven by
//! `cargo xtask mlflow`): it answers the calls the sink makes and keeps what `runs/log-batch`
//! brought.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ember_pack::{Record, Tag, Value};
use ember_track::{Continue, MlflowConfig, MlflowSink};
use serde_json::{Value as Json, json};

#[derive(Default)]
struct Received {
    /// `(key, step)` of every metric logged.
    metrics: Vec<(String, i64)>,
    batches: usize,
    ended: bool,
    /// Calls answered 503 while the server was down.
    refused_tries: usize,
}

/// The stand-in server: while `down`, it answers every call 503 (as a proxy before a server
/// that is restarting does) and counts the tries.
struct Server {
    port: u16,
    received: Arc<Mutex<Received>>,
    down: Arc<AtomicBool>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = Server {
            port: listener.local_addr().unwrap().port(),
            received: Arc::default(),
            down: Arc::default(),
        };
        let (down, received) = (Arc::clone(&server.down), Arc::clone(&server.received));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                answer(stream.unwrap(), &down, &received);
            }
        });
        server
    }
}

/// One request on `stream`, answered as MLflow does, and the connection closed.
fn answer(stream: TcpStream, down: &AtomicBool, received: &Mutex<Received>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
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
    let path = first.split_whitespace().nth(1).unwrap_or_default();
    let mut received = received.lock().unwrap();
    let (status, answer) = if down.load(Ordering::SeqCst) {
        received.refused_tries += 1;
        (
            "503 Service Unavailable",
            json!({"error_code": "TEMPORARILY_UNAVAILABLE"}),
        )
    } else {
        let answer = if path.contains("/experiments/get") {
            json!({"experiment": {"experiment_id": "0"}})
        } else if path.ends_with("/runs/create") {
            json!({"run": {"info": {"run_id": "run-1"}}})
        } else if path.ends_with("/runs/log-batch") {
            let body: Json = serde_json::from_slice(&body).unwrap();
            for metric in body["metrics"].as_array().unwrap() {
                let key = metric["key"].as_str().unwrap().to_owned();
                received
                    .metrics
                    .push((key, metric["step"].as_i64().unwrap()));
            }
            received.batches += 1;
            json!({})
        } else if path.ends_with("/runs/update") {
            received.ended = true;
            json!({})
        } else {
            json!({"error_code": "ENDPOINT_NOT_FOUND", "message": path})
        };
        ("200 OK", answer)
    };
    drop(received);
    let answer = answer.to_string();
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{answer}",
        answer.len()
    )
    .unwrap();
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_server_back_while_the_sink_closes_gets_every_point() {
    let server = Server::start();
    let mut config = MlflowConfig::new(format!("http://127.0.0.1:{}", server.port));
    config.close_wait = Duration::from_secs(3);
    let dir = tempfile::tempdir().unwrap();
    let sink =
        MlflowSink::start(&config, dir.path(), Continue::No, &[("ember.version", "0")]).unwrap();
    wait_until("the run's tags reach the server", || {
        server.received.lock().unwrap().batches == 1
    });
    server.down.store(true, Ordering::SeqCst);
    for step in 1..=10 {
        let tag = Tag::new("train/loss").unwrap();
        sink.send(&Record::new(step, 0.0).with(tag, Value::Scalar(1.0 / step as f64)));
    }
    // Four tries fail, 0.5, 1 and 2 s apart: the next would come 8 s after the fourth, later
    // than the end of the close wait.
    wait_until("four tries", || {
        server.received.lock().unwrap().refused_tries == 4
    });
    let closing = std::thread::spawn(move || sink.close());
    std::thread::sleep(Duration::from_millis(500));
    server.down.store(false, Ordering::SeqCst);
    let report = closing.join().unwrap();

    assert_eq!((report.left, report.sent), (0, 11), "{report:?}");
    let received = server.received.lock().unwrap();
    let steps: Vec<i64> = received.metrics.iter().map(|(_, step)| *step).collect();
    assert_eq!(steps, (1..=10).collect::<Vec<_>>());
    assert!(
        received.ended,
        "the run is ended as finished once everything is sent"
    );
}
