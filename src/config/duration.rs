//! Durations in the config: every `*_ms` key takes an integer of milliseconds (`30000`) or a
//! duration in words (`"30s"`, `"15m"`, `"24h"`, `"7d"`, `"1h 30m"`, `"500ms"`), read by the
//! `humantime` parser, in the file and in `ANKUSA_*` environment overrides alike. The
//! merged config (`ankusa config check`) shows milliseconds.

use serde::{de, Deserializer};
use std::fmt;

/// A duration as milliseconds: digits alone are milliseconds, anything else a `humantime`
/// duration. Errors say what was expected.
pub fn parse_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<u64>().map_err(|e| format!("{t:?}: {e}"));
    }
    let d = humantime::parse_duration(t).map_err(|e| {
        format!(
            "{t:?}: {e}; expected milliseconds (30000) or a duration such as \"30s\", \"15m\", \
             \"24h\", \"7d\""
        )
    })?;
    u64::try_from(d.as_millis()).map_err(|_| format!("{t:?}: too long"))
}

/// The serde visitor of a `*_ms` value: an unsigned integer or a duration string.
struct Millis;

impl de::Visitor<'_> for Millis {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("milliseconds (an integer) or a duration such as \"30s\", \"24h\", \"7d\"")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        parse_ms(v).map_err(E::custom)
    }
}

/// `#[serde(deserialize_with = "…")]` of every `*_ms` config field (see the module).
pub(super) fn ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_and_durations_in_words_both_read_as_milliseconds() {
        for (text, ms) in [
            ("30000", 30_000),
            ("30s", 30_000),
            ("500ms", 500),
            ("15m", 900_000),
            ("24h", 86_400_000),
            ("7d", 604_800_000),
            ("1h 30m", 5_400_000),
            (" 2s ", 2_000),
            ("1.5h", 5_400_000),
        ] {
            assert_eq!(parse_ms(text), Ok(ms), "{text}");
        }
        for bad in ["", "soon", "-5s", "5 parsecs", "5x"] {
            let e = parse_ms(bad).expect_err(bad);
            assert!(e.contains("expected milliseconds"), "{bad}: {e}");
        }
    }
}
