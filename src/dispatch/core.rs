//! The loop's decisions as pure functions over typed inputs, with the clock and the random
//! draws injected: what a finished attempt becomes ([`attempt_op`]), park versus the retry
//! horizon ([`park_op`], [`park_delay`]), when a failing entry is disabled
//! ([`disable_due`]) and when to claim next ([`next_claim`]). The session applies them and
//! records the metrics from what they answer; the unit tests below run without Redis.

use super::ERROR_MAX_BYTES;
use crate::model::DeadReason;
use crate::scheduler::backoff;
use crate::sinks::{truncate, AttemptError};
use crate::store::{ClaimResult, SettleOp};
use std::time::{Duration, Instant};

/// What a finished attempt becomes: its settle operation, and the `result` label of its
/// duration (`ok`, `error`, `timeout`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AttemptOp {
    pub(super) op: SettleOp,
    pub(super) result: &'static str,
}

/// The row's retry state when its attempt ended.
#[derive(Debug, Clone, Copy)]
pub(super) struct RetryState {
    /// Attempts made, this one included.
    pub(super) attempts: u32,
    /// Its first attempt, ms (Redis clock).
    pub(super) first_ms: i64,
    /// Now, ms (Redis clock).
    pub(super) now_ms: i64,
    /// A uniform draw in `0.0..1.0` for the backoff's jitter.
    pub(super) draw: f64,
}

/// A finished attempt's settle operation: delivered; a permanent failure
/// dead-lettered `permanent(error)`; a retryable one (a timeout too) retried after the
/// entry's backoff, or dead-lettered at the retry horizon or after `max_attempts`. Errors
/// are cut to [`ERROR_MAX_BYTES`].
pub(super) fn attempt_op(
    result: Result<(), AttemptError>,
    policy: &backoff::Policy,
    row: RetryState,
    module: &str,
) -> AttemptOp {
    let (result, retry_after, error) = match result {
        Ok(()) => {
            return AttemptOp {
                op: SettleOp::Delivered,
                result: "ok",
            }
        }
        Err(AttemptError::Permanent { error, .. }) => {
            let reason = truncate(error, ERROR_MAX_BYTES);
            return AttemptOp {
                op: SettleOp::DeadLetter {
                    reason: DeadReason::Permanent(reason.clone()),
                    error: reason,
                },
                result: "error",
            };
        }
        Err(AttemptError::Timeout(after)) => (
            "timeout",
            None,
            format!("attempt_timeout({}ms)", after.as_millis()),
        ),
        Err(AttemptError::Retry {
            error, retry_after, ..
        }) => ("error", retry_after, error),
    };
    let error = truncate(error, ERROR_MAX_BYTES);
    let decision = backoff::decide_policy(
        policy,
        row.attempts,
        row.first_ms,
        row.now_ms,
        retry_after,
        row.draw,
    );
    let reason = match decision {
        backoff::RetryDecision::RetryIn(delay_ms) => {
            return AttemptOp {
                op: SettleOp::Retry { delay_ms, error },
                result,
            }
        }
        backoff::RetryDecision::Horizon => DeadReason::RetryHorizon(module.into()),
        backoff::RetryDecision::MaxAttempts => DeadReason::MaxAttempts(module.into()),
    };
    AttemptOp {
        op: SettleOp::DeadLetter { reason, error },
        result,
    }
}

/// The `outcome` label of `ankusa_deliveries_total` for a settle operation.
pub(super) fn outcome_label(op: &SettleOp) -> &'static str {
    match op {
        SettleOp::Delivered => "delivered",
        SettleOp::Retry { .. } => "retry",
        SettleOp::Park { .. } => "parked",
        SettleOp::DeadLetter { .. } => "dead_lettered",
        SettleOp::Drop => "dropped",
        SettleOp::Unmatched => "unmatched",
    }
}

/// How long a breaker parks a row: its open period `open` plus a jitter of up to half of
/// `breaker_open_ms` (`draw` is a uniform random number), so a recovering endpoint gets
/// the backlog spread out.
pub(super) fn park_delay(open: Duration, breaker_open_ms: u64, draw: u64) -> u64 {
    let spread = breaker_open_ms / 2;
    open.as_millis() as u64 + if spread > 0 { draw % spread } else { 0 }
}

