//! Dispatch: the leader's loop that claims due rows, runs attempts and settles
//! outcomes.
//!
//! One session runs per leadership term (epoch). Its loop owns all state and
//! reacts to events: a wake from a commit, the timer of the earliest due row, an
//! attempt finishing, a claim or settle call returning. Claims, settles and
//! attempts run as tasks, so a claim and a settle are in flight together while
//! attempts run. Decisions (windows, slots, breakers, backoff) are the pure modules
//! of [`crate::scheduler`]; this module owns the state and the I/O.
//!
//! | file | step |
//! | --- | --- |
//! | `mod.rs` | [`SessionCtx`], the session's state, its event loop and [`Progress`] |
//! | `claim.rs` | one claim call and the reads that bind its rows to hooks and sinks |
//! | `attempt.rs` | starting attempts, breakers, results into settle operations |
//! | `settle.rs` | settle batches, their retry, and the drain that ends a term |
//! | `journal.rs` | the settles Redis may not have synced yet, sent again after a Redis restart |
//! | `batched.rs` | batching sinks (SQS, Pub/Sub) and the claim check |
//! | `core.rs` | the decisions as pure functions: settle operation of an attempt, park versus the retry horizon, disable, next claim |

mod attempt;
mod batched;
mod check_in;
mod claim;
mod core;
mod events;
mod journal;
mod policy;
mod settle;

pub(crate) use self::journal::SettleJournal;
use crate::config::Config;
use crate::model::{DeadReason, RowId, SinkEntry};
use crate::scheduler::backoff;
use crate::scheduler::breaker::{self, Admit, Breaker};
use crate::scheduler::rate;
use crate::scheduler::slots::{self, Slots, Slotted};
use crate::sinks::registry::{Sinks, Target};
use crate::sinks::{truncate, AttemptError, Delivery};
use crate::store::{ClaimResult, Outcome, SettleOp, Store, StoreError, StoredHook};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

/// The scheduler's heartbeat: the session calls [`Progress::tick`] whenever it moves
/// (rows claimed, an attempt finished, outcomes settled); the leader's self-check reads its age.
#[derive(Debug)]
pub(crate) struct Progress {
    base: Instant,
    /// Milliseconds from `base` to the last tick.
    last_ms: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Progress {
    /// Record progress now.
    pub(crate) fn tick(&self) {
        self.last_ms
            .store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Time since the last tick (or since creation).
    pub(crate) fn age(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(last)
    }
}

/// Bytes of an error kept on a row or a dead letter.
pub(crate) const ERROR_MAX_BYTES: usize = 1024;

/// The unit of isolation: `(tenant, source, sink index, module)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SinkKey {
    /// Tenant id.
    pub tenant: Arc<str>,
    /// Source id.
    pub source: Arc<str>,
    /// Sink index in the source's list (after rebinding).
    pub index: u32,
    /// Sink module.
    pub module: Arc<str>,
}

/// A claimed row, bound and ready to run.
#[derive(Debug)]
struct Job {
    tenant: String,
    /// The row, parsed once at the claim.
    row: RowId,
    /// The claim token it was claimed under.
    claim: u64,
    hook_id: u64,
    key: SinkKey,
    attempts: u32,
    first_attempt_ms: Option<i64>,
    bytes: u64,
    hook: Arc<StoredHook>,
    target: Arc<dyn Target>,
    /// The sink entry as the source was at the claim: its policy (retry, rate limit,
    /// disable) applies to this attempt.
    entry: Arc<SinkEntry>,
    /// Redis time at the claim (ms) and the local instant it was read: Redis time now is
    /// estimated as `claim_ms + claimed_at.elapsed()`, so a skewed local clock never matters.
    claim_ms: i64,
    claimed_at: Instant,
    /// This attempt is its breaker's half-open probe.
    probe: bool,
    /// The status a delivered HTTP attempt answered (for the attempt history).
    status: Option<u16>,
    /// The partition's message space, the random part of the row's `webhook-id`.
    space: Arc<str>,
    /// The `attempt` span of its current attempt (none before it starts): the "attempt
    /// failed" line is logged in it, so it carries the span's fields and trace ids.
    span: tracing::Span,
    /// The attempt span's `traceparent` when spans are exported, sent with the request.
    traceparent: Option<String>,
}

impl Job {
    fn redis_now_ms(&self) -> i64 {
        self.claim_ms + self.claimed_at.elapsed().as_millis() as i64
    }

