//! Memory after stalled uploads (issue 21): 100 clients announce bodies just under
//! `http.max_body_bytes`, send all but the last bytes and stall. They are answered 408 after
//! `http.request_timeout`, and the daemon's resident memory returns to within 10 % of its
//! level before them — without another request to wake its workers (before the fix it kept
//! 289–464 MB). Its own test binary, so no other test's daemon shares the machine's memory
//! traffic with it.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::daemon::Daemon;

const UPLOADS: usize = 100;
const MAX_BODY: usize = 4 << 20;

/// The daemon's resident set, from /proc.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .expect("VmRSS")
}

/// One stalled upload: the head announces `MAX_BODY − 100` bytes, all but 10 are sent, then
/// nothing. Returns the status the daemon answered (0 when it closed without one, which a
/// client still blocked in its send sees as a reset).
fn stalled_upload(port: u16) -> u16 {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let announced = MAX_BODY - 100;
    let head = format!(
        "POST /v1/score HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {announced}\r\n\r\n"
    );
    let mut body = vec![b' '; announced - 10];
    body[0] = b'[';
    if s.write_all(head.as_bytes()).is_err() || s.write_all(&body).is_err() {
        return 0;
    }
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn memory_returns_after_stalled_uploads_time_out() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("neyman.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[source]
kind = "http"
[output]
scores = "scores.jsonl"
dlq = "dlq.jsonl"
[http]
max_body_bytes = {MAX_BODY}
request_timeout = "3s"
[model]
algorithm = "usmo"
prior = 0.38
prior_min = 0.33
prior_max = 0.43
tau = 0.05
"#
        ),
    )
    .expect("config");
    let mut daemon = Daemon::start_config(&config, &dir.path().join("state"), &[]);
    let port = daemon.port;
    daemon.wait_for("the HTTP API", |m| m.contains("neyman_build_info"));
    // Settled: a few requests of every kind the test makes have run.
    for _ in 0..20 {
        let _ = daemon.metrics();
        let _ = common::http::http(port, "POST", "/v1/score", "{\"id\":\"a\",\"x\":[1]}");
    }
    std::thread::sleep(Duration::from_secs(2));
    let idle = rss_kb(daemon.pid());

    let peak = std::sync::atomic::AtomicU64::new(idle);
    let started = Instant::now();
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..UPLOADS)
            .map(|_| scope.spawn(|| stalled_upload(port)))
            .collect();
        while clients.iter().any(|c| !c.is_finished()) {
            peak.fetch_max(rss_kb(daemon.pid()), std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(100));
        }
        clients
            .into_iter()
            .map(|c| c.join().expect("client"))
            .collect()
    });
    let answered = statuses.iter().filter(|&&s| s == 408).count();
    let peak = peak.into_inner();
    assert!(statuses.iter().all(|&s| s == 408 || s == 0), "{statuses:?}");
    // The uploads were really held: at least 64 (max_concurrent_requests) bodies of ~4 MiB.
    assert!(
        peak > idle + 150 * 1024,
        "peak {peak} kB, idle {idle} kB: the uploads were not held"
    );
    // Whatever the timing, memory settles within a few seconds of the last answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = rss_kb(daemon.pid());
    while after as f64 > idle as f64 * 1.10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        after = rss_kb(daemon.pid());
    }
    eprintln!("resident: idle {idle} kB, peak {peak} kB, after {after} kB");
    assert!(
        after as f64 <= idle as f64 * 1.10,
        "resident {after} kB after the uploads against {idle} kB idle (peak {peak} kB, {answered} \
         of {UPLOADS} answered 408 within {:?})",
        started.elapsed()
    );
    assert!(answered > 0, "{statuses:?}");
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{log}");
}