/// Park a row for `delay_ms` (attempt count unchanged), never past its retry horizon
/// (`max_elapsed_ms` after its first attempt, if it had one): a row at or past the horizon
/// is dead-lettered `retry_horizon(module)`, keeping its last attempt's error.
pub(super) fn park_op(
    now_ms: i64,
    first_attempt_ms: Option<i64>,
    max_elapsed_ms: u64,
    delay_ms: u64,
    module: &str,
) -> SettleOp {
    let Some(first) = first_attempt_ms else {
        return SettleOp::Park { delay_ms };
    };
    let horizon = first.saturating_add(max_elapsed_ms as i64);
    if now_ms >= horizon {
        // No error of its own: settle keeps the row's last attempt error.
        SettleOp::DeadLetter {
            reason: DeadReason::RetryHorizon(module.into()),
            error: String::new(),
        }
    } else {
        SettleOp::Park {
            delay_ms: delay_ms.min((horizon - now_ms) as u64),
        }
    }
}

/// Whether a failing sink key's run (failing since `since`, its entry's `disable_after_ms`
/// as `after`) disables its entry at `now`: the run is long enough, no disable of it is under
/// way, and either it just failed again or its attempts are held back (an open breaker:
/// no success can come). A key that merely has no rows is never disabled for its silence.
pub(super) fn disable_due(
    since: Instant,
    after: Duration,
    now: Instant,
    disabling: bool,
    just_failed: bool,
    held_back: bool,
) -> bool {
    now.saturating_duration_since(since) >= after && !disabling && (just_failed || held_back)
}

/// When to claim again after a page.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NextClaim {
    /// More is due right away.
    Now,
    /// Claim again after this wait.
    After(Duration),
}

