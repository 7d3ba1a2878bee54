//! neyman's own SDP engine (`learn::s3vm::sdp`) against CSDP on relaxation (20) of the exact
//! S3VM, built from the repository's data and from random positive definite C: the same
//! objective to 1e-6 relative, a feasible Y, a dual slack Z ⪰ 0 and small ⟨Y, Z⟩; the ideal
//! kernel's tight root (note B.4.11); and the safe lower bound (note B.4.5) below the optimum
//! and below a feasible labelling's objective, for exact, perturbed and early-stopped duals.
//!
//! CSDP is the Debian package coinor-csdp (scripts/test.sh installs it); without it the tests
//! that need it fail and say so.

mod common;

use common::exact::exact_instance;
use faer::Mat;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use neyman::cli::csdp;
use neyman::data::{Label, Rows};
use neyman::learn::kernel::Kernel;
use neyman::learn::s3vm::sdp::ipm::{SdpParams, SdpSolution, SdpStatus};
use neyman::learn::s3vm::sdp::relax::{
    gram, objective_matrix, Relaxation, RelaxedSdp, RltCut, RltKind, RowKind, RowRule,
};
use neyman::learn::s3vm::sdp::SdpProblem;

fn solve(problem: &SdpProblem) -> SdpSolution {
    SdpParams::default()
        .check()
        .expect("default params")
        .solve(problem)
}

fn csdp_solve(problem: &SdpProblem) -> csdp::CsdpSolution {
    csdp::solve(problem, "csdp").unwrap_or_else(|e| {
        panic!(
            "{e}\n(these tests need CSDP: scripts/test.sh installs the Debian package coinor-csdp)"
        )
    })
}

fn min_eigenvalue(m: &Mat<f64>) -> f64 {
    m.self_adjoint_eigenvalues(faer::Side::Lower)
        .expect("eigenvalues")
        .into_iter()
        .fold(f64::INFINITY, f64::min)
}

fn frobenius(m: &Mat<f64>) -> f64 {
    let mut s = 0.0;
    for j in 0..m.ncols() {
        for i in 0..m.nrows() {
            s += m[(i, j)] * m[(i, j)];
        }
    }
    s.sqrt()
}

fn dot(a: &Mat<f64>, b: &Mat<f64>) -> f64 {
    let mut s = 0.0;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            s += a[(i, j)] * b[(i, j)];
        }
    }
    s
}

/// The instance protocol of `bench sdp` (tests/common/exact.rs) with the balance row:
/// the root relaxation and the true labels.
fn data_instance(
    file: &str,
    rows: usize,
    labelled: usize,
    kernel: Kernel,
    cl: f64,
    seed: u64,
) -> (Relaxation, Vec<Label>) {
    let instance = exact_instance(file, rows, labelled, kernel, cl, seed, true);
    (instance.root, instance.truth)
}

