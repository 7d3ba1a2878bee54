//! The Nyström feature map: φ(x) = Λ^(−1/2) Uᵀ k_L(x), with k_L(x) the kernel values of x
//! against r landmark rows and U Λ Uᵀ the eigendecomposition of their r×r kernel matrix, so
//! φ(x)·φ(z) approximates k(x, z) (Williams & Seeger 2001). A linear learner on φ is then a
//! kernel learner whose scorer is a kernel expansion over the landmarks; only an r×r matrix
//! is formed, never an n×n one.

use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::data::Rows;
use crate::learn::kernel::Kernel;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NystromError {
    #[error("--nystrom-rank {rank} exceeds the {rows} training rows")]
    RankAboveRows { rank: usize, rows: usize },
    #[error("--nystrom-rank must be at least 1")]
    ZeroRank,
    #[error("the landmarks' kernel matrix has no positive eigenvalue (every landmark alike?)")]
    Degenerate,
    #[error("the landmarks' kernel matrix could not be decomposed")]
    Eigen,
}

/// Which map to build: the kernel, the number of landmarks r and the seed that draws them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NystromSpec {
    pub kernel: Kernel,
    pub rank: usize,
    pub seed: u64,
}

/// Eigenvalues below this share of the largest are dropped: their directions are noise.
const RELATIVE_EIGEN_FLOOR: f64 = 1e-10;

/// A fitted map: landmarks and the projection Λ^(−1/2) Uᵀ (one row per kept eigenvalue).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NystromMap {
    pub kernel: Kernel,
    pub landmarks: Rows,
    /// Row-major, `dim` × landmarks.
    projection: Vec<f64>,
    dim: usize,
}

impl NystromMap {
    /// Draws `spec.rank` distinct landmarks from `rows` with `spec.seed` and decomposes their
    /// kernel matrix.
    pub fn fit(spec: &NystromSpec, rows: &Rows) -> Result<NystromMap, NystromError> {
        let (r, n) = (spec.rank, rows.n_rows());
        if r == 0 {
            return Err(NystromError::ZeroRank);
        }
        if r > n {
            return Err(NystromError::RankAboveRows { rank: r, rows: n });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let mut picked = sample(&mut rng, n, r).into_vec();
        picked.sort_unstable();
        let landmarks = rows.select(&picked);
        let k = faer::Mat::from_fn(r, r, |a, b| {
            spec.kernel.eval(landmarks.row(a), landmarks.row(b))
        });
        let eigen = k
            .self_adjoint_eigen(faer::Side::Lower)
            .map_err(|_| NystromError::Eigen)?;
        let values = eigen.S().column_vector();
        let largest = (0..r).map(|i| values[i]).fold(0.0, f64::max);
        if largest <= 0.0 || !largest.is_finite() {
            return Err(NystromError::Degenerate);
        }
        let kept: Vec<usize> = (0..r)
            .rev()
            .filter(|&i| values[i] > RELATIVE_EIGEN_FLOOR * largest)
            .collect();
        let u = eigen.U();
        let mut projection = Vec::with_capacity(kept.len() * r);
        for &i in &kept {
            let scale = values[i].sqrt().recip();
            projection.extend((0..r).map(|l| u[(l, i)] * scale));
        }
        Ok(NystromMap {
            kernel: spec.kernel,
            landmarks,
            projection,
            dim: kept.len(),
        })
    }

    /// The dimension of φ: the eigenvalues kept (at most the rank).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// φ of every row, as dense rows.
    pub fn transform(&self, rows: &Rows) -> Rows {
        let r = self.landmarks.n_rows();
        let mut k = vec![0.0; r];
        let mut out = ndarray::Array2::zeros((rows.n_rows(), self.dim));
        for (i, mut phi) in out.rows_mut().into_iter().enumerate() {
            for (l, v) in k.iter_mut().enumerate() {
                *v = self.kernel.eval(rows.row(i), self.landmarks.row(l));
            }
            for (o, p) in phi.iter_mut().zip(self.projection.chunks_exact(r)) {
                *o = crate::data::rows::dense_dot(p, &k);
            }
        }
        Rows::dense(out)
    }

    /// The landmarks' coefficients of the linear function w·φ(x): Mᵀw, so that
    /// w·φ(x) = Σ_l (Mᵀw)_l k(x, landmark_l).
    pub fn coefficients(&self, w: &[f64]) -> Vec<f64> {
        let r = self.landmarks.n_rows();
        let mut coef = vec![0.0; r];
        for (p, &wi) in self.projection.chunks_exact(r).zip(w) {
            coef.iter_mut().zip(p).for_each(|(c, p)| *c += wi * p);
        }
        coef
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::kernel::KernelExpansion;
    use ndarray::Array2;
    use rand::Rng;

    fn rows(n: usize, d: usize, seed: u64) -> Rows {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        Rows::dense(Array2::from_shape_fn((n, d), |_| {
            rng.gen::<f64>() * 2.0 - 1.0
        }))
    }

    /// With every row a landmark, φ(x)·φ(z) is k(x, z) exactly (up to the dropped
    /// eigenvalues), and the expansion over the landmarks scores w·φ(x).
    #[test]
    fn full_rank_map_reproduces_the_kernel_and_its_expansion() {
        let x = rows(40, 3, 1);
        let kernel = Kernel::Rbf { gamma: 0.5 };
        let spec = NystromSpec {
            kernel,
            rank: 40,
            seed: 7,
        };
        let map = NystromMap::fit(&spec, &x).unwrap();
        let phi = map.transform(&x);
        for a in 0..40 {
            for b in 0..40 {
                let want = kernel.eval(x.row(a), x.row(b));
                let got = phi.row(a).dot(&phi.row(b));
                assert!((want - got).abs() < 1e-6, "k({a},{b}) {want} vs {got}");
            }
        }
        let w: Vec<f64> = (0..map.dim()).map(|i| (i as f64 * 0.37).sin()).collect();
        let expansion =
            KernelExpansion::new(kernel, map.landmarks.clone(), map.coefficients(&w), 0.25);
        let z = rows(5, 3, 2);
        let phi_z = map.transform(&z);
        for i in 0..5 {
            let want = crate::data::rows::dense_dot(
                &w,
                match phi_z.row(i) {
                    crate::data::RowRef::Dense(v) => v,
                    crate::data::RowRef::Sparse { .. } => unreachable!("dense map"),
                },
            ) + 0.25;
            let got = expansion.decision_row(z.row(i));
            assert!((want - got).abs() < 1e-9, "row {i}: {want} vs {got}");
        }
    }

    #[test]
    fn a_rank_above_the_rows_is_refused() {
        let spec = NystromSpec {
            kernel: Kernel::Rbf { gamma: 1.0 },
            rank: 11,
            seed: 0,
        };
        assert_eq!(
            NystromMap::fit(&spec, &rows(10, 2, 0)),
            Err(NystromError::RankAboveRows { rank: 11, rows: 10 })
        );
    }
}
