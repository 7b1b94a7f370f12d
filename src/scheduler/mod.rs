//! The scheduler: the leader's loop that claims due rows, runs attempts and
//! settles outcomes (R2–R9, R13–R15).
//!
//! One session runs per leadership term (epoch). Its loop owns all state and
//! reacts to events: a wake from a commit, the timer of the earliest due row, an
//! attempt finishing, a claim or settle call returning. Claims, settles and
//! attempts run as tasks, so a claim and a settle are in flight together while
//! attempts run. Decisions (windows, slots, backoff) are the pure modules
//! [`slots`] and [`backoff`].

pub mod backoff;
mod batched;
pub mod breaker;
pub mod slots;

use crate::config::Config;
use crate::model::{DeadReason, RowId, SinkEntry};
use crate::sinks::http::{HttpOpts, HttpSink};
use crate::sinks::pubsub::PubSubOpts;
use crate::sinks::sqs::SqsOpts;
use crate::sinks::{truncate, AttemptError, Delivery};
use crate::store::{ClaimResult, Outcome, SettleOp, Store, StoreError, StoredHook};
use breaker::{Admit, Breaker};
use slots::{Slots, Slotted};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

/// Bytes of an error kept on a row or a dead letter.
pub const ERROR_MAX_BYTES: usize = 1024;

/// The unit of isolation (R15): `(tenant, source, sink index, module)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SinkKey {
    /// Tenant id.
    pub tenant: Arc<str>,
    /// Source id.
    pub source: Arc<str>,
    /// Sink index in the source's list (after rebinding, R19).
    pub index: u32,
    /// Sink module.
    pub module: Arc<str>,
}

/// Where a bound row goes.
#[derive(Debug)]
enum Target {
    Http(HttpOpts),
    /// A batching sink (R17, see [`batched`]); `ordered` entries send their lane id.
    Sqs {
        opts: SqsOpts,
        ordered: bool,
    },
    /// A batching sink (R17, see [`batched`]).
    PubSub {
        opts: PubSubOpts,
        ordered: bool,
    },
}

/// A claimed row, bound and ready to run.
#[derive(Debug)]
struct Job {
    tenant: String,
    row: String,
    /// The claim token it was claimed under (P6).
    claim: u64,
    hook_id: u64,
    key: SinkKey,
    attempts: u32,
    first_attempt_ms: Option<i64>,
    bytes: u64,
    hook: Arc<StoredHook>,
    target: Arc<Target>,
    /// Redis time at the claim (ms) and the local instant it was read: Redis time now is
    /// estimated as `claim_ms + claimed_at.elapsed()`, so a skewed local clock never matters.
    claim_ms: i64,
    claimed_at: Instant,
    /// This attempt is its breaker's half-open probe.
    probe: bool,
    /// The status a delivered HTTP attempt answered (for the attempt history).
    status: Option<u16>,
}

impl Job {
    fn redis_now_ms(&self) -> i64 {
        self.claim_ms + self.claimed_at.elapsed().as_millis() as i64
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

/// A claimed row that needs no attempt: its outcome is known at claim (R19, R20).
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
    /// A batched attempt ended or was handed back (R17).
    Batched(batched::BatchedEvent),
}

/// A settle call's result: the `(tenant, bytes)` of each settled row, or the error and the
/// batch to retry.
type SettleResult = Result<Vec<(String, u64)>, (StoreError, Vec<Pending>)>;

/// An outcome waiting for the next settle batch, with the window room it holds.
struct Pending {
    outcome: Outcome,
    bytes: u64,
    /// The attempt's history record and its hook, written by the same settle call.
    record: Option<(u64, crate::visibility::AttemptRecord)>,
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
    /// The global window is full (R21).
    pub window_full: bool,
    /// Rows settled by this process since it started (delivered + dead-lettered + dropped).
    pub settled_total: u64,
}

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// Shut down on request; the lease was released.
    Shutdown,
    /// The lease was lost or a script answered fenced: step down.
    Fenced,
    /// Redis failed in a way that leaves claims uncertain: step down, a new epoch requeues them.
    StoreFailed(String),
}

/// Everything a session needs from its node.
pub struct SessionCtx {
    /// The store.
    pub store: Store,
    /// Current config (reconfigure sends a new one, R22).
    pub config: watch::Receiver<Arc<Config>>,
    /// Lease token and epoch of this term.
    pub token: String,
    /// Fencing epoch.
    pub epoch: u64,
    /// Wake notifications from commits (R2).
    pub wake: Arc<Notify>,
    /// Cancelled for a graceful shutdown.
    pub shutdown: CancellationToken,
    /// Cancelled when the lease is lost.
    pub lost: CancellationToken,
    /// The instant until which the lease is surely ours; no attempt starts past it (R25).
    pub lease_deadline: watch::Receiver<Instant>,
    /// State published for observers.
    pub state: watch::Sender<SchedulerState>,
    /// HTTP sink (shared client).
    pub http: HttpSink,
    /// Heartbeat for the leader's self-check: ticked on every claim with rows, finished
    /// attempt and applied settle.
    pub progress: Arc<crate::leader::Progress>,
    /// Health: a claim or settle Redis refuses turns it red until one succeeds (issue 17.8).
    pub health: Arc<crate::leader::Health>,
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
    /// Breakers by sink key; absent means closed with no failures (R16).
    breakers: HashMap<SinkKey, Breaker>,
    /// Batching sinks' destinations and the claim check (R17, R18).
    batched: batched::Batched,
    /// A claim failed in a way that leaves its rows uncertain: the term winds down.
    store_failed: Option<String>,
}

