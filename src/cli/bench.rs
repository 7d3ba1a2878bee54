//! `neyman bench ...`: speed measured in one run against a baseline of the same run, or against
//! the same work at other sizes.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::args::{
    BenchProjectionArgs, BenchReplayArgs, BenchScoringArgs, BenchTfplArgs, ReportFormat,
};
use super::progress::Progress;
use super::{read_model, CliError};
use crate::config::LoadedConfig;
use crate::daemon::baseline::online_lr;
use crate::daemon::{Options, Source};
use crate::data::{read, Dataset, Label, Rows};
use crate::learn::kernel::{Kernel, KernelExpansion};
use crate::learn::projection::{project, project_sorted, ProjectionWorkspace};
use crate::learn::spec::tfpl_scaler;
use crate::learn::tfpl::TfplParams;
use crate::learn::Scorer;
use crate::stream::event::EventLimits;

/// iid N(0, 1) values (Box–Muller) from a fixed seed.
fn normals(len: usize, rng: &mut ChaCha8Rng) -> Vec<f64> {
    let mut out = Vec::with_capacity(len + 1);
    while out.len() < len {
        let u1: f64 = 1.0 - rng.gen::<f64>();
        let u2: f64 = rng.gen();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
        out.push(r * c);
        out.push(r * s);
    }
    out.truncate(len);
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `neyman bench projection`: the divide-and-conquer projection onto Γ_k (`dc`), the
/// sort-and-sweep reference (`sort`) and one plain pass summing both inputs (`stream`, the
/// floor any linear-time method pays), medians over `--repeats`, on iid N(0,1) inputs from
/// seed 0 with m = n unless `--m` is given and k = max(1, ⌊F·n⌋).
pub fn projection(args: &BenchProjectionArgs) -> Result<(), CliError> {
    if args.n == 0 || args.m == Some(0) || args.repeats == 0 {
        return Err(CliError::Usage(
            "--n, --m and --repeats must be at least 1".into(),
        ));
    }
    if !(args.k_fraction >= 0.0 && args.k_fraction <= 1.0) {
        return Err(CliError::Usage(format!(
            "--k-fraction must be in [0, 1], got {}",
            args.k_fraction
        )));
    }
    let (n, m) = (args.n, args.m.unwrap_or(args.n));
    let k = ((args.k_fraction * n as f64).floor() as usize).clamp(1, n);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let a0 = normals(m, &mut rng);
    let b0 = normals(n, &mut rng);
    let (mut alpha, mut beta) = (vec![0.0; m], vec![0.0; n]);
    let mut ws = ProjectionWorkspace::default();
    let failed = |e| CliError::Training(format!("projection failed: {e}"));
    let (mut dc, mut sort, mut stream, mut visits) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let progress = Progress::new(false, "bench projection", args.repeats, "repeats");
    for _ in progress.over(0..args.repeats) {
        let start = Instant::now();
        let stats = project(&a0, &b0, k, &mut alpha, &mut beta, &mut ws).map_err(failed)?;
        dc.push(start.elapsed().as_secs_f64());
        visits = stats.visits;
        let start = Instant::now();
        project_sorted(&a0, &b0, k, &mut alpha, &mut beta).map_err(failed)?;
        sort.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        let total: f64 = a0.iter().sum::<f64>() + b0.iter().sum::<f64>();
        std::hint::black_box(total);
        stream.push(start.elapsed().as_secs_f64());
    }
    let (dc, sort, stream) = (median(dc), median(sort), median(stream));
    let report = json!({
        "m": m,
        "n": n,
        "k": k,
        "repeats": args.repeats,
        "dc_seconds": dc,
        "sort_seconds": sort,
        "stream_seconds": stream,
        "visits": visits,
        "visits_per_element": visits as f64 / (m + n) as f64,
        "sort_over_dc": sort / dc,
        "dc_over_stream": dc / stream,
    });
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => println!(
            "projection m={m} n={n} k={k}: dc {dc:.6}s, sort {sort:.6}s ({:.1}x), stream \
             {stream:.6}s, {visits} visits ({:.2} per element)",
            sort / dc,
            visits as f64 / (m + n) as f64
        ),
    }
    Ok(())
}

