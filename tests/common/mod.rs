//! Shared test helpers. Included from integration tests with `mod common;`.
//! Not every test uses every helper, hence the blanket `dead_code` allowance.
#![allow(dead_code)]

pub mod broker;
pub mod cli;
pub mod daemon;
pub mod exact;
pub mod http;
pub mod qp;
pub mod streams;
pub mod tls;

// Not every test crate uses the QP helpers (tests/kafka.rs only needs the broker).
#[allow(unused_imports)]
pub use qp::*;

/// The same rows in CSR storage (exact zeros left out), to check dense and sparse inputs agree.
pub fn to_sparse(x: &ndarray::Array2<f64>) -> neyman::data::Rows {
    let mut csr = neyman::data::CsrMatrix::new(x.ncols());
    for r in x.outer_iter() {
        let (idx, val): (Vec<u32>, Vec<f64>) = r
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0.0)
            .map(|(j, &v)| (j as u32, v))
            .unzip();
        csr.push_row(&idx, &val).expect("sorted in-range indices");
    }
    neyman::data::Rows::Sparse(csr)
}
