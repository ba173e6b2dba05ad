//! A checkpoint's `meta` section: the run's position, counters and identity as `key=value`
//! lines, written exactly and read back with the field that is wrong named.

pub(super) use crate::checkpoint::meta::Fields;
use crate::checkpoint::meta::{parse_float, parse_opt_float};

use super::position::{EpochTotals, Identity, Position};
use crate::EpochReport;
use crate::trainer::RunState;

/// The largest count a checkpoint may hold (2^48): more steps or examples than any run takes,
/// and far from where adding to it could overflow.
const MAX_COUNT: usize = 1 << 48;

/// `key=value` lines; numbers in decimal, floats as the hex of their bits (exact), absent
/// options as `-`.
pub(super) fn encode_meta(
    position: &Position,
    steps: usize,
    optimizer_steps: usize,
    state: &RunState,
    identity: &Identity,
) -> String {
    let opt_f = |x: Option<f64>| x.map_or("-".into(), float);
    let opt_n = |x: Option<usize>| x.map_or("-".into(), |n| n.to_string());
    let mut lines = vec![
        format!("devices={}", identity.devices),
        format!("ranks={}", identity.ranks),
        format!("data_ranks={}", identity.data_ranks),
        format!("grad_accumulation={}", identity.grad_accumulation),
        format!("reduction={}", identity.reduction),
        format!("model={}", identity.model),
    ];
    if let Some(run) = &identity.run {
        lines.push(format!("run={run}"));
    }
    if let Some(format) = identity.format {
        lines.push(format!("format={}", crate::run::format_name(format)));
    }
    lines.extend(identity.settings.meta_lines());
    lines.extend(position_lines(position, steps));
    lines.extend([
        format!("optimizer_steps={optimizer_steps}"),
        format!("latest_train_loss={}", opt_f(state.latest_train_loss)),
        format!("learning_rate={}", opt_f(state.learning_rate)),
        format!("batch_size={}", opt_n(state.batch_size)),
        format!("train_examples={}", opt_n(state.train_examples)),
        format!("valid_examples={}", opt_n(state.valid_examples)),
        format!("summary_errors={}", state.report.summary_errors),
    ]);
    // The gaps this run was resumed with are noted in the log before this checkpoint (right
    // after the resume's rollback); the one this run's own log has is not yet.
    for gap in &state.report.log_gaps {
        lines.push(format!("log_gap={} {} noted", gap.from, gap.to));
    }
    for e in &state.report.epochs {
        lines.push(format!(
            "epoch_report={} {} {} {} {} {}",
            e.epoch,
            float(e.train_loss),
            opt_f(e.train_accuracy),
            opt_f(e.valid_loss),
            opt_f(e.valid_accuracy),
            float(e.examples_per_second)
        ));
    }
    lines.join("\n")
}

/// `meta` with the gap its run's own log has, where the first record the log lost
/// (`lost_from`, read once every record up to the checkpoint had its fate) is of a step up to
/// the checkpoint's (`steps`): a resume notes it in the log. A record lost after the
/// checkpoint is not its log's.
pub(super) fn with_lost_records(meta: String, lost_from: Option<i64>, steps: usize) -> String {
    match lost_from.filter(|&from| from <= steps as i64) {
        Some(from) => format!("{meta}\nlog_gap={from} {steps} unnoted"),
        None => meta,
    }
}

/// A rank's part's `meta` section (a rank other than 0): the rank, and its own place in the
/// epoch, under the keys rank 0's meta gives the job's.
pub(super) fn encode_part_meta(rank: usize, steps: usize, position: &Position) -> String {
    let mut lines = vec![format!("rank={rank}")];
    lines.extend(position_lines(position, steps));
    lines.join("\n")
}

/// The place of a rank's part in the epoch, `None` for a part written before parts held it
/// (at epoch ends only, where rank 0's place is every rank's).
pub(super) fn decode_part_position(fields: &Fields) -> Result<Option<(Position, usize)>, String> {
    if fields.text("step_in_epoch").is_err() {
        return Ok(None);
    }
    let steps = fields.usize("steps")?;
    if steps > MAX_COUNT {
        return Err(format!("`steps={steps}` is past any run's count"));
    }
    Ok(Some((decode_position(fields)?, steps)))
}

