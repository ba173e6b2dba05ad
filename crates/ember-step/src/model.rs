//! The model side of the step protocol.

/// A model that can be placed on a device and run one train step on one batch.
///
/// The pool clones the caller's model once per device and step, sends the clone to that device's
/// worker, and the worker calls [`fork`](StepModel::fork) and then [`step`](StepModel::step) on its
/// own thread. Implementations should make `Clone` cheap (Burn modules share their parameters) and
/// do the real copying in `fork`, where it runs in parallel on the workers.
pub trait StepModel: Clone + Send + 'static {
    /// Where a step runs, e.g. `burn::tensor::Device`.
    type Device: Clone + Send + 'static;
    /// One batch.
    type Input: Send + 'static;
    /// What one step on one batch produces (for training: gradients and the item for metrics).
    type Output: Send + 'static;

    /// Places the model on `device`, ready to run a step there.
    fn fork(self, device: &Self::Device) -> Self;

    /// Runs one train step on one batch.
    fn step(&self, input: Self::Input) -> Self::Output;
}
