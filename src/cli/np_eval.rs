//! `neyman eval --tau T[,T...]`: the Neyman–Pearson protocol of the τ-FPL paper (Zhang et al.,
//! AAAI 2018, Table 3; docs/tau-fpl.md §5, and docs/table3.md for the reproduction).
//!
//! Split r (seed `--seed + r`; splits run in parallel) does:
//! 1. A stratified hold-out: `--test-fraction` (default 0.333, the paper's 1/3) of each class is
//!    the test part, the rest the training part. With `--pu-labeled-fraction` the training part
//!    is PU-labelled (the test part keeps its true labels).
//! 2. For every τ and method, using the training part only:
//!    - First the split of the training part into the scorer's training rows and the rows that
//!      calibrate the threshold (none for `oob`). The scaler is fitted on the scorer's training
//!      rows only, as `train` does, and every hyper-parameter (R, λ) is chosen on them: the
//!      calibration rows shape nothing but the threshold.
//!    - **tfpl**: features scaled as `train` does (`--scale`, then divided by the largest training
//!      row norm, docs/tau-fpl.md §6.15); the test rows get the same scaler. R comes from
//!      [`crate::learn::tune::choose_reg`]: 1e-6 … 10 in decades, `--cv`-fold (default 5)
//!      stratified CV with the paper's criterion (3) at τ (fraction of validation positives at or
//!      below the (⌊τ·n_val⌋+1)-th largest validation-negative score), ties to the larger R, the
//!      grid extended by a decade past a boundary optimum strictly better than its neighbour, at
//!      most twice, fits warm-started along the grid from large to small R and stopped at a
//!      gain-relative duality gap of [`CV_TOL`] unless `--tol`. `--reg` fixes R and skips the CV.
//!      Then τ-FPL (ranking at `--rank-tau`, default τ) is trained with that R and its threshold
//!      calibrated per `--threshold` ([`crate::learn::calibrate::Algorithm::fit_with_held_out`]).
//!    - **usmo**: λ as in the PU evaluation (3-fold CV of the PU risk on the training rows'
//!      positives and unlabeled rows, or `--lambda`; it does not depend on τ), then the
//!      threshold per `--threshold`.
//!    - **bs-svm** / **cs-svm-oob** (`--compare`): see [`super::baselines`].
//! 3. On the test part: FPR on the negatives, TPR on the positives (positive iff score >
//!    threshold) and NP-score max(FPR, τ)/τ − TPR.
//!
//! Per τ and method the report gives the mean FPR and TPR, mean ± sd of the per-split NP-scores
//! (the paper averages per-run scores, not the score of the mean rates), the share of splits
//! with test FPR > τ, and the share with test FPR > τ + 2·√(τ(1−τ)/n_test_neg): beyond two
//! binomial standard errors of the test estimate, which is what a guarantee P(FPR > τ) ≤ δ can
//! be checked against with a finite test set.
//!
//! Defaults, and why:
//! - `--threshold`: tfpl uses `oob` with `--oob-rule npscore` (the paper's protocol: R by (3),
//!   the threshold minimising the NP-score out of bootstrap). usmo never sees negatives, so it
//!   defaults to `pu-umbrella` (which needs `--prior-min/--prior-max`), as does tfpl with
//!   `--pu-labeled-fraction`. usmo's π then defaults to the interval's middle
//!   (`prior_used` in the report), or with an `auto` end to the estimate from each split's
//!   training rows (`prior_used` null). tfpl on PU data with `oob` or `umbrella` counts the unlabeled
//!   training rows as negatives (biased: unlabeled positives act as negatives).
//! - usmo with `umbrella`: `--calibration-fraction` of the true training negatives keep their
//!   label −1 (USMO never trains on negatives, so they stay unseen) and calibrate; the other
//!   negatives are unlabeled with the unlabeled positives.
//! - A split where τ cannot be certified is a refusal, not an error, for every method that
//!   certifies: `pu-umbrella` without a certified candidate, and `umbrella` with fewer held-out
//!   negatives than ⌈ln δ / ln(1 − τ)⌉ (299 at τ = 1 %, δ = 5 %), so one small τ does not abort
//!   the other τ of the run. That split's classifier flags nothing (FPR 0, TPR 0, as a
//!   deployment that refuses would) and `refused_share` counts it. The baselines certify
//!   nothing (bs-svm and cs-svm-oob pick empirical thresholds), so they never refuse. Other
//!   failures (no negatives for `umbrella`, solver errors, bad flags) stay errors.
//! - The top-level `accuracy`/`f1`/`auc` fields summarise `--algo` at the first τ (the existing
//!   schema has one of each); every result row carries its own.
//! - Besides the per-split mean NP-score, each row reports `np_score_of_means` (the score of
//!   the mean rates, which is what every checked cell of the paper's Table 3 equals up to
//!   rounding) and `np_score_oracle_mean` (the threshold chosen on the test part itself: how
//!   much of the score is ranking and how much threshold choice), and `tpr_oracle_mean`: the
//!   highest test TPR at a test FPR ≤ τ, the scorer's own test-picked TPR that a certified
//!   threshold can only approach (refused splits, which have no scorer, are left out of both).
//! - `--plot`: per τ, each method's ROC and operating point on split 0's test part (one scorer's
//!   honest curve; pooling splits would mix differently scaled scorers) and the strip of every
//!   split's test FPR.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use super::args::{
    AlgorithmName, CompareArg, EvalArgs, ModelArgs, PriorArg, ReportFormat, ThresholdName,
    DEFAULT_REG,
};
use super::baselines::svm_cells;
use super::eval::{choose_lambda, jobs, run_repeats, stratified_split, transductive};
use super::np_cells::{Cell, Method, Plan, TestPart};
use super::plot::{roc_points, write_roc_svg, RocCurve, RocPlot};
use super::progress::Progress;
use super::{read_data, tfpl_params, usmo_params, CliError};
use crate::data::{Dataset, Label, Rows, Scaler};
use crate::learn::calibrate::CalibrateError;
use crate::learn::metrics::{f1_for, mean_sd, np_score, Confusion, F1Class};
use crate::learn::prior::training_prior;
use crate::learn::rank_tau::{choose_rank_tau, SearchAxes};
use crate::learn::spec::{
    tfpl_scaler, training_rows, usmo_scaler, Algorithm, Fit, PriorEnd, RankTau, SpecError,
    ThresholdSpec,
};
use crate::learn::threshold::{calibration_split, OobRule, ThresholdError, ThresholdMethod};
use crate::learn::tune::{choose_reg, TuneError};

