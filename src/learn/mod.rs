//! Pure learning maths: kernels, solvers, metrics and models. No I/O, no async.

pub mod calibrate;
pub mod kernel;
pub mod metrics;
pub mod model;
pub mod projection;
pub mod tfpl;
pub mod threshold;
pub mod usmo;

use crate::data::Rows;

/// Anything that turns raw (unscaled) rows into real-valued scores; higher means more positive.
pub trait Scorer {
    /// The feature count the rows must have.
    fn n_features(&self) -> usize;
    /// Writes one score per row into `out` (`out.len() == rows.n_rows()`). Dense input is
    /// scored through reused thread-local buffers, without per-call allocation.
    fn score_batch(&self, rows: &Rows, out: &mut [f64]);
}
