//! Euclidean projection onto Γ_k, the feasible set of the τ-FPL dual (7).
//!
//! Paper: X. Zhang, N. Li, Y. Pu, Y. Wang, J. Yan, H. Zha, "τ-FPL: Tolerance-Constrained
//! Learning in Linear Time", AAAI 2018 (long version arXiv 1801.04701). The maths follows the
//! project's digest (`tau-fpl.md` §2), which re-derives the paper and fills its gaps. Given
//! a⁰ ∈ ℝᵐ, b⁰ ∈ ℝⁿ and 1 ≤ k ≤ n, problem (9) is
//!
//!   min ½‖α − a⁰‖² + ½‖β − b⁰‖²  s.t.  α ≥ 0, β ≥ 0, Σα = Σβ, β_j ≤ (1/k)Σα.
//!
//! By Theorem 3 (note §2.1) the solution is α = [a⁰ − λ]₊, β = clip(b⁰ − μ, 0, C/k) with
//! C = Σα, where λ is the root of the increasing function f(λ) = kλ + kν(C(λ)) (note §2.2–2.3):
//!
//! - C(λ) = Σ_i [a⁰_i − λ]₊;
//! - μ(C) solves (11), Σ_j clip(b⁰_j − μ, 0, C/k) = C; it is unique for C > C₀ = k(b_(k) −
//!   b_(k+1)) (regime II) and set to b_(k+1) for C ≤ C₀ (regime I, Lemma 7 / eq. 43);
//! - δ = μ + C/k is the upper water level (b⁰_j ≥ δ ⇒ capped);
//! - ν(C) = μ + (1/k) Σ_j [b⁰_j − δ]₊, and in regime I simply ν = (S_k − C)/k.
//!
//! The projection is zero iff k·a_(1) + S_k ≤ 0 (Lemma 1), and otherwise λ ∈ (−b_(1), a_(1))
//! (Lemma 2). [`project`] is the paper's Algorithm 2 as specified in note §2.6: bisection on λ
//! in which every entry whose status (α: zero / active; β: zero / free / capped) is fixed over
//! the current interval is folded into a compensated aggregate and never read again, so each
//! pass reads only the shrinking caches of uncertain entries. [`project_sorted`] is the exact
//! sort-and-sweep of note §2.4, kept as the reference.

/// Work counters of one projection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProjectionStats {
    /// Element reads: every read of an entry of a⁰, b⁰ or of a cache (or sample) in a pass,
    /// the validation, selection and output passes included.
    pub visits: u64,
    /// Outer iterations: bisection steps of [`project`], sweep segments of [`project_sorted`].
    pub iterations: u32,
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
/// (note §0: τ = 0.29, n = 100 gives 30, not 29). τ = 0 gives 1 (TopPush); NaN or negative τ
/// also give 1, and n = 0 gives 1.
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

/// Neumaier's compensated sum: the aggregates of note §2.7 lose digits otherwise.
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

/// Writes α = [a⁰ − λ]₊ and returns C = Σα of the written values (note §2.6 "Output": C is
/// recomputed from the output so that the caps are exactly C/k).
fn write_alpha(a0: &[f64], lambda: f64, alpha: &mut [f64]) -> f64 {
    let mut c = Sum::default();
    for (x, &a) in alpha.iter_mut().zip(a0) {
        *x = (a - lambda).max(0.0);
        c.add(*x);
    }
    c.get()
}

/// Writes β = clip(b⁰ − μ, 0, u) and returns Σβ.
fn write_beta(b0: &[f64], mu: f64, u: f64, beta: &mut [f64]) -> f64 {
    let mut s = Sum::default();
    for (y, &b) in beta.iter_mut().zip(b0) {
        *y = (b - mu).max(0.0).min(u);
        s.add(*y);
    }
    s.get()
}

fn log2_ceil(n: usize) -> u64 {
    u64::from(usize::BITS - n.saturating_sub(1).leading_zeros())
}

// ---------------------------------------------------------------------------------------------
// Reference: sort and sweep (note §2.4)
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

/// Reference path: exact sort and sweep (§2.4), O(m log m + n log n).
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

