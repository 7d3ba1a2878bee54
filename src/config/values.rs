//! Value types more than one table uses: durations, secrets, the replay speed.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value that must never be printed: `Debug`, `Display` and `Serialize` show `<redacted>`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// A duration written `"250ms"`, `"10s"`, `"5m"`, `"1h"`, `"7d"` or as seconds (`600`, `0.5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Seconds(f64),
            Text(String),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Seconds(s) => s.to_string(),
            Raw::Text(t) => t,
        };
        parse_duration(&text)
            .map(HumanDuration)
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

/// `600`, `0.5` (seconds) or a number with `ms`, `s`, `m`, `h` or `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 600, 0.5, 600s, 10m, 1h)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        _ => {
            return Err(format!(
                "unknown duration unit {unit:?} (use ms, s, m, h or d)"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| format!("{text:?} is not a non-negative finite duration"))
}

/// The shortest exact spelling among `d`, `h`, `m`, `s`, `ms`.
fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if d.subsec_nanos() % 1_000_000 != 0 {
        return format!("{}s", d.as_secs_f64());
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms > 0 && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// Replay pace: `None` = as fast as possible (virtual time), `Some(f)` = f × real time.
pub fn parse_speed(text: &str) -> Option<Option<f64>> {
    match text {
        "max" => Some(None),
        "realtime" => Some(Some(1.0)),
        _ => {
            let f: f64 = text.strip_prefix('x')?.parse().ok()?;
            (f.is_finite() && f > 0.0).then_some(Some(f))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "\"<redacted>\"");
        assert_eq!(s.to_string(), "<redacted>");
        assert_eq!(serde_json::to_string(&s).expect("json"), "\"<redacted>\"");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn durations_parse_and_print_in_every_documented_form() {
        assert_eq!(parse_duration("600"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("600s"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("10w").is_err());
        assert!(parse_duration("abc").is_err());
        for (d, text) in [
            (Duration::from_secs(7 * 86_400), "7d"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(90), "90s"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
    }

    #[test]
    fn speeds_parse() {
        assert_eq!(parse_speed("max"), Some(None));
        assert_eq!(parse_speed("realtime"), Some(Some(1.0)));
        assert_eq!(parse_speed("x10"), Some(Some(10.0)));
        assert_eq!(parse_speed("x0"), None);
        assert_eq!(parse_speed("10"), None);
    }
}
