//! A TensorBoard left running across a kill and a resume: read as TensorBoard's Python loader
//! reads a run directory, file by file from where it stopped, forgetting what a session
//! restart tells it to, the resumed run shows each step once with the uninterrupted run's
//! values.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember_tests::{regression_loader, seeded_mlp};
use ember_write::RecordReader;
use ember_write::pack::proto::tensorboard::{Event, event::What, session_log::SessionStatus};
use prost::Message;

use super::*;
use crate::checkpoint::{self, Checkpoints};

/// TensorBoard's Python loader of one run directory (`plugin_event_accumulator` with its
/// default `purge_orphaned_data`), reloaded now and then as `--reload_interval` does: each
/// event file read on from the offset it had reached, each scalar kept by tag.
#[derive(Default)]
struct LiveLoader {
    offsets: HashMap<PathBuf, u64>,
    file_version: Option<String>,
    seen_session_start: bool,
    scalars: BTreeMap<String, Vec<(i64, f32)>>,
}

impl LiveLoader {
    fn reload(&mut self, dir: &Path) {
        for path in ember_tests::event_files(dir) {
            let bytes = std::fs::read(&path).unwrap();
            let offset = self.offsets.get(&path).copied().unwrap_or(0);
            // A file cut back below what was read gives nothing more, as a reader at its end.
            let Some(rest) = bytes.get(offset as usize..) else {
                continue;
            };
            let mut reader = RecordReader::from_slice(rest);
            for record in reader.by_ref() {
                let Ok(record) = record else { break };
                self.add(Event::decode(record.data.as_slice()).unwrap());
            }
            let read = offset + reader.offset();
            self.offsets.insert(path, read);
        }
    }

    /// `_ProcessEvent`'s order: the file version, the purge, then the event's values.
    fn add(&mut self, event: Event) {
        match event.what {
            Some(What::FileVersion(version)) => self.file_version = Some(version),
            Some(What::SessionLog(log)) if log.status == SessionStatus::Start as i32 => {
                assert_eq!(self.file_version.as_deref(), Some("brain.Event:2"));
                // The first START of a run begins its session; each after it restarts it.
                if std::mem::replace(&mut self.seen_session_start, true) {
                    for series in self.scalars.values_mut() {
                        series.retain(|(step, _)| *step < event.step);
                    }
                }
            }
            Some(What::Summary(summary)) => {
                for value in summary.value {
                    use ember_write::pack::proto::tensorboard::summary::value::Value as V;
                    if let Some(V::SimpleValue(v)) = value.value {
                        let series = self.scalars.entry(value.tag).or_default();
                        series.push((event.step, v));
                    }
                }
            }
            _ => {}
        }
    }

    /// Every series but the wall-time-derived ones.
    fn series(&self) -> BTreeMap<String, Vec<(i64, f32)>> {
        self.scalars
            .iter()
            .filter(|(tag, _)| !ember_tests::is_clock_tag(tag))
            .map(|(tag, series)| (tag.clone(), series.clone()))
            .collect()
    }
}

fn config(checkpoints: &Path) -> TrainerConfig {
    TrainerConfig {
        epochs: 3,
        histogram_every: None,
        checkpoints: Some(CheckpointConfig {
            dir: checkpoints.to_path_buf(),
            every: Some(1),
            keep: 1000,
        }),
        ..TrainerConfig::default()
    }
}

/// Trains the test's run, its log in `log`; from its newest checkpoint when `resume`.
fn train(log: &Path, checkpoints: &Path, resume: bool) {
    let device = Device::flex().autodiff();
    let mut trainer = Trainer::new(
        vec![device.clone()],
        SgdConfig::new().init(),
        0.05,
        config(checkpoints),
    );
    if resume {
        trainer = trainer.resume_from(checkpoints);
    }
    let mut summary = SummaryRecord::new(log).unwrap();
    trainer
        .fit(
            seeded_mlp(4, 11, &device),
            regression_loader(1, 32, 8, &device),
            Some(regression_loader(2, 16, 8, &device)),
            Some(&mut summary),
        )
        .unwrap();
    summary.close().unwrap();
}

/// Each checkpoint's sequence number, path, step and whether it is an epoch's end, oldest
/// first.
fn checkpoints_of(dir: &Path) -> Vec<(u64, PathBuf, usize, bool)> {
    let mut out = Vec::new();
    for (seq, path) in Checkpoints::new(dir, 1).list().unwrap() {
        let taken = checkpoint::read(&path).unwrap();
        let meta = checkpoint::meta::Fields::of(&taken);
        let steps = meta.usize("steps").unwrap();
        out.push((seq, path, steps, meta.text("epoch_done").unwrap() == "true"));
    }
    out.reverse();
    out
}

