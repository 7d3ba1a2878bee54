//! Euclidean projection onto Γ_k, the feasible set of the τ-FPL dual (7).
//!
//! Paper: X. Zhang, N. Li, Y. Pu, Y. Wang, J. Yan, H. Zha, "τ-FPL: Tolerance-Constrained
//! Learning in Linear Time", AAAI 2018 (long version arXiv 1801.04701). The maths follows
//! `docs/tau-fpl.md` §2, which re-derives the paper and fills its gaps; bare § numbers below
//! are that file's. Given a⁰ ∈ ℝᵐ, b⁰ ∈ ℝⁿ and 1 ≤ k ≤ n, problem (9) is
//!
//!   min ½‖α − a⁰‖² + ½‖β − b⁰‖²  s.t.  α ≥ 0, β ≥ 0, Σα = Σβ, β_j ≤ (1/k)Σα.
//!
//! By Theorem 3 (§2.1) the solution is α = [a⁰ − λ]₊, β = clip(b⁰ − μ, 0, C/k) with
//! C = Σα, where λ is the root of the increasing function f(λ) = kλ + kν(C(λ)) (§2.2–2.3):
//!
//! - C(λ) = Σ_i [a⁰_i − λ]₊;
//! - μ(C) solves (11), Σ_j clip(b⁰_j − μ, 0, C/k) = C; it is unique for C > C₀ = k(b_(k) −
//!   b_(k+1)) (regime II) and set to b_(k+1) for C ≤ C₀ (regime I, Lemma 7 / eq. 43);
//! - δ = μ + C/k is the upper water level (b⁰_j ≥ δ ⇒ capped);
//! - ν(C) = μ + (1/k) Σ_j [b⁰_j − δ]₊, and in regime I simply ν = (S_k − C)/k.
//!
//! The projection is zero iff k·a_(1) + S_k ≤ 0 (Lemma 1), and otherwise λ ∈ (−b_(1), a_(1))
//! (Lemma 2). [`project_sorted`] is the exact sort-and-sweep of §2.4, kept as the reference.
//! [`project`] is the paper's Algorithm 2 as specified in §2.6: a search on λ in which every
//! entry whose status (α: zero / active; β: zero / free / capped) is fixed over the current
//! interval is folded into a compensated aggregate and never read again, so each pass reads only
//! the shrinking caches of uncertain entries, with the closed-form finish once both caches are
//! empty. Where this implementation goes beyond that specification (all to cut passes; the §2.6
//! invariants are unchanged):
//!
//! - trial points are safeguarded Newton steps on f instead of midpoints (§2.5 mentions ibis's
//!   secant steps), overshooting slightly so that the interval closes from both sides;
//! - each pass partitions its cache at the trial point (α: a ≤ λ | a > λ; β: free at μ | not),
//!   so the next cache is one side of it: no pass re-reads what the last step already ruled out;
//! - the μ-solve evaluates G at up to `PIVOTS` trial points per pass, chosen from a random
//!   sample (Floyd–Rivest style), and decides the entries for a sampled bracket of μ, undoing
//!   the decisions in the rare case the bracket misses;
//! - the first trial point comes from small samples, so that the validation passes over a⁰ and
//!   b⁰ (the latter with the order statistics b_(k), b_(k+1), S_k) already evaluate it and
//!   build the first caches;
//! - the hot loops are branch-free where the branch would be a coin flip, and sum non-negative
//!   terms plainly over blocks of `BLOCK` entries before adding each block to a compensated
//!   (Neumaier) total.
//!
//! Inputs are assumed to be of a magnitude whose sums do not overflow (|x|·(m+n) < f64::MAX).

/// Work counters of one projection.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProjectionStats {
    /// Element reads: one per entry of a⁰, b⁰, a cache or a sample read in a pass, the
    /// validation, selection and output passes included (a sort of s values counts
    /// s·⌈log₂ s⌉, a quickselect pass its range).
    pub visits: u64,
    /// Outer iterations: trial points of [`project`], sweep segments of [`project_sorted`].
    pub iterations: u32,
    /// λ* of problem (9) (α = [a⁰ − λ*]₊): a start for [`project_from`] on a nearby input.
    pub lambda: f64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProjectionError {
    #[error("the projection needs at least one positive (m ≥ 1); a⁰ is empty")]
    EmptyA,
    #[error("the projection needs at least one negative (n ≥ 1); b⁰ is empty")]
    EmptyB,
    #[error("k must be in 1..={n}, got {k}")]
    InvalidK { k: usize, n: usize },
    #[error("{input}[{index}] is not finite ({value})")]
    NonFinite {
        input: &'static str,
        index: usize,
        value: f64,
    },
    #[error("output {output} has length {len}, but its input has {expected} entries")]
    LengthMismatch {
        output: &'static str,
        len: usize,
        expected: usize,
    },
}

/// Reusable scratch space so repeated projections (one per solver iteration) do not allocate.
#[derive(Debug, Default)]
pub struct ProjectionWorkspace {
    /// α-cache A (the a⁰_i strictly inside the current λ-interval) as a range of one buffer;
    /// each pass partitions it into the other one.
    a: [Vec<f64>; 2],
    /// β-cache U (the b⁰_j whose status is not fixed over the current μ/δ intervals), likewise.
    u: [Vec<f64>; 2],
    /// Candidates of one μ-solve (the entries of U not yet folded for this C).
    w: Vec<f64>,
    /// Entries around rank k during the order-statistics pass.
    band: Vec<f64>,
    /// Random sample used to choose pivots.
    sample: Vec<f64>,
    /// Breakpoints of the sampled entries: (t, slope change of Σ clip(b − t, 0, u) at t).
    knots: Vec<(f64, f64)>,
}

/// k = ⌊τ·n⌋ + 1 with a floating-point guard (floor(τn + 1e-9)), clipped to [1, n]
/// (docs/tau-fpl.md §0: τ = 0.29, n = 100 gives 30, not 29). τ = 0 gives 1 (TopPush); NaN or
/// negative τ also give 1, and n = 0 gives 1.
pub fn k_for(tau: f64, n: usize) -> usize {
    let k = (tau * n as f64 + 1e-9).floor() + 1.0;
    if k >= n as f64 {
        n.max(1)
    } else if k >= 1.0 {
        k as usize
    } else {
        1
    }
}

/// Neumaier's compensated sum: the aggregates of docs/tau-fpl.md §2.7 lose digits otherwise.
#[derive(Debug, Clone, Copy, Default)]
struct Sum {
    hi: f64,
    lo: f64,
}

impl Sum {
    #[inline]
    fn add(&mut self, x: f64) {
        let t = self.hi + x;
        self.lo += if self.hi.abs() >= x.abs() {
            (self.hi - t) + x
        } else {
            (x - t) + self.hi
        };
        self.hi = t;
    }

    fn add_sum(&mut self, other: Sum) {
        self.add(other.hi);
        self.add(other.lo);
    }

    fn get(self) -> f64 {
        self.hi + self.lo
    }

    /// self − other with the low parts kept (prefix-sum differences SB_i − SB_j).
    fn minus(self, other: Sum) -> f64 {
        (self.hi - other.hi) + (self.lo - other.lo)
    }
}

/// Hot loops sum their terms (non-negative but for the k = n selection) plainly over blocks of
/// this many entries and add each block's sum to a compensated total: one register per sum,
/// and at most BLOCK·ε relative error per block.
const BLOCK: usize = 64;

/// n·x, and 0 for n = 0 even when x is infinite (an empty group at an unbounded end).
fn scaled(n: usize, x: f64) -> f64 {
    if n == 0 {
        0.0
    } else {
        n as f64 * x
    }
}

/// Σ of a few terms, compensated.
fn sum_of(terms: &[f64]) -> f64 {
    let mut s = Sum::default();
    for &t in terms {
        s.add(t);
    }
    s.get()
}

/// SplitMix64: pivots only need to be unpredictable for the data, and a fixed seed per call
/// keeps the projection a deterministic function of its inputs.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        Rng(0x7A0F_9A11_5EED_0001)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

fn check_shapes(
    a0: &[f64],
    b0: &[f64],
    k: usize,
    alpha: &[f64],
    beta: &[f64],
) -> Result<(), ProjectionError> {
    if a0.is_empty() {
        return Err(ProjectionError::EmptyA);
    }
    if b0.is_empty() {
        return Err(ProjectionError::EmptyB);
    }
    if k == 0 || k > b0.len() {
        return Err(ProjectionError::InvalidK { k, n: b0.len() });
    }
    for (output, len, expected) in [
        ("alpha", alpha.len(), a0.len()),
        ("beta", beta.len(), b0.len()),
    ] {
        if len != expected {
            return Err(ProjectionError::LengthMismatch {
                output,
                len,
                expected,
            });
        }
    }
    Ok(())
}

fn non_finite(input: &'static str, v: &[f64]) -> ProjectionError {
    let index = v.iter().position(|x| !x.is_finite()).unwrap_or(0);
    ProjectionError::NonFinite {
        input,
        index,
        value: v[index],
    }
}

/// Writes α = [a⁰ − λ]₊ and returns C = Σα of the written values (docs/tau-fpl.md §2.6, output: C
/// is recomputed from the output so that the caps are exactly C/k), compensated entry by entry so
/// that C is within an ulp or two of the exact sum.
fn write_alpha(a0: &[f64], lambda: f64, alpha: &mut [f64]) -> f64 {
    // four compensated lanes: one dependency chain per lane, not per entry
    let mut lanes = [Sum::default(); 4];
    let mut xs = alpha.chunks_exact_mut(4);
    let mut a_s = a0.chunks_exact(4);
    for (x4, a4) in (&mut xs).zip(&mut a_s) {
        for ((x, &a), lane) in x4.iter_mut().zip(a4).zip(lanes.iter_mut()) {
            *x = (a - lambda).max(0.0);
            lane.add(*x);
        }
    }
    for (x, &a) in xs.into_remainder().iter_mut().zip(a_s.remainder()) {
        *x = (a - lambda).max(0.0);
        lanes[0].add(*x);
    }
    let mut c = lanes[0];
    for lane in &lanes[1..] {
        c.add_sum(*lane);
    }
    c.get()
}

/// Writes β = clip(b⁰ − μ, 0, u) and returns Σβ.
fn write_beta(b0: &[f64], mu: f64, u: f64, beta: &mut [f64]) -> f64 {
    let mut s = Sum::default();
    for (ys, b_s) in beta.chunks_mut(BLOCK).zip(b0.chunks(BLOCK)) {
        let mut part = 0.0;
        for (y, &b) in ys.iter_mut().zip(b_s) {
            *y = (b - mu).max(0.0).min(u);
            part += *y;
        }
        s.add(part);
    }
    s.get()
}

fn log2_ceil(n: usize) -> u64 {
    u64::from(usize::BITS - n.saturating_sub(1).leading_zeros())
}

