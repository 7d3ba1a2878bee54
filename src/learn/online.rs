//! The streaming baseline users run today (River's `StandardScaler | LogisticRegression` with
//! a `RollingQuantile` threshold): an online logistic regression by plain SGD on online
//! standardised features, flagging a score above the (1 − τ) quantile of the last `window`
//! negatives' scores. `neyman replay --baseline online-lr` runs it on the same stream as the
//! daemon, so the two are compared in one run (issue 20's targets).
//!
//! It certifies nothing: the quantile is of scores the model produced while learning from the
//! very same negatives, and it lags a drift by up to `window` negatives.

use std::collections::VecDeque;

/// River's default SGD step for `LogisticRegression` (weights and intercept alike).
pub const DEFAULT_LEARNING_RATE: f64 = 0.01;

/// Welford running mean and variance per feature, as River's `StandardScaler`.
#[derive(Debug, Clone)]
struct RunningScaler {
    count: f64,
    mean: Vec<f64>,
    /// Sum of squared deviations.
    m2: Vec<f64>,
}

impl RunningScaler {
    fn new(dim: usize) -> RunningScaler {
        RunningScaler {
            count: 0.0,
            mean: vec![0.0; dim],
            m2: vec![0.0; dim],
        }
    }

    fn learn(&mut self, x: &[f64]) {
        self.count += 1.0;
        for ((m, s), &v) in self.mean.iter_mut().zip(&mut self.m2).zip(x) {
            let delta = v - *m;
            *m += delta / self.count;
            *s += delta * (v - *m);
        }
    }

    /// `x` standardised into `out`; a feature without spread yet maps to 0.
    fn transform(&self, x: &[f64], out: &mut Vec<f64>) {
        out.clear();
        out.extend(self.mean.iter().zip(&self.m2).zip(x).map(|((m, s), &v)| {
            let var = if self.count > 0.0 {
                s / self.count
            } else {
                0.0
            };
            if var > 0.0 {
                (v - m) / var.sqrt()
            } else {
                0.0
            }
        }));
    }
}

/// Logistic regression learned one labelled row at a time by SGD on the log loss.
#[derive(Debug, Clone)]
pub struct OnlineLogistic {
    scaler: RunningScaler,
    weights: Vec<f64>,
    intercept: f64,
    learning_rate: f64,
    scratch: Vec<f64>,
}

impl OnlineLogistic {
    pub fn new(dim: usize, learning_rate: f64) -> OnlineLogistic {
        OnlineLogistic {
            scaler: RunningScaler::new(dim),
            weights: vec![0.0; dim],
            intercept: 0.0,
            learning_rate,
            scratch: Vec::with_capacity(dim),
        }
    }

    pub fn dim(&self) -> usize {
        self.weights.len()
    }

    /// The decision value wᵀz + b of the standardised row (monotone in P(y = 1 | x)).
    pub fn score(&mut self, x: &[f64]) -> f64 {
        self.scaler.transform(x, &mut self.scratch);
        self.linear()
    }

    fn linear(&self) -> f64 {
        self.weights
            .iter()
            .zip(&self.scratch)
            .map(|(w, z)| w * z)
            .sum::<f64>()
            + self.intercept
    }

    /// One SGD step on (x, positive): the scaler learns x first, as River's pipeline does.
    pub fn learn(&mut self, x: &[f64], positive: bool) {
        self.scaler.learn(x);
        self.scaler.transform(x, &mut self.scratch);
        let p = 1.0 / (1.0 + (-self.linear()).exp());
        let gradient = p - f64::from(u8::from(positive));
        for (w, z) in self.weights.iter_mut().zip(&self.scratch) {
            *w -= self.learning_rate * gradient * z;
        }
        self.intercept -= self.learning_rate * gradient;
    }
}

/// The (⌊τn⌋ + 1)-th largest of the last `window` values: a threshold that the window's own
/// values exceed at a rate ≤ τ (as [`crate::learn::threshold::quantile_threshold`]).
#[derive(Debug, Clone)]
pub struct RollingQuantile {
    tau: f64,
    window: usize,
    order: VecDeque<f64>,
    sorted: Vec<f64>,
}

impl RollingQuantile {
    pub fn new(tau: f64, window: usize) -> RollingQuantile {
        RollingQuantile {
            tau,
            window: window.max(1),
            order: VecDeque::new(),
            sorted: Vec::new(),
        }
    }

    pub fn push(&mut self, value: f64) {
        if self.order.len() == self.window {
            if let Some(old) = self.order.pop_front() {
                let at = self.sorted.partition_point(|v| v.total_cmp(&old).is_lt());
                self.sorted.remove(at);
            }
        }
        self.order.push_back(value);
        let at = self.sorted.partition_point(|v| v.total_cmp(&value).is_lt());
        self.sorted.insert(at, value);
    }

    /// `None` before the first value.
    pub fn threshold(&self) -> Option<f64> {
        let n = self.sorted.len();
        if n == 0 {
            return None;
        }
        let k = ((self.tau * n as f64 + 1e-9).floor() as usize + 1).clamp(1, n);
        Some(self.sorted[n - k])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::threshold::quantile_threshold;

    #[test]
    fn the_rolling_quantile_is_the_windows_quantile_threshold() {
        let mut q = RollingQuantile::new(0.1, 50);
        assert_eq!(q.threshold(), None);
        let mut state = 12345u64;
        let mut all = Vec::new();
        for _ in 0..400 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let v = (state % 1000) as f64 / 7.0;
            q.push(v);
            all.push(v);
            let window = &all[all.len().saturating_sub(50)..];
            assert_eq!(q.threshold(), quantile_threshold(window, 0.1).ok());
        }
    }

    #[test]
    fn online_logistic_regression_separates_two_shifted_classes() {
        let mut lr = OnlineLogistic::new(2, DEFAULT_LEARNING_RATE);
        let mut state = 7u64;
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for i in 0..4000 {
            let positive = i % 2 == 0;
            let shift = if positive { 1.0 } else { -1.0 };
            let x = [shift + uniform() - 0.5, uniform()];
            lr.learn(&x, positive);
        }
        assert!(lr.score(&[1.0, 0.5]) > 0.0);
        assert!(lr.score(&[-1.0, 0.5]) < 0.0);
        assert!(
            lr.weights[0] > 10.0 * lr.weights[1].abs(),
            "{:?}",
            lr.weights
        );
    }
}
