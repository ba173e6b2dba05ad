//! The free-disk guard: free space must stay at least `factor` times the size
//! of the record about to be written (MindSpore's rule, factor 32).
//!
//! One guard serves every writer of a pool, since their files share the log
//! directory's file system. The free figure is queried once per batch and
//! then decreased by every byte a writer buffers, so the check costs no system
//! call per record. Bytes still in a writer's buffer, which the file system
//! cannot see yet, count as spent in every figure, a fresh query's included.
//! A figure that looks too small is queried again before refusing.

use std::path::Path;

use crate::error::FileError;
use crate::free_space::FreeSpaceSource;

#[derive(Debug)]
pub(crate) struct DiskGuard {
    factor: u64,
    source: FreeSpaceSource,
    estimate: Option<u64>,
    fresh: bool,
    /// Bytes in writers' buffers, not yet handed to the operating system.
    buffered: u64,
}

impl DiskGuard {
    pub(crate) fn new(factor: u64, source: FreeSpaceSource) -> Self {
        Self {
            factor,
            source,
            estimate: None,
            fresh: false,
            buffered: 0,
        }
    }

    /// Forgets the cached free figure; the next check queries it.
    pub(crate) fn refresh(&mut self) {
        self.estimate = None;
        self.fresh = false;
    }

    fn query(&mut self, dir: &Path) {
        self.estimate = match self.source.0.free_bytes(dir) {
            // Buffered bytes are not on the file system yet, but will be.
            Ok(free) => Some(free.saturating_sub(self.buffered)),
            Err(e) => {
                log::debug!(
                    "free space of {} unknown ({e}); disk guard skipped",
                    dir.display()
                );
                None
            }
        };
        self.fresh = true;
    }

    /// Refuses `size` more bytes for `path` (in `dir`) when free space is short.
    pub(crate) fn check(&mut self, dir: &Path, path: &Path, size: u64) -> Result<(), FileError> {
        if self.factor == 0 {
            return Ok(());
        }
        let needed = size.saturating_mul(self.factor);
        if self.estimate.is_none() && !self.fresh {
            self.query(dir);
        }
        let Some(mut free) = self.estimate else {
            return Ok(());
        };
        if free < needed && !self.fresh {
            // Space may have been freed since the batch started.
            self.query(dir);
            free = self.estimate.unwrap_or(u64::MAX);
        }
        if free < needed {
            return Err(FileError::DiskSpace {
                path: path.to_path_buf(),
                free,
                record: size,
                factor: self.factor,
            });
        }
        Ok(())
    }

    /// Accounts for `size` bytes just put in a writer's buffer.
    pub(crate) fn buffered(&mut self, size: u64) {
        self.buffered = self.buffered.saturating_add(size);
        if let Some(free) = self.estimate.as_mut() {
            *free = free.saturating_sub(size);
        }
    }

    /// Accounts for `size` bytes written straight to a file.
    pub(crate) fn written(&mut self, size: u64) {
        if let Some(free) = self.estimate.as_mut() {
            *free = free.saturating_sub(size);
        }
    }

    /// Accounts for `size` buffered bytes handed to the operating system, or
    /// discarded: the file system's own figure counts them from now on.
    pub(crate) fn drained(&mut self, size: u64) {
        self.buffered = self.buffered.saturating_sub(size);
    }
}
