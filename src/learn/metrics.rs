//! Evaluation metrics: confusion counts and the rates derived from them, ROC AUC, partial AUC up
//! to a false-positive budget, the Neyman–Pearson score, mean ± sd over runs, and the
//! two-sample Kolmogorov–Smirnov test that the daemon's drift detector runs on scores. Pure math on
//! score slices and boolean truths (`true` = positive class); every 0/0 rate has a documented
//! value, so a degenerate split yields a number rather than a NaN that poisons later averages.

use serde::{Deserialize, Serialize};

/// Counts of a binary prediction against the truth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confusion {
    pub tp: usize,
    pub fp: usize,
    pub tn: usize,
    pub fn_: usize,
}

impl Confusion {
    /// Counts `predicted` against `truth`, pairwise.
    ///
    /// The slices must have the same length (a caller bug otherwise: debug builds assert, release
    /// builds count only the common prefix).
    pub fn from_predictions(predicted: &[bool], truth: &[bool]) -> Confusion {
        debug_assert_eq!(predicted.len(), truth.len());
        let mut c = Confusion::default();
        for (&p, &t) in predicted.iter().zip(truth) {
            match (p, t) {
                (true, true) => c.tp += 1,
                (true, false) => c.fp += 1,
                (false, false) => c.tn += 1,
                (false, true) => c.fn_ += 1,
            }
        }
        c
    }

    /// Positives in the truth.
    fn positives(&self) -> usize {
        self.tp + self.fn_
    }

    /// Negatives in the truth.
    fn negatives(&self) -> usize {
        self.tn + self.fp
    }

    /// tp / (tp + fn); 0 when there are no positives.
    pub fn tpr(&self) -> f64 {
        ratio(self.tp, self.positives())
    }

    /// fp / (fp + tn); 0 when there are no negatives.
    pub fn fpr(&self) -> f64 {
        ratio(self.fp, self.negatives())
    }

    /// tp / (tp + fp); 0 when nothing is predicted positive.
    pub fn precision(&self) -> f64 {
        ratio(self.tp, self.tp + self.fp)
    }

    /// Same as [`Confusion::tpr`].
    pub fn recall(&self) -> f64 {
        self.tpr()
    }

    /// F1 of the positive class, 2tp / (2tp + fp + fn); 0 when tp = 0.
    pub fn f1(&self) -> f64 {
        // The count form equals the harmonic mean of precision and recall whenever both are
        // defined, and gives the documented 0 when tp = 0 without a 0/0.
        ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn_)
    }

    /// F1 of the negative class (negatives as the class of interest), 2tn / (2tn + fn + fp);
    /// 0 when tn = 0.
    pub fn f1_negative(&self) -> f64 {
        ratio(2 * self.tn, 2 * self.tn + self.fn_ + self.fp)
    }

    /// (tp + tn) / total; 0 for an empty confusion.
    pub fn accuracy(&self) -> f64 {
        ratio(self.tp + self.tn, self.positives() + self.negatives())
    }
}

/// `num / den`, with 0/0 (and only that, since `num <= den` for every rate here) defined as 0.
fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

/// Which class's F1 [`f1_for`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum F1Class {
    /// F1 of the positive class.
    Positive,
    /// F1 of whichever class is the majority in the truth; a tie goes to the negative class.
    Majority,
}

/// F1 of the chosen class. `Majority` follows the USMO authors' `performance.m`: the class with
/// more true members wins and a tie goes to the negative class.
pub fn f1_for(conf: &Confusion, class: F1Class) -> f64 {
    match class {
        F1Class::Positive => conf.f1(),
        F1Class::Majority if conf.positives() > conf.negatives() => conf.f1(),
        F1Class::Majority => conf.f1_negative(),
    }
}

/// Positive and negative counts sharing one score.
struct TieGroup {
    pos: u64,
    neg: u64,
}

