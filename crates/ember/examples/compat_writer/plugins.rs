//! TensorBoard's plugin kinds: PR curves, audio, custom scalars and the projector.

use ember::SummaryRecord;
use ember::pack::{Category, CustomScalarLayout, ImageLayout, MarginSeries, PrCurve, TensorValue};

use super::*;

/// PR curves (from predictions at two steps, and from raw counts), a tone sweep and a custom
/// scalars layout, with their raw inputs in the manifest.
#[expect(
    clippy::too_many_lines,
    reason = "one job of every plugin's kind, written in the order a reader checks them"
)]
pub(super) fn write_plugins(
    summary: &mut SummaryRecord,
    manifest: &mut Manifest,
) -> Result<(), Box<dyn std::error::Error>> {
    // Predictions (m + 0.5) / 1000 lie at least 0.01 of a bucket away from every threshold
    // k / 20, so the checker's definition (p >= threshold, in f64) cannot disagree with f32
    // bucketing.
    let num_thresholds = 21;
    let mut pr_json = Vec::new();
    for step in [1i64, 2] {
        let predictions: Vec<f32> = (0..300u32)
            .map(|i| ((i * 37 + step as u32 * 101) % 1000) as f32 / 1000.0 + 0.0005)
            .collect();
        let labels: Vec<bool> = predictions
            .iter()
            .enumerate()
            .map(|(i, &p)| (p > 0.4) ^ (i % 7 == 0))
            .collect();
        summary.add_pr_curve("pr/digit", &labels, &predictions, num_thresholds, step)?;
        pr_json.push(format!(
            "{{\"tag\":\"pr/digit\",\"step\":{step},\"num_thresholds\":{num_thresholds},\"labels\":[{}],\"predictions\":{}}}",
            labels.iter().map(|&l| if l { "true" } else { "false" }).collect::<Vec<_>>().join(","),
            json_nums(predictions.iter().map(|&p| f64::from(p)))
        ));
    }
    let raw = [
        vec![75.0, 64.0, 21.0, 5.0, 0.0],
        vec![150.0, 105.0, 18.0, 0.0, 0.0],
        vec![0.0, 45.0, 132.0, 150.0, 150.0],
        vec![0.0, 11.0, 54.0, 70.0, 75.0],
        vec![0.3333333, 0.3786982, 0.5384616, 1.0, 0.0],
        vec![1.0, 0.8533334, 0.28, 0.0666667, 0.0],
    ];
    let [tp, fp, tn, fn_, precision, recall] = raw.clone();
    summary.add_pr_curve_raw(
        "pr/raw",
        PrCurve::from_counts(tp, fp, tn, fn_, precision, recall)?,
        5,
    )?;
    manifest.add("pr_curves", json_list(pr_json));
    manifest.add(
        "pr_raw",
        format!(
            "{{\"tag\":\"pr/raw\",\"step\":5,\"rows\":{}}}",
            json_list(raw.iter().map(|r| json_nums(r.iter().copied())).collect())
        ),
    );

    // A quarter second sweeping 200 Hz to 2 kHz at 8 kHz, louder than full scale at its end so
    // that clipping shows.
    let rate = 8000u32;
    let samples: Vec<f32> = (0..rate / 4)
        .map(|i| {
            let t = i as f32 / rate as f32;
            let phase = 2.0 * std::f32::consts::PI * (200.0 * t + 3600.0 * t * t);
            (0.5 + 3.0 * t) * phase.sin()
        })
        .collect();
    summary.add_audio("audio/sweep", &samples, rate, 3)?;
    manifest.add(
        "audio",
        format!(
            "{{\"tag\":\"audio/sweep\",\"step\":3,\"sample_rate\":{rate},\"samples\":{}}}",
            json_nums(samples.iter().map(|&x| f64::from(x)))
        ),
    );

    let layout = CustomScalarLayout::new()
        .category(
            Category::new("losses")
                .multiline("train and valid", ["scalars/exact", "scalars/round.*"])
                .margin(
                    "band",
                    vec![MarginSeries {
                        value: "scalars/exact".into(),
                        lower: "scalars/lower".into(),
                        upper: "scalars/upper".into(),
                    }],
                ),
        )
        .category(Category {
            closed: true,
            ..Category::new("closed")
        });
    // An embedding for the projector: 20 points of 5 dimensions (multiples of 1/8, exact in
    // f32 and in decimal), a label each, and 8×8 gray thumbnails of distinct shades, tiled
    // 5 to a side in the sprite.
    let (n, d) = (20usize, 5usize);
    let points: Vec<f32> = (0..n * d)
        .map(|i| ((i * 7) % 23) as f32 * 0.125 - 1.5)
        .collect();
    let point_labels: Vec<String> = (0..n).map(|i| format!("point {i}")).collect();
    let thumbnails: Vec<ember::pack::Image> = (0..n)
        .map(|i| {
            ember::pack::Image::new(
                TensorValue::from_slice(&[(i * 12) as u8; 64], vec![1, 8, 8]),
                ImageLayout::Chw,
            )
        })
        .collect();
    summary.add_embedding(
        "projector/points",
        TensorValue::from_slice(&points, vec![n, d]),
        Some(point_labels.clone()),
        Some(thumbnails),
        4,
    )?;
    manifest.add(
        "embedding",
        format!(
            "{{\"tag\":\"projector/points\",\"step\":4,\"tensor_name\":\"projector/points:00004\",\"shape\":[{n},{d}],\"values\":{},\"labels\":{},\"single_image_dim\":[8,8]}}",
            json_nums(points.iter().map(|&v| f64::from(v))),
            json_strs(&point_labels)
        ),
    );

    summary.add_custom_scalars(layout)?;
    // As the plugin's `layout_impl` returns it: default fields included.
    manifest.add(
        "custom_scalars",
        r#"{"version":0,"category":[{"title":"losses","closed":false,"chart":[{"title":"train and valid","multiline":{"tag":["scalars/exact","scalars/round.*"]}},{"title":"band","margin":{"series":[{"value":"scalars/exact","lower":"scalars/lower","upper":"scalars/upper"}]}}]},{"title":"closed","closed":true,"chart":[]}]}"#.to_string(),
    );
    Ok(())
}
