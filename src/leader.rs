//! Leader election through a lease key, with a fencing epoch.
//!
//! Every worker runs [`run_node`]: one campaign per partition, each kept to the
//! worker's share by [`crate::spread`]. A campaign tries to take its partition's lease
//! (`SET PX` inside `lease.lua`, which increments the epoch); the winner
//! requeues the rows claimed under older epochs and runs a scheduler
//! session while a renewer extends the lease every `renew_ms`. The others stand
//! by: they retry as the lease's ttl runs out, or at once when the leader
//! releases it (the release is published on a channel named like the lease key).
//!
//! The renewer is also the leader's conscience:
//! - **Deadline**: the lease is surely ours until `sent + lease_ms − lease_ms/10`
//!   (`sent` = when the last successful renewal was sent). The session starts no
//!   claim and no attempt past that instant, and when it passes without a renewal
//!   the renewer declares the lease lost, without waiting for Redis to answer.
//! - **Self-check**: when the session made no progress (rows claimed, attempts
//!   finished, outcomes settled) for [`LeaderConfig::stall_limit_ms`] while Redis
//!   says rows are due or claimed, the renewer releases the lease, marks the
//!   process unhealthy ([`Health`]) and keeps it out of elections for that long,
//!   so a wedged scheduler cannot hold the pool hostage while the renewer runs.
//!
//! - **Restart**: a renewal that finds Redis another process than the one the term's lease
//!   was acquired on (it restarted, perhaps from an append-only file that lost its last
//!   writes) has the term's recent settles sent again ([`SettleJournal`]), so what the
//!   restart lost is not delivered twice, then winds the term down: the next term requeues
//!   whatever the restart left claimed, at once instead of after the self-check's limit.
//!   A term that ends because Redis failed (a failed claim winds it down) makes that renewal
//!   once more before its lease is released, while the lease holds, so a restart noticed
//!   first as a lost connection is handled the same way.
//!
//! Fencing makes all of this safe: the scripts refuse a stale token, so a paused
//! or wedged ex-leader cannot move rows whatever it believes.
//!
//! Takeover closes all circuit breakers by construction: breakers live in the
//! scheduler session's memory, and every term starts a new session with none open.
//!
//! [`LeaderConfig::stall_limit_ms`]: crate::config::LeaderConfig::stall_limit_ms

