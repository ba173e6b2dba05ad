//! ember-write: TFRecord framing and a checking record reader (the writers and pool follow).
#![deny(missing_docs)]
pub mod framing;
pub mod reader;
