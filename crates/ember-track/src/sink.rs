//! The sink: a handle the facade sends records to, and the thread that spools and sends them.

use std::collections::BTreeMap;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, SendError, Sender, TrySendError};
use ember_pack::{HParamValue, Record, Value};

use crate::client::{Client, Failure};
use crate::spool::{Entity, Kind, RunIds, Spool};
use crate::{MlflowConfig, TrackError};

/// Whether a sink continues the MLflow run an earlier start of the run began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continue {
    /// It does, where the run's directory holds its spool: a resume from a checkpoint. What
    /// the earlier starts spooled and the server did not acknowledge is sent; a tag's points at
    /// steps they spooled are passed over, so that each step is in MLflow once.
    Yes,
    /// It begins a new MLflow run (a fresh run, or one restarted from its first step).
    No,
}

/// What a sink did, as it closed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkReport {
    /// Entities (metrics, params, tags) the server acknowledged.
    pub sent: u64,
    /// Points passed over: an earlier start of the run had spooled their tag at their step.
    pub passed_over: u64,
    /// Points dropped, by tag: the spool was at its cap (or the sink's thread had gone).
    pub dropped: BTreeMap<String, u64>,
    /// Entities refused by the server as they were (sending them again changes nothing).
    pub refused: u64,
    /// Entities left in the spool unacknowledged (the server did not answer in time): the
    /// next start of the run sends them.
    pub left: u64,
    /// The last failure met, if any.
    pub last_failure: Option<String>,
    /// How long after it was recorded each acknowledged batch's oldest point reached the
    /// server: how far a watcher of MLflow's UI is behind training (its own refresh aside).
    pub lag: Option<Lag>,
}

/// The median and the longest of the batches' lags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lag {
    /// The median over the acknowledged batches.
    pub median: Duration,
    /// The longest.
    pub max: Duration,
}

impl Lag {
    fn of(mut lags: Vec<Duration>) -> Option<Lag> {
        lags.sort();
        Some(Lag {
            median: *lags.get(lags.len() / 2)?,
            max: *lags.last()?,
        })
    }
}

/// What the handle asks of the sink's thread, which waits on these (a record's values go on a
/// channel of their own, drained when the thread wakes: handing them over wakes nobody).
enum Message {
    /// The values' queue is full: drain it.
    Drain,
    /// A file to upload: its path and its artifact path.
    Artifact(std::path::PathBuf, String),
    /// Answered once everything before it is in the spool, synced.
    Sync(Sender<Result<(), String>>),
    /// Closing waits for the server at most this long.
    CloseWait(Duration),
}

/// A record's values the sink sends, as the caller's thread hands them over: copied out of the
/// record, nothing built yet (the sink's thread makes MLflow's entities).
struct Values {
    step: i64,
    /// Milliseconds since the Unix epoch.
    timestamp: i64,
    scalars: Vec<(String, f32)>,
    params: Vec<(String, String)>,
}

impl Values {
    fn entities(self) -> impl Iterator<Item = Entity> {
        let Values {
            step,
            timestamp,
            scalars,
            params,
        } = self;
        let metrics = scalars
            .into_iter()
            .map(move |(key, value)| Entity::metric(&key, f64::from(value), timestamp, step));
        let params = params
            .into_iter()
            .map(|(key, value)| Entity::pair(Kind::Param, &key, &value));
        metrics.chain(params)
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        let scalars = self.scalars.iter().map(|(key, _)| key.as_str());
        scalars.chain(self.params.iter().map(|(key, _)| key.as_str()))
    }
}

/// The handle: [`send`](Self::send) is one channel send; the sink's thread does the rest.
pub struct MlflowSink {
    to_thread: Option<Sender<Message>>,
    values: Option<Sender<Values>>,
    thread: Option<JoinHandle<SinkReport>>,
    run_id: String,
    shown_uri: String,
    dropped: std::sync::Arc<std::sync::Mutex<BTreeMap<String, u64>>>,
}

impl std::fmt::Debug for MlflowSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MlflowSink")
            .field("run_id", &self.run_id)
            .field("uri", &self.shown_uri)
            .finish()
    }
}

