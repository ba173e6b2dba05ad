//! Summaries of a whole Burn module: a histogram of every parameter, and its structure as a
//! graph, each in one call.

use burn::module::{Module, ModuleDisplay};
use ember_write::pack::Value;

use crate::model_info::{module_graph, named_parameters};
use crate::{SummaryError, SummaryRecord};

impl SummaryRecord {
    /// Records a histogram of every parameter of `module` at `step`, one record, each under
    /// `<prefix>/<parameter path>` (`weights/l1.weight`, say), as the [`Trainer`](crate::Trainer)
    /// does every `histogram_every` steps. Parameters are read back from their device.
    pub fn add_module_histograms<M: Module>(
        &mut self,
        prefix: &str,
        module: &M,
        step: i64,
    ) -> Result<(), SummaryError> {
        for (name, _, values) in named_parameters(module) {
            self.add(&format!("{prefix}/{name}"), Value::histogram(values))?;
        }
        self.record(step)
    }

    /// Records `module`'s structure at `step`: a node per submodule and parameter, named by
    /// its path under `model`, with its type as the op.
    pub fn add_module_graph<M: Module + ModuleDisplay>(
        &mut self,
        module: &M,
        step: i64,
    ) -> Result<(), SummaryError> {
        self.add_graph(module_graph(module, "model"), step)
    }
}
