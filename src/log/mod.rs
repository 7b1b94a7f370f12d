//! The delivery log: what happened to each hook — every attempt, how each hook ended — kept
//! once Redis is done with it.
//!
//! With `[log] url`, `settle.lua` appends each call's records to its partition's `log` stream
//! (one entry per call) instead of keeping per-hook history in Redis; the partition's leader
//! runs the [`archiver`], which moves the stream into PostgreSQL ([`LogStore`]) and trims what
//! it wrote. The cursor (the last entry archived) is written in the same transaction as the
//! records, and every record is idempotent on its key, so a kill of the archiver mid-batch,
//! a lost answer or two leaders for a moment write each record once.
//!
//! | file | what |
//! | --- | --- |
//! | `record.rs` | the stream's lines parsed into typed records (pure) |
//! | `schema.rs` | embedded migrations, day partitions (pure SQL text and dates) |
//! | `pg.rs` | the PostgreSQL store: archive, search, attempts, erase, retention |
//! | `bodies.rs` | ended hooks' bodies kept for show and resend (`log.keep_bodies`) |
//! | `retention.rs` | a tenant's shorter retention (`tenants.<id>.log_retention_days`) |
//! | `erase.rs` | erasure everywhere: the stream drained first, the store, dead letters |
//! | `archiver.rs` | the leader's task: stream → store → trim, retention |

pub mod archiver;
mod bodies;
mod erase;
mod pg;
pub mod record;
mod retention;
mod schema;

pub use bodies::LoggedBody;
pub use erase::{erase, Erasure};
pub use pg::{Archived, CursorState, LogStore, LoggedHook, Search, SearchPage};
pub use record::{HookEnded, HookState, KeptBody, LogRecord, Parsed};

/// Errors of the log store.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `[log]` cannot be used as configured (no URL, a malformed one).
    #[error("log store config: {0}")]
    Config(String),
    /// PostgreSQL answered an error or the connection failed (the server's message and
    /// SQLSTATE when it answered one).
    #[error("log store (PostgreSQL): {0}")]
    Postgres(String),
    /// No connection could be had from the pool (PostgreSQL down, unreachable, full).
    #[error("log store (PostgreSQL) unreachable: {0}")]
    Pool(String),
    /// A call took longer than its bound.
    #[error("log store (PostgreSQL): {0} timed out")]
    Timeout(&'static str),
    /// The database's schema is older than this build needs.
    #[error(
        "log store schema is version {have}, this build needs {need}: run `ankusa log migrate`"
    )]
    Schema {
        /// The database's version.
        have: u32,
        /// This build's.
        need: u32,
    },
    /// A malformed request (a bad cursor).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// Redis failed while reading or trimming the stream.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl From<tokio_postgres::Error> for LogError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            // A table of the schema is missing: the database was never migrated.
            Some(db) if *db.code() == tokio_postgres::error::SqlState::UNDEFINED_TABLE => {
                LogError::Schema {
                    have: 0,
                    need: schema::MIGRATIONS.len() as u32,
                }
            }
            Some(db) => LogError::Postgres(format!("{} ({})", db.message(), db.code().code())),
            None => LogError::Postgres(e.to_string()),
        }
    }
}

impl From<deadpool_postgres::PoolError> for LogError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => LogError::from(e),
            other => LogError::Pool(other.to_string()),
        }
    }
}

impl From<LogError> for crate::Error {
    fn from(e: LogError) -> Self {
        match e {
            LogError::BadRequest(m) => crate::Error::BadRequest(m),
            LogError::Store(s) => crate::Error::Store(s),
            LogError::Config(m) => crate::Error::Other(m),
            other => crate::Error::Unavailable(other.to_string()),
        }
    }
}
