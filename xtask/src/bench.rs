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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::{Context, bail, ensure};
use serde_json::json;

use crate::process::{cargo, skip_or_fail, target_dir};
use crate::venv::{VenvError, ensure_venv};

mod figures;
mod options;

pub(crate) use options::Options;
mod report;
mod sides;

use figures::{Figure, criterion_means, fresh_dir, run_figure};
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

/// How many histogram inputs `ember bench memory` reads per round.
const MEMORY_N: u64 = 20_000;

pub(crate) fn run(root: &Path, options: &Options) -> anyhow::Result<()> {
    let target = target_dir(root);
    let bench_dir = target.join("bench");
    std::fs::create_dir_all(&bench_dir)
        .with_context(|| format!("creating {}", bench_dir.display()))?;
    // Before anything runs, so a missing Python stops a --peers run early.
    let sides = Sides::ready(&target, options.peers)?;
    let criterion = if options.skip_criterion {
        Vec::new()
    } else {
        run_criterion(root, &target)?
    };
    let runner = Runner {
        ember: build_ember(root, &target)?,
        scripts: root.join("xtask/bench"),
        out: bench_dir.join("out"),
        sides: &sides,
    };
    let mut measured = Measured::default();
    for round in 0..options.rounds.get() {
        runner.round(round, &mut measured)?;
    }
    fresh_dir(&runner.out)?;
    let rows = measured.rows(&sides.sides);
    write_reports(&bench_dir, options, &sides.sides, &criterion, &rows)
}

/// The sides a run measures, and the Python of each peer's venv.
struct Sides {
    sides: Vec<Side>,
    tbx_python: Option<PathBuf>,
    ms_python: Option<PathBuf>,
}

impl Sides {
    /// ember, and with `peers` every peer whose venv can be made (one that cannot is skipped in
    /// one line, or fails the run where skipping is not allowed).
    fn ready(target: &Path, peers: bool) -> anyhow::Result<Self> {
        let mut ready = Sides {
            sides: vec![Side::Ember],
            tbx_python: None,
            ms_python: None,
        };
        if !peers {
            return Ok(ready);
        }
        match ensure_venv(&target.join("bench-venv"), BENCH_REQUIREMENTS) {
            Ok(python) => {
                ready.tbx_python = Some(python);
                ready.sides.extend([Side::Tbx, Side::TbxCrc]);
            }
            Err(VenvError::Unavailable(why)) => skip_or_fail("bench --peers: tensorboardX", &why)?,
            Err(VenvError::Failed(e)) => return Err(e),
        }
        match ensure_venv(&target.join("bench-venv-mindspore"), MINDSPORE_REQUIREMENTS) {
            Ok(python) => {
                ready.ms_python = Some(python);
                ready.sides.push(Side::MindSpore);
            }
            Err(VenvError::Unavailable(why)) => skip_or_fail("bench --peers: MindSpore", &why)?,
            Err(VenvError::Failed(e)) => return Err(e),
        }
        Ok(ready)
    }
}

/// `cargo bench --workspace`, and the mean of every benchmark it produced.
fn run_criterion(root: &Path, target: &Path) -> anyhow::Result<Vec<(String, f64)>> {
    let started = SystemTime::now();
    eprintln!("bench: cargo bench --workspace");
    let status = cargo()
        .args(["bench", "--workspace"])
        .current_dir(root)
        .status()
        .context("starting cargo bench")?;
    if !status.success() {
        bail!("cargo bench --workspace failed ({status})");
    }
    let criterion = criterion_means(&target.join("criterion"), started);
    ensure!(
        !criterion.is_empty(),
        "cargo bench ran but left no criterion estimates under {}",
        target.join("criterion").display()
    );
    Ok(criterion)
}

/// Builds `ember-cli` in release; the path of its binary.
fn build_ember(root: &Path, target: &Path) -> anyhow::Result<PathBuf> {
    eprintln!("bench: cargo build --release -p ember-cli");
    let status = cargo()
        .args(["build", "--release", "-p", "ember-cli"])
        .current_dir(root)
        .status()
        .context("starting cargo build")?;
    if !status.success() {
        bail!("building ember-cli failed ({status})");
    }
    Ok(target
        .join("release")
        .join(format!("ember{}", std::env::consts::EXE_SUFFIX)))
}

/// Every figure of every round: (workload, side) -> figures; and the limits per round.
#[derive(Default)]
struct Measured {
    figures: Vec<((String, Side), Vec<Figure>)>,
    dd: Vec<Figure>,
    memory: Vec<Figure>,
    dd_count: u64,
}

