//! Figures over rounds: the median with the slowest and the fastest round, one rule for every
//! benchmark of `cargo xtask` (an even count's median is the mean of the middle two).

/// The median, minimum and maximum of a figure's rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    /// Of `values`; `None` when there are none.
    pub(crate) fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut values: Vec<f64> = values.into_iter().collect();
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = match n {
            0 => return None,
            n if n % 2 == 1 => values[n / 2],
            n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
        };
        Some(Self {
            median,
            min: values[0],
            max: values[n - 1],
        })
    }
}

/// The median of `values` (NaN when there are none).
pub(crate) fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    Spread::of(values).map_or(f64::NAN, |spread| spread.median)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_is_the_median_and_the_extremes() {
        let spread = |values: &[f64]| Spread::of(values.iter().copied());
        assert_eq!(
            spread(&[3.0, 1.0, 2.0]),
            Some(Spread {
                median: 2.0,
                min: 1.0,
                max: 3.0
            })
        );
        assert_eq!(spread(&[4.0, 1.0, 2.0, 3.0]).map(|s| s.median), Some(2.5));
        assert_eq!(spread(&[]), None);
        assert!(median([]).is_nan());
    }
}
