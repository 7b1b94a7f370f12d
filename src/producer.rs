//! The producer side: commit hooks from Rust. Other languages commit with the
//! protocol in `docs/commit-protocol.md` (one `EVALSHA` of `lua/commit.lua`).

use crate::error::Error;
use crate::store::{CommitError, CommitOptions, CommitReceipt, Quota, Schedule, Store};
use bytes::Bytes;
use std::collections::BTreeMap;

/// A hook to commit: body bytes (any bytes; binary is kept exactly) and headers that the
/// HTTP sink forwards (e.g. `content-type`, `x-github-event`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hook {
    /// Body bytes.
    pub body: Bytes,
    /// Header name → value.
    pub headers: BTreeMap<String, String>,
    /// The producer's idempotency key: a second commit with the same key to the same tenant
    /// and source within `commit.idempotency_ms` answers the first hook's id and writes
    /// nothing (at most [`crate::store::IDEMPOTENCY_KEY_MAX_BYTES`] bytes).
    pub idempotency_key: Option<String>,
    /// The hook's event type (`push`, `pull_request.opened`): what the sink entries' event
    /// filters match; `None`: only entries without a filter take it. 1..=128 bytes of
    /// `[A-Za-z0-9_.:/-]`.
    pub event_type: Option<String>,
    /// When to deliver it (scheduled delivery); `None`: at once. Its rows are due at that
    /// time by the Redis clock; a time not after the commit is due at once, one further
    /// ahead than the leader's `commit.max_delay_ms` is refused
    /// ([`CommitError::TooLate`]). Until then `ankusa hooks cancel` can cancel it.
    pub schedule: Option<Schedule>,
}

impl Hook {
    /// A hook with a body and no headers.
    pub fn new(body: impl Into<Bytes>) -> Hook {
        Hook {
            body: body.into(),
            headers: BTreeMap::new(),
            idempotency_key: None,
            event_type: None,
            schedule: None,
        }
    }

    /// Deliver it at `ms` since the Unix epoch (see [`Hook::schedule`]).
    pub fn deliver_at_ms(mut self, ms: u64) -> Hook {
        self.schedule = Some(Schedule::At(ms));
        self
    }

    /// Deliver it `delay` after the commit, by the Redis clock, to the millisecond (see
    /// [`Hook::schedule`]).
    pub fn delay(mut self, delay: std::time::Duration) -> Hook {
        self.schedule = Some(Schedule::Delay(
            u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        ));
        self
    }

    /// Set the event type (see [`Hook::event_type`]).
    pub fn event_type(mut self, event_type: impl Into<String>) -> Hook {
        self.event_type = Some(event_type.into());
        self
    }

    /// Set the producer idempotency key (see [`Hook::idempotency_key`]).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Hook {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Add a header. A name that is not an HTTP token, or a value with a control character
    /// other than tab, makes the commit fail with [`CommitError::BadRequest`]; a
    /// `webhook-*` or `ankusa-*` name (the delivery's own headers) with
    /// [`CommitError::ReservedHeader`].
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Hook {
        self.headers.insert(name.into(), value.into());
        self
    }

    fn headers_json(&self, index: usize) -> Result<String, CommitError> {
        if self.headers.is_empty() {
            return Ok(String::new());
        }
        // The HTTP sink's own rules (a token name; a value without control characters other
        // than tab), so a hook that commits can be sent: one that cannot would fail every
        // attempt alike until the retry horizon.
        for (k, v) in &self.headers {
            if crate::sinks::is_reserved_header(k) {
                return Err(CommitError::ReservedHeader {
                    index,
                    name: k.clone(),
                });
            }
            let valid_name = reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_ok();
            if !valid_name || reqwest::header::HeaderValue::from_str(v).is_err() {
                return Err(CommitError::BadRequest(format!("invalid header {k:?}")));
            }
        }
        serde_json::to_string(&self.headers).map_err(|e| CommitError::BadRequest(e.to_string()))
    }
}

/// Commits hooks to one instance.
#[derive(Debug, Clone)]
pub struct Producer {
    store: Store,
    max_hook_bytes: usize,
    idempotency_ms: u64,
    /// Tenants' quotas (`limits.max_pending_*`); `None`: unbounded, the operator's own.
    quotas: Option<std::sync::Arc<crate::config::SourcePolicy>>,
}

/// `commit.idempotency_ms`'s default: 24 h.
pub const DEFAULT_IDEMPOTENCY_MS: u64 = 24 * 3_600_000;

impl Producer {
    /// A producer over a connected store; bodies over `max_hook_bytes` are refused.
    /// Each commit goes to its tenant's partition ([`crate::keyspace::partition_of`]) among
    /// the store's [`Store::partitions`] (set it with [`Store::with_partitions`] to the
    /// instance's `partitions`).
    pub fn new(store: Store, max_hook_bytes: usize) -> Producer {
        Producer {
            store,
            max_hook_bytes,
            idempotency_ms: DEFAULT_IDEMPOTENCY_MS,
            quotas: None,
        }
    }

    /// Hold each tenant to its quota (`limits.max_pending_bytes`, `max_pending_hooks` under
    /// its `[tenants.<id>]` overrides): a commit that would take its stored hooks past either
    /// is refused ([`CommitError::QuotaExceeded`]). Ingest commits with it; a producer of
    /// the operator's own need not.
    pub fn with_quotas(mut self, policy: std::sync::Arc<crate::config::SourcePolicy>) -> Producer {
        self.quotas = Some(policy);
        self
    }

