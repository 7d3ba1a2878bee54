//! The background audit (`[audit]`, [`crate::config::AuditConfig`]): a stratified sub-sample
//! of the windows certified by the exact S3VM of `neyman certify`, and the active model's
//! labelling of the same unlabeled events measured against the certified lower bound.
//!
//! The engine decides when one is due and copies the sample out ([`AuditJob`]); an
//! [`AuditRunner`] the daemon injects runs it on its own thread, so scoring and retrains
//! never wait for it, and publishes the [`AuditReport`] on the shared [`AuditBoard`]
//! (`GET /v1/audit`) and the `neyman_audit_*` metrics.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;

use crate::config::{AuditConfig, AuditKernel};
use crate::data::{Dataset, Label};
use crate::engine::store::StoredModel;
use crate::engine::window::Entry;
use crate::learn::s3vm::exact::instance::{
    balanced_start, ExactInstance, ExactKernel, InstanceSpec,
};
use crate::learn::s3vm::exact::{qp24, relative_gap, supervised, CertifyParams, ExactError};
use crate::learn::s3vm::sdp::relax::{Balance, Relaxation};
use crate::stream::event::features_to_rows;

/// Runs audits off the engine's thread.
pub trait AuditRunner: Send {
    /// An audit is running (no second one starts meanwhile).
    fn busy(&self) -> bool;
    /// Runs `job` and publishes its report.
    fn start(&mut self, job: AuditJob);
}

/// The last finished audit and the one running, shared with the HTTP API.
#[derive(Debug, Clone, Default)]
pub struct AuditBoard(Arc<Mutex<BoardState>>);

#[derive(Debug, Default)]
struct BoardState {
    last: Option<AuditReport>,
    running: Option<u64>,
}

impl AuditBoard {
    fn state(&self) -> std::sync::MutexGuard<'_, BoardState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn last(&self) -> Option<AuditReport> {
        self.state().last.clone()
    }

    /// The number of the audit running, if one is.
    pub fn running(&self) -> Option<u64> {
        self.state().running
    }

    pub fn start(&self, number: u64) {
        self.state().running = Some(number);
    }

    /// `report` is the last; none is running.
    pub fn post(&self, report: AuditReport) {
        let mut state = self.state();
        state.running = None;
        state.last = Some(report);
    }
}

/// The windows' events an audit certifies, the model it measures and the settings.
pub struct AuditJob {
    /// 1 for the daemon's first audit, counting up.
    pub number: u64,
    /// Event time (epoch ms) of the newest window event when the sample was drawn.
    pub event_time: i64,
    /// Raw features; positives and negatives labelled, the unlabeled window's events 0.
    pub sample: Dataset,
    /// The active model when the sample was drawn.
    pub model: Option<Arc<StoredModel>>,
    pub config: AuditConfig,
    /// π of the balance row: `audit.prior`, else `model.prior`.
    pub prior: f64,
}

/// What an audit found. Objectives are of model (8) with the balance row (QP (24) at a
/// labelling); gaps are (objective − lower bound)/objective.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditReport {
    pub number: u64,
    /// `optimal`, `time_limit`, `node_limit`, `cancelled` or `failed` (then `error` says why).
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub event_time: i64,
    pub seconds: f64,
    pub rows: usize,
    pub positives: usize,
    pub negatives: usize,
    pub unlabeled: usize,
    pub kernel: &'static str,
    pub cl: f64,
    pub prior: f64,
    /// Σ_j x_j of the balance row: u·(2π − 1).
    pub rho: f64,
    /// The best labelling's objective.
    pub objective: Option<f64>,
    /// The certified (safe) lower bound on every labelling's objective.
    pub lower_bound: Option<f64>,
    pub gap: Option<f64>,
    pub nodes: usize,
    pub root_gap: Option<f64>,
    pub sdp_solves: usize,
    /// Share of the unlabeled events the best labelling calls positive.
    pub optimum_positive_share: Option<f64>,
    /// The active model's version; the `model_*` fields are absent without one.
    pub model_version: Option<u64>,
    /// Share of the unlabeled events the model flags.
    pub model_positive_share: Option<f64>,
    /// Whether the model's labelling meets the balance row (with |x_j| ≥ 1 it fails only when
    /// it flags all or none against the prior's sign).
    pub model_feasible: Option<bool>,
    pub model_objective: Option<f64>,
    pub model_gap: Option<f64>,
    /// Share of the unlabeled events on which the model and the best labelling agree.
    pub agreement: Option<f64>,
    /// The model's ranking apart from its threshold: its highest-scored unlabeled events,
    /// the prior's share of them, positive ([`balanced_start`]). An FPR-constrained
    /// threshold flags fewer than π on purpose; this gap is the ranking's own.
    pub model_ranked_objective: Option<f64>,
    pub model_ranked_gap: Option<f64>,
}

