//! How work splits between ranks (and again between each rank's devices): data in contiguous
//! shards ([`shard_range`], shared by [`Ranks::shard`](crate::ranks::Ranks::shard) and callers
//! that split data themselves), parameters by element count ([`owners_by_elements`], shared by
//! the rounds and by optimizers split within a rank).

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

/// Which of `parts` owns each item of `sizes` (parameters in visit order, by element count):
/// each item, largest first (ties in visit order), to the part holding the fewest elements so
/// far (the lowest such part). Every rank computes the same split from the same sizes.
pub fn owners_by_elements(sizes: &[usize], parts: usize) -> Vec<usize> {
    let parts = parts.max(1);
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&index| std::cmp::Reverse(sizes[index]));
    let mut load = vec![0usize; parts];
    let mut owners = vec![0; sizes.len()];
    for index in order {
        let part = (0..parts)
            .min_by_key(|&part| (load[part], part))
            .unwrap_or(0);
        load[part] += sizes[index];
        owners[index] = part;
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_balance_elements_largest_first() {
        // 48 to part 0, 24 (the first of the ties) to part 1, then 24 to part 1 (24 < 48),
        // then 1 to part 0 (48 = 48, the lower part).
        assert_eq!(owners_by_elements(&[48, 24, 24, 1], 2), vec![0, 1, 1, 0]);
        assert_eq!(owners_by_elements(&[5, 7], 1), vec![0, 0]);
        assert_eq!(owners_by_elements(&[3, 3, 3], 3), vec![0, 1, 2]);
        // More parts than items: the extra parts own nothing.
        assert_eq!(owners_by_elements(&[9], 4), vec![0]);
    }

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
