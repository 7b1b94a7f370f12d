//! A worker process's library face: start it, ask it things, stop it.
//!
//! [`Worker::start`] connects, checks Redis is safe to use, subscribes to the
//! wake channel and runs the node loop (`crate::leader`) in the background.

use crate::config::Config;
use crate::dispatch::SchedulerState;
use crate::error::Error;
use crate::leader::{node_id, run_node, Health, Node, PartitionSide};
use crate::ops::{self, Pressure};
use crate::sinks::registry::Sinks;
use crate::spread::Spread;
use crate::store::{Heard, Store};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// A running worker: one member of the pool.
pub struct Worker {
    store: Store,
    node_id: String,
    config: watch::Sender<Arc<Config>>,
    state: watch::Receiver<SchedulerState>,
    /// Each partition's scheduler state.
    partition_states: Vec<watch::Receiver<SchedulerState>>,
    spread: Arc<Spread>,
    health: Arc<Health>,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The delivery log's store, with `[log] url`.
    log: Option<crate::log::LogStore>,
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
        let store = connect(&config).await?;
        let node_id = node_id(name);
        let sinks =
            Sinks::new(crate::sinks::EdgePolicy::from_config(&config)).map_err(Error::Other)?;
        let health = Arc::new(Health::default());
        let shutdown = CancellationToken::new();
        let spread = Arc::new(Spread::default());
        let (config_tx, config_rx) = watch::channel(Arc::new(config.clone()));
        let (state_tx, state_rx) = watch::channel(SchedulerState::default());
        metrics::gauge!("ankusa_window_max_rows").set(config.dispatch.max_inflight as f64);
        metrics::gauge!("ankusa_window_max_bytes").set(config.dispatch.max_inflight_bytes as f64);
        metrics::gauge!("ankusa_concurrency_max").set(config.dispatch.concurrency as f64);

        // The delivery log's store, when configured: each partition's leader archives its
        // stream there. No connection is made here: PostgreSQL away never stops a start.
        let log = match &config.log.url {
            Some(_) => Some(
                crate::log::LogStore::connect(&config.log, &config.instance)
                    .map_err(|e| Error::Other(e.to_string()))?,
            ),
            None => None,
        };
        let mut tasks = Vec::new();
        let stores = store.all_partitions();
        let (sides, states) = partition_sides(stores.len());
        tasks.push(subscribe_wakes(&store, &stores, &sides, &shutdown).await?);
        sum_states_into(&states, state_tx, &shutdown, &mut tasks);
        for (pstore, state_rx) in stores.iter().zip(&states) {
            let campaign = Campaign {
                store: pstore,
                state: state_rx,
                shutdown: &shutdown,
            };
            tasks.push(campaign.publish_window(node_id.clone(), config_rx.clone()));
            // Dead-letter retention (count and age per tenant), applied by the leader only:
            // partition 0's, whose walk covers every partition's tenants.
            if config.dlq.sweep_ms > 0 && pstore.partition_index() == 0 {
                tasks.push(campaign.dlq_retention(config.dlq.clone()));
            }
            // The partition's hook counts always, per-tenant gauges for the listed tenants.
            let tenants = gauged_tenants(&store, pstore, &config);
            tasks.push(campaign.tenant_gauges(tenants));
            if let Some(log) = &log {
                let tenant_days = config
                    .tenants
                    .iter()
                    .filter_map(|(t, c)| c.log_retention_days.map(|d| (t.clone(), d)))
                    .collect();
                tasks.push(campaign.archive_log(
                    log.clone(),
                    config.log.clone(),
                    tenant_days,
                    health.clone(),
                ));
            }
            tasks.push(campaign.watch_memory(
                health.clone(),
                config_rx.clone(),
                Duration::from_millis(config.leader.renew_interval_ms()),
            ));
        }
        if !config.redis.allow_evicting {
            let every = Duration::from_millis(config.leader.renew_interval_ms());
            tasks.push(watch_eviction(
                store.clone(),
                health.clone(),
                &shutdown,
                every,
            ));
        }
        let node = Node {
            store: store.clone(),
            node_id: node_id.clone(),
            config: config_rx,
            partitions: sides,
            shutdown: shutdown.clone(),
            health: health.clone(),
            sinks,
            spread: spread.clone(),
            primary: store.watch_primary(shutdown.clone()),
        };
        tasks.push(tokio::spawn(run_node(node)));
        info!(%node_id, instance = %config.instance, partitions = config.partitions, "worker started");
        Ok(Worker {
            log,
            store,
            node_id,
            config: config_tx,
            state: state_rx,
            partition_states: states,
            spread,
            health,
            shutdown,
            tasks: Mutex::new(tasks),
        })
    }

    /// The delivery log's store (`[log] url`), if one is configured.
    pub fn log_store(&self) -> Option<&crate::log::LogStore> {
        self.log.as_ref()
    }

    /// The store this worker uses.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// This process's node id (unique per start).
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The scheduler's state as last published: with several partitions, the sum over the
    /// partitions this worker leads (`leading` if it leads any, `epoch` the highest;
    /// [`Worker::partition_state`] tells one partition's).
    pub fn state(&self) -> SchedulerState {
        self.state.borrow().clone()
    }

    /// The scheduler state of partition `n` (`None` past the instance's partitions).
    pub fn partition_state(&self, n: u32) -> Option<SchedulerState> {
        self.partition_states
            .get(n as usize)
            .map(|rx| rx.borrow().clone())
    }

    /// The partitions this worker leads now, in order.
    pub fn led_partitions(&self) -> Vec<u32> {
        self.spread.led()
    }

    /// A receiver of the scheduler's state, to await changes.
    pub fn watch_state(&self) -> watch::Receiver<SchedulerState> {
        self.state.clone()
    }

    /// Health beyond "the process answers": a failed self-check, a shutdown under way.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Whether this worker leads now (any partition).
    pub fn is_leader(&self) -> bool {
        self.state.borrow().leading
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        self.config.borrow().clone()
    }

    /// Block until nothing is claimed, running or due; the rows settled meanwhile.
    /// Rows waiting out a backoff are not due and are not waited for.
    pub async fn tick(&self) -> Result<u64, Error> {
        ops::tick(&self.store, Some(self.state.clone())).await
    }

    /// The spare capacity a replay may use now.
    pub async fn pressure(&self) -> Result<Pressure, Error> {
        ops::pressure(&self.store).await
    }

    /// Take `dispatch.concurrency`, `dispatch.sink_concurrency` and `dispatch.tenants` from
    /// `config` without a restart; other keys need a restart and are kept. Errors: an
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