impl AuditJob {
    /// The search and the model's comparison; stops with `cancelled` when `cancel` is set.
    pub fn run(&self, cancel: &AtomicBool) -> AuditReport {
        let started = Instant::now();
        let mut report = self.empty_report();
        if let Err(e) = self.certify(cancel, &mut report) {
            report.status = "failed".into();
            report.error = Some(e.to_string());
        }
        report.seconds = started.elapsed().as_secs_f64();
        report
    }

    /// The report of an audit that could not run.
    pub fn failed(&self, error: String) -> AuditReport {
        let mut report = self.empty_report();
        report.error = Some(error);
        report
    }

    fn empty_report(&self) -> AuditReport {
        let unlabeled = self.sample.count(Label::Unlabeled);
        AuditReport {
            number: self.number,
            status: "failed".into(),
            error: None,
            event_time: self.event_time,
            seconds: 0.0,
            rows: self.sample.len(),
            positives: self.sample.count(Label::Positive),
            negatives: self.sample.count(Label::Negative),
            unlabeled,
            kernel: match self.config.kernel {
                AuditKernel::Linear => "linear",
                AuditKernel::Rbf => "rbf",
            },
            cl: self.config.cl,
            prior: self.prior,
            rho: unlabeled as f64 * (2.0 * self.prior - 1.0),
            objective: None,
            lower_bound: None,
            gap: None,
            nodes: 0,
            root_gap: None,
            sdp_solves: 0,
            optimum_positive_share: None,
            model_version: self.model.as_ref().map(|m| m.meta.version),
            model_positive_share: None,
            model_feasible: None,
            model_objective: None,
            model_gap: None,
            agreement: None,
            model_ranked_objective: None,
            model_ranked_gap: None,
        }
    }

    fn certify(&self, cancel: &AtomicBool, report: &mut AuditReport) -> Result<(), ExactError> {
        let c = &self.config;
        let spec = InstanceSpec {
            cl: c.cl,
            cu_factor: c.cu_factor,
            kernel: match c.kernel {
                AuditKernel::Linear => ExactKernel::Linear,
                AuditKernel::Rbf => ExactKernel::Rbf(c.gamma),
            },
        };
        let data = &self.sample;
        let instance = ExactInstance::build(data, &spec)?;
        let mut root = Relaxation::for_labels(instance.c.clone(), &data.labels, false)?;
        let unlabeled = data.indices_of(Label::Unlabeled);
        root.balance = Some(Balance {
            rho: report.rho,
            unlabeled: unlabeled.clone(),
        });
        let (f, signs) = supervised(&instance.gram, &instance.penalties, &data.labels)?;
        let mut starts = vec![balanced_start(&f, &data.labels, report.rho), signs];
        let model_signs = self
            .model
            .as_ref()
            .map(|m| model_labelling(m, data, report.rho));
        starts.extend(
            model_signs
                .iter()
                .flat_map(|(signs, ranked)| [signs.clone(), ranked.clone()]),
        );
        let params = CertifyParams {
            gap: c.gap,
            time_limit: Some(c.time_limit.0.as_secs_f64()),
            ..CertifyParams::default()
        }
        .check()?;
        let certificate = params.solve(&root, &starts, cancel, &mut |_| {})?;
        let objective = certificate.incumbent.objective;
        let share = |signs: &[f64]| {
            let positive = unlabeled.iter().filter(|&&i| signs[i] > 0.0).count();
            positive as f64 / unlabeled.len() as f64
        };
        report.status = certificate.status.as_str().into();
        report.objective = Some(objective);
        report.lower_bound = Some(certificate.lower_bound).filter(|b| b.is_finite());
        report.gap = Some(relative_gap(objective, certificate.lower_bound));
        report.nodes = certificate.nodes;
        report.root_gap = Some(relative_gap(
            certificate.root_upper_bound,
            certificate.root_lower_bound,
        ));
        report.sdp_solves = certificate.sdp_solves;
        report.optimum_positive_share = Some(share(&certificate.signs));
        if let Some((signs, ranked)) = &model_signs {
            if let Some(sol) = qp24::solve(&instance.c, ranked, root.balance.as_ref())? {
                report.model_ranked_objective = Some(sol.objective);
                report.model_ranked_gap =
                    Some(relative_gap(sol.objective, certificate.lower_bound));
            }
            report.model_positive_share = Some(share(signs));
            report.agreement = Some(
                unlabeled
                    .iter()
                    .filter(|&&i| signs[i] == certificate.signs[i])
                    .count() as f64
                    / unlabeled.len() as f64,
            );
            let solved = qp24::solve(&instance.c, signs, root.balance.as_ref())?;
            report.model_feasible = Some(solved.is_some());
            if let Some(sol) = solved {
                report.model_objective = Some(sol.objective);
                report.model_gap = Some(relative_gap(sol.objective, certificate.lower_bound));
            }
        }
        Ok(())
    }
}

