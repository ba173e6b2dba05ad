//! The servers the object-store checks run on loopback, or the hosts' bridge (moto's S3 server,
//! the outage proxy, Azurite): a module of their own, so that `objects`, `hosts` and `recovery`
//! start them one way, without reaching into one another.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

/// The S3 server and client, pinned as resolved with Python 3.11, beside TensorBoard.
pub(crate) const S3_REQUIREMENTS: &[&str] = &[
    "tensorboard==2.21.0",
    "protobuf==7.36.2",
    "numpy==2.4.6",
    "pillow==12.0.0",
    "moto[server]==5.2.5",
    "boto3==1.44.8",
];

/// A server process (moto, the proxy), stopped when dropped.
pub(crate) struct Server(pub(crate) Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server that starts processes of its own (`mlflow server` runs uvicorn's), stopped with all
/// of them when dropped: it leads a process group of its own, which the drop kills whole.
pub(crate) struct ServerGroup(Child);

impl ServerGroup {
    pub(crate) fn spawn(mut command: Command, what: &str) -> anyhow::Result<Self> {
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        Ok(Self(
            command
                .spawn()
                .with_context(|| format!("starting {what}"))?,
        ))
    }
}

impl Drop for ServerGroup {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
    }
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Where the servers listen unless a task's hosts need another address.
pub(crate) const LOOPBACK: &str = "127.0.0.1";

/// Waits until `what` listens on `port` of [`LOOPBACK`].
pub(crate) fn wait_for_port(port: u16, what: &str) -> anyhow::Result<()> {
    wait_for(LOOPBACK, port, what)
}

/// Waits until `what` listens on `host`:`port`, 60 s at most.
fn wait_for(host: &str, port: u16, what: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    while std::net::TcpStream::connect((host, port)).is_err() {
        ensure!(
            started.elapsed() < Duration::from_secs(60),
            "{what} did not listen on {host}:{port} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Starts moto's S3 server on `host`:`port` (loopback, or the hosts' bridge), with `settings`
/// in its environment, logging into `log`.
pub(crate) fn moto(
    python: &Path,
    (host, port): (&str, u16),
    settings: &[(&str, &Path)],
    log: &Path,
) -> anyhow::Result<Server> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut command = Command::new(python);
    command
        .args(["-m", "moto.server", "-H", host, "-p", &port.to_string()])
        .stdout(log.try_clone()?)
        .stderr(log);
    for (name, value) in settings {
        command.env(name, value);
    }
    let server = Server(command.spawn().context("starting moto's S3 server")?);
    wait_for(host, port, "moto's S3 server")?;
    Ok(server)
}

/// What every S3 client of the check is given: credentials, region, endpoint.
pub(crate) fn s3_env(command: &mut Command, endpoint: &str) {
    command
        .env("AWS_ACCESS_KEY_ID", "ember")
        .env("AWS_SECRET_ACCESS_KEY", "ember-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("S3_ENDPOINT", endpoint)
        .env("TF_CPP_MIN_LOG_LEVEL", "3");
}

/// One plain-HTTP GET of `path` (`/bucket/key?query`) from the S3 server at `endpoint`
/// (`http://host:port`; moto checks no signature by default): the body.
fn s3_http_get(endpoint: &str, path: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::{Read, Write};
    let host = endpoint.trim_start_matches("http://");
    let address: std::net::SocketAddr = host.parse().context("the endpoint's address")?;
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let body = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end to the response's head")?;
    anyhow::ensure!(
        response.starts_with(b"HTTP/1.1 200") || response.starts_with(b"HTTP/1.0 200"),
        "GET {path}: {}",
        String::from_utf8_lossy(&response[..body])
    );
    Ok(response[body + 4..].to_vec())
}

/// The keys under `prefix` in `bucket` (the first thousand), from ListObjectsV2.
pub(crate) fn s3_keys(endpoint: &str, bucket: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    let body = s3_http_get(endpoint, &format!("/{bucket}?list-type=2&prefix={prefix}"))?;
    Ok(String::from_utf8_lossy(&body)
        .split("<Key>")
        .skip(1)
        .filter_map(|rest| rest.split("</Key>").next())
        .map(str::to_owned)
        .collect())
}
