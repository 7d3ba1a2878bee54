//! `neyman prior`: bounds on the positive share π of a file's unlabeled rows
//! ([`crate::learn::prior`]).
//!
//! A `--calibration-fraction` of the positives and of the unlabeled rows (drawn with `--seed`)
//! is held out; a scorer is trained on the rest (`--algo tfpl`, the default, ranks the
//! positives against the unlabeled rows at `--rank-tau`; `--algo usmo` needs its own `--prior`
//! guess), and the held-out rows' scores give the bounds. With `--pu-labeled-fraction` on a
//! fully labelled file the true share of positives among the rows made unlabeled is reported
//! too (`prior_true`).

use std::sync::atomic::AtomicBool;

use serde_json::json;

use super::args::{AlgorithmName, PriorArgs, ReportFormat, DEFAULT_REG};
use super::{read_data, CliError};
use crate::data::{Dataset, Label};
use crate::learn::prior::{bounds_from_held_out, PriorError};
use crate::learn::spec::{AlgorithmSpec, RankTau};
use crate::learn::threshold::calibration_split;

impl From<PriorError> for CliError {
    fn from(e: PriorError) -> CliError {
        match e {
            PriorError::Delta(_) | PriorError::Anchor(_) => CliError::Usage(e.to_string()),
            other => CliError::Training(other.to_string()),
        }
    }
}

/// `neyman prior`
pub fn prior(args: &PriorArgs, cancel: &AtomicBool) -> Result<(), CliError> {
    let mut data = read_data(&args.data)?;
    let truth = data.labels.clone();
    if let Some(fraction) = args.pu_labeled_fraction {
        data.pu_relabel(fraction, args.seed)?;
    }
    if args.data.negatives_as_unlabeled {
        data.negatives_as_unlabeled();
    }
    let prior_true = prior_true(&data, &truth);
    let fraction = args.calibration_fraction;
    let split = |label: Label, salt: u64| {
        calibration_split(&data.indices_of(label), fraction, args.seed ^ salt)
            .map_err(|e| CliError::Usage(e.to_string()))
    };
    let (train_p, held_p) = split(Label::Positive, 0)?;
    let (train_u, held_u) = split(Label::Unlabeled, 1)?;
    if held_p.is_empty() || held_u.is_empty() || train_p.is_empty() || train_u.is_empty() {
        return Err(CliError::file(
            &args.data.data,
            format!(
                "needs positives and unlabeled rows on both sides of the split; it has {} \
                 positives and {} unlabeled rows",
                train_p.len() + held_p.len(),
                train_u.len() + held_u.len()
            ),
        ));
    }
    let mut train_rows: Vec<usize> = train_p.iter().chain(&train_u).copied().collect();
    train_rows.sort_unstable();
    args.model.refuse_oracle("prior")?;
    let regularisation =
        match args.algo {
            AlgorithmName::Usmo => args
                .model
                .lambda
                .ok_or_else(|| CliError::Usage("--algo usmo needs --lambda".into()))?,
            AlgorithmName::Tfpl => args.model.reg.unwrap_or(DEFAULT_REG),
            AlgorithmName::Cuts3vm => return Err(CliError::Usage(
                "prior --algo takes usmo or tfpl: the bounds need a scorer of positives against \
                 unlabeled rows"
                    .into(),
            )),
        };
    if args.algo == AlgorithmName::Usmo {
        args.model.required_prior()?;
    }
    let mut spec = args.model.learner_spec(args.algo, regularisation);
    if let AlgorithmSpec::Tfpl(s) = &mut spec.algorithm {
        // τ-FPL ranks positives against negatives: the unlabeled rows stand in for them.
        s.rank_tau = RankTau::Value(args.rank_tau);
    }
    let name = spec.algorithm.name();
    let (bounds, fit) = bounds_from_held_out(
        &spec,
        &data,
        &train_rows,
        &held_p,
        &held_u,
        args.delta,
        args.anchor,
        cancel,
    )?;
    let report = json!({
        "prior_estimate": bounds.estimate,
        "prior_lower_bound": bounds.lower,
        "prior_upper_bound": bounds.upper,
        "prior_true": prior_true,
        "delta": bounds.delta,
        "anchor": bounds.anchor,
        "anchor_threshold": bounds.anchor_threshold,
        "calibration_positives": bounds.n_positive,
        "calibration_unlabeled": bounds.n_unlabeled,
        "algorithm": name,
        "converged": fit.converged(),
    });
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => println!(
            "prior: estimate {:.4}, [{:.4}, {:.4}] with probability ≥ {} (the lower end assumes \
             no negative scores above the top {} of the training positives' scores){}",
            bounds.estimate,
            bounds.lower,
            bounds.upper,
            1.0 - bounds.delta,
            bounds.anchor,
            prior_true.map_or(String::new(), |p| format!("; true share {p:.4}"))
        ),
    }
    Ok(())
}

/// The share of positives among the rows now unlabeled, when the file's own labels say it
/// (every such row was labelled ±1 before relabelling).
fn prior_true(data: &Dataset, truth: &[Label]) -> Option<f64> {
    let unlabeled = data.indices_of(Label::Unlabeled);
    if unlabeled.is_empty() || unlabeled.iter().any(|&i| truth[i] == Label::Unlabeled) {
        return None;
    }
    let positives = unlabeled
        .iter()
        .filter(|&&i| truth[i] == Label::Positive)
        .count();
    Some(positives as f64 / unlabeled.len() as f64)
}
