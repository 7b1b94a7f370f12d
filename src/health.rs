//! A worker's health beyond "the process answers": the leader's self-check, Redis
//! refusing writes, eviction, a full Redis refusing commits, a graceful shutdown. Written
//! by the leader and the dispatch loop, read by `/healthz` and `/readyz`.
//!
//! Liveness ([`Health::wedged`], `/healthz`) fails only when this process is stuck, since
//! an orchestrator restarts it for that; everything about Redis (unreachable, refusing
//! writes, evicting) is readiness ([`Health::problem`], `/readyz`): a restart would not help
//! and, on a Redis blip, would restart every worker of the pool at once.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How far this process's clock may be from Redis' before `/readyz` says so, ms (30 s: well
/// past NTP's drift, well inside the 5 minutes Standard Webhooks receivers tolerate).
pub(crate) const CLOCK_OFFSET_SAID_MS: u64 = 30_000;

/// What `/healthz` and `/readyz` report beyond "the process answers".
#[derive(Debug, Default)]
pub struct Health {
    inner: Mutex<HealthInner>,
}

#[derive(Debug, Default)]
struct HealthInner {
    /// Why the last self-check failed; cleared when this process leads again.
    unhealthy: Option<String>,
    /// No election before this instant (the self-check's hold-off).
    hold_off_until: Option<Instant>,
    /// A graceful shutdown has begun.
    draining: bool,
    /// The last write this node needed (lease, claim, settle) failed, and why; cleared by
    /// the next one that succeeds (a full Redis turns health red).
    write_error: Option<String>,
    /// This process's clock far from Redis' ([`Health::set_clock`]).
    clock: Option<String>,
    /// Redis may evict keys (its `maxmemory-policy` changed at run time), and why.
    evicting: Option<String>,
    /// Redis refuses commits for memory (full under `noeviction`), and why: readiness only,
    /// since this process works on (it drains the backlog) and a restart would not help.
    /// Per partition (its index) whose Redis refuses them.
    commits_refused: std::collections::BTreeMap<u32, String>,
    /// The delivery log's archiving, per partition led here that is not keeping up (its
    /// store away, behind, or records dropped at the stream's bound), and how: a detail of
    /// readiness, never a reason for it (delivery goes on).
    log_lagging: std::collections::BTreeMap<u32, String>,
}

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, HealthInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Liveness: `None` unless this process is wedged (its scheduler made no progress and
    /// the self-check gave the lease up), and then why; cleared when it leads again.
    pub fn wedged(&self) -> Option<String> {
        self.lock().unhealthy.clone()
    }

    /// Readiness beyond Redis answering now: `None` when fine; else why not: a
    /// [`Health::wedged`] process, Redis evicting keys, or Redis unreachable for or refusing
    /// the writes this node needs (a lease acquisition, a claim, a settle) until one
    /// succeeds again.
    pub fn problem(&self) -> Option<String> {
        let h = self.lock();
        h.unhealthy
            .clone()
            .or_else(|| h.evicting.clone())
            .or_else(|| h.write_error.clone())
    }

    /// Readiness, besides [`Health::problem`]: `None` unless Redis refuses commits for memory
    /// ([`Health::set_commits_refused`]), and then why, naming the partition.
    pub fn redis_full(&self) -> Option<String> {
        let h = self.lock();
        let (p, why) = h.commits_refused.iter().next()?;
        let more = match h.commits_refused.len() {
            1 => String::new(),
            n => format!(" and {} more partitions", n - 1),
        };
        Some(format!(
            "redis out of memory: commits are refused (partition {p}{more}: {why})"
        ))
    }

    /// Record partition `partition`'s commit check: `Some(why)` while its Redis refuses
    /// commits for memory, `None` once it admits them.
    pub fn set_commits_refused(&self, partition: u32, why: Option<String>) {
        let mut h = self.lock();
        match why {
            Some(why) => h.commits_refused.insert(partition, why),
            None => h.commits_refused.remove(&partition),
        };
    }

    /// Record the eviction check: `Some(why)` while Redis may evict keys and
    /// that is not allowed (`redis.allow_evicting = false`), which keeps health red.
    pub fn set_evicting(&self, why: Option<String>) {
        self.lock().evicting = why;
    }

    /// Record the result of a write this node needed (`what`: `lease`, `claim`, `settle`):
    /// an error turns readiness red until the next success. Fencing is not a failure. A
    /// lost connection or a timeout says so, never "refuses writes", which would send the
    /// operator to Redis' memory or replicas instead of the network.
    pub fn record_write<T>(&self, what: &str, r: &Result<T, crate::store::StoreError>) {
        let mut h = self.lock();
        match r {
            Err(e) if !matches!(e, crate::store::StoreError::Fenced) => {
                h.write_error = Some(match e.kind() {
                    "connection" | "timeout" => {
                        format!("redis unreachable ({what}): {}", e.readable())
                    }
                    _ => format!("redis refuses writes ({what}): {}", e.readable()),
                });
            }
            _ => h.write_error = None,
        }
    }

    /// Record partition `partition`'s archiving: `Some(how)` while it is not keeping up,
    /// `None` once it is.
    pub fn set_log_state(&self, partition: u32, how: Option<String>) {
        let mut h = self.lock();
        match how {
            Some(how) => h.log_lagging.insert(partition, how),
            None => h.log_lagging.remove(&partition),
        };
    }

    /// The delivery log's archiving where it is not keeping up, per partition led here:
    /// `partition N: how` lines (empty when all is well).
    pub fn log_state(&self) -> Vec<String> {
        self.lock()
            .log_lagging
            .iter()
            .map(|(p, how)| format!("partition {p}: {how}"))
            .collect()
    }

    /// Record how far this process's clock is from Redis' (`local - redis`, ms), read at a
    /// heartbeat: past [`CLOCK_OFFSET_SAID_MS`] either way it is said in
    /// [`Health::clock`]. Returns whether that changed (to log it once).
    pub fn set_clock_offset(&self, offset_ms: i64) -> bool {
        let said = (offset_ms.unsigned_abs() > CLOCK_OFFSET_SAID_MS).then(|| {
            let (way, by) = if offset_ms > 0 {
                ("ahead of", offset_ms)
            } else {
                ("behind", -offset_ms)
            };
            format!(
                "this worker's clock is {} s {way} Redis' (deliveries and schedules use \
                 Redis' clock; the console's times, token expiry and portal links use this \
                 one): check its time synchronisation",
                by / 1000
            )
        });
        let mut h = self.lock();
        let changed = h.clock.is_some() != said.is_some();
        h.clock = said;
        changed
    }

    /// This process's clock far from Redis', in words; `None` while within
    /// [`CLOCK_OFFSET_SAID_MS`].
    pub fn clock(&self) -> Option<String> {
        self.lock().clock.clone()
    }

    /// Whether a graceful shutdown has begun.
    pub fn draining(&self) -> bool {
        self.lock().draining
    }

    /// Mark the start of a graceful shutdown (readiness turns false).
    pub fn set_draining(&self) {
        self.lock().draining = true;
    }

    pub(crate) fn fail(&self, reason: String, hold_off: Duration) {
        let mut h = self.lock();
        h.unhealthy = Some(reason);
        h.hold_off_until = Some(Instant::now() + hold_off);
    }

    pub(crate) fn leading_again(&self) {
        let mut h = self.lock();
        h.unhealthy = None;
        h.hold_off_until = None;
    }

    pub(crate) fn hold_off(&self) -> Option<Duration> {
        let h = self.lock();
        h.hold_off_until
            .and_then(|t| t.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn a_refused_connection_reads_as_words_not_the_clients_debug_text() {
        let h = Health::default();
        let refused = std::io::Error::from_raw_os_error(111);
        h.record_write::<()>("claim", &Err(StoreError::Redis(refused.into())));
        let problem = h.problem().expect("readiness is red");
        assert_eq!(problem, "redis unreachable (claim): connection refused");
        h.record_write("claim", &Ok::<(), StoreError>(()));
        assert_eq!(h.problem(), None);
    }

    #[test]
    fn a_clock_hours_off_redis_is_said_either_way_and_a_small_drift_is_not() {
        let h = Health::default();
        assert!(!h.set_clock_offset(1_500));
        assert_eq!(h.clock(), None);
        assert!(h.set_clock_offset(7_200_000));
        let said = h.clock().expect("said");
        assert!(said.contains("7200 s ahead of Redis'"), "{said}");
        assert!(!h.set_clock_offset(-7_200_000));
        assert!(h.clock().unwrap().contains("7200 s behind"));
        assert!(h.set_clock_offset(-20));
        assert_eq!(h.clock(), None);
    }
}
