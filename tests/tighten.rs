//! Bound tightening and cut management for the exact S3VM (`learn::s3vm::sdp::tighten`):
//! RLT violations against the rows relax.rs builds, separation caps, order and duplicates, a
//! rank-one Y of a point in the box violating nothing, cuts raising the bound of a real node;
//! the projection of Remark 2 and the infeasibility tests against brute force; marginals-based
//! tightening and OBBT checked by enumerating every labelling of small instances (u = 10, QP
//! (24) per labelling by clarabel): none at or below the incumbent leaves the boxes; OBBT's
//! certified bounds against clarabel's SOCP.

mod common;

use clarabel::algebra::CscMatrix;
use clarabel::solver::{
    DefaultSettings, DefaultSolver, IPSolver, SolverStatus,
    SupportedConeT::{NonnegativeConeT, SecondOrderConeT, ZeroConeT},
};
use common::exact::exact_instance;
use faer::Mat;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use neyman::learn::kernel::Kernel;
use neyman::learn::s3vm::sdp::ipm::{SdpParams, SdpSolution, SdpStatus};
use neyman::learn::s3vm::sdp::relax::{Balance, Relaxation, RelaxedSdp, RltCut, RltKind};
use neyman::learn::s3vm::sdp::tighten::{
    cut_duals, project_boxes, rlt_violation, Direction, Infeasibility, Marginals, Obbt,
    TightenParams, TightenValidParams,
};
use neyman::learn::s3vm::sdp::SdpProblem;

const KINDS: [RltKind; 4] = [RltKind::T1, RltKind::T2, RltKind::T3, RltKind::T4];

fn solve(problem: &SdpProblem) -> SdpSolution {
    SdpParams::default()
        .check()
        .expect("default params")
        .solve(problem)
}

fn params() -> TightenValidParams {
    TightenParams::default().check().expect("default params")
}

/// A relaxation with random positive definite C and random boxes: each point's box is one of
/// [a, b] ∋ ±1 two-sided, [1, b], [a, −1], or half-infinite; no balance row.
fn random_boxes(n: usize, seed: u64) -> Relaxation {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let b = Mat::from_fn(n, n, |_, _| rng.gen_range(-1.0..1.0));
    let c = Mat::from_fn(n, n, |i, j| {
        (0..n).map(|k| b[(i, k)] * b[(j, k)]).sum::<f64>() + if i == j { 0.5 } else { 0.0 }
    });
    let (mut lower, mut upper) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let (l, u) = match rng.gen_range(0..5) {
            0 => (rng.gen_range(-4.0..-1.0), rng.gen_range(1.0..4.0)),
            1 => (1.0, rng.gen_range(1.5..4.0)),
            2 => (rng.gen_range(-4.0..-1.5), -1.0),
            3 => (1.0, f64::INFINITY),
            _ => (f64::NEG_INFINITY, rng.gen_range(1.0..4.0)),
        };
        lower.push(l);
        upper.push(u);
    }
    Relaxation::new(c, lower, upper)
}

/// A random symmetric Y of order n + 1 with Y_NN = 1 (not necessarily ⪰ 0).
fn random_y(n: usize, rng: &mut ChaCha8Rng) -> Mat<f64> {
    let mut y = Mat::from_fn(n + 1, n + 1, |_, _| rng.gen_range(-5.0..5.0));
    for i in 0..=n {
        for j in 0..i {
            y[(j, i)] = y[(i, j)];
        }
    }
    y[(n, n)] = 1.0;
    y
}

fn rank_one(x: &[f64]) -> Mat<f64> {
    let n = x.len();
    let v = |i: usize| if i < n { x[i] } else { 1.0 };
    Mat::from_fn(n + 1, n + 1, |i, j| v(i) * v(j))
}

/// The violation of `cut` as the row relax.rs builds for it: rhs − ⟨A, Y⟩ of the ≥ row.
fn violation_of_built_row(relaxation: &Relaxation, y: &Mat<f64>, cut: RltCut) -> f64 {
    let mut single = relaxation.clone();
    single.cuts = vec![cut];
    let built = single.build().expect("a cut with finite bounds");
    let row = built.problem.constraints().last().expect("the cut row");
    row.rhs - row.value(y)
}

