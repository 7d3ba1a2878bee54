//! The subcommands' work, called by `main.rs` once clap has parsed the arguments.
//!
//! Every command returns a [`CliError`] whose [`CliError::exit_code`] is 2 for usage or
//! configuration mistakes and 1 for failures at run time (bad data, I/O, solver errors).

pub mod args;
mod eval;

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::data::{read, DataError, Dataset, Label, Rows, Scaler};
use crate::learn::kernel::Kernel;
use crate::learn::model::{Fingerprint, Model, ModelError, UsmoEntry};
use crate::learn::usmo::{UsmoError, UsmoParams, UsmoValidParams};
use crate::learn::Scorer;

use args::{Algo, DataArgs, KernelName, ModelArgs, ReportFormat, ScoreArgs, TrainArgs};

pub use eval::eval;

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
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
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

/// Data errors caused by a flag's value are usage errors (exit 2); the rest are about the file.
impl From<DataError> for CliError {
    fn from(e: DataError) -> CliError {
        match e {
            DataError::UnknownFormat { .. }
            | DataError::BadFraction(_)
            | DataError::BadRowRange { .. } => CliError::Usage(e.to_string()),
            other => CliError::Data(other),
        }
    }
}

/// Reads the data file of `--data` with its reading flags.
fn read_data(args: &DataArgs) -> Result<Dataset, CliError> {
    Ok(read(&args.data, &args.read.options(false))?)
}

/// The kernel of the flags; γ defaults to 1/n_features.
fn kernel_of(args: &ModelArgs, n_features: usize) -> Kernel {
    let gamma = args.gamma.unwrap_or(1.0 / n_features.max(1) as f64);
    match args.kernel {
        KernelName::Linear => Kernel::Linear,
        KernelName::Rbf => Kernel::Rbf { gamma },
        KernelName::Poly => Kernel::Poly {
            degree: args.degree,
            gamma,
            coef0: args.coef0,
        },
    }
}

/// Checked USMO parameters from the flags, with λ given explicitly.
fn usmo_params(
    args: &ModelArgs,
    lambda: f64,
    n_features: usize,
) -> Result<UsmoValidParams, CliError> {
    let prior = args
        .prior
        .ok_or_else(|| CliError::Usage("--algo usmo needs --prior".into()))?;
    let mut params = UsmoParams::new(prior, lambda, kernel_of(args, n_features));
    params.tol = args.tol;
    params.max_iter = args.max_iter;
    params.time_limit = args.time_limit;
    params.cache_bytes = args.cache_mb.saturating_mul(1 << 20);
    Ok(params.check()?)
}

/// The training rows' scaler: fitted on the positives and unlabeled rows (the rows USMO trains
/// on), never on evaluation negatives.
fn fit_scaler(args: &ModelArgs, data: &Dataset) -> Scaler {
    let train: Vec<usize> = (0..data.len())
        .filter(|&i| data.labels[i] != Label::Negative)
        .collect();
    Scaler::fit(args.scale.into(), &data.rows.select(&train))
}

/// A spinner on stderr while `work` runs, only when stderr is a terminal and not `--quiet`.
fn with_spinner<T>(quiet: bool, message: &str, work: impl FnOnce() -> T) -> T {
    if quiet || !std::io::stderr().is_terminal() {
        return work();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message.to_owned());
    bar.enable_steady_tick(Duration::from_millis(100));
    let out = work();
    bar.finish_and_clear();
    out
}

fn read_model(path: &Path) -> Result<Model, CliError> {
    let bytes = std::fs::read(path).map_err(|e| CliError::file(path, e))?;
    Model::from_file_bytes(&bytes).map_err(|e| CliError::file(path, e))
}

/// Writes a file atomically: a temporary file beside it, fsync, rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| CliError::Usage(format!("{} is not a file path", path.display())))?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::file(path, e)
    })
}

