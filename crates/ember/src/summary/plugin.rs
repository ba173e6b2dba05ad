//! The kinds a value is recorded as ([`Plugin`], MindSpore's plugin names), the record's
//! [`Mode`] and the [`RankLayout`] of a job's files.

use ember_write::pack::Value;

/// Which kind of value an [`add_value`](crate::SummaryRecord::add_value) call adds: MindSpore's plugin
/// names, plus TensorBoard's text, hparams, pr curves, audio and custom scalars. A value must be of its plugin's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Plugin {
    /// A number.
    Scalar,
    /// A tensor (exported as `.npy` too when export is on).
    Tensor,
    /// A histogram.
    Histogram,
    /// One image or a batch.
    Image,
    /// Markdown text.
    Text,
    /// Hyper-parameters and the metrics that measure them.
    HParams,
    /// A model graph.
    Graph,
    /// MindSpore train lineage.
    TrainLineage,
    /// MindSpore evaluation lineage.
    EvalLineage,
    /// MindSpore dataset graph.
    DatasetGraph,
    /// MindSpore user-defined lineage information.
    CustomLineage,
    /// A MindSpore explain record.
    Explain,
    /// A tensor to export as `.npy` only.
    Export,
    /// A precision-recall curve (TensorBoard's `pr_curves`).
    PrCurve,
    /// A sound clip (TensorBoard's `audio`).
    Audio,
    /// The custom scalars dashboard's layout (TensorBoard's `custom_scalars`).
    CustomScalars,
    /// An embedding for TensorBoard's projector.
    Embedding,
    /// A session (re)start, TensorBoard's `SessionLog` START
    /// ([`SummaryRecord::start_session`](crate::SummaryRecord::start_session)).
    SessionStart,
}

impl Plugin {
    /// The plugin a value belongs to.
    pub fn of(value: &Value) -> Plugin {
        use ember_write::pack::Lineage;
        match value {
            Value::Scalar(_) => Plugin::Scalar,
            Value::Tensor(_) => Plugin::Tensor,
            Value::Histogram(_) => Plugin::Histogram,
            Value::Image(_) => Plugin::Image,
            Value::Text(_) => Plugin::Text,
            Value::HParams(_) => Plugin::HParams,
            Value::Graph(_) => Plugin::Graph,
            Value::Lineage(Lineage::Train(_)) => Plugin::TrainLineage,
            Value::Lineage(Lineage::Eval(_)) => Plugin::EvalLineage,
            Value::Lineage(Lineage::DatasetGraph(_)) => Plugin::DatasetGraph,
            Value::Lineage(Lineage::UserDefined(_)) => Plugin::CustomLineage,
            Value::Explain(_) => Plugin::Explain,
            Value::Export(_) => Plugin::Export,
            Value::PrCurve(_) => Plugin::PrCurve,
            Value::Audio(_) => Plugin::Audio,
            Value::CustomScalars(_) => Plugin::CustomScalars,
            Value::Embedding(_) => Plugin::Embedding,
            Value::SessionStart => Plugin::SessionStart,
        }
    }
}

/// MindSpore's modes. In [`Mode::Eval`], [`record`](crate::SummaryRecord::record) drops the values that
/// model code sent through a [`SummaryTap`](crate::SummaryTap) (MindSpore's summary operators); values added with
/// `add_value` are still written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Training: tapped values are recorded.
    #[default]
    Train,
    /// Evaluation: tapped values are dropped.
    Eval,
}

/// Where a rank's files go when the world has more than one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RankLayout {
    /// The rank goes into the file names (MindInsight's names always carry it).
    #[default]
    FileName,
    /// Each rank writes under `<log dir>/rank_<rank>/`.
    Directory,
}
