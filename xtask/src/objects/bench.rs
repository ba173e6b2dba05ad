//! `cargo xtask objects --bench [--rounds R] [--checkpoints]`: what an object-store log directory costs, on each
//! cloud's emulator on loopback (moto's S3, fake-gcs-server, Azurite), against the local disk and
//! against tensorboardX's `s3://` writer.
//!
//! 1. Starts moto, fake-gcs-server (behind `xtask/objects/gcs_xml_put.py`, as `cargo xtask
//!    objects` runs it) and Azurite, each with a bucket `bench`, and in front of each
//!    `xtask/objects/outage_proxy.py` counting the bytes clients send (requests, headers and
//!    bodies).
//! 2. For R rounds, in an order that rotates each round, the sides write each workload:
//!    `ember bench write` (release, `object-store` feature) into a local directory and into
//!    `s3://bench/…`, `gs://bench/…` and `az://bench/…`, and `xtask/bench/tbx_write.py`
//!    (tensorboardX 2.6.5 with its native CRC) into a local directory and `s3://` (it has no
//!    other cloud writer). Workloads:
//!    - `scalars`, 100,000 steps, a flush every 1,000 steps: scalars/s, and the bytes on the
//!      wire per byte of event file (tensorboardX uploads the whole growing file at each
//!      flush; ember the new records);
//!    - `tensor`, 200 steps of 100,000 f32 (80 MB), no flush but the close: MB/s.
//! 3. For each store: the Trainer's step time with a log directory there against a local one
//!    and none (`cargo bench -p ember --features object-store --bench remote`), and what a
//!    checkpoint costs there against the local disk: one checkpoint of the digits model and of
//!    a 10 M-parameter model, and the Trainer's step time with its log and checkpoints there
//!    (`cargo bench -p ember --features object-store --bench checkpoint`).
//!
//! Medians with the spread over rounds go to `target/bench/objects.md` and stdout; the figures
//! quoted in docs/benchmarks.md come from here. Azurite and fake-gcs-server need what `cargo
//! xtask objects` installs (npm, PyPI); without them the bench stops, naming what is missing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail, ensure};

use crate::process::{build, target_dir};
use crate::server::{LOOPBACK, S3_REQUIREMENTS, Server, free_port, moto, s3_env, wait_for_port};
use crate::stats::median;
use crate::venv::{VenvError, ensure_venv};

const TASK: &str = "objects --bench";

/// The S3 venv's packages and tensorboardX with its native CRC, as `cargo xtask bench --peers`
/// pins them.
fn requirements() -> Vec<&'static str> {
    let mut all = S3_REQUIREMENTS.to_vec();
    all.extend(["tensorboardX==2.6.5", "crc32c==2.9.post0"]);
    all
}

/// A workload and what it is measured for.
struct Workload {
    name: &'static str,
    steps: u64,
    flush_every: Option<u64>,
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "scalars",
        steps: 100_000,
        flush_every: Some(1_000),
    },
    Workload {
        name: "tensor",
        steps: 200,
        flush_every: None,
    },
];

/// Who writes, and where: `Ember(i)` and `TbxS3` write into the store `i` of
/// [`Bench::stores`] (tensorboardX into the first, S3: it has no other cloud writer).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    EmberLocal,
    Ember(usize),
    TbxLocal,
    TbxS3,
}

impl Side {
    /// Every side, for `stores` stores.
    fn all(stores: usize) -> Vec<Side> {
        let mut all = vec![Side::EmberLocal];
        all.extend((0..stores).map(Side::Ember));
        all.extend([Side::TbxLocal, Side::TbxS3]);
        all
    }

    /// The store this side writes into; `None` for the local disk.
    fn store(self) -> Option<usize> {
        match self {
            Side::Ember(store) => Some(store),
            Side::TbxS3 => Some(0),
            Side::EmberLocal | Side::TbxLocal => None,
        }
    }

    fn label(self, stores: &[Store]) -> String {
        match self {
            Side::EmberLocal => "ember, local disk".to_owned(),
            Side::Ember(store) => format!("ember, {}://", stores[store].scheme),
            Side::TbxLocal => "tensorboardX, local disk".to_owned(),
            Side::TbxS3 => "tensorboardX, s3://".to_owned(),
        }
    }

