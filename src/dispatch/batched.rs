//! The scheduler's side of batching sinks and of the claim check.
//!
//! A claimed row of a batching sink (`sqs`, `pubsub`, `kinesis`, `eventbridge`) holds
//! window room like any row ([`super::slots::Slots::hold`] / `settled`, unchanged), but it
//! never takes a slot: it is not counted against `dispatch.concurrency`, a tenant's
//! `concurrency` or `dispatch.sink_concurrency`. Instead:
//!
//! 1. **Stage.** [`Session::push_batched`] resolves the row's destination (queue / topic and
//!    client) and stages it, per destination and tenant, untimed — like a row waiting for a
//!    slot. A hook whose body is over the sink's inline limit and not yet checked in is
//!    added to this scan's pack ([`Session::pack_scan`] uploads each tenant's pack in one
//!    background task).
//! 2. **Admit.** [`Session::start_batched`] moves staged rows into the destination's batcher,
//!    round-robin across tenants, while the batcher holds fewer than `max_entries ×
//!    sink_concurrency` entries of that tenant (a full request for every request slot) and
//!    twice that in all. The breaker is asked first: a row of an open key is parked
//!    and never reaches a batcher, so it never shares a request with another tenant.
//! 3. **Attempt.** Each admitted row is an attempt task under `attempt_timeout_ms`:
//!    wait for its hook's check-in (or check the body in itself when the pack failed),
//!    build its message, submit it to the batcher and wait for its own entry's answer.
//! 4. **Answer.** The attempt's result settles its own row and moves its own key's breaker
//!    exactly as an HTTP attempt does ([`Session::handle_batched`]); when a key's breaker
//!    opens, its staged rows and its queued, unsent entries are taken back and parked.

use super::check_in;
use super::{breaker, Event, Job, Session, SinkKey};
use crate::claim_check::BlobStore;
use crate::model::RowId;
use crate::sinks::batcher::{Batcher, Limits, Reply, Submission};
use crate::sinks::payload::Payload;
use crate::sinks::registry::Destination;
use crate::sinks::{AttemptError, ErrorKind, ResolveError};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch, OnceCell};
use tracing::{debug, warn, Instrument};

/// What a batched attempt brings back to the session loop.
pub(super) enum BatchedEvent {
    /// The attempt ended (answered, timed out, or failed before reaching a batcher).
    Finished {
        job: Job,
        result: Result<(), AttemptError>,
        elapsed: Duration,
        dest: Option<Arc<str>>,
    },
    /// The batcher handed the entry back unsent (its breaker opened): park it.
    Withdrawn { job: Job, dest: Arc<str> },
}

/// A hook's check-in: the pack's outcome, and the attempts' own check-in if it failed.
pub(super) struct SharedCheck {
    pack: watch::Receiver<Option<Result<String, String>>>,
    fallback: OnceCell<String>,
}

struct HookCheck {
    /// Jobs of this session still needing the check-in.
    refs: usize,
    shared: Arc<SharedCheck>,
}

type PackItem = (u64, Bytes, watch::Sender<Option<Result<String, String>>>);

/// A row staged for a destination, with what its options resolved to.
type Staged = (Job, Arc<dyn Destination>);

/// One destination: its batcher and the rows staged for it.
struct Dest {
    batcher: Batcher,
    limits: Limits,
    staged: HashMap<Arc<str>, VecDeque<Staged>>,
    line: VecDeque<Arc<str>>,
    submitted: usize,
    per_tenant: HashMap<Arc<str>, usize>,
}

/// Batching-sink state of one session.
pub(super) struct Batched {
    blobs: Result<BlobStore, ResolveError>,
    concurrency: Arc<AtomicUsize>,
    dests: HashMap<Arc<str>, Dest>,
    checks: HashMap<u64, HookCheck>,
    /// Rows holding a reference on their hook's check-in.
    registered: std::collections::HashSet<RowId>,
    pack: HashMap<String, Vec<PackItem>>,
}

