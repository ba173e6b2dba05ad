//! The S3 server every host writes to: moto, started as `cargo xtask objects` starts it, but on
//! the bridge's address in the root namespace, which each host reaches over its own link; and a
//! listing of a prefix of its bucket over plain HTTP (moto checks no signature by default).

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use anyhow::ensure;

use super::net::BRIDGE_ADDR;
use crate::scenario::output_within;
use crate::server::Server;

/// The bucket every run of the task writes into.
pub(super) const BUCKET: &str = "ember";

/// Starts moto on a free port of the bridge's address, logging into `log`, and creates the
/// bucket with `check_s3.py`; returns the server and its endpoint.
pub(super) fn start(root: &Path, python: &Path, log: &Path) -> anyhow::Result<(Server, String)> {
    let port = TcpListener::bind((BRIDGE_ADDR, 0))?.local_addr()?.port();
    let server = crate::server::moto(python, (BRIDGE_ADDR, port), &[], log)?;
    let endpoint = format!("http://{BRIDGE_ADDR}:{port}");
    let mut bucket = Command::new(python);
    bucket
        .arg(root.join("xtask/objects/check_s3.py"))
        .args(["bucket", &endpoint, BUCKET]);
    crate::server::s3_env(&mut bucket, &endpoint);
    let out = output_within(bucket, "check_s3.py bucket")?;
    ensure!(
        out.status.success(),
        "creating the bucket failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((server, endpoint))
}

/// The keys under `prefix` in the bucket (the first thousand), from moto's ListObjectsV2.
pub(super) fn keys(endpoint: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    crate::server::s3_keys(endpoint, BUCKET, prefix)
}
