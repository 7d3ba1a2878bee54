//! Prequential (test-then-train) accounting of a replay: every unlabeled event is scored by
//! the model active when it arrived, and its truth, once known, says whether that decision
//! was right. `neyman replay --report json` prints the result.
//!
//! Truth comes from the event's `meta.label` (1 positive, −1 negative; as `neyman stream make`
//! writes it) or, for an event without one, from a later (or earlier) event with the same id
//! on the positive or negative channel: the pipeline's feedback. Blocks are runs of `block`
//! consecutive unlabeled outputs (scored or unscored), in output order. A block is *beyond
//! noise* when its false positives are significant against τ: P(Bin(negatives, τ) ≥ false
//! positives) < [`NOISE_LEVEL`]. A scorer sitting exactly at τ is beyond noise in about one
//! block in twenty.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::engine::scoring::{ScoreOutput, ScoreStatus};
use crate::learn::threshold::binomial_upper_tail;
use crate::stream::Channel;

/// The one-sided p-value below which a block's false positives count as beyond noise.
pub const NOISE_LEVEL: f64 = 0.05;
/// Scored events still waiting for their truth that are remembered; beyond it an event
/// without `meta.label` is counted `untracked` instead (a replay's memory stays bounded).
pub const MAX_PENDING: usize = 1_000_000;

/// Counts of one block or one model/threshold version.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    pub scored: u64,
    pub unscored: u64,
    /// Scored events whose truth is negative, and how many of them were flagged.
    pub negatives: u64,
    pub false_positives: u64,
    /// Scored events whose truth is positive, and how many of them were flagged.
    pub positives: u64,
    pub true_positives: u64,
}

impl Counts {
    fn add_truth(&mut self, positive: bool, flagged: bool) {
        if positive {
            self.positives += 1;
            self.true_positives += u64::from(flagged);
        } else {
            self.negatives += 1;
            self.false_positives += u64::from(flagged);
        }
    }

    /// Observed FPR, `None` without negatives.
    pub fn fpr(&self) -> Option<f64> {
        (self.negatives > 0).then(|| self.false_positives as f64 / self.negatives as f64)
    }

    /// Observed TPR, `None` without positives.
    pub fn tpr(&self) -> Option<f64> {
        (self.positives > 0).then(|| self.true_positives as f64 / self.positives as f64)
    }
}

/// One block of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockReport {
    pub index: usize,
    #[serde(flatten)]
    pub counts: Counts,
    pub fpr: Option<f64>,
    pub tpr: Option<f64>,
    /// P(Bin(negatives, τ) ≥ false_positives); `None` without negatives.
    pub p_value: Option<f64>,
    pub beyond_noise: bool,
    /// Outputs whose event carried `meta.drifted = true` (`stream make --drift`).
    pub drifted: u64,
    /// The (model_version, threshold_version) of the block's first and last scored event.
    pub first_version: Option<(u64, u64)>,
    pub last_version: Option<(u64, u64)>,
}

/// One (model_version, threshold_version) of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersionReport {
    pub model_version: u64,
    pub threshold_version: u64,
    #[serde(flatten)]
    pub counts: Counts,
    pub fpr: Option<f64>,
    pub tpr: Option<f64>,
}

/// What [`Prequential::finish`] returns; the daemon adds the run's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrequentialReport {
    pub tau: f64,
    pub block: usize,
    pub blocks: Vec<BlockReport>,
    /// Blocks with at least one negative of known truth, and how many are beyond noise.
    pub blocks_with_negatives: usize,
    pub blocks_beyond_noise: usize,
    #[serde(flatten)]
    pub total: Counts,
    pub fpr: Option<f64>,
    pub tpr: Option<f64>,
    /// Scored events whose truth never arrived (no `meta.label`, no labelled copy).
    pub without_truth: u64,
    /// Scored events without `meta.label` beyond [`MAX_PENDING`] waiting ones, not tracked.
    pub untracked: u64,
    pub versions: Vec<VersionReport>,
}

/// One block's counts, its outputs with `meta.drifted`, and the (model, threshold) versions
/// of its first and last scored event.
#[derive(Debug, Default)]
struct Block {
    counts: Counts,
    drifted: u64,
    first: Option<(u64, u64)>,
    last: Option<(u64, u64)>,
}

/// A scored event waiting for its truth.
#[derive(Debug, Clone, Copy)]
struct Pending {
    block: usize,
    version: (u64, u64),
    flagged: bool,
}

