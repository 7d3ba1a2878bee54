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
//! - **Lower end, under the anchor assumption.** No negative scores above the anchor threshold
//!   t_a, the score above which the top `anchor` share of the scorer's *training* positives lie
//!   ([`Anchor`]; fixed before any held-out score is seen): FPR(t_a) = 0, so
//!   F_U(t_a) = π·TPR(t_a) and π ≥ F_U⁻(t_a)/TPR⁺(t_a) with one-sided Clopper–Pearson limits at
//!   δ/4 each, with probability ≥ 1 − δ/2. One fixed threshold needs no uniform band, so the
//!   limits are binomial (about √(p(1 − p)/n) wide rather than DKW's √(ln(4/δ)/(2n))). Without an
//!   anchor the ratio would have to be minimised over every t, which is ≤ 0 at the top of the
//!   scores: no bound at all. When the assumption fails (negatives above t_a), the bound can
//!   land above π.
//! - **Estimate.** F̂_U(t_a)/F̂_P(t_a), kept inside the bounds.
//!
//! [`bounds_from_held_out`] trains a scorer on some rows and bounds π from others' scores
//! (`neyman prior`); [`resolve_training_prior`] uses it on the scorer's training rows alone for
//! the π needed before training when an end of the prior interval is `auto`.

use std::sync::atomic::AtomicBool;

use crate::data::{Dataset, Label, ScaleKind};
use crate::learn::spec::{
    training_rows, AlgorithmSpec, Fit, KernelKind, KernelSpec, LearnerSpec, RankTau, Reg,
    SolverLimits, SpecError, TfplSpec,
};
use crate::learn::tfpl::TfplSolver;
use crate::learn::threshold::{
    calibration_split, clopper_pearson_lower, clopper_pearson_upper, ThresholdError,
    ThresholdMethod,
};

/// The lower end's anchor: the `share` of the scorer's training positives whose scores lie above
/// `threshold` (t_a), which the anchor assumption says no negative reaches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Anchor {
    pub share: f64,
    pub threshold: f64,
}

