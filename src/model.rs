//! The domain types: ids, sources and their sink entries, rows, dead-letter reasons.

use serde::{Deserialize, Serialize};
use std::fmt;

// The id check lives below every layer (the config checks tenant ids too); the domain
// re-exports it where callers have always found it.
pub use crate::ids::{check_id, BadId};

/// One entry of a source's ordered sink list, with its delivery policy (`docs/sinks.md`
/// "Per-entry policy").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkEntry {
    /// The sink module: `http`, `sqs` or `pubsub` (see `docs/sinks.md`).
    pub module: String,
    /// Module options; strings may hold secret references `${env:NAME}` resolved at attempt time.
    #[serde(default)]
    pub opts: serde_json::Map<String, serde_json::Value>,
    /// Deliver the hooks of one lane one at a time, in commit order.
    #[serde(default)]
    pub ordered: bool,
    /// Where an ordered entry's lane key comes from: `header:<name>` (a header the
    /// producer sets) or `json:<pointer>` (an RFC 6901 JSON pointer into the body, e.g.
    /// `json:/order/id`). A hook without that header or value (or with a body over 64 KiB,
    /// which the commit script does not decode) goes to the default lane, the empty key. `None` on an ordered entry: every hook of the entry is one lane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Which hooks the entry receives, by event type and content ([`EventFilter`]);
    /// `None`: every hook. A hook the filter refuses makes no row for this entry at commit,
    /// and a row whose entry's filter, edited since, refuses its hook is dropped at binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<EventFilter>,
    /// The entry's retry policy over the global `[retry]`; `None`: the global one. Read
    /// from the source as it is when an attempt fails, never stored in a row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<EntryRetry>,
    /// A token bucket per sink key, enforced by the leader; `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Disable the entry after this long of continuous failure, ms; `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_after_ms: Option<u64>,
    /// Set by the leader when the entry was disabled after `disable_after_ms` of failure;
    /// cleared by `ankusa source enable`. A disabled entry gets no new rows and its rows are
    /// dead-lettered `sink_disabled(index)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<Disabled>,
}

impl SinkEntry {
    /// An unordered `http` entry POSTing to `url`, with no policy of its own.
    pub fn http(url: &str) -> SinkEntry {
        let mut opts = serde_json::Map::new();
        opts.insert("url".into(), url.into());
        SinkEntry {
            module: "http".into(),
            opts,
            ..Default::default()
        }
    }
}

impl SinkEntry {
    /// Check the entry's module-independent policy fields: the lane key (ordered entries
    /// only), the event filter, the retry policy (alone and within the operator's caps in
    /// `bounds`) and the rate limit. The error starts with the field's name.
    pub fn check_policy(&self, bounds: &crate::config::SourceBounds) -> Result<(), String> {
        if let Some(k) = &self.key {
            if !self.ordered {
                return Err("key: only ordered entries have a lane key".into());
            }
            if lane_spec(k).is_none() {
                return Err(format!("key: {k:?} must be `header:<name>` or `json:<pointer>` (pointer empty or starting with '/')"));
            }
        }
        if let Some(f) = &self.filter {
            f.validate().map_err(|e| format!("filter.{e}"))?;
        }
        if let Some(r) = &self.retry {
            r.validate().map_err(|e| format!("retry.{e}"))?;
            r.within(bounds.max_attempts, bounds.max_elapsed_ms)
                .map_err(|e| format!("retry.{e}"))?;
        }
        if let Some(r) = &self.rate_limit {
            r.validate().map_err(|e| format!("rate_limit.{e}"))?;
        }
        Ok(())
    }
}

pub use crate::filter::{check_event_type, EventFilter, EVENT_TYPE_MAX_BYTES};

/// An entry's retry policy: each field set replaces the global `[retry]` field of the
/// same name for this entry's rows; unset fields keep the global value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryRetry {
    /// Delays before the 2nd, 3rd, … attempt, ms (each >= 1, 1..=64 of them); the last
    /// repeats. Replaces the exponential backoff (`initial_backoff_ms`, `max_backoff_ms`,
    /// `multiplier`); no jitter unless `jitter` is set here. `retry.min_backoff_ms` and a
    /// sink's `Retry-After` still raise a delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_ms: Option<Vec<u64>>,
    /// Backoff after the first failed attempt, ms; > 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_backoff_ms: Option<u64>,
    /// Longest backoff, ms; >= the initial backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backoff_ms: Option<u64>,
    /// Backoff growth factor per failed attempt; finite, >= 1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiplier: Option<f64>,
    /// Random spread of each delay as a fraction of it; 0.0..=1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<f64>,
    /// Retry horizon from a row's first attempt, ms; > 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_elapsed_ms: Option<u64>,
    /// Attempts before a row is dead-lettered `max_attempts(module)`; 0 = no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
}

