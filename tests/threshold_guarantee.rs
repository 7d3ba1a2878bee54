//! The certified thresholds' guarantees, checked by simulation on synthetic scores whose FPR and
//! TPR are known exactly: negatives ~ U(0, 1), so FPR(t) = 1 − t on [0, 1]; positives ~ U(a, a + 1)
//! (a = 0.5 unless said), so TPR(t) = a + 1 − t on [a, a + 1]. Each test repeats the calibration
//! over many independent draws (fixed seeds) and compares the share of draws with FPR(t) > τ
//! against δ, allowing three standard errors of the simulation.

use neyman::learn::threshold::{
    pu_candidates, pu_umbrella, umbrella, umbrella_min_negatives, PuTest, ThresholdError,
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

/// A PU calibration setting: π, the prior interval given, τ, held-out and training sizes, and
/// the positives' lower end a.
struct Pu {
    pi: f64,
    prior: (f64, f64),
    tau: f64,
    held_out: (usize, usize),
    training: (usize, usize),
    positives_from: f64,
}

/// The setting of the issue: π = 0.3, n_P′ = 300, n_U′ = 2000, τ = 10 %; trained on as many.
const SYNTHETIC: Pu = Pu {
    pi: 0.3,
    prior: (0.3, 0.3),
    tau: 0.1,
    held_out: (300, 2000),
    training: (300, 2000),
    positives_from: 0.5,
};

/// Over `draws` draws of training and held-out scores: (share of draws with FPR(t̂) > τ, mean
/// FPR(t̂), mean TPR(t̂), share refused); a refusal counts as FPR 0 and TPR 0.
fn pu_draws(s: &Pu, delta: f64, draws: usize, seed: u64) -> (f64, f64, f64, f64) {
    let (n_pos, n_unl) = s.held_out;
    let test = PuTest::new(n_pos, n_unl, s.tau, delta, s.prior.0, s.prior.1).expect("valid");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let unlabeled_sample = |rng: &mut ChaCha8Rng, n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| {
                let lo = if rng.gen::<f64>() < s.pi {
                    s.positives_from
                } else {
                    0.0
                };
                lo + rng.gen::<f64>()
            })
            .collect()
    };
    let (mut over, mut refused, mut fpr_sum, mut tpr_sum) = (0usize, 0usize, 0.0, 0.0);
    for _ in 0..draws {
        // The scorer's training rows (independent of the held-out ones) fix the candidates.
        let mut training = uniforms(&mut rng, s.training.0, s.positives_from);
        training.extend(unlabeled_sample(&mut rng, s.training.1));
        let path = pu_candidates(&training);
        let positives = uniforms(&mut rng, n_pos, s.positives_from);
        let unlabeled = unlabeled_sample(&mut rng, n_unl);
        match test.certify(&path, &positives, &unlabeled) {
            Ok(r) => {
                let fpr = true_fpr(r.threshold);
                over += usize::from(fpr > s.tau);
                fpr_sum += fpr;
                tpr_sum += (s.positives_from + 1.0 - r.threshold).clamp(0.0, 1.0);
                assert_eq!(r.fpr_bound, Some(s.tau));
            }
            Err(ThresholdError::NotCertified { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    let draws = draws as f64;
    (
        over as f64 / draws,
        fpr_sum / draws,
        tpr_sum / draws,
        refused as f64 / draws,
    )
}

/// Settings where the certificate binds (the prior known exactly): the FPR exceeds τ in close to
/// δ of the draws, never more than δ plus noise.
#[test]
fn pu_umbrella_exceeds_tau_at_most_delta_of_the_time() {
    let (delta, draws) = (0.05, 10_000);
    let good_scorer = Pu {
        tau: 0.05,
        held_out: (450, 3000),
        training: (450, 3000),
        positives_from: 0.9,
        ..SYNTHETIC
    };
    for (name, setting, seed) in [
        ("synthetic", &SYNTHETIC, 11),
        ("good scorer", &good_scorer, 12),
    ] {
        let (share, fpr, tpr, refused) = pu_draws(setting, delta, draws, seed);
        println!(
            "pu-umbrella {name}: FPR > tau in {share} of {draws} draws; mean FPR {fpr:.4}, \
             mean TPR {tpr:.4}, refused {refused}"
        );
        assert!(share <= allowed_share(delta, draws), "{name}: {share}");
        // It binds: a certificate that never errs would be giving TPR away.
        assert!(share > delta / 4.0, "{name}: {share}");
    }
}

/// The tightness the Bonferroni certificate lacked (mean FPR ≈ 0.09·τ with π known, 0.01·τ with
/// the interval [0.25, 0.35], mean TPR 0.47 / 0.40): the chosen threshold's mean true FPR is at
/// least 0.4·τ with π known, and the TPR is asserted (measured 0.57 / 0.54 over 2 000 draws; the
/// interval alone caps the FPR at 0.68·τ even with unlimited data).
#[test]
fn pu_umbrella_certifies_close_to_tau() {
    let (delta, draws) = (0.05, 2_000);
    let interval = Pu {
        prior: (0.25, 0.35),
        ..SYNTHETIC
    };
    for (setting, min_fpr, min_tpr, seed) in
        [(&SYNTHETIC, 0.4, 0.55, 21), (&interval, 0.3, 0.52, 22)]
    {
        let (share, fpr, tpr, refused) = pu_draws(setting, delta, draws, seed);
        println!(
            "pu-umbrella prior {:?}: mean FPR {fpr:.4} ({:.2} tau), mean TPR {tpr:.4}, FPR > tau \
             in {share}, refused {refused}",
            setting.prior,
            fpr / setting.tau
        );
        assert!(fpr >= min_fpr * setting.tau, "{:?}: {fpr}", setting.prior);
        assert!(tpr >= min_tpr, "{:?}: {tpr}", setting.prior);
        assert_eq!(refused, 0.0);
    }
}

/// What limits shuttle at τ = 1 % (docs/certificates.md §2, "What it still costs"): a perfect
/// scorer (every positive above every negative), π 0.0512, the prior interval ± 15 %, and
/// `neyman eval`'s held-out sizes on shuttle made PU (half of ~32 000 unlabeled and ~690
/// labelled training positives) certifies about 0.78 (measured 0.776 over 300 draws): the
/// interval uses (π − π_min)·TPR ≈ 0.0077·TPR of the 0.0096 budget, the unlabeled flag rate's
/// noise the rest. The real scorers reach 0.758 there. Holding out 70 % gets past 0.8 (0.840).
#[test]
fn a_perfect_scorer_on_shuttle_sizes_certifies_about_three_quarters_at_one_percent() {
    let half = Pu {
        pi: 0.0512,
        prior: (0.0435, 0.0589),
        tau: 0.01,
        held_out: (343, 16_000),
        training: (344, 16_000),
        positives_from: 1.0,
    };
    let seventy = Pu {
        held_out: (481, 22_400),
        training: (206, 9_600),
        ..half
    };
    let draws = 300;
    let (share, fpr, half_tpr, refused) = pu_draws(&half, 0.05, draws, 31);
    println!("perfect scorer, half held out: TPR {half_tpr:.3}, FPR {fpr}, refused {refused}");
    assert_eq!(share, 0.0);
    assert!(fpr < 0.1 * half.tau, "{fpr}");
    assert!((0.7..0.8).contains(&half_tpr), "{half_tpr}");
    let (_, _, seventy_tpr, _) = pu_draws(&seventy, 0.05, draws, 32);
    println!("perfect scorer, 70 % held out: TPR {seventy_tpr:.3}");
    assert!(seventy_tpr > 0.8, "{seventy_tpr}");
}

/// A sharp check of the test's level: with π = 0 the unlabeled rows are all negatives and a
/// single candidate whose FPR is just over τ must be certified in at most δ of the draws — but
/// not far fewer, which would betray a wrong level or an off-by-one count.
#[test]
fn pu_umbrella_single_candidate_is_certified_at_most_delta_of_the_time() {
    let (tau, delta, draws, n_unl) = (0.1, 0.05, 10_000, 2000);
    let candidate = 0.9 - 1e-9;
    let test = PuTest::new(1, n_unl, tau, delta, 0.0, 0.0).expect("valid");
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let positives = [1.0];
    let mut certified = 0usize;
    for _ in 0..draws {
        let unlabeled = uniforms(&mut rng, n_unl, 0.0);
        match test.certify(&[candidate], &positives, &unlabeled) {
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
    assert!(share <= allowed_share(delta, draws), "{share}");
    assert!(share > delta / 2.0, "absurdly conservative: {share}");
    // The one-call form agrees.
    let unlabeled = uniforms(&mut rng, n_unl, 0.0);
    assert_eq!(
        pu_umbrella(&[candidate], &positives, &unlabeled, tau, delta, 0.0, 0.0),
        test.certify(&[candidate], &positives, &unlabeled)
    );
}
