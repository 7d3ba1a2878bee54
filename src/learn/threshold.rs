//! Thresholds that turn any scorer into a classifier whose false-positive rate (FPR) stays near or
//! under a tolerance τ. Everything works on score arrays (negatives, unlabeled, positives), so
//! any scorer can be calibrated on any split. The rule everywhere is: positive iff
//! score > threshold (strict). The procedures follow `docs/tau-fpl.md` §3 (bare § numbers below
//! are that file's), and why the certified ones hold is in `docs/certificates.md`:
//!
//! - [`oob`] (§3.1–3.2): the τ-FPL paper's out-of-bootstrap thresholding (Zhang et al., AAAI
//!   2018): per stratified bootstrap round, a threshold on the round's out-of-bag scores by
//!   [`quantile_threshold`] or [`npscore_threshold`], averaged over the rounds. Aims at
//!   E(FPR) ≈ τ and certifies nothing.
//! - [`umbrella`] (§3.3): the Neyman–Pearson umbrella order statistic (Tong, Feng, Li,
//!   "Neyman–Pearson classification algorithms and NP receiver operating characteristics",
//!   Sci. Adv. 4(2), 2018; R/Python `nproc`) on held-out negatives: P(FPR > τ) ≤ δ.
//! - [`pu_umbrella`]: the same kind of guarantee without negatives, from held-out unlabeled and
//!   labelled-positive scores, assuming labelled positives are a random sample of the positives
//!   and a prior interval [π_min, π_max] (simultaneous Clopper–Pearson bounds).
//!
//! FPR and TPR are population rates of one fixed scorer. The certified methods hold only for a
//! scorer that never saw the samples whose scores calibrate it.
//!
//! Binomial tails and Beta order statistics come from `statrs`' regularised incomplete beta
//! function I_x(a, b): P(Bin(n, p) ≥ k) = I_p(k, n − k + 1), the CDF at p of the k-th smallest
//! of n uniforms, which is Beta(k, n − k + 1). Every bound that inverts such a tail is found by
//! bisection that keeps the certified side, so rounding never makes a bound optimistic
//! relative to the computed tail.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use statrs::function::beta::beta_reg;

use crate::learn::metrics::np_score;

/// Share of the training negatives held out to calibrate [`umbrella`] unless configured (nproc's
/// `split.ratio`, docs/tau-fpl.md §3.3).
pub const DEFAULT_CALIBRATION_FRACTION: f64 = 0.5;

/// Candidate thresholds of [`candidate_grid`] unless configured: steps of 0.5 % of the training
/// score distribution, fine enough that the chosen threshold sits close to the lowest
/// certifiable one, while the Bonferroni level δ/(2·200) widens the Clopper–Pearson bounds only
/// through its logarithm.
pub const DEFAULT_CANDIDATES: usize = 200;

/// Halvings of a bisection bracket: brackets start no wider than 1, so the answer is within
/// 2⁻⁴⁰ ≈ 1e-12 of the exact root, far below any statistical width here.
const BISECTION_STEPS: usize = 40;

/// Neyman–Pearson scores closer than this count as tied, so rounding in max(fpr, τ)/τ − tpr
/// cannot break a mathematical tie towards the smaller threshold.
const NP_TIE_EPS: f64 = 1e-12;

/// Which procedure produced a [`ThresholdResult`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ThresholdMethod {
    #[serde(rename = "oob")]
    Oob,
    #[serde(rename = "umbrella")]
    Umbrella,
    #[serde(rename = "pu-umbrella")]
    PuUmbrella,
}

/// The per-round threshold rule of [`oob`] (docs/tau-fpl.md §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OobRule {
    /// [`quantile_threshold`]: empirical out-of-bag FPR ≤ τ.
    #[serde(rename = "quantile")]
    Quantile,
    /// [`npscore_threshold`]: the paper's experiments.
    #[serde(rename = "npscore")]
    NpScore,
}

/// A calibrated threshold and what is known about it; stored in the model file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct ThresholdResult {
    pub method: ThresholdMethod,
    /// The FPR tolerance τ asked for.
    pub tau: f64,
    /// The allowed probability of FPR > τ; `None` for `oob`, which certifies nothing.
    pub delta: Option<f64>,
    /// Classify positive iff score > threshold.
    pub threshold: f64,
    /// An FPR level certified at confidence 1 − δ (≤ τ); `None` for `oob`.
    pub fpr_bound: Option<f64>,
    /// A point estimate of the FPR at `threshold` (see each method).
    pub fpr_estimate: f64,
    /// A point estimate of the TPR at `threshold`; `None` without positive scores.
    pub tpr_estimate: Option<f64>,
    /// Negative scores used for calibration (for `oob`: summed over rounds).
    pub calibration_negatives: usize,
    /// Labelled positive scores used for calibration (for `oob`: summed over rounds).
    pub calibration_positives: usize,
    /// Unlabeled scores used for calibration.
    pub calibration_unlabeled: usize,
}

impl ThresholdResult {
    /// The classification rule: positive iff `score > threshold` (strict, which the umbrella
    /// guarantees rely on when scores tie).
    /// The number of held-out samples the threshold was calibrated on: the calibration
    /// negatives for the umbrella (its positives only estimate the TPR), every out-of-bag or
    /// held-out sample otherwise.
    pub fn calibration_size(&self) -> usize {
        match self.method {
            ThresholdMethod::Umbrella => self.calibration_negatives,
            ThresholdMethod::Oob | ThresholdMethod::PuUmbrella => {
                self.calibration_negatives + self.calibration_positives + self.calibration_unlabeled
            }
        }
    }

