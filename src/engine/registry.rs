//! The active model, swapped atomically.
//!
//! Scorers call [`Registry::active`] once per batch and score the whole batch with that one
//! `Arc`: a swap in between never splits a batch, and a model is installed whole or not at all
//! (readers never see a half-installed model). Every score carries the version of the `Arc` it
//! was computed with.
//!
//! The registry also remembers the accepted models (newest last, at most `keep`), so
//! `POST /v1/model/rollback` can reinstate the previous one.

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::cache::Cache;
use arc_swap::ArcSwapOption;

use crate::engine::store::StoredModel;
use crate::learn::model::Provenance;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("no model is active")]
    NoModel,
    #[error("model {active} is the only one kept; there is nothing to roll back to")]
    NoPrevious { active: u64 },
}

/// The active model as another thread sees it: a call compares one pointer and reloads only
/// after a swap, so asking per event costs no reference counting shared with the engine.
pub struct ActiveModel(Cache<Watched, Option<Arc<StoredModel>>>);

impl ActiveModel {
    pub fn load(&mut self) -> Option<&Arc<StoredModel>> {
        self.0.load().as_ref()
    }
}

/// The registry's active slot, for [`Cache`].
struct Watched(Arc<Registry>);

impl Deref for Watched {
    type Target = ArcSwapOption<StoredModel>;

    fn deref(&self) -> &Self::Target {
        &self.0.active
    }
}

/// The active model and the accepted history.
#[derive(Debug)]
pub struct Registry {
    active: ArcSwapOption<StoredModel>,
    history: Mutex<Vec<Arc<StoredModel>>>,
    keep: usize,
}

impl Registry {
    pub fn new(keep: usize) -> Registry {
        Registry {
            active: ArcSwapOption::empty(),
            history: Mutex::new(Vec::new()),
            keep: keep.max(2),
        }
    }

    /// A registry resumed from stored models, newest first (as
    /// [`crate::engine::store::ModelStore::load_usable`] returns them); the newest becomes
    /// active.
    pub fn resumed(keep: usize, newest_first: Vec<StoredModel>) -> Registry {
        let registry = Registry::new(keep);
        let mut history: Vec<Arc<StoredModel>> = newest_first
            .into_iter()
            .take(registry.keep)
            .map(Arc::new)
            .collect();
        history.reverse();
        registry.active.store(history.last().cloned());
        *registry.lock() = history;
        registry
    }

    // A panic while holding the lock cannot leave the history half-edited (every edit is one
    // push or pop), so a poisoned lock is still usable.
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<StoredModel>>> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The model to score the next batch with.
    pub fn active(&self) -> Option<Arc<StoredModel>> {
        self.active.load_full()
    }

    /// The active model for a thread that asks for it per event ([`ActiveModel`]).
    pub fn watch(self: &Arc<Self>) -> ActiveModel {
        ActiveModel(Cache::new(Watched(Arc::clone(self))))
    }

    /// Makes `model` active and remembers it.
    pub fn install(&self, model: StoredModel) -> Arc<StoredModel> {
        let model = Arc::new(model);
        let mut history = self.lock();
        history.push(Arc::clone(&model));
        let excess = history.len().saturating_sub(self.keep);
        history.drain(..excess);
        self.active.store(Some(Arc::clone(&model)));
        model
    }

    /// Makes `model`, a recalibrated copy of the active model (same version), active in its
    /// place, history included, so a rollback still reaches the model before it. Nothing
    /// changes when the active model is no longer that version (a rollback or a swap came
    /// first): the copy is then of a retired model. Returns the installed model, if it was.
    pub fn replace_active(&self, model: StoredModel) -> Option<Arc<StoredModel>> {
        let mut history = self.lock();
        let version = model.meta.version;
        let is_active = self
            .active
            .load()
            .as_ref()
            .is_some_and(|a| a.meta.version == version);
        let last = history
            .last_mut()
            .filter(|m| is_active && m.meta.version == version)?;
        let model = Arc::new(model);
        *last = Arc::clone(&model);
        self.active.store(Some(Arc::clone(&model)));
        Some(model)
    }

    /// Reverts to the previously accepted model; returns (the retired, the now active).
    pub fn rollback(&self) -> Result<(Arc<StoredModel>, Arc<StoredModel>), RegistryError> {
        let mut history = self.lock();
        let current = history.last().cloned().ok_or(RegistryError::NoModel)?;
        if history.len() < 2 {
            return Err(RegistryError::NoPrevious {
                active: current.meta.version,
            });
        }
        history.pop();
        let previous = history.last().cloned().ok_or(RegistryError::NoModel)?;
        self.active.store(Some(Arc::clone(&previous)));
        Ok((current, previous))
    }

