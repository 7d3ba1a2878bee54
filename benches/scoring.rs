//! In-process scoring (`KernelExpansion::decision_dense`: blocks of 256 events, RBF as one
//! matrix product per block, linear collapsed to w) against the plain loops the targets name,
//! on the same events:
//! - `rbf/ours` vs `rbf/naive` (per event × per support vector, scalar squared distance then
//!   `exp`): target ours ≥ 2.5× faster;
//! - `linear/ours` vs `linear/plain` (a dot product with w per event): target ours ≥ 0.8× the
//!   plain loop's speed.
//!
//! The expansion is 1 500 min-max scaled spambase rows (d = 57) as support vectors with fixed
//! pseudo-random coefficients, γ = 1/d; the events are 3 072 other spambase rows. Scoring
//! speed depends on the support-vector count and d only, not on how the coefficients were
//! trained (`neyman bench scoring --model M` measures a trained model the same way).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use neyman::data::{read, ReadOptions, ScaleKind, Scaler};
use neyman::learn::kernel::{Kernel, KernelExpansion};

const SUPPORT: usize = 1_500;
const EVENTS: usize = 3_072;

fn naive_rbf(support: &[f64], coef: &[f64], bias: f64, gamma: f64, x: &[f64], d: usize) -> f64 {
    let mut acc = bias;
    for (s, &c) in support.chunks_exact(d).zip(coef) {
        let mut dist = 0.0;
        for (a, b) in x.iter().zip(s) {
            let t = a - b;
            dist += t * t;
        }
        acc += c * (-gamma * dist).exp();
    }
    acc
}

fn scoring(c: &mut Criterion) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/spambase.csv.gz");
    let data = read(&path, &ReadOptions::default()).expect("bundled spambase reads");
    let scaled = Scaler::fit(ScaleKind::MinMax, &data.rows).transform(&data.rows);
    let all = scaled.as_dense().expect("spambase is dense");
    let d = all.ncols();
    assert!(all.nrows() >= SUPPORT + EVENTS, "spambase has 4 601 rows");
    let support = all.slice(ndarray::s![..SUPPORT, ..]).to_owned();
    let events = all.slice(ndarray::s![SUPPORT..SUPPORT + EVENTS, ..]);
    let coef: Vec<f64> = (0..SUPPORT)
        .map(|i| ((i * 7919 % 101) as f64 - 50.0) / 50.0)
        .collect();
    let bias = -0.25;
    let gamma = 1.0 / d as f64;
    let support_flat: Vec<f64> = support.iter().copied().collect();
    let events_flat: Vec<f64> = events.iter().copied().collect();
    let rbf = KernelExpansion::new(
        Kernel::Rbf { gamma },
        neyman::data::Rows::dense(support.clone()),
        coef.clone(),
        bias,
    );
    let linear = KernelExpansion::new(
        Kernel::Linear,
        neyman::data::Rows::dense(support),
        coef.clone(),
        bias,
    );
    let w = linear.linear_weights().expect("linear weights").to_vec();

    // Both sides compute the same scores (the bench would be meaningless otherwise).
    let mut out = vec![0.0; EVENTS];
    rbf.decision_dense(events, &mut out);
    for (x, o) in events_flat.chunks_exact(d).zip(&out) {
        let reference = naive_rbf(&support_flat, &coef, bias, gamma, x, d);
        assert!((o - reference).abs() <= 1e-9 * reference.abs().max(1.0));
    }

    let mut group = c.benchmark_group("scoring");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.sample_size(20);
    group.bench_function("rbf/ours", |b| {
        b.iter(|| rbf.decision_dense(black_box(events), &mut out))
    });
    group.bench_function("rbf/naive", |b| {
        b.iter(|| {
            for (x, o) in events_flat.chunks_exact(d).zip(out.iter_mut()) {
                *o = naive_rbf(&support_flat, &coef, bias, gamma, black_box(x), d);
            }
        })
    });
    group.bench_function("linear/ours", |b| {
        b.iter(|| linear.decision_dense(black_box(events), &mut out))
    });
    group.bench_function("linear/plain", |b| {
        b.iter(|| {
            for (x, o) in events_flat.chunks_exact(d).zip(out.iter_mut()) {
                let mut acc = bias;
                for (a, b) in black_box(x).iter().zip(&w) {
                    acc += a * b;
                }
                *o = acc;
            }
        })
    });
    group.finish();
}

criterion_group!(benches, scoring);
criterion_main!(benches);