/// The accumulator; see the module docs.
#[derive(Debug)]
pub struct Prequential {
    tau: f64,
    block: usize,
    outputs: u64,
    blocks: Vec<Block>,
    versions: BTreeMap<(u64, u64), Counts>,
    /// Scored events without `meta.label`, by id, until a labelled copy arrives.
    pending: HashMap<String, Pending>,
    /// Labels that arrived before their unlabeled copy was scored.
    early: HashMap<String, bool>,
    untracked: u64,
}

impl Prequential {
    /// Blocks of `block` (≥ 1) unlabeled outputs, judged against `tau`.
    pub fn new(block: usize, tau: f64) -> Prequential {
        Prequential {
            tau,
            block: block.max(1),
            outputs: 0,
            blocks: Vec::new(),
            versions: BTreeMap::new(),
            pending: HashMap::new(),
            early: HashMap::new(),
            untracked: 0,
        }
    }

    /// The block size and τ it was made with.
    pub fn settings(&self) -> (usize, f64) {
        (self.block, self.tau)
    }

    /// One output of the unlabeled channel, in output order.
    pub fn observe_score(&mut self, output: &ScoreOutput) {
        let decision = (output.status == ScoreStatus::Scored).then(|| {
            (
                output.flagged == Some(true),
                (
                    output.model_version.unwrap_or(0),
                    output.threshold_version.unwrap_or(0),
                ),
            )
        });
        self.observe(&output.id, output.meta.as_ref(), decision);
    }

