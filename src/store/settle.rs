//! `settle.lua`: recording outcomes in batches, fenced by the term's token.

use super::*;

/// The outcome of one finished attempt, as `settle.lua` takes it.
#[derive(Debug, Clone, PartialEq)]
pub enum SettleOp {
    /// The sink answered ok: delete the row (invariant 1).
    Delivered,
    /// Due again after `delay_ms`; the row records its attempts.
    Retry {
        /// Backoff (ms).
        delay_ms: u64,
        /// Error text, truncated.
        error: String,
    },
    /// A breaker parked the row for `delay_ms`, attempt count unchanged.
    Park {
        /// Until the breaker closes (ms).
        delay_ms: u64,
    },
    /// Dead-letter with a reason.
    DeadLetter {
        /// `permanent(…)`, `retry_horizon(…)`, …
        reason: crate::model::DeadReason,
        /// Error text, truncated.
        error: String,
    },
    /// The hook is gone: nothing to deliver; not counted as a dead letter.
    Drop,
    /// The row's sink entry no longer takes its hook: its filter, edited after the commit,
    /// refuses the hook's event type. Removed as a dropped row is (counted in
    /// `dropped`), never dead-lettered: the filter decided, nothing failed.
    Unmatched,
}

/// One row's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Tenant id.
    pub tenant: String,
    /// Raw row id.
    pub row: String,
    /// Attempts made including this one.
    pub attempts: u32,
    /// First attempt time (ms, Redis clock).
    pub first_attempt_ms: i64,
    /// The claim token of the claim this outcome answers ([`ClaimedRow::claim`]); the
    /// outcome is skipped unless the row is still claimed under it.
    pub claim: u64,
    /// What to do.
    pub op: SettleOp,
}

/// What one settle call did ([`Store::settle_budgeted`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// Outcomes applied.
    pub applied: u64,
    /// Outcomes skipped: their row is no longer claimed under their claim token.
    pub skipped: u64,
    /// Outcomes looked at, from the first: the budget left the rest untouched, to be sent
    /// again. Equals the batch's length without a budget.
    pub processed: usize,
    /// How long the script ran, by Redis' clock (µs).
    pub script_us: u64,
    /// Claim-check references of the hooks the call deleted whose retention is over.
    pub blobs: Vec<String>,
    /// Hooks whose last row this call ended, one or more of their rows dead-lettered
    /// (the `hook_exhausted` event).
    pub exhausted: Vec<ExhaustedHook>,
}

/// A hook whose every row has ended, not all of them delivered: nothing more will be
/// attempted for it unless its dead letters are replayed ([`Settled::exhausted`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExhaustedHook {
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// Hook id.
    pub hook: u64,
    /// The producer's event type, if any.
    pub event_type: Option<String>,
    /// How many of its rows were dead-lettered (across replays).
    pub dead_rows: u64,
    /// The first 256 bytes of its body, invalid UTF-8 replaced (empty for a claim-checked
    /// body kept outside Redis).
    pub body_prefix: String,
    /// The index of the sink entry whose row ended it last.
    pub sink: u32,
    /// That entry's module.
    pub module: String,
    /// When that row ended, Unix ms (Redis' clock).
    pub at_ms: i64,
}

impl Store {
    /// Record a batch of outcomes in one script call. Returns `(applied, skipped, blobs)`,
    /// `blobs` being the claim-check references of the hooks the call deleted (lane
    /// releases are counted in `ankusa_lane_releases_total`);
    /// an outcome whose row is no longer claimed under its claim token ([`Outcome::claim`])
    /// is skipped, so re-sending a batch after an error never applies it twice, not even
    /// to a later claim of the same row. Errors: [`StoreError::Fenced`].
    pub async fn settle(
        &self,
        token: &str,
        epoch: u64,
        outcomes: &[Outcome],
    ) -> Result<(u64, u64, Vec<String>), StoreError> {
        self.settle_with(token, epoch, outcomes, None).await
    }