/// `neyman train`
pub fn train(args: &TrainArgs, cancel: &AtomicBool) -> Result<(), CliError> {
    let Algo::Usmo = args.algo;
    let lambda = args
        .model
        .lambda
        .ok_or_else(|| CliError::Usage("train needs --lambda".into()))?;
    let mut data = read_data(&args.data)?;
    if let Some(fraction) = args.pu_labeled_fraction {
        data.pu_relabel(fraction, args.seed)?;
    }
    if let Some(spec) = &args.rows {
        data = data.slice_rows(spec)?;
    }
    if args.data.negatives_as_unlabeled {
        data.negatives_as_unlabeled();
    }
    let previous = match &args.warm_start {
        Some(path) => match read_model(path)? {
            Model::Usmo(entry) => Some(entry),
        },
        None => None,
    };
    let n_features = data.rows.n_features();
    let params = usmo_params(&args.model, lambda, n_features)?;
    // A warm start keeps the previous scaler so its kernel values stay valid.
    let scaler = match &previous {
        Some(prev) if prev.scaler.n_features() != n_features => {
            return Err(CliError::Usage(format!(
                "--warm-start model has {} features, the data {}",
                prev.scaler.n_features(),
                n_features
            )))
        }
        Some(prev) => prev.scaler.clone(),
        None => fit_scaler(&args.model, &data),
    };
    let scaled = Dataset {
        rows: scaler.transform(&data.rows),
        labels: data.labels.clone(),
        ids: data.ids.clone(),
    };
    let fit = with_spinner(args.quiet, "training usmo", || {
        params.fit_with(previous.as_ref().map(|p| &p.fit), &scaled, cancel)
    })?;
    let report = fit.report.clone();
    let model = Model::Usmo(UsmoEntry {
        scaler,
        fit,
        tol: params.tol,
        fingerprint: Fingerprint::of(&data),
    });
    write_atomic(&args.out, &model.to_file_bytes()?)?;
    if !report.converged {
        tracing::warn!(
            iterations = report.iterations,
            max_violation = report.max_violation,
            cancelled = report.cancelled,
            "training stopped before convergence"
        );
    }
    match args.report {
        Some(ReportFormat::Json) => println!("{}", json!(report)),
        None => println!(
            "trained usmo: {} positives, {} unlabeled, {} support vectors, {} pair steps, \
             converged: {}, {:.3}s -> {}",
            report.n_positive,
            report.n_unlabeled,
            report.n_support,
            report.iterations,
            report.converged,
            report.train_seconds,
            args.out.display()
        ),
    }
    Ok(())
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
    let mut text = String::new();
    if !json_lines {
        text.push_str("id,score\n");
    }
    for (id, s) in data.ids.iter().zip(&scores) {
        if json_lines {
            text.push_str(&json!({"id": id, "score": s}).to_string());
            text.push('\n');
        } else {
            text.push_str(&format!("{id},{s}\n"));
        }
    }
    match &args.out {
        Some(path) => write_atomic(path, text.as_bytes()),
        None => std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| CliError::file(Path::new("<stdout>"), e)),
    }
}

/// `neyman model inspect`: the model's metadata as one JSON object.
pub fn inspect(path: &Path) -> Result<(), CliError> {
    let model = read_model(path)?;
    let Model::Usmo(entry) = &model;
    let state = &entry.fit.state;
    let value = json!({
        "algorithm": model.algorithm(),
        "format_version": crate::learn::model::FORMAT_VERSION,
        "n_features": model.n_features(),
        "kernel": state.kernel,
        "prior": state.prior,
        "lambda": state.lambda,
        "tol": entry.tol,
        "scale": entry.scaler.kind(),
        "bias": entry.fit.expansion.bias,
        "n_support": entry.fit.expansion.coef.len(),
        "fingerprint": entry.fingerprint,
        "report": entry.fit.report,
    });
    println!("{value}");
    Ok(())
}
