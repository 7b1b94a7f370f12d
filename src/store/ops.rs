//! Typed wrappers of the operation scripts: `dead_letter_source.lua`, `pressure.lua`
//!, `dlq_replay.lua` and `dlq_purge.lua` (dead letters). None of them is fenced: each
//! reads and writes in one atomic step and carries no state from before the call, so any
//! process may run them (see `docs/operations.md`).

use super::*;

/// The two walks of [`Store::dead_letter_source`], in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePhase {
    /// Members waiting behind the heads of the source's ordered lanes.
    Lanes,
    /// The tenant's due set.
    Due,
}

/// One page of [`Store::dead_letter_source`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourcePage {
    /// No leader holds the lease: the pipeline is down (the `unavailable` answer).
    Unavailable,
    /// The page was applied.
    Page {
        /// The ZSCAN cursor to pass next; `"0"` when the walk is done.
        cursor: String,
        /// Rows dead-lettered `source_gone` in this page.
        dead_lettered: u64,
        /// Rows dropped because their hook was gone (not counted).
        dropped: u64,
    },
}

/// The answer of [`Store::pressure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PressureRead {
    /// No live leader, or no window state from the current one; the reason in words.
    Unavailable(String),
    /// Lag of the oldest due row (ms, 0 when none) and whether the window is full.
    Ok {
        /// ms.
        lag_ms: u64,
        /// The leader's global in-flight window is full.
        window_full: bool,
    },
}

/// What one [`Store::dlq_replay`] call did with the entries it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct DlqReplayed {
    /// Entries put back as due rows (and deleted from the stream).
    pub replayed: u64,
    /// Entries no longer there (replayed or purged meanwhile).
    pub missing: u64,
    /// Entries whose hook is gone: nothing to deliver; they stay until purged.
    pub hook_gone: u64,
    /// Entries whose row is due or claimed already; they stay.
    pub live: u64,
}

impl std::ops::AddAssign for DlqReplayed {
    fn add_assign(&mut self, o: DlqReplayed) {
        self.replayed += o.replayed;
        self.missing += o.missing;
        self.hook_gone += o.hook_gone;
        self.live += o.live;
    }
}

/// What [`Store::dlq_purge`] deletes.
#[derive(Debug, Clone, Copy)]
pub enum DlqPurge<'a> {
    /// These stream entry ids.
    Ids(&'a [String]),
    /// What the retention does not keep, oldest first, at most `limit` entries per call.
    Retain {
        /// Entries older than this are deleted (ms; 0: no age limit).
        max_age_ms: u64,
        /// The oldest entries beyond this count are deleted (0: no count limit).
        max_entries: u64,
        /// Entries deleted per call at most.
        limit: u64,
    },
}

impl Store {
    /// One bounded page of `dead_letter_source.lua`. Phase [`SourcePhase::Lanes`]
    /// dead-letters the members waiting in the source's ordered lanes, phase
    /// [`SourcePhase::Due`] walks `due:<tenant>`: from `cursor` (`"0"` to start, about
    /// `count` entries), the rows of `source` are dead-lettered `source_gone(<source>)`
    /// (a lane head releasing its lane) and rows whose hook is gone dropped. The caller
    /// loops each phase, lanes first, until the returned cursor is `"0"`.
    pub async fn dead_letter_source(
        &self,
        tenant: &str,
        source: &str,
        phase: SourcePhase,
        cursor: &str,
        count: usize,
    ) -> Result<SourcePage, StoreError> {
        // The tenant's partition.
        let this = self.for_tenant(tenant);
        let phase = match phase {
            SourcePhase::Lanes => "lanes",
            SourcePhase::Due => "due",
        };
        let args = vec![
            this.prefix(),
            tenant.into(),
            source.into(),
            phase.into(),
            cursor.into(),
            (count as i64).into(),
        ];
        let v = this.call(&this.scripts.dead_letter_source, args).await?;
        match status(&v) {
            "ok" => {
                let r = Reply::new("dead_letter_source", &v);
                Ok(SourcePage::Page {
                    cursor: r.text(1)?,
                    dead_lettered: r.count(2)?,
                    dropped: r.count(3)?,
                })
            }
            "unavailable" => Ok(SourcePage::Unavailable),
            other => Err(StoreError::protocol(
                "dead_letter_source",
                format!("status {other:?}"),
            )),
        }
    }

    /// `pressure.lua`: the lag of the oldest due row among the first `max_tenants`
    /// tenants in line, and the window state of the leader that holds the lease now.
    pub async fn pressure(&self, max_tenants: usize) -> Result<PressureRead, StoreError> {
        let args = vec![self.prefix(), (max_tenants as i64).into()];
        let v = self.call(&self.scripts.pressure, args).await?;
        match status(&v) {
            "ok" => {
                let r = Reply::new("pressure", &v);
                Ok(PressureRead::Ok {
                    // Rows scored within the current ms read as a lag below zero.
                    lag_ms: r.int(1)?.max(0) as u64,
                    window_full: r.int(2)? == 1,
                })
            }
            "unavailable" => Ok(PressureRead::Unavailable(
                Reply::new("pressure", &v).text(1)?,
            )),
            other => Err(StoreError::protocol(
                "pressure",
                format!("status {other:?}"),
            )),
        }
    }

    /// `dlq_replay.lua`: put the dead letters `ids` of `tenant` back as due rows, attempts
    /// reset, horizon restarted, each entry deleted in the same step.
    pub async fn dlq_replay(
        &self,
        tenant: &str,
        ids: &[String],
    ) -> Result<DlqReplayed, StoreError> {
        // The tenant's partition.
        let this = self.for_tenant(tenant);
        let mut args = Vec::with_capacity(2 + ids.len());
        args.extend([this.prefix(), tenant.into()]);
        args.extend(ids.iter().map(|i| Value::from(i.as_str())));
        let v = this.call(&this.scripts.dlq_replay, args).await?;
        match status(&v) {
            "ok" => {
                let r = Reply::new("dlq_replay", &v);
                Ok(DlqReplayed {
                    replayed: r.count(1)?,
                    missing: r.count(2)?,
                    hook_gone: r.count(3)?,
                    live: r.count(4)?,
                })
            }
            other => Err(StoreError::protocol(
                "dlq_replay",
                format!("status {other:?}"),
            )),
        }
    }

    /// `dlq_purge.lua`: delete dead letters of `tenant` (by id, or what the retention does
    /// not keep) and the hooks no row or dead letter needs any more. Returns
    /// `(purged, more)`; `more` when a retention call stopped at its limit.
    pub async fn dlq_purge(
        &self,
        tenant: &str,
        what: DlqPurge<'_>,
    ) -> Result<(u64, bool), StoreError> {
        // The tenant's partition.
        let this = self.for_tenant(tenant);
        let mut args = vec![this.prefix(), tenant.into()];
        match what {
            DlqPurge::Ids(ids) => {
                args.push("ids".into());
                args.extend(ids.iter().map(|i| Value::from(i.as_str())));
            }
            DlqPurge::Retain {
                max_age_ms,
                max_entries,
                limit,
            } => {
                args.extend([
                    "retain".into(),
                    (max_age_ms as i64).into(),
                    (max_entries as i64).into(),
                    (limit.max(1) as i64).into(),
                ]);
            }
        }
        let v = this.call(&this.scripts.dlq_purge, args).await?;
        match status(&v) {
            "ok" => {
                let r = Reply::new("dlq_purge", &v);
                Ok((r.count(1)?, r.int(2)? == 1))
            }
            other => Err(StoreError::protocol(
                "dlq_purge",
                format!("status {other:?}"),
            )),
        }
    }
}
