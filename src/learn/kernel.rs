//! Kernels, on-demand kernel rows with a byte-bounded LRU cache, and batched kernel expansions.
//!
//! No solver ever holds an n×n Gram matrix: [`KernelRows`] computes row `i` of K over a sample
//! set when asked (one matrix–vector product for dense data) and keeps recently used rows while
//! they fit in the byte budget.

use std::sync::Arc;

use lru::LruCache;
use ndarray::linalg::{general_mat_mul, general_mat_vec_mul};
use ndarray::{ArrayView1, ArrayView2, ArrayViewMut1, ArrayViewMut2};
use serde::{Deserialize, Serialize};

use crate::data::{RowRef, Rows};

/// A positive semi-definite kernel k(a, b).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kernel {
    /// k(a, b) = a·b
    Linear,
    /// k(a, b) = exp(−γ‖a − b‖²)
    Rbf { gamma: f64 },
    /// k(a, b) = (γ a·b + coef0)^degree
    Poly { degree: u32, gamma: f64, coef0: f64 },
}

/// An invalid kernel parameter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    #[error("kernel gamma must be finite and > 0, got {0}")]
    Gamma(f64),
    #[error("polynomial kernel degree must be at least 1, got {0}")]
    Degree(u32),
    #[error("polynomial kernel coef0 must be finite and >= 0 (a negative coef0 is not positive semi-definite), got {0}")]
    Coef0(f64),
}

impl Kernel {
    /// Rejects parameters that make k non-finite or not positive semi-definite.
    pub fn check(&self) -> Result<(), KernelError> {
        match *self {
            Kernel::Linear => Ok(()),
            Kernel::Rbf { gamma } if !(gamma.is_finite() && gamma > 0.0) => {
                Err(KernelError::Gamma(gamma))
            }
            Kernel::Rbf { .. } => Ok(()),
            Kernel::Poly { gamma, .. } if !(gamma.is_finite() && gamma > 0.0) => {
                Err(KernelError::Gamma(gamma))
            }
            Kernel::Poly { degree: 0, .. } => Err(KernelError::Degree(0)),
            Kernel::Poly { coef0, .. } if !(coef0.is_finite() && coef0 >= 0.0) => {
                Err(KernelError::Coef0(coef0))
            }
            Kernel::Poly { .. } => Ok(()),
        }
    }

    /// k from the inner product and the two squared norms (what every batched path computes).
    #[inline]
    pub fn from_dot(&self, dot: f64, sq_a: f64, sq_b: f64) -> f64 {
        match *self {
            Kernel::Linear => dot,
            // Rounding can make the expanded distance slightly negative for near-duplicates.
            Kernel::Rbf { gamma } => (-gamma * (sq_a + sq_b - 2.0 * dot).max(0.0)).exp(),
            Kernel::Poly {
                degree,
                gamma,
                coef0,
            } => (gamma * dot + coef0).powi(degree as i32),
        }
    }

    /// k(a, b) for two rows.
    pub fn eval(&self, a: RowRef<'_>, b: RowRef<'_>) -> f64 {
        match *self {
            Kernel::Rbf { .. } => self.from_dot(a.dot(&b), a.squared_norm(), b.squared_norm()),
            _ => self.from_dot(a.dot(&b), 0.0, 0.0),
        }
    }

    /// Only RBF needs the squared norms of the rows.
    fn needs_norms(&self) -> bool {
        matches!(self, Kernel::Rbf { .. })
    }
}

/// Inner products of one row `x` with every row of `rows`, written into `out`.
pub fn dots_into(rows: &Rows, x: RowRef<'_>, out: &mut [f64]) {
    debug_assert_eq!(out.len(), rows.n_rows());
    match (rows, x) {
        (Rows::Dense(m), RowRef::Dense(x)) => {
            let mut out = ArrayViewMut1::from(out);
            general_mat_vec_mul(1.0, m, &ArrayView1::from(x), 0.0, &mut out);
        }
        (Rows::Dense(m), RowRef::Sparse { indices, values }) => {
            for (r, o) in m.outer_iter().zip(out.iter_mut()) {
                *o = indices
                    .iter()
                    .zip(values)
                    .map(|(&i, v)| r[i as usize] * v)
                    .sum();
            }
        }
        (Rows::Sparse(_), x) => {
            for (r, o) in out.iter_mut().enumerate() {
                *o = rows.row(r).dot(&x);
            }
        }
    }
}

/// Kernel rows over a fixed sample set, computed on demand, cached within a byte budget.
///
/// `evaluations` counts every kernel value computed (cache misses), `hits`/`misses` count row
/// requests; a row that does not fit in the budget is computed and handed out uncached.
pub struct KernelRows<'a> {
    kernel: Kernel,
    rows: &'a Rows,
    norms: Vec<f64>,
    cache: LruCache<usize, Arc<[f64]>>,
    budget_bytes: usize,
    used_bytes: usize,
    pub evaluations: u64,
    pub hits: u64,
    pub misses: u64,
}