// ---------------------------------------------------------------------------------------------
// Reference: sort and sweep (docs/tau-fpl.md §2.4)
// ---------------------------------------------------------------------------------------------

/// Prefix sums SA_p / SB_q as compensated pairs, entry p = Σ of the first p values.
fn prefix_sums(sorted: &[f64]) -> Vec<Sum> {
    let mut out = Vec::with_capacity(sorted.len() + 1);
    let mut s = Sum::default();
    out.push(s);
    for &x in sorted {
        s.add(x);
        out.push(s);
    }
    out
}

/// Reference path: exact sort and sweep (docs/tau-fpl.md §2.4), O(m log m + n log n).
///
/// Sorts both inputs descending and sweeps C = Σα upward over the breakpoints of λ(C) (one per
/// a⁰ entry) and of ν(C) (regime I up to C₀, then the events "μ reaches b_(i+1)" and "δ reaches
/// b_(j)" of regime II); h(C) = λ(C) + ν(C) is linear and decreasing on each segment, and C* is
/// its root. Ties give zero-length segments. `visits` counts each sort as ⌈log₂ len⌉ reads per
/// entry; `iterations` counts segments.
pub fn project_sorted(
    a0: &[f64],
    b0: &[f64],
    k: usize,
    alpha: &mut [f64],
    beta: &mut [f64],
) -> Result<ProjectionStats, ProjectionError> {
    check_shapes(a0, b0, k, alpha, beta)?;
    if a0.iter().any(|x| !x.is_finite()) {
        return Err(non_finite("a0", a0));
    }
    if b0.iter().any(|x| !x.is_finite()) {
        return Err(non_finite("b0", b0));
    }
    let (m, n) = (a0.len(), b0.len());
    let kf = k as f64;
    let mut stats = ProjectionStats {
        // validation, copies, sorts, prefix sums
        visits: (m + n) as u64 * 3 + m as u64 * log2_ceil(m) + n as u64 * log2_ceil(n),
        iterations: 0,
        lambda: 0.0,
    };
    let mut a = a0.to_vec();
    let mut b = b0.to_vec();
    a.sort_unstable_by(|x, y| y.total_cmp(x));
    b.sort_unstable_by(|x, y| y.total_cmp(x));
    let sa = prefix_sums(&a);
    let sb = prefix_sums(&b);
    let s_k = sb[k].get();

    // Lemma 1
    if kf * a[0] + s_k <= 0.0 {
        alpha.fill(0.0);
        beta.fill(0.0);
        stats.visits += (m + n) as u64;
        stats.lambda = a[0];
        return Ok(stats);
    }

    /// The β-side state: regime I (β = C/k on the k largest) or regime II with j capped and i
    /// positive entries (j < k < i).
    #[derive(Clone, Copy)]
    enum Side {
        Top,
        Split { j: usize, i: usize },
    }
    let c0 = if k < n {
        kf * (b[k - 1] - b[k])
    } else {
        f64::INFINITY
    };
    let mut side = if k < n && c0 <= 0.0 {
        Side::Split { j: k - 1, i: k + 1 }
    } else {
        Side::Top
    };
    let (mut p, mut c_cur) = (1usize, 0.0f64);
    let c_star = loop {
        stats.iterations += 1;
        stats.visits += 2;
        let pf = p as f64;
        // λ(C) = (SA_p − C)/p while λ ≥ a_(p+1)
        let next_a = if p < m {
            sa[p].get() - pf * a[p]
        } else {
            f64::INFINITY
        };
        // ν(C) = ν0 + ν1·C on this segment, and the next β event
        let (nu0, nu1, c_mu, c_delta) = match side {
            Side::Top => (
                s_k / kf,
                -1.0 / kf,
                if k < n { c0 } else { f64::INFINITY },
                f64::INFINITY,
            ),
            Side::Split { j, i } => {
                let (jf, w) = (j as f64, (i - j) as f64);
                let r = 1.0 - jf / kf;
                let d = sb[i].minus(sb[j]);
                let c_mu = if i < n {
                    kf * (d - w * b[i]) / (kf - jf)
                } else {
                    f64::INFINITY
                };
                let c_delta = if j >= 1 {
                    kf * (w * b[j - 1] - d) / (i - k) as f64
                } else {
                    f64::INFINITY
                };
                (
                    d * r / w + sb[j].get() / kf,
                    -r * r / w - jf / (kf * kf),
                    c_mu,
                    c_delta,
                )
            }
        };
        let h0 = sa[p].get() / pf + nu0;
        let h1 = -1.0 / pf + nu1;
        let next_b = c_mu.min(c_delta);
        let c_end = c_cur.max(next_a.min(next_b));
        if c_end == f64::INFINITY || h0 + h1 * c_end <= 0.0 {
            break (-h0 / h1).clamp(c_cur, c_end);
        }
        // α first on ties
        if next_a <= next_b {
            p += 1;
        } else {
            side = match side {
                Side::Top => Side::Split { j: k - 1, i: k + 1 },
                Side::Split { j, i } if c_mu <= c_delta => Side::Split { j, i: i + 1 },
                Side::Split { j, i } => Side::Split { j: j - 1, i },
            };
        }
        c_cur = c_end;
    };

    let lambda = (sa[p].get() - c_star) / p as f64;
    stats.lambda = lambda;
    let c = write_alpha(a0, lambda, alpha);
    let u = c / kf;
    match side {
        Side::Top if k == n => beta.fill(u),
        Side::Top => {
            write_beta(b0, b[k], u, beta);
        }
        Side::Split { j, i } => {
            let mu = (sb[i].minus(sb[j]) - (1.0 - j as f64 / kf) * c) / (i - j) as f64;
            write_beta(b0, mu, u, beta);
        }
    }
    stats.visits += (m + n) as u64;
    Ok(stats)
}

// ---------------------------------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------------------------------

/// The outcome of selecting rank r (0-based, descending) in a slice.
struct Selected {
    /// The r-th largest value.
    value: f64,
    /// Σ of the r + 1 largest values.
    top_sum: Sum,
    /// The (r+1)-th largest value, −∞ if there is none.
    next: f64,
}

/// Quickselect with three-way partitions (ties fold in one step), median-of-3 random pivots.
/// Reorders `v`; every partition pass reads its range once.
fn select_desc(v: &mut [f64], r: usize, rng: &mut Rng, visits: &mut u64) -> Selected {
    let (mut lo, mut hi) = (0usize, v.len());
    // v[..lo] holds values above the range (all of rank < r), v[hi..] values below it.
    let mut top_sum = Sum::default();
    let mut below_max = f64::NEG_INFINITY;
    loop {
        let len = hi - lo;
        if len == 1 {
            top_sum.add(v[lo]);
            return Selected {
                value: v[lo],
                top_sum,
                next: below_max,
            };
        }
        let mut pick = || v[lo + rng.below(len)];
        let (x, y, z) = (pick(), pick(), pick());
        let pivot = x.max(y).min(x.min(y).max(z));
        *visits += len as u64 + 3;
        let (mut gt, mut i, mut lt) = (lo, lo, hi);
        let mut gt_sum = Sum::default();
        let mut lt_max = f64::NEG_INFINITY;
        while i < lt {
            let x = v[i];
            if x > pivot {
                gt_sum.add(x);
                v.swap(gt, i);
                gt += 1;
                i += 1;
            } else if x < pivot {
                lt_max = lt_max.max(x);
                lt -= 1;
                v.swap(i, lt);
            } else {
                i += 1;
            }
        }
        // v[lo..gt] > pivot, v[gt..lt] == pivot, v[lt..hi] < pivot
        if r < gt {
            below_max = pivot;
            hi = gt;
        } else if r < lt {
            top_sum.add_sum(gt_sum);
            top_sum.add((r + 1 - gt) as f64 * pivot);
            let next = if r + 1 < lt {
                pivot
            } else {
                lt_max.max(below_max)
            };
            return Selected {
                value: pivot,
                top_sum,
                next,
            };
        } else {
            top_sum.add_sum(gt_sum);
            top_sum.add((lt - gt) as f64 * pivot);
            lo = lt;
        }
    }
}

/// The order statistics of b⁰ that Algorithm 2 needs up front (docs/tau-fpl.md §2.6, state).
struct TopK {
    /// b_(1)
    max: f64,
    /// b_(k+1), −∞ when k = n
    next: f64,
    /// S_k = Σ_{j≤k} b_(j)
    s_k: f64,
    /// C₀ = k·(b_(k) − b_(k+1)), the end of regime I (+∞ when k = n)
    c0: f64,
}

/// The order-statistics side of the pass over b⁰ (Floyd–Rivest): entries above a sampled
/// upper pivot are counted and summed, entries below a sampled lower pivot only give their
/// maximum, and the band between is copied for a quickselect.
#[derive(Debug, Clone, Copy)]
struct Selection {
    p_lo: f64,
    p_hi: f64,
    /// k = n: everything counts as "above", S_n = Σ b⁰.
    all: bool,
    above: usize,
    /// Σ_{b > p_hi} (b − p_hi) (Σ b⁰ when `all`): a max, not a select, so no branch.
    excess: Sum,
    max: f64,
    /// false once a non-finite entry went by (reported after the pass).
    finite: bool,
}

impl Selection {
    /// Pivots from a random sample: sample ranks k·s/n ∓ 3 standard deviations, ±∞ where that
    /// leaves the sample.
    fn new(
        b0: &[f64],
        k: usize,
        sample: &mut Vec<f64>,
        rng: &mut Rng,
        visits: &mut u64,
    ) -> Selection {
        let n = b0.len();
        let (p_lo, p_hi) = if k == n || n < 64 {
            (f64::NEG_INFINITY, f64::INFINITY)
        } else {
            sample_pivots(b0, k, 3.0, sample, rng, visits)
        };
        Selection::new_with(p_lo, p_hi, k == n)
    }

    fn new_with(p_lo: f64, p_hi: f64, all: bool) -> Selection {
        Selection {
            p_lo: p_lo + 0.0,
            p_hi: p_hi + 0.0,
            all,
            above: 0,
            excess: Sum::default(),
            max: f64::NEG_INFINITY,
            finite: true,
        }
    }

    /// One entry; `part` is the block's partial sum of `excess`.
    #[inline]
    fn see(&mut self, b: f64, band: &mut Vec<f64>, part: &mut f64) {
        self.finite &= b.is_finite();
        // a rarely taken branch, not f64::max: its NaN handling makes a long dependency chain
        if b > self.max {
            self.max = b;
        }
        if self.all {
            *part += b;
            return;
        }
        let b0 = b + 0.0;
        let above = lt(self.p_hi, b0);
        self.above += one(above);
        *part += (b - self.p_hi).max(0.0);
        // one branch, rarely taken
        if !above & !lt(b0, self.p_lo) != 0 {
            band.push(b);
        }
    }

