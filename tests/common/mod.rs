//! Shared test helpers. Included from integration tests with `mod common;`.
//! Not every test uses every helper, hence the blanket `dead_code` allowance.
#![allow(dead_code)]

pub mod qp;

pub use qp::*;
