//! A realistic positive-unlabeled stream made from a fully labelled data set (`neyman stream
//! make`): the stream a daemon would see if a few positives were reported, a few negatives
//! confirmed, and everything else arrived unlabeled.
//!
//! Per pass over the data (a *cycle*):
//! - exactly round(F·P) of the P positives, drawn at random, go to channel `positive`;
//! - exactly round(G·N) of the N negatives go to channel `negative` (feedback);
//! - every other row goes to `unlabeled`;
//! - the rows are shuffled, so the channels interleave.
//!
//! With `events` set, cycles repeat (each with fresh draws) until that many events were made;
//! the last cycle may be cut short. An event's id is `<row id>-<cycle>` (cycle from 0), unique
//! because the row ids are and the suffix is always one `-<number>`. The true label goes into
//! `meta.label` (`1` or `-1`): meta is never read as a label or feature, but it is copied into
//! each score, which makes offline false-positive checks a join-free filter.
//!
//! Time: the first event is at `start_ms` (default 2026-01-01T00:00:00Z), the next ones follow
//! after exponential gaps with mean 1/rate seconds, floored to whole milliseconds, so `ts`
//! never decreases. The record's arrival `ts` equals the event's `ts`, its key the event id.
//!
//! Determinism: the channel draws and the shuffles come from ChaCha8 stream 0 of the seed, the
//! gaps from stream 1; `rand`'s `sample` and `shuffle` are platform-independent, so the same
//! data and parameters give the same records. (The gaps use `f64::ln`, which is not guaranteed
//! to round identically on every platform; a last-bit difference could move one timestamp by
//! a millisecond in rare cases.)

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Map};

use super::event::{Event, Features};
use super::record::Record;
use super::Channel;
use crate::data::{Dataset, Label, RowRef};

/// 2026-01-01T00:00:00Z in epoch milliseconds: the default start of a generated stream.
pub const DEFAULT_START_MS: i64 = 1_767_225_600_000;

#[derive(Debug, Clone, PartialEq)]
pub struct MakeParams {
    /// F: the share of positives sent to channel `positive`, in [0, 1].
    pub pu_labeled_fraction: f64,
    /// G: the share of negatives sent to channel `negative`, in [0, 1].
    pub negative_feedback_fraction: f64,
    pub seed: u64,
    /// Mean events per second, > 0.
    pub rate: f64,
    /// Total events (cycling the data); one pass when `None`.
    pub events: Option<usize>,
    /// Timestamp of the first event, epoch ms.
    pub start_ms: i64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MakeError {
    #[error("{flag} must be in [0, 1], got {value}")]
    BadFraction { flag: &'static str, value: f64 },
    #[error("--rate must be a positive number of events per second, got {0}")]
    BadRate(f64),
    #[error("--events must be at least 1")]
    NoEvents,
    #[error("--start-ms must be a non-negative epoch time in ms, got {0}")]
    BadStart(i64),
    #[error("the data set has no rows")]
    Empty,
    #[error("row {id:?} is unlabeled; stream make needs every label to be 1 or -1")]
    Unlabeled { id: String },
}

impl MakeParams {
    fn check(&self) -> Result<(), MakeError> {
        for (flag, value) in [
            ("--pu-labeled-fraction", self.pu_labeled_fraction),
            (
                "--negative-feedback-fraction",
                self.negative_feedback_fraction,
            ),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(MakeError::BadFraction { flag, value });
            }
        }
        if !(self.rate > 0.0 && self.rate.is_finite()) {
            return Err(MakeError::BadRate(self.rate));
        }
        if self.events == Some(0) {
            return Err(MakeError::NoEvents);
        }
        if self.start_ms < 0 {
            return Err(MakeError::BadStart(self.start_ms));
        }
        Ok(())
    }
}

/// The generated records, one at a time (memory: one cycle's order, not the whole stream).
pub struct StreamMaker<'a> {
    data: &'a Dataset,
    params: MakeParams,
    positives: Vec<usize>,
    negatives: Vec<usize>,
    order_rng: ChaCha8Rng,
    time_rng: ChaCha8Rng,
    /// This cycle's (row, channel) pairs in emission order, and the position in it.
    cycle: Vec<(usize, Channel)>,
    at: usize,
    cycle_no: usize,
    made: usize,
    total: usize,
    seconds: f64,
}