impl<'a> KernelRows<'a> {
    pub fn new(kernel: Kernel, rows: &'a Rows, budget_bytes: usize) -> Self {
        let norms = if kernel.needs_norms() {
            rows.squared_norms()
        } else {
            Vec::new()
        };
        KernelRows {
            kernel,
            rows,
            norms,
            cache: LruCache::unbounded(),
            budget_bytes,
            used_bytes: 0,
            evaluations: 0,
            hits: 0,
            misses: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.rows.n_rows()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.n_rows() == 0
    }

    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// k(x_i, x_i) for every sample: counted as kernel evaluations, except for RBF, whose
    /// diagonal is exactly 1 (exp(−γ·0)) and is not computed.
    pub fn diagonal(&mut self) -> Vec<f64> {
        if let Kernel::Rbf { .. } = self.kernel {
            return vec![1.0; self.len()];
        }
        self.evaluations += self.len() as u64;
        (0..self.len())
            .map(|i| {
                let x = self.rows.row(i);
                let sq = x.squared_norm();
                self.kernel.from_dot(sq, sq, sq)
            })
            .collect()
    }

    /// Row `i` of K over the sample set.
    pub fn row(&mut self, i: usize) -> Arc<[f64]> {
        if let Some(row) = self.cache.get(&i) {
            self.hits += 1;
            return Arc::clone(row);
        }
        self.misses += 1;
        let mut out = vec![0.0; self.len()];
        self.cross_row(self.rows.row(i), &mut out);
        self.store(i, out)
    }

    /// Caches row `i`, assembled by the caller from kernel values it computed (and counted)
    /// elsewhere, so a later [`KernelRows::row`] of `i` is a hit. Within the byte budget, as
    /// any row.
    pub fn insert(&mut self, i: usize, row: Vec<f64>) -> Arc<[f64]> {
        assert_eq!(row.len(), self.len(), "a row has one value per sample");
        self.store(i, row)
    }

    fn store(&mut self, i: usize, out: Vec<f64>) -> Arc<[f64]> {
        if let Some(old) = self.cache.pop(&i) {
            self.used_bytes -= std::mem::size_of_val(&*old);
        }
        let row: Arc<[f64]> = out.into();
        let bytes = std::mem::size_of_val(&*row);
        if bytes <= self.budget_bytes {
            while self.used_bytes + bytes > self.budget_bytes {
                match self.cache.pop_lru() {
                    Some((_, old)) => self.used_bytes -= std::mem::size_of_val(&*old),
                    None => break,
                }
            }
            self.used_bytes += bytes;
            self.cache.put(i, Arc::clone(&row));
        }
        row
    }

    /// k(x, x_u) for every sample u, for a row `x` from anywhere (not cached).
    pub fn cross_row(&mut self, x: RowRef<'_>, out: &mut [f64]) {
        dots_into(self.rows, x, out);
        self.evaluations += out.len() as u64;
        match self.kernel {
            Kernel::Linear => {}
            Kernel::Rbf { .. } => {
                let sq_x = x.squared_norm();
                for (o, &n) in out.iter_mut().zip(&self.norms) {
                    *o = self.kernel.from_dot(*o, sq_x, n);
                }
            }
            Kernel::Poly { .. } => {
                for o in out.iter_mut() {
                    *o = self.kernel.from_dot(*o, 0.0, 0.0);
                }
            }
        }
    }

    /// Σ_j k(x_u, y_j) for every sample u, over all rows `y_j` of `others`.
    pub fn sum_against(&mut self, others: &Rows) -> Vec<f64> {
        let mut total = vec![0.0; self.len()];
        let mut buf = vec![0.0; self.len()];
        for j in 0..others.n_rows() {
            self.cross_row(others.row(j), &mut buf);
            for (t, b) in total.iter_mut().zip(&buf) {
                *t += b;
            }
        }
        total
    }

    pub fn hit_rate(&self) -> f64 {
        let asked = self.hits + self.misses;
        if asked == 0 {
            0.0
        } else {
            self.hits as f64 / asked as f64
        }
    }
}

/// f(x) = Σ_s coef_s k(x, sv_s) + bias, scored in blocks so dense RBF becomes matrix products.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelExpansion {
    pub kernel: Kernel,
    pub support: Rows,
    pub coef: Vec<f64>,
    pub bias: f64,
    /// ‖sv‖² per support vector (RBF), kept so scoring never recomputes it.
    support_norms: Vec<f64>,
    /// For the linear kernel: w = Σ coef_s sv_s, so scoring is one dot product.
    linear_weights: Option<Vec<f64>>,
}