    /// Quickselect inside the band. If the sampled pivots missed ranks k and k + 1 (rare), a
    /// second pass with pivots three times as far apart, and if that misses too, over all of
    /// b⁰.
    fn finish(
        mut self,
        b0: &[f64],
        k: usize,
        band: &mut Vec<f64>,
        sample: &mut Vec<f64>,
        rng: &mut Rng,
        visits: &mut u64,
    ) -> TopK {
        if self.all {
            return TopK {
                max: self.max,
                next: f64::NEG_INFINITY,
                s_k: self.excess.get(),
                c0: f64::INFINITY,
            };
        }
        let hit = |sel: &Selection, band: &Vec<f64>| sel.above < k && k < sel.above + band.len();
        if !hit(&self, band) {
            let (p_lo, p_hi) = sample_pivots(b0, k, 9.0, sample, rng, visits);
            let max = self.max;
            self = Selection::new_with(p_lo, p_hi, false);
            self.max = max;
            *visits += b0.len() as u64;
            b_pass(b0, &mut self, band);
        }
        let mut s_k = Sum::default();
        if hit(&self, band) {
            s_k = self.excess;
            s_k.add(scaled(self.above, self.p_hi));
        } else {
            band.clear();
            band.extend_from_slice(b0);
            *visits += b0.len() as u64;
            self.above = 0;
        }
        let sel = select_desc(band, k - self.above - 1, rng, visits);
        s_k.add_sum(sel.top_sum);
        TopK {
            max: self.max,
            next: sel.next,
            s_k: s_k.get(),
            c0: k as f64 * (sel.value - sel.next),
        }
    }
}

/// Two values of a random sample of b⁰ that bracket rank k with high probability: the sample's
/// values at ranks k·s/n ∓ (z standard deviations + 2), ±∞ where that leaves the sample.
fn sample_pivots(
    b0: &[f64],
    k: usize,
    z: f64,
    sample: &mut Vec<f64>,
    rng: &mut Rng,
    visits: &mut u64,
) -> (f64, f64) {
    let n = b0.len();
    let s = ((n as f64).powf(2.0 / 3.0) as usize).clamp(32, n);
    sample.clear();
    for _ in 0..s {
        sample.push(b0[rng.below(n)]);
    }
    *visits += s as u64;
    if sample.iter().any(|x| !x.is_finite()) {
        // the full pass reports it
        return (f64::NEG_INFINITY, f64::INFINITY);
    }
    let q = k as f64 / n as f64;
    let centre = q * s as f64;
    let spread = z * (s as f64 * q * (1.0 - q)).sqrt() + 2.0;
    let (upper, lower) = (centre - spread, centre + spread);
    let p_lo = if lower < (s - 1) as f64 {
        select_desc(sample, lower as usize, rng, visits).value
    } else {
        f64::NEG_INFINITY
    };
    let p_hi = if upper >= 0.0 {
        // after the first selection the sample's head holds its larger values
        let head = if p_lo > f64::NEG_INFINITY {
            lower as usize
        } else {
            s
        };
        select_desc(&mut sample[..head], upper as usize, rng, visits).value
    } else {
        f64::INFINITY
    };
    (p_lo, p_hi)
}

/// The pass over b⁰ when no μ-solve rides along: finiteness and the selection.
fn b_pass(b0: &[f64], sel: &mut Selection, band: &mut Vec<f64>) {
    band.clear();
    for block in b0.chunks(BLOCK) {
        let mut part = 0.0;
        for &b in block {
            sel.see(b, band, &mut part);
        }
        sel.excess.add(part);
    }
}

// ---------------------------------------------------------------------------------------------
// Algorithm 2: bisection + divide and conquer (docs/tau-fpl.md §2.6)
// ---------------------------------------------------------------------------------------------

/// Steps before the tolerance finish gives up on the exact one.
const MAX_ITERATIONS: u32 = 300;
/// Passes of one μ-solve before it settles for the statuses at the window's midpoint.
const MAX_ROUNDS: u32 = 200;
/// Sampled pivots sit this many standard errors of the sampled G either side of its root.
const Z: f64 = 3.0;
/// Newton steps overshoot by this fraction so that they land beyond λ* and close the interval
/// from both sides; doubled while they fall short.
const OVERSHOOT: f64 = 0.125;

/// β entries whose status is known: capped (β = C/k) or free (β = b − μ); zeros are dropped.
#[derive(Debug, Clone, Copy, Default)]
struct Folded {
    n_cap: usize,
    s_cap: Sum,
    n_free: usize,
    s_free: Sum,
}

impl Folded {
    fn merged(mut self, other: Folded) -> Folded {
        self.n_cap += other.n_cap;
        self.s_cap.add_sum(other.s_cap);
        self.n_free += other.n_free;
        self.s_free.add_sum(other.s_free);
        self
    }

    /// The part of G(t) = Σ_j clip(b⁰_j − t, 0, u) − C that these entries and C = k·u
    /// contribute: (n_cap − k)·u + s_free − n_free·t, as terms for a compensated sum.
    fn g_base(&self, t: f64, u: f64, kf: f64) -> [f64; 4] {
        [
            (self.n_cap as f64 - kf) * u,
            self.s_free.hi,
            self.s_free.lo,
            -(self.n_free as f64) * t,
        ]
    }
}

/// A cache: entries [start, end) of buffer `cur` of a pair; `virgin` while it is still the
/// whole input (read from there, never copied).
#[derive(Debug, Clone, Copy)]
struct Cache {
    cur: usize,
    start: usize,
    end: usize,
    virgin: bool,
}

impl Cache {
    fn new() -> Cache {
        Cache {
            cur: 0,
            start: 0,
            end: 0,
            virgin: true,
        }
    }

    fn is_empty(&self) -> bool {
        !self.virgin && self.start == self.end
    }

    fn len(&self, input: usize) -> usize {
        if self.virgin {
            input
        } else {
            self.end - self.start
        }
    }

    /// The source of the next pass and the buffer it partitions into.
    fn split<'a>(
        &self,
        input: &'a [f64],
        pair: &'a mut [Vec<f64>; 2],
    ) -> (&'a [f64], &'a mut [f64]) {
        let [x, y] = pair;
        let (cur, other) = if self.cur == 0 { (x, y) } else { (y, x) };
        if self.virgin {
            (input, cur.as_mut_slice())
        } else {
            (&cur[self.start..self.end], other.as_mut_slice())
        }
    }

    /// After a pass into the other buffer: keep its part [start, end).
    fn keep(&mut self, start: usize, end: usize) {
        if !self.virgin {
            self.cur = 1 - self.cur;
        }
        self.virgin = false;
        (self.start, self.end) = (start, end);
    }
}

/// The β-side state: μ ∈ [mu_lo, mu_hi] and δ ∈ [d_lo, d_hi] for every C in [C(hi), C(lo)],
/// the entries these bounds fix, and the cache U of the others.
struct BetaState {
    mu_lo: f64,
    mu_hi: f64,
    d_lo: f64,
    d_hi: f64,
    fixed: Folded,
    cache: Cache,
}

impl BetaState {
    /// No bounds yet: b_(k+1) (μ(0⁺) = δ(0⁺), docs/tau-fpl.md §2.6) is known only after the
    /// first pass over b⁰.
    fn new() -> BetaState {
        BetaState {
            mu_lo: f64::NEG_INFINITY,
            mu_hi: f64::INFINITY,
            d_lo: f64::NEG_INFINITY,
            d_hi: f64::INFINITY,
            fixed: Folded::default(),
            cache: Cache::new(),
        }
    }

    /// The μ-window these bounds give for one C (u = C/k).
    fn window(&self, u: f64) -> (f64, f64) {
        let (lo, hi) = (self.mu_lo.max(self.d_lo - u), self.mu_hi.min(self.d_hi - u));
        // crossed only by round-off, when C sits on an end of its interval
        (lo.min(hi), lo.max(hi))
    }
}

/// Trial points per pass of a μ-solve.
const PIVOTS: usize = 8;

/// One pass of a μ-solve: G is evaluated at the trial points t[..np] (sorted, inside the
/// window), and the entries are decided for μ ∈ [decide.0, decide.1] — the window, or a guess
/// inside it whose decisions are undone if the evaluations put μ outside. np = 0: no
/// candidate has a breakpoint inside the window, so every status is constant there; decide
/// them all at decide.0 = decide.1 and take μ from the closed form.
#[derive(Debug, Clone, Copy)]
struct Plan {
    t: [f64; PIVOTS],
    np: usize,
    decide: (f64, f64),
}

impl Plan {
    fn new(points: &[f64], decide: (f64, f64)) -> Plan {
        let mut t = [0.0; PIVOTS];
        t[..points.len()].copy_from_slice(points);
        Plan {
            t,
            np: points.len(),
            decide,
        }
    }

    fn collapse(t: f64) -> Plan {
        Plan::new(&[], (t, t))
    }

    fn points(&self) -> &[f64] {
        &self.t[..self.np]
    }
}

/// Adds clip(b − t, 0, u) at every trial point.
#[inline]
fn add_clips(sums: &mut [Sum; PIVOTS], plan: &Plan, b: f64, u: f64) {
    for (s, &t) in sums.iter_mut().zip(plan.points()) {
        s.add((b - t).max(0.0).min(u));
    }
}

