//! The tracking server of `cargo xtask mlflow` (its process group stopped when dropped),
//! MLflow's Python client (`xtask/mlflow/check_mlflow.py`) and its web page in headless
//! Chromium (`xtask/mlflow/check_mlflow_page.py`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};
use serde_json::json;

use crate::process::{expect_success, run_limited};
use crate::scenario::Env;
use crate::server::{LOOPBACK, ServerGroup, free_port, wait_for_port};

/// The tracking server (stopped when dropped) and MLflow's Python client.
pub(super) struct Mlflow {
    pub(super) python: PathBuf,
    checker: PathBuf,
    pub(super) work: PathBuf,
    pub(super) port: u16,
    pub(super) server: Option<ServerGroup>,
    /// MLflow's basic-auth app in front of the server: its admin's name and password, which
    /// MLflow's client is given as its users give it (`MLFLOW_TRACKING_USERNAME`/`PASSWORD`).
    admin: Option<(String, String)>,
}

impl Mlflow {
    pub(super) fn start(python: &Path, checker: &Path, work: &Path) -> anyhow::Result<Self> {
        Self::start_as(python, checker, work, None)
    }

    /// [`start`](Self::start) behind MLflow's basic-auth app (`--app-name basic-auth`), its
    /// user store in `work` and `admin` (name, password) its administrator.
    pub(super) fn start_with_auth(
        python: &Path,
        checker: &Path,
        work: &Path,
        admin: (&str, &str),
    ) -> anyhow::Result<Self> {
        let admin = (admin.0.to_owned(), admin.1.to_owned());
        Self::start_as(python, checker, work, Some(admin))
    }

    fn start_as(
        python: &Path,
        checker: &Path,
        work: &Path,
        admin: Option<(String, String)>,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(work)?;
        let mut mlflow = Self {
            python: python.to_path_buf(),
            checker: checker.to_path_buf(),
            work: work.to_path_buf(),
            port: free_port()?,
            server: None,
            admin,
        };
        mlflow.serve()?;
        Ok(mlflow)
    }

    /// The environment MLflow's clients take credentials from, for the admin (none without
    /// the auth app).
    pub(super) fn credentials(&self) -> Vec<(&'static str, String)> {
        match &self.admin {
            Some((name, password)) => vec![
                ("MLFLOW_TRACKING_USERNAME", name.clone()),
                ("MLFLOW_TRACKING_PASSWORD", password.clone()),
            ],
            None => Vec::new(),
        }
    }

    pub(super) fn uri(&self) -> String {
        format!("http://{LOOPBACK}:{}", self.port)
    }

    /// `mlflow server` on the task's port and SQLite store (the same across restarts).
    pub(super) fn serve(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.work.join("server.log"))?;
        let store = format!("sqlite:///{}", self.work.join("mlflow.db").display());
        let mut command = Command::new(&self.python);
        command
            .args(["-m", "mlflow", "server", "--backend-store-uri", &store])
            // Artifacts behind the server's proxy (`mlflow-artifacts:` URIs), as teams run it.
            .arg("--artifacts-destination")
            .arg(self.work.join("artifacts"))
            .args([
                "--host",
                LOOPBACK,
                "--port",
                &self.port.to_string(),
                "--workers",
                "1",
            ])
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some((name, password)) = &self.admin {
            let config = self.work.join("basic_auth.ini");
            let users = format!("sqlite:///{}", self.work.join("users.db").display());
            std::fs::write(
                &config,
                format!(
                    "[mlflow]\ndefault_permission = READ\ndatabase_uri = {users}\n\
                     admin_username = {name}\n\
                     authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                ),
            )?;
            command
                .args(["--app-name", "basic-auth"])
                .env("MLFLOW_AUTH_CONFIG_PATH", &config)
                .env("MLFLOW_AUTH_ADMIN_PASSWORD", password)
                // Its CSRF protection's key; one server, so any key made here does.
                .env(
                    "MLFLOW_FLASK_SERVER_SECRET_KEY",
                    format!("ember-{}", self.port),
                );
        }
        self.server = Some(ServerGroup::spawn(command, "mlflow server")?);
        wait_for_port(self.port, "mlflow server")
    }