impl EntryRetry {
    /// Check each field set, alone and against the others set here.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(s) = &self.schedule_ms {
            if s.is_empty() || s.len() > 64 || s.contains(&0) {
                return Err("schedule_ms: 1..=64 delays, each >= 1 ms".into());
            }
        }
        if self.initial_backoff_ms == Some(0) {
            return Err("initial_backoff_ms: must be > 0".into());
        }
        if let (Some(i), Some(m)) = (self.initial_backoff_ms, self.max_backoff_ms) {
            if m < i {
                return Err("max_backoff_ms: must be >= initial_backoff_ms".into());
            }
        }
        if self.max_backoff_ms == Some(0) {
            return Err("max_backoff_ms: must be > 0".into());
        }
        if let Some(m) = self.multiplier {
            if !m.is_finite() || m < 1.0 {
                return Err("multiplier: must be finite and >= 1.0".into());
            }
        }
        if let Some(j) = self.jitter {
            if !(0.0..=1.0).contains(&j) {
                return Err("jitter: must be in 0.0..=1.0".into());
            }
        }
        if self.max_elapsed_ms == Some(0) {
            return Err("max_elapsed_ms: must be > 0".into());
        }
        Ok(())
    }

    /// Check the fields set against the operator's caps, `retry.max_attempts` (0: none) and
    /// `retry.max_elapsed_ms`: an entry may give up sooner, never later.
    pub fn within(&self, max_attempts: u32, max_elapsed_ms: u64) -> Result<(), String> {
        if let Some(a) = self.max_attempts {
            if max_attempts > 0 && (a == 0 || a > max_attempts) {
                let asked = match a {
                    0 => "0 (no limit)".to_string(),
                    a => a.to_string(),
                };
                return Err(format!(
                    "max_attempts: {asked} exceeds the operator's limit of {max_attempts} \
                     (retry.max_attempts = {max_attempts})"
                ));
            }
        }
        if let Some(e) = self.max_elapsed_ms {
            if e > max_elapsed_ms {
                return Err(format!(
                    "max_elapsed_ms: {e} exceeds the operator's limit of {max_elapsed_ms} \
                     (retry.max_elapsed_ms = {max_elapsed_ms})"
                ));
            }
        }
        Ok(())
    }
}

/// A rate limit per sink key: a token bucket of `burst` tokens refilled at
/// `per_second`; each attempt takes one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Attempts per second in the long run; finite, > 0 and <= 1000000.
    pub per_second: f64,
    /// Attempts that may run back to back after a quiet spell; >= 1. Default: one second's
    /// worth (`per_second` rounded up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

impl RateLimit {
    /// Check the fields.
    pub fn validate(&self) -> Result<(), String> {
        if !self.per_second.is_finite() || self.per_second <= 0.0 || self.per_second > 1e6 {
            return Err("per_second: must be > 0 and <= 1000000".into());
        }
        if self.burst == Some(0) {
            return Err("burst: must be >= 1".into());
        }
        Ok(())
    }

    /// The bucket's size: `burst`, or `per_second` rounded up.
    pub fn burst(&self) -> u32 {
        self.burst
            .unwrap_or_else(|| self.per_second.ceil().clamp(1.0, u32::MAX as f64) as u32)
    }
}

/// Why and since when an entry is disabled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disabled {
    /// When the leader disabled it, Unix ms.
    pub at_ms: i64,
    /// Why, e.g. `failing for 3000 ms (last error: http 500)`.
    pub reason: String,
}

/// A tenant's named origin of events and its sinks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// Sink entries, in order; a row binds to `(index, module)` at commit.
    pub sinks: Vec<SinkEntry>,
}

impl SourceSpec {
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

