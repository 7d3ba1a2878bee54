//! `neyman eval` without `--tau`: repeated PU experiments on a fully labelled file (`--algo
//! usmo` only). With `--tau` the command runs the Neyman–Pearson protocol of the τ-FPL paper
//! instead (`np_eval.rs`), which reuses this file's splits, repeats and λ choice.
//!
//! Each repeat r uses the seed `--seed + r`. Protocols:
//! - `holdout` (default): a stratified split keeps `--test-fraction` of the rows for testing;
//!   the training part is PU-labelled (`--pu-labeled-fraction`) and the model is scored on the
//!   test part against its true labels.
//! - `transductive` (`--transductive`, the USMO paper's protocol): every row is PU-labelled and
//!   trained on; the model is scored on the rows left unlabeled, against their true labels.
//!
//! Without `--lambda`, λ is chosen from {1e-4, 1e-3, 1e-2, 1e-1} by 3-fold cross-validation on
//! the training part, using only its PU labels: the criterion is the unbiased PU zero-one risk
//! R = 2π·FNR_P + flag-rate_U − π (ties go to the smaller λ). A prediction is positive when the
//! decision value is > 0.

use std::sync::atomic::AtomicBool;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::args::{AlgorithmName, EvalArgs, ProtocolArg, ReportFormat};
use super::progress::Progress;
use super::{read_data, usmo_params, CliError};
use crate::data::{Dataset, Label};
use crate::learn::metrics::{f1_for, mean_sd, roc_auc, Confusion, F1Class};
use crate::learn::spec::usmo_scaler;

const LAMBDA_GRID: [f64; 4] = [1e-4, 1e-3, 1e-2, 1e-1];
const CV_FOLDS: usize = 3;

/// One repeat's outcome.
struct Outcome {
    accuracy: f64,
    f1: f64,
    auc: Option<f64>,
    lambda: f64,
    converged: bool,
}

/// Trains on `train` (already PU-labelled, raw features) and returns the decision values of
/// `test` rows.
fn train_and_score(
    args: &EvalArgs,
    lambda: f64,
    train: &Dataset,
    test: &Dataset,
    cancel: &AtomicBool,
) -> Result<(Vec<f64>, bool), CliError> {
    let params = usmo_params(&args.model, lambda, train.rows.n_features())?;
    let scaler = usmo_scaler(args.model.scale.into(), train);
    let scaled = Dataset {
        rows: scaler.transform(&train.rows),
        labels: train.labels.clone(),
        ids: train.ids.clone(),
    };
    let fit = params.fit(&scaled, cancel)?;
    let mut scores = vec![0.0; test.len()];
    fit.expansion
        .decision_batch(&scaler.transform(&test.rows), &mut scores);
    Ok((scores, fit.report.converged))
}

/// λ from the grid by cross-validated PU zero-one risk on a PU-labelled training set.
pub(super) fn choose_lambda(
    args: &EvalArgs,
    train: &Dataset,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<f64, CliError> {
    let prior = args.model.prior_value().unwrap_or(0.5);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_cafe);
    // Folds stratified by PU label so every fold has positives.
    let mut fold_of = vec![0usize; train.len()];
    for label in [Label::Positive, Label::Unlabeled] {
        let mut idx = train.indices_of(label);
        idx.shuffle(&mut rng);
        for (k, &i) in idx.iter().enumerate() {
            fold_of[i] = k % CV_FOLDS;
        }
    }
    let mut best = (f64::INFINITY, LAMBDA_GRID[0]);
    for &lambda in &LAMBDA_GRID {
        let mut risk = 0.0;
        for fold in 0..CV_FOLDS {
            let fit_rows: Vec<usize> = (0..train.len()).filter(|&i| fold_of[i] != fold).collect();
            let held: Vec<usize> = (0..train.len()).filter(|&i| fold_of[i] == fold).collect();
            let (fit, held) = (train.select(&fit_rows), train.select(&held));
            let (scores, _) = train_and_score(args, lambda, &fit, &held, cancel)?;
            let (mut p, mut p_miss, mut u, mut u_flag) = (0.0, 0.0, 0.0, 0.0);
            for (s, l) in scores.iter().zip(&held.labels) {
                match l {
                    Label::Positive => {
                        p += 1.0;
                        p_miss += f64::from(u8::from(*s <= 0.0));
                    }
                    _ => {
                        u += 1.0;
                        u_flag += f64::from(u8::from(*s > 0.0));
                    }
                }
            }
            let fnr = if p > 0.0 { p_miss / p } else { 0.0 };
            let flag = if u > 0.0 { u_flag / u } else { 0.0 };
            risk += 2.0 * prior * fnr + flag - prior;
        }
        if risk < best.0 {
            best = (risk, lambda);
        }
    }
    Ok(best.1)
}

