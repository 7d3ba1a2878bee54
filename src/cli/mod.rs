//! The subcommands' work, called by `main.rs` once clap has parsed the arguments.
//!
//! Every command returns a [`CliError`] whose [`CliError::exit_code`] is 2 for usage or
//! configuration mistakes and 1 for failures at run time (bad data, I/O, solver errors).
//!
//! Here: `train`, `score`, `model inspect`, `config check` and the dispatch of `eval`. The
//! others have a file each: [`args`] (the clap definitions and the flags' help), [`daemon`]
//! (`run`, `replay`), [`kafka`] (`record`, `replay --to-kafka`), [`stream`] (`stream make`),
//! [`bench`](mod@bench) and [`bench_kafka`] (`bench ...`), `eval` (the PU evaluation), `np_eval` (the
//! Neyman–Pearson protocol) with `np_cells` (its plan and per-split cells), [`s3vm`] (the
//! transductive trials of `eval --algo cuts3vm` and `bench cuts3vm`) and `baselines`
//! (the linear-SVM baselines it compares against), [`sdp`] (`bench sdp`: the exact S3VM's root
//! SDP, the own engine against CSDP) with [`csdp`] (the CSDP binary driven through SDPA
//! files), [`certify`] (`certify`: the exact S3VM's branch-and-bound), [`plot`] (ROC plots), `plot_blocks` (the
//! per-block chart of `replay --plot`), [`prior`] (bounds on the positive share of a file's
//! unlabeled rows), `progress` (counts and ETA of long commands on stderr) and [`log`] (the
//! JSON log lines of `log.format = "json"`).

pub mod args;
mod baselines;
pub mod bench;
pub mod bench_kafka;
pub mod certify;
pub mod csdp;
pub mod daemon;
mod eval;
pub mod kafka;
pub mod log;
mod np_cells;
mod np_eval;
pub mod plot;
mod plot_blocks;
pub mod prior;
mod progress;
pub mod s3vm;
pub mod sdp;
pub mod stream;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use serde_json::json;

use crate::config::LoadedConfig;
use crate::data::{read, DataError, Dataset, Label, Rows};
use crate::learn::calibrate::CalibrateError;
use crate::learn::metrics::Confusion;
use crate::learn::model::{Fingerprint, Model, ModelError};
use crate::learn::prior::resolve_training_prior;
use crate::learn::s3vm::cut::CutError;
use crate::learn::s3vm::nystrom::NystromError;
use crate::learn::s3vm::{labelled_prior, PriorSource};
use crate::learn::spec::{model_of, AlgorithmSpec, LearnerSpec, SpecError};
use crate::learn::tfpl::TfplValidParams;
use crate::learn::threshold::ThresholdResult;
use crate::learn::usmo::{UsmoError, UsmoValidParams};
use crate::learn::Scorer;

use args::{DataArgs, ModelArgs, ReportFormat, ScoreArgs, TrainArgs};
use progress::FitProgress;