/// Why `eval --tau` refuses cuts3vm: its evaluation is the transductive protocol.
const CUTS3VM_EVAL: &str =
    "eval --algo cuts3vm runs the transductive protocol (without --tau); --tau takes usmo or tfpl";
/// Cross-validation folds for R (tfpl) and the baselines' C unless `--cv`.
const DEFAULT_FOLDS: usize = 5;

/// The (gain-relative) duality gap of the CV fits unless `--tol`: CV only compares rankings.
/// Chosen for FISTA, whose criteria on heart_statlog at 1e-4 equalled those at the default 1e-6
/// for every R of the grid at about a fifth of the steps (1e-3 already changed one); the
/// interior-point solver's last step usually lands far below either.
const CV_TOL: f64 = 1e-4;

/// Mixed into the split seed for the CV folds, so they do not reuse the split's random stream.
const CV_SALT: u64 = 0xc5_f01d;

/// Mixed into a split's seed for the ranking-depth search's held-back rows.
const RANK_SALT: u64 = 0x4a_2c7e;

impl From<TuneError> for CliError {
    fn from(e: TuneError) -> CliError {
        match e {
            TuneError::Folds { .. } => CliError::Usage(e.to_string()),
            TuneError::Threshold(t) => CliError::Threshold(t.to_string()),
            TuneError::Tfpl(t) => CliError::Training(t.to_string()),
        }
    }
}

/// `data` with its rows replaced by `scaler`-transformed ones.
fn scaled(data: &Dataset, rows: Rows) -> Dataset {
    Dataset {
        rows,
        labels: data.labels.clone(),
        ids: data.ids.clone(),
    }
}

/// `data` with its unlabeled rows counted as negatives.
pub(super) fn unlabeled_as_negative(data: &Dataset) -> Dataset {
    let mut out = data.clone();
    out.unlabeled_as_negatives();
    out
}

fn threshold_name(method: ThresholdMethod) -> &'static str {
    match method {
        ThresholdMethod::Oob => "oob",
        ThresholdMethod::Umbrella => "umbrella",
        ThresholdMethod::PuUmbrella => "pu-umbrella",
    }
}

/// Whether a calibration failed because τ cannot be certified on this split's data, not
/// because of a configuration mistake: `pu-umbrella` found no certified candidate, or
/// `umbrella` has fewer held-out negatives than ⌈ln δ / ln(1 − τ)⌉ (299 at τ = 1 %, δ = 5 %).
/// Every other failure (no negatives at all, solver errors) stays an error.
fn is_refusal(e: &CalibrateError) -> bool {
    matches!(
        e,
        CalibrateError::Threshold(
            ThresholdError::NotCertified { .. } | ThresholdError::TooFewNegatives { .. }
        ) | CalibrateError::Uncertified { .. }
    )
}

/// The cell of a split whose threshold was refused (`reason`): nothing flagged.
fn refusal(test: &TestPart, hyper: f64, method: ThresholdMethod, reason: &CalibrateError) -> Cell {
    tracing::debug!(%reason, method = threshold_name(method), "threshold refused");
    let n_negatives = test.truth.iter().filter(|&&t| !t).count();
    Cell {
        fpr: 0.0,
        tpr: 0.0,
        n_test_negatives: n_negatives,
        accuracy: n_negatives as f64 / test.truth.len().max(1) as f64,
        f1: f1_for(
            &Confusion {
                tp: 0,
                fp: 0,
                tn: n_negatives,
                fn_: test.truth.len() - n_negatives,
            },
            test.f1_class,
        ),
        auc: None,
        threshold_method: threshold_name(method),
        hyper,
        rank_tau: None,
        cost_ratio: None,
        fpr_bound: None,
        test_scores: Vec::new(),
        oracle_np_score: f64::NAN,
        oracle_tpr: f64::NAN,
        converged: true,
        refused: true,
    }
}

/// A split's training part made ready for one threshold spec. The split into the scorer's
/// training rows and the rows that calibrate comes first; the scaler is fitted on the training
/// rows only, and so is every hyper-parameter ([`Setup`]): the calibration rows shape nothing
/// but the threshold.
struct Prepared {
    /// `true` for the rows that calibrate ([`Algorithm::held_out`]).
    held_out: Vec<bool>,
    /// The scorer's training rows (the others of `held_out`).
    rows: Vec<usize>,
    /// Every row of the part, scaled.
    data: Dataset,
    /// The test rows, scaled alike.
    test_rows: Rows,
}

impl Prepared {
    /// `part` split per `spec` for `algorithm` (the split does not depend on its
    /// hyper-parameters), scaled by `fit_scaler` of its training rows.
    fn new(
        algorithm: &Algorithm,
        spec: &ThresholdSpec,
        part: &Dataset,
        test_rows: &Rows,
        fit_scaler: impl Fn(&Dataset) -> Scaler,
    ) -> Result<Prepared, CliError> {
        let held_out = algorithm.held_out(spec, part)?;
        let rows = training_rows(&held_out);
        let scaler = fit_scaler(&part.select(&rows));
        Ok(Prepared {
            data: scaled(part, scaler.transform(&part.rows)),
            test_rows: scaler.transform(test_rows),
            held_out,
            rows,
        })
    }

    /// `spec` with its `auto` prior ends at the estimate of the training rows alone
    /// ([`training_prior`]) where pu-umbrella needs an interval before training (τ-FPL's PU
    /// rank τ, USMO's π without `--prior`), and that estimate; the calibration then takes the
    /// ends from the held-out rows.
    fn with_training_prior(
        &self,
        spec: ThresholdSpec,
        cancel: &AtomicBool,
    ) -> Result<(ThresholdSpec, Option<f64>), CliError> {
        match spec.prior_auto {
            Some(auto) if spec.method_for(&self.data) == ThresholdMethod::PuUmbrella => {
                let bounds = training_prior(
                    &self.data,
                    &self.held_out,
                    spec.delta,
                    auto.anchor,
                    spec.seed,
                    cancel,
                )?;
                Ok((
                    spec.with_prior_estimate(bounds.estimate),
                    Some(bounds.estimate),
                ))
            }
            _ => Ok((spec, None)),
        }
    }
}

