//! MLflow's REST API (`/api/2.0/mlflow/...`): the few calls the sink makes.

use base64::Engine;
use serde_json::{Value, json};

use crate::TrackError;
use crate::config::{Auth, Experiment, MlflowConfig};

/// A request that did not go through, for the sink's thread to decide on.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Worth trying again: no answer, a timeout, a 5xx, a 429.
    Transient(String),
    /// The server refused this request as it is: sending it again changes nothing.
    Refused(String),
}

/// The server, as one agent (its connections kept) with the run's credentials.
pub(crate) struct Client {
    /// The server's URI, without a trailing `/`.
    root: String,
    base: String,
    shown: String,
    authorization: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    pub(crate) fn new(config: &MlflowConfig) -> Self {
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .timeout_global(Some(config.timeout))
                .http_status_as_error(false)
                .build(),
        );
        let authorization = match &config.auth {
            Auth::None => None,
            Auth::Basic { username, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
            )),
            Auth::Token(token) => Some(format!("Bearer {token}")),
        };
        Self {
            root: config.uri.clone(),
            base: format!("{}/api/2.0/mlflow", config.uri),
            shown: config.shown_uri(),
            authorization,
            agent,
        }
    }

    /// The URI as messages show it.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// `GET path?query` or `POST path` with `body`: the status and the body, or why no answer
    /// came.
    fn call(
        &self,
        path: &str,
        query: &[(&str, &str)],
        body: Option<String>,
    ) -> Result<(u16, String), String> {
        let url = format!("{}/{path}", self.base);
        let answer = match body {
            None => {
                let mut request = self.authorized(self.agent.get(&url));
                for (name, value) in query {
                    request = request.query(*name, *value);
                }
                request.call()
            }
            Some(body) => self
                .authorized(self.agent.post(&url))
                .content_type("application/json")
                .send(body),
        };
        Self::read(answer)
    }

    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.authorization {
            Some(auth) => request.header("Authorization", auth),
            None => request,
        }
    }

    /// A response's status and body, or why none came.
    fn read(
        answer: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<(u16, String), String> {
        let mut response = answer.map_err(|error| error.to_string())?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|error| error.to_string())?;
        Ok((status, text))
    }

    /// The call, its failures sorted: no answer is [`TrackError::Unreachable`], 401 and 403
    /// [`TrackError::Unauthorized`]; other statuses are the caller's to read.
    fn answered(
        &self,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<(u16, Value), TrackError> {
        let (status, text) =
            self.call(path, query, body.map(Value::to_string))
                .map_err(|reason| TrackError::Unreachable {
                    uri: self.shown.clone(),
                    reason,
                })?;
        if status == 401 || status == 403 {
            return Err(TrackError::Unauthorized {
                uri: self.shown.clone(),
                status,
            });
        }
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    fn rejected(&self, what: &'static str, status: u16, answer: &Value) -> TrackError {
        TrackError::Rejected {
            uri: self.shown.clone(),
            what,
            status,
            message: message_of(answer),
        }
    }

    /// The id of `experiment`, which must exist.
    pub(crate) fn experiment_id(&self, experiment: &Experiment) -> Result<String, TrackError> {
        let (path, query, asked) = match experiment {
            Experiment::Default => (
                "experiments/get",
                ("experiment_id", "0"),
                "0 (Default)".to_owned(),
            ),
            Experiment::Id(id) => (
                "experiments/get",
                ("experiment_id", id.as_str()),
                id.clone(),
            ),
            Experiment::Name(name) => (
                "experiments/get-by-name",
                ("experiment_name", name.as_str()),
                format!("`{name}`"),
            ),
        };
        let (status, answer) = self.answered(path, &[query], None)?;
        let id = answer["experiment"]["experiment_id"].as_str();
        match (status, id) {
            (200, Some(id)) => Ok(id.to_owned()),
            (200, None) => Err(self.rejected("the experiment lookup", status, &answer)),
            (400 | 404, _) => Err(TrackError::UnknownExperiment {
                uri: self.shown.clone(),
                experiment: asked,
            }),
            _ => Err(self.rejected("the experiment lookup", status, &answer)),
        }
    }

    /// Makes a run in `experiment_id`; its id and where the server keeps its artifacts.
    pub(crate) fn create_run(
        &self,
        experiment_id: &str,
        run_name: Option<&str>,
        start_ms: i64,
    ) -> Result<(String, String), TrackError> {
        let mut body = json!({"experiment_id": experiment_id, "start_time": start_ms});
        if let Some(name) = run_name {
            body["run_name"] = json!(name);
        }
        let (status, answer) = self.answered("runs/create", &[], Some(&body))?;
        let info = &answer["run"]["info"];
        match (info["run_id"].as_str(), info["artifact_uri"].as_str()) {
            (Some(id), artifacts) if status == 200 => {
                Ok((id.to_owned(), artifacts.unwrap_or_default().to_owned()))
            }
            _ => Err(self.rejected("runs/create", status, &answer)),
        }
    }

    /// Where the server keeps the artifacts of the run `run_id`; `None` where it has no such
    /// run.
    pub(crate) fn run_artifact_uri(&self, run_id: &str) -> Result<Option<String>, TrackError> {
        let (status, answer) = self.answered("runs/get", &[("run_id", run_id)], None)?;
        match status {
            200 => Ok(Some(
                answer["run"]["info"]["artifact_uri"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )),
            400 | 404 => Ok(None),
            _ => Err(self.rejected("runs/get", status, &answer)),
        }
    }

    /// Uploads `file` (`{"path", "name"}`) into the run's artifacts at `artifact_uri`, through
    /// the server's artifact proxy (`mlflow-artifacts:` URIs, MLflow's default since 2.0).
    pub(crate) fn put_artifact(&self, artifact_uri: &str, file: &str) -> Result<(), Failure> {
        let file: Value = serde_json::from_str(file).unwrap_or_default();
        let (Some(path), Some(name)) = (file["path"].as_str(), file["name"].as_str()) else {
            return Err(Failure::Refused(format!(
                "a malformed artifact entry {file}"
            )));
        };
        let Some(rest) = artifact_uri.strip_prefix("mlflow-artifacts:") else {
            return Err(Failure::Refused(format!(
                "the server keeps the run's artifacts at `{artifact_uri}`, not behind its \
                 artifact proxy (mlflow server --serve-artifacts, without \
                 --default-artifact-root): {name} is not sent"
            )));
        };
        // `mlflow-artifacts://host:port/path` names the server it is on: this one.
        let rest = match rest.strip_prefix("//") {
            Some(authority_and_path) => authority_and_path
                .find('/')
                .map_or("", |at| &authority_and_path[at..]),
            None => rest,
        };
        let bytes = std::fs::read(path)
            .map_err(|error| Failure::Refused(format!("reading {path} for {name}: {error}")))?;
        let url = format!(
            "{}/api/2.0/mlflow-artifacts/artifacts/{}/{}",
            self.root,
            rest.trim_matches('/'),
            name.trim_start_matches('/')
        );
        let answer = self.authorized(self.agent.put(&url)).send(&bytes[..]);
        Self::sorted(Self::read(answer))
    }

    /// `runs/log-batch` of `lists`: the metrics', params' and tags' JSON objects as spooled,
    /// each list comma-separated.
    pub(crate) fn log_batch(&self, run_id: &str, lists: &[String; 3]) -> Result<(), Failure> {
        let [metrics, params, tags] = lists;
        let run_id = serde_json::to_string(run_id).unwrap_or_default();
        let body = format!(
            r#"{{"run_id":{run_id},"metrics":[{metrics}],"params":[{params}],"tags":[{tags}]}}"#
        );
        Self::sorted(self.call("runs/log-batch", &[], Some(body)))
    }

    /// Marks the run ended with `status` (`FINISHED`, `FAILED`, `KILLED`).
    pub(crate) fn end_run(&self, run_id: &str, status: &str, end_ms: i64) -> Result<(), Failure> {
        let body = json!({"run_id": run_id, "status": status, "end_time": end_ms});
        Self::sorted(self.call("runs/update", &[], Some(body.to_string())))
    }

    /// A call's outcome as the sink's thread decides on it.
    fn sorted(answer: Result<(u16, String), String>) -> Result<(), Failure> {
        match answer {
            Err(reason) => Err(Failure::Transient(reason)),
            Ok((200, _)) => Ok(()),
            Ok((status, text)) => {
                let answer = serde_json::from_str(&text).unwrap_or(Value::String(text));
                let why = format!("HTTP {status}: {}", message_of(&answer));
                match status {
                    429 | 500.. => Err(Failure::Transient(why)),
                    _ => Err(Failure::Refused(why)),
                }
            }
        }
    }
}

/// MLflow's error message in an answer (`{"error_code": …, "message": …}`), or the answer.
fn message_of(answer: &Value) -> String {
    match &answer["message"] {
        Value::String(message) => message.clone(),
        _ => answer.to_string().chars().take(300).collect(),
    }
}
