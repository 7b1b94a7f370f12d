//! The reads behind `hooks show`, `rows list` and `tenants top`, through the store's
//! read-side wrappers ([`crate::store::RowRead`], [`crate::store::HookRecord`]).

use super::*;
pub(super) use crate::store::{HookRecord as HookRead, RowRead};

pub(super) async fn read_rows(
    store: &Store,
    tenant: &str,
    rows: &[String],
) -> Result<Vec<RowRead>, Error> {
    Ok(store.row_reads(tenant, rows).await?)
}

impl RowRead {
    /// The state of a row found in the due set or the claimed set; `None` when in neither.
    pub(super) fn state(&self, now: i64) -> Option<RowState> {
        if self.claimed {
            return Some(RowState::Claimed);
        }
        let due = self.due?;
        Some(
            if self.attempts == 0
                && due > now
                && self.scheduled_at == Some(due)
                && self.parked_until != Some(due)
            {
                RowState::Scheduled
            } else if (self.attempts > 0 && self.parked_until == Some(due))
                || (self.attempts == 0 && due > now)
            {
                RowState::Parked
            } else if self.attempts > 0 {
                RowState::Retrying
            } else {
                RowState::Due
            },
        )
    }
}

/// The hook as `hooks show` finds it: live, else kept for resend.
pub(super) async fn read_hook(store: &Store, hook: u64) -> Result<Option<HookRead>, Error> {
    Ok(store.hook_record_or_kept(hook).await?)
}

/// A hook's attempt records, oldest first (records that do not parse are left out).
pub(super) async fn read_attempts(store: &Store, hook: u64) -> Result<Vec<AttemptRecord>, Error> {
    Ok(store.attempts_of(hook).await?)
}
