//! The values a record can hold.

use crate::image::Image;
use crate::plugins::{Audio, CustomScalarLayout, PrCurve};
use crate::projector::Embedding;
use crate::proto::mindspore;
use crate::tensor::TensorValue;

/// One value of a [`Record`](crate::Record). Which formats accept which kind is listed in
/// `docs/formats.md`; a kind a format cannot hold is rejected with
/// [`PackErrorKind::Unsupported`](crate::PackErrorKind::Unsupported).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A number. Both formats store it as `f32`; NaN and ±Inf are kept.
    Scalar(f64),
    /// A tensor.
    Tensor(TensorValue),
    /// A histogram, from raw values or precomputed buckets.
    Histogram(Histogram),
    /// One image or a batch.
    Image(Image),
    /// Markdown text (TensorBoard only).
    Text(String),
    /// Hyper-parameters of the run and the metrics to compare them by.
    HParams(HParams),
    /// MindSpore lineage (MindInsight only).
    Lineage(Lineage),
    /// A model graph.
    Graph(Graph),
    /// A MindSpore explain record (MindInsight only).
    Explain(Box<mindspore::Explain>),
    /// A tensor to export as a `.npy` file, in either format.
    Export(TensorValue),
    /// A precision-recall curve (TensorBoard's `pr_curves` plugin); boxed to keep [`Value`]
    /// small.
    PrCurve(Box<PrCurve>),
    /// A sound clip (TensorBoard's `audio` plugin, 16-bit PCM WAV).
    Audio(Audio),
    /// The custom scalars dashboard's layout (TensorBoard only). The record tag is not used:
    /// the plugin reads the fixed tag `custom_scalars__config__`.
    CustomScalars(CustomScalarLayout),
    /// An embedding for TensorBoard's projector (TensorBoard only), written as files beside
    /// the event files; boxed to keep [`Value`] small.
    Embedding(Box<Embedding>),
    /// A `SessionLog` START event at the record's step (TensorBoard only; the record tag is
    /// not used): a resumed run writes one before anything else, at the first step it writes
    /// again, and TensorBoard's Python loaders then forget every value they had read at that
    /// step or later. The first START a loader reads of a run only begins its session, so a run
    /// writes one at its start as well.
    SessionStart,
}

impl From<Embedding> for Value {
    fn from(v: Embedding) -> Value {
        Value::Embedding(Box::new(v))
    }
}

impl From<PrCurve> for Value {
    fn from(v: PrCurve) -> Value {
        Value::PrCurve(Box::new(v))
    }
}
impl From<Audio> for Value {
    fn from(v: Audio) -> Value {
        Value::Audio(v)
    }
}
impl From<CustomScalarLayout> for Value {
    fn from(v: CustomScalarLayout) -> Value {
        Value::CustomScalars(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Scalar(v)
    }
}
impl From<f32> for Value {
    fn from(v: f32) -> Value {
        Value::Scalar(f64::from(v))
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Value {
        Value::Scalar(f64::from(v))
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Scalar(f64::from(v))
    }
}
impl From<TensorValue> for Value {
    fn from(v: TensorValue) -> Value {
        Value::Tensor(v)
    }
}
impl From<Histogram> for Value {
    fn from(v: Histogram) -> Value {
        Value::Histogram(v)
    }
}
impl From<Image> for Value {
    fn from(v: Image) -> Value {
        Value::Image(v)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}
impl From<HParams> for Value {
    fn from(v: HParams) -> Value {
        Value::HParams(v)
    }
}
impl From<Lineage> for Value {
    fn from(v: Lineage) -> Value {
        Value::Lineage(v)
    }
}
impl From<Graph> for Value {
    fn from(v: Graph) -> Value {
        Value::Graph(v)
    }
}
impl From<mindspore::Explain> for Value {
    fn from(v: mindspore::Explain) -> Value {
        Value::Explain(Box::new(v))
    }
}

impl Value {
    /// A tensor to export as `.npy`.
    pub fn export(tensor: impl Into<TensorValue>) -> Value {
        Value::Export(tensor.into())
    }

    /// A histogram of raw values.
    pub fn histogram(values: impl Into<TensorValue>) -> Value {
        Value::Histogram(Histogram::Raw(values.into()))
    }

