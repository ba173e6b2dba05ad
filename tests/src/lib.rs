//! Fixtures shared by ember's cross-crate integration tests (in `tests/tests/`): a small Burn
//! MLP that is a burn-train model, deterministic regression batches, and a data-loader iterator
//! over prepared batches.

#![deny(missing_docs)]

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder, DataLoaderIterator, Progress};
use burn::data::dataset::DatasetError;
use burn::data::dataset::InMemDataset;
use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction as LossReduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn::train::{ClassificationOutput, InferenceStep, RegressionOutput, TrainOutput, TrainStep};

/// A two-layer perceptron mapping 2 inputs to 1 output.
#[derive(Module, Debug)]
pub struct Mlp {
    l1: Linear,
    act: Relu,
    l2: Linear,
}

impl Mlp {
    /// A freshly initialised MLP with `hidden` units on `device`.
    pub fn new(hidden: usize, device: &Device) -> Self {
        Self {
            l1: LinearConfig::new(2, hidden).init(device),
            act: Relu::new(),
            l2: LinearConfig::new(hidden, 1).init(device),
        }
    }

    /// The forward pass.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.l2.forward(self.act.forward(self.l1.forward(x)))
    }

    fn regression(&self, batch: XyBatch) -> RegressionOutput {
        let output = self.forward(batch.x);
        let loss = MseLoss::new().forward(output.clone(), batch.y.clone(), LossReduction::Mean);
        RegressionOutput::new(loss, output, batch.y)
    }
}

impl TrainStep for Mlp {
    type Input = XyBatch;
    type Output = RegressionOutput;