impl Batched {
    pub(super) fn new(cfg: &crate::config::Config) -> Batched {
        let blobs = BlobStore::from_config(&cfg.claim_check, &cfg.instance);
        if let Err(e) = &blobs {
            warn!(error = %e, "claim-check store unavailable: large bodies for batching sinks will fail and retry");
        }
        Batched {
            blobs,
            concurrency: Arc::new(AtomicUsize::new(cfg.dispatch.sink_concurrency)),
            dests: HashMap::new(),
            checks: HashMap::new(),
            registered: Default::default(),
            pack: HashMap::new(),
        }
    }

    /// The claim-check store, to delete the blobs of finished hooks.
    pub(super) fn blobs(&self) -> Option<BlobStore> {
        self.blobs.as_ref().ok().cloned()
    }

    /// Batched attempts waiting for an answer (submitted to a batcher).
    pub(super) fn submitted(&self) -> usize {
        self.dests.values().map(|d| d.submitted).sum()
    }

    fn release_check(&mut self, job: &Job) {
        if !self.registered.remove(&job.row) {
            return;
        }
        if let Some(c) = self.checks.get_mut(&job.hook_id) {
            c.refs = c.refs.saturating_sub(1);
            if c.refs == 0 {
                self.checks.remove(&job.hook_id);
            }
        }
    }
}

fn key_hash(k: &SinkKey) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    k.hash(&mut h);
    h.finish()
}

impl Session {
    /// Stage a claimed row of a batching sink (its window room is already held).
    pub(super) fn push_batched(&mut self, job: Job) {
        let Some(batching) = job.target.batching() else {
            return self.finish_now(job, "not a batching sink");
        };
        let resolved = match batching.resolve(&self.ctx.sinks.secrets().for_tenant(&job.tenant)) {
            Ok(r) => r,
            Err(e) => return self.finish_with(job, e.retry()),
        };
        // The egress guard on what the options resolved to, for sources stored before the
        // grants or holding secret references: refused for good, never sent.
        if let Err(e) = resolved.check_egress(&job.tenant, self.ctx.sinks.edge()) {
            let module = resolved.module();
            return self.finish_with(
                job,
                AttemptError::permanent(ErrorKind::Other, format!("{module}: {e}")),
            );
        }
        let dest_id = resolved.id().to_string();
        if !self.batched.dests.contains_key(dest_id.as_str()) {
            let transport = match resolved.transport(&self.ctx.sinks) {
                Ok(t) => t,
                Err(e) => return self.finish_now(job, e),
            };
            let limits = resolved.limits();
            let batcher = Batcher::spawn(
                resolved.module(),
                transport,
                limits,
                self.batched.concurrency.clone(),
            );
            self.batched.dests.insert(
                dest_id.as_str().into(),
                Dest {
                    batcher,
                    limits,
                    staged: HashMap::new(),
                    line: VecDeque::new(),
                    submitted: 0,
                    per_tenant: HashMap::new(),
                },
            );
        }
        // A body over the sink's inline limit is checked in once, before any sink runs.
        let inline_max = job.target.inline_max_bytes(&job.hook.headers);
        if job.hook.claim_ref.is_none() && inline_max.is_some_and(|m| job.hook.body.len() > m) {
            let b = &mut self.batched;
            let check = b.checks.entry(job.hook_id).or_insert_with(|| {
                let (tx, rx) = watch::channel(None);
                b.pack.entry(job.tenant.clone()).or_default().push((
                    job.hook_id,
                    job.hook.body.clone(),
                    tx,
                ));
                HookCheck {
                    refs: 0,
                    shared: Arc::new(SharedCheck {
                        pack: rx,
                        fallback: OnceCell::new(),
                    }),
                }
            });
            if b.registered.insert(job.row) {
                check.refs += 1;
            }
        }
        let Some(dest) = self.batched.dests.get_mut(dest_id.as_str()) else {
            return;
        };
        let tenant: Arc<str> = job.key.tenant.clone();
        let q = dest.staged.entry(tenant.clone()).or_default();
        if q.is_empty() {
            dest.line.push_back(tenant);
        }
        q.push_back((job, resolved));
    }

