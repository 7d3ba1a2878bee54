//! One channel's sliding window of events, and which events calibrate instead of train.
//!
//! A [`Window`] keeps the most recent events of a channel under three bounds: a count, an age
//! (event time, relative to the newest `ts` seen, so replaying a recording behaves exactly like
//! the live stream) and approximate heap bytes. Events are keyed by id: a redelivered event
//! (at-least-once delivery) is reported as a duplicate and counted once. An id that has left
//! the window is forgotten, so a redelivery after eviction counts as new.
//!
//! Every insertion reports what it evicted, and each stored event may remember its source
//! `(partition, offset)`, so the Kafka layer can ask for the low watermark of what the window
//! still holds ([`Window::oldest_offset_per_partition`]).
//!
//! Orders are deterministic: the snapshot and iteration follow insertion order; evictions come
//! out oldest first. The id index is a hash table used for lookups only, never iterated.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::BuildHasher;

use crate::data::Rows;
use crate::deque::{remove_at, search_from_ends};
use crate::stream::event::features_to_rows;
use crate::stream::Features;

/// The bounds of one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowConfig {
    /// At most this many events (≥ 1).
    pub max_events: usize,
    /// Events with `ts < newest_ts − max_age_ms` leave the window; `None`: no age bound.
    pub max_age_ms: Option<i64>,
    /// At most this many approximate heap bytes ([`Window::bytes`]); `None`: no byte bound.
    pub max_bytes: Option<usize>,
}

/// Where an event was read from (Kafka partition and offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourcePos {
    pub partition: i32,
    pub offset: i64,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: String,
    /// Event time, epoch ms.
    pub ts: i64,
    pub x: Features,
    pub source: Option<SourcePos>,
}

/// Bytes charged per entry beyond its id and feature heap bytes: the entry itself plus the
/// nodes of the indexes (order, id, time). An estimate, fixed so that the
/// accounting is reproducible.
pub const ENTRY_OVERHEAD: usize = std::mem::size_of::<Entry>() + 96;

impl Entry {
    /// Approximate heap bytes this entry costs the window: its feature values, its id twice
    /// (the entry and the id index hold one copy each) and [`ENTRY_OVERHEAD`].
    pub fn bytes(&self) -> usize {
        self.x.heap_bytes() + 2 * self.id.len() + ENTRY_OVERHEAD
    }
}

/// Which bound pushed an event out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EvictReason {
    Age,
    Count,
    Bytes,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Evicted {
    pub entry: Entry,
    pub reason: EvictReason,
}

/// What [`Window::insert`] did with an event.
#[derive(Debug, Clone, PartialEq)]
pub enum InsertOutcome {
    /// Stored. `evicted` lists what left to make room or aged out, oldest first.
    Added { evicted: Vec<Evicted> },
    /// The id is already in the window; nothing changed.
    Duplicate,
    /// Older than the age bound allows relative to the newest event seen; not stored.
    TooOld,
    /// The event alone is larger than the byte bound; not stored.
    TooLarge,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("invalid window bounds: {0}")]
    Config(String),
    #[error("event {id:?} has {dim} features, the snapshot {expected}")]
    Dimension {
        id: String,
        dim: usize,
        expected: usize,
    },
}

/// The window's events as training rows, in insertion order.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub ids: Vec<String>,
    pub ts: Vec<i64>,
    /// Dense when every event is dense, else CSR (dense events keep their non-zeros).
    pub rows: Rows,
}

/// A stored event with its insertion sequence number.
#[derive(Debug, Clone)]
struct Slot {
    seq: u64,
    entry: Entry,
}

