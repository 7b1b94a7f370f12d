//! Leadership spread across the workers of an instance.
//!
//! Every partition has its own lease, and every worker campaigns for each one in its own
//! loop ([`crate::leader::run_node`]). Left alone, the first worker up would lead them all.
//! Instead each worker announces itself with a heartbeat (`heartbeat.lua`: a sorted set
//! scored by expiry, with the count of partitions each leads) and keeps to its share:
//!
//! - with `P` partitions and `N` live workers, a worker leads at most `hi = ceil(P / N)`
//!   and campaigns only below it ([`may_take`]); while another worker is below
//!   `lo = floor(P / N)`, only workers below `lo` campaign, so the one that joined gets
//!   the partitions handed over rather than a worker that already has its share;
//! - a worker above `hi`, or above `lo` while another is below it, hands one partition
//!   over ([`must_give`]): the session drains (running attempts finish, outcomes settle)
//!   and releases the lease, which wakes the other workers' campaigns at once. One
//!   partition per two heartbeats, so the others' counts are fresh before the next.
//!
//! A worker killed with `kill -9` stops its heartbeat; its leases lapse after
//! `leader.lease_ms` and its heartbeat after the same time, so only its partitions move.
//! The decisions are pure functions of the last heartbeat's view, tested below.

use crate::store::LiveWorker;
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// `(lo, hi)`: `floor(P / N)` and `ceil(P / N)` for `live` workers (at least 1).
pub(crate) fn quota(partitions: u32, live: usize) -> (u32, u32) {
    let n = (live.max(1)).min(u32::MAX as usize) as u32;
    (partitions / n, partitions.div_ceil(n))
}

/// Whether a worker leading `mine` partitions may campaign for one more, given what the
/// other live workers lead (`others`, this worker excluded).
pub(crate) fn may_take(mine: u32, others: &[u32], partitions: u32) -> bool {
    let (lo, hi) = quota(partitions, others.len() + 1);
    mine < hi && (mine < lo || others.iter().all(|&c| c >= lo))
}

/// Whether worker `me`, leading `mine` partitions, should hand one over now, given every
/// live worker's count (`workers`; its own entry, if present, is replaced by `mine`). The
/// workers above `lo` give in order of most led first, then node id, as many as the
/// others lack below `lo`; above `hi` a worker always gives.
pub(crate) fn must_give(me: &str, mine: u32, workers: &[LiveWorker], partitions: u32) -> bool {
    let others: Vec<&LiveWorker> = workers.iter().filter(|w| w.node != me).collect();
    let (lo, hi) = quota(partitions, others.len() + 1);
    if mine > hi {
        return true;
    }
    let deficit: u32 = others.iter().map(|w| lo.saturating_sub(w.leads)).sum();
    if deficit == 0 || mine <= lo {
        return false;
    }
    let mut rich: Vec<(u32, &str)> = others
        .iter()
        .filter(|w| w.leads > lo)
        .map(|w| (w.leads, w.node.as_str()))
        .collect();
    rich.push((mine, me));
    rich.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    rich.iter().take(deficit as usize).any(|(_, n)| *n == me)
}

/// One worker's side of the spread: the partitions it leads (each with the token that hands
/// it over), the campaigns under way, and the last heartbeat's view of the others.
#[derive(Debug, Default)]
pub(crate) struct Spread {
    inner: Mutex<Inner>,
    /// Notified when the view or this worker's leadership changed: campaigns check again,
    /// and the heartbeat announces the new count at once.
    pub changed: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    led: BTreeMap<u32, CancellationToken>,
    campaigning: u32,
    /// What the other live workers lead, as the last heartbeat said.
    others: Vec<u32>,
}

impl Spread {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Partitions this worker leads, in order.
    pub(crate) fn led(&self) -> Vec<u32> {
        self.lock().led.keys().copied().collect()
    }

    /// Take the last heartbeat's view (every live worker, this one included or not).
    pub(crate) fn observe(&self, me: &str, workers: &[LiveWorker]) {
        self.lock().others = workers
            .iter()
            .filter(|w| w.node != me)
            .map(|w| w.leads)
            .collect();
        self.changed.notify_waiters();
    }