    /// The local side whose files hold the bytes this side writes.
    fn local(self) -> Side {
        match self {
            Side::Ember(_) => Side::EmberLocal,
            Side::TbxS3 => Side::TbxLocal,
            other => other,
        }
    }
}

/// A store the sides write into: its emulator, and in front of it a proxy that counts what
/// clients send.
struct Store {
    scheme: &'static str,
    /// The emulator, as the report names it.
    name: &'static str,
    /// Points a command at the store at a URL: credentials and endpoint in its environment.
    env: fn(&mut Command, &str),
    /// The store itself (for the benches whose bytes are not counted) and the counting proxy.
    direct: String,
    counted: String,
    count_file: PathBuf,
    _servers: Vec<Server>,
}

impl Store {
    /// The bytes this store's proxy has counted so far.
    fn sent(&self) -> anyhow::Result<f64> {
        // The proxy writes its count every 50 ms: wait for the last bytes to be in it.
        std::thread::sleep(Duration::from_millis(200));
        Ok(std::fs::read_to_string(&self.count_file)?.trim().parse()?)
    }
}

/// One run of one side: seconds, bytes of event files (local) and bytes on the wire (s3).
#[derive(Clone, Copy, Default)]
struct Figure {
    seconds: f64,
    written: f64,
    wire: f64,
}

/// The release `ember` with its `object-store` feature.
const EMBER_BUILD: &[&str] = &[
    "build",
    "--release",
    "-p",
    "ember-cli",
    "--features",
    "object-store",
];

/// Measures `rounds` rounds; `checkpoints_only`: the Trainer's checkpoints alone (bucket against
/// local disk, side by side in each run), without the write workloads and the `remote` bench:
/// what a change to checkpointing moves.
pub(crate) fn run(root: &Path, rounds: usize, checkpoints_only: bool) -> anyhow::Result<()> {
    let target = target_dir(root);
    let python = match ensure_venv(&target.join("s3-bench-venv"), &requirements()) {
        Ok(python) => python,
        Err(VenvError::Unavailable(why)) => bail!("objects --bench needs Python and PyPI: {why}"),
        Err(VenvError::Failed(e)) => return Err(e),
    };
    if !checkpoints_only {
        build(root, EMBER_BUILD)?;
    }
    let ember = target.join("release").join("ember");
    let work = target.join("objects-bench");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    let bench = Bench {
        root,
        stores: stores(root, &target, &python, &work)?,
        python,
        ember,
        work,
    };

    let mut report = String::from(
        "| workload | side | steps/s median (min–max) | MB/s | event bytes | bytes on the wire | wire / event bytes |\n|---|---|---:|---:|---:|---:|---:|\n",
    );
    for workload in WORKLOADS.iter().filter(|_| !checkpoints_only) {
        let figures = bench.rounds(workload, rounds)?;
        report_rows(&mut report, workload, &figures, &bench.stores);
    }
    let names: Vec<String> = bench
        .stores
        .iter()
        .map(|store| format!("{}:// on {}", store.scheme, store.name))
        .collect();
    let mut text = format!(
        "# Object-store log directories: what they cost\n\n{rounds} rounds, rotating order; {}, \
         on loopback, each behind a proxy that counts what clients send.\n\n{report}\n",
        names.join(", ")
    );
    // For each store, straight to it: the Trainer with its log directory there, then what a
    // checkpoint costs there against the local disk.
    for store in &bench.stores {
        let env = |command: &mut Command| (store.env)(command, &store.direct);
        let trainer_url = format!("{}://bench/trainer", store.scheme);
        let trainer = if checkpoints_only {
            String::new()
        } else {
            ember_bench(root, &env, "remote", &[], &trainer_url)?
        };
        let checkpoint_url = format!("{}://bench/checkpoint", store.scheme);
        let checkpoint_args: &[&str] = if checkpoints_only {
            &["20", "trainer"]
        } else {
            &["20"]
        };
        let checkpoints = ember_bench(root, &env, "checkpoint", checkpoint_args, &checkpoint_url)?;
        text.push_str(&format!(
            "## {}:// ({})\n\n{trainer}\n\n### Checkpoints\n\n{checkpoints}\n\n",
            store.scheme, store.name
        ));
    }
    let path: PathBuf = target.join("bench").join("objects.md");
    std::fs::create_dir_all(path.parent().context("no bench dir")?)?;
    std::fs::write(&path, &text)?;
    println!("{text}\n(written to {})", path.display());
    Ok(())
}

