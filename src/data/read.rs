//! CSV and LIBSVM readers, and the data module's error type.
//!
//! Every input error names the file and the 1-based line and, where it applies, the 1-based
//! column: for CSV the field number (with the header name), for LIBSVM the whitespace-separated
//! token number (the label is token 1).

use std::cell::RefCell;
use std::collections::hash_map::{Entry, HashMap};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::str::FromStr;

use flate2::read::MultiGzDecoder;
use ndarray::Array2;

use super::rows::{CsrMatrix, Rows};
use super::{Dataset, Label};

/// Everything that can go wrong in the data module, each as one readable line.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error(
        "cannot infer the format of {} from its extension; pass --format csv|libsvm",
        .path.display()
    )]
    UnknownFormat { path: PathBuf },
    #[error("unknown format {0:?}; expected csv or libsvm")]
    UnknownFormatName(String),
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}:{line}: the line is not valid UTF-8", .path.display())]
    NotUtf8 { path: PathBuf, line: usize },
    #[error("{}: no data rows", .path.display())]
    Empty { path: PathBuf },
    #[error("{}:{line}: the header has no column named {name:?}", .path.display())]
    MissingColumn {
        path: PathBuf,
        line: usize,
        name: String,
    },
    #[error(
        "{}:{line}: column {name:?} appears twice in the header (columns {first} and {second})",
        .path.display()
    )]
    DuplicateColumn {
        path: PathBuf,
        line: usize,
        name: String,
        first: usize,
        second: usize,
    },
    #[error("{}:{line}: expected {expected} fields, found {found}", .path.display())]
    Ragged {
        path: PathBuf,
        line: usize,
        expected: usize,
        found: usize,
    },
    #[error("{}:{line}:{column}: {value:?} is not a number{}", .path.display(), in_column(.name))]
    NotANumber {
        path: PathBuf,
        line: usize,
        column: usize,
        name: Option<String>,
        value: String,
    },
    #[error("{}:{line}:{column}: {value:?} is not finite{}", .path.display(), in_column(.name))]
    NonFinite {
        path: PathBuf,
        line: usize,
        column: usize,
        name: Option<String>,
        value: String,
    },
    #[error(
        "{}:{line}:{column}: unknown label {value:?} (expected 1, -1 or 0)",
        .path.display()
    )]
    UnknownLabel {
        path: PathBuf,
        line: usize,
        column: usize,
        value: String,
    },
    #[error("{}:{line}: duplicate id {id:?} (first on line {first_line})", .path.display())]
    DuplicateId {
        path: PathBuf,
        line: usize,
        first_line: usize,
        id: String,
    },
    #[error("{}:{line}:{column}: malformed idx:val pair {token:?}", .path.display())]
    MalformedPair {
        path: PathBuf,
        line: usize,
        column: usize,
        token: String,
    },
    #[error(
        "{}:{line}:{column}: index 0 in {token:?}; LIBSVM indices start at 1",
        .path.display()
    )]
    ZeroIndex {
        path: PathBuf,
        line: usize,
        column: usize,
        token: String,
    },
    #[error(
        "{}:{line}:{column}: index {index} out of order after {previous}; indices must increase",
        .path.display()
    )]
    IndexOutOfOrder {
        path: PathBuf,
        line: usize,
        column: usize,
        index: u32,
        previous: u32,
    },
    #[error(
        "{}:{line}:{column}: qid: tokens (ranking query ids) are not supported",
        .path.display()
    )]
    QidUnsupported {
        path: PathBuf,
        line: usize,
        column: usize,
    },
    #[error("unknown scaling {0:?}; expected none, standard or minmax")]
    UnknownScale(String),
    #[error("invalid scaler: {0}")]
    InvalidScaler(&'static str),
    #[error("the labelled fraction must be in (0, 1], got {0}")]
    BadFraction(f64),
    #[error("there are no positive rows to label")]
    NoPositives,
    #[error("invalid row range {spec:?}: {reason}")]
    BadRowRange { spec: String, reason: String },
    /// `--labeled-fraction` / `--labeled-count` cannot apply to this file or value.
    #[error("{0}")]
    Labelled(String),
}

