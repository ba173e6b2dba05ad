//! The writer pool on real files in temp dirs: order, flush, size policies,
//! tag metadata per file, disk guard, error policies, queue policies, drop.
//! This file holds the helpers; each other file of `tests/write/pool/` one group of behaviours.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::common::{files_with, is_header, read_events, scalars, steps, tb_files, values};
use ember_pack::{FileKind, Format, Record, Tag, TensorValue, Value};
use ember_write::{ErrorPolicy, FileError, FullQueuePolicy, SizePolicy, WriteError, WriterPool};

mod failures;
mod files;
mod order;
mod queue;
mod size;

fn pool(dir: &Path) -> ember_write::WriterPoolBuilder {
    WriterPool::builder(dir).flush_interval(None)
}

/// Checks TensorBoard's rule in every file: the first value of each tag
/// carries metadata, later ones do not.
fn assert_metadata_once_per_tag_per_file(files: &[std::path::PathBuf]) {
    for f in files {
        let mut seen = HashSet::new();
        for e in read_events(f) {
            for (tag, has_meta, _) in values(&e) {
                let first = seen.insert(tag.clone());
                assert_eq!(has_meta, first, "{} step {} tag {tag}", f.display(), e.step);
            }
        }
    }
}
