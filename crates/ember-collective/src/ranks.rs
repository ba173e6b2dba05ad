//! The rounds of a hierarchical data-parallel job; see the crate docs.

use burn::module::Module;
use burn::optim::GradientsParams;
use ember_step::burn::{GradientWindow, Reduction};

use crate::communicator::Communicator;
use crate::error::CollectiveError;
use crate::flat::{parameter_sizes, parameters, read_gradients, with_parameters, write_gradients};
use crate::shard::shard_range;

/// A data-parallel job's ranks, as this process takes part in them: the communicator and the
/// shape of a round.
///
/// The round buffer is the model's gradients (every float parameter in visit order), one
/// presence flag per parameter, one slot per rank for [`Ranks::gather_totals`], then this
/// rank's [`RoundState`] (gradient sets, done, stop) and one failure slot per rank: one
/// all-reduce carries the gradients and every rank's state. Every exchange has that length, so
/// a rank that fails anywhere announces it ([`Ranks::announce_failure`]) in whichever
/// exchange the others are in.
#[derive(Debug)]
pub struct Ranks {
    comm: Box<dyn Communicator>,
    /// Elements of the gradients, and how many parameters, once the model is known.
    shape: Option<(usize, usize)>,
    buffer: Vec<f32>,
    rounds: u64,
}

/// What this rank brings to a round besides its gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoundState {
    /// This rank's data for the epoch is used up; it joins rounds with what it has left, then
    /// with nothing, until every rank's is.
    pub done: bool,
    /// This rank was asked to stop: every rank ends the epoch after this round.
    pub stop: bool,
}

/// What a round gave every rank alike.
#[derive(Debug)]
pub struct Round {
    /// The reduced gradients (summed, and for [`Reduction::Mean`] divided by
    /// [`sets`](Self::sets)); `None` when no rank had any, so no optimizer steps.
    pub gradients: Option<GradientsParams>,
    /// The gradient sets of every rank together.
    pub sets: usize,
    /// Every rank's data is used up: the epoch is over.
    pub all_done: bool,
    /// Some rank was asked to stop: every rank ends the epoch (and the run) after this round.
    pub stopped: bool,
}

const TRAILER: usize = 3;

/// The most values one rank brings to [`Ranks::gather_totals`].
pub const MAX_TOTALS: usize = 8;

/// `f32`s per total: an `f64`'s bits as four 16-bit pieces, each exact in an `f32`, so that a
/// sum with the other ranks' zeros carries it unchanged.
const PIECES: usize = 4;

