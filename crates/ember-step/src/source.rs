//! Where one device's batches come from.

use crate::Progress;
use crate::error::SourceError;

/// One device's batches: an iterator of `Result<batch, error>` that also reports its progress.
///
/// `E` is the source's own error type; the pool boxes it into a [`SourceError`] and names the
/// device. Burn's `DataLoaderIterator` implements this with the `burn` feature.
pub trait BatchSource<I, E = SourceError>: Iterator<Item = Result<I, E>> {
    /// How far this source has come.
    fn progress(&self) -> Progress;
}

impl<I, E, S> BatchSource<I, E> for Box<S>
where
    S: BatchSource<I, E> + ?Sized,
{
    fn progress(&self) -> Progress {
        (**self).progress()
    }
}

/// A [`BatchSource`] over any iterator of results, counting one item per batch.
///
/// The total is the iterator's exact size hint when it has one, and unknown otherwise.
#[derive(Debug, Clone)]
pub struct IterSource<It> {
    iter: It,
    processed: usize,
    total: Option<usize>,
}

impl<It: Iterator> IterSource<It> {
    /// Wraps an iterator.
    pub fn new(iter: It) -> Self {
        let total = match iter.size_hint() {
            (low, Some(high)) if low == high => Some(low),
            _ => None,
        };
        Self {
            iter,
            processed: 0,
            total,
        }
    }
}

impl<It, I, E> Iterator for IterSource<It>
where
    It: Iterator<Item = Result<I, E>>,
{
    type Item = Result<I, E>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.iter.next();
        if matches!(item, Some(Ok(_))) {
            self.processed += 1;
        }
        item
    }
}

impl<It, I, E> BatchSource<I, E> for IterSource<It>
where
    It: Iterator<Item = Result<I, E>>,
{
    fn progress(&self) -> Progress {
        Progress::new(self.processed, self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_batches_against_the_exact_size() {
        let mut source = IterSource::new((0..3).map(Ok::<_, SourceError>));
        assert_eq!(source.progress(), Progress::new(0, Some(3)));
        source.next();
        source.next();
        assert_eq!(source.progress(), Progress::new(2, Some(3)));
    }

    #[test]
    fn an_iterator_without_exact_size_has_an_unknown_total() {
        let source = IterSource::new((0..10).filter(|i| i % 2 == 0).map(Ok::<_, SourceError>));
        assert_eq!(source.progress().total, None);
    }
}