/// A method's scorer at one τ, ready to train: the prepared part and the solver with the
/// hyper-parameter chosen on its training rows.
struct Setup {
    prep: Prepared,
    spec: ThresholdSpec,
    algorithm: Algorithm,
    /// R (tfpl) or λ (usmo).
    hyper: f64,
    /// tfpl's ranking depth.
    rank_tau: Option<f64>,
    /// The cross-validation's fit at that hyper-parameter: a warm start.
    warm: Option<Fit>,
}

impl Setup {
    /// Trains the scorer on the training rows, calibrates its threshold on the held-out ones
    /// and scores the test part: the cell, or a refusal when τ cannot be certified.
    fn cell(&self, test: &TestPart, cancel: &AtomicBool) -> Result<Cell, CliError> {
        let (prep, spec) = (&self.prep, &self.spec);
        let fitted = self.algorithm.fit_with_held_out(
            self.warm.as_ref(),
            spec,
            &prep.data,
            &prep.held_out,
            cancel,
        );
        let (fit, threshold, _) = match fitted {
            Err(e) if is_refusal(&e) => {
                return Ok(refusal(test, self.hyper, spec.method_for(&prep.data), &e))
            }
            other => other?,
        };
        let mut cell = test.cell(
            &fit.scores(&prep.test_rows),
            spec.tau,
            threshold.threshold,
            threshold_name(threshold.method),
            self.hyper,
        );
        cell.rank_tau = self.rank_tau;
        cell.fpr_bound = threshold.fpr_bound;
        cell.converged = fit.converged();
        Ok(cell)
    }
}

/// The training part τ-FPL splits: only pu-umbrella knows unlabeled rows; the other methods
/// count them as negatives.
fn tfpl_part<'a>(plan: &Plan, train: &'a Dataset) -> Cow<'a, Dataset> {
    if plan.threshold == ThresholdMethod::PuUmbrella {
        Cow::Borrowed(train)
    } else {
        Cow::Owned(unlabeled_as_negative(train))
    }
}