/// Run one leadership term until shutdown or loss of the lease.
pub async fn run_session(ctx: SessionCtx) -> SessionEnd {
    let cfg = ctx.config.borrow().clone();
    let batched = batched::Batched::new(&cfg);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let settled_total = ctx.state.borrow().settled_total;
    let mut s = Session {
        slots: Slots::new(&cfg.dispatch),
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
        breakers: HashMap::new(),
        batched,
        store_failed: None,
        ctx,
    };
    let end = s.run(&mut rx).await;
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
    metrics::gauge!("ankusa_claimed_rows").set(0.0);
    metrics::gauge!("ankusa_claimed_bytes").set(0.0);
    metrics::gauge!("ankusa_running_attempts").set(0.0);
    metrics::gauge!("ankusa_due_lag_seconds").set(0.0);
    metrics::gauge!("ankusa_breakers_open").set(0.0);
    metrics::gauge!("ankusa_lane_members").set(0.0);
    end
}

impl Session {
    async fn run(&mut self, rx: &mut mpsc::UnboundedReceiver<Event>) -> SessionEnd {
        let mut config_rx = self.ctx.config.clone();
        loop {
            if self.ctx.lost.is_cancelled() {
                return SessionEnd::Fenced;
            }
            if self.ctx.shutdown.is_cancelled() {
                return self.drain(rx, None).await;
            }
            if let Some(why) = self.store_failed.take() {
                return self.drain(rx, Some(why)).await;
            }
            self.maybe_settle();
            self.maybe_claim();
            self.start_attempts();
            self.publish();
            let settle_at = self.settle_retry_at;
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
                _ = tokio::time::sleep_until(self.next_scan), if !self.claim_wanted && !self.claiming => self.claim_wanted = true,
                _ = tokio::time::sleep_until(settle_at.unwrap_or_else(tokio::time::Instant::now)), if settle_at.is_some() => self.settle_retry_at = None,
                Ok(()) = config_rx.changed() => {
                    let cfg = config_rx.borrow_and_update().clone();
                    self.slots.reconfigure(&cfg.dispatch);
                    self.cfg = cfg;
                    info!("reconfigured: concurrency, sink_concurrency and tenant limits reloaded");
                }
                _ = self.ctx.lost.cancelled() => return SessionEnd::Fenced,
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
        metrics::gauge!("ankusa_claimed_rows").set(self.slots.rows() as f64);
        metrics::gauge!("ankusa_claimed_bytes").set(self.slots.bytes() as f64);
        metrics::gauge!("ankusa_running_attempts").set(self.slots.running() as f64);
    }

    fn lease_ok(&self) -> bool {
        Instant::now() < *self.ctx.lease_deadline.borrow()
    }

    fn maybe_settle(&mut self) {
        if self.settling || self.pending.is_empty() || self.settle_retry_at.is_some() {
            return;
        }
        let n = self.pending.len().min(self.cfg.dispatch.settle_batch);
        let batch: Vec<Pending> = self.pending.drain(..n).collect();
        self.settling = true;
        let store = self.ctx.store.clone();
        let (token, epoch) = (self.ctx.token.clone(), self.ctx.epoch);
        let tx = self.tx.clone();
        let blobs = self.batched.blobs();
        let history = crate::visibility::history_arg(
            &self.cfg.history,
            batch
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.record.as_ref().map(|(h, r)| (i, *h, r))),
        );
        let health = self.ctx.health.clone();
        tokio::spawn(async move {
            let outcomes: Vec<Outcome> = batch.iter().map(|p| p.outcome.clone()).collect();
            let settled = store.settle_with(&token, epoch, &outcomes, history).await;
            health.record_write("settle", &settled);
            let r = match settled {
                Ok((applied, skipped, finished_blobs)) => {
                    metrics::counter!("ankusa_settle_rows_total", "result" => "applied")
                        .increment(applied);
                    // R18: the claim-check blobs of hooks this settle deleted.
                    if let Some(b) = &blobs {
                        b.delete_later(finished_blobs);
                    }
                    if skipped > 0 {
                        metrics::counter!("ankusa_settle_rows_total", "result" => "skipped")
                            .increment(skipped);
                        warn!(
                            skipped,
                            "settle skipped rows no longer claimed by this epoch"
                        );
                    }
                    Ok(batch
                        .into_iter()
                        .map(|p| (p.outcome.tenant, p.bytes))
                        .collect())
                }
                Err(e) => {
                    if matches!(e, StoreError::Fenced) {
                        // A deposed leader tried to write: refused by the script (R25).
                        metrics::counter!("ankusa_redis_errors_total", "kind" => "fenced")
                            .increment(1);
                        metrics::counter!("ankusa_settle_rows_total", "result" => "fenced")
                            .increment(batch.len() as u64);
                    }
                    Err((e, batch))
                }
            };
            let _ = tx.send(Event::Settled(r));
        });
    }

