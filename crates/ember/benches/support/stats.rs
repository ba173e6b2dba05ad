//! Figures of paired benchmark runs.

/// The `q` quantile of `sorted`, interpolating between neighbours.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    let at = q * (sorted.len() - 1) as f64;
    let (low, high) = (at.floor() as usize, at.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (at - low as f64)
}
