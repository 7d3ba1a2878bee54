//! Self-checks of the independent reference QP solver in `tests/common/qp.rs`.
//! These exercise only the reference (clarabel) solve, never the production solver.

mod common;

use common::*;
use ndarray::Array2;

fn gram(x: &Array2<f64>, rbf: bool) -> Array2<f64> {
    if rbf {
        gram_rbf(x, 0.5)
    } else {
        gram_linear(x)
    }
}

/// Feasibility, Lemma 1, strong duality and the bias interval for one problem.
fn check_solution(k: &Array2<f64>, p: usize, lambda: f64, pi: f64) -> QpSolution {
    let sol = solve_usmo_dual(k, p, lambda, pi);
    let n = sol.sigma.len();
    let (c1, c2) = (sol.c1, sol.c2);
    let tag = format!("p={p} n={n} lambda={lambda} pi={pi}");

    // feasibility
    let sum: f64 = sol.sigma.iter().sum();
    let target = c1 * p as f64;
    assert!(
        (sum - target).abs() <= 1e-8 * target,
        "{tag}: 1'sigma={sum} vs {target}"
    );
    for u in 0..n {
        let (s, d) = (sol.sigma[u], sol.delta[u]);
        let t = 1e-8 * c2;
        assert!(
            d / 2.0 <= s + t && s <= c2 - d / 2.0 + t,
            "{tag}: u={u} s={s} d={d}"
        );
        assert!(d >= -t && d <= c2 + t, "{tag}: u={u} d={d}");
        // Lemma 1
        let lemma = (2.0 * s).min(2.0 * c2 - 2.0 * s);
        assert!(
            (d - lemma).abs() <= 1e-6 * c2,
            "{tag}: u={u} delta={d} vs {lemma}"
        );
    }

    // strong duality
    let f = sol.dual_objective;
    let res = duality_residual(&sol);
    assert!(
        res.abs() <= 1e-6 * f.abs().max(1.0),
        "{tag}: duality residual {res} (F={f})"
    );

    // reduced dual agrees with F(sigma, delta)
    let fr = reduced_dual_objective(k, p, c1, c2, &sol.sigma);
    assert!(
        (fr - f).abs() <= 1e-7 * f.abs().max(1.0),
        "{tag}: reduced {fr} vs {f}"
    );

    // bias interval (nearly) non-empty, equality multiplier inside it
    let (lo, hi) = sol.bias_interval;
    let slack = 1e-5 * (1.0 + lo.abs().max(hi.abs()));
    assert!(lo <= hi + slack, "{tag}: empty bias interval [{lo}, {hi}]");
    let b2 = sol.bias_from_equality_dual;
    assert!(
        b2 >= lo - slack && b2 <= hi + slack,
        "{tag}: beta_eq={b2} not in [{lo}, {hi}]"
    );

    // the reported bias minimises the primal in beta (P is piecewise linear in beta with
    // breakpoints at f_u = -1 and f_u = +1, so scanning them finds the minimum)
    let g = bias_free_values(k, p, c1, &sol.sigma);
    let best = g
        .iter()
        .flat_map(|gu| [-1.0 - gu, 1.0 - gu])
        .map(|b| primal_objective(k, p, c1, c2, &sol.sigma, b))
        .fold(f64::INFINITY, f64::min);
    let pv = sol.primal_objective;
    assert!(
        pv <= best + 1e-7 * pv.abs().max(1.0),
        "{tag}: P(bias)={pv} > min_beta P={best}"
    );
    sol
}

#[test]
fn reference_qp_feasible_lemma1_strong_duality() {
    let mut seed = 1u64;
    for &rbf in &[false, true] {
        for &lambda in &[1e-3, 1e-2, 1e-1] {
            for &pi in &[0.2, 0.5, 0.8] {
                let (p, n) = (5 + (seed as usize * 7) % 11, 20 + (seed as usize * 13) % 41);
                let x = random_pu_problem(seed, p, n, 3);
                check_solution(&gram(&x, rbf), p, lambda, pi);
                seed += 1;
            }
        }
    }
}

