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

use std::collections::VecDeque;

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

/// Per channel (indexed like the engine's windows), what one model's cache holds.
#[derive(Debug, Default)]
pub struct WindowScores {
    model: Option<(u64, i64)>,
    channels: [BySeq; 3],
}

impl WindowScores {
    /// Makes the cache the one of the model `(version, trained_at_ms)`, emptying it if it
    /// belonged to another.
    pub fn belong_to(&mut self, model: (u64, i64)) {
        if self.model != Some(model) {
            self.model = Some(model);
            self.channels.iter_mut().for_each(BySeq::clear);
        }
    }

    pub fn get(&self, channel: usize, seq: u64) -> Option<Remembered> {
        self.channels[channel].get(seq)
    }

    /// Remembers `remembered` for the event inserted as `seq`; the caller passes sequence
    /// numbers of stored window events only, so the cache spans at most the window's range.
    pub fn set(&mut self, channel: usize, seq: u64, remembered: Remembered) {
        self.channels[channel].set(seq, remembered);
    }

    /// Drops the entries of events inserted before `oldest_stored` (they left the window).
    pub fn prune(&mut self, channel: usize, oldest_stored: u64) {
        self.channels[channel].prune(oldest_stored);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
