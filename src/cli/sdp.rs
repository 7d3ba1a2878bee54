//! `neyman bench sdp`: the exact S3VM's root relaxation (20) solved by neyman's own SDP engine
//! and by CSDP in the same run.
//!
//! The instance: the file's rows shuffled with `--seed`, the first `--rows` of them, labels
//! hidden by `--labeled-fraction` / `--labeled-count` (drawn with `--seed`, the protocol of
//! cuts3vm), features standardised over those rows (zero mean, unit population standard
//! deviation). Model (8): C = ½(K + D)⁻¹ with c_k = C_l on labelled rows and
//! C_u = (l/u)·δ·C_l on the others; relaxation (20) with the small row rule (x_i ≥ 1 or ≤ −1
//! on labelled rows, X_jj ≥ 1 on unlabeled ones) and the balance row ρ = (u/l)·Σ_i y_i.
//!
//! Timing: the own engine's solve alone (the problem is built first); CSDP's whole process
//! (reading the SDPA file included, writing it not). CSDP from Debian runs on one thread with
//! the reference BLAS, and faer without its rayon feature is single-threaded too.

use serde_json::{json, Value};

use super::args::{BenchSdpArgs, ExactKernelName, ExactModelArgs, ReportFormat};
use super::csdp::{self, CsdpError};
use super::CliError;

use crate::data::{read, Dataset};
use crate::learn::s3vm::exact::instance::{ExactInstance, ExactKernel, InstanceSpec};
use crate::learn::s3vm::exact::ExactError;
use crate::learn::s3vm::sdp::ipm::SdpParams;
use crate::learn::s3vm::sdp::relax::Relaxation;
use crate::learn::s3vm::sdp::{SafeBound, SdpError};

/// The objectives must agree to this relative difference.
const AGREEMENT: f64 = 1e-6;

impl From<SdpError> for CliError {
    fn from(e: SdpError) -> CliError {
        match e {
            SdpError::Param(_) => CliError::Usage(e.to_string()),
            other => CliError::Training(other.to_string()),
        }
    }
}

/// CSDP missing is a usage error (exit 2: install it); its failures are run-time errors.
impl From<CsdpError> for CliError {
    fn from(e: CsdpError) -> CliError {
        match e {
            CsdpError::NotFound(_) => CliError::Usage(e.to_string()),
            other => CliError::Training(other.to_string()),
        }
    }
}

pub fn bench(args: &BenchSdpArgs) -> Result<(), CliError> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;

    let usage = |m: String| Err(CliError::Usage(m));
    if !args.data.is_file() {
        return usage(format!("--data {}: no such file", args.data.display()));
    }
    let Some(rule) = args.labelled.rule() else {
        return usage(
            "bench sdp needs --labeled-fraction F or --labeled-count N (which rows keep their \
             label)"
                .into(),
        );
    };
    let params = SdpParams {
        tol: args.tol,
        ..SdpParams::default()
    }
    .check()?;
    let data = read(&args.data, &args.read.options(false))?;
    if args.rows < 3 || args.rows > data.len() {
        return usage(format!(
            "--rows {}: must be between 3 and the file's {} rows",
            args.rows,
            data.len()
        ));
    }
    if let Some(row) = data.first_non_finite() {
        return usage(format!("row {row} of the file has a non-finite feature"));
    }
    let mut order: Vec<usize> = (0..data.len()).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(args.seed));
    let mut instance = data.select(&order[..args.rows]);
    let truth = instance.hide_labels(rule, args.seed)?;
    let model = exact_instance(&instance, &args.model, args.cl)?;
    let (labelled, unlabeled, d, kernel, cu) = (
        model.labelled,
        model.unlabeled,
        model.rows.n_features(),
        model.kernel,
        model.cu,
    );
    let relaxation = Relaxation::for_labels(model.c, &instance.labels, true)?;
    let relaxed = relaxation.build()?;
    let problem = &relaxed.problem;

    let start = std::time::Instant::now();
    let own = params.solve(problem);
    let own_seconds = start.elapsed().as_secs_f64();
    let reference = csdp::solve(problem, &args.csdp)?;

    // T of the safe bound: the root's boxes are unbounded, so T comes from the objective of a
    // feasible point, the true labelling's (Relaxation::labelling_point).
    let signs: Vec<f64> = truth.iter().map(|l| f64::from(l.code())).collect();
    let upper = relaxation
        .labelling_point(&signs)
        .and_then(|x| relaxed.rank_one_objective(&x));
    let own_bound = relaxed.safe_lower_bound(&own.duals, upper)?;
    let csdp_bound = relaxed.safe_lower_bound(&reference.duals, upper)?;
    let difference = relative_difference(own.primal_objective, reference.primal_objective);
    let report = json!({
        "data": args.data.display().to_string(),
        "rows": instance.len(),
        "labelled": labelled,
        "unlabeled": unlabeled,
        "features": d,
        "kernel": kernel,
        "cl": args.cl,
        "cu": cu,
        "rho": relaxation.balance.as_ref().map(|b| b.rho),
        "order": problem.order(),
        "constraints": problem.constraints().len(),
        "own": {
            "status": own.status,
            "iterations": own.iterations,
            "primal_objective": own.primal_objective,
            "dual_objective": own.dual_objective,
            "relative_gap": own.relative_gap,
            "primal_infeasibility": own.primal_infeasibility,
            "dual_infeasibility": own.dual_infeasibility,
            "seconds": own_seconds,
            "safe_lower_bound": bound_json(&own_bound),
        },
        "csdp": {
            "code": reference.code,
            "iterations": reference.iterations,
            "primal_objective": reference.primal_objective,
            "dual_objective": reference.dual_objective,
            "seconds": reference.seconds,
            "safe_lower_bound": bound_json(&csdp_bound),
        },
        "upper_bound": upper,
        "relative_difference": difference,
        "agree": difference <= AGREEMENT,
        "time_ratio": own_seconds / reference.seconds,
    });
    if difference > AGREEMENT {
        tracing::warn!(
            own = own.primal_objective,
            csdp = reference.primal_objective,
            "the own engine and CSDP disagree by {difference:e} (relative), above {AGREEMENT:e}"
        );
    }
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => print_text(&report),
    }
    Ok(())
}