    fn maybe_claim(&mut self) {
        if self.claiming || !self.claim_wanted || !self.lease_ok() {
            return;
        }
        if self.cfg.leader.test_wedge_claim_loop {
            return; // TEST ONLY: a wedged claim loop, for the leader's self-check
        }
        let page = self.slots.claim_room();
        if page == 0 {
            return; // an outcome settling frees room and asks again
        }
        self.claim_wanted = false;
        self.claiming = true;
        let rooms = self.slots.tenant_rooms(page);
        let skip: Vec<String> = rooms
            .iter()
            .filter(|(_, r)| *r == 0)
            .map(|(t, _)| t.to_string())
            .collect();
        let tight: Vec<(String, usize)> = rooms
            .iter()
            .filter(|(_, r)| *r > 0)
            .map(|(t, r)| (t.to_string(), *r))
            .collect();
        let default_room = self.slots.default_room();
        let store = self.ctx.store.clone();
        let (token, epoch) = (self.ctx.token.clone(), self.ctx.epoch);
        let tx = self.tx.clone();
        let health = self.ctx.health.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r =
                claim_and_prepare(&store, &token, epoch, page, default_room, &skip, &tight).await;
            health.record_write("claim", &r);
            metrics::histogram!("ankusa_scan_duration_seconds")
                .record(started.elapsed().as_secs_f64());
            if matches!(r, Err(StoreError::Fenced)) {
                metrics::counter!("ankusa_redis_errors_total", "kind" => "fenced").increment(1);
            }
            let _ = tx.send(Event::Claimed(r));
        });
    }

    fn start_attempts(&mut self) {
        if !self.lease_ok() {
            return; // R25: no attempt starts once the lease may have passed to someone else
        }
        let timeout = Duration::from_millis(self.cfg.dispatch.attempt_timeout_ms);
        let settings = self.breaker_settings();
        while let Some(mut job) = self.slots.next_start() {
            if let Some(b) = self.breakers.get_mut(&job.key) {
                match b.admit(&settings, Instant::now()) {
                    Admit::Run => {}
                    Admit::Probe => job.probe = true,
                    Admit::Park(d) => {
                        self.slots.finished(&job.tenant, &job.key);
                        self.park(job, d);
                        continue;
                    }
                }
            }
            let tx = self.tx.clone();
            let http = self.ctx.http.clone();
            let span = tracing::info_span!("attempt", tenant = %job.tenant, source = %job.key.source, sink = i64::from(job.key.index),
                module = %job.key.module, row = %job.row, attempt = i64::from(job.attempts) + 1, outcome = tracing::field::Empty,
                status = tracing::field::Empty, error = tracing::field::Empty);
            // A child of the producer's traceparent when spans are exported (crate::telemetry).
            crate::telemetry::link(&span, &job.hook.headers);
            self.attempts.spawn(
                async move {
                    let started = Instant::now();
                    let d = Delivery {
                        tenant: job.tenant.clone(),
                        source: job.hook.source.clone(),
                        row: job.row.clone(),
                        hook: job.hook_id,
                        attempt: job.attempts + 1,
                        body: job.hook.body.clone(),
                        headers: job.hook.headers.clone(),
                        committed_at_ms: job.hook.committed_at_ms,
                    };
                    let fut = async {
                        match &*job.target {
                            Target::Http(opts) => http.deliver_status(opts, &d).await.map(Some),
                            _ => Err(AttemptError::Permanent("batching sink in a slot".into())),
                        }
                    };
                    let result = match tokio::time::timeout(timeout, fut).await {
                        Ok(r) => r.map(|status| job.status = status),
                        Err(_) => Err(AttemptError::Retry {
                            error: format!("attempt_timeout({}ms)", timeout.as_millis()),
                            retry_after: None,
                        }),
                    };
                    record_outcome(&result, job.status);
                    debug!(
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "attempt finished"
                    );
                    let _ = tx.send(Event::Finished {
                        job,
                        result,
                        elapsed: started.elapsed(),
                    });
                }
                .instrument(span),
            );
        }
        self.start_batched();
        // Reap finished task handles so the set does not grow.
        while self.attempts.try_join_next().is_some() {}
    }

    fn handle(&mut self, ev: Event) -> Option<SessionEnd> {
        match ev {
            Event::Claimed(Ok(p)) => {
                self.claiming = false;
                let got = p.jobs.len() + p.immediate.len();
                if got > 0 {
                    self.ctx.progress.tick();
                }
                metrics::histogram!("ankusa_scan_rows").record(got as f64);
                metrics::counter!("ankusa_rows_claimed_total").increment(got as u64);
                let now = p.claim.now_ms;
                let lag = p.claim.oldest_due_ms.map_or(0, |o| (now - o).max(0));
                metrics::gauge!("ankusa_due_lag_seconds").set(lag as f64 / 1000.0);
                // No sweep ran only because the partition holds no lane member (claim.lua).
                if p.claim.lane_members.is_some() {
                    metrics::counter!("ankusa_lane_sweeps_total").increment(1);
                }
                metrics::gauge!("ankusa_lane_members")
                    .set(p.claim.lane_members.unwrap_or(0) as f64);
                if p.claim.lanes_promoted > 0 {
                    metrics::counter!("ankusa_lane_sweep_promotions_total")
                        .increment(p.claim.lanes_promoted);
                }
                for im in p.immediate {
                    self.slots.hold(&im.tenant, 0);
                    if let SettleOp::DeadLetter { reason, .. } = &im.op {
                        warn!(tenant = %im.tenant, row = %im.row, %reason, "row dead-lettered at claim");
                    }
                    self.push_outcome(
                        im.tenant,
                        im.row,
                        im.claim,
                        im.attempts,
                        im.first_attempt_ms.unwrap_or(im.now_ms),
                        im.op,
                        0,
                    );
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
                        None if job.target.batched() => self.push_batched(job),
                        None => self.slots.push(job),
                    }
                }
                self.pack_scan();
                // More may be due right away when the page came back full.
                if got >= p.page {
                    self.claim_wanted = true;
                } else {
                    let wait = match p.claim.next_due_ms {
                        Some(d) => Duration::from_millis((d - now).max(1) as u64),
                        None => Duration::from_millis(self.cfg.dispatch.poll_ms),
                    };
                    let wait = wait.min(Duration::from_millis(self.cfg.dispatch.poll_ms));
                    self.next_scan = tokio::time::Instant::now() + wait;
                }
                None
            }
            Event::Claimed(Err(StoreError::Fenced)) => Some(SessionEnd::Fenced),
            Event::Claimed(Err(e)) => {
                // The claim may have run with its reply lost: its rows would sit claimed with
                // nobody working on them. End the term, so the next one's requeue makes them
                // due (R3); but first wind down: running attempts finish and every outcome
                // observed is settled while its row is still claimed under this term, so no
                // attempt is forgotten and no lost ok becomes a duplicate (issue 17.7).
                self.claiming = false;
                warn!(error = %e, "claim failed; winding the term down so a new epoch requeues its claims");
                if self.store_failed.is_none() {
                    self.store_failed = Some(e.to_string());
                }
                None
            }
            Event::Finished {
                job,
                result,
                elapsed,
            } => {
                self.ctx.progress.tick();
                self.slots.finished(&job.tenant, &job.key);
                self.record_breaker(&job, &result);
                self.record_attempt(job, result, elapsed);
                None
            }
            Event::Settled(Ok(rows)) => {
                self.ctx.progress.tick();
                self.settling = false;
                self.settle_backoff = Duration::from_millis(50);
                self.settled_total += rows.len() as u64;
                for (tenant, bytes) in rows {
                    self.slots.settled(&tenant, bytes);
                }
                self.claim_wanted = true;
                None
            }
            Event::Batched(ev) => {
                self.handle_batched(ev);
                None
            }
            Event::Settled(Err((StoreError::Fenced, _))) => Some(SessionEnd::Fenced),
            Event::Settled(Err((e, batch))) => {
                // Keep the outcomes: their rows stay claimed and held until Redis answers.
                warn!(error = %e, retry_in_ms = self.settle_backoff.as_millis() as u64, "settle failed; will retry the batch");
                self.settling = false;
                let mut batch = batch;
                batch.append(&mut self.pending);
                self.pending = batch;
                self.settle_retry_at = Some(tokio::time::Instant::now() + self.settle_backoff);
                self.settle_backoff = (self.settle_backoff * 2).min(Duration::from_secs(2));
                None
            }
        }
    }

    fn breaker_settings(&self) -> breaker::Settings {
        let d = &self.cfg.dispatch;
        breaker::Settings {
            failures: d.breaker_failures,
            open: Duration::from_millis(d.breaker_open_ms),
            max_open: Duration::from_millis(d.breaker_max_open_ms),
        }
    }

    /// Feed an attempt's end to its key's breaker; when it opens, park the key's queue.
    fn record_breaker(&mut self, job: &Job, result: &Result<(), AttemptError>) {
        let settings = self.breaker_settings();
        if settings.failures == 0 {
            return;
        }
        let r = match result {
            Ok(()) => breaker::Result::Success,
            Err(AttemptError::Permanent(_)) => breaker::Result::Permanent,
            Err(AttemptError::Retry { .. }) => breaker::Result::Failure,
        };
        if r == breaker::Result::Success && !job.probe && !self.breakers.contains_key(&job.key) {
            return; // the common case: closed, nothing to count
        }
        let now = Instant::now();
        let b = self.breakers.entry(job.key.clone()).or_default();
        let t = b.record(&settings, now, r, job.probe);
        let closed_clean = !b.is_open() && r == breaker::Result::Success;
        match t {
            Some(breaker::Transition::Opened(d)) => {
                warn!(tenant = %job.key.tenant, source = %job.key.source, sink = job.key.index, open_ms = d.as_millis() as u64, "breaker opened");
                metrics::counter!("ankusa_breaker_transitions_total", "to" => "open").increment(1);
                for queued in self.slots.take_key(&job.tenant, &job.key) {
                    self.park(queued, d);
                }
                for staged in self.take_batched_key(&job.key) {
                    self.park(staged, d);
                }
            }
            Some(breaker::Transition::Closed) => {
                info!(tenant = %job.key.tenant, source = %job.key.source, sink = job.key.index, "breaker closed");
                metrics::counter!("ankusa_breaker_transitions_total", "to" => "closed")
                    .increment(1);
            }
            None => {}
        }
        if closed_clean {
            self.breakers.remove(&job.key);
        }
        metrics::gauge!("ankusa_breakers_open")
            .set(self.breakers.values().filter(|b| b.is_open()).count() as f64);
    }

    /// Park a row until its breaker closes (R16): attempt count unchanged, due again after
    /// `d` plus up to half of `breaker_open_ms` of jitter, so a recovering endpoint is not hit by
    /// the whole backlog at once; never past the row's retry horizon, and a row parked at or
    /// past it is dead-lettered `retry_horizon(module)`.
    fn park(&mut self, job: Job, d: Duration) {
        let now = job.redis_now_ms();
        let spread = self.cfg.dispatch.breaker_open_ms / 2;
        let mut delay = d.as_millis() as u64
            + if spread > 0 {
                rand::random::<u64>() % spread
            } else {
                0
            };
        let module = job.key.module.to_string();
        let op = match job.first_attempt_ms {
            Some(first) => {
                let horizon = first.saturating_add(self.cfg.retry.max_elapsed_ms as i64);
                if now >= horizon {
                    metrics::counter!("ankusa_deliveries_total", "module" => module.clone(), "outcome" => "dead_lettered").increment(1);
                    // No error of its own: settle keeps the row's last attempt error.
                    SettleOp::DeadLetter {
                        reason: DeadReason::RetryHorizon(module.clone()).to_string(),
                        error: String::new(),
                    }
                } else {
                    delay = delay.min((horizon - now) as u64);
                    SettleOp::Park { delay_ms: delay }
                }
            }
            None => SettleOp::Park { delay_ms: delay },
        };
        if matches!(op, SettleOp::Park { .. }) {
            metrics::counter!("ankusa_parked_rows_total").increment(1);
            metrics::counter!("ankusa_deliveries_total", "module" => module, "outcome" => "parked")
                .increment(1);
        }
        let first = job.first_attempt_ms.unwrap_or(job.claim_ms);
        self.push_outcome(
            job.tenant,
            job.row,
            job.claim,
            job.attempts,
            first,
            op,
            job.bytes,
        );
    }

    fn record_attempt(&mut self, job: Job, result: Result<(), AttemptError>, elapsed: Duration) {
        let module: &'static str = match &*job.target {
            Target::Http(_) => "http",
            Target::Sqs { .. } => "sqs",
            Target::PubSub { .. } => "pubsub",
        };
        let now = job.redis_now_ms();
        let attempts = job.attempts + 1;
        let first = job.first_attempt_ms.unwrap_or(job.claim_ms);
        let op = match result {
            Ok(()) => {
                metrics::histogram!("ankusa_attempt_duration_seconds", "module" => module, "result" => "ok").record(elapsed.as_secs_f64());
                metrics::histogram!("ankusa_delivery_latency_seconds", "module" => module)
                    .record((now - job.hook.committed_at_ms).max(0) as f64 / 1000.0);
                metrics::counter!("ankusa_deliveries_total", "module" => module, "outcome" => "delivered").increment(1);
                metrics::counter!("ankusa_rows_delivered_total", "module" => module).increment(1);
                SettleOp::Delivered
            }
            Err(AttemptError::Permanent(reason)) => {
                metrics::histogram!("ankusa_attempt_duration_seconds", "module" => module, "result" => "error").record(elapsed.as_secs_f64());
                metrics::counter!("ankusa_deliveries_total", "module" => module, "outcome" => "dead_lettered").increment(1);
                let reason = truncate(reason, ERROR_MAX_BYTES);
                SettleOp::DeadLetter {
                    reason: DeadReason::Permanent(reason.clone()).to_string(),
                    error: reason,
                }
            }
            Err(AttemptError::Retry { error, retry_after }) => {
                let result = if error.starts_with("attempt_timeout") {
                    "timeout"
                } else {
                    "error"
                };
                metrics::histogram!("ankusa_attempt_duration_seconds", "module" => module, "result" => result).record(elapsed.as_secs_f64());
                let error = truncate(error, ERROR_MAX_BYTES);
                match backoff::decide(
                    &self.cfg.retry,
                    attempts,
                    first,
                    now,
                    retry_after,
                    rand::random::<f64>(),
                ) {
                    backoff::RetryDecision::RetryIn(delay_ms) => {
                        metrics::counter!("ankusa_deliveries_total", "module" => module, "outcome" => "retry").increment(1);
                        SettleOp::Retry { delay_ms, error }
                    }
                    backoff::RetryDecision::Horizon => {
                        metrics::counter!("ankusa_deliveries_total", "module" => module, "outcome" => "dead_lettered").increment(1);
                        SettleOp::DeadLetter {
                            reason: DeadReason::RetryHorizon(module.into()).to_string(),
                            error,
                        }
                    }
                    backoff::RetryDecision::MaxAttempts => {
                        metrics::counter!("ankusa_deliveries_total", "module" => module, "outcome" => "dead_lettered").increment(1);
                        SettleOp::DeadLetter {
                            reason: DeadReason::MaxAttempts(module.into()).to_string(),
                            error,
                        }
                    }
                }
            }
        };
        let record = attempt_record(&job, attempts, now, elapsed, &op);
        if let Some(e) = &record.error {
            info!(tenant = %job.tenant, row = %job.row, attempt = attempts, status = record.status,
                error = %e, next_attempt_ms = record.next_attempt_ms, reason = record.reason.as_deref(),
                "attempt failed");
        }
        let hook = job.hook_id;
        self.push_outcome(
            job.tenant, job.row, job.claim, attempts, first, op, job.bytes,
        );
        if let Some(p) = self.pending.last_mut() {
            p.record = Some((hook, record));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push_outcome(
        &mut self,
        tenant: String,
        row: String,
        claim: u64,
        attempts: u32,
        first_attempt_ms: i64,
        op: SettleOp,
        bytes: u64,
    ) {
        if let SettleOp::DeadLetter { reason, .. } = &op {
            let kind = reason.split('(').next().unwrap_or("unknown").to_string();
            metrics::counter!("ankusa_rows_dead_lettered_total", "reason" => kind.clone())
                .increment(1);
            metrics::counter!("ankusa_dead_letters_total", "reason" => kind).increment(1);
        }
        self.pending.push(Pending {
            outcome: Outcome {
                tenant,
                row,
                attempts,
                first_attempt_ms,
                claim,
                op,
            },
            bytes,
            record: None,
        });
    }

    /// End the term: no new claims or starts; running attempts may finish; every outcome is
    /// settled (a failed batch retried with backoff) while the term's lease holds; queued rows
    /// are made due again at once. On a graceful end (`failed` is `None`, SIGTERM) attempts
    /// get up to `shutdown_grace_ms` and the lease is released. After a failed claim
    /// (`failed` is its error) they get up to `attempt_timeout_ms` (they are cancelled then
    /// anyway) plus one lease interval for the settles, and the term ends `StoreFailed`;
    /// settle stays fenced throughout, so nothing is written once another term began.
    async fn drain(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Event>,
        failed: Option<String>,
    ) -> SessionEnd {
        let grace = match failed {
            None => Duration::from_millis(self.cfg.leader.shutdown_grace_ms),
            Some(_) => Duration::from_millis(
                self.cfg.dispatch.attempt_timeout_ms + self.cfg.leader.lease_ms,
            ),
        };
        let deadline = tokio::time::Instant::now() + grace;
        info!(
            running = self.slots.running(),
            "ending the term: letting running attempts finish"
        );
        let mut queued = self.slots.drain_queued();
        queued.extend(self.drain_batched());
        for job in queued {
            let first = job.first_attempt_ms.unwrap_or(job.claim_ms);
            self.push_outcome(
                job.tenant,
                job.row,
                job.claim,
                job.attempts,
                first,
                SettleOp::Park { delay_ms: 0 },
                job.bytes,
            );
        }
        while self.slots.rows() > 0 || self.claiming {
            self.maybe_settle();
            let settle_at = self.settle_retry_at;
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = tokio::time::sleep_until(deadline) => None,
                _ = tokio::time::sleep_until(settle_at.unwrap_or(deadline)), if settle_at.is_some() => {
                    self.settle_retry_at = None;
                    continue;
                }
                _ = self.ctx.lost.cancelled() => return SessionEnd::Fenced,
            };
            let Some(ev) = ev else { break };
            if let Event::Claimed(Ok(p)) = ev {
                // A claim that was in flight: hand its rows straight back.
                self.claiming = false;
                for job in p.jobs {
                    self.slots.hold(&job.tenant, job.bytes);
                    let first = job.first_attempt_ms.unwrap_or(job.claim_ms);
                    self.push_outcome(
                        job.tenant,
                        job.row,
                        job.claim,
                        job.attempts,
                        first,
                        SettleOp::Park { delay_ms: 0 },
                        job.bytes,
                    );
                }
                for im in p.immediate {
                    self.slots.hold(&im.tenant, 0);
                    self.push_outcome(
                        im.tenant,
                        im.row,
                        im.claim,
                        im.attempts,
                        im.first_attempt_ms.unwrap_or(im.now_ms),
                        im.op,
                        0,
                    );
                }
                continue;
            }
            if let Some(end) = self.handle(ev) {
                return end;
            }
            if self
                .settle_retry_at
                .is_some_and(|t| t <= tokio::time::Instant::now())
            {
                self.settle_retry_at = None;
            }
        }
        self.attempts.abort_all();
        if let Some(why) = failed {
            // The node releases the lease if Redis answers (src/leader.rs).
            return SessionEnd::StoreFailed(why);
        }
        // Whatever is still claimed (attempts cut off by the grace period) is requeued by the
        // next leader; release so it takes over now, not after the lease's ttl.
        let node = self
            .ctx
            .token
            .rsplit_once(':')
            .map(|(n, _)| n.to_string())
            .unwrap_or_default();
        match self.ctx.store.lease_release(&node, &self.ctx.token).await {
            Ok(_) => info!("lease released"),
            Err(e) => warn!(error = %e, "could not release the lease; it lapses after its ttl"),
        }
        SessionEnd::Shutdown
    }
}

