//! Drift detection on the active model's unlabeled scores: a two-sample Kolmogorov–Smirnov
//! test ([`crate::learn::metrics::ks_two_sample_sorted`]) between a reference sample and the latest
//! `window` scores, every `every` new scores ([`ScoreDrift`]); and on the unlabeled events'
//! feature means: Welch's z per feature, Bonferroni-adjusted
//! ([`crate::learn::metrics::largest_mean_shift`]), between the same reference events and the
//! latest `window` events ([`FeatureDrift`]). A covariate shift along a direction the model
//! ignores moves no score but can make its next retrain (and its certificate's calibration
//! events) differ.
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
use crate::data::{RowRef, Rows};
use crate::learn::metrics::{ks_two_sample_sorted, largest_mean_shift, Moments};
use crate::stream::event::Features;

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
    /// Sorted ascending once it holds `window` scores (the tests need it sorted; it does not
    /// change until the next reset).
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
        self.sort_full_reference();
        self.recent.clear();
        self.since_test = 0;
    }

    fn sort_full_reference(&mut self) {
        if self.reference.len() == self.window {
            self.reference.sort_by(f64::total_cmp);
        }
    }

    /// One unlabeled score of the active model; a detection when this score completes a
    /// test that rejects.
    pub fn observe(&mut self, score: f64) -> Option<Detection> {
        if !score.is_finite() {
            return None;
        }
        if self.reference.len() < self.window {
            self.reference.push(score);
            self.sort_full_reference();
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
        let mut recent: Vec<f64> = self.recent.iter().copied().collect();
        recent.sort_by(f64::total_cmp);
        let (statistic, p_value) = ks_two_sample_sorted(&self.reference, &recent)?;
        if p_value >= self.p_value {
            return None;
        }
        self.reset(Vec::new());
        Some(Detection { statistic, p_value })
    }
}

/// A detected shift of one feature's mean: the feature, Welch's z and the Bonferroni-adjusted
/// p-value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeatureDetection {
    pub feature: usize,
    pub z: f64,
    pub p_value: f64,
}

/// Sums of the features of a sample of events, for their [`Moments`].
#[derive(Debug, Clone, Default)]
struct Sums {
    n: usize,
    sum: Vec<f64>,
    sum_sq: Vec<f64>,
}

impl Sums {
    fn add(&mut self, row: RowRef<'_>) {
        let width = match row {
            RowRef::Dense(values) => values.len(),
            RowRef::Sparse { indices, .. } => indices.last().map_or(0, |&j| j as usize + 1),
        };
        if self.sum.len() < width {
            self.sum.resize(width, 0.0);
            self.sum_sq.resize(width, 0.0);
        }
        match row {
            RowRef::Dense(values) => {
                for ((s, q), &v) in self.sum.iter_mut().zip(&mut self.sum_sq).zip(values) {
                    *s += v;
                    *q += v * v;
                }
            }
            RowRef::Sparse { indices, values } => {
                for (&j, &v) in indices.iter().zip(values) {
                    self.sum[j as usize] += v;
                    self.sum_sq[j as usize] += v * v;
                }
            }
        }
        self.n += 1;
    }

    fn moments(&self, dim: usize) -> Moments {
        let n = self.n.max(1) as f64;
        let at = |v: &Vec<f64>, j: usize| v.get(j).copied().unwrap_or(0.0);
        let mean: Vec<f64> = (0..dim).map(|j| at(&self.sum, j) / n).collect();
        let var = (0..dim)
            .map(|j| (at(&self.sum_sq, j) / n - mean[j] * mean[j]).max(0.0))
            .collect();
        Moments {
            n: self.n as f64,
            mean,
            var,
        }
    }
}

/// An event's features as a row.
fn row_of(x: &Features) -> RowRef<'_> {
    match x {
        Features::Dense(values) => RowRef::Dense(values),
        Features::Sparse {
            indices, values, ..
        } => RowRef::Sparse { indices, values },
    }
}

/// The feature-means detector; its reference and recent samples are kept as [`ScoreDrift`]'s,
/// with events for scores. The recent sums are recomputed from the kept events at each test,
/// so subtracting the events that leave accumulates no rounding.
#[derive(Debug, Clone)]
pub struct FeatureDrift {
    window: usize,
    every: usize,
    p_value: f64,
    dim: usize,
    reference: Sums,
    recent: VecDeque<Features>,
    since_test: usize,
}

impl FeatureDrift {
    pub fn new(config: &DriftConfig) -> FeatureDrift {
        FeatureDrift {
            window: config.window.max(2),
            every: config.every.max(1),
            p_value: config.p_value,
            dim: 0,
            reference: Sums::default(),
            recent: VecDeque::new(),
            since_test: 0,
        }
    }

