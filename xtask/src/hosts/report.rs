//! `target/bench/hosts.{md,json}`: the figures of the cut link and of the slow links.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use super::check::Profile;
use super::cut::{BOUND, CutFigures};
use super::launch::KEEPALIVE;
use super::slow::AtRate;

/// Writes the report into `dir`; returns the Markdown.
pub(super) fn write(
    dir: &Path,
    profile: Profile,
    (equal_seconds, worst): (f64, f32),
    cut: &CutFigures,
    rates: &[AtRate],
) -> anyhow::Result<String> {
    let mut md = String::from(
        "# ember across hosts (`cargo xtask hosts`)\n\n\
         Two hosts (network namespaces on one machine, each with its own address on a veth link \
         to a bridge), one rank each under `mpirun`, Open MPI's TCP transport between them.\n\n",
    );
    if profile == Profile::Debug {
        md.push_str(
            "`ember` is the debug build here: its step times are not the release figures of \
             docs/benchmarks.md (`cargo xtask hosts --release` measures those); the all-reduce \
             is the release build either way.\n\n",
        );
    }
    let keepalive: Vec<String> = KEEPALIVE.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(
        md,
        "- (a) `ember train` on 2 hosts x 1 rank: {equal_seconds:.1} s; the model of 2 ranks on one host, byte for byte. \
         `mpi_ranks` on 2 hosts x 2 workers: within {worst:.1e} of one process of 4 workers.\n\
         - (b) host 1's link cut mid-run: every process of the job gone {:.1} s after the cut (bound {:.0} s; `{}`); \
         the output names the lost host: `{}`. In the bucket before `ember push` of the hosts' staging: train/loss \
         (rank 0, connected) at steps 1..{}, the cut host's rank 1 at 1..{}; after: 1..{} and 1..{}; the resumed job ends with the uninterrupted job's model, byte for byte.\n",
        cut.gone_after.as_secs_f64(),
        BOUND.as_secs_f64(),
        keepalive.join(" "),
        cut.named,
        cut.loss.0,
        cut.cut_host.0,
        cut.loss.1,
        cut.cut_host.1,
    );
    md.push_str(&allreduce_table(rates));
    md.push_str(&scaling_table(rates));
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("hosts.md"), &md)?;
    let report = json!({
        "ember_build": profile.dir(),
        "equivalence_seconds": equal_seconds,
        "hosts_against_one_process_max_difference": worst,
        "cut": {
            "gone_after_seconds": cut.gone_after.as_secs_f64(),
            "bound_seconds": BOUND.as_secs_f64(),
            "named": cut.named,
            "loss_steps_before_push": cut.loss.0,
            "loss_steps_after_push": cut.loss.1,
            "cut_host_steps_before_push": cut.cut_host.0,
            "cut_host_steps_after_push": cut.cut_host.1,
        },
        "rates": rates.iter().map(AtRate::json).collect::<Vec<Value>>(),
    });
    std::fs::write(
        dir.join("hosts.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    Ok(md)
}

/// The all-reduce's median time per size at each rate, beside the fitted model's, and the fit.
fn allreduce_table(rates: &[AtRate]) -> String {
    let mut md = String::from(
        "\n## The all-reduce between the hosts: measured (α–β model)\n\n\
         The ring's model for p ranks, t = 2(p−1)α + 2(p−1)/p·n·β (n bytes), fitted per link \
         (least squares, relative errors); for 2 ranks t = 2α + n·β, so a link of rate r bytes/s \
         would give β = 1/r. Open MPI 4.1's non-blocking all-reduce (libnbc, under `MPI_Iallreduce`) \
         takes for fewer than 4 ranks a binomial schedule instead: a reduce to rank 0, then a \
         broadcast, one after the other, each the whole gradient over the link: t = 2α + 2n/r, \
         so the fitted β comes out between 1/r and 2/r (2/r for the large gradients).\n\n\
         | link | α | β | 1/β | the link's r | β·r |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for at in rates {
        let (link, ratio) = at
            .bits_per_second
            .map_or(("–".to_owned(), "–".to_owned()), |r| {
                (
                    format!("{:.1} MB/s", r / 8.0 / 1e6),
                    format!("{:.2}", at.beta * r / 8.0),
                )
            });
        let _ = writeln!(
            md,
            "| {} | {:.0} µs | {:.2} ns/B | {:.1} MB/s | {link} | {ratio} |",
            at.rate,
            at.alpha * 1e6,
            at.beta * 1e9,
            1.0 / at.beta / 1e6
        );
    }
    md.push_str(
        "\nEach cell: the median all-reduce measured between the hosts (the fitted model's; the \
         binomial schedule's at the link's rate, 2α + 2n/r).\n\n\
         | gradient (f32 values) | bytes |",
    );
    for at in rates {
        let _ = write!(md, " {} |", at.rate);
    }
    md.push_str("\n|---:|---:|");
    md.push_str(&"---:|".repeat(rates.len()));
    md.push('\n');
    let sizes: Vec<usize> = rates
        .first()
        .map(|at| at.times.iter().map(|t| t.0).collect())
        .unwrap_or_default();
    for (row, values) in sizes.iter().enumerate() {
        let _ = write!(md, "| {values} | {} |", 4 * values);
        for at in rates {
            let us = at.times.get(row).map_or(f64::NAN, |t| t.1);
            let binomial = at
                .binomial_us(*values)
                .map_or(String::new(), |b| format!("; {b:.0}"));
            let _ = write!(md, " {us:.0} µs ({:.0}{binomial}) |", at.model_us(*values));
        }
        md.push('\n');
    }
    md
}

/// The scaling benchmark's step on the hosts at each rate.
fn scaling_table(rates: &[AtRate]) -> String {
    let mut md = String::from(
        "\n## The scaling benchmark's step on the hosts (`ember bench scaling`, digits, width 4096, 1 rank per host)\n\n\
         A round is one all-reduce of the gradient (and each rank's state), inside the step's \
         \"round + optimizer\" part; beside it, the all-reduce the fit above gives for it.\n\n\
         | link | parameters | step | round + optimizer per step | the fit's all-reduce | binomial at the link's rate | examples/s |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for at in rates {
        let s = &at.scaling;
        let steps = s["steps"].as_f64().unwrap_or(f64::NAN);
        let step = s["step_seconds"].as_f64().unwrap_or(f64::NAN) / steps;
        let round = step * s["optimizer_share"].as_f64().unwrap_or(f64::NAN);
        let parameters = s["parameters"].as_u64().unwrap_or(0);
        let _ = writeln!(
            md,
            "| {} | {parameters} | {:.1} ms | {:.1} ms | {:.1} ms | {} | {:.0} |",
            at.rate,
            step * 1e3,
            round * 1e3,
            at.model_us(parameters as usize) / 1e3,
            at.binomial_us(parameters as usize)
                .map_or("–".to_owned(), |b| format!("{:.1} ms", b / 1e3)),
            s["examples_per_second"].as_f64().unwrap_or(f64::NAN)
        );
    }
    md
}
