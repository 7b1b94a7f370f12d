//! Retry timing: exponential backoff with jitter, `Retry-After`, the horizon.
//! Pure: the caller passes the clock reading and the random draw.

use crate::config::RetryConfig;
use crate::model::EntryRetry;
use std::time::Duration;

/// The retry policy of one sink entry: the global `[retry]` with the entry's fields
/// over it, and the entry's fixed schedule if it has one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Policy {
    /// The merged `[retry]` fields.
    pub cfg: RetryConfig,
    /// Delays before the 2nd, 3rd, … attempt, ms; the last repeats. Replaces the
    /// exponential backoff when set.
    pub schedule_ms: Option<Vec<u64>>,
}

/// Merge an entry's retry fields over the global ones. With a schedule and no `jitter` of
/// its own the entry's delays are exact (jitter 0). The operator's `max_attempts` (when set)
/// and `max_elapsed_ms` stay caps: an entry may give up sooner, never later, even one stored
/// before `source put` refused larger values.
pub(crate) fn effective(global: &RetryConfig, entry: Option<&EntryRetry>) -> Policy {
    let Some(e) = entry else {
        return Policy {
            cfg: global.clone(),
            schedule_ms: None,
        };
    };
    let mut cfg = global.clone();
    if let Some(v) = e.initial_backoff_ms {
        cfg.initial_backoff_ms = v;
    }
    if let Some(v) = e.max_backoff_ms {
        cfg.max_backoff_ms = v;
    }
    cfg.max_backoff_ms = cfg.max_backoff_ms.max(cfg.initial_backoff_ms);
    if let Some(v) = e.multiplier {
        cfg.multiplier = v;
    }
    cfg.jitter = match (e.jitter, &e.schedule_ms) {
        (Some(j), _) => j,
        (None, Some(_)) => 0.0,
        (None, None) => cfg.jitter,
    };
    if let Some(v) = e.max_elapsed_ms {
        cfg.max_elapsed_ms = v.min(global.max_elapsed_ms);
    }
    if let Some(v) = e.max_attempts {
        cfg.max_attempts = capped_attempts(v, global.max_attempts);
    }
    Policy {
        cfg,
        schedule_ms: e.schedule_ms.clone().filter(|s| !s.is_empty()),
    }
}

/// An entry's `max_attempts` under the operator's (0: no limit on either side).
fn capped_attempts(entry: u32, global: u32) -> u32 {
    match (entry, global) {
        (e, 0) => e,
        (0, g) => g,
        (e, g) => e.min(g),
    }
}

/// An entry's retry horizon under the operator's `retry.max_elapsed_ms`, ms.
pub(crate) fn horizon_ms(global: &RetryConfig, entry: Option<&EntryRetry>) -> u64 {
    entry
        .and_then(|r| r.max_elapsed_ms)
        .map_or(global.max_elapsed_ms, |e| e.min(global.max_elapsed_ms))
}

/// [`backoff_ms`] under a [`Policy`]: the schedule's delay for this attempt (the last one
/// repeating) minus up to `jitter` of itself, else the exponential backoff.
pub(crate) fn policy_backoff_ms(p: &Policy, attempts: u32, draw: f64) -> u64 {
    match p.schedule_ms.as_deref() {
        Some(s) if !s.is_empty() => {
            let i = (attempts.saturating_sub(1) as usize).min(s.len() - 1);
            let d = s[i] as f64 * (1.0 - p.cfg.jitter * draw.clamp(0.0, 1.0));
            d.max(1.0) as u64
        }
        _ => backoff_ms(&p.cfg, attempts, draw),
    }
}

/// [`decide`] under an entry's [`Policy`].
pub(crate) fn decide_policy(
    p: &Policy,
    attempts: u32,
    first_attempt_ms: i64,
    now_ms: i64,
    retry_after: Option<Duration>,
    draw: f64,
) -> RetryDecision {
    decide_with(
        &p.cfg,
        policy_backoff_ms(p, attempts, draw),
        attempts,
        first_attempt_ms,
        now_ms,
        retry_after,
    )
}

