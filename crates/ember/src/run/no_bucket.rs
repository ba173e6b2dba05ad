//! A build without the `object-store` feature: a URL names no place it can open.

use std::sync::Arc;

use super::store::{Store, Unserved};

/// A store that fails at each use, saying this build serves no URL.
pub(crate) fn open(url: &str) -> Arc<dyn Store> {
    Arc::new(Unserved(format!(
        "{url}: this ember was built without the `object-store` feature"
    )))
}