/// `S` hashes ids; the default is seeded per process (ids come from producers), and foldhash
/// costs a fraction of SipHash per event (measured in `bench kafka`).
#[derive(Debug, Clone)]
pub struct Window<S = foldhash::fast::RandomState> {
    config: WindowConfig,
    /// In insertion order: evictions by count and bytes pop the front; only an age eviction
    /// out of insertion order removes from the middle.
    entries: VecDeque<Slot>,
    /// The id index: (id hash, sequence number) of every stored event, and of some evicted
    /// ones. It holds no copy of the id: a lookup compares hashes and reads the id from
    /// `entries` only when they match (a duplicate, or a 64-bit collision). An eviction leaves
    /// its row behind (finding it was a cache miss per event on a full window); a row counts
    /// only while its event is stored ([`Window::stored_seq`]), and [`Window::sweep`] drops
    /// the dead rows once they are as many as the live ones, so the index stays within
    /// twice the window. A map from id strings cost a copy of every id and three probes per
    /// event.
    by_id: hashbrown::HashTable<(u64, u64)>,
    /// Sequence numbers at or after the front of `entries` that were removed from its middle
    /// (an age eviction out of insertion order): with the front, they say which rows are
    /// dead. Usually empty; emptied of what the front has passed by [`Window::sweep`].
    removed_inside: hashbrown::HashSet<u64>,
    hasher: S,
    by_ts: TimeIndex,
    next_seq: u64,
    newest_ts: Option<i64>,
    bytes: usize,
}

impl Window {
    pub fn new(config: WindowConfig) -> Result<Window, WindowError> {
        Window::with_hasher(config, foldhash::fast::RandomState::default())
    }
}

impl<S: BuildHasher> Window<S> {
    /// A window whose ids are hashed by `hasher`.
    pub fn with_hasher(config: WindowConfig, hasher: S) -> Result<Window<S>, WindowError> {
        if config.max_events == 0 {
            return Err(WindowError::Config("max_events must be at least 1".into()));
        }
        if config.max_age_ms.is_some_and(|a| a < 0) {
            return Err(WindowError::Config(
                "max_age_ms must not be negative".into(),
            ));
        }
        Ok(Window {
            config,
            entries: VecDeque::new(),
            by_id: hashbrown::HashTable::new(),
            removed_inside: hashbrown::HashSet::new(),
            hasher,
            by_ts: TimeIndex::default(),
            next_seq: 0,
            newest_ts: None,
            bytes: 0,
        })
    }

    pub fn config(&self) -> &WindowConfig {
        &self.config
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Approximate heap bytes of the stored events (sum of [`Entry::bytes`]).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The newest event time seen, stored or not (duplicates excepted).
    pub fn newest_ts(&self) -> Option<i64> {
        self.newest_ts
    }

    pub fn contains(&self, id: &str) -> bool {
        self.stores(self.hasher.hash_one(id), id)
    }

    /// The stored event with this id, if any.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.find(self.hasher.hash_one(id), id)
    }

    /// Whether an event with this id (whose hash is `id_hash`) is stored.
    fn stores(&self, id_hash: u64, id: &str) -> bool {
        self.find(id_hash, id).is_some()
    }

    fn find(&self, id_hash: u64, id: &str) -> Option<&Entry> {
        let &(_, seq) = self.by_id.find(id_hash, |&(hash, seq)| {
            hash == id_hash
                && self.stored_seq(seq)
                && self.slot(seq).is_some_and(|s| s.entry.id == id)
        })?;
        self.slot(seq).map(|s| &s.entry)
    }

    /// Whether the event inserted as `seq` is still stored (its index row is live), in O(1):
    /// `entries` is in sequence order, so everything before its front has left, and what left
    /// from behind the front is in `removed_inside`.
    fn stored_seq(&self, seq: u64) -> bool {
        self.entries.front().is_some_and(|f| f.seq <= seq)
            && seq < self.next_seq
            && (self.removed_inside.is_empty() || !self.removed_inside.contains(&seq))
    }

    /// Drops the index rows of evicted events once they are as many as the stored ones (plus
    /// a slack, so a small window does not sweep on every eviction): one pass over the table
    /// per window's worth of evictions.
    fn sweep(&mut self) {
        if self.by_id.len() <= 2 * self.entries.len() + SWEEP_SLACK {
            return;
        }
        let front = self.entries.front().map_or(u64::MAX, |f| f.seq);
        let removed_inside = &self.removed_inside;
        self.by_id
            .retain(|&mut (_, seq)| front <= seq && !removed_inside.contains(&seq));
        self.removed_inside.retain(|&seq| front <= seq);
    }

