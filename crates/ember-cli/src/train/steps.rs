//! How many steps a run takes, as its step reports count them: what its progress bar counts
//! to.

use ember::run::DataLayout;

/// Pool steps in one epoch: the loader is split into one contiguous slice per worker (the last
/// takes the remainder), and each step runs one batch on every worker that has one left.
fn steps_per_epoch(train: usize, workers: usize, batch: usize) -> usize {
    let largest = train - train / workers * (workers - 1);
    largest.div_ceil(batch)
}

/// The steps rank `rank` takes in `epochs` over `train_len` examples in batches of `batch`,
/// as its step reports count them: over the data cut as the run began (`began`, where it goes
/// on from a checkpoint, else as it is now: `devices` a rank of `ranks`) into a shard a rank
/// and a slice a device, whatever devices and ranks run it now. A rank that runs several
/// shards takes as many steps an epoch as the longest needs.
pub(super) fn run_steps(
    (epochs, train_len, batch): (usize, usize, usize),
    (devices, ranks): (usize, usize),
    rank: usize,
    began: Option<DataLayout>,
) -> usize {
    let (devices, shards) = began.map_or((devices, ranks), |l| (l.devices, l.data_ranks));
    let shard_len = |shard| ember::collective::shard_range(train_len, shards, shard).len();
    let longest = if shards == ranks {
        shard_len(rank)
    } else {
        (0..shards).map(shard_len).max().unwrap_or(0)
    };
    epochs * steps_per_epoch(longest, devices, batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_per_epoch_follows_the_split() {
        // 1438 examples on 2 workers: 719 each, batches of 32: 23 steps.
        assert_eq!(steps_per_epoch(1438, 2, 32), 23);
        // 10 on 3 workers: 3, 3 and 4; batches of 2: the last needs 2 steps.
        assert_eq!(steps_per_epoch(10, 3, 2), 2);
        assert_eq!(steps_per_epoch(240, 1, 32), 8);
    }

    /// A run that goes on on other devices or ranks counts its steps over the data cut as it
    /// began: its progress bar ends where its steps do.
    #[test]
    fn a_run_that_goes_on_elsewhere_counts_its_steps_as_it_began() {
        // 3 epochs of 400 examples in batches of 32.
        let steps = |now, began| run_steps((3, 400, 32), now, 0, began);
        // Begun on 2 devices: 200 a device, 7 steps an epoch.
        assert_eq!(steps((2, 1), None), 21);
        // Begun on 1 device, going on on 2: 400 in its one slice, 13 steps an epoch.
        let one_device = DataLayout {
            devices: 1,
            data_ranks: 1,
        };
        assert_eq!(steps((2, 1), Some(one_device)), 39);
        // A job of 2 ranks on 2 devices each, going on as 1 rank: 100 a slice, 4 steps.
        let two_ranks = DataLayout {
            devices: 2,
            data_ranks: 2,
        };
        assert_eq!(steps((2, 1), Some(two_ranks)), 12);
        assert_eq!(steps((1, 1), Some(two_ranks)), 12);
    }
}
