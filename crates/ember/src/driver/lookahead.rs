//! A device's slice of an epoch that draws its next batch ahead, so that the driver knows
//! whether a step was the slice's last before the step after it.

use burn::data::dataloader::{DataLoaderIterator, Progress};
use burn::data::dataset::DatasetError;

/// A device's slice of an epoch that can say whether it holds another batch before the step
/// that trains on it: the batch is drawn then, and given to that step. Its progress counts a
/// batch drawn so as taken.
pub(super) struct Lookahead<'d, I> {
    batches: Box<dyn DataLoaderIterator<I> + 'd>,
    drawn: Option<Option<Result<I, DatasetError>>>,
    ended: bool,
}

impl<'d, I> Lookahead<'d, I> {
    pub(super) fn new(batches: Box<dyn DataLoaderIterator<I> + 'd>) -> Self {
        Self {
            batches,
            drawn: None,
            ended: false,
        }
    }

    pub(super) fn has_next(&mut self) -> bool {
        if self.ended {
            return false;
        }
        let batches = &mut self.batches;
        self.drawn.get_or_insert_with(|| batches.next()).is_some()
    }
}

impl<I> Iterator for Lookahead<'_, I> {
    type Item = Result<I, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        let next = match self.drawn.take() {
            Some(drawn) => drawn,
            None => self.batches.next(),
        };
        // The pool polls a slice no more once it ran dry; neither does this (Burn's iterators
        // need not be fused).
        self.ended = next.is_none();
        next
    }
}

impl<I> DataLoaderIterator<I> for Lookahead<'_, I> {
    fn progress(&self) -> Progress {
        DataLoaderIterator::progress(&*self.batches)
    }
}

impl<I> ember_pool::step::BatchSource<I, DatasetError> for Lookahead<'_, I> {
    fn progress(&self) -> ember_pool::step::Progress {
        ember_pool::step::BatchSource::progress(&*self.batches)
    }
}
