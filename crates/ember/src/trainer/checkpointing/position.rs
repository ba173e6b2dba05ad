//! Where a run is ([`Position`], with its epoch's running [`EpochTotals`]) and what it is
//! ([`Identity`]): what a checkpoint records beside the model, optimizer and scheduler.

use burn::module::Module;
use ember_pool::step::burn::Reduction;

use ember_write::pack::Format;

use crate::model_info::named_shapes;
use crate::run::{RunId, Settings};

/// What an epoch has added up so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct EpochTotals {
    pub(crate) loss_sum: f64,
    pub(crate) loss_count: usize,
    pub(crate) examples: usize,
    pub(crate) correct: usize,
    pub(crate) judged: usize,
}

/// Where a run is: everything besides the model, optimizer and scheduler that a resumed run
/// needs to go on as the killed one would have.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Position {
    /// The epoch, from 1.
    pub(crate) epoch: usize,
    /// Whether that epoch is over (validated, recorded).
    pub(crate) epoch_done: bool,
    /// Pool steps of the epoch taken.
    pub(crate) step_in_epoch: usize,
    pub(crate) totals: EpochTotals,
}

/// What must match between the run that took a checkpoint and the one resuming from it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Identity {
    /// The devices the run started on: the shards of its data, which a run resumed on fewer
    /// devices keeps (each device then runs several shards a step).
    pub(crate) devices: usize,
    pub(crate) ranks: usize,
    /// The shards the data is cut into across ranks: the ranks the job started with, which a
    /// job resumed with fewer ranks keeps (each rank then runs several).
    pub(crate) data_ranks: usize,
    pub(crate) grad_accumulation: usize,
    pub(crate) reduction: &'static str,
    /// Every parameter's name and size.
    pub(crate) model: String,
    /// The run's id, where it has one (see [`crate::run`]), its settings and its log's format:
    /// what [`Run`](crate::run::Run) compares, recorded for the next start to.
    pub(crate) run: Option<RunId>,
    pub(crate) settings: Settings,
    pub(crate) format: Option<Format>,
}

impl Identity {
    pub(crate) fn new<M: Module>(
        model: &M,
        devices: usize,
        ranks: usize,
        grad_accumulation: usize,
        reduction: Reduction,
    ) -> Self {
        let model = named_shapes(model)
            .iter()
            .map(|(name, shape)| format!("{name}:{}", shape.iter().product::<usize>()))
            .collect::<Vec<_>>()
            .join(",");
        Self {
            devices,
            ranks,
            data_ranks: ranks,
            grad_accumulation,
            reduction: match reduction {
                Reduction::Mean => "mean",
                Reduction::Sum => "sum",
            },
            model,
            run: None,
            settings: Settings::new(),
            format: None,
        }
    }
}

impl Position {
    /// Inside epoch `epoch`, after `step_in_epoch` of its pool steps, with its totals so far.
    pub(crate) fn within(epoch: usize, step_in_epoch: usize, totals: EpochTotals) -> Self {
        Self {
            epoch,
            epoch_done: false,
            step_in_epoch,
            totals,
        }
    }

    /// At the end of epoch `epoch`, validated and recorded.
    pub(crate) fn end_of(epoch: usize) -> Self {
        Self {
            epoch,
            epoch_done: true,
            step_in_epoch: 0,
            totals: EpochTotals::default(),
        }
    }
}