impl Measured {
    fn add(&mut self, workload: &str, side: Side, figure: Figure) {
        let key = (workload.to_string(), side);
        match self.figures.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(figure),
            None => self.figures.push((key, vec![figure])),
        }
    }

    /// One report row per workload: each side's spread, and the workload's limit.
    fn rows(&self, sides: &[Side]) -> Vec<Row> {
        WORKLOADS
            .iter()
            .map(|&workload| {
                let sides_figures = sides
                    .iter()
                    .filter_map(|&side| {
                        let n = side.steps(workload)?;
                        let list = self
                            .figures
                            .iter()
                            .find(|((w, s), _)| w == workload && *s == side)?;
                        Some((side, Spread::of(n, &list.1)?))
                    })
                    .collect();
                let limit = match workload {
                    "hist" => Spread::of(MEMORY_N, &self.memory)
                        .map(|s| ("read pass over the 400 kB input".to_string(), s)),
                    "tensor" => Spread::of(self.dd_count, &self.dd)
                        .map(|s| ("dd of the same bytes, conv=fsync".to_string(), s)),
                    _ => None,
                };
                Row {
                    workload: workload.to_string(),
                    sides: sides_figures,
                    limit,
                }
            })
            .collect()
    }
}

/// What a round runs: the release binary, the peers' scripts, and where their output goes.
struct Runner<'a> {
    ember: PathBuf,
    scripts: PathBuf,
    out: PathBuf,
    sides: &'a Sides,
}

impl Runner<'_> {
    /// Every workload on every side, in an order that alternates between rounds, and the limits
    /// right after ember's runs.
    fn round(&self, round: usize, measured: &mut Measured) -> anyhow::Result<()> {
        let mut order = self.sides.sides.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for &workload in WORKLOADS {
            for &side in &order {
                let Some(n) = side.steps(workload) else {
                    continue;
                };
                let dir = self.out.join(format!("{}-{workload}-{round}", side.peer()));
                fresh_dir(&dir)?;
                let mut command = self.command(side, workload)?;
                command.arg("--n").arg(n.to_string()).arg("--out").arg(&dir);
                let figure = run_figure(command, side.peer(), workload, n)?;
                eprintln!(
                    "bench: round {round} {:20} {workload:16} n={n:<8} {:8.3} s  {:>10} steps/s",
                    side.peer(),
                    figure.seconds,
                    human(n as f64 / figure.seconds)
                );
                fresh_dir(&dir)?;
                if side == Side::Ember {
                    self.limits(round, workload, n, &figure, measured)?;
                }
                measured.add(workload, side, figure);
            }
        }
        Ok(())
    }

    /// The command of one side for `workload`, `--n` and `--out` still to add.
    fn command(&self, side: Side, workload: &str) -> anyhow::Result<Command> {
        Ok(match side {
            Side::Ember => {
                let mut c = Command::new(&self.ember);
                c.args(["bench", "write", "--workload", workload]);
                c
            }
            Side::Tbx | Side::TbxCrc => {
                let mut c = Command::new(self.sides.tbx_python.as_ref().context("no venv")?);
                c.arg(self.scripts.join("tbx_write.py"));
                c.args(["--workload", workload, "--crc"]);
                c.arg(if side == Side::Tbx {
                    "python"
                } else {
                    "native"
                });
                c
            }
            Side::MindSpore => {
                let mut c = Command::new(self.sides.ms_python.as_ref().context("no venv")?);
                c.arg(self.scripts.join("ms_write.py"));
                c.args(["--workload", workload]);
                c
            }
        })
    }

    /// The limit beside ember's run of `workload`: dd of the same bytes after `tensor`, a read
    /// pass over the input after `hist`.
    fn limits(
        &self,
        round: usize,
        workload: &str,
        n: u64,
        figure: &Figure,
        measured: &mut Measured,
    ) -> anyhow::Result<()> {
        if workload == "tensor" {
            // The same bytes, written and synced by dd, right after ember's run.
            measured.dd_count = n;
            let limit = dd_limit(&self.out.join("dd"), figure.bytes.div_ceil(n), n)?;
            eprintln!(
                "bench: round {round} {:20} {workload:16} n={n:<8} {:8.3} s  {:>10} steps/s",
                "dd conv=fsync",
                limit.seconds,
                human(n as f64 / limit.seconds)
            );
            measured.dd.push(limit);
        }
        if workload == "hist" {
            let mut c = Command::new(&self.ember);
            c.args(["bench", "memory", "--n", &MEMORY_N.to_string()]);
            measured
                .memory
                .push(run_figure(c, "memory", "hist", MEMORY_N)?);
        }
        Ok(())
    }
}

/// `report.json` and `report.md` under `bench_dir`; the markdown is printed too.
fn write_reports(
    bench_dir: &Path,
    options: &options::Options,
    sides: &[Side],
    criterion: &[(String, f64)],
    rows: &[Row],
) -> anyhow::Result<()> {
    let date = utc_date(SystemTime::now());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = cpu_model();
    let machine = format!("{cores} cores, {cpu}, {}", std::env::consts::OS);
    let machine_json = json!({"cores": cores, "cpu": cpu, "os": std::env::consts::OS});
    let json_path = bench_dir.join("report.json");
    let md_path = bench_dir.join("report.md");
    let report = report_json(&date, &machine_json, options, sides, criterion, rows);
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let md = report_md(&date, &machine, options, sides, criterion, rows);
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
    use super::figures::parse_figure;
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
            rounds: std::num::NonZeroUsize::new(3).unwrap(),
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
