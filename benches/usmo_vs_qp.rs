//! USMO vs an interior-point solve (clarabel) of the same dual (6), timed in one run.
//!
//! Data: the first `NEYMAN_QP_N` rows (default 2000) of shuttle_anomaly, min-max scaled, 30 % of
//! the anomalies labelled; RBF γ = 1, λ = 1e-3, π = 0.072. Clarabel gets Q = K_UU as a dense
//! upper-triangular CSC matrix and `tol_gap_rel` 1e-8; its time excludes building K (which favours
//! clarabel). USMO runs with tol 1e-6, median of 3. Prints one JSON object with both times, the
//! speed ratio and the relative difference of the dual objectives.

#[allow(dead_code)]
#[path = "../tests/common/qp.rs"]
mod qp;

mod support;

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use ndarray::Array2;
use neyman::data::Label;
use neyman::learn::kernel::Kernel;
use neyman::learn::usmo::UsmoParams;

const PRIOR: f64 = 0.072;
const LAMBDA: f64 = 1e-3;
const GAMMA: f64 = 1.0;

fn main() {
    let n_rows: usize = std::env::var("NEYMAN_QP_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let data = support::pu_data("shuttle_anomaly.csv.gz", false, Some(n_rows));
    // [P; U] order for the reference.
    let mut order = data.indices_of(Label::Positive);
    let p = order.len();
    order.extend(data.indices_of(Label::Unlabeled));
    let ordered = data.select(&order);
    let x: Array2<f64> = ordered
        .rows
        .as_dense()
        .expect("CSV rows are dense")
        .to_owned();

    let params = {
        let mut prm = UsmoParams::new(PRIOR, LAMBDA, Kernel::Rbf { gamma: GAMMA });
        prm.tol = 1e-6;
        prm.check().expect("valid parameters")
    };
    let cancel = AtomicBool::new(false);
    let mut usmo_times = Vec::new();
    let mut usmo_dual = 0.0;
    for _ in 0..3 {
        let start = Instant::now();
        let fit = params.fit(&ordered, &cancel).expect("fit");
        usmo_times.push(start.elapsed().as_secs_f64());
        usmo_dual = fit.report.dual_objective;
    }
    usmo_times.sort_by(f64::total_cmp);
    let usmo_seconds = usmo_times[1];

    let k = qp::gram_rbf(&x, GAMMA);
    let start = Instant::now();
    let reference = qp::solve_usmo_dual_with(&k, p, LAMBDA, PRIOR, qp::settings_with_tol(1e-8));
    let clarabel_seconds = start.elapsed().as_secs_f64();

    println!(
        "{}",
        serde_json::json!({
            "n_rows": n_rows,
            "n_positive": p,
            "n_unlabeled": n_rows - p,
            "usmo_seconds_median_of_3": usmo_seconds,
            "clarabel_seconds": clarabel_seconds,
            "clarabel_iterations": reference.solver_iterations,
            "speedup": clarabel_seconds / usmo_seconds,
            "usmo_dual_objective": usmo_dual,
            "clarabel_dual_objective": reference.dual_objective,
            "dual_relative_difference":
                (usmo_dual - reference.dual_objective).abs() / reference.dual_objective.abs(),
        })
    );
}
