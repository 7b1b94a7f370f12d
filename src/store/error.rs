//! The errors of store calls: [`StoreError`] for every script and read, [`CommitError`] for
//! commits.

/// Errors of store calls.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis could not be reached or answered an error (connection, timeout, `BUSY`, `LOADING`, `OOM`…).
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
    /// The caller's lease token is no longer the partition's: it must stop moving rows.
    #[error("fenced: this node no longer holds the lease")]
    Fenced,
    /// A `rediss://` connection could not be set up or its handshake failed (a bad CA or
    /// client certificate file, a server that does not speak TLS, a certificate that does
    /// not verify). Never retried in plaintext.
    #[error("redis TLS: {0}")]
    Tls(String),
    /// A `redis.url` this build cannot serve (an unknown scheme, a sentinel
    /// URL without its service name…): refused before any connection, never half-served.
    #[error(transparent)]
    UnsupportedUrl(#[from] super::url::UnsupportedUrl),
    /// The server at `redis.url` answered something that is not the Redis protocol (RESP): an
    /// HTTP server, a database of another kind… on that host and port. Never retried.
    #[error("the server at {url} does not speak the Redis protocol: its answer is not RESP. Is redis.url's host:port that of another service (HTTP, another database)?")]
    NotRedis {
        /// The URL, password redacted.
        url: String,
    },
    /// A script answered a shape this build does not understand.
    #[error("unexpected reply from {script}: {detail}")]
    Protocol {
        /// The script.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
}

/// The kinds of Redis client failure a person is told apart ([`StoreError::redis_failure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisFailure {
    /// No connection: refused, reset, no route, unknown host.
    Unreachable,
    /// Connected, but no answer within `redis.command_timeout_ms`.
    Timeout,
    /// The server refused the credentials.
    Auth,
    /// The client refused the URL or its settings before connecting.
    BadUrl,
    /// Any other client failure.
    Other,
}

/// The readable part of a client error's details: the OS message of an I/O error with its
/// first letter lowered to fit mid-sentence, else the details as they are.
fn readable_reason(details: &str) -> String {
    let os = details
        .split_once("message: \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(m, _)| m.to_string());
    let text = os.unwrap_or_else(|| details.to_string());
    // `Connection refused`: a sentence starting with a capital.
    let sentence = text.chars().nth(1).is_some_and(|c| c.is_ascii_lowercase());
    let mut chars = text.chars();
    match chars.next() {
        Some(c) if sentence => c.to_lowercase().chain(chars).collect(),
        _ => text,
    }
}

impl StoreError {
    /// Whether Redis could not be reached or is not ready yet (a refused or lost connection,
    /// a timeout, `LOADING`): worth waiting for, unlike a wrong URL, TLS or credentials.
    pub fn unreachable(&self) -> bool {
        matches!(self.kind(), "connection" | "timeout" | "loading")
    }

    /// A failure of the Redis client itself (not a script's answer or a fence), read for a
    /// person: what kind it is and its readable reason (the OS message of an I/O error,
    /// `Os { …, message: "Connection refused" }` → `connection refused`, else the client's
    /// details). `None` for every other variant.
    pub fn redis_failure(&self) -> Option<(RedisFailure, String)> {
        let StoreError::Redis(e) = self else {
            return None;
        };
        let kind = match e.kind() {
            fred::error::ErrorKind::IO => RedisFailure::Unreachable,
            fred::error::ErrorKind::Timeout => RedisFailure::Timeout,
            fred::error::ErrorKind::Auth => RedisFailure::Auth,
            fred::error::ErrorKind::Url | fred::error::ErrorKind::Config => RedisFailure::BadUrl,
            _ => RedisFailure::Other,
        };
        Some((kind, readable_reason(e.details())))
    }

    /// This error for a status line a person reads (`/readyz`): a client failure as its
    /// readable reason (`connection refused`, never the client's Debug text `Os { code:
    /// 111, … }`), any other error as its message.
    pub fn readable(&self) -> String {
        match self.redis_failure() {
            Some((_, reason)) => reason,
            None => self.to_string(),
        }
    }

    pub(super) fn protocol(script: &'static str, detail: impl Into<String>) -> Self {
        StoreError::Protocol {
            script,
            detail: detail.into(),
        }
    }
    /// A short bounded label for the `ankusa_redis_errors_total{kind}` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Redis(e) => {
                let d = e.details();
                if d.starts_with("BUSY") {
                    "busy"
                } else if d.starts_with("LOADING") {
                    "loading"
                } else if d.starts_with("OOM") {
                    "oom"
                } else if d.starts_with("READONLY") {
                    "readonly"
                } else {
                    match e.kind() {
                        fred::error::ErrorKind::Timeout => "timeout",
                        fred::error::ErrorKind::IO | fred::error::ErrorKind::Canceled => {
                            "connection"
                        }
                        _ => "other",
                    }
                }
            }
            StoreError::Fenced => "fenced",
            StoreError::Tls(_) => "tls",
            StoreError::UnsupportedUrl(_) | StoreError::NotRedis { .. } => "other",
            StoreError::Protocol { .. } => "protocol",
        }
    }
}