/// The order statistics of b⁰ that Algorithm 2 needs up front (note §2.6 "precomputed").
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
            sample_pivots(b0, k, sample, rng, visits)
        };
        Selection {
            p_lo,
            p_hi,
            all: k == n,
            above: 0,
            excess: Sum::default(),
            max: f64::NEG_INFINITY,
            finite: true,
        }
    }

    #[inline]
    fn see(&mut self, b: f64, band: &mut Vec<f64>) {
        self.finite &= b.is_finite();
        self.max = self.max.max(b);
        if self.all {
            self.excess.add(b);
            return;
        }
        let above = b > self.p_hi;
        self.above += usize::from(above);
        self.excess.add((b - self.p_hi).max(0.0));
        if !above && b >= self.p_lo {
            band.push(b);
        }
    }

    /// Quickselect inside the band; if the sampled pivots missed ranks k and k + 1 (rare),
    /// over all of b⁰.
    fn finish(
        mut self,
        b0: &[f64],
        k: usize,
        band: &mut Vec<f64>,
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
        let mut s_k = Sum::default();
        if self.above < k && k < self.above + band.len() {
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

/// Two values of a random sample of b⁰ that bracket rank k with high probability.
fn sample_pivots(
    b0: &[f64],
    k: usize,
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
    let spread = 3.0 * (s as f64 * q * (1.0 - q)).sqrt() + 2.0;
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
    for &b in b0 {
        sel.see(b, band);
    }
}

// ---------------------------------------------------------------------------------------------
// Algorithm 2: bisection + divide and conquer (note §2.6)
// ---------------------------------------------------------------------------------------------

/// Steps before the tolerance finish gives up on the exact one.
const MAX_ITERATIONS: u32 = 300;
/// Passes of one μ-solve before it settles for the statuses at the window's midpoint.
const MAX_ROUNDS: u32 = 200;
/// Sampled pivots sit this many standard errors of the sampled G either side of its root.
const Z: f64 = 2.5;
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
    /// No bounds yet: b_(k+1) (μ(0⁺) = δ(0⁺), note §2.6 "State") is known only after the
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
        let mut plan = Plan::collapse(mid);
        for (x, kn) in plan.t.iter_mut().zip(knots.iter()) {
            *x = kn.0;
        }
        plan.np = knots.len();
        plan.decide = window;
        return plan;
    }
    let s = ((len as f64).sqrt() as usize).max(PIVOTS).min(len);
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
    let mut plan = Plan::collapse(mid);
    plan.np = (b - a + 1).min(PIVOTS);
    for (i, x) in plan.t[..plan.np].iter_mut().enumerate() {
        let r = if plan.np == 1 {
            a
        } else {
            a + i * (b - a) / (plan.np - 1)
        };
        *x = knots[r].0;
    }
    plan.decide = (
        i1.map_or(wlo, |_| knots[a].0),
        i2.map_or(whi, |_| knots[b].0),
    );
    plan
}

/// How the first pass of a μ-solve treats the entries it decides.
enum First<'a> {
    /// Write them to the partition buffer (free at the front, the others at the back) so that
    /// U can become one side of it, and fold what the outer bounds fix into the state.
    Partition,
    /// Only sum them (the caches stay as they are): for the last solve and while U is still
    /// all of b⁰, where writing a copy costs more than reading b⁰ again.
    ReadOnly,
    /// ReadOnly over b⁰, also checking finiteness and doing the selection's classification.
    Select(&'a mut Selection, &'a mut Vec<f64>),
}

/// A μ-solve between its first pass and the rest.
struct MuSearch {
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
    /// As in [`MuSearch`]: the fixed entries, the entries decided in this solve, and, when
    /// partitioned, U split at μ into free entries [0, front) and the others [back, len)
    /// (entries the outer bounds fixed leave a gap between).
    fixed: Folded,
    loc: Folded,
    partitioned: bool,
    front: usize,
    back: usize,
    len: usize,
}

/// Local accumulators of one pass, so that the hot loops keep them in registers.
struct Pass {
    u: f64,
    decide: (f64, f64),
    fixed: Folded,
    loc: Folded,
    sums: [Sum; PIVOTS],
}

