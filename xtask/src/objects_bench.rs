//! `cargo xtask objects --bench [--rounds R]`: what an object-store log directory costs, on a
//! loopback S3 server (moto), against the local disk and against tensorboardX's `s3://` writer.
//!
//! 1. Starts moto and, in front of it, `xtask/objects/outage_proxy.py` counting the bytes
//!    clients send (requests, headers and bodies).
//! 2. For R rounds, in an order that rotates each round, four sides write each workload:
//!    `ember bench write` (release, `object-store` feature) into a local directory and into
//!    `s3://bench/…`, and `xtask/bench/tbx_write.py` (tensorboardX 2.6.5 with its native CRC)
//!    the same. Workloads:
//!    - `scalars`, 100,000 steps, a flush every 1,000 steps: scalars/s, and the bytes on the
//!      wire per byte of event file (tensorboardX uploads the whole growing file at each
//!      flush; ember the new records);
//!    - `tensor`, 200 steps of 100,000 f32 (80 MB), no flush but the close: MB/s.
//! 3. The Trainer's step time with an `s3://` log directory against a local one and none
//!    (`cargo bench -p ember --features object-store --bench remote`).
//! 4. What a checkpoint costs in the bucket against the local disk: one checkpoint of the
//!    digits model and of a 10 M-parameter model, and the Trainer's step time with its log and
//!    checkpoints in the bucket (`cargo bench -p ember --features object-store --bench
//!    checkpoint`).
//!
//! Medians with the spread over rounds go to `target/bench/objects.md` and stdout; the figures
//! quoted in docs/benchmarks.md come from here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail, ensure};

use crate::process::{build, target_dir};
use crate::server::{S3_REQUIREMENTS, Server, free_port, moto, s3_env, wait_for_port};
use crate::venv::{VenvError, ensure_venv};

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

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    EmberLocal,
    EmberS3,
    TbxLocal,
    TbxS3,
}

impl Side {
    const ALL: [Side; 4] = [Side::EmberLocal, Side::EmberS3, Side::TbxLocal, Side::TbxS3];

    fn label(self) -> &'static str {
        match self {
            Side::EmberLocal => "ember, local disk",
            Side::EmberS3 => "ember, s3://",
            Side::TbxLocal => "tensorboardX, local disk",
            Side::TbxS3 => "tensorboardX, s3://",
        }
    }

    fn remote(self) -> bool {
        matches!(self, Side::EmberS3 | Side::TbxS3)
    }

    /// The local side whose files hold the bytes this side writes.
    fn local(self) -> Side {
        match self {
            Side::EmberS3 => Side::EmberLocal,
            Side::TbxS3 => Side::TbxLocal,
            other => other,
        }
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

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let rounds = crate::process::positive_arg(args, "--rounds", 5)?;
    let target = target_dir(root);
    let python = match ensure_venv(&target.join("s3-bench-venv"), &requirements()) {
        Ok(python) => python,
        Err(VenvError::Unavailable(why)) => bail!("objects --bench needs Python and PyPI: {why}"),
        Err(VenvError::Failed(e)) => return Err(e),
    };
    build(root, EMBER_BUILD)?;
    let ember = target.join("release").join("ember");
    let work = target.join("objects-bench");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;

    let port = free_port()?;
    let direct = format!("http://127.0.0.1:{port}");
    let _server = moto(&python, port, &[], &work.join("moto.log"))?;
    let proxy_port = free_port()?;
    let count_file = work.join("sent-bytes");
    let _proxy = Server(
        Command::new(&python)
            .arg(root.join("xtask/objects/outage_proxy.py"))
            .args([proxy_port.to_string(), port.to_string()])
            .arg(work.join("never-down"))
            .arg(&count_file)
            .spawn()
            .context("starting the counting proxy")?,
    );
    wait_for_port(proxy_port, "the counting proxy")?;
    create_bucket(root, &python, &direct)?;
    let bench = Bench {
        root,
        python,
        ember,
        work,
        counted: format!("http://127.0.0.1:{proxy_port}"),
        count_file,
    };

    let mut report = String::from(
        "| workload | side | steps/s median (min–max) | MB/s | event bytes | bytes on the wire | wire / event bytes |\n|---|---|---:|---:|---:|---:|---:|\n",
    );
    for workload in WORKLOADS {
        let figures = bench.rounds(workload, rounds)?;
        report_rows(&mut report, workload, &figures);
    }

    // The Trainer with an s3:// log directory, straight to the server; then what a checkpoint
    // costs there against the local disk.
    let trainer = ember_bench(root, &direct, "remote", &[], "s3://bench/trainer")?;
    let checkpoints = ember_bench(
        root,
        &direct,
        "checkpoint",
        &["20"],
        "s3://bench/checkpoint",
    )?;

    let text = format!(
        "# Object-store log directories: what they cost\n\n{rounds} rounds, rotating order; moto \
         5.2.5 on loopback, behind a proxy that counts what clients send.\n\n{report}\n{trainer}\n\n\
         ## Checkpoints\n\n{checkpoints}\n"
    );
    let path: PathBuf = target.join("bench").join("objects.md");
    std::fs::create_dir_all(path.parent().context("no bench dir")?)?;
    std::fs::write(&path, &text)?;
    println!("{text}\n(written to {})", path.display());
    Ok(())
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
/// and the counting proxy's URL and count file.
struct Bench<'a> {
    root: &'a Path,
    python: PathBuf,
    ember: PathBuf,
    work: PathBuf,
    counted: String,
    count_file: PathBuf,
}