use crate::config::Config;
use crate::dispatch::{
    run_session, Progress, SchedulerState, SessionCtx, SessionEnd, SettleJournal,
};
pub(crate) use crate::health::Health;
use crate::scheduler::slots::SharedWindow;
use crate::sinks::registry::Sinks;
use crate::spread::{must_give, Spread};
use crate::store::{LeaseAcquire, LeaseRenewal, PrimaryCheck, Store, StoreError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// A process's identity in the pool: `<name>-<pid>-<random>`, unique per start so two
/// processes started with one name never share a lease.
pub(crate) fn node_id(name: Option<&str>) -> String {
    let host = name.map(str::to_string).unwrap_or_else(|| {
        std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "worker".to_string())
    });
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(48)
        .collect();
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// One partition's side of a node: where its wakes, lease releases and state go.
pub(crate) struct PartitionSide {
    /// Wake notifications from commits to the partition.
    pub wake: Arc<Notify>,
    /// Notified when the partition's leader released its lease: campaign at once.
    pub released: Arc<Notify>,
    /// The partition's scheduler state for observers.
    pub state: watch::Sender<SchedulerState>,
}

/// What a node needs to run.
pub(crate) struct Node {
    /// The store (any partition: each campaign addresses its own).
    pub store: Store,
    /// This process's node id.
    pub node_id: String,
    /// Current config.
    pub config: watch::Receiver<Arc<Config>>,
    /// One side per partition of the instance, in order.
    pub partitions: Vec<PartitionSide>,
    /// Graceful shutdown.
    pub shutdown: CancellationToken,
    /// Health for `/healthz` and `/readyz`.
    pub health: Arc<Health>,
    /// The process's sinks (one set of clients for every partition's sessions).
    pub sinks: Sinks,
    /// Which partitions this node leads, and the view of the other workers.
    pub spread: Arc<Spread>,
    /// Behind Redis Sentinel, bumped when the pool moved to a new primary
    /// ([`Store::watch_primary`]): every term on the old one ends at once.
    pub primary: watch::Receiver<u64>,
}

/// Announce this node, then campaign for every partition (one loop each), each
/// leading its own scheduler sessions under its own lease, epoch and breakers, until
/// shutdown; the heartbeat keeps the node to its share ([`crate::spread`]). Returns when
/// every loop ended; the node's heartbeat is removed on the way out.
pub(crate) async fn run_node(node: Node) {
    let node = Arc::new(node);
    // P beside the per-partition `ankusa_leader` series: what AnkusaPartitionNoLeader reads.
    metrics::gauge!("ankusa_partitions").set(node.partitions.len() as f64);
    let shared = Arc::new(SharedWindow::default());
    // The first heartbeat before any campaign, so a joining node is counted by the others
    // (and sees them) before it takes a partition.
    beat(&node).await;
    let heart = AbortOnDrop(tokio::spawn(heartbeat(node.clone())));
    let mut campaigns = tokio::task::JoinSet::new();
    for n in 0..node.partitions.len() as u32 {
        campaigns.spawn(campaign(node.clone(), n, shared.clone()));
    }
    while campaigns.join_next().await.is_some() {}
    drop(heart);
    // Leaving: the others need not wait for the heartbeat to expire to count one fewer.
    if let Err(e) = node.store.heartbeat(&node.node_id, 0, 0).await {
        warn!(error = %e, "could not remove the heartbeat; it expires after leader.lease_ms");
    }
}

/// One heartbeat: announce the partitions led, take the others' view.
async fn beat(node: &Node) -> bool {
    let ttl = node.config.borrow().leader.lease_ms;
    let leads = node.spread.led().len() as u32;
    match node.store.heartbeat(&node.node_id, ttl, leads).await {
        Ok(seen) => {
            node.spread.observe(&node.node_id, &seen.workers);
            metrics::gauge!("ankusa_workers_live").set(seen.workers.len() as f64);
            // This clock against Redis' (read by the heartbeat script a round trip ago at
            // most): deliveries do not depend on it, what reads the local clock does.
            let local = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let offset = local.saturating_sub(seen.now_ms);
            metrics::gauge!("ankusa_clock_offset_seconds").set(offset as f64 / 1000.0);
            if node.health.set_clock_offset(offset) {
                match node.health.clock() {
                    Some(said) => warn!(offset_ms = offset, "{said}"),
                    None => info!(
                        offset_ms = offset,
                        "this worker's clock agrees with Redis' again"
                    ),
                }
            }
            if must_give(
                &node.node_id,
                node.spread.keeping(),
                &seen.workers,
                node.partitions.len() as u32,
            ) {
                if let Some(p) = node.spread.give_one() {
                    info!(
                        partition = p,
                        workers = seen.workers.len(),
                        "handing a partition over: more than this worker's share"
                    );
                    return true;
                }
            }
            false
        }
        Err(e) => {
            warn!(error = %e, "heartbeat failed; will try again");
            false
        }
    }
}

/// Beat every renew interval, and at once when this node's leadership changed; after a
/// hand-over skip one round, so the others' counts are fresh before the next.
async fn heartbeat(node: Arc<Node>) {
    loop {
        let every = Duration::from_millis(node.config.borrow().leader.renew_interval_ms());
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = node.spread.changed.notified() => {}
            _ = node.shutdown.cancelled() => return,
        }
        if beat(&node).await {
            wait(&node.shutdown, every).await;
        }
    }
}

