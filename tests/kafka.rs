//! Kafka against a real broker: tansu (see `tests/common/broker.rs`), one per test.
//! Needs `TANSU_BIN` (scripts/test.sh installs tansu and exports it).

mod common;

use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::broker::Broker;
use neyman::config::LoadedConfig;
use neyman::stream::kafka;
use neyman::stream::{Channel, Record, RecordReader, RecordWriter};

#[test]
fn a_broker_listens_on_loopback_and_is_gone_after_drop() {
    let broker = Broker::start();
    let bootstrap = broker.bootstrap();
    assert_eq!(bootstrap, format!("127.0.0.1:{}", broker.port()));
    assert!(
        broker.startup < Duration::from_secs(5),
        "startup {:?}",
        broker.startup
    );
    eprintln!("tansu listening after {:?}", broker.startup);
    let addr = bootstrap.parse().expect("socket address");
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok());
    drop(broker);
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
}

/// `neyman` with the Kafka config pointed at `broker` through the documented override.
fn neyman(broker: &Broker, args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_neyman"))
        .args(args)
        .env("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run neyman");
    assert!(
        out.status.success(),
        "neyman {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn kafka_config_path() -> String {
    format!("{}/config/kafka.toml", env!("CARGO_MANIFEST_DIR"))
}

fn read_all(path: &Path) -> Vec<Record> {
    RecordReader::open(path)
        .expect("open")
        .collect::<Result<Vec<_>, _>>()
        .expect("records")
}

/// The first 300 records of the bundled stream, one of them with headers, plus one payload
/// that is not UTF-8 (it must travel as bytes and come back as `payload_b64`).
fn small_stream() -> Vec<Record> {
    let bundled = format!(
        "{}/data/streams/spambase.jsonl.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut records: Vec<Record> = RecordReader::open(Path::new(&bundled))
        .expect("bundled stream")
        .take(300)
        .collect::<Result<_, _>>()
        .expect("records");
    records[5].headers = vec![
        ("source".into(), "web".into()),
        ("source".into(), "api".into()),
        ("trace".into(), String::new()),
    ];
    let mut binary = Record::new(
        Channel::Unlabeled,
        records[299].ts + 1,
        Some("binary-1".into()),
        vec![0xff, 0x00, 0xfe, b'x'],
    );
    binary.headers = vec![("kind".into(), "binary".into())];
    records.push(binary);
    records
}

/// Writes [`small_stream`] to `path` as a recorded stream; returns its records.
fn write_small_stream(path: &Path) -> Vec<Record> {
    let sent = small_stream();
    let mut writer = RecordWriter::create(path).expect("create");
    for r in &sent {
        writer.write(r).expect("write");
    }
    writer.finish().expect("finish");
    sent
}

fn by_channel(records: &[Record], channel: Channel) -> Vec<&Record> {
    records.iter().filter(|r| r.channel == channel).collect()
}

#[test]
fn replay_to_kafka_then_record_gives_back_the_stream() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.jsonl.gz");
    let sent = write_small_stream(&input);
    let config = kafka_config_path();

    let started = Instant::now();
    let out = neyman(
        &broker,
        &[
            "replay",
            input.to_str().expect("utf-8"),
            "--to-kafka",
            "--config",
            &config,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("published 301 events"), "{stdout}");
    eprintln!("replay --to-kafka of 301 records: {:?}", started.elapsed());

    let recorded_path = dir.path().join("out.jsonl.gz");
    let started = Instant::now();
    let out = neyman(
        &broker,
        &[
            "record",
            "--config",
            &config,
            "--out",
            recorded_path.to_str().expect("utf-8"),
            "--max-events",
            "301",
            "--duration",
            "60s",
        ],
    );
    eprintln!("record of 301 messages: {:?}", started.elapsed());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("recorded 301 events"), "{stdout}");
    let got = read_all(&recorded_path);
    assert_eq!(got.len(), 301);

    for channel in Channel::ALL {
        let (want, have) = (by_channel(&sent, channel), by_channel(&got, channel));
        assert_eq!(want.len(), have.len(), "{channel}");
        for (i, (w, h)) in want.iter().zip(&have).enumerate() {
            assert_eq!(w.payload, h.payload, "{channel} #{i}");
            assert_eq!(w.key, h.key, "{channel} #{i}");
            assert_eq!(w.ts, h.ts, "{channel} #{i}: the timestamp travels");
            assert_eq!(w.headers, h.headers, "{channel} #{i}");
            // One partition per topic: offsets count up from 0 in channel order.
            assert_eq!(h.partition, Some(0), "{channel} #{i}");
            assert_eq!(h.offset, Some(i as i64), "{channel} #{i}");
        }
    }
    let binary = got
        .iter()
        .find(|r| r.key.as_deref() == Some("binary-1"))
        .expect("binary record");
    assert_eq!(binary.payload, vec![0xff, 0x00, 0xfe, b'x']);
    assert!(binary
        .to_json_line()
        .contains("\"payload_b64\":\"/wD+eA==\""));
    assert_eq!(
        got.iter().filter(|r| !r.headers.is_empty()).count(),
        2,
        "headers kept on exactly the two records that had them"
    );
}

#[test]
fn ensure_topics_creates_the_six_topics_once() {
    let broker = Broker::start();
    let loaded = LoadedConfig::from_str_with_env(
        &std::fs::read_to_string(kafka_config_path()).expect("config"),
        Path::new(&kafka_config_path()),
        [(
            "NEYMAN_KAFKA_BOOTSTRAP_SERVERS".to_string(),
            broker.bootstrap(),
        )],
    )
    .expect("valid config");
    let k = loaded.config.kafka.expect("[kafka]");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let admin = kafka::admin_client(&k).expect("admin");
    let mut created = rt
        .block_on(kafka::ensure_topics(&admin, &k))
        .expect("created");
    created.sort();
    let mut want: Vec<String> = k
        .topics
        .all()
        .into_iter()
        .map(|(_, t)| t.to_string())
        .collect();
    want.sort();
    assert_eq!(want.len(), 6);
    assert_eq!(created, want);
    let metadata = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata");
    for topic in &want {
        let t = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .unwrap_or_else(|| panic!("{topic} missing"));
        assert_eq!(t.partitions().len(), 1, "{topic}");
    }
    // A second call finds them all present and creates nothing.
    assert_eq!(
        rt.block_on(kafka::ensure_topics(&admin, &k))
            .expect("again"),
        Vec::<String>::new()
    );
    // Scratch topics (`bench kafka`'s) go by prefix, and only they.
    let mut scratch = k.clone();
    for (i, topic) in [
        &mut scratch.topics.positive,
        &mut scratch.topics.unlabeled,
        &mut scratch.topics.scores,
    ]
    .into_iter()
    .enumerate()
    {
        *topic = format!("neyman-bench-1-2.t{i}");
    }
    rt.block_on(kafka::ensure_topics(&admin, &scratch))
        .expect("scratch topics");
    let mut deleted = rt
        .block_on(kafka::delete_topics_with_prefix(
            &admin,
            "neyman-bench-1-2.",
        ))
        .expect("deleted");
    deleted.sort();
    assert_eq!(
        deleted,
        [
            "neyman-bench-1-2.t0",
            "neyman-bench-1-2.t1",
            "neyman-bench-1-2.t2"
        ]
    );
    let left: Vec<String> = admin
        .inner()
        .fetch_metadata(None, std::time::Duration::from_secs(10))
        .expect("metadata")
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| t.name().to_string())
        .collect();
    assert!(
        left.iter().all(|t| !t.starts_with("neyman-bench")),
        "{left:?}"
    );
    for (_, topic) in k.topics.all() {
        assert!(left.iter().any(|t| t == topic), "{topic} deleted: {left:?}");
    }
}