/// The model's labellings of `data` ([`crate::learn::model::Model::labelling`]), and its
/// ranking cut at the balance row's share ([`balanced_start`] on its scores).
fn model_labelling(model: &StoredModel, data: &Dataset, rho: f64) -> (Vec<f64>, Vec<f64>) {
    let mut scores = vec![0.0; data.len()];
    let decided = model.model.labelling(data, &mut scores);
    (decided, balanced_start(&scores, &data.labels, rho))
}

/// How many of each channel's events a sample of at most `max_rows` takes: all of them when
/// they fit, else each channel its share of `max_rows` (largest remainders first), and at
/// least one of every channel that has events.
pub fn stratified_counts(sizes: [usize; 3], max_rows: usize) -> [usize; 3] {
    let total: usize = sizes.iter().sum();
    if total <= max_rows {
        return sizes;
    }
    let exact: Vec<f64> = sizes
        .iter()
        .map(|&s| max_rows as f64 * s as f64 / total as f64)
        .collect();
    let mut counts = [0usize; 3];
    for (c, (&e, &s)) in counts.iter_mut().zip(exact.iter().zip(&sizes)) {
        *c = (e.floor() as usize).min(s).max(usize::from(s > 0));
    }
    let mut order: Vec<usize> = (0..3).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let mut left = max_rows.saturating_sub(counts.iter().sum());
    for &c in order.iter().cycle().take(3 * max_rows) {
        if left == 0 {
            break;
        }
        if counts[c] < sizes[c] {
            counts[c] += 1;
            left -= 1;
        }
    }
    counts
}

