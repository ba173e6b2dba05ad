//! The free-disk seam of the disk guard.
//!
//! Before each record a writer checks that the file system holding the log
//! directory has at least `factor` times the record's framed size free
//! (MindSpore's rule, factor 32). The figure comes from a [`FreeSpace`], so
//! tests inject any number instead of filling a disk.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Reports the bytes available to unprivileged writers on the file system
/// holding `dir`.
pub trait FreeSpace: Send + Sync {
    /// Free bytes for `dir`; an error means "unknown" and skips the guard.
    fn free_bytes(&self, dir: &Path) -> io::Result<u64>;
}

/// The operating system's figure (`statvfs`: available blocks × fragment size).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemFreeSpace;

impl FreeSpace for SystemFreeSpace {
    fn free_bytes(&self, dir: &Path) -> io::Result<u64> {
        #[cfg(unix)]
        {
            let st = rustix::fs::statvfs(dir).map_err(io::Error::from)?;
            Ok(st.f_bavail.saturating_mul(st.f_frsize))
        }
        #[cfg(not(unix))]
        {
            let _ = dir;
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "free space query not supported on this platform",
            ))
        }
    }
}

impl<F> FreeSpace for F
where
    F: Fn(&Path) -> io::Result<u64> + Send + Sync,
{
    fn free_bytes(&self, dir: &Path) -> io::Result<u64> {
        self(dir)
    }
}

/// A shared [`FreeSpace`] with a `Debug` that does not need the closure's.
#[derive(Clone)]
pub struct FreeSpaceSource(pub Arc<dyn FreeSpace>);

impl FreeSpaceSource {
    /// Wraps any [`FreeSpace`].
    pub fn new(source: impl FreeSpace + 'static) -> Self {
        Self(Arc::new(source))
    }
}

impl Default for FreeSpaceSource {
    fn default() -> Self {
        Self::new(SystemFreeSpace)
    }
}

impl fmt::Debug for FreeSpaceSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FreeSpaceSource(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_reports_something_for_tmp() {
        let dir = std::env::temp_dir();
        let free = SystemFreeSpace.free_bytes(&dir);
        if cfg!(unix) {
            assert!(free.is_ok());
        }
    }
}