    /// What the sink gets for this job's next attempt (slots and batching sinks alike).
    fn delivery(&self) -> Delivery {
        let row = self.row.to_string();
        Delivery {
            tenant: self.tenant.clone(),
            source: self.hook.source.clone(),
            message_id: crate::sinks::message_id(&self.space, &row),
            row,
            hook: self.hook_id,
            attempt: self.attempts + 1,
            body: self.hook.body.clone(),
            headers: self.hook.headers.clone(),
            committed_at_ms: self.hook.committed_at_ms,
            event_type: self.hook.event_type.clone(),
            traceparent: self.traceparent.clone(),
            at_ms: Some(self.redis_now_ms()),
        }
    }
}

impl Slotted for Job {
    type Key = SinkKey;
    fn tenant(&self) -> &str {
        &self.tenant
    }
    fn key(&self) -> &SinkKey {
        &self.key
    }
}

/// A claimed row that needs no attempt: its outcome is known at claim.
struct Immediate {
    tenant: String,
    row: String,
    claim: u64,
    attempts: u32,
    first_attempt_ms: Option<i64>,
    op: SettleOp,
    now_ms: i64,
}

/// What one claim task brings back.
struct Prepared {
    claim: ClaimResult,
    jobs: Vec<Job>,
    immediate: Vec<Immediate>,
    page: usize,
}

enum Event {
    Claimed(Result<Prepared, StoreError>),
    Finished {
        job: Job,
        result: Result<(), AttemptError>,
        elapsed: Duration,
    },
    Settled(SettleResult),
    /// A batched attempt ended or was handed back.
    Batched(batched::BatchedEvent),
    /// The leader's disable of a sink key ended.
    Disabled(SinkKey, policy::DisableEnd),
}

/// A settle call's result: the `(tenant, bytes)` of each settled row and the outcomes the
/// time budget left for the next call, or the error and the batch to retry.
type SettleResult = Result<(Vec<(String, u64)>, Vec<Pending>), (StoreError, Vec<Pending>)>;

/// An outcome waiting for the next settle batch, with the window room it holds.
struct Pending {
    outcome: Outcome,
    bytes: u64,
    /// The attempt's history record and its hook, written by the same settle call.
    record: Option<(u64, crate::store::AttemptRecord)>,
}

/// What the scheduler shows the rest of the process (metrics, `pressure()`, `tick()`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SchedulerState {
    /// This process leads and runs a session.
    pub leading: bool,
    /// The fencing epoch of the session.
    pub epoch: u64,
    /// Rows claimed and not yet settled.
    pub claimed_rows: usize,
    /// Bytes of those rows' hooks.
    pub claimed_bytes: u64,
    /// Attempts running.
    pub running: usize,
    /// The global window is full.
    pub window_full: bool,
    /// Rows settled by this process since it started (delivered + dead-lettered + dropped).
    pub settled_total: u64,
}

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    /// Shut down on request; the lease was released.
    Shutdown,
    /// The lease was lost or a script answered fenced: step down.
    Fenced,
    /// Redis failed in a way that leaves claims uncertain: step down, a new epoch requeues them.
    StoreFailed(String),
}

