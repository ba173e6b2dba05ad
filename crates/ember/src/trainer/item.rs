//! What the Trainer reads from a step's output: [`TrainingItem`], the loss, accuracy counts and
//! example count of a batch, for Burn's regression and classification outputs.

use burn::tensor::Tensor;
use burn::train::{ClassificationOutput, RegressionOutput};

/// A step output that carries a loss, and possibly what accuracy needs.
pub trait TrainingItem {
    /// The batch's loss, shape `[1]`.
    fn loss(&self) -> &Tensor<1>;
    /// `(correct, total)` predictions, for classifiers.
    fn correct(&self) -> Option<(usize, usize)> {
        None
    }
    /// Examples in the batch.
    fn examples(&self) -> usize;
    /// Whether [`correct`](Self::correct) gives `Some`: the trainer then declares the accuracy
    /// metrics in the hyper-parameter session it starts, before any value exists.
    const CLASSIFIES: bool = false;
}

impl TrainingItem for RegressionOutput {
    fn loss(&self) -> &Tensor<1> {
        &self.loss
    }
    fn examples(&self) -> usize {
        self.output.dims()[0]
    }
}

impl TrainingItem for ClassificationOutput {
    const CLASSIFIES: bool = true;
    fn loss(&self) -> &Tensor<1> {
        &self.loss
    }
    fn correct(&self) -> Option<(usize, usize)> {
        let predicted = self.output.clone().argmax(1).flatten::<1>(0, 1);
        let hits = predicted.equal(self.targets.clone()).int().sum();
        let correct = hits.into_data().iter::<i64>().next().unwrap_or(0);
        Some((correct.max(0) as usize, self.targets.dims()[0]))
    }
    fn examples(&self) -> usize {
        self.targets.dims()[0]
    }
}