/// Rows scored per block: bounds the scratch matrix at `BLOCK_ROWS × BLOCK_SV` values.
const BLOCK_ROWS: usize = 256;
const BLOCK_SV: usize = 1024;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl KernelExpansion {
    pub fn new(kernel: Kernel, support: Rows, coef: Vec<f64>, bias: f64) -> Self {
        assert_eq!(
            support.n_rows(),
            coef.len(),
            "one coefficient per support vector"
        );
        let support_norms = support.squared_norms();
        let linear_weights = matches!(kernel, Kernel::Linear).then(|| {
            let mut w = Vec::new();
            support.transpose_times(&coef, &mut w);
            w
        });
        KernelExpansion {
            kernel,
            support,
            coef,
            bias,
            support_norms,
            linear_weights,
        }
    }

    pub fn n_features(&self) -> usize {
        self.support.n_features()
    }

    /// Decision values for already-scaled rows.
    /// w = Σ coef_s sv_s for the linear kernel (what linear scoring dots with), else `None`.
    pub fn linear_weights(&self) -> Option<&[f64]> {
        self.linear_weights.as_deref()
    }

    pub fn decision_batch(&self, rows: &Rows, out: &mut [f64]) {
        assert_eq!(rows.n_rows(), out.len(), "one output per row");
        match rows {
            Rows::Dense(x) => self.decision_dense(x.view(), out),
            Rows::Sparse(_) => {
                for (r, o) in out.iter_mut().enumerate() {
                    *o = self.decision_row(rows.row(r));
                }
            }
        }
    }

    /// Decision values for already-scaled dense rows (row-major). Dense support vectors with a
    /// non-linear kernel are scored as blocked matrix products.
    pub fn decision_dense(&self, x: ArrayView2<'_, f64>, out: &mut [f64]) {
        assert_eq!(x.nrows(), out.len(), "one output per row");
        let sv = match (&self.linear_weights, &self.support) {
            (None, Rows::Dense(sv)) => sv,
            _ => {
                for (row, o) in x.outer_iter().zip(out.iter_mut()) {
                    *o = self.decision_row(RowRef::Dense(
                        row.to_slice().expect("dense rows are row-major"),
                    ));
                }
                return;
            }
        };
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.resize(BLOCK_ROWS * BLOCK_SV, 0.0);
            out.fill(self.bias);
            for r0 in (0..x.nrows()).step_by(BLOCK_ROWS) {
                let r1 = (r0 + BLOCK_ROWS).min(x.nrows());
                let xb = x.slice(ndarray::s![r0..r1, ..]);
                let x_norms: [f64; BLOCK_ROWS] = std::array::from_fn(|k| {
                    if r0 + k < r1 {
                        let row = xb.row(k);
                        row.dot(&row)
                    } else {
                        0.0
                    }
                });
                for s0 in (0..sv.nrows()).step_by(BLOCK_SV) {
                    let s1 = (s0 + BLOCK_SV).min(sv.nrows());
                    let svb = sv.slice(ndarray::s![s0..s1, ..]);
                    let mut prod = ArrayViewMut2::from_shape(
                        (r1 - r0, s1 - s0),
                        &mut scratch[..(r1 - r0) * (s1 - s0)],
                    )
                    .expect("scratch holds a full block");
                    general_mat_mul(1.0, &xb, &svb.t(), 0.0, &mut prod);
                    for (k, prow) in prod.outer_iter().enumerate() {
                        let mut acc = 0.0;
                        for ((&d, &c), &n) in prow
                            .iter()
                            .zip(&self.coef[s0..s1])
                            .zip(&self.support_norms[s0..s1])
                        {
                            acc += c * self.kernel.from_dot(d, x_norms[k], n);
                        }
                        out[r0 + k] += acc;
                    }
                }
            }
        });
    }

    /// The decision value of one scaled row.
    pub fn decision_row(&self, x: RowRef<'_>) -> f64 {
        if let Some(w) = &self.linear_weights {
            return x.dot(&RowRef::Dense(w)) + self.bias;
        }
        let sq_x = x.squared_norm();
        let mut acc = self.bias;
        for (s, (&c, &n)) in self.coef.iter().zip(&self.support_norms).enumerate() {
            acc += c * self.kernel.from_dot(x.dot(&self.support.row(s)), sq_x, n);
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::CsrMatrix;
    use ndarray::Array2;

    fn sample(n: usize, d: usize, seed: u64) -> Array2<f64> {
        let mut s = seed;
        Array2::from_shape_fn((n, d), |_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
    }

    fn to_sparse(m: &Array2<f64>) -> Rows {
        let mut csr = CsrMatrix::new(m.ncols());
        for r in m.outer_iter() {
            let (idx, val): (Vec<u32>, Vec<f64>) = r
                .iter()
                .enumerate()
                .filter(|(_, v)| v.abs() > 0.3)
                .map(|(i, &v)| (i as u32, v))
                .unzip();
            csr.push_row(&idx, &val).unwrap();
        }
        Rows::Sparse(csr)
    }

    const KERNELS: [Kernel; 3] = [
        Kernel::Linear,
        Kernel::Rbf { gamma: 0.7 },
        Kernel::Poly {
            degree: 3,
            gamma: 0.5,
            coef0: 1.0,
        },
    ];

    #[test]
    fn rows_match_pairwise_evaluation_and_cache_respects_budget() {
        let rows = Rows::dense(sample(40, 5, 1));
        for kernel in KERNELS {
            // Budget for 3 rows of 40 values.
            let mut kr = KernelRows::new(kernel, &rows, 3 * 40 * 8);
            for i in [0, 5, 9, 5, 0, 33, 12, 0] {
                let row = kr.row(i);
                for (u, &v) in row.iter().enumerate() {
                    let want = kernel.eval(rows.row(i), rows.row(u));
                    assert!((v - want).abs() <= 1e-12 * want.abs().max(1.0));
                }
                assert!(kr.used_bytes <= 3 * 40 * 8);
            }
            assert_eq!(kr.hits + kr.misses, 8);
            assert_eq!(kr.evaluations, kr.misses * 40);
            // 5, 0 and the last 0 hit: 33 evicts 9 and 12 evicts 5, the least recently used.
            assert_eq!(kr.hits, 3);
        }
    }

    #[test]
    fn an_inserted_row_is_served_from_the_cache_and_replaces_its_old_copy() {
        let rows = Rows::dense(sample(10, 3, 2));
        let mut kr = KernelRows::new(Kernel::Rbf { gamma: 1.0 }, &rows, 2 * 10 * 8);
        let computed = kr.row(4).to_vec();
        kr.insert(4, computed.clone());
        kr.insert(7, vec![0.5; 10]);
        assert_eq!(kr.used_bytes, 2 * 10 * 8);
        assert_eq!(&*kr.row(4), &computed[..]);
        assert_eq!(&*kr.row(7), &[0.5; 10][..]);
        assert_eq!((kr.hits, kr.misses, kr.evaluations), (2, 1, 10));
        // The RBF diagonal is exactly 1 and costs no kernel value.
        assert_eq!(kr.diagonal(), vec![1.0; 10]);
        assert_eq!(kr.evaluations, 10);
    }

    #[test]
    fn zero_budget_still_serves_rows() {
        let rows = Rows::dense(sample(10, 3, 2));
        let mut kr = KernelRows::new(Kernel::Rbf { gamma: 1.0 }, &rows, 0);
        assert_eq!(kr.row(3)[3], 1.0);
        assert_eq!(kr.row(3)[3], 1.0);
        assert_eq!(kr.misses, 2);
    }

    #[test]
    fn expansion_matches_naive_sum_on_dense_and_sparse() {
        let sv = sample(1500, 6, 3);
        let x = sample(300, 6, 4);
        let coef: Vec<f64> = (0..1500).map(|i| ((i % 7) as f64 - 3.0) / 10.0).collect();
        for kernel in KERNELS {
            for (svr, xr) in [
                (Rows::dense(sv.clone()), Rows::dense(x.clone())),
                (to_sparse(&sv), to_sparse(&x)),
                (to_sparse(&sv), Rows::dense(x.clone())),
            ] {
                let exp = KernelExpansion::new(kernel, svr.clone(), coef.clone(), 0.25);
                let mut out = vec![0.0; 300];
                exp.decision_batch(&xr, &mut out);
                for (r, &o) in out.iter().enumerate() {
                    let want: f64 = 0.25
                        + (0..1500)
                            .map(|s| coef[s] * kernel.eval(xr.row(r), svr.row(s)))
                            .sum::<f64>();
                    assert!((o - want).abs() <= 1e-9 * want.abs().max(1.0), "{kernel:?}");
                }
            }
        }
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        assert!(Kernel::Rbf { gamma: 0.0 }.check().is_err());
        assert!(Kernel::Rbf { gamma: f64::NAN }.check().is_err());
        assert!(Kernel::Poly {
            degree: 0,
            gamma: 1.0,
            coef0: 0.0
        }
        .check()
        .is_err());
        assert!(Kernel::Poly {
            degree: 2,
            gamma: 1.0,
            coef0: -1.0
        }
        .check()
        .is_err());
    }
}
