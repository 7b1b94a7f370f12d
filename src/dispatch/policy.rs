//! Per-entry policy in the loop: rate limits at queueing time (the decisions are
//! [`crate::scheduler::rate`]'s), and disabling an entry after prolonged failure.

use super::*;

impl Session {
    /// Queue a job behind its sink key under the key's rate limit: without one the bucket is
    /// forgotten; with one, a key that already holds about two seconds of tokens' worth of
    /// rows parks the job back in Redis until its token would come, so a slow limit never
    /// fills the window that other keys need (rows parked so are no failures: attempts
    /// unchanged, counted in `ankusa_rate_limit_parked_total`).
    pub(super) fn queue_job(&mut self, job: Job) {
        let Some(limit) = job.entry.rate_limit else {
            if !self.rates.is_empty() {
                self.rates.remove(&job.key);
            }
            self.slots.push(job);
            return;
        };
        let now = Instant::now();
        let bucket = self
            .rates
            .entry(job.key.clone())
            .or_insert_with(|| rate::Bucket::new(&limit, now));
        bucket.set_limit(&limit, now);
        let queued = self.slots.queued(&job.tenant, &job.key);
        if queued >= bucket.queue_cap() {
            let wait = bucket.park_for(queued, now);
            metrics::counter!("ankusa_rate_limit_parked_total").increment(1);
            self.park_ms(job, (wait.as_millis() as u64).max(1));
        } else {
            self.slots.push(job);
        }
    }
}

impl Session {
    /// Follow a sink key's continuous failure for its entry's `disable_after_ms`: a
    /// success ends the run; any failure (permanent ones too: the endpoint is what fails)
    /// starts one or keeps it going. The run is kept in the leader's memory: a new term
    /// starts it again, like the breakers' state.
    pub(super) fn track_failure(&mut self, job: &Job, result: &Result<(), AttemptError>) {
        let Some(after) = job.entry.disable_after_ms else {
            if !self.failing_since.is_empty() {
                self.failing_since.remove(&job.key);
            }
            return;
        };
        let error = match result {
            Ok(()) => {
                self.failing_since.remove(&job.key);
                return;
            }
            Err(AttemptError::Retry { error, .. }) | Err(AttemptError::Permanent { error, .. }) => {
                truncate(error.clone(), 512)
            }
            Err(AttemptError::Timeout(d)) => format!("attempt_timeout({}ms)", d.as_millis()),
        };
        if job.entry.disabled.is_some() {
            return;
        }
        let now = Instant::now();
        let run = self
            .failing_since
            .entry(job.key.clone())
            .or_insert_with(|| FailRun {
                since: now,
                after: Duration::from_millis(after),
                error: String::new(),
            });
        run.after = Duration::from_millis(after);
        run.error = error;
        let key = job.key.clone();
        self.check_disable(now, Some(&key));
    }

    /// Whether a key's run may end in a disable without a new failure: only while its
    /// breaker is open, since then attempts are held back and no success can come. A key
    /// that simply has no more rows is never disabled for its silence.
    fn held_back(&self, key: &SinkKey) -> bool {
        self.breakers.get(key).is_some_and(Breaker::is_open)
    }

    /// When the first held-back failing key's run reaches its `disable_after_ms`, if one is
    /// not being disabled already.
    pub(super) fn next_disable_check(&self) -> Option<tokio::time::Instant> {
        if self.failing_since.is_empty() {
            return None;
        }
        self.failing_since
            .iter()
            .filter(|(k, _)| !self.disabling.contains(*k) && self.held_back(k))
            .map(|(_, r)| tokio::time::Instant::from_std(r.since + r.after))
            .min()
    }

