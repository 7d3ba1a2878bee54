//! The daemon's metrics exposition passes `promtool check metrics` (Prometheus' own linter:
//! names, units, `_total` suffixes, HELP text). `scripts/test.sh` installs promtool (Debian
//! `prometheus`); without it this test fails and says so, it is never skipped.

use std::io::Write;
use std::process::{Command, Stdio};

use neyman::telemetry::{encode, Metrics, FAMILIES};
use prometheus::Registry;

#[test]
fn the_exposition_passes_promtool_check_metrics() {
    let registry = Registry::new();
    let m = Metrics::new(&registry).expect("metrics");
    m.events.with_label_values(&["positive", "windowed"]).inc();
    m.dlq.with_label_values(&["dimension_mismatch"]).inc();
    m.retrain_duration.with_label_values(&["tfpl"]).observe(1.5);
    m.retrain_rejections.with_label_values(&["fpr_bound"]).inc();
    m.unscored_events.with_label_values(&["shutdown"]).inc();
    m.http_requests
        .with_label_values(&["/metrics", "200"])
        .inc();
    m.scoring_latency.observe(2e-5);
    m.fpr_bound.set(0.04);
    m.kafka_consumer_lag
        .with_label_values(&["neyman", "neyman.unlabeled", "0"])
        .set(12);
    m.kafka_uncommitted
        .with_label_values(&["neyman", "neyman.unlabeled", "0"])
        .set(700);
    m.kafka_produce_errors
        .with_label_values(&["neyman.scores"])
        .inc();
    m.set_active(3, "usmo", 1, 1_767_225_600_000, None);
    let text = encode(&registry).expect("encode");
    for family in FAMILIES {
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "{family} missing"
        );
    }

    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool not found: run scripts/test.sh, which installs Debian `prometheus`");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write exposition");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool check metrics exit {:?}:\n{}{}\n--- exposition ---\n{text}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