/// `neyman eval`: with `--tau`, the Neyman–Pearson protocol (`np_eval.rs`); without, the PU
/// evaluation (`eval.rs`), or for cuts3vm the transductive protocol (`s3vm.rs`).
pub fn eval(args: &args::EvalArgs, cancel: &AtomicBool) -> Result<(), CliError> {
    if args.algo == args::AlgorithmName::Cuts3vm && args.threshold.tau.is_empty() {
        return s3vm::s3vm_eval(args, cancel);
    }
    args.model.refuse_oracle("this eval")?;
    if args.threshold.tau.is_empty() {
        eval::pu_eval(args, cancel)
    } else {
        np_eval::np_eval(args, cancel)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag or configuration mistake: exit code 2.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Data(DataError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("training failed: {0}")]
    Solver(UsmoError),
    #[error("training failed: {0}")]
    Training(String),
    #[error("cannot calibrate the threshold: {0}")]
    Threshold(String),
    #[error(transparent)]
    Kafka(#[from] crate::stream::kafka::KafkaError),
    #[error("daemon: {0}")]
    Daemon(String),
    #[error(transparent)]
    Run(#[from] crate::daemon::DaemonError),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) | CliError::Run(crate::daemon::DaemonError::Usage(_)) => 2,
            _ => 1,
        }
    }

    fn file(path: &Path, message: impl std::fmt::Display) -> CliError {
        CliError::File {
            path: path.display().to_string(),
            message: message.to_string(),
        }
    }
}

impl From<CalibrateError> for CliError {
    fn from(e: CalibrateError) -> CliError {
        match e {
            CalibrateError::Usmo(u) => u.into(),
            CalibrateError::Needs(..) => CliError::Usage(e.to_string()),
            CalibrateError::Threshold(_) | CalibrateError::Uncertified { .. } => {
                CliError::Threshold(e.to_string())
            }
            CalibrateError::Tfpl(t) => CliError::Training(t.to_string()),
            CalibrateError::CutS3vm(c) => c.into(),
            CalibrateError::Prior(p) => p.into(),
        }
    }
}

impl From<UsmoError> for CliError {
    fn from(e: UsmoError) -> CliError {
        match e {
            UsmoError::Param(_) | UsmoError::Kernel(_) | UsmoError::WarmStart(_) => {
                CliError::Usage(e.to_string())
            }
            other => CliError::Solver(other),
        }
    }
}

/// A CutS3VM setting or data that cannot train it is a usage error (exit 2): the flags or the
/// file's labels must change; a non-finite solution is a training failure.
impl From<CutError> for CliError {
    fn from(e: CutError) -> CliError {
        match e {
            CutError::NonFinite | CutError::Nystrom(NystromError::Eigen) => {
                CliError::Training(e.to_string())
            }
            other => CliError::Usage(other.to_string()),
        }
    }
}

/// Data errors caused by a flag's value are usage errors (exit 2); the rest are about the file.
impl From<DataError> for CliError {
    fn from(e: DataError) -> CliError {
        match e {
            DataError::UnknownFormat { .. }
            | DataError::BadFraction(_)
            | DataError::Labelled(_)
            | DataError::BadRowRange { .. } => CliError::Usage(e.to_string()),
            other => CliError::Data(other),
        }
    }
}

/// Reads the data file of `--data` with its reading flags.
fn read_data(args: &DataArgs) -> Result<Dataset, CliError> {
    Ok(read(&args.data, &args.read.options(false))?)
}

impl From<SpecError> for CliError {
    fn from(e: SpecError) -> CliError {
        match e {
            SpecError::Usmo(u) => u.into(),
            SpecError::Tfpl(t) => CliError::Usage(t.to_string()),
            SpecError::CutS3vm(c) => c.into(),
        }
    }
}

/// Checked USMO parameters from the flags, with λ given explicitly.
fn usmo_params(
    args: &ModelArgs,
    lambda: f64,
    n_features: usize,
) -> Result<UsmoValidParams, CliError> {
    args.required_prior()?;
    let spec = args.usmo_spec(lambda);
    Ok(spec.params(&args.kernel_spec(), &args.solver_limits(), n_features)?)
}

/// Checked τ-FPL parameters from the flags, with R given explicitly.
fn tfpl_params(
    args: &ModelArgs,
    rank_tau: f64,
    reg: f64,
    n_features: usize,
) -> Result<TfplValidParams, CliError> {
    args.tfpl_spec(reg)
        .params(
            rank_tau,
            &args.kernel_spec(),
            &args.solver_limits(),
            n_features,
        )
        .map_err(|e| CliError::Usage(e.to_string()))
}

/// Reads a model file of any layout neyman writes or wrote: one of `neyman train`, or one the
/// daemon stored in its state directory (whose provenance is not needed here).
fn read_model(path: &Path) -> Result<Model, CliError> {
    let bytes = std::fs::read(path).map_err(|e| CliError::file(path, e))?;
    crate::learn::model::from_file_bytes(&bytes)
        .map(|file| file.model)
        .map_err(|e| CliError::file(path, e))
}

/// Writes a file atomically: a temporary file beside it, fsync, rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    write_atomic_with(path, |file| {
        file.write_all(bytes).map_err(|e| CliError::file(path, e))
    })
}

