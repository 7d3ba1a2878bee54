//! The Γ_k projection: Algorithm 2 (`dc`, [`project`]) against the sort-and-sweep reference
//! (`sort`, [`project_sorted`]) and a streaming baseline (`stream`: one plain pass summing both
//! inputs, the floor for anything that reads them), on iid N(0,1) inputs with a fixed seed,
//! m = n, k/n ∈ {1e-4, 0.01, 0.5}.
//!
//! Besides the criterion timings it prints, per case, the element visits per entry
//! (target ≤ 6) and the number of trial points. Sizes 10⁴, 10⁵, 10⁶ unless
//! `NEYMAN_BENCH_SIZES=1000000,10000000`; the targets are dc ≥ 3× faster than sort at 10⁶ and
//! (dc/stream at 10⁷) ≤ 1.5·(dc/stream at 10⁶).

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use neyman::learn::projection::{project, project_sorted, ProjectionWorkspace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const RATIOS: [f64; 3] = [1e-4, 0.01, 0.5];

fn sizes() -> Vec<usize> {
    std::env::var("NEYMAN_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000])
}

/// iid N(0,1) by Box–Muller.
fn normals(rng: &mut ChaCha8Rng, len: usize) -> Vec<f64> {
    (0..len)
        .map(|_| {
            let (u1, u2) = (rng.gen::<f64>().max(f64::MIN_POSITIVE), rng.gen::<f64>());
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        })
        .collect()
}

fn k_of(ratio: f64, n: usize) -> usize {
    ((ratio * n as f64) as usize).clamp(1, n)
}

fn projection(c: &mut Criterion) {
    let inputs: Vec<(Vec<f64>, Vec<f64>)> = sizes()
        .into_iter()
        .map(|n| {
            let mut rng = ChaCha8Rng::seed_from_u64(1801);
            (normals(&mut rng, n), normals(&mut rng, n))
        })
        .collect();
    let mut ws = ProjectionWorkspace::default();
    for (a0, b0) in &inputs {
        let n = a0.len();
        let (mut alpha, mut beta) = (vec![0.0; n], vec![0.0; n]);
        for ratio in RATIOS {
            let k = k_of(ratio, n);
            let stats = project(a0, b0, k, &mut alpha, &mut beta, &mut ws).expect("valid input");
            eprintln!(
                "m = n = {n}, k = {k}: {:.2} visits per entry, {} trial points",
                stats.visits as f64 / (2 * n) as f64,
                stats.iterations
            );
        }
    }

    let mut group = c.benchmark_group("projection_stream");
    for (a0, b0) in &inputs {
        let n = a0.len();
        configure(&mut group, n);
        group.bench_with_input(
            BenchmarkId::from_parameter(n),
            &(a0, b0),
            |bch, (a0, b0)| bch.iter(|| black_box(a0.iter().sum::<f64>() + b0.iter().sum::<f64>())),
        );
    }
    group.finish();

    for sorted in [false, true] {
        let mut group = c.benchmark_group(if sorted {
            "projection_sort"
        } else {
            "projection_dc"
        });
        for (a0, b0) in &inputs {
            let n = a0.len();
            configure(&mut group, n);
            let (mut alpha, mut beta) = (vec![0.0; n], vec![0.0; n]);
            for ratio in RATIOS {
                let k = k_of(ratio, n);
                let id = BenchmarkId::new(format!("k_over_n={ratio}"), n);
                group.bench_function(id, |bch| {
                    bch.iter(|| {
                        let stats = if sorted {
                            project_sorted(a0, b0, k, &mut alpha, &mut beta)
                        } else {
                            project(a0, b0, k, &mut alpha, &mut beta, &mut ws)
                        };
                        black_box(stats.expect("valid input"))
                    })
                });
            }
        }
        group.finish();
    }
}

/// Throughput in entries (m + n); fewer samples for the large sizes.
fn configure(group: &mut BenchmarkGroup<WallTime>, n: usize) {
    group.throughput(Throughput::Elements(2 * n as u64));
    group.sample_size(if n >= 100_000 { 10 } else { 50 });
}

criterion_group!(benches, projection);
criterion_main!(benches);
