//! Leader election through a lease key, with a fencing epoch (R25).
//!
//! Every worker runs [`run_node`]. It tries to take the partition's lease
//! (`SET NX PX` inside `lease.lua`, which increments the epoch); the winner
//! requeues the rows claimed under older epochs (R3) and runs a scheduler
//! session while a renewer extends the lease every `renew_ms`. The others stand
//! by and retry as the lease's ttl runs out. A leader that cannot renew stops
//! starting attempts when its lease may have lapsed and steps down; the scripts
//! refuse its stale token, so a paused ex-leader cannot move rows.

use crate::config::Config;
use crate::scheduler::{run_session, SchedulerState, SessionCtx, SessionEnd};
use crate::sinks::http::HttpSink;
use crate::store::{LeaseAcquire, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// A process's identity in the pool: `<name>-<random>`, unique per start so two processes
/// started with one name never share a lease.
pub fn node_id(name: Option<&str>) -> String {
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

/// What a node needs to run.
pub struct Node {
    /// The store.
    pub store: Store,
    /// This process's node id.
    pub node_id: String,
    /// Current config.
    pub config: watch::Receiver<Arc<Config>>,
    /// Wake notifications (R2).
    pub wake: Arc<Notify>,
    /// Graceful shutdown.
    pub shutdown: CancellationToken,
    /// Scheduler state for observers.
    pub state: watch::Sender<SchedulerState>,
    /// HTTP sink.
    pub http: HttpSink,
}

/// Elect, lead, stand by, until shutdown.
pub async fn run_node(node: Node) {
    let mut backoff = Duration::from_millis(200);
    metrics::gauge!("ankusa_leader").set(0.0);
    loop {
        if node.shutdown.is_cancelled() {
            return;
        }
        let cfg = node.config.borrow().clone();
        let lease_ms = cfg.leader.lease_ms;
        let renew_ms = cfg.leader.renew_interval_ms();
        let sent = Instant::now();
        match node.store.lease_acquire(&node.node_id, lease_ms).await {
            Ok(LeaseAcquire::Acquired { token, epoch }) => {
                backoff = Duration::from_millis(200);
                info!(%token, epoch, "leading");
                metrics::counter!("ankusa_leadership_changes_total").increment(1);
                let end = lead(&node, &cfg, token.clone(), epoch, sent).await;
                metrics::gauge!("ankusa_leader").set(0.0);
                info!(?end, "stepped down");
                match end {
                    SessionEnd::Shutdown => return,
                    SessionEnd::Fenced => {}
                    SessionEnd::StoreFailed(_) => {
                        // Release if we can, so the next term (ours or another's) starts now.
                        let _ = node.store.lease_release(&node.node_id, &token).await;
                        wait(&node.shutdown, Duration::from_millis(100)).await;
                    }
                }
            }
            Ok(LeaseAcquire::Held { pttl_ms, .. }) => {
                backoff = Duration::from_millis(200);
                let w = if pttl_ms > 0 {
                    (pttl_ms as u64 + 5).min(renew_ms)
                } else {
                    50
                };
                wait(&node.shutdown, Duration::from_millis(w)).await;
            }
            Err(e) => {
                warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "cannot reach redis for the lease");
                wait(&node.shutdown, backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
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

async fn lead(node: &Node, cfg: &Config, token: String, epoch: u64, sent: Instant) -> SessionEnd {
    let lease_ms = cfg.leader.lease_ms;
    let renew_ms = cfg.leader.renew_interval_ms();
    match node.store.requeue_claimed(&token, epoch).await {
        Ok(n) if n > 0 => info!(rows = n, "requeued rows claimed under older epochs"),
        Ok(_) => {}
        Err(e) => {
            warn!(error = %e, "requeue failed");
            return SessionEnd::StoreFailed(e.to_string());
        }
    }
    metrics::gauge!("ankusa_leader").set(1.0);
    let lost = CancellationToken::new();
    let done = CancellationToken::new();
    let (dl_tx, dl_rx) = watch::channel(deadline(sent, lease_ms));
    let renewer = {
        let (store, node_id, token, lost, done) = (
            node.store.clone(),
            node.node_id.clone(),
            token.clone(),
            lost.clone(),
            done.clone(),
        );
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(renew_ms)) => {}
                    _ = done.cancelled() => return,
                }
                let sent = Instant::now();
                match store.lease_renew(&node_id, &token, lease_ms).await {
                    Ok(true) => {
                        metrics::histogram!("ankusa_lease_renew_seconds")
                            .record(sent.elapsed().as_secs_f64());
                        let _ = dl_tx.send(deadline(sent, lease_ms));
                    }
                    Ok(false) => {
                        warn!("lease lost to another node");
                        lost.cancel();
                        return;
                    }
                    Err(e) => {
                        warn!(error = %e, "lease renewal failed");
                        if Instant::now() >= *dl_tx.borrow() {
                            lost.cancel();
                            return;
                        }
                    }
                }
            }
        })
    };
    let ctx = SessionCtx {
        store: node.store.clone(),
        config: node.config.clone(),
        token,
        epoch,
        wake: node.wake.clone(),
        shutdown: node.shutdown.clone(),
        lost: lost.clone(),
        lease_deadline: dl_rx,
        state: node.state.clone(),
        http: node.http.clone(),
    };
    let end = run_session(ctx).await;
    done.cancel();
    let _ = renewer.await;
    end
}
