//! Bench data: a bundled file turned into a PU set the same way for every bench.

use std::path::Path;

use neyman::data::{read, Dataset, ReadOptions, ScaleKind, Scaler};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// `file` (under `data/`), optionally put in one fixed random order (for files sorted by
/// class), with 30 % of the positives labelled (seed 1), cut to its first `rows` rows when given,
/// then min-max scaled on those rows.
pub fn pu_data(file: &str, shuffle: bool, rows: Option<usize>) -> Dataset {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(file);
    let mut data = read(&path, &ReadOptions::default()).expect("bundled data reads");
    if shuffle {
        let mut order: Vec<usize> = (0..data.len()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(7));
        data = data.select(&order);
    }
    data.pu_relabel(0.3, 1).expect("has positives");
    if let Some(rows) = rows {
        data = data.select(&(0..rows.min(data.len())).collect::<Vec<_>>());
    }
    let scaler = Scaler::fit(ScaleKind::MinMax, &data.rows);
    Dataset {
        rows: scaler.transform(&data.rows),
        ..data
    }
}
