//! The active model's scores of window events, kept between fresh thresholds.
//!
//! A fresh threshold (every `recalibrate.every` negative-feedback events) and the feedback
//! drift test read the newest `recalibrate.window` events of a channel that the active model
//! never trained on, scored by it. Scoring them anew each time cost more than the rest of the
//! replay loop (a 1 M-event replay rescored about 30 M rows); between two models, an event's
//! score and whether the model saw it do not change, so both are remembered per event.
//!
//! An entry is keyed by the window's insertion sequence number, which is never reused, and
//! the whole cache belongs to one model (its version and training time): another model
//! empties it. Entries of events that left their window are dropped at each read, so it
//! spans at most the window's range of sequence numbers, 24 bytes each.
//!
//! A read of unseen events ([`WindowScores::newest_unseen`]) walks only the events not known
//! to be seen, merging those not decided yet with a list of those known unseen (sequence
//! number, event time and score, read without touching the window or the entries; about 32
//! bytes more per unseen event). It decides, picks and stops exactly where a walk over the
//! whole window would (a seen event is never picked nor decided again), so thresholds do not
//! change; looking each event up in the window and the entries at every fresh threshold was
//! most of its cost (docs/benchmarks.md, stop 43).

use std::collections::{BTreeSet, VecDeque};
use std::hash::BuildHasher;

use crate::engine::window::{Entry, Window};

/// What is remembered of one window event for the cache's model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Remembered {
    /// The model never trained on the event (it was held out, or arrived later).
    pub unseen: bool,
    /// The model's score, once asked for.
    pub score: Option<f64>,
}

/// One channel's entries, indexed by sequence number minus `base`: a window's sequence
/// numbers are consecutive, so a deque answers where a hash map cost a hash and a probe per
/// event at every fresh threshold.
#[derive(Debug, Default)]
struct BySeq {
    base: u64,
    slots: VecDeque<Option<Remembered>>,
}

impl BySeq {
    fn get(&self, seq: u64) -> Option<Remembered> {
        let index = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        self.slots.get(index).copied().flatten()
    }

    fn set(&mut self, seq: u64, remembered: Remembered) {
        if self.slots.is_empty() {
            self.base = seq;
        }
        while seq < self.base {
            self.slots.push_front(None);
            self.base -= 1;
        }
        let Ok(index) = usize::try_from(seq - self.base) else {
            return;
        };
        if index >= self.slots.len() {
            self.slots.resize(index + 1, None);
        }
        self.slots[index] = Some(remembered);
    }

    fn clear(&mut self) {
        self.slots.clear();
    }

    /// Drops the entries before `oldest_stored`.
    fn prune(&mut self, oldest_stored: u64) {
        while self.base < oldest_stored && self.slots.pop_front().is_some() {
            self.base += 1;
        }
    }
}

/// An event the cache's model never trained on, as a read of unseen events returns it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unseen {
    /// The window's insertion sequence number.
    pub seq: u64,
    /// Event time, epoch ms.
    pub ts: i64,
    /// The model's score, once [`WindowScores::remember_unseen_scores`] has it.
    pub score: Option<f64>,
}

/// One channel's remembered entries, and the events that a read of unseen events may still
/// pick, in two parts: those not decided yet, and those known unseen (with their event
/// time and score, so that reading them touches neither the window nor the remembered
/// entries).
#[derive(Debug, Default)]
struct ChannelScores {
    remembered: BySeq,
    undecided: BTreeSet<u64>,
    /// In sequence order.
    unseen: VecDeque<Unseen>,
    /// The newest sequence number registered as a candidate.
    registered_to: Option<u64>,
}

impl ChannelScores {
    fn clear(&mut self) {
        self.remembered.clear();
        self.undecided.clear();
        self.unseen.clear();
        self.registered_to = None;
    }

    /// Adds `event` to the known-unseen events, keeping sequence order (a decided event is
    /// usually newer than all the others).
    fn add_unseen(&mut self, event: Unseen) {
        let at = self.unseen.partition_point(|other| other.seq < event.seq);
        self.unseen.insert(at, event);
    }
}

