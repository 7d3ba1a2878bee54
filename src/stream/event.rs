//! One event as it arrives on a stream channel, and the intake validation that turns a raw
//! message into an [`Event`] or a [`Rejection`].
//!
//! The wire form (JSON, documented in `docs/event.schema.json` and the README):
//!
//! ```json
//! {"id": "abc", "ts": 1767225600000, "x": [0.5, 0.0, 2.0], "meta": {"label": 1}}
//! {"id": "abc", "ts": 1767225600000, "x": {"indices": [0, 2], "values": [0.5, 2.0], "dim": 3}}
//! ```
//!
//! The channel (positive, unlabeled, negative) is *not* part of the payload: it is where the
//! message arrived (a topic, or a record's `channel`), so a producer cannot relabel an event by
//! editing it. A rejected message is never dropped silently: its [`Rejection`] carries a stable
//! [`RejectReason`] that names the dead-letter record and the metric label.
//!
//! The common event (`id`, `ts`, dense `x`, an object `meta`) is read by a one-pass scanner
//! (`scan`) where it reads exactly as serde_json does; everything else takes the serde paths.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::data::rows::CsrError;
use crate::data::{CsrMatrix, Rows};

mod scan;

/// The payload fields an event must have; `docs/event.schema.json` lists the same (tested).
pub const REQUIRED_FIELDS: [&str; 3] = ["id", "ts", "x"];

/// Size limits checked at intake, before any parsing work is spent on a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLimits {
    /// The largest accepted message, in bytes of the payload as received.
    pub max_bytes: usize,
    /// The longest accepted id, in bytes (ids are stored in every window and score).
    pub max_id_len: usize,
    /// The largest accepted feature count (a sparse event's `dim`, a dense event's length):
    /// the dimension sizes every retrain's allocations, so no event may set it unchecked.
    pub max_features: usize,
}

impl Default for EventLimits {
    /// 1 MiB messages (about Kafka's default `message.max.bytes`), 256-byte ids and 2²⁴
    /// features (hashed text features use 2¹⁸–2²⁴).
    fn default() -> Self {
        EventLimits {
            max_bytes: 1 << 20,
            max_id_len: 256,
            max_features: 1 << 24,
        }
    }
}

/// An event's feature vector, as sent: dense, or sparse with strictly increasing indices.
#[derive(Debug, Clone, PartialEq)]
pub enum Features {
    Dense(Vec<f64>),
    /// `dim` is the feature count: the event's own `dim` field, or the locked dimension when
    /// the event did not say.
    Sparse {
        dim: usize,
        indices: Vec<u32>,
        values: Vec<f64>,
    },
}

impl Features {
    /// The feature count.
    pub fn dim(&self) -> usize {
        match self {
            Features::Dense(x) => x.len(),
            Features::Sparse { dim, .. } => *dim,
        }
    }

    /// Heap bytes held by the values (and indices), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Features::Dense(x) => std::mem::size_of_val(x.as_slice()),
            Features::Sparse {
                indices, values, ..
            } => {
                std::mem::size_of_val(indices.as_slice()) + std::mem::size_of_val(values.as_slice())
            }
        }
    }
}

/// Stacks feature vectors (each of dimension `n_features`, which the caller checked) into
/// rows: dense when every one is dense, else CSR (dense vectors keep their non-zeros), so a
/// mostly sparse high-dimensional stream never densifies.
pub fn features_to_rows<'a>(
    features: impl Iterator<Item = &'a Features> + Clone,
    n_features: usize,
) -> Result<Rows, CsrError> {
    if features.clone().all(|x| matches!(x, Features::Dense(_))) {
        // Sized up front: grown by doubling, the copies were 1 % of a replay's retrains.
        let mut flat = Vec::with_capacity(features.clone().count() * n_features);
        let mut n = 0;
        for x in features {
            if let Features::Dense(x) = x {
                flat.extend_from_slice(x);
                n += 1;
            }
        }
        let matrix =
            ndarray::Array2::from_shape_vec((n, n_features), flat).map_err(|_| CsrError::Shape)?;
        return Ok(Rows::dense(matrix));
    }
    let mut csr = CsrMatrix::new(n_features);
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    for x in features {
        idx.clear();
        val.clear();
        match x {
            Features::Dense(x) => {
                for (j, &v) in x.iter().enumerate().filter(|(_, v)| **v != 0.0) {
                    idx.push(j as u32);
                    val.push(v);
                }
            }
            Features::Sparse {
                indices, values, ..
            } => {
                idx.extend_from_slice(indices);
                val.extend_from_slice(values);
            }
        }
        csr.push_row(&idx, &val)?;
    }
    Ok(Rows::Sparse(csr))
}

/// A validated event: every check of [`parse_event`] passed.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    /// Event time, epoch milliseconds, as the producer stamped it.
    pub ts: i64,
    pub x: Features,
    /// Opaque to neyman: never a feature or a label, only copied into the event's score
    /// (useful for offline checks, e.g. the true label of a generated stream).
    pub meta: Option<Map<String, Value>>,
}