/// Everything a session needs from its node.
pub(crate) struct SessionCtx {
    /// The store.
    pub store: Store,
    /// Current config (reconfigure sends a new one).
    pub config: watch::Receiver<Arc<Config>>,
    /// Lease token and epoch of this term.
    pub token: String,
    /// Fencing epoch.
    pub epoch: u64,
    /// The partition's message space ([`Store::message_space`]): every `webhook-id` of
    /// this term is `msg_<space>_<row id>`.
    pub message_space: Arc<str>,
    /// Wake notifications from commits.
    pub wake: Arc<Notify>,
    /// Cancelled for a graceful shutdown.
    pub shutdown: CancellationToken,
    /// Cancelled when the lease is lost.
    pub lost: CancellationToken,
    /// Cancelled when a renewal found Redis restarted since the term began (and the settles
    /// it may have lost were sent again): the term winds down, so the next one requeues the
    /// rows the restart left claimed.
    pub restarted: CancellationToken,
    /// This term's settles Redis may not have synced yet ([`SettleJournal`]).
    pub journal: Arc<SettleJournal>,
    /// The instant until which the lease is surely ours; no attempt starts past it.
    pub lease_deadline: watch::Receiver<Instant>,
    /// State published for observers.
    pub state: watch::Sender<SchedulerState>,
    /// The process's sinks: the edge policy and every module's clients, shared by the
    /// sessions of all its partitions.
    pub sinks: Sinks,
    /// Heartbeat for the leader's self-check: ticked on every claim with rows, finished
    /// attempt and applied settle.
    pub progress: Arc<Progress>,
    /// Health: a claim or settle Redis refuses turns it red until one succeeds.
    pub health: Arc<crate::health::Health>,
    /// The process's global window, shared with the sessions of its other partitions
    ///.
    pub shared: Arc<crate::scheduler::slots::SharedWindow>,
}

struct Session {
    ctx: SessionCtx,
    cfg: Arc<Config>,
    slots: Slots<Job>,
    pending: Vec<Pending>,
    tx: mpsc::UnboundedSender<Event>,
    attempts: JoinSet<()>,
    claiming: bool,
    settling: bool,
    claim_wanted: bool,
    next_scan: tokio::time::Instant,
    settle_backoff: Duration,
    settle_retry_at: Option<tokio::time::Instant>,
    settled_total: u64,
    /// Breakers by sink key; absent means closed with no failures.
    breakers: HashMap<SinkKey, Breaker>,
    /// Token buckets of the rate-limited sink keys; a new term starts them full.
    rates: HashMap<SinkKey, rate::Bucket>,
    /// When the first rate-limited key has a token again, if any waits.
    rate_wake: Option<tokio::time::Instant>,
    /// Each failing sink key's run of failures without a success, for `disable_after_ms`
    ///; absent: its last attempt succeeded (or its entry never disables).
    failing_since: HashMap<SinkKey, policy::FailRun>,
    /// Sink keys being disabled right now (one disable call each).
    disabling: std::collections::HashSet<SinkKey>,
    /// Rows per claim and outcomes per settle call, adapted so each call stays under
    /// `dispatch.script_budget_ms` ([`slots::adapt_page`]); written by the call
    /// tasks.
    claim_page: Arc<std::sync::atomic::AtomicUsize>,
    settle_page: Arc<std::sync::atomic::AtomicUsize>,
    /// Batching sinks' destinations and the claim check.
    batched: batched::Batched,
    /// A claim failed in a way that leaves its rows uncertain: the term winds down.
    store_failed: Option<String>,
    /// Each sink key's last `row_dead_lettered` event ([`events::dead_letter_due`]).
    dead_letter_events: HashMap<SinkKey, Option<events::Announced>>,
}

/// A sink key as stored with its breaker snapshot: `tenant\nsource\nindex\nmodule` (ids and
/// module names hold no newline).
pub(super) fn breaker_field(k: &SinkKey) -> String {
    format!("{}\n{}\n{}\n{}", k.tenant, k.source, k.index, k.module)
}

/// The breakers the last term left open: each starts open for what is left
/// of its period, or half-open with one probe. A snapshot that cannot be read is ignored
/// (that breaker starts closed, as before snapshots existed).
async fn restore_breakers(store: &Store) -> HashMap<SinkKey, Breaker> {
    let stored = match store.load_breakers().await {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "could not read the breaker snapshots; every breaker starts closed");
            return HashMap::new();
        }
    };
    // Redis's clock, the one `breakers.lua` kept the snapshots on.
    let unix = match store.now_ms().await {
        Ok(t) => t.max(0) as u64,
        Err(e) => {
            warn!(error = %e, "could not read Redis TIME; every breaker starts closed");
            return HashMap::new();
        }
    };
    let now = Instant::now();
    let mut out = HashMap::new();
    for (field, snap) in stored {
        let mut parts = field.split('\n');
        let (Some(t), Some(s), Some(i), Some(m), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            continue;
        };
        let (Ok(index), Some(snap)) = (i.parse(), breaker::Snapshot::decode(&snap)) else {
            continue;
        };
        let key = SinkKey {
            tenant: t.into(),
            source: s.into(),
            index,
            module: m.into(),
        };
        out.insert(key, Breaker::restore(snap, now, unix));
    }
    if !out.is_empty() {
        info!(
            open = out.len(),
            "breakers restored from the last term's snapshots"
        );
    }
    metrics::gauge!("ankusa_breakers_open", "partition" => store.partition_index().to_string())
        .set(out.len() as f64);
    out
}

