//! Dense and sparse rows behind one access type.
//!
//! Kernels and solvers read samples only through [`Rows::row`], which yields a [`RowRef`]; they
//! never care whether the storage is an `ndarray` matrix or CSR. Dense storage is row-major so a
//! row is one contiguous slice (and a block of rows is a matrix for batched products).

use ndarray::{Array2, ArrayView2};
use serde::{Deserialize, Serialize};

/// Compressed sparse rows: row `i` owns `indices[indptr[i]..indptr[i+1]]` (strictly increasing
/// column indices) and the matching `values`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CsrMatrix {
    n_features: usize,
    indptr: Vec<usize>,
    indices: Vec<u32>,
    values: Vec<f64>,
}

/// Why a [`CsrMatrix`] could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CsrError {
    #[error("row {row}: column index {index} is not below the feature count {n_features}")]
    IndexOutOfRange {
        row: usize,
        index: u32,
        n_features: usize,
    },
    #[error("row {row}: column indices are not strictly increasing")]
    Unsorted { row: usize },
    #[error("indptr/indices/values lengths disagree")]
    Shape,
}

impl CsrMatrix {
    /// An empty matrix with `n_features` columns; add rows with [`CsrMatrix::push_row`].
    pub fn new(n_features: usize) -> Self {
        CsrMatrix {
            n_features,
            indptr: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
        }
    }

    /// Builds from raw CSR parts, checking every invariant.
    pub fn from_parts(
        n_features: usize,
        indptr: Vec<usize>,
        indices: Vec<u32>,
        values: Vec<f64>,
    ) -> Result<Self, CsrError> {
        if indptr.first() != Some(&0)
            || indptr.last() != Some(&indices.len())
            || indices.len() != values.len()
            || indptr.windows(2).any(|w| w[0] > w[1])
        {
            return Err(CsrError::Shape);
        }
        let m = CsrMatrix {
            n_features,
            indptr,
            indices,
            values,
        };
        for row in 0..m.n_rows() {
            let (idx, _) = m.row_parts(row);
            check_sparse_row(row, idx, n_features)?;
        }
        Ok(m)
    }

    /// Appends a row given as sorted `(indices, values)`.
    pub fn push_row(&mut self, indices: &[u32], values: &[f64]) -> Result<(), CsrError> {
        if indices.len() != values.len() {
            return Err(CsrError::Shape);
        }
        check_sparse_row(self.n_rows(), indices, self.n_features)?;
        self.indices.extend_from_slice(indices);
        self.values.extend_from_slice(values);
        self.indptr.push(self.indices.len());
        Ok(())
    }

    pub fn n_rows(&self) -> usize {
        self.indptr.len() - 1
    }

    pub fn n_features(&self) -> usize {
        self.n_features
    }

    /// Widens the column count (LIBSVM files only learn it from the largest index seen).
    pub fn set_n_features(&mut self, n_features: usize) {
        debug_assert!(self.indices.iter().all(|&i| (i as usize) < n_features));
        self.n_features = n_features;
    }

    fn row_parts(&self, row: usize) -> (&[u32], &[f64]) {
        let (a, b) = (self.indptr[row], self.indptr[row + 1]);
        (&self.indices[a..b], &self.values[a..b])
    }

    pub fn nnz(&self) -> usize {
        self.values.len()
    }
}

fn check_sparse_row(row: usize, indices: &[u32], n_features: usize) -> Result<(), CsrError> {
    if indices.windows(2).any(|w| w[0] >= w[1]) {
        return Err(CsrError::Unsorted { row });
    }
    if let Some(&index) = indices.iter().find(|&&i| i as usize >= n_features) {
        return Err(CsrError::IndexOutOfRange {
            row,
            index,
            n_features,
        });
    }
    Ok(())
}

/// A set of samples, dense (row-major `ndarray`) or sparse (CSR).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Rows {
    Dense(Array2<f64>),
    Sparse(CsrMatrix),
}

/// One sample, borrowed from a [`Rows`].
#[derive(Debug, Clone, Copy)]
pub enum RowRef<'a> {
    Dense(&'a [f64]),
    Sparse {
        indices: &'a [u32],
        values: &'a [f64],
    },
}

impl Rows {
    /// A dense matrix; it is made row-major (standard layout) if it is not already.
    pub fn dense(matrix: Array2<f64>) -> Self {
        if matrix.is_standard_layout() {
            Rows::Dense(matrix)
        } else {
            Rows::Dense(matrix.as_standard_layout().into_owned())
        }
    }

