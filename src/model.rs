//! The domain types: ids, sources and their sink entries, rows, dead-letter reasons.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why an id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} id {value:?}: must match [A-Za-z0-9_.-]{{1,128}}")]
pub struct BadId {
    /// `tenant` or `source`.
    pub kind: &'static str,
    /// The value given.
    pub value: String,
}

/// Check a tenant or source id: `[A-Za-z0-9_.-]{1,128}`, so ids never need escaping in keys.
pub fn check_id(kind: &'static str, value: &str) -> Result<(), BadId> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(BadId {
            kind,
            value: value.to_string(),
        })
    }
}

/// One entry of a source's ordered sink list (R19).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkEntry {
    /// The sink module: `http`, `sqs` or `pubsub` (see `docs/sinks.md`).
    pub module: String,
    /// Module options; strings may hold secret references `${env:NAME}` resolved at attempt time.
    #[serde(default)]
    pub opts: serde_json::Map<String, serde_json::Value>,
    /// Deliver the hooks of one lane one at a time, in commit order (R10).
    #[serde(default)]
    pub ordered: bool,
    /// Where an ordered entry's lane key comes from (R10): `header:<name>` (a header the
    /// producer sets) or `json:<pointer>` (an RFC 6901 JSON pointer into the body, e.g.
    /// `json:/order/id`). A hook without that header or value goes to the default lane, the
    /// empty key. `None` on an ordered entry: every hook of the entry is one lane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A tenant's named origin of events and its sinks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// Sink entries, in order; a row binds to `(index, module)` at commit.
    pub sinks: Vec<SinkEntry>,
}

/// The sink modules this build can deliver to.
pub const MODULES: &[&str] = &["http", "sqs", "pubsub"];

impl SourceSpec {
    /// Check every entry: a known module and the options it needs, under the secure default
    /// guards ([`crate::sinks::EdgePolicy::default`]).
    pub fn validate(&self) -> Result<(), String> {
        self.validate_with(&crate::sinks::EdgePolicy::default())
    }

    /// [`SourceSpec::validate`] under `edge`: the SSRF guard for literal IP hosts
    /// (`http.allow_cidrs`) and the secret references allowed (`secrets.*`).
    pub fn validate_with(&self, edge: &crate::sinks::EdgePolicy) -> Result<(), String> {
        for (i, s) in self.sinks.iter().enumerate() {
            if !MODULES.contains(&s.module.as_str()) {
                return Err(format!(
                    "sinks[{i}].module: unknown module {:?} (known: {})",
                    s.module,
                    MODULES.join(", ")
                ));
            }
            if let Some(k) = &s.key {
                if !s.ordered {
                    return Err(format!(
                        "sinks[{i}].key: only ordered entries have a lane key"
                    ));
                }
                if lane_spec(k).is_none() {
                    return Err(format!("sinks[{i}].key: {k:?} must be `header:<name>` or `json:<pointer>` (pointer empty or starting with '/')"));
                }
            }
            let checked = match s.module.as_str() {
                "http" => crate::sinks::http::HttpOpts::from_opts_with(&s.opts, edge).map(drop),
                "sqs" => crate::sinks::sqs::SqsOpts::from_opts_with(&s.opts, edge).map(drop),
                "pubsub" => {
                    crate::sinks::pubsub::PubSubOpts::from_opts_with(&s.opts, edge).map(drop)
                }
                _ => Ok(()),
            };
            checked.map_err(|e| format!("sinks[{i}].opts: {e}"))?;
        }
        Ok(())
    }

    /// The `lanes` field the commit script reads: one spec per entry (`""` unordered,
    /// `h:<lowercased header>`, `j:<pointer>`, `c:` one lane for the whole entry); `None` when
    /// no entry is ordered.
    pub fn lanes_json(&self) -> Option<String> {
        if !self.sinks.iter().any(|s| s.ordered) {
            return None;
        }
        let specs: Vec<String> = self
            .sinks
            .iter()
            .map(|s| match (s.ordered, s.key.as_deref()) {
                (false, _) => String::new(),
                (true, None) => "c:".to_string(),
                (true, Some(k)) => lane_spec(k).unwrap_or_default(),
            })
            .collect();
        serde_json::to_string(&specs).ok()
    }