/// Why a message was rejected at intake. The snake_case names are a contract: they are the
/// dead-letter records' `reason` and the value of the rejection metric's `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// The payload is longer than [`EventLimits::max_bytes`].
    TooLarge,
    /// The payload is not UTF-8.
    InvalidUtf8,
    /// The payload is not JSON, or not a JSON object, or repeats a field.
    InvalidJson,
    /// No `id` (or `"id": null`).
    MissingId,
    /// `id` is not a string, is empty, or is longer than [`EventLimits::max_id_len`].
    InvalidId,
    /// No `ts` (or `"ts": null`).
    MissingTs,
    /// `ts` is not a non-negative integer (epoch milliseconds) that fits in 64 bits.
    InvalidTs,
    /// `ts` is further ahead of the newest event time and the wall clock than
    /// `windows.max_future` (judged by the engine, which keeps the clock).
    TsOutOfRange,
    /// No `x` (or `"x": null`).
    MissingFeatures,
    /// `x` is neither an array of numbers nor a sparse object, or is an empty array.
    InvalidFeatures,
    /// A sparse `x` with missing or unknown keys, `indices` and `values` of different lengths,
    /// indices not strictly increasing or not below the dimension, or `dim` 0.
    InvalidSparse,
    /// The feature count differs from the locked dimension (the model's or the first event's).
    DimensionMismatch,
    /// A sparse event without `dim` while no dimension is locked yet.
    DimensionUnknown,
    /// The feature count (a sparse `dim` or a dense length) is above
    /// [`EventLimits::max_features`].
    DimensionTooLarge,
    /// A feature value outside the f64 range (JSON has no NaN or infinity literals, so this is
    /// a number too large to represent).
    NonFinite,
    /// `meta` is present but not a JSON object.
    InvalidMeta,
    /// A line of a recorded stream that is not a record (malformed, or not UTF-8): dead-
    /// lettered with its file and line by `replay`, which goes on with the next line.
    InvalidRecord,
}

impl RejectReason {
    /// Every reason, in declaration order (for metrics registration and docs).
    pub const ALL: [RejectReason; 17] = [
        RejectReason::TooLarge,
        RejectReason::InvalidUtf8,
        RejectReason::InvalidJson,
        RejectReason::MissingId,
        RejectReason::InvalidId,
        RejectReason::MissingTs,
        RejectReason::InvalidTs,
        RejectReason::TsOutOfRange,
        RejectReason::MissingFeatures,
        RejectReason::InvalidFeatures,
        RejectReason::InvalidSparse,
        RejectReason::DimensionMismatch,
        RejectReason::DimensionUnknown,
        RejectReason::DimensionTooLarge,
        RejectReason::NonFinite,
        RejectReason::InvalidMeta,
        RejectReason::InvalidRecord,
    ];

    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::TooLarge => "too_large",
            RejectReason::InvalidUtf8 => "invalid_utf8",
            RejectReason::InvalidJson => "invalid_json",
            RejectReason::MissingId => "missing_id",
            RejectReason::InvalidId => "invalid_id",
            RejectReason::MissingTs => "missing_ts",
            RejectReason::InvalidTs => "invalid_ts",
            RejectReason::TsOutOfRange => "ts_out_of_range",
            RejectReason::MissingFeatures => "missing_features",
            RejectReason::InvalidFeatures => "invalid_features",
            RejectReason::InvalidSparse => "invalid_sparse",
            RejectReason::DimensionMismatch => "dimension_mismatch",
            RejectReason::DimensionUnknown => "dimension_unknown",
            RejectReason::DimensionTooLarge => "dimension_too_large",
            RejectReason::NonFinite => "non_finite",
            RejectReason::InvalidMeta => "invalid_meta",
            RejectReason::InvalidRecord => "invalid_record",
        }
    }
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A message that failed intake validation: the stable reason and a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct Rejection {
    pub reason: RejectReason,
    pub detail: String,
}

fn reject(reason: RejectReason, detail: impl Into<String>) -> Rejection {
    Rejection {
        reason,
        detail: detail.into(),
    }
}

/// The top-level fields, each kept raw so that every field gets its own rejection reason.
/// Unknown fields are ignored (producers may add their own); a repeated field is an error.
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ts: Option<&'a RawValue>,
    #[serde(borrow, default)]
    x: Option<&'a RawValue>,
    #[serde(borrow, default)]
    meta: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSparse {
    indices: Vec<u32>,
    values: Vec<f64>,
    #[serde(default)]
    dim: Option<usize>,
}

/// serde_json reports a number beyond the f64 range with this message; it is the only way a
/// JSON number can be non-finite. Pinned by a test, so a wording change in serde_json fails
/// loudly instead of silently turning `non_finite` into another reason.
fn is_out_of_range(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("number out of range")
}

/// Validates one message and returns the event, or the first check it fails.
///
/// `expected_dim` is the locked feature dimension (the loaded model's, or the first valid
/// event's); `None` before anything is locked, and then a dense event's length or a sparse
/// event's `dim` is taken as is. Checks run in this order: size, UTF-8, JSON object, id, ts,
/// `x` shape, sparse structure, dimension, index range, finite values, meta; except that a
/// number beyond the f64 range is found while `x` is read, so it is `non_finite` whatever the
/// dimension.
pub fn parse_event(
    payload: &[u8],
    expected_dim: Option<usize>,
    limits: &EventLimits,
) -> Result<Event, Rejection> {
    parse_event_with(payload, expected_dim, limits, true).map(|(event, _)| event)
}

/// [`parse_event`] with `ts` optional when `ts_required` is false: `POST /v1/score` takes
/// events without a time (scoring needs none, and an ad-hoc caller has none to give). Returns
/// the event and whether `ts` was given; without it the event's `ts` is 0, a placeholder the
/// caller must not use as a time (the score object then carries a null `ts`). A `ts` that is
/// present is validated exactly as in [`parse_event`], and `"ts": null` counts as absent.
pub fn parse_event_with(
    payload: &[u8],
    expected_dim: Option<usize>,
    limits: &EventLimits,
    ts_required: bool,
) -> Result<(Event, bool), Rejection> {
    use RejectReason::*;

    if payload.len() > limits.max_bytes {
        return Err(reject(
            TooLarge,
            format!("{} bytes, the limit is {}", payload.len(), limits.max_bytes),
        ));
    }
    // An event the scanner takes passes every check (its UTF-8 included: outside the id,
    // which it validates, it accepts nothing but ASCII), so the order above is kept.
    if let Some(event) = scan_dense_event(payload, expected_dim, limits) {
        return Ok((event, true));
    }
    let text = std::str::from_utf8(payload).map_err(|e| reject(InvalidUtf8, e.to_string()))?;
    if !text.trim_start().starts_with('{') {
        return Err(reject(InvalidJson, "not a JSON object"));
    }
    if let Some(event) = parse_dense_event(text, expected_dim, limits) {
        return Ok((event, true));
    }
    parse_fields(text, expected_dim, limits, ts_required)
}

