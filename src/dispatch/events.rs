//! The operational events the leader emits beside `sink_disabled`/`sink_enabled`:
//! `breaker_opened` and `breaker_closed` on every transition of a sink key's breaker, and
//! `row_dead_lettered` when a row is dead-lettered — at most one per sink key per
//! [`DEAD_LETTER_EVENT_EVERY`], carrying how many more were since the last one, so a dead
//! sink's backlog does not become one event per row; `hook_exhausted` once per hook whose
//! last row ended with one or more of its rows dead-lettered (settle.lua reports it). Each
//! is appended to the partition's
//! `events` stream and POSTed to `operator.events_url` and to the tenant's own
//! `tenants.<id>.events_url`, as the disable events are.

use super::*;
use crate::store::SinkEvent;

/// The shortest time between two `row_dead_lettered` events of one sink key.
pub(super) const DEAD_LETTER_EVENT_EVERY: Duration = Duration::from_secs(60);
/// The most bytes of a hook's body a `row_dead_lettered` event carries.
pub(super) const EVENT_BODY_PREFIX_BYTES: usize = 256;

/// When a sink key last announced a dead letter, and the dead letters not announced since.
#[derive(Debug, Clone, Copy)]
pub(super) struct Announced {
    at: Instant,
    suppressed: u64,
}

/// Whether a dead letter of a key whose last announcement is `last` is announced `now`:
/// `Some(dead letters not announced before it)`, or `None` (counted for the next one).
pub(super) fn dead_letter_due(
    last: &mut Option<Announced>,
    now: Instant,
    every: Duration,
) -> Option<u64> {
    match last {
        Some(a) if now.saturating_duration_since(a.at) < every => {
            a.suppressed += 1;
            None
        }
        _ => {
            let suppressed = last.map_or(0, |a| a.suppressed);
            *last = Some(Announced {
                at: now,
                suppressed: 0,
            });
            Some(suppressed)
        }
    }
}

/// The first [`EVENT_BODY_PREFIX_BYTES`] of a body as text (invalid UTF-8 replaced): what an
/// operator needs to recognise the hook, bounded.
pub(super) fn body_prefix(body: &[u8]) -> String {
    let cut = &body[..body.len().min(EVENT_BODY_PREFIX_BYTES)];
    String::from_utf8_lossy(cut).into_owned()
}

/// An event of `kind` about `job`'s sink key, at Redis' time.
fn key_event(job: &Job, kind: &str, reason: String) -> SinkEvent {
    SinkEvent {
        kind: kind.into(),
        tenant: job.key.tenant.to_string(),
        source: job.key.source.to_string(),
        sink: job.key.index,
        module: job.key.module.to_string(),
        reason,
        at_ms: job.redis_now_ms(),
        ..SinkEvent::default()
    }
}

/// Append `event` to the `events` stream and POST it to `operator.events_url` and the
/// tenant's `tenants.<id>.events_url`, in the background; a failure is logged (an event is
/// information, never a reason to stop).
pub(super) fn spawn_event(
    store: Store,
    sinks: Sinks,
    cfg: Arc<crate::config::Config>,
    event: SinkEvent,
    kind: &'static str,
) {
    metrics::counter!("ankusa_operational_events_total", "type" => kind).increment(1);
    tokio::spawn(async move {
        match store
            .append_event(&event, cfg.operator.events_max_len)
            .await
        {
            Ok(id) => {
                let event = SinkEvent { id, ..event };
                policy::post_event(&sinks, &cfg, &event).await;
            }
            Err(e) => warn!(error = %e, kind, "could not append an operational event"),
        }
    });
}

/// `hook_exhausted` for a hook whose every row has ended, not all delivered: one per hook,
/// from the settle call that ended its last row.
pub(super) fn exhausted_event(h: crate::store::ExhaustedHook) -> SinkEvent {
    let rows = if h.dead_rows == 1 { "row" } else { "rows" };
    SinkEvent {
        kind: "hook_exhausted".into(),
        reason: format!(
            "{} {rows} dead-lettered; nothing more is attempted for the hook unless replayed",
            h.dead_rows
        ),
        tenant: h.tenant,
        source: h.source,
        sink: h.sink,
        module: h.module,
        at_ms: h.at_ms,
        hook: Some(h.hook),
        event_type: h.event_type,
        body_prefix: Some(h.body_prefix),
        ..SinkEvent::default()
    }
}

impl Session {
    /// [`spawn_event`] with this session's store, sinks and config.
    pub(super) fn emit_event(&self, event: SinkEvent, kind: &'static str) {
        spawn_event(
            self.ctx.store.clone(),
            self.ctx.sinks.clone(),
            self.cfg.clone(),
            event,
            kind,
        );
    }

    /// `breaker_opened` or `breaker_closed` for `job`'s key.
    pub(super) fn breaker_event(&self, job: &Job, kind: &'static str, reason: String) {
        self.emit_event(key_event(job, kind, reason), kind);
    }

    /// `row_dead_lettered` for `job` when its delivery failed (max attempts, retry horizon,
    /// a permanent answer), unless its key announced one within [`DEAD_LETTER_EVENT_EVERY`]
    /// (then it is counted for the next).
    /// `attempts`: the attempts made, this one included.
    pub(super) fn dead_letter_event(
        &mut self,
        job: &Job,
        attempts: u32,
        reason: &DeadReason,
        error: &str,
    ) {
        // A delivery that failed; not one the operator's own edit ended (sink_disabled,
        // source_gone, sink_gone) or a malformed row.
        if !matches!(
            reason,
            DeadReason::MaxAttempts(_) | DeadReason::RetryHorizon(_) | DeadReason::Permanent(_)
        ) {
            return;
        }
        let last = self.dead_letter_events.entry(job.key.clone()).or_default();
        let Some(suppressed) = dead_letter_due(last, Instant::now(), DEAD_LETTER_EVENT_EVERY)
        else {
            return;
        };
        let reason = if error.is_empty() {
            reason.to_string()
        } else {
            truncate(format!("{reason}: {error}"), 512)
        };
        let event = SinkEvent {
            hook: Some(job.hook_id),
            attempts: Some(attempts),
            event_type: job.hook.event_type.clone(),
            body_prefix: Some(body_prefix(&job.hook.body)),
            suppressed: Some(suppressed),
            ..key_event(job, "row_dead_lettered", reason)
        };
        self.emit_event(event, "row_dead_lettered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_announces_one_dead_letter_per_period_with_the_count_of_the_others() {
        let t0 = Instant::now();
        let every = Duration::from_secs(60);
        let at = |s| t0 + Duration::from_secs(s);
        let mut last = None;
        assert_eq!(dead_letter_due(&mut last, at(0), every), Some(0));
        assert_eq!(dead_letter_due(&mut last, at(1), every), None);
        assert_eq!(dead_letter_due(&mut last, at(59), every), None);
        assert_eq!(dead_letter_due(&mut last, at(60), every), Some(2));
        assert_eq!(dead_letter_due(&mut last, at(61), every), None);
        assert_eq!(dead_letter_due(&mut last, at(200), every), Some(1));
    }

    #[test]
    fn a_body_prefix_is_bounded_and_text() {
        assert_eq!(body_prefix(b"{\"a\":1}"), "{\"a\":1}");
        let long = vec![b'x'; 10_000];
        assert_eq!(body_prefix(&long).len(), EVENT_BODY_PREFIX_BYTES);
        assert_eq!(body_prefix(&[0xff, b'a']), "\u{fffd}a");
    }
}