/// Dropping a worker that was not [`Worker::shutdown`] stops it as [`Worker::abort`] does:
/// otherwise its background tasks would outlive the handle and keep leading, and keep
/// reconnecting to its Redis address, with nothing left to stop them.
impl Drop for Worker {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.abort();
    }
}

/// Validates `config`, connects, refuses an evicting Redis (unless `redis.allow_evicting`) and
/// checks the instance's partition count.
async fn connect(config: &Config) -> Result<Store, Error> {
    config.validate()?;
    let store = connect_waiting(&config.redis, &config.instance)
        .await?
        .with_edge(crate::sinks::EdgePolicy::from_config(config))
        .with_partitions(config.partitions);
    if let Some(policy) = store.maxmemory_policy().await? {
        if policy != "noeviction" {
            if config.redis.allow_evicting {
                warn!(%policy, "redis may evict keys; running anyway because redis.allow_evicting = true");
            } else {
                return Err(Error::EvictingRedis(policy));
            }
        }
    }
    // The partition count is the instance's: recorded at its first start,
    // refused when this config says otherwise.
    store.check_partitions(true).await?;
    Ok(store)
}

/// Connect to Redis, waiting for it while it cannot be reached yet, up to
/// `redis.startup_wait_ms`: containers of a compose file or a Kubernetes pod start together,
/// and a worker that exited at once because Redis came up a second later would be restarted
/// in a crash loop. Each try is logged, with the time waited and the bound. A URL, TLS,
/// credentials or a server that is not Redis are not waited for: they are no start-up race.
async fn connect_waiting(
    redis: &crate::config::RedisConfig,
    instance: &str,
) -> Result<Store, crate::store::StoreError> {
    let bound = Duration::from_millis(redis.startup_wait_ms);
    let url = crate::config::redact_url(&redis.url);
    let started = std::time::Instant::now();
    let mut delay = Duration::from_millis(250);
    let mut tries = 0u32;
    loop {
        match Store::connect_config(redis, instance).await {
            Ok(store) => {
                if tries > 0 {
                    info!(%url, waited_ms = started.elapsed().as_millis() as u64, "redis is up");
                }
                return Ok(store);
            }
            Err(e) if e.unreachable() => {
                let waited = started.elapsed();
                let left = bound.saturating_sub(waited);
                if left.is_zero() {
                    if tries > 0 {
                        tracing::error!(%url, error = %e, waited_ms = waited.as_millis() as u64,
                            "redis still unreachable at the end of redis.startup_wait_ms; giving up");
                    }
                    return Err(e);
                }
                tries += 1;
                warn!(%url, error = %e, attempt = tries, waited_ms = waited.as_millis() as u64,
                    retry_in_ms = delay.min(left).as_millis() as u64, wait_up_to_ms = redis.startup_wait_ms,
                    "waiting for redis");
                // The last try comes at the bound, not a backoff step before it.
                tokio::time::sleep(delay.min(left)).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// One side per partition (its wake and release notifications, its state sender) and the
/// receivers of those states.
fn partition_sides(n: usize) -> (Vec<PartitionSide>, Vec<watch::Receiver<SchedulerState>>) {
    let mut sides = Vec::with_capacity(n);
    let mut states = Vec::with_capacity(n);
    for _ in 0..n {
        let (tx, rx) = watch::channel(SchedulerState::default());
        sides.push(PartitionSide {
            wake: Arc::new(Notify::new()),
            released: Arc::new(Notify::new()),
            state: tx,
        });
        states.push(rx);
    }
    (sides, states)
}

/// Wake channels: a commit's PUBLISH wakes its partition's scan at once. Lease channels
/// (named like the lease keys): a release wakes that partition's election at once. One
/// subscriber connection for every partition; the task forwards each message to its side.
async fn subscribe_wakes(
    store: &Store,
    stores: &[Store],
    sides: &[PartitionSide],
    shutdown: &CancellationToken,
) -> Result<JoinHandle<()>, Error> {
    let mut channels = std::collections::HashMap::new();
    for (i, p) in stores.iter().enumerate() {
        channels.insert(p.keyspace().wake(), (i, false));
        channels.insert(p.keyspace().lease(), (i, true));
    }
    let mut sub = store
        .subscribe(channels.keys().cloned().collect::<Vec<_>>())
        .await?;
    let shutdown = shutdown.clone();
    let notifies: Vec<(Arc<Notify>, Arc<Notify>)> = sides
        .iter()
        .map(|s| (s.wake.clone(), s.released.clone()))
        .collect();
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                heard = sub.next() => match heard {
                    Some(Heard::Channel(channel)) => match channels.get(&channel) {
                        Some(&(i, true)) => notifies[i].1.notify_one(),
                        Some(&(i, false)) => notifies[i].0.notify_one(),
                        None => {}
                    },
                    Some(Heard::Lagged) => {
                        for (wake, released) in &notifies {
                            wake.notify_one();
                            released.notify_one();
                        }
                    }
                    None => break,
                },
                _ = shutdown.cancelled() => break,
            }
        }
        sub.close().await;
    }))
}