#[test]
fn violations_match_the_built_rows_and_skip_infinite_bounds() {
    for seed in 0..4 {
        let n = 9;
        let relaxation = random_boxes(n, seed);
        let mut rng = ChaCha8Rng::seed_from_u64(100 + seed);
        let y = random_y(n, &mut rng);
        let mut checked = 0;
        for i in 0..n {
            for j in 0..n {
                for kind in KINDS {
                    let cut = RltCut { i, j, kind };
                    let (a, b) = match kind {
                        RltKind::T1 => (relaxation.upper[i], relaxation.upper[j]),
                        RltKind::T2 => (relaxation.lower[i], relaxation.lower[j]),
                        RltKind::T3 => (relaxation.lower[i], relaxation.upper[j]),
                        RltKind::T4 => (relaxation.upper[i], relaxation.lower[j]),
                    };
                    let got = rlt_violation(&relaxation, &y, cut);
                    if i == j || !a.is_finite() || !b.is_finite() {
                        assert_eq!(got, None, "{cut:?}");
                        continue;
                    }
                    let want = violation_of_built_row(&relaxation, &y, cut);
                    let got = got.expect("finite bounds");
                    assert!(
                        (got - want).abs() <= 1e-12 * (1.0 + want.abs()),
                        "{cut:?}: {got} vs {want}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 50, "seed {seed}: only {checked} finite cuts");
    }
}

#[test]
fn a_rank_one_y_of_a_point_in_the_box_violates_no_cut() {
    for seed in 0..6 {
        let n = 12;
        let relaxation = random_boxes(n, seed);
        let mut rng = ChaCha8Rng::seed_from_u64(200 + seed);
        let x: Vec<f64> = (0..n)
            .map(|i| {
                let lo = relaxation.lower[i].max(-6.0);
                let hi = relaxation.upper[i].min(6.0);
                rng.gen_range(lo..=hi)
            })
            .collect();
        let y = rank_one(&x);
        for (i, xi) in x.iter().enumerate() {
            for (j, xj) in x.iter().enumerate() {
                for kind in KINDS {
                    if let Some(v) = rlt_violation(&relaxation, &y, RltCut { i, j, kind }) {
                        assert!(v <= 1e-12 * (1.0 + xi.abs() * xj.abs()), "{v}");
                    }
                }
            }
        }
        let round = params().separate_cuts(&relaxation, &y, &[]).expect("round");
        assert!(round.add.is_empty(), "{:?}", round.add);
        assert!(round.drop.is_empty());
    }
}

#[test]
fn separation_caps_orders_and_skips_existing_cuts() {
    let n = 10;
    let mut relaxation = random_boxes(n, 7);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let y = random_y(n, &mut rng);
    // Every violated cut, by brute force over ordered pairs in canonical form (i < j).
    let mut violated = Vec::new();
    for i in 0..n {
        for j in i + 1..n {
            for kind in KINDS {
                let cut = RltCut { i, j, kind };
                if let Some(v) = rlt_violation(&relaxation, &y, cut) {
                    if v > 1e-2 {
                        violated.push((cut, v));
                    }
                }
            }
        }
    }
    assert!(violated.len() > 3 * n, "{} violated cuts", violated.len());
    // Two of them already in the list, written the other way round (T1 on (j, i); T3 on
    // (j, i) is T4 on (i, j)), with duals around the drop threshold.
    let t1 = violated
        .iter()
        .find(|(c, _)| c.kind == RltKind::T1)
        .map(|(c, _)| *c)
        .expect("a violated T1");
    let t4 = violated
        .iter()
        .find(|(c, _)| c.kind == RltKind::T4)
        .map(|(c, _)| *c)
        .expect("a violated T4");
    relaxation.cuts = vec![
        RltCut {
            i: t1.j,
            j: t1.i,
            kind: RltKind::T1,
        },
        RltCut {
            i: t4.j,
            j: t4.i,
            kind: RltKind::T3,
        },
        RltCut {
            i: 0,
            j: 1,
            kind: RltKind::T2,
        },
    ];
    let round = params()
        .separate_cuts(&relaxation, &y, &[5e-5, -2e-4, 0.0])
        .expect("round");
    assert_eq!(round.drop, vec![0, 2]);
    assert_eq!(round.add.len(), 3 * n);
    for pair in round.add.windows(2) {
        assert!(pair[0].violation >= pair[1].violation);
    }
    let mut seen = std::collections::HashSet::new();
    for s in &round.add {
        assert!(s.cut.i < s.cut.j);
        assert!(s.violation > 1e-2);
        assert!(
            seen.insert((s.cut.i, s.cut.j, s.cut.kind as u8)),
            "twice: {s:?}"
        );
        assert!(
            s.cut != t1 && s.cut != t4 && s.cut != relaxation.cuts[2],
            "an existing cut again: {s:?}"
        );
        let want = rlt_violation(&relaxation, &y, s.cut).expect("finite bounds");
        assert_eq!(s.violation, want);
    }
    // The 3n largest of the brute-force list, without the two existing ones.
    let mut expected: Vec<f64> = violated
        .iter()
        .filter(|(c, _)| *c != t1 && *c != t4 && *c != relaxation.cuts[2])
        .map(|(_, v)| *v)
        .collect();
    expected.sort_by(|a, b| b.total_cmp(a));
    let got: Vec<f64> = round.add.iter().map(|s| s.violation).collect();
    assert_eq!(got, expected[..3 * n].to_vec());
    let next = round.apply(&relaxation.cuts);
    assert_eq!(next.len(), 1 + 3 * n);
    assert_eq!(next[0], relaxation.cuts[1]);
}

/// A node of a real instance with finite boxes: the labelled points' sign boxes capped at 4,
/// the unlabeled boxes [−4, 4] (a made-up branch; the bound only has to rise).
#[test]
fn separated_cuts_raise_the_bound_of_a_real_node() {
    let mut relaxation = exact_instance("sonar.csv", 40, 6, Kernel::Linear, 1.0, 3, true).root;
    let n = relaxation.lower.len();
    for k in 0..n {
        relaxation.lower[k] = relaxation.lower[k].max(-4.0);
        relaxation.upper[k] = relaxation.upper[k].min(4.0);
        relaxation.diag_upper[k] = 16.0;
    }
    let relaxed = relaxation.build().expect("build");
    let before = solve(&relaxed.problem);
    assert_eq!(before.status, SdpStatus::Optimal);
    let duals = cut_duals(&relaxed, &before.duals).expect("cut duals");
    assert!(duals.is_empty());
    let cuts = params()
        .separate_cuts(&relaxation, &before.primal, &duals)
        .expect("separation");
    assert!(
        !cuts.add.is_empty() && cuts.add.len() <= 3 * n,
        "{}",
        cuts.add.len()
    );
    relaxation.cuts = cuts.apply(&relaxation.cuts);
    let after = solve(&relaxation.build().expect("build").problem);
    assert_eq!(after.status, SdpStatus::Optimal);
    // The cuts separate the old solution, so the bound rises (here by far more than 1e-4).
    assert!(
        after.primal_objective > before.primal_objective * (1.0 + 1e-4),
        "{} → {}",
        before.primal_objective,
        after.primal_objective
    );
    for cut in &cuts.add {
        let violation = rlt_violation(&relaxation, &after.primal, cut.cut).expect("finite");
        assert!(violation <= 1e-6, "{cut:?} still violated by {violation}");
    }
}

#[test]
fn the_projection_fixes_signs_and_finds_empty_nodes() {
    let c = Mat::from_fn(4, 4, |i, j| if i == j { 1.0 } else { 0.0 });
    let mut r = Relaxation::new(
        c.clone(),
        vec![-0.5, -3.0, f64::NEG_INFINITY, -2.0],
        vec![3.0, 0.5, 2.0, 2.0],
    );
    project_boxes(&mut r).expect("feasible");
    assert_eq!(r.lower, vec![1.0, -3.0, f64::NEG_INFINITY, -2.0]);
    assert_eq!(r.upper, vec![3.0, -1.0, 2.0, 2.0]);
    assert_eq!(r.diag_upper, vec![9.0, 9.0, f64::INFINITY, 4.0]);
    let cases: [(Vec<f64>, Vec<f64>, Infeasibility); 3] = [
        (
            vec![-0.5, -2.0, -2.0, -2.0],
            vec![0.5, 2.0, 2.0, 2.0],
            Infeasibility::NoSign(0),
        ),
        (
            vec![-2.0, 2.0, -2.0, -2.0],
            vec![2.0, 1.5, 2.0, 2.0],
            Infeasibility::EmptyBox(1),
        ),
        (
            vec![-2.0, -2.0, 0.5, -2.0],
            vec![2.0, 2.0, 0.9, 2.0],
            Infeasibility::NoSign(2),
        ),
    ];
    for (lower, upper, want) in cases {
        let mut r = Relaxation::new(c.clone(), lower, upper);
        assert_eq!(project_boxes(&mut r), Err(want));
    }
    // [0.5, 1.2] becomes [1, 1.2]; a diagonal bound below 1 empties a two-sided box.
    let mut r = Relaxation::new(c.clone(), vec![0.5, -2.0, -2.0, -2.0], vec![1.2; 4]);
    r.diag_upper[1] = 0.9;
    assert_eq!(project_boxes(&mut r), Err(Infeasibility::Diagonal(1)));
    let mut r = Relaxation::new(c.clone(), vec![1.5, -2.0, -2.0, -2.0], vec![3.0; 4]);
    r.diag_upper[0] = 2.0;
    assert_eq!(project_boxes(&mut r), Err(Infeasibility::Diagonal(0)));
    // Lemma 2's x_k² ≥ t_k: a fixed sign moves the box to |x_k| ≥ √t_k; with both signs
    // open, ū_k < t_k empties the node.
    let mut r = Relaxation::new(
        c.clone(),
        vec![1.0, -3.0, -3.0, -3.0],
        vec![3.0, -1.0, 3.0, 3.0],
    );
    r.diag_lower = vec![4.0, 2.25, 1.0, 1.0];
    project_boxes(&mut r).expect("feasible");
    assert_eq!(r.lower[..2], [2.0, -3.0]);
    assert_eq!(r.upper[..2], [3.0, -1.5]);
    let mut r = Relaxation::new(c.clone(), vec![-2.0; 4], vec![2.0; 4]);
    r.diag_lower[3] = 3.0;
    r.diag_upper[3] = 2.5;
    assert_eq!(project_boxes(&mut r), Err(Infeasibility::Diagonal(3)));
    // Balance over x_2, x_3 ∈ [−2, −1] ∪ [1, 2]: sums [−4, −2] ∪ [−1, 1] ∪ [2, 4].
    for (rho, ok) in [
        (0.0, true),
        (1.5, false),
        (-1.7, false),
        (3.0, true),
        (4.5, false),
    ] {
        let mut r = Relaxation::new(c.clone(), vec![-2.0; 4], vec![2.0; 4]);
        r.balance = Some(Balance {
            unlabeled: vec![2, 3],
            rho,
        });
        let got = project_boxes(&mut r);
        assert_eq!(got.is_ok(), ok, "ρ = {rho}: {got:?}");
        if !ok {
            assert_eq!(got, Err(Infeasibility::Balance));
        }
    }
}

/// Whether some x with x_j ∈ [L_j, U_j], |x_j| ≥ 1 sums to ρ, by every sign pattern: for
/// fixed signs the sums form one interval.
fn balance_brute_force(lower: &[f64], upper: &[f64], rho: f64) -> bool {
    let u = lower.len();
    (0..1u32 << u).any(|signs| {
        let (mut lo, mut hi) = (0.0, 0.0);
        for (j, (&low, &high)) in lower.iter().zip(upper).enumerate() {
            let (a, b) = if signs >> j & 1 == 1 {
                (low.max(1.0), high)
            } else {
                (low, high.min(-1.0))
            };
            if a > b {
                return false;
            }
            lo += a;
            hi += b;
        }
        rho >= lo - 1e-9 && rho <= hi + 1e-9
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_balance_test_matches_brute_force(
        bounds in proptest::collection::vec((-4.0f64..2.0, 0.0f64..4.0), 1..6),
        rho in -12.0f64..12.0,
    ) {
        let u = bounds.len();
        let lower: Vec<f64> = bounds.iter().map(|b| b.0).collect();
        let upper: Vec<f64> = bounds.iter().map(|b| b.0 + b.1).collect();
        let c = Mat::from_fn(u, u, |i, j| if i == j { 1.0 } else { 0.0 });
        let mut r = Relaxation::new(c, lower.clone(), upper.clone());
        r.balance = Some(Balance { unlabeled: (0..u).collect(), rho });
        let want_boxes = (0..u).all(|j| lower[j] <= upper[j] && !(lower[j] > -1.0 && upper[j] < 1.0));
        let got = project_boxes(&mut r);
        if !want_boxes {
            prop_assert!(got.is_err());
        } else {
            prop_assert_eq!(got.is_ok(), balance_brute_force(&lower, &upper, rho), "{:?}", got);
        }
    }
}

fn clarabel_settings() -> DefaultSettings<f64> {
    DefaultSettings {
        verbose: false,
        max_iter: 500,
        tol_gap_abs: 1e-10,
        tol_gap_rel: 1e-10,
        tol_feas: 1e-10,
        ..DefaultSettings::default()
    }
}

/// The upper triangle of 2C in CSC form: clarabel minimises ½xᵀPx + qᵀx.
fn twice_upper(c: &Mat<f64>) -> CscMatrix<f64> {
    let n = c.nrows();
    let (mut colptr, mut rowval, mut nzval) = (vec![0], Vec::new(), Vec::new());
    for j in 0..n {
        for i in 0..=j {
            rowval.push(i);
            nzval.push(c[(i, j)] + c[(j, i)]);
        }
        colptr.push(rowval.len());
    }
    CscMatrix::new(n, n, colptr, rowval, nzval)
}

/// QP (24) of a full labelling (note B.4.7): min xᵀCx s.t. ŷ_k x_k ≥ 1, Σ_j x_j = ρ, by
/// clarabel. `None` when the labelling cannot meet the balance row.
fn qp24(relaxation: &Relaxation, signs: &[f64]) -> Option<(Vec<f64>, f64)> {
    let c = &relaxation.c;
    let n = c.nrows();
    let p = twice_upper(c);
    let balance = relaxation.balance.as_ref();
    let offset = usize::from(balance.is_some());
    let mut in_balance = vec![false; n];
    if let Some(b) = balance {
        for &j in &b.unlabeled {
            in_balance[j] = true;
        }
    }
    // Row 0: the balance (zero cone); rows offset + k: −ŷ_k x_k ≤ −1. Column-major.
    let (mut colptr, mut rowval, mut nzval) = (vec![0], Vec::new(), Vec::new());
    for (k, (&balanced, &sign)) in in_balance.iter().zip(signs).enumerate() {
        if balanced {
            rowval.push(0);
            nzval.push(1.0);
        }
        rowval.push(offset + k);
        nzval.push(-sign);
        colptr.push(rowval.len());
    }
    let a = CscMatrix::new(offset + n, n, colptr, rowval, nzval);
    let mut rhs = vec![-1.0; offset + n];
    let mut cones = Vec::new();
    if let Some(b) = balance {
        rhs[0] = b.rho;
        cones.push(ZeroConeT(1));
    }
    cones.push(NonnegativeConeT(n));
    let mut solver = DefaultSolver::new(&p, &vec![0.0; n], &a, &rhs, &cones, clarabel_settings())
        .expect("valid QP");
    solver.solve();
    match solver.solution.status {
        SolverStatus::Solved => {}
        SolverStatus::PrimalInfeasible | SolverStatus::AlmostPrimalInfeasible => return None,
        other => panic!("QP (24): {other:?}"),
    }
    let x = solver.solution.x.clone();
    let objective = quadratic(c, &x);
    Some((x, objective))
}

fn quadratic(c: &Mat<f64>, x: &[f64]) -> f64 {
    let n = x.len();
    (0..n)
        .map(|i| (0..n).map(|j| x[i] * c[(i, j)] * x[j]).sum::<f64>())
        .sum()
}

/// Every labelling of the node's undecided points that meets the balance row: its QP (24)
/// solution and objective. Labels already fixed by the boxes (L ≥ 1 or U ≤ −1) stay.
fn labellings(relaxation: &Relaxation) -> Vec<(Vec<f64>, f64)> {
    let n = relaxation.lower.len();
    let free: Vec<usize> = (0..n)
        .filter(|&k| relaxation.lower[k] < 1.0 && relaxation.upper[k] > -1.0)
        .collect();
    assert!(free.len() <= 10, "{} undecided points", free.len());
    let mut out = Vec::new();
    for mask in 0u32..1 << free.len() {
        let mut signs: Vec<f64> = (0..n)
            .map(|k| {
                if relaxation.lower[k] >= 1.0 {
                    1.0
                } else {
                    -1.0
                }
            })
            .collect();
        for (b, &k) in free.iter().enumerate() {
            signs[k] = if mask >> b & 1 == 1 { 1.0 } else { -1.0 };
        }
        if let Some(found) = qp24(relaxation, &signs) {
            out.push(found);
        }
    }
    out
}

/// Every labelling with objective ≤ `upper` has its QP (24) point inside the node's boxes
/// and x_i² ≤ ū_i (1e-7 for clarabel's accuracy). Returns how many were checked.
fn assert_kept(relaxation: &Relaxation, all: &[(Vec<f64>, f64)], upper: f64, what: &str) -> usize {
    let mut kept = 0;
    for (x, objective) in all {
        if *objective > upper * (1.0 + 1e-12) {
            continue;
        }
        kept += 1;
        for (k, &xk) in x.iter().enumerate() {
            assert!(
                xk >= relaxation.lower[k] - 1e-7 && xk <= relaxation.upper[k] + 1e-7,
                "{what}: a labelling with objective {objective} ≤ {upper} has x_{k} = {} outside [{}, {}]",
                xk,
                relaxation.lower[k],
                relaxation.upper[k]
            );
            assert!(
                xk * xk <= relaxation.diag_upper[k] + 1e-7,
                "{what}: x_{k}² = {} above ū = {}",
                xk * xk,
                relaxation.diag_upper[k]
            );
            assert!(
                xk * xk >= relaxation.diag_lower[k] - 1e-7,
                "{what}: x_{k}² = {} below Lemma 2's t = {}",
                xk * xk,
                relaxation.diag_lower[k]
            );
        }
    }
    kept
}

/// Small instances (u = 10) for the enumeration checks: data, kernel, C_l, seed.
fn enumerable() -> Vec<(Relaxation, &'static str)> {
    vec![
        (
            exact_instance("sonar.csv", 14, 4, Kernel::Linear, 1.0, 5, true).root,
            "sonar linear",
        ),
        (
            exact_instance(
                "heart_statlog.csv",
                14,
                4,
                Kernel::Rbf { gamma: 0.1 },
                3.0,
                2,
                true,
            )
            .root,
            "heart rbf",
        ),
        (
            exact_instance(
                "ionosphere.csv",
                14,
                4,
                Kernel::Rbf { gamma: 0.05 },
                1.0,
                9,
                true,
            )
            .root,
            "ionosphere rbf",
        ),
    ]
}

/// Builds and solves the node's relaxation, then tightens the node by that solve's marginals
/// for the incumbent `upper`: the relaxation, its solution and what tightening did.
fn solve_and_tighten(node: &mut Relaxation, upper: f64) -> (RelaxedSdp, SdpSolution, Marginals) {
    let relaxed = node.build().expect("build");
    let solution = solve(&relaxed.problem);
    let outcome = params()
        .tighten_marginals(node, &relaxed, &solution.primal, &solution.duals, upper)
        .expect("marginals");
    (relaxed, solution, outcome)
}

#[test]
fn marginals_keep_every_labelling_at_or_below_the_incumbent() {
    for (root, what) in enumerable() {
        let all = labellings(&root);
        let optimum = all.iter().map(|l| l.1).fold(f64::INFINITY, f64::min);
        assert!(optimum.is_finite(), "{what}: no labelling");
        for factor in [1.0, 1.02, 1.2] {
            let upper = optimum * factor;
            let mut node = root.clone();
            let (_, _, outcome) = solve_and_tighten(&mut node, upper);
            assert_eq!(outcome.infeasible, None, "{what} ×{factor}");
            assert!(
                outcome.lower_bound <= optimum,
                "{what}: LB {} > {optimum}",
                outcome.lower_bound
            );
            if factor == 1.0 {
                assert!(outcome.changed > 0, "{what}: nothing tightened");
            }
            let kept = assert_kept(&node, &all, upper, &format!("{what} ×{factor}"));
            assert!(kept >= 1);
        }
    }
}

/// min sign·x_k over the set of (18) — xᵀCx ≤ UB as ‖Lᵀx‖ ≤ √UB (C = LLᵀ), the balance row,
/// the boxes without k's own — by clarabel's SOCP; returned in x_k's units (the min for +1,
/// the max for −1).
fn clarabel_obbt(relaxation: &Relaxation, upper: f64, k: usize, sign: f64) -> f64 {
    let c = &relaxation.c;
    let n = c.nrows();
    let factor = c.llt(faer::Side::Lower).expect("C ≻ 0");
    let l = factor.L();
    // Triplets (row, column, value) of A, rows: balance, box rows, then the cone.
    let mut triplets = Vec::new();
    let mut rhs = Vec::new();
    let mut cones = Vec::new();
    if let Some(b) = &relaxation.balance {
        for &j in &b.unlabeled {
            triplets.push((0, j, 1.0));
        }
        rhs.push(b.rho);
        cones.push(ZeroConeT(1));
    }
    let mut boxes = 0;
    for i in (0..n).filter(|&i| i != k) {
        if relaxation.lower[i].is_finite() {
            triplets.push((rhs.len(), i, -1.0));
            rhs.push(-relaxation.lower[i]);
            boxes += 1;
        }
        if relaxation.upper[i].is_finite() {
            triplets.push((rhs.len(), i, 1.0));
            rhs.push(relaxation.upper[i]);
            boxes += 1;
        }
    }
    if boxes > 0 {
        cones.push(NonnegativeConeT(boxes));
    }
    let top = rhs.len();
    rhs.push(upper.sqrt());
    for r in 0..n {
        for i in r..n {
            triplets.push((top + 1 + r, i, -l[(i, r)]));
        }
        rhs.push(0.0);
    }
    cones.push(SecondOrderConeT(n + 1));
    triplets.sort_by_key(|t| (t.1, t.0));
    let (mut colptr, mut rowval, mut nzval) = (vec![0], Vec::new(), Vec::new());
    let mut next = 0;
    for j in 0..n {
        while next < triplets.len() && triplets[next].1 == j {
            rowval.push(triplets[next].0);
            nzval.push(triplets[next].2);
            next += 1;
        }
        colptr.push(rowval.len());
    }
    let a = CscMatrix::new(rhs.len(), n, colptr, rowval, nzval);
    let p = CscMatrix::new(n, n, vec![0; n + 1], Vec::new(), Vec::new());
    let mut q = vec![0.0; n];
    q[k] = sign;
    let mut solver =
        DefaultSolver::new(&p, &q, &a, &rhs, &cones, clarabel_settings()).expect("valid SOCP");
    solver.solve();
    assert_eq!(solver.solution.status, SolverStatus::Solved);
    sign * solver.solution.obj_val
}

#[test]
fn obbt_bounds_are_tight_certified_and_keep_every_labelling() {
    for (root, what) in enumerable() {
        let all = labellings(&root);
        let optimum = all.iter().map(|l| l.1).fold(f64::INFINITY, f64::min);
        for factor in [1.0, 1.1] {
            let upper = optimum * factor;
            // Against clarabel's SOCP, on the root's boxes.
            let obbt = Obbt::new(&root, upper).expect("obbt");
            for k in (0..root.lower.len()).step_by(3) {
                for (direction, sign) in [(Direction::Lower, 1.0), (Direction::Upper, -1.0)] {
                    let got = obbt.bound(k, direction).expect("bound");
                    let want = clarabel_obbt(&root, upper, k, sign);
                    let tol = 1e-6 * (1.0 + want.abs());
                    assert!(
                        (got.bound - want).abs() <= tol,
                        "{what} ×{factor}, x_{k} {direction:?}: {} vs clarabel {want}",
                        got.bound
                    );
                    assert!(got.iterations < 60, "{what}: {got:?}");
                }
            }
            let mut node = root.clone();
            let round = params().obbt(&mut node, upper).expect("round");
            assert_eq!(round.infeasible, None, "{what} ×{factor}");
            assert!(round.worst_certificate_gap <= 1e-6, "{what}: {round:?}");
            assert!(
                node.lower
                    .iter()
                    .chain(&node.upper)
                    .chain(&node.diag_upper)
                    .all(|b| b.is_finite()),
                "{what}: a bound is still infinite"
            );
            let kept = assert_kept(&node, &all, upper, &format!("{what} OBBT ×{factor}"));
            assert!(kept >= 1);
        }
    }
}

/// Root OBBT, then the node loop's steps (solve, marginals, cuts) and a branch on each side
/// of an undecided point with OBBT and marginals again: no labelling at or below the optimum
/// of the node is lost at any step, and the bound rises.
#[test]
fn the_node_loop_keeps_every_labelling() {
    for (root, what) in enumerable() {
        let all = labellings(&root);
        let upper = all.iter().map(|l| l.1).fold(f64::INFINITY, f64::min);
        let mut node = root.clone();
        let bound_before = solve(&node.build().expect("build").problem).primal_objective;
        let round = params().obbt(&mut node, upper).expect("obbt");
        assert_eq!(round.infeasible, None);
        let mut bounds = vec![bound_before];
        for step in 0..3 {
            let (relaxed, solution, outcome) = solve_and_tighten(&mut node, upper);
            bounds.push(solution.primal_objective);
            assert_eq!(outcome.infeasible, None, "{what} step {step}");
            assert_kept(&node, &all, upper, &format!("{what} step {step}"));
            let duals = cut_duals(&relaxed, &solution.duals).expect("duals");
            let cuts = params()
                .separate_cuts(&node, &solution.primal, &duals)
                .expect("cuts");
            node.cuts = cuts.apply(&node.cuts);
        }
        assert!(
            bounds.last() > bounds.first(),
            "{what}: the bound did not rise: {bounds:?}"
        );
        let undecided = (0..node.lower.len())
            .find(|&k| node.lower[k] < 1.0 && node.upper[k] > -1.0)
            .expect("an undecided point");
        for positive in [true, false] {
            let mut child = node.clone();
            if positive {
                child.lower[undecided] = 1.0;
            } else {
                child.upper[undecided] = -1.0;
            }
            if project_boxes(&mut child).is_err() {
                continue;
            }
            let child_all = labellings(&child);
            let round = params().obbt(&mut child, upper).expect("obbt");
            let (_, _, outcome) = solve_and_tighten(&mut child, upper);
            if round.infeasible.is_some() || outcome.infeasible.is_some() {
                // Then no labelling of the child may be at or below the incumbent.
                assert!(
                    child_all.iter().all(|l| l.1 > upper * (1.0 + 1e-12)),
                    "{what}: a child with a labelling at {upper} reported infeasible"
                );
                continue;
            }
            assert_kept(
                &child,
                &child_all,
                upper,
                &format!("{what} child {positive}"),
            );
        }
    }
}
