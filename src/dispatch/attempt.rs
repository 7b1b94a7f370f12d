//! Attempts: starting a slotted job, its breaker, and turning its result into a
//! settle operation: delivered, retry with backoff, parked, dead letter.

use super::*;

impl Session {
    pub(super) fn start_attempts(&mut self) {
        if !self.lease_ok() {
            return; // No attempt starts once the lease may have passed to someone else
        }
        let timeout = Duration::from_millis(self.cfg.dispatch.attempt_timeout_ms);
        let settings = self.breaker_settings();
        // Keys over their rate limit keep their queue and take no slot; the loop wakes
        // when the first of them has a token again.
        let now = Instant::now();
        let mut rate_wait: Option<Duration> = None;
        loop {
            let rates = &mut self.rates;
            let next = self.slots.next_start_gated(|key| match rates.get_mut(key) {
                None => true,
                Some(bucket) => match bucket.wait(now) {
                    None => true,
                    Some(d) => {
                        rate_wait = Some(rate_wait.map_or(d, |w| w.min(d)));
                        false
                    }
                },
            });
            let Some(mut job) = next else { break };
            if let Some(b) = self.breakers.get_mut(&job.key) {
                match b.admit(&settings, Instant::now()) {
                    Admit::Run => {}
                    Admit::Probe => job.probe = true,
                    Admit::Park(d) => {
                        self.slots.finished(&job.tenant, &job.key);
                        self.park(job, d);
                        continue;
                    }
                }
            }
            if let Some(bucket) = self.rates.get_mut(&job.key) {
                bucket.take(now);
            }
            let tx = self.tx.clone();
            let sinks = self.ctx.sinks.clone();
            let span = attempt_span(&mut job);
            self.attempts.spawn(
                async move {
                    let started = Instant::now();
                    let d = job.delivery();
                    let fut = job.target.deliver(&sinks, &d);
                    let result = match tokio::time::timeout(timeout, fut).await {
                        Ok(r) => r.map(|status| job.status = status),
                        Err(_) => Err(AttemptError::Timeout(timeout)),
                    };
                    record_outcome(&result, job.status);
                    debug!(
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "attempt finished"
                    );
                    let _ = tx.send(Event::Finished {
                        job,
                        result,
                        elapsed: started.elapsed(),
                    });
                }
                .instrument(span),
            );
        }
        self.rate_wake = rate_wait.map(|d| tokio::time::Instant::now() + d);
        self.start_batched();
        // Reap finished task handles so the set does not grow.
        while self.attempts.try_join_next().is_some() {}
    }

    pub(super) fn breaker_settings(&self) -> breaker::Settings {
        let d = &self.cfg.dispatch;
        breaker::Settings {
            failures: d.breaker_failures,
            open: Duration::from_millis(d.breaker_open_ms),
            max_open: Duration::from_millis(d.breaker_max_open_ms),
        }
    }

    /// Feed an attempt's end to its key's breaker; when it opens, park the key's queue.
    pub(super) fn record_breaker(&mut self, job: &Job, result: &Result<(), AttemptError>) {
        let settings = self.breaker_settings();
        if settings.failures == 0 {
            return;
        }
        let r = match result {
            Ok(()) => breaker::Result::Success,
            Err(AttemptError::Permanent { .. }) => breaker::Result::Permanent,
            Err(AttemptError::Retry { .. } | AttemptError::Timeout(_)) => breaker::Result::Failure,
        };
        if r == breaker::Result::Success && !job.probe && !self.breakers.contains_key(&job.key) {
            return; // the common case: closed, nothing to count
        }
        let now = Instant::now();
        let b = self.breakers.entry(job.key.clone()).or_default();
        let t = b.record(&settings, now, r, job.probe);
        // Relative: `breakers.lua` adds Redis `TIME`, so this worker's wall clock never
        // reaches the next term.
        let snapshot = b.remaining(now);
        let closed_clean = !b.is_open() && r == breaker::Result::Success;
        if t.is_some() {
            // Kept for the next term, fenced like every write.
            let (store, token) = (self.ctx.store.clone(), self.ctx.token.clone());
            let change = (
                super::breaker_field(&job.key),
                snapshot.map(|s| s.encode()).unwrap_or_default(),
            );
            tokio::spawn(async move {
                if let Err(e) = store.save_breakers(&token, &[change]).await {
                    warn!(error = %e, "could not keep a breaker snapshot for the next term");
                }
            });
        }
        match t {
            Some(breaker::Transition::Opened(d)) => {
                warn!(tenant = %job.key.tenant, source = %job.key.source, sink = job.key.index, open_ms = d.as_millis() as u64, "breaker opened");
                metrics::counter!("ankusa_breaker_transitions_total", "to" => "open").increment(1);
                let last = match result {
                    Err(AttemptError::Retry { error, .. }) => error.clone(),
                    Err(AttemptError::Timeout(t)) => {
                        format!("attempt_timeout({}ms)", t.as_millis())
                    }
                    _ => String::new(),
                };
                let why = if job.probe {
                    format!(
                        "the probe failed; open for {} ms; last error: {last}",
                        d.as_millis()
                    )
                } else {
                    format!(
                        "{} consecutive failures; open for {} ms; last error: {last}",
                        settings.failures,
                        d.as_millis()
                    )
                };
                self.breaker_event(job, "breaker_opened", truncate(why, 512));
                for queued in self.slots.take_key(&job.tenant, &job.key) {
                    self.park(queued, d);
                }
                for staged in self.take_batched_key(&job.key) {
                    self.park(staged, d);
                }
            }
            Some(breaker::Transition::Closed) => {
                info!(tenant = %job.key.tenant, source = %job.key.source, sink = job.key.index, "breaker closed");
                metrics::counter!("ankusa_breaker_transitions_total", "to" => "closed")
                    .increment(1);
                self.breaker_event(job, "breaker_closed", "the probe was answered".into());
            }
            None => {}
        }
        if closed_clean {
            self.breakers.remove(&job.key);
        }
        metrics::gauge!("ankusa_breakers_open", "partition" => self.partition_label())
            .set(self.breakers.values().filter(|b| b.is_open()).count() as f64);
    }

