//! The scaling report: per model, each configuration's examples/s with the spread over rounds,
//! its efficiency and its step's shares, then ember's ratios to burn-train's strategies.

use std::collections::BTreeMap;

use serde_json::Value;

use super::config::{Config, MODELS};
use crate::stats::Spread;

fn figure(lines: &[Value], field: &str) -> Option<(f64, f64, f64)> {
    let spread = Spread::of(
        lines
            .iter()
            .filter_map(|line| line.get(field).and_then(Value::as_f64)),
    )?;
    Some((spread.median, spread.min, spread.max))
}

/// The report in markdown: per model a table of every configuration, then the ratios.
pub(super) fn report(
    configs: &[Config],
    runs: &BTreeMap<String, Vec<Value>>,
    rounds: usize,
    pin: bool,
) -> String {
    let mut md = format!(
        "# Data-parallel scaling: ember against burn-train 0.23\n\n`cargo xtask scaling --rounds {rounds}`; \
         examples/s are the median of {rounds} round(s) (slowest–fastest). Pinned: one core per worker \
         (`taskset`{}), ember's workers with one compute thread each. Efficiency: examples/s at 2 ÷ (2 × at 1) \
         of the same side. Outside: share of ember's step outside the mean device's forward/backward.\n",
        if pin {
            ""
        } else {
            ": not available, so not pinned"
        }
    );
    for model in MODELS {
        md.push_str(&model_header(model, runs));
        for config in configs.iter().filter(|c| c.model == model) {
            if let Some(lines) = runs.get(&config.key()) {
                md.push_str(&config_row(config, lines, runs));
            }
        }
        md.push_str(&ratios(model, runs));
    }
    md
}