impl Ranks {
    /// This process's part of the job `comm` connects.
    pub fn new(comm: impl Communicator + 'static) -> Self {
        Self {
            comm: Box::new(comm),
            shape: None,
            buffer: Vec::new(),
            rounds: 0,
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// How many ranks the job has.
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// Rounds completed so far.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// This rank's contiguous share of `items` (see [`shard_range`]).
    pub fn shard(&self, items: usize) -> std::ops::Range<usize> {
        shard_range(items, self.size(), self.rank())
    }

    /// `model` with rank 0's parameters, on every rank; this also fixes the size of a round.
    /// The ranks' models must have the same structure: one that differs is an error on every
    /// rank ([`CollectiveError::LengthMismatch`]), found before any parameter moves.
    pub fn broadcast_module<M: Module>(&mut self, model: M) -> Result<M, CollectiveError> {
        let sizes = parameter_sizes(&model);
        let len: usize = sizes.iter().sum();
        let root_len = broadcast_u64(&mut *self.comm, len as u64, 0)? as usize;
        let mut mismatched = [f32::from(root_len != len)];
        self.comm.all_reduce_sum(&mut mismatched)?;
        if mismatched[0] > 0.0 {
            return Err(CollectiveError::LengthMismatch {
                rank: self.rank(),
                len,
                root: 0,
                root_len,
            });
        }
        let mut values = parameters(&model);
        self.comm.broadcast(&mut values, 0)?;
        self.shape = Some((len, sizes.len()));
        self.buffer = vec![0.0; len + sizes.len() + self.totals_len() + TRAILER + self.size()];
        Ok(with_parameters(model, &values))
    }

    /// One round: this rank's window (its plain sum, emptied) and `state` against every other
    /// rank's. Every rank gets the same [`Round`]; when a rank announced a failure in this
    /// round, every other rank gets [`CollectiveError::PeersFailed`] instead.
    pub fn round<M: Module>(
        &mut self,
        window: &mut GradientWindow<M>,
        model: &M,
        state: RoundState,
    ) -> Result<Round, CollectiveError> {
        let (len, params) = self.shape.ok_or(CollectiveError::NotStarted)?;
        let reduction = window.reduction();
        let (grads, sets) = window.take_sum();
        let size = self.size();
        let totals_len = self.totals_len();
        let (gradients, rest) = self.buffer.split_at_mut(len);
        let (present, rest) = rest.split_at_mut(params);
        write_gradients(model, (sets > 0).then_some(&grads), gradients, present);
        drop(grads);
        rest.fill(0.0);
        let rest = &mut rest[totals_len..];
        rest[0] = sets as f32;
        rest[1] = f32::from(state.done);
        rest[2] = f32::from(state.stop);
        self.comm.all_reduce_sum(&mut self.buffer)?;
        self.rounds += 1;

        let (gradients, rest) = self.buffer.split_at(len);
        let (present, rest) = rest.split_at(params);
        let trailer = &rest[totals_len..];
        self.peers_failed()?;
        let sets = trailer[0] as usize;
        let scale = match reduction {
            Reduction::Mean if sets > 0 => 1.0 / sets as f32,
            _ => 1.0,
        };
        Ok(Round {
            gradients: (sets > 0).then(|| read_gradients(model, gradients, present, scale)),
            sets,
            all_done: trailer[1] as usize >= size,
            stopped: trailer[2] > 0.0,
        })
    }

    /// Every rank's `values` (at most [`MAX_TOTALS`], as many on every rank), in rank order, on
    /// every rank alike: sums that each rank made of its own share (its validation batches),
    /// for every rank to add up in the same order to the same bits. Every rank must call it at the same point;
    /// when a rank announced a failure instead, the others get
    /// [`CollectiveError::PeersFailed`].
    pub fn gather_totals(&mut self, values: &[f64]) -> Result<Vec<Vec<f64>>, CollectiveError> {
        let (len, params) = self.shape.ok_or(CollectiveError::NotStarted)?;
        if values.len() > MAX_TOTALS {
            return Err(CollectiveError::TooManyTotals {
                count: values.len(),
                most: MAX_TOTALS,
            });
        }
        let (size, rank) = (self.size(), self.rank());
        self.buffer.fill(0.0);
        let slots = len + params;
        let slot = slots + rank * MAX_TOTALS * PIECES;
        for (index, value) in values.iter().enumerate() {
            let at = slot + index * PIECES;
            self.buffer[at..at + PIECES].copy_from_slice(&split_u64(value.to_bits()));
        }
        self.comm.all_reduce_sum(&mut self.buffer)?;
        self.peers_failed()?;
        Ok((0..size)
            .map(|from| {
                let slot = slots + from * MAX_TOTALS * PIECES;
                (0..values.len())
                    .map(|index| {
                        let at = slot + index * PIECES;
                        f64::from_bits(join_u64(&self.buffer[at..at + PIECES]))
                    })
                    .collect()
            })
            .collect())
    }

    /// After an exchange: the ranks whose failure slot is set, as an error.
    fn peers_failed(&self) -> Result<(), CollectiveError> {
        let size = self.size();
        let slots = &self.buffer[self.buffer.len() - size..];
        let failed: Vec<usize> = (0..size).filter(|r| slots[*r] > 0.0).collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(CollectiveError::PeersFailed { ranks: failed })
        }
    }

    fn totals_len(&self) -> usize {
        self.size() * MAX_TOTALS * PIECES
    }

    /// Tells every other rank that this one failed, by joining the round they are in (or will
    /// be in next) with its failure slot set. Their round then ends with
    /// [`CollectiveError::PeersFailed`] naming this rank. Does nothing before the model was
    /// broadcast (no rank has started a round then).
    pub fn announce_failure(&mut self) -> Result<(), CollectiveError> {
        if self.shape.is_none() {
            return Ok(());
        }
        let rank = self.rank();
        self.buffer.fill(0.0);
        let at = self.buffer.len() - self.size() + rank;
        self.buffer[at] = 1.0;
        // Done, so that ranks counting done ranks never wait for this one again.
        let done = self.buffer.len() - self.size() - TRAILER + 1;
        self.buffer[done] = 1.0;
        self.comm.all_reduce_sum(&mut self.buffer)?;
        self.rounds += 1;
        Ok(())
    }
}

/// Rank `root`'s `value`, on every rank: a count or a time, which the `f32` collectives carry
/// exactly as four 16-bit pieces.
pub fn broadcast_u64(
    comm: &mut dyn Communicator,
    value: u64,
    root: usize,
) -> Result<u64, CollectiveError> {
    let mut pieces = split_u64(value);
    comm.broadcast(&mut pieces, root)?;
    Ok(join_u64(&pieces))
}

fn split_u64(n: u64) -> [f32; 4] {
    [0, 16, 32, 48].map(|shift| ((n >> shift) & 0xffff) as f32)
}

fn join_u64(parts: &[f32]) -> u64 {
    parts
        .iter()
        .zip([0, 16, 32, 48])
        .map(|(part, shift)| (*part as u64) << shift)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_travel_exactly() {
        for n in [0u64, 1, 65_535, 65_536, 16_777_217, 123_456_789_012] {
            assert_eq!(join_u64(&split_u64(n)), n);
        }
    }
}
