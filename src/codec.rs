//! The one place values become bytes and back.
//!
//! bincode 3 on crates.io is a tombstone (an empty release), so the crate pins bincode 2 with its
//! serde bridge. Every encode and decode goes through [`to_bytes`] and [`from_bytes`] so the wire
//! configuration is chosen once, and model files get a small checked frame ([`frame`] /
//! [`unframe`]) so a wrong, old, cut or corrupted file is named as such instead of decoding into
//! garbage.

use std::ops::RangeInclusive;

use bincode::config::Configuration;

/// Frame header: magic (8) + format version (4) + tag (1) + payload length (8) + CRC-32 (4).
const HEADER_LEN: usize = 8 + 4 + 1 + 8 + 4;

/// Upper bound on the bytes strings and byte buffers may claim while decoding. bincode allocates
/// a string from its length prefix before reading it, so without a bound a corrupt prefix aborts
/// the process with a failed multi-terabyte allocation.
const DECODE_LIMIT: usize = 1 << 30;

/// Why bytes could not be made or read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("not a neyman model file (bad magic header)")]
    BadMagic,
    #[error("unsupported format version {found} (this build reads {supported:?})")]
    UnsupportedVersion {
        found: u32,
        supported: RangeInclusive<u32>,
    },
    #[error("truncated: expected {expected} bytes, found {found}")]
    Truncated { expected: u64, found: u64 },
    #[error("{extra} unexpected trailing bytes after the data")]
    TrailingBytes { extra: usize },
    #[error("corrupted: checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    ChecksumMismatch { stored: u32, computed: u32 },
    #[error("encode failed: {0}")]
    Encode(String),
    #[error("decode failed: {0}")]
    Decode(String),
}

/// A checked frame's header fields and its payload, borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unframed<'a> {
    pub format_version: u32,
    pub tag: u8,
    pub payload: &'a [u8],
}

/// The crate's one wire configuration (little-endian, varint integers).
fn config() -> Configuration {
    bincode::config::standard()
}

/// Encodes `value` with the crate's one bincode configuration.
pub fn to_bytes<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes a value written by [`to_bytes`]; the value must use every byte.
pub fn from_bytes<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    // The limit only bounds decoding; it does not change the wire format.
    let (value, read) =
        bincode::serde::decode_from_slice(bytes, config().with_limit::<DECODE_LIMIT>())
            .map_err(|e| CodecError::Decode(e.to_string()))?;
    match bytes.len().saturating_sub(read) {
        0 => Ok(value),
        extra => Err(CodecError::TrailingBytes { extra }),
    }
}

/// Wraps `payload` in a frame: magic, format version (u32 LE), tag, payload length (u64 LE),
/// CRC-32 of the payload (u32 LE), then the payload.
pub fn frame(magic: &[u8; 8], format_version: u32, tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(magic);
    out.extend_from_slice(&format_version.to_le_bytes());
    out.push(tag);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Checks a frame written by [`frame`] and returns its header fields and payload.
///
/// Checks run in the order that names the most useful fault: magic, header length, version,
/// payload length (short or trailing bytes), then checksum.
pub fn unframe<'a>(
    bytes: &'a [u8],
    magic: &[u8; 8],
    supported_versions: RangeInclusive<u32>,
) -> Result<Unframed<'a>, CodecError> {
    // Compare what is present first, so a short file of another kind reads as "not ours".
    if bytes.iter().zip(magic).any(|(found, want)| found != want) {
        return Err(CodecError::BadMagic);
    }
    let short_header = || CodecError::Truncated {
        expected: HEADER_LEN as u64,
        found: bytes.len() as u64,
    };
    let mut rest = bytes;
    take::<8>(&mut rest).ok_or_else(short_header)?;
    let format_version = take(&mut rest).map(u32::from_le_bytes);
    let tag = take(&mut rest).map(u8::from_le_bytes);
    let len = take(&mut rest).map(u64::from_le_bytes);
    let stored = take(&mut rest).map(u32::from_le_bytes);
    let (Some(format_version), Some(tag), Some(len), Some(stored)) =
        (format_version, tag, len, stored)
    else {
        return Err(short_header());
    };

    if !supported_versions.contains(&format_version) {
        return Err(CodecError::UnsupportedVersion {
            found: format_version,
            supported: supported_versions,
        });
    }
    let present = rest.len() as u64;
    if present < len {
        return Err(CodecError::Truncated {
            expected: (HEADER_LEN as u64).saturating_add(len),
            found: bytes.len() as u64,
        });
    }
    if present > len {
        return Err(CodecError::TrailingBytes {
            extra: rest.len().saturating_sub(len as usize),
        });
    }
    let computed = crc32fast::hash(rest);
    if computed != stored {
        return Err(CodecError::ChecksumMismatch { stored, computed });
    }
    Ok(Unframed {
        format_version,
        tag,
        payload: rest,
    })
}

