//! USMO warm start vs cold start after a 10 % window slide, on shuttle_anomaly (PU: 30 % of the
//! anomalies labelled, min-max scaled, RBF γ = 1, λ = 1e-4, π = 0.072).
//!
//! Besides the criterion timings it prints, per size, the pair steps and kernel values of both
//! runs and their ratios (targets: warm/cold ≤ 1/3 in pair steps and ≤ 0.4 in kernel values).
//! Sizes: 1000 and 5000 rows; set `NEYMAN_BENCH_SIZES=1000,5000,20000` for others.

use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use neyman::data::{read, Dataset, ReadOptions, ScaleKind, Scaler};
use neyman::learn::kernel::Kernel;
use neyman::learn::usmo::{UsmoParams, UsmoValidParams};

fn shuttle() -> Dataset {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/shuttle_anomaly.csv.gz");
    let mut data = read(&path, &ReadOptions::default()).expect("bundled data reads");
    data.pu_relabel(0.3, 1).expect("has positives");
    let scaler = Scaler::fit(ScaleKind::MinMax, &data.rows);
    Dataset {
        rows: scaler.transform(&data.rows),
        ..data
    }
}

fn params() -> UsmoValidParams {
    UsmoParams::new(0.072, 1e-4, Kernel::Rbf { gamma: 1.0 })
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
    let data = shuttle();
    let params = params();
    let cancel = AtomicBool::new(false);
    let mut group = c.benchmark_group("usmo_10pct_slide");
    group.sample_size(10);
    for n in sizes() {
        let slide = n / 10;
        let before = data.select(&(0..n).collect::<Vec<_>>());
        let after = data.select(&(slide..n + slide).collect::<Vec<_>>());
        let previous = params.fit(&before, &cancel).expect("fit");
        let cold = params.fit(&after, &cancel).expect("fit");
        let warm = params
            .fit_with(Some(&previous), &after, &cancel)
            .expect("fit");
        let (c_r, w_r) = (&cold.report, &warm.report);
        eprintln!(
            "n={n}: cold {} pair steps, {} kernel values, {:.3}s | warm {} pair steps, {} kernel \
             values, {:.3}s | warm/cold: steps {:.3}, kernel values {:.3}, time {:.3} | dual \
             rel diff {:.1e}",
            c_r.iterations,
            c_r.kernel_evaluations,
            c_r.train_seconds,
            w_r.iterations,
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
