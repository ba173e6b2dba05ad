//! `cargo xtask bench [--peers] [--skip-criterion] [--rounds R]`: ember's speed, and with
//! `--peers` tensorboardX's and MindSpore's on the same workloads, with the machine's limits, in
//! one report.
//!
//! 1. `cargo bench --workspace` (criterion), unless `--skip-criterion`; the mean of every
//!    benchmark that run produced goes into the report.
//! 2. Builds `ember-cli` in release and, each round, runs every workload on every side, in an
//!    order that alternates between rounds: `ember bench write` (the facade's per-value API);
//!    with `--peers`, `xtask/bench/tbx_write.py` as `pip install tensorboardX` leaves it (its
//!    pure-Python CRC) and with its optional native `crc32c`, and `xtask/bench/ms_write.py`
//!    (MindSpore 2.10 `SummaryRecord`), each pinned in a venv under `<target>`. A peer whose venv
//!    cannot be made is skipped in one line.
//! 3. Each round also measures the limits: `dd bs=<bytes per tensor step> count=<n>
//!    conv=fsync` of ember's tensor bytes, and `ember bench memory` (read passes over the
//!    histogram input).
//! 4. Writes `<target>/bench/report.json` and `report.md`: per side the median steps/s with min
//!    and max over the rounds, ember / peer ratios of medians, and ember as a fraction of the
//!    limits.

use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use anyhow::{Context, bail, ensure};
use serde_json::json;

use crate::process::{cargo, skip_or_fail, target_dir};
use crate::venv::{VenvError, ensure_venv};

mod figures;
mod options;
mod report;
mod sides;

use figures::{Figure, criterion_means, fresh_dir, run_figure};
use options::parse;
use report::{Row, Spread, cpu_model, human, report_json, report_md, utc_date};
use sides::{BENCH_REQUIREMENTS, MINDSPORE_REQUIREMENTS, Side, WORKLOADS};