/// The run killed right after the checkpoint `last` picks (the later ones never taken), with a
/// TensorBoard that had read everything the run wrote up to the kill; then resumed.
fn killed_and_resumed(
    reference: &BTreeMap<String, Vec<(i64, f32)>>,
    last: impl Fn(&[(u64, PathBuf, usize, bool)]) -> usize,
    case: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let (log, checkpoints) = (dir.path().join("log"), dir.path().join("checkpoints"));
    train(&log, &checkpoints, false);
    let mut live = LiveLoader::default();
    live.reload(&log);
    let taken = checkpoints_of(&checkpoints);
    let kept = last(&taken);
    for (_, path, _, _) in &taken[kept + 1..] {
        std::fs::remove_file(path).unwrap();
    }
    let (_, _, steps, epoch_done) = taken[kept];
    train(&log, &checkpoints, true);
    live.reload(&log);
    let got = live.series();
    for (tag, series) in &got {
        let mut seen: Vec<i64> = series.iter().map(|(step, _)| *step).collect();
        seen.dedup();
        assert_eq!(
            seen.len(),
            series.len(),
            "{case} (from step {steps}, epoch done: {epoch_done}): {tag} shows a step twice: \
             {series:?}"
        );
    }
    assert_eq!(
        &got, reference,
        "{case}: resumed from the checkpoint at step {steps} (epoch done: {epoch_done})"
    );
    // ember's own reader counts no session start as a step of any series.
    let read = crate::read::scalars(&log).unwrap();
    for (tag, series) in reference {
        let points: Vec<(i64, f32)> = read[tag].iter().map(|p| (p.step, p.value as f32)).collect();
        assert_eq!(&points, series, "{case}: ember::read::scalars' {tag}");
    }
    assert!(!read.contains_key("session_log"));
}

#[test]
fn a_live_tensorboard_forgets_what_a_resumed_run_writes_again() {
    let dir = tempfile::tempdir().unwrap();
    let (log, checkpoints) = (dir.path().join("log"), dir.path().join("checkpoints"));
    train(&log, &checkpoints, false);
    let mut reference = LiveLoader::default();
    reference.reload(&log);
    let reference = reference.series();
    // 32 rows in batches of 8: 4 steps an epoch, 3 epochs, with validation at each end.
    assert_eq!(reference["train/loss"].len(), 12);
    assert_eq!(reference["valid/loss"].len(), 3);
    let epoch_end = |taken: &[(u64, PathBuf, usize, bool)], at: usize| {
        taken
            .iter()
            .position(|(_, _, steps, done)| *done && *steps == at)
            .unwrap()
    };
    // Killed while the first epoch's end checkpoint was written: the one before it is the
    // newest, the last taken before the epoch's records at step 4.
    killed_and_resumed(&reference, |t| epoch_end(t, 4) - 1, "before an epoch's end");
    killed_and_resumed(&reference, |t| epoch_end(t, 4), "at an epoch's end");
    let mid_epoch = |t: &[(u64, PathBuf, usize, bool)]| {
        t.iter()
            .position(|(_, _, steps, done)| !*done && *steps == 6)
            .unwrap()
    };
    killed_and_resumed(&reference, mid_epoch, "mid-epoch");
}

/// Two fresh runs into one record (a first phase, then a second): the second goes on in the
/// session the first started, so a TensorBoard keeps the first's values.
#[test]
fn a_second_fresh_run_into_the_same_record_goes_on_in_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex().autodiff();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    for _ in 0..2 {
        let config = TrainerConfig {
            epochs: 1,
            histogram_every: None,
            ..TrainerConfig::default()
        };
        Trainer::new(vec![device.clone()], SgdConfig::new().init(), 0.05, config)
            .fit(
                seeded_mlp(4, 11, &device),
                regression_loader(1, 16, 8, &device),
                None,
                Some(&mut summary),
            )
            .unwrap();
    }
    summary.close().unwrap();
    let mut live = LiveLoader::default();
    live.reload(dir.path());
    assert!(live.seen_session_start);
    // Each run's two steps, both kept.
    assert_eq!(live.series()["train/loss"].len(), 4);
}
