//! The handle of a cut: what the checkpoint thread waits on (see [`super::cut`]).

use std::sync::mpsc::{self, Sender};

use super::cut::ShippedCut;
use super::messages::Request;

/// A cut of the log, to be shipped (on any thread) before the checkpoint that relies on it is
/// written; see the module docs. Dropped unshipped, it no longer bounds the mirror's segments.
#[derive(Debug)]
pub struct LogCut {
    id: u64,
    tx: Option<Sender<Request>>,
}

impl LogCut {
    pub(super) fn new(id: u64, tx: Sender<Request>) -> Self {
        Self { id, tx: Some(tx) }
    }

    /// Returns once the log up to the cut is in the store, with the objects that hold it (an
    /// error where an upload failed or the mirror has closed: the checkpoint then must not be
    /// written).
    pub fn shipped(mut self) -> Result<ShippedCut, String> {
        let tx = self.tx.take().ok_or("the cut was shipped already")?;
        let (ack, done) = mpsc::channel();
        tx.send(Request::ShipTo(self.id, ack))
            .map_err(|_| "the mirror has closed".to_owned())?;
        done.recv()
            .map_err(|_| "the mirror's thread stopped".to_owned())?
    }
}

impl Drop for LogCut {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Request::Forget(self.id));
        }
    }
}