/// `dd if=/dev/zero of=<dir>/dd.bin bs=<bs> count=<count> conv=fsync`, timed from start to
/// exit: writing the bytes, then syncing them. A writer that starts the disk's writeback while
/// it writes, as ember's does, overlaps the two and can finish first.
fn dd_limit(dir: &Path, bs: u64, count: u64) -> anyhow::Result<Figure> {
    fresh_dir(dir)?;
    std::fs::create_dir_all(dir)?;
    let file = dir.join("dd.bin");
    let started = std::time::Instant::now();
    let output = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", file.display()))
        .arg(format!("bs={bs}"))
        .arg(format!("count={count}"))
        .arg("conv=fsync")
        .output()
        .context("starting dd")?;
    let seconds = started.elapsed().as_secs_f64();
    ensure!(
        output.status.success(),
        "dd failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let bytes = std::fs::metadata(&file)?.len();
    fresh_dir(dir)?;
    Ok(Figure { seconds, bytes })
}

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let options = parse(args)?;
    let target = target_dir(root);
    let bench_dir = target.join("bench");
    std::fs::create_dir_all(&bench_dir)
        .with_context(|| format!("creating {}", bench_dir.display()))?;

    // Before anything runs, so a missing Python stops a --peers run early.
    let mut sides = vec![Side::Ember];
    let mut tbx_python = None;
    let mut ms_python = None;
    if options.peers {
        match ensure_venv(&target.join("bench-venv"), BENCH_REQUIREMENTS) {
            Ok(python) => {
                tbx_python = Some(python);
                sides.extend([Side::Tbx, Side::TbxCrc]);
            }
            Err(VenvError::Unavailable(why)) => skip_or_fail("bench --peers: tensorboardX", &why)?,
            Err(VenvError::Failed(e)) => return Err(e),
        }
        match ensure_venv(&target.join("bench-venv-mindspore"), MINDSPORE_REQUIREMENTS) {
            Ok(python) => {
                ms_python = Some(python);
                sides.push(Side::MindSpore);
            }
            Err(VenvError::Unavailable(why)) => skip_or_fail("bench --peers: MindSpore", &why)?,
            Err(VenvError::Failed(e)) => return Err(e),
        }
    }

    let started = SystemTime::now();
    let mut criterion = Vec::new();
    if !options.skip_criterion {
        eprintln!("bench: cargo bench --workspace");
        let status = cargo()
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
    let status = cargo()
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
    let scripts = root.join("xtask/bench");

    let out = bench_dir.join("out");
    // Every figure of every round: (workload, side) -> figures; and the limits per round.
    let mut figures: Vec<((String, Side), Vec<Figure>)> = Vec::new();
    let mut dd: Vec<Figure> = Vec::new();
    let mut memory: Vec<Figure> = Vec::new();
    let (mut dd_count, memory_n) = (0u64, 20_000u64);
    for round in 0..options.rounds {
        let mut order = sides.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for &workload in WORKLOADS {
            for &side in &order {
                let Some(n) = side.steps(workload) else {
                    continue;
                };
                let dir = out.join(format!("{}-{workload}-{round}", side.peer()));
                fresh_dir(&dir)?;
                let mut command = match side {
                    Side::Ember => {
                        let mut c = Command::new(&ember);
                        c.args(["bench", "write", "--workload", workload]);
                        c
                    }
                    Side::Tbx | Side::TbxCrc => {
                        let mut c = Command::new(tbx_python.as_ref().context("no venv")?);
                        c.arg(scripts.join("tbx_write.py"));
                        c.args(["--workload", workload, "--crc"]);
                        c.arg(if side == Side::Tbx {
                            "python"
                        } else {
                            "native"
                        });
                        c
                    }
                    Side::MindSpore => {
                        let mut c = Command::new(ms_python.as_ref().context("no venv")?);
                        c.arg(scripts.join("ms_write.py"));
                        c.args(["--workload", workload]);
                        c
                    }
                };
                command.arg("--n").arg(n.to_string()).arg("--out").arg(&dir);
                let figure = run_figure(command, side.peer(), workload, n)?;
                eprintln!(
                    "bench: round {round} {:20} {workload:16} n={n:<8} {:8.3} s  {:>10} steps/s",
                    side.peer(),
                    figure.seconds,
                    human(n as f64 / figure.seconds)
                );
                fresh_dir(&dir)?;
                if side == Side::Ember && workload == "tensor" {
                    // The same bytes, written and synced by dd, right after ember's run.
                    dd_count = n;
                    let limit = dd_limit(&out.join("dd"), figure.bytes.div_ceil(n), n)?;
                    eprintln!(
                        "bench: round {round} {:20} {workload:16} n={n:<8} {:8.3} s  {:>10} steps/s",
                        "dd conv=fsync",
                        limit.seconds,
                        human(n as f64 / limit.seconds)
                    );
                    dd.push(limit);
                }
                if side == Side::Ember && workload == "hist" {
                    let mut c = Command::new(&ember);
                    c.args(["bench", "memory", "--n", &memory_n.to_string()]);
                    memory.push(run_figure(c, "memory", "hist", memory_n)?);
                }
                let key = (workload.to_string(), side);
                match figures.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, list)) => list.push(figure),
                    None => figures.push((key, vec![figure])),
                }
            }
        }
    }
    fresh_dir(&out)?;

    let rows: Vec<Row> = WORKLOADS
        .iter()
        .map(|&workload| {
            let sides_figures = sides
                .iter()
                .filter_map(|&side| {
                    let n = side.steps(workload)?;
                    let list = figures
                        .iter()
                        .find(|((w, s), _)| w == workload && *s == side)?;
                    Some((side, Spread::of(n, &list.1)?))
                })
                .collect();
            let limit = match workload {
                "hist" => Spread::of(memory_n, &memory)
                    .map(|s| ("read pass over the 400 kB input".to_string(), s)),
                "tensor" => Spread::of(dd_count, &dd)
                    .map(|s| ("dd of the same bytes, conv=fsync".to_string(), s)),
                _ => None,
            };
            Row {
                workload: workload.to_string(),
                sides: sides_figures,
                limit,
            }
        })
        .collect();

    let date = utc_date(SystemTime::now());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = cpu_model();
    let machine = format!("{cores} cores, {cpu}, {}", std::env::consts::OS);
    let machine_json = json!({"cores": cores, "cpu": cpu, "os": std::env::consts::OS});
    let json_path = bench_dir.join("report.json");
    let md_path = bench_dir.join("report.md");
    let report = report_json(&date, &machine_json, &options, &sides, &criterion, &rows);
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let md = report_md(&date, &machine, &options, &sides, &criterion, &rows);
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
    use super::figures::{median, parse_figure};
    use super::options::Options;
    use super::*;

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
    fn the_report_gives_medians_spread_ratios_and_limits() {
        let options = Options {
            peers: true,
            skip_criterion: true,
            rounds: 3,
        };
        let f = |seconds| Figure { seconds, bytes: 10 };
        let rows = vec![Row {
            workload: "tensor".to_string(),
            sides: vec![
                (
                    Side::Ember,
                    Spread::of(100, &[f(1.0), f(2.0), f(0.5)]).unwrap(),
                ),
                (
                    Side::Tbx,
                    Spread::of(10, &[f(1.0), f(1.0), f(1.0)]).unwrap(),
                ),
            ],
            limit: Some(("dd".into(), Spread::of(100, &[f(0.5)]).unwrap())),
        }];
        let sides = [Side::Ember, Side::Tbx];
        let report = report_json("2026-01-01", &json!({}), &options, &sides, &[], &rows);
        let w = &report["write"][0];
        assert_eq!(w["ember"]["per_second_median"], 100.0);
        assert_eq!(w["ember"]["per_second_min"], 50.0);
        assert_eq!(w["ember"]["per_second_max"], 200.0);
        assert_eq!(w["ember_over"]["tensorboardX"], 10.0);
        assert_eq!(w["limit"]["ember_fraction"], 0.5);
        let md = report_md("2026-01-01", "m", &options, &sides, &[], &rows);
        assert!(
            md.contains("| tensor | 100.0 (50.0–200.0) | 10.0 (10.0–10.0) | 10.0× | dd: 200.0 (200.0–200.0) | 50% |"),
            "{md}"
        );
    }
}