/// Like [`write_atomic`], with `fill` writing the content (for output too large to hold in
/// memory). The temporary file is removed when `fill` or a later step fails.
fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<(), CliError>,
) -> Result<(), CliError> {
    crate::files::write_atomic_with(path, fill, |e| CliError::file(path, e))
}

/// `neyman train`
pub fn train(args: &TrainArgs, cancel: &AtomicBool) -> Result<(), CliError> {
    let mut data = read_data(&args.data)?;
    if let Some(fraction) = args.pu_labeled_fraction {
        data.pu_relabel(fraction, args.seed)?;
    }
    if let Some(rule) = args.labelled.rule() {
        data.hide_labels(rule, args.seed)?;
    }
    if let Some(spec) = &args.rows {
        data = data.slice_rows(spec)?;
    }
    if args.data.negatives_as_unlabeled {
        data.negatives_as_unlabeled();
    }
    if args.data.unlabeled_as_negative {
        data.unlabeled_as_negatives();
    }
    let n_features = data.rows.n_features();
    let progress = FitProgress::new(args.quiet);
    let mut spec = args.learner_spec()?;
    spec.limits.observer = progress.observer();
    // The split comes first: the rows that calibrate the threshold shape neither the scorer,
    // nor its scaler, nor the π it is trained with.
    let held_out = spec.held_out(&data)?;
    let (spec, _) = resolve_training_prior(&spec, &data, &held_out, cancel)?;
    let (spec, prior_source) = s3vm_prior(spec, &data, &held_out)?;
    let learner = spec.check()?;
    let previous = match &args.warm_start {
        Some(path) => Some(read_model(path)?),
        None => None,
    };
    let spec = learner.threshold_spec();
    // A warm start keeps the previous scaler so its kernel values stay valid.
    let (scaler, previous_fit) = match &previous {
        Some(prev) if prev.n_features() != n_features => {
            return Err(CliError::Usage(format!(
                "--warm-start model has {} features, the data {}",
                prev.n_features(),
                n_features
            )))
        }
        Some(prev) => match learner.warm_start(prev) {
            Some((scaler, fit)) => (scaler, Some(fit)),
            None => {
                return Err(CliError::Usage(format!(
                    "--warm-start model is a {} model, not {}",
                    prev.algorithm(),
                    learner.name()
                )))
            }
        },
        None => (learner.training_scaler(&data, &held_out), None),
    };
    let scaled = Dataset {
        rows: scaler.transform(&data.rows),
        labels: data.labels.clone(),
        ids: data.ids.clone(),
    };
    progress.phase("choosing the ranking depth");
    let (learner, rank_choice) =
        learner.with_rank_tau_chosen(&scaled, &held_out, previous_fit.as_ref(), cancel)?;
    let algorithm = learner.solver(n_features)?;
    progress.phase(&format!("training {}", learner.name()));
    let (fit, threshold, prior) = (match &spec {
        Some(spec) => algorithm
            .fit_with_held_out(previous_fit.as_ref(), spec, &scaled, &held_out, cancel)
            .map(|(f, t, p)| (f, Some(t), p)),
        None => algorithm
            .fit(previous_fit.as_ref(), &scaled, cancel)
            .map(|f| (f, None, None))
            .map_err(CalibrateError::from),
    })?;
    drop(progress);
    let model = model_of(
        &algorithm,
        scaler,
        fit,
        Fingerprint::of(&data),
        threshold.clone(),
    );
    let mut report = model.report();
    write_atomic(&args.out, &model.to_file_bytes()?)?;
    if let (Some(t), Some(fields)) = (&threshold, report.as_object_mut()) {
        fields.insert("threshold".into(), json!(t.threshold));
        fields.insert("threshold_method".into(), json!(t.method));
        fields.insert("tau".into(), json!(t.tau));
        fields.insert("delta".into(), json!(t.delta));
        fields.insert("fpr_bound".into(), json!(t.fpr_bound));
        fields.insert("fpr_estimate".into(), json!(t.fpr_estimate));
        fields.insert("tpr_estimate".into(), json!(t.tpr_estimate));
        fields.insert("calibration_size".into(), json!(t.calibration_size()));
    }
    if let (Some(choice), Some(fields)) = (&rank_choice, report.as_object_mut()) {
        fields.insert("rank_tau_search".into(), json!(choice));
    }
    // The depth the solver ranked at (for PU data, π + (1 − π)·the searched depth).
    if let (Some(rank_tau), Some(fields)) =
        (model.details().get("rank_tau"), report.as_object_mut())
    {
        fields.insert("rank_tau".into(), rank_tau.clone());
    }
    if let (Some(source), Some(fields)) = (prior_source, report.as_object_mut()) {
        fields.insert("prior_source".into(), json!(source));
    }
    if let (Some(b), Some(fields)) = (&prior, report.as_object_mut()) {
        fields.insert("prior_estimate".into(), json!(b.estimate));
        fields.insert("prior_lower_bound".into(), json!(b.lower));
        fields.insert("prior_upper_bound".into(), json!(b.upper));
    }
    let cut = matches!(model, Model::CutS3vm(_));
    if model.degenerate() && cut {
        tracing::warn!(
            "the model is degenerate: w = 0, so every row scores b = 2π − 1 and it ranks \
             nothing; scale the features (--scale standard) or change --cl / --cu"
        );
    } else if model.degenerate() {
        tracing::warn!(
            rank_tau = %report["rank_tau"],
            "the model is degenerate: its scores are constant (w = 0 is the τ-FPL optimum at \
             this ranking depth, docs/tau-fpl.md §4.1), so it ranks nothing; rank deeper \
             (--rank-tau auto, or a larger value)"
        );
    }
    if report["converged"] == json!(false) && cut {
        tracing::warn!(
            stop_reason = %report["stop_reason"],
            rounds = %report["rounds"],
            "training stopped before convergence (H(w) > ξ + ε)"
        );
    } else if report["converged"] == json!(false) {
        tracing::warn!(
            iterations = %report["iterations"],
            cancelled = %report["cancelled"],
            "training stopped before convergence"
        );
    }
    let fit_steps = &report[if cut { "rounds" } else { "iterations" }];
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => println!(
            "trained {}: {} {}, converged: {}, {:.3}s{} -> {}",
            model.algorithm(),
            fit_steps,
            if cut {
                "cutting-plane rounds"
            } else {
                "pair/gradient steps"
            },
            report["converged"],
            report["train_seconds"].as_f64().unwrap_or(0.0),
            threshold.as_ref().map_or(String::new(), |t| format!(
                ", threshold {:.6} ({:?}, FPR bound {:?})",
                t.threshold, t.method, t.fpr_bound
            )),
            args.out.display()
        ),
    }
    Ok(())
}

