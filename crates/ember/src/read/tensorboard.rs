//! One TensorBoard event into [`Summaries`]: each value sorted into its kind by its type and,
//! for tensors, by the plugin its tag's metadata names.

use std::collections::HashMap;

use ember_write::pack::proto::tensorboard as tbp;

use super::plugins::{
    ValueProblem, decode_audio, decode_custom_scalars, decode_pr_curve, decode_wav,
    pr_curve_thresholds, tensor_value,
};
use super::points::{
    AudioPoint, CustomScalarsPoint, HistogramPoint, ImagePoint, PrCurvePoint, ScalarPoint,
    TensorPoint, TextPoint,
};
use super::summaries::{Summaries, push};

impl Summaries {
    /// Adds the values of `event`; `plugins` carries each tag's plugin from the first value of
    /// the file that named it. A plugin value that does not decode is returned with its tag.
    pub(super) fn add_tensorboard(
        &mut self,
        event: tbp::Event,
        plugins: &mut HashMap<String, String>,
    ) -> Result<(), (String, ValueProblem)> {
        use tbp::summary::value::Value as V;
        let Some(tbp::event::What::Summary(summary)) = event.what else {
            return Ok(());
        };
        let (step, wall_time) = (event.step, event.wall_time);
        for value in summary.value {
            let plugin = match value.metadata.and_then(|m| m.plugin_data) {
                Some(data) => {
                    plugins.insert(value.tag.clone(), data.plugin_name.clone());
                    data.plugin_name
                }
                None => plugins.get(&value.tag).cloned().unwrap_or_default(),
            };
            let tag = value.tag;
            match value.value {
                Some(V::SimpleValue(x)) => push(
                    &mut self.scalars,
                    tag,
                    ScalarPoint {
                        step,
                        wall_time,
                        value: f64::from(x),
                    },
                ),
                Some(V::Histo(h)) => push(
                    &mut self.histograms,
                    tag,
                    histogram_point((step, wall_time), &h),
                ),
                Some(V::Image(image)) => push(
                    &mut self.images,
                    tag,
                    ImagePoint::new(
                        (step, wall_time),
                        (image.width, image.height, image.colorspace),
                        image.encoded_image_string,
                    ),
                ),
                // TensorFlow 1's audio summaries: one clip in the value itself.
                Some(V::Audio(audio)) => {
                    let clip = decode_wav(audio.encoded_audio_string, String::new())
                        .map_err(|problem| (tag.clone(), problem))?;
                    push(
                        &mut self.audio,
                        tag,
                        AudioPoint {
                            step,
                            wall_time,
                            clip,
                        },
                    );
                }
                Some(V::Tensor(tensor)) => {
                    self.add_plugin_tensor(&plugin, tag, (step, wall_time), &tensor)?
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn add_plugin_tensor(
        &mut self,
        plugin: &str,
        tag: String,
        (step, wall_time): (i64, f64),
        tensor: &tbp::TensorProto,
    ) -> Result<(), (String, ValueProblem)> {
        match plugin {
            "text" => {
                if let Some(text) = tensor.string_val.first() {
                    push(
                        &mut self.texts,
                        tag,
                        TextPoint {
                            step,
                            wall_time,
                            text: String::from_utf8_lossy(text).into_owned(),
                        },
                    );
                }
            }
            "tensor" | "" => {
                if let Some(value) = tensor_value(tensor) {
                    push(
                        &mut self.tensors,
                        tag,
                        TensorPoint {
                            step,
                            wall_time,
                            value,
                        },
                    );
                }
            }
            "pr_curves" => match decode_pr_curve(tensor) {
                Ok(curve) => push(
                    &mut self.pr_curves,
                    tag,
                    PrCurvePoint {
                        step,
                        wall_time,
                        thresholds: pr_curve_thresholds(curve.num_thresholds()),
                        curve,
                    },
                ),
                Err(problem) => return Err((tag, problem)),
            },
            "audio" => match decode_audio(tensor) {
                Ok(clips) => {
                    let points = clips.into_iter().map(|clip| AudioPoint {
                        step,
                        wall_time,
                        clip,
                    });
                    self.audio.entry(tag).or_default().extend(points);
                }
                Err(problem) => return Err((tag, problem)),
            },
            "custom_scalars" => match decode_custom_scalars(tensor) {
                Ok(layout) => self.custom_scalars.push(CustomScalarsPoint {
                    step,
                    wall_time,
                    layout,
                }),
                Err(problem) => return Err((tag, problem)),
            },
            _ => {}
        }
        Ok(())
    }
}

/// A histogram value's point: each bucket from the previous bucket's limit (the first from the
/// minimum) to its own.
fn histogram_point((step, wall_time): (i64, f64), h: &tbp::HistogramProto) -> HistogramPoint {
    let mut left = h.min;
    let buckets = h
        .bucket_limit
        .iter()
        .zip(&h.bucket)
        .map(|(&right, &count)| {
            let bucket = (left, right, count);
            left = right;
            bucket
        })
        .collect();
    HistogramPoint {
        step,
        wall_time,
        min: h.min,
        max: h.max,
        count: h.num,
        sum: h.sum,
        buckets,
    }
}