fn in_column(name: &Option<String>) -> String {
    name.as_ref()
        .map_or_else(String::new, |n| format!(" (column {n:?})"))
}

/// A data file's syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Libsvm,
}

impl Format {
    /// The format named by the extension (ignoring case and a trailing `.gz`): `.csv` is CSV;
    /// `.svm`, `.libsvm` and `.txt` are LIBSVM.
    pub fn infer(path: &Path) -> Result<Format, DataError> {
        let name = lowercase_file_name(path);
        let name = name.strip_suffix(".gz").unwrap_or(&name);
        match name.rsplit_once('.').map(|(_, ext)| ext) {
            Some("csv") => Ok(Format::Csv),
            Some("svm" | "libsvm" | "txt") => Ok(Format::Libsvm),
            _ => Err(DataError::UnknownFormat {
                path: path.to_path_buf(),
            }),
        }
    }
}

impl FromStr for Format {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Format, DataError> {
        match s.to_ascii_lowercase().as_str() {
            "csv" => Ok(Format::Csv),
            "libsvm" | "svmlight" => Ok(Format::Libsvm),
            _ => Err(DataError::UnknownFormatName(s.to_owned())),
        }
    }
}

fn lowercase_file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default()
}

/// How to read a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// `None` infers the format from the extension ([`Format::infer`]).
    pub format: Option<Format>,
    /// CSV only: the header name of the label column.
    pub label_column: String,
    /// CSV only: a file without the label column reads as all-unlabeled (for scoring) instead
    /// of failing.
    pub label_optional: bool,
    /// CSV only: a column of string ids (not a feature). Without it the ids are the 0-based
    /// data-row numbers. LIBSVM files always use row numbers.
    pub id_column: Option<String>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            format: None,
            label_column: "label".to_owned(),
            label_optional: false,
            id_column: None,
        }
    }
}

/// Reads a labelled data file; a `.gz` extension means gzip (multi-member streams included).
///
/// CSV gives dense rows, LIBSVM gives CSR rows. Labels must be 1, -1 or 0 (`+1`, `1.0` and the
/// like are accepted). Blank lines are skipped; CSV follows RFC 4180 quoting.
pub fn read(path: &Path, opts: &ReadOptions) -> Result<Dataset, DataError> {
    let format = match opts.format {
        Some(format) => format,
        None => Format::infer(path)?,
    };
    match format {
        Format::Csv => read_csv(path, opts),
        Format::Libsvm => read_libsvm(path, &mut Lines::open(path)?),
    }
}

/// A reader that notes the byte offset of every line end it passes on, for line numbers in
/// errors; the CSV reader drops the offsets behind its current record, so only its read-ahead
/// is held.
struct NewlineOffsets<R> {
    inner: R,
    offset: u64,
    newlines: Rc<RefCell<VecDeque<u64>>>,
}

impl<R: io::Read> io::Read for NewlineOffsets<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut newlines = self.newlines.borrow_mut();
        for (i, _) in buf[..n].iter().enumerate().filter(|(_, b)| **b == b'\n') {
            newlines.push_back(self.offset + i as u64);
        }
        self.offset += n as u64;
        Ok(n)
    }
}

