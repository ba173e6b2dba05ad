//! What can go wrong between a run and its tracking server.

use std::path::PathBuf;

/// An error of the tracker sink. URIs in messages carry no credentials.
#[derive(Debug, thiserror::Error)]
pub enum TrackError {
    /// The URI is not an MLflow tracking server's (`http://` or `https://`).
    #[error(
        "{uri} is not a tracking server's URI: ember sends to MLflow's REST API over http:// or https://"
    )]
    UnsupportedUri {
        /// The URI, without its user information.
        uri: String,
    },
    /// Nothing answered at the URI.
    #[error("the MLflow tracking server at {uri} does not answer: {reason}")]
    Unreachable {
        /// The URI, without its user information.
        uri: String,
        /// What the connection met.
        reason: String,
    },
    /// The server refused the credentials.
    #[error(
        "the MLflow tracking server at {uri} refused the credentials (HTTP {status}); set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN"
    )]
    Unauthorized {
        /// The URI, without its user information.
        uri: String,
        /// 401 or 403.
        status: u16,
    },
    /// The experiment does not exist on the server.
    #[error(
        "the MLflow tracking server at {uri} has no experiment {experiment}; create it (mlflow experiments create) or name another"
    )]
    UnknownExperiment {
        /// The URI, without its user information.
        uri: String,
        /// The name or id asked for.
        experiment: String,
    },
    /// The run the spool names is not on the server any more.
    #[error("the MLflow run {run_id} this run's spool names is not on the server at {uri}")]
    RunGone {
        /// The URI, without its user information.
        uri: String,
        /// MLflow's run id.
        run_id: String,
    },
    /// The server answered a request with an error.
    #[error("the MLflow tracking server at {uri} answered {what} with HTTP {status}: {message}")]
    Rejected {
        /// The URI, without its user information.
        uri: String,
        /// The request.
        what: &'static str,
        /// The HTTP status.
        status: u16,
        /// MLflow's error message.
        message: String,
    },
    /// The spool could not be read or written.
    #[error("the MLflow spool {}: {source}", path.display())]
    Spool {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The sink's thread could not be started or has gone.
    #[error("the MLflow sink's thread: {0}")]
    Thread(String),
}

impl TrackError {
    pub(crate) fn spool(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| TrackError::Spool {
            path: path.to_path_buf(),
            source,
        }
    }
}
