//! Drift detection on the active model's unlabeled scores: a two-sample Kolmogorov–Smirnov
//! test ([`crate::learn::metrics::ks_two_sample`]) between a reference sample and the latest
//! `window` scores, every `every` new scores.
//!
//! The reference is the model's scores on the held-out unlabeled events of its training
//! snapshot (the events its threshold was calibrated beside), topped up by its first scores
//! when those are fewer than `window`; a model installed without a snapshot (resumed,
//! published by a trainer) starts from its first `window` scores. After a detection the
//! reference starts again from the next `window` scores, so one change is detected once, not
//! at every test after it (a reference taken from the recent sample would straddle the
//! change and fire a second time).

use std::collections::VecDeque;

use crate::config::DriftConfig;
use crate::learn::metrics::ks_two_sample;

/// A detected change: the KS statistic and its p-value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Detection {
    pub statistic: f64,
    pub p_value: f64,
}

/// The detector's state; see the module docs.
#[derive(Debug, Clone)]
pub struct ScoreDrift {
    window: usize,
    every: usize,
    p_value: f64,
    reference: Vec<f64>,
    recent: VecDeque<f64>,
    since_test: usize,
}

impl ScoreDrift {
    pub fn new(config: &DriftConfig) -> ScoreDrift {
        ScoreDrift {
            window: config.window.max(2),
            every: config.every.max(1),
            p_value: config.p_value,
            reference: Vec::new(),
            recent: VecDeque::new(),
            since_test: 0,
        }
    }

    /// A new active model: `reference` holds its scores on events like the ones it will score
    /// (at most the newest `window` are kept), or nothing.
    pub fn reset(&mut self, mut reference: Vec<f64>) {
        let excess = reference.len().saturating_sub(self.window);
        reference.drain(..excess);
        self.reference = reference;
        self.recent.clear();
        self.since_test = 0;
    }

    /// One unlabeled score of the active model; a detection when this score completes a
    /// test that rejects.
    pub fn observe(&mut self, score: f64) -> Option<Detection> {
        if !score.is_finite() {
            return None;
        }
        if self.reference.len() < self.window {
            self.reference.push(score);
            return None;
        }
        if self.recent.len() == self.window {
            self.recent.pop_front();
        }
        self.recent.push_back(score);
        self.since_test += 1;
        if self.recent.len() < self.window || self.since_test < self.every {
            return None;
        }
        self.since_test = 0;
        let (statistic, p_value) = ks_two_sample(&self.reference, self.recent.make_contiguous())?;
        if p_value >= self.p_value {
            return None;
        }
        self.reset(Vec::new());
        Some(Detection { statistic, p_value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detector() -> ScoreDrift {
        ScoreDrift::new(&DriftConfig {
            enabled: true,
            window: 200,
            every: 50,
            p_value: 1e-4,
        })
    }

    /// Deterministic uniforms in [0, 1).
    fn uniforms(seed: u64) -> impl FnMut() -> f64 {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A shift of the scores by half their range is detected within one window, once; the
    /// same stream without the shift gives no detection in 20 000 scores (400 tests at
    /// p < 1e-4: an expected 0.04 false alarms).
    #[test]
    fn a_shift_is_detected_once_and_a_steady_stream_not_at_all() {
        let mut steady = detector();
        let mut u = uniforms(7);
        steady.reset((0..200).map(|_| u()).collect());
        assert!((0..20_000).all(|_| steady.observe(u()).is_none()));

        let mut d = detector();
        let mut u = uniforms(8);
        d.reset(Vec::new());
        let before: Vec<Option<Detection>> = (0..1000).map(|_| d.observe(u())).collect();
        assert!(before.iter().all(Option::is_none));
        let after: Vec<usize> = (0..2000)
            .filter_map(|i| d.observe(u() + 0.5).map(|_| i))
            .collect();
        assert_eq!(after.len(), 1, "{after:?}");
        assert!(after[0] < 200, "detected after {} shifted scores", after[0]);
    }

    #[test]
    fn a_reference_longer_than_the_window_keeps_its_newest_scores() {
        let mut d = detector();
        d.reset((0..500).map(f64::from).collect());
        assert_eq!(d.reference.len(), 200);
        assert_eq!(d.reference[0], 300.0);
        assert!(d.observe(f64::NAN).is_none());
        assert!(d.recent.is_empty());
    }
}
