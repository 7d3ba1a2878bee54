//! `neyman bench sdp` end to end: the JSON report's fields and values (the own engine and CSDP
//! agree, the safe bound sits below both objectives and the true labelling's), and every bad
//! input refused with exit 2 and the reason.
//!
//! CSDP is the Debian package coinor-csdp (scripts/test.sh installs it).

use serde_json::Value;

mod common;
use common::cli::neyman;

const SONAR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sonar.csv");
const IONOSPHERE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/ionosphere.csv");

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn bench(args: &[&str]) -> Value {
    let mut all = vec!["bench", "sdp", "--report", "json"];
    all.extend_from_slice(args);
    let run = neyman(&all);
    assert!(
        !run.stderr.contains("coinor-csdp"),
        "this test needs CSDP (scripts/test.sh installs coinor-csdp):\n{}",
        run.stderr
    );
    assert_eq!(run.code, 0, "{args:?}:\n{}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

#[test]
fn bench_sdp_reports_agreeing_objectives_and_a_safe_bound() {
    for (data, extra) in [
        (SONAR, &["--rows", "60", "--labeled-fraction", "0.2"][..]),
        (
            IONOSPHERE,
            &[
                "--rows",
                "80",
                "--labeled-count",
                "12",
                "--kernel",
                "rbf",
                "--cl",
                "3",
                "--cu-factor",
                "0.5",
                "--seed",
                "7",
            ][..],
        ),
    ] {
        let r = bench(&[&["--data", data][..], extra].concat());
        let rows = r["rows"].as_u64().expect("rows") as usize;
        let labelled = r["labelled"].as_u64().expect("labelled") as usize;
        let unlabeled = r["unlabeled"].as_u64().expect("unlabeled") as usize;
        assert_eq!(labelled + unlabeled, rows);
        assert_eq!(r["order"], rows + 1);
        // Corner, balance, one box row per labelled point, X_jj ≥ 1 per unlabeled one.
        assert_eq!(r["constraints"], 2 + rows);
        let cl = f(&r["cl"]);
        let delta = if data == SONAR { 1.0 } else { 0.5 };
        assert!((f(&r["cu"]) - labelled as f64 / unlabeled as f64 * delta * cl).abs() < 1e-12);
        let (own, csdp) = (&r["own"], &r["csdp"]);
        assert_eq!(own["status"], "optimal");
        assert_eq!(csdp["code"], 0);
        let (a, b) = (f(&own["primal_objective"]), f(&csdp["primal_objective"]));
        let difference = f(&r["relative_difference"]);
        assert!((difference - (a - b).abs() / a.abs().max(b.abs())).abs() < 1e-15);
        assert!(difference <= 1e-6, "{r}");
        assert_eq!(r["agree"], true);
        assert!(f(&own["relative_gap"]) <= 1e-8);
        assert!(f(&own["iterations"]) >= 5.0 && f(&own["iterations"]) <= 100.0);
        assert!(f(&csdp["iterations"]) >= 5.0);
        let ratio = f(&own["seconds"]) / f(&csdp["seconds"]);
        assert!((f(&r["time_ratio"]) - ratio).abs() <= 1e-9 * ratio);
        let upper = f(&r["upper_bound"]);
        for side in [own, csdp] {
            let bound = f(&side["safe_lower_bound"]["value"]);
            assert!(bound <= a.min(b) * (1.0 + 1e-9), "{r}");
            assert!(bound <= upper);
            assert!(f(&side["safe_lower_bound"]["trace_bound"]) > 1.0);
        }
        // The own engine's bound is within 1e-6 of the optimum.
        assert!(
            f(&own["safe_lower_bound"]["value"]) >= a * (1.0 - 1e-6),
            "{r}"
        );
        assert!(a <= upper * (1.0 + 1e-9));
    }
}

#[test]
fn bench_sdp_refuses_bad_input_with_exit_2() {
    // A valid 20-row instance on sonar, then flags that replace or add to it.
    const VALID: [&str; 6] = ["--data", SONAR, "--rows", "20", "--labeled-count", "4"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = VALID.to_vec();
        args.extend_from_slice(extra);
        args
    };
    let cases: [(Vec<&str>, &str); 7] = [
        (
            vec![
                "--data",
                "/nonexistent/x.csv",
                "--rows",
                "20",
                "--labeled-count",
                "4",
            ],
            "no such file",
        ),
        (
            vec!["--data", SONAR, "--rows", "500", "--labeled-count", "4"],
            "--rows 500",
        ),
        (vec!["--data", SONAR, "--rows", "20"], "--labeled-fraction"),
        (with(&["--cl", "0"]), "--cl"),
        (
            vec!["--data", SONAR, "--rows", "20", "--labeled-count", "40"],
            "--labeled-count",
        ),
        (with(&["--kernel", "rbf", "--gamma", "-1"]), "--gamma"),
        (with(&["--csdp", "/nonexistent/csdp"]), "coinor-csdp"),
    ];
    for (flags, reason) in cases {
        let mut args = vec!["bench", "sdp"];
        args.extend_from_slice(&flags);
        let run = neyman(&args);
        assert_eq!(run.code, 2, "{flags:?}:\n{}{}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains(reason),
            "{flags:?}: {reason:?} not in\n{}",
            run.stderr
        );
    }
}
