//! The exact S3VM's instance protocol, as `bench sdp` and `certify` build it
//! (`cli::sdp::exact_instance`): `rows` rows of a data file shuffled with `seed`, all but
//! `labelled` labels hidden (the cuts3vm protocol), features standardised, model (8) with
//! C_l = `cl` and C_u = (l/u)·C_l, and its root relaxation (20).

use faer::Mat;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use neyman::data::{read, Label, LabelledRows, ReadOptions, ScaleKind, Scaler};
use neyman::learn::kernel::Kernel;
use neyman::learn::s3vm::sdp::relax::{gram, objective_matrix, Relaxation};

pub struct ExactInstance {
    /// The root relaxation (20), with the balance row when asked for.
    pub root: Relaxation,
    /// The kernel's Gram matrix of the standardised rows.
    pub gram: Mat<f64>,
    /// c_k: C_l on labelled rows, C_u on the others.
    pub penalties: Vec<f64>,
    /// The labels as the instance has them (hidden ones `Unlabeled`).
    pub labels: Vec<Label>,
    /// The true labels of every row.
    pub truth: Vec<Label>,
}

/// `rows` rows of `data/<file>`; see the module docs.
pub fn exact_instance(
    file: &str,
    rows: usize,
    labelled: usize,
    kernel: Kernel,
    cl: f64,
    seed: u64,
    balance: bool,
) -> ExactInstance {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(file);
    let data = read(&path, &ReadOptions::default()).expect("read data");
    let mut order: Vec<usize> = (0..data.len()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let mut instance = data.select(&order[..rows]);
    let truth = instance
        .hide_labels(LabelledRows::Count(labelled), seed)
        .expect("hide labels");
    let scaled = Scaler::fit(ScaleKind::Standard, &instance.rows).transform(&instance.rows);
    let l = instance.len() - instance.count(Label::Unlabeled);
    let cu = l as f64 / (rows - l) as f64 * cl;
    let penalties: Vec<f64> = instance
        .labels
        .iter()
        .map(|&lab| if lab == Label::Unlabeled { cu } else { cl })
        .collect();
    let gram = gram(&kernel, &scaled);
    let c = objective_matrix(&gram, &penalties).expect("C");
    let root = Relaxation::for_labels(c, &instance.labels, balance).expect("relaxation");
    ExactInstance {
        root,
        gram,
        penalties,
        labels: instance.labels,
        truth,
    }
}
