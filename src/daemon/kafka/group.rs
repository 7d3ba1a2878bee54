//! Group membership (rebalances, assignments and the restore of windows after one) and the
//! at-least-once commits of offsets and `done` marks.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::{lock, KafkaRunError, Loop, LOOKUP_TIMEOUT};
use crate::engine::machine::Engine;
use crate::stream::kafka::log_librdkafka;
use crate::stream::Channel;
use crate::telemetry::Metrics;

/// What the consumer's rebalance callback tells the loop.
pub(super) enum GroupChange {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
}

/// The latest commit point per (topic, partition): the offset and `done`.
pub(super) type CommitPoints = BTreeMap<(String, i32), (i64, i64)>;

/// Consumer context: rebalances, commit results and lag statistics.
pub(super) struct GroupContext {
    pub(super) metrics: Metrics,
    /// The consumer group (`group_id`, or `<group_id>.trainer`): the lag gauge's `group` label,
    /// so lag is summed per group and a trainer's view of the inputs never adds to the scorers'.
    pub(super) group: String,
    pub(super) changes: Mutex<Vec<GroupChange>>,
    /// When the last rebalance (assignment or revocation) was served: leaving the group
    /// waits until they have stopped for a moment ([`super::settle_group`]).
    pub(super) last_rebalance: Mutex<Option<Instant>>,
    /// Committed synchronously when a partition is revoked, before another member takes it.
    pub(super) commit_points: Mutex<CommitPoints>,
    /// A client of the companion group `<group_id>.done`, never subscribed: it only commits
    /// and reads `done` marks.
    pub(super) done: BaseConsumer<DoneContext>,
}

/// Context of the `done` client: its librdkafka logs go to tracing.
pub(super) struct DoneContext;

impl ClientContext for DoneContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka("done", level, fac, message);
    }
}

impl ConsumerContext for DoneContext {}

/// Commits `points` synchronously (offsets to the group, `done` marks to the companion group)
/// and counts the results. Synchronous because librdkafka reports nothing back for an
/// asynchronous manual commit; [`Committer`] keeps that wait off the poll loop.
pub(super) fn commit_both(consumer: &BaseConsumer<GroupContext>, points: &CommitPoints) {
    if points.is_empty() {
        return;
    }
    let offsets = commit_list(points.iter().map(|(tp, (offset, _))| (tp, *offset)));
    let done = commit_list(points.iter().map(|(tp, (_, done))| (tp, *done)));
    let context = consumer.context();
    for (result, what) in [
        (consumer.commit(&offsets, CommitMode::Sync), "offsets"),
        (context.done.commit(&done, CommitMode::Sync), "done marks"),
    ] {
        match result {
            Ok(()) => context.metrics.kafka_commits.inc(),
            // librdkafka skips a commit whose offsets did not move: nothing failed.
            Err(RdKafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => {
                context.metrics.kafka_commit_failures.inc();
                tracing::warn!(error = %e, what, "commit failed");
            }
        }
    }
}

/// Commits on its own thread, newest points first: a slow broker delays commits, never the
/// poll loop. A point computed just before a revocation may land after it; it is never
/// ahead of what was delivered, so the next owner at worst re-reads a little more.
pub(super) struct Committer {
    points: Option<mpsc::Sender<CommitPoints>>,
    handle: Option<JoinHandle<()>>,
}

impl Committer {
    pub(super) fn start(consumer: Arc<BaseConsumer<GroupContext>>) -> std::io::Result<Committer> {
        let (tx, rx) = mpsc::channel::<CommitPoints>();
        let handle = std::thread::Builder::new()
            .name("neyman-commit".into())
            .spawn(move || {
                while let Ok(mut points) = rx.recv() {
                    while let Ok(newer) = rx.try_recv() {
                        points = newer;
                    }
                    commit_both(&consumer, &points);
                }
            })?;
        Ok(Committer {
            points: Some(tx),
            handle: Some(handle),
        })
    }

    pub(super) fn submit(&self, points: CommitPoints) {
        if let Some(tx) = &self.points {
            let _ = tx.send(points);
        }
    }

    /// Waits for the commits already submitted.
    pub(super) fn stop(&mut self) {
        self.points = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A commit request: each partition at its offset.
fn commit_list<'a>(points: impl Iterator<Item = (&'a (String, i32), i64)>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), offset) in points {
        // Only an invalid offset value fails here, and offsets come from the broker.
        let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(offset));
    }
    tpl
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

impl ClientContext for GroupContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka("consumer", level, fac, message);
    }

    fn stats(&self, statistics: Statistics) {
        let offsets = statistics.topics.iter().flat_map(|(topic, t)| {
            t.partitions.iter().map(move |(partition, p)| Offsets {
                topic: topic.as_str(),
                partition: *partition,
                high_watermark: p.hi_offset,
                read: p.app_offset,
                committed: p.committed_offset,
            })
        });
        publish_lags(&self.metrics, &self.group, offsets);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka consumer error");
    }
}