/// A dense event with every required field present, as [`parse_dense_event`] reads it.
#[derive(Deserialize)]
struct DenseEvent {
    id: String,
    ts: i64,
    #[serde(deserialize_with = "exact_f64s")]
    x: Vec<f64>,
    #[serde(default)]
    meta: Option<Map<String, Value>>,
}

thread_local! {
    static FEATURE_SCRATCH: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `x` of the one-pass parse: the numbers go to a reused buffer, then into a vector of exactly
/// their count. Grown one push at a time, 12 features took three reallocations and kept room
/// for 16 in every window entry.
fn exact_f64s<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<f64>, D::Error> {
    struct Exact;
    impl<'de> serde::de::Visitor<'de> for Exact {
        type Value = Vec<f64>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array of numbers")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<f64>, A::Error> {
            FEATURE_SCRATCH.with(|cell| {
                let mut own = Vec::new();
                let mut shared = cell.try_borrow_mut().ok();
                let buffer = shared.as_deref_mut().unwrap_or(&mut own);
                buffer.clear();
                while let Some(v) = seq.next_element::<f64>()? {
                    buffer.push(v);
                }
                Ok(buffer.to_vec())
            })
        }
    }
    deserializer.deserialize_seq(Exact)
}

/// The common case in one pass: a dense event whose fields all parse and pass every check.
/// Anything else (sparse features, a missing `ts`, every rejection) goes through
/// [`parse_fields`], which names the reason. For a payload this accepts, both give the same
/// event (property-tested): the field types are the ones [`parse_fields`] reads each field
/// as, and the checks are its checks.
fn parse_dense_event(
    text: &str,
    expected_dim: Option<usize>,
    limits: &EventLimits,
) -> Option<Event> {
    let e: DenseEvent = serde_json::from_str(text).ok()?;
    passes_checks(&e.id, e.ts, &e.x, expected_dim, limits).then_some(Event {
        id: e.id,
        ts: e.ts,
        x: Features::Dense(e.x),
        meta: e.meta,
    })
}

/// The common event read by [`scan::scan`], with the same checks as
/// [`parse_dense_event`]; `None` for anything else, which then takes the serde paths.
fn scan_dense_event(
    payload: &[u8],
    expected_dim: Option<usize>,
    limits: &EventLimits,
) -> Option<Event> {
    let e = scan::scan(payload, expected_dim)?;
    passes_checks(e.id, e.ts, &e.x, expected_dim, limits).then(|| Event {
        id: e.id.to_owned(),
        ts: e.ts,
        x: Features::Dense(e.x),
        meta: e.meta,
    })
}

/// [`parse_fields`]' checks of a dense event's fields, for the one-pass paths.
fn passes_checks(
    id: &str,
    ts: i64,
    x: &[f64],
    expected_dim: Option<usize>,
    limits: &EventLimits,
) -> bool {
    !id.is_empty()
        && id.len() <= limits.max_id_len
        && ts >= 0
        && !x.is_empty()
        && x.len() <= limits.max_features
        && expected_dim.map_or(true, |d| d == x.len())
        && x.iter().all(|v| v.is_finite())
}

/// Field by field, each kept raw first, so that every field gets its own rejection reason.
/// `text` is a UTF-8 payload within the size limit that starts with `{`.
fn parse_fields(
    text: &str,
    expected_dim: Option<usize>,
    limits: &EventLimits,
    ts_required: bool,
) -> Result<(Event, bool), Rejection> {
    use RejectReason::*;

    let raw: RawEvent<'_> =
        serde_json::from_str(text).map_err(|e| reject(InvalidJson, e.to_string()))?;

    let id = raw.id.ok_or_else(|| reject(MissingId, "no \"id\""))?;
    let id: String = serde_json::from_str(id.get())
        .map_err(|_| reject(InvalidId, format!("{} is not a string", clip(id.get()))))?;
    if id.is_empty() {
        return Err(reject(InvalidId, "empty id"));
    }
    if id.len() > limits.max_id_len {
        return Err(reject(
            InvalidId,
            format!(
                "the id has {} bytes, the limit is {}",
                id.len(),
                limits.max_id_len
            ),
        ));
    }

    let (ts, ts_given) = match raw.ts {
        Some(ts) => {
            let parsed = match serde_json::from_str::<Value>(ts.get()) {
                Ok(Value::Number(n)) => n.as_i64().filter(|&t| t >= 0),
                _ => None,
            };
            let ts = parsed.ok_or_else(|| {
                reject(
                    InvalidTs,
                    format!(
                        "{} is not a non-negative integer (epoch ms)",
                        clip(ts.get())
                    ),
                )
            })?;
            (ts, true)
        }
        None if ts_required => return Err(reject(MissingTs, "no \"ts\"")),
        None => (0, false),
    };

    let x = raw.x.ok_or_else(|| reject(MissingFeatures, "no \"x\""))?;
    let x = parse_features(x.get(), expected_dim, limits.max_features)?;

    let meta = match raw.meta {
        None => None,
        Some(m) => Some(
            serde_json::from_str::<Map<String, Value>>(m.get())
                .map_err(|e| reject(InvalidMeta, format!("not a JSON object: {e}")))?,
        ),
    };
    Ok((Event { id, ts, x, meta }, ts_given))
}