    /// Upload this scan's packs: one background task per tenant.
    pub(super) fn pack_scan(&mut self) {
        if self.batched.pack.is_empty() {
            return;
        }
        let deadline = Duration::from_millis(self.cfg.dispatch.attempt_timeout_ms);
        for (tenant, items) in std::mem::take(&mut self.batched.pack) {
            let blobs = self.batched.blobs.clone();
            let store = self.ctx.store.clone();
            let token = self.ctx.token.clone();
            tokio::spawn(async move {
                let mut senders = HashMap::new();
                let mut bodies = Vec::with_capacity(items.len());
                for (hook, body, tx) in items {
                    senders.insert(hook, tx);
                    bodies.push((hook, body));
                }
                let n = bodies.len();
                let results = match &blobs {
                    Ok(b) => {
                        check_in::check_in_pack(b, &store, &token, &tenant, bodies, deadline).await
                    }
                    Err(e) => bodies
                        .into_iter()
                        .map(|(h, _)| (h, Err(e.text.clone())))
                        .collect(),
                };
                let failed = results.iter().filter(|(_, r)| r.is_err()).count();
                if failed > 0 {
                    warn!(%tenant, bodies = n, failed, "claim-check pack failed; attempts check in themselves");
                } else {
                    debug!(%tenant, bodies = n, "claim-check pack uploaded");
                }
                for (hook, r) in results {
                    if let Some(tx) = senders.remove(&hook) {
                        let _ = tx.send(Some(r));
                    }
                }
            });
        }
    }

    /// Move staged rows into their batchers (breaker first) and start their attempts.
    pub(super) fn start_batched(&mut self) {
        let sink_cap = self.cfg.dispatch.sink_concurrency.max(1);
        self.batched.concurrency.store(sink_cap, Ordering::Relaxed);
        let settings = self.breaker_settings();
        let timeout = Duration::from_millis(self.cfg.dispatch.attempt_timeout_ms);
        let mut parked = Vec::new();
        let mut start = Vec::new();
        for (dest_id, dest) in self.batched.dests.iter_mut() {
            let tenant_cap = dest.limits.max_entries * sink_cap;
            let dest_cap = 2 * tenant_cap;
            let mut misses = 0;
            while dest.submitted < dest_cap && misses < dest.line.len() {
                let Some(tenant) = dest.line.pop_front() else {
                    break;
                };
                if dest.per_tenant.get(&tenant).copied().unwrap_or(0) >= tenant_cap {
                    dest.line.push_back(tenant);
                    misses += 1;
                    continue;
                }
                misses = 0;
                let Some(q) = dest.staged.get_mut(&tenant) else {
                    continue;
                };
                let Some((mut job, resolved)) = q.pop_front() else {
                    dest.staged.remove(&tenant);
                    continue;
                };
                if q.is_empty() {
                    dest.staged.remove(&tenant);
                } else {
                    dest.line.push_back(tenant.clone());
                }
                if let Some(b) = self.breakers.get_mut(&job.key) {
                    match b.admit(&settings, Instant::now()) {
                        breaker::Admit::Run => {}
                        breaker::Admit::Probe => job.probe = true,
                        breaker::Admit::Park(d) => {
                            parked.push((job, d));
                            continue;
                        }
                    }
                }
                dest.submitted += 1;
                *dest.per_tenant.entry(tenant).or_default() += 1;
                start.push((job, resolved, dest_id.clone(), dest.batcher.clone()));
            }
            if dest.staged.is_empty() {
                dest.line.clear();
            }
        }
        for (job, d) in parked {
            self.batched.release_check(&job);
            self.park(job, d);
        }
        for (mut job, resolved, dest, batcher) in start {
            let check = if self.batched.registered.contains(&job.row) {
                self.batched
                    .checks
                    .get(&job.hook_id)
                    .map(|c| c.shared.clone())
            } else {
                None
            };
            let blobs = self.batched.blobs.clone();
            let store = (self.ctx.store.clone(), self.ctx.token.clone());
            let tx = self.tx.clone();
            let span = super::attempt::attempt_span(&mut job);
            self.attempts.spawn(
                async move {
                    let started = Instant::now();
                    let deadline = tokio::time::Instant::now() + timeout;
                    let attempt =
                        run_attempt(&job, &*resolved, check, blobs, store, batcher, deadline);
                    let answer = match tokio::time::timeout_at(deadline, attempt).await {
                        Ok(a) => a,
                        Err(_) => Reply::Done(Err(AttemptError::Timeout(timeout))),
                    };
                    let ev = match answer {
                        Reply::Withdrawn => {
                            tracing::Span::current().record("outcome", "withdrawn");
                            BatchedEvent::Withdrawn { job, dest }
                        }
                        Reply::Done(result) => {
                            super::attempt::record_outcome(&result, None);
                            BatchedEvent::Finished {
                                job,
                                result,
                                elapsed: started.elapsed(),
                                dest: Some(dest),
                            }
                        }
                    };
                    let _ = tx.send(Event::Batched(ev));
                }
                .instrument(span),
            );
        }
    }

