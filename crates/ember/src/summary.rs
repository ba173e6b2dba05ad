//! `SummaryRecord`: MindSpore's summary API with tensorboardX's one-call convenience.
//!
//! `record.rs` holds the record, `builder.rs` how one is made, `plugin.rs` the plugins, modes
//! and rank layouts, `tap.rs` the tap model code records through, `losses.rs` what a log lost,
//! `session.rs` the session starts a resumed run is told apart by, and `claim.rs` whether the
//! record may still write under its run. A log directory in an object store is the `bucket`
//! module's: the record's mirror, and its methods of a log in a bucket.

mod builder;
mod claim;
mod losses;
mod plugin;
mod record;
mod session;
mod tap;

pub use builder::SummaryRecordBuilder;
pub use plugin::{Mode, Plugin, RankLayout};
pub use record::SummaryRecord;
pub use tap::SummaryTap;
