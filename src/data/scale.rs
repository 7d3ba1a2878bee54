//! Feature scaling, fitted on training rows and stored in models.

use std::fmt;
use std::str::FromStr;

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use super::read::DataError;
use super::rows::{CsrMatrix, RowRef, Rows};

/// How features are scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScaleKind {
    /// Values pass through unchanged.
    None,
    /// Dense rows: zero mean and unit population standard deviation. Sparse rows: unit standard
    /// deviation (counting implicit zeros) without centring, because centring would turn every
    /// implicit zero into a stored value.
    Standard,
    /// Dense rows: onto `[0, 1]` by the column's minimum and maximum. Sparse rows: divided by the
    /// column's largest absolute value (onto `[-1, 1]`) without shifting, for the same reason.
    MinMax,
}

impl ScaleKind {
    fn name(self) -> &'static str {
        match self {
            ScaleKind::None => "none",
            ScaleKind::Standard => "standard",
            ScaleKind::MinMax => "minmax",
        }
    }
}

impl fmt::Display for ScaleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ScaleKind {
    type Err = DataError;

    fn from_str(s: &str) -> Result<ScaleKind, DataError> {
        [ScaleKind::None, ScaleKind::Standard, ScaleKind::MinMax]
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| DataError::UnknownScale(s.to_owned()))
    }
}

/// Scales feature `j` as `x' = (x - shift[j]) * factor[j]`.
///
/// A constant column (counting a sparse set's implicit zeros) gets factor 0 and so maps to 0,
/// which is the same as dropping it. Output is always finite: a NaN input maps to 0 and an
/// overflow saturates at `±f64::MAX`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StoredScaler")]
pub struct Scaler {
    kind: ScaleKind,
    shift: Vec<f64>,
    factor: Vec<f64>,
}

/// A scaler as read from a model file, checked before use because model files are input.
#[derive(Deserialize)]
struct StoredScaler {
    kind: ScaleKind,
    shift: Vec<f64>,
    factor: Vec<f64>,
}

impl TryFrom<StoredScaler> for Scaler {
    type Error = DataError;

    fn try_from(s: StoredScaler) -> Result<Scaler, DataError> {
        if s.shift.len() != s.factor.len() {
            return Err(DataError::InvalidScaler("shift and factor lengths differ"));
        }
        if !s.shift.iter().chain(&s.factor).all(|v| v.is_finite()) {
            return Err(DataError::InvalidScaler("a parameter is not finite"));
        }
        Ok(Scaler {
            kind: s.kind,
            shift: s.shift,
            factor: s.factor,
        })
    }
}

/// One column's statistics over all rows, implicit zeros included.
#[derive(Clone)]
struct ColumnStats {
    stored: usize,
    sum: f64,
    min: f64,
    max: f64,
    squared_deviations: f64,
}

impl Scaler {
    /// This scaler followed by a multiplication of every output by `c` (finite, > 0); τ-FPL uses
    /// it to divide by the largest training row norm.
    pub fn times(mut self, c: f64) -> Scaler {
        debug_assert!(c.is_finite() && c > 0.0);
        self.factor.iter_mut().for_each(|f| *f *= c);
        self
    }

    /// Leaves every one of `n_features` features unchanged.
    pub fn identity(n_features: usize) -> Scaler {
        Scaler {
            kind: ScaleKind::None,
            shift: vec![0.0; n_features],
            factor: vec![1.0; n_features],
        }
    }