/// CutS3VM's π when `--prior` is absent: the labelled positive share of the training rows
/// (not `held_out`), clamped to [0.05, 0.95], with a warning; and where π came from. Other
/// algorithms pass through.
fn s3vm_prior(
    mut spec: LearnerSpec,
    data: &Dataset,
    held_out: &[bool],
) -> Result<(LearnerSpec, Option<PriorSource>), CliError> {
    let AlgorithmSpec::CutS3vm(s) = &mut spec.algorithm else {
        return Ok((spec, None));
    };
    if s.prior.is_some() {
        return Ok((spec, Some(PriorSource::Given)));
    }
    let training = data.labels.iter().zip(held_out).filter(|(_, &h)| !h);
    let prior = labelled_prior(training.map(|(label, _)| label)).ok_or_else(|| {
        CliError::Usage("cuts3vm needs labelled rows of both classes (1 and -1)".into())
    })?;
    tracing::warn!(
        prior,
        "no --prior: π (the positive share of the unlabeled rows) is taken as the labelled rows' \
         positive share, clamped to [0.05, 0.95]; a wrong π biases the labelling (balance \
         constraint), so give --prior when it is known"
    );
    s.prior = Some(prior);
    Ok((spec, Some(PriorSource::Labelled)))
}

/// `neyman completions SHELL`: the completion script of the whole command line on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<(), CliError> {
    use clap::CommandFactory;
    let mut command = args::Cli::command();
    clap_complete::generate(shell, &mut command, "neyman", &mut std::io::stdout());
    Ok(())
}