impl Anchor {
    /// t_a from the scorer's training positives' scores: the ⌈(1 − share)·n⌉-th smallest, so
    /// that about `share` of them lie above it (−∞ when `share` is 1). Training scores are
    /// in-sample, usually higher than held-out ones, so t_a tends to sit above the held-out
    /// positives' own `share` quantile: the assumption it encodes is then only weaker.
    pub fn from_training(
        training_positive_scores: &[f64],
        share: f64,
    ) -> Result<Anchor, PriorError> {
        if !(share > 0.0 && share <= 1.0) {
            return Err(PriorError::Anchor(share));
        }
        let sorted = sorted_checked(training_positive_scores, "training positive")?;
        let at_or_below = ((1.0 - share) * sorted.len() as f64).ceil() as usize;
        let threshold = match at_or_below.checked_sub(1) {
            Some(i) => sorted[i.min(sorted.len() - 1)],
            None => f64::NEG_INFINITY,
        };
        Ok(Anchor { share, threshold })
    }
}

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
    /// t_a of [`Anchor`].
    pub anchor_threshold: f64,
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
    #[error("the scorer that bounds the prior: {0}")]
    Scorer(#[from] SpecError),
    #[error(transparent)]
    Split(#[from] ThresholdError),
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
/// interval holds with probability ≥ 1 − `delta` under SCAR and the anchor assumption at
/// `anchor`; the upper end alone holds with probability ≥ 1 − `delta`/2 under SCAR.
pub fn prior_bounds(
    positive_scores: &[f64],
    unlabeled_scores: &[f64],
    delta: f64,
    anchor: Anchor,
) -> Result<PriorBounds, PriorError> {
    if !(delta > 0.0 && delta < 1.0) {
        return Err(PriorError::Delta(delta));
    }
    let positives = sorted_checked(positive_scores, "positive")?;
    let unlabeled = sorted_checked(unlabeled_scores, "unlabeled")?;
    // δ/2 per end, δ/4 per one-sided band or limit.
    let eps_p = dkw_epsilon(positives.len(), delta / 4.0);
    let eps_u = dkw_epsilon(unlabeled.len(), delta / 4.0);
    let upper = curve(&positives, &unlabeled)
        .iter()
        .filter(|(tpr, _)| *tpr - eps_p > 0.0)
        .map(|(tpr, f)| (f + eps_u) / (tpr - eps_p))
        .fold(1.0_f64, f64::min);
    let (n_p, n_u) = (positives.len(), unlabeled.len());
    let above = |s: &[f64]| s.len() - s.partition_point(|&v| v <= anchor.threshold);
    let (x_p, x_u) = (above(&positives), above(&unlabeled));
    let tpr_upper = clopper_pearson_upper(x_p, n_p, delta / 4.0);
    let lower = (clopper_pearson_lower(x_u, n_u, delta / 4.0) / tpr_upper).min(upper);
    let estimate = if x_p > 0 {
        (x_u as f64 / n_u as f64) / (x_p as f64 / n_p as f64)
    } else {
        0.5 * (lower + upper)
    };
    Ok(PriorBounds {
        estimate: estimate.clamp(lower, upper),
        lower,
        upper,
        delta,
        anchor: anchor.share,
        anchor_threshold: anchor.threshold,
        n_positive: positives.len(),
        n_unlabeled: unlabeled.len(),
    })
}

/// Trains `learner`'s scorer on the `train` rows of `data` (unscaled; the scaler is fitted on
/// them), positives against unlabeled rows (which stand in for negatives when the algorithm
/// trains on negatives), and bounds π from the scores of the `held_positive` and
/// `held_unlabeled` rows. Returns the bounds and the scorer's fit.
#[allow(clippy::too_many_arguments)]
pub fn bounds_from_held_out(
    learner: &LearnerSpec,
    data: &Dataset,
    train: &[usize],
    held_positive: &[usize],
    held_unlabeled: &[usize],
    delta: f64,
    anchor: f64,
    cancel: &AtomicBool,
) -> Result<(PriorBounds, Fit), PriorError> {
    let learner = learner.clone().check()?;
    let solver = learner.solver(data.rows.n_features())?;
    let mut train = data.select(train);
    if solver.trains_on_negatives() {
        train.unlabeled_as_negatives();
    }
    let scaler = learner.scaler(&train);
    let scaled_train = Dataset {
        rows: scaler.transform(&train.rows),
        labels: train.labels.clone(),
        ids: train.ids.clone(),
    };
    let fit = solver.fit(None, &scaled_train, cancel)?;
    let training_positives = scaled_train
        .rows
        .select(&scaled_train.indices_of(Label::Positive));
    let anchor = Anchor::from_training(&fit.scores(&training_positives), anchor)?;
    let scores = |rows: &[usize]| fit.scores(&scaler.transform(&data.rows.select(rows)));
    let bounds = prior_bounds(
        &scores(held_positive),
        &scores(held_unlabeled),
        delta,
        anchor,
    )?;
    Ok((bounds, fit))
}

/// The rank τ of the pre-pass ranker of [`resolve_training_prior`]: the positives against the
/// top half of the unlabeled rows, a middle that suits any π.
pub const PRE_PASS_RANK_TAU: f64 = 0.5;
/// Its regularisation R (`neyman train`'s default).
const PRE_PASS_REG: f64 = 1e-2;

/// Fills in the π that `spec` needs before training when an end of its prior interval is
/// `auto` (docs/certificates.md §5): USMO's π when `prior` is not given, and the `auto` ends
/// of the interval that τ-FPL's PU rank τ takes the middle of. Both are the estimate of
/// [`training_prior`], a pre-pass on the scorer's training rows only (`held_out` false): the
/// rows that calibrate never enter, so the certificate's held-out rows stay unseen. Returns `spec` unchanged and `None` when nothing needs it (no `auto` end,
/// or a τ-FPL scorer with negatives).
pub fn resolve_training_prior(
    spec: &LearnerSpec,
    data: &Dataset,
    held_out: &[bool],
    cancel: &AtomicBool,
) -> Result<(LearnerSpec, Option<PriorBounds>), PriorError> {
    let Some(settings) = &spec.threshold else {
        return Ok((spec.clone(), None));
    };
    let Some(auto) = settings.prior_auto else {
        return Ok((spec.clone(), None));
    };
    let usmo_needs = matches!(&spec.algorithm, AlgorithmSpec::Usmo(u) if u.prior.is_none());
    let pu = settings.spec(spec.seed).method_for(data) == ThresholdMethod::PuUmbrella;
    if !usmo_needs && !pu {
        return Ok((spec.clone(), None));
    }
    let bounds = training_prior(
        data,
        held_out,
        settings.delta,
        auto.anchor,
        spec.seed,
        cancel,
    )?;
    let estimate = bounds.estimate;
    let mut resolved = spec.clone();
    if let AlgorithmSpec::Usmo(u) = &mut resolved.algorithm {
        u.prior.get_or_insert(estimate);
    }
    if let Some(t) = &mut resolved.threshold {
        (t.prior_min, t.prior_max) = auto.fill(t.prior_min, t.prior_max, estimate);
    }
    Ok((resolved, Some(bounds)))
}

/// The pre-pass of [`resolve_training_prior`]: [`prior_bounds`] at `delta` and `anchor` from
/// the training rows (`held_out` false) of `data` alone, their positives and unlabeled rows
/// split in half by `seed`, a linear τ-FPL ranker of the positives against the unlabeled rows
/// at rank τ [`PRE_PASS_RANK_TAU`] trained on one half and the other half scored.
pub fn training_prior(
    data: &Dataset,
    held_out: &[bool],
    delta: f64,
    anchor: f64,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<PriorBounds, PriorError> {
    let train = training_rows(held_out);
    let of = |label| -> Vec<usize> {
        train
            .iter()
            .copied()
            .filter(|&i| data.labels[i] == label)
            .collect()
    };
    let (fit_p, score_p) = calibration_split(&of(Label::Positive), 0.5, seed ^ 2)?;
    let (fit_u, score_u) = calibration_split(&of(Label::Unlabeled), 0.5, seed ^ 3)?;
    let mut fit_rows: Vec<usize> = fit_p.iter().chain(&fit_u).copied().collect();
    fit_rows.sort_unstable();
    let ranker = LearnerSpec {
        algorithm: AlgorithmSpec::Tfpl(TfplSpec {
            rank_tau: RankTau::Value(PRE_PASS_RANK_TAU),
            reg: Reg::Value(PRE_PASS_REG),
            solver: TfplSolver::Auto,
            max_gram_bytes: 256 << 20,
        }),
        kernel: KernelSpec {
            kind: Some(KernelKind::Linear),
            ..KernelSpec::default()
        },
        scale: ScaleKind::Standard,
        limits: SolverLimits::default(),
        threshold: None,
        seed,
    };
    bounds_from_held_out(
        &ranker, data, &fit_rows, &score_p, &score_u, delta, anchor, cancel,
    )
    .map(|(bounds, _)| bounds)
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

    /// Negatives below 0.5 (the top half of the positives is an anchor): over 10 000 draws
    /// the interval misses π no more often than δ allows, and it is informative.
    #[test]
    fn the_interval_holds_under_its_assumption_and_is_informative() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (pi, delta, draws) = (0.3, 0.1, 10_000);
        let (mut misses, mut width) = (0, 0.0);
        for _ in 0..draws {
            let (p, u) = draw(&mut rng, pi, 300, 2000, 0.8);
            let b = prior_bounds(&p, &u, delta, training_anchor(&mut rng, 0.4)).unwrap();
            assert!(b.lower <= b.estimate && b.estimate <= b.upper, "{b:?}");
            if !(b.lower <= pi && pi <= b.upper) {
                misses += 1;
            }
            width += b.upper - b.lower;
        }
        let share = misses as f64 / draws as f64;
        let se = (delta * (1.0 - delta) / draws as f64).sqrt();
        let mean_width = width / draws as f64;
        eprintln!("prior interval: missed π in {share}, mean width {mean_width}");
        assert!(share <= delta + 3.0 * se, "missed π in {share} of draws");
        assert!(mean_width < 0.4, "mean width {mean_width}");
    }

    /// The upper end needs no assumption: with negatives reaching the top of the positives'
    /// scores it still holds; the lower end may then exceed π, and says so only by its doc.
    #[test]
    fn the_upper_end_holds_without_an_anchor() {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let (pi, delta, draws) = (0.3, 0.1, 10_000);
        let mut misses = 0;
        for _ in 0..draws {
            let (p, u) = draw(&mut rng, pi, 300, 2000, 1.3);
            let b = prior_bounds(&p, &u, delta, training_anchor(&mut rng, 0.4)).unwrap();
            if b.upper < pi {
                misses += 1;
            }
        }
        let share = misses as f64 / draws as f64;
        eprintln!("upper end without an anchor: below π in {share}");
        let se = (delta / 2.0 * (1.0 - delta / 2.0) / draws as f64).sqrt();
        assert!(share <= delta / 2.0 + 3.0 * se, "upper below π in {share}");
    }

    /// The anchor threshold of 300 training positives drawn as the held-out ones are.
    fn training_anchor(rng: &mut ChaCha8Rng, share: f64) -> Anchor {
        let scores: Vec<f64> = (0..300).map(|_| rng.gen::<f64>()).collect();
        Anchor::from_training(&scores, share).unwrap()
    }

    /// t_a leaves `share` of the training positives above it.
    #[test]
    fn the_anchor_threshold_leaves_its_share_above() {
        let scores: Vec<f64> = (0..10).map(f64::from).collect();
        for (share, threshold) in [(0.2, 7.0), (0.25, 7.0), (0.5, 4.0), (0.1, 8.0)] {
            let anchor = Anchor::from_training(&scores, share).unwrap();
            assert_eq!(anchor.threshold, threshold, "share {share}");
        }
        assert_eq!(
            Anchor::from_training(&scores, 1.0).unwrap().threshold,
            f64::NEG_INFINITY
        );
    }

    #[test]
    fn bad_input_is_named() {
        let anchor = Anchor {
            share: 0.5,
            threshold: 0.0,
        };
        assert_eq!(
            prior_bounds(&[], &[1.0], 0.1, anchor),
            Err(PriorError::Empty("positive"))
        );
        assert!(matches!(
            prior_bounds(&[1.0, f64::NAN], &[1.0], 0.1, anchor),
            Err(PriorError::NonFinite { index: 1, .. })
        ));
        assert_eq!(
            prior_bounds(&[1.0], &[1.0], 1.0, anchor),
            Err(PriorError::Delta(1.0))
        );
        assert_eq!(
            Anchor::from_training(&[1.0], 0.0),
            Err(PriorError::Anchor(0.0))
        );
        assert!(matches!(
            Anchor::from_training(&[f64::INFINITY], 0.2),
            Err(PriorError::NonFinite {
                what: "training positive",
                ..
            })
        ));
    }
}