/// The naive RBF baseline: per event, scale, then per support vector a scalar squared distance
/// and `exp`. Same build flags as the real path; `black_box` keeps the work.
fn naive_rbf(expansion: &KernelExpansion, gamma: f64, scaled: &[f64], d: usize, out: &mut [f64]) {
    let sv = expansion
        .support
        .as_dense()
        .expect("the bench densifies the support vectors");
    for (x, o) in scaled.chunks_exact(d).zip(out.iter_mut()) {
        let mut acc = expansion.bias;
        for (s, &c) in sv.outer_iter().zip(&expansion.coef) {
            let mut dist = 0.0;
            for (a, b) in x.iter().zip(s.iter()) {
                let t = a - b;
                dist += t * t;
            }
            acc += c * (-gamma * dist).exp();
        }
        *o = std::hint::black_box(acc);
    }
}

/// `neyman bench scoring`: in-process batched scoring (`Scorer::score_batch`, blocks of 256,
/// no per-event allocation) against plain loops over the same events, in one run:
/// - `rbf`: the model's support vectors and coefficients with an RBF kernel (the model's γ, or
///   1/d for a non-RBF model) against a naive loop (per event × per support vector, scalar
///   squared distance then `exp`); target speedup ≥ 2.5.
/// - `linear`: the same support vectors with a linear kernel (collapsed to w) against a plain
///   dot-product loop over w; target ratio ≥ 0.8.
///
/// Events are iid N(0, 1) from `--seed`; both sides scale them with the model's scaler, so the
/// comparison is of the scoring itself. Medians over `--repeats`.
pub fn scoring(args: &BenchScoringArgs) -> Result<(), CliError> {
    if args.events == 0 || args.repeats == 0 {
        return Err(CliError::Usage(
            "--events and --repeats must be at least 1".into(),
        ));
    }
    let model = read_model(&args.model)?;
    let d = model.n_features();
    let scaler = model.scaler().clone();
    let expansion = model.expansion();
    // Dense support vectors, so both paths read the same memory layout.
    let support = match &expansion.support {
        Rows::Dense(_) => expansion.support.clone(),
        sparse => {
            let mut m = ndarray::Array2::zeros((sparse.n_rows(), d));
            for (r, mut row) in m.outer_iter_mut().enumerate() {
                if let Some(slice) = row.as_slice_mut() {
                    sparse.row(r).write_dense(slice);
                }
            }
            Rows::dense(m)
        }
    };
    let gamma = match expansion.kernel {
        Kernel::Rbf { gamma } => gamma,
        _ => 1.0 / d.max(1) as f64,
    };
    let coef = expansion.coef.clone();
    let rbf = KernelExpansion::new(
        Kernel::Rbf { gamma },
        support.clone(),
        coef.clone(),
        expansion.bias,
    );
    let linear = KernelExpansion::new(Kernel::Linear, support.clone(), coef, expansion.bias);
    let w = linear
        .linear_weights()
        .ok_or_else(|| CliError::Training("a linear expansion has weights".into()))?
        .to_vec();

    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let raw = ndarray::Array2::from_shape_vec((args.events, d), normals(args.events * d, &mut rng))
        .map_err(|e| CliError::Training(e.to_string()))?;
    let raw_rows = Rows::dense(raw);
    let scaled = scaler.transform(&raw_rows);
    let Some(scaled_view) = scaled.as_dense() else {
        return Err(CliError::Training("scaled rows are not dense".into()));
    };
    let flat: Vec<f64> = scaled_view.iter().copied().collect();
    let mut out = vec![0.0; args.events];
    let mut reference = vec![0.0; args.events];
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64()
    };
    let (mut rbf_ours, mut rbf_naive, mut lin_ours, mut lin_plain) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut worst_diff: f64 = 0.0;
    let progress = Progress::new(false, "bench scoring", 2 * args.repeats, "repeats");
    for _ in progress.over(0..args.repeats) {
        rbf_ours.push(time(&mut || rbf.decision_dense(scaled_view, &mut out)));
        rbf_naive.push(time(&mut || {
            naive_rbf(&rbf, gamma, &flat, d, &mut reference)
        }));
        for (a, b) in out.iter().zip(&reference) {
            worst_diff = worst_diff.max((a - b).abs() / b.abs().max(1.0));
        }
        lin_ours.push(time(&mut || linear.decision_dense(scaled_view, &mut out)));
        lin_plain.push(time(&mut || {
            for (x, o) in flat.chunks_exact(d).zip(reference.iter_mut()) {
                let mut acc = linear.bias;
                for (a, b) in x.iter().zip(&w) {
                    acc += a * b;
                }
                *o = std::hint::black_box(acc);
            }
        }));
        for (a, b) in out.iter().zip(&reference) {
            worst_diff = worst_diff.max((a - b).abs() / b.abs().max(1.0));
        }
    }
    // The whole in-process path (scaling included) for the model as it is.
    let mut full = Vec::new();
    for _ in progress.over(0..args.repeats) {
        full.push(time(&mut || model.score_batch(&raw_rows, &mut out)));
    }
    let (ro, rn, lo, lp, fm) = (
        median(rbf_ours),
        median(rbf_naive),
        median(lin_ours),
        median(lin_plain),
        median(full),
    );
    let report = json!({
        "events": args.events,
        "n_features": d,
        "n_support": support.n_rows(),
        "batch": 256,
        "rbf": {"gamma": gamma, "ours_seconds": ro, "naive_seconds": rn, "speedup": rn / ro},
        "linear": {"ours_seconds": lo, "plain_seconds": lp, "ratio": lp / lo},
        "model": {"algorithm": model.algorithm(), "seconds": fm,
                  "events_per_second": args.events as f64 / fm},
        "max_relative_difference": worst_diff,
    });
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => println!(
            "{} events, d = {d}, {} support vectors\nrbf: ours {ro:.4}s, naive {rn:.4}s, speedup {:.2}\nlinear: ours {lo:.4}s, plain {lp:.4}s, ratio {:.2}\nmodel ({}): {:.0} events/s",
            args.events,
            support.n_rows(),
            rn / ro,
            lp / lo,
            model.algorithm(),
            args.events as f64 / fm
        ),
    }
    Ok(())
}