/// The process's state: the partitions' states summed (one partition: its state), sent
/// again whenever one of them changes.
fn sum_states_into(
    states: &[watch::Receiver<SchedulerState>],
    state_tx: watch::Sender<SchedulerState>,
    shutdown: &CancellationToken,
    tasks: &mut Vec<JoinHandle<()>>,
) {
    let changed = Arc::new(Notify::new());
    for rx in states {
        let (mut rx, changed, shutdown) = (rx.clone(), changed.clone(), shutdown.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = rx.changed() => if r.is_err() { break },
                    _ = shutdown.cancelled() => break,
                }
                changed.notify_one();
            }
        }));
    }
    let (states, shutdown) = (states.to_vec(), shutdown.clone());
    tasks.push(tokio::spawn(async move {
        loop {
            let sum = sum_states(&states);
            state_tx.send_if_modified(|old| {
                let new = *old != sum;
                *old = sum;
                new
            });
            tokio::select! {
                _ = changed.notified() => {}
                _ = shutdown.cancelled() => break,
            }
        }
    }));
}

/// The tenants of `history.metrics_tenants` that live on `pstore`'s partition.
fn gauged_tenants(store: &Store, pstore: &Store, config: &Config) -> Vec<String> {
    config
        .history
        .metrics_tenants
        .iter()
        .filter(|t| store.for_tenant(t).partition_index() == pstore.partition_index())
        .cloned()
        .collect()
}