    pub fn is_positive(&self, score: f64) -> bool {
        score > self.threshold
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ThresholdError {
    #[error("the false-positive tolerance tau must be in {expected}, got {value}")]
    Tau { value: f64, expected: &'static str },
    #[error("the violation probability delta must be in (0, 1), got {0}")]
    Delta(f64),
    #[error("the prior interval must satisfy 0 <= prior_min <= prior_max < 1, got [{min}, {max}]")]
    Prior { min: f64, max: f64 },
    #[error("the calibration fraction must be in (0, 1), got {0}")]
    CalibrationFraction(f64),
    #[error(
        "the umbrella threshold needs at least {needed} held-out calibration negatives for \
         tau = {tau}, delta = {delta} (ceil(ln delta / ln(1 - tau))); only {have} were given"
    )]
    TooFewNegatives {
        needed: usize,
        have: usize,
        tau: f64,
        delta: f64,
    },
    #[error("no {0} scores were given")]
    Empty(&'static str),
    #[error("oob thresholding needs at least one bootstrap round")]
    NoRounds,
    #[error("bootstrap round {round} (counting from 0) has no out-of-bag {class} scores")]
    EmptyRound { round: usize, class: &'static str },
    #[error("{what} score #{index} (counting from 0) is not finite: {value}")]
    NonFinite {
        what: &'static str,
        index: usize,
        value: f64,
    },
    #[error(
        "no candidate threshold certifies FPR <= {tau} at confidence 1 - {delta} (the smallest \
         bound is {best_bound}); more calibration data or a narrower prior interval is needed"
    )]
    NotCertified {
        tau: f64,
        delta: f64,
        best_bound: f64,
    },
}

fn check_tau(tau: f64) -> Result<(), ThresholdError> {
    if tau > 0.0 && tau < 1.0 {
        Ok(())
    } else {
        Err(ThresholdError::Tau {
            value: tau,
            expected: "(0, 1)",
        })
    }
}

fn check_delta(delta: f64) -> Result<(), ThresholdError> {
    if delta > 0.0 && delta < 1.0 {
        Ok(())
    } else {
        Err(ThresholdError::Delta(delta))
    }
}

fn check_finite(scores: &[f64], what: &'static str) -> Result<(), ThresholdError> {
    match scores.iter().position(|s| !s.is_finite()) {
        Some(index) => Err(ThresholdError::NonFinite {
            what,
            index,
            value: scores[index],
        }),
        None => Ok(()),
    }
}

/// Non-empty and finite.
fn check_scores(scores: &[f64], what: &'static str) -> Result<(), ThresholdError> {
    if scores.is_empty() {
        return Err(ThresholdError::Empty(what));
    }
    check_finite(scores, what)
}

fn sorted(scores: &[f64]) -> Vec<f64> {
    let mut s = scores.to_vec();
    s.sort_unstable_by(f64::total_cmp);
    s
}

/// How many of the ascending `sorted` scores are > t.
fn count_above(sorted: &[f64], t: f64) -> usize {
    sorted.len() - sorted.partition_point(|&s| s <= t)
}

/// Share of `scores` (any order, non-empty) that are > t.
fn share_above(scores: &[f64], t: f64) -> f64 {
    scores.iter().filter(|&&s| s > t).count() as f64 / scores.len() as f64
}

/// P(Bin(n, p) ≥ k) = I_p(k, n − k + 1): also the one-sided p-value of k false positives
/// among n negatives against an FPR of p, which the daemon exports for alerting.
pub fn binomial_upper_tail(n: usize, k: usize, p: f64) -> f64 {
    if k == 0 {
        1.0
    } else if k > n || p <= 0.0 {
        0.0
    } else if p >= 1.0 {
        1.0
    } else if k == n {
        // Closed form, shared with `min_negatives` so the refusal and the rank search agree.
        p.powf(n as f64)
    } else {
        beta_reg(k as f64, (n - k + 1) as f64, p)
    }
}

/// Narrows the bracket between `yes` (where `holds`) and `no` (where not), in either order, and
/// returns the last point where `holds`: the conservative end.
fn bisect(mut yes: f64, mut no: f64, holds: impl Fn(f64) -> bool) -> f64 {
    for _ in 0..BISECTION_STEPS {
        let mid = 0.5 * (yes + no);
        if mid == yes || mid == no {
            break;
        }
        if holds(mid) {
            yes = mid;
        } else {
            no = mid;
        }
    }
    yes
}

/// One-sided Clopper–Pearson upper bound on p from x successes in n trials at level α: the p
/// where P(Bin(n, p) ≤ x) = α, so P_p(p > bound) ≤ α for every p; 1 when x = n. Never below x/n.
fn clopper_pearson_upper(x: usize, n: usize, alpha: f64) -> f64 {
    if x >= n {
        return 1.0;
    }
    // P(Bin(n, p) ≤ x) = P(Bin(n, 1 − p) ≥ n − x), computed as a small tail rather than 1 − tail.
    let cdf = |p: f64| binomial_upper_tail(n, n - x, 1.0 - p);
    bisect(1.0, x as f64 / n as f64, |p| cdf(p) <= alpha)
}

/// One-sided Clopper–Pearson lower bound on p from x successes in n trials at level α: the p
/// where P(Bin(n, p) ≥ x) = α, so P_p(p < bound) ≤ α for every p; 0 when x = 0. Never above x/n.
fn clopper_pearson_lower(x: usize, n: usize, alpha: f64) -> f64 {
    if x == 0 {
        return 0.0;
    }
    bisect(0.0, x as f64 / n as f64, |p| {
        binomial_upper_tail(n, x, p) <= alpha
    })
}

/// The smallest n with (1 − τ)ⁿ ≤ δ, for τ, δ in (0, 1).
fn min_negatives(tau: f64, delta: f64) -> usize {
    let fits = |n: usize| binomial_upper_tail(n, n, 1.0 - tau) <= delta;
    let guess = (delta.ln() / (-tau).ln_1p()).ceil().max(1.0) as usize;
    // The closed form can be one off through rounding; settle it with the test the rank search
    // uses.
    if guess > 1 && fits(guess - 1) {
        guess - 1
    } else if fits(guess) {
        guess
    } else {
        guess + 1
    }
}

/// Minimum held-out negatives for [`umbrella`]: ⌈ln δ / ln(1 − τ)⌉, the smallest n′ with
/// (1 − τ)^n′ ≤ δ, i.e. where even the largest of n′ scores is certified (τ = 0.1, δ = 0.05 →
/// 29; τ = 0.05 → 59; τ = 0.01 → 299; docs/certificates.md §1).
pub fn umbrella_min_negatives(tau: f64, delta: f64) -> Result<usize, ThresholdError> {
    check_tau(tau)?;
    check_delta(delta)?;
    Ok(min_negatives(tau, delta))
}

/// The umbrella rank k* = min{k ∈ 1..n : P(Bin(n, 1 − τ) ≥ k) ≤ δ}; `None` if no k qualifies.
fn umbrella_rank(n: usize, tau: f64, delta: f64) -> Option<usize> {
    let certified = |k: usize| binomial_upper_tail(n, k, 1.0 - tau) <= delta;
    if n == 0 || !certified(n) {
        return None;
    }
    // The tail falls in k; k = 0 (tail 1 > δ) is never certified.
    let (mut lo, mut hi) = (0, n);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if certified(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// The smallest τ′ with P(Bin(n, 1 − τ′) ≥ k) ≤ δ, given that τ′ = `tau` qualifies. As
/// I_{1−τ′}(k, n − k + 1) = δ, it is 1 minus the δ-quantile of Beta(k, n − k + 1), found by
/// bisection on [0, τ] (keeping the certified end, so it is ≤ τ). It falls as k grows: a
/// higher order statistic is a more conservative threshold.
fn umbrella_fpr_bound(n: usize, k: usize, delta: f64, tau: f64) -> f64 {
    bisect(tau, 0.0, |t| binomial_upper_tail(n, k, 1.0 - t) <= delta)
}

/// The Neyman–Pearson umbrella threshold (Tong, Feng, Li 2018; docs/tau-fpl.md §3.3): with n′
/// held-out calibration negative scores, k* = min{k ∈ 1..n′ : P(Bin(n′, 1 − τ) ≥ k) ≤ δ} and
/// the threshold t is the k*-th smallest calibration score. Then P(FPR(t) > τ) ≤ δ over the
/// draw of the calibration negatives, for any scorer trained without them, ties included
/// thanks to the strict rule (proof: docs/certificates.md §1).
///
/// `fpr_bound` is the smallest τ′ with P(Bin(n′, 1 − τ′) ≥ k*) ≤ δ (≤ τ by the choice of k*):
/// 1 minus the δ-quantile of Beta(k*, n′ − k* + 1). `fpr_estimate` is
/// (#calibration scores > t, plus 1)/(n′ + 1), unbiased for continuous scores, where the plain
/// share is biased low by about 1/n′. `tpr_estimate` is the share of `positive_scores_for_tpr`
/// above t (`None` if not given or empty).
///
/// Refuses with [`ThresholdError::TooFewNegatives`], naming [`umbrella_min_negatives`], when
/// n′ is too small for any rank. Tails come from `statrs`' incomplete beta function, checked
/// against high-precision values to about 1e-9 relative error for tails up to 0.06 and n′ up to
/// 10⁶ (its 140-step continued fraction loses accuracy near the median for n′ ~ 10⁶, which
/// matters only for δ near ½).
pub fn umbrella(
    calibration_negative_scores: &[f64],
    tau: f64,
    delta: f64,
    positive_scores_for_tpr: Option<&[f64]>,
) -> Result<ThresholdResult, ThresholdError> {
    check_tau(tau)?;
    check_delta(delta)?;
    check_finite(calibration_negative_scores, "calibration negative")?;
    let positives = positive_scores_for_tpr.filter(|p| !p.is_empty());
    if let Some(p) = positives {
        check_finite(p, "positive")?;
    }
    let n = calibration_negative_scores.len();
    let k = umbrella_rank(n, tau, delta).ok_or_else(|| ThresholdError::TooFewNegatives {
        needed: min_negatives(tau, delta),
        have: n,
        tau,
        delta,
    })?;
    let negatives = sorted(calibration_negative_scores);
    let threshold = negatives[k - 1];
    let above = count_above(&negatives, threshold);
    Ok(ThresholdResult {
        method: ThresholdMethod::Umbrella,
        tau,
        delta: Some(delta),
        threshold,
        fpr_bound: Some(umbrella_fpr_bound(n, k, delta, tau)),
        fpr_estimate: (above + 1) as f64 / (n + 1) as f64,
        tpr_estimate: positives.map(|p| share_above(p, threshold)),
        calibration_negatives: n,
        calibration_positives: positives.map_or(0, <[f64]>::len),
        calibration_unlabeled: 0,
    })
}

/// The "quantile" rule of docs/tau-fpl.md §3.2 on held-out scores: the (⌊τ·n₂⌋ + 1)-th largest
/// of the n₂ negative scores (k clipped to [1, n₂], the floor guarded against τ·n₂ landing just
/// under an integer, docs/tau-fpl.md §0). With the strict rule at most ⌊τ·n₂⌋ held-out negatives
/// are flagged, so the held-out FPR is ≤ τ; for continuous scores the population E(FPR) is
/// k/(n₂ + 1) ≈ τ.
///
/// τ may be 0 here (the largest negative score: TopPush's setting).
pub fn quantile_threshold(negative_scores: &[f64], tau: f64) -> Result<f64, ThresholdError> {
    if !(0.0..1.0).contains(&tau) {
        return Err(ThresholdError::Tau {
            value: tau,
            expected: "[0, 1)",
        });
    }
    check_scores(negative_scores, "negative")?;
    let n = negative_scores.len();
    let k = ((tau * n as f64 + 1e-9).floor() as usize + 1).clamp(1, n);
    let mut s = negative_scores.to_vec();
    let (_, kth_largest, _) = s.select_nth_unstable_by(n - k, f64::total_cmp);
    Ok(*kth_largest)
}

/// The "npscore" rule of docs/tau-fpl.md §3.2 (the τ-FPL paper's experiments): among all distinct
/// held-out scores, the threshold b minimising the Neyman–Pearson score max(fpr, τ)/τ − tpr
/// (Scott 2007; [`np_score`]) of the rule score > b; ties (within 1e-12) go to the larger
/// threshold.
pub fn npscore_threshold(
    positive_scores: &[f64],
    negative_scores: &[f64],
    tau: f64,
) -> Result<f64, ThresholdError> {
    check_tau(tau)?;
    check_scores(positive_scores, "positive")?;
    check_scores(negative_scores, "negative")?;
    let (p, n) = (positive_scores.len() as f64, negative_scores.len() as f64);
    let mut pairs: Vec<(f64, bool)> = positive_scores
        .iter()
        .map(|&s| (s, true))
        .chain(negative_scores.iter().map(|&s| (s, false)))
        .collect();
    pairs.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
    let mut best = (f64::INFINITY, pairs[0].0);
    let (mut tp, mut fp) = (0usize, 0usize);
    // Descending, so the counts seen before a group are those strictly above its score, and the
    // first of tied NP-scores is the larger threshold.
    for group in pairs.chunk_by(|a, b| a.0 == b.0) {
        let score = np_score(fp as f64 / n, tp as f64 / p, tau);
        if score < best.0 - NP_TIE_EPS {
            best = (score, group[0].0);
        }
        let pos = group.iter().filter(|(_, positive)| *positive).count();
        tp += pos;
        fp += group.len() - pos;
    }
    Ok(best.1)
}

/// Stratified bootstrap draws for `rounds` rounds (docs/tau-fpl.md §3.2), deterministic from `seed`
/// (ChaCha8Rng): per round, `positives.len()` draws with replacement from `positives` and
/// `negatives.len()` from `negatives`.
///
/// Each round is (in-bag, out-of-bag). In-bag holds the positive draws then the negative draws in
/// draw order, duplicates kept (they count, e.g. for k). Out-of-bag holds the entries never
/// drawn, positives then negatives, in input order: the complement of the in-bag set when the
/// lists hold distinct indices. A class of one sample is always drawn, so its round has no
/// out-of-bag member of that class.
pub fn bootstrap_rounds(
    positives: &[usize],
    negatives: &[usize],
    rounds: usize,
    seed: u64,
) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..rounds)
        .map(|_| {
            let mut in_bag = Vec::with_capacity(positives.len() + negatives.len());
            let mut out_of_bag = Vec::new();
            for class in [positives, negatives] {
                let mut drawn = vec![false; class.len()];
                for _ in 0..class.len() {
                    // Sampled as u64 so the draws do not depend on the platform's usize width.
                    let j = rng.gen_range(0..class.len() as u64) as usize;
                    drawn[j] = true;
                    in_bag.push(class[j]);
                }
                out_of_bag.extend(
                    class
                        .iter()
                        .zip(&drawn)
                        .filter(|(_, &was_drawn)| !was_drawn)
                        .map(|(&i, _)| i),
                );
            }
            (in_bag, out_of_bag)
        })
        .collect()
}

/// Splits `indices` (e.g. the training negatives) into (training, calibration) parts,
/// `round(fraction · len)` of them to calibration, chosen by `seed` (ChaCha8Rng); both parts keep
/// the input order. The calibration part is what [`umbrella`] (negatives) or [`pu_umbrella`]
/// (positives, unlabeled) must be given, and the scorer must be trained without it.
pub fn calibration_split(
    indices: &[usize],
    fraction: f64,
    seed: u64,
) -> Result<(Vec<usize>, Vec<usize>), ThresholdError> {
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err(ThresholdError::CalibrationFraction(fraction));
    }
    let amount = ((fraction * indices.len() as f64).round() as usize).min(indices.len());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut held_out = vec![false; indices.len()];
    for k in rand::seq::index::sample(&mut rng, indices.len(), amount) {
        held_out[k] = true;
    }
    let mut training = Vec::with_capacity(indices.len() - amount);
    let mut calibration = Vec::with_capacity(amount);
    for (&i, held) in indices.iter().zip(held_out) {
        if held {
            calibration.push(i);
        } else {
            training.push(i);
        }
    }
    Ok((training, calibration))
}

