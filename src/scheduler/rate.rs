//! Rate limits per sink key: a token bucket per key in the leader's memory, with no
//! I/O and no clock of its own (the dispatch loop passes instants). Like the breakers, the
//! buckets live and die with a term: a new leader starts every bucket full.

use crate::model::RateLimit;
use std::time::{Duration, Instant};

/// One sink key's token bucket: up to `burst` tokens, refilled at `per_second`; an attempt
/// takes one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bucket {
    tokens: f64,
    burst: f64,
    per_second: f64,
    last: Instant,
    /// The earliest time the next row parked for this key may come back: parked rows are
    /// spread one token apart behind the queue, so they return at the key's rate.
    next_park: Option<Instant>,
}

impl Bucket {
    /// A full bucket for `limit` at `now`.
    pub(crate) fn new(limit: &RateLimit, now: Instant) -> Bucket {
        let burst = f64::from(limit.burst());
        Bucket {
            tokens: burst,
            burst,
            per_second: limit.per_second,
            last: now,
            next_park: None,
        }
    }

    /// Take a changed limit (the source was edited): tokens earned so far are kept, cut to
    /// the new burst.
    pub(crate) fn set_limit(&mut self, limit: &RateLimit, now: Instant) {
        self.refill(now);
        self.burst = f64::from(limit.burst());
        self.per_second = limit.per_second;
        self.tokens = self.tokens.min(self.burst);
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.per_second).min(self.burst);
        self.last = self.last.max(now);
    }

    /// `None` when a token is there now; else how long until one is.
    pub(crate) fn wait(&mut self, now: Instant) -> Option<Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            return None;
        }
        let secs = (1.0 - self.tokens) / self.per_second;
        Some(Duration::from_secs_f64(secs).max(Duration::from_millis(1)))
    }

    /// Take a token if there is one now.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        if self.wait(now).is_some() {
            return false;
        }
        self.tokens -= 1.0;
        true
    }

    /// How long until `n` more tokens than are there now have been earned: when the `n`-th
    /// row queued behind the key may run at the earliest.
    pub(crate) fn time_for(&mut self, n: usize, now: Instant) -> Duration {
        self.refill(now);
        let missing = (n as f64 - self.tokens).max(0.0);
        Duration::from_secs_f64(missing / self.per_second)
    }

    /// How long a row that finds `queued` rows ahead of it should wait in Redis (parked):
    /// until its token would come behind the queue and every row parked before it, one
    /// token apart.
    pub(crate) fn park_for(&mut self, queued: usize, now: Instant) -> Duration {
        let behind_queue = now + self.time_for(queued + 1, now);
        let at = match self.next_park {
            Some(p) if p > behind_queue => p,
            _ => behind_queue,
        };
        self.next_park = Some(at + Duration::from_secs_f64(1.0 / self.per_second));
        at - now
    }

    /// Rows a key may hold claimed and queued at once before further rows are parked back
    /// in Redis (they would wait longer than about two seconds of tokens): `burst` plus two
    /// seconds' worth, so the key never starves for queued rows and never holds the window.
    pub(crate) fn queue_cap(&self) -> usize {
        (self.burst + 2.0 * self.per_second).ceil().max(1.0) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(per_second: f64, burst: u32) -> RateLimit {
        RateLimit {
            per_second,
            burst: Some(burst),
        }
    }

    #[test]
    fn a_new_bucket_is_full_and_then_refills_at_its_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(&limit(20.0, 5), t0);
        for _ in 0..5 {
            assert!(b.take(t0));
        }
        assert!(!b.take(t0));
        let w = b.wait(t0).unwrap();
        assert!((49..=51).contains(&w.as_millis()), "{w:?}");
        assert!(!b.take(t0 + Duration::from_millis(40)));
        assert!(b.take(t0 + Duration::from_millis(50)));
        // A long quiet spell refills only up to the burst.
        let later = t0 + Duration::from_secs(60);
        let n = std::iter::repeat_with(|| b.take(later))
            .take_while(|ok| *ok)
            .count();
        assert_eq!(n, 5);
    }

    #[test]
    fn over_any_second_at_most_burst_plus_rate_tokens_are_taken() {
        let t0 = Instant::now();
        let mut b = Bucket::new(&limit(20.0, 5), t0);
        let mut taken = Vec::new();
        for ms in 0..5_000u64 {
            let now = t0 + Duration::from_millis(ms);
            while b.take(now) {
                taken.push(ms);
            }
        }
        for start in 0..4_000u64 {
            let n = taken
                .iter()
                .filter(|t| **t >= start && **t < start + 1_000)
                .count();
            assert!(n <= 25, "{n} in the second from {start} ms");
        }
        assert!(taken.len() >= 5 + 99, "{}", taken.len());
    }

    #[test]
    fn parked_rows_come_back_one_token_apart_behind_the_queue() {
        let t0 = Instant::now();
        let mut b = Bucket::new(&limit(10.0, 1), t0);
        assert!(b.take(t0));
        // 4 queued: the 5th row's token is 0.5 s away; the next parked ones 0.1 s apart.
        let waits: Vec<u128> = (0..3).map(|_| b.park_for(4, t0).as_millis()).collect();
        assert_eq!(waits, [500, 600, 700]);
        // Later, a park behind a short queue still waits for those parked before it.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(b.park_for(0, t1).as_millis(), 700);
    }

    #[test]
    fn a_changed_limit_keeps_earned_tokens_within_the_new_burst() {
        let t0 = Instant::now();
        let mut b = Bucket::new(&limit(10.0, 10), t0);
        b.set_limit(&limit(1.0, 2), t0);
        assert!(b.take(t0) && b.take(t0) && !b.take(t0));
        assert_eq!(b.time_for(3, t0), Duration::from_secs(3));
        assert_eq!(b.queue_cap(), 4);
        let unset = RateLimit {
            per_second: 2.5,
            burst: None,
        };
        assert_eq!(unset.burst(), 3);
    }
}
