//! Ranks drawn from a Zipf distribution: the skewed key streams of the summary of refused keys'
//! tests and bench.

use crate::rng::Rng;

/// Ranks `0..keys`, rank `r` drawn with weight `1 / (r + 1)^s`.
pub struct Zipf {
    /// The running sums of the weights.
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(keys: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(keys);
        let mut sum = 0.0f64;
        for rank in 1..=keys {
            sum += 1.0 / (rank as f64).powf(s);
            cdf.push(sum);
        }
        Zipf { cdf }
    }

    /// One rank, 0 the likeliest.
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let sum = self.cdf.last().copied().unwrap_or(0.0);
        let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * sum;
        self.cdf
            .partition_point(|&c| c < u)
            .min(self.cdf.len().saturating_sub(1))
    }
}
