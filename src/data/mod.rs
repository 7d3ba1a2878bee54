//! Samples, labels and the files they come from.
//!
//! One label encoding everywhere: `1` = positive, `-1` = negative, `0` = unlabeled.

pub mod read;
pub mod rows;
pub mod scale;

pub use read::{read, DataError, Format, ReadOptions};
pub use rows::{CsrMatrix, RowRef, Rows};
pub use scale::{ScaleKind, Scaler};

use serde::{Deserialize, Serialize};

/// A sample's label: `1` positive, `-1` negative, `0` unlabeled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Label {
    Positive,
    Negative,
    Unlabeled,
}

impl Label {
    /// The file encoding: `1`, `-1` or `0`.
    pub fn code(self) -> i8 {
        match self {
            Label::Positive => 1,
            Label::Negative => -1,
            Label::Unlabeled => 0,
        }
    }
}

/// Which rows of a fully labelled file keep their label ([`Dataset::hide_labels`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LabelledRows {
    /// `--labeled-fraction F`
    Fraction(f64),
    /// `--labeled-count N`
    Count(usize),
}

impl LabelledRows {
    fn flag(self) -> &'static str {
        match self {
            LabelledRows::Fraction(_) => "--labeled-fraction",
            LabelledRows::Count(_) => "--labeled-count",
        }
    }
}

/// Samples with their labels and string ids (unique within the set).
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub rows: Rows,
    pub labels: Vec<Label>,
    pub ids: Vec<String>,
}

impl Dataset {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// A new dataset with the listed rows, in that order.
    pub fn select(&self, rows: &[usize]) -> Dataset {
        Dataset {
            rows: self.rows.select(rows),
            labels: rows.iter().map(|&r| self.labels[r]).collect(),
            ids: rows.iter().map(|&r| self.ids[r].clone()).collect(),
        }
    }

    /// Indices of the rows with the given label, in file order.
    pub fn indices_of(&self, label: Label) -> Vec<usize> {
        (0..self.len())
            .filter(|&i| self.labels[i] == label)
            .collect()
    }

    /// The first row holding a NaN or infinite value, if any.
    pub fn first_non_finite(&self) -> Option<usize> {
        if self.rows.all_finite() {
            return None;
        }
        let mut row = vec![0.0; self.rows.n_features()];
        (0..self.len()).find(|&i| {
            self.rows.row(i).write_dense(&mut row);
            row.iter().any(|v| !v.is_finite())
        })
    }

    pub fn count(&self, label: Label) -> usize {
        self.labels.iter().filter(|&&l| l == label).count()
    }

