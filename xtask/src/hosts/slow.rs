//! Scenario (c): the hosts' links limited by tc's token bucket (1 Gbit/s, 100 Mbit/s; and
//! unlimited, veth's own speed). At each rate: the all-reduce's median time per gradient size
//! between the two hosts (ember-collective's `allreduce` example), with the α–β model of a ring
//! all-reduce fitted to it (for p ranks, t = 2(p−1)α + 2(p−1)/p·n·β, n bytes; for 2 ranks
//! t = 2α + n·β), β set beside the link's own 8/rate; and the step time of the scaling
//! benchmark's model as one rank on each host (`ember bench scaling`, a short run), with the
//! all-reduce time the fit predicts for its gradient.

use anyhow::{Context, ensure};
use serde_json::{Value, json};

use super::check::Check;
use crate::scenario::Env;

/// The rates the links are limited to: tc's words, and bits per second (`None`: no limit).
pub(super) const RATES: &[(&str, Option<f64>)] = &[
    ("unlimited", None),
    ("1gbit", Some(1e9)),
    ("100mbit", Some(1e8)),
];

/// Gradient sizes timed, in `f32` values (4 MB at most: a third of a second at 100 Mbit/s,
/// timed at least 8 times).
const SIZES: &[usize] = &[1_000, 10_000, 100_000, 1_000_000];

/// The scaling benchmark's digits perceptron, 4096 wide: 307 k parameters, 1.2 MB a round;
/// two epochs of the whole set, 6 steps of 128 digits a rank each.
const SCALING: &[&str] = &[
    "bench",
    "scaling",
    "--side",
    "ember",
    "--workers",
    "1",
    "--model",
    "digits",
    "--width",
    "4096",
    "--epochs",
    "2",
];

/// What was measured at one rate.
pub(super) struct AtRate {
    pub(super) rate: &'static str,
    pub(super) bits_per_second: Option<f64>,
    /// (gradient values, median µs) per size.
    pub(super) times: Vec<(usize, f64)>,
    /// The fit: α in seconds, β in seconds per byte.
    pub(super) alpha: f64,
    pub(super) beta: f64,
    /// The scaling benchmark's JSON line.
    pub(super) scaling: Value,
}

impl AtRate {
    /// The α–β model's time in µs for `values` f32s between 2 ranks.
    pub(super) fn model_us(&self, values: usize) -> f64 {
        (2.0 * self.alpha + (4 * values) as f64 * self.beta) * 1e6
    }

    /// Open MPI's binomial schedule for 2 ranks at the link's own rate, in µs: the fitted α,
    /// and the gradient over the link twice, one way then the other (`None` unlimited).
    pub(super) fn binomial_us(&self, values: usize) -> Option<f64> {
        self.bits_per_second
            .map(|r| (2.0 * self.alpha + 2.0 * (4 * values) as f64 * 8.0 / r) * 1e6)
    }

    pub(super) fn json(&self) -> Value {
        json!({
            "rate": self.rate,
            "bits_per_second": self.bits_per_second,
            "alpha_us": self.alpha * 1e6,
            "beta_ns_per_byte": self.beta * 1e9,
            "link_beta_ns_per_byte": self.bits_per_second.map(|r| 8.0 / r * 1e9),
            "allreduce": self.times.iter().map(|(n, us)| json!({
                "values": n, "median_us": us, "model_us": self.model_us(*n),
                "binomial_at_link_us": self.binomial_us(*n),
            })).collect::<Vec<_>>(),
            "scaling": self.scaling,
        })
    }
}

/// Runs the scenario at every rate, the links unlimited again after it.
pub(super) fn slow(check: &Check) -> anyhow::Result<Vec<AtRate>> {
    let mut found = Vec::new();
    for (rate, bits) in RATES {
        check.network.shape(bits.map(|b| (*rate, b)))?;
        let measured = at_rate(check, rate, *bits);
        check.network.shape(None)?;
        found.push(measured?);
    }
    Ok(found)
}

fn at_rate(check: &Check, rate: &'static str, bits: Option<f64>) -> anyhow::Result<AtRate> {
    let sizes: Vec<String> = SIZES.iter().map(usize::to_string).collect();
    let sizes: Vec<&str> = sizes.iter().map(String::as_str).collect();
    let ran = check.succeed(
        check.on_hosts(check.allreduce, &sizes),
        &format!("slow-allreduce-{rate}"),
    )?;
    let mut times = Vec::new();
    for line in ran.output.lines().filter(|l| l.starts_with('{')) {
        let value: Value = serde_json::from_str(line)?;
        let size = value["values"].as_u64().context("values")? as usize;
        times.push((size, value["median_us"].as_f64().context("median_us")?));
    }
    ensure!(
        times.len() == SIZES.len(),
        "the all-reduce benchmark at {rate} timed {} of {} sizes:\n{}",
        times.len(),
        SIZES.len(),
        ran.output
    );
    let (alpha, beta) = fit(&times);
    let ran = check.succeed(check.launch(SCALING), &format!("slow-scaling-{rate}"))?;
    let scaling: Value = ran
        .output
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("ember bench scaling printed no JSON line")
        .and_then(|l| Ok(serde_json::from_str(l)?))?;
    ensure!(
        scaling.get("error").is_none() && scaling["ranks"] == 2,
        "ember bench scaling on the hosts at {rate}: {scaling}"
    );
    Ok(AtRate {
        rate,
        bits_per_second: bits,
        times,
        alpha,
        beta,
        scaling,
    })
}

/// Least squares of t = 2α + n·β over (f32 values, µs) pairs, n in bytes, each point weighted
/// by 1/t² (relative errors, so that the small sizes, which hold α, count as much as the large
/// ones); returns (α s, β s/byte).
pub(super) fn fit(times: &[(usize, f64)]) -> (f64, f64) {
    let (mut s, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (n, us) in times {
        let (x, y) = ((4 * n) as f64, us * 1e-6);
        let w = 1.0 / (y * y);
        s += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let det = s * sxx - sx * sx;
    let beta = if det > 0.0 {
        (s * sxy - sx * sy) / det
    } else {
        0.0
    };
    let intercept = (sy - beta * sx) / s;
    ((intercept / 2.0).max(0.0), beta)
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn the_fit_finds_alpha_and_beta_of_exact_times() {
        // α = 50 µs, β = 10 ns/byte: t = 100 µs + 4n · 10 ns.
        let times: Vec<(usize, f64)> = [1_000, 10_000, 100_000]
            .iter()
            .map(|&n| (n, 100.0 + 4.0 * n as f64 * 0.01))
            .collect();
        let (alpha, beta) = fit(&times);
        assert!((alpha - 50e-6).abs() < 1e-9, "{alpha}");
        assert!((beta - 10e-9).abs() < 1e-15, "{beta}");
    }
}