/// A model's heading, with the sizes of its first run, and its table's header.
fn model_header(model: &str, runs: &BTreeMap<String, Vec<Value>>) -> String {
    // The CPU rows' sizes head the model's table; wgpu rows name their own.
    let of_model = |(key, _): &(&String, &Vec<Value>)| key.starts_with(&format!("{model} "));
    let lines = runs
        .iter()
        .filter(of_model)
        .min_by_key(|(key, _)| key.ends_with(" wgpu"))
        .and_then(|(_, lines)| lines.first());
    let parameters = lines
        .and_then(|l| l.get("parameters"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let width = lines
        .and_then(|l| l.get("width"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let batch = lines
        .and_then(|l| l.get("batch_size"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    format!(
        "\n## {model}: width {width}, {parameters} parameters, batches of {batch} a worker\n\n| side | workers (ranks for ember-mpi) | cores | summaries | examples/s | efficiency | outside | optimizer | reduce |\n|---|---:|---|---|---:|---:|---:|---:|---:|\n"
    )
}

/// One configuration's row: examples/s, efficiency against the same side at 1 worker, and
/// ember's shares of its step.
fn config_row(config: &Config, lines: &[Value], runs: &BTreeMap<String, Vec<Value>>) -> String {
    let cores = if config.wgpu {
        let width = lines
            .first()
            .and_then(|l| l.get("width"))
            .and_then(Value::as_u64);
        format!("wgpu (lavapipe), width {}", width.unwrap_or(0))
    } else if config.pinned {
        format!("{} pinned", config.workers)
    } else {
        "all, free".into()
    };
    let summaries = if config.summaries { "on" } else { "off" };
    if let Some(error) = lines
        .iter()
        .find_map(|l| l.get("error").and_then(Value::as_str))
    {
        return format!(
            "| {} | {} | {cores} | {summaries} | error: {error} | | | | |\n",
            config.side, config.workers
        );
    }
    let eps = figure(lines, "examples_per_second");
    let cell = |f: Option<(f64, f64, f64)>, scale: f64, digits: usize| match f {
        Some((m, lo, hi)) => format!(
            "{:.*} ({:.*}–{:.*})",
            digits,
            m * scale,
            digits,
            lo * scale,
            digits,
            hi * scale
        ),
        None => "–".into(),
    };
    let efficiency = efficiency(config, eps, runs);
    let share = |field| match figure(lines, field) {
        Some((m, ..)) => format!("{:.0}%", m * 100.0),
        None => "–".into(),
    };
    format!(
        "| {} | {} | {cores} | {summaries} | {} | {efficiency} | {} | {} | {} |\n",
        config.side,
        config.workers,
        cell(eps, 1.0, 0),
        share("outside_share"),
        share("optimizer_share"),
        share("reduce_share"),
    )
}

/// Examples/s at 2 workers ÷ (2 × at 1) of the same side (burn-multi's for DDP).
fn efficiency(
    config: &Config,
    eps: Option<(f64, f64, f64)>,
    runs: &BTreeMap<String, Vec<Value>>,
) -> String {
    if config.workers == 2 {
        let one = Config {
            workers: 1,
            side: if config.side == "burn-ddp" {
                "burn-multi"
            } else {
                config.side
            },
            ..config.clone()
        };
        match (
            eps,
            runs.get(&one.key())
                .and_then(|l| figure(l, "examples_per_second")),
        ) {
            (Some((two, ..)), Some((one, ..))) if one > 0.0 => {
                format!("{:.0}%", 100.0 * two / (2.0 * one))
            }
            _ => "–".into(),
        }
    } else {
        "–".into()
    }
}

/// ember's examples/s over the fastest burn-train strategy's, at each worker count, summaries
/// off and pinned; and ember's 2 pinned workers over its 1 free worker.
fn ratios(model: &'static str, runs: &BTreeMap<String, Vec<Value>>) -> String {
    let on = |side: &'static str, workers: u16, pinned: bool, wgpu: bool| {
        let key = Config {
            model,
            side,
            workers,
            pinned,
            summaries: false,
            wgpu,
        }
        .key();
        runs.get(&key)
            .and_then(|lines| figure(lines, "examples_per_second"))
            .map(|(median, ..)| median)
    };
    let eps = |side, workers, pinned| on(side, workers, pinned, false);
    let mut text = String::from("\n");
    if let (Some(one), Some(two)) = (eps("ember-mpi", 1, true), eps("ember-mpi", 2, true)) {
        text.push_str(&format!(
            "- ember under mpirun, 2 ranks over 1: {:.2}× ({:.0}% efficiency)\n",
            two / one,
            50.0 * two / one
        ));
    }
    if let (Some(one), Some(two)) = (eps("ember", 1, true), eps("ember", 2, true)) {
        text.push_str(&format!(
            "- ember, 2 workers over 1, one core each: {:.2}× ({:.0}% efficiency)\n",
            two / one,
            50.0 * two / one
        ));
    }
    for workers in [1u16, 2] {
        let ember = eps("ember", workers, true);
        let fastest = ["burn-single", "burn-multi", "burn-sharded", "burn-ddp"]
            .into_iter()
            .filter_map(|side| eps(side, workers, true).map(|e| (side, e)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(ember), Some((side, burn))) = (ember, fastest) {
            text.push_str(&format!(
                "- {workers} worker(s): ember {:.2}× burn-train's fastest ({side})\n",
                ember / burn
            ));
        }
    }
    for workers in [1u16, 2] {
        let ember = on("ember", workers, false, true);
        let fastest = ["burn-single", "burn-multi", "burn-sharded", "burn-ddp"]
            .into_iter()
            .filter_map(|side| on(side, workers, false, true).map(|e| (side, e)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(ember), Some((side, burn))) = (ember, fastest) {
            text.push_str(&format!(
                "- wgpu, {workers} device(s): ember {:.2}× burn-train's fastest ({side})\n",
                ember / burn
            ));
        }
    }
    if let (Some(two), Some(free)) = (eps("ember", 2, true), eps("ember", 1, false)) {
        text.push_str(&format!(
            "- ember, 2 pinned workers against 1 worker free on every core: {:.2}×\n",
            two / free
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::config::configs;
    use super::*;

    #[test]
    fn the_report_has_efficiency_and_ratios_from_the_runs() {
        let line = |side: &str, workers: u16, eps: f64| {
            json!({"side": side, "workers": workers, "parameters": 10, "width": 4,
                   "examples_per_second": eps, "outside_share": 0.25})
        };
        let mut runs = BTreeMap::new();
        let configs: Vec<Config> = configs(true, false, false)
            .into_iter()
            .filter(|c| c.model == "digits")
            .collect();
        for config in &configs {
            let eps = match (config.side, config.workers, config.pinned) {
                ("ember", 1, true) => 100.0,
                ("ember", 2, true) => 190.0,
                ("ember", 1, false) => 120.0,
                ("burn-multi", 1, _) => 90.0,
                ("burn-multi", 2, _) => 150.0,
                _ => 50.0,
            };
            let value = if config.side == "burn-ddp" {
                json!({"error": "burn-ddp panicked: no collectives"})
            } else {
                line(config.side, config.workers, eps)
            };
            runs.insert(config.key(), vec![value]);
        }
        let md = report(&configs, &runs, 1, true);
        assert!(
            md.contains("| ember | 2 | 2 pinned | off | 190 (190–190) | 95% | 25% |"),
            "{md}"
        );
        assert!(
            md.contains("error: burn-ddp panicked: no collectives"),
            "{md}"
        );
        assert!(
            md.contains("ember, 2 workers over 1, one core each: 1.90× (95% efficiency)"),
            "{md}"
        );
        assert!(
            md.contains("1 worker(s): ember 1.11× burn-train's fastest (burn-multi)"),
            "{md}"
        );
        assert!(
            md.contains("2 worker(s): ember 1.27× burn-train's fastest (burn-multi)"),
            "{md}"
        );
        assert!(md.contains("1 worker free on every core: 1.58×"), "{md}");
    }
}