/// `neyman man`: the man page (roff, section 1) of the whole command line on stdout, every
/// subcommand included.
pub fn man_page() -> Result<(), CliError> {
    use clap::CommandFactory;
    let command = args::Cli::command();
    let mut out = Vec::new();
    let to_stdout = |e: std::io::Error| CliError::file(Path::new("<stdout>"), e);
    clap_mangen::Man::new(command.clone())
        .render(&mut out)
        .map_err(to_stdout)?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("neyman-{}", sub.get_name());
        let sub = sub
            .clone()
            .display_name(name)
            .version(env!("CARGO_PKG_VERSION"));
        clap_mangen::Man::new(sub)
            .render(&mut out)
            .map_err(to_stdout)?;
    }
    match std::io::stdout().write_all(&out) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(to_stdout),
    }
}

/// `neyman score`: one line per row, `id,score` (CSV) or `{"id","score"}` (JSON Lines).
pub fn score(args: &ScoreArgs) -> Result<(), CliError> {
    let model = read_model(&args.model)?;
    let mut data = read(&args.data, &args.read.options(true))?;
    let want = model.n_features();
    let have = data.rows.n_features();
    match &mut data.rows {
        // LIBSVM files only know the largest index they contain.
        Rows::Sparse(m) if have < want => m.set_n_features(want),
        _ if have != want => {
            return Err(CliError::file(
                &args.data,
                format!("has {have} features, the model expects {want}"),
            ))
        }
        _ => {}
    }
    let mut scores = vec![0.0; data.len()];
    model.score_batch(&data.rows, &mut scores);
    let json_lines = args.out.as_ref().is_some_and(|p| {
        let name = p.to_string_lossy();
        name.ends_with(".jsonl") || name.ends_with(".json")
    });
    let threshold = model.threshold();
    let mut text = String::new();
    if !json_lines {
        text.push_str(if threshold.is_some() {
            "id,score,flagged\n"
        } else {
            "id,score\n"
        });
    }
    for (id, s) in data.ids.iter().zip(&scores) {
        let flagged = threshold.map(|t| t.is_positive(*s));
        match (json_lines, flagged) {
            (true, Some(f)) => {
                text.push_str(&json!({"id": id, "score": s, "flagged": f}).to_string());
                text.push('\n');
            }
            (true, None) => {
                text.push_str(&json!({"id": id, "score": s}).to_string());
                text.push('\n');
            }
            (false, Some(f)) => text.push_str(&format!("{id},{s},{f}\n")),
            (false, None) => text.push_str(&format!("{id},{s}\n")),
        }
    }
    match &args.out {
        Some(path) => write_atomic(path, text.as_bytes())?,
        None => match std::io::stdout().write_all(text.as_bytes()) {
            // Piped into `head`: the reader has what it wanted.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.map_err(|e| CliError::file(Path::new("<stdout>"), e))?,
        },
    }
    let accuracy = LabelledAccuracy::of(&data.labels, &scores, threshold);
    match args.report {
        Some(ReportFormat::Json) => eprintln!("{}", accuracy.to_json(threshold)),
        None if accuracy.labelled() > 0 => match threshold {
            Some(t) => eprintln!("{accuracy} at threshold {}", t.threshold),
            None => eprintln!("the model has no threshold: no accuracy, FPR or TPR"),
        },
        None => {}
    }
    Ok(())
}

/// `score`'s comparison with the file's labels at the model's threshold: positives are rows
/// labelled 1, negatives rows labelled −1; rows labelled 0 (or a file without labels) count
/// in neither. The counts are [`Confusion`]'s; a rate over no rows is `None` here (unknown),
/// not its 0.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct LabelledAccuracy(Confusion);