/// The three stores, each with a bucket `bench` and its counting proxy: moto (run by the
/// bench venv's `python`), fake-gcs-server and Azurite (what `cargo xtask objects` installs).
fn stores(root: &Path, target: &Path, python: &Path, work: &Path) -> anyhow::Result<Vec<Store>> {
    let port = free_port()?;
    let moto_url = format!("http://127.0.0.1:{port}");
    let moto = moto(python, (LOOPBACK, port), &[], &work.join("moto.log"))?;
    create_bucket(root, python, &moto_url)?;
    let readers = crate::objects::clouds::readers_python(target, TASK)?
        .context("the readers' venv (fake-gcs-server, the Azure SDK) could not be made")?;
    let google = crate::objects::gcs::start(root, &readers, work, "bench")?;
    let google_url = google.front.clone();
    let azurite = crate::objects::azure::install_azurite(target)
        .map_err(|why| anyhow::anyhow!("Azurite: {why}"))?;
    let (azurite, azurite_url) =
        crate::objects::azure::start(root, &azurite, &readers, work, "bench")?;
    let s3: fn(&mut Command, &str) = s3_env;
    let parts = [
        ("s3", "moto 5.2.5", s3, moto_url, vec![moto]),
        (
            "gs",
            "fake-gcs-server 1.54 behind its XML PUT front",
            crate::objects::gcs::store_env,
            google_url,
            google.into_servers(),
        ),
        (
            "az",
            "Azurite 3.37.0",
            crate::objects::azure::store_env,
            azurite_url,
            vec![azurite],
        ),
    ];
    let mut stores = Vec::new();
    for (scheme, name, env, direct, mut servers) in parts {
        let count_file = work.join(format!("{scheme}-sent-bytes"));
        let (proxy, counted) = counting_proxy(root, python, &direct, &count_file, work)?;
        servers.push(proxy);
        stores.push(Store {
            scheme,
            name,
            env,
            direct,
            counted,
            count_file,
            _servers: servers,
        });
    }
    Ok(stores)
}

/// `xtask/objects/outage_proxy.py` in front of the store at `url`, counting into `count_file`:
/// the proxy, stopped when dropped, and its URL.
fn counting_proxy(
    root: &Path,
    python: &Path,
    url: &str,
    count_file: &Path,
    work: &Path,
) -> anyhow::Result<(Server, String)> {
    let port = url
        .rsplit(':')
        .next()
        .context("a store URL without a port")?;
    let proxy_port = free_port()?;
    let proxy = Server(
        Command::new(python)
            .arg(root.join("xtask/objects/outage_proxy.py"))
            .args([proxy_port.to_string(), port.to_owned()])
            .arg(work.join("never-down"))
            .arg(count_file)
            .spawn()
            .context("starting the counting proxy")?,
    );
    wait_for_port(proxy_port, "the counting proxy")?;
    Ok((proxy, format!("http://127.0.0.1:{proxy_port}")))
}

/// The `bench` bucket on the S3 server at `endpoint`.
fn create_bucket(root: &Path, python: &Path, endpoint: &str) -> anyhow::Result<()> {
    let mut bucket = Command::new(python);
    bucket
        .arg(root.join("xtask/objects/check_s3.py"))
        .args(["bucket", endpoint, "bench"]);
    s3_env(&mut bucket, endpoint);
    let status = bucket.status()?;
    ensure!(status.success(), "creating the bench bucket failed");
    Ok(())
}

/// What the sides' runs need: the release binary, the venv's Python, the local output folder,
/// and the stores.
struct Bench<'a> {
    root: &'a Path,
    python: PathBuf,
    ember: PathBuf,
    work: PathBuf,
    stores: Vec<Store>,
}