/// What to do with a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryDecision {
    /// Due again after this many ms.
    RetryIn(u64),
    /// The horizon passed: dead-letter `retry_horizon(module)`.
    Horizon,
    /// `retry.max_attempts` reached: dead-letter `max_attempts(module)`.
    MaxAttempts,
}

/// Backoff before attempt `attempts + 1` (ms): `initial × multiplier^(attempts-1)`, capped at
/// `max_backoff_ms`, minus up to `jitter` of itself (`draw` in [0, 1)).
pub(crate) fn backoff_ms(cfg: &RetryConfig, attempts: u32, draw: f64) -> u64 {
    let exp = attempts.saturating_sub(1).min(64) as i32;
    let raw = cfg.initial_backoff_ms as f64 * cfg.multiplier.powi(exp);
    let capped = raw.min(cfg.max_backoff_ms as f64);
    let jittered = capped * (1.0 - cfg.jitter * draw.clamp(0.0, 1.0));
    jittered.max(1.0) as u64
}

/// Decide a failed attempt's fate. `now_ms` and `first_attempt_ms` are Redis-clock ms;
/// `attempts` counts the attempt that just failed.
///
/// The delay is the backoff, raised (never lowered) by a sink's `Retry-After` (capped at
/// `retry_after_max_ms`), and never below `retry.min_backoff_ms`: a `Retry-After: 0`
/// or a date in the past cannot make a row retry at once. A retry never lands past the
/// horizon: a backoff is cut to land on it (the last attempt runs there), but a delay
/// the sink asked for, or the floor, is never cut short by an extra attempt: when the
/// horizon comes first the row is dead-lettered now. A failure at or past it is final.
#[cfg(test)] // only the unit tests call it
pub(crate) fn decide(
    cfg: &RetryConfig,
    attempts: u32,
    first_attempt_ms: i64,
    now_ms: i64,
    retry_after: Option<Duration>,
    draw: f64,
) -> RetryDecision {
    decide_with(
        cfg,
        backoff_ms(cfg, attempts, draw),
        attempts,
        first_attempt_ms,
        now_ms,
        retry_after,
    )
}

