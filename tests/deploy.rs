//! The deployment files agree with the code: the Grafana dashboard charts every metric
//! family, every alert has a `promtool test rules` case, the Kubernetes ConfigMap's config
//! loads, the systemd environment example is a valid override of the config, and the
//! Dockerfile, systemd unit and manifests start the daemon the same way.
//! (`scripts/test.sh` also runs promtool on the rules, `deploy/check_k8s.py` and
//! `kubernetes-validate --strict` on the manifests and `systemd-analyze verify` on the unit.)

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::broker::free_port;
use common::daemon::{Daemon, CONFIG};

use neyman::config::{LoadedConfig, Role, SecurityProtocol, SourceKind};
use neyman::telemetry::{DEPRECATED_FAMILIES, FAMILIES};
use serde_json::Value;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn the_dashboard_charts_every_metric_family() {
    let dashboard: Value = serde_json::from_str(&read("deploy/grafana/neyman.json")).expect("JSON");
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    for family in FAMILIES {
        // The family itself, or one of its series (`_bucket`, `_sum`, `_count`), not a longer
        // name it is the start of.
        let charted = exprs.iter().any(|e| {
            e.match_indices(family).any(|(at, _)| {
                let rest = &e[at + family.len()..];
                let rest = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| rest.strip_prefix(suffix))
                    .unwrap_or(rest);
                !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        });
        if DEPRECATED_FAMILIES.contains(&family) {
            assert!(!charted, "{family} is deprecated but still charted");
        } else {
            assert!(charted, "{family} is on no panel");
        }
    }
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert_eq!(panel["datasource"]["uid"], "${DS_PROMETHEUS}", "{panel}");
    }
    // Every selector follows the `instance` variable, so one daemon can be looked at alone.
    for expr in &exprs {
        for prefix in ["neyman_", "process_"] {
            for (at, _) in expr.match_indices(prefix) {
                let rest = &expr[at..];
                let name_end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let selector = rest[name_end..]
                    .strip_prefix('{')
                    .and_then(|r| r.split_once('}'))
                    .map(|(inner, _)| inner);
                assert!(
                    selector.is_some_and(|s| s.contains("instance=~\"$instance\"")),
                    "{expr}: {} does not follow $instance",
                    &rest[..name_end]
                );
            }
        }
    }
    assert_eq!(dashboard["templating"]["list"][0]["name"], "instance");
    assert!(dashboard["annotations"]["list"][0]["expr"]
        .as_str()
        .is_some_and(|e| e.contains("neyman_model_version")));
}

#[test]
fn every_alert_has_a_unit_test() {
    let rules = read("deploy/prometheus/alerts.yml");
    let tests = read("deploy/prometheus/alerts_test.yml");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 9, "{alerts:?}");
    for alert in alerts {
        let cases = tests
            .lines()
            .filter(|l| l.trim() == format!("alertname: {alert}"))
            .count();
        // At least one case where it stays silent and one where it fires.
        assert!(cases >= 2, "{alert}: {cases} test case(s)");
    }
}

/// The `kafka.toml: |` block of the ConfigMap.
fn configmap_toml() -> String {
    let yaml = read("deploy/k8s/configmap.yaml");
    let mut lines = yaml
        .lines()
        .skip_while(|l| l.trim() != "kafka.toml: |")
        .skip(1);
    let mut out = String::new();
    for l in lines.by_ref() {
        if !l.is_empty() && !l.starts_with("    ") {
            break;
        }
        out.push_str(l.strip_prefix("    ").unwrap_or(l));
        out.push('\n');
    }
    out
}

#[test]
fn the_configmap_config_loads_and_the_deployments_run_it() {
    let text = configmap_toml();
    let loaded = LoadedConfig::from_str_with_env(
        &text,
        Path::new("/etc/neyman/kafka.toml"),
        [(
            "NEYMAN_KAFKA_BOOTSTRAP_SERVERS".to_string(),
            "kafka:9092".to_string(),
        )],
    )
    .expect("the ConfigMap's kafka.toml is a valid config");
    let c = loaded.config;
    assert_eq!(c.source.kind, SourceKind::Kafka);
    assert_eq!(c.http.listen, "0.0.0.0:8787");
    assert_eq!(c.state.dir, Path::new("/var/lib/neyman/state"));
    let k = c.kafka.expect("[kafka]");
    assert_eq!(k.role, Role::Both);
    // Same topics and group as the quickstart config.
    let quickstart =
        LoadedConfig::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/kafka.toml"))
            .expect("config/kafka.toml")
            .config
            .kafka
            .expect("[kafka]");
    assert_eq!(k.topics, quickstart.topics);
    assert_eq!(k.group_id, quickstart.group_id);

    // Every way of running it points at the same file with the same arguments.
    let run = "run\", \"--config\", \"/etc/neyman/kafka.toml";
    assert!(read("deploy/Dockerfile").contains(&format!("CMD [\"{run}\"]")));
    for manifest in ["deploy/k8s/deployment.yaml", "deploy/k8s/statefulset.yaml"] {
        let m = read(manifest);
        assert!(m.contains(&format!("args: [\"{run}\"]")), "{manifest}");
        assert!(m.contains("mountPath: /etc/neyman"), "{manifest}");
        assert!(
            m.contains("path: /readyz") && m.contains("path: /healthz"),
            "{manifest}"
        );
    }
    assert!(read("deploy/k8s/statefulset.yaml").contains("NEYMAN_KAFKA_GROUP_INSTANCE_ID"));
    let unit = read("deploy/systemd/neyman.service");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    assert_eq!(
        exec,
        "/usr/local/bin/neyman run --config /etc/neyman/kafka.toml"
    );
    // The flags parse: with a missing file the daemon names it and exits 2.
    let out = Command::new(env!("CARGO_BIN_EXE_neyman"))
        .args(["run", "--config", "/nonexistent/kafka.toml"])
        .output()
        .expect("neyman");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/kafka.toml"));
}

