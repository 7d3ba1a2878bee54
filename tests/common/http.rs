//! A minimal HTTP/1.1 client for the daemon's API (no client crate needed in tests).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One HTTP/1.1 request with `Connection: close`; (status, body).
pub fn http(port: u16, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    http_as(port, method, path, None, body)
}

/// [`http`] with `Authorization: Bearer <token>` when a token is given.
pub fn http_as(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    let status = reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The value of one sample (`name{labels}` exactly as exposed) in a `/metrics` text.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Posts `records` to `/v1/events/{channel}` in order, in batches of at most 100 of one
/// channel; every batch must be taken whole. Returns how many were posted.
pub fn post_events(port: u16, token: &str, records: &[neyman::stream::record::Record]) -> usize {
    let mut posted = 0;
    for run in records.chunk_by(|a, b| a.channel == b.channel) {
        for batch in run.chunks(100) {
            let body = format!(
                "[{}]",
                batch
                    .iter()
                    .map(|r| String::from_utf8(r.payload.clone()).expect("utf-8"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let path = format!("/v1/events/{}", batch[0].channel);
            let (status, answer) = http_as(port, "POST", &path, Some(token), &body).expect("post");
            assert_eq!(status, 200, "{answer}");
            let answer: serde_json::Value = serde_json::from_str(&answer).expect("json");
            assert_eq!(answer["accepted"], batch.len(), "{answer}");
            assert_eq!(answer["dead_lettered"], 0, "{answer}");
            posted += batch.len();
        }
    }
    posted
}
