//! Settling: outcomes buffered into `settle.lua` batches, retried with backoff while the
//! term holds, and the drain that ends a term.

use super::*;

impl Session {
    pub(super) fn maybe_settle(&mut self) {
        if self.settling || self.pending.is_empty() || self.settle_retry_at.is_some() {
            return;
        }
        let max = self.cfg.dispatch.settle_batch;
        let page_size = self.settle_page.load(std::sync::atomic::Ordering::Relaxed);
        let n = self.pending.len().min(page_size.clamp(1, max));
        let settle_page = self.settle_page.clone();
        let batch: Vec<Pending> = self.pending.drain(..n).collect();
        self.settling = true;
        let store = self.ctx.store.clone();
        let (token, epoch) = (self.ctx.token.clone(), self.ctx.epoch);
        let tx = self.tx.clone();
        let blobs = self.batched.blobs();
        let records = batch
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.record.as_ref().map(|(h, r)| (i, *h, r)));
        // With a log store the records go to the partition's log stream; else to the
        // attempt history kept in Redis.
        let history = match &self.cfg.log.url {
            Some(_) => Some(crate::store::log_arg(
                self.cfg.log.stream_max_bytes,
                self.cfg.log.keep_bodies,
                records,
            )),
            None => crate::store::history_arg(&self.cfg.history, records),
        };
        let health = self.ctx.health.clone();
        let budget = Duration::from_millis(self.cfg.dispatch.script_budget_ms);
        let (sinks, cfg) = (self.ctx.sinks.clone(), self.cfg.clone());
        let journal = self.ctx.journal.clone();
        tokio::spawn(async move {
            let outcomes: Vec<Outcome> = batch.iter().map(|p| p.outcome.clone()).collect();
            let settled = store
                .settle_budgeted(&token, epoch, &outcomes, history.clone(), Some(budget))
                .await;
            if let Ok(s) = &settled {
                // Kept until Redis has surely synced it, to be sent again if it restarts.
                let done = outcomes[..s.processed.min(outcomes.len())].to_vec();
                journal.record(Instant::now(), done, history);
            }
            if let Ok(s) = &settled {
                // the batch follows the script's own time (Redis' clock).
                let took = Duration::from_micros(s.script_us);
                let next = slots::adapt_page(page_size, s.processed, took, max, budget);
                settle_page.store(next, std::sync::atomic::Ordering::Relaxed);
                metrics::gauge!("ankusa_settle_page_outcomes").set(next as f64);
                if s.processed < outcomes.len() {
                    metrics::counter!("ankusa_script_budget_stops_total", "script" => "settle")
                        .increment(1);
                }
            }
            health.record_write("settle", &settled);
            let r = match settled {
                Ok(crate::store::Settled {
                    applied,
                    skipped,
                    processed,
                    blobs: finished_blobs,
                    exhausted,
                    ..
                }) => {
                    // a hook that will not be delivered everywhere, announced
                    // once, by the call that ended its last row.
                    for h in exhausted {
                        events::spawn_event(
                            store.clone(),
                            sinks.clone(),
                            cfg.clone(),
                            events::exhausted_event(h),
                            "hook_exhausted",
                        );
                    }
                    metrics::counter!("ankusa_settle_rows_total", "result" => "applied")
                        .increment(applied);
                    // The claim-check blobs of hooks this settle deleted.
                    if let Some(b) = &blobs {
                        b.delete_later(finished_blobs);
                    }
                    if skipped > 0 {
                        metrics::counter!("ankusa_settle_rows_total", "result" => "skipped")
                            .increment(skipped);
                        warn!(
                            skipped,
                            "settle skipped rows no longer claimed by this epoch"
                        );
                    }
                    // The outcomes the budget left untouched go back, first in line.
                    let mut batch = batch;
                    let left = batch.split_off(processed);
                    Ok((
                        batch
                            .into_iter()
                            .map(|p| (p.outcome.tenant, p.bytes))
                            .collect(),
                        left,
                    ))
                }
                Err(e) => {
                    if matches!(e, StoreError::Fenced) {
                        // A deposed leader tried to write: refused by the script.
                        metrics::counter!("ankusa_redis_errors_total", "kind" => "fenced")
                            .increment(1);
                        metrics::counter!("ankusa_settle_rows_total", "result" => "fenced")
                            .increment(batch.len() as u64);
                    }
                    Err((e, batch))
                }
            };
            let _ = tx.send(Event::Settled(r));
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_outcome(
        &mut self,
        tenant: String,
        row: String,
        claim: u64,
        attempts: u32,
        first_attempt_ms: i64,
        op: SettleOp,
        bytes: u64,
    ) {
        if let SettleOp::DeadLetter { reason, .. } = &op {
            let kind = reason.kind();
            metrics::counter!("ankusa_rows_dead_lettered_total", "reason" => kind).increment(1);
            metrics::counter!("ankusa_dead_letters_total", "reason" => kind).increment(1);
        }
        // A row its entry's filter no longer takes ends without an attempt: its record says
        // so, so the hook never reads as delivered.
        let record = match (&op, crate::model::RowId::parse(&row)) {
            (SettleOp::Unmatched, Some(id)) => Some((
                id.hook,
                crate::store::AttemptRecord {
                    row: row.clone(),
                    sink: id.sink,
                    attempt: attempts,
                    started_ms: first_attempt_ms,
                    duration_ms: 0,
                    outcome: "dropped".into(),
                    status: None,
                    error_kind: None,
                    error: None,
                    next_attempt_ms: None,
                    reason: Some(
                        "filter: the sink entry's filter no longer takes this hook".into(),
                    ),
                },
            )),
            _ => None,
        };
        self.pending.push(Pending {
            outcome: Outcome {
                tenant,
                row,
                attempts,
                first_attempt_ms,
                claim,
                op,
            },
            bytes,
            record,
        });
    }

    /// `job`'s outcome without an attempt made (parked, handed back, dead-lettered unsent):
    /// its attempts and first attempt as claimed, holding its hook's bytes.
    pub(super) fn push_job(&mut self, job: Job, op: SettleOp) {
        if let SettleOp::DeadLetter { reason, error } = &op {
            self.dead_letter_event(&job, job.attempts, reason, error);
        }
        let first = job.first_attempt_ms.unwrap_or(job.claim_ms);
        self.push_outcome(
            job.tenant,
            job.row.to_string(),
            job.claim,
            job.attempts,
            first,
            op,
            job.bytes,
        );
    }

    /// A row the claim decided at once (no hook to send): held with no bytes, then settled.
    pub(super) fn push_immediate(&mut self, im: Immediate) {
        self.slots.hold(&im.tenant, 0);
        self.push_outcome(
            im.tenant,
            im.row,
            im.claim,
            im.attempts,
            im.first_attempt_ms.unwrap_or(im.now_ms),
            im.op,
            0,
        );
    }

    /// End the term: no new claims or starts; running attempts may finish; every outcome is
    /// settled (a failed batch retried with backoff) while the term's lease holds; queued rows
    /// are made due again at once. On a graceful end (`failed` is `None`, SIGTERM) attempts
    /// get up to `shutdown_grace_ms` and the lease is released. After a failed claim
    /// (`failed` is its error) they get up to `attempt_timeout_ms` (they are cancelled then
    /// anyway) plus one lease interval for the settles, and the term ends `StoreFailed`;
    /// settle stays fenced throughout, so nothing is written once another term began.
    pub(super) async fn drain(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Event>,
        failed: Option<String>,
    ) -> SessionEnd {
        let grace = match failed {
            None => Duration::from_millis(self.cfg.leader.shutdown_grace_ms),
            Some(_) => Duration::from_millis(
                self.cfg.dispatch.attempt_timeout_ms + self.cfg.leader.lease_ms,
            ),
        };
        let deadline = tokio::time::Instant::now() + grace;
        info!(
            running = self.slots.running(),
            "ending the term: letting running attempts finish"
        );
        let mut queued = self.slots.drain_queued();
        queued.extend(self.drain_batched());
        for job in queued {
            self.push_job(job, SettleOp::Park { delay_ms: 0 });
        }
        while self.slots.rows() > 0 || self.claiming {
            self.maybe_settle();
            let settle_at = self.settle_retry_at;
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = tokio::time::sleep_until(deadline) => None,
                _ = tokio::time::sleep_until(settle_at.unwrap_or(deadline)), if settle_at.is_some() => {
                    self.settle_retry_at = None;
                    continue;
                }
                _ = self.ctx.lost.cancelled() => return SessionEnd::Fenced,
            };
            let Some(ev) = ev else { break };
            if let Event::Claimed(Ok(p)) = ev {
                // A claim that was in flight: hand its rows straight back.
                self.claiming = false;
                for job in p.jobs {
                    self.slots.hold(&job.tenant, job.bytes);
                    self.push_job(job, SettleOp::Park { delay_ms: 0 });
                }
                for im in p.immediate {
                    self.push_immediate(im);
                }
                self.slots.end_claim();
                continue;
            }
            if let Some(end) = self.handle(ev) {
                return end;
            }
            if self
                .settle_retry_at
                .is_some_and(|t| t <= tokio::time::Instant::now())
            {
                self.settle_retry_at = None;
            }
        }
        self.attempts.abort_all();
        if let Some(why) = failed {
            // The node releases the lease if Redis answers (src/leader.rs).
            return SessionEnd::StoreFailed(why);
        }
        // Whatever is still claimed (attempts cut off by the grace period) is requeued by the
        // next leader; release so it takes over now, not after the lease's ttl.
        let node = crate::store::token_node(&self.ctx.token);
        match self.ctx.store.lease_release(node, &self.ctx.token).await {
            Ok(_) => info!("lease released"),
            Err(e) => warn!(error = %e, "could not release the lease; it lapses after its ttl"),
        }
        SessionEnd::Shutdown
    }
}
