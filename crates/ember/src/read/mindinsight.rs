//! One MindInsight event into [`Summaries`]: each value's kind is its field of the `Value`
//! oneof.

use ember_write::pack::TensorValue;
use ember_write::pack::proto::mindspore as msp;

use super::points::{HistogramPoint, ImagePoint, ScalarPoint, TensorPoint};
use super::summaries::{Summaries, push};

impl Summaries {
    /// Adds the values of `event`.
    pub(super) fn add_mindinsight(&mut self, event: msp::Event) {
        use msp::summary::value::Value as V;
        let Some(msp::event::What::Summary(summary)) = event.what else {
            return;
        };
        let (step, wall_time) = (event.step.unwrap_or(0), event.wall_time);
        for value in summary.value {
            let tag = value.tag;
            match value.value {
                Some(V::ScalarValue(x)) => push(
                    &mut self.scalars,
                    tag,
                    ScalarPoint {
                        step,
                        wall_time,
                        value: f64::from(x),
                    },
                ),
                Some(V::Histogram(h)) => push(
                    &mut self.histograms,
                    tag,
                    HistogramPoint {
                        step,
                        wall_time,
                        min: h.min.unwrap_or(f64::NAN),
                        max: h.max.unwrap_or(f64::NAN),
                        count: h.buckets.iter().map(|b| b.count as f64).sum(),
                        sum: h.sum.unwrap_or(0.0),
                        buckets: h
                            .buckets
                            .iter()
                            .map(|b| (b.left, b.left + b.width, b.count as f64))
                            .collect(),
                    },
                ),
                Some(V::Image(image)) => push(
                    &mut self.images,
                    tag,
                    ImagePoint::new(
                        (step, wall_time),
                        (image.width, image.height, image.colorspace),
                        image.encoded_image,
                    ),
                ),
                Some(V::Tensor(tensor)) => {
                    let shape: Option<Vec<usize>> = tensor
                        .dims
                        .iter()
                        .map(|&d| usize::try_from(d).ok())
                        .collect();
                    if let Some(shape) = shape
                        && shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
                            == Some(tensor.float_data.len())
                    {
                        push(
                            &mut self.tensors,
                            tag,
                            TensorPoint {
                                step,
                                wall_time,
                                value: TensorValue::from_slice(&tensor.float_data, shape),
                            },
                        );
                    }
                }
                _ => {}
            }
        }
    }
}