/// What one partition's background tasks share: its store, its scheduler state, the stop.
struct Campaign<'a> {
    store: &'a Store,
    state: &'a watch::Receiver<SchedulerState>,
    shutdown: &'a CancellationToken,
}

impl Campaign<'_> {
    /// Window state for pressure() from any process, fenced by this term's token, with
    /// the settings the scripts keep server side.
    fn publish_window(&self, node: String, cfg: watch::Receiver<Arc<Config>>) -> JoinHandle<()> {
        let (store, mut state, shutdown) = (
            self.store.clone(),
            self.state.clone(),
            self.shutdown.clone(),
        );
        tokio::spawn(async move {
            loop {
                let st = state.borrow_and_update().clone();
                if st.leading {
                    if let Ok(json) = serde_json::to_string(&st) {
                        let token = format!("{node}:{}", st.epoch);
                        let settings = {
                            let c = cfg.borrow();
                            [
                                ("max_hook_bytes", c.commit.max_hook_bytes as u64),
                                ("max_delay_ms", c.commit.max_delay_ms),
                                ("cc_retention_ms", c.claim_check.retention_ms),
                            ]
                        };
                        let _ = store.publish_window(&token, &json, 3_000, &settings).await;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(1_000)) => {}
                    _ = state.changed() => tokio::time::sleep(Duration::from_millis(100)).await,
                    _ = shutdown.cancelled() => break,
                }
            }
        })
    }

    /// Dead-letter retention every `dlq.sweep_ms`, while this partition is led here.
    fn dlq_retention(&self, dlq: crate::config::DlqConfig) -> JoinHandle<()> {
        let dlq = Arc::new(dlq);
        self.every_while_leading(Duration::from_millis(dlq.sweep_ms), move |store| {
            let dlq = dlq.clone();
            async move {
                match crate::dlq::apply_retention(&store, &dlq).await {
                    Ok(0) => {}
                    Ok(n) => info!(purged = n, "dead-letter retention applied"),
                    Err(e) => {
                        warn!(error = %e, "dead-letter retention failed; will try again")
                    }
                }
            }
        })
    }

    /// Whether this partition's Redis admits commits, every `every` on every worker (a
    /// standby takes ingest too): while it refuses them for memory, readiness is red naming
    /// the reason and `ankusa_redis_full{partition}` is 1; and where this worker leads the
    /// partition, delivered hooks kept for resend give way, oldest first, until commits are
    /// admitted again or none is kept (what is left to free is the backlog itself, which the
    /// allow-oom scripts drain).
    fn watch_memory(
        &self,
        health: Arc<Health>,
        cfg: watch::Receiver<Arc<Config>>,
        every: Duration,
    ) -> JoinHandle<()> {
        let (store, state, shutdown) = (
            self.store.clone(),
            self.state.clone(),
            self.shutdown.clone(),
        );
        let partition = store.partition_index();
        let label = [("partition", partition.to_string())];
        tokio::spawn(async move {
            let mut was_full = false;
            loop {
                let refused = match store.commits_refused().await {
                    Ok(r) => r,
                    // Unreachable Redis is reported by the writes that fail; keep the last word.
                    Err(_) => {
                        tokio::select! {
                            _ = tokio::time::sleep(every) => continue,
                            _ = shutdown.cancelled() => break,
                        }
                    }
                };
                let full = refused.is_some();
                if full && !was_full {
                    warn!(
                        partition,
                        why = refused.as_deref().unwrap_or(""),
                        "redis is out of memory: commits are refused"
                    );
                } else if was_full && !full {
                    info!(partition, "redis admits commits again");
                }
                was_full = full;
                metrics::gauge!("ankusa_redis_full", &label).set(if full { 1.0 } else { 0.0 });
                if full && state.borrow().leading {
                    let max_age = cfg.borrow().history.max_age_ms;
                    make_room(&store, max_age).await;
                    // Checked again at once: the freed room turns readiness green without
                    // waiting for the next round.
                    if let Ok(None) = store.commits_refused().await {
                        info!(partition, "redis admits commits again");
                        was_full = false;
                        metrics::gauge!("ankusa_redis_full", &label).set(0.0);
                        health.set_commits_refused(partition, None);
                    } else {
                        health.set_commits_refused(partition, refused);
                    }
                } else {
                    health.set_commits_refused(partition, refused);
                }
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = shutdown.cancelled() => break,
                }
            }
        })
    }

    /// Per-tenant gauges for the tenants listed in `history.metrics_tenants` only, so the
    /// `tenant` label stays bounded; published by their partition's leader every 5 s.
    fn tenant_gauges(&self, tenants: Vec<String>) -> JoinHandle<()> {
        let tenants = Arc::new(tenants);
        self.every_while_leading(Duration::from_millis(5_000), move |store| {
            let tenants = tenants.clone();
            async move { crate::visibility::publish_tenant_gauges(&store, &tenants).await }
        })
    }

    /// The delivery log's archiver of this partition, every 250 ms while it is led here.
    fn archive_log(
        &self,
        log: crate::log::LogStore,
        cfg: crate::config::LogConfig,
        tenant_days: Vec<(String, u32)>,
        health: Arc<Health>,
    ) -> JoinHandle<()> {
        let archiver = Arc::new(crate::log::archiver::Archiver::with_tenant_retention(
            tenant_days,
        ));
        let partition = self.store.partition_index();
        self.every_while_leading(Duration::from_millis(250), move |store| {
            let (archiver, log, cfg, health) =
                (archiver.clone(), log.clone(), cfg.clone(), health.clone());
            async move {
                let how = archiver.tick(store, log, cfg).await;
                health.set_log_state(partition, how);
            }
        })
    }

    /// Runs `tick` every `period` while this partition is led here, until shutdown.
    fn every_while_leading<F, Fut>(&self, period: Duration, tick: F) -> JoinHandle<()>
    where
        F: Fn(Store) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (store, state, shutdown) = (
            self.store.clone(),
            self.state.clone(),
            self.shutdown.clone(),
        );
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = shutdown.cancelled() => break,
                }
                if state.borrow().leading {
                    tick(store.clone()).await;
                }
            }
        })
    }
}