    /// A short lowercase name of the kind (`"scalar"`, `"histogram"`), for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Scalar(_) => "scalar",
            Value::Tensor(_) => "tensor",
            Value::Histogram(_) => "histogram",
            Value::Image(_) => "image",
            Value::Text(_) => "text",
            Value::HParams(_) => "hparams",
            Value::Lineage(_) => "lineage",
            Value::Graph(_) => "graph",
            Value::Explain(_) => "explain",
            Value::Export(_) => "export",
            Value::PrCurve(_) => "pr curve",
            Value::Audio(_) => "audio",
            Value::CustomScalars(_) => "custom scalars layout",
            Value::Embedding(_) => "embedding",
            Value::SessionStart => "session start",
        }
    }
}

/// A histogram: raw values bucketed at packing time, or buckets computed elsewhere.
#[derive(Clone, Debug, PartialEq)]
pub enum Histogram {
    /// Raw values of any dtype and shape; bucketed by the format's own rule.
    Raw(TensorValue),
    /// Raw values bucketed by this rule rather than the packer's (TensorBoard; MindInsight
    /// always uses MindSpore's rule).
    RawWith(TensorValue, crate::HistogramRule),
    /// Precomputed buckets, written as they are.
    Buckets(HistogramBuckets),
}

/// A precomputed histogram. Buckets must be in order and not overlap; counts finite and ≥ 0.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HistogramBuckets {
    /// Smallest finite value.
    pub min: f64,
    /// Largest finite value.
    pub max: f64,
    /// Number of finite values.
    pub num: f64,
    /// Sum of the finite values.
    pub sum: f64,
    /// Sum of their squares (TensorBoard only).
    pub sum_squares: f64,
    /// NaN values seen (MindInsight only).
    pub nan_count: u64,
    /// +Inf values seen (MindInsight only).
    pub pos_inf_count: u64,
    /// -Inf values seen (MindInsight only).
    pub neg_inf_count: u64,
    /// The buckets, left to right.
    pub buckets: Vec<Bucket>,
}

/// One histogram bucket: `[left, right)` holding `count` values.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Bucket {
    /// Left edge.
    pub left: f64,
    /// Right edge.
    pub right: f64,
    /// Number of values.
    pub count: f64,
}

/// A hyper-parameter value.
///
/// TensorBoard stores integers and numbers alike (`number_value`, a double); MindInsight keeps
/// them apart, as MindSpore's `SummaryCollector` does: integers in `map_int32` (when they fit),
/// numbers in `map_double`.
#[derive(Clone, Debug, PartialEq)]
pub enum HParamValue {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A number.
    Number(f64),
    /// A string.
    Str(String),
}

impl From<bool> for HParamValue {
    fn from(v: bool) -> HParamValue {
        HParamValue::Bool(v)
    }
}
impl From<f64> for HParamValue {
    fn from(v: f64) -> HParamValue {
        HParamValue::Number(v)
    }
}
impl From<i64> for HParamValue {
    fn from(v: i64) -> HParamValue {
        HParamValue::Int(v)
    }
}
impl From<i32> for HParamValue {
    fn from(v: i32) -> HParamValue {
        HParamValue::Int(v.into())
    }
}
impl From<u32> for HParamValue {
    fn from(v: u32) -> HParamValue {
        HParamValue::Int(v.into())
    }
}
impl From<&str> for HParamValue {
    fn from(v: &str) -> HParamValue {
        HParamValue::Str(v.to_string())
    }
}
impl From<String> for HParamValue {
    fn from(v: String) -> HParamValue {
        HParamValue::Str(v)
    }
}

/// How a run (a TensorBoard hparams session) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SessionStatus {
    /// Finished normally.
    Success,
    /// Failed.
    Failure,
    /// Still running.
    Running,
}

/// Which records of a run's hyper-parameter session an [`HParams`] value writes.
///
/// TensorBoard's loaders keep the first value of each hparams tag in a run, so a run that
/// learns its status only at the end writes [`SessionPart::Start`] first (with every metric it
/// will have) and [`SessionPart::End`] last: writing the whole session twice would leave the
/// first experiment, and its metric columns, in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SessionPart {
    /// The experiment, the session start and, when [`HParams::status`] is set, the session end.
    #[default]
    Whole,
    /// The experiment and the session start; [`HParams::status`] is not used.
    Start,
    /// The session end alone, with [`HParams::status`], which must be set; the
    /// hyper-parameters and metrics are not used.
    End,
}

