//! `neyman certify`: the exact S3VM (model (8), balance (11) unless --no-balance) by the SDP
//! branch-and-bound of `learn::s3vm::exact`, with a JSON or text report on stdout and the
//! search's log on stderr.
//!
//! The instance: every row of the file, labels as the file has them (1 / -1 / 0) or hidden by
//! --labeled-fraction / --labeled-count (the cuts3vm protocol, `Dataset::hide_labels`),
//! features standardised over all rows, model (8) built as `bench sdp` builds it
//! ([`super::sdp::exact_instance`]). The first incumbent comes from the supervised L2-SVM's
//! labelling; Ctrl-C, --time-limit and --node-limit end the search with the best labelling
//! and the global safe lower bound.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use super::args::{CertifyArgs, ReportFormat};
use super::sdp::{exact_instance, finite_or_null};
use super::{read_model, CliError};
use crate::data::{read, Dataset, Label};
use crate::learn::s3vm::exact::{
    qp24, relative_gap, supervised, CertifyParams, ExactError, SearchEvent, SearchProgress,
};
use crate::learn::s3vm::sdp::relax::Relaxation;
use crate::learn::Scorer;

/// Set by the Ctrl-C handler, polled by the search before every interior-point step.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

impl From<ExactError> for CliError {
    fn from(e: ExactError) -> CliError {
        match e {
            ExactError::Param(_) => CliError::Usage(e.to_string()),
            ExactError::Sdp(s) => s.into(),
            other => CliError::Training(other.to_string()),
        }
    }
}

pub fn certify(args: &CertifyArgs) -> Result<(), CliError> {
    let usage = |m: String| Err(CliError::Usage(m));
    if args.threads == 0 {
        return usage("--threads must be at least 1".into());
    }
    if !(args.log_every.is_finite() && args.log_every > 0.0) {
        return usage(format!("--log-every must be > 0, got {}", args.log_every));
    }
    let params = CertifyParams {
        gap: args.gap,
        time_limit: args.time_limit,
        node_limit: args.node_limit,
        threads: args.threads,
        ..CertifyParams::default()
    }
    .check()?;
    let mut data = read(&args.data, &args.read.options(false))
        .map_err(|e| CliError::Usage(format!("--data {}: {e}", args.data.display())))?;
    if data.len() > args.max_rows {
        return usage(format!(
            "the file has {} rows, above --max-rows {}: the SDP is n×n (memory n², time n³ per \
             node)",
            data.len(),
            args.max_rows
        ));
    }
    if let Some(row) = data.first_non_finite() {
        return usage(format!("row {row} of the file has a non-finite feature"));
    }
    let truth = match args.labelled.rule() {
        Some(rule) => Some(data.hide_labels(rule, args.seed)?),
        None => None,
    };
    let (positive, negative) = (data.count(Label::Positive), data.count(Label::Negative));
    if positive == 0 || negative == 0 {
        return usage(format!(
            "the labelled rows must hold both classes; they have {positive} positive and \
             {negative} negative rows"
        ));
    }
    let compare = match &args.compare_model {
        Some(path) => Some(compare_labelling(path, &data)?),
        None => None,
    };
    let model = exact_instance(&data, &args.model, args.cl)?;
    let (_, start) = supervised(&model.gram, &model.penalties, &data.labels)?;
    // The compared model's labelling is also a start for the incumbent: the optimum can only
    // be at or below it.
    let starts: Vec<Vec<f64>> = std::iter::once(start.clone())
        .chain(compare.clone())
        .collect();
    let root = Relaxation::for_labels(model.c.clone(), &data.labels, !args.no_balance)?;
    // After the root, --threads nodes are evaluated at once (each on its own thread), and
    // OBBT's problems run on this pool of as many threads.
    rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .thread_name(|i| format!("neyman-certify-{i}"))
        .build_global()
        .map_err(|e| {
            CliError::Usage(format!(
                "--threads {}: cannot start the threads: {e}",
                args.threads
            ))
        })?;
    install_interrupt_handler();
    let started = Instant::now();
    let mut log = SearchLog::new(Duration::from_secs_f64(args.log_every));
    let certificate = params.solve(&root, &starts, &INTERRUPTED, &mut |p| log.show(p))?;
    drop(log);
    let seconds = started.elapsed().as_secs_f64();

    let objective = certificate.incumbent.objective;
    let unlabeled: Vec<usize> = data.indices_of(Label::Unlabeled);
    let label_of = |s: f64| if s < 0.0 { -1 } else { 1 };
    let labels: Vec<Value> = unlabeled
        .iter()
        .map(|&i| json!({"id": data.ids[i], "label": label_of(certificate.signs[i])}))
        .collect();
    let mut report = json!({
        "status": certificate.status,
        "objective": objective,
        "lower_bound": finite_or_null(certificate.lower_bound),
        "gap": relative_gap(objective, certificate.lower_bound),
        "nodes": certificate.nodes,
        "root_lower_bound": finite_or_null(certificate.root_lower_bound),
        "root_gap": relative_gap(certificate.root_upper_bound, certificate.root_lower_bound),
        "sdp_solves": certificate.sdp_solves,
        "root_rounds": certificate.root_rounds,
        "root_cuts": certificate.root_cuts,
        "obbt_rounds": certificate.obbt_rounds,
        "obbt_seconds": certificate.obbt_seconds,
        "seconds": seconds,
        "rows": data.len(),
        "labelled": model.labelled,
        "unlabeled": model.unlabeled,
        "kernel": model.kernel,
        "cl": args.cl,
        "cu": model.cu,
        "balance": !args.no_balance,
        "rho": root.balance.as_ref().map(|b| b.rho),
        "threads": args.threads,
        "labels": labels,
    });
    if let Some(truth) = &truth {
        let accuracy = |signs: &[f64]| {
            let right = unlabeled
                .iter()
                .filter(|&&i| label_of(signs[i]) == i32::from(truth[i].code()))
                .count();
            right as f64 / unlabeled.len() as f64
        };
        report["accuracy"] = json!(accuracy(&certificate.signs));
        report["baseline_accuracy"] = json!(accuracy(&start));
    }
    if let Some(signs) = &compare {
        match qp24::solve(&model.c, signs, root.balance.as_ref())? {
            Some(sol) => {
                report["compare_feasible"] = json!(true);
                report["compare_objective"] = json!(sol.objective);
                report["compare_gap"] = json!(relative_gap(sol.objective, certificate.lower_bound));
            }
            None => report["compare_feasible"] = json!(false),
        }
    }
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => print_text(&report),
    }
    Ok(())
}