/// Per channel (indexed like the engine's windows), what one model's cache holds.
#[derive(Debug, Default)]
pub struct WindowScores {
    model: Option<(u64, i64)>,
    channels: [ChannelScores; 3],
}

impl WindowScores {
    /// Makes the cache the one of the model `(version, trained_at_ms)`, emptying it if it
    /// belonged to another.
    pub fn belong_to(&mut self, model: (u64, i64)) {
        if self.model != Some(model) {
            self.model = Some(model);
            self.channels.iter_mut().for_each(ChannelScores::clear);
        }
    }

    pub fn get(&self, channel: usize, seq: u64) -> Option<Remembered> {
        self.channels[channel].remembered.get(seq)
    }

    /// Remembers `remembered` for the event inserted as `seq`; the caller passes sequence
    /// numbers of stored window events only, so the cache spans at most the window's range.
    pub fn set(&mut self, channel: usize, seq: u64, remembered: Remembered) {
        self.channels[channel].remembered.set(seq, remembered);
    }

    /// Drops the entries of events inserted before `oldest_stored` (they left the window).
    pub fn prune(&mut self, channel: usize, oldest_stored: u64) {
        let scores = &mut self.channels[channel];
        scores.remembered.prune(oldest_stored);
        scores.undecided = scores.undecided.split_off(&oldest_stored);
        while scores
            .unseen
            .front()
            .is_some_and(|event| event.seq < oldest_stored)
        {
            scores.unseen.pop_front();
        }
    }

    /// The newest `limit` events of `window` (the cache's `channel`) from event time `since`
    /// on that the model never trained on, newest first, with the scores remembered for them.
    /// `unseen` decides an event not decided yet, and the answer is remembered. First makes
    /// candidates of the events inserted since the last read (all of them after another
    /// model).
    pub fn newest_unseen<S: BuildHasher>(
        &mut self,
        channel: usize,
        window: &Window<S>,
        (since, limit): (i64, usize),
        mut unseen: impl FnMut(&Entry) -> bool,
    ) -> Vec<Unseen> {
        let scores = &mut self.channels[channel];
        let registered_to = scores.registered_to;
        let newest = window.newest_first_with_seq().map(|(seq, _)| seq);
        for seq in newest.take_while(|&seq| registered_to.map_or(true, |to| seq > to)) {
            scores.registered_to = scores.registered_to.max(Some(seq));
            scores.undecided.insert(seq);
        }
        let mut picked = Vec::new();
        let mut decided = Vec::new();
        let mut newly_unseen = Vec::new();
        let mut gone_unseen = Vec::new();
        let mut undecided = scores.undecided.iter().rev().copied().peekable();
        let mut known = scores.unseen.iter().rev().copied().peekable();
        while picked.len() < limit {
            let from_undecided = match (undecided.peek(), known.peek()) {
                (None, None) => break,
                (Some(&u), Some(k)) => u > k.seq,
                (u, _) => u.is_some(),
            };
            if !from_undecided {
                let Some(event) = known.next() else { break };
                if !window.stores_seq(event.seq) {
                    gone_unseen.push(event.seq);
                } else if event.ts >= since {
                    picked.push(event);
                }
                continue;
            }
            let Some(seq) = undecided.next() else { break };
            let Some(entry) = window.entry_at(seq) else {
                decided.push(seq);
                continue;
            };
            if entry.ts < since {
                continue;
            }
            let is_unseen = match scores.remembered.get(seq) {
                Some(r) => r.unseen,
                None => {
                    let is_unseen = unseen(entry);
                    let remembered = Remembered {
                        unseen: is_unseen,
                        score: None,
                    };
                    scores.remembered.set(seq, remembered);
                    is_unseen
                }
            };
            decided.push(seq);
            if is_unseen {
                let event = Unseen {
                    seq,
                    ts: entry.ts,
                    score: None,
                };
                newly_unseen.push(event);
                picked.push(event);
            }
        }
        for seq in decided {
            scores.undecided.remove(&seq);
        }
        for event in newly_unseen.into_iter().rev() {
            scores.add_unseen(event);
        }
        if !gone_unseen.is_empty() {
            scores
                .unseen
                .retain(|event| !gone_unseen.contains(&event.seq));
        }
        picked
    }