/// Checks the own engine's solution of `relaxed` against CSDP's and on its own: the objective
/// within 1e-6 relative, Y feasible and ⪰ 0, Z = C̃ − Σ y_k A_k ⪰ 0 up to 1e-7 of the problem's
/// scale, ⟨Y, Z⟩ small. Returns the own solution.
fn check_against_csdp(relaxed: &RelaxedSdp, what: &str) -> SdpSolution {
    let problem = &relaxed.problem;
    let own = solve(problem);
    let reference = csdp_solve(problem);
    assert_eq!(own.status, SdpStatus::Optimal, "{what}: {own:?}");
    assert_eq!(reference.code, 0, "{what}: csdp code {}", reference.code);
    let relative = (own.primal_objective - reference.primal_objective).abs()
        / reference.primal_objective.abs().max(1e-12);
    assert!(
        relative <= 1e-6,
        "{what}: own {} vs csdp {} (relative {relative:e})",
        own.primal_objective,
        reference.primal_objective
    );
    let dual_relative = (own.dual_objective - reference.dual_objective).abs()
        / reference.dual_objective.abs().max(1e-12);
    assert!(dual_relative <= 1e-6, "{what}: dual {dual_relative:e}");
    let violation = problem.max_row_violation(&own.primal);
    assert!(
        violation <= 1e-7,
        "{what}: a row is violated by {violation:e}"
    );
    let scale = 1.0 + frobenius(problem.objective());
    let y_min = min_eigenvalue(&own.primal);
    assert!(y_min >= -1e-9 * scale, "{what}: λ_min(Y) = {y_min:e}");
    let z = problem.dual_slack(&own.duals);
    let z_min = min_eigenvalue(&z);
    assert!(z_min >= -1e-7 * scale, "{what}: λ_min(Z) = {z_min:e}");
    let complementarity = dot(&own.primal, &z);
    assert!(
        complementarity.abs() <= 1e-6 * (1.0 + own.primal_objective.abs()),
        "{what}: ⟨Y, Z⟩ = {complementarity:e}"
    );
    // The multipliers have the signs of their rows (y ≥ 0 on ≥ rows, ≤ 0 on ≤ rows).
    assert_eq!(relaxed.kinds.len(), problem.constraints().len());
    for (kind, y) in relaxed.kinds.iter().zip(&own.duals) {
        let signed = match kind {
            RowKind::Lower(_) | RowKind::DiagLower(_) | RowKind::Cut(_) => *y,
            RowKind::Upper(_) | RowKind::DiagUpper(_) => -y,
            RowKind::Corner | RowKind::Balance => continue,
        };
        assert!(
            signed >= -1e-8 * scale,
            "{what}: {kind:?} has multiplier {y:e}"
        );
    }
    // The solution file's reading: CSDP's Z is C̃ − Σ y_k A_k at the multipliers read back
    // (their sign flipped), and its Y satisfies the rows.
    let z_csdp = problem.dual_slack(&reference.duals);
    let z_difference = frobenius(&(&z_csdp - &reference.dual_slack));
    assert!(
        z_difference <= 1e-6 * scale,
        "{what}: CSDP's Z is off by {z_difference:e}"
    );
    let csdp_violation = problem.max_row_violation(&reference.primal);
    assert!(
        csdp_violation <= 1e-6,
        "{what}: CSDP's Y violates a row by {csdp_violation:e}"
    );
    // The safe bound at the engine's multipliers lies below CSDP's objective and loses little.
    let bound = relaxed
        .safe_lower_bound(&own.duals, Some(own.primal_objective * 2.0 + 1.0))
        .expect("safe bound");
    assert!(
        bound.value <= reference.primal_objective * (1.0 + 1e-9),
        "{what}: safe bound {} above csdp's {}",
        bound.value,
        reference.primal_objective
    );
    assert!(
        bound.value >= own.primal_objective - 1e-6 * (1.0 + own.primal_objective.abs()),
        "{what}: safe bound {} loses more than 1e-6 against {}",
        bound.value,
        own.primal_objective
    );
    own
}

#[test]
fn the_engine_matches_csdp_on_sonar_and_ionosphere_roots() {
    let cases = [
        ("sonar.csv", 40, 8, Kernel::Linear, 1.0, 1),
        (
            "sonar.csv",
            60,
            12,
            Kernel::Rbf { gamma: 1.0 / 60.0 },
            10.0,
            2,
        ),
        (
            "ionosphere.csv",
            50,
            10,
            Kernel::Rbf { gamma: 1.0 / 34.0 },
            1.0,
            3,
        ),
        ("ionosphere.csv", 80, 16, Kernel::Linear, 0.1, 4),
        ("heart_statlog.csv", 40, 8, Kernel::Linear, 3.16, 5),
    ];
    for (file, rows, labelled, kernel, cl, seed) in cases {
        let (relaxation, truth) = data_instance(file, rows, labelled, kernel, cl, seed);
        let relaxed = relaxation.build().expect("build");
        let what = format!("{file} rows {rows} {kernel:?} C_l {cl}");
        // The root's rows (small rule, unbounded boxes): the corner, the balance row, one box
        // row per labelled point and X_jj ≥ 1 per unlabeled point.
        let count = |f: fn(&RowKind) -> bool| relaxed.kinds.iter().filter(|k| f(k)).count();
        assert_eq!(
            count(|k| matches!(k, RowKind::Corner | RowKind::Balance)),
            2
        );
        assert_eq!(
            count(|k| matches!(k, RowKind::Lower(_) | RowKind::Upper(_))),
            labelled
        );
        assert_eq!(
            count(|k| matches!(k, RowKind::DiagLower(_))),
            rows - labelled
        );
        assert_eq!(relaxed.kinds.len(), rows + 2);
        let own = check_against_csdp(&relaxed, &what);
        // At the root the full row rule adds only implied rows: the same value.
        let full = Relaxation {
            rows: RowRule::Full,
            ..relaxation.clone()
        }
        .build()
        .expect("build");
        let full_value = solve(&full.problem).primal_objective;
        assert!(
            (full_value - own.primal_objective).abs() <= 1e-7 * own.primal_objective,
            "{what}: full rows {full_value} vs small rows {}",
            own.primal_objective
        );
        // The true labelling's point is feasible for (20): the root bound is below it.
        let signs: Vec<f64> = truth.iter().map(|l| f64::from(l.code())).collect();
        if let Some(x) = relaxation.labelling_point(&signs) {
            let upper = relaxed.rank_one_objective(&x).expect("feasible");
            assert!(own.primal_objective <= upper * (1.0 + 1e-8), "{what}");
        }
    }
}

