//! A worker process's library face: start it, ask it things, stop it.
//!
//! [`Worker::start`] connects, checks Redis is safe to use, subscribes to the
//! wake channel and runs the node loop ([`crate::leader`]) in the background.

use crate::config::Config;
use crate::dispatch::SchedulerState;
use crate::error::Error;
use crate::leader::{node_id, run_node, Health, Node};
use crate::ops::{self, Pressure};
use crate::sinks::http::HttpSink;
use crate::store::Store;
use fred::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// A running worker: one member of the pool (R25).
pub struct Worker {
    store: Store,
    node_id: String,
    config: watch::Sender<Arc<Config>>,
    state: watch::Receiver<SchedulerState>,
    health: Arc<Health>,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("node_id", &self.node_id)
            .finish()
    }
}

impl Worker {
    /// Validate `config`, connect, refuse an evicting Redis (unless `redis.allow_evicting`),
    /// and start electing/leading in the background. `name` seeds the node id.
    pub async fn start(config: Config, name: Option<&str>) -> Result<Worker, Error> {
        config.validate()?;
        let store = Store::connect_config(&config.redis, &config.instance)
            .await?
            .with_edge(crate::sinks::EdgePolicy::from_config(&config));
        if let Some(policy) = store.maxmemory_policy().await? {
            if policy != "noeviction" {
                if config.redis.allow_evicting {
                    warn!(%policy, "redis may evict keys; running anyway because redis.allow_evicting = true");
                } else {
                    return Err(Error::EvictingRedis(policy));
                }
            }
        }
        let node_id = node_id(name);
        let http = HttpSink::new(crate::sinks::EdgePolicy::from_config(&config))
            .map_err(|e| Error::Other(format!("http client: {e}")))?;
        let wake = Arc::new(Notify::new());
        let released = Arc::new(Notify::new());
        let health = Arc::new(Health::default());
        let shutdown = CancellationToken::new();
        let (config_tx, config_rx) = watch::channel(Arc::new(config.clone()));
        let (state_tx, state_rx) = watch::channel(SchedulerState::default());
        metrics::gauge!("ankusa_window_max_rows").set(config.dispatch.max_inflight as f64);
        metrics::gauge!("ankusa_window_max_bytes").set(config.dispatch.max_inflight_bytes as f64);
        metrics::gauge!("ankusa_concurrency_max").set(config.dispatch.concurrency as f64);

        let mut tasks = Vec::new();
        // Wake channel (R2): a commit's PUBLISH wakes the scan at once. The lease channel
        // (named like the lease key): a release wakes the standbys' election at once (R25).
        let sub = store.subscriber()?;
        sub.init().await.map_err(crate::store::StoreError::from)?;
        let lease_channel = store.keyspace().lease();
        sub.subscribe(vec![store.keyspace().wake(), lease_channel.clone()])
            .await
            .map_err(crate::store::StoreError::from)?;
        let _resub = sub.manage_subscriptions();
        let mut messages = sub.message_rx();
        {
            let (wake, released, shutdown) = (wake.clone(), released.clone(), shutdown.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        m = messages.recv() => match m {
                            Ok(m) if *m.channel == *lease_channel => released.notify_one(),
                            Ok(_) => wake.notify_one(),
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                                wake.notify_one();
                                released.notify_one();
                            }
                            Err(_) => break,
                        },
                        _ = shutdown.cancelled() => break,
                    }
                }
                let _ = sub.quit().await;
            }));
        }
        // Window state for pressure() from any process (R21), fenced by this term's token.
        {
            let (store, mut state, shutdown) = (store.clone(), state_rx.clone(), shutdown.clone());
            let node = node_id.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let st = state.borrow_and_update().clone();
                    if st.leading {
                        if let Ok(json) = serde_json::to_string(&st) {
                            let token = format!("{node}:{}", st.epoch);
                            let _ = store.publish_window(&token, &json, 3_000).await;
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(1_000)) => {}
                        _ = state.changed() => tokio::time::sleep(Duration::from_millis(100)).await,
                        _ = shutdown.cancelled() => break,
                    }
                }
            }));
        }
        // Dead-letter retention (count and age per tenant), applied by the leader only.
        if config.dlq.sweep_ms > 0 {
            let (store, state, shutdown) = (store.clone(), state_rx.clone(), shutdown.clone());
            let dlq = config.dlq.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(dlq.sweep_ms)) => {}
                        _ = shutdown.cancelled() => break,
                    }
                    if !state.borrow().leading {
                        continue;
                    }
                    match crate::dlq::apply_retention(&store, &dlq).await {
                        Ok(0) => {}
                        Ok(n) => info!(purged = n, "dead-letter retention applied"),
                        Err(e) => warn!(error = %e, "dead-letter retention failed; will try again"),
                    }
                }
            }));
        }
        // The eviction policy, re-checked while running (issue 17.9): a policy changed to an
        // evicting one turns health red (and is logged) until it is noeviction again.
        if !config.redis.allow_evicting {
            let (store, health, shutdown) = (store.clone(), health.clone(), shutdown.clone());
            let every = Duration::from_millis(config.leader.renew_interval_ms());
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = shutdown.cancelled() => break,
                    }
                    match store.maxmemory_policy().await {
                        Ok(Some(policy)) if policy != "noeviction" => {
                            let why = Error::EvictingRedis(policy).to_string();
                            if health.problem().as_deref() != Some(why.as_str()) {
                                tracing::error!(%why, "redis may evict keys now");
                            }
                            health.set_evicting(Some(why));
                        }
                        Ok(_) => health.set_evicting(None),
                        Err(_) => {} // unreachable Redis is reported by the writes that fail
                    }
                }
            }));
        }
        // Per-tenant gauges for the tenants listed in `history.metrics_tenants` only, so the
        // `tenant` label stays bounded; published by the leader every 5 s.
        if !config.history.metrics_tenants.is_empty() {
            let (store, state, shutdown) = (store.clone(), state_rx.clone(), shutdown.clone());
            let tenants = config.history.metrics_tenants.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(5_000)) => {}
                        _ = shutdown.cancelled() => break,
                    }
                    if state.borrow().leading {
                        crate::visibility::publish_tenant_gauges(&store, &tenants).await;
                    }
                }
            }));
        }
        let node = Node {
            store: store.clone(),
            node_id: node_id.clone(),
            config: config_rx,
            wake,
            released,
            shutdown: shutdown.clone(),
            state: state_tx,
            health: health.clone(),
            http,
        };
        tasks.push(tokio::spawn(run_node(node)));
        info!(%node_id, instance = %config.instance, "worker started");
        Ok(Worker {
            store,
            node_id,
            config: config_tx,
            state: state_rx,
            health,
            shutdown,
            tasks: Mutex::new(tasks),
        })
    }

    /// The store this worker uses.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// This process's node id (unique per start).
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The scheduler's state as last published.
    pub fn state(&self) -> SchedulerState {
        self.state.borrow().clone()
    }

    /// A receiver of the scheduler's state, to await changes.
    pub fn watch_state(&self) -> watch::Receiver<SchedulerState> {
        self.state.clone()
    }

    /// Health beyond "the process answers": a failed self-check, a shutdown under way (R25).
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Whether this worker leads now.
    pub fn is_leader(&self) -> bool {
        self.state.borrow().leading
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        self.config.borrow().clone()
    }

    /// Block until nothing is claimed, running or due; the rows settled meanwhile (R23).
    pub async fn tick(&self) -> Result<u64, Error> {
        ops::tick(&self.store, Some(self.state.clone())).await
    }

    /// The spare capacity a replay may use now (R21).
    pub async fn pressure(&self) -> Result<Pressure, Error> {
        ops::pressure(&self.store).await
    }

    /// Take `dispatch.concurrency`, `dispatch.sink_concurrency` and `dispatch.tenants` from
    /// `config` without a restart (R22); other keys need a restart and are kept. Errors: an
    /// invalid config (nothing changes).
    pub fn reconfigure(&self, config: &Config) -> Result<(), Error> {
        config.validate()?;
        self.config.send_modify(|c| {
            let mut next = (**c).clone();
            next.dispatch.concurrency = config.dispatch.concurrency;
            next.dispatch.sink_concurrency = config.dispatch.sink_concurrency;
            next.dispatch.tenants = config.dispatch.tenants.clone();
            *c = Arc::new(next);
        });
        metrics::gauge!("ankusa_concurrency_max").set(config.dispatch.concurrency as f64);
        Ok(())
    }

    fn take_tasks(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(
            &mut *self
                .tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Stop: no new claims, running attempts get `leader.shutdown_grace_ms`, outcomes are
    /// settled, queued rows made due, the lease released (a standby takes over at once).
    /// Returns when all of that is done; a second call returns at once.
    pub async fn shutdown(&self) {
        self.health.set_draining();
        self.shutdown.cancel();
        for t in self.take_tasks() {
            let _ = t.await;
        }
    }

    /// Stop abruptly, as a crash would (for tests): background tasks are aborted, nothing is
    /// settled or released. Claimed rows come back when the next leader takes over.
    pub fn abort(&self) {
        for t in self.take_tasks() {
            t.abort();
        }
    }
}