impl<'a> StreamMaker<'a> {
    pub fn new(data: &'a Dataset, params: &MakeParams) -> Result<StreamMaker<'a>, MakeError> {
        params.check()?;
        if data.is_empty() {
            return Err(MakeError::Empty);
        }
        if let Some(i) = data.labels.iter().position(|&l| l == Label::Unlabeled) {
            return Err(MakeError::Unlabeled {
                id: data.ids[i].clone(),
            });
        }
        let order_rng = ChaCha8Rng::seed_from_u64(params.seed);
        let mut time_rng = ChaCha8Rng::seed_from_u64(params.seed);
        time_rng.set_stream(1);
        Ok(StreamMaker {
            data,
            params: params.clone(),
            positives: data.indices_of(Label::Positive),
            negatives: data.indices_of(Label::Negative),
            order_rng,
            time_rng,
            cycle: Vec::new(),
            at: 0,
            cycle_no: 0,
            made: 0,
            total: params.events.unwrap_or(data.len()),
            seconds: 0.0,
        })
    }

    /// How many records the stream has in all.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Draws the next cycle's channels and order.
    fn new_cycle(&mut self) {
        let mut channel = vec![Channel::Unlabeled; self.data.len()];
        for (rows, fraction, to) in [
            (
                &self.positives,
                self.params.pu_labeled_fraction,
                Channel::Positive,
            ),
            (
                &self.negatives,
                self.params.negative_feedback_fraction,
                Channel::Negative,
            ),
        ] {
            let amount = ((fraction * rows.len() as f64).round() as usize).min(rows.len());
            for k in rand::seq::index::sample(&mut self.order_rng, rows.len(), amount) {
                channel[rows[k]] = to;
            }
        }
        let mut order: Vec<usize> = (0..self.data.len()).collect();
        order.shuffle(&mut self.order_rng);
        self.cycle = order.into_iter().map(|r| (r, channel[r])).collect();
        self.at = 0;
    }

    fn event(&self, row: usize, ts: i64) -> Event {
        let x = match self.data.rows.row(row) {
            RowRef::Dense(x) => Features::Dense(x.to_vec()),
            RowRef::Sparse { indices, values } => Features::Sparse {
                dim: self.data.rows.n_features(),
                indices: indices.to_vec(),
                values: values.to_vec(),
            },
        };
        let mut meta = Map::new();
        meta.insert("label".into(), json!(self.data.labels[row].code()));
        Event {
            id: format!("{}-{}", self.data.ids[row], self.cycle_no),
            ts,
            x,
            meta: Some(meta),
        }
    }
}

impl Iterator for StreamMaker<'_> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        if self.made == self.total {
            return None;
        }
        if self.made > 0 {
            let u: f64 = self.time_rng.gen();
            self.seconds += -(1.0 - u).ln() / self.params.rate;
        }
        if self.at == self.cycle.len() {
            if self.made > 0 {
                self.cycle_no += 1;
            }
            self.new_cycle();
        }
        let (row, channel) = self.cycle[self.at];
        self.at += 1;
        self.made += 1;
        let ts = self.params.start_ms + (self.seconds * 1000.0).floor() as i64;
        let event = self.event(row, ts);
        // An event of strings, integers and finite floats always serialises.
        let payload = serde_json::to_vec(&event).unwrap_or_default();
        Some(Record::new(channel, ts, Some(event.id), payload))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.total - self.made;
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Rows;
    use crate::stream::event::{parse_event, EventLimits};
    use std::collections::BTreeSet;

    /// `n_pos` positives then `n_neg` negatives, feature = row number.
    fn data(n_pos: usize, n_neg: usize) -> Dataset {
        let n = n_pos + n_neg;
        Dataset {
            rows: Rows::dense(ndarray::Array2::from_shape_fn((n, 2), |(i, j)| {
                (i * 10 + j) as f64
            })),
            labels: (0..n)
                .map(|i| {
                    if i < n_pos {
                        Label::Positive
                    } else {
                        Label::Negative
                    }
                })
                .collect(),
            ids: (0..n).map(|i| i.to_string()).collect(),
        }
    }

    fn params() -> MakeParams {
        MakeParams {
            pu_labeled_fraction: 0.3,
            negative_feedback_fraction: 0.1,
            seed: 7,
            rate: 10.0,
            events: None,
            start_ms: DEFAULT_START_MS,
        }
    }

    fn count(records: &[Record], channel: Channel) -> usize {
        records.iter().filter(|r| r.channel == channel).count()
    }

    #[test]
    fn one_cycle_has_exact_channel_counts_and_valid_events() {
        let data = data(40, 60);
        let records: Vec<Record> = StreamMaker::new(&data, &params()).unwrap().collect();
        assert_eq!(records.len(), 100);
        assert_eq!(count(&records, Channel::Positive), 12);
        assert_eq!(count(&records, Channel::Negative), 6);
        assert_eq!(count(&records, Channel::Unlabeled), 82);
        assert_eq!(records[0].ts, DEFAULT_START_MS);
        let mut ids = BTreeSet::new();
        for (k, r) in records.iter().enumerate() {
            let e = parse_event(&r.payload, Some(2), &EventLimits::default()).unwrap();
            assert_eq!((e.ts, Some(&e.id)), (r.ts, r.key.as_ref()));
            let (row, cycle) = e.id.rsplit_once('-').unwrap();
            assert_eq!(cycle, "0");
            let row: usize = row.parse().unwrap();
            assert_eq!(
                e.x,
                Features::Dense(vec![(row * 10) as f64, (row * 10 + 1) as f64])
            );
            let label = e.meta.unwrap()["label"].as_i64().unwrap();
            assert_eq!(label, if row < 40 { 1 } else { -1 });
            match r.channel {
                Channel::Positive => assert_eq!(label, 1),
                Channel::Negative => assert_eq!(label, -1),
                Channel::Unlabeled => {}
            }
            assert!(ids.insert(e.id));
            if k > 0 {
                assert!(r.ts >= records[k - 1].ts);
            }
        }
        // 99 gaps with mean 100 ms: the span is near 9.9 s.
        let span = records[99].ts - records[0].ts;
        assert!((7_000..13_000).contains(&span), "{span}");
    }

    #[test]
    fn cycling_gives_fresh_ids_and_fresh_draws() {
        let data = data(10, 10);
        let mut p = params();
        p.events = Some(50);
        let records: Vec<Record> = StreamMaker::new(&data, &p).unwrap().collect();
        assert_eq!(records.len(), 50);
        let ids: BTreeSet<&str> = records.iter().filter_map(|r| r.key.as_deref()).collect();
        assert_eq!(ids.len(), 50);
        assert!(ids.contains("3-0") && ids.contains("3-1") && ids.contains("3-2"));
        let in_cycle = |c: usize| &records[20 * c..(20 * c + 20).min(50)];
        for c in 0..2 {
            assert_eq!(count(in_cycle(c), Channel::Positive), 3);
            assert_eq!(count(in_cycle(c), Channel::Negative), 1);
        }
        let order = |c: usize| -> Vec<String> {
            in_cycle(c)
                .iter()
                .map(|r| {
                    r.key
                        .clone()
                        .unwrap()
                        .rsplit_once('-')
                        .unwrap()
                        .0
                        .to_owned()
                })
                .collect()
        };
        assert_ne!(order(0), order(1));
        // The third cycle is cut after 10 events.
        assert!(in_cycle(2)
            .iter()
            .all(|r| r.key.as_ref().unwrap().ends_with("-2")));
    }

    #[test]
    fn same_parameters_same_records_and_the_seed_matters() {
        let data = data(20, 30);
        let run = |seed| {
            let mut p = params();
            p.seed = seed;
            StreamMaker::new(&data, &p).unwrap().collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        // Pinned: a change of RNG, sampling or gap formula cannot slip by unnoticed.
        let first: Vec<(Channel, i64, String)> = run(3)
            .into_iter()
            .take(3)
            .map(|r| (r.channel, r.ts, r.key.unwrap()))
            .collect();
        assert_eq!(first, PINNED.map(|(c, t, k)| (c, t, k.to_owned())).to_vec());
    }

    const PINNED: [(Channel, i64, &str); 3] = [
        (Channel::Unlabeled, DEFAULT_START_MS, "24-0"),
        (Channel::Unlabeled, DEFAULT_START_MS + 128, "2-0"),
        (Channel::Unlabeled, DEFAULT_START_MS + 154, "14-0"),
    ];

    #[test]
    fn extreme_fractions_and_sparse_rows() {
        let mut csr = crate::data::CsrMatrix::new(4);
        csr.push_row(&[1], &[2.0]).unwrap();
        csr.push_row(&[0, 3], &[1.0, -1.0]).unwrap();
        let data = Dataset {
            rows: Rows::Sparse(csr),
            labels: vec![Label::Positive, Label::Negative],
            ids: vec!["a".into(), "b".into()],
        };
        let mut p = params();
        p.pu_labeled_fraction = 1.0;
        p.negative_feedback_fraction = 0.0;
        let records: Vec<Record> = StreamMaker::new(&data, &p).unwrap().collect();
        let by_key = |k: &str| {
            records
                .iter()
                .find(|r| r.key.as_deref() == Some(k))
                .unwrap()
        };
        assert_eq!(by_key("a-0").channel, Channel::Positive);
        assert_eq!(by_key("b-0").channel, Channel::Unlabeled);
        let e = parse_event(&by_key("b-0").payload, None, &EventLimits::default()).unwrap();
        assert_eq!(
            e.x,
            Features::Sparse {
                dim: 4,
                indices: vec![0, 3],
                values: vec![1.0, -1.0]
            }
        );
    }

    #[test]
    fn bad_parameters_and_data_are_refused() {
        let data = data(2, 2);
        let with = |f: fn(&mut MakeParams)| {
            let mut p = params();
            f(&mut p);
            StreamMaker::new(&data, &p).err().unwrap().to_string()
        };
        assert_eq!(
            with(|p| p.pu_labeled_fraction = 1.5),
            "--pu-labeled-fraction must be in [0, 1], got 1.5"
        );
        assert_eq!(
            with(|p| p.negative_feedback_fraction = f64::NAN),
            "--negative-feedback-fraction must be in [0, 1], got NaN"
        );
        assert_eq!(
            with(|p| p.rate = 0.0),
            "--rate must be a positive number of events per second, got 0"
        );
        assert_eq!(with(|p| p.events = Some(0)), "--events must be at least 1");
        let mut pu = data.clone();
        pu.labels[1] = Label::Unlabeled;
        assert_eq!(
            StreamMaker::new(&pu, &params()).err().unwrap(),
            MakeError::Unlabeled { id: "1".into() }
        );
        let empty = data.select(&[]);
        assert_eq!(
            StreamMaker::new(&empty, &params()).err().unwrap(),
            MakeError::Empty
        );
    }
}
