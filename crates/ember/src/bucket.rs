//! ember's one door to object stores (the `object-store` feature): a record's mirror
//! (`mirror.rs`), a run's place in a bucket (`place.rs`), a bucket log's snapshot and cut at a
//! checkpoint (`log.rs`), and reading a run from a bucket. Without the feature, `no_bucket.rs`
//! stands in under the same names, none of which a value can be made of: a URL is refused where
//! a record or a place is made, so nothing else in the crate says which build it is.

#[cfg(feature = "burn")]
mod log;
mod mirror;
mod of_record;
#[cfg(feature = "burn")]
mod place;
#[cfg(all(test, feature = "burn"))]
mod tests;

use std::path::Path;

pub use ember_write::remote::RemoteError;
#[cfg(feature = "burn")]
pub(crate) use log::{
    LogSnapshot, PendingLog, Where, cut, decode_snapshot, empty_snapshot, restore, take,
};
pub(crate) use mirror::Mirror;
#[cfg(feature = "burn")]
pub(crate) use mirror::lease_lost;
#[cfg(feature = "burn")]
pub(crate) use place::open as open_place;

use crate::read::ReadError;

/// What only a build with object stores offers, re-exported at the crate's root.
pub(crate) mod exported {
    pub use ember_write::orphans::{Orphan, ship_orphans};
    pub use ember_write::remote::{Bucket, Claim, MirrorStats};
}

/// Downloads the objects of the bucket log `url` into `into`; how many there were.
pub(crate) fn download(url: &str, into: &Path) -> Result<usize, ReadError> {
    ember_write::remote::download(url, into).map_err(|e| read_error(url, &e))
}

/// Reads the bucket log `url` with `read`, downloaded into a private temporary directory
/// (mode 0700, a random name) that is removed afterwards.
pub(crate) fn read_downloaded<T>(
    url: &str,
    read: impl FnOnce(&Path) -> Result<T, ReadError>,
) -> Result<T, ReadError> {
    let local = ember_write::remote::download_private(url).map_err(|e| read_error(url, &e))?;
    read(local.path())
}

fn read_error(url: &str, error: &RemoteError) -> ReadError {
    ReadError::Remote {
        url: url.to_owned(),
        message: error.to_string(),
    }
}