/// The file's bytes, gunzipped when its name ends in `.gz` (multi-member streams included,
/// because concatenated gzip files are valid gzip).
fn open_reader(path: &Path) -> Result<Box<dyn BufRead>, DataError> {
    let file = File::open(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(if lowercase_file_name(path).ends_with(".gz") {
        Box::new(BufReader::new(MultiGzDecoder::new(BufReader::new(file))))
    } else {
        Box::new(BufReader::new(file))
    })
}

/// Line-by-line reading into one reused buffer, counting lines.
struct Lines {
    reader: Box<dyn BufRead>,
    buf: Vec<u8>,
    number: usize,
}

impl Lines {
    fn open(path: &Path) -> Result<Lines, DataError> {
        Ok(Lines {
            reader: open_reader(path)?,
            buf: Vec::new(),
            number: 0,
        })
    }

    /// The next line's 1-based number and text without its line end; `None` at end of file.
    fn next(&mut self, path: &Path) -> Result<Option<(usize, &str)>, DataError> {
        self.buf.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| DataError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        if n == 0 {
            return Ok(None);
        }
        self.number += 1;
        let mut bytes = self.buf.as_slice();
        if self.number == 1 {
            // Spreadsheets often start CSV files with a byte-order mark.
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        let text = std::str::from_utf8(bytes).map_err(|_| DataError::NotUtf8 {
            path: path.to_path_buf(),
            line: self.number,
        })?;
        Ok(Some((self.number, text.trim_end_matches(['\n', '\r']))))
    }
}

/// CSV through the `csv` crate: RFC 4180 quoting (quoted headers and fields, as R and
/// spreadsheets write them, commas and line breaks inside quotes), fields trimmed, blank lines
/// skipped, a leading byte-order mark ignored. Errors name the line a record starts on.
fn read_csv(path: &Path, opts: &ReadOptions) -> Result<Dataset, DataError> {
    let newlines = Rc::new(RefCell::new(VecDeque::new()));
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(NewlineOffsets {
            inner: open_reader(path)?,
            offset: 0,
            newlines: Rc::clone(&newlines),
        });
    let mut record = csv::ByteRecord::new();
    // Line ends passed so far (the csv crate's own line count skips blank lines).
    let mut lines_before = 0usize;
    // The next non-blank record: its line and its fields as text.
    let mut next = |fields: &mut Vec<String>| -> Result<Option<usize>, DataError> {
        loop {
            let more = reader
                .read_byte_record(&mut record)
                .map_err(|e| DataError::Io {
                    path: path.to_path_buf(),
                    source: io::Error::other(e),
                })?;
            if !more {
                return Ok(None);
            }
            // The record ends where the reader stands now (after its line end, if any): its
            // first line is the lines ended before that, less its own end and the line breaks
            // quoted inside it.
            let end = reader.position().byte();
            let mut ends = newlines.borrow_mut();
            let mut terminated = false;
            while let Some(&at) = ends.front().filter(|&&at| at < end) {
                ends.pop_front();
                lines_before += 1;
                terminated = at + 1 == end;
            }
            drop(ends);
            let inner = record
                .iter()
                .map(|f| f.iter().filter(|b| **b == b'\n').count())
                .sum::<usize>();
            let line = (lines_before + 1).saturating_sub(usize::from(terminated) + inner);
            if record.iter().all(<[u8]>::is_empty) {
                continue;
            }
            fields.clear();
            for (i, field) in record.iter().enumerate() {
                let field = if line == 1 && i == 0 {
                    field.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(field)
                } else {
                    field
                };
                let text = std::str::from_utf8(field).map_err(|_| DataError::NotUtf8 {
                    path: path.to_path_buf(),
                    line,
                })?;
                fields.push(text.trim().to_owned());
            }
            return Ok(Some(line));
        }
    };
    let mut names = Vec::new();
    let Some(header_line) = next(&mut names)? else {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    };
    let find = |name: &str| -> Result<usize, DataError> {
        let mut at = names.iter().enumerate().filter(|(_, n)| *n == name);
        match (at.next(), at.next()) {
            (Some((first, _)), None) => Ok(first),
            (Some((first, _)), Some((second, _))) => Err(DataError::DuplicateColumn {
                path: path.to_path_buf(),
                line: header_line,
                name: name.to_owned(),
                first: first + 1,
                second: second + 1,
            }),
            (None, _) => Err(DataError::MissingColumn {
                path: path.to_path_buf(),
                line: header_line,
                name: name.to_owned(),
            }),
        }
    };
    let label_at = match find(&opts.label_column) {
        Ok(c) => Some(c),
        Err(DataError::MissingColumn { .. }) if opts.label_optional => None,
        Err(e) => return Err(e),
    };
    let id_at = opts.id_column.as_deref().map(find).transpose()?;
    let n_features = (0..names.len())
        .filter(|&c| Some(c) != label_at && Some(c) != id_at)
        .count();

    let mut values = Vec::new();
    let mut labels = Vec::new();
    let mut ids = Vec::new();
    let mut first_line_of_id: HashMap<String, usize> = HashMap::new();
    let mut fields = Vec::new();
    while let Some(line) = next(&mut fields)? {
        if fields.len() != names.len() {
            return Err(DataError::Ragged {
                path: path.to_path_buf(),
                line,
                expected: names.len(),
                found: fields.len(),
            });
        }
        let row = labels.len();
        if label_at.is_none() {
            labels.push(Label::Unlabeled);
        }
        for (c, field) in fields.iter().enumerate() {
            let field = field.as_str();
            if Some(c) == label_at {
                labels.push(parse_label(path, line, c + 1, field)?);
            }
            if Some(c) == id_at {
                match first_line_of_id.entry(field.to_owned()) {
                    Entry::Occupied(first) => {
                        return Err(DataError::DuplicateId {
                            path: path.to_path_buf(),
                            line,
                            first_line: *first.get(),
                            id: field.to_owned(),
                        })
                    }
                    Entry::Vacant(slot) => {
                        slot.insert(line);
                    }
                }
                ids.push(field.to_owned());
            }
            if Some(c) != label_at && Some(c) != id_at {
                values.push(parse_value(path, line, c + 1, Some(&names[c]), field)?);
            }
        }
        if id_at.is_none() {
            ids.push(row.to_string());
        }
    }
    if labels.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    let matrix = Array2::from_shape_vec((labels.len(), n_features), values)
        .expect("every accepted row pushed exactly n_features values");
    Ok(Dataset {
        rows: Rows::dense(matrix),
        labels,
        ids,
    })
}

fn read_libsvm(path: &Path, lines: &mut Lines) -> Result<Dataset, DataError> {
    // The feature count is only known at the end, so rows go into the widest index space first.
    let mut csr = CsrMatrix::new(u32::MAX as usize);
    let mut n_features = 0usize;
    let mut labels = Vec::new();
    let (mut indices, mut values) = (Vec::new(), Vec::new());
    while let Some((line, text)) = lines.next(path)? {
        let data = text.split_once('#').map_or(text, |(data, _comment)| data);
        let mut tokens = data.split_whitespace();
        let Some(label) = tokens.next() else {
            continue;
        };
        labels.push(parse_label(path, line, 1, label)?);
        indices.clear();
        values.clear();
        for (t, token) in tokens.enumerate() {
            let column = t + 2;
            if token.starts_with("qid:") {
                return Err(DataError::QidUnsupported {
                    path: path.to_path_buf(),
                    line,
                    column,
                });
            }
            let malformed = || DataError::MalformedPair {
                path: path.to_path_buf(),
                line,
                column,
                token: token.to_owned(),
            };
            let (index, value) = token.split_once(':').ok_or_else(malformed)?;
            let index: u32 = index.parse().map_err(|_| malformed())?;
            if index == 0 {
                return Err(DataError::ZeroIndex {
                    path: path.to_path_buf(),
                    line,
                    column,
                    token: token.to_owned(),
                });
            }
            if let Some(&previous) = indices.last() {
                if index - 1 <= previous {
                    return Err(DataError::IndexOutOfOrder {
                        path: path.to_path_buf(),
                        line,
                        column,
                        index,
                        previous: previous + 1,
                    });
                }
            }
            values.push(parse_value(path, line, column, None, value)?);
            indices.push(index - 1);
            n_features = n_features.max(index as usize);
        }
        csr.push_row(&indices, &values)
            .expect("indices were checked to increase and are below u32::MAX");
    }
    if labels.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    csr.set_n_features(n_features);
    Ok(Dataset {
        rows: Rows::Sparse(csr),
        ids: (0..labels.len()).map(|i| i.to_string()).collect(),
        labels,
    })
}

fn parse_label(path: &Path, line: usize, column: usize, text: &str) -> Result<Label, DataError> {
    match text.parse::<f64>() {
        Ok(1.0) => Ok(Label::Positive),
        Ok(-1.0) => Ok(Label::Negative),
        Ok(0.0) => Ok(Label::Unlabeled),
        _ => Err(DataError::UnknownLabel {
            path: path.to_path_buf(),
            line,
            column,
            value: text.to_owned(),
        }),
    }
}

fn parse_value(
    path: &Path,
    line: usize,
    column: usize,
    name: Option<&str>,
    text: &str,
) -> Result<f64, DataError> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(DataError::NonFinite {
            path: path.to_path_buf(),
            line,
            column,
            name: name.map(str::to_owned),
            value: text.to_owned(),
        }),
        Err(_) => Err(DataError::NotANumber {
            path: path.to_path_buf(),
            line,
            column,
            name: name.map(str::to_owned),
            value: text.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::RowRef;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;
    use tempfile::TempDir;

    fn write(dir: &TempDir, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn csv_with_ids() -> ReadOptions {
        ReadOptions {
            id_column: Some("id".to_owned()),
            ..ReadOptions::default()
        }
    }

    /// The error message for reading `text` from a file called `name`, with the path replaced
    /// by `P` so expectations stay short.
    fn error(name: &str, text: &[u8], opts: &ReadOptions) -> String {
        let dir = TempDir::new().unwrap();
        let path = write(&dir, name, text);
        let err = read(&path, opts).unwrap_err().to_string();
        err.replace(&path.display().to_string(), "P")
    }

    fn sparse_row(rows: &Rows, i: usize) -> (Vec<u32>, Vec<f64>) {
        match rows.row(i) {
            RowRef::Sparse { indices, values } => (indices.to_vec(), values.to_vec()),
            RowRef::Dense(_) => panic!("expected sparse rows"),
        }
    }

    #[test]
    fn csv_reads_dense_rows_with_row_number_ids() {
        let dir = TempDir::new().unwrap();
        let text = "a, label ,b\n1,1,2.5\n\n-3, -1 , 4\r\n0,0.0,0\n";
        let data = read(
            &write(&dir, "x.csv", text.as_bytes()),
            &ReadOptions::default(),
        )
        .unwrap();
        assert_eq!(
            data.rows,
            Rows::dense(ndarray::array![[1.0, 2.5], [-3.0, 4.0], [0.0, 0.0]])
        );
        assert_eq!(
            data.labels,
            [Label::Positive, Label::Negative, Label::Unlabeled]
        );
        assert_eq!(data.ids, ["0", "1", "2"]);
    }

    #[test]
    fn csv_reads_an_id_column_and_label_spellings() {
        let dir = TempDir::new().unwrap();
        let text = "\u{feff}x,id,y,label\n1,r1,2,+1\n3,r2,4,1.0\n5,r3,6,-1.0\n7,r4,8,0.0\n";
        let path = write(&dir, "x.csv", text.as_bytes());
        let data = read(&path, &csv_with_ids()).unwrap();
        assert_eq!(
            data.rows,
            Rows::dense(ndarray::array![
                [1.0, 2.0],
                [3.0, 4.0],
                [5.0, 6.0],
                [7.0, 8.0]
            ])
        );
        use Label::*;
        assert_eq!(data.labels, [Positive, Positive, Negative, Unlabeled]);
        assert_eq!(data.ids, ["r1", "r2", "r3", "r4"]);
    }

    #[test]
    fn csv_label_column_can_be_renamed() {
        let dir = TempDir::new().unwrap();
        let path = write(&dir, "x.csv", b"y,f\n-1,0.5\n");
        let opts = ReadOptions {
            label_column: "y".to_owned(),
            ..ReadOptions::default()
        };
        let data = read(&path, &opts).unwrap();
        assert_eq!(data.rows, Rows::dense(ndarray::array![[0.5]]));
        assert_eq!(data.labels, [Label::Negative]);
    }

    #[test]
    fn gzip_files_read_like_plain_ones_even_multi_member() {
        let dir = TempDir::new().unwrap();
        let (head, tail) = ("a,label\n1,1\n", "2,-1\n");
        let plain = write(&dir, "x.csv", format!("{head}{tail}").as_bytes());
        let mut members = gzip(head.as_bytes());
        members.extend(gzip(tail.as_bytes()));
        let packed = write(&dir, "x.CSV.GZ", &members);
        let opts = ReadOptions::default();
        assert_eq!(read(&packed, &opts).unwrap(), read(&plain, &opts).unwrap());
        assert_eq!(read(&packed, &opts).unwrap().len(), 2);

        let svm = write(&dir, "x.svm.gz", &gzip(b"1 2:3\n"));
        let data = read(&svm, &opts).unwrap();
        assert_eq!(sparse_row(&data.rows, 0), (vec![1], vec![3.0]));
    }

    #[test]
    fn libsvm_reads_into_csr() {
        let dir = TempDir::new().unwrap();
        let text = "+1 1:0.5 3:2 # first\n\n# a comment line\n-1\t2:-1e-3  \n0\n1.0 4:7#tight\n";
        let data = read(
            &write(&dir, "x.libsvm", text.as_bytes()),
            &ReadOptions::default(),
        );
        let data = data.unwrap();
        assert!(data.rows.is_sparse());
        assert_eq!(data.rows.n_rows(), 4);
        assert_eq!(data.rows.n_features(), 4);
        assert_eq!(sparse_row(&data.rows, 0), (vec![0, 2], vec![0.5, 2.0]));
        assert_eq!(sparse_row(&data.rows, 1), (vec![1], vec![-1e-3]));
        assert_eq!(sparse_row(&data.rows, 2), (vec![], vec![]));
        assert_eq!(sparse_row(&data.rows, 3), (vec![3], vec![7.0]));
        use Label::*;
        assert_eq!(data.labels, [Positive, Negative, Unlabeled, Positive]);
        assert_eq!(data.ids, ["0", "1", "2", "3"]);
    }

    #[test]
    fn explicit_format_overrides_the_extension() {
        let dir = TempDir::new().unwrap();
        let path = write(&dir, "data.dat", b"-1 5:1\n");
        let opts = ReadOptions {
            format: Some(Format::Libsvm),
            ..ReadOptions::default()
        };
        assert_eq!(read(&path, &opts).unwrap().rows.n_features(), 5);
    }

    #[test]
    fn format_is_inferred_from_the_extension() {
        let infer = |name: &str| Format::infer(Path::new(name)).ok();
        assert_eq!(infer("a/b.csv"), Some(Format::Csv));
        assert_eq!(infer("b.csv.gz"), Some(Format::Csv));
        assert_eq!(infer("B.CSV"), Some(Format::Csv));
        for name in [
            "b.svm",
            "b.libsvm",
            "b.txt",
            "b.svm.gz",
            "b.libsvm.gz",
            "b.txt.gz",
        ] {
            assert_eq!(infer(name), Some(Format::Libsvm), "{name}");
        }
        for name in ["b.dat", "b.gz", "b", "b.csv.bz2", "csv"] {
            assert_eq!(infer(name), None, "{name}");
        }
        assert_eq!(
            Format::infer(Path::new("d/x.arff"))
                .unwrap_err()
                .to_string(),
            "cannot infer the format of d/x.arff from its extension; pass --format csv|libsvm"
        );
        assert_eq!("LIBSVM".parse::<Format>().ok(), Some(Format::Libsvm));
        assert_eq!("csv".parse::<Format>().ok(), Some(Format::Csv));
        assert_eq!(
            "arff".parse::<Format>().unwrap_err().to_string(),
            "unknown format \"arff\"; expected csv or libsvm"
        );
    }

    #[test]
    fn csv_errors_name_file_line_and_column() {
        let default = ReadOptions::default();
        let cases: [(&[u8], &ReadOptions, &str); 14] = [
            (
                b"a,b,label\n1,2,1\n3,abc,1\n",
                &default,
                r#"P:3:2: "abc" is not a number (column "b")"#,
            ),
            (
                b"a,b,label\n1,,1\n",
                &default,
                r#"P:2:2: "" is not a number (column "b")"#,
            ),
            (
                b"a,b,label\n1,2,1\n1,1\n",
                &default,
                "P:3: expected 3 fields, found 2",
            ),
            (
                b"a,b,label\n1,2,1,4\n",
                &default,
                "P:2: expected 3 fields, found 4",
            ),
            (
                b"a,label\nNaN,1\n",
                &default,
                r#"P:2:1: "NaN" is not finite (column "a")"#,
            ),
            (
                b"label,a\n1,-inf\n",
                &default,
                r#"P:2:2: "-inf" is not finite (column "a")"#,
            ),
            (
                b"a,label\n1e400,1\n",
                &default,
                r#"P:2:1: "1e400" is not finite (column "a")"#,
            ),
            (
                b"a,label\n1,2\n",
                &default,
                r#"P:2:2: unknown label "2" (expected 1, -1 or 0)"#,
            ),
            (
                b"a,label\n1,yes\n",
                &default,
                r#"P:2:2: unknown label "yes" (expected 1, -1 or 0)"#,
            ),
            (b"", &default, "P: no data rows"),
            (b"\na,label\n\n", &default, "P: no data rows"),
            (
                b"\na,class\n1,1\n",
                &default,
                r#"P:2: the header has no column named "label""#,
            ),
            (
                b"a,label,label\n1,1,1\n",
                &default,
                r#"P:1: column "label" appears twice in the header (columns 2 and 3)"#,
            ),
            (
                b"a,label\n\xff,1\n",
                &default,
                "P:2: the line is not valid UTF-8",
            ),
        ];
        for (text, opts, want) in cases {
            assert_eq!(error("x.csv", text, opts), want);
        }
    }

    /// Issue 22: CSV as R's `write.csv` and spreadsheets write it — quoted header names and
    /// fields, a comma or a line break inside quotes, CRLF line ends, a byte-order mark — and
    /// errors still name the line a record starts on.
    #[test]
    fn csv_reads_rfc_4180_quoting() {
        let dir = TempDir::new().unwrap();
        let text =
            "\u{feff}\"id\",\"a\",\"label\"\r\n\"x,1\",\"0.5\",1\r\n\r\n\"y\n2\",-2,\"-1\"\r\n";
        let path = write(&dir, "r.csv", text.as_bytes());
        let data = read(&path, &csv_with_ids()).unwrap();
        assert_eq!(data.ids, ["x,1", "y\n2"]);
        assert_eq!(data.labels, [Label::Positive, Label::Negative]);
        let Rows::Dense(m) = &data.rows else {
            panic!("dense rows")
        };
        assert_eq!(m.as_slice().expect("contiguous"), &[0.5, -2.0]);
        // A record after a quoted line break and a blank line: its own line in the error.
        let bad = "\"id\",\"a\",\"label\"\n\"p\nq\",1,1\n\n\"r\",zz,1\n";
        assert_eq!(
            error("x.csv", bad.as_bytes(), &csv_with_ids()),
            r#"P:5:2: "zz" is not a number (column "a")"#
        );
    }

    #[test]
    fn csv_id_errors() {
        assert_eq!(
            error("x.csv", b"id,label\na,1\nb,1\n\na,-1\n", &csv_with_ids()),
            r#"P:5: duplicate id "a" (first on line 2)"#
        );
        assert_eq!(
            error("x.csv", b"name,label\na,1\n", &csv_with_ids()),
            r#"P:1: the header has no column named "id""#
        );
    }

    #[test]
    fn libsvm_errors_name_file_line_and_token() {
        let default = ReadOptions::default();
        let cases: [(&[u8], &str); 12] = [
            (
                b"1 1:1\n1 3:1 2:1\n",
                "P:2:3: index 2 out of order after 3; indices must increase",
            ),
            (
                b"1 2:1 2:5\n",
                "P:1:3: index 2 out of order after 2; indices must increase",
            ),
            (
                b"1 0:1\n",
                r#"P:1:2: index 0 in "0:1"; LIBSVM indices start at 1"#,
            ),
            (b"1 abc\n", r#"P:1:2: malformed idx:val pair "abc""#),
            (b"1 x:1\n", r#"P:1:2: malformed idx:val pair "x:1""#),
            (b"1 -2:1\n", r#"P:1:2: malformed idx:val pair "-2:1""#),
            (
                b"1 4294967296:1\n",
                r#"P:1:2: malformed idx:val pair "4294967296:1""#,
            ),
            (b"1 1:2 3:abc\n", r#"P:1:3: "abc" is not a number"#),
            (b"-1 1:nan\n", r#"P:1:2: "nan" is not finite"#),
            (
                b"# c\n1 qid:3 1:1\n",
                "P:2:2: qid: tokens (ranking query ids) are not supported",
            ),
            (
                b"2 1:1\n",
                r#"P:1:1: unknown label "2" (expected 1, -1 or 0)"#,
            ),
            (b"# only a comment\n\n", "P: no data rows"),
        ];
        for (text, want) in cases {
            assert_eq!(error("x.svm", text, &default), want);
        }
    }

    #[test]
    fn missing_file_is_an_io_error_naming_the_path() {
        let err = read(Path::new("no/such/file.csv"), &ReadOptions::default()).unwrap_err();
        assert!(matches!(err, DataError::Io { .. }));
        assert!(
            err.to_string()
                .starts_with("cannot read no/such/file.csv: "),
            "{err}"
        );
    }

    #[test]
    fn heart_statlog_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/heart_statlog.csv");
        let data = read(&path, &ReadOptions::default()).unwrap();
        assert_eq!((data.rows.n_rows(), data.rows.n_features()), (270, 13));
        assert_eq!(data.count(Label::Positive), 120);
        assert_eq!(data.count(Label::Negative), 150);
        let first = [
            70.0, 1.0, 4.0, 130.0, 322.0, 0.0, 2.0, 109.0, 0.0, 2.4, 2.0, 3.0, 3.0,
        ];
        assert_eq!(data.rows.as_dense().unwrap().row(0).to_vec(), first);
        assert_eq!(data.labels[0], Label::Positive);
        assert_eq!(data.ids[269], "269");
    }

    #[test]
    fn shipped_data_files_read_with_their_documented_shapes() {
        let cases = [
            ("pima_diabetes.csv", 768, 8, 268),
            ("ionosphere.csv", 351, 34, 225),
            ("sonar.csv", 208, 60, 111),
            ("breast_cancer_wisconsin.csv", 683, 9, 239),
            ("spambase.csv.gz", 4601, 57, 1813),
            ("shuttle_anomaly.csv.gz", 49097, 9, 3511),
            ("magic_gamma.csv.gz", 19020, 10, 12332),
            ("noaa_weather.csv.gz", 18159, 8, 5698),
        ];
        for (name, n_rows, n_features, positives) in cases {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("data")
                .join(name);
            let data = read(&path, &ReadOptions::default()).unwrap();
            assert_eq!(data.rows.n_rows(), n_rows, "{name}");
            assert_eq!(data.rows.n_features(), n_features, "{name}");
            assert_eq!(data.count(Label::Positive), positives, "{name}");
            assert_eq!(data.count(Label::Unlabeled), 0, "{name}");
        }
    }
}