#[test]
fn the_kafka_config_checks_and_a_run_without_a_broker_fails_clearly() {
    let config = kafka_config_path();
    let check = Command::new(env!("CARGO_BIN_EXE_neyman"))
        .args(["config", "check", &config])
        .output()
        .expect("config check");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        text.contains("bootstrap_servers = \"127.0.0.1:9092\""),
        "{text}"
    );
    assert!(text.contains("commit_interval_ms = 1000"), "{text}");
    // Nothing listens on the port: after kafka.connect_timeout the run fails with exit 1 and
    // names the address (tests/kafka_daemon.rs checks the HTTP API meanwhile).
    let dir = tempfile::tempdir().expect("tempdir");
    let nobody = format!("127.0.0.1:{}", common::broker::free_port());
    let run = Command::new(env!("CARGO_BIN_EXE_neyman"))
        .args(["run", "--config", &config])
        .env("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", &nobody)
        .env("NEYMAN_KAFKA_CONNECT_TIMEOUT", "2s")
        .env(
            "NEYMAN_HTTP_LISTEN",
            format!("127.0.0.1:{}", common::broker::free_port()),
        )
        .env("NEYMAN_STATE_DIR", dir.path())
        .output()
        .expect("run");
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains(&format!("no Kafka broker answered at {nobody}")),
        "{err}"
    );
}