    /// Where the event inserted as `seq` sits in `entries`: at `seq` minus the front's when
    /// no event left from behind the front (the usual case), else by a binary search.
    fn position(&self, seq: u64) -> Option<usize> {
        let front = self.entries.front()?.seq;
        let guess = usize::try_from(seq.checked_sub(front)?).ok()?;
        match self.entries.get(guess) {
            Some(slot) if slot.seq == seq => Some(guess),
            _ => search_from_ends(&self.entries, &seq, |s| s.seq).ok(),
        }
    }

    fn slot(&self, seq: u64) -> Option<&Slot> {
        self.entries.get(self.position(seq)?)
    }

    /// The stored events, oldest insertion first.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> + Clone {
        self.entries.iter().map(|s| &s.entry)
    }

    /// The stored events, newest insertion first.
    pub fn newest_first(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().rev().map(|s| &s.entry)
    }

    /// The stored events with their insertion sequence numbers (never reused within a
    /// window), newest insertion first.
    pub fn newest_first_with_seq(&self) -> impl Iterator<Item = (u64, &Entry)> {
        self.entries.iter().rev().map(|s| (s.seq, &s.entry))
    }

    /// Whether the event inserted as `seq` is still stored.
    pub fn stores_seq(&self, seq: u64) -> bool {
        self.stored_seq(seq)
    }

    /// The stored event inserted as `seq`, if it is still stored.
    pub fn entry_at(&self, seq: u64) -> Option<&Entry> {
        self.slot(seq).map(|s| &s.entry)
    }

    /// The insertion sequence number of the oldest stored event (the next one's when empty).
    pub fn oldest_seq(&self) -> u64 {
        self.entries.front().map_or(self.next_seq, |s| s.seq)
    }

    /// The oldest `ts` still allowed, given the newest seen.
    fn cutoff(&self) -> Option<i64> {
        Some(self.newest_ts?.saturating_sub(self.config.max_age_ms?))
    }

    /// Adds an event unless its id is already stored, then applies the bounds: age first,
    /// then count, then bytes.
    pub fn insert(&mut self, entry: Entry) -> InsertOutcome {
        let id_hash = self.hasher.hash_one(entry.id.as_str());
        if self.stores(id_hash, &entry.id) {
            return InsertOutcome::Duplicate;
        }
        if self.cutoff().is_some_and(|c| entry.ts < c) {
            return InsertOutcome::TooOld;
        }
        let size = entry.bytes();
        if self.config.max_bytes.is_some_and(|m| size > m) {
            return InsertOutcome::TooLarge;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.newest_ts = Some(self.newest_ts.map_or(entry.ts, |n| n.max(entry.ts)));
        self.by_id
            .insert_unique(id_hash, (id_hash, seq), |&(hash, _)| hash);
        self.by_ts.insert((entry.ts, seq));
        self.bytes += size;
        self.entries.push_back(Slot { seq, entry });

        let mut evicted = Vec::new();
        if let Some(cutoff) = self.cutoff() {
            while let Some((ts, seq)) = self.by_ts.first() {
                if ts >= cutoff {
                    break;
                }
                evicted.extend(self.remove(seq, EvictReason::Age));
            }
        }
        while self.entries.len() > self.config.max_events {
            let oldest = self.entries.front().map(|s| s.seq);
            evicted.extend(oldest.and_then(|s| self.remove(s, EvictReason::Count)));
        }
        if let Some(max) = self.config.max_bytes {
            while self.bytes > max {
                let oldest = self.entries.front().map(|s| s.seq);
                match oldest.and_then(|s| self.remove(s, EvictReason::Bytes)) {
                    Some(e) => evicted.push(e),
                    None => break,
                }
            }
        }
        self.sweep();
        InsertOutcome::Added { evicted }
    }

    /// Removes the event inserted as `seq`; its id index row stays behind, dead
    /// ([`Window::sweep`]).
    fn remove(&mut self, seq: u64, reason: EvictReason) -> Option<Evicted> {
        let at = self.position(seq)?;
        let Slot { entry, .. } = remove_at(&mut self.entries, at)?;
        if at > 0 {
            self.removed_inside.insert(seq);
        }
        self.by_ts.remove((entry.ts, seq));
        self.bytes -= entry.bytes();
        Some(Evicted { entry, reason })
    }

    /// The smallest source offset still stored, per partition. Offsets below it are no longer
    /// needed by this window (it is the low watermark a Kafka consumer may commit up to).
    ///
    /// A scan of the window: it is asked once per commit interval, and an index kept in step
    /// on every insertion and eviction cost more than the scans it saved.
    pub fn oldest_offset_per_partition(&self) -> BTreeMap<i32, i64> {
        let mut out = BTreeMap::new();
        for s in self.iter().filter_map(|e| e.source) {
            out.entry(s.partition)
                .and_modify(|oldest: &mut i64| *oldest = (*oldest).min(s.offset))
                .or_insert(s.offset);
        }
        out
    }

    /// The stored events as rows with `n_features` columns, in insertion order.
    pub fn snapshot(&self, n_features: usize) -> Result<Snapshot, WindowError> {
        let entries = self.checked(n_features)?;
        let rows = features_to_rows(entries.clone().map(|e| &e.x), n_features)
            .map_err(|err| WindowError::Config(err.to_string()))?;
        Ok(Snapshot {
            ids: entries.clone().map(|e| e.id.clone()).collect(),
            ts: entries.map(|e| e.ts).collect(),
            rows,
        })
    }

    /// The stored events, oldest insertion first, once every one is checked to have
    /// `n_features` features (the first that has not is the error).
    pub fn checked(
        &self,
        n_features: usize,
    ) -> Result<impl Iterator<Item = &Entry> + Clone, WindowError> {
        if let Some(e) = self.iter().find(|e| e.x.dim() != n_features) {
            return Err(WindowError::Dimension {
                id: e.id.clone(),
                dim: e.x.dim(),
                expected: n_features,
            });
        }
        Ok(self.iter())
    }
}

