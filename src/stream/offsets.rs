//! At-least-once offset bookkeeping for a Kafka consumer whose outputs are produced
//! asynchronously.
//!
//! Per input partition the book knows the next offset to read and, as a multiset, the offsets
//! whose outputs (scores, dead letters) were sent and not yet acknowledged. From these and
//! what the engine still holds (window entries, events waiting for a first model) it derives
//! the two numbers a commit carries:
//! - **done**: every offset below it has all its outputs acknowledged. After a restart, a
//!   message below `done` only rebuilds a window; it is not scored or dead-lettered again.
//! - **commit**: `min(done, oldest offset the engine still holds)`, the offset a restarted
//!   consumer resumes from, so the windows are re-read and nothing unanswered is skipped.
//!
//! Kafka keeps one offset per group and partition, so `done` is committed as the offset of a
//! companion group, `<group_id>.done` (README, "Delivery semantics"); commit metadata would
//! do, but not every broker keeps it (tansu 0.6 drops it) and librdkafka skips a commit whose
//! offset did not move even when its metadata did.

use std::collections::{BTreeMap, VecDeque};

use super::Channel;
use crate::deque::{remove_at, search_from_ends};

/// One input partition: its channel (which names the topic) and partition number.
pub type InputPartition = (Channel, i32);

#[derive(Debug, Clone, Default)]
struct PartitionBook {
    /// One past the newest offset handled.
    next: Option<i64>,
    /// Offsets with outputs in flight and how many, in increasing offset order. Outputs are
    /// sent and acknowledged mostly in offset order, so inserts and removals happen at the ends
    /// (a tree paid a node allocation per output).
    in_flight: VecDeque<(i64, u32)>,
}

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct OffsetBook {
    partitions: BTreeMap<InputPartition, PartitionBook>,
    in_flight: usize,
}

impl OffsetBook {
    pub fn new() -> OffsetBook {
        OffsetBook::default()
    }

    /// The message at `offset` was handed to the engine.
    pub fn handled(&mut self, partition: InputPartition, offset: i64) {
        let book = self.partitions.entry(partition).or_default();
        let next = offset.saturating_add(1);
        book.next = Some(book.next.map_or(next, |n| n.max(next)));
    }

    /// An output answering `offset` was sent.
    pub fn sent(&mut self, partition: InputPartition, offset: i64) {
        let in_flight = &mut self.partitions.entry(partition).or_default().in_flight;
        match search_from_ends(in_flight, &offset, |(o, _)| *o) {
            Ok(at) => in_flight[at].1 += 1,
            // At the back for an offset newer than all in flight: no shift.
            Err(at) => in_flight.insert(at, (offset, 1)),
        }
        self.in_flight += 1;
    }

    /// An output answering `offset` was acknowledged. Unknown acknowledgements are ignored.
    pub fn acknowledged(&mut self, partition: InputPartition, offset: i64) {
        let Some(book) = self.partitions.get_mut(&partition) else {
            return;
        };
        let in_flight = &mut book.in_flight;
        if let Ok(at) = search_from_ends(in_flight, &offset, |(o, _)| *o) {
            in_flight[at].1 -= 1;
            if in_flight[at].1 == 0 {
                remove_at(in_flight, at);
            }
            self.in_flight -= 1;
        }
    }

    /// One past the newest offset handled on `partition`.
    pub fn next(&self, partition: InputPartition) -> Option<i64> {
        self.partitions.get(&partition)?.next
    }

    /// Outputs sent and not yet acknowledged, over all partitions.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Every offset below the result has all its outputs acknowledged; `owed` is the oldest
    /// offset whose output the engine has not even sent yet. `None` before the first message.
    pub fn done(&self, partition: InputPartition, owed: Option<i64>) -> Option<i64> {
        let book = self.partitions.get(&partition)?;
        let mut done = book.next?;
        if let Some(&(oldest, _)) = book.in_flight.front() {
            done = done.min(oldest);
        }
        if let Some(o) = owed {
            done = done.min(o);
        }
        Some(done)
    }

    /// The offset to commit: [`OffsetBook::done`] lowered to `held`, the oldest offset the
    /// engine still holds in a window. `None` before the first message.
    pub fn commit_point(
        &self,
        partition: InputPartition,
        owed: Option<i64>,
        held: Option<i64>,
    ) -> Option<i64> {
        let done = self.done(partition, owed)?;
        Some(held.map_or(done, |h| done.min(h)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U0: InputPartition = (Channel::Unlabeled, 0);
    const P0: InputPartition = (Channel::Positive, 0);

    #[test]
    fn commit_waits_for_acknowledgements_and_window_holds() {
        let mut b = OffsetBook::new();
        assert_eq!(b.commit_point(U0, None, None), None);
        for offset in 10..15 {
            b.handled(U0, offset);
            b.sent(U0, offset);
        }
        assert_eq!(b.in_flight(), 5);
        assert_eq!(b.done(U0, None), Some(10));
        // Acknowledgements out of order: done moves only past a contiguous prefix.
        b.acknowledged(U0, 12);
        b.acknowledged(U0, 10);
        assert_eq!(b.done(U0, None), Some(11));
        b.acknowledged(U0, 11);
        b.acknowledged(U0, 13);
        assert_eq!(b.done(U0, None), Some(14));
        b.acknowledged(U0, 14);
        assert_eq!(b.done(U0, None), Some(15));
        assert_eq!(b.in_flight(), 0);
        // The window still holds offset 11: commit there, done stays.
        assert_eq!(b.commit_point(U0, None, Some(11)), Some(11));
        // An event waiting for a first model owes its output.
        assert_eq!(b.done(U0, Some(13)), Some(13));
        // Other partitions are independent.
        assert_eq!(b.done(P0, None), None);
        b.handled(P0, 3);
        assert_eq!(b.commit_point(P0, None, Some(0)), Some(0));
        assert_eq!(b.done(P0, None), Some(4));
    }

    #[test]
    fn several_outputs_for_one_offset_all_count() {
        let mut b = OffsetBook::new();
        b.handled(U0, 7);
        b.sent(U0, 7);
        b.sent(U0, 7);
        b.acknowledged(U0, 7);
        assert_eq!(b.done(U0, None), Some(7));
        b.acknowledged(U0, 7);
        assert_eq!(b.done(U0, None), Some(8));
        // A stray acknowledgement changes nothing.
        b.acknowledged(U0, 7);
        b.acknowledged((Channel::Negative, 4), 1);
        assert_eq!((b.done(U0, None), b.in_flight()), (Some(8), 0));
    }

    proptest::proptest! {
        /// Against a multiset kept in a tree: any order of sends and acknowledgements
        /// (including stray ones) gives the same `done` and in-flight count.
        #[test]
        fn book_matches_a_multiset(ops in proptest::collection::vec((proptest::bool::ANY, 0i64..40), 1..300)) {
            let mut b = OffsetBook::new();
            let mut reference: BTreeMap<i64, u32> = BTreeMap::new();
            b.handled(U0, 39);
            for (send, offset) in ops {
                if send {
                    b.sent(U0, offset);
                    *reference.entry(offset).or_insert(0) += 1;
                } else {
                    b.acknowledged(U0, offset);
                    if let Some(c) = reference.get_mut(&offset) {
                        *c -= 1;
                        if *c == 0 {
                            reference.remove(&offset);
                        }
                    }
                }
                let want = reference.keys().next().map_or(40, |&o| o.min(40));
                proptest::prop_assert_eq!(b.done(U0, None), Some(want));
                proptest::prop_assert_eq!(b.in_flight(), reference.values().sum::<u32>() as usize);
            }
        }
    }
}