/// A random positive definite C (BBᵀ/n + 0.05·I) with finite boxes, mixed row rules
/// and RLT cuts of every type: rows of every sense, diagonal upper bounds and cuts go through
/// both solvers.
fn random_node(n: usize, seed: u64, rule: RowRule, cuts: usize) -> Relaxation {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let b = Mat::from_fn(n, n, |_, _| rng.gen_range(-1.0..1.0));
    let c = Mat::from_fn(n, n, |i, j| {
        let bbt: f64 = (0..n).map(|k| b[(i, k)] * b[(j, k)]).sum();
        bbt / n as f64 + if i == j { 0.05 } else { 0.0 }
    });
    let (mut lower, mut upper) = (Vec::new(), Vec::new());
    for _ in 0..n {
        match rng.gen_range(0..3) {
            0 => {
                lower.push(1.0);
                upper.push(rng.gen_range(1.5..3.0));
            }
            1 => {
                lower.push(-rng.gen_range(1.5..3.0));
                upper.push(-1.0);
            }
            _ => {
                lower.push(-rng.gen_range(1.5..3.0));
                upper.push(rng.gen_range(1.5..3.0));
            }
        }
    }
    let unlabeled: Vec<usize> = (0..n)
        .filter(|&i| lower[i] < 0.0 && upper[i] > 0.0)
        .collect();
    let mut relaxation = Relaxation::new(c, lower, upper);
    relaxation.rows = rule;
    if !unlabeled.is_empty() {
        relaxation.balance = Some(neyman::learn::s3vm::sdp::relax::Balance {
            rho: rng.gen_range(-0.5..0.5) * unlabeled.len() as f64,
            unlabeled,
        });
    }
    let kinds = [RltKind::T1, RltKind::T2, RltKind::T3, RltKind::T4];
    for k in 0..cuts {
        let i = rng.gen_range(0..n);
        let j = (i + 1 + rng.gen_range(0..n - 1)) % n;
        relaxation.cuts.push(RltCut {
            i,
            j,
            kind: kinds[k % 4],
        });
    }
    relaxation
}

#[test]
fn the_engine_matches_csdp_on_random_nodes_with_cuts() {
    for (seed, n, rule, cuts) in [
        (1, 12, RowRule::Small, 10),
        (2, 20, RowRule::Full, 30),
        (3, 30, RowRule::Small, 60),
        (4, 25, RowRule::Full, 0),
    ] {
        let relaxation = random_node(n, seed, rule, cuts);
        let relaxed = relaxation.build().expect("build");
        let what = format!("random node seed {seed} n {n} {rule:?} {cuts} cuts");
        let own = check_against_csdp(&relaxed, &what);
        // More rows, a bound at least as high.
        if rule == RowRule::Small {
            let full = Relaxation {
                rows: RowRule::Full,
                ..relaxation.clone()
            }
            .build()
            .expect("build");
            let full_value = solve(&full.problem).primal_objective;
            assert!(full_value >= own.primal_objective * (1.0 - 1e-7), "{what}");
        }
        // Finite boxes: T = 1 + Σ ū_i bounds trace(Y) without any upper bound.
        let bound = relaxed
            .safe_lower_bound(&own.duals, None)
            .expect("safe bound");
        assert!(bound.trace_bound.is_finite());
        // ≤ the optimum; the engine's objective is within its stopping gap of it.
        let slack =
            SdpParams::DEFAULT_TOL * (1.0 + own.primal_objective.abs() + own.dual_objective.abs());
        assert!(
            bound.value <= own.primal_objective + slack,
            "{what}: {} vs {}",
            bound.value,
            own.primal_objective
        );
    }
}

