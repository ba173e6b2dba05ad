//! An object-store run made local: its objects downloaded, segments and all, so that every
//! reader of local directories reads it.

use std::path::Path;

use super::error::ReadError;

/// Downloads the objects of the object-store log directory `url` (`s3://…`, `gs://…`, …) into
/// the local directory `into`, segments and all, so that [`Summaries::read_dir`](super::Summaries::read_dir) and any
/// reader of local directories read it; returns how many objects there were. Needs the
/// `object-store` feature.
pub fn download(url: &str, into: &Path) -> Result<usize, ReadError> {
    crate::bucket::download(url, into)
}