/// Out-of-bootstrap thresholding (docs/tau-fpl.md §3.2): `per_round` holds each round's out-of-bag
/// (positive, negative) scores under that round's scorer. Each round's threshold comes from `rule`;
/// the result is their mean (pair it with the mean of the per-round weights: mean_r(w_rᵀx − b_r) =
/// w̄ᵀx − b̄). `fpr_estimate` and `tpr_estimate` are the mean per-round out-of-bag rates at the
/// per-round thresholds; the TPR mean skips rounds without out-of-bag positives (`None` if all lack
/// them). This aims at E(FPR) ≈ τ and certifies nothing (`fpr_bound` is `None`).
///
/// Every round needs out-of-bag negatives, and with [`OobRule::NpScore`] positives too. τ must be
/// in [0, 1) for the quantile rule and (0, 1) for the NP-score rule.
pub fn oob(
    per_round: &[(Vec<f64>, Vec<f64>)],
    rule: OobRule,
    tau: f64,
) -> Result<ThresholdResult, ThresholdError> {
    if per_round.is_empty() {
        return Err(ThresholdError::NoRounds);
    }
    let (mut threshold_sum, mut fpr_sum, mut tpr_sum) = (0.0, 0.0, 0.0);
    let (mut rounds_with_positives, mut negatives, mut positives) = (0usize, 0usize, 0usize);
    for (round, (pos, neg)) in per_round.iter().enumerate() {
        if neg.is_empty() {
            return Err(ThresholdError::EmptyRound {
                round,
                class: "negative",
            });
        }
        check_finite(pos, "out-of-bag positive")?;
        let b = match rule {
            OobRule::Quantile => quantile_threshold(neg, tau)?,
            OobRule::NpScore if pos.is_empty() => {
                return Err(ThresholdError::EmptyRound {
                    round,
                    class: "positive",
                })
            }
            OobRule::NpScore => npscore_threshold(pos, neg, tau)?,
        };
        threshold_sum += b;
        fpr_sum += share_above(neg, b);
        if !pos.is_empty() {
            tpr_sum += share_above(pos, b);
            rounds_with_positives += 1;
        }
        negatives += neg.len();
        positives += pos.len();
    }
    let rounds = per_round.len() as f64;
    Ok(ThresholdResult {
        method: ThresholdMethod::Oob,
        tau,
        delta: None,
        threshold: threshold_sum / rounds,
        fpr_bound: None,
        fpr_estimate: fpr_sum / rounds,
        tpr_estimate: (rounds_with_positives > 0).then(|| tpr_sum / rounds_with_positives as f64),
        calibration_negatives: negatives,
        calibration_positives: positives,
        calibration_unlabeled: 0,
    })
}