/// [`decide`] with the backoff already drawn.
fn decide_with(
    cfg: &RetryConfig,
    backoff: u64,
    attempts: u32,
    first_attempt_ms: i64,
    now_ms: i64,
    retry_after: Option<Duration>,
) -> RetryDecision {
    if cfg.max_attempts > 0 && attempts >= cfg.max_attempts {
        return RetryDecision::MaxAttempts;
    }
    let horizon = first_attempt_ms.saturating_add(cfg.max_elapsed_ms as i64);
    if now_ms >= horizon {
        return RetryDecision::Horizon;
    }
    let left = (horizon - now_ms) as u64;
    // What the row must wait at least: the floor, raised by the sink's hint.
    let asked = retry_after.map_or(0, |d| (d.as_millis() as u64).min(cfg.retry_after_max_ms));
    let must = asked.max(cfg.min_backoff_ms);
    if must > left {
        return RetryDecision::Horizon;
    }
    RetryDecision::RetryIn(backoff.max(must).min(left))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg() -> RetryConfig {
        RetryConfig {
            initial_backoff_ms: 1000,
            max_backoff_ms: 60_000,
            multiplier: 2.0,
            jitter: 0.2,
            max_elapsed_ms: 3_600_000,
            max_attempts: 0,
            retry_after_max_ms: 600_000,
            min_backoff_ms: 500,
        }
    }

    #[test]
    fn backoff_doubles_per_attempt_up_to_the_cap() {
        let c = cfg();
        assert_eq!(backoff_ms(&c, 1, 0.0), 1000);
        assert_eq!(backoff_ms(&c, 2, 0.0), 2000);
        assert_eq!(backoff_ms(&c, 4, 0.0), 8000);
        assert_eq!(backoff_ms(&c, 30, 0.0), 60_000);
        assert_eq!(backoff_ms(&c, 1, 1.0), 800);
    }

    #[test]
    fn retry_after_is_honoured_within_its_cap() {
        let c = cfg();
        assert_eq!(
            decide(&c, 1, 0, 0, Some(Duration::from_secs(30)), 0.5),
            RetryDecision::RetryIn(30_000)
        );
        assert_eq!(
            decide(&c, 1, 0, 0, Some(Duration::from_secs(99_999)), 0.5),
            RetryDecision::RetryIn(600_000)
        );
    }

    #[test]
    fn retry_after_raises_the_delay_and_never_lowers_it_below_the_backoff_or_floor() {
        let c = cfg();
        // Retry-After: 0 (or a date in the past, parsed as 0): the backoff applies.
        assert_eq!(
            decide(&c, 1, 0, 0, Some(Duration::ZERO), 0.0),
            RetryDecision::RetryIn(1000)
        );
        // A short hint below the backoff does not shorten it.
        assert_eq!(
            decide(&c, 3, 0, 0, Some(Duration::from_millis(10)), 0.0),
            RetryDecision::RetryIn(4000)
        );
        // The floor holds under the heaviest jitter and the smallest backoff.
        let tiny = RetryConfig {
            initial_backoff_ms: 1,
            max_backoff_ms: 1,
            min_backoff_ms: 1,
            ..cfg()
        };
        let floored = RetryConfig {
            min_backoff_ms: 700,
            max_backoff_ms: 700,
            ..tiny
        };
        assert_eq!(
            decide(&floored, 1, 0, 0, Some(Duration::ZERO), 1.0),
            RetryDecision::RetryIn(700)
        );
    }

    #[test]
    fn the_horizon_never_cuts_a_retry_after_short_by_an_extra_attempt() {
        let c = cfg();
        // 10 s left, the sink asks for 30 s: no attempt before it asked, dead-letter now.
        assert_eq!(
            decide(&c, 4, 0, 3_590_000, Some(Duration::from_secs(30)), 0.0),
            RetryDecision::Horizon
        );
        // Less left than the floor: the same.
        assert_eq!(
            decide(&c, 4, 0, 3_599_800, None, 0.0),
            RetryDecision::Horizon
        );
        // A hint that fits is honoured whole.
        assert_eq!(
            decide(&c, 4, 0, 3_500_000, Some(Duration::from_secs(30)), 0.0),
            RetryDecision::RetryIn(30_000)
        );
    }

    #[test]
    fn the_last_retry_lands_on_the_horizon_and_a_failure_there_is_final() {
        let c = cfg();
        assert_eq!(
            decide(&c, 9, 0, 3_599_000, None, 0.0),
            RetryDecision::RetryIn(1000)
        );
        assert_eq!(
            decide(&c, 10, 0, 3_600_000, None, 0.0),
            RetryDecision::Horizon
        );
    }

    #[test]
    fn max_attempts_ends_retries_when_set() {
        let c = RetryConfig {
            max_attempts: 3,
            ..cfg()
        };
        assert_eq!(
            decide(&c, 2, 0, 10, None, 0.0),
            RetryDecision::RetryIn(2000)
        );
        assert_eq!(decide(&c, 3, 0, 10, None, 0.0), RetryDecision::MaxAttempts);
    }

    #[test]
    fn an_entry_schedule_replaces_the_backoff_and_its_last_delay_repeats() {
        let e = EntryRetry {
            schedule_ms: Some(vec![200, 400]),
            max_attempts: Some(3),
            ..EntryRetry::default()
        };
        let p = effective(&cfg(), Some(&e));
        assert_eq!(
            p.cfg.jitter, 0.0,
            "a schedule is exact unless the entry sets jitter"
        );
        assert_eq!(p.cfg.max_attempts, 3);
        // The global floor (500 ms) still raises a shorter delay.
        assert_eq!(
            decide_policy(&p, 1, 0, 0, None, 0.9),
            RetryDecision::RetryIn(500)
        );
        let low = RetryConfig {
            min_backoff_ms: 10,
            ..cfg()
        };
        let p = effective(&low, Some(&e));
        assert_eq!(
            decide_policy(&p, 1, 0, 0, None, 0.9),
            RetryDecision::RetryIn(200)
        );
        assert_eq!(
            decide_policy(&p, 2, 0, 0, None, 0.9),
            RetryDecision::RetryIn(400)
        );
        assert_eq!(
            decide_policy(&p, 3, 0, 0, None, 0.9),
            RetryDecision::MaxAttempts
        );
        let more = effective(
            &low,
            Some(&EntryRetry {
                max_attempts: None,
                ..e.clone()
            }),
        );
        assert_eq!(
            decide_policy(&more, 7, 0, 0, None, 0.0),
            RetryDecision::RetryIn(400)
        );
        // No entry policy: the global one, unchanged.
        assert_eq!(effective(&low, None).cfg, low);
    }

    #[test]
    fn entry_fields_replace_only_their_global_field() {
        let e = EntryRetry {
            initial_backoff_ms: Some(50),
            max_elapsed_ms: Some(1_000),
            ..EntryRetry::default()
        };
        let p = effective(&cfg(), Some(&e));
        assert_eq!(
            (
                p.cfg.initial_backoff_ms,
                p.cfg.max_elapsed_ms,
                p.cfg.multiplier,
                p.cfg.jitter
            ),
            (50, 1_000, 2.0, 0.2)
        );
        assert_eq!(
            decide_policy(&p, 1, 0, 1_000, None, 0.0),
            RetryDecision::Horizon
        );
    }

    #[test]
    fn an_entry_never_retries_longer_or_more_often_than_the_operator_allows() {
        // What an older version stored: no limit, and a horizon of 4e18 ms.
        let e = EntryRetry {
            max_attempts: Some(0),
            max_elapsed_ms: Some(4_000_000_000_000_000_000),
            ..EntryRetry::default()
        };
        let op = RetryConfig {
            max_attempts: 3,
            ..cfg()
        };
        let p = effective(&op, Some(&e));
        assert_eq!((p.cfg.max_attempts, p.cfg.max_elapsed_ms), (3, 3_600_000));
        assert_eq!(horizon_ms(&op, Some(&e)), 3_600_000);
        assert_eq!(
            decide_policy(&p, 3, 0, 10, None, 0.0),
            RetryDecision::MaxAttempts
        );
        // Sooner is the entry's own choice; with no operator limit the entry's count holds.
        let fewer = EntryRetry {
            max_attempts: Some(2),
            max_elapsed_ms: Some(1_000),
            ..EntryRetry::default()
        };
        let p = effective(&op, Some(&fewer));
        assert_eq!((p.cfg.max_attempts, p.cfg.max_elapsed_ms), (2, 1_000));
        assert_eq!(effective(&cfg(), Some(&e)).cfg.max_attempts, 0);
        assert_eq!(effective(&cfg(), Some(&fewer)).cfg.max_attempts, 2);
    }

    proptest! {
        #[test]
        fn a_retry_is_never_due_past_the_horizon(attempts in 1u32..100, first in 0i64..1_000_000, elapsed in 0i64..4_000_000, draw in 0.0f64..1.0, ra in proptest::option::of(0u64..10_000_000)) {
            let c = cfg();
            let now = first + elapsed;
            match decide(&c, attempts, first, now, ra.map(Duration::from_millis), draw) {
                RetryDecision::RetryIn(d) => {
                    prop_assert!(now + d as i64 <= first + c.max_elapsed_ms as i64);
                    prop_assert!(d >= c.min_backoff_ms);
                    if let Some(ra) = ra {
                        prop_assert!(d >= ra.min(c.retry_after_max_ms));
                    }
                }
                RetryDecision::Horizon => {
                    let left = first + c.max_elapsed_ms as i64 - now;
                    let must = ra.map_or(0, |r| r.min(c.retry_after_max_ms)).max(c.min_backoff_ms);
                    prop_assert!(left <= 0 || must as i64 > left);
                }
                RetryDecision::MaxAttempts => prop_assert!(false),
            }
        }
    }
}