    /// Remembers the model's scores of known-unseen events of `channel`, (sequence number,
    /// score).
    pub fn remember_unseen_scores(
        &mut self,
        channel: usize,
        scored: impl IntoIterator<Item = (u64, f64)>,
    ) {
        let unseen = &mut self.channels[channel].unseen;
        for (seq, score) in scored {
            let at = unseen.partition_point(|event| event.seq < seq);
            if let Some(event) = unseen.get_mut(at).filter(|event| event.seq == seq) {
                event.score = Some(score);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::window::WindowConfig;
    use crate::stream::Features;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// The read as a walk over the whole window, newest first, deciding what it reaches.
    fn walk_whole_window(
        window: &Window<std::hash::RandomState>,
        decided: &mut HashMap<u64, bool>,
        (since, limit): (i64, usize),
        unseen: impl Fn(&Entry) -> bool,
    ) -> Vec<(u64, i64)> {
        let mut picked = Vec::new();
        for (seq, entry) in window.newest_first_with_seq() {
            if picked.len() == limit {
                break;
            }
            if entry.ts < since {
                continue;
            }
            if *decided.entry(seq).or_insert_with(|| unseen(entry)) {
                picked.push((seq, entry.ts));
            }
        }
        picked
    }

    proptest! {
        /// Reads between insertions (out of time order, with age and count evictions), with
        /// a decision that depends on when it is made: the same picks as the whole walk.
        #[test]
        fn reads_pick_what_a_walk_over_the_whole_window_picks(
            steps in proptest::collection::vec((0i64..40, 0u8..4, 0i64..30, 1usize..12), 1..120),
            max_events in 3usize..25,
        ) {
            let config = WindowConfig { max_events, max_age_ms: Some(25), max_bytes: None };
            let mut window = Window::with_hasher(config, std::hash::RandomState::new()).unwrap();
            let mut cache = WindowScores::default();
            cache.belong_to((1, 0));
            let mut decided = HashMap::new();
            for (i, &(ts, kind, since, limit)) in steps.iter().enumerate() {
                let clock = i as i64 + 1;
                let entry = Entry {
                    id: format!("e{i}"),
                    ts: ts + i as i64 / 3,
                    x: Features::Dense(vec![0.0]),
                    source: None,
                };
                window.insert(entry);
                if kind == 0 {
                    continue;
                }
                let unseen = |e: &Entry| (e.ts + e.id.len() as i64 + clock / 5) % 3 != 0;
                let since = if kind == 1 { i64::MIN } else { since + i as i64 / 3 };
                let fast: Vec<(u64, i64)> = cache
                    .newest_unseen(0, &window, (since, limit), unseen)
                    .iter()
                    .map(|event| (event.seq, event.ts))
                    .collect();
                let slow = walk_whole_window(&window, &mut decided, (since, limit), unseen);
                prop_assert_eq!(&fast, &slow);
                cache.prune(0, window.oldest_seq());
                decided.retain(|&seq, _| window.stores_seq(seq));
            }
        }
    }

    #[test]
    fn another_model_empties_the_cache_and_pruning_drops_what_left_the_window() {
        let mut cache = WindowScores::default();
        cache.belong_to((1, 100));
        let seen = Remembered {
            unseen: false,
            score: Some(0.5),
        };
        for seq in 0..200 {
            cache.set(0, seq, seen);
        }
        cache.belong_to((1, 100));
        assert_eq!(cache.get(0, 7), Some(seen));
        cache.prune(0, 150);
        assert_eq!(cache.get(0, 149), None);
        assert_eq!(cache.get(0, 150), Some(seen));
        assert_eq!(cache.get(0, 200), None, "never set");
        cache.set(0, 120, seen);
        assert_eq!(cache.get(0, 120), Some(seen), "set before the front");
        assert_eq!(cache.get(0, 130), None);
        cache.prune(0, 190);
        assert_eq!(cache.get(0, 150), None);
        assert_eq!(cache.get(0, 199), Some(seen));
        cache.belong_to((2, 100));
        assert_eq!(cache.get(0, 150), None);
    }
}
