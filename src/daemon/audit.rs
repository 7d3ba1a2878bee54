//! The thread `[audit]`'s audits run on ([`AuditThread`]): one at a time, each on a
//! one-thread rayon pool (OBBT's problems would otherwise take every core from scoring and
//! retrains), cancelled with the daemon's shutdown flag. A finished audit is posted on the
//! board `GET /v1/audit` reads, set on the `neyman_audit_*` gauges, counted and logged.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::engine::audit::{AuditBoard, AuditJob, AuditReport, AuditRunner};
use crate::telemetry::Metrics;

pub struct AuditThread {
    board: AuditBoard,
    metrics: Metrics,
    /// The daemon's shutdown flag: the search stops after its node with `cancelled`.
    cancel: Arc<AtomicBool>,
    running: Option<JoinHandle<()>>,
}

impl AuditThread {
    pub fn new(board: AuditBoard, metrics: Metrics, cancel: Arc<AtomicBool>) -> AuditThread {
        AuditThread {
            board,
            metrics,
            cancel,
            running: None,
        }
    }
}

impl AuditRunner for AuditThread {
    fn busy(&self) -> bool {
        self.running.as_ref().is_some_and(|h| !h.is_finished())
    }

    fn start(&mut self, job: AuditJob) {
        let (board, metrics, cancel) = (
            self.board.clone(),
            self.metrics.clone(),
            Arc::clone(&self.cancel),
        );
        let number = job.number;
        let spawned = std::thread::Builder::new()
            .name("neyman-audit".into())
            .spawn(move || {
                board.start(number);
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(1)
                    .thread_name(|_| "neyman-audit-pool".into())
                    .build();
                let report = match pool {
                    Ok(pool) => pool.install(|| job.run(&cancel)),
                    Err(e) => job.failed(format!("cannot start the audit's pool: {e}")),
                };
                publish(&board, &metrics, report);
            });
        match spawned {
            Ok(handle) => self.running = Some(handle),
            Err(e) => {
                tracing::warn!(audit = number, error = %e, "cannot start the audit thread");
                self.metrics.audits.with_label_values(&["failed"]).inc();
            }
        }
    }
}

fn publish(board: &AuditBoard, metrics: &Metrics, report: AuditReport) {
    metrics.audits.with_label_values(&[&report.status]).inc();
    metrics.audit_seconds.set(report.seconds);
    let nan = f64::NAN;
    metrics.audit_gap.set(report.gap.unwrap_or(nan));
    metrics.audit_model_gap.set(report.model_gap.unwrap_or(nan));
    match &report.error {
        Some(error) => tracing::warn!(audit = report.number, %error, "audit failed"),
        None => tracing::info!(
            audit = report.number,
            status = %report.status,
            gap = report.gap.unwrap_or(nan),
            model_gap = report.model_gap.unwrap_or(nan),
            nodes = report.nodes,
            seconds = report.seconds,
            "audit finished"
        ),
    }
    board.post(report);
}
