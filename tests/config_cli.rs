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
        // The variable that set the bad value is named, not the file (issue 22).
        assert!(
            stderr.contains(&format!("environment variable {}", env.0)),
            "{stderr}"
        );
    }
    let (code, _, stderr) = check(&format!("{VALID}\n[gate]\nmargn = 1\n"), &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("margn"), "{stderr}");
    assert!(stderr.contains("neyman.toml"), "{stderr}");
}

/// Issue 21 item 6: the values of secret `[kafka.librdkafka]` properties never print, and
/// `config check` asks librdkafka itself about the client settings, failing where `run` would,
/// without echoing a secret.
#[test]
fn librdkafka_secrets_are_redacted_and_checked_by_librdkafka() {
    let kafka =
        "[source]\nkind = \"kafka\"\n[model]\nalgorithm = \"usmo\"\nprior = 0.3\ntau = 0.05\n\
                 [kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\n[kafka.librdkafka]\n\
                 \"ssl.key.password\" = \"swordfish\"\n\
                 \"sasl.oauthbearer.config\" = \"principal=oauth-hush\"\n\
                 \"fetch.wait.max.ms\" = \"100\"\n";
    let (code, stdout, stderr) = check(kafka, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("\"ssl.key.password\" = \"<redacted>\"")
            && stdout.contains("\"fetch.wait.max.ms\" = \"100\""),
        "{stdout}"
    );
    assert!(
        !stdout.contains("swordfish") && !stdout.contains("oauth-hush"),
        "{stdout}"
    );

    let refused = format!("{kafka}\"socket.timeout.ms\" = \"swordfish\"\n");
    let (code, stdout, stderr) = check(&refused, &[]);
    assert_eq!(code, 2, "{stdout}");
    assert!(stderr.contains("socket.timeout.ms"), "{stderr}");
    assert!(!stderr.contains("swordfish"), "{stderr}");
}

/// Issue 21 item 5: TLS and SCRAM settings pass librdkafka's own check (they used to pass the
/// config check and fail `run` with "OpenSSL not available at build time").
#[test]
fn tls_and_scram_settings_pass_librdkafkas_own_check() {
    for protocol in [
        "security_protocol = \"ssl\"\n",
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"neyman\"\nsasl_password = \"hunter2\"\n",
        "security_protocol = \"sasl_plaintext\"\nsasl_mechanism = \"SCRAM-SHA-256\"\n\
         sasl_username = \"neyman\"\nsasl_password = \"hunter2\"\n",
    ] {
        let text = format!(
            "[source]\nkind = \"kafka\"\n[model]\nalgorithm = \"usmo\"\nprior = 0.3\ntau = 0.05\n\
             [kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\n{protocol}"
        );
        let (code, stdout, stderr) = check(&text, &[]);
        assert_eq!(code, 0, "{protocol}: {stderr}");
        assert!(!stdout.contains("hunter2"), "{stdout}");
    }
}