/// Run one leadership term until shutdown or loss of the lease.
pub(crate) async fn run_session(ctx: SessionCtx) -> SessionEnd {
    let cfg = ctx.config.borrow().clone();
    let batched = batched::Batched::new(&cfg);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let settled_total = ctx.state.borrow().settled_total;
    let breakers = restore_breakers(&ctx.store).await;
    let (claim_page, settle_page) = (cfg.dispatch.batch, cfg.dispatch.settle_batch);
    // The settings the scripts keep server side, in force before this term's first claim
    // and settle; the window task keeps them current afterwards.
    let settings = [
        ("max_hook_bytes", cfg.commit.max_hook_bytes as u64),
        ("max_delay_ms", cfg.commit.max_delay_ms),
        ("cc_retention_ms", cfg.claim_check.retention_ms),
    ];
    if let Err(e) = ctx.store.publish_window(&ctx.token, "", 0, &settings).await {
        warn!(error = %e, "could not publish the settings; the scripts use the last ones");
    }
    let mut s = Session {
        slots: Slots::with_shared(&cfg.dispatch, ctx.shared.clone()),
        cfg,
        pending: Vec::new(),
        tx,
        attempts: JoinSet::new(),
        claiming: false,
        settling: false,
        claim_wanted: true,
        next_scan: tokio::time::Instant::now(),
        settle_backoff: Duration::from_millis(50),
        settle_retry_at: None,
        settled_total,
        breakers,
        rates: HashMap::new(),
        rate_wake: None,
        failing_since: HashMap::new(),
        disabling: Default::default(),
        claim_page: Arc::new(claim_page.into()),
        settle_page: Arc::new(settle_page.into()),
        batched,
        store_failed: None,
        dead_letter_events: HashMap::new(),
        ctx,
    };
    let end = s.run(&mut rx).await;
    let partition = s.ctx.store.partition_index();
    s.attempts.abort_all();
    s.ctx.state.send_modify(|st| {
        st.leading = false;
        st.claimed_rows = 0;
        st.claimed_bytes = 0;
        st.running = 0;
        st.window_full = false;
    });
    // A node that stepped down must not keep exporting the state of its last term (a window,
    // a lag, breakers that lived in this session, the partition's lane members): the next
    // leader reports them.
    // The window gauges are the process's: what the other partitions' sessions still hold.
    let shared = s.slots.shared().clone();
    drop(s);
    metrics::gauge!("ankusa_claimed_rows").set(shared.rows() as f64);
    metrics::gauge!("ankusa_claimed_bytes").set(shared.bytes() as f64);
    metrics::gauge!("ankusa_running_attempts").set(shared.running() as f64);
    // The partition's gauges: this node no longer speaks for it.
    let p = partition.to_string();
    metrics::gauge!("ankusa_due_lag_seconds", "partition" => p.clone()).set(0.0);
    metrics::gauge!("ankusa_breakers_open", "partition" => p.clone()).set(0.0);
    metrics::gauge!("ankusa_lane_members", "partition" => p).set(0.0);
    end
}

