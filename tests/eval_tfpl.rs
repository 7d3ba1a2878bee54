//! End-to-end tests of `neyman eval --tau`: the Neyman–Pearson protocol of the τ-FPL paper
//! (Zhang et al., AAAI 2018, Table 3) — report schema, one row per τ and method, the table
//! layout, usage errors, refusals of uncertifiable τ (tfpl and usmo), usmo's π from the prior
//! interval, and the paper's τ-FPL cells on heart, breast-cancer and spambase.
//!
//! Paper cells are compared through `np_score_of_means`, max(mean FPR, τ)/τ − mean TPR: every
//! τ-FPL, CS-SVM-OOB and BS-SVM cell of Table 3 equals that value of its own printed
//! (FPR, TPR) pair up to rounding (heart 5 %: (.0525, .582) → .468; heart 10 %: (.086, .686) →
//! .314; spambase 0.5 %: (.005, .278) → .722), while the mean of per-split scores is larger
//! whenever some split's test FPR exceeds τ (heart 5 %: 30 % of splits here). The per-split mean
//! (`np_score_mean`, the definition) is asserted to be at least the score of the means
//! (each split's score is ≥ 1 − its TPR and convex in the rates).

use std::process::{Command, Stdio};

use serde_json::{Map, Value};
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_neyman");
const HEART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/heart_statlog.csv");
const BREAST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/breast_cancer_wisconsin.csv"
);
const SPAMBASE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/spambase.csv.gz");

/// Runs the binary; returns (exit code, stdout, stderr). Never a panic (101) or a signal.
fn neyman(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("the neyman binary runs");
    let code = output.status.code().expect("exited, not killed");
    let stdout = String::from_utf8(output.stdout).expect("UTF-8 stdout");
    let stderr = String::from_utf8(output.stderr).expect("UTF-8 stderr");
    assert_ne!(code, 101, "neyman {} panicked:\n{stderr}", args.join(" "));
    (code, stdout, stderr)
}

