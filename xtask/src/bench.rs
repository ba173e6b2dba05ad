//! `cargo xtask bench [--peers] [--skip-criterion] [--rounds R]`: ember's speed, and with
//! `--peers` tensorboardX's on the same workloads, in one report.
//!
//! 1. `cargo bench --workspace` (criterion), unless `--skip-criterion`; the mean of every
//!    benchmark that run produced goes into the report.
//! 2. Builds `ember-cli` in release and runs `ember bench write --workload W --n N --out <dir>`
//!    for the five workloads of `crates/ember-write/src/workload.rs`.
//! 3. With `--peers`, runs `xtask/bench/tbx_write.py` (pinned tensorboardX in a venv under
//!    `<target>/bench-venv`) on the same workloads, right after ember's run of each workload, so
//!    both see the same machine load. With `--rounds R` every pair runs `R` times and the median
//!    time counts.
//! 4. Writes `<target>/bench/report.json` and `report.md`: each figure and the ratio ember / peer.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use crate::compat::{self, VenvError};

/// The peer's packages. `tensorboardX` 2.6.5 is the newest release on PyPI (the one the
/// reference notes describe); `crc32c` is the native CRC that tensorboardX picks up when
/// installed, as its README advises, so the peer runs at its best rather than with the
/// pure-Python CRC; `pillow` encodes its images; `numpy` and `protobuf` are pinned to what
/// tensorboardX resolved to on Python 3.11, so a new release cannot move the figures.
pub(crate) const BENCH_REQUIREMENTS: &[&str] = &[
    "tensorboardX==2.6.5",
    "protobuf==7.36.2",
    "numpy==2.4.6",
    "pillow==12.0.0",
    "crc32c==2.9.post0",
];

/// Each workload and its step count: enough for a few seconds of ember's time on 2 cores.
pub(crate) const WORKLOADS: &[(&str, u64)] = &[
    ("scalars", 1_000_000),
    ("scalars10", 200_000),
    ("hist", 200),
    ("image", 2_000),
    ("tensor", 500),
];

#[derive(Debug, Default)]
struct Options {
    peers: bool,
    skip_criterion: bool,
    rounds: usize,
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut options = Options {
        rounds: 1,
        ..Options::default()
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--peers" => options.peers = true,
            "--skip-criterion" => options.skip_criterion = true,
            "--rounds" => {
                let value = args.next().context("--rounds needs a number")?;
                options.rounds = value
                    .parse()
                    .ok()
                    .filter(|&r| r >= 1)
                    .with_context(|| format!("--rounds {value}: give a whole number >= 1"))?;
            }
            other => bail!(
                "unknown bench option {other:?}; usage: cargo xtask bench [--peers] \
                 [--skip-criterion] [--rounds R]"
            ),
        }
    }
    Ok(options)
}

/// One measurement, as the JSON line of `ember bench write` or `tbx_write.py`.
#[derive(Debug, Clone, PartialEq)]
struct Figure {
    seconds: f64,
    bytes: u64,
}

/// Reads the last line of `stdout` as a figure, checking it is for `peer`, `workload` and `n`.
fn parse_figure(stdout: &str, peer: &str, workload: &str, n: u64) -> anyhow::Result<Figure> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .context("no output")?;
    let v: Value = serde_json::from_str(line).with_context(|| format!("not JSON: {line}"))?;
    ensure!(
        v["peer"] == peer && v["workload"] == workload && v["n"] == n,
        "expected peer {peer}, workload {workload}, n {n}; got {line}"
    );
    let seconds = v["seconds"].as_f64().context("no seconds")?;
    let bytes = v["bytes"].as_u64().context("no bytes")?;
    ensure!(seconds > 0.0 && bytes > 0, "implausible figure: {line}");
    Ok(Figure { seconds, bytes })
}

fn run_figure(mut command: Command, peer: &str, workload: &str, n: u64) -> anyhow::Result<Figure> {
    let output = command
        .output()
        .with_context(|| format!("starting the {peer} {workload} run"))?;
    if !output.status.success() {
        bail!(
            "the {peer} {workload} run failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    parse_figure(&String::from_utf8_lossy(&output.stdout), peer, workload, n)
}

/// The median time of several rounds (the bytes are the same every round).
fn median(figures: &[Figure]) -> Option<Figure> {
    let mut sorted = figures.to_vec();
    sorted.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[mid].clone()),
        _ => Some(Figure {
            seconds: (sorted[mid - 1].seconds + sorted[mid].seconds) / 2.0,
            bytes: sorted[mid].bytes,
        }),
    }
}

fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

/// Criterion's mean estimate of every benchmark written at or after `since`, in nanoseconds.
fn criterion_means(criterion_dir: &Path, since: SystemTime) -> Vec<(String, f64)> {
    let mut found = Vec::new();
    let mut stack = vec![criterion_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "new") {
                    if let Some(figure) = criterion_mean(&path, since) {
                        found.push(figure);
                    }
                } else {
                    stack.push(path);
                }
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

fn criterion_mean(new_dir: &Path, since: SystemTime) -> Option<(String, f64)> {
    let estimates = new_dir.join("estimates.json");
    let fresh = std::fs::metadata(&estimates)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= since);
    if !fresh {
        return None;
    }
    let read = |name: &str| -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(new_dir.join(name)).ok()?).ok()
    };
    let id = read("benchmark.json")?["full_id"].as_str()?.to_string();
    let mean = read("estimates.json")?["mean"]["point_estimate"].as_f64()?;
    Some((id, mean))
}

/// `YYYY-MM-DD` (UTC) of a time, by the days-from-civil inverse (Howard Hinnant's algorithm).
fn utc_date(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn human(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.1}")
    }
}

fn human_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

/// The report's rows: workload, n, ember's figure, the peer's figure if measured.
type Row = (String, u64, Figure, Option<Figure>);

fn report_json(
    date: &str,
    machine: &Value,
    options: &Options,
    criterion: &[(String, f64)],
    rows: &[Row],
) -> Value {
    let figure = |f: &Figure, n: u64| json!({"seconds": f.seconds, "per_second": n as f64 / f.seconds, "bytes": f.bytes});
    json!({
        "date": date,
        "machine": machine,
        "rounds": options.rounds,
        "peer_requirements": if options.peers { json!(BENCH_REQUIREMENTS) } else { Value::Null },
        "criterion": if options.skip_criterion {
            Value::Null
        } else {
            criterion.iter().map(|(id, ns)| json!({"id": id, "mean_ns": ns})).collect()
        },
        "write": rows.iter().map(|(workload, n, ember, peer)| {
            let mut row = json!({"workload": workload, "n": n, "ember": figure(ember, *n)});
            if let Some(peer) = peer {
                row["tensorboardX"] = figure(peer, *n);
                row["ratio_per_second"] = json!(peer.seconds / ember.seconds);
                row["ratio_bytes"] = json!(ember.bytes as f64 / peer.bytes as f64);
            }
            row
        }).collect::<Vec<_>>(),
    })
}