/// Records queued for the sink's thread, at most.
const QUEUE: usize = 16_384;
/// Requests of the handle (sync, artifacts) queued for the sink's thread, at most.
const CONTROL: usize = 64;
/// How often the thread sends what has gathered.
const PERIOD: Duration = Duration::from_secs(1);
/// The longest wait between tries against a server that does not answer.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl MlflowSink {
    /// Connects to the server (a typed error where it does not answer, refuses the
    /// credentials or has no such experiment), begins or continues the MLflow run of the run
    /// in `run_dir`, spools `tags` for it, and starts the sink's thread.
    pub fn start(
        config: &MlflowConfig,
        run_dir: &Path,
        continuing: Continue,
        tags: &[(&str, &str)],
    ) -> Result<Self, TrackError> {
        let client = Client::new(config);
        let experiment_id = client.experiment_id(&config.experiment)?;
        let reopened = match continuing {
            Continue::Yes => Spool::reopen(run_dir)?,
            Continue::No => None,
        };
        let (mut spool, ids, artifact_uri) = match reopened {
            Some((spool, ids)) => match client.run_artifact_uri(&ids.run_id)? {
                Some(artifact_uri) => (spool, ids, artifact_uri),
                None => {
                    return Err(TrackError::RunGone {
                        uri: client.shown().to_owned(),
                        run_id: ids.run_id,
                    });
                }
            },
            None => {
                let (run_id, artifact_uri) =
                    client.create_run(&experiment_id, config.run_name.as_deref(), now_ms())?;
                let ids = RunIds {
                    run_id,
                    experiment_id,
                };
                (Spool::create(run_dir, &ids)?, ids, artifact_uri)
            }
        };
        for (key, value) in tags {
            spool.push(Entity::pair(Kind::Tag, key, value));
        }
        let (to_thread, from_handle) = crossbeam_channel::bounded(CONTROL);
        let (values, queued) = crossbeam_channel::bounded(QUEUE);
        let dropped = std::sync::Arc::default();
        let run_id = ids.run_id.clone();
        let shown_uri = client.shown().to_owned();
        let mut worker = Worker {
            client: Some(client),
            spool,
            run_id: ids.run_id,
            report: SinkReport::default(),
            dropped: std::sync::Arc::clone(&dropped),
            close_wait: config.close_wait,
            spool_cap: config.spool_cap,
            lags: Vec::new(),
            artifact_uri,
        };
        let thread = std::thread::Builder::new()
            .name("ember-mlflow".into())
            .spawn(move || {
                background();
                worker.run(&from_handle, &queued)
            })
            .map_err(|e| TrackError::Thread(e.to_string()))?;
        Ok(Self {
            to_thread: Some(to_thread),
            values: Some(values),
            thread: Some(thread),
            run_id,
            shown_uri,
            dropped,
        })
    }

    /// MLflow's id of the run.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The server's URI, without credentials.
    pub fn uri(&self) -> &str {
        &self.shown_uri
    }

    /// Queues `record`'s scalars (at the f32 an event file holds) as metrics and its
    /// hyper-parameters as params. It waits only while the queue is full, for the sink's
    /// thread to spool (never for the server).
    pub fn send(&self, record: &Record) {
        let mut values = Values {
            step: record.step(),
            timestamp: (record.wall_time() * 1000.0).round() as i64,
            scalars: Vec::new(),
            params: Vec::new(),
        };
        for (tag, value) in record.values() {
            match value {
                Value::Scalar(x) => values.scalars.push((tag.as_str().to_owned(), *x as f32)),
                Value::HParams(hparams) => {
                    for (name, value) in &hparams.hparams {
                        let value = match value {
                            HParamValue::Bool(b) => b.to_string(),
                            HParamValue::Int(i) => i.to_string(),
                            HParamValue::Number(x) => x.to_string(),
                            HParamValue::Str(s) => s.clone(),
                        };
                        values.params.push((name.clone(), value));
                    }
                }
                _ => {}
            }
        }
        if values.scalars.is_empty() && values.params.is_empty() {
            return;
        }
        let (Some(queue), Some(to_thread)) = (&self.values, &self.to_thread) else {
            return;
        };
        // A full queue wakes the sink's thread and waits for it to spool (local work: it never
        // waits on the server itself), as the writer pool's queue does: nothing is dropped for
        // speed.
        let values = match queue.try_send(values) {
            Ok(()) => return,
            Err(TrySendError::Full(values)) => {
                // A `Drain` already waiting does as well.
                let _ = to_thread.try_send(Message::Drain);
                queue.send(values).map_err(|SendError(values)| values)
            }
            Err(TrySendError::Disconnected(values)) => Err(values),
        };
        if let Err(values) = values {
            count_dropped(&self.dropped, values.names());
        }
    }

    /// Queues the file at `path` for upload as the run's artifact `name` (a path such as
    /// `model/model.bpk`) through the server's artifact proxy. The file is read when it is
    /// sent, after everything queued before it; a server that keeps artifacts elsewhere
    /// refuses it, counted in [`SinkReport::refused`].
    pub fn log_artifact(&self, path: &Path, name: &str) {
        if let Some(to_thread) = &self.to_thread {
            let message = Message::Artifact(path.to_path_buf(), name.to_owned());
            if to_thread.send(message).is_err() {
                count_dropped(&self.dropped, std::iter::once(name));
            }
        }
    }

    /// Waits until everything sent so far is in the spool, synced: what a checkpoint taken
    /// now covers survives a crash (a resume does not train it again, so it must not be lost).
    pub fn sync(&self) -> Result<(), TrackError> {
        let (ack, done) = crossbeam_channel::bounded(1);
        let gone = || TrackError::Thread("it has ended".into());
        self.to_thread
            .as_ref()
            .ok_or_else(gone)?
            .send(Message::Sync(ack))
            .map_err(|_| gone())?;
        done.recv().map_err(|_| gone())?.map_err(TrackError::Thread)
    }

    /// Makes [`close`](Self::close) wait for the server at most `wait` (if the config's
    /// `close_wait` is longer): a run stopped by a signal has a grace to share with its stop
    /// checkpoint and its logs. What the server has not taken by then stays in the spool.
    pub fn limit_close_wait(&self, wait: Duration) {
        if let Some(to_thread) = &self.to_thread {
            // A full control queue holds other requests; the close then waits as configured.
            let _ = to_thread.try_send(Message::CloseWait(wait));
        }
    }

    /// Sends what is spooled (waiting at most the config's `close_wait` for the server), ends
    /// the MLflow run as finished when everything was acknowledged, and reports.
    pub fn close(mut self) -> SinkReport {
        self.finish()
    }

    fn finish(&mut self) -> SinkReport {
        drop(self.values.take());
        drop(self.to_thread.take());
        let mut report = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(report)) => report,
            Some(Err(_)) => SinkReport {
                last_failure: Some("the sink's thread panicked".into()),
                ..SinkReport::default()
            },
            None => SinkReport::default(),
        };
        let dropped = std::mem::take(&mut *self.dropped.lock().unwrap_or_else(|p| p.into_inner()));
        for (tag, count) in dropped {
            *report.dropped.entry(tag).or_default() += count;
        }
        report
    }
}

