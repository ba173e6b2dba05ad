//! `SummaryRecord`: MindSpore's summary API with tensorboardX's one-call convenience.
//!
//! `record.rs` holds the record, `builder.rs` how one is made, `plugin.rs` the plugins, modes
//! and rank layouts, `tap.rs` the tap model code records through, `losses.rs` what a log lost,
//! `session.rs` the session starts a resumed run is told apart by, `remote.rs` the mirror of
//! a log directory in an object store, `cut.rs` its cut at a checkpoint and the claim on the
//! run it holds, and `claim.rs` whether the record may still write under its run.

mod builder;
mod claim;
#[cfg(feature = "object-store")]
mod cut;
mod losses;
mod plugin;
mod record;
#[cfg(feature = "object-store")]
mod remote;
mod session;
mod tap;

pub use builder::SummaryRecordBuilder;
#[cfg(feature = "object-store")]
pub(crate) use cut::PendingCut;
pub use plugin::{Mode, Plugin, RankLayout};
pub use record::SummaryRecord;
pub use tap::SummaryTap;