/// Ctrl-C sets [`INTERRUPTED`] (the search then stops with `cancelled` and reports); a second
/// Ctrl-C exits at once. A thread with its own small runtime waits for the signal.
fn install_interrupt_handler() {
    std::thread::spawn(|| {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
        else {
            return;
        };
        runtime.block_on(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                INTERRUPTED.store(true, Ordering::Relaxed);
                eprintln!("interrupted: stopping and reporting (Ctrl-C again to quit now)");
            }
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        });
    });
}

/// The search's log on stderr: a line every `every` (nodes, open nodes, bounds and gap, as a
/// MIP solver's log) and, on a terminal, a spinner with the same state.
struct SearchLog {
    every: Duration,
    last: Instant,
    bar: Option<ProgressBar>,
}

impl SearchLog {
    fn new(every: Duration) -> SearchLog {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} certify {elapsed}: {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        SearchLog {
            every,
            last: Instant::now(),
            bar,
        }
    }

    fn show(&mut self, event: &SearchEvent) {
        let p = match event {
            SearchEvent::Node(p) => p,
            SearchEvent::Root(r) => {
                return self.print(format!(
                    "certify {:.1} s: root round {} ({} IPM iterations, {}), cuts +{} -{} = {}, \
                     LB {:.6e}, gap {:.3} %",
                    r.seconds,
                    r.round,
                    r.iterations,
                    r.status.as_str(),
                    r.added,
                    r.removed,
                    r.cuts,
                    r.lower,
                    100.0 * relative_gap(r.upper, r.lower)
                ))
            }
            SearchEvent::Obbt(o) => {
                return self.print(format!(
                    "certify {:.1} s: OBBT for UB {:.6e}: {} bounds moved, {:.2} s",
                    o.seconds, o.upper, o.changed, o.took
                ))
            }
        };
        let line = describe(p);
        if let Some(bar) = &self.bar {
            bar.set_message(line.clone());
        }
        if p.nodes == 1 || self.last.elapsed() >= self.every {
            self.last = Instant::now();
            self.print(format!("certify {:.0} s: {line}", p.seconds));
        }
    }

    fn print(&self, line: String) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Drop for SearchLog {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The labelling `--compare-model` gives the file: the labelled rows keep their labels, the
/// unlabeled ones take the model's decision (its threshold, else score ≥ 0). Read before the
/// search, so a bad model file is refused at once, not after an hour of branch-and-bound.
fn compare_labelling(path: &Path, data: &Dataset) -> Result<Vec<f64>, CliError> {
    // A bad model file is an input error (exit 2), like a bad --data file.
    let other = read_model(path)
        .map_err(|e| CliError::Usage(format!("--compare-model {}: {e}", path.display())))?;
    // The model scores the file's own features (it carries its scaling).
    let raw = &data.rows;
    if other.n_features() != raw.n_features() {
        return Err(CliError::Usage(format!(
            "--compare-model {}: the model expects {} features, the file has {}",
            path.display(),
            other.n_features(),
            raw.n_features()
        )));
    }
    let mut scores = vec![0.0; data.len()];
    Ok(other.labelling(data, &mut scores))
}

/// `nodes 45 (open 12), UB 1.234567e0, LB 1.230000e0, gap 0.370 %`.
fn describe(p: &SearchProgress) -> String {
    format!(
        "nodes {} (open {}), UB {:.6e}, LB {:.6e}, gap {:.3} %",
        p.nodes,
        p.open,
        p.upper,
        p.lower,
        100.0 * relative_gap(p.upper, p.lower)
    )
}

fn print_text(r: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "certify: {} after {} nodes ({} SDP solves), {:.2} s",
        r["status"],
        r["nodes"],
        r["sdp_solves"],
        f(&r["seconds"])
    );
    println!(
        "objective {:.10e}, lower bound {:.10e}, gap {:.4} % (root: bound {:.10e}, gap {:.4} %)",
        f(&r["objective"]),
        f(&r["lower_bound"]),
        100.0 * f(&r["gap"]),
        f(&r["root_lower_bound"]),
        100.0 * f(&r["root_gap"])
    );
    if r.get("accuracy").is_some() {
        println!(
            "accuracy on the unlabeled rows {:.4} (supervised L2-SVM {:.4})",
            f(&r["accuracy"]),
            f(&r["baseline_accuracy"])
        );
    }
}