/// Note B.4.11: with the ideal kernel K = ȳȳᵀ and C_l = C_u, relaxation (20) is tight: its
/// value is QP (24)'s at the true labels. With as many positives as negatives among both the
/// labelled and the unlabeled rows, ρ = 0 = Σ_j ȳ_j, x = ȳ satisfies (11), and x = ȳ solves
/// QP (24): in z = ȳ∘x it is min ‖z‖² − (1ᵀz)²/(d + n) over z ≥ 1 (times 1/(2d), d = 1/(2c)),
/// whose gradient at z = 1 is positive.
#[test]
fn the_ideal_kernel_gives_a_tight_root() {
    for (n, c) in [(24usize, 1.0), (40, 0.3), (60, 5.0)] {
        let truth: Vec<f64> = (0..n)
            .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        let k = Mat::from_fn(n, n, |i, j| truth[i] * truth[j]);
        let c_mat = objective_matrix(&k, &vec![c; n]).expect("C");
        let labels: Vec<Label> = (0..n)
            .map(|i| match (i < 4, truth[i] > 0.0) {
                (false, _) => Label::Unlabeled,
                (true, true) => Label::Positive,
                (true, false) => Label::Negative,
            })
            .collect();
        let relaxation = Relaxation::for_labels(c_mat.clone(), &labels, true).expect("relax");
        assert_eq!(relaxation.balance.as_ref().map(|b| b.rho), Some(0.0));
        let relaxed = relaxation.build().expect("build");
        let own = check_against_csdp(&relaxed, &format!("ideal kernel n {n} c {c}"));
        let qp24: f64 = (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| truth[i] * c_mat[(i, j)] * truth[j])
                    .sum::<f64>()
            })
            .sum();
        let d = 0.5 / c;
        assert!(
            (qp24 - n as f64 / (2.0 * (d + n as f64))).abs() <= 1e-12 * qp24,
            "closed form"
        );
        let bound = relaxed
            .safe_lower_bound(&own.duals, Some(qp24))
            .expect("safe bound");
        for (name, value) in [
            ("objective", own.primal_objective),
            ("safe bound", bound.value),
        ] {
            assert!(
                (value - qp24).abs() <= 1e-6 * qp24,
                "n {n}: {name} {value} vs QP (24) {qp24}"
            );
        }
        // The relaxation's x recovers the labels.
        for (i, label) in truth.iter().enumerate() {
            assert!(own.primal[(i, n)] * label > 0.99, "point {i}");
        }
    }
}