    /// Makes a PU set from a fully labelled one: keeps `round(fraction · P)` of the P positives
    /// (at least 1) labelled, chosen at random by `seed`, and marks every other row unlabeled.
    /// Returns how many rows stay labelled.
    ///
    /// The choice depends only on the seed and the positives' file order (ChaCha8 and
    /// `rand::seq::index::sample` are platform-independent), so a run is reproducible anywhere.
    pub fn pu_relabel(&mut self, fraction: f64, seed: u64) -> Result<usize, DataError> {
        use rand::SeedableRng;

        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(DataError::BadFraction(fraction));
        }
        let positives = self.indices_of(Label::Positive);
        if positives.is_empty() {
            return Err(DataError::NoPositives);
        }
        let amount =
            ((fraction * positives.len() as f64).round() as usize).clamp(1, positives.len());
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let chosen = rand::seq::index::sample(&mut rng, positives.len(), amount);
        self.labels.fill(Label::Unlabeled);
        for k in chosen {
            self.labels[positives[k]] = Label::Positive;
        }
        Ok(amount)
    }

    /// The semi-supervised protocols: on a fully labelled file, keeps the labels of the rows
    /// `rule` picks (drawn with `seed`) and makes the others 0; returns every row's true
    /// label, for evaluation on the rows made 0.
    /// - [`LabelledRows::Fraction`] F: per class, ⌊F·n_c⌋ rows (at least 1) keep their label.
    /// - [`LabelledRows::Count`] N: N rows drawn uniformly, redrawn until both classes appear.
    ///
    /// A file with an unlabeled row, or without both classes, is refused with the reason.
    pub fn hide_labels(&mut self, rule: LabelledRows, seed: u64) -> Result<Vec<Label>, DataError> {
        use rand::SeedableRng;

        let flag = rule.flag();
        if let Some(row) = self.labels.iter().position(|&l| l == Label::Unlabeled) {
            return Err(DataError::Labelled(format!(
                "{flag} needs a fully labelled file, but row {row} is unlabeled (0)"
            )));
        }
        let positives = self.indices_of(Label::Positive);
        let negatives = self.indices_of(Label::Negative);
        if positives.is_empty() || negatives.is_empty() {
            return Err(DataError::Labelled(format!(
                "{flag} needs both classes in the file; it has {} positive and {} negative rows",
                positives.len(),
                negatives.len()
            )));
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let keep: Vec<usize> = match rule {
            LabelledRows::Fraction(f) => {
                if !(f > 0.0 && f <= 1.0) {
                    return Err(DataError::BadFraction(f));
                }
                let mut keep = Vec::new();
                for class in [&positives, &negatives] {
                    let amount = ((f * class.len() as f64).floor() as usize).max(1);
                    let chosen = rand::seq::index::sample(&mut rng, class.len(), amount);
                    keep.extend(chosen.into_iter().map(|k| class[k]));
                }
                keep
            }
            LabelledRows::Count(count) => {
                if count < 2 || count > self.len() {
                    return Err(DataError::Labelled(format!(
                        "--labeled-count must be between 2 and the {} rows, got {count}",
                        self.len()
                    )));
                }
                loop {
                    let chosen = rand::seq::index::sample(&mut rng, self.len(), count).into_vec();
                    let positive = chosen
                        .iter()
                        .filter(|&&i| self.labels[i] == Label::Positive)
                        .count();
                    if positive > 0 && positive < count {
                        break chosen;
                    }
                }
            }
        };
        let truth = self.labels.clone();
        self.labels.fill(Label::Unlabeled);
        for i in keep {
            self.labels[i] = truth[i];
        }
        Ok(truth)
    }

    /// The data rows `A..B` (0-based, end exclusive) of a `--rows A:B` spec; `A:` runs to the
    /// end and `:B` starts at row 0.
    pub fn slice_rows(&self, spec: &str) -> Result<Dataset, DataError> {
        let bad = |reason: String| DataError::BadRowRange {
            spec: spec.to_owned(),
            reason,
        };
        let (start, end) = spec
            .split_once(':')
            .ok_or_else(|| bad("expected A:B, A: or :B".to_owned()))?;
        let bound = |text: &str, default: usize| {
            let text = text.trim();
            if text.is_empty() {
                Ok(default)
            } else {
                text.parse::<usize>()
                    .map_err(|_| bad(format!("{text:?} is not a row number")))
            }
        };
        let (start, end) = (bound(start, 0)?, bound(end, self.len())?);
        for (what, at) in [("start", start), ("end", end)] {
            if at > self.len() {
                return Err(bad(format!(
                    "the {what} {at} is past the {} rows",
                    self.len()
                )));
            }
        }
        if start > end {
            return Err(bad(format!("the start {start} is after the end {end}")));
        }
        Ok(self.select(&(start..end).collect::<Vec<_>>()))
    }

    /// Turns every unlabeled row into a negative (unlabeled rows standing in for negatives).
    pub fn unlabeled_as_negatives(&mut self) {
        for label in &mut self.labels {
            if *label == Label::Unlabeled {
                *label = Label::Negative;
            }
        }
    }

    /// Turns every negative label into unlabeled (a labelled set used as PU data).
    pub fn negatives_as_unlabeled(&mut self) {
        for label in &mut self.labels {
            if *label == Label::Negative {
                *label = Label::Unlabeled;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n_pos` positives and `n_neg` negatives, interleaved, one feature holding the row number.
    fn labelled(n_pos: usize, n_neg: usize) -> Dataset {
        let labels: Vec<Label> = (0..n_pos + n_neg)
            .map(|i| {
                if (i % 2 == 0 && i / 2 < n_pos) || i / 2 >= n_neg {
                    Label::Positive
                } else {
                    Label::Negative
                }
            })
            .collect();
        let n = labels.len();
        Dataset {
            rows: Rows::dense(ndarray::Array2::from_shape_fn((n, 1), |(i, _)| i as f64)),
            ids: (0..n).map(|i| format!("r{i}")).collect(),
            labels,
        }
    }

    #[test]
    fn pu_relabel_counts_follow_the_rounding_rule() {
        for (n_pos, fraction, want) in [(120, 0.19, 23), (268, 0.198, 53), (225, 0.195, 44)] {
            let mut data = labelled(n_pos, 100);
            assert_eq!(data.count(Label::Positive), n_pos);
            let before = data.clone();
            assert_eq!(data.pu_relabel(fraction, 7).unwrap(), want);
            assert_eq!(data.count(Label::Positive), want);
            assert_eq!(data.count(Label::Unlabeled), data.len() - want);
            assert_eq!(data.count(Label::Negative), 0);
            for i in data.indices_of(Label::Positive) {
                assert_eq!(before.labels[i], Label::Positive);
            }
            assert_eq!((data.rows, data.ids), (before.rows, before.ids));
        }
        let mut tiny = labelled(3, 3);
        assert_eq!(tiny.pu_relabel(0.01, 1).unwrap(), 1);
        let mut all = labelled(3, 3);
        assert_eq!(all.pu_relabel(1.0, 1).unwrap(), 3);
    }

    #[test]
    fn pu_relabel_is_deterministic_per_seed() {
        let relabel = |seed| {
            let mut data = labelled(120, 150);
            data.pu_relabel(0.19, seed).unwrap();
            data.indices_of(Label::Positive)
        };
        assert_eq!(relabel(42), relabel(42));
        assert_ne!(relabel(42), relabel(43));
        // Pinned, so a change of RNG or sampling algorithm cannot slip by unnoticed.
        let mut data = labelled(10, 0);
        data.pu_relabel(0.3, 42).unwrap();
        assert_eq!(data.indices_of(Label::Positive), [1, 5, 9]);
    }

    #[test]
    fn pu_relabel_rejects_bad_input() {
        for fraction in [0.0, -0.5, 1.5, f64::NAN] {
            let err = labelled(5, 5).pu_relabel(fraction, 1).unwrap_err();
            assert!(matches!(err, DataError::BadFraction(_)), "{fraction}");
        }
        assert_eq!(
            labelled(5, 5).pu_relabel(2.0, 1).unwrap_err().to_string(),
            "the labelled fraction must be in (0, 1], got 2"
        );
        let mut none = labelled(0, 5);
        assert!(matches!(
            none.pu_relabel(0.5, 1),
            Err(DataError::NoPositives)
        ));
    }

    #[test]
    fn pu_relabel_of_heart_statlog() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/heart_statlog.csv");
        let mut data = read(&path, &ReadOptions::default()).unwrap();
        assert_eq!(data.pu_relabel(0.19, 1).unwrap(), 23);
        assert_eq!(data.count(Label::Unlabeled), 270 - 23);
    }

    #[test]
    fn slice_rows_takes_half_open_ranges() {
        let data = labelled(3, 3);
        let ids = |spec: &str| data.slice_rows(spec).unwrap().ids;
        assert_eq!(ids("1:3"), ["r1", "r2"]);
        assert_eq!(ids("4:"), ["r4", "r5"]);
        assert_eq!(ids(":2"), ["r0", "r1"]);
        assert_eq!(ids(":").len(), 6);
        assert_eq!(ids(" 2 : 2 ").len(), 0);
        assert_eq!(ids("0:6").len(), 6);
        let sliced = data.slice_rows("2:4").unwrap();
        assert_eq!(sliced.rows, Rows::dense(ndarray::array![[2.0], [3.0]]));
        assert_eq!(sliced.labels, data.labels[2..4]);
    }

    #[test]
    fn slice_rows_rejects_bad_ranges() {
        let data = labelled(3, 3);
        for (spec, want) in [
            ("3:1", "the start 3 is after the end 1"),
            ("0:7", "the end 7 is past the 6 rows"),
            ("9:", "the start 9 is past the 6 rows"),
            ("5", "expected A:B, A: or :B"),
            ("a:2", "\"a\" is not a row number"),
            ("-1:2", "\"-1\" is not a row number"),
            ("1:2:3", "\"2:3\" is not a row number"),
        ] {
            let err = data.slice_rows(spec).unwrap_err().to_string();
            assert_eq!(err, format!("invalid row range {spec:?}: {want}"));
        }
    }

    #[test]
    fn negatives_become_unlabeled() {
        let mut data = labelled(2, 2);
        data.labels[0] = Label::Unlabeled;
        data.negatives_as_unlabeled();
        assert_eq!(data.count(Label::Negative), 0);
        assert_eq!(data.count(Label::Positive), 1);
        assert_eq!(data.count(Label::Unlabeled), 3);
    }
}
