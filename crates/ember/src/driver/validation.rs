//! Validation on the main device, batch by batch: a batch the loader fails to give and a
//! panicking inference step are [`ValidationError`]s naming the device and the batch, never
//! skipped and never retried.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::data::dataloader::{DataLoader, Progress};
use burn::module::Module;
use burn::train::InferenceStep;

/// Why validation stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// The validation loader failed to give a batch.
    #[error("validation batch {batch} on device {device} could not be loaded: {message}")]
    Source {
        /// The device validation runs on (0, the main device).
        device: usize,
        /// The batch, from 1.
        batch: usize,
        /// The loader's error.
        message: String,
    },
    /// The inference step panicked.
    #[error("validation batch {batch} on device {device} panicked: {message}")]
    Panicked {
        /// The device validation runs on (0, the main device).
        device: usize,
        /// The batch, from 1.
        batch: usize,
        /// The panic's message.
        message: String,
    },
}

/// Runs `model`'s inference step on every batch of `loader`, on the main device, handing each
/// output (with the batch number, from 1, and the loader's progress) to `on_item`. A batch the
/// loader cannot give, or a panicking step, ends validation with a [`ValidationError`]; an
/// error from `on_item` ends it with that error.
pub(crate) fn validate<M, E>(
    model: &M,
    loader: &dyn DataLoader<<M as InferenceStep>::Input>,
    mut on_item: impl FnMut(usize, <M as InferenceStep>::Output, Progress) -> Result<(), E>,
) -> Result<(), E>
where
    M: InferenceStep + Module,
    E: From<ValidationError>,
{
    let inner = model.valid();
    let mut batches = loader.iter();
    let mut batch = 0usize;
    loop {
        batch += 1;
        let input = match batches.next() {
            None => return Ok(()),
            Some(Ok(input)) => input,
            Some(Err(error)) => {
                return Err(ValidationError::Source {
                    device: 0,
                    batch,
                    message: error.to_string(),
                }
                .into());
            }
        };
        let output = catch_unwind(AssertUnwindSafe(|| InferenceStep::step(&inner, input)))
            .map_err(|payload| ValidationError::Panicked {
                device: 0,
                batch,
                message: panic_message(payload.as_ref()),
            })?;
        on_item(batch, output, batches.progress())?;
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