/// Tie groups in ascending score order, with total positives and negatives; `None` if the
/// lengths differ, a score is NaN, or either class is empty (no ROC curve exists then).
fn tie_groups(scores: &[f64], truth: &[bool]) -> Option<(Vec<TieGroup>, u64, u64)> {
    if scores.len() != truth.len() || scores.iter().any(|s| s.is_nan()) {
        return None;
    }
    let mut pairs: Vec<(f64, bool)> = scores.iter().copied().zip(truth.iter().copied()).collect();
    // total_cmp orders -0.0 just before 0.0, so grouping adjacent `==` scores still ties them.
    pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let groups: Vec<TieGroup> = pairs
        .chunk_by(|a, b| a.0 == b.0)
        .map(|chunk| {
            let pos = chunk.iter().filter(|(_, t)| *t).count() as u64;
            TieGroup {
                pos,
                neg: chunk.len() as u64 - pos,
            }
        })
        .collect();
    let positives: u64 = groups.iter().map(|g| g.pos).sum();
    let negatives: u64 = groups.iter().map(|g| g.neg).sum();
    (positives > 0 && negatives > 0).then_some((groups, positives, negatives))
}

/// Area under the ROC curve: the probability a random positive outscores a random negative,
/// ties counting 1/2 (Mann–Whitney U / (P·N)), in O(n log n).
///
/// `None` if the slices differ in length, any score is NaN, or either class is empty.
pub fn roc_auc(scores: &[f64], truth: &[bool]) -> Option<f64> {
    let (groups, positives, negatives) = tie_groups(scores, truth)?;
    // Twice U in integers, so ties' halves stay exact and the result is one rounding.
    let mut twice_u: u128 = 0;
    let mut negatives_below: u128 = 0;
    for g in &groups {
        twice_u += u128::from(g.pos) * (2 * negatives_below + u128::from(g.neg));
        negatives_below += u128::from(g.neg);
    }
    Some(twice_u as f64 / (2 * u128::from(positives) * u128::from(negatives)) as f64)
}

/// Area under the ROC curve over FPR in `[0, max_fpr]`.
///
/// Not normalised: a perfect ranker scores `max_fpr` and a random one about `max_fpr² / 2`.
/// Divide by `max_fpr` for the mean TPR over the budget; no McClish standardisation is applied
/// (unlike scikit-learn's `roc_auc_score(max_fpr=…)`). A run of tied scores is a diagonal
/// segment of the curve, and the last segment is linearly interpolated at `max_fpr`, so
/// `partial_auc(.., 1.0)` equals [`roc_auc`].
///
/// `None` if `max_fpr` is outside `[0, 1]` (or NaN), or for the same inputs as [`roc_auc`].
pub fn partial_auc(scores: &[f64], truth: &[bool], max_fpr: f64) -> Option<f64> {
    if !(0.0..=1.0).contains(&max_fpr) {
        return None;
    }
    let (groups, positives, negatives) = tie_groups(scores, truth)?;
    let (p, n) = (positives as f64, negatives as f64);
    let mut area = 0.0;
    let (mut tp, mut fp) = (0u64, 0u64);
    // Lowering the threshold from the top score walks the curve from (0, 0) to (1, 1).
    for g in groups.iter().rev() {
        let (x0, y0) = (fp as f64 / n, tp as f64 / p);
        if x0 >= max_fpr {
            break;
        }
        tp += g.pos;
        fp += g.neg;
        let (x1, y1) = (fp as f64 / n, tp as f64 / p);
        if x1 <= max_fpr {
            area += (x1 - x0) * (y0 + y1) / 2.0;
        } else {
            // x0 < max_fpr < x1, so the segment is not vertical and the division is safe.
            let y_cut = y0 + (y1 - y0) * (max_fpr - x0) / (x1 - x0);
            area += (max_fpr - x0) * (y0 + y_cut) / 2.0;
            break;
        }
    }
    Some(area)
}

/// The highest TPR of a threshold (flag iff score > t) whose FPR is at most `max_fpr`: what a
/// threshold picked on these very labels keeps at that FPR, the ceiling a certificate can only
/// approach. Tied scores flag together. `None` for the same inputs as [`roc_auc`].
pub fn tpr_at_fpr(scores: &[f64], truth: &[bool], max_fpr: f64) -> Option<f64> {
    let (groups, positives, negatives) = tie_groups(scores, truth)?;
    let (mut tp, mut fp, mut best) = (0u64, 0u64, 0u64);
    for g in groups.iter().rev() {
        tp += g.pos;
        fp += g.neg;
        if fp as f64 / negatives as f64 > max_fpr {
            break;
        }
        best = tp;
    }
    Some(best as f64 / positives as f64)
}

