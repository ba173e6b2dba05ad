//! ember-write's integration tests, one binary (as ripgrep's): each former test file a
//! module, and `common` the helpers they share.

mod accounting;
mod common;
mod crash;
mod disk_full;
mod export_planted;
mod guarantees;
mod journal_rollback;
mod pool;
mod projector;
mod reader_props;
