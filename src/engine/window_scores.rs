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
//! empties it. Entries of events that left their window are dropped once the cache holds
//! twice the window, so it stays within two windows' worth of 24-byte entries per channel.

use std::collections::HashMap;

/// What is remembered of one window event for the cache's model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Remembered {
    /// The model never trained on the event (it was held out, or arrived later).
    pub unseen: bool,
    /// The model's score, once asked for.
    pub score: Option<f64>,
}

/// Per channel (indexed like the engine's windows), what one model's cache holds.
#[derive(Debug, Default)]
pub struct WindowScores {
    model: Option<(u64, i64)>,
    channels: [HashMap<u64, Remembered, foldhash::fast::FixedState>; 3],
}

impl WindowScores {
    /// Makes the cache the one of the model `(version, trained_at_ms)`, emptying it if it
    /// belonged to another.
    pub fn belong_to(&mut self, model: (u64, i64)) {
        if self.model != Some(model) {
            self.model = Some(model);
            self.channels.iter_mut().for_each(HashMap::clear);
        }
    }

    pub fn get(&self, channel: usize, seq: u64) -> Option<Remembered> {
        self.channels[channel].get(&seq).copied()
    }

    pub fn set(&mut self, channel: usize, seq: u64, remembered: Remembered) {
        self.channels[channel].insert(seq, remembered);
    }

    /// Drops the entries of events inserted before `oldest_stored` once the channel's cache
    /// holds more than twice `stored` entries.
    pub fn prune(&mut self, channel: usize, oldest_stored: u64, stored: usize) {
        let cache = &mut self.channels[channel];
        if cache.len() > 2 * stored + 64 {
            cache.retain(|&seq, _| seq >= oldest_stored);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_model_empties_the_cache_and_pruning_keeps_stored_events() {
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
        cache.prune(0, 150, 50);
        assert_eq!(cache.get(0, 149), None);
        assert_eq!(cache.get(0, 150), Some(seen));
        cache.prune(0, 190, 100);
        assert_eq!(
            cache.get(0, 150),
            Some(seen),
            "within twice the window: kept"
        );
        cache.belong_to((2, 100));
        assert_eq!(cache.get(0, 150), None);
    }
}
