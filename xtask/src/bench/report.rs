//! The report: each workload's figures and spread per side, as `report.json` and `report.md`,
//! with the date, the CPU and the machine's limits.

use std::fmt::Write as _;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::figures::Figure;
use super::options::Options;
use super::sides::{BENCH_REQUIREMENTS, MINDSPORE_REQUIREMENTS, Side};

/// `YYYY-MM-DD` (UTC) of a time, by the days-from-civil inverse (Howard Hinnant's algorithm).
pub(super) fn utc_date(time: SystemTime) -> String {
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

pub(super) fn cpu_model() -> String {
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

pub(super) fn human(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.1}")
    }
}

pub(super) fn human_ns(ns: f64) -> String {
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

/// Median, min and max steps/s over the rounds of one side on one workload.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Spread {
    pub(super) n: u64,
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
    /// Bytes a round writes.
    pub(super) bytes: u64,
    pub(super) rounds: Vec<f64>,
}

impl Spread {
    pub(super) fn of(n: u64, figures: &[Figure]) -> Option<Spread> {
        let seconds = crate::stats::Spread::of(figures.iter().map(|f| f.seconds))?;
        Some(Spread {
            n,
            median: n as f64 / seconds.median,
            min: n as f64 / seconds.max,
            max: n as f64 / seconds.min,
            // The same every round.
            bytes: figures.first()?.bytes,
            rounds: figures.iter().map(|f| n as f64 / f.seconds).collect(),
        })
    }

    pub(super) fn json(&self) -> Value {
        json!({"n": self.n, "per_second_median": self.median, "per_second_min": self.min,
               "per_second_max": self.max, "per_second_rounds": self.rounds, "bytes": self.bytes})
    }

    pub(super) fn cell(&self) -> String {
        format!(
            "{} ({}–{})",
            human(self.median),
            human(self.min),
            human(self.max)
        )
    }
}

/// One workload's figures: each side that ran it, and the limit it is held against.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) workload: String,
    pub(super) sides: Vec<(Side, Spread)>,
    /// What bounds it, and that bound in steps/s (median, min, max over rounds).
    pub(super) limit: Option<(String, Spread)>,
}

impl Row {
    pub(super) fn side(&self, side: Side) -> Option<&Spread> {
        self.sides.iter().find(|(s, _)| *s == side).map(|(_, f)| f)
    }
}

pub(super) fn report_json(
    date: &str,
    machine: &Value,
    options: &Options,
    peers: &[Side],
    criterion: &[(String, f64)],
    rows: &[Row],
) -> Value {
    json!({
        "date": date,
        "machine": machine,
        "rounds": options.rounds,
        "sides": peers.iter().map(|s| s.peer()).collect::<Vec<_>>(),
        "tensorboardX_requirements": if peers.contains(&Side::Tbx) { json!(BENCH_REQUIREMENTS) } else { Value::Null },
        "mindspore_requirements": if peers.contains(&Side::MindSpore) { json!(MINDSPORE_REQUIREMENTS) } else { Value::Null },
        "criterion": if options.skip_criterion {
            Value::Null
        } else {
            criterion.iter().map(|(id, ns)| json!({"id": id, "mean_ns": ns})).collect()
        },
        "write": rows.iter().map(|row| {
            let mut out = json!({"workload": row.workload});
            for (side, spread) in &row.sides {
                out[side.peer()] = spread.json();
            }
            if let Some(ember) = row.side(Side::Ember) {
                let mut ratios = json!({});
                for (side, spread) in &row.sides {
                    if *side != Side::Ember {
                        ratios[side.peer()] = json!(ember.median / spread.median);
                    }
                }
                out["ember_over"] = ratios;
                if let Some((what, limit)) = &row.limit {
                    out["limit"] = json!({"what": what, "figure": limit.json(),
                                          "ember_fraction": ember.median / limit.median});
                }
            }
            out
        }).collect::<Vec<_>>(),
    })
}

pub(super) fn report_md(
    date: &str,
    machine: &str,
    options: &Options,
    peers: &[Side],
    criterion: &[(String, f64)],
    rows: &[Row],
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# ember benchmark report\n");
    let _ = writeln!(md, "- date: {date}\n- machine: {machine}");
    let _ = writeln!(
        md,
        "- rounds: {}, the order of the sides alternating between rounds; each cell is the \
         median steps/s with the slowest and fastest round in brackets",
        options.rounds
    );
    if peers.contains(&Side::Tbx) {
        let _ = writeln!(md, "- tensorboardX venv: {}", BENCH_REQUIREMENTS.join(", "));
    }
    if peers.contains(&Side::MindSpore) {
        let _ = writeln!(
            md,
            "- MindSpore venv: {}",
            MINDSPORE_REQUIREMENTS.join(", ")
        );
    }
    let _ = writeln!(
        md,
        "\n## Write workloads, end to end until close returns (steps/s)\n"
    );
    write_workloads_table(&mut md, peers, rows);
    let _ = writeln!(
        md,
        "\n`dd conv=fsync` writes the bytes, then syncs them; ember starts the disk's writeback \
         every 4 MiB as it writes, so the two overlap and ember can finish first (above 100%)."
    );
    let _ = writeln!(md, "\nSteps per run and bytes written (median round):\n");
    let _ = writeln!(md, "| workload | side | n | bytes |\n|---|---|---:|---:|");
    for row in rows {
        for (side, spread) in &row.sides {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                row.workload,
                side.peer(),
                spread.n,
                spread.bytes
            );
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

/// The write workloads' table: each side's figures, ember's ratio to each peer, and the limit.
fn write_workloads_table(md: &mut String, peers: &[Side], rows: &[Row]) {
    let mut header = String::from("| workload |");
    let mut rule = String::from("|---|");
    for side in peers {
        let _ = write!(header, " {} |", side.peer());
        rule.push_str("---:|");
    }
    for side in peers.iter().filter(|s| **s != Side::Ember) {
        let _ = write!(header, " ember / {} |", side.peer());
        rule.push_str("---:|");
    }
    header.push_str(" limit | ember / limit |");
    rule.push_str("---|---:|");
    let _ = writeln!(md, "{header}\n{rule}");
    for row in rows {
        let ember = row.side(Side::Ember);
        let mut line = format!("| {} |", row.workload);
        for side in peers {
            let cell = row.side(*side).map_or("–".to_string(), Spread::cell);
            let _ = write!(line, " {cell} |");
        }
        for side in peers.iter().filter(|s| **s != Side::Ember) {
            let cell = match (ember, row.side(*side)) {
                (Some(e), Some(p)) => format!("{:.1}×", e.median / p.median),
                _ => "–".into(),
            };
            let _ = write!(line, " {cell} |");
        }
        match (&row.limit, ember) {
            (Some((what, limit)), Some(e)) => {
                let _ = write!(
                    line,
                    " {what}: {} | {:.0}% |",
                    limit.cell(),
                    100.0 * e.median / limit.median
                );
            }
            _ => line.push_str(" – | – |"),
        }
        let _ = writeln!(md, "{line}");
    }
}