#[test]
fn the_systemd_env_example_overrides_the_config() {
    let unit = read("deploy/systemd/neyman.service");
    assert!(unit.contains("\nEnvironmentFile=-/etc/neyman/neyman.env\n"));
    let env = read("deploy/systemd/neyman.env");
    // Active lines, and the commented-out examples (`#NEYMAN_...=...`) on top of them.
    let vars = |commented: bool| -> Vec<(String, String)> {
        env.lines()
            .filter_map(|l| {
                if commented {
                    l.strip_prefix('#')
                } else {
                    Some(l)
                }
            })
            .filter(|l| l.starts_with("NEYMAN_"))
            .map(|l| {
                let (k, v) = l.split_once('=').expect("KEY=VALUE");
                (k.to_string(), v.to_string())
            })
            .collect()
    };
    let config = read("config/kafka.toml");
    let path = Path::new("/etc/neyman/kafka.toml");
    let plain = LoadedConfig::from_str_with_env(&config, path, vars(false))
        .expect("neyman.env's active lines");
    // Every variable names a key (a typo would be an unknown key, refused).
    assert_eq!(plain.from_env.len(), vars(false).len());
    let k = plain.config.kafka.expect("[kafka]");
    assert_eq!(k.bootstrap_servers, "broker-1:9092,broker-2:9092");
    assert_eq!(k.group_instance_id.as_deref(), Some("neyman-host-1"));
    assert_eq!(k.security_protocol, SecurityProtocol::Plaintext);
    assert_eq!(plain.config.http.listen, "127.0.0.1:8787");

    let all =
        LoadedConfig::from_str_with_env(&config, path, vars(false).into_iter().chain(vars(true)))
            .expect("neyman.env with its commented-out examples");
    assert_eq!(all.from_env.len(), vars(false).len() + vars(true).len());
    let c = all.config;
    let k = c.kafka.expect("[kafka]");
    assert_eq!(k.security_protocol, SecurityProtocol::SaslSsl);
    assert_eq!(k.sasl_mechanism.as_deref(), Some("SCRAM-SHA-512"));
    assert_eq!(
        k.sasl_password.as_ref().map(|p| p.expose()),
        Some("change-me")
    );
    assert_eq!(c.http.listen, "0.0.0.0:8787");
}

/// The Docker image's HEALTHCHECK command, exactly as the Dockerfile has it, run as the image
/// runs it (bash, `NEYMAN_HTTP_LISTEN` set): exit 0 on a live daemon — here one still waiting
/// for its broker, which serves `/healthz` meanwhile — and non-zero where nothing listens.
/// The image is also stripped and runs as a non-root user.
#[test]
fn the_docker_healthcheck_passes_on_a_live_daemon_and_fails_without_one() {
    let dockerfile = read("deploy/Dockerfile");
    let json = dockerfile
        .split("HEALTHCHECK")
        .nth(1)
        .and_then(|rest| rest.split_once("CMD "))
        .and_then(|(_, cmd)| cmd.lines().next())
        .expect("a HEALTHCHECK ... CMD [...] line");
    let argv: Vec<String> = serde_json::from_str(json).expect("exec-form JSON array");
    assert_eq!(argv[..2], ["bash", "-c"]);
    assert!(dockerfile.contains("strip target/release/neyman"));
    assert!(dockerfile.contains("USER neyman") && dockerfile.contains("--uid 10001"));
    let check = |listen: &str| {
        Command::new(&argv[0])
            .args(&argv[1..])
            .env("NEYMAN_HTTP_LISTEN", listen)
            .status()
            .expect("bash")
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let nobody = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::start_config(
        Path::new(CONFIG),
        &dir.path().join("state"),
        &[
            ("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", nobody.as_str()),
            ("NEYMAN_KAFKA_CONNECT_TIMEOUT", "60s"),
        ],
    );
    let listen = format!("0.0.0.0:{}", daemon.port);
    let started = Instant::now();
    while !check(&listen).success() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "healthcheck never passed:\n{}",
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, _) = daemon.terminate();
    assert!(status.success());
    assert!(!check(&format!("0.0.0.0:{}", free_port())).success());
}