/// Elect, lead, stand by for partition `n`, until shutdown.
async fn campaign(node: Arc<Node>, n: u32, shared: Arc<SharedWindow>) {
    let side = &node.partitions[n as usize];
    let store = node.store.partition(n);
    let label = n.to_string();
    let mut backoff = Duration::from_millis(200);
    // Said once each time this worker finds the partition led by another (not every poll).
    let mut standing_by = false;
    metrics::gauge!("ankusa_leader", "partition" => label.clone()).set(0.0);
    let mut waiting_for_primary: Option<String> = None;
    loop {
        if node.shutdown.is_cancelled() {
            return;
        }
        if let Some(d) = node.health.hold_off() {
            info!(
                partition = n,
                hold_off_ms = d.as_millis() as u64,
                "self-check failed: staying out of elections"
            );
            wait(&node.shutdown, d).await;
            continue;
        }
        // Leadership follows the primary, not the connection: behind sentinels a term starts
        // only on the server they name, with no failover under way (store/primary.rs).
        if let PrimaryCheck::Wait(why) = store.primary_check().await {
            if waiting_for_primary.as_deref() != Some(why.as_str()) {
                info!(partition = n, %why, "not campaigning until the primary is confirmed");
                waiting_for_primary = Some(why);
            }
            wait(&node.shutdown, Duration::from_millis(200)).await;
            continue;
        }
        waiting_for_primary = None;
        let cfg = node.config.borrow().clone();
        let lease_ms = cfg.leader.lease_ms;
        let renew_ms = cfg.leader.renew_interval_ms();
        // Keep to this node's share: past it, wait for the view to change, the
        // partition's lease to be released, or a renew interval.
        if !node.spread.try_campaign(node.partitions.len() as u32) {
            tracing::debug!(partition = n, "not campaigning: this worker has its share");
            let changed = node.spread.changed.notified();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(renew_ms)) => {}
                _ = changed => {}
                _ = side.released.notified() => {}
                _ = node.shutdown.cancelled() => {}
            }
            continue;
        }
        let sent = Instant::now();
        let acquired = store.lease_acquire(&node.node_id, lease_ms).await;
        node.health.record_write("lease", &acquired);
        match acquired {
            Ok(LeaseAcquire::Acquired { token, epoch }) => {
                backoff = Duration::from_millis(200);
                standing_by = false;
                // The term's own shutdown: the process's, or a hand-over of this partition.
                let handover = node.shutdown.child_token();
                node.spread.campaigned(n, Some(handover.clone()));
                info!(partition = n, %token, epoch, "leading");
                metrics::counter!("ankusa_leadership_changes_total").increment(1);
                node.health.leading_again();
                let term = Term {
                    store: &store,
                    side,
                    shutdown: handover.clone(),
                    shared: shared.clone(),
                };
                let end = lead(&node, &term, &cfg, token.clone(), epoch, sent).await;
                node.spread.stepped_down(n);
                metrics::gauge!("ankusa_leader", "partition" => label.clone()).set(0.0);
                info!(partition = n, ?end, "stepped down");
                match end {
                    SessionEnd::Shutdown if node.shutdown.is_cancelled() => return,
                    SessionEnd::Shutdown => {
                        // Handed over (the lease is released): leave the partition to the
                        // worker that lacks one for a lease's time.
                        wait(&node.shutdown, Duration::from_millis(lease_ms)).await;
                    }
                    SessionEnd::Fenced => {}
                    SessionEnd::StoreFailed(_) => {
                        // Release if we can, so the next term (ours or another's) starts now;
                        // if Redis is away, lease.lua lets this node retake its own lease.
                        let _ = store.lease_release(&node.node_id, &token).await;
                        wait(&node.shutdown, Duration::from_millis(100)).await;
                    }
                }
            }
            Ok(LeaseAcquire::Held { pttl_ms, holder }) => {
                tracing::debug!(partition = n, %holder, pttl_ms, "the lease is held");
                if !standing_by {
                    info!(partition = n, %holder, "standing by: another worker leads this partition");
                    standing_by = true;
                }
                node.spread.campaigned(n, None);
                backoff = Duration::from_millis(200);
                // Campaign again when the lease can have lapsed, at least every renew
                // interval, or at once when its holder releases it.
                let w = if pttl_ms > 0 {
                    (pttl_ms as u64 + 5).min(renew_ms)
                } else {
                    50
                };
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(w)) => {}
                    _ = side.released.notified() => {}
                    _ = node.shutdown.cancelled() => {}
                }
            }
            Err(e) => {
                node.spread.campaigned(n, None);
                warn!(partition = n, error = %e, retry_in_ms = backoff.as_millis() as u64, "cannot reach redis for the lease");
                wait(&node.shutdown, backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// A task that ends with its owner: a node or a term whose future is dropped (a crashed or
/// aborted worker, [`crate::Worker::abort`]) takes its heartbeat and renewer with it, as a
/// killed process would, instead of leaving them renewing a lease nobody works under.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What one term of one partition runs with.
struct Term<'a> {
    store: &'a Store,
    side: &'a PartitionSide,
    /// Cancelled by the process's shutdown or a hand-over: the session drains and releases.
    shutdown: CancellationToken,
    shared: Arc<SharedWindow>,
}

async fn wait(shutdown: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = shutdown.cancelled() => {}
    }
}