/// The sample of an audit: [`stratified_counts`] events of each channel (positive,
/// unlabeled, negative), drawn without replacement with `seed`, as a dataset of raw features
/// in that channel order. `None` when the sample would lack labelled or unlabeled events.
pub fn draw_sample(
    channels: [Vec<&Entry>; 3],
    n_features: usize,
    max_rows: usize,
    seed: u64,
) -> Option<Dataset> {
    let sizes = [channels[0].len(), channels[1].len(), channels[2].len()];
    if sizes[1] == 0 || sizes[0] + sizes[2] == 0 {
        return None;
    }
    let counts = stratified_counts(sizes, max_rows);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut picked: Vec<&Entry> = Vec::with_capacity(counts.iter().sum());
    let mut labels = Vec::with_capacity(picked.capacity());
    for ((entries, &count), label) in
        channels
            .iter()
            .zip(&counts)
            .zip([Label::Positive, Label::Unlabeled, Label::Negative])
    {
        picked.extend(entries.choose_multiple(&mut rng, count).copied());
        labels.extend(std::iter::repeat(label).take(count));
    }
    let rows = features_to_rows(picked.iter().map(|e| &e.x), n_features).ok()?;
    Some(Dataset {
        rows,
        labels,
        ids: picked.iter().map(|e| e.id.clone()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Rows;

    /// A PU sample: 6 labelled positives around (1, 1), 10 unlabeled points of both clusters
    /// (positives around (1, 1), negatives around (−1, −1)); π = 0.3.
    fn pu_sample() -> Dataset {
        let mut x = Vec::new();
        let mut labels = Vec::new();
        for i in 0..16 {
            let t = i as f64;
            let jitter = [(t * 1.7).sin() * 0.6, (t * 2.3).cos() * 0.6];
            let positive = i < 6 || i % 3 == 0;
            let centre = if positive { 1.0 } else { -1.0 };
            x.push([centre + jitter[0], centre + jitter[1]]);
            labels.push(if i < 6 {
                Label::Positive
            } else {
                Label::Unlabeled
            });
        }
        let rows = ndarray::Array2::from_shape_fn((16, 2), |(i, j)| x[i][j]);
        Dataset {
            rows: Rows::dense(rows),
            ids: (0..16).map(|i| format!("e{i}")).collect(),
            labels,
        }
    }

    /// With gap 0 the audit's optimum is the least QP (24) value over every labelling of the
    /// unlabeled events under the prior's balance row ρ = u·(2π − 1), and the bound is valid.
    #[test]
    fn an_audit_finds_the_brute_force_optimum_under_the_priors_balance() {
        let config: AuditConfig =
            toml::from_str("cl = 2.0\nkernel = \"rbf\"\nprior = 0.3\ngap = 0.0\n").expect("config");
        let job = AuditJob {
            number: 1,
            event_time: 7,
            sample: pu_sample(),
            model: None,
            config,
            prior: 0.3,
        };
        let report = job.run(&AtomicBool::new(false));
        assert_eq!(report.status, "optimal", "{report:?}");
        assert_eq!(
            (report.positives, report.unlabeled, report.negatives),
            (6, 10, 0)
        );
        assert!((report.rho - 10.0 * (2.0 * 0.3 - 1.0)).abs() < 1e-12);

        let instance = ExactInstance::build(
            &job.sample,
            &InstanceSpec {
                cl: 2.0,
                cu_factor: 1.0,
                kernel: ExactKernel::Rbf(None),
            },
        )
        .expect("instance");
        let unlabeled = job.sample.indices_of(Label::Unlabeled);
        let balance = Balance {
            rho: report.rho,
            unlabeled: unlabeled.clone(),
        };
        let mut best = f64::INFINITY;
        for mask in 0u32..(1 << unlabeled.len()) {
            let mut signs: Vec<f64> = job
                .sample
                .labels
                .iter()
                .map(|l| f64::from(l.code()))
                .collect();
            for (b, &j) in unlabeled.iter().enumerate() {
                signs[j] = if (mask >> b) & 1 == 1 { 1.0 } else { -1.0 };
            }
            if let Some(sol) = qp24::solve(&instance.c, &signs, Some(&balance)).expect("qp24") {
                best = best.min(sol.objective);
            }
        }
        let objective = report.objective.expect("objective");
        assert!(
            (objective - best).abs() <= 1e-6 * best,
            "{objective} vs {best}"
        );
        let lower = report.lower_bound.expect("bound");
        assert!(lower <= best * (1.0 + 1e-9), "{lower} > {best}");
        assert!(report.gap.expect("gap") <= 1e-6);
        // Three of the ten unlabeled events are positive at π = 0.3 when every |x_j| = 1;
        // the optimum's share stays near it.
        let share = report.optimum_positive_share.expect("share");
        assert!((0.1..=0.5).contains(&share), "{share}");
        assert_eq!(report.model_version, None);
        assert_eq!(report.model_gap, None);
    }

    #[test]
    fn stratified_counts_keep_each_channels_share() {
        assert_eq!(stratified_counts([10, 20, 0], 100), [10, 20, 0]);
        assert_eq!(stratified_counts([100, 300, 0], 40), [10, 30, 0]);
        assert_eq!(stratified_counts([100, 299, 1], 40), [10, 29, 1]);
        let c = stratified_counts([333, 333, 334], 100);
        assert_eq!(c.iter().sum::<usize>(), 100);
        assert!(c.iter().all(|&k| (33..=34).contains(&k)), "{c:?}");
    }
}