impl Session {
    async fn run(&mut self, rx: &mut mpsc::UnboundedReceiver<Event>) -> SessionEnd {
        let mut config_rx = self.ctx.config.clone();
        // Room another partition's session freed in the process's window.
        let mut freed = self.slots.shared().freed();
        loop {
            if self.ctx.lost.is_cancelled() {
                return SessionEnd::Fenced;
            }
            if self.ctx.shutdown.is_cancelled() {
                return self.drain(rx, None).await;
            }
            if self.ctx.restarted.is_cancelled() && self.store_failed.is_none() {
                warn!("redis restarted during the term: winding the term down so a new one requeues what it left claimed");
                self.store_failed = Some("redis restarted".into());
            }
            if let Some(why) = self.store_failed.take() {
                return self.drain(rx, Some(why)).await;
            }
            self.check_disable(Instant::now(), None);
            self.maybe_settle();
            self.maybe_claim();
            self.start_attempts();
            self.publish();
            let settle_at = self.settle_retry_at;
            let rate_at = self.rate_wake;
            let disable_at = self.next_disable_check();
            tokio::select! {
                ev = rx.recv() => {
                    let Some(ev) = ev else { return SessionEnd::StoreFailed("event channel closed".into()) };
                    if let Some(end) = self.handle(ev) {
                        return end;
                    }
                    // Take every event already queued before deciding the next calls.
                    while let Ok(ev) = rx.try_recv() {
                        if let Some(end) = self.handle(ev) {
                            return end;
                        }
                    }
                }
                _ = self.ctx.wake.notified() => self.claim_wanted = true,
                Ok(()) = freed.changed() => {}
                _ = tokio::time::sleep_until(self.next_scan), if !self.claim_wanted && !self.claiming => self.claim_wanted = true,
                _ = tokio::time::sleep_until(settle_at.unwrap_or_else(tokio::time::Instant::now)), if settle_at.is_some() => self.settle_retry_at = None,
                _ = tokio::time::sleep_until(rate_at.unwrap_or_else(tokio::time::Instant::now)), if rate_at.is_some() => self.rate_wake = None,
                _ = tokio::time::sleep_until(disable_at.unwrap_or_else(tokio::time::Instant::now)), if disable_at.is_some() => {}
                Ok(()) = config_rx.changed() => {
                    let cfg = config_rx.borrow_and_update().clone();
                    self.slots.reconfigure(&cfg.dispatch);
                    self.cfg = cfg;
                    info!("reconfigured: concurrency, sink_concurrency and tenant limits reloaded");
                }
                _ = self.ctx.lost.cancelled() => return SessionEnd::Fenced,
                _ = self.ctx.restarted.cancelled() => {}
                _ = self.ctx.shutdown.cancelled() => {}
            }
        }
    }

    fn publish(&self) {
        let st = SchedulerState {
            leading: true,
            epoch: self.ctx.epoch,
            claimed_rows: self.slots.rows(),
            claimed_bytes: self.slots.bytes(),
            running: self.slots.running() + self.batched.submitted(),
            window_full: self.slots.window_full(),
            settled_total: self.settled_total,
        };
        self.ctx.state.send_if_modified(|old| {
            if *old != st {
                *old = st;
                true
            } else {
                false
            }
        });
        // The process's window: the sum over the partitions it leads.
        let shared = self.slots.shared();
        metrics::gauge!("ankusa_claimed_rows").set(shared.rows() as f64);
        metrics::gauge!("ankusa_claimed_bytes").set(shared.bytes() as f64);
        metrics::gauge!("ankusa_running_attempts").set(shared.running() as f64);
    }

    /// The `partition` label of this session's per-partition gauges.
    fn partition_label(&self) -> String {
        self.ctx.store.partition_index().to_string()
    }

    fn lease_ok(&self) -> bool {
        Instant::now() < *self.ctx.lease_deadline.borrow()
    }

    fn handle(&mut self, ev: Event) -> Option<SessionEnd> {
        match ev {
            Event::Claimed(Ok(p)) => self.claimed(p),
            Event::Claimed(Err(StoreError::Fenced)) => return Some(SessionEnd::Fenced),
            Event::Claimed(Err(e)) => self.claim_failed(e),
            Event::Finished {
                job,
                result,
                elapsed,
            } => {
                self.ctx.progress.tick();
                self.slots.finished(&job.tenant, &job.key);
                self.record_breaker(&job, &result);
                self.record_attempt(job, result, elapsed);
            }
            Event::Settled(Ok((rows, left))) => self.settled(rows, left),
            Event::Batched(ev) => self.handle_batched(ev),
            Event::Disabled(key, end) => self.sink_disabled(key, end),
            Event::Settled(Err((StoreError::Fenced, _))) => return Some(SessionEnd::Fenced),
            Event::Settled(Err((e, batch))) => self.settle_failed(e, batch),
        }
        None
    }