/// Neyman–Pearson score max(fpr, τ)/τ − tpr (τ-FPL paper, Table 3); lower is better. A
/// classifier within the budget scores 1 − tpr; each multiple of τ over it costs 1.
///
/// `tau` must be positive; τ = 0 yields an infinite or NaN score.
pub fn np_score(fpr: f64, tpr: f64, tau: f64) -> f64 {
    fpr.max(tau) / tau - tpr
}

/// Mean and sample standard deviation (n − 1 denominator). The sd is 0 for fewer than two
/// values; the mean of no values is NaN, so an empty summary cannot pass for a real 0.
pub fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    // Two passes: squaring deviations from the mean avoids the cancellation of Σx² − n·mean².
    let sum_sq: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
    (mean, (sum_sq / (n - 1.0)).sqrt())
}

/// Per-feature sample moments: count, means and (population) variances.
#[derive(Debug, Clone, PartialEq)]
pub struct Moments {
    pub n: f64,
    pub mean: Vec<f64>,
    pub var: Vec<f64>,
}

/// The feature whose mean moved most between two samples, by Welch's z = (m_b − m_a) /
/// √(v_a/n_a + v_b/n_b) (normal for samples of hundreds), with its two-sided p-value times the
/// number of features compared (Bonferroni: the chance that any of them moves this far by
/// chance). A feature constant in both samples is compared only if its value changed (z
/// infinite). Returns (feature, z, adjusted p); `None` when nothing can be compared (a sample
/// with fewer than 2 rows, different dimensions, or every feature constant and unchanged).
pub fn largest_mean_shift(a: &Moments, b: &Moments) -> Option<(usize, f64, f64)> {
    if a.n < 2.0 || b.n < 2.0 || a.mean.len() != b.mean.len() {
        return None;
    }
    let mut compared = 0usize;
    let mut largest: Option<(usize, f64)> = None;
    for j in 0..a.mean.len() {
        let diff = b.mean[j] - a.mean[j];
        let se2 = a.var[j] / a.n + b.var[j] / b.n;
        let z = if se2 > 0.0 {
            diff / se2.sqrt()
        } else if diff == 0.0 {
            continue;
        } else {
            diff.signum() * f64::INFINITY
        };
        compared += 1;
        if largest.map_or(true, |(_, best): (usize, f64)| z.abs() > best.abs()) {
            largest = Some((j, z));
        }
    }
    let (feature, z) = largest?;
    let p = statrs::function::erf::erfc(z.abs() / std::f64::consts::SQRT_2);
    Some((feature, z, (p * compared as f64).min(1.0)))
}

/// The two-sample Kolmogorov–Smirnov statistic D = sup |F_a − F_b| of two score samples and
/// its asymptotic p-value Q_KS(λ) = 2 Σ_{k≥1} (−1)^{k−1} e^{−2k²λ²}, λ = (√n_e + 0.12 +
/// 0.11/√n_e)·D, n_e = n_a·n_b/(n_a + n_b) (Stephens' correction; Numerical Recipes §14.3).
/// Ties make the test conservative (D can only shrink). `None` if either sample is empty or
/// holds a non-finite score. Both samples come sorted ascending (`f64::total_cmp`), so a
/// sample tested many times is sorted once.
pub fn ks_two_sample_sorted(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
    if a.is_empty() || b.is_empty() || a.iter().chain(b).any(|v| !v.is_finite()) {
        return None;
    }
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (mut i, mut j, mut d) = (0, 0, 0.0_f64);
    while i < a.len() && j < b.len() {
        let v = a[i].min(b[j]);
        while i < a.len() && a[i] <= v {
            i += 1;
        }
        while j < b.len() && b[j] <= v {
            j += 1;
        }
        d = d.max((i as f64 / na - j as f64 / nb).abs());
    }
    let ne = na * nb / (na + nb);
    let lambda = (ne.sqrt() + 0.12 + 0.11 / ne.sqrt()) * d;
    Some((d, kolmogorov_q(lambda)))
}

