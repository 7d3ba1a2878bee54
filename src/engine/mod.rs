//! The daemon's moving parts between the sources and the learners: model persistence
//! ([`store`]) and the active-model registry ([`registry`]).

pub mod registry;
pub mod store;