/// Dead id index rows a window tolerates beyond as many as it stores ([`Window::sweep`]).
const SWEEP_SLACK: usize = 64;

/// The stored events' `(ts, insertion sequence)` pairs, with their minimum at hand for age
/// evictions. Times mostly arrive in order: such pairs sit in a deque in insertion order, O(1)
/// at both ends; a pair older than the deque's newest goes to a tree, so a shuffled stream
/// costs O(log n) per event and never a shift of the deque. Evictions remove the minimum (age)
/// or the oldest insertion (count, bytes); either is the deque's front when it is in the deque.
#[derive(Debug, Clone, Default)]
struct TimeIndex {
    in_order: VecDeque<(i64, u64)>,
    late: BTreeSet<(i64, u64)>,
}

impl TimeIndex {
    fn insert(&mut self, key: (i64, u64)) {
        if self.in_order.back().map_or(true, |&newest| newest <= key) {
            self.in_order.push_back(key);
        } else {
            self.late.insert(key);
        }
    }

    fn remove(&mut self, key: (i64, u64)) {
        match search_from_ends(&self.in_order, &key, |k| *k) {
            Ok(at) => {
                remove_at(&mut self.in_order, at);
            }
            Err(_) => {
                self.late.remove(&key);
            }
        }
    }

    fn first(&self) -> Option<(i64, u64)> {
        match (self.in_order.front(), self.late.first()) {
            (Some(a), Some(b)) => Some(*a.min(b)),
            (a, b) => a.or(b).copied(),
        }
    }
}

pub use crate::codec::fnv1a64;

/// Whether the event with this id is held out for calibration: `fnv1a64(id) mod 100 <
/// percent`. Stable across restarts, replicas and platforms, so an event never trains one
/// model and calibrates the next. `percent ≥ 100` holds out everything.
pub fn in_calibration(id: &str, percent: u8) -> bool {
    fnv1a64(id.as_bytes()) % 100 < u64::from(percent)
}