    /// A claim page came back: hold its rows' room, settle what the claim decided at once,
    /// park, batch or queue each job, and decide when to claim next.
    fn claimed(&mut self, p: Prepared) {
        self.claiming = false;
        let got = p.jobs.len() + p.immediate.len();
        if got > 0 {
            self.ctx.progress.tick();
        }
        self.record_claim_metrics(&p.claim, got);
        for im in p.immediate {
            if let SettleOp::DeadLetter { reason, .. } = &im.op {
                warn!(tenant = %im.tenant, row = %im.row, %reason, "row dead-lettered at claim");
            }
            self.push_immediate(im);
        }
        let settings = self.breaker_settings();
        for job in p.jobs {
            self.slots.hold(&job.tenant, job.bytes);
            match self
                .breakers
                .get(&job.key)
                .and_then(|b| b.parks(&settings, Instant::now()))
            {
                Some(d) => self.park(job, d),
                None if job.target.batching().is_some() => self.push_batched(job),
                None => self.queue_job(job),
            }
        }
        self.slots.end_claim();
        self.pack_scan();
        let poll = Duration::from_millis(self.cfg.dispatch.poll_ms);
        match self::core::next_claim(&p.claim, got, p.page, poll) {
            self::core::NextClaim::Now => self.claim_wanted = true,
            self::core::NextClaim::After(wait) => {
                self.next_scan = tokio::time::Instant::now() + wait
            }
        }
    }

    /// The claim's gauges and counters: rows, due lag, the lane sweep.
    fn record_claim_metrics(&self, claim: &ClaimResult, got: usize) {
        metrics::histogram!("ankusa_scan_rows").record(got as f64);
        metrics::counter!("ankusa_rows_claimed_total").increment(got as u64);
        let lag = claim.oldest_due_ms.map_or(0, |o| (claim.now_ms - o).max(0));
        metrics::gauge!("ankusa_due_lag_seconds", "partition" => self.partition_label())
            .set(lag as f64 / 1000.0);
        // No sweep ran only because the partition holds no lane member (claim.lua).
        if claim.lane_members.is_some() {
            metrics::counter!("ankusa_lane_sweeps_total").increment(1);
        }
        metrics::gauge!("ankusa_lane_members", "partition" => self.partition_label())
            .set(claim.lane_members.unwrap_or(0) as f64);
        if claim.lanes_promoted > 0 {
            metrics::counter!("ankusa_lane_sweep_promotions_total").increment(claim.lanes_promoted);
        }
    }

    fn claim_failed(&mut self, e: StoreError) {
        // The claim may have run with its reply lost: its rows would sit claimed with
        // nobody working on them. End the term, so the next one's requeue makes them
        // due; but first wind down: running attempts finish and every outcome
        // observed is settled while its row is still claimed under this term, so no
        // attempt is forgotten and no lost ok becomes a duplicate.
        self.claiming = false;
        self.slots.end_claim();
        warn!(error = %e, "claim failed; winding the term down so a new epoch requeues its claims");
        if self.store_failed.is_none() {
            self.store_failed = Some(e.to_string());
        }
    }

    fn settled(&mut self, rows: Vec<(String, u64)>, mut left: Vec<Pending>) {
        self.ctx.progress.tick();
        self.settling = false;
        self.settle_backoff = Duration::from_millis(50);
        self.settled_total += rows.len() as u64;
        for (tenant, bytes) in rows {
            self.slots.settled(&tenant, bytes);
        }
        // What the budget left goes first in the next call, still holding its room.
        if !left.is_empty() {
            left.append(&mut self.pending);
            self.pending = left;
        }
        self.claim_wanted = true;
    }

    fn settle_failed(&mut self, e: StoreError, mut batch: Vec<Pending>) {
        // Keep the outcomes: their rows stay claimed and held until Redis answers.
        warn!(error = %e, retry_in_ms = self.settle_backoff.as_millis() as u64, "settle failed; will retry the batch");
        self.settling = false;
        batch.append(&mut self.pending);
        self.pending = batch;
        self.settle_retry_at = Some(tokio::time::Instant::now() + self.settle_backoff);
        self.settle_backoff = (self.settle_backoff * 2).min(Duration::from_secs(2));
    }
}
