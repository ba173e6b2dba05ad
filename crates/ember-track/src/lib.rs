//! ember-track: a run's scalars, hyper-parameters and tags sent to an experiment tracker — an
//! MLflow tracking server — beside its event files, off the training thread.
//!
//! **Layer L1.** It depends on `ember-pack` (layer L0) for the [`Record`](ember_pack::Record)s it reads values
//! from, and knows nothing of event files, writers or training loops: the facade hands it each
//! record it hands the writer pool ([`MlflowSink::send`], one channel send).
//!
//! # The design
//!
//! - **Configured as MLflow users configure it** ([`MlflowConfig::from_env`]):
//!   `MLFLOW_TRACKING_URI`, `MLFLOW_EXPERIMENT_NAME` or `MLFLOW_EXPERIMENT_ID`,
//!   `MLFLOW_TRACKING_USERNAME`/`MLFLOW_TRACKING_PASSWORD` or `MLFLOW_TRACKING_TOKEN`. A URI
//!   that does not answer, an experiment that does not exist or credentials the server refuses
//!   are a typed [`TrackError`] from [`MlflowSink::start`], before training. Credentials never
//!   appear in a message or a log: a URI is shown without its user information.
//! - **A durable spool.** The sink's thread appends every metric, param and tag to a spool in
//!   the run's directory (`.ember-mlflow/spool.jsonl`, fsynced a batch at a time) before it
//!   sends it, and records how far the server has acknowledged (`.ember-mlflow/sent`). A
//!   server that is down, slow, restarted or answering 5xx holds nothing up: the spool grows,
//!   sends are retried with backoff (0.5 s doubling to 30 s), and training goes on. A spool at
//!   its size cap ([`MlflowConfig::spool_cap`]) drops new points, counted and named, as the
//!   writers do.
//! - **Batched to the server's limits**: at most 1,000 metrics, 100 params, 100 tags and 1,000
//!   items, under 1 MB, per `runs/log-batch`.
//! - **Each step once across kills.** MLflow never overwrites a metric: a point logged again
//!   with another timestamp is a second point. A run that resumes from a checkpoint trains
//!   again the steps after it, with the values it had (ember resumes bit-identically) and new
//!   wall times. So a sink that continues a run ([`Continue::Yes`]) reopens its spool, sends
//!   what the earlier start had spooled and not seen acknowledged (the same timestamps: the
//!   server's primary key makes a resend of an acknowledged point a no-op), and passes over
//!   every point of a tag at a step the earlier starts had spooled. A watcher of the run's
//!   page sees each step once, as soon as it is sent (a batch a second, or sooner when 1,000
//!   points wait); after a kill, the steps trained again appear once training passes where
//!   the killed run had got to.
//!
//! Only scalars become metrics (at the value the event file holds: an f32), a record's
//! hyper-parameters become params, and [`MlflowSink::start`]'s tags become the run's tags.
#![deny(missing_docs)]

mod client;
mod config;
mod error;
mod sink;
mod spool;

pub use config::{Auth, Experiment, MlflowConfig};
pub use error::TrackError;
pub use sink::{Continue, Lag, MlflowSink, SinkReport};