/// Model (8) of `instance` ([`ExactInstance::build`]) from the flags; flag mistakes and an
/// instance without labelled or unlabeled rows are usage errors. Shared by `bench sdp` and
/// `certify`.
pub(super) fn exact_instance(
    instance: &Dataset,
    model: &ExactModelArgs,
    cl: f64,
) -> Result<ExactInstance, CliError> {
    for (flag, value) in [("--cl", cl), ("--cu-factor", model.cu_factor)] {
        if !(value.is_finite() && value > 0.0) {
            return Err(CliError::Usage(format!(
                "{flag} must be finite and > 0, got {value}"
            )));
        }
    }
    let spec = InstanceSpec {
        cl,
        cu_factor: model.cu_factor,
        kernel: match model.kernel {
            ExactKernelName::Linear => ExactKernel::Linear,
            ExactKernelName::Rbf => ExactKernel::Rbf(model.gamma),
        },
    };
    ExactInstance::build(instance, &spec).map_err(|e| match e {
        ExactError::Param(m) if m.starts_with("gamma") => CliError::Usage(format!("--{m}")),
        ExactError::Param(m) => CliError::Usage(m),
        other => other.into(),
    })
}

/// |a − b| / max(|a|, |b|), 0 when both are 0.
fn relative_difference(a: f64, b: f64) -> f64 {
    let scale = a.abs().max(b.abs());
    if scale == 0.0 {
        0.0
    } else {
        (a - b).abs() / scale
    }
}

fn bound_json(bound: &SafeBound) -> Value {
    json!({
        "value": finite_or_null(bound.value),
        "dual_value": bound.dual_value,
        "min_eigenvalue_z": bound.min_eigenvalue,
        "trace_bound": finite_or_null(bound.trace_bound),
    })
}

/// JSON has no infinities.
pub(super) fn finite_or_null(v: f64) -> Value {
    if v.is_finite() {
        json!(v)
    } else {
        Value::Null
    }
}

fn print_text(r: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "root SDP (20): {} rows ({} labelled), order {}, {} constraints",
        r["rows"], r["labelled"], r["order"], r["constraints"]
    );
    for (name, side) in [("own ", &r["own"]), ("csdp", &r["csdp"])] {
        println!(
            "{name}: objective {:.10e} (dual {:.10e}), {} iterations, {:.3}s, safe bound {:.10e}",
            f(&side["primal_objective"]),
            f(&side["dual_objective"]),
            side["iterations"],
            f(&side["seconds"]),
            f(&side["safe_lower_bound"]["value"]),
        );
    }
    println!(
        "relative difference {:.2e} (agree: {}), time own/csdp {:.2}",
        f(&r["relative_difference"]),
        r["agree"],
        f(&r["time_ratio"])
    );
}