    /// The `gates` field the commit script reads: one per entry, `true` (every hook),
    /// `false` (disabled: no row), or the filter's patterns; `None` when every entry takes
    /// every hook (the script's fast path).
    pub fn gates_json(&self) -> Option<String> {
        if !self
            .sinks
            .iter()
            .any(|s| s.filter.is_some() || s.disabled.is_some())
        {
            return None;
        }
        let gates: Vec<serde_json::Value> = self
            .sinks
            .iter()
            .map(|s| match (&s.disabled, &s.filter) {
                (Some(_), _) => serde_json::Value::Bool(false),
                (None, None) => serde_json::Value::Bool(true),
                (None, Some(f)) => f.gate_json(),
            })
            .collect();
        serde_json::to_string(&gates).ok()
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
    /// The sink answered a permanent error.
    Permanent(String),
    /// The retry horizon passed.
    RetryHorizon(String),
    /// `retry.max_attempts` attempts failed.
    MaxAttempts(String),
    /// The row's sink entry is gone.
    SinkGone(u32, String),
    /// The row's source is gone.
    SourceGone(String),
    /// The row or its hook could not be read.
    Malformed(String),
    /// The row's sink entry was disabled after prolonged failure; replayable.
    SinkDisabled(u32),
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
            DeadReason::SinkDisabled(i) => write!(f, "sink_disabled({i})"),
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
            DeadReason::SinkDisabled(_) => "sink_disabled",
        }
    }

    /// Every kind, as [`DeadReason::kind`] names them.
    pub const KINDS: [&'static str; 7] = [
        "permanent",
        "retry_horizon",
        "max_attempts",
        "sink_gone",
        "source_gone",
        "malformed",
        "sink_disabled",
    ];

    /// The kind of a reason as a dead letter stores it (`kind(detail)`, the [`fmt::Display`]
    /// form, which the scripts write too); `None` for text of no known kind (a stream
    /// written by other means).
    pub fn kind_of(stored: &str) -> Option<&'static str> {
        // The detail may have been cut short where it was stored: the kind is what counts.
        let (kind, _) = stored.split_once('(')?;
        Self::KINDS.into_iter().find(|k| *k == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_reason_tells_its_kind_and_unknown_text_none() {
        let all = [
            DeadReason::Permanent("http 410".into()),
            DeadReason::RetryHorizon("3600000 ms".into()),
            DeadReason::MaxAttempts("5".into()),
            DeadReason::SinkGone(2, "sqs".into()),
            DeadReason::SourceGone("orders".into()),
            DeadReason::Malformed("field t missing".into()),
            DeadReason::SinkDisabled(1),
        ];
        let kinds: Vec<&str> = all.iter().map(DeadReason::kind).collect();
        assert_eq!(kinds, DeadReason::KINDS, "every kind listed, in order");
        for r in &all {
            assert_eq!(DeadReason::kind_of(&r.to_string()), Some(r.kind()), "{r}");
        }
        assert_eq!(DeadReason::kind_of("permanent(http 5"), Some("permanent"));
        for odd in ["", "permanent", "perm(x)", "(x)", "Permanent(x)"] {
            assert_eq!(DeadReason::kind_of(odd), None, "{odd:?}");
        }
    }

    #[test]
    fn row_ids_round_trip_and_garbage_is_refused() {
        let r = RowId { hook: 42, sink: 3 };
        assert_eq!(RowId::parse(&r.to_string()), Some(r));
        for bad in ["", "42", "42.", ".3", "a.b", "4 2.1", "1.2.3", "-1.0"] {
            assert_eq!(RowId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn filters_match_exact_types_and_dotted_prefixes() {
        let f = EventFilter::types(vec!["push".into(), "pull_request.*".into()]);
        assert!(f.validate().is_ok());
        for yes in ["push", "pull_request", "pull_request.opened"] {
            assert!(f.matches(Some(yes)), "{yes}");
        }
        for no in [
            "pushed",
            "pull_request_review",
            "pull_request_review.submitted",
            "issues",
        ] {
            assert!(!f.matches(Some(no)), "{no}");
        }
        assert!(!f.matches(None));
        for bad in [vec![], vec!["a*".into()], vec!["a b".into()]] {
            assert!(
                EventFilter::types(bad.clone()).validate().is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn gates_are_written_only_when_an_entry_filters_or_is_disabled() {
        let mut spec = SourceSpec {
            sinks: vec![
                SinkEntry {
                    module: "http".into(),
                    ..Default::default()
                };
                2
            ],
        };
        assert_eq!(spec.gates_json(), None);
        spec.sinks[0].filter = Some(EventFilter::types(vec!["push".into()]));
        spec.sinks[1].disabled = Some(Disabled::default());
        assert_eq!(spec.gates_json().as_deref(), Some(r#"[["push"],false]"#));
    }

    #[test]
    fn ids_with_separators_are_refused() {
        assert!(check_id("tenant", "acme-1.eu_x").is_ok());
        for bad in ["", "a:b", "a/b", "a b", "{x}", &"x".repeat(129)] {
            assert!(check_id("tenant", bad).is_err(), "{bad}");
        }
    }
}
