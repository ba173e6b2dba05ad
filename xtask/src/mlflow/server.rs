//! The tracking server of `cargo xtask mlflow` (its process group stopped when dropped) and
//! MLflow's Python client, `xtask/mlflow/check_mlflow.py`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};
use serde_json::json;

use crate::scenario::Env;
use crate::server::{LOOPBACK, ServerGroup, free_port, wait_for_port};

/// The tracking server (stopped when dropped) and MLflow's Python client.
pub(super) struct Mlflow {
    pub(super) python: PathBuf,
    checker: PathBuf,
    pub(super) work: PathBuf,
    pub(super) port: u16,
    pub(super) server: Option<ServerGroup>,
}

impl Mlflow {
    pub(super) fn start(python: &Path, checker: &Path, work: &Path) -> anyhow::Result<Self> {
        let mut mlflow = Self {
            python: python.to_path_buf(),
            checker: checker.to_path_buf(),
            work: work.to_path_buf(),
            port: free_port()?,
            server: None,
        };
        mlflow.serve()?;
        Ok(mlflow)
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
            .arg("--default-artifact-root")
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
        self.server = Some(ServerGroup::spawn(command, "mlflow server")?);
        wait_for_port(self.port, "mlflow server")
    }

    /// `check_mlflow.py URI VERB ARG`: what it printed.
    pub(super) fn client(&self, verb: &str, arg: &str) -> anyhow::Result<String> {
        let out = Command::new(&self.python)
            .arg(&self.checker)
            .args([&self.uri(), verb, arg])
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
        let mut spec = Vec::new();
        for (index, (place, params)) in runs.iter().enumerate() {
            let spooled = Path::new(place).join(".ember-mlflow").join("run");
            let ids: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(&spooled)
                    .with_context(|| format!("reading {}", spooled.display()))?,
            )?;
            let inspected = self.work.join(format!("inspect-{index}.json"));
            std::fs::write(&inspected, env.inspect(place)?.to_string())?;
            spec.push(json!({"run_id": ids["run_id"], "inspect": inspected, "params": params}));
        }
        let path = self.work.join("spec.json");
        std::fs::write(&path, serde_json::Value::Array(spec).to_string())?;
        self.client("check", &path.to_string_lossy())
    }
}

impl Drop for Mlflow {
    fn drop(&mut self) {
        self.server.take();
    }
}