/// The plan for the candidates `cands` (all entries not in `agg`) in the window (wlo, whi).
/// Small sets: all their breakpoints inside the window are trial points. Larger ones: a random
/// sample gives the sampled Ĝ and its standard error; the sampled breakpoints where Ĝ is ±Z
/// standard errors from 0 bracket μ with high probability (Floyd–Rivest style), so, if
/// `guess`, the entries are decided for μ between them and the trial points spread over that
/// bracket (else over the whole window, deciding for the window).
#[allow(clippy::too_many_arguments)]
fn plan_pass(
    cands: &[f64],
    agg: &Folded,
    kf: f64,
    u: f64,
    (wlo, whi): (f64, f64),
    guess: bool,
    sample: &mut Vec<f64>,
    knots: &mut Vec<(f64, f64)>,
    rng: &mut Rng,
    visits: &mut u64,
) -> Plan {
    let len = cands.len();
    let window = (wlo, whi);
    let inside = |t: f64| wlo < t && t < whi;
    // a point inside the window for the fallbacks (the window is infinite only on the first
    // pass over b⁰, and then every entry has breakpoints inside)
    let mid = if (whi - wlo).is_finite() {
        wlo + 0.5 * (whi - wlo)
    } else {
        cands.first().map_or(0.0, |&b| b - 0.5 * u)
    };
    knots.clear();
    if len <= PIVOTS / 2 {
        *visits += len as u64;
        for &b in cands {
            for t in [b - u, b] {
                if inside(t) {
                    knots.push((t, 0.0));
                }
            }
        }
        if knots.is_empty() {
            return Plan::collapse(mid);
        }
        knots.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
        let mut plan = Plan::new(&[], window);
        for (x, kn) in plan.t.iter_mut().zip(knots.iter()) {
            *x = kn.0;
        }
        plan.np = knots.len();
        return plan;
    }
    let s = (1.5 * (len as f64 / (len as f64).log2()).powf(2.0 / 3.0)) as usize;
    let s = s.max(PIVOTS).min(len);
    let omega = len as f64 / s as f64;
    sample.clear();
    let mut v_lo = Sum::default(); // Σ_sample clip(b − wlo, 0, u)
    let mut slope = 0.0; // its slope just above wlo
    for _ in 0..s {
        let b = cands[rng.below(len)];
        sample.push(b);
        v_lo.add((b - wlo).max(0.0).min(u));
        if b - u <= wlo && b > wlo {
            slope -= 1.0;
        }
        if inside(b - u) {
            knots.push((b - u, -1.0));
        }
        if inside(b) {
            knots.push((b, 1.0));
        }
    }
    *visits += s as u64;
    if knots.is_empty() {
        // the sample missed the few entries with breakpoints inside
        return Plan::new(&[mid], window);
    }
    knots.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
    *visits += knots.len() as u64 * (1 + log2_ceil(knots.len()));
    // ĝ(t) = base(t) + ω·V(t) at every knot (V is piecewise linear between knots)
    let (mut t_prev, mut v) = (wlo, v_lo.get());
    for knot in knots.iter_mut() {
        let (t, d) = *knot;
        if slope != 0.0 {
            v += slope * (t - t_prev);
        }
        let base = agg.g_base(t, u, kf);
        knot.1 = sum_of(&[base[0], base[1], base[2], base[3], omega * v]);
        slope += d;
        t_prev = t;
    }
    let last = knots.len() - 1;
    let t_hat = knots[knots.iter().position(|kn| kn.1 <= 0.0).unwrap_or(last)].0;
    let (mut m1, mut m2) = (0.0, 0.0);
    for &b in sample.iter() {
        let x = (b - t_hat).max(0.0).min(u);
        m1 += x;
        m2 += x * x;
    }
    *visits += s as u64;
    let var = (m2 / s as f64 - (m1 / s as f64).powi(2)).max(0.0);
    let margin = Z * len as f64 * (var / s as f64).sqrt();
    let (i1, i2) = if guess {
        (
            knots.iter().rposition(|kn| kn.1 >= margin),
            knots.iter().position(|kn| kn.1 <= -margin),
        )
    } else {
        (None, None)
    };
    let (a, b) = (i1.unwrap_or(0), i2.unwrap_or(last));
    let (a, b) = (a.min(b), a.max(b));
    let decide = (
        i1.map_or(wlo, |_| knots[a].0),
        i2.map_or(whi, |_| knots[b].0),
    );
    let mut plan = Plan::new(&[], decide);
    plan.np = (b - a + 1).min(PIVOTS);
    for (i, x) in plan.t[..plan.np].iter_mut().enumerate() {
        let r = if plan.np == 1 {
            a
        } else {
            a + i * (b - a) / (plan.np - 1)
        };
        *x = knots[r].0;
    }
    plan
}

/// How the first pass of a μ-solve treats the entries it decides.
enum First<'a> {
    /// Write them to the partition buffer (free at the front, the others at the back) so that
    /// U can become one side of it; what the outer bounds fix is left out (and summed).
    Partition,
    /// Only sum them (the caches stay as they are): for the last solve, whose partition would
    /// not be used.
    ReadOnly,
    /// Partition over b⁰, also checking finiteness and doing the selection's classification.
    Select(&'a mut Selection, &'a mut Vec<f64>),
}

/// A μ-solve between its first pass and the rest.
struct MuSearch {
    /// C and u = C/k.
    c: f64,
    u: f64,
    window: (f64, f64),
    plan: Plan,
    /// The fixed entries: the state's plus what this solve's outer prune found.
    fixed: Folded,
    /// The entries decided by the plan (the others are in W).
    loc: Folded,
    /// Σ_W clip(b − t, 0, u) at the plan's trial points.
    sums: [Sum; PIVOTS],
    /// Whether the decided entries were written to the partition buffer: [0, front) and
    /// [back, len).
    partitioned: bool,
    front: usize,
    back: usize,
    len: usize,
}

/// What a μ-solve found.
struct MuSolve {
    mu: f64,
    nu: f64,
    /// Capped and free counts at μ over all of b⁰ (for the slope of f).
    n_cap: usize,
    n_free: usize,
    /// As in [`MuSearch`]: the fixed entries, the entries decided in this solve, and (unless
    /// the solve was `ReadOnly`) U split at μ into free entries [0, front) and the others
    /// [back, len) (entries the outer bounds fixed leave a gap between).
    fixed: Folded,
    loc: Folded,
    front: usize,
    back: usize,
    len: usize,
}

/// Comparison masks (all ones when true) from the sign of a difference, for the hot loops'
/// integer bookkeeping (counts, partition indices) without branches: their conditions are coin
/// flips on typical data. (Float sums there use max/min forms instead: a masked float turns back
/// into a branch.) The operands must not be −0.0 (normalise with `+ 0.0`) nor both infinite.
#[inline(always)]
fn lt(x: f64, y: f64) -> u64 {
    ((x - y).to_bits() as i64 >> 63) as u64
}

#[inline(always)]
fn one(m: u64) -> usize {
    (m & 1) as usize
}

/// A block's counts and plain partial sums for [`Pass`].
#[derive(Default)]
struct Part {
    n: [usize; 5],
    s: [f64; 4],
}

/// No outer bounds: (mu_lo, mu_hi, d_lo, d_hi) that fix nothing.
const UNBOUNDED: [f64; 4] = [
    f64::NEG_INFINITY,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::INFINITY,
];

/// One pass of a μ-solve over β entries: what it fixes by the outer bounds ("prune U" of
/// docs/tau-fpl.md §2.6, in that order: zero, capped, free) and what it decides for the plan's
/// window (lo, hi). Counts and select-free sums over the entries that are not left in W, kept in
/// locals so that the hot loops stay in registers; with (L, L + Wd) = (mu_hi, d_lo) and δ-cap
/// level d_hi:
///
/// - p[0] = Σ [b − d_hi]₊ (only the bound-capped entries contribute);
/// - p[1] = Σ clip(b − L, 0, Wd) (bound-free entries give b − L, those ≥ d_lo give Wd);
/// - p[2] = Σ [b − u − hi]₊ (capped entries, by bound or by decision);
/// - p[3] = Σ clip(b − lo, 0, u) (capped give u, free b − lo, zero 0).
struct Pass {
    u: f64,
    lo: f64,
    hi: f64,
    /// (mu_lo, mu_hi, d_lo, d_hi), −0.0 normalised like lo and hi.
    bounds: [f64; 4],
    /// (L, Wd) as above, (0, 0) when no entry can be bound-free.
    free_band: (f64, f64),
    /// Bound-capped, bound-free, ≥ d_lo but not bound-free, decided capped, decided free.
    n: [usize; 5],
    p: [Sum; 4],
    /// Σ_W clip(b − t, 0, u) at the trial points.
    sums: [Sum; PIVOTS],
}

impl Pass {
    fn new(u: f64, (lo, hi): (f64, f64), bounds: [f64; 4]) -> Pass {
        let bounds = bounds.map(|x| x + 0.0);
        let (mu_hi, d_lo) = (bounds[1], bounds[2]);
        let free_band = if (d_lo - mu_hi).is_finite() && d_lo >= mu_hi {
            (mu_hi, d_lo - mu_hi)
        } else {
            (0.0, 0.0)
        };
        Pass {
            u,
            lo: lo + 0.0,
            hi: hi + 0.0,
            bounds,
            free_band,
            n: [0; 5],
            p: [Sum::default(); 4],
            sums: [Sum::default(); PIVOTS],
        }
    }

    /// One entry: None if it has a breakpoint strictly inside the decide window (the caller
    /// keeps it in W), else the increments of the partition buffer's front (decided free) and
    /// back (decided zero or capped); entries the bounds fix are only counted. Written with
    /// b − u so that a trial point t = b − u decides its own entry exactly.
    #[inline(always)]
    fn visit<const PRUNE: bool>(&mut self, b: f64, part: &mut Part) -> Option<(usize, usize)> {
        let b = b + 0.0;
        let bu = b - self.u;
        let (lo, hi) = (self.lo, self.hi);
        // one branch, rarely taken (`&&` would branch on each coin-flip comparison)
        if lt(lo, b) & lt(bu, hi) & (lt(b, hi) | lt(lo, bu)) != 0 {
            return None;
        }
        let keep = if PRUNE {
            let [mu_lo, mu_hi, d_lo, d_hi] = self.bounds;
            let zero = !lt(mu_lo, b);
            let fcap = !lt(b, d_hi) & !zero;
            let ffree = !lt(b, mu_hi) & !lt(d_lo, b) & !zero & !fcap;
            let top = !lt(b, d_lo) & !ffree;
            part.n[0] += one(fcap);
            part.n[1] += one(ffree);
            part.n[2] += one(top);
            let (l, wd) = self.free_band;
            part.s[0] += (b - d_hi).max(0.0);
            part.s[1] += (b - l).max(0.0).min(wd);
            !(zero | fcap | ffree)
        } else {
            u64::MAX
        };
        let cap = !lt(bu, hi) & keep;
        let free = lt(lo, b) & keep & !cap;
        part.n[3] += one(cap);
        part.n[4] += one(free);
        part.s[2] += (bu - hi).max(0.0);
        part.s[3] += (b - lo).max(0.0).min(self.u);
        Some((one(free), one(keep & !free)))
    }

    fn flush(&mut self, part: &Part) {
        for (s, &x) in self.p.iter_mut().zip(&part.s) {
            s.add(x);
        }
        for (n, &x) in self.n.iter_mut().zip(&part.n) {
            *n += x;
        }
    }

    /// (what the bounds fixed, what the plan decided) as counts and plain sums.
    fn folded(&self) -> (Folded, Folded) {
        let [n_fcap, n_ffree, n_top, n_cap, n_free] = self.n;
        let (u, lo, hi) = (self.u, self.lo, self.hi);
        let (l, wd) = self.free_band;
        let d_hi = self.bounds[3];
        let [p0, p1, p2, p3] = self.p;
        let s_fcap = sum_of(&[p0.hi, p0.lo, scaled(n_fcap, d_hi)]);
        let s_ffree = sum_of(&[p1.hi, p1.lo, -scaled(n_top, wd), scaled(n_ffree, l)]);
        // Σ_{decided capped} b = p2 − Σ_{bound-capped} (b − u − hi) + n_cap·(u + hi)
        let s_cap = sum_of(&[
            p2.hi,
            p2.lo,
            -s_fcap,
            scaled(n_fcap, u),
            scaled(n_fcap, hi),
            scaled(n_cap, u),
            scaled(n_cap, hi),
        ]);
        // Σ_{decided free} b = p3 − (all capped)·u − Σ_{bound-free} (b − lo) + n_free·lo
        let s_free = sum_of(&[
            p3.hi,
            p3.lo,
            -scaled(n_fcap + n_cap, u),
            -s_ffree,
            scaled(n_ffree, lo),
            scaled(n_free, lo),
        ]);
        let fold = |n_cap, s_cap, n_free, s_free| Folded {
            n_cap,
            s_cap: Sum { hi: s_cap, lo: 0.0 },
            n_free,
            s_free: Sum {
                hi: s_free,
                lo: 0.0,
            },
        };
        (
            fold(n_fcap, s_fcap, n_ffree, s_ffree),
            fold(n_cap, s_cap, n_free, s_free),
        )
    }
}

