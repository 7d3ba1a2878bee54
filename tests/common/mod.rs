//! Shared test helpers. Included from integration tests with `mod common;`.
//! Not every test uses every helper, hence the blanket `dead_code` allowance.
#![allow(dead_code)]

pub mod broker;
pub mod daemon;
pub mod http;
pub mod qp;
pub mod streams;
pub mod tls;

// Not every test crate uses the QP helpers (tests/kafka.rs only needs the broker).
#[allow(unused_imports)]
pub use qp::*;
