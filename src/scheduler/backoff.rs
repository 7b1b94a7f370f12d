//! Retry timing (R8, R9): exponential backoff with jitter, `Retry-After`, the horizon.
//! Pure: the caller passes the clock reading and the random draw.

use crate::config::RetryConfig;
use std::time::Duration;

/// What to do with a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Due again after this many ms.
    RetryIn(u64),
    /// The horizon passed (R9): dead-letter `retry_horizon(module)`.
    Horizon,
    /// `retry.max_attempts` reached: dead-letter `max_attempts(module)`.
    MaxAttempts,
}

/// Backoff before attempt `attempts + 1` (ms): `initial × multiplier^(attempts-1)`, capped at
/// `max_backoff_ms`, minus up to `jitter` of itself (`draw` in [0, 1)).
pub fn backoff_ms(cfg: &RetryConfig, attempts: u32, draw: f64) -> u64 {
    let exp = attempts.saturating_sub(1).min(64) as i32;
    let raw = cfg.initial_backoff_ms as f64 * cfg.multiplier.powi(exp);
    let capped = raw.min(cfg.max_backoff_ms as f64);
    let jittered = capped * (1.0 - cfg.jitter * draw.clamp(0.0, 1.0));
    jittered.max(1.0) as u64
}

/// Decide a failed attempt's fate. `now_ms` and `first_attempt_ms` are Redis-clock ms;
/// `attempts` counts the attempt that just failed. A retry never lands past the horizon:
/// the last one runs at it, and a failure at or past it is final.
pub fn decide(
    cfg: &RetryConfig,
    attempts: u32,
    first_attempt_ms: i64,
    now_ms: i64,
    retry_after: Option<Duration>,
    draw: f64,
) -> RetryDecision {
    if cfg.max_attempts > 0 && attempts >= cfg.max_attempts {
        return RetryDecision::MaxAttempts;
    }
    let horizon = first_attempt_ms.saturating_add(cfg.max_elapsed_ms as i64);
    if now_ms >= horizon {
        return RetryDecision::Horizon;
    }
    let delay = match retry_after {
        Some(d) => (d.as_millis() as u64).min(cfg.retry_after_max_ms),
        None => backoff_ms(cfg, attempts, draw),
    };
    let left = (horizon - now_ms) as u64;
    RetryDecision::RetryIn(delay.min(left))
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

    proptest! {
        #[test]
        fn a_retry_is_never_due_past_the_horizon(attempts in 1u32..100, first in 0i64..1_000_000, elapsed in 0i64..4_000_000, draw in 0.0f64..1.0, ra in proptest::option::of(0u64..10_000_000)) {
            let c = cfg();
            let now = first + elapsed;
            match decide(&c, attempts, first, now, ra.map(Duration::from_millis), draw) {
                RetryDecision::RetryIn(d) => prop_assert!(now + d as i64 <= first + c.max_elapsed_ms as i64),
                RetryDecision::Horizon => prop_assert!(now >= first + c.max_elapsed_ms as i64),
                RetryDecision::MaxAttempts => prop_assert!(false),
            }
        }
    }
}