/// The first pass of a μ-solve over U (b⁰ while U is virgin): the outer prune, then the plan's
/// decisions; the undecided entries go to W with their sums at the trial points. With
/// `window` given (narrower than the bounds give) the plan works in it; `guess` lets it decide
/// for a sampled bracket of μ inside (else for the whole window).
#[allow(clippy::too_many_arguments)]
fn mu_start(
    b0: &[f64],
    st: &BetaState,
    ws: &mut ProjectionWorkspace,
    c: f64,
    kf: f64,
    rng: &mut Rng,
    visits: &mut u64,
    first: First,
    window: Option<(f64, f64)>,
    guess: bool,
) -> MuSearch {
    let u = c / kf;
    let window = window.unwrap_or_else(|| st.window(u));
    let ProjectionWorkspace {
        u: pair,
        w,
        sample,
        knots,
        ..
    } = ws;
    let (src, dst) = st.cache.split(b0, pair);
    let len = src.len();
    let plan = plan_pass(
        src, &st.fixed, kf, u, window, guess, sample, knots, rng, visits,
    );
    *visits += len as u64;
    w.clear();
    let (mut front, mut back) = (0, len);
    let partitioned = !matches!(first, First::ReadOnly);
    let bounds = [st.mu_lo, st.mu_hi, st.d_lo, st.d_hi];
    let mut pass;
    match first {
        First::Partition => {
            pass = Pass::new(u, plan.decide, bounds);
            for block in src.chunks(BLOCK) {
                let mut part = Part::default();
                for &b in block {
                    match pass.visit::<true>(b, &mut part) {
                        Some((f, k)) => {
                            dst[front] = b;
                            dst[back - 1] = b;
                            front += f;
                            back -= k;
                        }
                        None => {
                            w.push(b);
                            add_clips(&mut pass.sums, &plan, b, u);
                        }
                    }
                }
                pass.flush(&part);
            }
        }
        First::ReadOnly => {
            pass = Pass::new(u, plan.decide, bounds);
            for block in src.chunks(BLOCK) {
                let mut part = Part::default();
                for &b in block {
                    if pass.visit::<true>(b, &mut part).is_none() {
                        w.push(b);
                        add_clips(&mut pass.sums, &plan, b, u);
                    }
                }
                pass.flush(&part);
            }
        }
        First::Select(sel, band) => {
            // the bounds are still trivial here, so there is nothing to prune
            pass = Pass::new(u, plan.decide, UNBOUNDED);
            let mut se = *sel;
            band.clear();
            for block in src.chunks(BLOCK) {
                let (mut part, mut excess) = (Part::default(), 0.0);
                for &b in block {
                    se.see(b, band, &mut excess);
                    match pass.visit::<false>(b, &mut part) {
                        Some((f, k)) => {
                            dst[front] = b;
                            dst[back - 1] = b;
                            front += f;
                            back -= k;
                        }
                        None => {
                            w.push(b);
                            add_clips(&mut pass.sums, &plan, b, u);
                        }
                    }
                }
                pass.flush(&part);
                se.excess.add(excess);
            }
            *sel = se;
        }
    }
    if !partitioned {
        // the partition buffer only takes the decisions of later passes, to undo them
        (front, back) = (0, dst.len());
    }
    MuSearch {
        c,
        u,
        window,
        plan,
        fixed: st.fixed.merged(pass.folded().0),
        loc: pass.folded().1,
        sums: pass.sums,
        partitioned,
        front,
        back,
        len,
    }
}

/// μ(C) and ν(C) in regime II (C > C₀, k < n) from a started search: the root of the
/// non-increasing G(μ) = Σ_j clip(b⁰_j − μ, 0, u) − C, u = C/k (eq. 11), by a randomized
/// breakpoint search over W inside the window (docs/tau-fpl.md §2.6, `solve_mu`), then
/// ν = μ + (1/k) Σ_j [b⁰_j − μ − u]₊ from the folded sums.
fn mu_finish(
    b0: &[f64],
    st: &BetaState,
    ws: &mut ProjectionWorkspace,
    mut search: MuSearch,
    kf: f64,
    rng: &mut Rng,
    visits: &mut u64,
) -> MuSolve {
    let u = search.u;
    let (mut wlo, mut whi) = search.window;
    let mut plan = search.plan;
    let mut sums = search.sums;
    let mut loc = search.loc;
    let mut fixed = search.fixed;
    let (mut front, mut back) = (search.front, search.back);
    // the partition buffer before the last pass
    let mut mark = if search.partitioned {
        (0, search.len)
    } else {
        (front, back)
    };
    let mut loc_mark = Folded::default();
    let mut first_pass = true;
    let mut reruns = 0;
    let mut exact = None;
    let mut rounds = 1;
    loop {
        let agg = fixed.merged(loc);
        if plan.np > 0 {
            // G is non-increasing: μ lies between the last point with G > 0 and the first
            // with G < 0
            for (&t, s) in plan.points().iter().zip(&sums) {
                let base = agg.g_base(t, u, kf);
                let g = sum_of(&[base[0], base[1], base[2], base[3], s.hi, s.lo]);
                if g > 0.0 {
                    wlo = wlo.max(t);
                } else {
                    if g < 0.0 {
                        whi = whi.min(t);
                    } else {
                        exact = Some(t);
                    }
                    break;
                }
            }
            if let Some(t) = exact {
                (wlo, whi) = (t, t);
            }
            if !(plan.decide.0 <= wlo && whi <= plan.decide.1) {
                // the guess missed μ: undo its decisions
                if first_pass && !search.partitioned {
                    // they were not written down: the first pass again, for the new window
                    // (guessing again, but not forever)
                    reruns += 1;
                    search = mu_start(
                        b0,
                        st,
                        ws,
                        search.c,
                        kf,
                        rng,
                        visits,
                        First::ReadOnly,
                        Some((wlo, whi)),
                        reruns < 3,
                    );
                    plan = search.plan;
                    sums = search.sums;
                    fixed = search.fixed;
                    loc = search.loc;
                    (front, back) = (search.front, search.back);
                    mark = (front, back);
                    continue;
                }
                let (pair, w) = (&mut ws.u, &mut ws.w);
                let dst = st.cache.split(b0, pair).1;
                *visits += (front - mark.0 + mark.1 - back) as u64;
                w.extend_from_slice(&dst[mark.0..front]);
                w.extend_from_slice(&dst[back..mark.1]);
                (front, back) = mark;
                loc = loc_mark;
            }
        }
        first_pass = false;
        if ws.w.is_empty() {
            break;
        }
        rounds += 1;
        plan = if wlo == whi || rounds > MAX_ROUNDS {
            Plan::collapse(wlo + 0.5 * (whi - wlo))
        } else {
            let agg = fixed.merged(loc);
            plan_pass(
                &ws.w,
                &agg,
                kf,
                u,
                (wlo, whi),
                true,
                &mut ws.sample,
                &mut ws.knots,
                rng,
                visits,
            )
        };
        mark = (front, back);
        loc_mark = loc;
        let (pair, w) = (&mut ws.u, &mut ws.w);
        let dst = st.cache.split(b0, pair).1;
        *visits += w.len() as u64;
        let mut pass = Pass::new(u, plan.decide, UNBOUNDED);
        let mut kept = 0;
        let mut part = Part::default();
        for i in 0..w.len() {
            let b = w[i];
            match pass.visit::<false>(b, &mut part) {
                Some((f, k)) => {
                    dst[front] = b;
                    dst[back - 1] = b;
                    front += f;
                    back -= k;
                }
                None => {
                    w[kept] = b;
                    kept += 1;
                    add_clips(&mut pass.sums, &plan, b, u);
                }
            }
        }
        w.truncate(kept);
        pass.flush(&part);
        loc = loc.merged(pass.folded().1);
        sums = pass.sums;
    }
    let agg = fixed.merged(loc);
    let mu = match exact {
        Some(t) => t,
        None if agg.n_free > 0 => {
            let base = agg.g_base(0.0, u, kf);
            (sum_of(&[base[0], base[1], base[2]]) / agg.n_free as f64).clamp(wlo, whi)
        }
        // only at C ≈ C₀ by round-off: G is flat at 0, any μ of the window solves (11)
        None => whi,
    };
    let nu = mu + sum_of(&[agg.s_cap.hi, agg.s_cap.lo, -(agg.n_cap as f64) * (mu + u)]) / kf;
    MuSolve {
        mu,
        nu,
        n_cap: agg.n_cap,
        n_free: agg.n_free,
        fixed,
        loc,
        front,
        back,
        len: search.len,
    }
}

/// μ(C) and ν(C) from the cache U (see [`mu_start`] and [`mu_finish`]).
#[allow(clippy::too_many_arguments)]
fn solve_mu(
    b0: &[f64],
    st: &BetaState,
    ws: &mut ProjectionWorkspace,
    c: f64,
    kf: f64,
    rng: &mut Rng,
    visits: &mut u64,
    first: First,
) -> MuSolve {
    let search = mu_start(b0, st, ws, c, kf, rng, visits, first, None, true);
    mu_finish(b0, st, ws, search, kf, rng, visits)
}

/// What one α pass found at λ.
struct AlphaPass {
    /// C(λ)
    c: f64,
    /// Count of the cached a⁰_i > λ (active at λ) and Σ of their excess a − λ (a max, not a
    /// select, so no branch).
    n_up: usize,
    excess: Sum,
    /// The cache partitioned at λ: a ≤ λ in [0, front), a > λ in [back, len) (entries the pass
    /// folded or dropped leave a gap between).
    front: usize,
    back: usize,
    len: usize,
}

impl AlphaPass {
    /// Folds the entries a > λ into (p_a, s_a): they are active on the interval below λ.
    fn fold_up(&self, lambda: f64, p_a: &mut usize, s_a: &mut Sum) {
        *p_a += self.n_up;
        s_a.add_sum(self.excess);
        s_a.add(scaled(self.n_up, lambda));
    }
}