impl Bench<'_> {
    /// The bytes the proxy has counted so far.
    fn sent(&self) -> anyhow::Result<f64> {
        // The proxy writes its count every 50 ms: wait for the last bytes to be in it.
        std::thread::sleep(Duration::from_millis(200));
        Ok(std::fs::read_to_string(&self.count_file)?.trim().parse()?)
    }

    /// Every side's figures for `workload` over `rounds` rounds, in an order that rotates each
    /// round.
    fn rounds(
        &self,
        workload: &Workload,
        rounds: usize,
    ) -> anyhow::Result<BTreeMap<Side, Vec<Figure>>> {
        let mut figures: BTreeMap<Side, Vec<Figure>> = BTreeMap::new();
        for round in 0..rounds {
            for k in 0..Side::ALL.len() {
                let side = Side::ALL[(round + k) % Side::ALL.len()];
                let name = format!("{}-{round}-{k}", workload.name);
                let figure = self.run_side(workload, side, &name)?;
                figures.entry(side).or_default().push(figure);
            }
        }
        Ok(figures)
    }

    /// One run of `side` on `workload`, into the run `name`.
    fn run_side(&self, workload: &Workload, side: Side, name: &str) -> anyhow::Result<Figure> {
        let before = self.sent()?;
        let mut command = match side {
            Side::EmberLocal | Side::EmberS3 => {
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
        let out = if side.remote() {
            format!("s3://bench/{name}")
        } else {
            self.work.join(name).display().to_string()
        };
        command
            .args(["--out", &out])
            .current_dir(self.root.join("xtask/bench"));
        s3_env(&mut command, &self.counted);
        let output = command
            .output()
            .with_context(|| format!("running {}", side.label()))?;
        ensure!(
            output.status.success(),
            "{} on {} failed:\n{}",
            side.label(),
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
            wire: if side.remote() {
                self.sent()? - before
            } else {
                0.0
            },
        })
    }
}

/// One report row per side for `workload`: medians with the spread over rounds.
fn report_rows(report: &mut String, workload: &Workload, figures: &BTreeMap<Side, Vec<Figure>>) {
    for side in Side::ALL {
        let runs = &figures[&side];
        let mut rates: Vec<f64> = runs
            .iter()
            .map(|f| workload.steps as f64 / f.seconds)
            .collect();
        rates.sort_by(f64::total_cmp);
        let written = median(figures[&side.local()].iter().map(|f| f.written));
        let seconds = median(runs.iter().map(|f| f.seconds));
        let (wire, ratio) = if side.remote() {
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
            side.label(),
            median(rates.iter().copied()),
            rates[0],
            rates[rates.len() - 1],
            written / seconds / 1e6,
        ));
    }
}

/// Runs ember's bench `name` (release, `object-store` feature) against the S3 server at
/// `endpoint` with `EMBER_BENCH_URL=url`; its result lines.
fn ember_bench(
    root: &Path,
    endpoint: &str,
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
    s3_env(&mut bench, endpoint);
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

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}
