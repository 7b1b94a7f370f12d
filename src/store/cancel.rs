//! `cancel.lua`: cancelling a scheduled hook before any of its rows is claimed.

use super::*;

/// The answer of [`Store::cancel_hook`]: whether the hook was cancelled, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// Cancelled: its rows are gone from their due set or lane and the hook is deleted; it
    /// is never delivered.
    Cancelled {
        /// Rows removed (one per sink entry that took the hook).
        rows: u32,
    },
    /// No live hook of this id belongs to the tenant (never committed, another tenant's, or
    /// finished and deleted).
    NotFound,
    /// The hook was due at its commit (no delivery time ahead then): nothing to cancel.
    NotScheduled,
    /// A row is claimed (an attempt queued or running, `attempts` 0) or was attempted
    /// before (`attempts` > 0): nothing cancelled.
    Claimed {
        /// The row, `<hook>.<sink index>`.
        row: String,
        /// Its failed attempts so far.
        attempts: u32,
    },
    /// A row was delivered, dead-lettered or dropped already: nothing cancelled.
    Finished {
        /// Rows the hook made at commit.
        made: u32,
        /// Rows left to deliver.
        left: u32,
    },
}

impl Store {
    /// Cancel `tenant`'s scheduled hook `hook` atomically (`cancel.lua`): only while none of
    /// its rows has been claimed, every row is removed and the hook deleted (its
    /// idempotency key still answers its id). Not fenced: any process may call it. Errors:
    /// the store failing, or a reply that does not decode.
    pub async fn cancel_hook(&self, tenant: &str, hook: u64) -> Result<Cancelled, StoreError> {
        // The tenant's partition holds its hooks.
        let this = self.for_tenant(tenant);
        let args = vec![this.prefix(), tenant.into(), hook.to_string().into()];
        let v = this.call(&this.scripts.cancel, args).await?;
        let r = Reply::new("cancel", &v);
        let small = |i: usize| -> Result<u32, StoreError> {
            u32::try_from(r.count(i)?)
                .map_err(|_| StoreError::protocol("cancel", format!("field {i} out of range")))
        };
        match status(&v) {
            "cancelled" => Ok(Cancelled::Cancelled { rows: small(1)? }),
            "not_found" => Ok(Cancelled::NotFound),
            "not_scheduled" => Ok(Cancelled::NotScheduled),
            "claimed" => Ok(Cancelled::Claimed {
                row: r.text(1)?,
                attempts: small(2)?,
            }),
            "finished" => Ok(Cancelled::Finished {
                made: small(1)?,
                left: small(2)?,
            }),
            other => Err(StoreError::protocol("cancel", format!("status {other:?}"))),
        }
    }
}