fn float(x: f64) -> String {
    format!("{:016x}", x.to_bits())
}

/// Where a run is, and its pool steps, as `key=value` lines.
fn position_lines(position: &Position, steps: usize) -> [String; 9] {
    let t = &position.totals;
    [
        format!("epoch={}", position.epoch),
        format!("epoch_done={}", position.epoch_done),
        format!("step_in_epoch={}", position.step_in_epoch),
        format!("steps={steps}"),
        format!("loss_sum={}", float(t.loss_sum)),
        format!("loss_count={}", t.loss_count),
        format!("examples={}", t.examples),
        format!("correct={}", t.correct),
        format!("judged={}", t.judged),
    ]
}

/// Where a run is: its epoch, step in it and the epoch's totals so far.
fn decode_position(fields: &Fields<'_>) -> Result<Position, String> {
    let position = Position {
        epoch: fields.usize("epoch")?,
        epoch_done: fields.text("epoch_done")? == "true",
        step_in_epoch: fields.usize("step_in_epoch")?,
        totals: EpochTotals {
            loss_sum: fields.float("loss_sum")?,
            loss_count: fields.usize("loss_count")?,
            examples: fields.usize("examples")?,
            correct: fields.usize("correct")?,
            judged: fields.usize("judged")?,
        },
    };
    if position.epoch == 0 {
        return Err("`epoch=0`: epochs count from 1".into());
    }
    // Counts a run adds to: far past any run's, they could only overflow.
    let t = &position.totals;
    for (key, count) in [
        ("epoch", position.epoch),
        ("step_in_epoch", position.step_in_epoch),
        ("loss_count", t.loss_count),
        ("examples", t.examples),
        ("judged", t.judged),
    ] {
        if count > MAX_COUNT {
            return Err(format!("`{key}={count}` is past any run's count"));
        }
    }
    if t.correct > t.judged {
        return Err(format!(
            "`correct={}` is more than `judged={}`",
            t.correct, t.judged
        ));
    }
    Ok(position)
}

pub(super) fn decode_meta(
    fields: &Fields<'_>,
) -> Result<(Position, usize, usize, RunState), String> {
    let position = decode_position(fields)?;
    let mut state = RunState {
        latest_train_loss: fields.opt_float("latest_train_loss")?,
        learning_rate: fields.opt_float("learning_rate")?,
        batch_size: fields.opt_usize("batch_size")?,
        train_examples: fields.opt_usize("train_examples")?,
        valid_examples: fields.opt_usize("valid_examples")?,
        ..RunState::default()
    };
    state.report.summary_errors = fields
        .text("summary_errors")?
        .parse()
        .map_err(|_| "`summary_errors`".to_string())?;
    for line in fields.all("epoch_report") {
        let parts: Vec<&str> = line.split(' ').collect();
        let bad = || format!("`epoch_report={line}`");
        let [epoch, loss, accuracy, valid_loss, valid_accuracy, speed] = parts.as_slice() else {
            return Err(bad());
        };
        state.report.epochs.push(EpochReport {
            epoch: epoch.parse().map_err(|_| bad())?,
            train_loss: parse_float(loss).ok_or_else(bad)?,
            train_accuracy: parse_opt_float(accuracy).ok_or_else(bad)?,
            valid_loss: parse_opt_float(valid_loss).ok_or_else(bad)?,
            valid_accuracy: parse_opt_float(valid_accuracy).ok_or_else(bad)?,
            examples_per_second: parse_float(speed).ok_or_else(bad)?,
        });
    }
    decode_log_gaps(fields, &mut state)?;
    let steps = fields.usize("steps")?;
    let optimizer_steps = fields.usize("optimizer_steps")?;
    if steps > MAX_COUNT || optimizer_steps > MAX_COUNT {
        return Err(format!(
            "`steps={steps}` or `optimizer_steps={optimizer_steps}` is past any run's count"
        ));
    }
    Ok((position, steps, optimizer_steps, state))
}