/// The first pass over a⁰: finiteness, a_(1), C(λ) = Σ_i [a⁰_i − λ]₊, and a⁰ partitioned at λ
/// into `dst` (branch-free, like [`alpha_pass`]).
fn alpha_scan(
    a0: &[f64],
    lambda: f64,
    dst: &mut [f64],
) -> Result<(AlphaPass, f64), ProjectionError> {
    let lambda = lambda + 0.0;
    let mut max = f64::NEG_INFINITY;
    let (mut front, mut back) = (0, a0.len());
    let (mut excess, mut finite) = (Sum::default(), true);
    for block in a0.chunks(BLOCK) {
        let mut part = 0.0;
        for &a in block {
            finite &= a.is_finite();
            // a rarely taken branch, not f64::max: its NaN handling makes a long dependency chain
            if a > max {
                max = a;
            }
            let a = a + 0.0;
            let up = lt(lambda, a);
            dst[front] = a;
            dst[back - 1] = a;
            front += one(!up);
            back -= one(up);
            part += (a - lambda).max(0.0);
        }
        excess.add(part);
    }
    if !finite {
        return Err(non_finite("a0", a0));
    }
    let pass = AlphaPass {
        c: excess.get(),
        n_up: a0.len() - back,
        excess,
        front,
        back,
        len: a0.len(),
    };
    Ok((pass, max))
}

/// One pass over the α-cache (after the first pass): folds a ≥ hi into (p_a, s_a), drops
/// a ≤ lo, partitions the rest at λ and computes C(λ) = s_a − p_a·λ + Σ [a − λ]₊, branch-free
/// (right after a long step it folds or drops a large share, at random). Select-free sums:
/// Σ [a − λ]₊ over the pass is C's new part, Σ [a − hi]₊ gives the folded sum, and
/// Σ clip(a − λ, 0, hi − λ) gives the excess of the entries kept above λ.
fn alpha_pass(
    src: &[f64],
    dst: &mut [f64],
    (lo, hi): (f64, f64),
    lambda: f64,
    (p_a, s_a): (&mut usize, &mut Sum),
) -> AlphaPass {
    let (lo, hi, lambda) = (lo + 0.0, hi + 0.0, lambda + 0.0);
    let (mut front, mut back) = (0, src.len());
    let mut n_fold = 0;
    let mut sums = [Sum::default(); 3];
    for block in src.chunks(BLOCK) {
        let mut part = [0.0; 3];
        for &a in block {
            let a = a + 0.0;
            let fold = !lt(a, hi);
            let keep = lt(lo, a) & !fold;
            let up = lt(lambda, a) & keep;
            dst[front] = a;
            dst[back - 1] = a;
            front += one(keep & !up);
            back -= one(up);
            n_fold += one(fold);
            part[0] += (a - lambda).max(0.0);
            part[1] += (a - hi).max(0.0);
            part[2] += (a - lambda).max(0.0).min(hi - lambda);
        }
        for (s, x) in sums.iter_mut().zip(part) {
            s.add(x);
        }
    }
    let [new_c, over_hi, clipped] = sums;
    let c = sum_of(&[s_a.hi, s_a.lo, -scaled(*p_a, lambda), new_c.hi, new_c.lo]);
    *p_a += n_fold;
    s_a.add_sum(over_hi);
    s_a.add(scaled(n_fold, hi));
    let mut excess = clipped;
    excess.add(-scaled(n_fold, hi - lambda));
    AlphaPass {
        c,
        n_up: src.len() - back,
        excess,
        front,
        back,
        len: src.len(),
    }
}

/// Production path: Algorithm 2 (bisection + divide & conquer), expected linear time.
///
/// See the module documentation: Newton-safeguarded search on λ over (−b_(1), a_(1)) with
/// shrinking caches and the closed-form finish. Each step computes C(λ) from the α-cache, then
/// ν(C) — (S_k − C)/k in regime I, else by a μ-solve on the β-cache — and keeps the side where
/// f(λ) = kλ + kν changes sign. The output is always exactly feasible: α = [a⁰ − λ*]₊,
/// C = Σα, β = clip(b⁰ − μ(C), 0, C/k). Errors on empty inputs, k ∉ 1..=n, non-finite
/// entries or output lengths that do not match; the workspace is only grown, never shrunk.
pub fn project(
    a0: &[f64],
    b0: &[f64],
    k: usize,
    alpha: &mut [f64],
    beta: &mut [f64],
    ws: &mut ProjectionWorkspace,
) -> Result<ProjectionStats, ProjectionError> {
    project_from(a0, b0, k, alpha, beta, ws, None)
}

