//! What `ember train` records beside the Trainer's own summaries: the sample grid and its
//! predictions, the PR curves of the held-out digits, and their hidden activations as a
//! projector embedding.

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use ember::pack::{Format, Image, ImageLayout, TensorValue};
use ember::{SummaryError, SummaryRecord};

use crate::digits::{CLASSES, Digit, DigitMlp, PIXELS};

/// Records the sample test digits as one 16x1x8x8 image grid (`samples/digits`) and their
/// predicted labels: a markdown table for TensorBoard (`samples/predictions`); MindInsight has
/// no text, so there the predictions go in as a tensor of 16 labels under the same tag, next to
/// the true labels (`samples/labels`).
pub(super) fn record_samples(
    model: &DigitMlp,
    samples: &[Digit],
    device: &Device,
    format: Format,
    summary: &mut SummaryRecord,
    step: i64,
) -> Result<(), SummaryError> {
    if samples.is_empty() {
        return Ok(());
    }
    let inner = model.valid();
    let pixels: Vec<f32> = samples.iter().flat_map(|d| d.pixels).collect();
    let input = Tensor::<2>::from_data(
        TensorData::new(pixels.clone(), [samples.len(), PIXELS]),
        device,
    );
    let predicted = inner.predict(input);
    let images = TensorValue::from_slice(&pixels, [samples.len(), 1, 8, 8]);
    summary.add_images("samples/digits", images, ImageLayout::Nchw, step)?;
    match format {
        Format::MindInsight => {
            let labels: Vec<i64> = samples.iter().map(|d| i64::from(d.label)).collect();
            summary.add_tensor("samples/predictions", predicted, step)?;
            summary.add_tensor("samples/labels", labels, step)?;
        }
        _ => summary.add_text(
            "samples/predictions",
            &predictions_table(samples, &predicted),
            step,
        )?,
    }
    Ok(())
}

/// The digits' pixels as one `[digits, PIXELS]` input batch.
pub(super) fn digits_input(digits: &[Digit], device: &Device) -> Tensor<2> {
    let pixels: Vec<f32> = digits.iter().flat_map(|d| d.pixels).collect();
    Tensor::from_data(TensorData::new(pixels, [digits.len(), PIXELS]), device)
}

/// Thresholds of the per-class PR curves: every 0.02.
const PR_THRESHOLDS: u32 = 51;

/// One precision-recall curve per digit class over the held-out digits (`pr/digit_<c>`: the
/// softmax probability of class `c` against "the label is `c`"), TensorBoard only: MindInsight
/// has no such dashboard.
pub(super) fn record_pr_curves(
    model: &DigitMlp,
    held_out: &[Digit],
    device: &Device,
    format: Format,
    summary: &mut SummaryRecord,
    step: i64,
) -> Result<(), SummaryError> {
    if format != Format::TensorBoard || held_out.is_empty() {
        return Ok(());
    }
    let input = digits_input(held_out, device);
    let logits = model.valid().forward(input);
    let probabilities: Vec<f32> = burn::tensor::activation::softmax(logits, 1)
        .into_data()
        .iter::<f32>()
        .collect();
    if probabilities.iter().any(|p| p.is_nan()) {
        // A diverged model has no curve to draw; the loss shows the divergence.
        return Ok(());
    }
    for class in 0..CLASSES {
        let labels: Vec<bool> = held_out
            .iter()
            .map(|d| usize::from(d.label) == class)
            .collect();
        // Softmax rounding can leave a probability a hair outside [0, 1].
        let predictions: Vec<f32> = probabilities
            .iter()
            .skip(class)
            .step_by(CLASSES)
            .map(|p| p.clamp(0.0, 1.0))
            .collect();
        summary.add_pr_curve(
            &format!("pr/digit_{class}"),
            &labels,
            &predictions,
            PR_THRESHOLDS,
            step,
        )?;
    }
    Ok(())
}

/// The hidden-layer activations of the held-out digits as an embedding for TensorBoard's
/// projector (`embedding/hidden`), each point labelled with its digit and drawn with its 8×8
/// image. TensorBoard only: MindInsight has no projector.
pub(super) fn record_embedding(
    model: &DigitMlp,
    held_out: &[Digit],
    device: &Device,
    format: Format,
    summary: &mut SummaryRecord,
    step: i64,
) -> Result<(), SummaryError> {
    if format != Format::TensorBoard || held_out.is_empty() {
        return Ok(());
    }
    let input = digits_input(held_out, device);
    let activations = model.valid().hidden(input);
    let [n, d] = activations.dims();
    let values: Vec<f32> = activations.into_data().iter::<f32>().collect();
    let labels = held_out.iter().map(|d| d.label.to_string()).collect();
    let thumbnails = held_out
        .iter()
        .map(|d| {
            Image::new(
                TensorValue::from_slice(&d.pixels, [1, 8, 8]),
                ImageLayout::Chw,
            )
        })
        .collect();
    summary.add_embedding(
        "embedding/hidden",
        TensorValue::from_slice(&values, [n, d]),
        Some(labels),
        Some(thumbnails),
        step,
    )
}

/// A markdown table of the samples in grid order (row-major, 4 a row in the image grid).
pub(super) fn predictions_table(samples: &[Digit], predicted: &[i64]) -> String {
    let mut table = String::from("| sample | label | predicted | |\n|---:|---:|---:|:---:|\n");
    for (i, (digit, guess)) in samples.iter().zip(predicted).enumerate() {
        let mark = if i64::from(digit.label) == *guess {
            "✓"
        } else {
            "✗"
        };
        table.push_str(&format!("| {i} | {} | {guess} | {mark} |\n", digit.label));
    }
    let right = samples
        .iter()
        .zip(predicted)
        .filter(|(d, g)| i64::from(d.label) == **g)
        .count();
    table.push_str(&format!("\n{right} of {} right.\n", samples.len()));
    table
}
