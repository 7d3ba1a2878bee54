//! A running fit's progress, for whoever shows it (`neyman train`): the solvers call an
//! [`Observer`] every few steps. It is not a hyper-parameter: every observer equals every
//! other, so two parameter sets that differ only in it describe the same fit.

use std::fmt;
use std::sync::Arc;

/// What a fit reports while it runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FitStep {
    /// A solver's steps so far and its stopping measure, which must fall to `tol`: USMO's
    /// KKT violation max l − min r, τ-FPL's relative duality gap.
    Solver {
        solver: &'static str,
        iterations: u64,
        gap: f64,
        tol: f64,
    },
    /// τ-FPL's ranking-depth search ([`super::rank_tau`]): fits finished, of at most `most`
    /// (a walk over R stops early).
    Search { done: usize, most: usize },
}

/// The callback of a fit; none by default.
#[derive(Clone, Default)]
pub struct Observer(Option<Arc<dyn Fn(FitStep) + Send + Sync>>);

impl Observer {
    pub fn new(report: impl Fn(FitStep) + Send + Sync + 'static) -> Observer {
        Observer(Some(Arc::new(report)))
    }

    /// Passes `step` on, when there is a callback.
    pub fn report(&self, step: FitStep) {
        if let Some(report) = &self.0 {
            report(step);
        }
    }
}

impl PartialEq for Observer {
    fn eq(&self, _: &Observer) -> bool {
        true
    }
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Observer(set)"
        } else {
            "Observer(none)"
        })
    }
}
