//! The handwritten-digits data set embedded in the binary, its deterministic train/test split,
//! and the small MLP classifier `ember train` fits to it.
//!
//! The data is UCI's "Optical Recognition of Handwritten Digits" (E. Alpaydin, C. Kaynak, 1998,
//! CC BY 4.0) as distributed with scikit-learn; see `data/README.md`.

use std::io::Read;

use anyhow::{Context, bail, ensure};
use burn::data::dataloader::batcher::Batcher;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

/// The gzipped CSV: 64 pixels 0..16 then the label, one digit a row, no header.
const DIGITS_CSV_GZ: &[u8] = include_bytes!("../data/digits.csv.gz");

/// Pixels of one 8x8 digit.
pub(crate) const PIXELS: usize = 64;
/// Digit classes.
pub(crate) const CLASSES: usize = 10;
/// The largest pixel value in the data.
const MAX_PIXEL: f32 = 16.0;

/// One digit: pixels scaled to `[0, 1]`, and its label.
#[derive(Debug, Clone)]
pub(crate) struct Digit {
    pub(crate) pixels: [f32; PIXELS],
    pub(crate) label: u8,
}

/// Parses the embedded data set.
pub(crate) fn load() -> anyhow::Result<Vec<Digit>> {
    let mut csv = String::new();
    flate2::read::GzDecoder::new(DIGITS_CSV_GZ)
        .read_to_string(&mut csv)
        .context("unpacking the embedded digits data")?;
    parse(&csv)
}

/// Parses rows of 64 pixel values 0..16 and a label 0..9.
pub(crate) fn parse(csv: &str) -> anyhow::Result<Vec<Digit>> {
    let mut digits = Vec::new();
    for (index, line) in csv
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let row = index + 1;
        let values = line
            .split(',')
            .map(|v| v.trim().parse::<u8>())
            .collect::<Result<Vec<u8>, _>>()
            .with_context(|| format!("digits row {row}: not a list of small integers"))?;
        ensure!(
            values.len() == PIXELS + 1,
            "digits row {row}: {} values, expected {}",
            values.len(),
            PIXELS + 1
        );
        let mut pixels = [0.0; PIXELS];
        for (pixel, &value) in pixels.iter_mut().zip(&values) {
            ensure!(
                f32::from(value) <= MAX_PIXEL,
                "digits row {row}: pixel {value} above {MAX_PIXEL}"
            );
            *pixel = f32::from(value) / MAX_PIXEL;
        }
        let label = values[PIXELS];
        ensure!(
            usize::from(label) < CLASSES,
            "digits row {row}: label {label}"
        );
        digits.push(Digit { pixels, label });
    }
    if digits.is_empty() {
        bail!("the digits data is empty");
    }
    Ok(digits)
}

/// Shuffles `digits` with a fixed seed (Fisher-Yates over SplitMix64), keeps the first `subset`
/// when given, and splits the result: the first `test_fraction` is the test set. The same
/// arguments always give the same split.
pub(crate) fn split(
    mut digits: Vec<Digit>,
    seed: u64,
    subset: Option<usize>,
    test_fraction: f64,
) -> (Vec<Digit>, Vec<Digit>) {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..digits.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        digits.swap(i, j);
    }
    if let Some(subset) = subset {
        digits.truncate(subset);
    }
    let test = ((digits.len() as f64 * test_fraction).round() as usize).min(digits.len());
    let train = digits.split_off(test);
    (train, digits)
}

/// A batch of digits: pixels `[batch, 64]` and labels `[batch]`.
#[derive(Debug, Clone)]
pub(crate) struct DigitBatch {
    pub(crate) pixels: Tensor<2>,
    pub(crate) labels: Tensor<1, Int>,
}

/// Batches digits onto a device.
#[derive(Debug, Clone, Default)]
pub(crate) struct DigitBatcher;

impl Batcher<Digit, DigitBatch> for DigitBatcher {
    fn batch(&self, items: Vec<Digit>, device: &Device) -> DigitBatch {
        let count = items.len();
        let pixels: Vec<f32> = items.iter().flat_map(|d| d.pixels).collect();
        let labels: Vec<i64> = items.iter().map(|d| i64::from(d.label)).collect();
        DigitBatch {
            pixels: Tensor::from_data(TensorData::new(pixels, [count, PIXELS]), device),
            labels: Tensor::from_data(TensorData::new(labels, [count]), device),
        }
    }
}