/// The decision after a page of `got` rows out of `page`; `poll` bounds every wait.
pub(super) fn next_claim(
    claim: &ClaimResult,
    got: usize,
    page: usize,
    poll: Duration,
) -> NextClaim {
    if claim.bytes_full {
        // A due hook does not fit the byte window; an outcome settling frees room and
        // asks again (the poll is the liveness bound).
        NextClaim::After(poll)
    } else if got >= page || claim.budget_stopped {
        // Full, or cut short by the time budget: more is due now.
        NextClaim::Now
    } else {
        let wait = match claim.next_due_ms {
            Some(d) => Duration::from_millis((d - claim.now_ms).max(1) as u64),
            None => poll,
        };
        NextClaim::After(wait.min(poll))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RetryConfig;
    use crate::sinks::ErrorKind;

    fn policy() -> backoff::Policy {
        let cfg = RetryConfig {
            max_attempts: 3,
            max_elapsed_ms: 60_000,
            ..RetryConfig::default()
        };
        backoff::effective(&cfg, None)
    }

    fn row(attempts: u32, first_ms: i64, now_ms: i64) -> RetryState {
        RetryState {
            attempts,
            first_ms,
            now_ms,
            draw: 0.5,
        }
    }

    #[test]
    fn a_success_is_delivered_and_a_permanent_failure_dead_lettered_with_its_error() {
        let p = policy();
        let ok = attempt_op(Ok(()), &p, row(1, 0, 0), "http");
        assert_eq!((ok.op, ok.result), (SettleOp::Delivered, "ok"));
        let long = "x".repeat(ERROR_MAX_BYTES * 2);
        let e = AttemptError::permanent(ErrorKind::HttpStatus(400), long);
        let dead = attempt_op(Err(e), &p, row(1, 0, 0), "http");
        assert_eq!(dead.result, "error");
        let SettleOp::DeadLetter { reason, error } = dead.op else {
            panic!("not a dead letter: {:?}", dead.op);
        };
        assert!(error.len() <= ERROR_MAX_BYTES + '…'.len_utf8());
        assert_eq!(reason, DeadReason::Permanent(error));
    }

    #[test]
    fn a_retryable_failure_retries_until_max_attempts_or_the_horizon() {
        let p = policy();
        let retry = |attempts, now| {
            let e = AttemptError::retry(ErrorKind::HttpStatus(503), "http 503");
            attempt_op(Err(e), &p, row(attempts, 0, now), "sqs").op
        };
        assert!(matches!(retry(1, 1_000), SettleOp::Retry { delay_ms, .. } if delay_ms > 0));
        assert!(matches!(
            retry(3, 1_000),
            SettleOp::DeadLetter { reason: DeadReason::MaxAttempts(m), .. } if m == "sqs"
        ));
        assert!(matches!(
            retry(1, 60_000),
            SettleOp::DeadLetter { reason: DeadReason::RetryHorizon(m), .. } if m == "sqs"
        ));
    }

    #[test]
    fn a_timeout_retries_with_its_bound_as_the_error() {
        let p = policy();
        let t = attempt_op(
            Err(AttemptError::Timeout(Duration::from_millis(250))),
            &p,
            row(1, 0, 0),
            "http",
        );
        assert_eq!(t.result, "timeout");
        assert!(
            matches!(&t.op, SettleOp::Retry { error, .. } if error == "attempt_timeout(250ms)"),
            "{:?}",
            t.op
        );
        assert_eq!(outcome_label(&t.op), "retry");
    }

    #[test]
    fn parking_never_passes_the_horizon_and_a_row_past_it_is_dead_lettered() {
        // No attempt yet: no horizon.
        assert_eq!(
            park_op(5_000, None, 1_000, 9_000, "http"),
            SettleOp::Park { delay_ms: 9_000 }
        );
        // Cut to land on the horizon.
        assert_eq!(
            park_op(5_000, Some(0), 6_000, 9_000, "http"),
            SettleOp::Park { delay_ms: 1_000 }
        );
        assert_eq!(
            park_op(5_000, Some(0), 60_000, 9_000, "http"),
            SettleOp::Park { delay_ms: 9_000 }
        );
        // At or past it.
        assert_eq!(
            park_op(6_000, Some(0), 6_000, 9_000, "http"),
            SettleOp::DeadLetter {
                reason: DeadReason::RetryHorizon("http".into()),
                error: String::new()
            }
        );
    }

    #[test]
    fn a_breaker_park_adds_at_most_half_the_open_period_of_jitter() {
        let open = Duration::from_millis(1_000);
        assert_eq!(park_delay(open, 0, 12_345), 1_000);
        for draw in [0, 1, 499, 500, 12_345, u64::MAX] {
            let d = park_delay(open, 1_000, draw);
            assert!((1_000..1_500).contains(&d), "{draw}: {d}");
        }
    }

    #[test]
    fn an_entry_is_disabled_only_after_its_period_and_a_new_failure_or_an_open_breaker() {
        let t0 = Instant::now();
        let after = Duration::from_secs(3);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(!disable_due(t0, after, at(2), false, true, false));
        assert!(disable_due(t0, after, at(3), false, true, false));
        assert!(disable_due(t0, after, at(3), false, false, true));
        // Silence alone (no failure, breaker closed) never disables.
        assert!(!disable_due(t0, after, at(30), false, false, false));
        // One disable at a time.
        assert!(!disable_due(t0, after, at(30), true, true, true));
    }

    fn claim(now_ms: i64, next_due_ms: Option<i64>) -> ClaimResult {
        ClaimResult {
            now_ms,
            next_due_ms,
            ..ClaimResult::default()
        }
    }

    #[test]
    fn the_next_claim_is_now_after_a_full_page_else_at_the_next_due_row_within_the_poll() {
        let poll = Duration::from_millis(500);
        assert_eq!(next_claim(&claim(0, None), 10, 10, poll), NextClaim::Now);
        assert_eq!(
            next_claim(&claim(1_000, Some(1_040)), 3, 10, poll),
            NextClaim::After(Duration::from_millis(40))
        );
        assert_eq!(
            next_claim(&claim(1_000, Some(9_000)), 3, 10, poll),
            NextClaim::After(poll)
        );
        assert_eq!(
            next_claim(&claim(1_000, Some(900)), 3, 10, poll),
            NextClaim::After(Duration::from_millis(1))
        );
        let stopped = ClaimResult {
            budget_stopped: true,
            ..claim(0, None)
        };
        assert_eq!(next_claim(&stopped, 1, 10, poll), NextClaim::Now);
        let full = ClaimResult {
            bytes_full: true,
            ..claim(0, Some(1))
        };
        assert_eq!(next_claim(&full, 10, 10, poll), NextClaim::After(poll));
    }
}