/// Why a source could not be read or written ([`super::Store::put_source`],
/// [`super::Store::get_source`], [`super::Store::set_sink_disabled`]). [`crate::Error`]
/// carries each case as its own variant, with the same message and exit code.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A tenant or source id is malformed.
    #[error(transparent)]
    BadId(#[from] crate::ids::BadId),
    /// The spec is refused (the message names the entry, the field and the config key), or
    /// the stored one no longer parses.
    #[error("invalid source: {0}")]
    Invalid(String),
    /// No such source, or no such entry in it.
    #[error("not found: {0}")]
    NotFound(String),
    /// A new source past the tenant's `max_sources_per_tenant` (the message names the key).
    #[error("quota exceeded: {0}")]
    Quota(String),
    /// The source kept changing under a compare-and-set.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The store call failed (`Fenced` for a deposed leader's disable).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<fred::error::Error> for SourceError {
    fn from(e: fred::error::Error) -> Self {
        SourceError::Store(e.into())
    }
}

/// Why [`super::Store::check_partitions`] refuses this store's partition count.
#[derive(Debug, thiserror::Error)]
pub enum PartitionsError {
    /// The count differs from the one recorded in Redis at the instance's first start
    ///: routing tenants with another count would lose their rows.
    #[error("{}", partitions_mismatch(instance, *configured, *recorded, key))]
    Mismatch {
        /// The instance.
        instance: String,
        /// `partitions` of the config.
        configured: u32,
        /// The count recorded in Redis.
        recorded: u32,
        /// The Redis key holding it.
        key: String,
    },
    /// The store call failed, or the key holds no count.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The message of a partition count mismatch: the two counts and how to change the count.
pub fn partitions_mismatch(instance: &str, configured: u32, recorded: u32, key: &str) -> String {
    format!(
        "partitions = {configured} in the config, but instance {instance:?} was started with \
         partitions = {recorded} (recorded in redis key {key}); set partitions = {recorded}, \
         or change the count as docs/running.md \"Partitions\" says: drain, stop every \
         worker, move the data (or start empty), SET {key} <new count>, set partitions in \
         every config, start the workers"
    )
}

/// Which bound of a tenant's quota a commit exceeded ([`CommitError::QuotaExceeded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    /// Body bytes (`max_pending_bytes`).
    Bytes,
    /// Hooks (`max_pending_hooks`).
    Hooks,
}

impl std::fmt::Display for QuotaKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuotaKind::Bytes => "bytes of hooks",
            QuotaKind::Hooks => "hooks",
        })
    }
}

