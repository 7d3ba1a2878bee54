//! The certified thresholds' guarantees, checked by simulation on synthetic scores whose FPR is
//! known exactly: negatives ~ U(0, 1), so FPR(t) = 1 − t on [0, 1]; positives ~ U(0.5, 1.5), so
//! TPR(t) = 1.5 − t on [0.5, 1.5]. Each test repeats the calibration over many independent draws
//! (fixed seeds) and compares the share of draws with FPR(t) > τ against δ, allowing three
//! standard errors of the simulation.

use neyman::learn::threshold::{
    candidate_grid, pu_umbrella, umbrella, umbrella_min_negatives, ThresholdError,
    DEFAULT_CANDIDATES,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn true_fpr(t: f64) -> f64 {
    (1.0 - t).clamp(0.0, 1.0)
}

fn uniforms(rng: &mut ChaCha8Rng, n: usize, lo: f64) -> Vec<f64> {
    (0..n).map(|_| lo + rng.gen::<f64>()).collect()
}

/// δ + 3·√(δ(1 − δ)/draws).
fn allowed_share(delta: f64, draws: usize) -> f64 {
    delta + 3.0 * (delta * (1.0 - delta) / draws as f64).sqrt()
}

#[test]
fn umbrella_exceeds_tau_at_most_delta_of_the_time() {
    let (n, tau, delta, draws) = (200, 0.05, 0.05, 10_000);
    let mut rng = ChaCha8Rng::seed_from_u64(2018);
    let (mut over_tau, mut over_bound) = (0usize, 0usize);
    for _ in 0..draws {
        let negatives = uniforms(&mut rng, n, 0.0);
        let r = umbrella(&negatives, tau, delta, None).expect("200 negatives suffice");
        let fpr = true_fpr(r.threshold);
        over_tau += usize::from(fpr > tau);
        over_bound += usize::from(fpr > r.fpr_bound.expect("certified"));
    }
    let share = over_tau as f64 / draws as f64;
    let bound_share = over_bound as f64 / draws as f64;
    println!("umbrella: FPR > tau in {share}, FPR > fpr_bound in {bound_share} of {draws} draws");
    // Exactly P(Bin(200, 0.95) ≥ 196) ≈ 0.0264; rank 195 would give ≈ 0.062.
    assert!(share <= allowed_share(delta, draws), "{share}");
    assert!(share > delta / 5.0, "absurdly conservative: {share}");
    // For continuous scores the FPR exceeds fpr_bound with probability exactly δ.
    let se = 3.0 * (delta * (1.0 - delta) / draws as f64).sqrt();
    assert!((bound_share - delta).abs() <= se, "{bound_share}");
}

#[test]
fn umbrella_refuses_too_few_negatives() {
    let (tau, delta) = (0.1, 0.05);
    let needed = umbrella_min_negatives(tau, delta).expect("valid");
    assert_eq!(needed, 29);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let negatives = uniforms(&mut rng, needed - 1, 0.0);
    let err = umbrella(&negatives, tau, delta, None).unwrap_err();
    assert!(matches!(
        err,
        ThresholdError::TooFewNegatives {
            needed: 29,
            have: 28,
            ..
        }
    ));
    assert!(err.to_string().contains("at least 29"), "{err}");
    let negatives = uniforms(&mut rng, needed, 0.0);
    let r = umbrella(&negatives, tau, delta, None).expect("exactly enough");
    // With the minimum only the largest score is certified.
    assert_eq!(
        r.threshold,
        negatives.iter().copied().fold(f64::MIN, f64::max)
    );
}

/// Share of draws whose PU-umbrella threshold has true FPR > τ, with the mean FPR and TPR.
fn pu_exceed_share(prior_min: f64, prior_max: f64, draws: usize, seed: u64) -> (f64, f64, f64) {
    let (pi, tau, delta) = (0.3, 0.1, 0.05);
    let (n_pos, n_unl, n_train) = (300, 2000, 2000);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let unlabeled_sample = |rng: &mut ChaCha8Rng, n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| {
                let lo = if rng.gen::<f64>() < pi { 0.5 } else { 0.0 };
                lo + rng.gen::<f64>()
            })
            .collect()
    };
    let (mut over, mut fpr_sum, mut tpr_sum) = (0usize, 0.0, 0.0);
    for _ in 0..draws {
        // The scorer's training data (independent of the calibration sets) fixes the grid.
        let mut training = unlabeled_sample(&mut rng, n_train);
        training.extend(uniforms(&mut rng, n_pos, 0.5));
        let candidates = candidate_grid(&training, DEFAULT_CANDIDATES);
        let positives = uniforms(&mut rng, n_pos, 0.5);
        let unlabeled = unlabeled_sample(&mut rng, n_unl);
        let r = pu_umbrella(
            &candidates,
            &positives,
            &unlabeled,
            tau,
            delta,
            prior_min,
            prior_max,
        )
        .expect("this much data certifies some candidate");
        let fpr = true_fpr(r.threshold);
        over += usize::from(fpr > tau);
        fpr_sum += fpr;
        tpr_sum += (1.5 - r.threshold).clamp(0.0, 1.0);
    }
    let draws = draws as f64;
    (over as f64 / draws, fpr_sum / draws, tpr_sum / draws)
}

/// The union bound over 2·200 Clopper–Pearson intervals (and, with [0.25, 0.35], the prior's
/// slack) makes this guarantee loose: in practice no draw exceeds τ. The sharp checks of its
/// parts are the test below and the unit tests of the bounds.
#[test]
fn pu_umbrella_exceeds_tau_at_most_delta_of_the_time() {
    let (delta, draws) = (0.05, 2_000);
    for (prior_min, prior_max, seed) in [(0.25, 0.35, 11), (0.3, 0.3, 12)] {
        let (share, mean_fpr, mean_tpr) = pu_exceed_share(prior_min, prior_max, draws, seed);
        println!(
            "pu-umbrella [{prior_min}, {prior_max}]: FPR > tau in {share} of {draws} draws; \
             mean FPR {mean_fpr:.4}, mean TPR {mean_tpr:.4}"
        );
        assert!(share <= allowed_share(delta, draws), "{share}");
        // A usable threshold, not the top of the grid.
        assert!(mean_tpr > 0.3, "{mean_tpr}");
    }
}

/// A sharp check of the unlabeled side: with π = 0 the unlabeled are all negatives, the bound is
/// the Clopper–Pearson upper bound on the FPR at level δ/2, and a single candidate whose FPR is
/// just over τ must be certified in at most δ/2 of the draws — but not far fewer, which would
/// betray a wrong level or an off-by-one count.
#[test]
fn pu_umbrella_single_candidate_is_certified_at_most_half_delta_of_the_time() {
    let (tau, delta, draws, n_unl) = (0.1, 0.05, 4_000, 2000);
    let candidate = 0.9 - 1e-9;
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let positives = [1.0];
    let mut certified = 0usize;
    for _ in 0..draws {
        let unlabeled = uniforms(&mut rng, n_unl, 0.0);
        match pu_umbrella(&[candidate], &positives, &unlabeled, tau, delta, 0.0, 0.0) {
            Ok(r) => {
                assert_eq!(r.threshold, candidate);
                certified += 1;
            }
            Err(ThresholdError::NotCertified { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let share = certified as f64 / draws as f64;
    println!("pu-umbrella, one candidate with FPR just over tau: certified in {share} of {draws}");
    assert!(share <= allowed_share(delta / 2.0, draws), "{share}");
    assert!(share > delta / 10.0, "absurdly conservative: {share}");
}
