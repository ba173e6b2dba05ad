//! `--resume-if-any`: one command line for a run's first start and every start after it, for a
//! batch script that a scheduler (Slurm's `--requeue`, a preemption) runs again as it is.
//!
//! Which run a log directory holds is told by the command line `ember train` recorded beside
//! its checkpoints (`run.json`): the same arguments, parsed and compared flag by flag (the
//! order and spelling they were typed in aside), make it this command's run; any other value
//! (another model size, batch size, epoch count, data subset, …) makes it another run, refused
//! naming each difference; where it trains (its devices) does not. The checkpoint itself is checked again when it is
//! admitted and loaded (its devices, ranks, batch and data sizes, model).

use std::collections::BTreeMap;
use std::path::Path;

use super::args::TrainArgs;
use super::command::{recorded_command, saved_args};
use anyhow::ensure;

/// Refuses `--resume-if-any` where `logdir` holds another `ember train` run: one whose
/// recorded command differs from `args`, naming each difference. How this run then begins
/// (fresh, resumed, restarted, or finished and left as it is) is [`ember::run::Run`]'s to settle
/// from what the directory holds; a run whose record was lost goes on with `args`, its
/// checkpoint compared with them.
pub(super) fn refuse_another_run(args: &TrainArgs, logdir: &Path) -> anyhow::Result<()> {
    if recorded_command(logdir)?.is_none() {
        return Ok(());
    }
    let saved = saved_args(logdir, &[])?;
    let differences = differences(&saved, args);
    ensure!(
        differences.is_empty(),
        "{} holds another run, started with other arguments ({}); give the arguments it was \
         started with, go on with it with --resume {0}, or use another --logdir",
        crate::output::shown(logdir),
        differences.join(", ")
    );
    Ok(())
}

/// Each flag whose value differs between the run's saved arguments and the given ones, as
/// `name: saved there, given here`. How the run is begun, where it logs and where it trains
/// are not the run: a requeued job may get fewer devices back, on which the Trainer lets the
/// run go on or refuses it.
fn differences(saved: &TrainArgs, given: &TrainArgs) -> Vec<String> {
    let (saved, given) = (fields(saved), fields(given));
    let how_begun = [
        "logdir",
        "resume",
        "restart",
        "resume_if_any",
        "device",
        "devices",
        "share_devices",
        "worker_threads",
    ];
    saved
        .iter()
        .filter(|(name, _)| !how_begun.contains(&name.as_str()))
        .filter(|(name, value)| given.get(*name) != Some(value))
        .map(|(name, value)| {
            let here = given.get(name).map_or("none", String::as_str);
            format!("--{}: {value} there, {here} here", name.replace('_', "-"))
        })
        .collect()
}

/// The parsed flags by name, each value as `Debug` shows it: every flag with its default
/// filled in, however it was typed.
fn fields(args: &TrainArgs) -> BTreeMap<String, String> {
    let shown = format!("{args:#?}");
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    // `{:#?}` puts each field of the struct on a line of its own, indented by four spaces;
    // a value that spans lines goes on, indented deeper.
    for line in shown.lines().skip(1) {
        let top = line
            .strip_prefix("    ")
            .filter(|rest| !rest.starts_with(' '));
        match top.and_then(|rest| rest.split_once(": ")) {
            Some((name, value)) => {
                fields.insert(name.to_owned(), value.trim_end_matches(',').to_owned());
                current = Some(name.to_owned());
            }
            None => {
                if let Some(value) = current.as_ref().and_then(|name| fields.get_mut(name)) {
                    value.push_str(line.trim());
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> TrainArgs {
        #[derive(clap::Parser)]
        struct Parsed {
            #[command(flatten)]
            args: TrainArgs,
        }
        let line = std::iter::once("ember-train").chain(args.iter().copied());
        <Parsed as clap::Parser>::try_parse_from(line).unwrap().args
    }

    #[test]
    fn the_same_run_however_typed_and_another_named_by_each_difference() {
        let saved = parsed(&["--epochs", "3", "--device", "cpu,cpu", "--logdir", "r"]);
        let same = parsed(&[
            "--device=cpu,cpu",
            "--resume-if-any",
            "--epochs=3",
            "--logdir=r",
        ]);
        assert_eq!(differences(&saved, &same), Vec::<String>::new());
        // Fewer devices is where the run trains, not another run.
        let fewer = parsed(&["--epochs", "3", "--device", "cpu", "--worker-threads", "2"]);
        assert_eq!(differences(&saved, &fewer), Vec::<String>::new());
        let other = parsed(&["--epochs", "4", "--device", "cpu", "--hidden", "8"]);
        let found = differences(&saved, &other);
        assert_eq!(
            found,
            ["--epochs: 3 there, 4 here", "--hidden: 64 there, 8 here"],
            "{found:?}"
        );
    }
}