impl LabelledAccuracy {
    fn of(
        labels: &[Label],
        scores: &[f64],
        threshold: Option<&ThresholdResult>,
    ) -> LabelledAccuracy {
        let Some(t) = threshold else {
            return LabelledAccuracy::default();
        };
        let (flagged, truth): (Vec<bool>, Vec<bool>) = labels
            .iter()
            .zip(scores)
            .filter(|(label, _)| **label != Label::Unlabeled)
            .map(|(label, s)| (t.is_positive(*s), *label == Label::Positive))
            .unzip();
        LabelledAccuracy(Confusion::from_predictions(&flagged, &truth))
    }

    fn labelled(&self) -> usize {
        let c = self.0;
        c.tp + c.fp + c.tn + c.fn_
    }

    fn rate(part: usize, whole: usize) -> Option<f64> {
        (whole > 0).then(|| part as f64 / whole as f64)
    }

    fn to_json(self, threshold: Option<&ThresholdResult>) -> serde_json::Value {
        let c = self.0;
        json!({
            "labelled": self.labelled(),
            "accuracy": Self::rate(c.tp + c.tn, self.labelled()),
            "positives": c.tp + c.fn_,
            "true_positives": c.tp,
            "tpr": Self::rate(c.tp, c.tp + c.fn_),
            "negatives": c.fp + c.tn,
            "false_positives": c.fp,
            "fpr": Self::rate(c.fp, c.fp + c.tn),
            "threshold": threshold.map(|t| t.threshold),
        })
    }
}

/// `Accuracy = 93.10% (856/920), FPR = 2.74% (11/402), TPR = 89.96% (466/518)`.
impl std::fmt::Display for LabelledAccuracy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let percent = |part: usize, whole: usize| match Self::rate(part, whole) {
            Some(r) => format!("{:.2}% ({part}/{whole})", 100.0 * r),
            None => "n/a (0 rows)".to_string(),
        };
        let c = self.0;
        write!(
            f,
            "Accuracy = {}, FPR = {}, TPR = {}",
            percent(c.tp + c.tn, self.labelled()),
            percent(c.fp, c.fp + c.tn),
            percent(c.tp, c.tp + c.fn_)
        )
    }
}

/// `neyman model inspect`: the model's metadata as one JSON object.
/// `neyman config check FILE`: the effective configuration on stdout, or the first problem
/// (exit 2).
/// With a `[kafka]` section, the librdkafka settings of every client `run` makes are checked by
/// librdkafka itself, as `run` would (a TLS protocol on a build without TLS fails here).
pub fn config_check(path: &Path) -> Result<(), CliError> {
    use crate::stream::kafka::{
        admin_config, check_client_config, consumer_config, model_producer_config, producer_config,
        ConsumerRole,
    };

    let loaded = LoadedConfig::load(path).map_err(|e| CliError::Usage(e.to_string()))?;
    if let Some(k) = &loaded.config.kafka {
        for client in [
            consumer_config(k, ConsumerRole::Daemon),
            producer_config(k),
            model_producer_config(k),
            admin_config(k),
        ] {
            check_client_config(k, &client).map_err(|e| {
                CliError::Usage(format!(
                    "{}: [kafka] as librdkafka reads it: {e}",
                    path.display()
                ))
            })?;
        }
    }
    print!("{}", loaded.render());
    Ok(())
}

pub fn inspect(path: &Path) -> Result<(), CliError> {
    let model = read_model(path)?;
    let mut value = json!({
        "algorithm": model.algorithm(),
        "format_version": crate::learn::model::FORMAT_VERSION,
        "n_features": model.n_features(),
        "kernel": model.expansion().kernel,
        "scale": model.scaler().kind(),
        "bias": model.expansion().bias,
        "n_support": model.expansion().coef.len(),
        "threshold": model.threshold(),
    });
    if let (Some(fields), serde_json::Value::Object(more)) =
        (value.as_object_mut(), model.details())
    {
        fields.extend(more);
    }
    println!("{value}");
    Ok(())
}