    /// The remembered models, newest first, each with whether it is the active one. Read
    /// under the history lock, which every install and rollback holds while it swaps, so
    /// exactly one entry is active (none before the first install).
    pub fn models(&self) -> Vec<(Arc<StoredModel>, bool)> {
        let history = self.lock();
        let active = self.active.load();
        history
            .iter()
            .rev()
            .map(|m| {
                let is_active = active.as_ref().is_some_and(|a| Arc::ptr_eq(a, m));
                (Arc::clone(m), is_active)
            })
            .collect()
    }

    /// The remembered models' metadata, newest first.
    pub fn list(&self) -> Vec<Provenance> {
        self.lock().iter().rev().map(|m| m.meta.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use ndarray::array;

    use super::*;
    use crate::data::{Rows, ScaleKind};
    use crate::learn::kernel::Kernel;
    use crate::learn::model::{toy, Model};
    use crate::learn::Scorer;

    /// A model whose every score is `version`-dependent: the bias of a linear USMO fit is
    /// shifted by the version, so a score tells which model produced it.
    fn stored(version: u64) -> StoredModel {
        let mut model = toy::usmo(Kernel::Linear, ScaleKind::None);
        let mut zero = [0.0];
        model.score_batch(&Rows::dense(array![[0.0, 0.0]]), &mut zero);
        if let Model::Usmo(entry) = &mut model {
            entry.fit.expansion.bias += version as f64 * 1000.0 - zero[0];
        }
        StoredModel::new(toy::provenance(version), model)
    }

    #[test]
    fn install_rollback_and_history() {
        let r = Registry::new(3);
        assert!(r.active().is_none());
        assert_eq!(r.rollback(), Err(RegistryError::NoModel));
        r.install(stored(1));
        assert_eq!(r.rollback(), Err(RegistryError::NoPrevious { active: 1 }));
        for v in 2..=4 {
            r.install(stored(v));
        }
        assert_eq!(
            r.list().iter().map(|m| m.version).collect::<Vec<_>>(),
            vec![4, 3, 2]
        );
        let (retired, active) = r.rollback().expect("previous exists");
        assert_eq!((retired.meta.version, active.meta.version), (4, 3));
        assert_eq!(r.active().map(|m| m.meta.version), Some(3));
        assert_eq!(
            r.models()
                .iter()
                .map(|(m, active)| (m.meta.version, *active))
                .collect::<Vec<_>>(),
            vec![(3, true), (2, false)]
        );
        let resumed = Registry::resumed(3, vec![stored(9), stored(8)]);
        assert_eq!(resumed.active().map(|m| m.meta.version), Some(9));
        assert_eq!(resumed.rollback().map(|(_, a)| a.meta.version), Ok(8));
    }

    #[test]
    fn a_recalibrated_copy_replaces_the_active_model_in_place() {
        let r = Registry::new(3);
        r.install(stored(1));
        r.install(stored(2));
        let mut fresh = stored(2);
        fresh.threshold_version = 1;
        assert!(r.replace_active(fresh).is_some());
        assert_eq!(r.active().map(|m| m.threshold_version), Some(1));
        assert_eq!(
            r.list().iter().map(|m| m.version).collect::<Vec<_>>(),
            vec![2, 1],
            "one history entry per version"
        );
        // A copy of a model no longer active is dropped.
        r.rollback().expect("previous exists");
        let mut stale = stored(2);
        stale.threshold_version = 2;
        assert!(r.replace_active(stale).is_none());
        assert_eq!(
            r.active().map(|m| (m.meta.version, m.threshold_version)),
            Some((1, 0))
        );
        assert_eq!(r.models().len(), 1);
    }

    #[test]
    fn every_batch_is_scored_by_one_whole_model_while_swaps_happen() {
        let registry = Arc::new(Registry::new(2));
        registry.install(stored(1));
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (registry, done) = (Arc::clone(&registry), Arc::clone(&done));
            std::thread::spawn(move || {
                for v in 2..200 {
                    registry.install(stored(v));
                }
                done.store(true, Ordering::Release);
            })
        };
        let rows = Rows::dense(array![[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]);
        let mut out = [0.0; 4];
        let mut batches = 0;
        let mut last_version = 0;
        while !done.load(Ordering::Acquire) || batches == 0 {
            let model = registry.active().expect("installed");
            model.model.score_batch(&rows, &mut out);
            let want = model.meta.version as f64 * 1000.0;
            for s in out {
                assert!(
                    (s - want).abs() < 1e-6,
                    "score {s} from version {}",
                    model.meta.version
                );
            }
            assert!(
                model.meta.version >= last_version,
                "versions only move forward"
            );
            last_version = model.meta.version;
            batches += 1;
        }
        writer.join().expect("writer");
        assert_eq!(registry.active().map(|m| m.meta.version), Some(199));
    }
}
