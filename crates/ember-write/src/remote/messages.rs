//! What the mirror's handle and its thread share: the requests the handle sends, the counters
//! of what was shipped, and how long a close keeps trying.

use std::sync::mpsc::Sender;
use std::time::Duration;

/// How long a close keeps trying to ship the last records to a store that does not answer.
pub const CLOSE_PATIENCE: Duration = Duration::from_secs(60);

/// Counters of what the mirror has shipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Segment objects uploaded (each holding whole records of an event file).
    pub segments: u64,
    /// Other files uploaded whole (exported tensors, the projector's files), new versions
    /// included.
    pub objects: u64,
    /// Bytes uploaded, in segments and whole files.
    pub bytes: u64,
    /// Uploads that failed (each tried again later).
    pub failed_uploads: u64,
    /// Bytes written and not in the store yet, as last measured.
    pub backlog_bytes: u64,
    /// Records not accepted because the backlog was over its budget (dropped under
    /// [`FullQueuePolicy::DropNewest`](crate::FullQueuePolicy::DropNewest), refused under
    /// [`FullQueuePolicy::Error`](crate::FullQueuePolicy::Error)).
    pub records_over_budget: u64,
}

pub(super) enum Request {
    /// Ship now, and say when done (with the error of an upload that failed, if any).
    Ship(Sender<Result<(), String>>),
    /// Ship what is left and stop.
    Close(Sender<Result<(), String>>),
    /// Ship at least up to the cut of this number, and say which objects hold the log up to it.
    ShipTo(u64, Sender<Result<super::cut::ShippedCut, String>>),
    /// The cut of this number is not needed any more.
    Forget(u64),
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Request::Ship(_) => "Ship",
            Request::Close(_) => "Close",
            Request::ShipTo(..) => "ShipTo",
            Request::Forget(_) => "Forget",
        })
    }
}
