//! `neyman eval --algo cuts3vm` and `neyman bench cuts3vm`: trials of the transductive
//! protocol of the CutS3VM paper (seed 002 §4).
//!
//! Each of `--repeats` trials hides the labels of a fully labelled file except the rows
//! `--labeled-fraction` / `--labeled-count` keep (drawn with the trial's seed), fits CutS3VM
//! on every row (features scaled over all rows, labelled and unlabeled) and scores the rows
//! made 0 against their true labels. On the same split and scaling it fits the labelled-only
//! baseline: the same objective with C_u = 0 under the same centring and b = 2π − 1 (CutS3VM's
//! own first iterate), so the paired difference isolates what the unlabeled rows add.
//! `--prior oracle` takes π per trial as the true positive share of the rows made 0 (the
//! paper's protocol); a number is used as given; without `--prior`, the labelled share.

use std::sync::atomic::AtomicBool;

use serde_json::{json, Value};

use super::args::{
    AlgorithmName, BenchCuts3vmArgs, EvalArgs, LabelledArgs, ModelArgs, PriorArg, ReportFormat,
};
use super::eval::{jobs, run_repeats};
use super::progress::Progress;
use super::{read_data, CliError};
use crate::data::{read, Dataset, Label, LabelledRows, Scaler};
use crate::learn::s3vm::cut::{CutS3vmModel, CutS3vmValidParams};
use crate::learn::s3vm::{labelled_prior, PriorSource};
use crate::learn::spec::{Algorithm, AlgorithmSpec};

/// One trial's outcome.
struct Trial {
    seed: u64,
    labelled: usize,
    unlabeled: usize,
    prior_used: f64,
    accuracy: f64,
    baseline_accuracy: f64,
    model: CutS3vmModel,
}

impl Trial {
    fn json(&self) -> Value {
        let r = &self.model.report;
        json!({
            "seed": self.seed,
            "labelled": self.labelled,
            "unlabeled": self.unlabeled,
            "prior_used": self.prior_used,
            "accuracy": self.accuracy,
            "baseline_accuracy": self.baseline_accuracy,
            "rounds": r.rounds,
            "cccp_steps": r.cccp_steps,
            "objective": r.objective,
            "converged": r.converged,
            "stop_reason": r.stop_reason,
            "train_seconds": r.train_seconds,
        })
    }
}

pub(super) fn s3vm_eval(args: &EvalArgs, cancel: &AtomicBool) -> Result<(), CliError> {
    let rule = required_rule(&args.labelled, "eval --algo cuts3vm")?;
    args.model.require_cl_cu()?;
    if args.repeats == 0 {
        return Err(CliError::Usage("--repeats must be at least 1".into()));
    }
    let data = read_data(&args.data)?;
    let source = prior_source(&args.model);
    // The flags, checked once before the trials (π is each trial's).
    solver(&args.model, &data, 0.5, args.seed)?;
    let jobs = jobs(args.jobs)?;
    let progress = Progress::new(args.quiet, "cuts3vm trials", args.repeats, "trials");
    let trials = run_repeats(args.repeats, jobs, &progress, |r| {
        let seed = args.seed.wrapping_add(r as u64);
        let split = Split::new(&data, rule, seed, &args.model)?;
        let solver = solver(&args.model, &split.data, split.prior, args.seed)?;
        let model = solver.fit(&split.data, cancel)?;
        let baseline = solver.labelled_only().fit(&split.data, cancel)?;
        Ok(Trial {
            seed,
            labelled: split.data.len() - split.hidden.len(),
            unlabeled: split.hidden.len(),
            prior_used: split.prior,
            accuracy: split.accuracy(&model),
            baseline_accuracy: split.accuracy(&baseline),
            model,
        })
    })?;
    drop(progress);
    let report = summary(args, source, &trials);
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => println!(
            "cuts3vm, {} trials: transductive accuracy {:.4} ± {:.4}, labelled-only baseline \
             {:.4}; paired difference {:+.4} (SE {:.4}); prior {}",
            trials.len(),
            report["accuracy_mean"].as_f64().unwrap_or(f64::NAN),
            report["accuracy_sd"].as_f64().unwrap_or(f64::NAN),
            report["baseline_accuracy_mean"]
                .as_f64()
                .unwrap_or(f64::NAN),
            report["paired_diff_mean"].as_f64().unwrap_or(f64::NAN),
            report["paired_diff_se"].as_f64().unwrap_or(f64::NAN),
            report["prior_source"],
        ),
    }
    Ok(())
}

