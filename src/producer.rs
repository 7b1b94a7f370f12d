//! The producer side (R1): commit hooks from Rust. Other languages commit with the
//! protocol in `docs/commit-protocol.md` (one `EVALSHA` of `lua/commit.lua`).

use crate::error::Error;
use crate::store::{CommitError, CommitOptions, CommitReceipt, Store};
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
    /// filters match (P9); `None`: only entries without a filter take it. 1..=128 bytes of
    /// `[A-Za-z0-9_.:/-]`.
    pub event_type: Option<String>,
}

impl Hook {
    /// A hook with a body and no headers.
    pub fn new(body: impl Into<Bytes>) -> Hook {
        Hook {
            body: body.into(),
            headers: BTreeMap::new(),
            idempotency_key: None,
            event_type: None,
        }
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
    /// other than tab, makes the commit fail with [`CommitError::BadRequest`] (R1); a
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
}

/// `commit.idempotency_ms`'s default: 24 h.
pub const DEFAULT_IDEMPOTENCY_MS: u64 = 24 * 3_600_000;

impl Producer {
    /// A producer over a connected store; bodies over `max_hook_bytes` are refused (R1).
    /// Each commit goes to its tenant's partition ([`crate::keyspace::partition_of`]) among
    /// the store's [`Store::partitions`] (set it with [`Store::with_partitions`] to the
    /// instance's `partitions`).
    pub fn new(store: Store, max_hook_bytes: usize) -> Producer {
        Producer {
            store,
            max_hook_bytes,
            idempotency_ms: DEFAULT_IDEMPOTENCY_MS,
        }
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
        r
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }
}
