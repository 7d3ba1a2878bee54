//! `neyman bench ...`: speed measured in one run against a baseline of the same run.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::args::{BenchProjectionArgs, ReportFormat};
use super::CliError;
use crate::learn::projection::{project, project_sorted, ProjectionWorkspace};

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
    for _ in 0..args.repeats {
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