fn parse_features(
    x: &str,
    expected_dim: Option<usize>,
    max_features: usize,
) -> Result<Features, Rejection> {
    use RejectReason::*;

    let too_large = |got: usize| {
        reject(
            DimensionTooLarge,
            format!("{got} features, the limit (scoring.max_features) is {max_features}"),
        )
    };
    let mismatch = |got: usize, want: usize| {
        reject(
            DimensionMismatch,
            format!("{got} features, the locked dimension is {want}"),
        )
    };
    if x.starts_with('[') {
        let values: Vec<f64> = serde_json::from_str(x).map_err(|e| {
            if is_out_of_range(&e) {
                reject(NonFinite, e.to_string())
            } else {
                reject(InvalidFeatures, format!("not an array of numbers: {e}"))
            }
        })?;
        if values.is_empty() {
            return Err(reject(InvalidFeatures, "empty feature vector"));
        }
        if values.len() > max_features {
            return Err(too_large(values.len()));
        }
        if let Some(want) = expected_dim.filter(|&d| d != values.len()) {
            return Err(mismatch(values.len(), want));
        }
        // serde_json never yields a non-finite f64; kept so the invariant is local.
        if let Some(j) = values.iter().position(|v| !v.is_finite()) {
            return Err(reject(NonFinite, format!("feature {j} is not finite")));
        }
        return Ok(Features::Dense(values));
    }
    if !x.starts_with('{') {
        return Err(reject(
            InvalidFeatures,
            format!("{} is neither an array nor a sparse object", clip(x)),
        ));
    }
    let sparse: RawSparse = serde_json::from_str(x).map_err(|e| {
        if is_out_of_range(&e) {
            reject(NonFinite, e.to_string())
        } else {
            reject(InvalidSparse, e.to_string())
        }
    })?;
    if sparse.indices.len() != sparse.values.len() {
        return Err(reject(
            InvalidSparse,
            format!(
                "{} indices but {} values",
                sparse.indices.len(),
                sparse.values.len()
            ),
        ));
    }
    if let Some(k) = sparse.indices.windows(2).position(|w| w[0] >= w[1]) {
        return Err(reject(
            InvalidSparse,
            format!(
                "indices not strictly increasing at position {}: {} then {}",
                k + 1,
                sparse.indices[k],
                sparse.indices[k + 1]
            ),
        ));
    }
    let dim = match (sparse.dim, expected_dim) {
        (Some(0), _) => return Err(reject(InvalidSparse, "dim 0")),
        (Some(own), _) if own > max_features => return Err(too_large(own)),
        (Some(own), Some(want)) if own != want => return Err(mismatch(own, want)),
        (Some(own), _) => own,
        (None, Some(want)) => want,
        (None, None) => {
            return Err(reject(
                DimensionUnknown,
                "a sparse event needs \"dim\" until the dimension is locked",
            ))
        }
    };
    if let Some(&last) = sparse.indices.last().filter(|&&i| i as usize >= dim) {
        return Err(reject(
            InvalidSparse,
            format!("index {last} is not below the dimension {dim}"),
        ));
    }
    if let Some(j) = sparse.values.iter().position(|v| !v.is_finite()) {
        return Err(reject(NonFinite, format!("value {j} is not finite")));
    }
    Ok(Features::Sparse {
        dim,
        indices: sparse.indices,
        values: sparse.values,
    })
}