/// Candidate thresholds for [`pu_umbrella`]: the empirical quantiles of `training_scores` at
/// levels i/count, i = 1..=count (the ⌈i·n/count⌉-th smallest score, so the last one is the
/// largest score), ascending without duplicates. Training scores are the natural source: the
/// grid must be fixed without the calibration data. [`DEFAULT_CANDIDATES`] explains the default
/// count. Empty when `training_scores` is empty or `count` is 0; non-finite training scores
/// end up in the grid and make [`pu_umbrella`] refuse it.
pub fn candidate_grid(training_scores: &[f64], count: usize) -> Vec<f64> {
    if training_scores.is_empty() || count == 0 {
        return Vec::new();
    }
    let s = sorted(training_scores);
    let n = s.len();
    let mut grid: Vec<f64> = (1..=count)
        .map(|i| s[(i * n).div_ceil(count).max(1) - 1])
        .collect();
    grid.dedup();
    grid
}

/// max over π ∈ {π_min, π_max} of (f − π·tpr)/(1 − π), clipped to [0, 1]. The derivative in π
/// is (f − tpr)/(1 − π)², so the expression is monotone in π (rising if f ≥ tpr, falling
/// otherwise) and the two endpoints cover the interval. It rises with f and falls with tpr.
fn pu_fpr_bound(f: f64, tpr: f64, prior_min: f64, prior_max: f64) -> f64 {
    let at = |pi: f64| ((f - pi * tpr) / (1.0 - pi)).clamp(0.0, 1.0);
    at(prior_min).max(at(prior_max))
}

