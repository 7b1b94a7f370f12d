//! The crate's top-level error.

use crate::config::ConfigError;
use crate::model::BadId;
use crate::store::{CommitError, PartitionsError, SourceError, StoreError};

/// Errors of the public API. `exit_code()` maps them to the CLI's documented codes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config is invalid; the message names each key.
    #[error("invalid config:\n{0}")]
    Config(#[from] ConfigError),
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A commit was refused; nothing was written.
    #[error(transparent)]
    Commit(#[from] CommitError),
    /// A tenant or source id is malformed.
    #[error(transparent)]
    BadId(#[from] BadId),
    /// A source spec is invalid.
    #[error("invalid source: {0}")]
    InvalidSource(String),
    /// Redis may evict keys (`maxmemory-policy` is not `noeviction`): rows could vanish.
    #[error("redis maxmemory-policy is {0:?}: evicting policies can silently drop hooks and rows; set it to noeviction, or set redis.allow_evicting = true to run anyway")]
    EvictingRedis(String),
    /// The config's `partitions` differs from the count recorded in Redis at the instance's
    /// first start: routing tenants with another count would lose their rows.
    #[error("{}", crate::store::partitions_mismatch(instance, *configured, *recorded, key))]
    PartitionsMismatch {
        /// The instance.
        instance: String,
        /// `partitions` of the config.
        configured: u32,
        /// The count recorded in Redis.
        recorded: u32,
        /// The Redis key holding it.
        key: String,
    },
    /// No leader answers or the store cannot answer.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A malformed operation request (a bad filter, a bad time bound).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The thing asked for does not exist (a dead letter, a source).
    #[error("not found: {0}")]
    NotFound(String),
    /// A tenant's quota refused the operation (a new source past
    /// `limits.max_sources_per_tenant`); the message names the key.
    #[error("quota exceeded: {0}")]
    Quota(String),
    /// Something else (I/O of files, HTTP servers).
    #[error("{0}")]
    Other(String),
}

impl From<SourceError> for Error {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::BadId(e) => Error::BadId(e),
            SourceError::Invalid(why) => Error::InvalidSource(why),
            SourceError::NotFound(what) => Error::NotFound(what),
            SourceError::Quota(why) => Error::Quota(why),
            SourceError::Unavailable(why) => Error::Unavailable(why),
            SourceError::Store(e) => Error::Store(e),
        }
    }
}

impl From<crate::tokens::MintError> for Error {
    fn from(e: crate::tokens::MintError) -> Self {
        match e {
            crate::tokens::MintError::BadId(e) => Error::BadId(e),
            crate::tokens::MintError::BadRequest(why) => Error::BadRequest(why),
        }
    }
}

impl From<PartitionsError> for Error {
    fn from(e: PartitionsError) -> Self {
        match e {
            PartitionsError::Mismatch {
                instance,
                configured,
                recorded,
                key,
            } => Error::PartitionsMismatch {
                instance,
                configured,
                recorded,
                key,
            },
            PartitionsError::Store(e) => Error::Store(e),
        }
    }
}

impl Error {
    /// The CLI exit code: 1 operation failed, 2 usage or config error (a `rediss://` whose
    /// TLS fails too: the URL, CA or certificates do not fit the server; a `redis.url` this
    /// build cannot serve), 3 unavailable.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_)
            | Error::BadId(_)
            | Error::InvalidSource(_)
            | Error::BadRequest(_)
            | Error::PartitionsMismatch { .. }
            | Error::Store(
                StoreError::Tls(_) | StoreError::UnsupportedUrl(_) | StoreError::NotRedis { .. },
            )
            // A delivery time further ahead than the leader allows: the caller's argument.
            | Error::Commit(CommitError::TooLate { .. }) => 2,
            Error::Commit(
                CommitError::BadRequest(_)
                | CommitError::ReservedHeader { .. }
                | CommitError::TooLarge { .. }
                | CommitError::UnknownSource { .. },
            ) => 1,
            Error::Store(StoreError::Redis(_))
            | Error::Commit(
                CommitError::Store(_)
                | CommitError::NotReplicated { .. }
                | CommitError::NotPrimary { .. },
            )
            | Error::Unavailable(_) => 3,
            _ => 1,
        }
    }

    /// The stable error code of the admin API's JSON errors (`{"error": {"code": …}}`),
    /// documented in `docs/operations.md`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Config(_) => "invalid_config",
            Error::BadId(_) | Error::BadRequest(_) | Error::InvalidSource(_) => "bad_request",
            Error::Commit(
                CommitError::BadRequest(_)
                | CommitError::ReservedHeader { .. }
                | CommitError::TooLate { .. },
            ) => "bad_request",
            Error::Commit(CommitError::TooLarge { .. }) => "too_large",
            Error::Commit(CommitError::QuotaExceeded { .. }) | Error::Quota(_) => "quota_exceeded",
            Error::Commit(CommitError::UnknownSource { .. }) => "unknown_source",
            Error::NotFound(_) => "not_found",
            Error::Store(StoreError::Redis(_))
            | Error::Commit(
                CommitError::Store(_)
                | CommitError::NotReplicated { .. }
                | CommitError::NotPrimary { .. },
            )
            | Error::Unavailable(_) => "unavailable",
            Error::EvictingRedis(_) => "evicting_redis",
            Error::PartitionsMismatch { .. } => "partitions_mismatch",
            Error::Store(_) | Error::Other(_) => "failed",
        }
    }
}