/// `neyman bench tfpl`: τ-FPL (linear kernel) training time as n grows. The data file is read
/// and scaled as `neyman train --algo tfpl` does (scaler fitted on every row, then ‖x‖ ≤ 1),
/// and each factor F trains on the rows repeated F times: our analogue of the paper's
/// up-sampled real-sim experiment, with the same distribution at every size, so a linear-time
/// solver should take about F times as long. Reports, per factor, n, the median seconds over
/// `--repeats` fits, the iterations and whether the fit converged; then
/// `ratio_max_over_min` = (t(max F)/t(min F)) / (max F/min F), 1 for exactly linear time,
/// and `t8_over_t1` when the factors include 1 and 8 (the target is ≤ 10).
pub fn tfpl(args: &BenchTfplArgs, cancel: &AtomicBool) -> Result<(), CliError> {
    if args.factors.is_empty() || args.factors.contains(&0) || args.repeats == 0 {
        return Err(CliError::Usage(
            "--factors must list values ≥ 1 and --repeats must be at least 1".into(),
        ));
    }
    let mut params = TfplParams::new(args.tau, args.reg);
    params.tol = args.tol.unwrap_or(params.tol);
    params.solver = args.solver.into();
    let params = params.check().map_err(|e| CliError::Usage(e.to_string()))?;
    let data = read(&args.data, &args.read.options(false))?;
    let base = Dataset {
        rows: tfpl_scaler(args.scale.into(), &data).transform(&data.rows),
        labels: data.labels,
        ids: data.ids,
    };
    let mut factors = args.factors.clone();
    factors.sort_unstable();
    factors.dedup();
    let sets: Vec<Dataset> = factors
        .iter()
        .map(|&factor| Dataset {
            rows: Rows::concat(&vec![&base.rows; factor]),
            labels: (0..factor)
                .flat_map(|_| base.labels.iter().copied())
                .collect(),
            ids: (0..factor)
                .flat_map(|r| base.ids.iter().map(move |id| format!("{id}#{r}")))
                .collect(),
        })
        .collect();
    // Repeats go round the factors (1, 2, 4, 8, 1, 2, …) rather than one factor at a time, so
    // a change in the load of a shared machine hits every factor alike instead of skewing the
    // ratios.
    let mut seconds = vec![Vec::with_capacity(args.repeats); factors.len()];
    let mut reports = vec![None; factors.len()];
    let progress = Progress::new(false, "bench tfpl", args.repeats, "repeats");
    for _ in progress.over(0..args.repeats) {
        for (i, set) in sets.iter().enumerate() {
            let start = Instant::now();
            let fit = params
                .fit(set, cancel)
                .map_err(|e| CliError::Training(e.to_string()))?;
            seconds[i].push(start.elapsed().as_secs_f64());
            reports[i] = Some(fit.report);
        }
    }
    let mut results = Vec::with_capacity(factors.len());
    let mut seconds_of = Vec::with_capacity(factors.len());
    for (i, set) in sets.iter().enumerate() {
        let report = reports[i]
            .take()
            .ok_or_else(|| CliError::Usage("--repeats must be at least 1".into()))?;
        let median_seconds = median(seconds[i].clone());
        seconds_of.push(median_seconds);
        results.push(json!({
            "factor": factors[i],
            "n": set.len(),
            "n_positive": set.count(Label::Positive),
            "n_negative": set.count(Label::Negative),
            "k": report.k,
            "median_seconds": median_seconds,
            "seconds": seconds[i],
            "iterations": report.iterations,
            "seconds_per_iteration": median_seconds / report.iterations.max(1) as f64,
            "restarts": report.restarts,
            "projection_visits": report.projection_visits,
            "relative_gap": report.relative_gap,
            "converged": report.converged,
        }));
    }
    let ratio = |lo: usize, hi: usize| {
        let t = |f: usize| factors.iter().position(|&g| g == f).map(|i| seconds_of[i]);
        match (t(lo), t(hi)) {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        }
    };
    let (min_f, max_f) = (factors[0], factors[factors.len() - 1]);
    let ratio_max_over_min = ratio(min_f, max_f).map(|r| r / (max_f as f64 / min_f as f64));
    let t8_over_t1 = ratio(1, 8);
    let report = json!({
        "data": args.data.display().to_string(),
        "rows": base.len(),
        "tau": args.tau,
        "reg": args.reg,
        "tol": params.tol,
        "solver": params.solver,
        "repeats": args.repeats,
        "factors": results,
        "ratio_max_over_min": ratio_max_over_min,
        "t8_over_t1": t8_over_t1,
    });
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => {
            for r in &results {
                println!(
                    "factor {:>3}: n {:>8}, {:.4}s (median of {}), {} iterations, converged: {}",
                    r["factor"],
                    r["n"],
                    r["median_seconds"].as_f64().unwrap_or(0.0),
                    args.repeats,
                    r["iterations"],
                    r["converged"]
                );
            }
            if let Some(r) = ratio_max_over_min {
                println!("time ratio per unit of n, max over min factor: {r:.2}");
            }
            if let Some(r) = t8_over_t1 {
                println!("t(8n)/t(n): {r:.2}");
            }
        }
    }
    Ok(())
}