    /// How long an idempotency key answers the first hook's id, ms (`commit.idempotency_ms`;
    /// default [`DEFAULT_IDEMPOTENCY_MS`]).
    pub fn with_idempotency_ms(mut self, ms: u64) -> Producer {
        self.idempotency_ms = ms;
        self
    }

    /// Connect to `url` for `instance` of one partition (see [`Producer::new`] for more).
    pub async fn connect(
        url: &str,
        instance: &str,
        max_hook_bytes: usize,
    ) -> Result<Producer, Error> {
        Ok(Producer::new(
            Store::connect(url, instance, 5_000).await?,
            max_hook_bytes,
        ))
    }

    /// Commit one hook to `(tenant, source)`: stored once, one row per sink entry, due now.
    pub async fn commit(
        &self,
        tenant: &str,
        source: &str,
        hook: Hook,
    ) -> Result<CommitReceipt, CommitError> {
        self.commit_many(tenant, source, std::slice::from_ref(&hook))
            .await
    }

    /// Commit several hooks in one atomic call (all or none); ids are consecutive unless a
    /// hook has an idempotency key already committed (then see [`Producer::commit_ids`]).
    pub async fn commit_many(
        &self,
        tenant: &str,
        source: &str,
        hooks: &[Hook],
    ) -> Result<CommitReceipt, CommitError> {
        self.commit_ids(tenant, source, hooks).await.map(|(r, _)| r)
    }

    /// [`Producer::commit_many`] that also answers each hook's id: a hook whose idempotency
    /// key was committed within `commit.idempotency_ms` answers the first hook's id and is
    /// not written again.
    pub async fn commit_ids(
        &self,
        tenant: &str,
        source: &str,
        hooks: &[Hook],
    ) -> Result<(CommitReceipt, Vec<u64>), CommitError> {
        let mut items = Vec::with_capacity(hooks.len());
        for (i, h) in hooks.iter().enumerate() {
            items.push((h.body.clone(), h.headers_json(i)?));
        }
        let keys: Vec<Option<String>> = hooks.iter().map(|h| h.idempotency_key.clone()).collect();
        let opts = CommitOptions {
            idempotency_keys: if keys.iter().any(Option::is_some) {
                keys
            } else {
                Vec::new()
            },
            idempotency_ms: self.idempotency_ms,
            only_sink: None,
            event_types: if hooks.iter().any(|h| h.event_type.is_some()) {
                hooks.iter().map(|h| h.event_type.clone()).collect()
            } else {
                Vec::new()
            },
            schedules: if hooks.iter().any(|h| h.schedule.is_some()) {
                hooks.iter().map(|h| h.schedule).collect()
            } else {
                Vec::new()
            },
            quota: self.quotas.as_ref().map(|p| {
                let q = p.quota(tenant);
                Quota {
                    max_bytes: q.max_pending_bytes.value,
                    max_hooks: q.max_pending_hooks.value,
                    keys: [q.max_pending_bytes.key, q.max_pending_hooks.key],
                }
            }),
        };
        let r = self
            .store
            .commit_with(tenant, source, &items, self.max_hook_bytes, &opts)
            .await;
        if let Ok((receipt, _)) = &r {
            metrics::counter!("ankusa_hooks_committed_total").increment(hooks.len() as u64);
            metrics::counter!("ankusa_commits_total").increment(hooks.len() as u64);
            if receipt.unmatched > 0 {
                metrics::counter!("ankusa_hooks_unmatched_total")
                    .increment(u64::from(receipt.unmatched));
            }
        }
        // Commits Redis refused (`oom` on a full Redis, `readonly`, `timeout`…): what a
        // producer saw as an error, counted for the alert on a full Redis.
        match &r {
            Err(CommitError::Store(e)) => {
                metrics::counter!("ankusa_commits_refused_total", "reason" => e.kind())
                    .increment(1);
            }
            Err(CommitError::QuotaExceeded { .. }) => {
                metrics::counter!("ankusa_commits_refused_total", "reason" => "quota").increment(1);
            }
            _ => {}
        }
        r
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// A delivery time as producers write it (`Ankusa-Deliver-At`, `ankusa produce
/// --deliver-at`): milliseconds since the Unix epoch (digits only) or an RFC 3339 date and
/// time with its offset (`2026-12-24T18:00:00Z`, `2026-12-24T19:00:00+01:00`). Errors say
/// what was expected; a time before the epoch is refused.
pub fn parse_deliver_at(text: &str) -> Result<Schedule, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<u64>()
            .map(Schedule::At)
            .map_err(|e| format!("{t:?}: {e}"));
    }
    let when = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
        .map_err(|e| {
            format!(
                "{t:?}: {e}; expected milliseconds since the Unix epoch or an RFC 3339 time such \
                 as 2026-12-24T18:00:00Z"
            )
        })?;
    let ms = when.unix_timestamp_nanos() / 1_000_000;
    u64::try_from(ms)
        .map(Schedule::At)
        .map_err(|_| format!("{t:?}: before the Unix epoch"))
}

/// A delay as producers write it (`Ankusa-Delay`, `ankusa produce --delay`): milliseconds
/// (digits only) or a duration such as `4s`, `15m`, `2h 30m` (the config's duration form).
pub fn parse_delay(text: &str) -> Result<Schedule, String> {
    crate::config::parse_ms(text).map(Schedule::Delay)
}