/// The lease is surely ours until `sent + lease − margin`: the margin covers the
/// round trip and clock-rate drift between this host and Redis.
fn deadline(sent: Instant, lease_ms: u64) -> Instant {
    sent + Duration::from_millis(lease_ms - lease_ms / 10)
}

/// Everything the renewer needs.
struct Renewer {
    store: Store,
    node_id: String,
    token: String,
    epoch: u64,
    lease_ms: u64,
    renew_ms: u64,
    stall_limit: Option<Duration>,
    progress: Arc<Progress>,
    health: Arc<Health>,
    deadline: watch::Sender<Instant>,
    lost: CancellationToken,
    done: CancellationToken,
    /// The term's settles Redis may not have synced yet.
    journal: Arc<SettleJournal>,
    /// Cancelled once Redis restarted and the journal was sent again: the term winds down.
    restarted: CancellationToken,
}

impl Renewer {
    /// Renew every `renew_ms` until `done`; cancel `lost` when the lease is gone, its
    /// deadline passed without a renewal, or the self-check gave it up.
    async fn run(self) {
        let mut next = Instant::now() + Duration::from_millis(self.renew_ms);
        // When the scheduler was last seen with nothing to do (idle resets the stall clock).
        let mut idle_seen = Instant::now();
        loop {
            let dl = *self.deadline.borrow();
            tokio::select! {
                _ = tokio::time::sleep_until(next.min(dl).into()) => {}
                _ = self.done.cancelled() => return,
            }
            if Instant::now() >= dl {
                warn!("lease deadline passed without a renewal: stepping down");
                self.lost.cancel();
                return;
            }
            if self.selfcheck(&mut idle_seen).await {
                return;
            }
            let sent = Instant::now();
            match tokio::time::timeout_at(
                dl.into(),
                self.store
                    .lease_renew_term(&self.node_id, &self.token, self.lease_ms),
            )
            .await
            {
                Ok(Ok(renewal @ (LeaseRenewal::Renewed | LeaseRenewal::Restarted { .. }))) => {
                    metrics::histogram!("ankusa_lease_renew_seconds")
                        .record(sent.elapsed().as_secs_f64());
                    let _ = self.deadline.send(deadline(sent, self.lease_ms));
                    next = sent + Duration::from_millis(self.renew_ms);
                    match renewal {
                        // The same Redis process: what it took before the window is synced.
                        LeaseRenewal::Renewed => self.journal.confirm(sent),
                        LeaseRenewal::Restarted { was, now } => {
                            if self.after_restart(&was, &now).await {
                                return;
                            }
                        }
                        LeaseRenewal::Lost => {}
                    }
                }
                Ok(Ok(LeaseRenewal::Lost)) => {
                    warn!("lease lost to another node");
                    self.lost.cancel();
                    return;
                }
                Ok(Err(e)) => {
                    // Try again soon: the deadline, not one failure, decides.
                    warn!(error = %e, "lease renewal failed");
                    next = Instant::now() + Duration::from_millis(self.renew_ms.min(250));
                }
                Err(_) => {
                    warn!(
                        "lease renewal did not answer before the lease's deadline: stepping down"
                    );
                    self.lost.cancel();
                    return;
                }
            }
        }
    }

    /// Redis restarted since the term began: send the settles it may have lost again (bounded
    /// by the lease's deadline), then have the session wind the term down. A resend that fails
    /// keeps the batches for the next renewal, which finds the restart again. True when the
    /// resend found the lease gone.
    async fn after_restart(&self, was: &str, now: &str) -> bool {
        let kept = self.journal.outcomes();
        let dl = *self.deadline.borrow();
        match tokio::time::timeout_at(
            dl.into(),
            self.journal.resend(&self.store, &self.token, self.epoch),
        )
        .await
        {
            Ok(Ok(applied)) => {
                if !self.restarted.is_cancelled() {
                    warn!(
                        run_id_was = %was,
                        run_id = %now,
                        settles_sent_again = kept,
                        applied,
                        "redis restarted during the term: recent settles sent again, ending the term"
                    );
                }
                self.restarted.cancel();
                false
            }
            Ok(Err(StoreError::Fenced)) => {
                warn!("lease lost while settling again after a redis restart");
                self.lost.cancel();
                true
            }
            Ok(Err(e)) => {
                warn!(error = %e, "redis restarted; settling again failed, will try at the next renewal");
                false
            }
            Err(_) => {
                warn!("redis restarted; settling again did not finish before the lease's deadline, will try at the next renewal");
                false
            }
        }
    }