    /// A batched attempt ended: free its batcher room, then settle and feed the breaker as
    /// any attempt does.
    pub(super) fn handle_batched(&mut self, ev: BatchedEvent) {
        let (job, dest) = match &ev {
            BatchedEvent::Finished { job, dest, .. } => (job, dest.clone()),
            BatchedEvent::Withdrawn { job, dest } => (job, Some(dest.clone())),
        };
        if let Some(d) = dest.and_then(|d| self.batched.dests.get_mut(&*d)) {
            d.submitted = d.submitted.saturating_sub(1);
            if let Some(n) = d.per_tenant.get_mut(&*job.key.tenant) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    d.per_tenant.remove(&*job.key.tenant);
                }
            }
        }
        self.batched.release_check(job);
        match ev {
            BatchedEvent::Finished {
                job,
                result,
                elapsed,
                ..
            } => {
                self.record_breaker(&job, &result);
                self.record_attempt(job, result, elapsed);
            }
            BatchedEvent::Withdrawn { job, .. } => {
                let settings = self.breaker_settings();
                let d = self
                    .breakers
                    .get(&job.key)
                    .and_then(|b| b.parks(&settings, Instant::now()))
                    .unwrap_or(settings.open);
                self.park(job, d);
            }
        }
    }

    /// A key's breaker opened: take back its staged rows (to park) and withdraw its queued,
    /// unsent entries from every batcher (they come back as [`BatchedEvent::Withdrawn`]).
    pub(super) fn take_batched_key(&mut self, key: &SinkKey) -> Vec<Job> {
        let mut out = Vec::new();
        let h = key_hash(key);
        for dest in self.batched.dests.values_mut() {
            if let Some(q) = dest.staged.get_mut(&key.tenant) {
                let mut kept = VecDeque::with_capacity(q.len());
                for (job, r) in q.drain(..) {
                    if job.key == *key {
                        out.push(job);
                    } else {
                        kept.push_back((job, r));
                    }
                }
                *q = kept;
                if q.is_empty() {
                    dest.staged.remove(&key.tenant);
                    dest.line.retain(|t| *t != key.tenant);
                }
            }
            dest.batcher.withdraw(h);
        }
        for job in &out {
            self.batched.release_check(job);
        }
        out
    }

    /// Every staged (not yet admitted) row, taken out, e.g. on shutdown.
    pub(super) fn drain_batched(&mut self) -> Vec<Job> {
        let mut out = Vec::new();
        for dest in self.batched.dests.values_mut() {
            for (_, q) in dest.staged.drain() {
                out.extend(q.into_iter().map(|(j, _)| j));
            }
            dest.line.clear();
        }
        out
    }

    /// End an attempt that cannot reach a batcher (no client for it): it counts as a
    /// retryable failed attempt of kind `other`.
    fn finish_now(&mut self, job: Job, error: impl Into<String>) {
        self.finish_with(job, AttemptError::retry(ErrorKind::Other, error));
    }

    /// End an attempt before it reached a batcher with `error`.
    fn finish_with(&mut self, job: Job, error: AttemptError) {
        let _ = self.tx.send(Event::Batched(BatchedEvent::Finished {
            job,
            result: Err(error),
            elapsed: Duration::ZERO,
            dest: None,
        }));
    }
}

