//! Ranks as threads of one process: a [`Communicator`] over shared memory.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::communicator::Communicator;
use crate::error::CollectiveError;

/// Makes the ranks of one job whose ranks are threads of this process: each thread takes one
/// [`LocalComm`]. Sums are taken in rank order, so every run gives the same bits.
#[derive(Debug)]
pub struct LocalGroup;

impl LocalGroup {
    /// `size` handles (rank 0 first), whose operations wait at most `timeout` for the others.
    pub fn ranks(size: usize, timeout: Duration) -> Vec<LocalComm> {
        let rendezvous = Arc::new(Rendezvous {
            state: Mutex::new(State {
                generation: 0,
                contributions: vec![None; size],
                result: Arc::new(Vec::new()),
                gone: vec![false; size],
            }),
            changed: Condvar::new(),
        });
        (0..size)
            .map(|rank| LocalComm {
                rank,
                size,
                timeout,
                rendezvous: Arc::clone(&rendezvous),
            })
            .collect()
    }
}

/// One rank of a [`LocalGroup`]. Dropping it leaves the job: the other ranks' next operation
/// fails with [`CollectiveError::PeerGone`] instead of waiting.
#[derive(Debug)]
pub struct LocalComm {
    rank: usize,
    size: usize,
    timeout: Duration,
    rendezvous: Arc<Rendezvous>,
}

#[derive(Debug)]
struct Rendezvous {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug)]
struct State {
    /// Operations completed so far.
    generation: u64,
    /// What each rank brought to the operation in progress.
    contributions: Vec<Option<Contribution>>,
    /// The last completed operation's result.
    result: Arc<Vec<f32>>,
    /// Ranks that left the job.
    gone: Vec<bool>,
}

#[derive(Debug, Clone)]
struct Contribution {
    values: Vec<f32>,
    operation: Operation,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Operation {
    Sum,
    Broadcast { root: usize },
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Sum => "all-reduce",
            Operation::Broadcast { .. } => "broadcast",
        }
    }
}