/// At most 40 characters of a raw JSON value, for error details (a detail must stay short:
/// the original payload is in the dead-letter record anyway).
fn clip(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The JSON form of an event, as [`parse_event`] reads it back. Fields in a fixed order and
/// `meta` keys sorted, so the same event always gives the same bytes.
impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;

        #[derive(Serialize)]
        struct Sparse<'a> {
            indices: &'a [u32],
            values: &'a [f64],
            dim: usize,
        }
        let fields = 3 + usize::from(self.meta.is_some());
        let mut s = serializer.serialize_struct("Event", fields)?;
        s.serialize_field("id", &self.id)?;
        s.serialize_field("ts", &self.ts)?;
        match &self.x {
            Features::Dense(x) => s.serialize_field("x", x)?,
            Features::Sparse {
                dim,
                indices,
                values,
            } => s.serialize_field(
                "x",
                &Sparse {
                    indices,
                    values,
                    dim: *dim,
                },
            )?,
        }
        if let Some(meta) = &self.meta {
            s.serialize_field("meta", meta)?;
        }
        s.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str, dim: Option<usize>) -> Result<Event, Rejection> {
        parse_event(text.as_bytes(), dim, &EventLimits::default())
    }

    fn reason(text: &str, dim: Option<usize>) -> RejectReason {
        match parse(text, dim) {
            Ok(e) => panic!("{text} was accepted as {e:?}"),
            Err(r) => r.reason,
        }
    }

    #[test]
    fn dense_and_sparse_events_parse() {
        let e = parse(
            r#"{"id":"a1","ts":1767225600000,"x":[0.5,0,-2e3],"meta":{"label":1},"extra":true}"#,
            None,
        )
        .unwrap();
        assert_eq!(e.id, "a1");
        assert_eq!(e.ts, 1_767_225_600_000);
        assert_eq!(e.x, Features::Dense(vec![0.5, 0.0, -2000.0]));
        assert_eq!(e.x.dim(), 3);
        assert_eq!(e.meta.unwrap()["label"], json!(1));

        let e = parse(
            r#"{"id":"b","ts":0,"x":{"indices":[0,4],"values":[1.5,-1]}}"#,
            Some(5),
        )
        .unwrap();
        assert_eq!(
            e.x,
            Features::Sparse {
                dim: 5,
                indices: vec![0, 4],
                values: vec![1.5, -1.0]
            }
        );
        assert_eq!(e.meta, None);
        let e = parse(
            r#" {"x":{"dim":7,"indices":[],"values":[]},"ts":3,"id":"c"}"#,
            None,
        )
        .unwrap();
        assert_eq!(e.x.dim(), 7);
        assert_eq!(e.x.heap_bytes(), 0);
        // The locked dimension fills in a sparse event's missing dim.
        assert_eq!(
            parse(
                r#"{"id":"d","ts":3,"x":{"indices":[6],"values":[1]}}"#,
                Some(7)
            )
            .unwrap()
            .x
            .dim(),
            7
        );
    }

    #[test]
    fn every_reason_has_a_triggering_message() {
        use RejectReason::*;
        let ok = |x: &str| format!(r#"{{"id":"a","ts":1,"x":{x}}}"#);
        let cases: Vec<(String, Option<usize>, RejectReason)> = vec![
            ("{\"id\":\"a\"}".repeat(200_000), None, TooLarge),
            ("not json".into(), None, InvalidJson),
            ("[1,2]".into(), None, InvalidJson),
            (
                r#"{"id":"a","id":"b","ts":1,"x":[1]}"#.into(),
                None,
                InvalidJson,
            ),
            (r#"{"id":"a","ts":1,"x":[1]"#.into(), None, InvalidJson),
            (r#"{"ts":1,"x":[1]}"#.into(), None, MissingId),
            (r#"{"id":null,"ts":1,"x":[1]}"#.into(), None, MissingId),
            (r#"{"id":5,"ts":1,"x":[1]}"#.into(), None, InvalidId),
            (r#"{"id":"","ts":1,"x":[1]}"#.into(), None, InvalidId),
            (
                format!(r#"{{"id":"{}","ts":1,"x":[1]}}"#, "i".repeat(257)),
                None,
                InvalidId,
            ),
            (r#"{"id":"a","x":[1]}"#.into(), None, MissingTs),
            (r#"{"id":"a","ts":1.5,"x":[1]}"#.into(), None, InvalidTs),
            (r#"{"id":"a","ts":-1,"x":[1]}"#.into(), None, InvalidTs),
            (r#"{"id":"a","ts":"1","x":[1]}"#.into(), None, InvalidTs),
            (r#"{"id":"a","ts":1e3,"x":[1]}"#.into(), None, InvalidTs),
            (
                r#"{"id":"a","ts":9223372036854775808,"x":[1]}"#.into(),
                None,
                InvalidTs,
            ),
            (r#"{"id":"a","ts":1}"#.into(), None, MissingFeatures),
            (ok("[]"), None, InvalidFeatures),
            (ok("[1,\"2\"]"), None, InvalidFeatures),
            (ok("[1,null]"), None, InvalidFeatures),
            (ok("3"), None, InvalidFeatures),
            (ok("\"1,2\""), None, InvalidFeatures),
            (
                ok(r#"{"indices":[0,1],"values":[1]}"#),
                Some(3),
                InvalidSparse,
            ),
            (
                ok(r#"{"indices":[1,1],"values":[1,2]}"#),
                Some(3),
                InvalidSparse,
            ),
            (
                ok(r#"{"indices":[2,1],"values":[1,2]}"#),
                Some(3),
                InvalidSparse,
            ),
            (
                ok(r#"{"indices":[0,3],"values":[1,2]}"#),
                Some(3),
                InvalidSparse,
            ),
            (
                ok(r#"{"indices":[-1],"values":[1]}"#),
                Some(3),
                InvalidSparse,
            ),
            (ok(r#"{"indices":[0]}"#), Some(3), InvalidSparse),
            (
                ok(r#"{"indices":[0],"values":[1],"dims":3}"#),
                Some(3),
                InvalidSparse,
            ),
            (
                ok(r#"{"indices":[],"values":[],"dim":0}"#),
                None,
                InvalidSparse,
            ),
            (ok("[1,2]"), Some(3), DimensionMismatch),
            (
                ok(r#"{"indices":[0],"values":[1],"dim":4}"#),
                Some(3),
                DimensionMismatch,
            ),
            (
                ok(r#"{"indices":[0],"values":[1]}"#),
                None,
                DimensionUnknown,
            ),
            (
                ok(r#"{"indices":[0],"values":[1],"dim":1099511627776}"#),
                None,
                DimensionTooLarge,
            ),
            (ok("[1,1e400]"), None, NonFinite),
            (
                ok(r#"{"indices":[0],"values":[-1e999]}"#),
                Some(3),
                NonFinite,
            ),
            (
                r#"{"id":"a","ts":1,"x":[1],"meta":[1]}"#.into(),
                None,
                InvalidMeta,
            ),
            (
                r#"{"id":"a","ts":1,"x":[1],"meta":"m"}"#.into(),
                None,
                InvalidMeta,
            ),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (text, dim, want) in &cases {
            assert_eq!(reason(text, *dim), *want, "{}", clip(text));
            seen.insert(*want);
        }
        let invalid_utf8 = parse_event(b"{\"id\":\"\xff\"}", None, &EventLimits::default());
        assert_eq!(invalid_utf8.unwrap_err().reason, InvalidUtf8);
        seen.insert(InvalidUtf8);
        // The engine's reason, tested with its clock (engine::machine), and the replay's
        // reason for a line that is not a record (tests/daemon_cli.rs).
        seen.insert(TsOutOfRange);
        seen.insert(InvalidRecord);
        assert_eq!(seen.len(), RejectReason::ALL.len());
    }

    #[test]
    fn limits_are_inclusive_and_details_say_why() {
        let limits = EventLimits {
            max_bytes: 30,
            max_id_len: 3,
            max_features: 2,
        };
        let at_limit = r#"{"id":"abc","ts":1,"x":[1,2]}"#;
        assert_eq!(at_limit.len(), 29);
        assert!(parse_event(at_limit.as_bytes(), None, &limits).is_ok());
        let too_long = r#"{"id":"abcd","ts":1,"x":[1,2]}"#;
        assert_eq!(
            parse_event(too_long.as_bytes(), None, &limits)
                .unwrap_err()
                .to_string(),
            "invalid_id: the id has 4 bytes, the limit is 3"
        );
        let big = r#"{"id":"abc","ts":1,"x":[1,2,3]}"#;
        assert_eq!(
            parse_event(big.as_bytes(), None, &limits)
                .unwrap_err()
                .to_string(),
            "too_large: 31 bytes, the limit is 30"
        );
        assert_eq!(
            parse(r#"{"id":"a","ts":1,"x":[1,2]}"#, Some(3))
                .unwrap_err()
                .to_string(),
            "dimension_mismatch: 2 features, the locked dimension is 3"
        );
        assert_eq!(
            parse(
                r#"{"id":"a","ts":1,"x":{"indices":[0,5],"values":[1,2],"dim":5}}"#,
                None
            )
            .unwrap_err()
            .to_string(),
            "invalid_sparse: index 5 is not below the dimension 5"
        );
        // The feature count is bounded before it can lock anything: a sparse `dim` of 2⁴⁰
        // once locked the dimension and aborted the first retrain's allocation.
        let limits = EventLimits {
            max_features: 3,
            ..EventLimits::default()
        };
        let too_many = |x: &str| {
            let text = format!(r#"{{"id":"a","ts":1,"x":{x}}}"#);
            parse_event(text.as_bytes(), None, &limits).map_err(|e| e.to_string())
        };
        assert!(too_many("[1,2,3]").is_ok());
        assert!(too_many(r#"{"indices":[0],"values":[1],"dim":3}"#).is_ok());
        assert_eq!(
            too_many("[1,2,3,4]").unwrap_err(),
            "dimension_too_large: 4 features, the limit (scoring.max_features) is 3"
        );
        assert_eq!(
            too_many(r#"{"indices":[0],"values":[1],"dim":1099511627776}"#).unwrap_err(),
            "dimension_too_large: 1099511627776 features, the limit (scoring.max_features) is 3"
        );
    }

    #[test]
    fn ts_is_optional_only_when_not_required() {
        let limits = EventLimits::default();
        let with = |text: &str, required: bool| {
            parse_event_with(text.as_bytes(), Some(2), &limits, required)
        };
        let (e, given) = with(r#"{"id":"a","x":[1,2]}"#, false).unwrap();
        assert_eq!((e.id.as_str(), e.ts, given), ("a", 0, false));
        let (e, given) = with(r#"{"id":"a","ts":null,"x":[1,2]}"#, false).unwrap();
        assert_eq!((e.ts, given), (0, false));
        let (e, given) = with(r#"{"id":"a","ts":42,"x":[1,2]}"#, false).unwrap();
        assert_eq!((e.ts, given), (42, true));
        // A ts that is there is still checked.
        assert_eq!(
            with(r#"{"id":"a","ts":-1,"x":[1,2]}"#, false)
                .unwrap_err()
                .reason,
            RejectReason::InvalidTs
        );
        assert_eq!(
            with(r#"{"id":"a","x":[1,2]}"#, true).unwrap_err().reason,
            RejectReason::MissingTs
        );
        // The other checks keep their order: a missing id is found before the missing ts.
        assert_eq!(
            with(r#"{"x":[1,2]}"#, false).unwrap_err().reason,
            RejectReason::MissingId
        );
    }

    #[test]
    fn out_of_range_numbers_are_recognised_as_non_finite() {
        // Pins serde_json's wording that `is_out_of_range` relies on.
        let e = serde_json::from_str::<Vec<f64>>("[1e400]").unwrap_err();
        assert!(is_out_of_range(&e), "{e}");
        let e = serde_json::from_str::<Vec<f64>>("[true]").unwrap_err();
        assert!(!is_out_of_range(&e), "{e}");
    }

    #[test]
    fn reason_names_are_the_serde_names() {
        for reason in RejectReason::ALL {
            assert_eq!(json!(reason), json!(reason.as_str()));
            assert_eq!(reason.to_string(), reason.as_str());
        }
        let names: Vec<&str> = RejectReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names[0], "too_large");
        assert!(names.contains(&"dimension_mismatch"));
    }

    #[test]
    fn the_json_schema_matches_the_parser() {
        let schema: Value =
            serde_json::from_str(include_str!("../../docs/event.schema.json")).unwrap();
        let names = |v: &Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect()
        };
        let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
        assert_eq!(names(&schema["required"]), REQUIRED_FIELDS);
        assert_eq!(keys(&schema["properties"]), ["id", "meta", "ts", "x"]);
        let id = &schema["properties"]["id"];
        assert_eq!(id["maxLength"], json!(EventLimits::default().max_id_len));
        assert_eq!(id["minLength"], json!(1));
        let sparse = &schema["properties"]["x"]["oneOf"][1];
        assert_eq!(names(&sparse["required"]), ["indices", "values"]);
        assert_eq!(keys(&sparse["properties"]), ["dim", "indices", "values"]);
        assert_eq!(
            sparse["properties"]["indices"]["items"]["maximum"],
            json!(u32::MAX)
        );
        // The examples parse, and dropping a required field is that field's rejection.
        let examples = schema["examples"].as_array().unwrap();
        assert_eq!(examples.len(), 2);
        for example in examples {
            parse(&example.to_string(), None).unwrap();
        }
        for (field, want) in REQUIRED_FIELDS.iter().zip([
            RejectReason::MissingId,
            RejectReason::MissingTs,
            RejectReason::MissingFeatures,
        ]) {
            let mut without = examples[0].clone();
            without.as_object_mut().unwrap().remove(*field);
            assert_eq!(reason(&without.to_string(), None), want, "{field}");
        }
    }

    #[test]
    fn serialized_events_parse_back() {
        let events = [
            Event {
                id: "r7-0".into(),
                ts: 1_767_225_600_123,
                x: Features::Dense(vec![0.64, 0.0, 1e-300, -3.5]),
                meta: Some(Map::from_iter([("label".to_owned(), json!(-1))])),
            },
            Event {
                id: "s".into(),
                ts: 5,
                x: Features::Sparse {
                    dim: 9,
                    indices: vec![1, 8],
                    values: vec![2.0, 0.25],
                },
                meta: None,
            },
        ];
        for event in events {
            let text = serde_json::to_string(&event).unwrap();
            assert_eq!(parse(&text, None).unwrap(), event);
        }
        let text = serde_json::to_string(&Event {
            id: "i".into(),
            ts: 2,
            x: Features::Dense(vec![1.0, 0.5]),
            meta: Some(Map::from_iter([
                ("z".to_owned(), json!(1)),
                ("a".to_owned(), json!(2)),
            ])),
        })
        .unwrap();
        assert_eq!(
            text,
            r#"{"id":"i","ts":2,"x":[1.0,0.5],"meta":{"a":2,"z":1}}"#
        );
    }
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;
    use proptest::prelude::*;

    const IDS: &[&str] = &[
        r#""a1""#,
        r#""""#,
        r#""a\"b\u00e9""#,
        "null",
        "7",
        r#""0123456789""#,
    ];
    const TS: &[&str] = &[
        "0",
        "1767225600000",
        "-1",
        "-0",
        "1.0",
        "1e3",
        "9223372036854775807",
        "9223372036854775808",
        "null",
        r#""5""#,
    ];
    const XS: &[&str] = &[
        "[0.5,0,-2e3]",
        "[1,2]",
        "[]",
        "[1e400]",
        r#"[1,"a"]"#,
        "[1,null]",
        r#"{"indices":[0],"values":[1],"dim":3}"#,
        r#"{"indices":[1],"values":[2]}"#,
        "null",
        "3",
    ];
    const METAS: &[&str] = &[
        "null",
        "{}",
        r#"{"label":1}"#,
        "5",
        "[]",
        r#"{"a":{"b":[1,"}"]},"é":"\u00e9"}"#,
        r#"{"label":1"#,
        r#"{"k":1,"k":2}"#,
    ];

    fn payload(fields: &[(usize, usize)], order: &[usize]) -> String {
        let mut parts = Vec::new();
        for &i in order {
            let (kind, pick) = fields[i % fields.len()];
            let part = match kind {
                0 => format!(r#""id":{}"#, IDS[pick % IDS.len()]),
                1 => format!(r#""ts":{}"#, TS[pick % TS.len()]),
                2 => format!(r#""x":{}"#, XS[pick % XS.len()]),
                3 => format!(r#""meta":{}"#, METAS[pick % METAS.len()]),
                _ => r#""extra":[1,{"y":2}]"#.to_string(),
            };
            parts.push(part);
        }
        format!("{{{}}}", parts.join(","))
    }

    proptest! {
        /// The one-pass path and the field-by-field path agree on every payload: the same
        /// event, or (through the fallback) the same rejection.
        #[test]
        fn one_pass_and_field_by_field_parses_agree(
            fields in proptest::collection::vec((0usize..5, 0usize..10), 1..6),
            order in proptest::collection::vec(0usize..6, 0..7),
            dim in proptest::option::of(2usize..4),
            max_id_len in 3usize..12,
            max_features in 1usize..5,
            ts_required in any::<bool>(),
        ) {
            let text = payload(&fields, &order);
            let limits = EventLimits { max_bytes: 1 << 20, max_id_len, max_features };
            let fast = parse_event_with(text.as_bytes(), dim, &limits, ts_required);
            let slow = parse_fields(&text, dim, &limits, ts_required);
            prop_assert_eq!(fast, slow, "{}", text);
        }
    }

    /// A JSON-ish number: valid ones of every shape (long significands, exponents, leading
    /// zeros in fractions) and near misses (a leading zero, an empty fraction or exponent).
    fn number_token() -> impl Strategy<Value = String> {
        let grammar = (
            proptest::option::of(Just("-")),
            prop_oneof![
                1 => Just("0".to_string()),
                4 => "[1-9][0-9]{0,4}",
                1 => "[1-9][0-9]{14,19}",
                1 => "0[0-9]{1,3}",
                1 => Just(String::new()),
            ],
            proptest::option::weighted(
                0.7,
                prop_oneof![3 => "\\.[0-9]{1,7}", 1 => "\\.[0-9]{0,25}"],
            ),
            proptest::option::weighted(0.3, "[eE][+-]?[0-9]{0,3}"),
        )
            .prop_map(|(sign, int, frac, exp)| {
                format!(
                    "{}{int}{}{}",
                    sign.unwrap_or_default(),
                    frac.unwrap_or_default(),
                    exp.unwrap_or_default()
                )
            });
        let value = prop_oneof![any::<f64>(), -1e4..1e4f64, -1e-3..1e-3f64];
        let printed = (value, 0usize..4).prop_map(|(v, style)| match style {
            0 => format!("{v}"),
            1 => format!("{v:e}"),
            2 => format!("{v:.3}"),
            _ => format!("{v:.17}"),
        });
        prop_oneof![grammar, printed]
    }

    fn whitespace() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just(""), Just(" "), Just("\n\t "), Just("\r")]
    }

    proptest! {
        /// Whatever the scanner accepts, the field-by-field path reads as the same event, to
        /// the bit of every feature.
        #[test]
        fn the_scanner_reads_numbers_as_serde_does(
            numbers in proptest::collection::vec((number_token(), whitespace()), 1..6),
            ts in prop_oneof![Just("0".to_string()), "-?[0-9]{1,20}", Just("1.5".to_string())],
            id in prop_oneof![Just("a"), Just("é\\u00e9"), Just(""), Just("q\"")],
            ws in whitespace(),
            order in 0usize..3,
        ) {
            let x: Vec<String> = numbers.iter().map(|(n, w)| format!("{w}{n}{w}")).collect();
            let fields = [
                format!("{ws}\"id\"{ws}:{ws}\"{id}\""),
                format!("\"ts\":{ws}{ts}{ws}"),
                format!("\"x\":[{}]", x.join(",")),
            ];
            let text = format!("{ws}{{{},{},{}}}{ws}", fields[order], fields[(order + 1) % 3], fields[(order + 2) % 3]);
            let limits = EventLimits::default();
            if let Some(scanned) = scan_dense_event(text.as_bytes(), None, &limits) {
                let slow = parse_fields(&text, None, &limits, true);
                let Ok((slow, true)) = slow else {
                    return Err(TestCaseError::fail(format!("scanned, but rejected: {text}")));
                };
                prop_assert_eq!(&scanned.id, &slow.id);
                prop_assert_eq!(scanned.ts, slow.ts);
                let (Features::Dense(a), Features::Dense(b)) = (&scanned.x, &slow.x) else {
                    return Err(TestCaseError::fail("not dense"));
                };
                let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                prop_assert_eq!(bits(a), bits(b), "{}", text);
            }
            let limits = EventLimits::default();
            prop_assert_eq!(
                parse_event_with(text.as_bytes(), None, &limits, true),
                parse_fields(&text, None, &limits, true),
                "{}", text
            );
        }
    }

    /// Numbers as producers print them: the scanner takes nearly all, each to the bit
    /// serde_json gives.
    #[test]
    fn the_scanner_takes_printed_numbers_to_the_bit() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let (mut taken, mut total) = (0, 0);
        for _ in 0..20_000 {
            let magnitude = 10f64.powi(rng.gen_range(-8..8));
            let v = rng.gen_range(-1.0..1.0) * magnitude;
            let text = match rng.gen_range(0..4) {
                0 => format!("{v}"),
                1 => format!("{v:e}"),
                2 => format!("{v:.3}"),
                _ => format!("{v:.9}"),
            };
            let serde: f64 = serde_json::from_str(&text).expect("a JSON number");
            let payload = format!(r#"{{"id":"a","ts":1,"x":[{text}]}}"#);
            total += 1;
            if let Some(e) = scan_dense_event(payload.as_bytes(), Some(1), &EventLimits::default())
            {
                taken += 1;
                let Features::Dense(x) = e.x else {
                    panic!("not dense")
                };
                assert_eq!(x[0].to_bits(), serde.to_bits(), "{text}");
            }
        }
        // Only `{v}` and `{v:e}` of values with more than 16 significant digits are left.
        assert!(taken * 10 >= total * 6, "{taken} of {total}");
    }

    #[test]
    fn the_scanner_takes_the_common_event_and_leaves_the_rest() {
        let limits = EventLimits::default();
        let text = r#" {"x": [1, -2.5e-3, 0.125, -0], "ts": 5, "id": "ev-1"} "#;
        let e = scan_dense_event(text.as_bytes(), Some(4), &limits).expect("scanned");
        assert_eq!(
            Ok((e.clone(), true)),
            parse_fields(text, Some(4), &limits, true)
        );
        assert_eq!(e.x, Features::Dense(vec![1.0, -0.0025, 0.125, -0.0]));
        assert!(matches!(&e.x, Features::Dense(x) if x[3].is_sign_negative()));
        let text = r#"{"id":"a","meta": {"k":"v","n":{"}":[1]}} ,"ts":5,"x":[1,2]}"#;
        let e = scan_dense_event(text.as_bytes(), Some(2), &limits).expect("scanned with meta");
        assert_eq!(
            Ok((e.clone(), true)),
            parse_fields(text, Some(2), &limits, true)
        );
        assert_eq!(e.meta.expect("meta")["n"]["}"][0], 1);
        for left in [
            r#"{"id":"a","ts":5,"x":[1,2],"meta":null}"#,
            r#"{"id":"a","ts":5,"x":[1,2],"meta":[1]}"#,
            r#"{"id":"a","ts":5,"x":[1,2],"meta":{"k":}}"#,
            r#"{"id":"a","ts":5,"x":[1,2],"meta":{},"meta":{}}"#,
            r#"{"id":"a","ts":5,"x":[1,2],"other":0}"#,
            r#"{"id":"a\u0062","ts":5,"x":[1,2]}"#,
            r#"{"id":"a","ts":5,"x":[1,2],"id":"b"}"#,
            r#"{"id":"a","ts":-0,"x":[1,2]}"#,
            r#"{"id":"a","ts":5,"x":[0.1234567890123456789]}"#,
            r#"{"id":"a","ts":5,"x":[1e23]}"#,
            r#"{"id":"a","ts":5,"x":[01]}"#,
            r#"{"id":"a","ts":5,"x":[1.]}"#,
            r#"{"id":"a","ts":5,"x":[1,2]} x"#,
            r#"{"id":"a","ts":5,"x":[]}"#,
        ] {
            assert_eq!(
                scan_dense_event(left.as_bytes(), None, &limits),
                None,
                "{left}"
            );
        }
        // Invalid UTF-8 in the id, or anywhere else, is left to the UTF-8 check.
        for bytes in [
            &b"{\"id\":\"a\xff\",\"ts\":5,\"x\":[1]}"[..],
            &b"{\"id\":\"a\",\"ts\":5,\"x\":[1]}\xff"[..],
            &b"{\"id\":\"a\",\"\xff\":5,\"ts\":5,\"x\":[1]}"[..],
        ] {
            assert_eq!(scan_dense_event(bytes, None, &limits), None);
            let reason = parse_event(bytes, None, &limits).map_err(|r| r.reason);
            assert_eq!(reason, Err(RejectReason::InvalidUtf8));
        }
    }

    #[test]
    fn the_one_pass_path_takes_the_common_dense_event() {
        let limits = EventLimits::default();
        let text = r#"{"id":"a","ts":5,"x":[1,2.5],"meta":{"k":"v"},"other":0}"#;
        let e = parse_dense_event(text, Some(2), &limits).expect("one pass");
        assert_eq!(Ok((e, true)), parse_fields(text, Some(2), &limits, true));
        for refused in [
            r#"{"id":"a","ts":-1,"x":[1,2]}"#,
            r#"{"id":"a","ts":5,"x":[1,2,3]}"#,
            r#"{"id":"","ts":5,"x":[1,2]}"#,
            r#"{"id":"a","x":[1,2]}"#,
            r#"{"id":"a","ts":5,"x":{"indices":[0],"values":[1]}}"#,
        ] {
            assert_eq!(
                parse_dense_event(refused, Some(2), &limits),
                None,
                "{refused}"
            );
        }
    }
}
