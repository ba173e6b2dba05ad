//! Where the tracking server is and who the sink is to it.

use std::time::Duration;

use crate::TrackError;

/// The experiment a run goes into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Experiment {
    /// MLflow's `Default` experiment (id `0`).
    Default,
    /// The experiment of this name; one that does not exist is an error at start.
    Name(String),
    /// The experiment of this id; one that does not exist is an error at start.
    Id(String),
}

/// How the sink authenticates, as MLflow's clients do.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// No credentials.
    None,
    /// HTTP basic authentication (`MLFLOW_TRACKING_USERNAME`, `MLFLOW_TRACKING_PASSWORD`).
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: String,
    },
    /// A bearer token (`MLFLOW_TRACKING_TOKEN`).
    Token(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Credentials never reach a message or a log.
        f.write_str(match self {
            Auth::None => "None",
            Auth::Basic { .. } => "Basic(..)",
            Auth::Token(_) => "Token(..)",
        })
    }
}

/// An MLflow tracking server and the experiment a run goes into.
#[derive(Debug, Clone)]
pub struct MlflowConfig {
    /// `http://` or `https://`, without the `/api/...` part.
    pub uri: String,
    /// The run's experiment.
    pub experiment: Experiment,
    /// The credentials.
    pub auth: Auth,
    /// The run's name in MLflow's UI; MLflow makes one up when `None`.
    pub run_name: Option<String>,
    /// How long one request may take.
    pub timeout: Duration,
    /// The most bytes of spooled points not yet acknowledged; past it new points are dropped,
    /// counted and named.
    pub spool_cap: u64,
    /// How long closing waits for the server to acknowledge what is spooled; what is left
    /// stays in the spool, for the next start of the run to send.
    pub close_wait: Duration,
}

impl MlflowConfig {
    /// The server at `uri`, MLflow's default experiment, no credentials.
    pub fn new(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into().trim_end_matches('/').to_owned(),
            experiment: Experiment::Default,
            auth: Auth::None,
            run_name: None,
            timeout: Duration::from_secs(10),
            spool_cap: 256 << 20,
            close_wait: Duration::from_secs(30),
        }
    }

    /// The configuration MLflow's own clients read from the environment: the tracking URI
    /// (`uri` when given, else `MLFLOW_TRACKING_URI`), `MLFLOW_EXPERIMENT_ID` or
    /// `MLFLOW_EXPERIMENT_NAME`, and the credentials. `Ok(None)`: no URI anywhere.
    pub fn from_env(uri: Option<&str>) -> Result<Option<Self>, TrackError> {
        Self::from_vars(uri, |name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over `var` in place of the environment.
    pub fn from_vars(
        uri: Option<&str>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, TrackError> {
        let given = |name: &str| var(name).filter(|value| !value.is_empty());
        let Some(uri) = uri
            .map(str::to_owned)
            .or_else(|| given("MLFLOW_TRACKING_URI"))
        else {
            return Ok(None);
        };
        let mut config = Self::new(uri);
        if !(config.uri.starts_with("http://") || config.uri.starts_with("https://")) {
            return Err(TrackError::UnsupportedUri {
                uri: redacted(&config.uri),
            });
        }
        config.experiment = match (
            given("MLFLOW_EXPERIMENT_ID"),
            given("MLFLOW_EXPERIMENT_NAME"),
        ) {
            (Some(id), _) => Experiment::Id(id),
            (None, Some(name)) => Experiment::Name(name),
            (None, None) => Experiment::Default,
        };
        config.auth = match (
            given("MLFLOW_TRACKING_TOKEN"),
            given("MLFLOW_TRACKING_USERNAME"),
            given("MLFLOW_TRACKING_PASSWORD"),
        ) {
            (Some(token), _, _) => Auth::Token(token),
            (None, Some(username), password) => Auth::Basic {
                username,
                password: password.unwrap_or_default(),
            },
            (None, None, _) => Auth::None,
        };
        config.run_name = given("MLFLOW_RUN_NAME");
        Ok(Some(config))
    }

    /// The URI as messages show it: without user information (`user:password@`).
    pub fn shown_uri(&self) -> String {
        redacted(&self.uri)
    }
}

/// `uri` without the user information of its authority.
pub(crate) fn redacted(uri: &str) -> String {
    let (scheme, rest) = uri.split_once("://").unwrap_or(("", uri));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    match scheme {
        "" => format!("{host}{path}"),
        _ => format!("{scheme}://{host}{path}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_environment_is_read_as_mlflow_reads_it() {
        let config = MlflowConfig::from_vars(
            None,
            vars(&[
                ("MLFLOW_TRACKING_URI", "http://h:5000/"),
                ("MLFLOW_EXPERIMENT_NAME", "digits"),
                ("MLFLOW_TRACKING_USERNAME", "u"),
                ("MLFLOW_TRACKING_PASSWORD", "secret"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(config.uri, "http://h:5000");
        assert_eq!(config.experiment, Experiment::Name("digits".into()));
        assert!(!format!("{config:?}").contains("secret"));
        let by_id = vars(&[
            ("MLFLOW_EXPERIMENT_ID", "7"),
            ("MLFLOW_TRACKING_TOKEN", "t"),
        ]);
        let config = MlflowConfig::from_vars(Some("https://x"), by_id)
            .unwrap()
            .unwrap();
        assert_eq!(config.experiment, Experiment::Id("7".into()));
        assert_eq!(config.auth, Auth::Token("t".into()));
        assert!(MlflowConfig::from_vars(None, vars(&[])).unwrap().is_none());
    }

    #[test]
    fn a_uri_mlflow_serves_without_a_server_is_refused_without_its_credentials() {
        let error = MlflowConfig::from_vars(Some("databricks://me:pw@ws"), vars(&[])).unwrap_err();
        assert!(
            matches!(error, TrackError::UnsupportedUri { .. }),
            "{error}"
        );
        assert!(!error.to_string().contains("pw"), "{error}");
        assert_eq!(redacted("https://me:pw@h:1/p"), "https://h:1/p");
    }
}
