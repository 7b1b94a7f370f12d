//! The attempt history: one record per finished attempt, written by settle (`history_arg`)
//! and capped per hook. The record and the settle argument are the store's
//! ([`crate::store::AttemptRecord`]); re-exported here for the read side's users.

pub use crate::store::{history_arg, AttemptRecord, ATTEMPTS_PER_HOOK, HISTORY_ERROR_BYTES};