/// Small random S3VM instances: features, labels, a labelled subset with both classes.
fn small_instance(seed: u64, n: usize, rbf: bool, cl: f64) -> (Relaxation, Vec<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let d = 3;
    let truth: Vec<f64> = (0..n)
        .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
        .collect();
    let values: Vec<f64> = (0..n * d)
        .map(|k| truth[k / d] * 0.7 + rng.gen_range(-1.0..1.0))
        .collect();
    let rows = Rows::Dense(ndarray::Array2::from_shape_vec((n, d), values).expect("shape"));
    let kernel = if rbf {
        Kernel::Rbf {
            gamma: 1.0 / d as f64,
        }
    } else {
        Kernel::Linear
    };
    let labelled = 2 + rng.gen_range(0..n / 3);
    let labels: Vec<Label> = (0..n)
        .map(|i| match (i < labelled, truth[i] > 0.0) {
            (false, _) => Label::Unlabeled,
            (true, true) => Label::Positive,
            (true, false) => Label::Negative,
        })
        .collect();
    let cu = labelled as f64 / (n - labelled) as f64 * cl;
    let penalties: Vec<f64> = labels
        .iter()
        .map(|&l| if l == Label::Unlabeled { cu } else { cl })
        .collect();
    let c = objective_matrix(&gram(&kernel, &rows), &penalties).expect("C");
    (
        Relaxation::for_labels(c, &labels, true).expect("relaxation"),
        truth,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The safe bound is below the SDP optimum and below the true labelling's feasible point,
    /// for the engine's duals, for perturbed duals and for a solve stopped after a few
    /// iterations.
    #[test]
    fn the_safe_bound_is_never_above_the_optimum(
        seed in 0u64..10_000,
        n in 5usize..14,
        rbf in any::<bool>(),
        cl in 0.1f64..10.0,
        noise in prop::sample::select(vec![1e-8, 1e-5, 1e-3, 1e-1]),
        early in 1usize..6,
    ) {
        let (relaxation, truth) = small_instance(seed, n, rbf, cl);
        let relaxed = relaxation.build().expect("build");
        let x = relaxation.labelling_point(&truth).expect("both signs among the unlabeled");
        let balance = relaxation.balance.as_ref().expect("balance");
        prop_assert!((balance.unlabeled.iter().map(|&j| x[j]).sum::<f64>() - balance.rho).abs() < 1e-9);
        prop_assert!(x.iter().all(|v| v.abs() >= 1.0 - 1e-12));
        let upper = relaxed.rank_one_objective(&x).expect("the labelling's point is feasible");
        let own = solve(&relaxed.problem);
        prop_assert_eq!(own.status, SdpStatus::Optimal);
        let optimum = own.primal_objective;
        // Where (20) is tight the optimum is `upper` itself, and the engine's primal objective
        // may sit above it by its gap, 1e-8·(1 + |pobj| + |dobj|); its dual objective not.
        prop_assert!(optimum <= upper + 3e-8 * (1.0 + optimum), "optimum {} above {}", optimum, upper);
        prop_assert!(own.dual_objective <= upper + 1e-10 * (1.0 + upper), "dual {} above {}", own.dual_objective, upper);
        // The primal objective of an iterate within 1e-8 of feasibility may be below the exact
        // optimum by about that much.
        let slack = 1e-8 * (1.0 + optimum.abs());
        let exact = relaxed.safe_lower_bound(&own.duals, Some(upper)).expect("bound");
        prop_assert!(exact.value <= optimum + slack, "{} > {}", exact.value, optimum);
        prop_assert!(exact.value >= optimum - 1e-6 * (1.0 + optimum), "lost {}", optimum - exact.value);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        let perturbed: Vec<f64> = own
            .duals
            .iter()
            .map(|y| y + noise * (1.0 + y.abs()) * rng.gen_range(-1.0..1.0))
            .collect();
        let bound = relaxed.safe_lower_bound(&perturbed, Some(upper)).expect("bound");
        prop_assert!(bound.value <= optimum + slack, "perturbed {noise}: {} > {}", bound.value, optimum);
        prop_assert!(bound.value <= upper);
        let stopped = SdpParams { max_iterations: early, ..SdpParams::default() }
            .check()
            .expect("params")
            .solve(&relaxed.problem);
        prop_assert_eq!(stopped.status, SdpStatus::MaxIterations);
        let bound = relaxed.safe_lower_bound(&stopped.duals, Some(upper)).expect("bound");
        prop_assert!(bound.value <= optimum + slack, "after {early} iterations: {} > {}", bound.value, optimum);
        // A solve interrupted by its caller before step `early` + 1 ends at that same iterate.
        let asked = std::cell::Cell::new(0usize);
        let interrupted = SdpParams::default().check().expect("params").solve_until(
            &relaxed.problem,
            &|| {
                asked.set(asked.get() + 1);
                asked.get() > early
            },
        );
        prop_assert_eq!(interrupted.status, SdpStatus::Interrupted);
        prop_assert_eq!(interrupted.iterations, early);
        prop_assert_eq!(&interrupted.duals, &stopped.duals);
    }
}

#[test]
fn bad_problems_and_params_are_refused() {
    let c = Mat::from_fn(2, 2, |i, j| if i == j { 1.0 } else { 0.0 });
    let mut relaxation = Relaxation::new(c.clone(), vec![1.0, -3.0], vec![2.0, 3.0]);
    relaxation.cuts.push(RltCut {
        i: 0,
        j: 0,
        kind: RltKind::T1,
    });
    assert!(relaxation.build().is_err(), "a cut on (i, i)");
    let unbounded = Relaxation {
        cuts: vec![RltCut {
            i: 0,
            j: 1,
            kind: RltKind::T1,
        }],
        ..Relaxation::new(
            c.clone(),
            vec![1.0, f64::NEG_INFINITY],
            vec![2.0, f64::INFINITY],
        )
    };
    let message = unbounded.build().expect_err("T1 needs U_j").to_string();
    assert!(message.contains("finite bounds"), "{message}");
    let indefinite = Mat::from_fn(2, 2, |i, j| if i == j { 0.0 } else { 1.0 });
    let message = Relaxation::new(indefinite, vec![1.0, 1.0], vec![2.0, 2.0])
        .build()
        .expect_err("indefinite C")
        .to_string();
    assert!(message.contains("not positive definite"), "{message}");
    for params in [
        SdpParams {
            tol: 0.0,
            ..SdpParams::default()
        },
        SdpParams {
            step_fraction: 1.0,
            ..SdpParams::default()
        },
    ] {
        assert!(params.check().is_err(), "{params:?}");
    }
}

/// A node whose boxes cannot meet the balance row (every unlabeled point's x ≥ 1 but ρ < 0)
/// ends as infeasible, and its safe bound still holds (it is large, which prunes the node).
#[test]
fn an_infeasible_node_is_reported() {
    let c = Mat::from_fn(3, 3, |i, j| if i == j { 1.0 } else { 0.1 });
    let mut relaxation = Relaxation::new(c, vec![1.0; 3], vec![2.0; 3]);
    relaxation.balance = Some(neyman::learn::s3vm::sdp::relax::Balance {
        unlabeled: vec![0, 1, 2],
        rho: -1.0,
    });
    relaxation.rows = RowRule::Full;
    let relaxed = relaxation.build().expect("build");
    let own = solve(&relaxed.problem);
    assert_eq!(own.status, SdpStatus::Infeasible, "{own:?}");
}
