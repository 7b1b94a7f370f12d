//! The settles a term made lately, kept until Redis has surely written them to disk.
//!
//! Redis acknowledges a write before its append-only file is synced: with `appendfsync
//! everysec` a crash of the host loses up to about [`SYNC_WINDOW`] of acknowledged writes.
//! A settle lost that way leaves its rows claimed under the term that settled them, which
//! has forgotten them; requeued by the next term, they would be delivered again. So every
//! applied settle batch is kept here with the instant its reply came, and dropped once a
//! lease renewal sent at least [`SYNC_WINDOW`] later found the same Redis process (it did
//! not restart, so it has synced the batch). A renewal that finds Redis restarted has the
//! kept batches sent again under the term, which still holds its lease: the outcomes whose
//! rows are still claimed under their claim tokens are applied, the others are skipped, as
//! for any batch sent twice ([`Store::settle_budgeted`]).

use crate::store::{Outcome, Store, StoreError};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long Redis may hold an acknowledged write before its append-only file is synced:
/// `everysec` syncs every second and, when a sync is slow, waits up to two before the next.
pub(crate) const SYNC_WINDOW: Duration = Duration::from_secs(2);

/// One applied settle call: its outcomes (those the call looked at) and its history argument.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    /// When its reply came (the write happened before).
    pub at: Instant,
    /// The outcomes the call processed, in order (the history refers to them by index).
    pub outcomes: Vec<Outcome>,
    /// The attempt history or delivery log argument of the call, as sent.
    pub history: Option<String>,
}

/// The term's settle batches that Redis may not have synced yet, oldest first.
#[derive(Debug, Default)]
pub(crate) struct SettleJournal {
    batches: Mutex<VecDeque<Batch>>,
}

impl SettleJournal {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Batch>> {
        self.batches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep a batch applied now (nothing when it processed no outcome).
    pub(crate) fn record(&self, at: Instant, outcomes: Vec<Outcome>, history: Option<String>) {
        if outcomes.is_empty() {
            return;
        }
        self.lock().push_back(Batch {
            at,
            outcomes,
            history,
        });
    }

    /// A renewal sent at `sent` found the Redis process the term started on: drop the
    /// batches applied [`SYNC_WINDOW`] or more before it.
    pub(crate) fn confirm(&self, sent: Instant) {
        let Some(synced) = sent.checked_sub(SYNC_WINDOW) else {
            return;
        };
        let mut b = self.lock();
        while b.front().is_some_and(|x| x.at < synced) {
            b.pop_front();
        }
    }

    /// Every batch kept, oldest first; the journal is left empty.
    pub(crate) fn take(&self) -> Vec<Batch> {
        self.lock().drain(..).collect()
    }

    /// Put `batches` (taken, not sent) back before those kept since.
    pub(crate) fn put_back(&self, batches: Vec<Batch>) {
        let mut b = self.lock();
        for x in batches.into_iter().rev() {
            b.push_front(x);
        }
    }

    /// Outcomes kept.
    pub(crate) fn outcomes(&self) -> usize {
        self.lock().iter().map(|b| b.outcomes.len()).sum()
    }

    /// Send every kept batch again under `token` (Redis restarted): answers the outcomes
    /// applied (those the restart had lost). On an error the batches not yet sent are kept.
    pub(crate) async fn resend(
        &self,
        store: &Store,
        token: &str,
        epoch: u64,
    ) -> Result<u64, StoreError> {
        let mut batches = self.take().into_iter();
        let mut applied = 0;
        while let Some(b) = batches.next() {
            // No budget: each batch was one settle call already, and its history refers to
            // its outcomes by index.
            match store
                .settle_budgeted(token, epoch, &b.outcomes, b.history.clone(), None)
                .await
            {
                Ok(s) => applied += s.applied,
                Err(e) => {
                    let mut rest = vec![b];
                    rest.extend(batches);
                    self.put_back(rest);
                    return Err(e);
                }
            }
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SettleOp;

    fn outcome(row: &str) -> Outcome {
        Outcome {
            tenant: "t".into(),
            row: row.into(),
            attempts: 1,
            first_attempt_ms: 0,
            claim: 7,
            op: SettleOp::Delivered,
        }
    }

    fn rows(batches: &[Batch]) -> Vec<&str> {
        batches
            .iter()
            .flat_map(|b| b.outcomes.iter().map(|o| o.row.as_str()))
            .collect()
    }

    #[test]
    fn a_renewal_drops_only_what_redis_had_time_to_sync() {
        let j = SettleJournal::default();
        let t0 = Instant::now();
        j.record(t0, vec![outcome("1.0"), outcome("2.0")], None);
        j.record(
            t0 + Duration::from_millis(1_500),
            vec![outcome("3.0")],
            None,
        );
        j.record(t0 + Duration::from_millis(1_600), Vec::new(), None);
        assert_eq!(j.outcomes(), 3);
        // Sent 1 s after the first batch: Redis may not have synced it yet.
        j.confirm(t0 + Duration::from_secs(1));
        assert_eq!(j.outcomes(), 3);
        // Sent past the window of the first batch, not of the second.
        j.confirm(t0 + SYNC_WINDOW + Duration::from_millis(1));
        assert_eq!(rows(&j.take()), vec!["3.0"]);
        assert_eq!(j.outcomes(), 0);
    }

    #[test]
    fn batches_put_back_go_before_those_kept_since() {
        let j = SettleJournal::default();
        let t0 = Instant::now();
        j.record(t0, vec![outcome("1.0")], None);
        j.record(t0, vec![outcome("2.0")], Some("h".into()));
        let taken = j.take();
        j.record(t0, vec![outcome("3.0")], None);
        j.put_back(taken);
        let all = j.take();
        assert_eq!(rows(&all), vec!["1.0", "2.0", "3.0"]);
        assert_eq!(all[1].history.as_deref(), Some("h"));
    }
}
