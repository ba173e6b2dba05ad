//! Invariant 4: abandoned workers are counted exactly, and past the limit the pool gives up.

use super::*;

/// A device that counts its copies: the pool makes one for each worker it starts.
#[derive(Debug)]
struct Spawns(Arc<AtomicUsize>);

impl Clone for Spawns {
    fn clone(&self) -> Self {
        self.0.fetch_add(1, Ordering::SeqCst);
        Spawns(self.0.clone())
    }
}

/// Blocks every step until the test drops the sending end of its channel: a worker that hangs
/// for as long as the test wants, with no clock involved.
#[derive(Clone)]
struct Hang(crossbeam_channel::Receiver<()>);

impl StepModel for Hang {
    type Device = Spawns;
    type Input = ();
    type Output = ();
    fn fork(self, _device: &Spawns) -> Self {
        self
    }
    fn step(&self, _input: ()) {
        let _ = self.0.recv();
    }
}

#[test]
fn repeated_hangs_are_counted_exactly_and_the_limit_stops_the_pool() {
    let (release, hold) = crossbeam_channel::bounded::<()>(0);
    let model = Hang(hold);
    let spawns = Arc::new(AtomicUsize::new(0));
    let devices = vec![Spawns(spawns.clone()), Spawns(spawns.clone())];
    let options = PoolOptions::default().step_timeout(Duration::from_millis(100));
    let mut pool = DevicePool::<Hang>::new(devices, options)
        .unwrap()
        .with_max_abandoned_workers(Some(3));
    assert_eq!(pool.max_abandoned_workers(), Some(3));
    assert_eq!(spawns.load(Ordering::SeqCst), 2);
    let mut sources: Vec<IterSource<_>> = (0..2)
        .map(|_| IterSource::new((0..3).map(|_| Ok::<(), SourceError>(()))))
        .collect();

    // Both workers hang: both are abandoned, counted and replaced.
    let error = pool.step(&mut sources, &model).unwrap_err();
    assert_eq!(failed_devices(&error), [0, 1]);
    assert!(
        error
            .failures()
            .iter()
            .all(|f| matches!(f.kind, FailureKind::TimedOut(_)))
    );
    assert_eq!(pool.stats().abandoned_workers, 2);
    assert_eq!(spawns.load(Ordering::SeqCst), 4);

    // Device 0's worker is the third abandoned and replaced; device 1's, the fourth, is over the
    // limit: it gets no replacement and the pool gives up.
    let error = pool.step(&mut sources, &model).unwrap_err();
    assert!(matches!(
        error,
        StepError::TooManyAbandonedWorkers {
            abandoned: 4,
            limit: 3
        }
    ));
    assert_eq!(
        error.to_string(),
        "device pool gave up: 4 hung workers abandoned, more than its limit of 3"
    );
    assert_eq!(pool.stats().abandoned_workers, 4);
    assert_eq!(spawns.load(Ordering::SeqCst), 5);

    // Later steps fail at once: no batch is pulled and no thread started.
    let error = pool.step(&mut sources, &model).unwrap_err();
    assert!(matches!(error, StepError::TooManyAbandonedWorkers { .. }));
    assert_eq!(spawns.load(Ordering::SeqCst), 5);
    assert!(sources.iter().all(|s| s.progress().items_processed == 2));
    assert_eq!(pool.stats().abandoned_workers, 4);
    drop(release);
}

#[test]
fn the_abandoned_worker_limit_defaults_to_a_bound_and_can_be_lifted() {
    let pool = pool(1);
    assert_eq!(
        pool.max_abandoned_workers(),
        Some(DEFAULT_MAX_ABANDONED_WORKERS)
    );
    assert_eq!(
        pool.with_max_abandoned_workers(None)
            .max_abandoned_workers(),
        None
    );
}
