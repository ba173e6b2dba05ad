//! Invariant 6: exhausted sources stop contributing, are not polled again, and end the epoch.

use super::*;

/// A source that is not fused: after its `None` it has batches again, and it counts its polls.
struct Unfused {
    items: std::collections::VecDeque<Option<Batch>>,
    polls: Arc<AtomicUsize>,
}

impl Iterator for Unfused {
    type Item = Result<Batch, SourceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.items.pop_front().flatten().map(Ok)
    }
}

impl BatchSource<Batch> for Unfused {
    fn progress(&self) -> Progress {
        Progress::new(0, None)
    }
}

fn unfused(items: Vec<Option<Batch>>) -> (Unfused, Arc<AtomicUsize>) {
    let polls = Arc::new(AtomicUsize::new(0));
    let source = Unfused {
        items: items.into(),
        polls: polls.clone(),
    };
    (source, polls)
}

#[test]
fn an_exhausted_source_is_not_polled_again_in_the_epoch() {
    let mut pool = pool(2);
    // Device 0 ends after one batch; were it asked again it would hand out a batch of step 9.
    let (short, short_polls) = unfused(vec![Some(batch(0, 0.0)), None, Some(batch(9, 9.0))]);
    let (long, _) = unfused((0..3).map(|s| Some(batch(s, 10.0 + s as f64))).collect());
    let mut sources = vec![short, long];
    assert_eq!(
        devices_and_steps(&ran(pool.step(&mut sources, &MODEL))),
        [(0, 0), (1, 0)]
    );
    for step in 1..3 {
        let outputs = ran(pool.step(&mut sources, &MODEL));
        assert_eq!(devices_and_steps(&outputs), [(1, step)]);
        assert_eq!(
            (outputs.progress.sources, outputs.progress.exhausted),
            (2, 1)
        );
    }
    assert!(matches!(
        pool.step(&mut sources, &MODEL),
        Ok(Step::EpochOver(_))
    ));
    // One batch and one `None`: never polled after it said it was done.
    assert_eq!(short_polls.load(Ordering::SeqCst), 2);
}

#[test]
fn the_next_epochs_sources_are_polled_after_the_epoch_is_over() {
    let mut pool = pool(2);
    let mut first = vec![
        source(vec![Ok(batch(0, 0.0))]),
        source(vec![Ok(batch(0, 10.0)), Ok(batch(1, 11.0))]),
    ];
    while let Step::Ran(_) = pool.step(&mut first, &MODEL).unwrap() {}
    let mut second = sources(2, 1);
    let outputs = ran(pool.step(&mut second, &MODEL));
    assert_eq!(devices_and_steps(&outputs), [(0, 0), (1, 0)]);
}

#[test]
fn new_epoch_lets_a_caller_leave_an_epoch_early() {
    let mut pool = pool(2);
    let mut first = vec![
        source(vec![Ok(batch(0, 0.0))]),
        source((0..3).map(|s| Ok(batch(s, 10.0 + s as f64))).collect()),
    ];
    ran(pool.step(&mut first, &MODEL));
    // Device 0's source runs out here, with device 1's batches left over.
    assert_eq!(
        devices_and_steps(&ran(pool.step(&mut first, &MODEL))),
        [(1, 1)]
    );
    pool.new_epoch();
    let mut second = sources(2, 1);
    let outputs = ran(pool.step(&mut second, &MODEL));
    assert_eq!(devices_and_steps(&outputs), [(0, 0), (1, 0)]);
}

#[test]
fn exhausted_sources_still_count_until_the_epoch_is_over() {
    let mut pool = pool(2);
    let mut sources = vec![
        source((0..3).map(|s| Ok(batch(s, s as f64))).collect()),
        source(vec![Ok(batch(0, 10.0))]),
    ];
    let first = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&first), [(0, 0), (1, 0)]);
    assert_eq!(first.progress.progress, Progress::new(2, Some(4)));

    let second = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&second), [(0, 1)]);
    assert_eq!(second.progress.progress, Progress::new(3, Some(4)));
    assert_eq!((second.progress.sources, second.progress.exhausted), (2, 1));

    ran(pool.step(&mut sources, &MODEL));
    match pool.step(&mut sources, &MODEL).unwrap() {
        Step::EpochOver(progress) => {
            assert_eq!(progress.progress, Progress::new(4, Some(4)));
            assert!(progress.all_exhausted());
        }
        other => panic!("expected the end of the epoch, got {other:?}"),
    }
}
