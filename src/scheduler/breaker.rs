//! Per-sink-key circuit breakers, with no I/O: the caller passes the clock.
//!
//! Closed → (N consecutive retryable failures) → Open for `open_ms × 2^k` (capped at
//! `max_open_ms`) → HalfOpen: one attempt runs as a probe, rows arriving meanwhile are
//! parked for `open_ms` → success closes it; failure opens it again for twice as long.
//! `permanent` errors neither count nor reset. Breakers decide in the leader's memory; the
//! leader writes a [`Snapshot`] to Redis when one opens or closes, so a new term starts a
//! breaker that was open as open (for what is left of its period) or half-open with one
//! probe, never closed.

use std::time::{Duration, Instant};

/// What to do with a row of this key now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Run the attempt.
    Run,
    /// Run it as the half-open probe.
    Probe,
    /// Park the row for this long (attempt count unchanged).
    Park(Duration),
}

/// How an attempt ended, as the breaker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Result {
    /// The sink answered ok.
    Success,
    /// A retryable failure (transport error, 5xx, timeout…).
    Failure,
    /// A permanent error: does not count.
    Permanent,
}

/// A transition worth a log line and a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Opened for this long.
    Opened(Duration),
    /// Closed after a successful probe.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probing: bool },
}

/// Breaker settings (`dispatch.breaker_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Consecutive failures that open it; 0 disables breakers.
    pub failures: u32,
    /// First open period.
    pub open: Duration,
    /// Longest open period.
    pub max_open: Duration,
}

/// What a new term needs of an open breaker: kept in Redis (`breakers`).
///
/// Its times are on Redis's clock, never a worker's: the leader hands over what is left of
/// the open period ([`Breaker::remaining`]) and `breakers.lua` adds its own `TIME`; a new
/// term reads Redis `TIME` to restore it. A leader whose wall clock ran hours ahead would
/// otherwise have opened its successors' breakers for hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// When the open period ends, Unix ms on Redis's clock; at or before now: half-open.
    /// In the form handed to `breakers.lua` ([`Breaker::remaining`]): ms left from the
    /// moment it was taken.
    pub until_unix_ms: u64,
    /// Consecutive opens (the doubling exponent).
    pub opens: u32,
}

impl Snapshot {
    /// `"<until_unix_ms>:<opens>"`, as stored.
    pub(crate) fn encode(&self) -> String {
        format!("{}:{}", self.until_unix_ms, self.opens)
    }
    /// The stored form back; `None` when it is not one.
    pub(crate) fn decode(s: &str) -> Option<Snapshot> {
        let (u, o) = s.split_once(':')?;
        Some(Snapshot {
            until_unix_ms: u.parse().ok()?,
            opens: o.parse().ok()?,
        })
    }
}

/// Wall-clock Unix time, ms.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One sink key's breaker.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    state: State,
    /// Consecutive opens without a successful probe (the doubling exponent).
    opens: u32,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            state: State::Closed { failures: 0 },
            opens: 0,
        }
    }
}

impl Breaker {
    /// Whether a row may run now.
    pub(crate) fn admit(&mut self, s: &Settings, now: Instant) -> Admit {
        if s.failures == 0 {
            return Admit::Run;
        }
        match self.state {
            State::Closed { .. } => Admit::Run,
            State::Open { until } if now < until => Admit::Park(until - now),
            State::Open { .. } | State::HalfOpen { probing: false } => {
                self.state = State::HalfOpen { probing: true };
                Admit::Probe
            }
            State::HalfOpen { probing: true } => Admit::Park(s.open),
        }
    }

    /// Record an attempt's end. `probe` says whether it was the admitted probe.
    pub(crate) fn record(
        &mut self,
        s: &Settings,
        now: Instant,
        r: Result,
        probe: bool,
    ) -> Option<Transition> {
        if s.failures == 0 {
            return None;
        }
        match (self.state, r) {
            (_, Result::Permanent) => {
                if probe {
                    // The endpoint answered: it is up. Close as on success.
                    self.state = State::Closed { failures: 0 };
                    self.opens = 0;
                    return Some(Transition::Closed);
                }
                None
            }
            (State::HalfOpen { .. }, Result::Success) if probe => {
                self.state = State::Closed { failures: 0 };
                self.opens = 0;
                Some(Transition::Closed)
            }
            (State::HalfOpen { .. }, Result::Failure) if probe => Some(self.open(s, now)),
            (State::Closed { .. }, Result::Success) => {
                self.state = State::Closed { failures: 0 };
                None
            }
            (State::Closed { failures }, Result::Failure) => {
                if failures + 1 >= s.failures {
                    Some(self.open(s, now))
                } else {
                    self.state = State::Closed {
                        failures: failures + 1,
                    };
                    None
                }
            }
            // Attempts started before the breaker opened finish while it is open or probing:
            // they change nothing.
            _ => None,
        }
    }

    fn open(&mut self, s: &Settings, now: Instant) -> Transition {
        let factor = 1u32.checked_shl(self.opens.min(20)).unwrap_or(u32::MAX);
        let d = s.open.saturating_mul(factor).min(s.max_open);
        self.opens += 1;
        self.state = State::Open { until: now + d };
        Transition::Opened(d)
    }

    /// How long a row arriving now would be parked, without changing state (a claim
    /// does not take the probe; only a start does).
    pub(crate) fn parks(&self, s: &Settings, now: Instant) -> Option<Duration> {
        match self.state {
            _ if s.failures == 0 => None,
            State::Open { until } if now < until => Some(until - now),
            State::HalfOpen { probing: true } => Some(s.open),
            _ => None,
        }
    }