    fn step(&self, batch: XyBatch) -> TrainOutput<RegressionOutput> {
        if let Some(message) = batch.poison {
            panic!("{message}");
        }
        let output = self.regression(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for Mlp {
    type Input = XyBatch;
    type Output = RegressionOutput;

    fn step(&self, batch: XyBatch) -> RegressionOutput {
        if let Some(message) = batch.poison {
            panic!("{message}");
        }
        self.regression(batch)
    }
}

/// Inputs and targets of a regression batch. A poisoned batch makes the train step panic with
/// the given message.
#[derive(Debug, Clone)]
pub struct XyBatch {
    /// Inputs, `[batch, 2]`.
    pub x: Tensor<2>,
    /// Targets, `[batch, 1]`.
    pub y: Tensor<2>,
    /// Panic message for the train step, if any.
    pub poison: Option<&'static str>,
}

impl XyBatch {
    /// `rows` examples of `y = 3 x0 - 2 x1 + 0.5` with inputs from a fixed pseudo-random
    /// sequence starting at `seed`.
    pub fn synthetic(seed: u64, rows: usize, device: &Device) -> Self {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let x: Vec<f32> = (0..rows * 2).map(|_| next()).collect();
        let y: Vec<f32> = x.chunks(2).map(|p| 3.0 * p[0] - 2.0 * p[1] + 0.5).collect();
        Self {
            x: Tensor::from_data(TensorData::new(x, [rows, 2]), device),
            y: Tensor::from_data(TensorData::new(y, [rows, 1]), device),
            poison: None,
        }
    }

    /// The batches concatenated along the batch dimension.
    pub fn concat(batches: &[XyBatch]) -> Self {
        Self {
            x: Tensor::cat(batches.iter().map(|b| b.x.clone()).collect(), 0),
            y: Tensor::cat(batches.iter().map(|b| b.y.clone()).collect(), 0),
            poison: None,
        }
    }
}

/// A burn data-loader iterator over prepared batches.
#[derive(Debug)]
pub struct BatchList {
    batches: std::vec::IntoIter<XyBatch>,
    processed: usize,
    total: usize,
}

impl BatchList {
    /// Iterates over `batches`.
    pub fn new(batches: Vec<XyBatch>) -> Self {
        let total = batches.iter().map(|b| b.x.dims()[0]).sum();
        Self {
            batches: batches.into_iter(),
            processed: 0,
            total,
        }
    }
}

impl Iterator for BatchList {
    type Item = Result<XyBatch, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = self.batches.next()?;
        self.processed += batch.x.dims()[0];
        Some(Ok(batch))
    }
}

impl DataLoaderIterator<XyBatch> for BatchList {
    fn progress(&self) -> Progress {
        Progress::new(self.processed, self.total, Some("items".into()))
    }
}

/// Every float parameter of a module, flattened in visiting order.
pub fn parameters<M: Module>(module: &M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let values = param
                .val()
                .try_into_vec_as::<f32>()
                .expect("parameters are readable");
            self.0.extend(values);
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

/// The largest absolute difference between two parameter lists of the same length; infinite
/// where a value is NaN on either side.
pub fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "parameter counts differ");
    a.iter()
        .zip(b)
        // A NaN on either side is as different as values get: `f32::max` would pass over it.
        .map(|(x, y)| {
            let difference = (x - y).abs();
            if difference.is_nan() {
                f32::INFINITY
            } else {
                difference
            }
        })
        .fold(0.0, f32::max)
}

/// Batches `[x0, x1, y]` rows into an [`XyBatch`].
#[derive(Debug, Clone, Default)]
pub struct XyBatcher;

impl Batcher<[f32; 3], XyBatch> for XyBatcher {
    fn batch(&self, rows: Vec<[f32; 3]>, device: &Device) -> XyBatch {
        let count = rows.len();
        let x: Vec<f32> = rows.iter().flat_map(|r| [r[0], r[1]]).collect();
        let y: Vec<f32> = rows.iter().map(|r| r[2]).collect();
        XyBatch {
            x: Tensor::from_data(TensorData::new(x, [count, 2]), device),
            y: Tensor::from_data(TensorData::new(y, [count, 1]), device),
            poison: None,
        }
    }
}

/// `rows` examples `[x0, x1, y]` of the synthetic regression in [`XyBatch::synthetic`].
pub fn regression_rows(seed: u64, rows: usize) -> Vec<[f32; 3]> {
    let batch = XyBatch::synthetic(seed, rows, &Device::flex());
    let x = batch.x.into_data().iter::<f32>().collect::<Vec<_>>();
    let y = batch.y.into_data().iter::<f32>().collect::<Vec<_>>();
    (0..rows).map(|i| [x[2 * i], x[2 * i + 1], y[i]]).collect()
}

/// A burn data loader over `rows` (as [`regression_rows`] gives them), in order, in batches
/// of `batch_size`.
pub fn rows_loader(
    rows: Vec<[f32; 3]>,
    batch_size: usize,
    device: &Device,
) -> Arc<dyn DataLoader<XyBatch>> {
    DataLoaderBuilder::new(XyBatcher)
        .batch_size(batch_size)
        .set_device(device.clone())
        .build(InMemDataset::new(rows))
}

/// A burn data loader over `rows` examples of the synthetic regression (seed 3) in batches of
/// 8, shuffled by burn's loader from seed 7 when `shuffle` is set.
pub fn shuffled_loader(
    rows: usize,
    shuffle: bool,
    device: &Device,
) -> Arc<dyn DataLoader<XyBatch>> {
    let builder = DataLoaderBuilder::new(XyBatcher)
        .batch_size(8)
        .set_device(device.clone());
    let builder = if shuffle { builder.shuffle(7) } else { builder };
    builder.build(InMemDataset::new(regression_rows(3, rows)))
}

/// An [`Mlp`] with `hidden` units initialised from `seed` alone: the same seed gives the same
/// model whatever else the process draws.
///
/// The device's generator is the process's, which every test of the binary running beside this
/// one draws from (Burn draws parameters lazily, on first use, so even a lock around seeding
/// and drawing left a test's `Mlp::new` room to draw in between). The values come instead from a
/// SplitMix64 sequence of `seed`, uniform in ±1/√fan-in as Burn's `Linear` draws them (a bias
/// takes its weight's fan-in).
pub fn seeded_mlp(hidden: usize, seed: u64, device: &Device) -> Mlp {
    struct Seeded {
        state: u64,
        fan_in: usize,
    }
    impl burn::module::ModuleMapper for Seeded {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(|tensor| {
                let shape = tensor.shape();
                if D == 2 {
                    self.fan_in = shape.dims::<D>()[0];
                }
                let bound = 1.0 / (self.fan_in.max(1) as f64).sqrt();
                let values: Vec<f32> = (0..shape.num_elements())
                    .map(|_| ((2.0 * split_mix(&mut self.state) - 1.0) * bound) as f32)
                    .collect();
                let fresh =
                    Tensor::<D>::from_data(TensorData::new(values, shape), &tensor.device());
                if tensor.is_require_grad() {
                    fresh.require_grad()
                } else {
                    fresh
                }
            })
        }
    }
    Mlp::new(hidden, device).map(&mut Seeded {
        state: seed,
        fan_in: 1,
    })
}

