//! The attempt history's record: what `settle.lua` appends to `attempts:<hook>` for each
//! finished attempt (the settle call's history argument), and what the read side reads back.

use crate::config::HistoryConfig;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Attempt records kept per hook (the newest; `settle.lua` trims with `LTRIM -100 -1`).
pub const ATTEMPTS_PER_HOOK: usize = 100;
/// Bytes of an attempt's error (with the sink's bounded response prefix) kept in its record.
pub const HISTORY_ERROR_BYTES: usize = 256;
/// One attempt, as recorded in the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AttemptRecord {
    /// Row id `<hook>.<sink index>`.
    pub row: String,
    /// Sink index of the row.
    pub sink: u32,
    /// 1-based attempt number of the row.
    pub attempt: u32,
    /// When the attempt started (ms since the epoch, Redis clock).
    pub started_ms: i64,
    /// How long it ran, ms.
    pub duration_ms: u64,
    /// `delivered`, `retry` (due again at `next_attempt_ms`) or `dead_lettered`.
    pub outcome: String,
    /// The HTTP status the sink answered, when it answered one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The kind of error ([`crate::sinks::ErrorKind`]): `http_status`, `timeout`, `connect`, `secret`,
    /// `invalid_headers`, `transport`, `other`; absent when delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// The error with the sink's bounded response prefix, at most [`HISTORY_ERROR_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For `retry`: when the row is due again (ms, Redis clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_ms: Option<i64>,
    /// For `dead_lettered`: the reason (`permanent(…)`, `retry_horizon(…)`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl AttemptRecord {
    /// The record of a failed attempt of `kind` (its name, and its status for an HTTP
    /// answer); `error` is cut to [`HISTORY_ERROR_BYTES`].
    pub fn failed(
        mut self,
        outcome: &str,
        error: &str,
        kind: crate::sinks::ErrorKind,
    ) -> AttemptRecord {
        self.outcome = outcome.into();
        self.status = kind.status();
        self.error_kind = Some(kind.as_str().into());
        self.error = Some(crate::sinks::truncate(
            error.to_string(),
            HISTORY_ERROR_BYTES,
        ));
        self
    }
}

/// The history argument of `settle.lua` for one batch ([`super::Store::settle_with`]): `records` are `(outcome index, hook
/// id, record)`. `None` when `history.enabled` is false (nothing recorded, nothing kept).
pub fn history_arg<'a>(
    cfg: &HistoryConfig,
    records: impl Iterator<Item = (usize, u64, &'a AttemptRecord)>,
) -> Option<String> {
    use std::fmt::Write as _;
    if !cfg.enabled {
        return None;
    }
    // Written straight into one buffer: building a `serde_json::Value` tree per
    // record cost an allocation per field on every settle call.
    let mut out = String::with_capacity(96);
    let _ = write!(
        out,
        r#"{{"age":{},"max":{},"keep":true,"kb":{},"rec":["#,
        cfg.max_age_ms, cfg.max_per_tenant, cfg.kept_max_bytes
    );
    Some(push_records(out, records))
}

/// The delivery log's argument of `settle.lua` for one batch, with a log store: the records
/// go to the partition's `log` stream (at most `max_entries` entries) and nothing is kept per
/// hook in Redis. `records` as for [`history_arg`].
pub fn log_arg<'a>(
    max_bytes: u64,
    keep_bodies: u64,
    records: impl Iterator<Item = (usize, u64, &'a AttemptRecord)>,
) -> String {
    push_records(
        format!(r#"{{"log":{max_bytes},"kb":{keep_bodies},"rec":["#),
        records,
    )
}

/// `records` written into `out` as `[index,hook,"record JSON text"]` items, and the argument
/// closed.
fn push_records<'a>(
    mut out: String,
    records: impl Iterator<Item = (usize, u64, &'a AttemptRecord)>,
) -> String {
    use std::fmt::Write as _;
    let mut first = true;
    for (i, hook, r) in records {
        // The record travels as JSON text inside the argument: settle.lua stores it as is.
        let Ok(text) = serde_json::to_string(r) else {
            continue;
        };
        let Ok(quoted) = serde_json::to_string(&text) else {
            continue;
        };
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "[{i},{hook},{quoted}]");
    }
    out.push_str("]}");
    out
}
