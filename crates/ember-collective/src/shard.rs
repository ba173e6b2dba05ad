//! How items split between ranks (and again between each rank's devices): one rule shared by
//! [`Ranks::shard`](crate::ranks::Ranks::shard) and by callers that split data themselves.

/// A range of `items` split into `parts` contiguous shards, shard `index` of them: each holds
/// `items / parts`, the last the rest too (the rule burn's `split_dataloader` splits a loader
/// between devices with, so ranks × devices shards match one process's devices × ranks).
pub fn shard_range(items: usize, parts: usize, index: usize) -> std::ops::Range<usize> {
    let parts = parts.max(1);
    let index = index.min(parts - 1);
    let step = items / parts;
    let start = step * index;
    let end = if index == parts - 1 {
        items
    } else {
        start + step
    };
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_every_item_once_as_burn_splits_devices() {
        for items in [0usize, 1, 7, 64, 65, 1437] {
            for parts in 1..=5 {
                let shards: Vec<_> = (0..parts).map(|i| shard_range(items, parts, i)).collect();
                assert_eq!(shards[0].start, 0);
                assert_eq!(shards[parts - 1].end, items);
                for pair in shards.windows(2) {
                    assert_eq!(pair[0].end, pair[1].start);
                }
                // Two levels (ranks, then devices) give one level's shards when they divide.
                if items % (parts * 2) == 0 {
                    let inner = shard_range(shards[0].len(), 2, 1);
                    assert_eq!(inner.len(), shard_range(items, parts * 2, 1).len());
                }
            }
        }
    }
}