/// One trial's data: the file with the labels `rule` hides (drawn with `seed`), scaled over
/// all its rows, the true labels, the rows made 0 and π per `--prior`.
struct Split {
    data: Dataset,
    truth: Vec<Label>,
    hidden: Vec<usize>,
    prior: f64,
}

impl Split {
    fn new(
        data: &Dataset,
        rule: LabelledRows,
        seed: u64,
        model: &ModelArgs,
    ) -> Result<Split, CliError> {
        let mut split = data.clone();
        let truth = split.hide_labels(rule, seed)?;
        let hidden = split.indices_of(Label::Unlabeled);
        let prior = match model.prior {
            Some(PriorArg::Value(p)) => p,
            Some(PriorArg::Oracle) => {
                let positive = hidden
                    .iter()
                    .filter(|&&i| truth[i] == Label::Positive)
                    .count();
                positive as f64 / hidden.len().max(1) as f64
            }
            None => labelled_prior(&split.labels).unwrap_or(0.5),
        };
        let scaler = Scaler::fit(model.scale.into(), &split.rows);
        let data = Dataset {
            rows: scaler.transform(&split.rows),
            ..split
        };
        Ok(Split {
            data,
            truth,
            hidden,
            prior,
        })
    }

    /// The share of the rows made 0 whose true label `model` gives (score > 0 means +1).
    fn accuracy(&self, model: &CutS3vmModel) -> f64 {
        let right = self
            .hidden
            .iter()
            .filter(|&&i| {
                let f = model.expansion.decision_row(self.data.rows.row(i));
                (f > 0.0) == (self.truth[i] == Label::Positive)
            })
            .count();
        right as f64 / self.hidden.len().max(1) as f64
    }
}

/// Where π comes from under `--prior`; without it, a warning.
fn prior_source(model: &ModelArgs) -> PriorSource {
    match model.prior {
        Some(PriorArg::Value(_)) => PriorSource::Given,
        Some(PriorArg::Oracle) => PriorSource::Oracle,
        None => {
            tracing::warn!(
                "no --prior: π is each trial's labelled positive share, clamped to [0.05, 0.95] \
                 (the paper's protocol is --prior oracle)"
            );
            PriorSource::Labelled
        }
    }
}

/// The checked CutS3VM solver of the model flags at π = `prior`, for `data`'s dimension
/// (`seed` draws the Nyström landmarks).
fn solver(
    model: &ModelArgs,
    data: &Dataset,
    prior: f64,
    seed: u64,
) -> Result<CutS3vmValidParams, CliError> {
    model.require_cl_cu()?;
    let mut spec = model.learner_spec(AlgorithmName::Cuts3vm, f64::NAN);
    if let AlgorithmSpec::CutS3vm(s) = &mut spec.algorithm {
        s.prior = Some(prior);
    }
    spec.seed = seed;
    match spec.check()?.solver(data.rows.n_features())? {
        Algorithm::CutS3vm(params) => Ok(params),
        _ => Err(CliError::Usage(
            "--algo cuts3vm built another solver".into(),
        )),
    }
}

/// The labelled-row rule of the flags, required here.
fn required_rule(labelled: &LabelledArgs, command: &str) -> Result<LabelledRows, CliError> {
    labelled.rule().ok_or_else(|| {
        CliError::Usage(format!(
            "{command} needs --labeled-fraction F or --labeled-count N (which rows keep their \
             label)"
        ))
    })
}

