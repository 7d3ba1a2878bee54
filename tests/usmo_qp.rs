//! USMO against an independent interior-point solve (clarabel) of the same dual (6), plus
//! USMO's own KKT and duality checks, on small linear and RBF problems.

mod common;

use std::sync::atomic::AtomicBool;

use common::{
    cross_gram_linear, cross_gram_rbf, decision_values, gram_linear, gram_rbf, random_pu_problem,
    solve_usmo_dual,
};
use ndarray::Array2;
use neyman::data::{Dataset, Label, Rows};
use neyman::learn::kernel::Kernel;
use neyman::learn::usmo::{UsmoModel, UsmoParams};

fn dataset(x: &Array2<f64>, p: usize) -> Dataset {
    Dataset {
        rows: Rows::dense(x.clone()),
        labels: (0..x.nrows())
            .map(|i| {
                if i < p {
                    Label::Positive
                } else {
                    Label::Unlabeled
                }
            })
            .collect(),
        ids: (0..x.nrows()).map(|i| format!("row{i}")).collect(),
    }
}

fn fit(x: &Array2<f64>, p: usize, prior: f64, lambda: f64, kernel: Kernel) -> UsmoModel {
    let mut params = UsmoParams::new(prior, lambda, kernel);
    params.tol = 1e-7;
    params
        .check()
        .expect("valid parameters")
        .fit(&dataset(x, p), &AtomicBool::new(false))
        .expect("fit")
}

/// One comparison: dual objective to 1e-6 relative, primal objective likewise, duality residual
/// ≈ 0, our bias inside the reference's feasible bias interval, decision values on fresh points.
/// Checks USMO against the reference on one problem; returns the free-set Newton steps taken.
fn compare(seed: u64, p: usize, n: usize, prior: f64, lambda: f64, rbf_gamma: Option<f64>) -> u64 {
    let x = random_pu_problem(seed, p, n, 4);
    let test = random_pu_problem(seed + 1000, 5, 25, 4);
    let (k, k_test, kernel) = match rbf_gamma {
        Some(g) => (
            gram_rbf(&x, g),
            cross_gram_rbf(&test, &x, g),
            Kernel::Rbf { gamma: g },
        ),
        None => (
            gram_linear(&x),
            cross_gram_linear(&test, &x),
            Kernel::Linear,
        ),
    };
    let reference = solve_usmo_dual(&k, p, lambda, prior);
    let ours = fit(&x, p, prior, lambda, kernel);
    let r = &ours.report;
    let label = format!("seed {seed} p {p} n {n} π {prior} λ {lambda} γ {rbf_gamma:?}");
    assert!(r.converged, "{label}: not converged: {r:?}");
    let scale = reference.dual_objective.abs().max(1.0);
    assert!(
        (r.dual_objective - reference.dual_objective).abs() <= 1e-6 * scale,
        "{label}: dual {} vs reference {}",
        r.dual_objective,
        reference.dual_objective
    );
    assert!(
        (r.primal_objective - reference.primal_objective).abs()
            <= 1e-6 * reference.primal_objective.abs().max(1.0),
        "{label}: primal {} vs reference {}",
        r.primal_objective,
        reference.primal_objective
    );
    assert!(
        r.duality_residual.abs() <= 1e-6 * scale,
        "{label}: residual"
    );
    assert!(
        r.max_violation <= 1e-7,
        "{label}: KKT violation {}",
        r.max_violation
    );
    let (lo, hi) = reference.bias_interval;
    let slack = 1e-5 * (1.0 + lo.abs().max(hi.abs()));
    assert!(
        r.bias >= lo - slack && r.bias <= hi + slack,
        "{label}: bias {} outside [{lo}, {hi}]",
        r.bias
    );
    // When the bias interval is wide the decision values differ by the bias choice only;
    // compare the bias-free part, and the full values when both pick the midpoint.
    let want = decision_values(&reference, &k_test);
    let mut got = vec![0.0; test.nrows()];
    ours.expansion
        .decision_batch(&Rows::dense(test.clone()), &mut got);
    for (g, w) in got.iter().zip(&want) {
        let (g0, w0) = (g - r.bias, w - reference.bias);
        assert!(
            (g0 - w0).abs() <= 1e-4 * w0.abs().max(1.0),
            "{label}: f − β {g0} vs reference {w0}"
        );
    }
    // Feasibility of σ.
    let c1 = prior / (2.0 * lambda * p as f64);
    let c2 = 1.0 / (2.0 * lambda * n as f64);
    let sum: f64 = ours.state.unlabeled.iter().map(|u| u.sigma).sum();
    assert!(
        (sum - c1 * p as f64).abs() <= 1e-9 * c1 * p as f64,
        "{label}: 1'σ"
    );
    assert!(ours
        .state
        .unlabeled
        .iter()
        .all(|u| (0.0..=c2).contains(&u.sigma)));
    r.newton_steps
}

#[test]
fn linear_kernel_matches_the_interior_point_solution() {
    let mut seed = 1;
    let mut newton_steps = 0;
    for lambda in [1e-3, 1e-2, 1e-1] {
        for prior in [0.2, 0.5, 0.8] {
            newton_steps += compare(seed, 8, 40, prior, lambda, None);
            seed += 1;
        }
    }
    assert!(newton_steps > 0, "the free-set Newton steps are covered");
}

#[test]
fn rbf_kernel_matches_the_interior_point_solution() {
    let mut seed = 100;
    let mut newton_steps = 0;
    for lambda in [1e-3, 1e-2, 1e-1] {
        for prior in [0.2, 0.5, 0.8] {
            for gamma in [0.1, 1.0] {
                newton_steps += compare(seed, 10, 50, prior, lambda, Some(gamma));
                seed += 1;
            }
        }
    }
    assert!(newton_steps > 0, "the free-set Newton steps are covered");
}

#[test]
fn single_positive_and_extreme_priors_match() {
    compare(7, 1, 30, 0.5, 1e-2, Some(0.5));
    compare(8, 6, 30, 0.02, 1e-2, Some(0.5));
    compare(9, 6, 30, 0.98, 1e-2, None);
}