    pub fn n_rows(&self) -> usize {
        match self {
            Rows::Dense(m) => m.nrows(),
            Rows::Sparse(m) => m.n_rows(),
        }
    }

    pub fn n_features(&self) -> usize {
        match self {
            Rows::Dense(m) => m.ncols(),
            Rows::Sparse(m) => m.n_features(),
        }
    }

    pub fn is_sparse(&self) -> bool {
        matches!(self, Rows::Sparse(_))
    }

    /// Row `i`. Panics if `i` is out of range (an internal indexing bug, never input-driven).
    pub fn row(&self, i: usize) -> RowRef<'_> {
        match self {
            Rows::Dense(m) => RowRef::Dense(
                m.row(i)
                    .to_slice()
                    .expect("dense rows are kept in standard layout"),
            ),
            Rows::Sparse(m) => {
                let (indices, values) = m.row_parts(i);
                RowRef::Sparse { indices, values }
            }
        }
    }

    /// The dense matrix view, if dense.
    pub fn as_dense(&self) -> Option<ArrayView2<'_, f64>> {
        match self {
            Rows::Dense(m) => Some(m.view()),
            Rows::Sparse(_) => None,
        }
    }

    /// A new `Rows` holding the listed rows, in that order, in the same storage kind.
    pub fn select(&self, rows: &[usize]) -> Rows {
        match self {
            Rows::Dense(m) => Rows::Dense(gather_rows(m.view(), rows)),
            Rows::Sparse(m) => {
                let mut out = CsrMatrix::new(m.n_features());
                for &r in rows {
                    let (idx, val) = m.row_parts(r);
                    out.indices.extend_from_slice(idx);
                    out.values.extend_from_slice(val);
                    out.indptr.push(out.indices.len());
                }
                Rows::Sparse(out)
            }
        }
    }

    /// The rows of every set, in order: dense when every set is dense, else CSR (dense rows
    /// keep their non-zero values).
    pub fn concat(sets: &[&Rows]) -> Rows {
        let n_features = sets.iter().map(|r| r.n_features()).max().unwrap_or(0);
        if sets.iter().all(|r| !r.is_sparse()) {
            let views: Vec<_> = sets.iter().filter_map(|r| r.as_dense()).collect();
            return match ndarray::concatenate(ndarray::Axis(0), &views) {
                Ok(m) => Rows::Dense(m),
                Err(_) => Rows::Dense(Array2::zeros((0, n_features))),
            };
        }
        let mut out = CsrMatrix::new(n_features);
        for set in sets {
            for i in 0..set.n_rows() {
                match set.row(i) {
                    RowRef::Sparse { indices, values } => {
                        out.indices.extend_from_slice(indices);
                        out.values.extend_from_slice(values);
                    }
                    RowRef::Dense(x) => {
                        for (j, &v) in x.iter().enumerate().filter(|(_, v)| **v != 0.0) {
                            out.indices.push(j as u32);
                            out.values.push(v);
                        }
                    }
                }
                out.indptr.push(out.indices.len());
            }
        }
        Rows::Sparse(out)
    }

    /// Zᵀu = Σ_i u_i·row_i into `out` (resized to `n_features`), row by row in memory order;
    /// rows with u_i = 0 are skipped.
    pub fn transpose_times(&self, u: &[f64], out: &mut Vec<f64>) {
        out.clear();
        out.resize(self.n_features(), 0.0);
        for (r, &c) in u.iter().enumerate() {
            if c == 0.0 {
                continue;
            }
            match self.row(r) {
                RowRef::Dense(x) => out.iter_mut().zip(x).for_each(|(o, x)| *o += c * x),
                RowRef::Sparse { indices, values } => {
                    for (&i, &x) in indices.iter().zip(values) {
                        out[i as usize] += c * x;
                    }
                }
            }
        }
    }

    /// Squared Euclidean norm of every row.
    pub fn squared_norms(&self) -> Vec<f64> {
        (0..self.n_rows())
            .map(|i| self.row(i).squared_norm())
            .collect()
    }

    /// Bytes held by the sample values (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Rows::Dense(m) => m.len() * std::mem::size_of::<f64>(),
            Rows::Sparse(m) => {
                m.nnz() * (std::mem::size_of::<f64>() + std::mem::size_of::<u32>())
                    + m.indptr.len() * std::mem::size_of::<usize>()
            }
        }
    }

    /// Every stored value is finite.
    pub fn all_finite(&self) -> bool {
        match self {
            Rows::Dense(m) => m.iter().all(|v| v.is_finite()),
            Rows::Sparse(m) => m.values.iter().all(|v| v.is_finite()),
        }
    }
}

