//! USMO vs LIBSVM's `svm-train` (Debian `libsvm-tools`) on the same rows, timed in one run.
//!
//! Rows: the first `NEYMAN_LIBSVM_N` rows (default 20000) of shuttle_anomaly, 30 % of the
//! anomalies labelled, min-max scaled; P is class +1 and U class −1 for LIBSVM. Parameters
//! λ = 1e-4, γ = 1, tol 1e-3, cache 256 MiB, π = 0.072; LIBSVM runs
//! `svm-train -s 0 -t 2 -g γ -c 1/(2λn) -w1 n/p -e tol -m 256 -h 1` (the C-SVM of comparable
//! size and cost, not the same problem). Median of 3 for both; prints one JSON object.

mod support;

use std::io::Write;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use neyman::data::{Label, RowRef};
use neyman::learn::kernel::Kernel;
use neyman::learn::usmo::UsmoParams;

const PRIOR: f64 = 0.072;
const LAMBDA: f64 = 1e-4;
const GAMMA: f64 = 1.0;
const TOL: f64 = 1e-3;
const CACHE_MB: usize = 256;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let n_rows: usize = std::env::var("NEYMAN_LIBSVM_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let data = support::pu_data("shuttle_anomaly.csv.gz", false, Some(n_rows));
    let p = data.count(Label::Positive);
    let n = data.count(Label::Unlabeled);

    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("pu.svm");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&file).expect("create"));
    for i in 0..data.len() {
        let label = if data.labels[i] == Label::Positive {
            "+1"
        } else {
            "-1"
        };
        write!(out, "{label}").expect("write");
        if let RowRef::Dense(x) = data.rows.row(i) {
            for (j, v) in x.iter().enumerate().filter(|(_, v)| **v != 0.0) {
                write!(out, " {}:{v}", j + 1).expect("write");
            }
        }
        writeln!(out).expect("write");
    }
    drop(out);

    let c = 1.0 / (2.0 * LAMBDA * n as f64);
    let w1 = n as f64 / p as f64;
    let mut libsvm_times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let status = Command::new("svm-train")
            .args(["-s", "0", "-t", "2", "-q"])
            .args(["-g", &GAMMA.to_string(), "-c", &c.to_string()])
            .args(["-w1", &w1.to_string(), "-e", &TOL.to_string()])
            .args(["-m", &CACHE_MB.to_string(), "-h", "1"])
            .arg(&file)
            .arg(dir.path().join("pu.model"))
            .status()
            .expect("svm-train runs (apt-get install libsvm-tools)");
        assert!(status.success(), "svm-train failed");
        libsvm_times.push(start.elapsed().as_secs_f64());
    }

    let mut params = UsmoParams::new(PRIOR, LAMBDA, Kernel::Rbf { gamma: GAMMA });
    params.tol = TOL;
    params.cache_bytes = CACHE_MB << 20;
    let params = params.check().expect("valid parameters");
    let cancel = AtomicBool::new(false);
    let mut usmo_times = Vec::new();
    let mut report = None;
    for _ in 0..3 {
        let start = Instant::now();
        let fit = params.fit(&data, &cancel).expect("fit");
        usmo_times.push(start.elapsed().as_secs_f64());
        report = Some(fit.report);
    }
    let report = report.expect("three runs");
    let (usmo, libsvm) = (median(usmo_times), median(libsvm_times));
    println!(
        "{}",
        serde_json::json!({
            "n_positive": p,
            "n_unlabeled": n,
            "usmo_seconds_median_of_3": usmo,
            "libsvm_seconds_median_of_3": libsvm,
            "usmo_over_libsvm": usmo / libsvm,
            "usmo_iterations": report.iterations,
            "usmo_kernel_evaluations": report.kernel_evaluations,
            "usmo_cache_hit_rate": report.cache_hit_rate,
            "usmo_converged": report.converged,
        })
    );
}