fn kafka_section(broker: &Broker) -> neyman::config::KafkaConfig {
    LoadedConfig::from_str_with_env(
        &std::fs::read_to_string(kafka_config_path()).expect("config"),
        Path::new(&kafka_config_path()),
        [(
            "NEYMAN_KAFKA_BOOTSTRAP_SERVERS".to_string(),
            broker.bootstrap(),
        )],
    )
    .expect("valid config")
    .config
    .kafka
    .expect("[kafka]")
}

#[test]
fn non_utf8_keys_and_header_values_are_recorded_lossily_and_counted() {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let broker = Broker::start();
    let k = kafka_section(&broker);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let admin = kafka::admin_client(&k).expect("admin");
    rt.block_on(kafka::ensure_topics(&admin, &k))
        .expect("topics");
    let producer: FutureProducer = kafka::producer_config(&k).create().expect("producer");
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "bin",
            value: Some(&[0xffu8, b'a'][..]),
        })
        .insert(Header::<&[u8]> {
            key: "none",
            value: None,
        });
    rt.block_on(
        producer.send(
            FutureRecord::to(&k.topics.negative.clone().expect("negative topic"))
                .key(&[0xfeu8, b'k'][..])
                .payload("{}")
                .timestamp(1_767_225_600_000)
                .headers(headers),
            Duration::from_secs(10),
        ),
    )
    .expect("delivered");

    let mut out = Vec::new();
    let summary = {
        let mut writer = RecordWriter::new("memory", &mut out, false);
        let summary = rt
            .block_on(kafka::record(
                &k,
                &mut writer,
                kafka::RecordLimits {
                    max_events: Some(1),
                    duration: Some(Duration::from_secs(60)),
                },
                std::future::pending(),
            ))
            .expect("recorded");
        writer.finish().expect("finish");
        summary
    };
    assert_eq!(
        (summary.events, summary.lossy_keys, summary.lossy_headers),
        (1, 1, 1)
    );
    let line = String::from_utf8(out).expect("utf-8 file");
    let rec = Record::from_json_line(line.trim_end()).expect("record");
    assert_eq!(rec.channel, Channel::Negative);
    assert_eq!(rec.ts, 1_767_225_600_000);
    assert_eq!(rec.key.as_deref(), Some("\u{fffd}k"));
    assert_eq!(
        rec.headers,
        vec![
            ("bin".to_string(), "\u{fffd}a".to_string()),
            ("none".to_string(), String::new())
        ]
    );
}

#[test]
fn record_stops_after_its_duration_with_nothing_to_read() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let out_path = dir.path().join("empty.jsonl");
    let started = Instant::now();
    let out = neyman(
        &broker,
        &[
            "record",
            "--config",
            &kafka_config_path(),
            "--out",
            out_path.to_str().expect("utf-8"),
            "--duration",
            "2s",
        ],
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(20),
        "{elapsed:?}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("recorded 0 events"));
    assert_eq!(std::fs::read(&out_path).expect("written").len(), 0);
}