impl Pass {
    /// The outer prune (note §2.6 "prune U", in that order): true if the bounds fix b.
    #[inline]
    fn prune(&mut self, b: f64, st: &BetaState) -> bool {
        if b <= st.mu_lo {
            true
        } else if b >= st.d_hi {
            self.fixed.n_cap += 1;
            self.fixed.s_cap.add(b);
            true
        } else if st.mu_hi <= b && b <= st.d_lo {
            self.fixed.n_free += 1;
            self.fixed.s_free.add(b);
            true
        } else {
            false
        }
    }

    /// Decides b if its status is the same for every μ of the plan's decide window (δ = μ + u):
    /// Some(free?) after folding it into `loc`, None if it has a breakpoint strictly inside
    /// (written with b − u so that a trial point t = b − u decides its own entry exactly).
    /// The zero/free choice is branch-free: on N(0,1)-like data it is a coin flip.
    #[inline]
    fn decide(&mut self, b: f64) -> Option<bool> {
        let (lo, hi) = self.decide;
        let bu = b - self.u;
        if b > lo && bu < hi && (b < hi || bu > lo) {
            return None;
        }
        let cap = bu >= hi;
        let free = !cap && b > lo;
        self.loc.n_cap += usize::from(cap);
        self.loc.s_cap.add(pick(cap, b, 0.0));
        self.loc.n_free += usize::from(free);
        self.loc.s_free.add(pick(free, b, 0.0));
        Some(free)
    }
}

/// Writes decided entries: free ones to the front of `dst`, the others (zero or capped) to its
/// back, so that either group is one range whatever the sign of f turns out to be.
#[inline]
fn put(dst: &mut [f64], (front, back): (&mut usize, &mut usize), b: f64, free: bool) {
    dst[*front] = b;
    dst[*back - 1] = b;
    *front += usize::from(free);
    *back -= usize::from(!free);
}

/// The first pass of a μ-solve over U (b⁰ while U is virgin): the outer prune, then the plan's
/// decisions; the undecided entries go to W with their sums at the trial points. With
/// `window` given (a narrower one than the bounds give) the plan decides for it, no guess.
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
) -> MuSearch {
    let u = c / kf;
    let (window, guess) = match window {
        Some(w) => (w, false),
        None => (st.window(u), true),
    };
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
    let mut pass = Pass {
        u,
        decide: plan.decide,
        fixed: st.fixed,
        loc: Folded::default(),
        sums: [Sum::default(); PIVOTS],
    };
    let (mut front, mut back) = (0, len);
    let partitioned = matches!(first, First::Partition);
    match first {
        First::Partition => {
            for &b in src {
                if pass.prune(b, st) {
                    continue;
                }
                match pass.decide(b) {
                    Some(free) => put(dst, (&mut front, &mut back), b, free),
                    None => {
                        w.push(b);
                        add_clips(&mut pass.sums, &plan, b, u);
                    }
                }
            }
        }
        First::ReadOnly => {
            for &b in src {
                if !pass.prune(b, st) && pass.decide(b).is_none() {
                    w.push(b);
                    add_clips(&mut pass.sums, &plan, b, u);
                }
            }
        }
        First::Select(sel, band) => {
            // the bounds are still trivial here, so there is nothing to prune
            let mut se = *sel;
            band.clear();
            for &b in src {
                se.see(b, band);
                if pass.decide(b).is_none() {
                    w.push(b);
                    add_clips(&mut pass.sums, &plan, b, u);
                }
            }
            *sel = se;
        }
    }
    if !partitioned {
        // the partition buffer only takes the decisions of later passes, to undo them
        (front, back) = (0, dst.len());
    }
    MuSearch {
        u,
        window,
        plan,
        fixed: pass.fixed,
        loc: pass.loc,
        sums: pass.sums,
        partitioned,
        front,
        back,
        len,
    }
}