    /// Park a row until its breaker closes: attempt count unchanged, due again after
    /// `d` plus up to half of `breaker_open_ms` of jitter, so a recovering endpoint is not hit by
    /// the whole backlog at once; never past the row's retry horizon, and a row parked at or
    /// past it is dead-lettered `retry_horizon(module)` (`core::park_delay`).
    pub(super) fn park(&mut self, job: Job, d: Duration) {
        let delay = super::core::park_delay(d, self.cfg.dispatch.breaker_open_ms, rand::random());
        self.park_ms(job, delay);
    }

    /// Park a row for exactly `delay` ms (a breaker's period with its jitter, or a rate
    /// limit's wait): attempt count unchanged, never past the row's retry horizon
    /// (`core::park_op`).
    pub(super) fn park_ms(&mut self, job: Job, delay: u64) {
        let module = job.key.module.to_string();
        // The entry's own horizon when it sets one, never past the operator's.
        let max_elapsed_ms = backoff::horizon_ms(&self.cfg.retry, job.entry.retry.as_ref());
        let op = super::core::park_op(
            job.redis_now_ms(),
            job.first_attempt_ms,
            max_elapsed_ms,
            delay,
            &module,
        );
        if matches!(op, SettleOp::Park { .. }) {
            metrics::counter!("ankusa_parked_rows_total").increment(1);
        }
        metrics::counter!("ankusa_deliveries_total", "module" => module, "outcome" => super::core::outcome_label(&op))
            .increment(1);
        self.push_job(job, op);
    }

    /// A finished attempt: its settle operation (`core::attempt_op`, under the entry's own
    /// retry policy over the global one), its metrics, its history record and its "attempt
    /// failed" line.
    pub(super) fn record_attempt(
        &mut self,
        job: Job,
        result: Result<(), AttemptError>,
        elapsed: Duration,
    ) {
        let module = job.target.module();
        let now = job.redis_now_ms();
        let attempts = job.attempts + 1;
        let first = job.first_attempt_ms.unwrap_or(job.claim_ms);
        self.track_failure(&job, &result);
        let kind = result.as_ref().err().map(AttemptError::kind);
        let policy = backoff::effective(&self.cfg.retry, job.entry.retry.as_ref());
        let row = super::core::RetryState {
            attempts,
            first_ms: first,
            now_ms: now,
            draw: rand::random::<f64>(),
        };
        let super::core::AttemptOp { op, result } =
            super::core::attempt_op(result, &policy, row, module);
        metrics::histogram!("ankusa_attempt_duration_seconds", "module" => module, "result" => result).record(elapsed.as_secs_f64());
        if op == SettleOp::Delivered {
            metrics::histogram!("ankusa_delivery_latency_seconds", "module" => module)
                .record((now - job.hook.committed_at_ms).max(0) as f64 / 1000.0);
            metrics::counter!("ankusa_rows_delivered_total", "module" => module).increment(1);
        }
        metrics::counter!("ankusa_deliveries_total", "module" => module, "outcome" => super::core::outcome_label(&op)).increment(1);
        let record = attempt_record(&job, attempts, now, elapsed, &op, kind);
        if record.error.is_some() {
            // In the attempt's span: the line carries its fields (tenant, source, sink,
            // module, row, attempt, and the status and error `record_outcome` put there) and,
            // with export on, its trace and span ids; naming them again here printed each twice.
            job.span.in_scope(|| {
                info!(
                    next_attempt_ms = record.next_attempt_ms,
                    reason = record.reason.as_deref(),
                    "attempt failed"
                )
            });
        }
        if let SettleOp::DeadLetter { reason, error } = &op {
            self.dead_letter_event(&job, attempts, reason, error);
        }
        let hook = job.hook_id;
        self.push_outcome(
            job.tenant,
            job.row.to_string(),
            job.claim,
            attempts,
            first,
            op,
            job.bytes,
        );
        if let Some(p) = self.pending.last_mut() {
            p.record = Some((hook, record));
        }
    }
}

