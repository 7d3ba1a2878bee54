//! Model (8) of a dataset (note B.1): features standardised over its rows, the kernel,
//! c_k = C_l on labelled rows and C_u = (l/u)·δ·C_l on unlabeled ones, C = ½(K + D)⁻¹.
//! `bench sdp`, `certify` and the daemon's audit build their instances here.

use faer::Mat;

use super::ExactError;
use crate::data::{Dataset, Label, Rows, ScaleKind, Scaler};
use crate::learn::kernel::Kernel;
use crate::learn::s3vm::sdp::relax::{gram, objective_matrix};

/// The kernels of the exact S3VM (model (8) takes any; these two are the paper's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExactKernel {
    Linear,
    /// RBF; `None`: γ = 1/d.
    Rbf(Option<f64>),
}

/// Model (8)'s settings: C_l, δ and the kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceSpec {
    /// C_l: the labelled rows' penalty.
    pub cl: f64,
    /// δ: the unlabeled rows' penalty is C_u = (l/u)·δ·C_l.
    pub cu_factor: f64,
    pub kernel: ExactKernel,
}

/// Model (8) of an instance whose hidden labels are 0: its standardised rows, kernel, Gram
/// matrix, penalties and C.
pub struct ExactInstance {
    /// The rows standardised over the instance (mean 0, population standard deviation 1).
    pub rows: Rows,
    pub kernel: Kernel,
    pub gram: Mat<f64>,
    /// c_k: C_l on labelled rows, C_u on unlabeled ones.
    pub penalties: Vec<f64>,
    /// C = ½(K + D)⁻¹.
    pub c: Mat<f64>,
    pub labelled: usize,
    pub unlabeled: usize,
    /// C_u = (l/u)·δ·C_l.
    pub cu: f64,
}

impl ExactInstance {
    /// Builds model (8) of `data`; a non-positive C_l or δ, a bad γ and an instance without
    /// labelled or unlabeled rows are [`ExactError::Param`].
    pub fn build(data: &Dataset, spec: &InstanceSpec) -> Result<ExactInstance, ExactError> {
        let bad = |m: String| Err(ExactError::Param(m));
        for (name, value) in [("C_l", spec.cl), ("δ (the C_u factor)", spec.cu_factor)] {
            if !(value.is_finite() && value > 0.0) {
                return bad(format!("{name} must be finite and > 0, got {value}"));
            }
        }
        let unlabeled = data.count(Label::Unlabeled);
        let labelled = data.len() - unlabeled;
        if unlabeled == 0 {
            return bad("every row kept its label: nothing is unlabeled".into());
        }
        if labelled == 0 {
            return bad("no row is labelled".into());
        }
        let rows = Scaler::fit(ScaleKind::Standard, &data.rows).transform(&data.rows);
        let d = rows.n_features();
        let kernel = match spec.kernel {
            ExactKernel::Linear => Kernel::Linear,
            ExactKernel::Rbf(gamma) => Kernel::Rbf {
                gamma: gamma.unwrap_or(1.0 / d.max(1) as f64),
            },
        };
        kernel
            .check()
            .map_err(|e| ExactError::Param(format!("gamma: {e}")))?;
        let cu = labelled as f64 / unlabeled as f64 * spec.cu_factor * spec.cl;
        let penalties: Vec<f64> = data
            .labels
            .iter()
            .map(|&l| if l == Label::Unlabeled { cu } else { spec.cl })
            .collect();
        let k = gram(&kernel, &rows);
        let c = objective_matrix(&k, &penalties)?;
        Ok(ExactInstance {
            rows,
            kernel,
            gram: k,
            penalties,
            c,
            labelled,
            unlabeled,
            cu,
        })
    }
}

/// A labelling that meets a balance row Σ_j x_j = ρ with every |x_j| = 1 as nearly as a count
/// can: the unlabeled points with the highest decision values `f`, r·u of them
/// (r = (1 + ρ/u)/2, eq. (10)), positive and the rest negative; labelled points keep their
/// labels. A start for the incumbent when the supervised signs are far from the balance, as
/// when the labelled points are of one class and ρ comes from a prior.
pub fn balanced_start(f: &[f64], labels: &[Label], rho: f64) -> Vec<f64> {
    let mut unlabeled: Vec<usize> = (0..labels.len())
        .filter(|&i| labels[i] == Label::Unlabeled)
        .collect();
    let u = unlabeled.len() as f64;
    let positives = if u > 0.0 {
        ((1.0 + rho / u) / 2.0 * u).round().clamp(0.0, u) as usize
    } else {
        0
    };
    unlabeled.sort_by(|&a, &b| f[b].total_cmp(&f[a]));
    let mut signs: Vec<f64> = labels.iter().map(|l| f64::from(l.code())).collect();
    for (rank, &i) in unlabeled.iter().enumerate() {
        signs[i] = if rank < positives { 1.0 } else { -1.0 };
    }
    signs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_balanced_start_labels_the_top_share_positive() {
        let labels = [
            Label::Positive,
            Label::Unlabeled,
            Label::Unlabeled,
            Label::Unlabeled,
            Label::Unlabeled,
            Label::Negative,
        ];
        let f = [9.0, 0.1, 0.4, -0.2, 0.3, -9.0];
        // ρ = u(2r − 1) with r = 1/2: two of the four unlabeled points positive.
        assert_eq!(
            balanced_start(&f, &labels, 0.0),
            [1.0, -1.0, 1.0, -1.0, 1.0, -1.0]
        );
        // r = 3/4.
        assert_eq!(
            balanced_start(&f, &labels, 2.0),
            [1.0, 1.0, 1.0, -1.0, 1.0, -1.0]
        );
        // ρ beyond ±u clamps to all one sign.
        assert_eq!(
            balanced_start(&f, &labels, -10.0),
            [1.0, -1.0, -1.0, -1.0, -1.0, -1.0]
        );
    }
}