    /// Reserve a campaign for one more partition if [`may_take`] allows it counting the
    /// campaigns already under way; release it with [`Spread::campaigned`].
    pub(crate) fn try_campaign(&self, partitions: u32) -> bool {
        let mut g = self.lock();
        let mine = g.led.len() as u32 + g.campaigning;
        if may_take(mine, &g.others, partitions) {
            g.campaigning += 1;
            true
        } else {
            false
        }
    }

    /// A reserved campaign ended: `won` with the token that hands the partition over.
    pub(crate) fn campaigned(&self, partition: u32, won: Option<CancellationToken>) {
        let mut g = self.lock();
        g.campaigning = g.campaigning.saturating_sub(1);
        if let Some(t) = won {
            g.led.insert(partition, t);
            drop(g);
            self.changed.notify_waiters();
        }
    }

    /// The term of `partition` ended.
    pub(crate) fn stepped_down(&self, partition: u32) {
        self.lock().led.remove(&partition);
        self.changed.notify_waiters();
    }

    /// Hand over the highest partition this worker leads (its session drains and releases
    /// the lease); the partition it picked, if any.
    pub(crate) fn give_one(&self) -> Option<u32> {
        let g = self.lock();
        let (&p, token) = g.led.iter().rev().find(|(_, t)| !t.is_cancelled())?;
        token.cancel();
        Some(p)
    }

    /// Partitions led and not being handed over.
    pub(crate) fn keeping(&self) -> u32 {
        self.lock()
            .led
            .values()
            .filter(|t| !t.is_cancelled())
            .count() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(node: &str, leads: u32) -> LiveWorker {
        LiveWorker {
            node: node.into(),
            leads,
        }
    }

    #[test]
    fn the_quota_is_floor_and_ceil_of_partitions_per_live_worker() {
        assert_eq!(quota(4, 3), (1, 2));
        assert_eq!(quota(4, 0), (4, 4));
        assert_eq!(quota(6, 3), (2, 2));
        assert_eq!(quota(1, 3), (0, 1));
    }

    #[test]
    fn a_worker_campaigns_below_its_share_and_yields_to_one_below_the_floor() {
        assert!(may_take(0, &[], 4));
        assert!(may_take(3, &[], 4));
        assert!(!may_take(2, &[2], 4));
        assert!(may_take(1, &[2, 1], 4));
        // Someone has nothing: only a worker below the floor campaigns.
        assert!(!may_take(1, &[2, 0], 4));
        assert!(may_take(0, &[2, 2], 4));
    }

    #[test]
    fn extras_are_given_by_the_richest_workers_as_many_as_others_lack() {
        // Alone with 4, a second worker arrives: give down to 2.
        assert!(must_give("a", 4, &[w("a", 4), w("b", 0)], 4));
        assert!(must_give("a", 3, &[w("a", 3), w("b", 0)], 4));
        assert!(!must_give("a", 2, &[w("a", 2), w("b", 0)], 4));
        // 2, 2, 0: one of the two gives (the first by node id), not both.
        let ws = [w("a", 2), w("b", 2), w("c", 0)];
        assert!(must_give("a", 2, &ws, 4));
        assert!(!must_give("b", 2, &ws, 4));
        // Balanced: nobody gives.
        assert!(!must_give("a", 2, &[w("a", 2), w("b", 1), w("c", 1)], 4));
    }

    #[test]
    fn a_campaign_reservation_counts_until_it_ends() {
        let s = Spread::default();
        s.observe("me", &[w("me", 0), w("x", 2)]);
        assert!(s.try_campaign(4));
        assert!(s.try_campaign(4));
        assert!(!s.try_campaign(4), "two under way fill a share of 2");
        s.campaigned(0, Some(CancellationToken::new()));
        s.campaigned(1, None);
        assert_eq!(s.led(), [0]);
        assert_eq!(s.give_one(), Some(0));
        assert_eq!(s.keeping(), 0);
    }
}
