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
//!   and a prior interval [π_min, π_max] (fixed-sequence testing of candidate thresholds with an
//!   exact unconditional test on the two held-out counts, [`PuTest`]).
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
use statrs::function::erf::erf_inv;
use statrs::function::gamma::ln_gamma;

use crate::learn::metrics::np_score;

/// Share of the training negatives held out to calibrate [`umbrella`] unless configured (nproc's
/// `split.ratio`, docs/tau-fpl.md §3.3).
pub const DEFAULT_CALIBRATION_FRACTION: f64 = 0.5;

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

impl ThresholdMethod {
    /// The name the configuration and the model files use.
    pub fn as_str(self) -> &'static str {
        match self {
            ThresholdMethod::Oob => "oob",
            ThresholdMethod::Umbrella => "umbrella",
            ThresholdMethod::PuUmbrella => "pu-umbrella",
        }
    }
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
    /// The FPR level certified at confidence 1 − δ, P(FPR > fpr_bound) ≤ δ: for `umbrella` the
    /// smallest such level of its order statistic (≤ τ); for `pu-umbrella` τ itself (its
    /// fixed-sequence test certifies τ and no lower level); `None` for `oob`, which certifies
    /// nothing.
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
        "no threshold that flags a held-out positive certifies FPR <= {tau} at confidence \
         1 - {delta} from {unlabeled} held-out unlabeled rows and {positives} held-out positives \
         with the prior in [{prior_min}, {prior_max}]: {shortfall}"
    )]
    NotCertified {
        tau: f64,
        delta: f64,
        positives: usize,
        unlabeled: usize,
        prior_min: f64,
        prior_max: f64,
        shortfall: Shortfall,
    },
    #[error("the test was built for {expected} {what} scores, {given} were given")]
    CalibrationSize {
        what: &'static str,
        expected: usize,
        given: usize,
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

/// One-sided Clopper–Pearson upper bound on p from x successes in n trials at level α: the p
/// where P(Bin(n, p) ≤ x) = α, so P_p(p > bound) ≤ α for every p; 1 when x = n. Never below x/n.
pub fn clopper_pearson_upper(x: usize, n: usize, alpha: f64) -> f64 {
    if x >= n {
        return 1.0;
    }
    // P(Bin(n, p) ≤ x) = P(Bin(n, 1 − p) ≥ n − x), computed as a small tail rather than 1 − tail.
    let cdf = |p: f64| binomial_upper_tail(n, n - x, 1.0 - p);
    bisect(1.0, x as f64 / n as f64, |p| cdf(p) <= alpha)
}

/// One-sided Clopper–Pearson lower bound on p from x successes in n trials at level α: the p
/// where P(Bin(n, p) ≥ x) = α, so P_p(p < bound) ≤ α for every p; 0 when x = 0. Never above x/n.
pub fn clopper_pearson_lower(x: usize, n: usize, alpha: f64) -> f64 {
    if x == 0 {
        return 0.0;
    }
    bisect(0.0, x as f64 / n as f64, |p| {
        binomial_upper_tail(n, x, p) <= alpha
    })
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

/// [`umbrella_rank`] and [`umbrella_fpr_bound`] of (n, τ, δ), remembered per thread: they
/// cost tens of incomplete-beta evaluations, and a daemon asks for the same n (its
/// `recalibrate.window`) thousands of times.
fn umbrella_rank_and_bound(n: usize, tau: f64, delta: f64) -> Option<(usize, f64)> {
    type Memo = std::collections::HashMap<(usize, u64, u64), Option<(usize, f64)>>;
    thread_local! {
        static MEMO: std::cell::RefCell<Memo> = std::cell::RefCell::new(Memo::new());
    }
    /// Distinct (n, τ, δ) kept before the memo starts over.
    const MEMO_CAPACITY: usize = 4096;
    let key = (n, tau.to_bits(), delta.to_bits());
    if let Some(known) = MEMO.with(|m| m.borrow().get(&key).copied()) {
        return known;
    }
    let computed = umbrella_rank(n, tau, delta).map(|k| (k, umbrella_fpr_bound(n, k, delta, tau)));
    MEMO.with(|m| {
        let mut memo = m.borrow_mut();
        if memo.len() >= MEMO_CAPACITY {
            memo.clear();
        }
        memo.insert(key, computed);
    });
    computed
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
    let (k, fpr_bound) =
        umbrella_rank_and_bound(n, tau, delta).ok_or_else(|| ThresholdError::TooFewNegatives {
            needed: min_negatives(tau, delta),
            have: n,
            tau,
            delta,
        })?;
    // The k-th smallest by selection (O(n)): a daemon recalibrates every few feedback events.
    let mut negatives = calibration_negative_scores.to_vec();
    let (_, &mut threshold, _) = negatives.select_nth_unstable_by(k - 1, f64::total_cmp);
    let above = negatives.iter().filter(|&&s| s > threshold).count();
    Ok(ThresholdResult {
        method: ThresholdMethod::Umbrella,
        tau,
        delta: Some(delta),
        threshold,
        fpr_bound: Some(fpr_bound),
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

/// Candidate thresholds for [`pu_umbrella`]: every distinct training score, descending, the
/// order in which fixed-sequence testing walks them (docs/certificates.md §2). They must be
/// fixed without the calibration rows, which the scorer's training scores are. Non-finite
/// training scores end up in the list and make [`pu_umbrella`] refuse it.
pub fn pu_candidates(training_scores: &[f64]) -> Vec<f64> {
    let mut candidates = sorted(training_scores);
    candidates.dedup();
    candidates.reverse();
    candidates
}

/// ln P(Bin(n, p) = k), 0 < p < 1.
fn ln_binomial_mass(n: usize, k: usize, p: f64) -> f64 {
    ln_gamma(n as f64 + 1.0) - ln_gamma(k as f64 + 1.0) - ln_gamma((n - k) as f64 + 1.0)
        + k as f64 * p.ln()
        + (n - k) as f64 * (-p).ln_1p()
}

/// Masses of Bin(n, p) below this share of the running total end the walk from the mode.
const MASS_CUT: f64 = 1e-17;

/// The masses of Bin(n, p), 0 < p < 1, relative to the mode's, from the mode outwards until they
/// fall below [`MASS_CUT`] of the running total: (first k, the masses of first.., an upper bound
/// on the masses left out, in the same units). Below the mode each step multiplies by
/// r_k = k(1 − p)/((n − k + 1)p), which falls as k falls, so what is left below a mass m with
/// step ratio r < 1 is at most m/(1 − r); likewise above.
fn binomial_core(n: usize, p: f64) -> (usize, Vec<f64>, f64) {
    let odds = p / (1.0 - p);
    let mode = (((n + 1) as f64 * p).floor() as usize).min(n);
    let (mut total, mut left_out) = (1.0, 0.0);
    let mut below = Vec::new();
    let (mut k, mut mass) = (mode, 1.0);
    while k > 0 {
        let ratio = k as f64 / ((n - k + 1) as f64 * odds);
        let next = mass * ratio;
        if ratio < 1.0 && next < MASS_CUT * total {
            left_out += next / (1.0 - ratio);
            break;
        }
        k -= 1;
        mass = next;
        total += mass;
        below.push(mass);
    }
    let first = k;
    let mut masses: Vec<f64> = below.into_iter().rev().collect();
    masses.push(1.0);
    let (mut k, mut mass) = (mode, 1.0);
    while k < n {
        let ratio = (n - k) as f64 * odds / (k + 1) as f64;
        let next = mass * ratio;
        if ratio < 1.0 && next < MASS_CUT * total {
            left_out += next / (1.0 - ratio);
            break;
        }
        k += 1;
        mass = next;
        total += mass;
        masses.push(mass);
    }
    (first, masses, left_out)
}

/// P(Bin(n, f) ≤ m) at non-decreasing m, 0 < f < 1: the first value (and any after the point
/// masses underflow) from the incomplete beta function, the next ones by adding point masses.
struct CdfWalk {
    n: usize,
    odds: f64,
    f: f64,
    /// (m, P(X ≤ m), P(X = m + 1)) at the last m asked for.
    at: Option<(usize, f64, f64)>,
}

impl CdfWalk {
    fn new(n: usize, f: f64) -> CdfWalk {
        CdfWalk {
            n,
            odds: f / (1.0 - f),
            f,
            at: None,
        }
    }

    fn cdf(&mut self, m: i64) -> f64 {
        let Ok(m) = usize::try_from(m) else {
            return 0.0;
        };
        if m >= self.n {
            return 1.0;
        }
        match self.at {
            Some((last, cdf, next)) if last <= m && next > 1e-250 => {
                let (mut j, mut cdf, mut next) = (last, cdf, next);
                while j < m {
                    cdf += next;
                    j += 1;
                    next *= (self.n - j) as f64 / (j + 1) as f64 * self.odds;
                }
                self.at = Some((m, cdf, next));
                cdf.min(1.0)
            }
            _ => {
                // P(Bin(n, f) ≤ m) = P(Bin(n, 1 − f) ≥ n − m): a small tail where it matters.
                let cdf = binomial_upper_tail(self.n, self.n - m, 1.0 - self.f);
                let next = ln_binomial_mass(self.n, m + 1, self.f).exp();
                self.at = Some((m, cdf, next));
                cdf
            }
        }
    }
}

/// P(X_U ≤ max_unlabeled[X_P]) for independent X_P ~ Bin(n_P, p) (n_P = len − 1) and
/// X_U ~ Bin(n_U, f), 0 < f < 1, `max_unlabeled` non-decreasing: the share of calibration draws
/// on which a candidate with rates (f, p) passes. Rounded up: the X_P masses left out by
/// [`binomial_core`] count as passing.
fn pass_probability(max_unlabeled: &[i64], n_unlabeled: usize, p: f64, f: f64) -> f64 {
    let n_positive = max_unlabeled.len() - 1;
    let mut walk = CdfWalk::new(n_unlabeled, f);
    if p <= 0.0 {
        return walk.cdf(max_unlabeled[0]);
    }
    if p >= 1.0 {
        return walk.cdf(max_unlabeled[n_positive]);
    }
    let (first, masses, left_out) = binomial_core(n_positive, p);
    let (mut passing, mut total) = (left_out, left_out);
    for (k, mass) in (first..).zip(&masses) {
        passing += mass * walk.cdf(max_unlabeled[k]);
        total += mass;
    }
    (passing / total).min(1.0)
}

/// Fisher information about p of one calibration draw, (X_P, X_U) ~ (Bin(n_P, p),
/// Bin(n_U, F)) with F = π·p + (1 − π)·τ: n_P/(p(1 − p)) + π²·n_U/(F(1 − F)). Convex in p, so
/// on an interval it is largest at an end.
fn boundary_information(n_positive: usize, n_unlabeled: usize, pi: f64, tau: f64, p: f64) -> f64 {
    let f = pi * p + (1.0 - pi) * tau;
    n_positive as f64 / (p * (1.0 - p)) + pi * pi * n_unlabeled as f64 / (f * (1.0 - f))
}

/// Whether a candidate on the boundary of the null at one end π passes with probability ≤
/// `level` whatever its TPR: sup over p ∈ [0, 1] of P(p), the pass probability at
/// (TPR, F_U) = (p, π·p + (1 − π)·τ) (docs/certificates.md §2). A piece [a, b] is settled by
/// either of two upper bounds: max(P(a), P(b)) + M·(b − a)²/8 with M = 2·max(I(a), I(b)) ≥
/// |P″| (P″ = E[1_pass·(ℓ″ + ℓ′²)] and E[−ℓ″] = E[ℓ′²] = I, [`boundary_information`]), or the
/// pass probability at (b, F_U(a)), since the region grows with X_P and shrinks with X_U.
/// Unsettled pieces are halved. `Err(Some(p))`: a p with P(p) > `level`; `Err(None)`: the work
/// budget ran out (the conservative answer).
fn size_at_most(
    max_unlabeled: &[i64],
    n_unlabeled: usize,
    pi: f64,
    tau: f64,
    level: f64,
) -> Result<(), Option<f64>> {
    const PIECES: usize = 64;
    const BUDGET: usize = 400_000;
    let n_positive = max_unlabeled.len() - 1;
    let f_of = |p: f64| pi * p + (1.0 - pi) * tau;
    let at = |p: f64| pass_probability(max_unlabeled, n_unlabeled, p, f_of(p));
    let info = |p: f64| boundary_information(n_positive, n_unlabeled, pi, tau, p);
    let ends: Vec<(f64, f64)> = (0..=PIECES)
        .map(|i| {
            let p = i as f64 / PIECES as f64;
            (p, at(p))
        })
        .collect();
    if let Some(&(p, _)) = ends.iter().find(|&&(_, v)| v > level) {
        return Err(Some(p));
    }
    let mut pieces: Vec<((f64, f64), (f64, f64))> = ends.windows(2).map(|w| (w[0], w[1])).collect();
    let mut work = ends.len();
    while let Some(((a, pa), (b, pb))) = pieces.pop() {
        let width = b - a;
        let curvature = 2.0 * info(a).max(info(b));
        if pa.max(pb) + curvature * width * width / 8.0 <= level {
            continue;
        }
        work += 2;
        if pass_probability(max_unlabeled, n_unlabeled, b, f_of(a)) <= level {
            continue;
        }
        let mid = 0.5 * (a + b);
        let pm = at(mid);
        if pm > level {
            return Err(Some(mid));
        }
        if width < 1e-12 || work > BUDGET {
            return Err(None);
        }
        pieces.push(((a, pa), (mid, pm)));
        pieces.push(((mid, pm), (b, pb)));
    }
    Ok(())
}

/// The share of δ that [`joint_test_region`]'s search leaves for [`approximate_size`]'s error, so
/// that [`size_at_most`] usually proves the first region it is given.
const SIZE_MARGIN: f64 = 0.005;

/// The joint test's region at one end π, for the standardised statistic
/// Z = (F̂_U − π·T̂PR − (1 − π)·τ)/s, s² = F̃(1 − F̃)/n_U + π²·p̃(1 − p̃)/n_P with
/// F̃ = π·T̂PR + (1 − π)·τ (the null's boundary through T̂PR) and p̃ = (X_P + ½)/(n_P + 1) (so
/// that T̂PR = 0 or 1 does not claim an exact TPR): a candidate passes iff Z ≤ z. As s does not
/// involve X_U, that is X_U ≤ ⌊n_U·(F̃ + z·s)⌋ per X_P; the running minimum from the right makes
/// the region grow with X_P, which [`size_at_most`] needs.
fn joint_region(n_unlabeled: usize, n_positive: usize, pi: f64, tau: f64, z: f64) -> Vec<i64> {
    let (n_u, n_p) = (n_unlabeled as f64, n_positive as f64);
    let mut region: Vec<i64> = (0..=n_positive)
        .map(|k| {
            let f = pi * k as f64 / n_p + (1.0 - pi) * tau;
            let p = (k as f64 + 0.5) / (n_p + 1.0);
            let s = (f * (1.0 - f) / n_u + pi * pi * p * (1.0 - p) / n_p).sqrt();
            (n_u * (f + z * s)).floor().clamp(-1.0, n_u) as i64
        })
        .collect();
    for k in (0..n_positive).rev() {
        region[k] = region[k].min(region[k + 1]);
    }
    region
}

/// The largest pass probability on the null's boundary at one end π, located approximately (a
/// grid of p, then golden-section steps around its best point, and the `probes` where a size
/// proof failed before): it guides the search for z; [`size_at_most`] settles the size.
fn approximate_size(
    max_unlabeled: &[i64],
    n_unlabeled: usize,
    pi: f64,
    tau: f64,
    probes: &[f64],
) -> f64 {
    const GRID: usize = 32;
    let at = |p: f64| pass_probability(max_unlabeled, n_unlabeled, p, pi * p + (1.0 - pi) * tau);
    let (best, mut size) = (0..=GRID)
        .map(|i| (i, at(i as f64 / GRID as f64)))
        .fold((0, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
    let (mut a, mut b) = (
        best.saturating_sub(1) as f64 / GRID as f64,
        (best + 1).min(GRID) as f64 / GRID as f64,
    );
    let golden = 0.5 * (5f64.sqrt() - 1.0);
    for _ in 0..24 {
        let (c, d) = (b - golden * (b - a), a + golden * (b - a));
        let (fc, fd) = (at(c), at(d));
        size = size.max(fc).max(fd);
        if fc >= fd {
            b = d;
        } else {
            a = c;
        }
    }
    probes.iter().map(|&p| at(p)).fold(size, f64::max)
}

/// The joint test at one end π: the region of the largest z whose size is ≤ δ — an exact
/// unconditional test, the nuisance TPR maximised over [0, 1]. z is found by bisection on
/// [−40, 40] (regions are nested in z; below −40 no candidate passes) on
/// [`approximate_size`] ≤ δ·(1 − [`SIZE_MARGIN`]) until
/// [`size_at_most`] proves size ≤ δ: a point where the proof finds the size above δ joins the
/// probes and the bisection reruns below that z; when the proof runs out of work, z moves down.
/// If no region is proven within a few rounds, the region that never passes.
fn joint_test_region(
    n_unlabeled: usize,
    n_positive: usize,
    pi: f64,
    tau: f64,
    delta: f64,
) -> Vec<i64> {
    const Z_RANGE: f64 = 40.0;
    const PROOF_TRIES: usize = 12;
    let region = |z| joint_region(n_unlabeled, n_positive, pi, tau, z);
    let mut probes = Vec::new();
    let mut hi = Z_RANGE;
    let mut step = 1e-3;
    for _ in 0..PROOF_TRIES {
        let guess = |r: &[i64]| {
            approximate_size(r, n_unlabeled, pi, tau, &probes) <= delta * (1.0 - SIZE_MARGIN)
        };
        // Below −Z_RANGE, as if z were −∞: the region that never passes.
        let mut lo = -Z_RANGE;
        let (mut region_lo, mut region_hi) = (vec![-1; n_positive + 1], region(hi));
        if guess(&region_hi) {
            (lo, region_lo) = (hi, region_hi);
        } else {
            for _ in 0..2 * BISECTION_STEPS {
                let mid = 0.5 * (lo + hi);
                let r = region(mid);
                if r == region_lo {
                    lo = mid;
                } else if r == region_hi {
                    hi = mid;
                } else if guess(&r) {
                    (lo, region_lo) = (mid, r);
                } else {
                    (hi, region_hi) = (mid, r);
                }
            }
        }
        match size_at_most(&region_lo, n_unlabeled, pi, tau, delta) {
            Ok(()) => return region_lo,
            Err(Some(p)) => {
                probes.push(p);
                hi = lo;
            }
            Err(None) => {
                hi = lo - step;
                step *= 2.0;
            }
        }
    }
    vec![-1; n_positive + 1]
}

/// The one-sided normal quantile z with P(N(0, 1) > z) = α.
fn normal_quantile(alpha: f64) -> f64 {
    std::f64::consts::SQRT_2 * erf_inv(1.0 - 2.0 * alpha)
}

/// The power a [`Shortfall`] sizes the held-out data for.
const SHORTFALL_POWER: f64 = 0.8;

/// Which held-out sample's sampling variance dominates a [`Shortfall::Data`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Unlabeled,
    Positives,
}

/// What a refused [`pu_umbrella`] lacks, estimated from the held-out rates along its path with the
/// normal approximation of its test (docs/certificates.md §2, "Refusals").
#[derive(Debug, Clone, PartialEq)]
pub enum Shortfall {
    /// More held-out rows would certify τ, with probability about 80 %, at a threshold whose
    /// estimated TPR is `tpr`: `more_unlabeled` and `more_positives` together (the same factor
    /// for both), or `alone` more of the `binding` side's rows (`None` when that side alone
    /// cannot do it).
    Data {
        binding: Side,
        alone: Option<usize>,
        more_unlabeled: usize,
        more_positives: usize,
        tpr: f64,
    },
    /// The held-out rates would certify τ at estimated TPR `tpr` with probability ≥ 80 %; this
    /// draw of the held-out rows did not.
    Chance { tpr: f64 },
    /// With these rates no amount of data certifies τ unless the prior's lower end is above
    /// `prior_min`.
    Prior { prior_min: f64 },
    /// No candidate flags held-out positives clearly more often than unlabeled rows: even at
    /// the prior interval's upper end the estimated FPR exceeds τ everywhere.
    Separation,
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rows = |side: &Side| match side {
            Side::Unlabeled => "held-out unlabeled rows",
            Side::Positives => "held-out positives",
        };
        match self {
            Shortfall::Data {
                binding,
                alone,
                more_unlabeled,
                more_positives,
                tpr,
            } => {
                write!(
                    f,
                    "the {} bind: about {more_unlabeled} more held-out unlabeled rows and \
                     {more_positives} more held-out positives",
                    rows(binding)
                )?;
                if let Some(more) = alone {
                    write!(f, " (or {more} more {} alone)", rows(binding))?;
                }
                write!(
                    f,
                    " would likely certify tau at an estimated TPR of {tpr:.3}"
                )
            }
            Shortfall::Chance { tpr } => write!(
                f,
                "the held-out rates would likely certify tau at an estimated TPR of {tpr:.3}, \
                 but this draw of the held-out rows did not"
            ),
            Shortfall::Prior { prior_min } => write!(
                f,
                "the prior interval binds: at these rates no amount of data certifies tau \
                 unless the prior's lower end is above {prior_min:.3}"
            ),
            Shortfall::Separation => write!(
                f,
                "the scorer does not separate: even at the prior's upper end the estimated FPR \
                 exceeds tau at every threshold that flags a held-out positive"
            ),
        }
    }
}

/// The pu-umbrella's test of one candidate threshold t (docs/certificates.md §2): of the null
/// FPR(t) > τ against FPR(t) ≤ τ, from X_P = held-out positives above t and X_U = held-out
/// unlabeled rows above t. t passes iff X_U ≤ `max_unlabeled[X_P]`. Fixed by the held-out
/// sizes, τ, δ and the prior interval, before any held-out score is seen; the size at each end
/// of the interval is proven ≤ δ by [`size_at_most`].
#[derive(Debug, Clone, PartialEq)]
pub struct PuTest {
    tau: f64,
    delta: f64,
    prior_min: f64,
    prior_max: f64,
    n_positive: usize,
    n_unlabeled: usize,
    /// The joint test's region of [`joint_test_region`], the smaller of the two ends' (−1: no
    /// X_U passes).
    max_unlabeled: Vec<i64>,
}

impl PuTest {
    /// The test for `n_positive` held-out positives and `n_unlabeled` held-out unlabeled rows.
    pub fn new(
        n_positive: usize,
        n_unlabeled: usize,
        tau: f64,
        delta: f64,
        prior_min: f64,
        prior_max: f64,
    ) -> Result<PuTest, ThresholdError> {
        check_tau(tau)?;
        check_delta(delta)?;
        if !(prior_min >= 0.0 && prior_min <= prior_max && prior_max < 1.0) {
            return Err(ThresholdError::Prior {
                min: prior_min,
                max: prior_max,
            });
        }
        if n_positive == 0 {
            return Err(ThresholdError::Empty("calibration positive"));
        }
        if n_unlabeled == 0 {
            return Err(ThresholdError::Empty("calibration unlabeled"));
        }
        let mut max_unlabeled = joint_test_region(n_unlabeled, n_positive, prior_min, tau, delta);
        if prior_max != prior_min {
            let upper = joint_test_region(n_unlabeled, n_positive, prior_max, tau, delta);
            for (m, u) in max_unlabeled.iter_mut().zip(upper) {
                *m = (*m).min(u);
            }
        }
        Ok(PuTest {
            tau,
            delta,
            prior_min,
            prior_max,
            n_positive,
            n_unlabeled,
            max_unlabeled,
        })
    }

    /// Whether a candidate flagging `positives` of the held-out positives and `unlabeled` of the
    /// held-out unlabeled rows passes.
    pub fn passes(&self, positives: usize, unlabeled: usize) -> bool {
        match (self.max_unlabeled.get(positives), i64::try_from(unlabeled)) {
            (Some(&m), Ok(u)) => u <= m,
            _ => false,
        }
    }

    /// The ends of the prior interval (one when it is a point).
    fn ends(&self) -> impl Iterator<Item = f64> {
        let upper = (self.prior_max != self.prior_min).then_some(self.prior_max);
        std::iter::once(self.prior_min).chain(upper)
    }

    /// The two terms of the variance of the test's statistic (Z of [`joint_region`]) at TPR p
    /// at one end π: (unlabeled, positives).
    fn variances(&self, pi: f64, p: f64) -> (f64, f64) {
        let boundary = pi * p + (1.0 - pi) * self.tau;
        (
            boundary * (1.0 - boundary) / self.n_unlabeled as f64,
            pi * pi * p * (1.0 - p) / self.n_positive as f64,
        )
    }

    /// Fixed-sequence testing along `path`: its candidates are tested in order until one fails;
    /// the lowest of those that passed is the threshold, if it flags a held-out positive
    /// (docs/certificates.md §2). Else [`ThresholdError::NotCertified`] with the
    /// [`Shortfall`].
    pub fn certify(
        &self,
        path: &[f64],
        calibration_positive_scores: &[f64],
        calibration_unlabeled_scores: &[f64],
    ) -> Result<ThresholdResult, ThresholdError> {
        check_scores(path, "candidate threshold")?;
        check_scores(calibration_positive_scores, "calibration positive")?;
        check_scores(calibration_unlabeled_scores, "calibration unlabeled")?;
        for (what, expected, given) in [
            (
                "calibration positive",
                self.n_positive,
                calibration_positive_scores.len(),
            ),
            (
                "calibration unlabeled",
                self.n_unlabeled,
                calibration_unlabeled_scores.len(),
            ),
        ] {
            if expected != given {
                return Err(ThresholdError::CalibrationSize {
                    what,
                    expected,
                    given,
                });
            }
        }
        let positives = sorted(calibration_positive_scores);
        let unlabeled = sorted(calibration_unlabeled_scores);
        let counts = |t: f64| (count_above(&positives, t), count_above(&unlabeled, t));
        let chosen = path
            .iter()
            .take_while(|&&t| {
                let (x_p, x_u) = counts(t);
                self.passes(x_p, x_u)
            })
            .copied()
            .reduce(f64::min);
        match chosen {
            Some(t) if counts(t).0 > 0 => {
                let (x_p, x_u) = counts(t);
                let f_hat = x_u as f64 / self.n_unlabeled as f64;
                let tpr_hat = x_p as f64 / self.n_positive as f64;
                let prior_mid = 0.5 * (self.prior_min + self.prior_max);
                Ok(ThresholdResult {
                    method: ThresholdMethod::PuUmbrella,
                    tau: self.tau,
                    delta: Some(self.delta),
                    threshold: t,
                    fpr_bound: Some(self.tau),
                    fpr_estimate: ((f_hat - prior_mid * tpr_hat) / (1.0 - prior_mid))
                        .clamp(0.0, 1.0),
                    tpr_estimate: Some(tpr_hat),
                    calibration_negatives: 0,
                    calibration_positives: self.n_positive,
                    calibration_unlabeled: self.n_unlabeled,
                })
            }
            _ => Err(ThresholdError::NotCertified {
                tau: self.tau,
                delta: self.delta,
                positives: self.n_positive,
                unlabeled: self.n_unlabeled,
                prior_min: self.prior_min,
                prior_max: self.prior_max,
                shortfall: self.shortfall(path.iter().map(|&t| counts(t))),
            }),
        }
    }

    /// What a refusal lacks, from the held-out counts (X_P, X_U) of the path's candidates
    /// (docs/certificates.md §2, "Refusals"): among candidates flagging a positive whose
    /// estimated FPR is below τ at both ends of the prior interval and whose estimated TPR is at
    /// least half the largest such TPR, the one needing the least data, k = the factor on both
    /// held-out sizes for 80 % power: ((z_{1−δ} + z_{0.8})·s/m)², m = (1 − π)·τ − (F̂_U − π·T̂PR),
    /// s² the test's variance (both at the worse end). Without such a candidate, the prior's lower
    /// end that would give one, else [`Shortfall::Separation`].
    fn shortfall(&self, counts: impl Iterator<Item = (usize, usize)>) -> Shortfall {
        let z = normal_quantile(self.delta) + normal_quantile(1.0 - SHORTFALL_POWER);
        let mut feasible = Vec::new();
        let mut prior_needed = f64::INFINITY;
        for (x_p, x_u) in counts.filter(|&(x_p, _)| x_p > 0) {
            let f = x_u as f64 / self.n_unlabeled as f64;
            let p = x_p as f64 / self.n_positive as f64;
            let margin = |pi: f64| (1.0 - pi) * self.tau - (f - pi * p);
            if margin(self.prior_min) > 0.0 && margin(self.prior_max) > 0.0 {
                // (k, the variance terms) at the end that needs more data.
                let worst = self
                    .ends()
                    .map(|pi| {
                        let (v_u, v_p) = self.variances(pi, p);
                        (
                            z * z * (v_u + v_p) / margin(pi).powi(2),
                            v_u,
                            v_p,
                            margin(pi),
                        )
                    })
                    .fold((f64::NEG_INFINITY, 0.0, 0.0, 0.0), |a, b| {
                        if b.0 > a.0 {
                            b
                        } else {
                            a
                        }
                    });
                feasible.push((p, worst));
            } else if margin(self.prior_max) > 0.0 {
                // The margin is linear in π: positive above its zero.
                prior_needed = prior_needed.min((f - self.tau) / (p - self.tau));
            }
        }
        let Some(top) = feasible.iter().map(|c| c.0).reduce(f64::max) else {
            return if prior_needed.is_finite() {
                Shortfall::Prior {
                    prior_min: prior_needed,
                }
            } else {
                Shortfall::Separation
            };
        };
        let (tpr, (k, v_u, v_p, margin)) = feasible
            .into_iter()
            .filter(|c| c.0 >= 0.5 * top)
            .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
            .expect("the largest TPR qualifies");
        if k <= 1.0 {
            return Shortfall::Chance { tpr };
        }
        let binding = if v_u >= v_p {
            Side::Unlabeled
        } else {
            Side::Positives
        };
        // One side's n alone: z²·(v_side/a + v_other) ≤ m² ⇔ a ≥ v_side/(m²/z² − v_other).
        let room = margin * margin / (z * z);
        let (n_side, v_side, v_other) = match binding {
            Side::Unlabeled => (self.n_unlabeled, v_u, v_p),
            Side::Positives => (self.n_positive, v_p, v_u),
        };
        let alone = (room > v_other).then(|| {
            let factor = v_side / (room - v_other);
            ((factor - 1.0) * n_side as f64).ceil() as usize
        });
        let more = |n: usize| ((k - 1.0) * n as f64).ceil() as usize;
        Shortfall::Data {
            binding,
            alone,
            more_unlabeled: more(self.n_unlabeled),
            more_positives: more(self.n_positive),
            tpr,
        }
    }
}

/// The PU umbrella (docs/certificates.md §2): a threshold with P(FPR > τ) ≤ δ from held-out
/// labelled positives and unlabeled rows only, assuming labelled positives are a random sample
/// of the positives (SCAR) and the positive share π of the unlabeled population lies in
/// [π_min, π_max]. [`PuTest::certify`] along `path` with the [`PuTest`] of the held-out sizes;
/// build the [`PuTest`] once to calibrate many draws of the same sizes.
///
/// `path` must be fixed without the held-out rows, e.g. [`pu_candidates`] of the scorer's
/// training scores (descending), and the scorer must not have seen them: all rates are
/// population rates of its score distribution. The certified level is τ itself: `fpr_bound` is
/// τ (fixed-sequence testing gives no bound below τ). `fpr_estimate` is
/// (F̂_U − π_mid·T̂PR)/(1 − π_mid) clipped to [0, 1], π_mid the interval's midpoint, with F̂_U and
/// T̂PR the held-out shares above the threshold; `tpr_estimate` is T̂PR. A refusal is not a
/// violation; it says what is missing ([`Shortfall`]).
pub fn pu_umbrella(
    path: &[f64],
    calibration_positive_scores: &[f64],
    calibration_unlabeled_scores: &[f64],
    tau: f64,
    delta: f64,
    prior_min: f64,
    prior_max: f64,
) -> Result<ThresholdResult, ThresholdError> {
    check_tau(tau)?;
    check_delta(delta)?;
    check_scores(path, "candidate threshold")?;
    check_scores(calibration_positive_scores, "calibration positive")?;
    check_scores(calibration_unlabeled_scores, "calibration unlabeled")?;
    PuTest::new(
        calibration_positive_scores.len(),
        calibration_unlabeled_scores.len(),
        tau,
        delta,
        prior_min,
        prior_max,
    )?
    .certify(
        path,
        calibration_positive_scores,
        calibration_unlabeled_scores,
    )
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
    fn pu_candidates_are_the_distinct_training_scores_descending() {
        assert_eq!(
            pu_candidates(&[2.0, 3.0, 1.0, 2.0, 3.0]),
            vec![3.0, 2.0, 1.0]
        );
        assert!(pu_candidates(&[]).is_empty());
    }

    /// P(Bin(n, p) = k) for every k, by the ratio recurrence in log space.
    fn binomial_pmf(n: usize, p: f64) -> Vec<f64> {
        let mut log = vec![n as f64 * (1.0 - p).ln()];
        for k in 1..=n {
            let step = ((n - k + 1) as f64 / k as f64).ln() + (p / (1.0 - p)).ln();
            log.push(log[k - 1] + step);
        }
        log.into_iter().map(f64::exp).collect()
    }

    #[test]
    fn pass_probability_is_the_double_sum() {
        let (n_u, n_p) = (700, 90);
        let region = joint_test_region(n_u, n_p, 0.3, 0.1, 0.05);
        assert!(region.windows(2).all(|w| w[0] <= w[1]), "{region:?}");
        for (p, f) in [
            (0.1, 0.1),
            (0.5, 0.22),
            (0.8, 0.31),
            (0.97, 0.4),
            (0.003, 0.07),
        ] {
            let pos = binomial_pmf(n_p, p);
            let unl = binomial_pmf(n_u, f);
            let exact: f64 = (0..=n_p)
                .map(|k| {
                    let upto = usize::try_from(region[k] + 1).unwrap_or(0);
                    pos[k] * unl[..upto].iter().sum::<f64>()
                })
                .sum();
            let computed = pass_probability(&region, n_u, p, f);
            assert!(
                close(computed, exact, 1e-10),
                "{p} {f}: {computed} vs {exact}"
            );
        }
        // The ends of [0, 1]: X_P is certain.
        let unl = binomial_pmf(n_u, 0.2);
        let top: f64 = unl[..=usize::try_from(region[n_p]).unwrap()].iter().sum();
        assert!(close(pass_probability(&region, n_u, 1.0, 0.2), top, 1e-10));
    }

    /// The largest pass probability on the null's boundary F_U = π·p + (1 − π)·τ, on a grid of
    /// p much finer than [`size_at_most`]'s pieces.
    fn boundary_size(test: &PuTest, pi: f64) -> f64 {
        (0..=4000)
            .map(|i| {
                let p = f64::from(i) / 4000.0;
                let f = pi * p + (1.0 - pi) * test.tau;
                pass_probability(&test.max_unlabeled, test.n_unlabeled, p, f)
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn the_joint_test_has_size_delta_at_both_ends() {
        let settings = [
            (300, 2000, 0.1, 0.3, 0.3),
            (300, 2000, 0.1, 0.25, 0.35),
            (450, 3000, 0.05, 0.3, 0.3),
            (600, 900, 0.05, 0.33, 0.43),
            (60, 300, 0.05, 0.35, 0.35),
            (150, 1000, 0.05, 0.0, 0.2),
            // Three positives: T̂PR = 1 is likely at a TPR far below 1.
            (3, 5000, 0.1, 0.5, 0.6),
        ];
        let delta = 0.05;
        for (n_p, n_u, tau, lo, hi) in settings {
            let test = PuTest::new(n_p, n_u, tau, delta, lo, hi).unwrap();
            assert!(test.max_unlabeled.iter().any(|&m| m >= 0), "{n_p} {n_u}");
            for pi in [lo, hi] {
                let size = boundary_size(&test, pi);
                assert!(size <= delta, "{n_p} {n_u} {tau} {pi}: {size}");
                if lo == hi {
                    // Exact at its end, up to the discreteness of the counts.
                    assert!(size > 0.9 * delta, "{n_p} {n_u} {tau} {pi}: {size}");
                }
            }
        }
    }

    /// The region of two one-sided Clopper–Pearson limits at δ/2 each (the "union" of the
    /// issue): pass iff max over the ends of (F_U⁺ − π·TPR⁻)/(1 − π) ≤ τ, i.e. iff
    /// P(Bin(n_U, g) ≤ X_U) ≤ δ/2 with g = min over the ends of (1 − π)·τ + π·TPR⁻.
    fn separate_region(n_u: usize, n_p: usize, ends: [f64; 2], tau: f64, delta: f64) -> Vec<i64> {
        let alpha = 0.5 * delta;
        (0..=n_p)
            .map(|k| {
                let tpr = clopper_pearson_lower(k, n_p, alpha);
                let g = ends
                    .iter()
                    .map(|&pi| (1.0 - pi) * tau + pi * tpr)
                    .fold(f64::INFINITY, f64::min);
                let passes = |x: usize| binomial_upper_tail(n_u, n_u - x, 1.0 - g) <= alpha;
                (0..=n_u)
                    .take_while(|&x| passes(x))
                    .last()
                    .map_or(-1, |x| x as i64)
            })
            .collect()
    }

    #[test]
    fn the_joint_test_passes_more_often_than_two_clopper_pearson_limits() {
        // The setting of tests/threshold_guarantee.rs: π = 0.3, τ = 0.1, 2000 / 300 held out.
        let (n_p, n_u, tau, delta) = (300, 2000, 0.1, 0.05);
        for (lo, hi) in [(0.3, 0.3), (0.25, 0.35)] {
            let joint = PuTest::new(n_p, n_u, tau, delta, lo, hi).unwrap();
            let separate = separate_region(n_u, n_p, [lo, hi], tau, delta);
            // Operating points of the test's scores (FPR = 1 − t, TPR = 1.5 − t) at π = 0.3.
            for t in [0.92, 0.95, 0.97, 0.98] {
                let (fpr, tpr) = (1.0 - t, 1.5 - t);
                let f = 0.3 * tpr + 0.7 * fpr;
                let j = pass_probability(&joint.max_unlabeled, n_u, tpr, f);
                let s = pass_probability(&separate, n_u, tpr, f);
                println!("[{lo}, {hi}] FPR {fpr:.2}: joint {j:.3}, separate {s:.3}");
                assert!(j >= s, "[{lo}, {hi}] {t}: {j} vs {s}");
                if (0.3, 0.05) == (lo, fpr) {
                    // Measured 0.866 against 0.480.
                    assert!(j > s + 0.3, "{j} vs {s}");
                }
            }
        }
    }

    /// Negatives at 0..1, positives at 2..3, a quarter of the unlabeled positive.
    fn separable() -> (Vec<f64>, Vec<f64>) {
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
        (positives, unlabeled)
    }

    #[test]
    fn pu_umbrella_takes_the_lowest_candidate_before_the_first_failure() {
        let (positives, unlabeled) = separable();
        let (tau, delta) = (0.1, 0.05);
        let test = PuTest::new(400, 4000, tau, delta, 0.22, 0.3).unwrap();
        let certify = |path: &[f64]| test.certify(path, &positives, &unlabeled);
        // 0.5 flags half of the negatives: it fails and ends the walk, so 1.5 is never tested.
        let r = certify(&[2.5, 0.5, 1.5]).unwrap();
        assert_eq!(r.threshold, 2.5);
        assert_eq!(r.tpr_estimate, Some(199.0 / 400.0));
        assert_eq!(certify(&[2.5, 1.5, 0.5]).unwrap().threshold, 1.5);
        // Any fixed order: the lowest that passed, not the last.
        assert_eq!(certify(&[1.5, 2.5]).unwrap().threshold, 1.5);
        assert_eq!(
            pu_umbrella(
                &[2.5, 1.5, 0.5],
                &positives,
                &unlabeled,
                tau,
                delta,
                0.22,
                0.3
            ),
            certify(&[2.5, 1.5, 0.5])
        );
        // At π_min = 0.22 the estimated FPR reaches τ where the true FPR is 0.064: t ≈ 0.936.
        let r = certify(&pu_candidates(&unlabeled)).unwrap();
        assert!(
            (0.936..0.98).contains(&r.threshold) && r.tpr_estimate == Some(1.0),
            "{r:?}"
        );
        assert_eq!(r.fpr_bound, Some(tau));
        // π_mid = 0.26.
        let f_hat = share_above(&unlabeled, r.threshold);
        assert!(close(r.fpr_estimate, (f_hat - 0.26) / 0.74, EPS), "{r:?}");
        assert_eq!(
            (
                r.calibration_negatives,
                r.calibration_positives,
                r.calibration_unlabeled
            ),
            (0, 400, 4000)
        );
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
        let test = PuTest::new(2, 3, 0.1, 0.05, 0.3, 0.3).unwrap();
        assert_eq!(
            test.certify(&ok, &ok, &ok),
            Err(ThresholdError::CalibrationSize {
                what: "calibration unlabeled",
                expected: 3,
                given: 2
            })
        );
        // Two samples each certify nothing.
        let err = pu_umbrella(&[0.55, 0.0], &ok, &ok, 0.1, 0.05, 0.3, 0.3).unwrap_err();
        assert!(matches!(err, ThresholdError::NotCertified { .. }), "{err}");
        assert!(err.to_string().contains("no threshold that flags"), "{err}");
        // A constant scorer flags nothing above its score: never certified.
        let err = pu_umbrella(&[0.5], &[0.5; 300], &[0.5; 2000], 0.1, 0.05, 0.3, 0.3);
        assert!(
            matches!(
                err,
                Err(ThresholdError::NotCertified {
                    shortfall: Shortfall::Separation,
                    ..
                })
            ),
            "{err:?}"
        );
    }

    /// Held-out counts (X_P, X_U) at TPR p ∈ `tprs` for a scorer with FPR(p) at share π of
    /// positives among the unlabeled rows.
    fn counts_along(
        test: &PuTest,
        pi: f64,
        tprs: &[f64],
        fpr: impl Fn(f64) -> f64,
    ) -> Vec<(usize, usize)> {
        tprs.iter()
            .map(|&p| {
                let f = pi * p + (1.0 - pi) * fpr(p);
                (
                    (p * test.n_positive as f64).round() as usize,
                    (f * test.n_unlabeled as f64).round() as usize,
                )
            })
            .collect()
    }

    #[test]
    fn a_refusal_for_lack_of_data_sizes_the_missing_rows() {
        // τ = 5 %, a scorer with FPR 2 % at every TPR, π = 0.31: spambase-sized held-out rows
        // (the positives bind) and the shipped daemon windows' (the unlabeled rows bind) need
        // several times more of both; closer to enough, one side alone can do it.
        let (tau, delta, pi) = (0.05, 0.05, 0.31);
        let tprs: Vec<f64> = (1..=100).map(|i| f64::from(i) / 100.0).collect();
        for (n_p, n_u, side, one_side) in [
            (180, 1350, Side::Positives, false),
            (600, 900, Side::Unlabeled, false),
            (1500, 5000, Side::Unlabeled, true),
            (600, 20000, Side::Positives, true),
        ] {
            let test = PuTest::new(n_p, n_u, tau, delta, 0.27, 0.35).unwrap();
            let counts = counts_along(&test, pi, &tprs, |_| 0.02);
            let shortfall = test.shortfall(counts.iter().copied());
            println!("{n_p} / {n_u}: {shortfall}");
            let Shortfall::Data {
                binding,
                alone,
                more_unlabeled,
                more_positives,
                tpr,
            } = shortfall
            else {
                panic!("{shortfall:?}");
            };
            assert_eq!(binding, side);
            // With that many more rows of both, the test passes at the reference rates with
            // probability about 80 % (normal approximation against the exact test)…
            let power = |n_p: usize, n_u: usize| {
                let bigger = PuTest::new(n_p, n_u, tau, delta, 0.27, 0.35).unwrap();
                pass_probability(
                    &bigger.max_unlabeled,
                    n_u,
                    tpr,
                    pi * tpr + (1.0 - pi) * 0.02,
                )
            };
            let both = power(n_p + more_positives, n_u + more_unlabeled);
            assert!((0.7..0.9).contains(&both), "{both}");
            // …and so it does with more of the binding side alone, where that suffices.
            if let Some(more) = alone {
                let one = match side {
                    Side::Positives => power(n_p + more, n_u),
                    Side::Unlabeled => power(n_p, n_u + more),
                };
                assert!((0.7..0.9).contains(&one), "{one}");
            }
            assert_eq!(alone.is_some(), one_side);
            let message = ThresholdError::NotCertified {
                tau,
                delta,
                positives: n_p,
                unlabeled: n_u,
                prior_min: 0.27,
                prior_max: 0.35,
                shortfall: shortfall.clone(),
            }
            .to_string();
            assert!(
                message.contains(&format!("from {n_u} held-out unlabeled rows")),
                "{message}"
            );
            assert!(
                message.contains(&format!("about {more_unlabeled} more held-out unlabeled")),
                "{message}"
            );
            if let Some(more) = alone {
                assert!(message.contains(&format!("(or {more} more")), "{message}");
            }
        }
        // Far more data than needed: only chance refuses.
        let large = PuTest::new(3000, 20000, tau, delta, 0.3, 0.32).unwrap();
        let counts = counts_along(&large, pi, &tprs, |_| 0.02);
        assert!(matches!(
            large.shortfall(counts.into_iter()),
            Shortfall::Chance { tpr } if tpr >= 0.5
        ));
    }

    #[test]
    fn a_refusal_for_the_prior_names_its_lower_end() {
        // FPR 0.9·τ at every threshold: with TPR ≥ 0.1 the lower end 0.2 puts the estimated FPR
        // above τ.
        let (tau, pi) = (0.05, 0.31);
        let test = PuTest::new(500, 3000, tau, 0.05, 0.2, 0.4).unwrap();
        let tprs: Vec<f64> = (10..=100).map(|i| f64::from(i) / 100.0).collect();
        let counts = counts_along(&test, pi, &tprs, |_| 0.9 * tau);
        let Shortfall::Prior { prior_min } = test.shortfall(counts.iter().copied()) else {
            panic!("{:?}", test.shortfall(counts.into_iter()));
        };
        // At that end the plug-in FPR of the best candidate is τ.
        let best = counts
            .iter()
            .map(|&(x_p, x_u)| {
                let (f, p) = (x_u as f64 / 3000.0, x_p as f64 / 500.0);
                (f - prior_min * p) / (1.0 - prior_min)
            })
            .fold(f64::INFINITY, f64::min);
        assert!(close(best, tau, 1e-9), "{best}");
        assert!((0.2..pi).contains(&prior_min), "{prior_min}");
        // A scorer that flags unlabeled rows as often as positives, above TPR τ.
        let counts = counts_along(&test, pi, &tprs, |p| p);
        assert_eq!(test.shortfall(counts.into_iter()), Shortfall::Separation);
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