    /// Fits `kind` on `rows` (and nothing else, so held-out rows do not leak into training).
    ///
    /// With no rows there is nothing to learn and every feature passes through. A column whose
    /// statistics overflow or underflow `f64` (values beyond about 1e154 or spreads below about
    /// 1e-154) is treated as constant.
    pub fn fit(kind: ScaleKind, rows: &Rows) -> Scaler {
        let n_rows = rows.n_rows();
        if kind == ScaleKind::None || n_rows == 0 {
            return Scaler {
                kind,
                ..Scaler::identity(rows.n_features())
            };
        }
        let stats = column_stats(rows);
        let sparse = rows.is_sparse();
        let (shift, factor) = stats
            .iter()
            .map(|c| {
                let mean = c.sum / n_rows as f64;
                let std = (c.squared_deviations / n_rows as f64).sqrt();
                let constant = c.min == c.max;
                let (shift, factor) = match (kind, sparse) {
                    (_, true) if constant => (0.0, 0.0),
                    (_, false) if constant => (c.min, 0.0),
                    (ScaleKind::Standard, true) => (0.0, 1.0 / std),
                    (ScaleKind::Standard, false) => (mean, 1.0 / std),
                    (ScaleKind::MinMax, true) => (0.0, 1.0 / c.min.abs().max(c.max.abs())),
                    (ScaleKind::MinMax, false) => (c.min, 1.0 / (c.max - c.min)),
                    // Returned early above; listed so the match stays exhaustive.
                    (ScaleKind::None, _) => (0.0, 1.0),
                };
                if shift.is_finite() && factor.is_finite() {
                    (shift, factor)
                } else {
                    (0.0, 0.0)
                }
            })
            .unzip();
        Scaler {
            kind,
            shift,
            factor,
        }
    }

    pub fn kind(&self) -> ScaleKind {
        self.kind
    }

    pub fn n_features(&self) -> usize {
        self.shift.len()
    }

    /// Scales every row, keeping the storage kind. The output has [`Scaler::n_features`]
    /// columns: a narrower input counts as zeros in its missing columns, and columns past the
    /// scaler's width are dropped (a model has no weights for them).
    ///
    /// Sparse output stores only non-zero values. Implicit zeros stay implicit unless the scaler
    /// centres (one fitted on dense rows), because then they no longer scale to zero.
    pub fn transform(&self, rows: &Rows) -> Rows {
        let n = self.n_features();
        match rows {
            Rows::Dense(m) => Rows::dense(Array2::from_shape_fn((m.nrows(), n), |(i, j)| {
                let x = if j < m.ncols() { m[[i, j]] } else { 0.0 };
                scale_value(x, self.shift[j], self.factor[j])
            })),
            Rows::Sparse(m) => {
                let centres = self.centres();
                let mut dense = if centres { vec![0.0; n] } else { Vec::new() };
                let (mut indptr, mut indices, mut values) = (vec![0], Vec::new(), Vec::new());
                for i in 0..m.n_rows() {
                    let mut keep = |j: usize, v: f64| {
                        if v != 0.0 {
                            indices.push(j as u32);
                            values.push(v);
                        }
                    };
                    if centres {
                        self.transform_row_into(rows.row(i), &mut dense);
                        dense.iter().enumerate().for_each(|(j, &v)| keep(j, v));
                    } else {
                        for_each_stored(rows.row(i), |j, x| {
                            if j < n {
                                keep(j, scale_value(x, self.shift[j], self.factor[j]));
                            }
                        });
                    }
                    indptr.push(indices.len());
                }
                Rows::Sparse(
                    CsrMatrix::from_parts(n, indptr, indices, values)
                        .expect("indices come in increasing order and below n_features"),
                )
            }
        }
    }

    /// Writes the scaled row densely into `out`, without allocating. Columns are treated as in
    /// [`Scaler::transform`].
    ///
    /// # Panics
    /// If `out.len()` is not [`Scaler::n_features`] (a caller bug).
    pub fn transform_row_into(&self, row: RowRef<'_>, out: &mut [f64]) {
        assert_eq!(out.len(), self.n_features(), "output buffer length");
        let params = self.shift.iter().zip(&self.factor);
        match row {
            // A full row (every scored event): one pass the compiler can vectorise.
            RowRef::Dense(x) if x.len() == out.len() => {
                for ((o, &x), (&s, &f)) in out.iter_mut().zip(x).zip(params) {
                    *o = scale_value(x, s, f);
                }
            }
            RowRef::Dense(x) => {
                let x = x.iter().copied().chain(std::iter::repeat(0.0));
                for ((o, (&s, &f)), x) in out.iter_mut().zip(params).zip(x) {
                    *o = scale_value(x, s, f);
                }
            }
            RowRef::Sparse { indices, values } => {
                for (o, (&s, &f)) in out.iter_mut().zip(params) {
                    *o = scale_value(0.0, s, f);
                }
                for (&j, &x) in indices.iter().zip(values) {
                    let j = j as usize;
                    if let Some(o) = out.get_mut(j) {
                        *o = scale_value(x, self.shift[j], self.factor[j]);
                    }
                }
            }
        }
    }