    /// The self-check: true when it gave the lease up.
    async fn selfcheck(&self, idle_seen: &mut Instant) -> bool {
        let Some(limit) = self.stall_limit else {
            return false;
        };
        let stalled = self.progress.age().min(idle_seen.elapsed());
        if stalled < limit {
            return false;
        }
        // Bounded by the lease deadline: the renewal that follows must not be delayed past it.
        let dl = *self.deadline.borrow();
        match tokio::time::timeout_at(dl.into(), self.store.idle()).await {
            Ok(Ok(true)) => {
                *idle_seen = Instant::now();
                false
            }
            Ok(Ok(false)) => {
                let reason = format!(
                    "scheduler made no progress for {} ms while rows are due or claimed (self-check limit {} ms)",
                    stalled.as_millis(),
                    limit.as_millis()
                );
                error!(%reason, "self-check failed: giving the lease up");
                metrics::counter!("ankusa_selfcheck_failures_total").increment(1);
                self.health.fail(reason, limit);
                self.lost.cancel();
                match self.store.lease_release(&self.node_id, &self.token).await {
                    Ok(_) => info!("lease released by the self-check"),
                    Err(e) => {
                        warn!(error = %e, "self-check could not release the lease; it lapses after its ttl")
                    }
                }
                true
            }
            // Redis cannot say (in time): the deadline rules decide, not the self-check.
            _ => false,
        }
    }
}

async fn lead(
    node: &Node,
    term: &Term<'_>,
    cfg: &Config,
    token: String,
    epoch: u64,
    sent: Instant,
) -> SessionEnd {
    let lease_ms = cfg.leader.lease_ms;
    let renew_ms = cfg.leader.renew_interval_ms();
    let partition = term.store.partition_index();
    // Takeover: rows claimed under older epochs are due again. Circuit breakers need no
    // work here: they live in the session, and this term's session starts with none open.
    match term.store.requeue_claimed(&token, epoch).await {
        Ok(n) if n > 0 => {
            metrics::counter!("ankusa_requeued_rows_total").increment(n);
            info!(
                partition,
                rows = n,
                "requeued rows claimed under older epochs"
            );
        }
        Ok(_) => {}
        Err(e) => {
            warn!(error = %e, "requeue failed");
            return SessionEnd::StoreFailed(e.to_string());
        }
    }
    // The partition's message space, made by the lease acquisition: every webhook-id of
    // the term carries it.
    let message_space: Arc<str> = match term.store.message_space().await {
        Ok(Some(space)) => space.into(),
        Ok(None) => return SessionEnd::StoreFailed("no message space after the lease".into()),
        Err(e) => return SessionEnd::StoreFailed(e.to_string()),
    };
    metrics::gauge!("ankusa_leader", "partition" => partition.to_string()).set(1.0);
    let lost = CancellationToken::new();
    // A move to a new primary (store/primary.rs) ends the term at once: it was the old one's.
    let mut primary = node.primary.clone();
    primary.mark_unchanged();
    let _switched = AbortOnDrop(tokio::spawn({
        let lost = lost.clone();
        async move {
            if primary.changed().await.is_ok() {
                warn!(partition, "the Redis primary changed: stepping down");
                lost.cancel();
            }
        }
    }));
    let done = CancellationToken::new();
    let restarted = CancellationToken::new();
    let journal = Arc::new(SettleJournal::default());
    let progress = Arc::new(Progress::default());
    let (dl_tx, dl_rx) = watch::channel(deadline(sent, lease_ms));
    let mut renewer = AbortOnDrop(tokio::spawn(
        Renewer {
            store: term.store.clone(),
            node_id: node.node_id.clone(),
            token: token.clone(),
            epoch,
            lease_ms,
            renew_ms,
            stall_limit: cfg
                .leader
                .stall_limit_ms(cfg.dispatch.attempt_timeout_ms)
                .map(Duration::from_millis),
            progress: progress.clone(),
            health: node.health.clone(),
            deadline: dl_tx,
            lost: lost.clone(),
            done: done.clone(),
            journal: journal.clone(),
            restarted: restarted.clone(),
        }
        .run(),
    ));
    let last = LastCheck {
        store: term.store.clone(),
        node_id: node.node_id.clone(),
        token: token.clone(),
        epoch,
        lease_ms,
        journal: journal.clone(),
        deadline: dl_rx.clone(),
    };
    let ctx = SessionCtx {
        store: term.store.clone(),
        config: node.config.clone(),
        token,
        epoch,
        message_space,
        wake: term.side.wake.clone(),
        shutdown: term.shutdown.clone(),
        lost: lost.clone(),
        restarted,
        journal,
        lease_deadline: dl_rx,
        state: term.side.state.clone(),
        sinks: node.sinks.clone(),
        progress,
        health: node.health.clone(),
        shared: term.shared.clone(),
    };
    let end = run_session(ctx).await;
    done.cancel();
    let _ = (&mut renewer.0).await;
    if matches!(end, SessionEnd::StoreFailed(_)) {
        last.run().await;
    }
    end
}