/// `neyman bench replay`: the recorded stream through the whole daemon, then through the
/// online logistic regression baseline (`replay --baseline online-lr`), `--rounds` times in
/// alternation, each side with its prequential accounting. Both read and parse the same file;
/// the daemon also windows, retrains (in line, as a replay does), recalibrates, tests for
/// drift and writes its output files (to a temporary directory per round).
pub fn replay(args: &BenchReplayArgs, loaded: LoadedConfig) -> Result<(), CliError> {
    if args.rounds == 0 {
        return Err(CliError::Usage("--rounds must be at least 1".into()));
    }
    let block = usize::try_from(args.block)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| CliError::Usage("--block must be at least 1".into()))?;
    let config = loaded.config;
    let limits = EventLimits {
        max_bytes: config.scoring.max_event_bytes,
        max_features: config.scoring.max_features,
        ..EventLimits::default()
    };
    let (tau, window) = (config.model.tau, config.recalibrate.window);
    let mut rounds = Vec::new();
    let (mut daemon_seconds, mut baseline_seconds) = (0.0, 0.0);
    let mut events_read = 0u64;
    let mut last = None;
    let progress = Progress::new(false, "bench replay", args.rounds, "rounds");
    for round in progress.over(0..args.rounds) {
        let dir = std::env::temp_dir().join(format!(
            "neyman-bench-replay-{}-{round}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| CliError::file(&dir, e))?;
        let mut config = config.clone();
        config.output.scores = dir.join("scores.jsonl");
        config.output.dlq = dir.join("dlq.jsonl");
        config.state.dir = dir.join("state");
        config.http.listen = "127.0.0.1:0".into();
        let options = Options {
            source: Source::Replay {
                path: args.file.clone(),
                speed: None,
            },
            resume: false,
            keep_serving: false,
            threads: 1,
            report_block: Some(block),
        };
        let started = Instant::now();
        let finished = crate::daemon::run(config, options, std::future::pending());
        let daemon = started.elapsed().as_secs_f64();
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove the round's directory");
        }
        let finished = finished?;
        let started = Instant::now();
        let baseline = online_lr(&args.file, block, tau, window, &limits)
            .map_err(|e| CliError::file(&args.file, e))?;
        let base = started.elapsed().as_secs_f64();
        // Both read every record of the same file.
        let events = finished.summary.handled;
        rounds.push(json!({
            "round": round,
            "daemon_seconds": daemon,
            "baseline_seconds": base,
            "daemon_per_second": events as f64 / daemon,
            "baseline_per_second": events as f64 / base,
        }));
        daemon_seconds += daemon;
        baseline_seconds += base;
        events_read += events;
        last = Some((finished, baseline));
    }
    let Some((finished, baseline)) = last else {
        return Err(CliError::Usage("--rounds must be at least 1".into()));
    };
    let daemon_rate = events_read as f64 / daemon_seconds;
    let baseline_rate = events_read as f64 / baseline_seconds;
    let prequential = finished.report.map(|r| r.prequential);
    let figures = |fpr: Option<f64>, tpr: Option<f64>, beyond: usize, blocks: usize| json!({"fpr": fpr, "tpr": tpr, "blocks_beyond_noise": beyond, "blocks_with_negatives": blocks});
    let report = json!({
        "stream": args.file,
        "events": finished.summary.handled,
        "retrains": finished.summary.models_swapped + finished.summary.models_rejected + finished.summary.retrains_failed,
        "daemon_per_second": daemon_rate,
        "baseline": baseline.name,
        "baseline_per_second": baseline_rate,
        "daemon_over_baseline": daemon_rate / baseline_rate,
        "rounds": rounds,
        "daemon_prequential": prequential.as_ref().map(|p| figures(p.fpr, p.tpr, p.blocks_beyond_noise, p.blocks_with_negatives)),
        "baseline_prequential": figures(
            baseline.prequential.fpr,
            baseline.prequential.tpr,
            baseline.prequential.blocks_beyond_noise,
            baseline.prequential.blocks_with_negatives,
        ),
    });
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => println!(
            "{} events, {} retrains: daemon {:.0} events/s, {} {:.0} events/s, ratio {:.2} ({} rounds)",
            report["events"],
            report["retrains"],
            daemon_rate,
            baseline.name,
            baseline_rate,
            daemon_rate / baseline_rate,
            args.rounds
        ),
    }
    Ok(())
}