/// One claim call plus the reads that bind its rows (hooks and sources, pipelined).
async fn claim_and_prepare(
    store: &Store,
    token: &str,
    epoch: u64,
    page: usize,
    default_room: usize,
    skip: &[String],
    rooms: &[(String, usize)],
) -> Result<Prepared, StoreError> {
    let skip_refs: Vec<&str> = skip.iter().map(String::as_str).collect();
    let room_refs: Vec<(&str, usize)> = rooms.iter().map(|(t, r)| (t.as_str(), *r)).collect();
    let claim = store
        .claim(token, epoch, page, default_room, &skip_refs, &room_refs)
        .await?;
    let claimed_at = Instant::now();
    let now = claim.now_ms;

    let ids: Vec<Option<RowId>> = claim.rows.iter().map(|r| RowId::parse(&r.row)).collect();
    let mut hook_ids: Vec<u64> = ids.iter().flatten().map(|r| r.hook).collect();
    hook_ids.sort_unstable();
    hook_ids.dedup();
    let hooks = store.fetch_hooks(&hook_ids).await?;
    let hooks: HashMap<u64, Option<Result<Arc<StoredHook>, String>>> = hook_ids
        .iter()
        .copied()
        .zip(hooks.into_iter().map(|h| h.map(|h| h.map(Arc::new))))
        .collect();

    let mut source_keys: Vec<(String, String)> = hooks
        .values()
        .flatten()
        .flatten()
        .map(|h| (h.tenant.clone(), h.source.clone()))
        .collect();
    source_keys.sort();
    source_keys.dedup();
    let specs = store.fetch_sources(&source_keys).await?;
    let specs: HashMap<(String, String), Option<Result<crate::model::SourceSpec, String>>> =
        source_keys.into_iter().zip(specs).collect();
    let mut targets: HashMap<(String, String, u32), Result<Arc<Target>, String>> = HashMap::new();

    let mut jobs = Vec::with_capacity(claim.rows.len());
    let mut immediate = Vec::new();
    for (r, id) in claim.rows.iter().zip(ids) {
        let imm = |op: SettleOp| Immediate {
            tenant: r.tenant.clone(),
            row: r.row.clone(),
            claim: r.claim,
            attempts: r.attempts,
            first_attempt_ms: r.first_attempt_ms,
            op,
            now_ms: now,
        };
        let dead = |reason: DeadReason| SettleOp::DeadLetter {
            reason: reason.to_string(),
            error: String::new(),
        };
        // Every row that cannot be read is counted, whatever its fate.
        let malformed = |detail: String| {
            metrics::counter!("ankusa_malformed_rows_total").increment(1);
            dead(DeadReason::Malformed(detail))
        };
        let Some(id) = id else {
            immediate.push(imm(malformed(format!(
                "row id {:?}",
                truncate(r.row.clone(), 64)
            ))));
            continue;
        };
        let hook = match hooks.get(&id.hook).cloned().flatten() {
            Some(Ok(hook)) => hook,
            Some(Err(e)) => {
                immediate.push(imm(malformed(format!("hook {}: {e}", id.hook))));
                continue;
            }
            None => {
                // The hook is gone: nothing to deliver (R20: dropped, not dead-lettered).
                metrics::counter!("ankusa_malformed_rows_total").increment(1);
                immediate.push(imm(SettleOp::Drop));
                continue;
            }
        };
        if hook.tenant != r.tenant {
            immediate.push(imm(malformed(format!(
                "hook {} belongs to another tenant",
                id.hook
            ))));
            continue;
        }
        let Some(module) = hook.modules.get(id.sink as usize).cloned() else {
            immediate.push(imm(malformed(format!(
                "sink index {} not in hook {}",
                id.sink, id.hook
            ))));
            continue;
        };
        let spec = match specs.get(&(hook.tenant.clone(), hook.source.clone())) {
            Some(Some(Ok(spec))) => spec,
            Some(Some(Err(e))) => {
                immediate.push(imm(malformed(format!("source spec: {e}"))));
                continue;
            }
            _ => {
                immediate.push(imm(dead(DeadReason::SourceGone(hook.source.clone()))));
                continue;
            }
        };
        let Some(index) = bind(&spec.sinks, id.sink, &module) else {
            immediate.push(imm(dead(DeadReason::SinkGone(id.sink, module))));
            continue;
        };
        let target = targets
            .entry((hook.tenant.clone(), hook.source.clone(), index))
            .or_insert_with(|| {
                let entry = &spec.sinks[index as usize];
                let ordered = entry.ordered;
                match entry.module.as_str() {
                    "http" => HttpOpts::from_opts(&entry.opts).map(|o| Arc::new(Target::Http(o))),
                    "sqs" => SqsOpts::from_opts(&entry.opts)
                        .map(|opts| Arc::new(Target::Sqs { opts, ordered })),
                    "pubsub" => PubSubOpts::from_opts(&entry.opts)
                        .map(|opts| Arc::new(Target::PubSub { opts, ordered })),
                    m => Err(format!("module {m} is not supported by this worker")),
                }
            })
            .clone();
        let target = match target {
            Ok(t) => t,
            Err(e) => {
                immediate.push(imm(SettleOp::DeadLetter {
                    reason: DeadReason::Permanent(format!("invalid sink options: {e}")).to_string(),
                    error: e,
                }));
                continue;
            }
        };
        jobs.push(Job {
            tenant: r.tenant.clone(),
            row: r.row.clone(),
            claim: r.claim,
            hook_id: id.hook,
            key: SinkKey {
                tenant: r.tenant.as_str().into(),
                source: hook.source.as_str().into(),
                index,
                module: module.as_str().into(),
            },
            attempts: r.attempts,
            first_attempt_ms: r.first_attempt_ms,
            bytes: hook.body.len() as u64,
            hook,
            target,
            claim_ms: now,
            claimed_at,
            probe: false,
            status: None,
        });
    }
    Ok(Prepared {
        claim,
        jobs,
        immediate,
        page,
    })
}

