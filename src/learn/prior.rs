//! The positive share π of unlabeled data, bounded from held-out scores (docs/certificates.md
//! §5 has the arguments).
//!
//! With a scorer that saw neither sample, F_U(t) (the share of unlabeled rows scored above t)
//! and TPR(t) (the share of labelled positives above t) satisfy, under SCAR,
//! F_U(t) = π·TPR(t) + (1 − π)·FPR(t). Both are estimated uniformly in t with one-sided
//! Dvoretzky–Kiefer–Wolfowitz bands (Massart's constant): P(sup_t (F̂ − F) > ε) ≤ exp(−2nε²).
//!
//! - **Upper end, no assumption.** FPR ≥ 0 gives π ≤ F_U(t)/TPR(t) for every t, so
//!   π ≤ inf_t (F̂_U(t) + ε_U)/(F̂_P(t) − ε_P) with probability ≥ 1 − δ (δ/2 per band).
//! - **Lower end, under the anchor assumption.** The top `anchor` share of the positives'
//!   scores holds no negatives: FPR(t₀) = 0 where TPR(t₀) = anchor. Then F_U(t) = π·TPR(t) for
//!   every t above t₀, so π ≥ (F̂_U(t) − ε_U)/(F̂_P(t) + ε_P) at every t the bands place above
//!   t₀ (F̂_P(t) + ε_P < anchor), with probability ≥ 1 − δ. Without an anchor's size the same
//!   expression would have to be minimised over every t, which is ≤ 0 at the top of the
//!   scores: no bound at all. When the assumption fails (negatives among the top-scored
//!   positives), the bound can land above π.
//! - **Estimate.** F̂_U(t)/F̂_P(t) where F̂_P(t) is closest to `anchor` (the anchor's edge: the
//!   most positives for the least bias under the assumption).

/// Bounds on π and the settings they were computed with.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PriorBounds {
    pub estimate: f64,
    /// Valid under the anchor assumption with [`PriorBounds::anchor`].
    pub lower: f64,
    /// Valid under SCAR alone.
    pub upper: f64,
    /// The probability that [lower, upper] misses π (δ/2 per end).
    pub delta: f64,
    pub anchor: f64,
    pub n_positive: usize,
    pub n_unlabeled: usize,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PriorError {
    #[error("no {0} scores to bound the prior with")]
    Empty(&'static str),
    #[error("{what} score #{index} (counting from 0) is not finite: {value}")]
    NonFinite {
        what: &'static str,
        index: usize,
        value: f64,
    },
    #[error("the prior's delta must be in (0, 1), got {0}")]
    Delta(f64),
    #[error("the anchor share must be in (0, 1], got {0}")]
    Anchor(f64),
}

/// ε of a one-sided DKW band over `n` draws at level `delta`: √(ln(1/δ)/(2n)).
pub fn dkw_epsilon(n: usize, delta: f64) -> f64 {
    ((1.0 / delta).ln() / (2.0 * n as f64)).sqrt()
}

/// Ascending copy; `what` names the sample in errors.
fn sorted_checked(scores: &[f64], what: &'static str) -> Result<Vec<f64>, PriorError> {
    if scores.is_empty() {
        return Err(PriorError::Empty(what));
    }
    if let Some((index, &value)) = scores.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(PriorError::NonFinite { what, index, value });
    }
    let mut s = scores.to_vec();
    s.sort_unstable_by(f64::total_cmp);
    Ok(s)
}

/// (F̂_P(t), F̂_U(t)) at every threshold where either changes: t = each distinct score, plus
/// t below all (both 1). Shares of scores strictly above t.
fn curve(positives: &[f64], unlabeled: &[f64]) -> Vec<(f64, f64)> {
    let (n_p, n_u) = (positives.len() as f64, unlabeled.len() as f64);
    let mut thresholds: Vec<f64> = positives.iter().chain(unlabeled).copied().collect();
    thresholds.sort_unstable_by(f64::total_cmp);
    thresholds.dedup();
    let above = |s: &[f64], t: f64| (s.len() - s.partition_point(|&v| v <= t)) as f64;
    let mut out = vec![(1.0, 1.0)];
    out.extend(
        thresholds
            .iter()
            .map(|&t| (above(positives, t) / n_p, above(unlabeled, t) / n_u)),
    );
    out
}

