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
    if !cfg.enabled {
        return None;
    }
    let rec: Vec<serde_json::Value> = records
        .filter_map(|(i, hook, r)| {
            let text = serde_json::to_string(r).ok()?;
            Some(serde_json::json!([i, hook, text]))
        })
        .collect();
    serde_json::to_string(&serde_json::json!({
        "age": cfg.max_age_ms,
        "max": cfg.max_per_tenant,
        "keep": true,
        "kb": cfg.kept_max_bytes,
        "rec": rec,
    }))
    .ok()
}
