//! Events posted to `POST /v1/events/{channel}` ([`crate::serve`]), taken on the engine's
//! thread: between the records of a replay ([`take_queued`]), and as the whole input of
//! `source.kind = "http"` or of `replay --serve` after its stream ends ([`run`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::trainer::{finish_training, Trainer};
use super::DaemonError;
use crate::engine::machine::Engine;
use crate::serve::Posted;
use crate::stream::record::Record;

/// How long the live loop waits for a request before it looks at the wall clock, the
/// training thread and the stop flag again.
const POLL: Duration = Duration::from_millis(50);

/// Hands one request's records to the engine, flushes the outputs (so its scores and dead
/// letters are written when the client hears back) and answers it. Returns how many records
/// were handled; an engine error is answered and returned.
pub fn take(engine: &mut Engine, posted: Posted) -> Result<u64, DaemonError> {
    let mut taken = Vec::with_capacity(posted.records.len());
    let handled = posted
        .records
        .iter()
        .try_for_each(|record| {
            taken.push(engine.handle_answered(record)?);
            Ok(())
        })
        .and_then(|()| engine.flush());
    match handled {
        Ok(()) => {
            // A client that gave up is no reason to stop.
            let _ = posted.reply.send(Ok(taken));
            Ok(posted.records.len() as u64)
        }
        Err(e) => {
            let _ = posted.reply.send(Err(e.to_string()));
            Err(DaemonError::runtime(e))
        }
    }
}

/// Takes every request already queued, without waiting, showing each record to `observe`
/// before the engine takes it.
pub fn take_queued(
    engine: &mut Engine,
    feed: &Receiver<Posted>,
    mut observe: impl FnMut(&Record),
) -> Result<u64, DaemonError> {
    let mut handled = 0;
    while let Ok(posted) = feed.try_recv() {
        posted.records.iter().for_each(&mut observe);
        handled += take(engine, posted)?;
    }
    Ok(handled)
}

/// The live loop of posted events until `stop`: requests as they come, retrains on the
/// training thread (scoring never waits for a solver), the wall clock for
/// `scoring.max_wait`. At the end, the requests still queued are taken, the retrain in flight
/// is finished (cancelled by the shutdown) and the engine is finished. Returns how many
/// records were handled.
pub fn run(
    mut engine: Engine,
    feed: &Receiver<Posted>,
    stop: &AtomicBool,
) -> Result<u64, DaemonError> {
    engine.defer_retrains();
    let mut trainer: Option<Trainer> = None;
    let mut handled = 0;
    while !stop.load(Ordering::SeqCst) {
        if let Some(result) = trainer.as_ref().and_then(Trainer::poll) {
            if let Some(t) = trainer.take() {
                let _ = t.handle.join();
            }
            finish_training(&mut engine, result);
        }
        if trainer.is_none() && engine.retrain_wanted() {
            if let Some(job) = engine.due_retrain() {
                match Trainer::start(job) {
                    Ok(t) => trainer = Some(t),
                    Err(e) => {
                        engine.abandon_retrain(format!("cannot start a training thread: {e}"))
                    }
                }
            }
        }
        match feed.recv_timeout(POLL) {
            Ok(posted) => handled += take(&mut engine, posted)?,
            Err(RecvTimeoutError::Timeout) => {}
            // The API is gone: nothing more can arrive.
            Err(RecvTimeoutError::Disconnected) => break,
        }
        engine.tick(Instant::now()).map_err(DaemonError::runtime)?;
    }
    handled += take_queued(&mut engine, feed, |_| {})?;
    if let Some(t) = trainer.take() {
        finish_training(&mut engine, t.wait());
    }
    engine.finish().map_err(DaemonError::runtime)?;
    tracing::info!(events = handled, "stopped taking posted events");
    Ok(handled)
}