/// One partition's offsets from librdkafka's statistics (-1: not known).
struct Offsets<'a> {
    topic: &'a str,
    partition: i32,
    high_watermark: i64,
    /// The offset after the last message handed to neyman.
    read: i64,
    committed: i64,
}

impl Offsets<'_> {
    /// The backlog (high watermark minus the position read: 0 when neyman keeps up) and the
    /// messages read but not committed; `None` where an offset is unknown. Before the first
    /// message the position is the committed offset.
    fn lags(&self) -> (Option<i64>, Option<i64>) {
        let position = if self.read >= 0 {
            Some(self.read)
        } else {
            (self.committed >= 0).then_some(self.committed)
        };
        let backlog = position
            .filter(|_| self.high_watermark >= 0)
            .map(|p| (self.high_watermark - p).max(0));
        let uncommitted =
            (self.read >= 0 && self.committed >= 0).then(|| (self.read - self.committed).max(0));
        (backlog, uncommitted)
    }
}

/// Sets the backlog and uncommitted gauges of `group` from librdkafka's per-partition
/// statistics. Partition -1 is librdkafka's internal "unassigned" entry; an unknown value
/// leaves its gauge as it was.
fn publish_lags<'a>(metrics: &Metrics, group: &str, offsets: impl Iterator<Item = Offsets<'a>>) {
    for o in offsets.filter(|o| o.partition >= 0) {
        let labels = [group, o.topic, &o.partition.to_string()];
        let (backlog, uncommitted) = o.lags();
        if let Some(b) = backlog {
            metrics.kafka_consumer_lag.with_label_values(&labels).set(b);
        }
        if let Some(u) = uncommitted {
            metrics.kafka_uncommitted.with_label_values(&labels).set(u);
        }
    }
}

/// Partitions as `topic[partition]` names: a list of strings, which JSON logs write as an
/// array (src/cli/log.rs).
fn named(partitions: &[(String, i32)]) -> Vec<String> {
    partitions
        .iter()
        .map(|(topic, partition)| format!("{topic}[{partition}]"))
        .collect()
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let revoked = partitions_of(tpl);
            self.metrics
                .kafka_rebalances
                .with_label_values(&["revoke"])
                .inc();
            tracing::info!(partitions = ?named(&revoked), "partitions revoked");
            let points = lock(&self.commit_points).clone();
            // A revoked partition's lag is another member's to report now.
            for (topic, partition) in &revoked {
                let labels = [self.group.as_str(), topic, &partition.to_string()];
                let _ = self.metrics.kafka_consumer_lag.remove_label_values(&labels);
                let _ = self.metrics.kafka_uncommitted.remove_label_values(&labels);
            }
            let revoked_points: CommitPoints = points
                .into_iter()
                .filter(|(tp, _)| revoked.contains(tp))
                .collect();
            commit_both(consumer, &revoked_points);
            lock(&self.changes).push(GroupChange::Revoked(revoked));
            *lock(&self.last_rebalance) = Some(Instant::now());
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let assigned = partitions_of(tpl);
                self.metrics
                    .kafka_rebalances
                    .with_label_values(&["assign"])
                    .inc();
                tracing::info!(partitions = ?named(&assigned), "partitions assigned");
                lock(&self.changes).push(GroupChange::Assigned(assigned));
                *lock(&self.last_rebalance) = Some(Instant::now());
            }
            Rebalance::Error(e) => {
                self.metrics
                    .kafka_rebalances
                    .with_label_values(&["error"])
                    .inc();
                tracing::warn!(error = %e, "rebalance error");
            }
            Rebalance::Revoke(_) => {}
        }
    }
}

/// An assigned input partition.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Assigned {
    /// The committed offset found at assignment (where reading starts).
    pub(super) committed: Option<i64>,
    /// `done` from the commit metadata: messages below it only rebuild windows.
    pub(super) restore_until: Option<i64>,
}

impl Loop {
    pub(super) fn apply_group_changes(&mut self) -> Result<(), KafkaRunError> {
        let changes = std::mem::take(&mut *lock(&self.clients.consumer.context().changes));
        for change in changes {
            match change {
                GroupChange::Assigned(list) => self.assign(&list)?,
                GroupChange::Revoked(list) => {
                    for (topic, partition) in list {
                        if let Some(channel) = self.clients.topics.channel(&topic) {
                            self.assigned.remove(&(channel, partition));
                        }
                        lock(&self.clients.consumer.context().commit_points)
                            .remove(&(topic, partition));
                    }
                }
            }
        }
        Ok(())
    }

