//! How a run cuts the job's training data into the slices its devices run.

use std::sync::Arc;

use burn::data::dataloader::DataLoader;
use burn::data::dataloader::split::split_dataloader;
use burn::tensor::Device;

/// The cut of a run's data: across ranks, one contiguous shard per rank of the job that began it
/// ([`Ranks::shard`](crate::collective::Ranks::shard)'s cut), each split into one slice per device a rank began with (burn's
/// `split_dataloader`). A shuffling loader's slice draws its generator from the loader it is
/// cut from, advancing it: every process cuts every rank's shard, in rank order, and keeps its
/// own, so a rank's shard shuffles alike whichever process runs it (a job resumed with fewer
/// ranks runs several). A run of one process without ranks splits the data into its slices
/// directly.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cut {
    pub(super) in_ranks: bool,
    /// The ranks the job began with.
    pub(super) data_ranks: usize,
    pub(super) rank: usize,
    pub(super) world: usize,
    /// The slices each rank shard is split into.
    pub(super) slices: usize,
    /// The devices each slice's batches are spread over, one batch each, when this process
    /// has more devices than slices (1 otherwise): slice `s` runs on devices `s·spread ..`.
    pub(super) spread: usize,
}

impl Cut {
    /// The rank shards this process runs.
    pub(super) fn rank_shards(&self) -> usize {
        (self.data_ranks / self.world).max(1)
    }

    /// The slices this process runs: one for each rank shard it stands for, times the slices
    /// each is split into.
    pub(super) fn sources(&self) -> usize {
        self.rank_shards() * self.slices
    }

    /// The devices each slice's batches are spread over when `devices` outnumber the slices
    /// (a run resumed on more devices than it began with), 1 otherwise.
    pub(super) fn spread_over(&self, devices: usize) -> usize {
        (devices / self.sources().max(1)).max(1)
    }

    /// The slices this process runs, each on the device it runs on (a spread slice on the
    /// first of its devices).
    pub(super) fn slices_of<I: Send + 'static>(
        &self,
        train: &Arc<dyn DataLoader<I>>,
        devices: &[Device],
    ) -> Vec<Arc<dyn DataLoader<I>>> {
        let place = |slice: usize| devices[(slice * self.spread) % devices.len()].clone();
        if !self.in_ranks {
            let devices: Vec<Device> = (0..self.slices).map(place).collect();
            return split_dataloader(train.clone(), &devices);
        }
        let items = train.num_items();
        let shards: Vec<_> = (0..self.data_ranks)
            .map(|of| {
                let range = crate::collective::shard_range(items, self.data_ranks, of);
                train.slice(range.start, range.end)
            })
            .collect();
        let per_rank = self.rank_shards();
        let mut loaders = Vec::with_capacity(per_rank * self.slices);
        for shard in shards.into_iter().skip(self.rank * per_rank).take(per_rank) {
            let devices: Vec<Device> = (loaders.len()..loaders.len() + self.slices)
                .map(place)
                .collect();
            loaders.extend(split_dataloader(shard, &devices));
        }
        loaders
    }
}