/// Which of one channel's events (`ts[i]`, `ids[i]`) are held out under
/// `model.calibration = "recent"`: the newest `percent` % by event time, rounded up
/// (everything at `percent ≥ 100`), ties broken by id (unique within a window), so the choice
/// is reproducible whatever the arrival order.
pub fn newest_held_out(ts: &[i64], ids: &[String], percent: u8) -> Vec<bool> {
    let n = ts.len().min(ids.len());
    let held = (n * usize::from(percent.min(100))).div_ceil(100);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| (ts[a], &ids[a]).cmp(&(ts[b], &ids[b])));
    let mut mask = vec![false; n];
    for &i in &order[n - held..] {
        mask[i] = true;
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::CsrMatrix;

    fn config(
        max_events: usize,
        max_age_ms: Option<i64>,
        max_bytes: Option<usize>,
    ) -> WindowConfig {
        WindowConfig {
            max_events,
            max_age_ms,
            max_bytes,
        }
    }

    fn dense(id: &str, ts: i64, x: &[f64]) -> Entry {
        Entry {
            id: id.into(),
            ts,
            x: Features::Dense(x.to_vec()),
            source: None,
        }
    }

    fn at(id: &str, ts: i64, partition: i32, offset: i64) -> Entry {
        Entry {
            source: Some(SourcePos { partition, offset }),
            ..dense(id, ts, &[1.0])
        }
    }

    fn evicted_ids(outcome: &InsertOutcome) -> Vec<(String, EvictReason)> {
        match outcome {
            InsertOutcome::Added { evicted } => evicted
                .iter()
                .map(|e| (e.entry.id.clone(), e.reason))
                .collect(),
            other => panic!("not added: {other:?}"),
        }
    }

    fn ids(w: &Window) -> Vec<&str> {
        w.iter().map(|e| e.id.as_str()).collect()
    }

    #[test]
    fn count_bound_evicts_the_oldest_insertion() {
        let mut w = Window::new(config(3, None, None)).unwrap();
        for (k, id) in ["a", "b", "c"].iter().enumerate() {
            assert!(evicted_ids(&w.insert(dense(id, k as i64, &[0.0]))).is_empty());
        }
        // Insertion order, not time order, decides: "d" is older but arrives last.
        let out = w.insert(dense("d", -5, &[0.0]));
        assert_eq!(evicted_ids(&out), [("a".to_owned(), EvictReason::Count)]);
        assert_eq!(ids(&w), ["b", "c", "d"]);
        assert_eq!(w.len(), 3);
        assert_eq!(w.newest_ts(), Some(2));
    }

    #[test]
    fn age_bound_follows_the_newest_event_time() {
        let mut w = Window::new(config(100, Some(1000), None)).unwrap();
        w.insert(dense("a", 0, &[0.0]));
        w.insert(dense("b", 600, &[0.0]));
        w.insert(dense("late", 100, &[0.0]));
        // Newest 1500: cutoff 500 drops a (0) and late (100), oldest time first.
        let out = w.insert(dense("c", 1500, &[0.0]));
        assert_eq!(
            evicted_ids(&out),
            [
                ("a".to_owned(), EvictReason::Age),
                ("late".to_owned(), EvictReason::Age)
            ]
        );
        assert_eq!(ids(&w), ["b", "c"]);
        // Exactly at the cutoff stays; below it is refused.
        assert!(evicted_ids(&w.insert(dense("edge", 500, &[0.0]))).is_empty());
        assert_eq!(w.insert(dense("old", 499, &[0.0])), InsertOutcome::TooOld);
        assert_eq!(ids(&w), ["b", "c", "edge"]);
        // An event that is not the newest does not move the cutoff.
        assert_eq!(w.newest_ts(), Some(1500));
    }

    #[test]
    fn duplicates_count_once() {
        let mut w = Window::new(config(2, None, None)).unwrap();
        w.insert(dense("a", 1, &[1.0]));
        let bytes = w.bytes();
        assert_eq!(w.insert(dense("a", 9, &[2.0])), InsertOutcome::Duplicate);
        assert_eq!((w.len(), w.bytes(), w.newest_ts()), (1, bytes, Some(1)));
        assert_eq!(w.iter().next().unwrap().x, Features::Dense(vec![1.0]));
        // Once evicted, the id is forgotten.
        w.insert(dense("b", 2, &[1.0]));
        w.insert(dense("c", 3, &[1.0]));
        assert!(!w.contains("a"));
        assert_eq!(
            evicted_ids(&w.insert(dense("a", 4, &[1.0]))),
            [("b".to_owned(), EvictReason::Count)]
        );
    }

    #[test]
    fn bytes_are_accounted_and_bounded() {
        let per = |features: usize, id_len: usize| 8 * features + 2 * id_len + ENTRY_OVERHEAD;
        let mut w = Window::new(config(100, None, Some(3 * per(4, 2)))).unwrap();
        assert_eq!(w.bytes(), 0);
        w.insert(dense("e1", 0, &[1.0; 4]));
        assert_eq!(w.bytes(), per(4, 2));
        let sparse = Entry {
            id: "s1".into(),
            ts: 0,
            x: Features::Sparse {
                dim: 1000,
                indices: vec![3, 999],
                values: vec![1.0, 2.0],
            },
            source: None,
        };
        assert_eq!(sparse.bytes(), 2 * 4 + 2 * 8 + 4 + ENTRY_OVERHEAD);
        w.insert(sparse);
        assert_eq!(w.bytes(), per(4, 2) + 28 + ENTRY_OVERHEAD);
        w.insert(dense("e2", 0, &[1.0; 4]));
        // A fourth 4-feature event exceeds 3 of them: the oldest leaves.
        let out = w.insert(dense("e3", 0, &[1.0; 4]));
        assert_eq!(evicted_ids(&out), [("e1".to_owned(), EvictReason::Bytes)]);
        assert_eq!(w.bytes(), 2 * per(4, 2) + 28 + ENTRY_OVERHEAD);
        assert_eq!(
            w.insert(dense("big", 0, &[1.0; 500])),
            InsertOutcome::TooLarge
        );
        assert_eq!(ids(&w), ["s1", "e2", "e3"]);
    }

    #[test]
    fn watermark_is_the_oldest_stored_offset_per_partition() {
        let mut w = Window::new(config(3, None, None)).unwrap();
        assert!(w.oldest_offset_per_partition().is_empty());
        w.insert(at("a", 0, 1, 5));
        w.insert(at("b", 0, 0, 7));
        w.insert(at("c", 0, 1, 8));
        assert_eq!(
            w.oldest_offset_per_partition(),
            BTreeMap::from([(0, 7), (1, 5)])
        );
        // Evicting "a" moves partition 1's low watermark to "c"; an event without a source
        // does not take part.
        w.insert(dense("no-source", 0, &[1.0]));
        assert_eq!(
            w.oldest_offset_per_partition(),
            BTreeMap::from([(0, 7), (1, 8)])
        );
        // Offsets need not arrive in order; extreme partition numbers work.
        let mut w = Window::new(config(10, None, None)).unwrap();
        w.insert(at("p", 0, 1, 9));
        w.insert(at("q", 0, 1, 4));
        w.insert(at("r", 0, i32::MAX, 3));
        w.insert(at("s", 0, -1, 5));
        assert_eq!(
            w.oldest_offset_per_partition(),
            BTreeMap::from([(-1, 5), (1, 4), (i32::MAX, 3)])
        );
    }

    #[test]
    fn snapshot_is_in_insertion_order() {
        let mut w = Window::new(config(10, None, None)).unwrap();
        w.insert(dense("b", 5, &[1.0, 0.0]));
        w.insert(dense("a", 3, &[0.0, 2.0]));
        let snap = w.snapshot(2).unwrap();
        assert_eq!(snap.ids, ["b", "a"]);
        assert_eq!(snap.ts, [5, 3]);
        assert_eq!(
            snap.rows,
            Rows::dense(ndarray::array![[1.0, 0.0], [0.0, 2.0]])
        );
        w.insert(Entry {
            id: "s".into(),
            ts: 6,
            x: Features::Sparse {
                dim: 2,
                indices: vec![1],
                values: vec![4.0],
            },
            source: None,
        });
        let snap = w.snapshot(2).unwrap();
        let mut want = CsrMatrix::new(2);
        want.push_row(&[0], &[1.0]).unwrap();
        want.push_row(&[1], &[2.0]).unwrap();
        want.push_row(&[1], &[4.0]).unwrap();
        assert_eq!(snap.rows, Rows::Sparse(want));
        assert_eq!(
            w.snapshot(3).unwrap_err(),
            WindowError::Dimension {
                id: "b".into(),
                dim: 2,
                expected: 3
            }
        );
        let empty = Window::new(config(1, None, None))
            .unwrap()
            .snapshot(4)
            .unwrap();
        assert_eq!((empty.rows.n_rows(), empty.rows.n_features()), (0, 4));
    }

    #[test]
    fn bad_bounds_are_refused() {
        assert!(Window::new(config(0, None, None)).is_err());
        assert_eq!(
            Window::new(config(1, Some(-1), None))
                .unwrap_err()
                .to_string(),
            "invalid window bounds: max_age_ms must not be negative"
        );
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // From the FNV reference test suite (Noll).
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn calibration_membership_is_pinned_and_proportional() {
        let pinned: Vec<(&str, u64)> = ["a", "foobar", "17-0", "event-42"]
            .iter()
            .map(|id| (*id, fnv1a64(id.as_bytes()) % 100))
            .collect();
        assert_eq!(pinned, PINNED_BUCKETS);
        for (id, bucket) in PINNED_BUCKETS {
            assert!(!in_calibration(id, bucket as u8));
            assert!(in_calibration(id, bucket as u8 + 1));
        }
        assert!(!in_calibration("a", 0));
        assert!(in_calibration("a", 100) && in_calibration("a", 255));
        let held = (0..10_000)
            .filter(|i| in_calibration(&format!("{i}-0"), 20))
            .count();
        assert!((1800..2200).contains(&held), "{held}");
    }

    /// `recent` holds out the newest share by (ts, id), rounded up, whatever the input order.
    #[test]
    fn recent_calibration_holds_out_the_newest_by_time_then_id() {
        let ts = [50, 10, 40, 40, 20, 30, 40];
        let ids: Vec<String> = ["e", "a", "y", "x", "b", "c", "w"]
            .map(String::from)
            .to_vec();
        // 30 % of 7 is 2.1: 3 held out, the newest (50, "e") and the two last ids at 40.
        assert_eq!(
            newest_held_out(&ts, &ids, 30),
            [true, false, true, true, false, false, false]
        );
        assert!(newest_held_out(&ts, &ids, 0).iter().all(|h| !h));
        assert!(newest_held_out(&ts, &ids, 100).iter().all(|&h| h));
        assert!(newest_held_out(&[], &[], 30).is_empty());
    }

    /// fnv1a64(id) mod 100, computed independently of this code (a few lines of Python).
    const PINNED_BUCKETS: [(&str, u64); 4] =
        [("a", 96), ("foobar", 68), ("17-0", 32), ("event-42", 0)];
    /// The bounds applied the slow, obvious way: a list in insertion order, searched whole.
    struct Reference {
        config: WindowConfig,
        entries: Vec<Entry>,
        newest_ts: Option<i64>,
    }

    impl Reference {
        fn insert(&mut self, entry: Entry) -> InsertOutcome {
            if self.entries.iter().any(|e| e.id == entry.id) {
                return InsertOutcome::Duplicate;
            }
            let max_age = self.config.max_age_ms;
            let cutoff = |newest: Option<i64>| Some(newest?.saturating_sub(max_age?));
            if cutoff(self.newest_ts).is_some_and(|c| entry.ts < c) {
                return InsertOutcome::TooOld;
            }
            if self.config.max_bytes.is_some_and(|m| entry.bytes() > m) {
                return InsertOutcome::TooLarge;
            }
            self.newest_ts = Some(self.newest_ts.map_or(entry.ts, |n| n.max(entry.ts)));
            self.entries.push(entry);
            let mut evicted = Vec::new();
            if let Some(c) = cutoff(self.newest_ts) {
                // Oldest time first; among equal times, the earlier insertion.
                while let Some(at) = (0..self.entries.len())
                    .filter(|&i| self.entries[i].ts < c)
                    .min_by_key(|&i| (self.entries[i].ts, i))
                {
                    let entry = self.entries.remove(at);
                    evicted.push(Evicted {
                        entry,
                        reason: EvictReason::Age,
                    });
                }
            }
            while self.entries.len() > self.config.max_events {
                let entry = self.entries.remove(0);
                evicted.push(Evicted {
                    entry,
                    reason: EvictReason::Count,
                });
            }
            let bytes = |es: &[Entry]| es.iter().map(Entry::bytes).sum::<usize>();
            while self
                .config
                .max_bytes
                .is_some_and(|m| bytes(&self.entries) > m)
            {
                let entry = self.entries.remove(0);
                evicted.push(Evicted {
                    entry,
                    reason: EvictReason::Bytes,
                });
            }
            InsertOutcome::Added { evicted }
        }
    }

    /// Hashes every id alike, so that every lookup and removal in the id index goes through
    /// the collision path (comparing ids, finding rows by sequence number).
    #[derive(Default)]
    struct SameHash;

    impl std::hash::Hasher for SameHash {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    type Colliding = std::hash::BuildHasherDefault<SameHash>;

    #[test]
    fn ids_with_equal_hashes_are_told_apart() {
        let mut w = Window::with_hasher(config(3, None, None), Colliding::default()).unwrap();
        for id in ["a", "b", "c"] {
            assert!(matches!(
                w.insert(dense(id, 1, &[0.0])),
                InsertOutcome::Added { .. }
            ));
        }
        assert_eq!(w.insert(dense("b", 2, &[0.0])), InsertOutcome::Duplicate);
        assert!(w.contains("a") && w.contains("c") && !w.contains("d"));
        assert_eq!(
            evicted_ids(&w.insert(dense("d", 2, &[0.0]))),
            [("a".to_owned(), EvictReason::Count)]
        );
        assert!(!w.contains("a") && w.contains("b") && w.contains("d"));
        assert!(matches!(
            w.insert(dense("a", 3, &[0.0])),
            InsertOutcome::Added { .. }
        ));
        assert_eq!(
            w.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["c", "d", "a"]
        );
    }

    /// Feeds `events` to `w` and to the reference, comparing after each one.
    fn matches_reference<S: BuildHasher>(
        mut w: Window<S>,
        events: Vec<(u8, i64, i32, i64, usize)>,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let mut reference = Reference {
            config: *w.config(),
            entries: Vec::new(),
            newest_ts: None,
        };
        for (id, ts, partition, offset, dim) in events {
            let entry = Entry {
                source: Some(SourcePos { partition, offset }),
                ..dense(&format!("e{id}"), ts, &vec![0.5; dim])
            };
            proptest::prop_assert_eq!(w.insert(entry.clone()), reference.insert(entry));
            proptest::prop_assert!(w.iter().eq(reference.entries.iter()));
            // Dead index rows are swept: the index stays within twice the window.
            proptest::prop_assert!(w.by_id.len() <= 2 * w.len() + SWEEP_SLACK);
            proptest::prop_assert!(w.removed_inside.len() <= w.by_id.len());
            proptest::prop_assert_eq!(
                w.bytes(),
                reference.entries.iter().map(Entry::bytes).sum::<usize>()
            );
            for id in 0..30u8 {
                let id = format!("e{id}");
                proptest::prop_assert_eq!(
                    w.contains(&id),
                    reference.entries.iter().any(|e| e.id == id)
                );
            }
            let mut want = BTreeMap::new();
            for s in reference.entries.iter().filter_map(|e| e.source) {
                let o = want.entry(s.partition).or_insert(s.offset);
                *o = (*o).min(s.offset);
            }
            proptest::prop_assert_eq!(w.oldest_offset_per_partition(), want);
        }
        Ok(())
    }

    proptest::proptest! {
        /// Any sequence of events (times and offsets in or out of order, duplicate ids, ids
        /// sent again after their eviction) under any bounds, with the real id hash or one
        /// where every id collides: the same outcomes, contents, ids, bytes and watermarks as
        /// the reference. Long enough that the id index is swept many times.
        #[test]
        fn window_matches_a_plain_list(
            max_events in 1usize..12,
            max_age_ms in proptest::option::of(0i64..40),
            max_bytes in proptest::option::of(300usize..2000),
            events in proptest::collection::vec((0u8..30, 0i64..100, 0i32..3, 0i64..50, 1usize..4), 1..400),
            colliding in proptest::bool::ANY,
        ) {
            let config = config(max_events, max_age_ms, max_bytes);
            if colliding {
                matches_reference(Window::with_hasher(config, Colliding::default()).unwrap(), events)?;
            } else {
                matches_reference(Window::new(config).unwrap(), events)?;
            }
        }
    }
}