    /// The modules csv the commit script stores with each hook.
    pub fn modules_csv(&self) -> String {
        self.sinks
            .iter()
            .map(|s| s.module.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The commit script's form of a lane key spec: `header:X-Order` → `h:x-order`,
/// `json:/a/b` → `j:/a/b`; `None` when malformed.
pub fn lane_spec(key: &str) -> Option<String> {
    if let Some(h) = key.strip_prefix("header:") {
        let h = h.trim();
        return (!h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic() && b != b':'))
            .then(|| format!("h:{}", h.to_ascii_lowercase()));
    }
    let p = key.strip_prefix("json:")?;
    (p.is_empty() || p.starts_with('/')).then(|| format!("j:{p}"))
}

/// A delivery row id: `<hook id>.<sink index>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowId {
    /// The hook.
    pub hook: u64,
    /// The sink index the row was bound to at commit.
    pub sink: u32,
}

impl RowId {
    /// Parse `<hook>.<sink>`; `None` for anything else (a malformed row).
    pub fn parse(s: &str) -> Option<RowId> {
        let (h, i) = s.split_once('.')?;
        if h.is_empty()
            || i.is_empty()
            || !h.bytes().all(|b| b.is_ascii_digit())
            || !i.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        Some(RowId {
            hook: h.parse().ok()?,
            sink: i.parse().ok()?,
        })
    }
}

impl fmt::Display for RowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.hook, self.sink)
    }
}

/// Why a row was dead-lettered; rendered into the dead-letter stream's `reason` field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadReason {
    /// The sink answered a permanent error (R8).
    Permanent(String),
    /// The retry horizon passed (R9, R16).
    RetryHorizon(String),
    /// `retry.max_attempts` attempts failed.
    MaxAttempts(String),
    /// The row's sink entry is gone (R19).
    SinkGone(u32, String),
    /// The row's source is gone (R19, R20).
    SourceGone(String),
    /// The row or its hook could not be read.
    Malformed(String),
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeadReason::Permanent(r) => write!(f, "permanent({r})"),
            DeadReason::RetryHorizon(m) => write!(f, "retry_horizon({m})"),
            DeadReason::MaxAttempts(m) => write!(f, "max_attempts({m})"),
            DeadReason::SinkGone(i, m) => write!(f, "sink_gone({i}, {m})"),
            DeadReason::SourceGone(s) => write!(f, "source_gone({s})"),
            DeadReason::Malformed(d) => write!(f, "malformed({d})"),
        }
    }
}

impl DeadReason {
    /// The reason's kind, a bounded metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            DeadReason::Permanent(_) => "permanent",
            DeadReason::RetryHorizon(_) => "retry_horizon",
            DeadReason::MaxAttempts(_) => "max_attempts",
            DeadReason::SinkGone(..) => "sink_gone",
            DeadReason::SourceGone(_) => "source_gone",
            DeadReason::Malformed(_) => "malformed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_ids_round_trip_and_garbage_is_refused() {
        let r = RowId { hook: 42, sink: 3 };
        assert_eq!(RowId::parse(&r.to_string()), Some(r));
        for bad in ["", "42", "42.", ".3", "a.b", "4 2.1", "1.2.3", "-1.0"] {
            assert_eq!(RowId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn ids_with_separators_are_refused() {
        assert!(check_id("tenant", "acme-1.eu_x").is_ok());
        for bad in ["", "a:b", "a/b", "a b", "{x}", &"x".repeat(129)] {
            assert!(check_id("tenant", bad).is_err(), "{bad}");
        }
    }
}