#[test]
fn reference_qp_matches_brute_force_n3() {
    // n = 3: after the equality, sigma lives in a 2-D polygon. Minimise the reduced dual
    // F(sigma) = 1/2 s'Qs - c1 q's + sum|s_u - c2/2| - n c2/2 by a zooming grid search.
    for (seed, &lambda, &pi) in [
        (11u64, 0.1, 0.5),
        (12, 0.05, 0.3),
        (13, 0.5, 0.7),
        (14, 0.02, 0.6),
    ]
    .iter()
    .map(|(s, l, p)| (*s, l, p))
    {
        let p = 3;
        let x = random_pu_problem(seed, p, 3, 2);
        let k = gram_rbf(&x, 0.7);
        let sol = check_solution(&k, p, lambda, pi);
        let (c1, c2) = (sol.c1, sol.c2);
        let a = c1 * p as f64;
        let f = |s1: f64, s2: f64| -> Option<f64> {
            let s3 = a - s1 - s2;
            if s1 < 0.0 || s1 > c2 || s2 < 0.0 || s2 > c2 || s3 < 0.0 || s3 > c2 {
                return None;
            }
            Some(reduced_dual_objective(&k, p, c1, c2, &[s1, s2, s3]))
        };
        let m = 400usize;
        let (mut lo1, mut hi1, mut lo2, mut hi2) = (0.0, c2, 0.0, c2);
        let mut best = (f64::INFINITY, 0.0, 0.0);
        for _zoom in 0..8 {
            let (h1, h2) = ((hi1 - lo1) / m as f64, (hi2 - lo2) / m as f64);
            for i in 0..=m {
                for j in 0..=m {
                    let (s1, s2) = (lo1 + i as f64 * h1, lo2 + j as f64 * h2);
                    if let Some(v) = f(s1, s2) {
                        if v < best.0 {
                            best = (v, s1, s2);
                        }
                    }
                }
            }
            let w = 10.0;
            lo1 = (best.1 - w * h1).max(0.0);
            hi1 = (best.1 + w * h1).min(c2);
            lo2 = (best.2 - w * h2).max(0.0);
            hi2 = (best.2 + w * h2).min(c2);
        }
        let fq = sol.dual_objective;
        // A feasible grid point can never beat the true optimum by more than round-off ...
        assert!(
            fq <= best.0 + 1e-9 * fq.abs().max(1.0),
            "seed {seed}: QP {fq} > grid {}",
            best.0
        );
        // ... and the zoomed grid gets within a tiny distance of it.
        assert!(
            (best.0 - fq).abs() <= 1e-7 * fq.abs().max(1.0),
            "seed {seed}: grid {} vs QP {fq}",
            best.0
        );
    }
}

#[test]
fn reference_decision_values_consistent_with_bias_free_values() {
    let (p, n) = (6, 25);
    let x = random_pu_problem(99, p, n, 4);
    let k = gram_rbf(&x, 0.3);
    let sol = check_solution(&k, p, 1e-2, 0.4);
    // Decision values on the training U rows: f_u = G_u + beta.
    let k_u = k.slice(ndarray::s![p.., ..]).to_owned();
    let f = decision_values(&sol, &k_u);
    let g = bias_free_values(&k, p, sol.c1, &sol.sigma);
    for u in 0..n {
        assert!((f[u] - (g[u] + sol.bias)).abs() <= 1e-9 * (1.0 + f[u].abs()));
    }
    // cross_gram_rbf on the training data reproduces the Gram matrix.
    let kc = cross_gram_rbf(&x, &x, 0.3);
    assert!((&kc - &k).iter().all(|v| v.abs() <= 1e-15));
    // Deterministic generator.
    assert_eq!(random_pu_problem(99, p, n, 4), x);
}
