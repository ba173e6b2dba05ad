//! ember-pack's integration tests, one binary (as ripgrep's): each former test file a module.

mod errors;
mod golden;
mod hardening;
mod histogram;
mod image;
mod plugins;
mod projector;
mod round_trip;
mod sessions_and_graphs;