/// One batched attempt up to its entry's answer: the body (inline, or its check-in), the
/// lane id when the message needs one, the message, the batcher.
async fn run_attempt(
    job: &Job,
    resolved: &dyn Destination,
    check: Option<Arc<SharedCheck>>,
    blobs: Result<BlobStore, ResolveError>,
    (store, token): (crate::store::Store, String),
    batcher: Batcher,
    deadline: tokio::time::Instant,
) -> Reply {
    // The blob store's, the lane read's and the batcher's failures are of kind `other`: none
    // is an answer of the sink's (an unusable store's config carries its own kind).
    let retry = |error: String| Reply::Done(Err(AttemptError::retry(ErrorKind::Other, error)));
    let size = job.hook.body.len();
    let payload = if let Some(url) = &job.hook.claim_ref {
        Payload::Checked {
            url: url.clone(),
            size,
        }
    } else if let Some(check) = check {
        let mut pack = check.pack.clone();
        let packed = match pack.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or_else(|| Err("pack lost".into())),
            Err(_) => Err("pack task ended without an answer".into()),
        };
        let url = match packed {
            Ok(url) => url,
            Err(_) => {
                // The pack failed: the first attempt of this hook checks the body in itself;
                // the others wait for it.
                let blobs = match &blobs {
                    Ok(b) => b,
                    // A secret reference of `[claim_check]` that cannot be resolved is a
                    // secret's failure; the rest of the store's config is `other`.
                    Err(e) => return Reply::Done(Err(e.clone().retry())),
                };
                let r = check
                    .fallback
                    .get_or_try_init(|| {
                        check_in::check_in(
                            blobs,
                            &store,
                            &token,
                            &job.tenant,
                            job.hook_id,
                            job.hook.body.clone(),
                        )
                    })
                    .await;
                match r {
                    Ok(u) => u.clone(),
                    Err(e) => return retry(e),
                }
            }
        };
        Payload::Checked { url, size }
    } else {
        Payload::Inline(job.hook.body.clone())
    };
    let lane = if resolved.needs_lane() {
        let sink = job.row.sink;
        match store.lane_of(job.hook_id, sink).await {
            Ok(l) => l,
            Err(e) => return retry(format!("reading the lane id: {e}")),
        }
    } else {
        None
    };
    let d = job.delivery();
    let msg = match resolved.message(&d, &payload, lane.as_deref()) {
        Ok(m) => m,
        Err(e) => return Reply::Done(Err(e)),
    };
    let (tx, rx) = oneshot::channel();
    let sub = Submission {
        tenant: job.key.tenant.clone(),
        key: key_hash(&job.key),
        msg,
        deadline,
        reply: tx,
    };
    if batcher.submit(sub).is_err() {
        return retry(format!("{} batcher stopped", resolved.module()));
    }
    rx.await
        .unwrap_or_else(|_| retry(format!("{} batcher dropped the entry", resolved.module())))
}
