//! Synthetic recorded streams for the daemon tests.

use std::path::Path;

use neyman::stream::record::RecordReader;
use neyman::stream::{Channel, Record};

/// The first `n` records of the bundled spambase stream (`usize::MAX`: all of them).
pub fn bundled(n: usize) -> Vec<Record> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/streams/spambase.jsonl.gz"
    );
    RecordReader::open(Path::new(path))
        .expect("bundled stream")
        .take(n)
        .map(|r| r.expect("record"))
        .collect()
}

/// A positive-unlabeled stream of `dim`-dimensional events (no negatives): `positives`
/// labelled positives, then `unlabeled` events of which a share `prior` are positives.
/// Positives are shifted by +1 in the first 20 coordinates; the rest is uniform noise in
/// [-1, 1] (xorshift, seeded), so support vectors do not compress.
pub fn pu_stream(dim: usize, positives: usize, unlabeled: usize, prior: f64) -> Vec<Record> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = Vec::new();
    for i in 0..positives + unlabeled {
        let (channel, positive) = if i < positives {
            (Channel::Positive, true)
        } else {
            (Channel::Unlabeled, uniform() < prior)
        };
        let x: Vec<String> = (0..dim)
            .map(|j| {
                let shift = if positive && j < 20 { 1.0 } else { 0.0 };
                format!("{:.6}", 2.0 * uniform() - 1.0 + shift)
            })
            .collect();
        let id = format!("e{i}");
        let ts = 1_767_225_600_000 + i as i64;
        let payload = format!("{{\"id\":\"{id}\",\"ts\":{ts},\"x\":[{}]}}", x.join(","));
        out.push(Record::new(channel, ts, Some(id), payload.into_bytes()));
    }
    out
}