/// `eval` with `args`, which must succeed and print exactly one JSON object.
fn eval_json(args: &[&str]) -> Map<String, Value> {
    let mut all = vec!["eval"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--report", "json"]);
    let (code, stdout, stderr) = neyman(&all);
    assert_eq!(code, 0, "neyman {} failed:\n{stderr}", all.join(" "));
    assert_eq!(
        stdout.trim_end().lines().count(),
        1,
        "one JSON line: {stdout}"
    );
    match serde_json::from_str(&stdout) {
        Ok(Value::Object(map)) => map,
        other => panic!("not a JSON object: {other:?}\n{stdout}"),
    }
}

fn num(map: &Map<String, Value>, key: &str) -> f64 {
    map.get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{key:?} is not a number in {map:?}"))
}

fn results(report: &Map<String, Value>) -> Vec<Map<String, Value>> {
    report["results"]
        .as_array()
        .expect("results is an array")
        .iter()
        .map(|r| r.as_object().expect("each result is an object").clone())
        .collect()
}

/// The result row of (τ, method).
fn row(report: &Map<String, Value>, tau: f64, method: &str) -> Map<String, Value> {
    results(report)
        .into_iter()
        .find(|r| num(r, "tau") == tau && r["method"] == method)
        .unwrap_or_else(|| panic!("no row for τ {tau}, {method}"))
}

/// Checks a paper cell: |np_score_of_means − paper| ≤ max(0.03, 2·sd/√splits), and the
/// per-split mean is at least the score of the means.
fn check_paper_cell(report: &Map<String, Value>, tau: f64, paper: f64, splits: f64) {
    let r = row(report, tau, "tfpl");
    let of_means = num(&r, "np_score_of_means");
    let (mean, sd) = (num(&r, "np_score_mean"), num(&r, "np_score_sd"));
    let tolerance = f64::max(0.03, 2.0 * sd / splits.sqrt());
    assert!(
        (of_means - paper).abs() <= tolerance,
        "τ {tau}: NP-score of the mean rates {of_means:.3} vs the paper's {paper} (tolerance \
         {tolerance:.3}; per-split mean {mean:.3} ± {sd:.3}; FPR {:.4}, TPR {:.3})",
        num(&r, "fpr_mean"),
        num(&r, "tpr_mean")
    );
    assert!(mean >= of_means - 1e-12, "τ {tau}: {mean} < {of_means}");
}

#[test]
fn json_has_one_row_per_tau_and_method_and_a_plot_per_tau() {
    let dir = TempDir::new().expect("temp dir");
    let plot = dir.path().join("roc.svg");
    let args = [
        "--algo",
        "tfpl",
        "--data",
        HEART,
        "--tau",
        "0.05,0.1",
        "--protocol",
        "holdout",
        "--repeats",
        "3",
        "--test-fraction",
        "0.333",
        "--seed",
        "7",
        "--reg",
        "0.1",
        "--compare",
        "bs-svm,cs-svm-oob",
        "--plot",
        plot.to_str().expect("UTF-8 path"),
    ];
    let report = eval_json(&args);
    for key in [
        "algo",
        "dataset_rows",
        "repeats",
        "protocol",
        "accuracy_mean",
        "accuracy_sd",
        "f1_mean",
        "f1_sd",
        "auc_mean",
        "auc_sd",
        "results",
    ] {
        assert!(report.contains_key(key), "{key:?} missing");
    }
    assert_eq!(report["algo"], "tfpl");
    assert_eq!(report["protocol"], "holdout");
    assert_eq!(num(&report, "dataset_rows"), 270.0);
    assert_eq!(num(&report, "repeats"), 3.0);

    let rows = results(&report);
    let order: Vec<(f64, String, String)> = rows
        .iter()
        .map(|r| {
            (
                num(r, "tau"),
                r["method"].as_str().unwrap_or("").to_owned(),
                r["threshold_method"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let want: Vec<(f64, String, String)> = [0.05, 0.1]
        .iter()
        .flat_map(|&t| {
            [
                ("tfpl", "oob"),
                ("bs-svm", "train-quantile"),
                ("cs-svm-oob", "oob"),
            ]
            .map(|(m, th)| (t, m.to_owned(), th.to_owned()))
        })
        .collect();
    assert_eq!(order, want);
    for r in &rows {
        let (fpr, tpr) = (num(r, "fpr_mean"), num(r, "tpr_mean"));
        let tau = num(r, "tau");
        assert!(
            (0.0..=1.0).contains(&fpr) && (0.0..=1.0).contains(&tpr),
            "{r:?}"
        );
        // Each split scores ≥ 1 − its TPR, and the mean is ≥ the score of the mean rates.
        let (np, of_means) = (num(r, "np_score_mean"), num(r, "np_score_of_means"));
        assert!(np >= 1.0 - tpr - 1e-12, "{r:?}");
        assert!(np >= of_means - 1e-12, "{r:?}");
        assert!(
            (of_means - (fpr.max(tau) / tau - tpr)).abs() < 1e-12,
            "{r:?}"
        );
        assert!(num(r, "np_score_sd") >= 0.0);
        // 3 splits: shares are multiples of 1/3; beyond-noise exceedances are exceedances.
        let (exceed, beyond) = (
            num(r, "fpr_exceed_share"),
            num(r, "fpr_exceed_beyond_noise_share"),
        );
        assert!(
            ((exceed * 3.0) - (exceed * 3.0).round()).abs() < 1e-9,
            "{r:?}"
        );
        assert!(beyond <= exceed, "{r:?}");
        if exceed == 0.0 {
            assert!(fpr <= tau, "no split over τ but mean FPR {fpr} > {tau}");
        }
        assert!(num(r, "np_score_oracle_mean") <= np + 1e-12, "{r:?}");
    }
    // Fixed R, reported per split; the baselines report C (and cs-svm-oob its cost ratio).
    assert_eq!(
        row(&report, 0.05, "tfpl")["reg_per_split"],
        serde_json::json!([0.1, 0.1, 0.1])
    );
    // The default ranking depth is `auto`: chosen per split from τ, 2τ, … 0.5.
    for tau in [0.05, 0.1] {
        let r = row(&report, tau, "tfpl");
        assert_eq!(r["rank_tau"], "auto");
        let depths = r["rank_tau_per_split"].as_array().expect("depths").clone();
        assert_eq!(depths.len(), 3);
        for d in depths {
            let d = d.as_f64().expect("a depth");
            let doublings = (d / tau).log2();
            assert!(
                d == 0.5 || (doublings - doublings.round()).abs() < 1e-9,
                "τ {tau}: depth {d}"
            );
        }
    }
    let cs = row(&report, 0.1, "cs-svm-oob");
    assert_eq!(cs["c_per_split"].as_array().map(Vec::len), Some(3));
    assert_eq!(cs["cost_ratio_per_split"].as_array().map(Vec::len), Some(3));
    // The top-level summary is --algo's at the first τ.
    let first = row(&report, 0.05, "tfpl");
    assert_eq!(num(&report, "accuracy_mean"), num(&first, "accuracy_mean"));

    // One chart per τ: --plot for the first, STEM-tau<τ>.svg for the next.
    for path in [plot.clone(), dir.path().join("roc-tau0.1.svg")] {
        let svg = std::fs::read_to_string(&path).expect("plot written");
        assert!(
            svg.starts_with("<svg") || svg.contains("<svg"),
            "{}",
            path.display()
        );
        for label in ["tfpl (oob)", "bs-svm (train-quantile)", "cs-svm-oob (oob)"] {
            assert!(svg.contains(label), "{label} missing in {}", path.display());
        }
    }

    // Same seed, same numbers.
    let again = eval_json(&args);
    assert_eq!(again["results"], report["results"]);
}

#[test]
fn table_rows_match_the_json_report() {
    let args = [
        "eval",
        "--algo",
        "tfpl",
        "--data",
        HEART,
        "--tau",
        "0.1",
        "--repeats",
        "2",
        "--seed",
        "3",
        "--reg",
        "1",
    ];
    let (code, table, stderr) = neyman(&args);
    assert_eq!(code, 0, "{stderr}");
    let report = eval_json(&args[1..]);
    let r = row(&report, 0.1, "tfpl");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "title, header, one row:\n{table}");
    assert!(
        lines[0].contains("2 splits") && lines[0].contains("R = 1"),
        "{}",
        lines[0]
    );
    let short = |x: f64| format!("{x:.3}").replacen("0.", ".", 1);
    let want = format!(
        "({}, {})",
        short(num(&r, "fpr_mean")),
        short(num(&r, "tpr_mean"))
    );
    assert!(lines[2].contains(&want), "{want} not in {}", lines[2]);
    let want = format!(
        "{} ± {}",
        short(num(&r, "np_score_mean")),
        short(num(&r, "np_score_sd"))
    );
    assert!(lines[2].contains(&want), "{want} not in {}", lines[2]);
    assert!(lines[2].trim_start().starts_with("10 "), "{}", lines[2]);
}

#[test]
fn usage_errors_exit_2_with_a_reason() {
    let base = ["eval", "--data", HEART, "--repeats", "1"];
    let usmo_at_tau = ["--algo=usmo", "--tau=0.1", "--pu-labeled-fraction=0.3"];
    for (extra, fragment) in [
        (vec!["--algo", "tfpl"], "needs --tau"),
        (
            vec!["--algo", "tfpl", "--tau", "0"],
            "every --tau must be in (0, 1)",
        ),
        (
            vec!["--algo", "tfpl", "--tau", "0.05,0.1", "--rank-tau", "0.1"],
            "--rank-tau needs one value per --tau",
        ),
        (
            vec!["--algo", "tfpl", "--tau", "0.1", "--transductive"],
            "holdout protocol only",
        ),
        (
            vec!["--algo", "tfpl", "--tau", "0.1", "--cv", "1"],
            "--cv must be at least 2",
        ),
        (
            vec![
                "--algo",
                "tfpl",
                "--tau",
                "0.1",
                "--threshold",
                "pu-umbrella",
            ],
            "needs --pu-labeled-fraction",
        ),
        (
            vec![
                "--algo",
                "tfpl",
                "--tau",
                "0.1",
                "--pu-labeled-fraction",
                "0.3",
            ],
            "--prior-min/--prior-max",
        ),
        (
            vec![
                "--algo",
                "usmo",
                "--tau",
                "0.1",
                "--pu-labeled-fraction",
                "0.3",
                "--threshold",
                "oob",
            ],
            "--threshold oob needs --algo tfpl",
        ),
        (
            vec!["--algo", "usmo", "--tau", "0.1"],
            "needs --pu-labeled-fraction",
        ),
        (
            vec![
                "--algo",
                "usmo",
                "--pu-labeled-fraction",
                "0.3",
                "--compare",
                "bs-svm",
            ],
            "--compare needs --tau",
        ),
        (
            vec![
                "--algo",
                "usmo",
                "--pu-labeled-fraction",
                "0.3",
                "--transductive",
                "--protocol",
                "holdout",
            ],
            "contradicts",
        ),
        (
            vec!["--algo", "tfpl", "--tau", "0.1", "--delta", "1"],
            "--delta must be in (0, 1)",
        ),
        // π defaults to the interval's middle only where the interval is used (pu-umbrella).
        (
            [
                &usmo_at_tau[..],
                &["--threshold=umbrella", "--prior-min=0.3"],
            ]
            .concat(),
            "--algo usmo needs --prior",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(&extra);
        let (code, stdout, stderr) = neyman(&args);
        assert_eq!(code, 2, "{extra:?}: exit {code}, stderr {stderr}");
        assert!(stdout.is_empty(), "{extra:?}: {stdout}");
        assert!(
            stderr.contains(fragment),
            "{extra:?}: want {fragment:?} in {stderr}"
        );
    }
}

/// A split whose pu-umbrella threshold cannot be certified flags nothing and is counted, rather
/// than failing the run (heart has far too few rows for a PU certificate at τ = 5 %).
#[test]
fn an_uncertifiable_split_is_a_refusal_not_an_error() {
    let report = eval_json(&[
        "--algo",
        "tfpl",
        "--data",
        HEART,
        "--tau",
        "0.05",
        "--pu-labeled-fraction",
        "0.5",
        "--prior-min",
        "0.3",
        "--prior-max",
        "0.34",
        "--reg",
        "0.1",
        "--repeats",
        "2",
        "--seed",
        "1",
    ]);
    let r = row(&report, 0.05, "tfpl");
    assert_eq!(r["threshold_method"], "pu-umbrella");
    assert_eq!(num(&r, "refused_share"), 1.0);
    assert_eq!((num(&r, "fpr_mean"), num(&r, "tpr_mean")), (0.0, 0.0));
    assert_eq!(num(&r, "np_score_mean"), 1.0);
}

/// The umbrella needs ⌈ln δ / ln(1 − τ)⌉ held-out negatives: 299 at τ = 1 %, δ = 5 %, 59 at
/// 5 %. breast-cancer's training part holds out 148 of its 296 negatives, so τ = 1 % is refused
/// on every split (nothing flagged, counted) while τ = 5 % is certified as if run alone; the run
/// used to abort on the first τ. `expected_tpr` is a floor well under the rates seen (tfpl .95,
/// usmo .92 over these splits).
fn check_umbrella_refuses_only_the_small_tau(method: &str, args: &[&str], expected_tpr: f64) {
    let both = [args, &["--tau", "0.01,0.05"]].concat();
    let report = eval_json(&both);
    let refused = row(&report, 0.01, method);
    assert_eq!(refused["threshold_method"], "umbrella");
    assert_eq!(num(&refused, "refused_share"), 1.0);
    assert_eq!(
        (num(&refused, "fpr_mean"), num(&refused, "tpr_mean")),
        (0.0, 0.0)
    );
    assert_eq!(num(&refused, "np_score_mean"), 1.0);
    assert_eq!(refused["fpr_bound_mean"], Value::Null);

    let certified = row(&report, 0.05, method);
    assert_eq!(certified["threshold_method"], "umbrella");
    assert_eq!(num(&certified, "refused_share"), 0.0);
    let bound = num(&certified, "fpr_bound_mean");
    assert!(bound > 0.04 && bound <= 0.05, "certified level {bound}");
    assert!(num(&certified, "fpr_mean") < 0.05, "{certified:?}");
    assert!(num(&certified, "tpr_mean") > expected_tpr, "{certified:?}");
    // The refused τ leaves the other one untouched: the same cells as a run of τ = 5 % alone.
    let alone = eval_json(&[args, &["--tau", "0.05"]].concat());
    assert_eq!(row(&alone, 0.05, method), certified);
}

#[test]
fn an_umbrella_tau_without_enough_negatives_is_a_refusal_for_tfpl() {
    let args = [
        "--algo",
        "tfpl",
        "--data",
        BREAST,
        "--threshold",
        "umbrella",
        "--reg",
        "0.1",
        "--repeats",
        "3",
        "--seed",
        "1",
    ];
    check_umbrella_refuses_only_the_small_tau("tfpl", &args, 0.8);
    // The baselines certify nothing, so they never refuse; tfpl takes no prior.
    let report = eval_json(&[&args[..], &["--tau", "0.01", "--compare", "bs-svm"]].concat());
    assert_eq!(num(&row(&report, 0.01, "tfpl"), "refused_share"), 1.0);
    assert_eq!(num(&row(&report, 0.01, "bs-svm"), "refused_share"), 0.0);
    assert_eq!(report["prior_used"], Value::Null);
}

/// usmo on breast-cancer with half the training positives labelled.
const USMO_BREAST: [&str; 6] = [
    "--algo",
    "usmo",
    "--data",
    BREAST,
    "--pu-labeled-fraction",
    "0.5",
];

#[test]
fn an_umbrella_tau_without_enough_negatives_is_a_refusal_for_usmo() {
    let rest = [
        "--threshold=umbrella",
        "--prior=0.35",
        "--lambda=0.01",
        "--repeats=3",
        "--seed=1",
    ];
    check_umbrella_refuses_only_the_small_tau("usmo", &[&USMO_BREAST[..], &rest].concat(), 0.7);
}

/// usmo with pu-umbrella takes π from the middle of the prior interval when `--prior` is
/// absent (λ by CV, which uses π too): the same report as with `--prior` set to that middle,
/// and `prior_used` says which π it was. A lone end is a point interval.
#[test]
fn usmo_pu_umbrella_takes_the_prior_from_the_interval() {
    let with = |rest: &[&str]| eval_json(&[&USMO_BREAST[..], &["--tau=0.1"], rest].concat());
    let interval = [
        "--prior-min=0.3",
        "--prior-max=0.4",
        "--repeats=2",
        "--seed=2",
    ];
    let defaulted = with(&interval);
    assert!((num(&defaulted, "prior_used") - 0.35).abs() < 1e-12);
    let r = row(&defaulted, 0.1, "usmo");
    assert_eq!(r["threshold_method"], "pu-umbrella");
    let explicit = with(&[&interval[..], &["--prior=0.35"]].concat());
    assert_eq!(num(&explicit, "prior_used"), 0.35);
    assert_eq!(explicit["results"], defaulted["results"]);
    // A given --prior wins over the interval.
    let given = with(&[&interval[..], &["--prior=0.32", "--lambda=0.01"]].concat());
    assert_eq!(num(&given, "prior_used"), 0.32);
    let lone = with(&["--prior-max=0.37", "--lambda=0.01", "--repeats=1"]);
    assert_eq!(num(&lone, "prior_used"), 0.37);
    // With an `auto` end, π is each split's training-rows estimate (train does the same), so
    // `prior_used` is null and the certificate still stands.
    let auto = with(&[
        "--prior-min=auto",
        "--prior-max=auto",
        "--lambda=0.01",
        "--repeats=2",
        "--seed=2",
    ]);
    assert_eq!(auto["prior_used"], Value::Null);
    let r = row(&auto, 0.1, "usmo");
    assert_eq!(r["threshold_method"], "pu-umbrella");
    assert!(num(&r, "tpr_mean") > 0.2, "{r:?}");
    assert!(num(&r, "fpr_mean") <= 0.1, "{r:?}");
}

/// Table 3, heart (120/150, d = 13), τ-FPL with the paper's protocol: 30 stratified hold-outs,
/// ranking at τ (`--rank-tau`; the default `auto` may rank deeper), R by 5-fold CV of
/// criterion (3), OOB thresholds minimising the NP-score.
#[test]
fn heart_matches_the_papers_tau_fpl_cells() {
    let report = eval_json(&[
        "--algo",
        "tfpl",
        "--data",
        HEART,
        "--tau",
        "0.05,0.1",
        "--rank-tau",
        "0.05,0.1",
        "--repeats",
        "30",
        "--seed",
        "1",
    ]);
    check_paper_cell(&report, 0.05, 0.468, 30.0);
    check_paper_cell(&report, 0.1, 0.314, 30.0);
}

/// Table 3, breast-cancer (239/444), the paper's protocol with 30 hold-outs. Our copy has 9
/// features (the Wisconsin attributes); the paper's LIBSVM copy has 10 (it keeps the
/// sample-code column). At 1 % our TPR is lower (.84 against .955 at the same FPR .013), within
/// that cell's wide tolerance (per-split sd ≈ .75: one false positive among ~148 test negatives
/// moves a split's score by .68).
#[test]
fn breast_cancer_matches_the_papers_tau_fpl_cells() {
    let report = eval_json(&[
        "--algo",
        "tfpl",
        "--data",
        BREAST,
        "--tau",
        "0.01,0.05,0.1",
        "--rank-tau",
        "0.01,0.05,0.1",
        "--repeats",
        "30",
        "--seed",
        "1",
    ]);
    check_paper_cell(&report, 0.01, 0.324, 30.0);
    check_paper_cell(&report, 0.05, 0.025, 30.0);
    check_paper_cell(&report, 0.1, 0.018, 30.0);
}

/// Table 3, spambase (1813/2788, d = 57), the paper's protocol: 30 hold-outs, R from 1e-6 … 10
/// by 5-fold CV (extended to 1e-8 where the small end wins), OOB thresholds. ~2.5 CPU-minutes
/// with the interior-point solver (FISTA needed hours: its CV fits at R ≤ 1e-6 took up to 10⁶
/// steps each). At 5 % our rates beat the paper's: (.044, .861) against (.041, .822), an
/// NP-score of the means .139 against .178, 0.039 below it where the two-sided tolerance is
/// 0.037 (2·sd/√30, i.e. 2.1 standard errors); the per-split mean, .177 ± .101, is the paper's
/// .178. That cell is checked one-sided: not worse than the paper beyond the tolerance.
#[test]
fn spambase_matches_the_papers_tau_fpl_cells() {
    let report = eval_json(&[
        "--algo",
        "tfpl",
        "--data",
        SPAMBASE,
        "--tau",
        "0.005,0.01,0.05,0.1",
        "--rank-tau",
        "0.005,0.01,0.05,0.1",
        "--repeats",
        "30",
        "--seed",
        "1",
    ]);
    assert_eq!(num(&report, "dataset_rows"), 4601.0);
    check_paper_cell(&report, 0.005, 0.722, 30.0);
    check_paper_cell(&report, 0.01, 0.584, 30.0);
    check_paper_cell(&report, 0.1, 0.075, 30.0);
    let r = row(&report, 0.05, "tfpl");
    let tolerance = f64::max(0.03, 2.0 * num(&r, "np_score_sd") / 30f64.sqrt());
    let of_means = num(&r, "np_score_of_means");
    assert!(
        of_means <= 0.178 + tolerance,
        "τ 5 %: {of_means:.3} vs .178"
    );
    assert!(num(&r, "np_score_mean") >= of_means - 1e-12);
    for r in results(&report) {
        assert_eq!(num(&r, "converged_share"), 1.0, "{r:?}");
    }
}

/// The umbrella guarantee P(FPR > τ) ≤ δ on real data, in small: 20 spambase hold-outs at τ =
/// 5 %, δ = 5 %, R fixed. A split counts as a violation when its test FPR exceeds τ by more than
/// two binomial standard errors of the test estimate; their share must stay within
/// δ + 2·√(δ(1−δ)/20). (100 hold-outs at τ 1 % and 5 % gave 1 % at both; see the eval docs.)
#[test]
fn umbrella_keeps_the_false_positive_rate_on_spambase() {
    let report = eval_json(&[
        "--algo",
        "tfpl",
        "--data",
        SPAMBASE,
        "--tau",
        "0.05",
        "--threshold",
        "umbrella",
        "--delta",
        "0.05",
        "--reg",
        "0.01",
        "--repeats",
        "20",
        "--seed",
        "1",
    ]);
    let r = row(&report, 0.05, "tfpl");
    assert_eq!(r["threshold_method"], "umbrella");
    let limit = 0.05 + 2.0 * (0.05f64 * 0.95 / 20.0).sqrt();
    let beyond = num(&r, "fpr_exceed_beyond_noise_share");
    assert!(beyond <= limit, "beyond-noise share {beyond} > {limit}");
    let bound = num(&r, "fpr_bound_mean");
    assert!(bound > 0.04 && bound <= 0.05, "certified level {bound}");
    assert!(
        num(&r, "fpr_mean") < 0.05,
        "mean test FPR {}",
        num(&r, "fpr_mean")
    );
    assert_eq!(num(&r, "refused_share"), 0.0);
}

const SHUTTLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/shuttle_anomaly.csv.gz");

/// The pu-umbrella certificate on real data, as a user meets it: 30 % of the positives
/// labelled, 100 hold-outs, R fixed, the prior interval the true share of positives among the
/// unlabeled rows ± 15 % (spambase 0.3128, shuttle 0.0512), and again with its lower end
/// `auto`. The test FPR exceeds τ beyond noise on at most δ + 2·√(δ(1 − δ)/100) of the splits,
/// no split is refused, and the certified threshold keeps a useful TPR. Measured: spambase
/// τ 5 / 10 % 0.239 / 0.560 (`auto` 0.147 / 0.366; the first certificate kept 0.063 / 0.240),
/// shuttle 0.975 / 0.976 (`auto` 0.975 / 0.976), the scorer's own test-picked TPR
/// (`tpr_oracle_mean`) 0.975 at τ 5 %. Shuttle at τ 1 % needs more held-out rows than the
/// default half: a perfect scorer certifies about 0.77 with it (docs/certificates.md §2), and
/// `--calibration-fraction 0.7` reaches 0.833.
#[test]
fn pu_umbrella_keeps_the_fpr_and_a_useful_tpr_on_spambase_and_shuttle() {
    let limit = 0.05 + 2.0 * (0.05f64 * 0.95 / 100.0).sqrt();
    /// (data, true prior, `--prior-min auto`, (τ, least TPR) pairs, more flags).
    type Case<'a> = (&'a str, f64, bool, &'a [(f64, f64)], &'a [&'a str]);
    let cases: [Case; 5] = [
        (SPAMBASE, 0.3128, false, &[(0.05, 0.19), (0.1, 0.45)], &[]),
        (SHUTTLE, 0.0512, false, &[(0.05, 0.9), (0.1, 0.9)], &[]),
        (SPAMBASE, 0.3128, true, &[(0.05, 0.12), (0.1, 0.3)], &[]),
        (SHUTTLE, 0.0512, true, &[(0.05, 0.9), (0.1, 0.9)], &[]),
        (
            SHUTTLE,
            0.0512,
            false,
            &[(0.01, 0.8)],
            &["--calibration-fraction", "0.7"],
        ),
    ];
    for (data, prior, auto_min, taus, extra) in cases {
        let lo = if auto_min {
            "auto".to_string()
        } else {
            format!("{}", prior * 0.85)
        };
        let hi = format!("{}", prior * 1.15);
        let tau_list: Vec<String> = taus.iter().map(|(tau, _)| tau.to_string()).collect();
        let tau_list = tau_list.join(",");
        let mut args = vec![
            "--algo",
            "tfpl",
            "--data",
            data,
            "--pu-labeled-fraction",
            "0.3",
            "--tau",
            &tau_list,
            "--threshold",
            "pu-umbrella",
            "--prior-min",
            &lo,
            "--prior-max",
            &hi,
            "--reg",
            "0.01",
            "--repeats",
            "100",
            "--seed",
            "1",
        ];
        args.extend_from_slice(extra);
        let report = eval_json(&args);
        for &(tau, min_tpr) in taus {
            let case = format!("{data} τ {tau} prior-min {lo} {extra:?}");
            let r = row(&report, tau, "tfpl");
            assert_eq!(r["threshold_method"], "pu-umbrella");
            let beyond = num(&r, "fpr_exceed_beyond_noise_share");
            assert!(beyond <= limit, "{case}: beyond-noise share {beyond}");
            assert_eq!(num(&r, "refused_share"), 0.0, "{case}");
            let tpr = num(&r, "tpr_mean");
            assert!(tpr >= min_tpr, "{case}: TPR {tpr} < {min_tpr}");
            assert!(num(&r, "fpr_mean") <= tau, "{case}: {r:?}");
            let oracle = num(&r, "tpr_oracle_mean");
            assert!(
                tpr <= oracle + 1e-9,
                "{case}: TPR {tpr} above the test-picked {oracle}"
            );
        }
    }
}

/// `--jobs` only changes how many threads run the repeats: every split draws from its own
/// seed, so the report is the same; a run without a terminal prints its progress as lines.
#[test]
fn jobs_run_repeats_in_parallel_with_the_same_report_and_progress_lines() {
    let args = |jobs: &'static str| {
        vec![
            "eval",
            "--algo",
            "tfpl",
            "--data",
            HEART,
            "--tau",
            "0.1",
            "--repeats",
            "4",
            "--seed",
            "7",
            "--cv",
            "2",
            "--jobs",
            jobs,
            "--report",
            "json",
        ]
    };
    let (code, one, stderr_one) = neyman(&args("1"));
    assert_eq!(code, 0, "{stderr_one}");
    let (code, two, stderr_two) = neyman(&args("2"));
    assert_eq!(code, 0, "{stderr_two}");
    assert_eq!(one, two, "--jobs changed the report");
    // The last line counts every split (stderr is not a terminal here).
    assert!(
        stderr_two.contains("evaluating tfpl: 4/4 splits"),
        "{stderr_two}"
    );
    let (code, _, stderr) = neyman(&args("0"));
    assert_eq!(code, 2);
    assert!(stderr.contains("--jobs must be at least 1"), "{stderr}");
}