/// Splits `N` bytes off the front of `bytes`, or `None` (leaving it untouched) if it is shorter.
fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
    let (head, rest) = bytes.split_first_chunk::<N>()?;
    *bytes = rest;
    Some(*head)
}

/// 64-bit FNV-1a, fed in pieces: a fixed, documented function (unlike `std`'s
/// `DefaultHasher`, whose output may change between Rust releases), for hashes that are stored
/// or that decide membership and so must never move.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// One 64-bit word in one step (FNV-1a's step with the word in place of a byte): eight
    /// times cheaper than its bytes, for bulk numbers where byte-level mixing buys nothing.
    pub fn write_word(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(0x0000_0100_0000_01b3);
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// [`Fnv1a`] of one byte string.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a::default();
    h.write(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    use super::*;

    const MAGIC: &[u8; 8] = b"NEYMANv\0";

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Kind {
        Linear,
        Rbf { gamma: f64 },
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Sample {
        weights: Vec<f64>,
        name: String,
        kind: Kind,
        bias: Option<f64>,
        missing: Option<u32>,
        counts: BTreeMap<String, u64>,
    }

    fn sample() -> Sample {
        Sample {
            weights: vec![0.5, -1.25, f64::MAX, f64::MIN_POSITIVE, 0.0],
            name: "σ-model".to_owned(),
            kind: Kind::Rbf { gamma: 0.125 },
            bias: Some(-3.5),
            missing: None,
            counts: BTreeMap::from([("neg".to_owned(), 7), ("pos".to_owned(), 3)]),
        }
    }

    #[test]
    fn serde_round_trip() {
        let value = sample();
        let bytes = to_bytes(&value).expect("encodes");
        let back: Sample = from_bytes(&bytes).expect("decodes");
        assert_eq!(back, value);

        let linear = Kind::Linear;
        let back: Kind = from_bytes(&to_bytes(&linear).expect("encodes")).expect("decodes");
        assert_eq!(back, Kind::Linear);
    }

    #[test]
    fn from_bytes_rejects_trailing_bytes() {
        let mut bytes = to_bytes(&sample()).expect("encodes");
        bytes.extend_from_slice(&[0, 0]);
        assert_eq!(
            from_bytes::<Sample>(&bytes),
            Err(CodecError::TrailingBytes { extra: 2 })
        );
    }

    #[test]
    fn from_bytes_rejects_truncation_at_every_cut() {
        let bytes = to_bytes(&sample()).expect("encodes");
        for cut in 0..bytes.len() {
            let result = from_bytes::<Sample>(&bytes[..cut]);
            assert!(
                matches!(result, Err(CodecError::Decode(_))),
                "cut at {cut}: {result:?}"
            );
        }
    }

    #[test]
    fn huge_string_length_is_an_error_not_an_abort() {
        // varint marker 253 = u64 follows: a string "of" 2^62 bytes.
        let mut bytes = vec![253];
        bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
        assert!(matches!(
            from_bytes::<String>(&bytes),
            Err(CodecError::Decode(_))
        ));
    }

    #[test]
    fn frame_layout() {
        let framed = frame(MAGIC, 3, 9, b"abc");
        let mut want = MAGIC.to_vec();
        want.extend_from_slice(&[3, 0, 0, 0, 9]);
        want.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&crc32fast::hash(b"abc").to_le_bytes());
        want.extend_from_slice(b"abc");
        assert_eq!(framed, want);
        assert_eq!(framed.len(), HEADER_LEN + 3);
    }

    #[test]
    fn frame_round_trip() {
        let payload = to_bytes(&sample()).expect("encodes");
        let framed = frame(MAGIC, 2, 7, &payload);
        let got = unframe(&framed, MAGIC, 1..=2).expect("unframes");
        assert_eq!(
            got,
            Unframed {
                format_version: 2,
                tag: 7,
                payload: &payload,
            }
        );
        let back: Sample = from_bytes(got.payload).expect("decodes");
        assert_eq!(back, sample());
    }

    #[test]
    fn empty_payload_round_trips() {
        let framed = frame(MAGIC, 1, 0, &[]);
        let got = unframe(&framed, MAGIC, 1..=1).expect("unframes");
        assert_eq!(got.payload, &[] as &[u8]);
    }

    #[test]
    fn flipped_payload_byte_is_checksum_mismatch() {
        let framed = frame(MAGIC, 1, 0, b"payload bytes");
        for i in HEADER_LEN..framed.len() {
            let mut bad = framed.clone();
            bad[i] ^= 0x01;
            let stored = crc32fast::hash(b"payload bytes");
            let computed = crc32fast::hash(&bad[HEADER_LEN..]);
            assert_eq!(
                unframe(&bad, MAGIC, 1..=1),
                Err(CodecError::ChecksumMismatch { stored, computed })
            );
        }
    }

    #[test]
    fn truncation_at_every_cut_is_an_error() {
        let framed = frame(MAGIC, 1, 0, b"some payload");
        for cut in 0..framed.len() {
            let want = if cut < HEADER_LEN {
                HEADER_LEN as u64
            } else {
                framed.len() as u64
            };
            assert_eq!(
                unframe(&framed[..cut], MAGIC, 1..=1),
                Err(CodecError::Truncated {
                    expected: want,
                    found: cut as u64,
                }),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn wrong_magic() {
        let framed = frame(b"OTHERFMT", 1, 0, b"x");
        assert_eq!(unframe(&framed, MAGIC, 1..=1), Err(CodecError::BadMagic));
        // A short file of another kind is "not ours", not "truncated".
        assert_eq!(unframe(b"{\"a\"", MAGIC, 1..=1), Err(CodecError::BadMagic));
    }

    #[test]
    fn wrong_version() {
        let framed = frame(MAGIC, 4, 0, b"x");
        let err = unframe(&framed, MAGIC, 1..=3).expect_err("version 4 is not in 1..=3");
        assert_eq!(
            err,
            CodecError::UnsupportedVersion {
                found: 4,
                supported: 1..=3,
            }
        );
        assert_eq!(
            err.to_string(),
            "unsupported format version 4 (this build reads 1..=3)"
        );
    }

    #[test]
    fn trailing_bytes_after_frame() {
        let mut framed = frame(MAGIC, 1, 0, b"x");
        framed.extend_from_slice(b"junk");
        assert_eq!(
            unframe(&framed, MAGIC, 1..=1),
            Err(CodecError::TrailingBytes { extra: 4 })
        );
    }

    #[test]
    fn huge_declared_length_is_truncated() {
        let mut framed = frame(MAGIC, 1, 0, b"x");
        framed[13..21].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            unframe(&framed, MAGIC, 1..=1),
            Err(CodecError::Truncated {
                expected: u64::MAX,
                found: framed.len() as u64,
            })
        );
    }

    #[test]
    fn messages() {
        assert_eq!(
            CodecError::BadMagic.to_string(),
            "not a neyman model file (bad magic header)"
        );
        assert_eq!(
            CodecError::ChecksumMismatch {
                stored: 0xdead_beef,
                computed: 1,
            }
            .to_string(),
            "corrupted: checksum mismatch (stored 0xdeadbeef, computed 0x00000001)"
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            // Only the absence of a panic or abort is under test; any result is acceptable.
            let _ = unframe(&bytes, MAGIC, 0..=u32::MAX);
            let _ = from_bytes::<Sample>(&bytes);
            let _ = from_bytes::<String>(&bytes);
            let _ = from_bytes::<Vec<String>>(&bytes);
        }

        #[test]
        fn arbitrary_bytes_behind_a_valid_magic_never_panic(
            tail in proptest::collection::vec(any::<u8>(), 0..64)
        ) {
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&tail);
            let result = unframe(&bytes, MAGIC, 0..=u32::MAX);
            prop_assert_ne!(&result, &Err(CodecError::BadMagic));
            // A valid result must describe exactly the bytes it was given.
            if let Ok(got) = result {
                prop_assert_eq!(HEADER_LEN + got.payload.len(), bytes.len());
            }
        }
    }
}
