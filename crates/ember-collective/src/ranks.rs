//! The rounds of a hierarchical data-parallel job; see the crate docs.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use ember_step::burn::{GradientWindow, Reduction};

use crate::communicator::Communicator;
use crate::error::CollectiveError;
use crate::flat::{
    parameter_sizes, parameters, read_gradients, replace_parameters, with_parameters,
    write_gradients, write_parameters,
};
use crate::shard::{owners_by_elements, shard_range};

/// A data-parallel job's ranks, as this process takes part in them: the communicator and the
/// shape of a round.
///
/// The round buffer is the model's gradients (every float parameter in visit order), one
/// presence flag per parameter, one slot per rank for [`Ranks::gather_totals`], then this
/// rank's [`RoundState`] (gradient sets, done, stop) and one failure slot per rank: one
/// all-reduce carries the gradients and every rank's state. Every exchange has that length, so
/// a rank that fails anywhere announces it ([`Ranks::announce_failure`]) in whichever
/// exchange the others are in; the one exception, the gather of stepped parameters that
/// follows a round with gradients, carries a failure flag in each rank's block, for the one
/// failure that can happen between the two (the optimizer step's).
#[derive(Debug)]
pub struct Ranks {
    comm: Box<dyn Communicator>,
    /// Elements of the gradients, and how many parameters, once the model is known.
    shape: Option<(usize, usize)>,
    buffer: Vec<f32>,
    rounds: u64,
    /// Which rank steps each parameter (by visit index), and the parameter's place in that
    /// rank's block of the exchange of parameters.
    owners: Vec<usize>,
    offsets: Vec<usize>,
    /// A rank's block in the exchange of parameters: the most any rank owns, then its failure
    /// flag.
    block: usize,
    /// This rank's block, and every rank's, kept between rounds.
    mine: Vec<f32>,
    gathered: Vec<f32>,
    /// The gradients and presence flags of a window beyond a round's first, kept between
    /// rounds (see [`Ranks::round`]).
    more: Vec<f32>,
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
    /// [`sets`](Self::sets)) of the parameters this rank steps, or of every parameter when the
    /// round was asked for all; `None` when no rank had any, so no optimizer steps and no
    /// parameters are gathered.
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
            owners: Vec::new(),
            offsets: Vec::new(),
            block: 0,
            mine: Vec::new(),
            gathered: Vec::new(),
            more: Vec::new(),
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
        self.share_parameters(&sizes);
        Ok(with_parameters(model, &values))
    }

    /// Splits the optimizer's work: each parameter to one rank, by element count.
    fn share_parameters(&mut self, sizes: &[usize]) {
        let size = self.size();
        self.owners = owners_by_elements(sizes, size);
        let mut owned = vec![0usize; size];
        self.offsets = sizes
            .iter()
            .zip(&self.owners)
            .map(|(elements, owner)| {
                let at = owned[*owner];
                owned[*owner] += elements;
                at
            })
            .collect();
        self.block = owned.iter().max().copied().unwrap_or(0) + 1;
        self.mine = vec![0.0; self.block];
        self.gathered = vec![0.0; self.block * size];
    }

    /// Whether this rank steps the parameter at visit index `index` (see
    /// [`Ranks::gather_parameters`]).
    pub fn owns(&self, index: usize) -> bool {
        self.owners.get(index) == Some(&self.rank())
    }

    /// `grads` without the gradients of parameters other ranks step.
    pub fn owned_gradients<M: Module>(
        &self,
        model: &M,
        mut grads: GradientsParams,
    ) -> GradientsParams {
        struct Drop<'a> {
            ranks: &'a Ranks,
            grads: &'a mut GradientsParams,
            index: usize,
        }
        impl ModuleVisitor for Drop<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if !self.ranks.owns(self.index) {
                    self.grads.remove::<D>(param.id);
                }
                self.index += 1;
            }
        }
        model.visit(&mut Drop {
            ranks: self,
            grads: &mut grads,
            index: 0,
        });
        grads
    }

    /// After an optimizer step that stepped only this rank's parameters: every rank's stepped
    /// parameters, in place of `model`'s others, the same bits on every rank. Every rank must
    /// call it after every round that gave gradients; a rank whose step failed joins it through
    /// [`Ranks::announce_step_failure`] instead, and the others get
    /// [`CollectiveError::PeersFailed`] naming it.
    pub fn gather_parameters<M: Module>(&mut self, model: M) -> Result<M, CollectiveError> {
        if self.shape.is_none() {
            return Err(CollectiveError::NotStarted);
        }
        if self.size() == 1 {
            // The one rank owns every parameter: nothing to gather.
            return Ok(model);
        }
        let rank = self.rank();
        let flag = self.block - 1;
        write_parameters(&model, |index| self.owners[index] == rank, &mut self.mine);
        self.mine[flag] = 0.0;
        self.exchange_parameters()?;
        let (owners, offsets, block) = (&self.owners, &self.offsets, self.block);
        let gathered = &self.gathered;
        Ok(replace_parameters(model, |index, len| {
            let owner = owners[index];
            (owner != rank).then(|| {
                let at = owner * block + offsets[index];
                &gathered[at..at + len]
            })
        }))
    }

    /// Tells every other rank, in the exchange of parameters they are in, that this rank's
    /// optimizer step failed; their [`Ranks::gather_parameters`] ends with
    /// [`CollectiveError::PeersFailed`] naming this rank.
    pub fn announce_step_failure(&mut self) -> Result<(), CollectiveError> {
        if self.shape.is_none() {
            return Ok(());
        }
        self.mine.fill(0.0);
        let flag = self.block - 1;
        self.mine[flag] = 1.0;
        self.exchange_parameters()
    }

    fn exchange_parameters(&mut self) -> Result<(), CollectiveError> {
        self.comm.all_gather(&self.mine, &mut self.gathered)?;
        let (rank, block) = (self.rank(), self.block);
        failed_ranks(self.size(), |from| {
            from != rank && self.gathered[from * block + block - 1] > 0.0
        })
    }

    /// One round: this rank's windows (their plain sums, emptied) and `state` against every
    /// other rank's. Every rank gets the same [`Round`], with the reduced gradients of the
    /// parameters it steps (of every parameter when `every_gradient`); when a rank announced a
    /// failure in this round, every other rank gets [`CollectiveError::PeersFailed`] instead.
    ///
    /// A rank brings one window, or one for each rank of a larger job whose data it runs (a
    /// job resumed with fewer ranks): those are added up here in order, each as a rank's
    /// contribution to the sum, so that two ranks' windows in one process give the bits the
    /// two ranks' all-reduce gave. `windows` must not be empty.
    pub fn round<M: Module>(
        &mut self,
        windows: &mut [GradientWindow<M>],
        model: &M,
        state: RoundState,
        every_gradient: bool,
    ) -> Result<Round, CollectiveError> {
        let (len, params) = self.shape.ok_or(CollectiveError::NotStarted)?;
        let (first, others) = windows
            .split_first_mut()
            .ok_or(CollectiveError::NotStarted)?;
        let reduction = first.reduction();
        let (grads, mut sets) = first.take_sum();
        let size = self.size();
        let totals_len = self.totals_len();
        let (gradients, rest) = self.buffer.split_at_mut(len);
        let (present, rest) = rest.split_at_mut(params);
        write_gradients(model, (sets > 0).then_some(&grads), gradients, present);
        drop(grads);
        if !others.is_empty() {
            self.more.resize(len + params, 0.0);
            let (more, more_present) = self.more.split_at_mut(len);
            for window in others {
                let (grads, count) = window.take_sum();
                write_gradients(model, (count > 0).then_some(&grads), more, more_present);
                sets += count;
                add_into(gradients, more);
                add_into(present, more_present);
            }
        }
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
        let rank = self.rank();
        let owners = &self.owners;
        Ok(Round {
            gradients: (sets > 0).then(|| {
                read_gradients(model, gradients, present, scale, |index| {
                    every_gradient || owners[index] == rank
                })
            }),
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
        failed_ranks(size, |rank| slots[rank] > 0.0)
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

/// `to` plus `from`, element by element, as an all-reduce adds a rank's values.
fn add_into(to: &mut [f32], from: &[f32]) {
    for (to, from) in to.iter_mut().zip(from) {
        *to += *from;
    }
}

/// [`CollectiveError::PeersFailed`] naming the ranks of `size` whose failure flag `is_set`,
/// if any.
fn failed_ranks(size: usize, is_set: impl Fn(usize) -> bool) -> Result<(), CollectiveError> {
    let ranks: Vec<usize> = (0..size).filter(|rank| is_set(*rank)).collect();
    if ranks.is_empty() {
        Ok(())
    } else {
        Err(CollectiveError::PeersFailed { ranks })
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
    use std::time::Duration;

    use burn::optim::{AdamConfig, ModuleOptimizer};
    use burn::tensor::Device;
    use ember_step::burn::Reduction;
    use ember_tests::{Mlp, XyBatch, parameters, seeded_mlp};

    use super::*;
    use crate::local::{LocalComm, LocalGroup};

    fn gradients(model: &Mlp, seed: u64, device: &Device) -> GradientsParams {
        let batch = XyBatch::synthetic(seed, 16, device);
        let loss = (model.forward(batch.x) - batch.y).powf_scalar(2.0).mean();
        GradientsParams::from_grads(loss.backward(), model)
    }

    fn bits(values: &[f32]) -> Vec<u32> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    /// One round of `model`'s gradients on a batch drawn from `seed`: the reduced gradients
    /// this rank is given.
    fn reduced(ranks: &mut Ranks, model: &Mlp, seed: u64, every: bool) -> GradientsParams {
        let device = Device::flex().autodiff();
        let mut window = GradientWindow::new(Reduction::Mean);
        window.add(gradients(model, seed, &device), &device, model);
        let round = ranks.round(
            std::slice::from_mut(&mut window),
            model,
            RoundState::default(),
            every,
        );
        round.unwrap().gradients.unwrap()
    }

    /// Three steps of one rank of a job: each step's gradients (drawn from the rank's own
    /// seeds) go through a round asking for every gradient, stepped whole by a reference
    /// optimizer, and through a round asking for this rank's, stepped by its own optimizer and
    /// gathered. Returns both models' parameters and how many gradients each round gave.
    fn rank_steps(comm: LocalComm) -> (Vec<f32>, Vec<f32>, Vec<(usize, usize)>) {
        let device = Device::flex().autodiff();
        let rank = comm.rank() as u64;
        let mut ranks = Ranks::new(comm);
        // Each rank starts from its own draw: the broadcast makes them rank 0's.
        let start = ranks
            .broadcast_module(seeded_mlp(24, 7 + rank, &device))
            .unwrap();
        let (mut whole, mut shared) = (start.clone(), start);
        let mut whole_optimizer: ModuleOptimizer = AdamConfig::new().init();
        let mut own_optimizer: ModuleOptimizer = AdamConfig::new().init();
        let mut counts = Vec::new();
        for step in 0..3 {
            let seed = rank * 10 + step;
            let every = reduced(&mut ranks, &whole, seed, true);
            let own = reduced(&mut ranks, &shared, seed, false);
            counts.push((every.len(), own.len()));
            whole = whole_optimizer.step(0.01, whole, every);
            let stepped = own_optimizer.step(0.01, shared, own);
            shared = ranks.gather_parameters(stepped).unwrap();
        }
        (parameters(&whole), parameters(&shared), counts)
    }

    #[test]
    fn each_rank_steps_its_own_parameters_and_the_gather_gives_every_rank_one_optimizer_s_bits() {
        let handles: Vec<_> = LocalGroup::ranks(3, Duration::from_secs(60))
            .into_iter()
            .map(|comm| std::thread::spawn(move || rank_steps(comm)))
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let (whole, _, _) = &results[0];
        // Mlp(24): l1 weight 2x24 and bias 24, l2 weight 24x1 and bias 1; over 3 ranks, by
        // elements largest first: the weight of 48 alone, 24 and 1, then 24.
        let owned: Vec<usize> = results.iter().map(|(_, _, c)| c[0].1).collect();
        assert_eq!(owned, vec![1, 2, 1]);
        for (rank, (every, shared, counts)) in results.iter().enumerate() {
            assert!(counts.iter().all(|(all, _)| *all == 4), "{counts:?}");
            assert_eq!(bits(every), bits(whole), "rank {rank}'s reference");
            assert_eq!(bits(shared), bits(whole), "rank {rank}");
        }
    }

    /// A rank that runs the data of two (a job resumed with fewer ranks) brings a window for
    /// each; its round gives the bits the two ranks' round gave, the second's window holding
    /// two sets and the first's one, so the mean divides by all three.
    #[test]
    fn two_windows_in_one_rank_give_the_bits_of_two_ranks() {
        let device = Device::flex().autodiff();
        let model = seeded_mlp(24, 7, &device);
        let window_of = |seeds: &[u64]| {
            let mut window = GradientWindow::new(Reduction::Mean);
            for seed in seeds {
                window.add(gradients(&model, *seed, &device), &device, &model);
            }
            window
        };
        let seeds: [&[u64]; 2] = [&[1], &[2, 3]];
        let handles: Vec<_> = LocalGroup::ranks(2, Duration::from_secs(60))
            .into_iter()
            .map(|comm| {
                let (model, seeds) = (model.clone(), seeds[comm.rank()]);
                let mut window = window_of(seeds);
                std::thread::spawn(move || {
                    let mut ranks = Ranks::new(comm);
                    let model = ranks.broadcast_module(model).unwrap();
                    let round = ranks.round(
                        std::slice::from_mut(&mut window),
                        &model,
                        RoundState::default(),
                        true,
                    );
                    let round = round.unwrap();
                    (round.sets, flat(&model, &round.gradients.unwrap()))
                })
            })
            .collect();
        let two: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let comm = LocalGroup::ranks(1, Duration::from_secs(60)).pop().unwrap();
        let mut one = Ranks::new(comm);
        let model = one.broadcast_module(model.clone()).unwrap();
        let mut windows = [window_of(seeds[0]), window_of(seeds[1])];
        let round = one
            .round(&mut windows, &model, RoundState::default(), true)
            .unwrap();
        assert_eq!(round.sets, 3);
        assert_eq!(two[0].0, 3);
        assert_eq!(
            bits(&flat(&model, &round.gradients.unwrap())),
            bits(&two[0].1)
        );
    }

    /// Every parameter's gradient in `grads`, in visit order.
    fn flat(model: &Mlp, grads: &GradientsParams) -> Vec<f32> {
        let mut values = vec![0.0; parameter_sizes(model).iter().sum()];
        let mut present = vec![0.0; parameter_sizes(model).len()];
        write_gradients(model, Some(grads), &mut values, &mut present);
        values
    }

    #[test]
    fn a_rank_whose_optimizer_step_failed_is_named_in_the_gather() {
        let handles: Vec<_> = LocalGroup::ranks(3, Duration::from_secs(60))
            .into_iter()
            .map(|comm| {
                std::thread::spawn(move || {
                    let device = Device::flex().autodiff();
                    let rank = comm.rank();
                    let mut ranks = Ranks::new(comm);
                    let model = ranks.broadcast_module(Mlp::new(8, &device)).unwrap();
                    if rank == 1 {
                        ranks.announce_step_failure().map(|()| None)
                    } else {
                        ranks.gather_parameters(model).map(|m| Some(parameters(&m)))
                    }
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(results[1], Ok(None));
        for rank in [0, 2] {
            assert_eq!(
                results[rank],
                Err(CollectiveError::PeersFailed { ranks: vec![1] }),
                "rank {rank}"
            );
        }
    }

    #[test]
    fn lengths_travel_exactly() {
        for n in [0u64, 1, 65_535, 65_536, 16_777_217, 123_456_789_012] {
            assert_eq!(join_u64(&split_u64(n)), n);
        }
    }
}