/// A two-layer perceptron: 64 pixels, `hidden` ReLU units, 10 class logits.
#[derive(Module, Debug)]
pub(crate) struct DigitMlp {
    l1: Linear,
    act: Relu,
    l2: Linear,
}

impl DigitMlp {
    /// A freshly initialised classifier on `device`.
    pub(crate) fn new(hidden: usize, device: &Device) -> Self {
        Self {
            l1: LinearConfig::new(PIXELS, hidden).init(device),
            act: Relu::new(),
            l2: LinearConfig::new(hidden, CLASSES).init(device),
        }
    }

    /// The hidden layer's activations, `[batch, hidden]`.
    pub(crate) fn hidden(&self, pixels: Tensor<2>) -> Tensor<2> {
        self.act.forward(self.l1.forward(pixels))
    }

    /// Class logits, `[batch, 10]`.
    pub(crate) fn forward(&self, pixels: Tensor<2>) -> Tensor<2> {
        self.l2.forward(self.act.forward(self.l1.forward(pixels)))
    }

    /// The predicted class of each row of `pixels`.
    pub(crate) fn predict(&self, pixels: Tensor<2>) -> Vec<i64> {
        self.forward(pixels)
            .argmax(1)
            .flatten::<1>(0, 1)
            .into_data()
            .iter::<i64>()
            .collect()
    }

    fn classify(&self, batch: DigitBatch) -> ClassificationOutput {
        let device = batch.pixels.device();
        let output = self.forward(batch.pixels);
        let loss = CrossEntropyLossConfig::new()
            .init(&device)
            .forward(output.clone(), batch.labels.clone());
        ClassificationOutput::new(loss, output, batch.labels)
    }
}

impl TrainStep for DigitMlp {
    type Input = DigitBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: DigitBatch) -> TrainOutput<ClassificationOutput> {
        let output = self.classify(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for DigitMlp {
    type Input = DigitBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: DigitBatch) -> ClassificationOutput {
        self.classify(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_data_is_the_full_digits_set() {
        let digits = load().unwrap();
        assert_eq!(digits.len(), 1797);
        let mut per_class = [0usize; CLASSES];
        for digit in &digits {
            per_class[usize::from(digit.label)] += 1;
            assert!(digit.pixels.iter().all(|p| (0.0..=1.0).contains(p)));
        }
        // scikit-learn's load_digits: 178 zeros, 182 ones, ..., 180 nines.
        assert_eq!(
            per_class,
            [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
        );
    }

    #[test]
    fn bad_rows_are_refused_with_their_row_number() {
        let short = "1,2,3\n";
        assert!(parse(short).unwrap_err().to_string().contains("row 1"));
        let mut row = vec!["0"; PIXELS];
        row.push("12");
        let bad_label = format!("{}\n", row.join(","));
        assert!(
            parse(&bad_label)
                .unwrap_err()
                .to_string()
                .contains("label 12")
        );
    }

    #[test]
    fn the_split_is_deterministic_disjoint_and_complete() {
        let digits = load().unwrap();
        let key = |d: &Digit| (d.label, d.pixels.map(|p| (p * 16.0) as u8));
        let (train, test) = split(digits.clone(), 7, None, 0.2);
        assert_eq!((train.len(), test.len()), (1438, 359));
        let (train2, test2) = split(digits.clone(), 7, None, 0.2);
        assert_eq!(
            train.iter().map(key).collect::<Vec<_>>(),
            train2.iter().map(key).collect::<Vec<_>>()
        );
        assert_eq!(
            test.iter().map(key).collect::<Vec<_>>(),
            test2.iter().map(key).collect::<Vec<_>>()
        );
        // Every digit lands in exactly one part.
        let mut all: Vec<_> = train.iter().chain(&test).map(key).collect();
        let mut original: Vec<_> = digits.iter().map(key).collect();
        all.sort();
        original.sort();
        assert_eq!(all, original);
        // A different seed gives a different order; a subset keeps its size.
        let (other, _) = split(digits.clone(), 8, None, 0.2);
        assert_ne!(
            train.iter().map(key).collect::<Vec<_>>(),
            other.iter().map(key).collect::<Vec<_>>()
        );
        let (train, test) = split(digits, 7, Some(300), 0.2);
        assert_eq!((train.len(), test.len()), (240, 60));
    }
}