#[test]
fn bench_kafka_reports_every_phase_with_consistent_figures() {
    let broker = Broker::start();
    let config = kafka_config_path();
    let out = neyman(
        &broker,
        &[
            "bench",
            "kafka",
            "--config",
            &config,
            "--events",
            "3000",
            "--rounds",
            "2",
            "--paced-events",
            "400",
            "--rate",
            "2000",
            "--report",
            "json",
        ],
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    let number = |key: &str| {
        report[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {report}"))
    };
    assert_eq!(report["events"], 3000);
    for key in [
        "consume_only_per_second",
        "raw_loop_per_second",
        "pipeline_per_second",
        "engine_only_per_second",
    ] {
        assert!(number(key) > 0.0, "{key}: {report}");
    }
    // The ratios are what the rates give, and the single-thread bound is below 1 by definition.
    let (raw, piped, engine) = (
        number("raw_loop_per_second"),
        number("pipeline_per_second"),
        number("engine_only_per_second"),
    );
    assert!((number("pipeline_over_raw") - piped / raw).abs() < 1e-9 * (piped / raw));
    let bound = engine / (raw + engine);
    assert!((number("single_thread_bound_over_raw") - bound).abs() < 1e-9);
    assert!(0.0 < bound && bound < 1.0);
    assert_eq!(number("target_pipeline_over_raw"), 0.5);
    // Each round's ratio is its own rates', and the pooled rates are all events over all the
    // rounds' seconds.
    let rounds = report["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 2, "{report}");
    let (mut raw_seconds, mut piped_seconds) = (0.0, 0.0);
    let mut ratios = Vec::new();
    for round in rounds {
        let r = round["raw_loop_per_second"].as_f64().expect("raw");
        let p = round["pipeline_per_second"].as_f64().expect("pipeline");
        let ratio = round["pipeline_over_raw"].as_f64().expect("ratio");
        assert!(r > 0.0 && p > 0.0, "{round}");
        assert!((ratio - p / r).abs() < 1e-9 * (p / r), "{round}");
        raw_seconds += 3000.0 / r;
        piped_seconds += 3000.0 / p;
        ratios.push(ratio);
    }
    assert!((raw - 6000.0 / raw_seconds).abs() < 1e-6 * raw, "{report}");
    assert!(
        (piped - 6000.0 / piped_seconds).abs() < 1e-6 * piped,
        "{report}"
    );
    ratios.sort_by(f64::total_cmp);
    // The median of two rounds is the upper one (the report's quantile rounds half up).
    assert_eq!(number("median_round_pipeline_over_raw"), ratios[1]);
    let latency = &report["latency"];
    assert_eq!(latency["events"], 400, "every paced event scored: {report}");
    let (p50, p99) = (
        latency["p50_seconds"].as_f64().expect("p50"),
        latency["p99_seconds"].as_f64().expect("p99"),
    );
    assert!(0.0 <= p50 && p50 <= p99, "{latency}");
}

/// `neyman ARGS` over TLS (`security_protocol = "ssl"`, the CA at `ca`) to `bootstrap`.
fn neyman_tls(bootstrap: &str, ca: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_neyman"))
        .args(args)
        .env("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", bootstrap)
        .env("NEYMAN_KAFKA_SECURITY_PROTOCOL", "ssl")
        .env("NEYMAN_KAFKA_SSL_CA_LOCATION", ca)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run neyman")
}

/// Issue 21 item 5: neyman's librdkafka is built with TLS. A recorded stream goes to the
/// topics and comes back over TLS (the broker's certificate checked against the CA given in
/// `ssl_ca_location`); with another CA the connection is refused and the command fails.
#[test]
fn a_stream_travels_over_tls_and_a_wrong_ca_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certificates = common::tls::certificates(dir.path());
    let other_ca = common::tls::ca(dir.path(), "other-ca");
    let tls_port = common::broker::free_port();
    let broker = Broker::start_advertising(Some(tls_port));
    let terminator =
        common::tls::Terminator::start_on(&certificates, tls_port, &broker.bootstrap());
    let bootstrap = format!("127.0.0.1:{}", terminator.port);
    let input = dir.path().join("in.jsonl.gz");
    let sent = write_small_stream(&input);
    let config = kafka_config_path();
    let path = |p: &Path| p.to_str().expect("utf-8").to_string();

    let out = neyman_tls(
        &bootstrap,
        &certificates.ca,
        &["replay", &path(&input), "--to-kafka", "--config", &config],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("published 301 events"),
        "{stderr}"
    );
    let recorded = dir.path().join("out.jsonl.gz");
    let out = neyman_tls(
        &bootstrap,
        &certificates.ca,
        &[
            "record",
            "--config",
            &config,
            "--out",
            &path(&recorded),
            "--max-events",
            "301",
            "--duration",
            "60s",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = read_all(&recorded);
    assert_eq!(got.len(), 301);
    for channel in Channel::ALL {
        let want: Vec<&Vec<u8>> = by_channel(&sent, channel)
            .iter()
            .map(|r| &r.payload)
            .collect();
        let have: Vec<&Vec<u8>> = by_channel(&got, channel)
            .iter()
            .map(|r| &r.payload)
            .collect();
        assert_eq!(want, have, "{channel}");
    }

    let out = neyman_tls(
        &bootstrap,
        &other_ca,
        &["replay", &path(&input), "--to-kafka", "--config", &config],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Broker transport failure"), "{stderr}");
}
