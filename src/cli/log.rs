//! The JSON log lines of `log.format = "json"`: tracing-subscriber's JSON layout (`timestamp`
//! in RFC 3339 UTC, `level`, `fields` with the `message`, `target`; neyman opens no spans),
//! except that a field logged with `?` whose debug form is a JSON array or object — a list of
//! topics, of numbers — is written as that JSON value instead of a string holding it, so a log
//! processor can query its elements. Any other debug form stays a string.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter; `tracing_subscriber::fmt().event_format(JsonLines)`.
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        let meta = event.metadata();
        let text = |v: &str| Value::String(v.to_owned()).to_string();
        writeln!(
            writer,
            "{{\"timestamp\":{},\"level\":{},\"fields\":{},\"target\":{}}}",
            text(&timestamp),
            text(meta.level().as_str()),
            Value::Object(fields.0),
            text(meta.target())
        )
    }
}

/// An event's fields as JSON values.
struct Fields(Map<String, Value>);

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        self.0.insert(field.name().to_owned(), value);
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        // NaN and infinities have no JSON number: null.
        self.put(field, serde_json::json!(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        let structured =
            field.name() != "message" && (text.starts_with('[') || text.starts_with('{'));
        let value = structured
            .then(|| serde_json::from_str::<Value>(&text).ok())
            .flatten()
            .unwrap_or(Value::String(text));
        self.put(field, value);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lists_are_json_arrays_and_everything_else_keeps_its_type() {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(JsonLines)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let topics = vec!["neyman.positive".to_string(), "neyman \"q\"".to_string()];
            let pairs = vec![("neyman.positive", 0)];
            tracing::info!(
                topics = ?topics,
                sizes = ?[1, 2],
                pairs = ?pairs,
                n = 3u64,
                ratio = 0.5,
                ok = true,
                name = "x",
                "created missing topics"
            );
        });
        let text = String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8");
        let line: Value = serde_json::from_str(text.trim()).expect("one JSON line");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["target"], module_path!());
        assert!(
            line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{line}"
        );
        let fields = &line["fields"];
        assert_eq!(fields["message"], "created missing topics");
        assert_eq!(
            fields["topics"],
            serde_json::json!(["neyman.positive", "neyman \"q\""])
        );
        assert_eq!(fields["sizes"], serde_json::json!([1, 2]));
        // A debug form that is not JSON (tuples) stays a string.
        assert_eq!(fields["pairs"], "[(\"neyman.positive\", 0)]");
        assert_eq!(fields["n"], 3);
        assert_eq!(fields["ratio"], 0.5);
        assert_eq!(fields["ok"], true);
        assert_eq!(fields["name"], "x");
    }
}