/// The next value of a SplitMix64 sequence, as a float in [0, 1).
fn split_mix(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A burn data loader over `rows` examples of the synthetic regression in [`XyBatch::synthetic`],
/// in batches of `batch_size`, unshuffled.
pub fn regression_loader(
    seed: u64,
    rows: usize,
    batch_size: usize,
    device: &Device,
) -> Arc<dyn DataLoader<XyBatch>> {
    rows_loader(regression_rows(seed, rows), batch_size, device)
}

/// A data loader whose batches are poisoned (the train step panics on them, see
/// [`XyBatch::poison`]) when they hold a given row of the underlying loader.
///
/// Slicing keeps the row numbering of the whole loader, so after burn's `split_dataloader` only
/// the device whose slice holds the row gets the poisoned batch.
pub struct PoisonedLoader {
    inner: Arc<dyn DataLoader<XyBatch>>,
    offset: usize,
    row: usize,
    message: &'static str,
    /// Fail to load the batch instead, forever after: the iterator then returns the same
    /// error on every call, as burn's batch iterator does.
    fail: bool,
    /// Poison only in this epoch (counted by the iterators begun on this loader, from 1).
    epoch: Option<usize>,
    /// Iterators begun so far.
    begun: std::sync::atomic::AtomicUsize,
}

impl PoisonedLoader {
    /// Poisons, with `message`, the batch of `inner` that holds row `row` (counted from 0).
    pub fn wrap(
        inner: Arc<dyn DataLoader<XyBatch>>,
        row: usize,
        message: &'static str,
    ) -> Arc<dyn DataLoader<XyBatch>> {
        Self::at_row(inner, row, message, false)
    }

    /// Fails to load, with `message`, the batch of `inner` that holds row `row`, and every
    /// call after it.
    pub fn failing(
        inner: Arc<dyn DataLoader<XyBatch>>,
        row: usize,
        message: &'static str,
    ) -> Arc<dyn DataLoader<XyBatch>> {
        Self::at_row(inner, row, message, true)
    }

    /// Poisons, with `message`, the batch of `inner` that holds row `row` in epoch `epoch`
    /// only (from 1): a run that fails part way through a later epoch.
    pub fn in_epoch(
        inner: Arc<dyn DataLoader<XyBatch>>,
        row: usize,
        epoch: usize,
        message: &'static str,
    ) -> Arc<dyn DataLoader<XyBatch>> {
        Arc::new(Self {
            epoch: Some(epoch),
            ..Self::new(inner, row, message, false)
        })
    }

    fn at_row(
        inner: Arc<dyn DataLoader<XyBatch>>,
        row: usize,
        message: &'static str,
        fail: bool,
    ) -> Arc<dyn DataLoader<XyBatch>> {
        Arc::new(Self::new(inner, row, message, fail))
    }

    fn new(
        inner: Arc<dyn DataLoader<XyBatch>>,
        row: usize,
        message: &'static str,
        fail: bool,
    ) -> Self {
        Self {
            inner,
            offset: 0,
            row,
            message,
            fail,
            epoch: None,
            begun: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The same poisoning over `inner`, whose rows start at `offset`.
    fn over(&self, inner: Arc<dyn DataLoader<XyBatch>>, offset: usize) -> Self {
        Self {
            inner,
            offset,
            epoch: self.epoch,
            ..Self::new(Arc::clone(&self.inner), self.row, self.message, self.fail)
        }
    }
}

/// The error of a batch that [`PoisonedLoader::failing`] cannot load.
#[derive(Debug)]
struct LoadFailure(&'static str);

impl std::fmt::Display for LoadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for LoadFailure {}

struct PoisonedIter<'a> {
    inner: Box<dyn DataLoaderIterator<XyBatch> + 'a>,
    next_row: usize,
    row: usize,
    message: &'static str,
    fail: bool,
    failed: bool,
}

impl Iterator for PoisonedIter<'_> {
    type Item = Result<XyBatch, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return Some(Err(DatasetError::new(LoadFailure(self.message))));
        }
        let item = self.inner.next()?;
        if self.fail
            && let Ok(batch) = &item
            && (self.next_row..self.next_row + batch.x.dims()[0]).contains(&self.row)
        {
            self.failed = true;
            return Some(Err(DatasetError::new(LoadFailure(self.message))));
        }
        Some(item.map(|mut batch| {
            let rows = batch.x.dims()[0];
            if (self.next_row..self.next_row + rows).contains(&self.row) {
                batch.poison = Some(self.message);
            }
            self.next_row += rows;
            batch
        }))
    }
}

impl DataLoaderIterator<XyBatch> for PoisonedIter<'_> {
    fn progress(&self) -> Progress {
        self.inner.progress()
    }
}

impl DataLoader<XyBatch> for PoisonedLoader {
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<XyBatch> + 'a> {
        let epoch = self.begun.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let poisons = self.epoch.is_none_or(|only| only == epoch);
        Box::new(PoisonedIter {
            inner: self.inner.iter(),
            next_row: self.offset,
            row: if poisons { self.row } else { usize::MAX },
            message: self.message,
            fail: self.fail,
            failed: false,
        })
    }

    fn num_items(&self) -> usize {
        self.inner.num_items()
    }

    fn expected_num_items(&self) -> Option<usize> {
        self.inner.expected_num_items()
    }

    fn to_device(&self, device: &Device) -> Arc<dyn DataLoader<XyBatch>> {
        Arc::new(self.over(self.inner.to_device(device), self.offset))
    }

    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<XyBatch>> {
        Arc::new(self.over(self.inner.slice(start, end), self.offset + start))
    }
}