/// [`project`] with the first trial λ given: the λ* of a previous projection of a nearby input
/// (consecutive FISTA steps project nearly the same point), so the Newton-safeguarded search
/// starts next to the root instead of at a sampled midpoint. The result does not depend on
/// `start`; only the work does.
pub fn project_from(
    a0: &[f64],
    b0: &[f64],
    k: usize,
    alpha: &mut [f64],
    beta: &mut [f64],
    ws: &mut ProjectionWorkspace,
    start: Option<f64>,
) -> Result<ProjectionStats, ProjectionError> {
    check_shapes(a0, b0, k, alpha, beta)?;
    let (m, n) = (a0.len(), b0.len());
    let kf = k as f64;
    let mut stats = ProjectionStats::default();
    let mut rng = Rng::new();
    for (pair, len) in [(&mut ws.a, m), (&mut ws.u, n)] {
        for buf in pair.iter_mut() {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
        }
    }
    ws.w.reserve(n);
    ws.band.reserve(n);

    // λ₁ = midpoint of (−b̂, â), â and b̂ the maxima of small samples
    let mut sample_max = |v: &[f64]| {
        let s = v.len().min(32);
        stats.visits += s as u64;
        (0..s)
            .map(|_| v[rng.below(v.len())])
            .fold(f64::NEG_INFINITY, f64::max)
    };
    let (a_hat, b_hat) = (sample_max(a0), sample_max(b0));
    let lambda1 = match start {
        Some(l) if l.is_finite() => l,
        _ if (a_hat - b_hat).is_finite() => 0.5 * (a_hat - b_hat),
        _ => 0.0,
    };
    let mut sel = Selection::new(b0, k, &mut ws.sample, &mut rng, &mut stats.visits);
    let (ap1, a_max) = alpha_scan(a0, lambda1, &mut ws.a[0])?;
    stats.visits += m as u64;
    let mut bst = BetaState::new();
    let search1 = if k < n && ap1.c > 0.0 {
        let mut band = std::mem::take(&mut ws.band);
        let search = mu_start(
            b0,
            &bst,
            ws,
            ap1.c,
            kf,
            &mut rng,
            &mut stats.visits,
            First::Select(&mut sel, &mut band),
            None,
            true,
        );
        ws.band = band;
        Some(search)
    } else {
        stats.visits += n as u64;
        b_pass(b0, &mut sel, &mut ws.band);
        None
    };
    if !sel.finite {
        return Err(non_finite("b0", b0));
    }
    let top = sel.finish(
        b0,
        k,
        &mut ws.band,
        &mut ws.sample,
        &mut rng,
        &mut stats.visits,
    );

    // Lemma 1
    if kf * a_max + top.s_k <= 0.0 {
        alpha.fill(0.0);
        beta.fill(0.0);
        stats.lambda = a_max;
        return Ok(stats);
    }

    let c0 = top.c0;
    if k < n {
        bst.mu_hi = top.next;
        bst.d_lo = top.next;
    }
    let scale = a_max.abs().max(top.max.abs());
    let (mut lo, mut hi) = (-top.max, a_max);
    let (mut c_lo, mut c_hi) = (0.0, f64::INFINITY);
    let (mut p_a, mut s_a) = (0usize, Sum::default());
    let mut acache = Cache::new();
    let mut first = Some((lambda1, ap1, search1));
    let mut next = f64::NAN;
    let mut overshoot = OVERSHOOT;
    let mut last_sign = 0.0;
    let mut widths = [f64::INFINITY; 2];

    let lambda_star = loop {
        stats.iterations += 1;
        let width = hi - lo;
        if width <= 4.0 * f64::EPSILON * scale.max(lo.abs()).max(hi.abs())
            || stats.iterations > MAX_ITERATIONS
        {
            // tolerance finish: an input sits on a kink at the solution
            break lo + 0.5 * width;
        }
        let (lambda, ap, search) = match first.take() {
            Some(first) => first,
            None => {
                // safeguard: bisect unless the last two steps together halved the interval
                let lambda = if lo < next && next < hi && width <= 0.5 * widths[0] {
                    next
                } else {
                    lo + 0.5 * width
                };
                widths = [widths[1], width];
                stats.visits += acache.len(m) as u64;
                let (src, dst) = acache.split(a0, &mut ws.a);
                let ap = alpha_pass(src, dst, (lo, hi), lambda, (&mut p_a, &mut s_a));
                (lambda, ap, None)
            }
        };
        if !(lo < lambda && lambda < hi) {
            // only the sampled λ₁ can fall outside (−b_(1), a_(1)): nothing learned but the
            // side of A that matters
            if lambda >= hi {
                acache.keep(0, ap.front);
            } else {
                acache.keep(ap.back, ap.len);
            }
            continue;
        }
        let c = ap.c;
        let u = c / kf;
        let p = (p_a + ap.n_up) as f64;
        // ν(C), μ(C) and −dν/dC
        let (mu, nu, slope, solve) = if k == n || c <= c0 {
            (top.next, (top.s_k - c) / kf, 1.0 / kf, None)
        } else {
            let r = match search {
                Some(mut search) => {
                    // the first pass ran before b_(k+1) was known
                    let (wlo, whi) = bst.window(u);
                    search.window = (search.window.0.max(wlo), search.window.1.min(whi));
                    mu_finish(b0, &bst, ws, search, kf, &mut rng, &mut stats.visits)
                }
                None => solve_mu(
                    b0,
                    &bst,
                    ws,
                    c,
                    kf,
                    &mut rng,
                    &mut stats.visits,
                    First::Partition,
                ),
            };
            let (j, nf) = (r.n_cap as f64, r.n_free as f64);
            let slope = (1.0 - j / kf).powi(2) / nf + j / (kf * kf);
            (r.mu, r.nu, slope, Some(r))
        };
        let f = lambda + nu;
        if f == 0.0 {
            break lambda;
        }
        // the side of A, and of U when the solve partitioned it, where λ* lies; what is fixed
        // on the whole new interval is folded
        let up = f > 0.0;
        if up {
            hi = lambda;
            c_lo = c;
            ap.fold_up(lambda, &mut p_a, &mut s_a);
            bst.mu_hi = mu;
            bst.d_lo = mu + u;
        } else {
            lo = lambda;
            c_hi = c;
            bst.mu_lo = mu;
            bst.d_hi = mu + u;
        }
        if up {
            acache.keep(0, ap.front);
        } else {
            acache.keep(ap.back, ap.len);
        }
        if let Some(r) = solve {
            bst.fixed = r.fixed;
            if up {
                bst.fixed.n_free += r.loc.n_free;
                bst.fixed.s_free.add_sum(r.loc.s_free);
                bst.cache.keep(r.back, r.len);
            } else {
                bst.fixed.n_cap += r.loc.n_cap;
                bst.fixed.s_cap.add_sum(r.loc.s_cap);
                bst.cache.keep(0, r.front);
            }
        }

        if acache.is_empty() {
            // exact finish, regime I on the whole interval: kλ + S_k − (s_a − p_a·λ) = 0
            if k == n || c_hi <= c0 {
                let l = (s_a.get() - top.s_k) / (kf + p_a as f64);
                if lo <= l && l <= hi {
                    break l;
                }
            }
            // exact finish, regime II on the whole interval with every status fixed: with J
            // capped and F free entries, r = 1 − J/k and C(λ) = s_a − p_a·λ,
            // μ(λ) = (s_free − r·C(λ))/F and f(λ) = kλ + (k − J)·μ(λ) + s_cap − (J/k)·C(λ).
            if k < n && bst.cache.is_empty() && c_lo >= c0 && bst.fixed.n_free > 0 {
                let fx = &bst.fixed;
                let (j, nf) = (fx.n_cap as f64, fx.n_free as f64);
                let r = 1.0 - j / kf;
                let (pa, sa) = (p_a as f64, s_a.get());
                let f1 = kf + (kf - j) * r * pa / nf + j / kf * pa;
                let f0 = sum_of(&[
                    (kf - j) / nf * fx.s_free.hi,
                    (kf - j) / nf * fx.s_free.lo,
                    -(kf - j) / nf * r * sa,
                    fx.s_cap.hi,
                    fx.s_cap.lo,
                    -j / kf * sa,
                ]);
                let l = -f0 / f1;
                if lo <= l && l <= hi {
                    break l;
                }
            }
        }

        // Newton on f(λ) = λ + ν(C(λ)): f' = 1 + p·(−dν/dC), pushed a little beyond the root
        let sign = f.signum();
        overshoot = if sign == last_sign {
            2.0 * overshoot
        } else {
            OVERSHOOT
        };
        last_sign = sign;
        next = lambda - (1.0 + overshoot) * f / (1.0 + p * slope);
    };

    stats.lambda = lambda_star;
    let c = write_alpha(a0, lambda_star, alpha);
    stats.visits += m as u64;
    let u = c / kf;
    if k == n {
        beta.fill(u);
        return Ok(stats);
    }
    stats.visits += n as u64;
    if c <= c0 {
        write_beta(b0, top.next, u, beta);
    } else {
        let mu = solve_mu(
            b0,
            &bst,
            ws,
            c,
            kf,
            &mut rng,
            &mut stats.visits,
            First::ReadOnly,
        )
        .mu;
        let s = write_beta(b0, mu, u, beta);
        // Safety net: if round-off put C outside the interval the caches were built for and
        // the sums disagree, solve (11) again from scratch.
        if (s - c).abs() > 1e-9 * c + 8.0 * f64::EPSILON * n as f64 * (mu.abs() + u) {
            let mut fresh = BetaState::new();
            fresh.mu_hi = top.next;
            fresh.d_lo = top.next;
            let mu = solve_mu(
                b0,
                &fresh,
                ws,
                c,
                kf,
                &mut rng,
                &mut stats.visits,
                First::ReadOnly,
            )
            .mu;
            write_beta(b0, mu, u, beta);
            stats.visits += n as u64;
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng as _, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    type Pair = (Vec<f64>, Vec<f64>);

    fn run_dc(a0: &[f64], b0: &[f64], k: usize, ws: &mut ProjectionWorkspace) -> (Pair, u64) {
        let (mut alpha, mut beta) = (vec![f64::NAN; a0.len()], vec![f64::NAN; b0.len()]);
        let stats = project(a0, b0, k, &mut alpha, &mut beta, ws).expect("valid input");
        ((alpha, beta), stats.visits)
    }

    fn run_sorted(a0: &[f64], b0: &[f64], k: usize) -> Pair {
        let (mut alpha, mut beta) = (vec![f64::NAN; a0.len()], vec![f64::NAN; b0.len()]);
        project_sorted(a0, b0, k, &mut alpha, &mut beta).expect("valid input");
        (alpha, beta)
    }

    fn scale_of(a0: &[f64], b0: &[f64]) -> f64 {
        a0.iter().chain(b0).fold(1.0, |s, x| s.max(x.abs()))
    }

    fn max_diff(x: &Pair, y: &Pair) -> f64 {
        x.0.iter()
            .zip(&y.0)
            .chain(x.1.iter().zip(&y.1))
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f64::max)
    }

    /// Feasibility by construction: α ≥ 0, 0 ≤ β ≤ C/k with C = Σα, Σβ = C up to rounding.
    fn assert_feasible((alpha, beta): &Pair, k: usize, scale: f64) -> Result<(), TestCaseError> {
        let c = sum_of(alpha);
        let u = c / k as f64;
        prop_assert!(alpha.iter().all(|&x| x >= 0.0), "α < 0: {alpha:?}");
        for &y in beta {
            prop_assert!(
                y >= 0.0 && y <= u * (1.0 + 4.0 * f64::EPSILON),
                "β = {y}, C/k = {u}"
            );
            // (β ≤ C/k holds to the rounding of Σα: a few ulps)
        }
        let s = sum_of(beta);
        let tol = 1e-12 * scale * (alpha.len() + beta.len()) as f64;
        prop_assert!((s - c).abs() <= tol, "Σβ = {s} vs Σα = {c}");
        Ok(())
    }

    /// Both paths, agreement to 1e-12 of max(1, max|input|), feasibility and Theorem 3's KKT.
    fn check(a0: &[f64], b0: &[f64], k: usize) -> Result<(), TestCaseError> {
        let mut ws = ProjectionWorkspace::default();
        let (dc, _) = run_dc(a0, b0, k, &mut ws);
        let sorted = run_sorted(a0, b0, k);
        let scale = scale_of(a0, b0);
        let d = max_diff(&dc, &sorted) / scale;
        prop_assert!(
            d <= 1e-12,
            "dc vs sorted: {d:e}\ndc {dc:?}\nsorted {sorted:?}"
        );
        assert_feasible(&dc, k, scale)?;
        assert_feasible(&sorted, k, scale)?;
        // A start changes the work only: the root itself, next to it, and far off both sides.
        let (mut alpha, mut beta) = (vec![0.0; a0.len()], vec![0.0; b0.len()]);
        let root = project_from(a0, b0, k, &mut alpha, &mut beta, &mut ws, None)
            .expect("valid input")
            .lambda;
        for start in [
            root,
            root + 1e-9 * scale,
            root - 0.3,
            10.0 * scale,
            -10.0 * scale,
        ] {
            project_from(a0, b0, k, &mut alpha, &mut beta, &mut ws, Some(start))
                .expect("valid input");
            let d = max_diff(&(alpha.clone(), beta.clone()), &sorted) / scale;
            prop_assert!(d <= 1e-12, "start {start}: dc vs sorted {d:e}");
        }
        check_kkt(a0, b0, k, &dc)
    }

    /// Theorem 3: recovers C, λ, μ from the output and checks (10)–(12) and the form of
    /// α and β, to 1e-9 of the input scale.
    fn check_kkt(
        a0: &[f64],
        b0: &[f64],
        k: usize,
        (alpha, beta): &Pair,
    ) -> Result<(), TestCaseError> {
        let kf = k as f64;
        let tol = 1e-9 * scale_of(a0, b0);
        let c = sum_of(alpha);
        let u = c / kf;
        if c <= tol {
            // zero solution: Lemma 1
            let mut b = b0.to_vec();
            b.sort_by(|x, y| y.total_cmp(x));
            let a1 = a0.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(
                kf * a1 + sum_of(&b[..k]) <= tol * kf,
                "C = 0 but Lemma 1 fails"
            );
            prop_assert!(beta.iter().all(|&y| y <= tol));
            return Ok(());
        }
        // λ from any active α (10): α = [a⁰ − λ]₊
        let i = (0..alpha.len())
            .max_by(|&i, &j| alpha[i].total_cmp(&alpha[j]))
            .unwrap_or(0);
        let lambda = a0[i] - alpha[i];
        for (&x, &a) in alpha.iter().zip(a0) {
            prop_assert!(
                (x - (a - lambda).max(0.0)).abs() <= tol,
                "α = {x} vs [{a} − λ]₊"
            );
        }
        // μ from a free β, else (regime I) any value between the zero and the capped entries
        let free = (0..beta.len()).find(|&j| beta[j] > tol && beta[j] < u - tol);
        let mu = match free {
            Some(j) => b0[j] - beta[j],
            None => {
                let top_zero = (0..beta.len())
                    .filter(|&j| beta[j] <= tol)
                    .map(|j| b0[j])
                    .fold(f64::NEG_INFINITY, f64::max);
                let low_cap = (0..beta.len())
                    .filter(|&j| beta[j] >= u - tol)
                    .map(|j| b0[j] - u)
                    .fold(f64::INFINITY, f64::min);
                prop_assert!(top_zero <= low_cap + tol, "no μ: {top_zero} > {low_cap}");
                if top_zero.is_finite() {
                    top_zero
                } else {
                    low_cap
                }
            }
        };
        // (11) and the form of β
        for (&y, &b) in beta.iter().zip(b0) {
            prop_assert!(
                (y - (b - mu).max(0.0).min(u)).abs() <= tol,
                "β = {y} vs clip({b} − μ)"
            );
        }
        // (12): 0 = λ + μ + (1/k) Σ [b⁰ − μ − C/k]₊
        let over: f64 = b0.iter().map(|&b| (b - mu - u).max(0.0)).sum();
        let r12 = lambda + mu + over / kf;
        prop_assert!(r12.abs() <= tol, "(12) residual {r12:e}");
        Ok(())
    }

    fn vectors(range: std::ops::Range<f64>, len: usize) -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(range, 1..len)
    }

    fn k_of(frac: f64, n: usize) -> usize {
        ((frac * n as f64) as usize).clamp(1, n)
    }

    proptest! {
        #[test]
        fn agrees_with_sort_on_random_inputs(
            a0 in vectors(-3.0..3.0, 60), b0 in vectors(-3.0..3.0, 60), frac in 0.0..1.0f64,
        ) {
            check(&a0, &b0, k_of(frac, b0.len()))?;
        }

        #[test]
        fn agrees_with_sort_on_heavy_ties(
            a0 in prop::collection::vec(-2i32..3, 1..60), b0 in prop::collection::vec(-2i32..3, 1..60),
            frac in 0.0..1.0f64,
        ) {
            let a0: Vec<f64> = a0.into_iter().map(f64::from).collect();
            let b0: Vec<f64> = b0.into_iter().map(|x| f64::from(x) * 0.5).collect();
            check(&a0, &b0, k_of(frac, b0.len()))?;
        }

        #[test]
        fn agrees_with_sort_with_half_zeros(
            a0 in prop::collection::vec(prop_oneof![Just(0.0), -2.0..2.0f64], 1..60),
            b0 in prop::collection::vec(prop_oneof![Just(0.0), -2.0..2.0f64], 1..60),
            frac in 0.0..1.0f64,
        ) {
            check(&a0, &b0, k_of(frac, b0.len()))?;
        }

        #[test]
        fn all_negative_projects_to_zero(
            a0 in vectors(-3.0..0.0, 40), b0 in vectors(-3.0..0.0, 40), frac in 0.0..1.0f64,
        ) {
            let k = k_of(frac, b0.len());
            let mut ws = ProjectionWorkspace::default();
            let ((alpha, beta), _) = run_dc(&a0, &b0, k, &mut ws);
            prop_assert!(alpha.iter().chain(&beta).all(|&x| x == 0.0));
            check(&a0, &b0, k)?;
        }

        #[test]
        fn agrees_at_the_edges(
            a0 in vectors(-3.0..3.0, 30), b0 in vectors(-3.0..3.0, 30),
            single_a in any::<bool>(), single_b in any::<bool>(), k_is_n in any::<bool>(),
        ) {
            // m = 1, n = 1, k = 1, k = n
            let a0 = if single_a { a0[..1].to_vec() } else { a0 };
            let b0 = if single_b { b0[..1].to_vec() } else { b0 };
            check(&a0, &b0, if k_is_n { b0.len() } else { 1 })?;
        }

        #[test]
        fn agrees_on_scaled_inputs(
            a0 in vectors(-3.0..3.0, 40), b0 in vectors(-3.0..3.0, 40), frac in 0.0..1.0f64,
            up in any::<bool>(),
        ) {
            let s = if up { 1e3 } else { 1e-3 };
            let a0: Vec<f64> = a0.iter().map(|x| x * s).collect();
            let b0: Vec<f64> = b0.iter().map(|x| x * s).collect();
            check(&a0, &b0, k_of(frac, b0.len()))?;
        }

        #[test]
        fn agrees_with_k_equal_top_values(
            a0 in vectors(-3.0..3.0, 40), rest in vectors(-3.0..1.0, 40), top in 1.0..3.0f64,
            k in 1usize..10, extra in 0usize..3,
        ) {
            // the k largest b⁰ are equal (C₀ = 0 when the tie runs past rank k)
            let mut b0 = vec![top; k + extra];
            b0.extend(rest);
            check(&a0, &b0, k)?;
        }

        #[test]
        fn is_positively_homogeneous(
            a0 in vectors(-3.0..3.0, 40), b0 in vectors(-3.0..3.0, 40), frac in 0.0..1.0f64,
            s in prop_oneof![0.001..0.1f64, 0.5..2.0f64, 10.0..1000.0f64],
        ) {
            // Γ_k is a cone: Π(s·x) = s·Π(x)
            let k = k_of(frac, b0.len());
            let mut ws = ProjectionWorkspace::default();
            let (x, _) = run_dc(&a0, &b0, k, &mut ws);
            let sa: Vec<f64> = a0.iter().map(|v| v * s).collect();
            let sb: Vec<f64> = b0.iter().map(|v| v * s).collect();
            let (y, _) = run_dc(&sa, &sb, k, &mut ws);
            let scaled: Pair = (x.0.iter().map(|v| v * s).collect(), x.1.iter().map(|v| v * s).collect());
            let d = max_diff(&scaled, &y) / (s * scale_of(&a0, &b0));
            prop_assert!(d <= 1e-12, "Π(s·x) vs s·Π(x): {d:e}");
        }

        #[test]
        fn no_feasible_point_is_closer(
            a0 in vectors(-3.0..3.0, 30), b0 in vectors(-3.0..3.0, 30), frac in 0.0..1.0f64,
            seed in any::<u64>(),
        ) {
            // the variational inequality of the projection: ⟨x⁰ − x*, y − x*⟩ ≤ 0 for y ∈ Γ_k
            let k = k_of(frac, b0.len());
            let mut ws = ProjectionWorkspace::default();
            let (x, _) = run_dc(&a0, &b0, k, &mut ws);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for _ in 0..20 {
                let y = random_feasible(&mut rng, a0.len(), b0.len(), k);
                let inner: f64 = a0.iter().zip(&x.0).zip(&y.0)
                    .chain(b0.iter().zip(&x.1).zip(&y.1))
                    .map(|((p0, p), q)| (p0 - p) * (q - p))
                    .sum();
                prop_assert!(inner <= 1e-9 * scale_of(&a0, &b0).powi(2), "⟨x⁰ − x*, y − x*⟩ = {inner:e}");
            }
        }
    }

    /// A random point of Γ_k: α ≥ 0 with C = Σα, then β = C·p/k for a random p with
    /// 0 ≤ p_j ≤ 1 and Σp = k (capped water-filling of random weights).
    fn random_feasible(rng: &mut ChaCha8Rng, m: usize, n: usize, k: usize) -> Pair {
        let scale = rng.gen_range(0.0..3.0);
        let alpha: Vec<f64> = (0..m)
            .map(|_| {
                if rng.gen_bool(0.3) {
                    0.0
                } else {
                    rng.gen::<f64>() * scale
                }
            })
            .collect();
        let c = sum_of(&alpha);
        let w: Vec<f64> = (0..n).map(|_| rng.gen::<f64>() + 1e-3).collect();
        // p = min(1, t·w) with Σp = k, t by bisection
        let (mut lo, mut hi) = (0.0, 1e6);
        for _ in 0..200 {
            let t = 0.5 * (lo + hi);
            let s: f64 = w.iter().map(|x| (t * x).min(1.0)).sum();
            if s < k as f64 {
                lo = t
            } else {
                hi = t
            }
        }
        let beta = w.iter().map(|x| c * (hi * x).min(1.0) / k as f64).collect();
        (alpha, beta)
    }

    fn normals(rng: &mut ChaCha8Rng, len: usize) -> Vec<f64> {
        (0..len)
            .map(|_| {
                let (u1, u2) = (rng.gen::<f64>().max(1e-300), rng.gen::<f64>());
                (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
            })
            .collect()
    }

    #[test]
    fn visits_stay_below_six_per_entry_on_normal_inputs() {
        let mut ws = ProjectionWorkspace::default();
        for (size, seed) in [(1_000, 1), (10_000, 2), (100_000, 3)] {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let a0 = normals(&mut rng, size);
            let b0 = normals(&mut rng, size);
            for ratio in [1e-4, 0.01, 0.5] {
                let k = k_of(ratio, size);
                let (dc, visits) = run_dc(&a0, &b0, k, &mut ws);
                let per = visits as f64 / (2 * size) as f64;
                assert!(
                    per <= 6.0,
                    "m = n = {size}, k = {k}: {per:.2} visits per entry"
                );
                let d = max_diff(&dc, &run_sorted(&a0, &b0, k)) / scale_of(&a0, &b0);
                assert!(d <= 1e-12, "m = n = {size}, k = {k}: dc vs sorted {d:e}");
            }
        }
    }

    #[test]
    fn workspace_is_reused_without_reallocation() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let (a0, b0) = (normals(&mut rng, 5_000), normals(&mut rng, 5_000));
        let mut ws = ProjectionWorkspace::default();
        run_dc(&a0, &b0, 50, &mut ws);
        let before: Vec<*const f64> = [&ws.a[0], &ws.a[1], &ws.u[0], &ws.u[1], &ws.w, &ws.band]
            .iter()
            .map(|v| v.as_ptr())
            .collect();
        let (a1, b1) = (normals(&mut rng, 5_000), normals(&mut rng, 4_000));
        for k in [1, 50, 2_000, 4_000] {
            run_dc(&a1, &b1, k, &mut ws);
        }
        let after: Vec<*const f64> = [&ws.a[0], &ws.a[1], &ws.u[0], &ws.u[1], &ws.w, &ws.band]
            .iter()
            .map(|v| v.as_ptr())
            .collect();
        assert_eq!(before, after);
    }

    #[test]
    fn k_for_examples() {
        assert_eq!(k_for(0.29, 100), 30);
        assert_eq!(k_for(0.1, 100), 11);
        assert_eq!(k_for(0.0, 100), 1);
        assert_eq!(k_for(1.0, 100), 100);
        assert_eq!(k_for(0.999, 100), 100);
        assert_eq!(k_for(-0.5, 100), 1);
        assert_eq!(k_for(f64::NAN, 100), 1);
        assert_eq!(k_for(0.5, 0), 1);
    }

    #[test]
    fn rejects_bad_input() {
        let mut ws = ProjectionWorkspace::default();
        let (mut a, mut b) = (vec![0.0; 2], vec![0.0; 3]);
        let a0 = [1.0, 2.0];
        let b0 = [0.5, f64::NAN, 1.0];
        for (k, a0, b0, err) in [
            (1, &[][..], &b0[..], ProjectionError::EmptyA),
            (1, &a0[..], &[][..], ProjectionError::EmptyB),
            (
                0,
                &a0[..],
                &b0[..],
                ProjectionError::InvalidK { k: 0, n: 3 },
            ),
            (
                4,
                &a0[..],
                &b0[..],
                ProjectionError::InvalidK { k: 4, n: 3 },
            ),
        ] {
            assert_eq!(
                project(a0, b0, k, &mut a, &mut b, &mut ws),
                Err(err.clone())
            );
            assert_eq!(project_sorted(a0, b0, k, &mut a, &mut b), Err(err));
        }
        let nan = project(&a0, &b0, 1, &mut a, &mut b, &mut ws).unwrap_err();
        assert!(matches!(
            nan,
            ProjectionError::NonFinite {
                input: "b0",
                index: 1,
                ..
            }
        ));
        let inf = project_sorted(&[1.0, f64::INFINITY], &[0.0; 3], 1, &mut a, &mut b);
        assert!(matches!(
            inf,
            Err(ProjectionError::NonFinite {
                input: "a0",
                index: 1,
                ..
            })
        ));
        let short = project(&a0, &[0.0; 3], 1, &mut a[..1], &mut b, &mut ws);
        assert_eq!(
            short,
            Err(ProjectionError::LengthMismatch {
                output: "alpha",
                len: 1,
                expected: 2
            })
        );
    }

    #[test]
    fn known_small_cases() {
        // a⁰ > 0 with b⁰ < 0 can still project to a non-zero point (docs/tau-fpl.md §2.7)
        let mut ws = ProjectionWorkspace::default();
        let ((alpha, beta), _) = run_dc(&[1.0], &[-0.5], 1, &mut ws);
        assert!((alpha[0] - 0.25).abs() < 1e-15 && (beta[0] - 0.25).abs() < 1e-15);
        // k = n: β = C/n everywhere
        let ((alpha, beta), _) = run_dc(&[2.0, 0.5], &[1.0, -1.0, 0.0], 3, &mut ws);
        let c = alpha.iter().sum::<f64>();
        assert!(beta.iter().all(|&y| (y - c / 3.0).abs() < 1e-15));
        // zero input
        let ((alpha, beta), _) = run_dc(&[0.0; 4], &[0.0; 5], 2, &mut ws);
        assert!(alpha.iter().chain(&beta).all(|&x| x == 0.0));
    }
}