/// On a full Redis: drop every kept hook (bodies and attempt records), oldest first, in
/// calls of [`KEPT_TRIM_PAGE`], until none is kept or [`KEPT_TRIM_CALLS`] calls (the rest
/// next round). What is kept for convenience gives way entirely: stopping once one probe fits
/// would leave Redis at the line, refusing the next real commits. Counted in
/// `ankusa_kept_dropped_total`.
async fn make_room(store: &Store, max_age_ms: u64) {
    for _ in 0..KEPT_TRIM_CALLS {
        match store
            .trim_kept(max_age_ms, Some(0), KEPT_TRIM_PAGE, true)
            .await
        {
            Ok(t) => {
                if t.dropped > 0 {
                    metrics::counter!("ankusa_kept_dropped_total").increment(t.dropped);
                    info!(
                        partition = store.partition_index(),
                        dropped = t.dropped,
                        freed_bytes = t.freed_bytes,
                        kept_bytes = t.kept_bytes,
                        "redis is full: delivered hooks kept for resend give way"
                    );
                }
                if t.kept_hooks == 0 || t.dropped == 0 {
                    return;
                }
            }
            Err(e) => {
                warn!(error = %e, "kept hooks not dropped; will try again");
                return;
            }
        }
    }
}

/// Kept hooks one `kept.lua` call drops on a full Redis: small enough to stay far under the
/// script budget (each is two DELs).
const KEPT_TRIM_PAGE: u32 = 200;
/// `kept.lua` calls per round of the memory check.
const KEPT_TRIM_CALLS: usize = 50;

/// The eviction policy, re-checked while running: a policy changed to an
/// evicting one turns health red (and is logged) until it is noeviction again.
fn watch_eviction(
    store: Store,
    health: Arc<Health>,
    shutdown: &CancellationToken,
    every: Duration,
) -> JoinHandle<()> {
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
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
    })
}

/// The process's state from its partitions': counts summed, `leading` if any
/// partition is led, the highest epoch, the window full if any session says so.
fn sum_states(states: &[watch::Receiver<SchedulerState>]) -> SchedulerState {
    let mut sum = SchedulerState::default();
    for rx in states {
        let st = rx.borrow();
        sum.leading |= st.leading;
        sum.epoch = sum.epoch.max(st.epoch);
        sum.claimed_rows += st.claimed_rows;
        sum.claimed_bytes += st.claimed_bytes;
        sum.running += st.running;
        sum.window_full |= st.window_full;
        sum.settled_total += st.settled_total;
    }
    sum
}
