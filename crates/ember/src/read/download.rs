//! An object-store run made local: its objects downloaded, segments and all, so that every
//! reader of local directories reads it.

use std::path::Path;

use super::error::ReadError;

/// [`download`] into a new private temporary directory (mode 0700, a random name) that is
/// removed when the result is dropped.
#[cfg(feature = "object-store")]
pub fn download_private(url: &str) -> Result<ember_write::remote::Downloaded, ReadError> {
    ember_write::remote::download_private(url).map_err(|e| ReadError::Remote {
        url: url.to_owned(),
        message: e.to_string(),
    })
}

/// Downloads the objects of the object-store log directory `url` (`s3://…`, `gs://…`, …) into
/// the local directory `into`, segments and all, so that [`Summaries::read_dir`](super::Summaries::read_dir) and any
/// reader of local directories read it; returns how many objects there were. Needs the
/// `object-store` feature.
pub fn download(url: &str, into: &Path) -> Result<usize, ReadError> {
    #[cfg(feature = "object-store")]
    return ember_write::remote::download(url, into).map_err(|e| ReadError::Remote {
        url: url.to_owned(),
        message: e.to_string(),
    });
    #[cfg(not(feature = "object-store"))]
    {
        let _ = into;
        Err(ReadError::Remote {
            url: url.to_owned(),
            message: "this ember was built without the `object-store` feature".into(),
        })
    }
}