    /// [`Store::settle`] that also writes the attempt history in the same call: `history` is
    /// the JSON argument of [`crate::store::history_arg`].
    pub async fn settle_with(
        &self,
        token: &str,
        epoch: u64,
        outcomes: &[Outcome],
        history: Option<String>,
    ) -> Result<(u64, u64, Vec<String>), StoreError> {
        let s = self
            .settle_budgeted(token, epoch, outcomes, history, None)
            .await?;
        Ok((s.applied, s.skipped, s.blobs))
    }

    /// [`Store::settle_with`] under a time budget: once 3/5 of `budget` has
    /// passed by Redis' clock the script stops taking outcomes (checked every 16), and
    /// [`Settled::processed`] says how many of the first it looked at; the rest are
    /// untouched, their rows still claimed, for the caller to send again (which is safe:
    /// an outcome applies only to its claim). `None`: the whole batch.
    /// Errors: [`StoreError::Fenced`].
    pub async fn settle_budgeted(
        &self,
        token: &str,
        epoch: u64,
        outcomes: &[Outcome],
        history: Option<String>,
        budget: Option<Duration>,
    ) -> Result<Settled, StoreError> {
        let mut args = Vec::with_capacity(5 + 8 * outcomes.len());
        let budget_us = budget.map_or(0, |b| b.as_micros().clamp(1, i64::MAX as u128) as i64);
        args.extend([
            self.prefix(),
            token.into(),
            (epoch as i64).into(),
            budget_us.into(),
        ]);
        for o in outcomes {
            let (op, x, err): (&str, Value, &str) = match &o.op {
                SettleOp::Delivered => ("D", "".into(), ""),
                SettleOp::Retry { delay_ms, error } => ("R", (*delay_ms as i64).into(), error),
                SettleOp::Park { delay_ms } => ("P", (*delay_ms as i64).into(), ""),
                SettleOp::DeadLetter { reason, error } => ("X", reason.to_string().into(), error),
                SettleOp::Drop | SettleOp::Unmatched => ("G", "".into(), ""),
            };
            args.extend([
                op.into(),
                o.tenant.as_str().into(),
                o.row.as_str().into(),
                (o.claim as i64).into(),
                x,
                (o.attempts as i64).into(),
                o.first_attempt_ms.into(),
                err.into(),
            ]);
        }
        if let Some(h) = history {
            args.push(h.into());
        }
        let v = self.call(&self.scripts.settle, args).await?;
        match status(&v) {
            "ok" => {
                let r = Reply::new("settle", &v);
                let released = r.count(3)?;
                if released > 0 {
                    metrics::counter!("ankusa_lane_releases_total").increment(released);
                }
                let processed = r.count(4)? as usize;
                if processed > outcomes.len() {
                    return Err(StoreError::protocol(
                        "settle",
                        format!("{processed} outcomes processed of {}", outcomes.len()),
                    ));
                }
                let m = r.count(6)? as usize;
                let after = 7usize.saturating_add(m.saturating_mul(9));
                if after > v.len() {
                    return Err(StoreError::protocol(
                        "settle",
                        format!("{m} exhausted hooks announced, {} fields", v.len()),
                    ));
                }
                let exhausted = (0..m)
                    .map(|k| {
                        let at = 7 + 9 * k;
                        let hook = r.text(at + 1)?.parse().map_err(|_| {
                            StoreError::protocol("settle", format!("field {}: a hook id", at + 1))
                        })?;
                        let event_type = Some(r.text(at + 3)?).filter(|t| !t.is_empty());
                        Ok(ExhaustedHook {
                            tenant: r.text(at)?,
                            hook,
                            source: r.text(at + 2)?,
                            event_type,
                            dead_rows: r.count(at + 4)?,
                            body_prefix: r.lossy(at + 5),
                            sink: r.text(at + 6)?.parse().unwrap_or(0),
                            module: r.text(at + 7)?,
                            at_ms: r.int(at + 8)?,
                        })
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                let blobs = (after..v.len())
                    .map(|i| r.text(i))
                    .collect::<Result<_, _>>()?;
                Ok(Settled {
                    applied: r.count(1)?,
                    skipped: r.count(2)?,
                    processed,
                    script_us: r.int(5)?.max(0) as u64,
                    blobs,
                    exhausted,
                })
            }
            "fenced" => Err(StoreError::Fenced),
            other => Err(StoreError::protocol("settle", format!("status {other:?}"))),
        }
    }
}
