//! What a run knows so far, kept apart from the loop so that a failed run can still record it
//! (`lineage.rs` makes MindSpore's lineage from it).

use super::report::TrainReport;

/// What a run knows so far; kept outside [`Trainer::run`] so that a failed run can still
/// record it.
#[derive(Debug, Default)]
pub(crate) struct RunState {
    pub(crate) report: TrainReport,
    /// Mean train loss of the latest epoch that ran a step, finished or not.
    pub(crate) latest_train_loss: Option<f64>,
    /// The learning rate of the latest optimizer step.
    pub(crate) learning_rate: Option<f64>,
    /// Examples in the first device batch.
    pub(crate) batch_size: Option<usize>,
    /// Training examples of the latest finished epoch.
    pub(crate) train_examples: Option<usize>,
    /// Validation examples of the latest validation.
    pub(crate) valid_examples: Option<usize>,
    /// The gaps of [`TrainReport::log_gaps`](crate::TrainReport::log_gaps) that the log does not
    /// note yet: found at this resume, noted right after its rollback.
    pub(crate) unnoted_log_gaps: Vec<crate::LogGap>,
    /// A resumed run's recovery so far, and when its last part ended: until its first
    /// optimizer step, which completes it into the report.
    pub(crate) recovering: Option<(crate::Recovery, std::time::Instant)>,
    /// Whether the run got past its start (resume included) and may have written to the log:
    /// a run refused before it has nothing to record the end of.
    pub(crate) began: bool,
}

impl RunState {
    /// A resumed run's first optimizer step is done, begun at `step_started`: its recovery is
    /// complete, into the report and the log (`ember::recovery`, at info level).
    pub(crate) fn trained_again(&mut self, step_started: std::time::Instant) {
        let Some((mut recovery, since)) = self.recovering.take() else {
            return;
        };
        recovery.data_position = step_started.saturating_duration_since(since);
        recovery.first_step = step_started.elapsed();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        log::info!(
            target: "ember::recovery",
            "training again {:.1} ms after the resume began: checkpoint chosen and read {:.1} \
             ms, state restored {:.1} ms, log rolled back {:.1} ms, data position {:.1} ms, \
             first optimizer step {:.1} ms",
            ms(recovery.total()),
            ms(recovery.read),
            ms(recovery.restore),
            ms(recovery.rollback),
            ms(recovery.data_position),
            ms(recovery.first_step),
        );
        self.report.recovery = Some(recovery);
    }

    /// The tags of the metrics a run records: those [`final_metrics`](Self::final_metrics)
    /// can give, and the per-step loss and per-epoch validation loss.
    pub(crate) fn metric_tags(validates: bool, classifies: bool) -> Vec<&'static str> {
        let mut tags = vec!["train/loss", "final/train_loss"];
        if validates {
            tags.extend(["valid/loss", "final/valid_loss"]);
            if classifies {
                tags.push("final/valid_accuracy");
            }
        }
        tags
    }

    /// The final metrics known so far: the latest train loss, and the latest validation.
    pub(super) fn final_metrics(&self) -> Vec<(&'static str, f64)> {
        let mut metrics = Vec::new();
        if let Some(loss) = self.latest_train_loss {
            metrics.push(("final/train_loss", loss));
        }
        if let Some(last) = self.report.last() {
            if let Some(loss) = last.valid_loss {
                metrics.push(("final/valid_loss", loss));
            }
            if let Some(accuracy) = last.valid_accuracy {
                metrics.push(("final/valid_accuracy", accuracy));
            }
        }
        metrics
    }
}
