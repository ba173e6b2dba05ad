//! Progress of one batch source and of all of them together.

/// How far one batch source has come: items processed so far, out of a total if it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Items (examples, not batches, where the source knows them) handed out so far.
    pub items_processed: usize,
    /// The number of items the source will hand out in all, if known.
    pub total: Option<usize>,
}

impl Progress {
    /// Progress with a known or unknown total.
    pub fn new(items_processed: usize, total: Option<usize>) -> Self {
        Self {
            items_processed,
            total,
        }
    }

    /// The fraction done in `[0, 1]`, or `None` when the total is unknown.
    /// An empty source (total 0) is complete.
    pub fn fraction(&self) -> Option<f64> {
        self.total.map(|total| {
            if total == 0 {
                1.0
            } else {
                (self.items_processed as f64 / total as f64).min(1.0)
            }
        })
    }
}

/// The progress of every source of a pool together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AggregateProgress {
    /// Items processed by all sources, and their total: unknown as soon as one source's total is.
    pub progress: Progress,
    /// How many sources there are.
    pub sources: usize,
    /// How many of them are exhausted. Exhausted sources still count in `progress`.
    pub exhausted: usize,
}

impl AggregateProgress {
    /// Sums the progress of several sources, each given with whether it is exhausted.
    ///
    /// Counts add up; the total is known only if every source's total is known.
    pub fn aggregate<I>(sources: I) -> Self
    where
        I: IntoIterator<Item = (Progress, bool)>,
    {
        let mut aggregate = Self {
            progress: Progress::new(0, Some(0)),
            sources: 0,
            exhausted: 0,
        };
        for (progress, exhausted) in sources {
            aggregate.sources += 1;
            aggregate.exhausted += usize::from(exhausted);
            aggregate.progress.items_processed += progress.items_processed;
            aggregate.progress.total = match (aggregate.progress.total, progress.total) {
                (Some(sum), Some(total)) => Some(sum + total),
                _ => None,
            };
        }
        aggregate
    }

    /// Whether every source is exhausted (true for no sources at all).
    pub fn all_exhausted(&self) -> bool {
        self.exhausted == self.sources
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_totals_add_up_and_exhausted_sources_are_counted() {
        let aggregate = AggregateProgress::aggregate([
            (Progress::new(10, Some(10)), true),
            (Progress::new(4, Some(12)), false),
        ]);
        assert_eq!(aggregate.progress, Progress::new(14, Some(22)));
        assert_eq!((aggregate.sources, aggregate.exhausted), (2, 1));
        assert!(!aggregate.all_exhausted());
    }

    #[test]
    fn one_unknown_total_makes_the_total_unknown() {
        let aggregate = AggregateProgress::aggregate([
            (Progress::new(3, None), false),
            (Progress::new(5, Some(8)), true),
        ]);
        assert_eq!(aggregate.progress, Progress::new(8, None));
        assert_eq!(aggregate.progress.fraction(), None);
    }

    #[test]
    fn no_sources_is_an_empty_finished_epoch() {
        let aggregate = AggregateProgress::aggregate(std::iter::empty());
        assert_eq!(aggregate.progress, Progress::new(0, Some(0)));
        assert!(aggregate.all_exhausted());
        assert_eq!(aggregate.progress.fraction(), Some(1.0));
    }
}
