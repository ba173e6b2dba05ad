//! Helpers shared by the integration tests: listing and decoding files.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use ember_pack::proto::tensorboard::{Event, event::What};
use ember_write::Scan;
use prost::Message;

/// Files directly in `dir` whose names contain `needle`, sorted by name.
pub fn files_with(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().unwrap().to_string_lossy().contains(needle))
        .collect();
    out.sort();
    out
}

/// The TensorBoard event files in `dir`, in name order.
pub fn tb_files(dir: &Path) -> Vec<PathBuf> {
    files_with(dir, "tfevents")
}

/// Every record of `path`, which must be free of problems (a truncated tail
/// included), decoded as TensorBoard events.
pub fn read_events(path: &Path) -> Vec<Event> {
    let scan = Scan::file(path).unwrap();
    assert!(
        scan.problems.is_empty(),
        "{}: {:?}",
        path.display(),
        scan.problems
    );
    scan.records
        .iter()
        .map(|r| Event::decode(r.data.as_slice()).unwrap())
        .collect()
}

/// True when `event` is a file header (`file_version`).
pub fn is_header(event: &Event) -> bool {
    matches!(event.what, Some(What::FileVersion(_)))
}

/// The summary values of `event`: (tag, has metadata, simple value).
pub fn values(event: &Event) -> Vec<(String, bool, Option<f32>)> {
    match &event.what {
        Some(What::Summary(s)) => s
            .value
            .iter()
            .map(|v| {
                let simple = match v.value {
                    Some(ember_pack::proto::tensorboard::summary::value::Value::SimpleValue(x)) => {
                        Some(x)
                    }
                    _ => None,
                };
                (v.tag.clone(), v.metadata.is_some(), simple)
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The steps of the summary events in `events`, in order.
pub fn steps(events: &[Event]) -> Vec<i64> {
    events
        .iter()
        .filter(|e| matches!(e.what, Some(What::Summary(_))))
        .map(|e| e.step)
        .collect()
}

/// A record holding scalar `value`s under `tags` at `step`.
pub fn scalars(step: i64, tags: &[&str], value: f64) -> ember_pack::Record {
    let mut r = ember_pack::Record::new(step, 1.7e9 + step as f64);
    for t in tags {
        r.add(ember_pack::Tag::new(*t).unwrap(), value);
    }
    r
}
