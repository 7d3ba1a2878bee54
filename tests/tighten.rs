//! Bound tightening and cut management for the exact S3VM (`learn::s3vm::sdp::tighten`):
//! RLT violations against the rows relax.rs builds, separation caps, order and duplicates, a
//! rank-one Y of a point in the box violating nothing, cuts raising the bound of a real node;
//! the projection of Remark 2 and the infeasibility tests against brute force.

use faer::Mat;
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use neyman::data::{read, Label, LabelledRows, ReadOptions, ScaleKind, Scaler};
use neyman::learn::kernel::Kernel;
use neyman::learn::s3vm::sdp::ipm::{SdpParams, SdpSolution, SdpStatus};
use neyman::learn::s3vm::sdp::relax::{
    gram, objective_matrix, Balance, Relaxation, RltCut, RltKind,
};
use neyman::learn::s3vm::sdp::tighten::{
    cut_duals, project_boxes, rlt_violation, Infeasibility, TightenParams, TightenValidParams,
};
use neyman::learn::s3vm::sdp::SdpProblem;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data");
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

/// The instance protocol of `bench sdp` (tests/sdp.rs): `rows` rows of `file` shuffled with
/// `seed`, all but `labelled` labels hidden, features standardised, C with C_l = `cl` and
/// C_u = (l/u)·C_l, the root relaxation with the balance row. Returns it and the true labels.
fn data_instance(
    file: &str,
    rows: usize,
    labelled: usize,
    kernel: Kernel,
    cl: f64,
    seed: u64,
) -> (Relaxation, Vec<Label>) {
    let data = read(
        std::path::Path::new(&format!("{DATA}/{file}")),
        &ReadOptions::default(),
    )
    .expect("read data");
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
    let c = objective_matrix(&gram(&kernel, &scaled), &penalties).expect("C");
    let relaxation = Relaxation::for_labels(c, &instance.labels, true).expect("relaxation");
    (relaxation, truth)
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
        for i in 0..n {
            for j in 0..n {
                for kind in KINDS {
                    if let Some(v) = rlt_violation(&relaxation, &y, RltCut { i, j, kind }) {
                        assert!(v <= 1e-12 * (1.0 + x[i].abs() * x[j].abs()), "{v}");
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
    let (mut relaxation, _) = data_instance("sonar.csv", 40, 6, Kernel::Linear, 1.0, 3);
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
        for j in 0..u {
            let (a, b) = if signs >> j & 1 == 1 {
                (lower[j].max(1.0), upper[j])
            } else {
                (lower[j], upper[j].min(-1.0))
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