/// The PU umbrella: a threshold with P(FPR > τ) ≤ δ from held-out labelled positives P′ and
/// unlabeled U′ only, assuming labelled positives are a random sample of the positives (SCAR)
/// and the positive share π of the unlabeled population lies in [π_min, π_max].
///
/// For each candidate t: F̂_U(t) = share of U′ above t, T̂PR(t) = share of P′ above t;
/// F_U⁺(t) and TPR⁻(t) are one-sided Clopper–Pearson bounds at level α = δ/(2M), M = number of
/// distinct candidates; `fpr_bound(t)` = max over π ∈ {π_min, π_max} of
/// (F_U⁺(t) − π·TPR⁻(t))/(1 − π), clipped to [0, 1]. The threshold is the lowest candidate with
/// `fpr_bound` ≤ τ, else [`ThresholdError::NotCertified`]. `fpr_estimate` is
/// (F̂_U − π_mid·T̂PR)/(1 − π_mid) clipped to [0, 1], π_mid the interval's midpoint;
/// `tpr_estimate` is T̂PR.
///
/// Guarantee: P(FPR(t̂) > τ) ≤ δ over the draw of P′ and U′ (proof: docs/certificates.md §2: a
/// union bound over the 2M Clopper–Pearson events, F_U = π·TPR + (1 − π)·FPR, and the bound
/// monotone in π). All rates are population rates of the scorer's score distribution, so the
/// scorer must not have seen P′ or U′, and the candidates must be fixed without them (e.g.
/// [`candidate_grid`] of training scores). A refusal is not a violation.
///
/// Since each Clopper–Pearson bound brackets its empirical rate (F_U⁺ ≥ F̂_U, TPR⁻ ≤ T̂PR) and
/// the bound rises with F_U and falls with TPR, candidates whose plug-in bound already exceeds τ
/// are skipped without computing their Clopper–Pearson bounds (they still count in M).
pub fn pu_umbrella(
    candidates: &[f64],
    calibration_positive_scores: &[f64],
    calibration_unlabeled_scores: &[f64],
    tau: f64,
    delta: f64,
    prior_min: f64,
    prior_max: f64,
) -> Result<ThresholdResult, ThresholdError> {
    check_tau(tau)?;
    check_delta(delta)?;
    if !(prior_min >= 0.0 && prior_min <= prior_max && prior_max < 1.0) {
        return Err(ThresholdError::Prior {
            min: prior_min,
            max: prior_max,
        });
    }
    check_scores(candidates, "candidate threshold")?;
    check_scores(calibration_positive_scores, "calibration positive")?;
    check_scores(calibration_unlabeled_scores, "calibration unlabeled")?;
    let mut candidates = sorted(candidates);
    candidates.dedup();
    let positives = sorted(calibration_positive_scores);
    let unlabeled = sorted(calibration_unlabeled_scores);
    let (n_pos, n_unl) = (positives.len(), unlabeled.len());
    let alpha = delta / (2 * candidates.len()) as f64;
    let prior_mid = 0.5 * (prior_min + prior_max);
    // (flagged unlabeled, flagged positives) and their shares at t.
    let rates = |t: f64| {
        let (x_unl, x_pos) = (count_above(&unlabeled, t), count_above(&positives, t));
        (
            x_unl,
            x_pos,
            x_unl as f64 / n_unl as f64,
            x_pos as f64 / n_pos as f64,
        )
    };
    let certified_bound = |x_unl: usize, x_pos: usize| {
        pu_fpr_bound(
            clopper_pearson_upper(x_unl, n_unl, alpha),
            clopper_pearson_lower(x_pos, n_pos, alpha),
            prior_min,
            prior_max,
        )
    };
    for &t in &candidates {
        let (x_unl, x_pos, f_hat, tpr_hat) = rates(t);
        if pu_fpr_bound(f_hat, tpr_hat, prior_min, prior_max) > tau {
            continue;
        }
        let bound = certified_bound(x_unl, x_pos);
        if bound <= tau {
            return Ok(ThresholdResult {
                method: ThresholdMethod::PuUmbrella,
                tau,
                delta: Some(delta),
                threshold: t,
                fpr_bound: Some(bound),
                fpr_estimate: ((f_hat - prior_mid * tpr_hat) / (1.0 - prior_mid)).clamp(0.0, 1.0),
                tpr_estimate: Some(tpr_hat),
                calibration_negatives: 0,
                calibration_positives: n_pos,
                calibration_unlabeled: n_unl,
            });
        }
    }
    let best_bound = candidates
        .iter()
        .map(|&t| {
            let (x_unl, x_pos, _, _) = rates(t);
            certified_bound(x_unl, x_pos)
        })
        .fold(f64::INFINITY, f64::min);
    Err(ThresholdError::NotCertified {
        tau,
        delta,
        best_bound,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPS: f64 = 1e-12;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn min_negatives_values() {
        let cases = [
            (0.1, 0.05, 29),
            (0.05, 0.05, 59),
            (0.05, 0.1, 45),
            (0.01, 0.05, 299),
            (0.005, 0.05, 598),
            (0.001, 0.05, 2995),
            (1e-4, 0.05, 29956),
        ];
        for (tau, delta, want) in cases {
            assert_eq!(
                umbrella_min_negatives(tau, delta),
                Ok(want),
                "{tau} {delta}"
            );
        }
        // (1/2)² = 1/4 exactly: the closed form sits on an integer.
        assert_eq!(umbrella_min_negatives(0.5, 0.25), Ok(2));
        assert!(matches!(
            umbrella_min_negatives(0.0, 0.05),
            Err(ThresholdError::Tau { .. })
        ));
        assert_eq!(
            umbrella_min_negatives(0.1, 1.0),
            Err(ThresholdError::Delta(1.0))
        );
    }

    #[test]
    fn umbrella_rank_examples_from_the_note() {
        assert_eq!(umbrella_rank(500, 0.05, 0.1), Some(482));
        assert_eq!(umbrella_rank(1000, 0.01, 0.05), Some(996));
        assert_eq!(umbrella_rank(200, 0.05, 0.05), Some(196));
        // At the minimum only the largest score is certified.
        assert_eq!(umbrella_rank(29, 0.1, 0.05), Some(29));
        assert_eq!(umbrella_rank(28, 0.1, 0.05), None);
        assert_eq!(umbrella_rank(0, 0.1, 0.05), None);
    }

    #[test]
    fn umbrella_uses_the_rank_and_reports_bounds() {
        let negatives: Vec<f64> = (1..=500).rev().map(f64::from).collect();
        let positives = [481.0, 482.0, 482.5, 600.0];
        let r = umbrella(&negatives, 0.05, 0.1, Some(&positives)).expect("enough negatives");
        assert_eq!(r.method, ThresholdMethod::Umbrella);
        assert_eq!(r.threshold, 482.0);
        assert_eq!((r.tau, r.delta), (0.05, Some(0.1)));
        // 18 scores above 482: (18 + 1)/501.
        assert!(close(r.fpr_estimate, 19.0 / 501.0, EPS));
        assert_eq!(r.tpr_estimate, Some(0.5));
        // 1 − (0.1-quantile of Beta(482, 19)), by high-precision bisection.
        let bound = r.fpr_bound.expect("certified");
        assert!(close(bound, 0.049_176_820_061_809_755, 1e-9), "{bound}");
        assert_eq!(
            (
                r.calibration_negatives,
                r.calibration_positives,
                r.calibration_unlabeled
            ),
            (500, 4, 0)
        );
        assert!(r.is_positive(482.5) && !r.is_positive(482.0));
        let no_tpr = umbrella(&negatives, 0.05, 0.1, Some(&[])).expect("enough negatives");
        assert_eq!(
            (no_tpr.tpr_estimate, no_tpr.calibration_positives),
            (None, 0)
        );
    }

    #[test]
    fn umbrella_ties_count_only_scores_strictly_above() {
        // k* = 29 of 29: the largest, tied with two others.
        let mut negatives = vec![0.0; 26];
        negatives.extend([1.0, 1.0, 1.0]);
        let r = umbrella(&negatives, 0.1, 0.05, None).expect("29 negatives");
        assert_eq!(r.threshold, 1.0);
        assert!(close(r.fpr_estimate, 1.0 / 30.0, EPS));
    }

    #[test]
    fn umbrella_refusal_names_the_needed_count() {
        let negatives = vec![0.5; 58];
        let err = umbrella(&negatives, 0.05, 0.05, None).unwrap_err();
        assert_eq!(
            err,
            ThresholdError::TooFewNegatives {
                needed: 59,
                have: 58,
                tau: 0.05,
                delta: 0.05
            }
        );
        let message = err.to_string();
        assert!(message.contains("at least 59"), "{message}");
        assert!(message.contains("only 58"), "{message}");
        assert!(matches!(
            umbrella(&[], 0.05, 0.05, None),
            Err(ThresholdError::TooFewNegatives {
                needed: 59,
                have: 0,
                ..
            })
        ));
        assert!(matches!(
            umbrella(&[0.1, f64::NAN], 0.05, 0.05, None),
            Err(ThresholdError::NonFinite { index: 1, .. })
        ));
    }

    #[test]
    fn fpr_bound_is_below_tau_and_falls_with_the_rank() {
        let (n, tau, delta) = (1000, 0.01, 0.05);
        let k_star = umbrella_rank(n, tau, delta).expect("enough");
        let mut previous = f64::INFINITY;
        for k in k_star..=n {
            let bound = umbrella_fpr_bound(n, k, delta, tau);
            assert!(bound <= tau, "k {k}: {bound}");
            assert!(bound < previous, "k {k}: {bound} !< {previous}");
            // It is where the tail crosses δ.
            assert!(binomial_upper_tail(n, k, 1.0 - bound) <= delta);
            assert!(binomial_upper_tail(n, k, 1.0 - bound + 1e-9) > delta);
            previous = bound;
        }
        // 1 − (0.05-quantile of Beta(996, 5)).
        let bound = umbrella_fpr_bound(n, k_star, delta, tau);
        assert!(close(bound, 0.009_129_952_563_871_468, 1e-9), "{bound}");
        // k = n: the δ-quantile of the maximum, 1 − δ^(1/n).
        let top = umbrella_fpr_bound(n, n, delta, tau);
        assert!(close(top, 1.0 - delta.powf(1.0 / n as f64), 1e-12), "{top}");
    }

    #[test]
    fn fpr_bound_rises_with_tau() {
        let negatives: Vec<f64> = (0..400).map(|i| f64::from(i) / 400.0).collect();
        let mut previous = 0.0;
        for tau in [0.01, 0.02, 0.05, 0.1, 0.2] {
            let bound = umbrella(&negatives, tau, 0.05, None)
                .expect("enough")
                .fpr_bound
                .expect("certified");
            assert!(bound <= tau && bound >= previous, "{tau}: {bound}");
            previous = bound;
        }
    }

    #[test]
    fn clopper_pearson_matches_closed_forms_and_references() {
        let alpha = 0.01;
        // x = 0: P(Bin(n, p) ≤ 0) = (1 − p)ⁿ = α.
        assert!(close(
            clopper_pearson_upper(0, 50, alpha),
            1.0 - alpha.powf(1.0 / 50.0),
            1e-11
        ));
        // x = n: P(Bin(n, p) ≥ n) = pⁿ = α.
        assert!(close(
            clopper_pearson_lower(50, 50, alpha),
            alpha.powf(1.0 / 50.0),
            1e-11
        ));
        assert_eq!(clopper_pearson_upper(50, 50, alpha), 1.0);
        assert_eq!(clopper_pearson_lower(0, 50, alpha), 0.0);
        // High-precision references (mpmath bisection on the regularised incomplete beta).
        assert!(close(
            clopper_pearson_upper(5, 100, 1e-3),
            0.155_367_305_810_468_3,
            1e-10
        ));
        assert!(close(
            clopper_pearson_lower(60, 300, 1.25e-4),
            0.123_925_720_294_574_71,
            1e-10
        ));
    }

    #[test]
    fn quantile_rule_hand_cases() {
        let negatives: Vec<f64> = (1..=10).map(|i| f64::from(i) / 10.0).collect();
        // ⌊0.1·10⌋ + 1 = 2nd largest.
        assert_eq!(quantile_threshold(&negatives, 0.1), Ok(0.9));
        assert_eq!(quantile_threshold(&negatives, 0.0), Ok(1.0));
        assert_eq!(quantile_threshold(&negatives, 0.25), Ok(0.8));
        // τ = 0.29, n = 100 must give k = 30 despite 0.29·100 = 28.999….
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile_threshold(&hundred, 0.29), Ok(71.0));
        // Ties: the 2nd and 3rd largest are both 2; only the 3 is above.
        let tied = [1.0, 2.0, 2.0, 2.0, 3.0];
        assert_eq!(quantile_threshold(&tied, 0.2), Ok(2.0));
        assert_eq!(quantile_threshold(&tied, 0.5), Ok(2.0));
        assert_eq!(quantile_threshold(&tied, 0.99), Ok(1.0));
        assert_eq!(
            quantile_threshold(&[], 0.1),
            Err(ThresholdError::Empty("negative"))
        );
        assert!(matches!(
            quantile_threshold(&tied, 1.0),
            Err(ThresholdError::Tau { .. })
        ));
    }

    #[test]
    fn npscore_rule_hand_cases() {
        let positives = [0.9, 0.8, 0.7, 0.4];
        let negatives = [0.85, 0.6, 0.5, 0.3, 0.2, 0.1, 0.05, 0.0, -0.1, -0.2];
        // At 0.6: fpr 1/10, tpr 3/4, NP-score 0.25; every other distinct score is worse.
        assert_eq!(npscore_threshold(&positives, &negatives, 0.1), Ok(0.6));
        // 2.0 and 1.0 both score 0 (fpr 0 | ½, tpr 1): the larger wins.
        assert_eq!(npscore_threshold(&[3.0], &[2.0, 1.0], 0.5), Ok(2.0));
        // A tie across classes: at 0.5 only the positive 1.0 is above, NP-score 0.5 (at 0.0 it
        // is ½/¼ − 1 = 1).
        assert_eq!(npscore_threshold(&[1.0, 0.5], &[0.5, 0.0], 0.25), Ok(0.5));
        assert_eq!(
            npscore_threshold(&[], &negatives, 0.1),
            Err(ThresholdError::Empty("positive"))
        );
        assert!(matches!(
            npscore_threshold(&positives, &negatives, 0.0),
            Err(ThresholdError::Tau { .. })
        ));
    }

    #[test]
    fn bootstrap_is_deterministic_and_stratified() {
        let positives: Vec<usize> = (0..30).collect();
        let negatives: Vec<usize> = (30..130).collect();
        let rounds = bootstrap_rounds(&positives, &negatives, 10, 7);
        assert_eq!(rounds, bootstrap_rounds(&positives, &negatives, 10, 7));
        assert_ne!(rounds, bootstrap_rounds(&positives, &negatives, 10, 8));
        assert_eq!(rounds.len(), 10);
        let mut out_of_bag_total = 0;
        for (in_bag, out_of_bag) in &rounds {
            assert_eq!(in_bag.len(), 130);
            assert!(in_bag[..30].iter().all(|i| positives.contains(i)));
            assert!(in_bag[30..].iter().all(|i| negatives.contains(i)));
            let expected: Vec<usize> = (0..130).filter(|i| !in_bag.contains(i)).collect();
            assert_eq!(out_of_bag, &expected);
            out_of_bag_total += out_of_bag.len();
        }
        // About (1 − 1/n)ⁿ ≈ 36.6–36.8 % of each class stays out of bag.
        let share = out_of_bag_total as f64 / 1300.0;
        assert!((0.30..0.44).contains(&share), "{share}");
        assert!(bootstrap_rounds(&positives, &negatives, 0, 7).is_empty());
        let (in_bag, out_of_bag) = &bootstrap_rounds(&[5], &[], 1, 1)[0];
        assert_eq!((in_bag.as_slice(), out_of_bag.len()), (&[5][..], 0));
    }

    #[test]
    fn calibration_split_partitions_by_fraction() {
        let indices: Vec<usize> = (100..201).collect();
        let (training, calibration) =
            calibration_split(&indices, DEFAULT_CALIBRATION_FRACTION, 3).expect("valid");
        // round(0.5 · 101) = 51 (half away from zero).
        assert_eq!((training.len(), calibration.len()), (50, 51));
        let mut all = [training.clone(), calibration.clone()].concat();
        all.sort_unstable();
        assert_eq!(all, indices);
        assert!(training.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            calibration_split(&indices, DEFAULT_CALIBRATION_FRACTION, 3),
            Ok((training, calibration))
        );
        assert_eq!(
            calibration_split(&indices, 1.0, 3),
            Err(ThresholdError::CalibrationFraction(1.0))
        );
    }

    #[test]
    fn oob_averages_rounds() {
        let per_round = vec![
            // quantile τ = 0.1 of 10 negatives: the 2nd largest, 0.9; fpr 0.1; tpr 2/4.
            (
                vec![0.95, 1.2, 0.5, 0.1],
                (1..=10).map(|i| f64::from(i) / 10.0).collect(),
            ),
            // 5 negatives: ⌊0.5⌋ + 1 = largest, 0.7; fpr 0; tpr 1/2.
            (vec![0.8, 0.6], vec![0.7, 0.3, 0.2, 0.1, 0.0]),
        ];
        let r = oob(&per_round, OobRule::Quantile, 0.1).expect("valid rounds");
        assert_eq!(r.method, ThresholdMethod::Oob);
        assert!(close(r.threshold, 0.8, EPS));
        assert!(close(r.fpr_estimate, 0.05, EPS));
        assert_eq!(r.tpr_estimate, Some(0.5));
        assert_eq!((r.delta, r.fpr_bound), (None, None));
        assert_eq!((r.calibration_negatives, r.calibration_positives), (15, 6));

        // Rounds without positives count for the threshold, not for the TPR.
        let no_pos = vec![
            per_round[0].clone(),
            (vec![], vec![0.7, 0.3, 0.2, 0.1, 0.0]),
        ];
        let r = oob(&no_pos, OobRule::Quantile, 0.1).expect("valid rounds");
        assert!(close(r.threshold, 0.8, EPS));
        assert_eq!(r.tpr_estimate, Some(0.5));
        assert_eq!(
            oob(&no_pos, OobRule::NpScore, 0.1),
            Err(ThresholdError::EmptyRound {
                round: 1,
                class: "positive"
            })
        );

        // NP-score per round: 0.6 (above) and 2.0.
        let np_rounds = vec![
            (
                vec![0.9, 0.8, 0.7, 0.4],
                vec![0.85, 0.6, 0.5, 0.3, 0.2, 0.1, 0.05, 0.0, -0.1, -0.2],
            ),
            (vec![3.0], vec![2.0, 1.0]),
        ];
        let r = oob(&np_rounds, OobRule::NpScore, 0.1).expect("valid rounds");
        assert!(close(r.threshold, 1.3, EPS));
        assert!(close(r.fpr_estimate, 0.05, EPS));
        assert_eq!(r.tpr_estimate, Some(0.875));

        assert_eq!(
            oob(&[], OobRule::Quantile, 0.1),
            Err(ThresholdError::NoRounds)
        );
        assert_eq!(
            oob(&[(vec![1.0], vec![])], OobRule::Quantile, 0.1),
            Err(ThresholdError::EmptyRound {
                round: 0,
                class: "negative"
            })
        );
    }

    #[test]
    fn candidate_grid_quantiles() {
        let scores: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let grid = candidate_grid(&scores, 200);
        assert_eq!(grid.len(), 200);
        assert_eq!((grid[0], grid[1], grid[199]), (5.0, 10.0, 1000.0));
        // Fewer scores than candidates: every score once.
        assert_eq!(candidate_grid(&[3.0, 1.0, 2.0], 10), vec![1.0, 2.0, 3.0]);
        assert_eq!(candidate_grid(&[2.0, 2.0, 2.0, 1.0], 4), vec![1.0, 2.0]);
        assert!(candidate_grid(&[], 10).is_empty());
        assert!(candidate_grid(&scores, 0).is_empty());
    }

    #[test]
    fn pu_bound_endpoints_cover_the_prior_interval() {
        for (f, tpr) in [(0.3, 0.8), (0.8, 0.3), (0.5, 0.5), (0.05, 0.9), (0.99, 0.0)] {
            let (lo, hi) = (0.1, 0.6);
            let grid_max = (0..=1000)
                .map(|i| {
                    let pi = lo + (hi - lo) * f64::from(i) / 1000.0;
                    ((f - pi * tpr) / (1.0 - pi)).clamp(0.0, 1.0)
                })
                .fold(f64::NEG_INFINITY, f64::max);
            assert!(close(pu_fpr_bound(f, tpr, lo, hi), grid_max, 1e-12));
        }
        // A scorer better than chance (F_U < TPR): π_min binds.
        assert!(close(
            pu_fpr_bound(0.3, 0.8, 0.1, 0.6),
            (0.3 - 0.08) / 0.9,
            EPS
        ));
    }

    #[test]
    fn pu_umbrella_picks_the_lowest_certified_candidate() {
        // Negatives at 0..1, positives at 2..3, a quarter of the unlabeled positive.
        let positives: Vec<f64> = (0..400).map(|i| 2.0 + f64::from(i) / 400.0).collect();
        let unlabeled: Vec<f64> = (0..4000)
            .map(|i| {
                let u = f64::from(i / 4) / 1000.0;
                if i % 4 == 0 {
                    2.0 + u
                } else {
                    u
                }
            })
            .collect();
        let candidates: Vec<f64> = (0..=30).map(|i| f64::from(i) / 10.0).collect();
        let (tau, delta) = (0.1, 0.05);
        let r = pu_umbrella(&candidates, &positives, &unlabeled, tau, delta, 0.22, 0.3)
            .expect("separable data certifies");
        assert_eq!(r.method, ThresholdMethod::PuUmbrella);
        let bound = r.fpr_bound.expect("certified");
        assert!(bound <= tau, "{bound}");
        let alpha = delta / (2.0 * candidates.len() as f64);
        let bound_at = |t: f64| {
            let x_unl = unlabeled.iter().filter(|&&s| s > t).count();
            let x_pos = positives.iter().filter(|&&s| s > t).count();
            pu_fpr_bound(
                clopper_pearson_upper(x_unl, unlabeled.len(), alpha),
                clopper_pearson_lower(x_pos, positives.len(), alpha),
                0.22,
                0.3,
            )
        };
        assert_eq!(bound_at(r.threshold), bound);
        let below = candidates
            .iter()
            .filter(|&&t| t < r.threshold)
            .map(|&t| bound_at(t));
        assert!(below.clone().count() > 0 && below.into_iter().all(|b| b > tau));
        assert_eq!(r.tpr_estimate, Some(1.0));
        assert_eq!(
            (
                r.calibration_negatives,
                r.calibration_positives,
                r.calibration_unlabeled
            ),
            (0, 400, 4000)
        );
        // The true FPR there is 1 − t, and the bound covers it.
        assert!(1.0 - r.threshold <= bound + 1e-12);
    }

    #[test]
    fn pu_umbrella_errors() {
        let ok = [0.5, 0.6];
        assert!(matches!(
            pu_umbrella(&ok, &ok, &ok, 0.1, 0.05, 0.4, 0.3),
            Err(ThresholdError::Prior { .. })
        ));
        assert!(matches!(
            pu_umbrella(&ok, &ok, &ok, 0.1, 0.05, 0.3, 1.0),
            Err(ThresholdError::Prior { .. })
        ));
        assert_eq!(
            pu_umbrella(&[], &ok, &ok, 0.1, 0.05, 0.3, 0.3),
            Err(ThresholdError::Empty("candidate threshold"))
        );
        assert_eq!(
            pu_umbrella(&ok, &ok, &[], 0.1, 0.05, 0.3, 0.3),
            Err(ThresholdError::Empty("calibration unlabeled"))
        );
        assert!(matches!(
            pu_umbrella(&[f64::INFINITY], &ok, &ok, 0.1, 0.05, 0.3, 0.3),
            Err(ThresholdError::NonFinite { .. })
        ));
        // Two samples each cannot certify anything below the top.
        let err = pu_umbrella(&[0.0, 0.55], &ok, &ok, 0.1, 0.05, 0.3, 0.3).unwrap_err();
        assert!(matches!(err, ThresholdError::NotCertified { best_bound, .. } if best_bound > 0.1));
        assert!(err.to_string().contains("no candidate threshold certifies"));
    }

    #[test]
    fn result_serde_names() {
        let r = ThresholdResult {
            method: ThresholdMethod::PuUmbrella,
            tau: 0.1,
            delta: Some(0.05),
            threshold: 0.5,
            fpr_bound: Some(0.09),
            fpr_estimate: 0.05,
            tpr_estimate: Some(0.7),
            calibration_negatives: 0,
            calibration_positives: 300,
            calibration_unlabeled: 2000,
        };
        let json = serde_json::to_string(&r).expect("serialises");
        assert!(json.contains(r#""method":"pu-umbrella""#), "{json}");
        assert!(json.contains(r#""fpr_bound":0.09"#), "{json}");
        assert_eq!(
            serde_json::from_str::<ThresholdResult>(&json).expect("parses"),
            r
        );
        assert_eq!(
            serde_json::to_string(&[ThresholdMethod::Oob, ThresholdMethod::Umbrella])
                .expect("serialises"),
            r#"["oob","umbrella"]"#
        );
        assert_eq!(
            serde_json::to_string(&[OobRule::Quantile, OobRule::NpScore]).expect("serialises"),
            r#"["quantile","npscore"]"#
        );
    }
}