/// A stratified split of row indices by true label: (train, test).
pub(super) fn stratified_split(
    data: &Dataset,
    test_fraction: f64,
    rng: &mut ChaCha8Rng,
) -> (Vec<usize>, Vec<usize>) {
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for label in [Label::Positive, Label::Negative] {
        let mut idx = data.indices_of(label);
        idx.shuffle(rng);
        let n_test = (test_fraction * idx.len() as f64).round() as usize;
        test.extend_from_slice(&idx[..n_test]);
        train.extend_from_slice(&idx[n_test..]);
    }
    train.sort_unstable();
    test.sort_unstable();
    (train, test)
}

fn run_repeat(
    args: &EvalArgs,
    labeled_fraction: f64,
    transductive: bool,
    data: &Dataset,
    repeat: usize,
    cancel: &AtomicBool,
) -> Result<Outcome, CliError> {
    let seed = args.seed.wrapping_add(repeat as u64);
    let (train, test) = if transductive {
        let mut train = data.clone();
        train.pu_relabel(labeled_fraction, seed)?;
        let test = data.select(&train.indices_of(Label::Unlabeled));
        (train, test)
    } else {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (train_idx, test_idx) = stratified_split(data, args.test_fraction, &mut rng);
        let mut train = data.select(&train_idx);
        train.pu_relabel(labeled_fraction, seed)?;
        (train, data.select(&test_idx))
    };
    let lambda = match args.model.lambda {
        Some(l) => l,
        None => choose_lambda(args, &train, seed, cancel)?,
    };
    let (scores, converged) = train_and_score(args, lambda, &train, &test, cancel)?;
    let truth: Vec<bool> = test.labels.iter().map(|&l| l == Label::Positive).collect();
    let predicted: Vec<bool> = scores.iter().map(|&s| s > 0.0).collect();
    let conf = Confusion::from_predictions(&predicted, &truth);
    Ok(Outcome {
        accuracy: conf.accuracy(),
        f1: f1_for(&conf, F1Class::from(args.f1_class)),
        auc: roc_auc(&scores, &truth),
        lambda,
        converged,
    })
}

/// Runs `work(r)` for every repeat `r` on a pool of `jobs` threads (rayon; `--jobs`), the
/// results in repeat order whatever order they finish in, counting each finished repeat in
/// `progress`. Every repeat draws from its own seed, so the results do not depend on `jobs`.
pub(super) fn run_repeats<T: Send>(
    repeats: usize,
    jobs: usize,
    progress: &Progress,
    work: impl Fn(usize) -> Result<T, CliError> + Sync,
) -> Result<Vec<T>, CliError> {
    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.min(repeats).max(1))
        .thread_name(|i| format!("neyman-eval-{i}"))
        .build()
        .map_err(|e| CliError::Usage(format!("--jobs {jobs}: cannot start the threads: {e}")))?;
    pool.install(|| {
        (0..repeats)
            .into_par_iter()
            .map(|r| {
                let out = work(r);
                progress.inc();
                out
            })
            .collect()
    })
}