fn report_md(
    date: &str,
    machine: &str,
    options: &Options,
    criterion: &[(String, f64)],
    rows: &[Row],
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# ember benchmark report\n");
    let _ = writeln!(md, "- date: {date}\n- machine: {machine}");
    let _ = writeln!(
        md,
        "- rounds: {} (the median time of each workload counts)",
        options.rounds
    );
    if options.peers {
        let _ = writeln!(md, "- peer: {}", BENCH_REQUIREMENTS.join(", "));
    }
    let _ = writeln!(
        md,
        "\n## Write workloads (`ember bench write`{})\n",
        if options.peers {
            " vs tensorboardX, side by side"
        } else {
            ""
        }
    );
    if options.peers {
        let _ = writeln!(
            md,
            "| workload | n | ember s | ember steps/s | tensorboardX s | tensorboardX steps/s | ember / tensorboardX (steps/s) | ember bytes | tensorboardX bytes |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
    } else {
        let _ = writeln!(
            md,
            "| workload | n | ember s | ember steps/s | ember bytes |\n|---|---:|---:|---:|---:|"
        );
    }
    for (workload, n, ember, peer) in rows {
        let eps = *n as f64 / ember.seconds;
        match peer {
            Some(peer) => {
                let _ = writeln!(
                    md,
                    "| {workload} | {n} | {:.3} | {} | {:.3} | {} | {:.2}× | {} | {} |",
                    ember.seconds,
                    human(eps),
                    peer.seconds,
                    human(*n as f64 / peer.seconds),
                    peer.seconds / ember.seconds,
                    ember.bytes,
                    peer.bytes
                );
            }
            None => {
                let _ = writeln!(
                    md,
                    "| {workload} | {n} | {:.3} | {} | {} |",
                    ember.seconds,
                    human(eps),
                    ember.bytes
                );
            }
        }
    }
    let _ = writeln!(md, "\n## Criterion benchmarks (mean)\n");
    if options.skip_criterion {
        let _ = writeln!(md, "Not run (`--skip-criterion`).");
    } else {
        let _ = writeln!(md, "| benchmark | mean |\n|---|---:|");
        for (id, ns) in criterion {
            let _ = writeln!(md, "| {id} | {} |", human_ns(*ns));
        }
    }
    md
}

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let mut options = parse(args)?;
    let target = compat::target_dir(root);
    let bench_dir = target.join("bench");
    std::fs::create_dir_all(&bench_dir)
        .with_context(|| format!("creating {}", bench_dir.display()))?;

    // Before anything runs, so a missing Python stops a --peers run early.
    let python = if options.peers {
        match compat::ensure_venv(&target.join("bench-venv"), BENCH_REQUIREMENTS) {
            Ok(python) => Some(python),
            Err(VenvError::Unavailable(why)) => {
                compat::skip_or_fail("bench --peers", &why)?;
                options.peers = false;
                None
            }
            Err(VenvError::Failed(e)) => return Err(e),
        }
    } else {
        None
    };

    let started = SystemTime::now();
    let mut criterion = Vec::new();
    if !options.skip_criterion {
        eprintln!("bench: cargo bench --workspace");
        let status = compat::cargo()
            .args(["bench", "--workspace"])
            .current_dir(root)
            .status()
            .context("starting cargo bench")?;
        if !status.success() {
            bail!("cargo bench --workspace failed ({status})");
        }
        criterion = criterion_means(&target.join("criterion"), started);
        ensure!(
            !criterion.is_empty(),
            "cargo bench ran but left no criterion estimates under {}",
            target.join("criterion").display()
        );
    }

    eprintln!("bench: cargo build --release -p ember-cli");
    let status = compat::cargo()
        .args(["build", "--release", "-p", "ember-cli"])
        .current_dir(root)
        .status()
        .context("starting cargo build")?;
    if !status.success() {
        bail!("building ember-cli failed ({status})");
    }
    let ember = target
        .join("release")
        .join(format!("ember{}", std::env::consts::EXE_SUFFIX));
    let script = root.join("xtask/bench/tbx_write.py");

    let out = bench_dir.join("out");
    let mut rows = Vec::new();
    for &(workload, n) in WORKLOADS {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..options.rounds {
            let dir = out.join(format!("ember-{workload}-{round}"));
            fresh_dir(&dir)?;
            let mut command = Command::new(&ember);
            command.args(["bench", "write", "--workload", workload, "--n"]);
            command.arg(n.to_string()).arg("--out").arg(&dir);
            let figure = run_figure(command, "ember", workload, n)?;
            eprintln!(
                "bench: ember        {workload:9} n={n:<8} {:8.3} s  {:>10} steps/s",
                figure.seconds,
                human(n as f64 / figure.seconds)
            );
            ours.push(figure);
            fresh_dir(&dir)?;
            if let Some(python) = &python {
                let dir = out.join(format!("tbx-{workload}-{round}"));
                fresh_dir(&dir)?;
                let mut command = Command::new(python);
                command.arg(&script).args(["--workload", workload, "--n"]);
                command.arg(n.to_string()).arg("--out").arg(&dir);
                let figure = run_figure(command, "tensorboardX", workload, n)?;
                eprintln!(
                    "bench: tensorboardX {workload:9} n={n:<8} {:8.3} s  {:>10} steps/s",
                    figure.seconds,
                    human(n as f64 / figure.seconds)
                );
                theirs.push(figure);
                fresh_dir(&dir)?;
            }
        }
        let ember_figure = median(&ours).context("no ember figure")?;
        rows.push((workload.to_string(), n, ember_figure, median(&theirs)));
    }
    fresh_dir(&out)?;

    let date = utc_date(SystemTime::now());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = cpu_model();
    let machine = format!("{cores} cores, {cpu}, {}", std::env::consts::OS);
    let machine_json = json!({"cores": cores, "cpu": cpu, "os": std::env::consts::OS});
    let json_path = bench_dir.join("report.json");
    let md_path = bench_dir.join("report.md");
    let report = report_json(&date, &machine_json, &options, &criterion, &rows);
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let md = report_md(&date, &machine, &options, &criterion, &rows);
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    eprintln!("{md}");
    eprintln!(
        "bench: wrote {} and {}",
        md_path.display(),
        json_path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_reject_unknown_ones() {
        let args = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let o = parse(&args(&["--peers", "--rounds", "3"])).unwrap();
        assert!(o.peers && !o.skip_criterion && o.rounds == 3);
        let o = parse(&args(&["--skip-criterion"])).unwrap();
        assert!(!o.peers && o.skip_criterion && o.rounds == 1);
        assert!(parse(&args(&["--rounds", "0"])).is_err());
        assert!(parse(&args(&["--rounds"])).is_err());
        assert!(parse(&args(&["--fast"])).is_err());
    }

    #[test]
    fn a_figure_must_match_its_run() {
        let line = r#"{"peer":"ember","workload":"hist","n":200,"seconds":0.5,"per_second":400.0,"bytes":1234}"#;
        let stdout = format!("noise\n{line}\n\n");
        assert_eq!(
            parse_figure(&stdout, "ember", "hist", 200).unwrap(),
            Figure {
                seconds: 0.5,
                bytes: 1234
            }
        );
        assert!(parse_figure(&stdout, "tensorboardX", "hist", 200).is_err());
        assert!(parse_figure(&stdout, "ember", "image", 200).is_err());
        assert!(parse_figure(&stdout, "ember", "hist", 201).is_err());
        assert!(parse_figure("", "ember", "hist", 200).is_err());
    }

    #[test]
    fn median_takes_the_middle_time() {
        let f = |seconds| Figure { seconds, bytes: 1 };
        assert_eq!(median(&[f(3.0), f(1.0), f(2.0)]), Some(f(2.0)));
        assert_eq!(median(&[f(4.0), f(1.0)]), Some(f(2.5)));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn utc_dates_match_known_days() {
        let at = |secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        assert_eq!(utc_date(at(0)), "1970-01-01");
        assert_eq!(utc_date(at(951_782_400)), "2000-02-29");
        assert_eq!(utc_date(at(1_700_000_000)), "2023-11-14");
    }

    #[test]
    fn criterion_estimates_are_read_when_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("group/bench/new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("benchmark.json"), r#"{"full_id":"group/bench"}"#).unwrap();
        std::fs::write(
            new.join("estimates.json"),
            r#"{"mean":{"point_estimate":1500.0}}"#,
        )
        .unwrap();
        let before = SystemTime::UNIX_EPOCH;
        assert_eq!(
            criterion_means(dir.path(), before),
            vec![("group/bench".to_string(), 1500.0)]
        );
        let later = SystemTime::now() + std::time::Duration::from_secs(3600);
        assert!(criterion_means(dir.path(), later).is_empty());
    }

    #[test]
    fn the_report_gives_the_ratio_of_throughputs() {
        let options = Options {
            peers: true,
            skip_criterion: true,
            rounds: 1,
        };
        let rows = vec![(
            "scalars".to_string(),
            100,
            Figure {
                seconds: 1.0,
                bytes: 10,
            },
            Some(Figure {
                seconds: 4.0,
                bytes: 20,
            }),
        )];
        let report = report_json("2026-01-01", &json!({}), &options, &[], &rows);
        assert_eq!(report["write"][0]["ratio_per_second"], 4.0);
        assert_eq!(report["write"][0]["ratio_bytes"], 0.5);
        assert_eq!(report["write"][0]["tensorboardX"]["per_second"], 25.0);
        let md = report_md("2026-01-01", "m", &options, &[], &rows);
        assert!(md.contains("| scalars | 100 | 1.000 | 100.0 | 4.000 | 25.0 | 4.00× | 10 | 20 |"));
    }
}