/// Bounds on π from held-out positive and unlabeled scores (see the module docs): the whole
/// interval holds with probability ≥ 1 − `delta` under SCAR and the anchor assumption with
/// share `anchor`; the upper end alone holds with probability ≥ 1 − `delta`/2 under SCAR.
pub fn prior_bounds(
    positive_scores: &[f64],
    unlabeled_scores: &[f64],
    delta: f64,
    anchor: f64,
) -> Result<PriorBounds, PriorError> {
    if !(delta > 0.0 && delta < 1.0) {
        return Err(PriorError::Delta(delta));
    }
    if !(anchor > 0.0 && anchor <= 1.0) {
        return Err(PriorError::Anchor(anchor));
    }
    let positives = sorted_checked(positive_scores, "positive")?;
    let unlabeled = sorted_checked(unlabeled_scores, "unlabeled")?;
    // δ/2 per end, δ/4 per one-sided band.
    let eps_p = dkw_epsilon(positives.len(), delta / 4.0);
    let eps_u = dkw_epsilon(unlabeled.len(), delta / 4.0);
    let curve = curve(&positives, &unlabeled);
    let upper = curve
        .iter()
        .filter(|(tpr, _)| *tpr - eps_p > 0.0)
        .map(|(tpr, f)| (f + eps_u) / (tpr - eps_p))
        .fold(1.0_f64, f64::min);
    let lower = curve
        .iter()
        .filter(|(tpr, _)| tpr + eps_p < anchor)
        .map(|(tpr, f)| (f - eps_u) / (tpr + eps_p))
        .fold(0.0_f64, f64::max)
        .min(upper);
    let at_edge = curve
        .iter()
        .filter(|(tpr, _)| *tpr > 0.0)
        .min_by(|a, b| (a.0 - anchor).abs().total_cmp(&(b.0 - anchor).abs()))
        .map_or(upper, |(tpr, f)| f / tpr);
    Ok(PriorBounds {
        estimate: at_edge.clamp(lower, upper),
        lower,
        upper,
        delta,
        anchor,
        n_positive: positives.len(),
        n_unlabeled: unlabeled.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A positive scores uniform on [0, 1], a negative uniform on [−0.3, neg_top − 0.3]: with
    /// `neg_top` 0.8 the positives above 0.5 (half of them) are an anchor, with 1.3 there is
    /// none.
    fn draw(
        rng: &mut ChaCha8Rng,
        pi: f64,
        n_p: usize,
        n_u: usize,
        neg_top: f64,
    ) -> (Vec<f64>, Vec<f64>) {
        let positive = |rng: &mut ChaCha8Rng| rng.gen::<f64>();
        let negative = |rng: &mut ChaCha8Rng| rng.gen::<f64>() * neg_top - 0.3;
        let p: Vec<f64> = (0..n_p).map(|_| positive(rng)).collect();
        let u: Vec<f64> = (0..n_u)
            .map(|_| {
                if rng.gen::<f64>() < pi {
                    positive(rng)
                } else {
                    negative(rng)
                }
            })
            .collect();
        (p, u)
    }

    /// Negatives below 0.5 (the top half of the positives is an anchor): over 2 000 draws
    /// the interval misses π no more often than δ allows, and it is informative.
    #[test]
    fn the_interval_holds_under_its_assumption_and_is_informative() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (pi, delta, draws) = (0.3, 0.1, 2000);
        let (mut misses, mut width) = (0, 0.0);
        for _ in 0..draws {
            let (p, u) = draw(&mut rng, pi, 300, 2000, 0.8);
            let b = prior_bounds(&p, &u, delta, 0.4).unwrap();
            assert!(b.lower <= b.estimate && b.estimate <= b.upper, "{b:?}");
            if !(b.lower <= pi && pi <= b.upper) {
                misses += 1;
            }
            width += b.upper - b.lower;
        }
        let share = misses as f64 / draws as f64;
        let se = (delta * (1.0 - delta) / draws as f64).sqrt();
        assert!(share <= delta + 3.0 * se, "missed π in {share} of draws");
        let mean_width = width / draws as f64;
        assert!(mean_width < 0.4, "mean width {mean_width}");
    }

    /// The upper end needs no assumption: with negatives reaching the top of the positives'
    /// scores it still holds; the lower end may then exceed π, and says so only by its doc.
    #[test]
    fn the_upper_end_holds_without_an_anchor() {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let (pi, delta, draws) = (0.3, 0.1, 2000);
        let mut misses = 0;
        for _ in 0..draws {
            let (p, u) = draw(&mut rng, pi, 300, 2000, 1.3);
            let b = prior_bounds(&p, &u, delta, 0.4).unwrap();
            if b.upper < pi {
                misses += 1;
            }
        }
        let share = misses as f64 / draws as f64;
        let se = (delta / 2.0 * (1.0 - delta / 2.0) / draws as f64).sqrt();
        assert!(share <= delta / 2.0 + 3.0 * se, "upper below π in {share}");
    }

    #[test]
    fn bad_input_is_named() {
        assert_eq!(
            prior_bounds(&[], &[1.0], 0.1, 0.5),
            Err(PriorError::Empty("positive"))
        );
        assert!(matches!(
            prior_bounds(&[1.0, f64::NAN], &[1.0], 0.1, 0.5),
            Err(PriorError::NonFinite { index: 1, .. })
        ));
        assert_eq!(
            prior_bounds(&[1.0], &[1.0], 1.0, 0.5),
            Err(PriorError::Delta(1.0))
        );
        assert_eq!(
            prior_bounds(&[1.0], &[1.0], 0.1, 0.0),
            Err(PriorError::Anchor(0.0))
        );
    }
}