impl LocalComm {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked holding the lock left the state whole: every update is one
        // assignment.
        self.rendezvous
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn join(&mut self, values: &mut [f32], operation: Operation) -> Result<(), CollectiveError> {
        let started = Instant::now();
        let mut state = self.lock();
        if let Some(rank) = state.gone.iter().position(|gone| *gone) {
            return Err(CollectiveError::PeerGone {
                rank,
                operation: operation.name(),
            });
        }
        if let Some(other) = state.contributions.iter().flatten().next()
            && other.values.len() != values.len()
        {
            let root = state
                .contributions
                .iter()
                .position(Option::is_some)
                .unwrap_or(0);
            return Err(CollectiveError::LengthMismatch {
                rank: self.rank,
                len: values.len(),
                root,
                root_len: other.values.len(),
            });
        }
        let generation = state.generation;
        state.contributions[self.rank] = Some(Contribution {
            values: values.to_vec(),
            operation,
        });
        if state.contributions.iter().all(Option::is_some) {
            let result = combine(&state.contributions, values.len());
            state.result = Arc::new(result);
            state.contributions.iter_mut().for_each(|c| *c = None);
            state.generation += 1;
            self.rendezvous.changed.notify_all();
        } else {
            while state.generation == generation {
                if let Some(rank) = state.gone.iter().position(|gone| *gone) {
                    state.contributions[self.rank] = None;
                    return Err(CollectiveError::PeerGone {
                        rank,
                        operation: operation.name(),
                    });
                }
                let waited = started.elapsed();
                let Some(left) = self.timeout.checked_sub(waited) else {
                    state.contributions[self.rank] = None;
                    return Err(CollectiveError::Timeout {
                        operation: operation.name(),
                        rank: self.rank,
                        size: self.size,
                        waited,
                    });
                };
                state = self
                    .rendezvous
                    .changed
                    .wait_timeout(state, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        values.copy_from_slice(&state.result);
        Ok(())
    }
}

/// The operation's result: rank 0's buffer plus each next rank's, in rank order, or the root's.
fn combine(contributions: &[Option<Contribution>], len: usize) -> Vec<f32> {
    let all = contributions.iter().flatten();
    match contributions.iter().flatten().next().map(|c| c.operation) {
        Some(Operation::Broadcast { root }) => contributions
            .get(root)
            .and_then(Option::as_ref)
            .map_or_else(|| vec![0.0; len], |c| c.values.clone()),
        _ => {
            // Starting from rank 0's values, not from +0.0, which would turn a −0.0 into +0.0.
            let mut all = all;
            let mut sum = all
                .next()
                .map_or_else(|| vec![0.0f32; len], |first| first.values.clone());
            for contribution in all {
                for (to, from) in sum.iter_mut().zip(&contribution.values) {
                    *to += from;
                }
            }
            sum
        }
    }
}

impl Communicator for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<(), CollectiveError> {
        self.join(values, Operation::Sum)
    }

    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<(), CollectiveError> {
        if root >= self.size {
            return Err(CollectiveError::NoSuchRank {
                root,
                size: self.size,
            });
        }
        self.join(values, Operation::Broadcast { root })
    }
}

impl Drop for LocalComm {
    fn drop(&mut self) {
        let mut state = self.lock();
        state.gone[self.rank] = true;
        self.rendezvous.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    fn on_threads<T: Send + 'static>(
        comms: Vec<LocalComm>,
        work: impl Fn(LocalComm) -> T + Send + Sync + Clone + 'static,
    ) -> Vec<T> {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|comm| {
                let work = work.clone();
                thread::spawn(move || work(comm))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn every_rank_gets_the_sum_in_rank_order_and_the_root_s_broadcast() {
        let results = on_threads(LocalGroup::ranks(3, Duration::from_secs(10)), |mut comm| {
            let rank = comm.rank() as f32;
            let mut sum = vec![rank, 1.0, 0.1 * rank];
            comm.all_reduce_sum(&mut sum).unwrap();
            let mut broadcast = vec![rank; 2];
            comm.broadcast(&mut broadcast, 2).unwrap();
            (sum, broadcast)
        });
        let expected_third = (0.0f32 + 0.1) + 0.2;
        for (sum, broadcast) in results {
            assert_eq!(sum, vec![3.0, 3.0, expected_third]);
            assert_eq!(broadcast, vec![2.0, 2.0]);
        }
    }

    #[test]
    fn the_default_gather_keeps_every_value_s_bits() {
        let results = on_threads(LocalGroup::ranks(3, Duration::from_secs(10)), |mut comm| {
            let rank = comm.rank() as f32;
            // Signed zeros, an infinity and the smallest subnormal, which a sum over +0.0
            // would not all keep.
            let mine = [-0.0, 0.0, f32::NEG_INFINITY, f32::from_bits(1), rank];
            let mut all = vec![1.0; 15];
            comm.all_gather(&mine, &mut all).unwrap();
            let wrong = comm.all_gather(&mine, &mut [0.0; 14]);
            (all, wrong)
        });
        for (all, wrong) in results {
            let expected: Vec<u32> = (0..3)
                .flat_map(|rank| {
                    [-0.0, 0.0, f32::NEG_INFINITY, f32::from_bits(1), rank as f32].map(f32::to_bits)
                })
                .collect();
            assert_eq!(
                all.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                expected
            );
            assert_eq!(
                wrong,
                Err(CollectiveError::GatherLength {
                    len: 14,
                    expected: 15
                })
            );
        }
    }

    #[test]
    fn a_rank_that_never_comes_is_a_timeout_and_one_that_left_is_named() {
        let mut comms = LocalGroup::ranks(3, Duration::from_millis(50));
        let late = comms.pop().unwrap();
        let mut waiting = comms.pop().unwrap();
        let gone = comms.pop().unwrap();
        let error = waiting.all_reduce_sum(&mut [1.0]).unwrap_err();
        assert!(
            matches!(error, CollectiveError::Timeout { operation: "all-reduce", rank: 1, size: 3, waited } if waited >= Duration::from_millis(50)),
            "{error:?}"
        );
        drop(gone);
        assert_eq!(
            waiting.broadcast(&mut [1.0], 0).unwrap_err(),
            CollectiveError::PeerGone {
                rank: 0,
                operation: "broadcast"
            }
        );
        drop(late);
    }

    #[test]
    fn a_rank_waiting_learns_when_a_peer_leaves() {
        let mut comms = LocalGroup::ranks(2, Duration::from_secs(30));
        let leaving = comms.pop().unwrap();
        let mut waiting = comms.pop().unwrap();
        let waiter = thread::spawn(move || waiting.all_reduce_sum(&mut [1.0]));
        thread::sleep(Duration::from_millis(20));
        drop(leaving);
        assert_eq!(
            waiter.join().unwrap().unwrap_err(),
            CollectiveError::PeerGone {
                rank: 1,
                operation: "all-reduce"
            }
        );
    }

    #[test]
    fn different_lengths_are_refused() {
        let results = on_threads(
            LocalGroup::ranks(2, Duration::from_millis(200)),
            |mut comm| {
                let mut values = vec![0.0; 2 + comm.rank()];
                comm.all_reduce_sum(&mut values)
            },
        );
        assert!(
            results
                .iter()
                .any(|r| matches!(r, Err(CollectiveError::LengthMismatch { .. }))),
            "{results:?}"
        );
    }
}