/// τ-FPL at τ number `t` on `part` ([`tfpl_part`]): R by cross-validation on the training rows
/// unless `--reg`.
fn tfpl_setup(
    plan: &Plan,
    part: &Dataset,
    test_rows: &Rows,
    t: usize,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<Setup, CliError> {
    let args = plan.args;
    let tau = plan.taus[t];
    let n_features = part.rows.n_features();
    let spec = plan.spec(tau, seed);
    let kind = args.model.scale.into();
    // The split does not depend on the ranking depth or R.
    let prep = Prepared::new(
        &Algorithm::Tfpl(tfpl_params(&args.model, tau, 1.0, n_features)?),
        &spec,
        part,
        test_rows,
        |rows| tfpl_scaler(kind, rows),
    )?;
    let (spec, _) = prep.with_training_prior(spec, cancel)?;
    // `auto`: the depth is chosen on the training rows at --reg (else train's default R),
    // before R's cross-validation, which a constant solution at a too shallow depth would
    // leave without a signal.
    let rank_tau = match plan.rank_taus[t] {
        RankTau::Value(v) => v,
        RankTau::Auto => {
            let reg = args.model.reg.unwrap_or(DEFAULT_REG);
            let params = tfpl_params(&args.model, tau, reg, n_features)?;
            choose_rank_tau(
                &params,
                tau,
                &prep.data.select(&prep.rows),
                spec.prior_interval,
                None,
                seed ^ RANK_SALT,
                SearchAxes {
                    depth: true,
                    reg: false,
                },
                cancel,
            )
            .map_err(SpecError::from)?
            .rank_tau
        }
    };
    let at = |reg| -> Result<Algorithm, CliError> {
        Ok(Algorithm::Tfpl(tfpl_params(
            &args.model,
            rank_tau,
            reg,
            n_features,
        )?))
    };
    let (reg, warm) = match args.model.reg {
        Some(reg) => (reg, None),
        None => {
            let mut probe = (*tfpl_params(&args.model, rank_tau, 1.0, n_features)?).clone();
            probe.tol = args.model.tol.unwrap_or(CV_TOL);
            let cv_data = unlabeled_as_negative(&prep.data.select(&prep.rows));
            let seed = seed ^ CV_SALT;
            let choice = choose_reg(&probe, &cv_data, tau, plan.folds, seed, cancel)?;
            for (&(reg, criterion), iterations) in choice.tried.iter().zip(&choice.iterations) {
                tracing::debug!(reg, criterion, iterations, "tau-FPL cross-validation");
            }
            (choice.reg, Some(Fit::Tfpl(choice.warm_start)))
        }
    };
    Ok(Setup {
        algorithm: at(reg)?,
        prep,
        spec,
        hyper: reg,
        rank_tau: Some(rank_tau),
        warm,
    })
}

/// tfpl on one split: a cell per τ.
fn tfpl_cells(
    plan: &Plan,
    train: &Dataset,
    test_rows: &Rows,
    test: &TestPart,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<Vec<Cell>, CliError> {
    let part = tfpl_part(plan, train);
    (0..plan.taus.len())
        .map(|t| tfpl_setup(plan, &part, test_rows, t, seed, cancel)?.cell(test, cancel))
        .collect()
}

/// The training part USMO splits (`pu_train` is the PU-labelled training part, `train` its true
/// labels): the PU labels, and with `umbrella` its calibration negatives labelled −1.
fn usmo_part(
    plan: &Plan,
    train: &Dataset,
    pu_train: &Dataset,
    seed: u64,
) -> Result<Dataset, CliError> {
    let mut data = pu_train.clone();
    if plan.threshold == ThresholdMethod::Umbrella {
        // USMO ignores negatives when training, so known negatives calibrate without being seen.
        let negatives = train.indices_of(Label::Negative);
        let fraction = plan.args.threshold.calibration_fraction;
        let (_, held) = calibration_split(&negatives, fraction, seed)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        for i in held {
            data.labels[i] = Label::Negative;
        }
    }
    Ok(data)
}

/// USMO at `tau` on `data` ([`usmo_part`]): λ by cross-validation on the training rows'
/// positives and unlabeled rows (what USMO trains on) unless `--lambda`. λ does not depend on τ:
/// `chosen` keeps it for the training rows it was chosen on (one set per split, as the
/// calibration split depends on the seed and the calibration fraction only).
fn usmo_setup(
    plan: &Plan,
    data: &Dataset,
    test_rows: &Rows,
    tau: f64,
    seed: u64,
    chosen: &mut Option<(Vec<usize>, f64)>,
    cancel: &AtomicBool,
) -> Result<Setup, CliError> {
    let spec = plan.spec(tau, seed);
    let n_features = data.rows.n_features();
    let kind = plan.args.model.scale.into();
    let prep = Prepared::new(
        &Algorithm::Usmo(usmo_params(
            &with_stand_in_prior(&plan.args.model),
            plan.args.model.lambda.unwrap_or(1e-2),
            n_features,
        )?),
        &spec,
        data,
        test_rows,
        |rows| usmo_scaler(kind, rows),
    )?;
    let (spec, estimate) = prep.with_training_prior(spec, cancel)?;
    let args = match (plan.args.model.prior_value(), estimate) {
        (None, Some(prior)) => {
            let mut filled = plan.args.clone();
            filled.model.prior = Some(PriorArg::Value(prior));
            Cow::Owned(filled)
        }
        _ => Cow::Borrowed(plan.args),
    };
    let at = |lambda| -> Result<Algorithm, CliError> {
        Ok(Algorithm::Usmo(usmo_params(
            &args.model,
            lambda,
            n_features,
        )?))
    };
    let lambda = match (args.model.lambda, &*chosen) {
        (Some(lambda), _) => lambda,
        (None, Some((rows, lambda))) if *rows == prep.rows => *lambda,
        (None, _) => {
            let cv_rows: Vec<usize> = prep
                .rows
                .iter()
                .copied()
                .filter(|&i| data.labels[i] != Label::Negative)
                .collect();
            let lambda = choose_lambda(&args, &data.select(&cv_rows), seed, cancel)?;
            *chosen = Some((prep.rows.clone(), lambda));
            lambda
        }
    };
    Ok(Setup {
        algorithm: at(lambda)?,
        prep,
        spec,
        hyper: lambda,
        rank_tau: None,
        warm: None,
    })
}

/// usmo on one split: a cell per τ.
fn usmo_cells(
    plan: &Plan,
    train: &Dataset,
    pu_train: &Dataset,
    test_rows: &Rows,
    test: &TestPart,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<Vec<Cell>, CliError> {
    let data = usmo_part(plan, train, pu_train, seed)?;
    let mut chosen = None;
    plan.taus
        .iter()
        .map(|&tau| {
            usmo_setup(plan, &data, test_rows, tau, seed, &mut chosen, cancel)?.cell(test, cancel)
        })
        .collect()
}

/// One split's cells, indexed [τ][method], and its test truth (kept for the plot of split 0).
struct SplitOutcome {
    cells: Vec<Vec<Cell>>,
    truth: Vec<bool>,
}

/// One split.
fn run_split(
    plan: &Plan,
    data: &Dataset,
    repeat: usize,
    cancel: &AtomicBool,
) -> Result<SplitOutcome, CliError> {
    let args = plan.args;
    let seed = args.seed.wrapping_add(repeat as u64);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (train_idx, test_idx) = stratified_split(data, args.test_fraction, &mut rng);
    let train = data.select(&train_idx);
    let test = data.select(&test_idx);
    let pu_train = match args.pu_labeled_fraction {
        Some(fraction) => {
            let mut t = train.clone();
            t.pu_relabel(fraction, seed)?;
            Some(t)
        }
        None => None,
    };
    let truth: Vec<bool> = test.labels.iter().map(|&l| l == Label::Positive).collect();
    let part = TestPart {
        truth: &truth,
        f1_class: F1Class::from(args.f1_class),
    };
    let mut cells: Vec<Vec<Cell>> = vec![Vec::with_capacity(plan.methods.len()); plan.taus.len()];
    for &method in &plan.methods {
        let per_tau = match method {
            Method::Tfpl => tfpl_cells(
                plan,
                pu_train.as_ref().unwrap_or(&train),
                &test.rows,
                &part,
                seed,
                cancel,
            )?,
            Method::Usmo => {
                let pu = pu_train.as_ref().ok_or_else(|| {
                    CliError::Usage("eval --algo usmo needs --pu-labeled-fraction".into())
                })?;
                usmo_cells(plan, &train, pu, &test.rows, &part, seed, cancel)?
            }
            Method::BsSvm | Method::CsSvmOob => {
                let base = pu_train.as_ref().unwrap_or(&train);
                let scaler = tfpl_scaler(args.model.scale.into(), base);
                let data = unlabeled_as_negative(&scaled(base, scaler.transform(&base.rows)));
                let test_rows = scaler.transform(&test.rows);
                svm_cells(plan, method, &data, &test_rows, &part, seed, cancel)?
            }
        };
        let keep_scores = repeat == 0 && args.plot.is_some();
        for (row, mut cell) in cells.iter_mut().zip(per_tau) {
            if !keep_scores {
                cell.test_scores = Vec::new();
            }
            tracing::debug!(
                split = repeat,
                method = method.name(),
                fpr = cell.fpr,
                tpr = cell.tpr,
                oracle_np_score = cell.oracle_np_score,
                hyper = cell.hyper,
                "split done"
            );
            row.push(cell);
        }
    }
    let keep_truth = repeat == 0 && args.plot.is_some();
    Ok(SplitOutcome {
        cells,
        truth: if keep_truth { truth } else { Vec::new() },
    })
}

/// The threshold method of `--algo`: `--threshold`, else `oob` for tfpl on labelled data and
/// `pu-umbrella` otherwise.
fn threshold_of(args: &EvalArgs) -> ThresholdMethod {
    // `--threshold none` is refused before this is asked.
    match (
        args.algo,
        args.threshold.threshold.and_then(ThresholdName::method),
    ) {
        (_, Some(explicit)) => explicit,
        (AlgorithmName::Tfpl, None) if args.pu_labeled_fraction.is_none() => ThresholdMethod::Oob,
        _ => ThresholdMethod::PuUmbrella,
    }
}

/// The flags with usmo's π filled in when `--prior` is absent and the threshold is
/// `pu-umbrella`: the middle of `--prior-min/--prior-max` (a lone end is a point interval, as
/// for the threshold). The interval already states what the data's π may be, so asking for a
/// second number inside it would only invite a contradiction. With an `auto` end π is left
/// to the estimate from each split's training rows ([`Prepared::with_training_prior`]).
fn with_default_prior(args: &EvalArgs) -> Cow<'_, EvalArgs> {
    let t = &args.threshold;
    let auto = [t.prior_min, t.prior_max].contains(&Some(PriorEnd::Auto));
    let (min, max) = (
        t.prior_min.and_then(PriorEnd::value),
        t.prior_max.and_then(PriorEnd::value),
    );
    let interval = min.or(max).zip(max.or(min));
    match interval {
        Some((lo, hi))
            if !auto
                && args.algo == AlgorithmName::Usmo
                && args.model.prior.is_none()
                && threshold_of(args) == ThresholdMethod::PuUmbrella =>
        {
            let mut filled = args.clone();
            filled.model.prior = Some(PriorArg::Value(0.5 * (lo + hi)));
            Cow::Owned(filled)
        }
        _ => Cow::Borrowed(args),
    }
}

/// The model flags with a stand-in π where `--prior` is absent, for what never depends on π:
/// checking the other flags and the calibration split (as
/// [`crate::learn::spec::LearnerSpec::held_out`]). Where nothing estimates π, `plan` has already
/// asked for `--prior`.
fn with_stand_in_prior(model: &ModelArgs) -> ModelArgs {
    let mut probe = model.clone();
    probe.prior.get_or_insert(PriorArg::Value(0.5));
    probe
}

/// Validated flags of the τ protocol.
fn plan(args: &EvalArgs) -> Result<Plan<'_>, CliError> {
    let usage = |m: String| Err(CliError::Usage(m));
    let t = &args.threshold;
    if args.repeats == 0 {
        return usage("--repeats must be at least 1".into());
    }
    if transductive(args)? {
        return usage("--tau runs the holdout protocol only (not --transductive)".into());
    }
    if !(args.test_fraction > 0.0 && args.test_fraction < 1.0) {
        return usage(format!(
            "--test-fraction must be in (0, 1), got {}",
            args.test_fraction
        ));
    }
    if let Some(bad) = t.tau.iter().find(|&&tau| !(tau > 0.0 && tau < 1.0)) {
        return usage(format!("every --tau must be in (0, 1), got {bad}"));
    }
    let rank_taus = match t.rank_tau.len() {
        0 => vec![RankTau::Auto; t.tau.len()],
        n if n == t.tau.len() => t.rank_tau.clone(),
        n => {
            return usage(format!(
                "--rank-tau needs one value per --tau ({} given, {n} rank values)",
                t.tau.len()
            ))
        }
    };
    if let Some(bad) = rank_taus
        .iter()
        .filter_map(|r| r.value())
        .find(|r| !(0.0..1.0).contains(r))
    {
        return usage(format!("every --rank-tau must be in [0, 1), got {bad}"));
    }
    let given = |(r, tau): (&RankTau, &f64)| r.value() == Some(*tau);
    if args.algo == AlgorithmName::Usmo
        && !t.rank_tau.is_empty()
        && !rank_taus.iter().zip(&t.tau).all(given)
    {
        return usage("--rank-tau is a tfpl flag".into());
    }
    if let Some(f) = args.pu_labeled_fraction {
        if !(f > 0.0 && f <= 1.0) {
            return usage(format!("--pu-labeled-fraction must be in (0, 1], got {f}"));
        }
    } else if args.algo == AlgorithmName::Usmo {
        return usage("eval --algo usmo needs --pu-labeled-fraction".into());
    }
    if !(t.delta > 0.0 && t.delta < 1.0) {
        return usage(format!("--delta must be in (0, 1), got {}", t.delta));
    }
    let fraction = t.calibration_fraction;
    if !(fraction > 0.0 && fraction < 1.0) {
        return usage(format!(
            "--calibration-fraction must be in (0, 1), got {fraction}"
        ));
    }
    let folds = args.cv.unwrap_or(DEFAULT_FOLDS);
    if folds < 2 {
        return usage(format!("--cv must be at least 2, got {folds}"));
    }
    if t.threshold == Some(ThresholdName::None) {
        return usage(
            "--threshold none leaves nothing to evaluate (eval measures thresholds; train \
             --threshold none makes a ranking-only model)"
                .into(),
        );
    }
    let threshold = threshold_of(args);
    if args.algo == AlgorithmName::Usmo && t.threshold == Some(ThresholdName::Oob) {
        return usage("--threshold oob needs --algo tfpl (usmo never trains on negatives)".into());
    }
    if threshold == ThresholdMethod::PuUmbrella {
        if args.pu_labeled_fraction.is_none() {
            return usage("--threshold pu-umbrella needs --pu-labeled-fraction".into());
        }
        if t.prior_min.is_none() && t.prior_max.is_none() {
            return usage(
                "--threshold pu-umbrella needs --prior-min/--prior-max (the positive share of \
                 the unlabeled training rows)"
                    .into(),
            );
        }
    }
    let estimated = threshold == ThresholdMethod::PuUmbrella
        && [t.prior_min, t.prior_max].contains(&Some(PriorEnd::Auto));
    if args.algo == AlgorithmName::Usmo && !estimated {
        args.model.required_prior()?;
    }
    if t.rounds == 0 {
        return usage("--rounds must be at least 1".into());
    }
    let mut methods = vec![match args.algo {
        AlgorithmName::Tfpl => Method::Tfpl,
        AlgorithmName::Usmo => Method::Usmo,
        AlgorithmName::Cuts3vm => return usage(CUTS3VM_EVAL.into()),
    }];
    for c in &args.compare {
        let m = match c {
            CompareArg::BsSvm => Method::BsSvm,
            CompareArg::CsSvmOob => Method::CsSvmOob,
        };
        if !methods.contains(&m) {
            methods.push(m);
        }
    }
    Ok(Plan {
        args,
        taus: t.tau.clone(),
        rank_taus,
        methods,
        folds,
        threshold,
        oob_rule: t.oob_rule.map_or(OobRule::NpScore, Into::into),
    })
}

/// One result row: a τ and a method over every split.
struct Summary {
    tau: f64,
    rank_tau: RankTau,
    /// tfpl: the depth each split trained at.
    rank_tau_per_split: Vec<f64>,
    method: Method,
    threshold_method: &'static str,
    fpr: (f64, f64),
    tpr: (f64, f64),
    np_score: (f64, f64),
    exceed_share: f64,
    exceed_beyond_noise_share: f64,
    accuracy: (f64, f64),
    f1: (f64, f64),
    auc: (f64, f64),
    fpr_bound_mean: Option<f64>,
    oracle_np_score: f64,
    oracle_tpr: f64,
    refused_share: f64,
    hyper: Vec<f64>,
    cost_ratio: Vec<f64>,
    converged_share: f64,
}

fn summarise(tau: f64, rank_tau: RankTau, method: Method, cells: &[&Cell]) -> Summary {
    let pick = |f: &dyn Fn(&Cell) -> f64| cells.iter().map(|c| f(c)).collect::<Vec<f64>>();
    let share = |f: &dyn Fn(&Cell) -> bool| {
        cells.iter().filter(|c| f(c)).count() as f64 / cells.len() as f64
    };
    let aucs: Vec<f64> = cells.iter().filter_map(|c| c.auc).collect();
    let finite_mean = |f: &dyn Fn(&Cell) -> f64| {
        let values: Vec<f64> = pick(f).into_iter().filter(|v| v.is_finite()).collect();
        mean_sd(&values).0
    };
    let bounds: Vec<f64> = cells.iter().filter_map(|c| c.fpr_bound).collect();
    Summary {
        tau,
        rank_tau,
        rank_tau_per_split: cells.iter().filter_map(|c| c.rank_tau).collect(),
        method,
        threshold_method: cells.first().map_or("", |c| c.threshold_method),
        fpr: mean_sd(&pick(&|c| c.fpr)),
        tpr: mean_sd(&pick(&|c| c.tpr)),
        np_score: mean_sd(&pick(&|c| np_score(c.fpr, c.tpr, tau))),
        exceed_share: share(&|c| c.fpr > tau),
        exceed_beyond_noise_share: share(&|c| {
            let n = c.n_test_negatives.max(1) as f64;
            c.fpr > tau + 2.0 * (tau * (1.0 - tau) / n).sqrt()
        }),
        accuracy: mean_sd(&pick(&|c| c.accuracy)),
        f1: mean_sd(&pick(&|c| c.f1)),
        auc: if aucs.is_empty() {
            (f64::NAN, f64::NAN)
        } else {
            mean_sd(&aucs)
        },
        fpr_bound_mean: (!bounds.is_empty()).then(|| mean_sd(&bounds).0),
        oracle_np_score: finite_mean(&|c| c.oracle_np_score),
        oracle_tpr: finite_mean(&|c| c.oracle_tpr),
        refused_share: share(&|c| c.refused),
        hyper: pick(&|c| c.hyper),
        cost_ratio: cells.iter().filter_map(|c| c.cost_ratio).collect(),
        converged_share: share(&|c| c.converged),
    }
}

fn nan_as_null(v: f64) -> Value {
    if v.is_finite() {
        json!(v)
    } else {
        Value::Null
    }
}

impl Summary {
    fn json(&self) -> Value {
        let mut row = json!({
            "tau": self.tau,
            "method": self.method.name(),
            "threshold_method": self.threshold_method,
            "fpr_mean": self.fpr.0,
            "tpr_mean": self.tpr.0,
            "np_score_mean": self.np_score.0,
            "np_score_sd": self.np_score.1,
            "fpr_exceed_share": self.exceed_share,
            "fpr_exceed_beyond_noise_share": self.exceed_beyond_noise_share,
            "rank_tau": self.rank_tau,
            "fpr_sd": self.fpr.1,
            "tpr_sd": self.tpr.1,
            "accuracy_mean": self.accuracy.0,
            "f1_mean": self.f1.0,
            "auc_mean": nan_as_null(self.auc.0),
            "fpr_bound_mean": self.fpr_bound_mean,
            "np_score_oracle_mean": nan_as_null(self.oracle_np_score),
            "tpr_oracle_mean": nan_as_null(self.oracle_tpr),
            "np_score_of_means": np_score(self.fpr.0, self.tpr.0, self.tau),
            "refused_share": self.refused_share,
            "converged_share": self.converged_share,
        });
        if let Value::Object(fields) = &mut row {
            fields.insert(
                format!("{}_per_split", self.method.hyper_name()),
                json!(self.hyper),
            );
            if !self.rank_tau_per_split.is_empty() {
                fields.insert("rank_tau_per_split".into(), json!(self.rank_tau_per_split));
            }
            if !self.cost_ratio.is_empty() {
                fields.insert("cost_ratio_per_split".into(), json!(self.cost_ratio));
            }
        }
        row
    }
}

/// `x` as `.123` (the paper's style) or with a leading digit when ≥ 1.
fn short(x: f64) -> String {
    let text = format!("{x:.3}");
    match text.strip_prefix("0.") {
        Some(rest) => format!(".{rest}"),
        None => text,
    }
}

/// The median of the chosen hyper-parameters, for the table.
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `neyman eval --tau ...`
pub(super) fn np_eval(args: &EvalArgs, cancel: &AtomicBool) -> Result<(), CliError> {
    let filled = with_default_prior(args);
    let args: &EvalArgs = &filled;
    let plan = plan(args)?;
    let data = read_data(&args.data)?;
    if data.count(Label::Unlabeled) > 0 {
        return Err(CliError::file(
            &args.data.data,
            "eval needs a fully labelled file (labels 1 and -1); it has unlabeled (0) rows",
        ));
    }
    for (label, name) in [
        (Label::Positive, "positives"),
        (Label::Negative, "negatives"),
    ] {
        let n = data.count(label);
        let n_test = (args.test_fraction * n as f64).round() as usize;
        if n_test == 0 || n_test == n {
            return Err(CliError::file(
                &args.data.data,
                format!(
                    "its {n} {name} leave none for the test or the training part at \
                     --test-fraction {}",
                    args.test_fraction
                ),
            ));
        }
    }
    // Validate the model flags once before spawning work.
    let n_features = data.rows.n_features();
    match args.algo {
        AlgorithmName::Tfpl => {
            let rank_tau = plan.rank_taus[0].value().unwrap_or(plan.taus[0]);
            tfpl_params(&args.model, rank_tau, 1.0, n_features)?;
            if let Some(reg) = args.model.reg {
                tfpl_params(&args.model, rank_tau, reg, n_features)?;
            }
        }
        AlgorithmName::Usmo => {
            usmo_params(
                &with_stand_in_prior(&args.model),
                args.model.lambda.unwrap_or(1e-2),
                n_features,
            )?;
        }
        AlgorithmName::Cuts3vm => return Err(CliError::Usage(CUTS3VM_EVAL.into())),
    }
    let jobs = jobs(args.jobs)?;
    let message = format!("evaluating {}", plan.methods[0].name());
    let progress = Progress::new(args.quiet, &message, args.repeats, "splits");
    let splits = run_repeats(args.repeats, jobs, &progress, |r| {
        run_split(&plan, &data, r, cancel)
    })?;
    drop(progress);

    let mut summaries = Vec::new();
    for (t, (&tau, &rank_tau)) in plan.taus.iter().zip(&plan.rank_taus).enumerate() {
        for (m, &method) in plan.methods.iter().enumerate() {
            let cells: Vec<&Cell> = splits.iter().map(|s| &s.cells[t][m]).collect();
            summaries.push(summarise(tau, rank_tau, method, &cells));
        }
    }
    if let Some(path) = &args.plot {
        plot(path, &plan, &splits)?;
    }
    report(args, &plan, &data, &summaries);
    Ok(())
}

/// The file of τ number `t`: `--plot` itself for the first τ, `STEM-tau<τ>.EXT` beside it for
/// the others.
fn plot_path(path: &Path, tau: f64, t: usize) -> PathBuf {
    if t == 0 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let ext = path
        .extension()
        .map_or_else(|| "svg".into(), |e| e.to_string_lossy().into_owned());
    path.with_file_name(format!("{stem}-tau{tau}.{ext}"))
}

/// One ROC chart per τ: every method's ROC and operating point on split 0's test part (one
/// scorer's honest curve: pooling splits would mix differently scaled scorers), with the strip
/// of every split's test FPR at that τ.
fn plot(path: &Path, plan: &Plan, splits: &[SplitOutcome]) -> Result<(), CliError> {
    let Some(first) = splits.first() else {
        return Ok(());
    };
    for (t, &tau) in plan.taus.iter().enumerate() {
        let curves = plan
            .methods
            .iter()
            .enumerate()
            .map(|(m, method)| {
                let cell = &first.cells[t][m];
                RocCurve {
                    label: format!("{} ({})", method.name(), cell.threshold_method),
                    points: roc_points(&cell.test_scores, &first.truth),
                    operating_point: Some((cell.fpr, cell.tpr)),
                    split_fprs: splits.iter().map(|s| s.cells[t][m].fpr).collect(),
                }
            })
            .collect();
        let chart = RocPlot {
            title: format!(
                "ROC at τ = {tau} (split 0 of {}); strips: test FPR per split",
                splits.len()
            ),
            tau,
            curves,
        };
        write_roc_svg(&plot_path(path, tau, t), &chart)?;
    }
    Ok(())
}

/// `args` has usmo's π filled in ([`with_default_prior`]).
fn report(args: &EvalArgs, plan: &Plan, data: &Dataset, summaries: &[Summary]) {
    let primary = &summaries[0];
    // usmo's π as trained (tfpl takes no prior).
    let prior_used = args
        .model
        .prior_value()
        .filter(|_| args.algo == AlgorithmName::Usmo);
    let estimated = args.algo == AlgorithmName::Usmo && prior_used.is_none();
    match args.report {
        Some(ReportFormat::Json) => {
            let results: Vec<Value> = summaries.iter().map(Summary::json).collect();
            println!(
                "{}",
                json!({
                    "algo": plan.methods[0].name(),
                    "dataset_rows": data.len(),
                    "repeats": args.repeats,
                    "protocol": "holdout",
                    "accuracy_mean": primary.accuracy.0,
                    "accuracy_sd": primary.accuracy.1,
                    "f1_mean": primary.f1.0,
                    "f1_sd": primary.f1.1,
                    "auc_mean": nan_as_null(primary.auc.0),
                    "auc_sd": nan_as_null(primary.auc.1),
                    "results": results,
                    "taus": plan.taus,
                    "test_fraction": args.test_fraction,
                    "cv_folds": plan.folds,
                    "seed": args.seed,
                    "prior_used": prior_used,
                })
            );
        }
        None => {
            let selection = match (args.algo, args.model.reg, args.model.lambda) {
                (AlgorithmName::Tfpl, Some(reg), _) => format!("R = {reg}"),
                (AlgorithmName::Tfpl, None, _) => format!("R by {}-fold CV", plan.folds),
                (AlgorithmName::Usmo, _, Some(lambda)) => format!("λ = {lambda}"),
                (AlgorithmName::Usmo, _, None) => "λ by 3-fold PU-risk CV".into(),
                (AlgorithmName::Cuts3vm, _, _) => "C_l, C_u given".into(),
            };
            let selection = match prior_used {
                Some(prior) => format!("{selection}, π = {prior}"),
                None if estimated => format!("{selection}, π from each split's training rows"),
                None => selection,
            };
            println!(
                "{} on {} ({} rows): holdout, {} splits, test fraction {}, {selection}{}",
                plan.methods[0].name(),
                args.data.data.display(),
                data.len(),
                args.repeats,
                args.test_fraction,
                if plan.methods.len() > 1 {
                    format!(", baselines' C by {}-fold CV", plan.folds)
                } else {
                    String::new()
                }
            );
            println!(
                "{:>7}  {:<11} {:<14} {:<15} {:<16} {:>7}  {:>12}",
                "τ (%)", "method", "threshold", "(FPR, TPR)", "NP-score", "FPR>τ", "median R/λ/C"
            );
            for s in summaries {
                println!(
                    "{:>7}  {:<11} {:<14} {:<15} {:<16} {:>6.1}%  {:>12.0e}",
                    format!("{}", s.tau * 100.0),
                    s.method.name(),
                    s.threshold_method,
                    format!("({}, {})", short(s.fpr.0), short(s.tpr.0)),
                    format!("{} ± {}", short(s.np_score.0), short(s.np_score.1)),
                    100.0 * s.exceed_share,
                    median(&s.hyper),
                );
                if s.refused_share > 0.0 {
                    println!(
                        "         (threshold refused, nothing flagged, in {:.1}% of splits)",
                        100.0 * s.refused_share
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::args::{Cli, Command};

    const BREAST: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/breast_cancer_wisconsin.csv"
    );

    /// The plan of `neyman eval --data BREAST FLAGS...`.
    fn eval_args(flags: &[&str]) -> EvalArgs {
        let mut line = vec!["neyman", "eval", "--data", BREAST];
        line.extend_from_slice(flags);
        match Cli::try_parse_from(line).expect("valid flags").command {
            Command::Eval(args) => args,
            other => panic!("not eval: {other:?}"),
        }
    }

    /// Split 0 of `args` on breast-cancer as [`run_split`] draws it: the training part with its
    /// true labels, the same PU-labelled (`--pu-labeled-fraction`), and the test rows.
    fn split_zero(args: &EvalArgs) -> (Dataset, Dataset, Rows) {
        let data = read_data(&args.data).expect("breast-cancer");
        let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
        let (train_idx, test_idx) = stratified_split(&data, args.test_fraction, &mut rng);
        let train = data.select(&train_idx);
        let mut pu_train = train.clone();
        if let Some(fraction) = args.pu_labeled_fraction {
            pu_train.pu_relabel(fraction, args.seed).expect("PU labels");
        }
        (train, pu_train, data.rows.select(&test_idx))
    }

    /// The rows a setup holds out to calibrate.
    fn held_out_rows(setup: &Setup, _: &Dataset) -> Vec<usize> {
        let held = &setup.prep.held_out;
        (0..held.len()).filter(|&i| held[i]).collect()
    }

    /// `setup` of `part`, and again of `part` with its calibration rows (`calibration_of` the
    /// first setup) pushed far out (features ×1000 + 1e4): the split, the scaled training and
    /// test rows (so the scaler) and the hyper-parameter are the same, while the scaled
    /// calibration rows moved. Returns the first setup.
    fn only_the_threshold_sees_the_calibration_rows(
        part: &Dataset,
        calibration_of: fn(&Setup, &Dataset) -> Vec<usize>,
        setup: impl Fn(&Dataset) -> Setup,
    ) -> Setup {
        let first = setup(part);
        let held = &first.prep.held_out;
        let calibration = calibration_of(&first, part);
        assert!(
            calibration.len() > 50,
            "{} calibration rows",
            calibration.len()
        );
        let mut moved = part.clone();
        let Rows::Dense(m) = &mut moved.rows else {
            panic!("dense rows")
        };
        for &i in &calibration {
            m.row_mut(i).mapv_inplace(|v| 1e3 * v + 1e4);
        }
        let second = setup(&moved);
        assert_eq!(&second.prep.held_out, held);
        assert_eq!(first.hyper, second.hyper, "the hyper-parameter moved");
        let others: Vec<usize> = (0..part.len())
            .filter(|i| calibration.binary_search(i).is_err())
            .collect();
        let training = |s: &Setup| s.prep.data.rows.select(&others);
        assert_eq!(training(&first), training(&second), "the scaler moved");
        assert_eq!(
            first.prep.test_rows, second.prep.test_rows,
            "the scaler moved"
        );
        let calibrating = |s: &Setup| s.prep.data.rows.select(&calibration);
        assert_ne!(calibrating(&first), calibrating(&second));
        first
    }

    fn tfpl_at_first_tau(flags: &[&str]) {
        let args = eval_args(flags);
        let plan = plan(&args).expect("plan");
        let (train, pu_train, test_rows) = split_zero(&args);
        let labelled = if args.pu_labeled_fraction.is_some() {
            &pu_train
        } else {
            &train
        };
        let part = tfpl_part(&plan, labelled);
        let cancel = AtomicBool::new(false);
        only_the_threshold_sees_the_calibration_rows(&part, held_out_rows, |part| {
            tfpl_setup(&plan, part, &test_rows, 0, args.seed, &cancel).expect("setup")
        });
    }

    #[test]
    fn tfpl_umbrella_scaler_and_r_never_see_the_calibration_negatives() {
        tfpl_at_first_tau(&[
            "--algo",
            "tfpl",
            "--tau",
            "0.1",
            "--threshold",
            "umbrella",
            "--seed",
            "3",
        ]);
    }

    /// Half the training positives labelled; the unlabeled rows' positive share (0.21 on
    /// breast-cancer) in the prior interval.
    const PU_FLAGS: [&str; 8] = [
        "--pu-labeled-fraction",
        "0.5",
        "--prior-min",
        "0.2",
        "--prior-max",
        "0.25",
        "--seed",
        "3",
    ];

    #[test]
    fn tfpl_pu_umbrella_scaler_and_r_never_see_the_calibration_rows() {
        tfpl_at_first_tau(&[&["--algo", "tfpl", "--tau", "0.1"][..], &PU_FLAGS].concat());
    }

    /// USMO at the first τ of `flags`, calibrating on `calibration_of`; returns its setup.
    fn usmo_at_first_tau(
        flags: &[&str],
        calibration_of: fn(&Setup, &Dataset) -> Vec<usize>,
    ) -> Setup {
        let args = eval_args(flags);
        let plan = plan(&args).expect("plan");
        let (train, pu_train, test_rows) = split_zero(&args);
        let data = usmo_part(&plan, &train, &pu_train, args.seed).expect("part");
        let cancel = AtomicBool::new(false);
        only_the_threshold_sees_the_calibration_rows(&data, calibration_of, |part| {
            let tau = plan.taus[0];
            usmo_setup(&plan, part, &test_rows, tau, args.seed, &mut None, &cancel).expect("setup")
        })
    }

    /// USMO's scaler is the training rows' own: on them (no negatives under pu-umbrella) every
    /// feature has mean 0 and standard deviation 1.
    #[test]
    fn usmo_pu_umbrella_scaler_and_lambda_never_see_the_calibration_rows() {
        let usmo = ["--algo", "usmo", "--tau", "0.1", "--prior", "0.22"];
        let setup = usmo_at_first_tau(&[&usmo[..], &PU_FLAGS].concat(), held_out_rows);
        let training = setup.prep.data.rows.select(&setup.prep.rows);
        let m = training.as_dense().expect("dense rows");
        for column in m.columns() {
            let n = column.len() as f64;
            let mean = column.sum() / n;
            let sd = (column.mapv(|v| (v - mean).powi(2)).sum() / n).sqrt();
            assert!(mean.abs() < 1e-9 && (sd - 1.0).abs() < 1e-9, "{mean} {sd}");
        }
    }

    /// With umbrella, USMO calibrates on every negative of its part (it never trains on them):
    /// they were kept out of its scaler already, and now out of the λ cross-validation too,
    /// which counted them as unlabeled rows.
    #[test]
    fn usmo_umbrella_lambda_never_sees_the_calibration_negatives() {
        usmo_at_first_tau(
            &[
                "--algo",
                "usmo",
                "--tau",
                "0.1",
                "--threshold",
                "umbrella",
                "--pu-labeled-fraction",
                "0.5",
                "--prior",
                "0.3",
                "--seed",
                "3",
            ],
            |_, part| part.indices_of(Label::Negative),
        );
    }
}