    /// One unlabeled event's decision, in output order: whether it was flagged and by which
    /// (model, threshold) version, or `None` when it was not scored. `meta` is the event's.
    pub fn observe(
        &mut self,
        id: &str,
        meta: Option<&Map<String, Value>>,
        decision: Option<(bool, (u64, u64))>,
    ) {
        let index = (self.outputs / self.block as u64) as usize;
        self.outputs += 1;
        if self.blocks.len() <= index {
            self.blocks.push(Block::default());
        }
        let drifted = meta
            .and_then(|m| m.get("drifted"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let label = meta.and_then(|m| m.get("label")).and_then(Value::as_i64);
        let Block {
            counts,
            drifted: drifted_count,
            first,
            last,
        } = &mut self.blocks[index];
        *drifted_count += u64::from(drifted);
        let Some((flagged, version)) = decision else {
            counts.unscored += 1;
            return;
        };
        counts.scored += 1;
        first.get_or_insert(version);
        *last = Some(version);
        let by_version = self.versions.entry(version).or_default();
        by_version.scored += 1;
        let truth = match label {
            Some(1) => Some(true),
            Some(-1) => Some(false),
            _ => self.early.remove(id),
        };
        match truth {
            Some(positive) => {
                counts.add_truth(positive, flagged);
                by_version.add_truth(positive, flagged);
            }
            None if self.pending.len() < MAX_PENDING => {
                self.pending.insert(
                    id.to_string(),
                    Pending {
                        block: index,
                        version,
                        flagged,
                    },
                );
            }
            None => self.untracked += 1,
        }
    }

    /// An event of `id` on a labelled channel: the truth of its unlabeled copy, scored
    /// before or later.
    pub fn observe_label(&mut self, id: &str, channel: Channel) {
        let positive = match channel {
            Channel::Positive => true,
            Channel::Negative => false,
            Channel::Unlabeled => return,
        };
        match self.pending.remove(id) {
            Some(p) => {
                if let Some(block) = self.blocks.get_mut(p.block) {
                    block.counts.add_truth(positive, p.flagged);
                }
                self.versions
                    .entry(p.version)
                    .or_default()
                    .add_truth(positive, p.flagged);
            }
            None if self.early.len() < MAX_PENDING => {
                // A second label for an id already counted replaces nothing: the first wins.
                self.early.entry(id.to_string()).or_insert(positive);
            }
            None => {}
        }
    }

    pub fn finish(self) -> PrequentialReport {
        let tau = self.tau;
        let blocks: Vec<BlockReport> = self
            .blocks
            .into_iter()
            .enumerate()
            .map(|(index, block)| {
                let Block {
                    counts,
                    drifted,
                    first,
                    last,
                } = block;
                let p_value = (counts.negatives > 0).then(|| {
                    binomial_upper_tail(
                        counts.negatives as usize,
                        counts.false_positives as usize,
                        tau,
                    )
                });
                BlockReport {
                    index,
                    fpr: counts.fpr(),
                    tpr: counts.tpr(),
                    beyond_noise: p_value.is_some_and(|p| p < NOISE_LEVEL),
                    p_value,
                    drifted,
                    first_version: first,
                    last_version: last,
                    counts,
                }
            })
            .collect();
        let mut total = Counts::default();
        for b in &blocks {
            let c = &b.counts;
            total.scored += c.scored;
            total.unscored += c.unscored;
            total.negatives += c.negatives;
            total.false_positives += c.false_positives;
            total.positives += c.positives;
            total.true_positives += c.true_positives;
        }
        let versions = self
            .versions
            .into_iter()
            .map(
                |((model_version, threshold_version), counts)| VersionReport {
                    model_version,
                    threshold_version,
                    fpr: counts.fpr(),
                    tpr: counts.tpr(),
                    counts,
                },
            )
            .collect();
        PrequentialReport {
            tau,
            block: self.block,
            blocks_with_negatives: blocks.iter().filter(|b| b.p_value.is_some()).count(),
            blocks_beyond_noise: blocks.iter().filter(|b| b.beyond_noise).count(),
            fpr: total.fpr(),
            tpr: total.tpr(),
            total,
            without_truth: self.pending.len() as u64,
            untracked: self.untracked,
            versions,
            blocks,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map, Value};

    use super::*;
    use crate::engine::scoring::UnscoredReason;

    fn output(id: &str, flagged: bool, label: Option<i64>, version: (u64, u64)) -> ScoreOutput {
        let meta = label.map(|l| {
            let mut m = Map::new();
            m.insert("label".into(), Value::from(l));
            m
        });
        ScoreOutput {
            id: id.into(),
            ts: Some(0),
            score: Some(if flagged { 1.0 } else { 0.0 }),
            flagged: Some(flagged),
            threshold: Some(0.5),
            certified: Some(true),
            model_version: Some(version.0),
            threshold_version: Some(version.1),
            status: ScoreStatus::Scored,
            meta,
        }
    }

    /// Two blocks of 100 negatives: 5 flagged sits at τ = 5 % (not beyond noise), 12 flagged
    /// is (P(Bin(100, 0.05) ≥ 12) ≈ 0.0043); positives count toward the TPR only.
    #[test]
    fn blocks_count_false_positives_against_binomial_noise() {
        let mut p = Prequential::new(110, 0.05);
        for (block, flagged_negatives) in [(0, 5), (1, 12)] {
            for i in 0..100 {
                let id = format!("n{block}-{i}");
                p.observe_score(&output(&id, i < flagged_negatives, Some(-1), (1, block)));
            }
            for i in 0..10 {
                let id = format!("p{block}-{i}");
                p.observe_score(&output(&id, i < 7, Some(1), (1, block)));
            }
        }
        let r = p.finish();
        assert_eq!(r.blocks.len(), 2);
        assert_eq!((r.blocks_with_negatives, r.blocks_beyond_noise), (2, 1));
        assert!(!r.blocks[0].beyond_noise && r.blocks[1].beyond_noise);
        let p1 = r.blocks[1].p_value.expect("negatives");
        assert!((p1 - 0.004_27).abs() < 1e-4, "{p1}");
        assert_eq!(r.blocks[0].fpr, Some(0.05));
        assert_eq!(r.blocks[1].tpr, Some(0.7));
        assert_eq!(r.blocks[1].first_version, Some((1, 1)));
        assert_eq!((r.total.negatives, r.total.false_positives), (200, 17));
        assert_eq!(r.fpr, Some(0.085));
        assert_eq!(
            r.versions
                .iter()
                .map(|v| (v.threshold_version, v.counts.false_positives))
                .collect::<Vec<_>>(),
            vec![(0, 5), (1, 12)]
        );
    }

    /// Without `meta.label`, the truth is the labelled copy of the same id, whether it comes
    /// after the score or before it; an id that never gets one stays `without_truth`.
    #[test]
    fn feedback_on_labelled_channels_labels_the_scored_copy() {
        let mut p = Prequential::new(10, 0.1);
        p.observe_label("early", Channel::Negative);
        p.observe_score(&output("early", true, None, (2, 0)));
        p.observe_score(&output("late", true, None, (2, 0)));
        p.observe_score(&output("never", false, None, (2, 0)));
        p.observe_score(&ScoreOutput::unscored(
            &crate::stream::event::Event {
                id: "waited".into(),
                ts: 0,
                x: crate::stream::Features::Dense(vec![0.0]),
                meta: None,
            },
            UnscoredReason::Shutdown,
        ));
        p.observe_label("late", Channel::Positive);
        p.observe_label("unknown", Channel::Positive);
        let r = p.finish();
        let c = &r.blocks[0].counts;
        assert_eq!(
            (
                c.scored,
                c.unscored,
                c.negatives,
                c.false_positives,
                c.positives,
                c.true_positives
            ),
            (3, 1, 1, 1, 1, 1)
        );
        assert_eq!(r.without_truth, 1);
        assert_eq!(
            serde_json::to_value(&r.blocks[0]).expect("json")["false_positives"],
            json!(1)
        );
    }
}