/// Record an attempt's end on its span: `outcome` (`ok`, `retry`, `permanent`), the HTTP
/// `status` when one answered, the `error` of a failure (exported with the span, `telemetry`).
fn record_outcome(result: &Result<(), AttemptError>, status: Option<u16>) {
    let span = tracing::Span::current();
    let (outcome, error) = match result {
        Ok(()) => ("ok", None),
        Err(AttemptError::Retry { error, .. }) => ("retry", Some(error.as_str())),
        Err(AttemptError::Permanent(error)) => ("permanent", Some(error.as_str())),
    };
    span.record("outcome", outcome);
    if let Some(status) = status {
        span.record("status", i64::from(status));
    }
    if let Some(error) = error {
        span.record("error", error);
    }
}

/// The history record of a finished attempt (`now`: Redis time at its end, ms).
fn attempt_record(
    job: &Job,
    attempt: u32,
    now: i64,
    elapsed: Duration,
    op: &SettleOp,
) -> crate::visibility::AttemptRecord {
    let duration_ms = elapsed.as_millis() as u64;
    let base = crate::visibility::AttemptRecord {
        row: job.row.clone(),
        sink: job.key.index,
        attempt,
        started_ms: now - duration_ms as i64,
        duration_ms,
        outcome: "delivered".into(),
        status: job.status,
        error_kind: None,
        error: None,
        next_attempt_ms: None,
        reason: None,
    };
    match op {
        SettleOp::Retry { delay_ms, error } => crate::visibility::AttemptRecord {
            next_attempt_ms: Some(now + *delay_ms as i64),
            ..base.failed("retry", error)
        },
        SettleOp::DeadLetter { reason, error } => crate::visibility::AttemptRecord {
            reason: Some(reason.clone()),
            ..base.failed("dead_lettered", error)
        },
        _ => base,
    }
}

