//! The errors of store calls: [`StoreError`] for every script and read, [`CommitError`] for
//! commits (R1, R2).

/// Errors of store calls.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis could not be reached or answered an error (connection, timeout, `BUSY`, `LOADING`, `OOM`…).
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
    /// The caller's lease token is no longer the partition's (R25): it must stop moving rows.
    #[error("fenced: this node no longer holds the lease")]
    Fenced,
    /// A `rediss://` connection could not be set up or its handshake failed (a bad CA or
    /// client certificate file, a server that does not speak TLS, a certificate that does
    /// not verify). Never retried in plaintext.
    #[error("redis TLS: {0}")]
    Tls(String),
    /// A `redis.url` this build cannot serve (an unknown scheme, TLS to a cluster, a sentinel
    /// URL without its service name…): refused before any connection, never half-served.
    #[error(transparent)]
    UnsupportedUrl(#[from] super::url::UnsupportedUrl),
    /// A script answered a shape this build does not understand.
    #[error("unexpected reply from {script}: {detail}")]
    Protocol {
        /// The script.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl StoreError {
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
            StoreError::UnsupportedUrl(_) => "other",
            StoreError::Protocol { .. } => "protocol",
        }
    }
}

/// Errors of a commit (R1). Nothing was written when any of these is returned.
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
    /// The store failed; nothing is known to be written (the script is atomic).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<fred::error::Error> for CommitError {
    fn from(e: fred::error::Error) -> Self {
        CommitError::Store(StoreError::Redis(e))
    }
}