impl Bench<'_> {
    /// Every side's figures for `workload` over `rounds` rounds, in an order that rotates each
    /// round.
    fn rounds(
        &self,
        workload: &Workload,
        rounds: usize,
    ) -> anyhow::Result<BTreeMap<Side, Vec<Figure>>> {
        let mut figures: BTreeMap<Side, Vec<Figure>> = BTreeMap::new();
        let sides = Side::all(self.stores.len());
        for round in 0..rounds {
            for k in 0..sides.len() {
                let side = sides[(round + k) % sides.len()];
                let name = format!("{}-{round}-{k}", workload.name);
                let figure = self.run_side(workload, side, &name)?;
                figures.entry(side).or_default().push(figure);
            }
        }
        Ok(figures)
    }

    /// One run of `side` on `workload`, into the run `name`.
    fn run_side(&self, workload: &Workload, side: Side, name: &str) -> anyhow::Result<Figure> {
        let store = side.store().map(|store| &self.stores[store]);
        let before = store.map(Store::sent).transpose()?;
        let label = side.label(&self.stores);
        let mut command = match side {
            Side::EmberLocal | Side::Ember(_) => {
                let mut c = Command::new(&self.ember);
                c.args(["bench", "write", "--workload", workload.name]);
                c
            }
            Side::TbxLocal | Side::TbxS3 => {
                let mut c = Command::new(&self.python);
                c.arg(self.root.join("xtask/bench/tbx_write.py"))
                    .args(["--workload", workload.name]);
                c
            }
        };
        command.args(["--n", &workload.steps.to_string()]);
        if let Some(every) = workload.flush_every {
            command.args(["--flush-every", &every.to_string()]);
        }
        let out = match store {
            Some(store) => {
                (store.env)(&mut command, &store.counted);
                format!("{}://bench/{name}", store.scheme)
            }
            None => self.work.join(name).display().to_string(),
        };
        command
            .args(["--out", &out])
            .current_dir(self.root.join("xtask/bench"));
        let output = command
            .output()
            .with_context(|| format!("running {label}"))?;
        ensure!(
            output.status.success(),
            "{label} on {} failed:\n{}",
            workload.name,
            String::from_utf8_lossy(&output.stderr)
        );
        let line: serde_json::Value = serde_json::from_slice(
            output
                .stdout
                .split(|b| *b == b'\n')
                .find(|l| l.starts_with(b"{"))
                .context("no JSON line")?,
        )?;
        let seconds = line["seconds"].as_f64().context("no seconds")?;
        Ok(Figure {
            seconds,
            written: line["bytes"].as_f64().unwrap_or(0.0),
            wire: match (store, before) {
                (Some(store), Some(before)) => store.sent()? - before,
                _ => 0.0,
            },
        })
    }
}

/// One report row per side for `workload`: medians with the spread over rounds.
fn report_rows(
    report: &mut String,
    workload: &Workload,
    figures: &BTreeMap<Side, Vec<Figure>>,
    stores: &[Store],
) {
    for side in Side::all(stores.len()) {
        let runs = &figures[&side];
        let mut rates: Vec<f64> = runs
            .iter()
            .map(|f| workload.steps as f64 / f.seconds)
            .collect();
        rates.sort_by(f64::total_cmp);
        let written = median(figures[&side.local()].iter().map(|f| f.written));
        let seconds = median(runs.iter().map(|f| f.seconds));
        let (wire, ratio) = if side.store().is_some() {
            let wire = median(runs.iter().map(|f| f.wire));
            (format!("{wire:.0}"), format!("{:.2}", wire / written))
        } else {
            ("–".to_owned(), "–".to_owned())
        };
        report.push_str(&format!(
            "| {} × {}{} | {} | {:.0} ({:.0}–{:.0}) | {:.1} | {written:.0} | {wire} | {ratio} |\n",
            workload.name,
            workload.steps,
            workload
                .flush_every
                .map_or(String::new(), |k| format!(", flush every {k}")),
            side.label(stores),
            median(rates.iter().copied()),
            rates[0],
            rates[rates.len() - 1],
            written / seconds / 1e6,
        ));
    }
}

/// Runs ember's bench `name` (release, `object-store` feature) against the store `env` points
/// it at, with `EMBER_BENCH_URL=url`; its result lines.
fn ember_bench(
    root: &Path,
    env: &dyn Fn(&mut Command),
    name: &str,
    args: &[&str],
    url: &str,
) -> anyhow::Result<String> {
    let mut bench = crate::process::cargo();
    bench
        .args([
            "bench",
            "-p",
            "ember",
            "--features",
            "object-store",
            "--bench",
            name,
        ])
        .arg("--")
        .args(args)
        .current_dir(root)
        .env("EMBER_BENCH_URL", url);
    env(&mut bench);
    let output = bench
        .output()
        .with_context(|| format!("running the {name} bench"))?;
    ensure!(
        output.status.success(),
        "the {name} bench failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.starts_with("Trainer") || l.contains(": "))
        .collect::<Vec<_>>()
        .join("\n"))
}