/// The `log_gap=<from> <to> <noted|unnoted>` lines into `state`'s report, the unnoted ones also
/// into what the resume notes.
fn decode_log_gaps(fields: &Fields, state: &mut RunState) -> Result<(), String> {
    for line in fields.all("log_gap") {
        let bad = || format!("`log_gap={line}`");
        let [from, to, noted] = line.split(' ').collect::<Vec<_>>()[..] else {
            return Err(bad());
        };
        let gap = crate::LogGap {
            from: from.parse().map_err(|_| bad())?,
            to: to.parse().map_err(|_| bad())?,
        };
        match noted {
            "noted" => {}
            "unnoted" => state.unnoted_log_gaps.push(gap),
            _ => return Err(bad()),
        }
        state.report.log_gaps.push(gap);
    }
    Ok(())
}

impl Identity {
    /// Why this run's devices, more than the `shards` a step's batches are cut into, cannot
    /// take a window's steps at once: the count is no multiple of the shards, or the steps
    /// each device would run at once do not divide the accumulation window (the job's global
    /// batch would change).
    fn spread_refused(&self, shards: usize, accumulation: Option<usize>) -> Option<String> {
        let devices = self.devices.max(1);
        if !devices.is_multiple_of(shards) {
            return Some(format!(
                "it was taken on {shards} device(s), this run has {devices}; a run goes on on \
                 as many devices, on fewer that divide them (each then runs an equal share of \
                 a step's batches), or on a multiple of them that divides its gradient \
                 accumulation (each then runs one of a window's steps)"
            ));
        }
        let at_once = devices / shards;
        let accumulation = accumulation.unwrap_or(1);
        (!accumulation.is_multiple_of(at_once)).then(|| {
            format!(
                "it was taken on {shards} device(s), this run has {devices}: its devices would \
                 run {at_once} steps at once, which its gradient accumulation of {accumulation} \
                 step(s) cannot hold, so the global batch would change; a run goes on on more \
                 devices only where the accumulation is a multiple of the factor"
            )
        })
    }

    /// Why a run of `self` cannot continue from a checkpoint of `taken`; `None` if it can.
    pub(super) fn mismatch(&self, taken: &Fields) -> Option<String> {
        let number = |key: &str| taken.usize(key).ok();
        // A job goes on with fewer ranks when each can run the data shards of an equal share
        // of the ranks that began it: its steps, batches and gradients stay the job's.
        let ranks = number("ranks").filter(|ranks| *ranks > 0);
        let data_ranks = number("data_ranks").or(ranks);
        let Some(data_ranks) = data_ranks.filter(|d| d.is_multiple_of(self.ranks.max(1))) else {
            return Some(format!(
                "it was taken by a job of {} rank(s), this one has {}; a job goes on with as \
                 many ranks, or with fewer that divide the {} it began with (each then runs \
                 the data of an equal share of them); not with more",
                taken.text("ranks").unwrap_or("?"),
                self.ranks,
                data_ranks.map_or("?".to_owned(), |d| d.to_string()),
            ));
        };
        // A run goes on on fewer devices when each can run an equal share of a step's batches
        // (`Driver::reshard`), and on more when each of a slice's devices can run one of the
        // consecutive steps of an accumulation window: the steps, their batches and their
        // gradients stay the run's.
        let shards = number("devices")
            .filter(|shards| *shards > 0)
            .map(|shards| shards * (data_ranks / self.ranks.max(1)));
        let devices = self.devices.max(1);
        let Some(shards) = shards else {
            return Some(format!(
                "it names no device count ({}), this run has {devices}",
                taken.text("devices").unwrap_or("?")
            ));
        };
        if !shards.is_multiple_of(devices)
            && let Some(reason) = self.spread_refused(shards, number("grad_accumulation"))
        {
            return Some(reason);
        }
        if number("grad_accumulation") != Some(self.grad_accumulation) {
            return Some(format!(
                "it was taken with gradient accumulation {}, this run has {}",
                taken.text("grad_accumulation").unwrap_or("?"),
                self.grad_accumulation
            ));
        }
        if taken.text("reduction").ok() != Some(self.reduction) {
            return Some(format!(
                "it was taken with reduction {}, this run has {}",
                taken.text("reduction").unwrap_or("?"),
                self.reduction
            ));
        }
        if taken.text("model").ok() != Some(self.model.as_str()) {
            return Some(format!(
                "the model changed: the checkpoint's parameters are [{}], this model's are [{}]",
                taken.text("model").unwrap_or("?"),
                self.model
            ));
        }
        None
    }
}
