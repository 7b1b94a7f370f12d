//! The attempt history: one record per finished attempt, written by settle (`history_arg`)
//! and capped per hook. The record and the settle argument are the store's
//! ([`crate::store::AttemptRecord`]); re-exported here for the read side's users.

pub use crate::store::{history_arg, AttemptRecord, ATTEMPTS_PER_HOOK, HISTORY_ERROR_BYTES};

/// The kind of an attempt error and the HTTP status in it, read from an error text written
/// the sinks' way ([`crate::sinks::ErrorKind::of_text`]). Attempts carry their kind typed
/// ([`crate::sinks::AttemptError::kind`]); this reads a bare text.
pub fn error_kind(error: &str) -> (&'static str, Option<u16>) {
    let kind = crate::sinks::ErrorKind::of_text(error);
    (kind.as_str(), kind.status())
}