/// The hyper-parameters of a run and the scalar tags that measure it.
///
/// TensorBoard gets the hparams plugin's values (experiment, session start info and, when
/// [`HParams::status`] is set, session end info), as [`HParams::part`] selects; MindInsight gets
/// a `UserDefinedInfo` lineage record in MindSpore's `SummaryCollector` layout (one `user_info`
/// entry per hyper-parameter, the status as `session_status`). The record tag is not used: the
/// hparams plugin has fixed tags.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HParams {
    /// Name and value of every hyper-parameter, in display order.
    pub hparams: Vec<(String, HParamValue)>,
    /// Scalar tags to compare runs by (TensorBoard's metric columns).
    pub metrics: Vec<String>,
    /// When set, also write how the session ended.
    pub status: Option<SessionStatus>,
    /// Which records of the session to write.
    pub part: SessionPart,
}

impl HParams {
    /// No hyper-parameters yet.
    pub fn new() -> HParams {
        HParams::default()
    }

    /// Adds a hyper-parameter.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<HParamValue>) -> HParams {
        self.hparams.push((name.into(), value.into()));
        self
    }

    /// Adds a metric tag.
    pub fn metric(mut self, tag: impl Into<String>) -> HParams {
        self.metrics.push(tag.into());
        self
    }

    /// The tests both formats make: a session end needs a status.
    pub(crate) fn check(&self) -> Result<(), crate::PackErrorKind> {
        if self.part == SessionPart::End && self.status.is_none() {
            return Err(crate::PackErrorKind::InvalidHParams(
                "a session end needs a status",
            ));
        }
        Ok(())
    }

    /// The end of a session whose start was written before: its status alone.
    pub fn end(status: SessionStatus) -> HParams {
        HParams {
            status: Some(status),
            part: SessionPart::End,
            ..HParams::default()
        }
    }
}

/// MindSpore lineage: what MindInsight's lineage pages compare across runs. The messages are
/// boxed to keep [`Value`] small; `From` builds each variant from its message.
#[derive(Clone, Debug, PartialEq)]
pub enum Lineage {
    /// What training used and produced.
    Train(Box<mindspore::TrainLineage>),
    /// What evaluation measured.
    Eval(Box<mindspore::EvaluationLineage>),
    /// The dataset pipeline.
    DatasetGraph(Box<mindspore::DatasetGraph>),
    /// Free-form user information.
    UserDefined(Box<mindspore::UserDefinedInfo>),
}

impl From<mindspore::TrainLineage> for Lineage {
    fn from(v: mindspore::TrainLineage) -> Lineage {
        Lineage::Train(Box::new(v))
    }
}
impl From<mindspore::EvaluationLineage> for Lineage {
    fn from(v: mindspore::EvaluationLineage) -> Lineage {
        Lineage::Eval(Box::new(v))
    }
}
impl From<mindspore::DatasetGraph> for Lineage {
    fn from(v: mindspore::DatasetGraph) -> Lineage {
        Lineage::DatasetGraph(Box::new(v))
    }
}
impl From<mindspore::UserDefinedInfo> for Lineage {
    fn from(v: mindspore::UserDefinedInfo) -> Lineage {
        Lineage::UserDefined(Box::new(v))
    }
}

/// A model graph: a flat node list whose `/`-separated names make the module tree.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Graph {
    /// The graph's name (MindInsight shows it).
    pub name: String,
    /// The nodes, in any order.
    pub nodes: Vec<GraphNode>,
}

/// One node of a [`Graph`].
#[derive(Clone, Debug, PartialEq, Default)]
pub struct GraphNode {
    /// Unique name; `/` separates scopes (`model/encoder/linear1`).
    pub name: String,
    /// The operation (`Linear`, `Relu`).
    pub op: String,
    /// Names of the nodes feeding this one.
    pub inputs: Vec<String>,
    /// Attributes, in display order.
    pub attrs: Vec<(String, AttrValue)>,
}

impl GraphNode {
    /// A node with no inputs or attributes.
    pub fn new(name: impl Into<String>, op: impl Into<String>) -> GraphNode {
        GraphNode {
            name: name.into(),
            op: op.into(),
            ..GraphNode::default()
        }
    }

    /// Adds an input.
    pub fn input(mut self, name: impl Into<String>) -> GraphNode {
        self.inputs.push(name.into());
        self
    }

    /// Adds an attribute.
    pub fn attr(mut self, name: impl Into<String>, value: AttrValue) -> GraphNode {
        self.attrs.push((name.into(), value));
        self
    }
}

/// A graph node attribute.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A number.
    Float(f64),
    /// A string.
    Str(String),
    /// A list of integers (a shape, kernel size...).
    Ints(Vec<i64>),
}