/// Bind a row to a sink entry (R19): its own index when the module still matches, else the
/// one entry with its module; `None` when neither holds (`sink_gone`).
pub fn bind(sinks: &[SinkEntry], index: u32, module: &str) -> Option<u32> {
    if sinks
        .get(index as usize)
        .is_some_and(|s| s.module == module)
    {
        return Some(index);
    }
    let mut same = sinks.iter().enumerate().filter(|(_, s)| s.module == module);
    match (same.next(), same.next()) {
        (Some((i, _)), None) => Some(i as u32),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(m: &str) -> SinkEntry {
        SinkEntry {
            module: m.into(),
            opts: Default::default(),
            ordered: false,
            key: None,
        }
    }

    #[test]
    fn a_row_binds_to_its_index_or_the_one_entry_with_its_module() {
        let s = [entry("http"), entry("sqs")];
        assert_eq!(bind(&s, 0, "http"), Some(0));
        assert_eq!(bind(&s, 1, "http"), Some(0)); // reordered
        assert_eq!(bind(&s, 5, "sqs"), Some(1));
        assert_eq!(bind(&s, 0, "pubsub"), None); // sink_gone
        let two = [entry("http"), entry("http")];
        assert_eq!(bind(&two, 2, "http"), None); // ambiguous: sink_gone
    }
}
