//! A scanner for the common event, `{"id":"…","ts":…,"x":[…]}` with an optional `"meta":{…}`,
//! its fields in any order, that reads it in one pass without serde's machinery: on a
//! 12-feature event it takes about half of serde_json's time (measured against
//! `serde_json::from_str` into the one-pass struct), and intake is the largest cost of the
//! Kafka poll loop. `meta` (small, and free-form) is handed to serde_json in place.
//!
//! It only ever answers for payloads it reads exactly as serde_json does, and gives up
//! (`None`, the caller falls back to serde_json) on anything else: any other field, a `meta`
//! that is not an object, an escape in a key or the id, a repeated field, a number outside the
//! exactly-rounded range below, a negative or non-integer `ts`, malformed JSON. Equality with
//! the serde paths is property-tested in the parent module.

use serde_json::{Map, Value};

/// Powers of ten that are exact as f64 (10²² is the largest).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Largest decimal significand read exactly: 2⁵³.
const MAX_EXACT: u64 = 1 << 53;

/// The fields of a scanned event; the caller applies the checks.
pub(super) struct Scanned<'a> {
    pub id: &'a str,
    pub ts: i64,
    pub x: Vec<f64>,
    pub meta: Option<Map<String, Value>>,
}

/// Reads `payload`; `dim_hint` sizes the feature vector (the locked dimension, when there is
/// one, so the vector is allocated once and exactly). Outside the id, which must be UTF-8,
/// only ASCII is accepted, so an accepted payload is UTF-8 as a whole.
pub(super) fn scan(payload: &[u8], dim_hint: Option<usize>) -> Option<Scanned<'_>> {
    let mut s = Scanner {
        bytes: payload,
        at: 0,
    };
    s.expect(b'{')?;
    let (mut id, mut ts, mut x, mut meta) = (None, None, None, None);
    loop {
        let key = s.plain_string()?;
        s.expect(b':')?;
        match key {
            b"id" if id.is_none() => id = Some(s.plain_string()?),
            b"ts" if ts.is_none() => ts = Some(s.non_negative_integer()?),
            b"x" if x.is_none() => x = Some(s.numbers(dim_hint)?),
            b"meta" if meta.is_none() => meta = Some(s.object()?),
            _ => return None,
        }
        match s.next_token()? {
            b',' => {}
            b'}' => break,
            _ => return None,
        }
    }
    s.skip_whitespace();
    if s.at != s.bytes.len() {
        return None;
    }
    Some(Scanned {
        id: std::str::from_utf8(id?).ok()?,
        ts: ts?,
        x: x?,
        meta,
    })
}

struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// JSON's four whitespace characters, and only those.
    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, consumed.
    fn next_token(&mut self) -> Option<u8> {
        self.skip_whitespace();
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next_token()? == byte).then_some(())
    }

    /// A string without escapes or control characters, as its bytes between the quotes.
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let start = self.at;
        let len = self.bytes[start..].iter().position(|&b| b == b'"')?;
        let content = &self.bytes[start..start + len];
        if content.iter().any(|&b| b == b'\\' || b < 0x20) {
            return None;
        }
        self.at = start + len + 1;
        Some(content)
    }

    /// Decimal digits as an integer; `None` when there are none or the value passes `limit`.
    /// Returns the value and the digit count.
    fn digits(&mut self, mut value: u64, limit: u64) -> Option<(u64, usize)> {
        let start = self.at;
        while let Some(d) = self.peek().filter(u8::is_ascii_digit) {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(d - b'0'))
                .filter(|&v| v <= limit)?;
            self.at += 1;
        }
        (self.at > start).then_some((value, self.at - start))
    }

    /// JSON's integer part: `0`, or digits without a leading zero.
    fn integer_part(&mut self, limit: u64) -> Option<u64> {
        let start = self.at;
        let (value, count) = self.digits(0, limit)?;
        (count == 1 || self.bytes[start] != b'0').then_some(value)
    }

    /// `ts`: a JSON integer ≥ 0 that fits i64 (`-0`, fractions and exponents give up, as
    /// serde reads them as floats).
    fn non_negative_integer(&mut self) -> Option<i64> {
        self.skip_whitespace();
        let value = self.integer_part(i64::MAX as u64)?;
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        i64::try_from(value).ok()
    }

    /// A JSON number whose decimal significand is at most 2⁵³ and whose power of ten is within
    /// ±22: both are exact f64s, so one multiplication or division rounds it correctly, which
    /// is what serde_json computes for these numbers too (with or without its
    /// `float_roundtrip` feature). Anything else gives up.
    fn number(&mut self) -> Option<f64> {
        self.skip_whitespace();
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let mut significand = self.integer_part(MAX_EXACT)?;
        let mut exponent: i64 = 0;
        if self.peek() == Some(b'.') {
            self.at += 1;
            let (value, count) = self.digits(significand, MAX_EXACT)?;
            significand = value;
            exponent = -(count as i64);
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            let negative_exponent = self.peek() == Some(b'-');
            if matches!(self.peek(), Some(b'-' | b'+')) {
                self.at += 1;
            }
            let (value, _) = self.digits(0, 1000)?;
            exponent += if negative_exponent {
                -(value as i64)
            } else {
                value as i64
            };
        }
        let power = *POW10.get(exponent.unsigned_abs() as usize)?;
        let magnitude = if exponent < 0 {
            significand as f64 / power
        } else {
            significand as f64 * power
        };
        Some(if negative { -magnitude } else { magnitude })
    }

    /// A JSON object, read by serde_json from where the scanner stands to the object's end.
    fn object(&mut self) -> Option<Map<String, Value>> {
        self.skip_whitespace();
        if self.peek() != Some(b'{') {
            return None;
        }
        let rest = &self.bytes[self.at..];
        let mut objects = serde_json::Deserializer::from_slice(rest).into_iter();
        let object = objects.next()?.ok()?;
        self.at += objects.byte_offset();
        Some(object)
    }

    /// `[n, …]` with at least one number.
    fn numbers(&mut self, dim_hint: Option<usize>) -> Option<Vec<f64>> {
        self.expect(b'[')?;
        let mut out = Vec::with_capacity(dim_hint.unwrap_or(16));
        loop {
            out.push(self.number()?);
            match self.next_token()? {
                b',' => {}
                b']' => break,
                _ => return None,
            }
        }
        if dim_hint != Some(out.len()) {
            out.shrink_to_fit();
        }
        Some(out)
    }
}
