//! A run goes on on fewer devices than it started on: its data stays split into as many
//! shards as it started with, and each device runs an equal share of a step's batches one
//! after the other, their gradients summed in shard order, so each step trains on the batches
//! and sums the gradients it did on all its devices. The run of `resume.rs` (2 workers,
//! accumulation over 2 steps, a shuffling loader, Adam, a schedule, checkpoints mid-epoch)
//! crashes on 2 devices, goes on on 1, crashes again, and ends on 2.

use std::panic::{AssertUnwindSafe, catch_unwind};

use ember_tests::{files_under, parameters};

use super::resume::{Begin, fit_on, series};

#[test]
fn a_run_goes_on_on_fewer_devices_then_on_all_again_with_the_steps_it_started_with() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let (model, _) = fit_on(2, &whole, None, Begin::Fresh, (1, 4)).unwrap();
    let expected = parameters(&model);
    let expected_series = series(&whole);

    let run = dir.path().join("run");
    // 6 steps an epoch; checkpoints every 2 optimizer steps (4 pool steps) and at epoch ends:
    // the crash at 9 goes on from step 8, in the middle of epoch 2, on 1 device; the one at
    // 17 from step 16, in the middle of epoch 3, on 2.
    for (devices, crash_at, begin) in [
        (2, Some(9), Begin::Fresh),
        (1, Some(17), Begin::Resume),
        (2, None, Begin::Resume),
    ] {
        // A resumed run's model is made from another seed: only the checkpoint can give it
        // its parameters.
        let seed = if begin == Begin::Fresh { 1 } else { 2 };
        let ran = catch_unwind(AssertUnwindSafe(|| {
            fit_on(devices, &run, crash_at, begin, (seed, 4))
        }));
        match crash_at {
            Some(_) => assert!(ran.is_err(), "the run on {devices} device(s) did not crash"),
            None => {
                let (model, report) = ran.unwrap().unwrap();
                assert!(report.resumed_from.is_some());
                let got = parameters(&model);
                assert!(
                    got.iter()
                        .zip(&expected)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "the run that went on on 1 device ended with other parameters:\n{got:?}\n{expected:?}"
                );
            }
        }
    }
    assert_eq!(series(&run), expected_series);
}

#[test]
fn a_run_is_refused_more_devices_than_it_started_on_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let crashed = catch_unwind(AssertUnwindSafe(|| {
        fit_on(1, &run, Some(7), Begin::Fresh, (1, 4))
    }));
    assert!(crashed.is_err());
    let files = files_under(&run, false);
    let error = fit_on(2, &run, None, Begin::Resume, (1, 4))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("1 device(s), this run has 2") && error.contains("not on more"),
        "{error}"
    );
    assert_eq!(
        files_under(&run, false),
        files,
        "a refused resume changed the run's files"
    );
}