    /// Disable every entry whose key has failed without a success for its
    /// `disable_after_ms`: the key that `just_failed`, or a key whose breaker is open
    /// (checked on each turn of the loop, woken by [`Session::next_disable_check`]), so an
    /// open breaker, which stops the attempts, does not delay the disable.
    pub(super) fn check_disable(&mut self, now: Instant, just_failed: Option<&SinkKey>) {
        if self.failing_since.is_empty() {
            return;
        }
        let due: Vec<(SinkKey, Duration, String)> = self
            .failing_since
            .iter()
            .filter(|(k, r)| {
                super::core::disable_due(
                    r.since,
                    r.after,
                    now,
                    self.disabling.contains(*k),
                    just_failed == Some(*k),
                    self.held_back(k),
                )
            })
            .map(|(k, r)| (k.clone(), now.duration_since(r.since), r.error.clone()))
            .collect();
        for (key, failing, error) in due {
            self.disabling.insert(key.clone());
            let reason = format!(
                "failing for {} ms without a success; last error: {error}",
                failing.as_millis()
            );
            warn!(tenant = %key.tenant, source = %key.source, sink = key.index, %reason, "disabling sink entry");
            let (store, token, tx) = (
                self.ctx.store.clone(),
                self.ctx.token.clone(),
                self.tx.clone(),
            );
            let cfg = self.cfg.clone();
            let sinks = self.ctx.sinks.clone();
            tokio::spawn(async move {
                let disabled = crate::model::Disabled {
                    at_ms: breaker::unix_ms() as i64,
                    reason,
                };
                let r = store
                    .set_sink_disabled(
                        Some(&token),
                        &key.tenant,
                        &key.source,
                        key.index,
                        Some(&key.module),
                        Some(disabled),
                        cfg.operator.events_max_len,
                    )
                    .await;
                match r {
                    Ok(crate::store::SinkStateChange::Changed(event)) => {
                        metrics::counter!("ankusa_sinks_disabled_total").increment(1);
                        let _ = tx.send(Event::Disabled(key, DisableEnd::Disabled));
                        post_event(&sinks, &cfg, &event).await;
                    }
                    Ok(crate::store::SinkStateChange::Unchanged) => {
                        // Disabled already, or edited meanwhile (no disable_after_ms now).
                        let _ = tx.send(Event::Disabled(key, DisableEnd::NotNeeded));
                    }
                    Err(e) => {
                        warn!(error = %e, tenant = %key.tenant, source = %key.source, sink = key.index, "could not disable the sink entry; trying again on the next turn");
                        let _ = tx.send(Event::Disabled(key, DisableEnd::Failed));
                    }
                }
            });
        }
    }

    /// A disable ended: when the entry is disabled now, its queued rows are dead-lettered
    /// `sink_disabled(index)` (rows in Redis are when next claimed); a failed call is tried
    /// again in 5 s.
    pub(super) fn sink_disabled(&mut self, key: SinkKey, end: DisableEnd) {
        self.disabling.remove(&key);
        if end == DisableEnd::NotNeeded {
            self.failing_since.remove(&key);
            return;
        }
        if end == DisableEnd::Failed {
            // Try again in 5 s (not on every turn of the loop).
            if let Some(r) = self.failing_since.get_mut(&key) {
                let retry = Instant::now() + Duration::from_secs(5);
                r.since = retry.checked_sub(r.after).unwrap_or(r.since);
            }
            return;
        }
        self.failing_since.remove(&key);
        if self.breakers.remove(&key).is_some() {
            // Its snapshot would reopen it in the next term for nothing.
            let (store, token) = (self.ctx.store.clone(), self.ctx.token.clone());
            let change = (super::breaker_field(&key), String::new());
            tokio::spawn(async move {
                if let Err(e) = store.save_breakers(&token, &[change]).await {
                    warn!(error = %e, "could not drop a disabled entry's breaker snapshot");
                }
            });
        }
        self.rates.remove(&key);
        let mut jobs = self.slots.take_key(&key.tenant, &key);
        jobs.extend(self.take_batched_key(&key));
        for job in jobs {
            metrics::counter!("ankusa_deliveries_total", "module" => job.key.module.to_string(), "outcome" => "dead_lettered").increment(1);
            self.push_job(
                job,
                SettleOp::DeadLetter {
                    reason: DeadReason::SinkDisabled(key.index),
                    error: String::new(),
                },
            );
        }
    }
}

/// POST an operational event to `operator.events_url` and to its tenant's
/// `tenants.<id>.events_url`, each where set ([`post_event_to`]), side by side.
pub(super) async fn post_event(
    sinks: &Sinks,
    cfg: &crate::config::Config,
    event: &crate::store::SinkEvent,
) {
    let operator = async {
        if let Some(url) = &cfg.operator.events_url {
            let secret = cfg.operator.signing_secret.as_deref();
            post_event_to(sinks, Audience::Operator, url, secret, event).await;
        }
    };
    let tenant = async {
        let Some(t) = cfg.tenants.get(&event.tenant) else {
            return;
        };
        if let Some(url) = &t.events_url {
            let secret = t.events_signing_secret.as_deref();
            post_event_to(sinks, Audience::Tenant, url, secret, event).await;
        }
    };
    tokio::join!(operator, tenant);
}

