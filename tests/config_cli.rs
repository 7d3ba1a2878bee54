//! `neyman config check`: the effective configuration with environment-set keys marked and
//! secrets redacted, and exit code 2 with the key named for every invalid file.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_neyman");

fn check(text: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("neyman.toml");
    std::fs::write(&path, text).expect("write config");
    let mut cmd = Command::new(BIN);
    cmd.args(["config", "check"]).arg(&path);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run neyman");
    let code = out.status.code().expect("exit code");
    assert_ne!(
        code,
        101,
        "panicked: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const VALID: &str = r#"
[source]
path = "stream.jsonl.gz"

[model]
algorithm = "usmo"
prior = 0.3
tau = 0.05
"#;

#[test]
fn prints_the_effective_config_with_env_keys_marked() {
    let (code, stdout, stderr) = check(VALID, &[("NEYMAN_MODEL_PRIOR", "0.25")]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("prior = 0.25  # from NEYMAN_MODEL_PRIOR"),
        "{stdout}"
    );
    assert!(stdout.contains("min_unlabeled = 300"), "{stdout}");
    assert!(stdout.contains("listen = \"127.0.0.1:8787\""), "{stdout}");
}

#[test]
fn invalid_files_exit_2_naming_the_key() {
    for (env, key) in [
        (("NEYMAN_MODEL_TAU", "2"), "model.tau"),
        (("NEYMAN_HTTP_LISTEN", "nowhere"), "http.listen"),
        (("NEYMAN_MODEL_ALGORITHM", "svm"), "algorithm"),
    ] {
        let (code, _, stderr) = check(VALID, &[env]);
        assert_eq!(code, 2, "{key}: {stderr}");
        assert!(stderr.contains(key), "{key}: {stderr}");
        assert!(stderr.contains("neyman.toml"), "{stderr}");
    }
    let (code, _, stderr) = check(&format!("{VALID}\n[gate]\nmargn = 1\n"), &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("margn"), "{stderr}");
}