impl<'a> RowRef<'a> {
    pub fn squared_norm(&self) -> f64 {
        match self {
            RowRef::Dense(x) => x.iter().map(|v| v * v).sum(),
            RowRef::Sparse { values, .. } => values.iter().map(|v| v * v).sum(),
        }
    }

    /// Inner product of two rows of any storage kind.
    pub fn dot(&self, other: &RowRef<'_>) -> f64 {
        match (self, other) {
            (RowRef::Dense(a), RowRef::Dense(b)) => dense_dot(a, b),
            (RowRef::Dense(d), RowRef::Sparse { indices, values })
            | (RowRef::Sparse { indices, values }, RowRef::Dense(d)) => indices
                .iter()
                .zip(values.iter())
                .map(|(&i, v)| d[i as usize] * v)
                .sum(),
            (
                RowRef::Sparse {
                    indices: ia,
                    values: va,
                },
                RowRef::Sparse {
                    indices: ib,
                    values: vb,
                },
            ) => {
                let (mut a, mut b, mut sum) = (0, 0, 0.0);
                while a < ia.len() && b < ib.len() {
                    match ia[a].cmp(&ib[b]) {
                        std::cmp::Ordering::Less => a += 1,
                        std::cmp::Ordering::Greater => b += 1,
                        std::cmp::Ordering::Equal => {
                            sum += va[a] * vb[b];
                            a += 1;
                            b += 1;
                        }
                    }
                }
                sum
            }
        }
    }

    /// Writes the row into a dense buffer of length `n_features` (zeros elsewhere).
    pub fn write_dense(&self, out: &mut [f64]) {
        match self {
            RowRef::Dense(x) => out.copy_from_slice(x),
            RowRef::Sparse { indices, values } => {
                out.fill(0.0);
                for (&i, &v) in indices.iter().zip(values.iter()) {
                    out[i as usize] = v;
                }
            }
        }
    }
}

/// The listed rows of `m`, in that order, as a new matrix: what `m.select(Axis(0), rows)`
/// returns, copied row by row (ndarray's `select` concatenates one view per row, which cost
/// the replay's retrains a few percent of their time).
///
/// # Panics
/// If a row index is out of bounds (a caller bug).
pub fn gather_rows(m: ArrayView2<'_, f64>, rows: &[usize]) -> Array2<f64> {
    let d = m.ncols();
    let mut flat = Vec::with_capacity(rows.len() * d);
    for &r in rows {
        let row = m.row(r);
        match row.as_slice() {
            Some(values) => flat.extend_from_slice(values),
            None => flat.extend(row.iter().copied()),
        }
    }
    Array2::from_shape_vec((rows.len(), d), flat).expect("rows × d values")
}

/// Dot product in four independent lanes, so the compiler vectorises it.
pub fn dense_dot(a: &[f64], b: &[f64]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    // Four independent sums in chunks without bounds checks: the compiler vectorises this,
    // and the order of additions is fixed, so results are reproducible.
    let mut acc = [0.0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..4 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (x, y) in ra.iter().zip(rb) {
        sum += x * y;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn dot_agrees_across_storage_kinds() {
        let dense = Rows::dense(array![[1.0, 0.0, 2.0, 0.0, 3.0], [0.0, 4.0, 5.0, 0.0, 0.5]]);
        let mut csr = CsrMatrix::new(5);
        csr.push_row(&[0, 2, 4], &[1.0, 2.0, 3.0]).unwrap();
        csr.push_row(&[1, 2, 4], &[4.0, 5.0, 0.5]).unwrap();
        let sparse = Rows::Sparse(csr);
        let want = 1.0 * 0.0 + 2.0 * 5.0 + 3.0 * 0.5;
        for a in [&dense, &sparse] {
            for b in [&dense, &sparse] {
                assert_eq!(a.row(0).dot(&b.row(1)), want);
            }
        }
        assert_eq!(sparse.squared_norms(), dense.squared_norms());
        assert_eq!(
            sparse.select(&[1]).row(0).dot(&dense.row(1)),
            16.0 + 25.0 + 0.25
        );
    }

    #[test]
    fn csr_rejects_bad_rows() {
        let mut csr = CsrMatrix::new(3);
        assert_eq!(
            csr.push_row(&[2, 1], &[1.0, 1.0]),
            Err(CsrError::Unsorted { row: 0 })
        );
        assert!(matches!(
            csr.push_row(&[3], &[1.0]),
            Err(CsrError::IndexOutOfRange { index: 3, .. })
        ));
    }
}