    /// `check_mlflow.py URI VERB ARG`: what it printed.
    pub(super) fn client(&self, verb: &str, arg: &str) -> anyhow::Result<String> {
        let out = Command::new(&self.python)
            .arg(&self.checker)
            .args([&self.uri(), verb, arg])
            .envs(self.credentials())
            .output()
            .context("starting check_mlflow.py")?;
        ensure!(
            out.status.success(),
            "MLflow's client: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// MLflow's client finds every scalar of each run at a place of `env` as a metric, each
    /// step once with the log's value, and the params given with it among its params.
    pub(super) fn holds(
        &self,
        env: &dyn Env,
        runs: &[(&str, serde_json::Value)],
    ) -> anyhow::Result<String> {
        self.holds_except(env, runs, &[])
    }

    /// [`holds`](Self::holds), for the log's tags that start with none of `not_sent`.
    pub(super) fn holds_except(
        &self,
        env: &dyn Env,
        runs: &[(&str, serde_json::Value)],
        not_sent: &[&str],
    ) -> anyhow::Result<String> {
        let mut spec = Vec::new();
        for (index, (place, params)) in runs.iter().enumerate() {
            let ids = run_ids(place)?;
            let inspected = self.work.join(format!("inspect-{index}.json"));
            std::fs::write(&inspected, env.inspect(place)?.to_string())?;
            // The trained model the run saved, and its event files where it asked to send
            // them, as MLflow must hold them.
            let model = Path::new(place).join("model.bpk");
            let mut artifacts = serde_json::Map::new();
            if model.is_file() {
                artifacts.insert("model/model.bpk".into(), json!(model));
            }
            if asked_for_event_files(place) {
                let names = crate::runs::file_names(Path::new(place));
                // Rank 0 sends its own (`.rank0`, or no rank in the name): another rank's
                // file may still be written when rank 0 ends.
                let own = |name: &&String| !name.contains(".rank") || name.ends_with(".rank0");
                let events = names
                    .iter()
                    .filter(|name| name.contains("tfevents"))
                    .filter(own);
                for name in events {
                    artifacts.insert(format!("events/{name}"), json!(Path::new(place).join(name)));
                }
            }
            spec.push(json!({
                "run_id": ids["run_id"],
                "inspect": inspected,
                "params": params,
                "artifacts": artifacts,
                "not_sent": not_sent,
            }));
        }
        let path = self.work.join("spec.json");
        std::fs::write(&path, serde_json::Value::Array(spec).to_string())?;
        self.client("check", &path.to_string_lossy())
    }

    /// MLflow's page of the run at `place` of `env`, in headless Chromium: its chart of
    /// `train/loss` draws the log's points; what the page check printed. `None` (said in one
    /// line, a failure under CI) where Chromium or Playwright cannot be had.
    pub(super) fn page_draws(
        &self,
        root: &Path,
        env: &dyn Env,
        place: &str,
    ) -> anyhow::Result<Option<String>> {
        let target = crate::process::target_dir(root);
        let Some((chromium, playwright)) = crate::chromium::chromium_and_driver(&target)? else {
            return Ok(None);
        };
        let ids = run_ids(place)?;
        let name = Path::new(place)
            .file_name()
            .context("a place without a name")?;
        let expected = self.work.join("page-expected.json");
        let loss = crate::scenario::loss_points(&env.inspect(place)?)?;
        std::fs::write(&expected, serde_json::to_vec(&loss)?)?;
        let mut page = Command::new(playwright);
        page.arg(root.join("xtask/mlflow/check_mlflow_page.py"))
            .arg("--chromium")
            .arg(chromium)
            .arg("--shots")
            .arg(self.work.join("screenshots").join(name))
            .args(["--url", &self.uri()])
            .args(["--experiment", value_str(&ids, "experiment_id")?])
            .args(["--run", value_str(&ids, "run_id")?])
            .arg("--expect")
            .arg(&expected);
        std::fs::create_dir_all(self.work.join("screenshots"))?;
        let log = self
            .work
            .join("screenshots")
            .join(name)
            .with_extension("log");
        let ran = run_limited(page, "MLflow's run page", &log)?;
        expect_success(&ran, "MLflow's run page in Chromium")?;
        Ok(Some(
            ran.output
                .trim()
                .lines()
                .last()
                .unwrap_or_default()
                .to_owned(),
        ))
    }
}

impl Drop for Mlflow {
    fn drop(&mut self) {
        self.server.take();
    }
}

/// Whether the run at `place` was started with `--mlflow-event-files` (its recorded command).
fn asked_for_event_files(place: &str) -> bool {
    std::fs::read_to_string(Path::new(place).join("checkpoints/run.json"))
        .is_ok_and(|recorded| recorded.contains("\"--mlflow-event-files\""))
}

/// The MLflow ids (`run_id`, `experiment_id`) the sink spooled in the run at `place`.
fn run_ids(place: &str) -> anyhow::Result<serde_json::Value> {
    let spooled = Path::new(place).join(".ember-mlflow").join("run");
    let text = std::fs::read_to_string(&spooled)
        .with_context(|| format!("reading {}", spooled.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn value_str<'a>(ids: &'a serde_json::Value, key: &str) -> anyhow::Result<&'a str> {
    ids[key]
        .as_str()
        .with_context(|| format!("no {key} in the spooled run ids {ids}"))
}