    /// Whether the breaker is open or probing (rows are being parked).
    pub(crate) fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }

    /// The breaker as a new term should start it; `None` when closed. `now` and `unix_now`
    /// are the same instant on the two clocks.
    pub(crate) fn snapshot(&self, now: Instant, unix_now: u64) -> Option<Snapshot> {
        let left = match self.state {
            State::Closed { .. } => return None,
            State::Open { until } => until.saturating_duration_since(now).as_millis() as u64,
            State::HalfOpen { .. } => 0,
        };
        Some(Snapshot {
            until_unix_ms: unix_now + left,
            opens: self.opens,
        })
    }

    /// The snapshot relative to `now`: `until_unix_ms` is the ms left of the open period
    /// (0 when half-open), for `breakers.lua` to add Redis `TIME` to; `None` when closed.
    pub(crate) fn remaining(&self, now: Instant) -> Option<Snapshot> {
        self.snapshot(now, 0)
    }

    /// A breaker restored from its snapshot: open for what is left of its period, or
    /// half-open with its one probe not yet taken when the period is over.
    pub(crate) fn restore(s: Snapshot, now: Instant, unix_now: u64) -> Breaker {
        let left = s.until_unix_ms.saturating_sub(unix_now);
        let state = if left > 0 {
            State::Open {
                until: now + Duration::from_millis(left),
            }
        } else {
            State::HalfOpen { probing: false }
        };
        Breaker {
            state,
            opens: s.opens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restored_breaker_is_open_for_what_is_left_then_takes_one_probe() {
        let (now, unix) = (Instant::now(), 1_000_000);
        let mut b = Breaker::default();
        for _ in 0..3 {
            b.record(&s(), now, Result::Failure, false);
        }
        let snap = b.snapshot(now, unix).expect("open");
        assert_eq!(
            snap,
            Snapshot {
                until_unix_ms: unix + 100,
                opens: 1
            }
        );
        assert_eq!(Snapshot::decode(&snap.encode()), Some(snap));
        // A new term 40 ms later: open for the 60 ms left.
        let later = now + Duration::from_millis(40);
        let mut r = Breaker::restore(snap, later, unix + 40);
        assert_eq!(r.admit(&s(), later), Admit::Park(Duration::from_millis(60)));
        // After the period: one probe, the rest parked.
        let end = later + Duration::from_millis(60);
        assert_eq!(r.admit(&s(), end), Admit::Probe);
        assert_eq!(r.admit(&s(), end), Admit::Park(s().open));
        // Past the period at restore: half-open at once.
        let mut h = Breaker::restore(snap, later, unix + 500);
        assert_eq!(h.admit(&s(), later), Admit::Probe);
        assert!(Breaker::default().snapshot(now, unix).is_none());
        // Handed to Redis relative to the moment taken: 100 ms left, on no wall clock.
        assert_eq!(b.remaining(now).map(|s| s.until_unix_ms), Some(100));
    }

    fn s() -> Settings {
        Settings {
            failures: 3,
            open: Duration::from_millis(100),
            max_open: Duration::from_millis(350),
        }
    }

    #[test]
    fn n_consecutive_failures_open_it_and_a_success_in_between_resets_the_count() {
        let (s, t) = (s(), Instant::now());
        let mut b = Breaker::default();
        assert_eq!(b.record(&s, t, Result::Failure, false), None);
        assert_eq!(b.record(&s, t, Result::Failure, false), None);
        assert_eq!(b.record(&s, t, Result::Success, false), None);
        assert_eq!(b.record(&s, t, Result::Failure, false), None);
        assert_eq!(b.record(&s, t, Result::Failure, false), None);
        assert_eq!(
            b.record(&s, t, Result::Failure, false),
            Some(Transition::Opened(Duration::from_millis(100)))
        );
        assert_eq!(
            b.admit(&s, t + Duration::from_millis(40)),
            Admit::Park(Duration::from_millis(60))
        );
    }

    #[test]
    fn permanent_errors_never_open_it() {
        let (s, t) = (s(), Instant::now());
        let mut b = Breaker::default();
        for _ in 0..10 {
            assert_eq!(b.record(&s, t, Result::Permanent, false), None);
        }
        assert_eq!(b.admit(&s, t), Admit::Run);
    }

    #[test]
    fn exactly_one_probe_runs_and_rows_meanwhile_are_parked_for_open_ms() {
        let (s, t) = (s(), Instant::now());
        let mut b = Breaker::default();
        for _ in 0..3 {
            b.record(&s, t, Result::Failure, false);
        }
        let later = t + Duration::from_millis(100);
        assert_eq!(b.admit(&s, later), Admit::Probe);
        assert_eq!(b.admit(&s, later), Admit::Park(Duration::from_millis(100)));
        assert_eq!(
            b.record(&s, later, Result::Success, true),
            Some(Transition::Closed)
        );
        assert_eq!(b.admit(&s, later), Admit::Run);
    }

    #[test]
    fn breaker_reopens_for_twice_as_long_after_a_failed_probe_up_to_the_maximum() {
        let (s, mut t) = (s(), Instant::now());
        let mut b = Breaker::default();
        for _ in 0..3 {
            b.record(&s, t, Result::Failure, false);
        }
        let mut seen = Vec::new();
        for _ in 0..4 {
            t += Duration::from_secs(1);
            assert_eq!(b.admit(&s, t), Admit::Probe);
            match b.record(&s, t, Result::Failure, true) {
                Some(Transition::Opened(d)) => seen.push(d.as_millis()),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, [200, 350, 350, 350]);
    }

    #[test]
    fn zero_failures_disables_breakers() {
        let s = Settings { failures: 0, ..s() };
        let (t, mut b) = (Instant::now(), Breaker::default());
        for _ in 0..100 {
            assert_eq!(b.record(&s, t, Result::Failure, false), None);
        }
        assert_eq!(b.admit(&s, t), Admit::Run);
    }
}