    /// Whether some non-dropped column is shifted, so implicit zeros do not stay zero.
    fn centres(&self) -> bool {
        self.shift
            .iter()
            .zip(&self.factor)
            .any(|(&s, &f)| s != 0.0 && f != 0.0)
    }
}

/// (x − shift)·factor, finite: 0 for a dropped column (factor 0) and for NaN. Written
/// without early returns so a row's loop compiles to selects (`clamp` keeps NaN).
fn scale_value(x: f64, shift: f64, factor: f64) -> f64 {
    let v = ((x - shift) * factor).clamp(-f64::MAX, f64::MAX);
    if factor == 0.0 || v.is_nan() {
        0.0
    } else {
        v
    }
}

fn for_each_stored(row: RowRef<'_>, mut f: impl FnMut(usize, f64)) {
    match row {
        RowRef::Dense(x) => x.iter().enumerate().for_each(|(j, &v)| f(j, v)),
        RowRef::Sparse { indices, values } => indices
            .iter()
            .zip(values)
            .for_each(|(&j, &v)| f(j as usize, v)),
    }
}

/// Sums, extremes and squared deviations from the mean, in two passes for accuracy.
fn column_stats(rows: &Rows) -> Vec<ColumnStats> {
    let n_rows = rows.n_rows();
    let mut stats = vec![
        ColumnStats {
            stored: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            squared_deviations: 0.0,
        };
        rows.n_features()
    ];
    for i in 0..n_rows {
        for_each_stored(rows.row(i), |j, x| {
            let c = &mut stats[j];
            c.stored += 1;
            c.sum += x;
            c.min = c.min.min(x);
            c.max = c.max.max(x);
        });
    }
    let means: Vec<f64> = stats.iter().map(|c| c.sum / n_rows as f64).collect();
    for i in 0..n_rows {
        for_each_stored(rows.row(i), |j, x| {
            stats[j].squared_deviations += (x - means[j]).powi(2);
        });
    }
    for (c, mean) in stats.iter_mut().zip(means) {
        let implicit_zeros = n_rows - c.stored;
        if implicit_zeros > 0 {
            c.min = c.min.min(0.0);
            c.max = c.max.max(0.0);
            c.squared_deviations += implicit_zeros as f64 * mean * mean;
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    fn sparse(n_features: usize, rows: &[(&[u32], &[f64])]) -> Rows {
        let mut csr = CsrMatrix::new(n_features);
        for (indices, values) in rows {
            csr.push_row(indices, values).unwrap();
        }
        Rows::Sparse(csr)
    }

    fn dense_of(rows: &Rows, n_features: usize) -> Vec<Vec<f64>> {
        (0..rows.n_rows())
            .map(|i| {
                let mut out = vec![0.0; n_features];
                rows.row(i).write_dense(&mut out);
                out
            })
            .collect()
    }

    /// `transform_row_into` must agree with `transform`, row by row.
    fn assert_row_into_matches(scaler: &Scaler, rows: &Rows) {
        let whole = dense_of(&scaler.transform(rows), scaler.n_features());
        let mut out = vec![f64::NAN; scaler.n_features()];
        for (i, want) in whole.iter().enumerate() {
            scaler.transform_row_into(rows.row(i), &mut out);
            assert_eq!(&out, want, "row {i}");
        }
    }

    #[test]
    fn standard_on_dense_centres_and_drops_constant_columns() {
        let rows = Rows::dense(array![[1.0, 5.0], [2.0, 5.0], [3.0, 5.0], [4.0, 5.0]]);
        let scaler = Scaler::fit(ScaleKind::Standard, &rows);
        assert_eq!(scaler.kind(), ScaleKind::Standard);
        assert_eq!(scaler.n_features(), 2);
        let std = 1.25f64.sqrt();
        let got = scaler.transform(&rows);
        assert!(!got.is_sparse());
        let want: Vec<Vec<f64>> = [1.0, 2.0, 3.0, 4.0]
            .iter()
            .map(|x| vec![(x - 2.5) / std, 0.0])
            .collect();
        for (g, w) in dense_of(&got, 2).iter().zip(&want) {
            assert!((g[0] - w[0]).abs() < 1e-12, "{g:?} vs {w:?}");
            assert_eq!(g[1], 0.0);
        }
        // A new value in the constant column still maps to 0.
        let other = Rows::dense(array![[2.5, 9.0]]);
        assert_eq!(dense_of(&scaler.transform(&other), 2), [[0.0, 0.0]]);
        assert_row_into_matches(&scaler, &rows);
    }

    #[test]
    fn constant_column_of_inexact_decimals_maps_to_zero() {
        let rows = Rows::dense(array![[0.1, 1.0], [0.1, 2.0], [0.1, 4.0]]);
        for kind in [ScaleKind::Standard, ScaleKind::MinMax] {
            let scaled = Scaler::fit(kind, &rows).transform(&rows);
            assert!(dense_of(&scaled, 2).iter().all(|r| r[0] == 0.0), "{kind}");
        }
    }

    #[test]
    fn minmax_on_dense_maps_onto_unit_interval() {
        let rows = Rows::dense(array![[1.0, -2.0, 7.0], [3.0, 0.0, 7.0], [5.0, 2.0, 7.0]]);
        let scaler = Scaler::fit(ScaleKind::MinMax, &rows);
        assert_eq!(
            dense_of(&scaler.transform(&rows), 3),
            [[0.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1.0, 1.0, 0.0]]
        );
        // Fitted on these rows only: later values may fall outside [0, 1].
        let later = Rows::dense(array![[9.0, -4.0, 1.0]]);
        assert_eq!(dense_of(&scaler.transform(&later), 3), [[2.0, -0.5, 0.0]]);
        assert_row_into_matches(&scaler, &rows);
    }

    #[test]
    fn standard_on_sparse_scales_without_centring() {
        // Column 0: 2, 0, -2, 0 (mean 0, std sqrt(2)); column 1: 3, 0, 0, 0 (mean 0.75);
        // column 2 is all zeros; column 3 is 4 in every row (constant).
        let rows = sparse(
            4,
            &[
                (&[0, 1, 3], &[2.0, 3.0, 4.0]),
                (&[3], &[4.0]),
                (&[0, 3], &[-2.0, 4.0]),
                (&[3], &[4.0]),
            ],
        );
        let scaler = Scaler::fit(ScaleKind::Standard, &rows);
        let std1 = ((3.0f64 - 0.75).powi(2) + 3.0 * 0.75f64.powi(2)) / 4.0;
        let got = scaler.transform(&rows);
        assert!(got.is_sparse());
        let want = [
            [2.0 / 2f64.sqrt(), 3.0 / std1.sqrt(), 0.0, 0.0],
            [0.0; 4],
            [-2.0 / 2f64.sqrt(), 0.0, 0.0, 0.0],
            [0.0; 4],
        ];
        for (g, w) in dense_of(&got, 4).iter().zip(&want) {
            for (a, b) in g.iter().zip(w) {
                assert!((a - b).abs() < 1e-12, "{g:?} vs {w:?}");
            }
        }
        // Implicit zeros stay implicit and the constant column's entries are dropped.
        if let Rows::Sparse(m) = &got {
            assert_eq!(m.nnz(), 3);
        }
        assert_row_into_matches(&scaler, &rows);
    }

    #[test]
    fn minmax_on_sparse_divides_by_max_abs() {
        let rows = sparse(2, &[(&[0], &[-4.0]), (&[0, 1], &[2.0, 5.0]), (&[], &[])]);
        let scaler = Scaler::fit(ScaleKind::MinMax, &rows);
        let got = scaler.transform(&rows);
        assert!(got.is_sparse());
        assert_eq!(dense_of(&got, 2), [[-1.0, 0.0], [0.5, 1.0], [0.0, 0.0]]);
        assert_row_into_matches(&scaler, &rows);
    }

    #[test]
    fn dense_fitted_scaler_applies_to_sparse_rows() {
        let train = Rows::dense(array![[1.0, 10.0], [3.0, 10.0]]);
        let scaler = Scaler::fit(ScaleKind::MinMax, &train);
        let rows = sparse(2, &[(&[0], &[3.0]), (&[], &[])]);
        let got = scaler.transform(&rows);
        assert!(got.is_sparse());
        assert_eq!(dense_of(&got, 2), [[1.0, 0.0], [-0.5, 0.0]]);
        assert_row_into_matches(&scaler, &rows);
    }

    #[test]
    fn width_mismatches_pad_with_zeros_and_drop_extra_columns() {
        let scaler = Scaler::fit(
            ScaleKind::MinMax,
            &sparse(2, &[(&[0, 1], &[2.0, 4.0]), (&[], &[])]),
        );
        let wide = sparse(3, &[(&[0, 2], &[1.0, 9.0])]);
        assert_eq!(scaler.transform(&wide).n_features(), 2);
        assert_eq!(dense_of(&scaler.transform(&wide), 2), [[0.5, 0.0]]);
        assert_row_into_matches(&scaler, &wide);
        let narrow = Rows::dense(array![[4.0]]);
        assert_eq!(dense_of(&scaler.transform(&narrow), 2), [[2.0, 0.0]]);
        assert_row_into_matches(&scaler, &narrow);
    }

    #[test]
    fn identity_and_none_leave_rows_unchanged() {
        let rows = Rows::dense(array![[1.5, -2.0], [0.0, 3.0]]);
        assert_eq!(Scaler::identity(2).transform(&rows), rows);
        let none = Scaler::fit(ScaleKind::None, &rows);
        assert_eq!(none.kind(), ScaleKind::None);
        assert_eq!(none.transform(&rows), rows);
        let sparse_rows = sparse(3, &[(&[1], &[2.0])]);
        assert_eq!(Scaler::identity(3).transform(&sparse_rows), sparse_rows);
    }

    #[test]
    fn output_is_always_finite() {
        let rows = Rows::dense(array![[-1e308, 0.0], [1e308, 1e-310]]);
        for kind in [ScaleKind::Standard, ScaleKind::MinMax] {
            let scaler = Scaler::fit(kind, &rows);
            assert!(scaler.transform(&rows).all_finite(), "{kind}");
            let odd = Rows::dense(array![[f64::NAN, f64::INFINITY], [f64::MAX, -f64::MAX]]);
            assert!(scaler.transform(&odd).all_finite(), "{kind}");
        }
        let tiny = Rows::dense(array![[0.0], [1e-150]]);
        let scaler = Scaler::fit(ScaleKind::Standard, &tiny);
        let far = Rows::dense(array![[1e300]]);
        assert_eq!(dense_of(&scaler.transform(&far), 1), [[f64::MAX]]);
    }

    #[test]
    fn fitting_no_rows_passes_values_through() {
        let scaler = Scaler::fit(ScaleKind::Standard, &sparse(2, &[]));
        let rows = sparse(2, &[(&[1], &[3.0])]);
        assert_eq!(scaler.transform(&rows), rows);
    }

    #[test]
    fn scale_kind_names() {
        for (kind, name) in [
            (ScaleKind::None, "none"),
            (ScaleKind::Standard, "standard"),
            (ScaleKind::MinMax, "minmax"),
        ] {
            assert_eq!(kind.to_string(), name);
            assert_eq!(name.parse::<ScaleKind>().unwrap(), kind);
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{name}\""));
        }
        assert_eq!("MinMax".parse::<ScaleKind>().unwrap(), ScaleKind::MinMax);
        assert_eq!(
            "zscore".parse::<ScaleKind>().unwrap_err().to_string(),
            "unknown scaling \"zscore\"; expected none, standard or minmax"
        );
    }

    #[test]
    fn scaler_round_trips_and_rejects_bad_parameters() {
        let rows = Rows::dense(array![[1.0, 2.0], [3.0, 2.0]]);
        let scaler = Scaler::fit(ScaleKind::Standard, &rows);
        let json = serde_json::to_string(&scaler).unwrap();
        assert_eq!(serde_json::from_str::<Scaler>(&json).unwrap(), scaler);
        let bad = r#"{"kind":"minmax","shift":[0.0],"factor":[1.0,2.0]}"#;
        let err = serde_json::from_str::<Scaler>(bad).unwrap_err().to_string();
        assert!(err.contains("shift and factor lengths differ"), "{err}");
    }
}
