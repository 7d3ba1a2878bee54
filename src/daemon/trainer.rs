//! The training thread of a deferred retrain: polling and scoring never wait for a solver.

use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::engine::machine::{Engine, RetrainJob, TrainedRetrain};

pub(crate) struct Trainer {
    pub(crate) handle: JoinHandle<()>,
    result: mpsc::Receiver<TrainedRetrain>,
}

impl Trainer {
    pub(crate) fn start(job: RetrainJob) -> std::io::Result<Trainer> {
        let (tx, result) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("neyman-train".into())
            .spawn(move || {
                let _ = tx.send(job.run());
            })?;
        Ok(Trainer { handle, result })
    }

    /// The result if training ended: `Some(Ok)` trained, `Some(Err)` the thread died.
    pub(crate) fn poll(&self) -> Option<Result<TrainedRetrain, String>> {
        match self.result.try_recv() {
            Ok(trained) => Some(Ok(trained)),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => {
                Some(Err("the training thread ended without a result".into()))
            }
        }
    }

    pub(crate) fn wait(self) -> Result<TrainedRetrain, String> {
        let trained = self
            .result
            .recv()
            .map_err(|_| "the training thread ended without a result".to_string());
        let _ = self.handle.join();
        trained
    }
}

pub(crate) fn finish_training(engine: &mut Engine, result: Result<TrainedRetrain, String>) {
    match result {
        Ok(trained) => {
            engine.complete_retrain(trained);
        }
        Err(detail) => engine.abandon_retrain(detail),
    }
}