    /// A new active model: `reference` holds the rows of events like the ones it will score
    /// (the newest `window` of them, in time order), or `None`: its first `window` events.
    pub fn reset(&mut self, reference: Option<(&Rows, &[usize])>) {
        self.reference = Sums::default();
        if let Some((rows, indices)) = reference {
            self.dim = self.dim.max(rows.n_features());
            for &i in &indices[indices.len().saturating_sub(self.window)..] {
                self.reference.add(rows.row(i));
            }
        }
        self.recent.clear();
        self.since_test = 0;
    }

    /// One unlabeled event; a detection when it completes a test that rejects.
    pub fn observe(&mut self, x: &Features) -> Option<FeatureDetection> {
        self.dim = self.dim.max(x.dim());
        if self.reference.n < self.window {
            self.reference.add(row_of(x));
            return None;
        }
        // The features of the event leaving the sample are overwritten in place: a copy per
        // event was an allocation and a free on the engine's thread.
        let leaving = if self.recent.len() == self.window {
            self.recent.pop_front()
        } else {
            None
        };
        let kept = match (leaving, x) {
            (Some(Features::Dense(mut values)), Features::Dense(new)) => {
                values.clear();
                values.extend_from_slice(new);
                Features::Dense(values)
            }
            _ => x.clone(),
        };
        self.recent.push_back(kept);
        self.since_test += 1;
        if self.recent.len() < self.window || self.since_test < self.every {
            return None;
        }
        self.since_test = 0;
        let mut recent = Sums::default();
        for x in &self.recent {
            recent.add(row_of(x));
        }
        let (feature, z, p_value) =
            largest_mean_shift(&self.reference.moments(self.dim), &recent.moments(self.dim))?;
        if p_value >= self.p_value {
            return None;
        }
        self.reset(None);
        Some(FeatureDetection {
            feature,
            z,
            p_value,
        })
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
            features: true,
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

    fn feature_detector() -> FeatureDrift {
        FeatureDrift::new(&DriftConfig {
            enabled: true,
            window: 300,
            every: 50,
            p_value: 1e-4,
            features: true,
        })
    }

    /// Two features: one uniform, one heavy-tailed (a Pareto-like 1/u^0.4, finite variance)
    /// and sparse-ish, as count features are.
    fn event(u: &mut impl FnMut() -> f64, shift: f64) -> Features {
        let heavy = if u() < 0.3 {
            1.0 / u().max(1e-9).powf(0.4)
        } else {
            0.0
        };
        Features::Dense(vec![u() + shift, heavy])
    }

    /// The same reference from snapshot rows or from the first events; a steady stream of
    /// 20 000 events raises no alarm (400 tests), a shift of one feature's mean by 0.7 of
    /// its spread is found within a window, once.
    #[test]
    fn a_feature_mean_shift_is_detected_once_and_a_steady_stream_not_at_all() {
        let mut u = uniforms(3);
        let reference: Vec<Features> = (0..300).map(|_| event(&mut u, 0.0)).collect();
        let rows = Rows::dense(
            ndarray::Array2::from_shape_vec(
                (300, 2),
                reference
                    .iter()
                    .flat_map(|x| match x {
                        Features::Dense(v) => v.clone(),
                        Features::Sparse { .. } => Vec::new(),
                    })
                    .collect(),
            )
            .expect("shape"),
        );
        let indices: Vec<usize> = (0..300).collect();
        let mut steady = feature_detector();
        steady.reset(Some((&rows, &indices)));
        assert_eq!(steady.reference.n, 300);
        assert!((0..20_000).all(|_| steady.observe(&event(&mut u, 0.0)).is_none()));

        let mut d = feature_detector();
        d.reset(None);
        assert!((0..1000).all(|_| d.observe(&event(&mut u, 0.0)).is_none()));
        let found: Vec<(usize, FeatureDetection)> = (0..2000)
            .filter_map(|i| d.observe(&event(&mut u, 0.2)).map(|x| (i, x)))
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        let (at, detection) = found[0];
        assert!(at < 300, "detected after {at} shifted events");
        assert_eq!(detection.feature, 0);
        assert!(detection.z > 0.0 && detection.p_value < 1e-4);
    }

    /// Sparse events: a feature that appears in the recent events only is a shift; one that
    /// stays constant is not compared.
    #[test]
    fn sparse_events_are_compared_on_their_present_features() {
        let mut d = FeatureDrift::new(&DriftConfig {
            enabled: true,
            window: 50,
            every: 50,
            p_value: 1e-4,
            features: true,
        });
        let sparse = |j: u32, v: f64| Features::Sparse {
            dim: 10,
            indices: vec![2, j],
            values: vec![1.0, v],
        };
        d.reset(None);
        assert!((0..100).all(|i| d.observe(&sparse(5, f64::from(i % 3))).is_none()));
        let found: Vec<FeatureDetection> =
            (0..50).filter_map(|_| d.observe(&sparse(7, 1.0))).collect();
        assert_eq!(found.len(), 1);
        assert!(found[0].feature == 5 || found[0].feature == 7, "{found:?}");
    }
}
