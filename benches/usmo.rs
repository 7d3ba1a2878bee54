//! USMO warm start vs cold start after a 10 % window slide: PU data with 30 % of the positives
//! labelled, min-max scaled, RBF γ = 1, λ = 1e-4, π = the positive share of the file.
//!
//! Besides the criterion timings it prints, per size, the pair steps and kernel values of both
//! runs and their ratios (targets: warm/cold ≤ 1/3 in pair steps and ≤ 0.4 in kernel values).
//! `NEYMAN_BENCH_DATA=shuttle|magic` picks shuttle_anomaly (π = 0.072, the default) or
//! magic_gamma (π = 0.648; the file is sorted by class, so its rows are put in one fixed random
//! order to look like a stream); sizes 1000 and 5000 rows unless `NEYMAN_BENCH_SIZES=1000,5000,20000`.

use std::hint::black_box;
use std::sync::atomic::AtomicBool;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use neyman::data::Dataset;
use neyman::learn::kernel::Kernel;
use neyman::learn::usmo::{UsmoParams, UsmoValidParams};

mod support;

/// The bench data set and its prior.
fn dataset() -> (Dataset, f64) {
    match std::env::var("NEYMAN_BENCH_DATA").as_deref() {
        Ok("magic") => (support::pu_data("magic_gamma.csv.gz", true, None), 0.648),
        _ => (
            support::pu_data("shuttle_anomaly.csv.gz", false, None),
            0.072,
        ),
    }
}

fn params(prior: f64) -> UsmoValidParams {
    UsmoParams::new(prior, 1e-4, Kernel::Rbf { gamma: 1.0 })
        .check()
        .expect("valid parameters")
}

fn sizes() -> Vec<usize> {
    std::env::var("NEYMAN_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1000, 5000])
}

fn warm_vs_cold(c: &mut Criterion) {
    let (data, prior) = dataset();
    let params = params(prior);
    let cancel = AtomicBool::new(false);
    let mut group = c.benchmark_group("usmo_10pct_slide");
    group.sample_size(10);
    for n in sizes() {
        let slide = n / 10;
        if n + slide > data.len() {
            eprintln!("n={n}: skipped, the data has only {} rows", data.len());
            continue;
        }
        let before = data.select(&(0..n).collect::<Vec<_>>());
        let after = data.select(&(slide..n + slide).collect::<Vec<_>>());
        let previous = params.fit(&before, &cancel).expect("fit");
        let cold = params.fit(&after, &cancel).expect("fit");
        let warm = params
            .fit_with(Some(&previous), &after, &cancel)
            .expect("fit");
        let (c_r, w_r) = (&cold.report, &warm.report);
        eprintln!(
            "n={n}: cold {} pair steps + {} Newton, {} kernel values, {:.3}s | warm {} pair steps \
             + {} Newton, {} kernel values, {:.3}s | warm/cold: steps {:.3}, kernel values {:.3}, \
             time {:.3} | dual rel diff {:.1e}",
            c_r.iterations,
            c_r.newton_steps,
            c_r.kernel_evaluations,
            c_r.train_seconds,
            w_r.iterations,
            w_r.newton_steps,
            w_r.kernel_evaluations,
            w_r.train_seconds,
            w_r.iterations as f64 / c_r.iterations as f64,
            w_r.kernel_evaluations as f64 / c_r.kernel_evaluations as f64,
            w_r.train_seconds / c_r.train_seconds,
            (w_r.dual_objective - c_r.dual_objective).abs() / c_r.dual_objective.abs()
        );
        group.bench_with_input(BenchmarkId::new("cold", n), &after, |b, d| {
            b.iter(|| black_box(params.fit(d, &cancel).expect("fit")))
        });
        group.bench_with_input(BenchmarkId::new("warm", n), &after, |b, d| {
            b.iter(|| black_box(params.fit_with(Some(&previous), d, &cancel).expect("fit")))
        });
    }
    group.finish();
}

criterion_group!(benches, warm_vs_cold);
criterion_main!(benches);
