//! A run goes on on other devices than it started on: its data stays split into as many
//! shards as it started with. On fewer devices each runs an equal share of a step's batches
//! one after the other; on more, each of a shard's devices runs one of the consecutive steps
//! of an accumulation window at once. Either way the gradients are summed in the order the
//! job summed them, so each step trains on the batches and sums the gradients it did. The
//! run of `resume.rs` (accumulation over 2 steps, a shuffling loader, Adam, a schedule,
//! checkpoints mid-epoch) crashes on 2 devices, goes on on 1, crashes again, and ends on 2;
//! and the same from 1 device to 2 and back.

use std::panic::{AssertUnwindSafe, catch_unwind};

use ember_tests::{files_under, parameters};

use super::resume::{fit_on, series};
use ember::run::Begin;

#[test]
fn a_run_goes_on_on_fewer_devices_then_on_all_again_with_the_steps_it_started_with() {
    // 6 steps an epoch; checkpoints every 2 optimizer steps (4 pool steps) and at epoch ends:
    // the crash at 9 goes on from step 8, in the middle of epoch 2, on 1 device; the one at
    // 17 from step 16, in the middle of epoch 3, on 2.
    goes_on_as_if_never_stopped(2, [(2, Some(9)), (1, Some(17)), (2, None)]);
}

/// On more devices than it began with, each device takes one of a window's steps (the
/// accumulation is 2): step `2w+1` on device 0, `2w+2` on device 1, at once; their
/// gradients are added in step order, so nothing changes, to the bit.
#[test]
fn a_run_goes_on_on_more_devices_than_it_began_with_each_taking_a_windows_step() {
    // 12 steps an epoch on 1 device; checkpoints at steps 4, 8, 12 (the epoch's end), 16,
    // ...: the crash at 7 goes on from step 4 on 2 devices, the one at 18 (recorded from the
    // pool step that ran 17 and 18 at once) from step 16, on 1.
    goes_on_as_if_never_stopped(1, [(1, Some(7)), (2, Some(18)), (1, None)]);
}

/// Runs the job on `began` devices uninterrupted, then again in `legs` (each on its devices,
/// crashing at a step or running to the end), and checks that the legs end with the
/// uninterrupted run's parameters, bit for bit, and every reader sees its series.
fn goes_on_as_if_never_stopped(began: usize, legs: [(usize, Option<usize>); 3]) {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let (model, _) = fit_on(began, &whole, None, Begin::Fresh, (1, 4)).unwrap();
    let expected = parameters(&model);
    let expected_series = series(&whole);

    let run = dir.path().join("run");
    for (leg, (devices, crash_at)) in legs.into_iter().enumerate() {
        let begin = if leg == 0 {
            Begin::Fresh
        } else {
            Begin::Resume
        };
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
                    "the run that went on on other devices ended with other parameters:\n{got:?}\n{expected:?}"
                );
            }
        }
    }
    let got = series(&run);
    for (tag, points) in &expected_series {
        let theirs = got.get(tag).map(Vec::as_slice).unwrap_or_default();
        let steps = |points: &[(i64, String)]| points.iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(steps(theirs), steps(points), "the steps of {tag}");
        assert_eq!(theirs, points.as_slice(), "the values of {tag}");
    }
    assert_eq!(got.len(), expected_series.len(), "the series");
}

/// On 4 devices a run begun on 1 would take 4 steps at once, which a window of 2 cannot
/// hold; on 3 a run begun on 2 would split a step unevenly. Both are refused before anything
/// changes.
#[test]
fn a_run_is_refused_devices_that_cannot_keep_its_global_batch_and_left_as_it_was() {
    for (began, crash_at, resumed, says) in
        [(1, 7, 4, "cannot hold"), (2, 5, 3, "on a multiple of them")]
    {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let crashed = catch_unwind(AssertUnwindSafe(|| {
            fit_on(began, &run, Some(crash_at), Begin::Fresh, (1, 4))
        }));
        assert!(crashed.is_err());
        // What a resume is admitted with: the devices the run began with, which `ember
        // train` counts a resumed run's steps by.
        let layout = ember::run::Run::builder(Begin::Resume, run.join("checkpoints"))
            .open()
            .unwrap()
            .layout();
        let began_with = ember::run::DataLayout {
            devices: began,
            data_ranks: 1,
        };
        assert_eq!(layout, Some(began_with));
        let files = files_under(&run, false);
        let error = fit_on(resumed, &run, None, Begin::Resume, (1, 4))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("{began} device(s), this run has {resumed}"))
                && error.contains(says),
            "{error}"
        );
        assert_eq!(
            files_under(&run, false),
            files,
            "a refused resume changed the run's files"
        );
    }
}