    /// Looks up the committed offsets and `done` marks of newly assigned partitions.
    fn assign(&mut self, list: &[(String, i32)]) -> Result<(), KafkaRunError> {
        let mut tpl = TopicPartitionList::new();
        for (topic, partition) in list {
            tpl.add_partition(topic, *partition);
        }
        let consumer = &self.clients.consumer;
        let committed = consumer.committed_offsets(tpl.clone(), LOOKUP_TIMEOUT)?;
        let done_marks = consumer
            .context()
            .done
            .committed_offsets(tpl, LOOKUP_TIMEOUT)?;
        let absolute = |o: Offset| match o {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        for e in committed.elements() {
            let Some(channel) = self.clients.topics.channel(e.topic()) else {
                continue;
            };
            let offset = absolute(e.offset());
            let done = done_marks
                .find_partition(e.topic(), e.partition())
                .and_then(|d| absolute(d.offset()));
            // Without a committed offset the group starts over (auto.offset.reset), and every
            // message is new to it.
            let restore_until = offset.and(done);
            if let Some(done) = restore_until {
                tracing::info!(
                    topic = e.topic(),
                    partition = e.partition(),
                    from = offset,
                    done,
                    "re-reading the window; scoring resumes at done"
                );
            }
            self.assigned.insert(
                (channel, e.partition()),
                Assigned {
                    committed: offset,
                    restore_until,
                },
            );
        }
        if self.paused {
            // New partitions join the pause.
            self.clients.consumer.pause(&committed)?;
        }
        Ok(())
    }

    /// Whether some assigned partition is still below its `done` mark.
    pub(super) fn restoring(&self) -> bool {
        let outbox = lock(&self.clients.outbox);
        self.assigned.iter().any(|(ip, a)| match a.restore_until {
            Some(done) => outbox
                .book
                .next(*ip)
                .or(a.committed)
                .is_some_and(|n| n < done),
            None => false,
        })
    }

    /// The commit for every assigned partition that has seen a message: offset and `done`.
    fn commit_points(&self, engine: &Engine) -> CommitPoints {
        let outbox = lock(&self.clients.outbox);
        let mut points = BTreeMap::new();
        for channel in Channel::ALL {
            let Some(topic) = self.clients.topics.input(channel) else {
                continue;
            };
            let owed = engine.owed_outputs(channel);
            let held = engine.low_watermarks(channel);
            for (&(c, partition), a) in self.assigned.range((channel, i32::MIN)..) {
                if c != channel {
                    break;
                }
                let ip = (channel, partition);
                let owed = owed.get(&partition).copied();
                let (Some(done), Some(commit)) = (
                    outbox.book.done(ip, owed),
                    outbox
                        .book
                        .commit_point(ip, owed, held.get(&partition).copied()),
                ) else {
                    continue;
                };
                let done = a.restore_until.map_or(done, |r| r.max(done));
                points.insert((topic.to_string(), partition), (commit, done));
            }
        }
        points
    }

    /// The current commit points, remembered for a revocation.
    pub(super) fn commit_points_now(&self, engine: &Engine) -> CommitPoints {
        let points = self.commit_points(engine);
        tracing::debug!(?points, "commit points (offset, done)");
        lock(&self.clients.consumer.context().commit_points).clone_from(&points);
        points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 21 item 11: the lag is the backlog (high watermark minus the position read), 0
    /// when neyman keeps up however many read messages the windows hold uncommitted; those
    /// are their own gauge. Unknown offsets and librdkafka's partition -1 publish nothing.
    #[test]
    fn lag_is_the_backlog_and_uncommitted_messages_are_their_own_gauge() {
        let registry = prometheus::Registry::new();
        let metrics = Metrics::new(&registry).expect("metrics");
        let offsets = |partition, high_watermark, read, committed| Offsets {
            topic: "neyman.unlabeled",
            partition,
            high_watermark,
            read,
            committed,
        };
        publish_lags(
            &metrics,
            "neyman.trainer",
            [
                // Caught up, 4 800 read and held by the windows.
                offsets(0, 10_000, 10_000, 5_200),
                // 300 behind; nothing committed yet.
                offsets(1, 900, 600, -1),
                // Nothing read yet: the position is the committed offset.
                offsets(2, 50, -1, 20),
                offsets(-1, 99, 0, 0),
                offsets(3, -1, -1, -1),
            ]
            .into_iter(),
        );
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("encode");
        let series = |family: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{family}{{")))
                .map(|l| {
                    let partition = l
                        .split("partition=\"")
                        .nth(1)
                        .and_then(|r| r.split('"').next());
                    let value = l.rsplit(' ').next();
                    format!("{}={}", partition.unwrap_or("?"), value.unwrap_or("?"))
                })
                .collect()
        };
        assert_eq!(
            series("neyman_kafka_consumer_lag_messages"),
            vec!["0=0", "1=300", "2=30"]
        );
        assert_eq!(series("neyman_kafka_uncommitted_messages"), vec!["0=4800"]);
        assert!(text
            .lines()
            .filter(|l| {
                l.starts_with("neyman_kafka_consumer_lag_messages{")
                    || l.starts_with("neyman_kafka_uncommitted_messages{")
            })
            .all(|l| l.contains("group=\"neyman.trainer\"")));
    }
}