/// Errors of a commit. Nothing was written when any of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// No such `(tenant, source)` in the registry.
    #[error("unknown source {tenant}/{source_id}")]
    UnknownSource {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source_id: String,
    },
    /// A body is larger than `commit.max_hook_bytes`.
    #[error("hook {index} is {size} bytes, over max_hook_bytes = {max}")]
    TooLarge {
        /// 0-based index of the hook in the call.
        index: usize,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A hook is scheduled further ahead than the leader's `commit.max_delay_ms` (kept
    /// server side; 30 days until a leader wrote it).
    #[error(
        "hook {index} of the call is scheduled {} ahead ({ahead_ms} ms), over commit.max_delay_ms = {max_ms} ({})",
        human_ms(*.ahead_ms),
        human_ms(*.max_ms)
    )]
    TooLate {
        /// 0-based index of the hook in the call.
        index: usize,
        /// How far ahead of the Redis clock it was scheduled, ms.
        ahead_ms: u64,
        /// The limit enforced, ms.
        max_ms: u64,
    },
    /// The tenant's stored hooks (pending or dead-lettered) with this call's would exceed
    /// its quota (`limits.max_pending_bytes` / `max_pending_hooks`): retry once deliveries,
    /// cancels or a dead-letter purge made room.
    #[error(
        "quota exceeded: tenant {tenant} holds {held} {what} pending or dead-lettered and this commit adds {adding}, over {key} = {max}; retry once deliveries, cancels or a dead-letter purge make room"
    )]
    QuotaExceeded {
        /// The tenant.
        tenant: String,
        /// Which bound.
        what: QuotaKind,
        /// What the tenant holds.
        held: u64,
        /// What the call would add.
        adding: u64,
        /// The bound.
        max: u64,
        /// Its config key.
        key: String,
    },
    /// A malformed request (bad id, bad headers, no hooks).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A producer header named `webhook-*` or `ankusa-*`: those are the delivery's own headers
    /// (signature, ids), set by ankusa alone (`lua/commit.lua`).
    #[error(
        "hook {index}: header {name:?} is reserved (webhook-* and ankusa-* are set by ankusa)"
    )]
    ReservedHeader {
        /// 0-based index of the hook in the call.
        index: usize,
        /// The header name as given.
        name: String,
    },
    /// The commit is not known to survive a failover, so it is not acknowledged: retry
    /// (with an idempotency key, a retry of a hook that was kept is not a second hook).
    /// Either the primary lost a replica it had when its leader's term started (most likely
    /// to a promotion), or has fewer attached than the sentinels know alive (a primary just
    /// promoted, before its old primary was converted and synced) — nothing was written —
    /// or not every attached replica acknowledged the
    /// commit within `redis.commit_wait_ms` (it is on the primary, and may still be
    /// delivered, or vanish if a replica is promoted).
    #[error("{}", not_replicated(*.replicas, *.acknowledged, *.written))]
    NotReplicated {
        /// Replicas attached to the primary when the commit ran (`written`), or the replicas
        /// wanted: the leader's term counted them, or the sentinels know them alive (not
        /// `written`).
        replicas: u32,
        /// Replicas that acknowledged it in time (`written`), or the replicas attached now.
        acknowledged: u32,
        /// Whether the primary holds the commit.
        written: bool,
    },
    /// The Redis server the commit reached is a master the sentinels no longer name (a
    /// worker marked it deposed, `docs/operations.md`): they will make it a replica and its
    /// resync would throw the commit away. Nothing was written; the store's connections
    /// move to the primary the sentinels name, so a retry reaches it.
    #[error(
        "not the primary: this Redis server is a master the sentinels no longer name (they \
         name {named}); nothing was written; retry"
    )]
    NotPrimary {
        /// The `host:port` of the primary the sentinels name.
        named: String,
    },
    /// The store failed; nothing is known to be written (the script is atomic).
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn not_replicated(replicas: u32, acknowledged: u32, written: bool) -> String {
    if written {
        format!(
            "not replicated: {acknowledged} of the {replicas} attached replicas acknowledged \
             the commit within redis.commit_wait_ms, so a failover could lose it; retry (with \
             the same idempotency key, it is not committed twice)"
        )
    } else {
        format!(
            "not replicated: the Redis primary has {acknowledged} replicas attached where \
             {replicas} are wanted (the leader's term counted them, or the sentinels know them \
             alive: a failover under way, or a replica not synced yet?); nothing was written; retry"
        )
    }
}

impl From<fred::error::Error> for CommitError {
    fn from(e: fred::error::Error) -> Self {
        CommitError::Store(StoreError::Redis(e))
    }
}

/// `ms` as a person reads it, to the second: `40d`, `1d 2h`, `1h 30m`, `0s`.
fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    let parts: Vec<String> = [
        (s / 86_400, "d"),
        (s % 86_400 / 3600, "h"),
        (s % 3600 / 60, "m"),
        (s % 60, "s"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, unit)| format!("{n}{unit}"))
    .collect();
    if parts.is_empty() {
        "0s".into()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod human_tests {
    use super::*;

    #[test]
    fn a_hook_scheduled_too_far_ahead_says_how_far_in_days() {
        assert_eq!(human_ms(93_784_000), "1d 2h 3m 4s");
        assert_eq!(human_ms(999), "0s");
        let e = CommitError::TooLate {
            index: 0,
            ahead_ms: 3_456_000_000,
            max_ms: 2_592_000_000,
        };
        assert_eq!(
            e.to_string(),
            "hook 0 of the call is scheduled 40d ahead (3456000000 ms), over \
             commit.max_delay_ms = 2592000000 (30d)"
        );
    }
}