/// The last look of a term that ends because Redis failed (a claim or a requeue did): the
/// failure may be a Redis restart that lost the term's last settles, which the next term
/// would requeue and deliver again. While the lease holds, one renewal (retried until it
/// answers or the lease's deadline passes) tells; on a restart the journal is sent again
/// before the lease is released.
struct LastCheck {
    store: Store,
    node_id: String,
    token: String,
    epoch: u64,
    lease_ms: u64,
    journal: Arc<SettleJournal>,
    deadline: watch::Receiver<Instant>,
}

impl LastCheck {
    async fn run(self) {
        if self.journal.outcomes() == 0 {
            return;
        }
        let dl = *self.deadline.borrow();
        loop {
            let renewal = tokio::time::timeout_at(
                dl.into(),
                self.store
                    .lease_renew_term(&self.node_id, &self.token, self.lease_ms),
            )
            .await;
            match renewal {
                Ok(Ok(LeaseRenewal::Restarted { was, now })) => {
                    let kept = self.journal.outcomes();
                    let sent = tokio::time::timeout_at(
                        dl.into(),
                        self.journal.resend(&self.store, &self.token, self.epoch),
                    )
                    .await;
                    match sent {
                        Ok(Ok(applied)) => warn!(
                            run_id_was = %was,
                            run_id = %now,
                            settles_sent_again = kept,
                            applied,
                            "redis restarted as the term ended: recent settles sent again"
                        ),
                        _ => warn!(
                            "redis restarted as the term ended; its recent settles could not be sent again: the next term may deliver their rows again"
                        ),
                    }
                    return;
                }
                // The same server (nothing lost), or the lease is gone (nothing can be sent).
                Ok(Ok(_)) => return,
                Ok(Err(_)) if Instant::now() + Duration::from_millis(100) < dl => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => {
                    warn!("redis did not answer before the lease's deadline: the term's last settles cannot be checked; the next term may deliver some rows again");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_differ_between_starts_with_one_name() {
        let a = node_id(Some("w"));
        let b = node_id(Some("w"));
        assert_ne!(a, b);
        assert!(a.starts_with("w-") && !a.contains(':'), "{a}");
    }

    #[test]
    fn a_node_name_loses_characters_that_would_break_the_token() {
        let id = node_id(Some("a:b c/d"));
        assert!(id.starts_with("abcd-"), "{id}");
    }

    #[test]
    fn a_failed_selfcheck_holds_the_node_off_until_it_leads_again() {
        let h = Health::default();
        assert_eq!(h.problem(), None);
        h.fail("stalled".into(), Duration::from_secs(60));
        assert_eq!(h.problem().as_deref(), Some("stalled"));
        assert!(h.hold_off().is_some());
        h.leading_again();
        assert_eq!(h.problem(), None);
        assert!(h.hold_off().is_none());
    }
}