/// Q_KS(λ) = 2 Σ_{k≥1} (−1)^{k−1} e^{−2k²λ²}: 1 at λ = 0, falling to 0; the series is summed
/// until its terms stop mattering (it alternates, so the error is below the last term).
fn kolmogorov_q(lambda: f64) -> f64 {
    if lambda < 0.2 {
        return 1.0;
    }
    let mut sum = 0.0;
    for k in 1..=100 {
        let k = f64::from(k);
        let term = (-2.0 * k * k * lambda * lambda).exp();
        sum += if k % 2.0 == 1.0 { term } else { -term };
        if term < 1e-12 * sum.abs() {
            break;
        }
    }
    (2.0 * sum).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const EPS: f64 = 1e-12;

    /// [`ks_two_sample_sorted`] of unsorted samples.
    fn ks_two_sample(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
        let sorted = |x: &[f64]| {
            let mut v = x.to_vec();
            v.sort_by(f64::total_cmp);
            v
        };
        ks_two_sample_sorted(&sorted(a), &sorted(b))
    }

    /// Reference values: D exactly, and the p-value of D = 0.5 at n = 10 + 10 in the range of
    /// the exact one (0.167) and the uncorrected asymptotic one (0.068); and the size of the
    /// test on equal distributions: over 2 000 pairs of samples of 200 uniforms, p < 0.05 in
    /// about 5 % of them (binomial sd 0.5 %; the asymptotic form is slightly conservative).
    #[test]
    fn ks_two_sample_statistic_p_value_and_size() {
        let a: Vec<f64> = (0..10).map(f64::from).collect();
        let b: Vec<f64> = (5..15).map(f64::from).collect();
        let (d, p) = ks_two_sample(&a, &b).expect("samples");
        assert!((d - 0.5).abs() < 1e-12, "{d}");
        assert!((0.068..0.17).contains(&p), "{p}");
        let (d, p) = ks_two_sample(&a, &a).expect("samples");
        assert_eq!((d, p), (0.0, 1.0));
        let far: Vec<f64> = (100..300).map(f64::from).collect();
        let near: Vec<f64> = (0..200).map(f64::from).collect();
        let (d, p) = ks_two_sample(&near, &far).expect("samples");
        assert!((d - 0.5).abs() < 1e-12 && p < 1e-9, "{d} {p}");
        assert!(ks_two_sample(&[], &a).is_none());
        assert!(ks_two_sample(&[f64::NAN], &a).is_none());
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let rejections = (0..2000)
            .filter(|_| {
                let x: Vec<f64> = (0..200).map(|_| uniform()).collect();
                let y: Vec<f64> = (0..200).map(|_| uniform()).collect();
                ks_two_sample(&x, &y).expect("samples").1 < 0.05
            })
            .count();
        let rate = rejections as f64 / 2000.0;
        assert!((0.03..0.065).contains(&rate), "size {rate}");
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= EPS
    }

    /// AUC by counting every positive–negative pair, ties as 1/2.
    fn brute_auc(scores: &[f64], truth: &[bool]) -> Option<f64> {
        let (mut twice_u, mut pairs) = (0u64, 0u64);
        for (s_pos, _) in scores.iter().zip(truth).filter(|(_, &t)| t) {
            for (s_neg, _) in scores.iter().zip(truth).filter(|(_, &t)| !t) {
                pairs += 1;
                twice_u += match s_pos.partial_cmp(s_neg)? {
                    std::cmp::Ordering::Greater => 2,
                    std::cmp::Ordering::Equal => 1,
                    std::cmp::Ordering::Less => 0,
                };
            }
        }
        (pairs > 0).then(|| twice_u as f64 / (2 * pairs) as f64)
    }

    /// Partial AUC from ROC points found by thresholding at every distinct score (O(n²)), then
    /// each polyline segment clipped to [0, max_fpr] and integrated as a trapezoid.
    fn brute_partial_auc(scores: &[f64], truth: &[bool], max_fpr: f64) -> f64 {
        let p = truth.iter().filter(|&&t| t).count() as f64;
        let n = truth.len() as f64 - p;
        let mut thresholds = scores.to_vec();
        thresholds.sort_by(|a, b| b.total_cmp(a));
        thresholds.dedup();
        let mut points = vec![(0.0, 0.0)];
        for t in thresholds {
            let above = |want: bool| {
                scores
                    .iter()
                    .zip(truth)
                    .filter(|&(&s, &tr)| s >= t && tr == want)
                    .count() as f64
            };
            points.push((above(false) / n, above(true) / p));
        }
        let y_at = |(x0, y0): (f64, f64), (x1, y1): (f64, f64), x: f64| {
            if x1 == x0 {
                y1
            } else {
                y0 + (y1 - y0) * (x - x0) / (x1 - x0)
            }
        };
        points
            .windows(2)
            .map(|w| {
                let (a, b) = (w[0], w[1]);
                let lo = a.0.min(max_fpr);
                let hi = b.0.min(max_fpr);
                (hi - lo) * (y_at(a, b, lo) + y_at(a, b, hi)) / 2.0
            })
            .sum()
    }

    #[test]
    fn ten_sample_confusion() {
        let truth = [
            true, true, true, true, false, false, false, false, false, false,
        ];
        let predicted = [
            true, true, true, false, true, false, false, false, false, false,
        ];
        let c = Confusion::from_predictions(&predicted, &truth);
        assert_eq!(
            c,
            Confusion {
                tp: 3,
                fp: 1,
                tn: 5,
                fn_: 1,
            }
        );
        assert!(close(c.tpr(), 0.75));
        assert!(close(c.recall(), 0.75));
        assert!(close(c.fpr(), 1.0 / 6.0));
        assert!(close(c.precision(), 0.75));
        assert!(close(c.f1(), 0.75));
        assert!(close(c.f1_negative(), 10.0 / 12.0));
        assert!(close(c.accuracy(), 0.8));
        assert!(close(f1_for(&c, F1Class::Positive), 0.75));
        // 6 negatives outnumber 4 positives.
        assert!(close(f1_for(&c, F1Class::Majority), 10.0 / 12.0));
    }

    #[test]
    fn zero_over_zero_cases_are_zero() {
        let empty = Confusion::default();
        assert_eq!(
            [
                empty.tpr(),
                empty.fpr(),
                empty.precision(),
                empty.f1(),
                empty.f1_negative(),
                empty.accuracy(),
            ],
            [0.0; 6]
        );
        // Only negatives, all predicted negative: no positives and no predicted positives.
        let c = Confusion::from_predictions(&[false, false], &[false, false]);
        assert_eq!((c.tpr(), c.precision(), c.f1()), (0.0, 0.0, 0.0));
        assert_eq!((c.fpr(), c.f1_negative(), c.accuracy()), (0.0, 1.0, 1.0));
    }

    #[test]
    fn majority_f1_tie_goes_to_negative_class() {
        let c =
            Confusion::from_predictions(&[true, false, false, false], &[true, true, false, false]);
        assert!(close(c.f1(), 2.0 / 3.0));
        assert!(close(c.f1_negative(), 0.8));
        assert!(close(f1_for(&c, F1Class::Majority), 0.8));
    }

    #[test]
    fn majority_f1_positive_majority() {
        let c =
            Confusion::from_predictions(&[true, true, false, false], &[true, true, true, false]);
        assert!(close(c.f1(), 0.8));
        assert!(close(c.f1_negative(), 2.0 / 3.0));
        assert!(close(f1_for(&c, F1Class::Majority), 0.8));
    }

    #[test]
    fn auc_extremes() {
        let truth = [true, true, false, false, false];
        assert_eq!(roc_auc(&[5.0, 4.0, 3.0, 2.0, 1.0], &truth), Some(1.0));
        assert_eq!(roc_auc(&[1.0, 2.0, 3.0, 4.0, 5.0], &truth), Some(0.0));
        assert_eq!(roc_auc(&[0.5; 5], &truth), Some(0.5));
    }

    #[test]
    fn auc_with_ties_matches_pair_count() {
        let scores = [0.9, 0.8, 0.8, 0.7, 0.5, 0.5, 0.3];
        let truth = [true, true, false, true, false, true, false];
        // Pairs won: 3 + 2.5 + 2 + 1.5 = 9 of 4·3.
        assert_eq!(roc_auc(&scores, &truth), Some(0.75));
        assert_eq!(brute_auc(&scores, &truth), Some(0.75));
    }

    #[test]
    fn auc_signed_zeros_tie() {
        assert_eq!(roc_auc(&[0.0, -0.0], &[true, false]), Some(0.5));
        assert_eq!(roc_auc(&[-0.0, 0.0], &[true, false]), Some(0.5));
    }

    #[test]
    fn auc_undefined_inputs() {
        assert_eq!(roc_auc(&[1.0, 2.0], &[true, true]), None);
        assert_eq!(roc_auc(&[1.0, 2.0], &[false, false]), None);
        assert_eq!(roc_auc(&[], &[]), None);
        assert_eq!(roc_auc(&[1.0, f64::NAN], &[true, false]), None);
        assert_eq!(roc_auc(&[1.0, 2.0], &[true]), None);
        assert_eq!(partial_auc(&[1.0, f64::NAN], &[true, false], 0.1), None);
        assert_eq!(partial_auc(&[1.0, 2.0], &[true, true], 0.1), None);
    }

    #[test]
    fn partial_auc_perfect_ranker_is_max_fpr() {
        let scores = [9.0, 8.0, 7.0, 3.0, 2.0, 1.0, 0.0];
        let truth = [true, true, true, false, false, false, false];
        for max_fpr in [0.0, 0.01, 0.1, 0.25, 0.5, 1.0] {
            assert_eq!(partial_auc(&scores, &truth, max_fpr), Some(max_fpr));
        }
    }

    #[test]
    fn partial_auc_hand_case_with_ties() {
        let scores = [0.9, 0.8, 0.8, 0.7, 0.5, 0.5, 0.3];
        let truth = [true, true, false, true, false, true, false];
        // Curve (0,0) (0,¼) (⅓,½) (⅓,¾) (⅔,1) (1,1); cut at ½ where y = ⅞:
        // ⅓·(¼+½)/2 + ⅙·(¾+⅞)/2 = 1/8 + 13/96 = 25/96.
        let got = partial_auc(&scores, &truth, 0.5).expect("defined");
        assert!(close(got, 25.0 / 96.0), "{got}");
        assert!(close(got, brute_partial_auc(&scores, &truth, 0.5)));
        let full = partial_auc(&scores, &truth, 1.0).expect("defined");
        assert!(close(full, 0.75), "{full}");
    }

    #[test]
    fn partial_auc_random_like_case_matches_brute_force() {
        let scores = [
            0.12, 0.87, 0.45, 0.45, 0.66, 0.05, 0.91, 0.33, 0.45, 0.78, 0.21, 0.66, 0.50, 0.02,
            0.99, 0.40,
        ];
        let truth = [
            false, true, false, true, true, false, false, false, true, true, false, false, true,
            false, true, false,
        ];
        for max_fpr in [0.05, 0.1, 0.2, 0.3, 0.55, 1.0] {
            let got = partial_auc(&scores, &truth, max_fpr).expect("defined");
            let want = brute_partial_auc(&scores, &truth, max_fpr);
            assert!(close(got, want), "max_fpr {max_fpr}: {got} vs {want}");
        }
    }

    #[test]
    fn partial_auc_rejects_bad_budget() {
        let (scores, truth) = ([1.0, 0.0], [true, false]);
        assert_eq!(partial_auc(&scores, &truth, -0.1), None);
        assert_eq!(partial_auc(&scores, &truth, 1.5), None);
        assert_eq!(partial_auc(&scores, &truth, f64::NAN), None);
    }

    #[test]
    fn np_score_examples() {
        // Within budget: 1 − tpr.
        assert!(close(np_score(0.02, 0.9, 0.05), 0.1));
        assert!(close(np_score(0.05, 0.9, 0.05), 0.1));
        // Twice the budget: 2 − tpr.
        assert!(close(np_score(0.1, 0.9, 0.05), 1.1));
        assert!(close(np_score(0.0, 0.0, 0.1), 1.0));
        assert!(close(np_score(1.0, 1.0, 0.01), 99.0));
    }

    #[test]
    fn mean_sd_examples() {
        let (mean, sd) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!(close(mean, 5.0));
        // Squared deviations sum to 32, over n − 1 = 7.
        assert!(close(sd, (32.0f64 / 7.0).sqrt()));
        assert_eq!(mean_sd(&[3.5]), (3.5, 0.0));
        let (mean, sd) = mean_sd(&[]);
        assert!(mean.is_nan());
        assert_eq!(sd, 0.0);
    }

    fn scored_sample() -> impl Strategy<Value = (Vec<f64>, Vec<bool>)> {
        // Few distinct scores so ties are common.
        proptest::collection::vec((0u8..6, any::<bool>()), 0..60)
            .prop_map(|v| v.into_iter().map(|(s, t)| (f64::from(s) / 2.0, t)).unzip())
    }

    proptest! {
        #[test]
        fn roc_auc_matches_pair_count((scores, truth) in scored_sample()) {
            prop_assert_eq!(roc_auc(&scores, &truth), brute_auc(&scores, &truth));
        }

        #[test]
        fn partial_auc_matches_brute_force(
            (scores, truth) in scored_sample(),
            max_fpr in 0.0..=1.0f64,
        ) {
            match partial_auc(&scores, &truth, max_fpr) {
                Some(got) => {
                    let want = brute_partial_auc(&scores, &truth, max_fpr);
                    prop_assert!(close(got, want), "{} vs {}", got, want);
                }
                None => prop_assert_eq!(brute_auc(&scores, &truth), None),
            }
        }

        #[test]
        fn tpr_at_fpr_is_the_best_threshold_within_the_budget(
            (scores, truth) in scored_sample(),
            max_fpr in 0.0..=1.0f64,
        ) {
            let want = brute_auc(&scores, &truth).map(|_| {
                // Every threshold: above all scores, and at each score.
                std::iter::once(f64::INFINITY)
                    .chain(scores.iter().copied())
                    .map(|t| {
                        let count = |class: bool, flagged: bool| {
                            scores
                                .iter()
                                .zip(&truth)
                                .filter(|&(&s, &c)| c == class && (!flagged || s > t))
                                .count() as f64
                        };
                        (count(false, true) / count(false, false), count(true, true) / count(true, false))
                    })
                    .filter(|&(fpr, _)| fpr <= max_fpr)
                    .map(|(_, tpr)| tpr)
                    .fold(0.0, f64::max)
            });
            prop_assert_eq!(tpr_at_fpr(&scores, &truth, max_fpr), want);
        }

        #[test]
        fn full_partial_auc_is_roc_auc((scores, truth) in scored_sample()) {
            match (partial_auc(&scores, &truth, 1.0), roc_auc(&scores, &truth)) {
                (Some(p), Some(a)) => prop_assert!(close(p, a), "{} vs {}", p, a),
                (p, a) => prop_assert_eq!(p, a),
            }
        }
    }

    #[test]
    fn the_largest_mean_shift_is_welchs_z_with_a_bonferroni_p_value() {
        let a = Moments {
            n: 100.0,
            mean: vec![0.0, 1.0, 5.0],
            var: vec![1.0, 4.0, 0.0],
        };
        let b = Moments {
            n: 400.0,
            mean: vec![0.1, 2.0, 5.0],
            var: vec![1.0, 4.0, 0.0],
        };
        let (feature, z, p) = largest_mean_shift(&a, &b).expect("comparable");
        assert_eq!(feature, 1);
        // (2 − 1)/√(4/100 + 4/400) = 1/√0.05.
        assert!((z - 1.0 / 0.05f64.sqrt()).abs() < 1e-12);
        // Two features compared (the third is constant and unchanged).
        let two_sided = statrs::function::erf::erfc(z / std::f64::consts::SQRT_2);
        assert!((p - 2.0 * two_sided).abs() < 1e-15);
        let mut moved = b.clone();
        moved.mean[2] = 6.0;
        let (feature, z, p) = largest_mean_shift(&a, &moved).expect("comparable");
        assert_eq!((feature, z, p), (2, f64::INFINITY, 0.0));
        let tiny = Moments {
            n: 1.0,
            ..a.clone()
        };
        assert_eq!(largest_mean_shift(&tiny, &b), None);
    }
}
