//! Pure learning maths: kernels, solvers, metrics and models. No I/O, no async.

pub mod calibrate;
pub mod kernel;
pub mod linsvm;
pub mod metrics;
pub mod model;
pub mod observe;
pub mod online;
pub mod prior;
pub mod projection;
pub mod rank_tau;
pub mod s3vm;
pub mod spec;
pub mod tfpl;
pub mod threshold;
pub mod tune;
pub mod usmo;

use crate::data::Rows;

/// `Ok` when `value` is finite and > 0, else the message naming the parameter.
pub(crate) fn positive_finite(name: &str, value: f64) -> Result<(), String> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(format!("{name} must be finite and > 0, got {value}"))
    }
}

/// Anything that turns raw (unscaled) rows into real-valued scores; higher means more positive.
pub trait Scorer {
    /// The feature count the rows must have.
    fn n_features(&self) -> usize;
    /// Writes one score per row into `out` (`out.len() == rows.n_rows()`). Dense input is
    /// scored through reused thread-local buffers, without per-call allocation.
    fn score_batch(&self, rows: &Rows, out: &mut [f64]);
}