/// μ(C) and ν(C) in regime II (C > C₀, k < n) from a started search: the root of the
/// non-increasing G(μ) = Σ_j clip(b⁰_j − μ, 0, u) − C, u = C/k (eq. 11), by a randomized
/// breakpoint search over W inside the window (note §2.6 `solve_mu`), then
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
    let mut exact = None;
    let mut rounds = 1;
    loop {
        let agg = fixed.merged(loc);
        if std::env::var("PDBG").is_ok() {
            eprintln!(
                "    mf window [{wlo},{whi}] plan {plan:?} agg {agg:?} W {:?} sums {:?}",
                ws.w,
                &sums[..plan.np]
            );
        }
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
                    search = mu_start(
                        b0,
                        st,
                        ws,
                        u * kf,
                        kf,
                        rng,
                        visits,
                        First::ReadOnly,
                        Some((wlo, whi)),
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
        let mut pass = Pass {
            u,
            decide: plan.decide,
            fixed,
            loc,
            sums: [Sum::default(); PIVOTS],
        };
        let mut kept = 0;
        for i in 0..w.len() {
            let b = w[i];
            match pass.decide(b) {
                Some(free) => put(dst, (&mut front, &mut back), b, free),
                None => {
                    w[kept] = b;
                    kept += 1;
                    add_clips(&mut pass.sums, &plan, b, u);
                }
            }
        }
        w.truncate(kept);
        loc = pass.loc;
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
        partitioned: search.partitioned,
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
    let search = mu_start(b0, st, ws, c, kf, rng, visits, first, None);
    mu_finish(b0, st, ws, search, kf, rng, visits)
}

/// What one α pass found at λ.
struct AlphaPass {
    /// C(λ)
    c: f64,
    /// Count and sum of the cached a⁰_i > λ (active at λ).
    n_up: usize,
    s_up: Sum,
    /// When partitioned: a ≤ λ in [0, front), a > λ in [back, len) (entries the pass folded or
    /// dropped leave a gap between).
    partitioned: bool,
    front: usize,
    back: usize,
    len: usize,
}

/// The first pass over a⁰, read-only: finiteness, a_(1), and C(λ) = Σ_{a>λ} a − #{a > λ}·λ.
fn alpha_scan(a0: &[f64], lambda: f64) -> Result<(AlphaPass, f64), ProjectionError> {
    let mut max = f64::NEG_INFINITY;
    let (mut n_up, mut s_up, mut finite) = (0usize, Sum::default(), true);
    for &a in a0 {
        finite &= a.is_finite();
        max = max.max(a);
        let up = a > lambda;
        n_up += usize::from(up);
        s_up.add(pick(up, a, 0.0));
    }
    if !finite {
        return Err(non_finite("a0", a0));
    }
    let c = sum_of(&[s_up.hi, s_up.lo, -(n_up as f64) * lambda]);
    let pass = AlphaPass {
        c,
        n_up,
        s_up,
        partitioned: false,
        front: 0,
        back: 0,
        len: 0,
    };
    Ok((pass, max))
}

/// One pass over the α-cache (a⁰ while it is virgin): folds a ≥ hi into (p_a, s_a), drops
/// a ≤ lo (both rare once the cache exists), partitions the rest at λ (branch-free: a coin
/// flip on typical data) and computes C(λ) = s_a + Σ_{a>λ} a − (p_a + #{a > λ})·λ.
fn alpha_pass(
    src: &[f64],
    dst: &mut [f64],
    (lo, hi): (f64, f64),
    lambda: f64,
    (p_a, s_a): (&mut usize, &mut Sum),
) -> AlphaPass {
    let (mut front, mut back) = (0, src.len());
    let (mut pa, mut sa) = (*p_a, *s_a);
    let mut s_up = Sum::default();
    for &a in src {
        if a >= hi || a <= lo {
            if a >= hi {
                pa += 1;
                sa.add(a);
            }
            continue;
        }
        let up = a > lambda;
        dst[front] = a;
        dst[back - 1] = a;
        front += usize::from(!up);
        back -= usize::from(up);
        s_up.add(pick(up, a, 0.0));
    }
    (*p_a, *s_a) = (pa, sa);
    let n_up = src.len() - back;
    let c = sum_of(&[
        sa.hi,
        sa.lo,
        s_up.hi,
        s_up.lo,
        -((pa + n_up) as f64) * lambda,
    ]);
    AlphaPass {
        c,
        n_up,
        s_up,
        partitioned: true,
        front,
        back,
        len: src.len(),
    }
}

/// Production path: Algorithm 2 (bisection + divide & conquer), expected linear time.
///
/// Searches λ over (−b_(1), a_(1)) (Lemma 2). Each step computes C(λ) from the α-cache, then
/// ν(C) — by the closed form (S_k − C)/k in regime I, else by a μ-solve on the β-cache — and
/// keeps the side where f(λ) = kλ + kν changes sign. The intervals for C, μ and δ implied by the
/// λ-interval fold entries out of the caches; every pass also partitions its cache at the trial
/// point, so the next cache is one side of it and nothing is read twice for the same interval.
/// The first trial point comes from small samples, so that the validation passes over a⁰ and
/// b⁰ (with the order statistics of b⁰) already evaluate it; they only read, and the second
/// step builds the caches from the inputs. Later trial points are Newton steps on f (slope
/// from the active, capped and free counts) that overshoot slightly, so the interval closes
/// from both sides; a step that leaves the interval, or two steps that do not halve it, fall
/// back to the midpoint. Once both caches are empty f is linear on the interval and λ*
/// follows in closed form (the exact finish). The output is always exactly feasible:
/// α = [a⁰ − λ*]₊, C = Σα, β = clip(b⁰ − μ(C), 0, C/k).
pub fn project(
    a0: &[f64],
    b0: &[f64],
    k: usize,
    alpha: &mut [f64],
    beta: &mut [f64],
    ws: &mut ProjectionWorkspace,
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
    let lambda1 = if (a_hat - b_hat).is_finite() {
        0.5 * (a_hat - b_hat)
    } else {
        0.0
    };
    let t0 = std::time::Instant::now();
    let pt = std::env::var("PTIME").is_ok();
    let mut sel = Selection::new(b0, k, &mut ws.sample, &mut rng, &mut stats.visits);
    if pt {
        eprintln!("sel pivots {:?}", t0.elapsed());
    }
    let (ap1, a_max) = alpha_scan(a0, lambda1)?;
    if pt {
        eprintln!("a scan {:?}", t0.elapsed());
    }
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
    if pt {
        eprintln!("b pass {:?}", t0.elapsed());
    }
    let top = sel.finish(b0, k, &mut ws.band, &mut rng, &mut stats.visits);
    if pt {
        eprintln!("sel finish {:?}", t0.elapsed());
    }

    // Lemma 1
    if kf * a_max + top.s_k <= 0.0 {
        alpha.fill(0.0);
        beta.fill(0.0);
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
            // only the sampled λ₁ can fall outside (−b_(1), a_(1)): nothing learned
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
        if pt {
            eprintln!("iteration {:?}", t0.elapsed());
        }
        if std::env::var("PDBG").is_ok() {
            eprintln!(
                "it {} lam {lambda:.6e} [{lo:.6e},{hi:.6e}] f {f:.3e} c {c:.4e} A {} U {} visits {}",
                stats.iterations,
                acache.len(m),
                bst.cache.len(n),
                stats.visits
            );
        }
        if f == 0.0 {
            break lambda;
        }
        // the side of A, and of U when the solve partitioned it, where λ* lies; what is fixed
        // on the whole new interval is folded
        let up = f > 0.0;
        if up {
            hi = lambda;
            c_lo = c;
            if ap.partitioned {
                // (else a⁰ is read again, and these fold then)
                p_a += ap.n_up;
                s_a.add_sum(ap.s_up);
            }
            bst.mu_hi = mu;
            bst.d_lo = mu + u;
        } else {
            lo = lambda;
            c_hi = c;
            bst.mu_lo = mu;
            bst.d_hi = mu + u;
        }
        if ap.partitioned {
            if up {
                acache.keep(0, ap.front);
            } else {
                acache.keep(ap.back, ap.len);
            }
        }
        if let Some(r) = solve.filter(|r| r.partitioned) {
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

        if std::env::var("PDBG").is_ok() {
            eprintln!(
                "   fixed {:?} U {:?} pa {p_a} sa {:?} bounds {} {} {} {}",
                bst.fixed, bst.cache, s_a, bst.mu_lo, bst.mu_hi, bst.d_lo, bst.d_hi
            );
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

    if pt {
        eprintln!("loop done {:?}", t0.elapsed());
    }
    let c = write_alpha(a0, lambda_star, alpha);
    stats.visits += m as u64;
    if pt {
        eprintln!("alpha out {:?}", t0.elapsed());
    }
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
        if pt {
            eprintln!("final mu {:?}", t0.elapsed());
        }
        let s = write_beta(b0, mu, u, beta);
        if pt {
            eprintln!("beta out {:?}", t0.elapsed());
        }
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
