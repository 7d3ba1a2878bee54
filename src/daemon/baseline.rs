//! `neyman replay --baseline online-lr`: the stream a replay just ran, run again through the
//! baseline users run today ([`crate::learn::online`]: an online logistic regression with a
//! rolling (1 − τ) quantile over the last `recalibrate.window` negatives' scores), with the
//! same prequential accounting ([`Prequential`]), so the report compares both on one stream.
//!
//! It sees what the daemon sees, in the same order: it learns from the positive and negative
//! channels as their events arrive (a negative is scored first, and its score enters the
//! quantile window), and scores every unlabeled event with the model and threshold of that
//! moment. Before its first labelled event and its first negative it scores nothing (counted
//! unscored, as the daemon's events before its first model). Events the daemon dead-letters
//! are skipped here too.

use std::path::Path;

use serde::Serialize;

use crate::engine::prequential::{Prequential, PrequentialReport};
use crate::learn::online::{OnlineLogistic, RollingQuantile, DEFAULT_LEARNING_RATE};
use crate::stream::event::{parse_event, EventLimits, Features};
use crate::stream::record::{RecordError, RecordReader};
use crate::stream::Channel;

/// The baseline's report: its name, settings and prequential figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineReport {
    pub name: &'static str,
    pub learning_rate: f64,
    /// Negatives whose scores the rolling quantile keeps.
    pub window: usize,
    #[serde(flatten)]
    pub prequential: PrequentialReport,
}

/// Runs the baseline over the recorded stream at `path`, in blocks of `block` unlabeled
/// events, at FPR level `tau`.
pub fn online_lr(
    path: &Path,
    block: usize,
    tau: f64,
    window: usize,
    limits: &EventLimits,
) -> Result<BaselineReport, RecordError> {
    let reader = RecordReader::open(path)?;
    let mut prequential = Prequential::new(block, tau);
    let mut model: Option<OnlineLogistic> = None;
    let mut learned = false;
    let mut quantile = RollingQuantile::new(tau, window);
    let mut dense = Vec::new();
    for record in reader {
        let record = record?;
        let Ok(event) = parse_event(
            &record.payload,
            model.as_ref().map(OnlineLogistic::dim),
            limits,
        ) else {
            continue;
        };
        densify(&event.x, &mut dense);
        let lr =
            model.get_or_insert_with(|| OnlineLogistic::new(dense.len(), DEFAULT_LEARNING_RATE));
        match record.channel {
            Channel::Unlabeled => {
                let decision = match (learned, quantile.threshold()) {
                    (true, Some(threshold)) => Some((lr.score(&dense) > threshold, (0, 0))),
                    _ => None,
                };
                prequential.observe(&event.id, event.meta.as_ref(), decision);
            }
            Channel::Positive => {
                lr.learn(&dense, true);
                learned = true;
                prequential.observe_label(&event.id, Channel::Positive);
            }
            Channel::Negative => {
                quantile.push(lr.score(&dense));
                lr.learn(&dense, false);
                learned = true;
                prequential.observe_label(&event.id, Channel::Negative);
            }
        }
    }
    Ok(BaselineReport {
        name: "online-lr",
        learning_rate: DEFAULT_LEARNING_RATE,
        window,
        prequential: prequential.finish(),
    })
}

/// The event's features as one dense row.
fn densify(x: &Features, out: &mut Vec<f64>) {
    out.clear();
    match x {
        Features::Dense(v) => out.extend_from_slice(v),
        Features::Sparse {
            dim,
            indices,
            values,
        } => {
            out.resize(*dim, 0.0);
            for (&i, &v) in indices.iter().zip(values) {
                out[i as usize] = v;
            }
        }
    }
}