/// Who an operational event is POSTed to: the metric and the config key in the logs.
#[derive(Debug, Clone, Copy)]
enum Audience {
    /// `operator.events_url`; counted in `ankusa_operator_events_total`.
    Operator,
    /// `tenants.<id>.events_url`; counted in `ankusa_tenant_events_total`.
    Tenant,
}

impl Audience {
    fn key(self) -> &'static str {
        match self {
            Audience::Operator => "operator.events_url",
            Audience::Tenant => "tenants.<id>.events_url",
        }
    }

    fn count(self, result: &'static str) {
        match self {
            Audience::Operator => {
                metrics::counter!("ankusa_operator_events_total", "result" => result).increment(1)
            }
            Audience::Tenant => {
                metrics::counter!("ankusa_tenant_events_total", "result" => result).increment(1)
            }
        }
    }
}

/// POST an operational event to `url`, signed with `secret` when set (Standard Webhooks,
/// `webhook-id` = the event id), under the http sink's guards; up to 5 attempts, 1 s apart
/// doubling. A failure is logged: the event stays in the `events` stream either way.
async fn post_event_to(
    sinks: &Sinks,
    to: Audience,
    url: &str,
    secret: Option<&str>,
    event: &crate::store::SinkEvent,
) {
    let key = to.key();
    let mut opts = serde_json::Map::new();
    opts.insert("url".into(), url.into());
    if let Some(s) = secret {
        opts.insert("signing_secret".into(), s.into());
    }
    let http = match crate::sinks::http::client(sinks) {
        Ok(h) => h,
        Err(e) => {
            warn!(error = %e, tenant = %event.tenant, "{key}: the event cannot be posted");
            return;
        }
    };
    let opts = match crate::sinks::http::HttpOpts::from_opts(&opts) {
        Ok(o) => o,
        Err(e) => {
            warn!(error = %e, tenant = %event.tenant, "{key}: the event cannot be posted");
            return;
        }
    };
    let body = match serde_json::to_vec(event) {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %e, "operational event not serialisable");
            return;
        }
    };
    let mut delay = Duration::from_secs(1);
    for attempt in 1..=5u32 {
        let d = Delivery {
            tenant: event.tenant.clone(),
            source: event.source.clone(),
            row: event.id.clone(),
            message_id: event.id.clone(),
            hook: 0,
            attempt,
            body: body.clone().into(),
            headers: r#"{"content-type":"application/json"}"#.into(),
            committed_at_ms: event.at_ms,
            // `sink_disabled`, `breaker_opened`…: a receiver routes on it as on a hook's.
            event_type: Some(event.kind.clone()),
            traceparent: None,
            at_ms: None,
        };
        match tokio::time::timeout(Duration::from_secs(30), http.deliver_status(&opts, &d)).await {
            Ok(Ok(_)) => {
                to.count("ok");
                return;
            }
            Ok(Err(AttemptError::Permanent { error: e, .. })) => {
                warn!(error = %e, tenant = %event.tenant, "{key} refused the event");
                break;
            }
            Ok(Err(e)) => {
                warn!(error = ?e, attempt, tenant = %event.tenant, "{key} failed; retrying")
            }
            Err(_) => warn!(attempt, tenant = %event.tenant, "{key} timed out; retrying"),
        }
        tokio::time::sleep(delay).await;
        delay *= 2;
    }
    to.count("failed");
}

/// A sink key's run of failures without a success (`disable_after_ms`).
#[derive(Debug)]
pub(super) struct FailRun {
    /// The end of the run's first failed attempt.
    since: Instant,
    /// The entry's `disable_after_ms` as of its last failure.
    after: Duration,
    /// The last failure's error, for the disable's reason.
    error: String,
}

/// How a disable call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DisableEnd {
    /// The entry is disabled now: its queued rows are dead-lettered.
    Disabled,
    /// Nothing to do: disabled already, or the entry no longer asks for it.
    NotNeeded,
    /// The call failed (Redis, fenced): tried again later.
    Failed,
}