/// The `attempt` span of `job`'s next attempt, kept in the job with its `traceparent`; its
/// outcome, status and error are recorded at the end ([`record_outcome`]).
pub(super) fn attempt_span(job: &mut Job) -> tracing::Span {
    let span = tracing::info_span!("attempt", tenant = %job.tenant, source = %job.key.source, sink = i64::from(job.key.index),
        module = %job.key.module, row = %job.row, attempt = i64::from(job.attempts) + 1, outcome = tracing::field::Empty,
        status = tracing::field::Empty, error = tracing::field::Empty, trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty);
    // A child of the producer's traceparent when spans are exported (crate::telemetry).
    crate::telemetry::link(&span, job.hook.headers.json());
    // With export on, the log lines in the span name its trace, and the request carries the
    // span as the receiver's parent.
    job.traceparent = crate::telemetry::span_ids(&span).map(|ids| {
        span.record("trace_id", tracing::field::display(&ids.trace_id));
        span.record("span_id", tracing::field::display(&ids.span_id));
        ids.traceparent
    });
    job.span = span.clone();
    span
}

/// The history record of a finished attempt (`now`: Redis time at its end, ms); `kind` is its
/// error's, typed by the sink that failed.
pub(super) fn attempt_record(
    job: &Job,
    attempt: u32,
    now: i64,
    elapsed: Duration,
    op: &SettleOp,
    kind: Option<crate::sinks::ErrorKind>,
) -> crate::store::AttemptRecord {
    let kind = kind.unwrap_or(crate::sinks::ErrorKind::Other);
    let duration_ms = elapsed.as_millis() as u64;
    let base = crate::store::AttemptRecord {
        row: job.row.to_string(),
        sink: job.key.index,
        attempt,
        started_ms: now - duration_ms as i64,
        duration_ms,
        outcome: "delivered".into(),
        status: job.status,
        error_kind: None,
        error: None,
        next_attempt_ms: None,
        reason: None,
    };
    match op {
        SettleOp::Retry { delay_ms, error } => crate::store::AttemptRecord {
            next_attempt_ms: Some(now + *delay_ms as i64),
            ..base.failed("retry", error, kind)
        },
        SettleOp::DeadLetter { reason, error } => crate::store::AttemptRecord {
            reason: Some(reason.to_string()),
            ..base.failed("dead_lettered", error, kind)
        },
        _ => base,
    }
}

/// Record an attempt's end on its span: `outcome` (`ok`, `retry`, `permanent`), the HTTP
/// `status` when one answered, the `error` of a failure (exported with the span, `telemetry`).
pub(super) fn record_outcome(result: &Result<(), AttemptError>, status: Option<u16>) {
    let span = tracing::Span::current();
    span.record(
        "outcome",
        result.as_ref().err().map_or("ok", AttemptError::outcome),
    );
    // A failed attempt's status is in its error's kind (`job.status` is set on success only).
    let status = status.or_else(|| result.as_ref().err().and_then(|e| e.kind().status()));
    if let Some(status) = status {
        span.record("status", i64::from(status));
    }
    match result {
        Ok(()) => {}
        Err(AttemptError::Retry { error, .. }) | Err(AttemptError::Permanent { error, .. }) => {
            // Display, not str: the pretty log escapes it as every other text (`\x1b`).
            span.record("error", tracing::field::display(error));
        }
        Err(AttemptError::Timeout(d)) => {
            span.record(
                "error",
                tracing::field::display(format_args!("attempt_timeout({}ms)", d.as_millis())),
            );
        }
    }
}