impl std::fmt::Debug for PoisonedLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoisonedLoader")
            .field("offset", &self.offset)
            .field("row", &self.row)
            .field("message", &self.message)
            .finish()
    }
}

/// A linear classifier of 2 inputs into 2 classes, for metrics burn computes on classifiers
/// (accuracy, in percent).
#[derive(Module, Debug)]
pub struct Classifier {
    linear: Linear,
}

impl Classifier {
    /// A freshly initialised classifier on `device`.
    pub fn new(device: &Device) -> Self {
        Self {
            linear: LinearConfig::new(2, 2).init(device),
        }
    }

    fn classification(&self, batch: ClassBatch) -> ClassificationOutput {
        let output = self.linear.forward(batch.x);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.y.clone());
        ClassificationOutput::new(loss, output, batch.y)
    }
}

impl TrainStep for Classifier {
    type Input = ClassBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: ClassBatch) -> TrainOutput<ClassificationOutput> {
        let output = self.classification(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for Classifier {
    type Input = ClassBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: ClassBatch) -> ClassificationOutput {
        self.classification(batch)
    }
}

/// Inputs and class labels of a classification batch.
#[derive(Debug, Clone)]
pub struct ClassBatch {
    /// Inputs, `[batch, 2]`.
    pub x: Tensor<2>,
    /// Labels, `[batch]`: 1 when `x0 > x1`.
    pub y: Tensor<1, Int>,
}

#[derive(Clone)]
struct ClassBatcher;

impl Batcher<[f32; 2], ClassBatch> for ClassBatcher {
    fn batch(&self, items: Vec<[f32; 2]>, device: &Device) -> ClassBatch {
        let n = items.len();
        let labels: Vec<i64> = items.iter().map(|p| i64::from(p[0] > p[1])).collect();
        let x: Vec<f32> = items.into_iter().flatten().collect();
        ClassBatch {
            x: Tensor::from_data(TensorData::new(x, [n, 2]), device),
            y: Tensor::from_data(TensorData::new(labels, [n]), device),
        }
    }
}

/// A burn data loader over `rows` points of [`XyBatch::synthetic`]'s inputs, labelled 1 when
/// `x0 > x1`, in batches of `batch_size`.
pub fn classification_loader(
    seed: u64,
    rows: usize,
    batch_size: usize,
    device: &Device,
) -> Arc<dyn DataLoader<ClassBatch>> {
    let x = XyBatch::synthetic(seed, rows, &Device::flex())
        .x
        .into_data()
        .iter::<f32>()
        .collect::<Vec<_>>();
    let items: Vec<[f32; 2]> = x.chunks(2).map(|p| [p[0], p[1]]).collect();
    DataLoaderBuilder::new(ClassBatcher)
        .batch_size(batch_size)
        .set_device(device.clone())
        .build(InMemDataset::new(items))
}

/// Whether a scalar tag's values come from the clock (step and device times, speeds, the
/// system's load): what two runs of the same steps need not agree on, so that comparisons of
/// runs leave them out, or keep their steps alone.
pub fn is_clock_tag(tag: &str) -> bool {
    tag.ends_with("_seconds") || tag.ends_with("per_second") || tag.starts_with("system/")
}

/// The event files directly in `dir` (any name holding `tfevents`), in name order: the order
/// a run wrote them in.
pub fn event_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().contains("tfevents"))
        .collect();
    files.sort();
    files
}

/// Every file under `dir` (relative to it) and its bytes, the writers' lock files aside when
/// `with_locks` is false (a record opened on a directory writes its pid into its lock file):
/// what "the run was left as it was" compares.
pub fn files_under(
    dir: &std::path::Path,
    with_locks: bool,
) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if with_locks || !path.parent().unwrap().ends_with(".ember-locks") {
                let bytes = std::fs::read(&path).unwrap();
                files.insert(path.strip_prefix(dir).unwrap().to_path_buf(), bytes);
            }
        }
    }
    files
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_nan_is_an_infinite_difference() {
        assert_eq!(super::max_difference(&[1.0, 2.0], &[1.0, 2.5]), 0.5);
        assert_eq!(
            super::max_difference(&[f32::NAN, 2.0], &[1.0, 2.0]),
            f32::INFINITY
        );
        assert_eq!(super::max_difference(&[1.0], &[f32::NAN]), f32::INFINITY);
    }
}