/// Mean and sample standard deviation.
fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = if values.len() > 1 {
        values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

fn summary(args: &EvalArgs, source: PriorSource, trials: &[Trial]) -> Value {
    let accuracy: Vec<f64> = trials.iter().map(|t| t.accuracy).collect();
    let baseline: Vec<f64> = trials.iter().map(|t| t.baseline_accuracy).collect();
    let diff: Vec<f64> = trials
        .iter()
        .map(|t| t.accuracy - t.baseline_accuracy)
        .collect();
    let (accuracy_mean, accuracy_sd) = mean_sd(&accuracy);
    let (baseline_mean, baseline_sd) = mean_sd(&baseline);
    let (diff_mean, diff_sd) = mean_sd(&diff);
    json!({
        "algo": "cuts3vm",
        "data": args.data.data.display().to_string(),
        "repeats": trials.len(),
        "cl": args.model.cl,
        "cu": args.model.cu,
        "epsilon": args.model.epsilon,
        "prior_source": source,
        "accuracy_mean": accuracy_mean,
        "accuracy_sd": accuracy_sd,
        "baseline_accuracy_mean": baseline_mean,
        "baseline_accuracy_sd": baseline_sd,
        "paired_diff_mean": diff_mean,
        "paired_diff_se": diff_sd / (trials.len() as f64).sqrt(),
        "converged": trials.iter().filter(|t| t.model.report.converged).count(),
        "trials": trials.iter().map(Trial::json).collect::<Vec<_>>(),
    })
}

/// `neyman bench cuts3vm`: training time at each `--n` (the first N rows of the file in an
/// order shuffled with `--seed`, labels hidden per the labelled-row flags), the median of
/// `--repeats` fits taken round the sizes, and the time ratio of the largest size to the
/// smallest against their size ratio (near-linear time means t_ratio close to n_ratio).
pub fn bench(args: &BenchCuts3vmArgs, cancel: &AtomicBool) -> Result<(), CliError> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;

    let rule = required_rule(&args.labelled, "bench cuts3vm")?;
    args.model.require_cl_cu()?;
    if args.n.is_empty() || args.repeats == 0 {
        return Err(CliError::Usage(
            "--n must list at least one size and --repeats must be at least 1".into(),
        ));
    }
    let data = read(&args.data, &args.read.options(false))?;
    let mut sizes = args.n.clone();
    sizes.sort_unstable();
    sizes.dedup();
    if let Some(&n) = sizes.iter().find(|&&n| n < 2 || n > data.len()) {
        return Err(CliError::Usage(format!(
            "--n {n}: sizes must be between 2 and the file's {} rows",
            data.len()
        )));
    }
    let source = prior_source(&args.model);
    let mut order: Vec<usize> = (0..data.len()).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(args.seed));
    let splits = sizes
        .iter()
        .map(|&n| Split::new(&data.select(&order[..n]), rule, args.seed, &args.model))
        .collect::<Result<Vec<_>, _>>()?;
    let solvers = splits
        .iter()
        .map(|s| solver(&args.model, &s.data, s.prior, args.seed))
        .collect::<Result<Vec<_>, _>>()?;
    let mut seconds = vec![Vec::with_capacity(args.repeats); sizes.len()];
    let mut models = vec![None; sizes.len()];
    let progress = Progress::new(false, "bench cuts3vm", args.repeats, "repeats");
    // Repeats go round the sizes, so a change in the machine's load hits each alike.
    for _ in progress.over(0..args.repeats) {
        for (i, (split, solver)) in splits.iter().zip(&solvers).enumerate() {
            let start = std::time::Instant::now();
            let model = solver.fit(&split.data, cancel)?;
            seconds[i].push(start.elapsed().as_secs_f64());
            models[i] = Some(model);
        }
    }
    drop(progress);
    let mut results = Vec::new();
    let mut medians = Vec::new();
    for (i, split) in splits.iter().enumerate() {
        let Some(model) = &models[i] else { continue };
        let mut sorted = seconds[i].clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        medians.push(median);
        let r = &model.report;
        results.push(json!({
            "n": split.data.len(),
            "labelled": split.data.len() - split.hidden.len(),
            "prior_used": split.prior,
            "median_seconds": median,
            "seconds": seconds[i],
            "rounds": r.rounds,
            "constraints": r.constraints,
            "cccp_steps": r.cccp_steps,
            "objective": r.objective,
            "converged": r.converged,
            "stop_reason": r.stop_reason,
            "accuracy": split.accuracy(model),
        }));
    }
    let (first, last) = (sizes[0] as f64, sizes[sizes.len() - 1] as f64);
    let t_ratio = match (medians.first(), medians.last()) {
        (Some(&a), Some(&b)) if a > 0.0 => Some(b / a),
        _ => None,
    };
    let report = json!({
        "data": args.data.display().to_string(),
        "cl": args.model.cl,
        "cu": args.model.cu,
        "epsilon": args.model.epsilon,
        "prior_source": source,
        "repeats": args.repeats,
        "sizes": results,
        "n_ratio": last / first,
        "t_ratio": t_ratio,
    });
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => {
            for r in &results {
                println!(
                    "n {:>8}: {:.4}s (median of {}), {} rounds, converged: {}, accuracy {:.4}",
                    r["n"],
                    r["median_seconds"].as_f64().unwrap_or(0.0),
                    args.repeats,
                    r["rounds"],
                    r["converged"],
                    r["accuracy"].as_f64().unwrap_or(0.0),
                );
            }
            if let Some(t) = t_ratio {
                println!(
                    "t(n_max)/t(n_min): {t:.2} for n_max/n_min = {:.2}",
                    last / first
                );
            }
        }
    }
    Ok(())
}