impl Drop for MlflowSink {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let report = self.finish();
            if report.left > 0 {
                log::warn!(
                    "mlflow: {} entities of run {} left in the spool for the next start",
                    report.left,
                    self.run_id
                );
            }
        }
    }
}

fn count_dropped<'a>(
    dropped: &std::sync::Mutex<BTreeMap<String, u64>>,
    names: impl Iterator<Item = &'a str>,
) {
    let mut dropped = dropped.lock().unwrap_or_else(|p| p.into_inner());
    for name in names {
        *dropped.entry(name.to_owned()).or_default() += 1;
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The sink's thread: it spools what the handle sends and hands batches to a sender's thread
/// of its own, so that a request the server is slow to answer never holds up the spooling,
/// nor so the caller's queue.
struct Worker {
    client: Option<Client>,
    spool: Spool,
    run_id: String,
    report: SinkReport,
    dropped: std::sync::Arc<std::sync::Mutex<BTreeMap<String, u64>>>,
    close_wait: Duration,
    spool_cap: u64,
    /// Each acknowledged batch's lag (see [`SinkReport::lag`]).
    lags: Vec<Duration>,
    /// Where the server keeps the run's artifacts.
    artifact_uri: String,
}

/// To the sender's thread.
enum Request {
    Batch(Batch),
    End,
}

/// From the sender's thread: how a request went.
enum Answer {
    Batch(Batch, Result<(), Failure>),
    End(Result<(), Failure>),
}

impl Worker {
    fn run(&mut self, from_handle: &Receiver<Message>, queued: &Receiver<Values>) -> SinkReport {
        let (requests, for_sender) = crossbeam_channel::bounded::<Request>(1);
        let (to_worker, answers) = crossbeam_channel::bounded::<Answer>(1);
        let Some(client) = self.client.take() else {
            return SinkReport::default();
        };
        let run_id = self.run_id.clone();
        let artifact_uri = self.artifact_uri.clone();
        let sender = std::thread::Builder::new().name("ember-mlflow-send".into());
        let started = sender.spawn(move || {
            background();
            for request in for_sender {
                let answer = match request {
                    Request::Batch(batch) => {
                        let sent = match &batch.artifact {
                            Some(file) => client.put_artifact(&artifact_uri, file),
                            None => client.log_batch(&run_id, &batch.lists),
                        };
                        Answer::Batch(batch, sent)
                    }
                    Request::End => Answer::End(client.end_run(&run_id, "FINISHED", now_ms())),
                };
                if to_worker.send(answer).is_err() {
                    break;
                }
            }
        });
        let sender = match started {
            Ok(sender) => sender,
            Err(error) => {
                // Without a sender nothing goes out: what is spooled waits for the next start.
                self.report.last_failure = Some(format!("cannot start the sender: {error}"));
                self.report.left = self.spool.sendable().count() as u64;
                return std::mem::take(&mut self.report);
            }
        };
        let mut next_send = Instant::now();
        let mut backoff = Duration::from_millis(500);
        let mut in_flight = false;
        let mut closing: Option<Instant> = None;
        loop {
            // While a request is out, only its answer or the handle's next message can change
            // anything: both wake the thread. (Waiting for the next send instead spun a core
            // through every request.)
            let wait = match in_flight {
                true => PERIOD,
                false => next_send.saturating_duration_since(Instant::now()),
            }
            .min(PERIOD);
            let answer = match closing {
                None => crossbeam_channel::select! {
                    recv(from_handle) -> message => {
                        // What the handle queued before this message comes first.
                        self.spool_queued(queued);
                        match message {
                            Ok(Message::Drain) => {}
                            Ok(Message::Artifact(path, name)) => {
                                self.spool.push(Entity::artifact(&path, &name));
                            }
                            Ok(Message::Sync(ack)) => {
                                let _ = ack.send(self.spool.sync().map_err(|e| e.to_string()));
                            }
                            Ok(Message::CloseWait(wait)) => {
                                self.close_wait = self.close_wait.min(wait);
                            }
                            Err(_) => {
                                closing = Some(Instant::now() + self.close_wait);
                                // A backoff grown while training must not outlast the close
                                // wait: a server back in time gets what is spooled.
                                next_send = next_send.min(Instant::now() + PERIOD);
                            }
                        }
                        None
                    }
                    recv(answers) -> answer => answer.ok(),
                    default(wait) => None,
                },
                Some(_) => answers.recv_timeout(wait).ok(),
            };
            self.spool_queued(queued);
            if let Some(Answer::Batch(batch, sent)) = answer {
                in_flight = false;
                match sent {
                    Err(Failure::Transient(why)) => {
                        self.report.last_failure = Some(why);
                        let longest = if closing.is_some() {
                            PERIOD
                        } else {
                            MAX_BACKOFF
                        };
                        next_send = Instant::now() + backoff.min(longest);
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                    sent => {
                        self.settled(&batch, sent);
                        backoff = Duration::from_millis(500);
                        // More may wait: no pause before the next batch.
                        next_send = Instant::now();
                    }
                }
            }
            if !in_flight && Instant::now() >= next_send {
                if let Err(why) = self.spool.sync() {
                    self.report.last_failure = Some(why.to_string());
                }
                let batch = Batch::of(self.spool.sendable());
                if batch.count == 0 {
                    if closing.is_some() {
                        break;
                    }
                    next_send = Instant::now() + PERIOD;
                } else if requests.send(Request::Batch(batch)).is_ok() {
                    in_flight = true;
                }
            }
            if closing.is_some_and(|deadline| Instant::now() >= deadline) && !in_flight {
                break;
            }
        }
        // What came in since the last try is on disk too: the next start sends it.
        if let Err(why) = self.spool.sync() {
            self.report.last_failure = Some(why.to_string());
        }
        if self.spool.is_drained() && requests.send(Request::End).is_ok() {
            if let Ok(Answer::End(Err(Failure::Transient(why) | Failure::Refused(why)))) =
                answers.recv()
            {
                self.report.last_failure = Some(why);
            }
        } else {
            self.report.left = self.spool.sendable().count() as u64;
        }
        drop(requests);
        let _ = sender.join();
        self.report.lag = Lag::of(std::mem::take(&mut self.lags));
        std::mem::take(&mut self.report)
    }

    /// Spools the values the handle has queued.
    fn spool_queued(&mut self, queued: &Receiver<Values>) {
        for values in queued.try_iter() {
            self.spool_all(values.entities());
        }
    }

    /// A batch the server answered: taken, or refused as it is (sending it again changes
    /// nothing); either way it is not sent again.
    fn settled(&mut self, batch: &Batch, sent: Result<(), Failure>) {
        match sent {
            Ok(()) => {
                self.report.sent += batch.count;
                if let Some(oldest) = batch.oldest_ms {
                    let lag = now_ms().saturating_sub(oldest).max(0) as u64;
                    self.lags.push(Duration::from_millis(lag));
                }
            }
            Err(Failure::Transient(why) | Failure::Refused(why)) => {
                log::warn!(
                    "mlflow: the server refused {} entities of run {}: {why}",
                    batch.count,
                    self.run_id
                );
                self.report.refused += batch.count;
                self.report.last_failure = Some(why);
            }
        }
        if let Err(error) = self.spool.acknowledged(batch.end) {
            self.report.last_failure = Some(error.to_string());
        }
    }

    fn spool_all(&mut self, entities: impl Iterator<Item = Entity>) {
        let mut over_cap = Vec::new();
        for entity in entities {
            if let Some(point) = &entity.point
                && self.spool.spooled_before(&point.key, point.step)
            {
                self.report.passed_over += 1;
                continue;
            }
            if self.spool.unacknowledged() + entity.size() as u64 > self.spool_cap {
                over_cap.push(entity.name());
                continue;
            }
            self.spool.push(entity);
        }
        count_dropped(&self.dropped, over_cap.iter().map(String::as_str));
    }
}

/// The entities of one `runs/log-batch`: MLflow's limits (1,000 metrics, 100 params, 100 tags,
/// 1,000 in all) and under 1 MB; or one file, uploaded alone.
struct Batch {
    /// The file's `{"path", "name"}`, where the batch is one upload.
    artifact: Option<String>,
    /// The metrics, params and tags: each list's JSON objects, comma-separated.
    lists: [String; 3],
    count: u64,
    /// The spool's length after the batch's last entity.
    end: u64,
    /// The earliest wall time (ms since the epoch) of its metrics.
    oldest_ms: Option<i64>,
}

impl Batch {
    fn of<'a>(entities: impl Iterator<Item = &'a (u64, Entity)>) -> Self {
        const BYTES: usize = 900 * 1024;
        const LIMITS: [u64; 3] = [1000, 100, 100];
        let mut batch = Batch {
            artifact: None,
            lists: Default::default(),
            count: 0,
            end: 0,
            oldest_ms: None,
        };
        let mut counts = [0u64; 3];
        let mut bytes = 0;
        for (end, entity) in entities {
            let list = match entity.kind {
                Kind::Metric => 0,
                Kind::Param => 1,
                Kind::Tag => 2,
                Kind::Artifact if batch.count == 0 => {
                    batch.artifact = Some(entity.json.clone());
                    batch.count = 1;
                    batch.end = *end;
                    break;
                }
                Kind::Artifact => break,
            };
            if counts[list] == LIMITS[list] || batch.count == 1000 || bytes + entity.size() > BYTES
            {
                break;
            }
            if let Some(point) = &entity.point {
                let oldest = batch
                    .oldest_ms
                    .map_or(point.timestamp, |t| t.min(point.timestamp));
                batch.oldest_ms = Some(oldest);
            }
            if counts[list] > 0 {
                batch.lists[list].push(',');
            }
            batch.lists[list].push_str(&entity.json);
            counts[list] += 1;
            bytes += entity.size();
            batch.count += 1;
            batch.end = *end;
        }
        batch
    }
}

/// Lowers the calling thread to the lowest scheduling priority (Linux: nice 19 for this thread
/// alone), so that the sink's work runs on what training leaves idle.
fn background() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19) {
        log::debug!("the MLflow sink's thread keeps its priority: {e}");
    }
}