/// `--jobs`: the threads to run repeats on; by default every core.
pub(super) fn jobs(asked: Option<usize>) -> Result<usize, CliError> {
    match asked {
        Some(0) => Err(CliError::Usage("--jobs must be at least 1".into())),
        Some(n) => Ok(n),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

/// Whether the flags ask for the transductive protocol (`--transductive` or `--protocol
/// transductive`); `--transductive` with `--protocol holdout` is a contradiction.
pub(super) fn transductive(args: &EvalArgs) -> Result<bool, CliError> {
    match (args.transductive, args.protocol) {
        (true, Some(ProtocolArg::Holdout)) => Err(CliError::Usage(
            "--transductive contradicts --protocol holdout".into(),
        )),
        (t, p) => Ok(t || p == Some(ProtocolArg::Transductive)),
    }
}

/// `neyman eval` without `--tau`: the PU evaluation of the USMO paper.
pub(super) fn pu_eval(args: &EvalArgs, cancel: &AtomicBool) -> Result<(), CliError> {
    if args.algo != AlgorithmName::Usmo {
        return Err(CliError::Usage(
            "eval --algo tfpl needs --tau (the Neyman–Pearson protocol)".into(),
        ));
    }
    for (given, flag) in [
        (!args.compare.is_empty(), "--compare"),
        (args.plot.is_some(), "--plot"),
        (args.threshold.threshold.is_some(), "--threshold"),
        (!args.threshold.rank_tau.is_empty(), "--rank-tau"),
    ] {
        if given {
            return Err(CliError::Usage(format!("{flag} needs --tau")));
        }
    }
    let labeled_fraction = args
        .pu_labeled_fraction
        .ok_or_else(|| CliError::Usage("eval --algo usmo needs --pu-labeled-fraction".into()))?;
    if args.repeats == 0 {
        return Err(CliError::Usage("--repeats must be at least 1".into()));
    }
    let transductive = transductive(args)?;
    let fraction_ok = args.test_fraction > 0.0 && args.test_fraction < 1.0;
    if !transductive && !fraction_ok {
        return Err(CliError::Usage(format!(
            "--test-fraction must be in (0, 1), got {}",
            args.test_fraction
        )));
    }
    let data = read_data(&args.data)?;
    if data.count(Label::Unlabeled) > 0 {
        return Err(CliError::file(
            &args.data.data,
            "eval needs a fully labelled file (labels 1 and -1); it has unlabeled (0) rows",
        ));
    }
    // Validate the flags once before spawning work.
    usmo_params(
        &args.model,
        args.model.lambda.unwrap_or(1e-2),
        data.rows.n_features(),
    )?;

    let jobs = jobs(args.jobs)?;
    let progress = Progress::new(args.quiet, "evaluating usmo", args.repeats, "splits");
    let results = run_repeats(args.repeats, jobs, &progress, |r| {
        run_repeat(args, labeled_fraction, transductive, &data, r, cancel)
    })?;
    drop(progress);

    let pick = |f: fn(&Outcome) -> f64| results.iter().map(f).collect::<Vec<_>>();
    let (accuracy_mean, accuracy_sd) = mean_sd(&pick(|o| o.accuracy));
    let (f1_mean, f1_sd) = mean_sd(&pick(|o| o.f1));
    let aucs: Vec<f64> = results.iter().filter_map(|o| o.auc).collect();
    let (auc_mean, auc_sd) = if aucs.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        mean_sd(&aucs)
    };
    let protocol = if transductive {
        "transductive"
    } else {
        "holdout"
    };
    let lambdas = pick(|o| o.lambda);
    let converged_share =
        results.iter().filter(|o| o.converged).count() as f64 / results.len() as f64;
    match args.report {
        Some(ReportFormat::Json) => {
            let nan_as_null = |v: f64| if v.is_finite() { json!(v) } else { json!(null) };
            println!(
                "{}",
                json!({
                    "algo": "usmo",
                    "dataset_rows": data.len(),
                    "repeats": args.repeats,
                    "protocol": protocol,
                    "accuracy_mean": accuracy_mean,
                    "accuracy_sd": accuracy_sd,
                    "f1_mean": f1_mean,
                    "f1_sd": f1_sd,
                    "auc_mean": nan_as_null(auc_mean),
                    "auc_sd": nan_as_null(auc_sd),
                    "results": [],
                    "lambdas": lambdas,
                    "converged_share": converged_share,
                })
            );
        }
        None => println!(
            "usmo {protocol}, {} repeats on {} rows: accuracy {:.4} ± {:.4}, F1 {:.4} ± {:.4}, \
             AUC {:.4} ± {:.4}, λ {:?}",
            args.repeats,
            data.len(),
            accuracy_mean,
            accuracy_sd,
            f1_mean,
            f1_sd,
            auc_mean,
            auc_sd,
            lambdas
        ),
    }
    Ok(())
}
