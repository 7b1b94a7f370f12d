//! Windows and slots, with no I/O.
//!
//! A claimed row holds window room (rows and bytes, globally and per tenant) from
//! its claim until its outcome is settled in Redis. It waits in its sink key's
//! queue until a slot is free: slots go round-robin across tenants first (weighted by
//! `dispatch.tenants.<id>.weight`: a tenant takes that many slots in a row), then
//! across each tenant's keys, under three caps — `dispatch.concurrency` (global),
//! the tenant's `concurrency`, and `dispatch.sink_concurrency` per key.
//!
//! The global caps (`dispatch.concurrency`, `max_inflight`, `max_inflight_bytes`) belong to
//! the worker process, not to one partition: every scheduler session of the
//! process counts against one [`SharedWindow`]. A tenant lives in one partition, so its
//! limits and its sink keys' `sink_concurrency` stay in that partition's [`Slots`].

use crate::config::{DispatchConfig, ResolvedLimits};
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::window::mark;
pub(crate) use super::window::{fair_share, SharedWindow};

/// The next page (rows per claim, outcomes per settle) after a call that handled `asked`
/// items took `took` of Redis time (the script's own measure, by Redis' clock) against the
/// time budget of one call, `budget` (`dispatch.script_budget_ms`: a claim or
/// settle call blocks every other client of Redis while it runs): over 4/5 of the budget
/// the page shrinks in proportion, aiming at 4/5 of it; under 2/5 with the whole page used
/// it doubles; always within `16..=max` (`max` when below 16).
pub(crate) fn adapt_page(
    page: usize,
    asked: usize,
    took: std::time::Duration,
    max: usize,
    budget: std::time::Duration,
) -> usize {
    let min = 16.min(max).max(1);
    let target = budget.as_micros() * 4 / 5;
    let us = took.as_micros().max(1);
    let next = if us > target {
        ((asked.max(1) as u128 * target / us) as usize).min(page)
    } else if us < budget.as_micros() * 2 / 5 && asked >= page {
        page.saturating_mul(2)
    } else {
        page
    };
    next.clamp(min, max.max(min))
}

/// What the slot machinery needs to know of a queued job.
pub(crate) trait Slotted {
    /// The unit of isolation: `(tenant, source, sink index, module)`.
    type Key: Clone + Eq + Hash + std::fmt::Debug;
    /// The job's tenant.
    fn tenant(&self) -> &str;
    /// The job's sink key.
    fn key(&self) -> &Self::Key;
}

#[derive(Debug)]
struct KeyQueue<J> {
    jobs: VecDeque<J>,
    running: usize,
}

#[derive(Debug)]
struct Tenant<J: Slotted> {
    limits: ResolvedLimits,
    rows: usize,
    bytes: u64,
    running: usize,
    keys: HashMap<J::Key, KeyQueue<J>>,
    /// Keys with queued jobs, in round-robin order.
    ready: VecDeque<J::Key>,
    /// Whether the tenant is in the slots' line of tenants.
    in_line: bool,
    /// Its weight (`dispatch.tenants.<id>.weight`): slots it takes in a row at the front of
    /// the line before going to the back (weighted round-robin).
    weight: u32,
    /// Slots taken since it last came to the front.
    turn: u32,
}

/// The windows, per-key queues and slot counters of one scheduler.
#[derive(Debug)]
pub(crate) struct Slots<J: Slotted> {
    /// The process-wide counters the global caps apply to.
    shared: Arc<SharedWindow>,
    global: ResolvedLimits,
    sink_concurrency: usize,
    rows: usize,
    bytes: u64,
    running: usize,
    tenants: HashMap<String, Tenant<J>>,
    /// Tenants with queued jobs, in round-robin order.
    ready: VecDeque<String>,
    cfg: DispatchConfig,
    /// Whether this session is counted in [`SharedWindow::wanting_slots`].
    wants_slots: bool,
    /// Whether this session is counted in [`SharedWindow::wanting_rows`].
    wants_rows: bool,
    /// Rows the claim in flight reserved and its holds have not used yet.
    reserved_rows: usize,
    /// Bytes the claim in flight reserved and its holds have not used yet.
    reserved_bytes: u64,
}

impl<J: Slotted> Slots<J> {
    /// Empty slots under `cfg`'s limits, alone in their process.
    #[cfg(test)] // only the unit tests call it
    pub(crate) fn new(cfg: &DispatchConfig) -> Self {
        Self::with_shared(cfg, Arc::new(SharedWindow::default()))
    }

    /// Empty slots whose global caps count every session sharing `shared`.
    pub(crate) fn with_shared(cfg: &DispatchConfig, shared: Arc<SharedWindow>) -> Self {
        Slots {
            shared,
            global: ResolvedLimits {
                max_inflight: cfg.max_inflight,
                max_inflight_bytes: cfg.max_inflight_bytes,
                concurrency: cfg.concurrency,
            },
            sink_concurrency: cfg.sink_concurrency,
            rows: 0,
            bytes: 0,
            running: 0,
            tenants: HashMap::new(),
            ready: VecDeque::new(),
            cfg: cfg.clone(),
            wants_slots: false,
            wants_rows: false,
            reserved_rows: 0,
            reserved_bytes: 0,
        }
    }

    /// Take new limits: claimed and running rows stay; a lowered cap only gates the next start.
    pub(crate) fn reconfigure(&mut self, cfg: &DispatchConfig) {
        self.global.concurrency = cfg.concurrency;
        self.sink_concurrency = cfg.sink_concurrency;
        self.cfg.concurrency = cfg.concurrency;
        self.cfg.sink_concurrency = cfg.sink_concurrency;
        self.cfg.tenants = cfg.tenants.clone();
        for (id, t) in self.tenants.iter_mut() {
            t.limits = self.cfg.tenant_limits(id);
            t.weight = self.cfg.tenant_weight(id);
        }
    }

    /// Rows claimed by this session and not yet settled.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }
    /// Bytes of hook bodies claimed by this session and not yet settled.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
    /// Attempts running in this session.
    pub(crate) fn running(&self) -> usize {
        self.running
    }
    /// The process-wide counters these slots share.
    pub(crate) fn shared(&self) -> &Arc<SharedWindow> {
        &self.shared
    }
    /// Whether the process's global window is full (rows or bytes held), for `pressure()`
    ///.
    pub(crate) fn window_full(&self) -> bool {
        self.shared.rows() >= self.global.max_inflight
            || self.shared.bytes() >= self.global.max_inflight_bytes
    }

    /// Whether no room is left for a claim: held and reserved rows or bytes at the window.
    fn no_room(&self) -> bool {
        self.shared.taken_rows() >= self.global.max_inflight
            || self.shared.taken_bytes() >= self.global.max_inflight_bytes
    }

    /// Rows the next claim may take at most, given the global window, `batch`, and this
    /// session's fair share of the rows while other sessions wait for room.
    /// 0 marks this session waiting until a later call finds room.
    pub(crate) fn claim_room(&mut self) -> usize {
        let others = self.shared.wanting_rows() - usize::from(self.wants_rows);
        let mut room = if self.no_room() {
            0
        } else {
            self.global
                .max_inflight
                .saturating_sub(self.shared.taken_rows())
                .min(self.cfg.batch)
        };
        if others > 0 {
            room = room.min(fair_share(self.global.max_inflight, others).saturating_sub(self.rows));
        }
        if room == 0 {
            mark(
                &mut self.wants_rows,
                &self.shared.wanting_rows,
                true,
                &self.shared,
            );
            self.shared.starve();
        } else {
            mark(
                &mut self.wants_rows,
                &self.shared.wanting_rows,
                false,
                &self.shared,
            );
        }
        room
    }

    /// Room of every tenant in flight that is tighter than `page`: `(tenant, rows)`;
    /// room 0 means at its window (skipped by the scan and the wake timer).
    pub(crate) fn tenant_rooms(&self, page: usize) -> Vec<(&str, usize)> {
        self.tenants
            .iter()
            .filter_map(|(id, t)| {
                let room = if t.bytes >= t.limits.max_inflight_bytes {
                    0
                } else {
                    t.limits.max_inflight.saturating_sub(t.rows)
                };
                (room < page).then_some((id.as_str(), room))
            })
            .collect()
    }

    /// The byte window for the next claim, row by row: the global room, whether nothing
    /// is claimed, the room of a tenant with nothing in flight, and the room of every tenant
    /// in flight or with limits of its own (`dispatch.tenants`).
    pub(crate) fn byte_rooms(&self) -> crate::store::ByteRooms {
        let default_tenant = self.cfg.tenant_limits("default").max_inflight_bytes;
        let mut tenants: Vec<(String, u64, bool)> = self
            .tenants
            .iter()
            .map(|(id, t)| {
                let room = t.limits.max_inflight_bytes.saturating_sub(t.bytes);
                (id.clone(), room, t.rows == 0)
            })
            .collect();
        for id in self.cfg.tenants.keys() {
            if id == "default" || self.tenants.contains_key(id) {
                continue;
            }
            let own = self.cfg.tenant_limits(id).max_inflight_bytes;
            if own != default_tenant {
                tenants.push((id.clone(), own, true));
            }
        }
        crate::store::ByteRooms {
            global: self
                .global
                .max_inflight_bytes
                .saturating_sub(self.shared.taken_bytes()),
            alone: self.shared.taken_rows() == 0,
            default_tenant,
            tenants,
        }
    }

    /// Reserve room for a claim of up to `page` rows before it is sent: up to
    /// `page` of the rows left in the window and all the byte room left, taken atomically
    /// from the process's window, so concurrent claims of other sessions cannot take the
    /// same room. Returns the rows granted and the byte rooms the claim must respect
    /// (`alone` when nothing at all was held or reserved: one hook larger than the window
    /// may then go); `None` when no row or no byte is left (the session then waits for
    /// room freed, as [`Slots::claim_room`] makes it). Holds of the claim's rows draw on
    /// the reservation; [`Slots::end_claim`] gives back what they did not use.
    pub(crate) fn reserve_claim(
        &mut self,
        page: usize,
    ) -> Option<(usize, crate::store::ByteRooms)> {
        self.end_claim();
        let max_rows = self.global.max_inflight;
        let prev_rows = self
            .shared
            .rows
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                let grant = page.min(max_rows.saturating_sub(cur));
                (grant > 0).then_some(cur + grant)
            });
        let Ok(prev_rows) = prev_rows else {
            self.shared.starve();
            return None;
        };
        let rows = page.min(max_rows - prev_rows);
        let max_bytes = self.global.max_inflight_bytes;
        let prev_bytes = self
            .shared
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                Some(cur.max(max_bytes))
            })
            .unwrap_or(max_bytes);
        let bytes = max_bytes.saturating_sub(prev_bytes);
        self.reserved_rows = rows;
        self.reserved_bytes = bytes;
        self.shared.reserved_rows.fetch_add(rows, Ordering::Relaxed);
        self.shared
            .reserved_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        let alone = prev_rows == 0 && prev_bytes == 0;
        if bytes == 0 && !alone {
            self.end_claim();
            self.shared.starve();
            return None;
        }
        let mut rooms = self.byte_rooms();
        rooms.global = bytes;
        rooms.alone = alone;
        Some((rows, rooms))
    }

    /// The claim's answer is handled (or it failed): give back the room its rows did not
    /// use, and tell waiting sessions.
    pub(crate) fn end_claim(&mut self) {
        let (rows, bytes) = (self.reserved_rows, self.reserved_bytes);
        if rows == 0 && bytes == 0 {
            return;
        }
        self.reserved_rows = 0;
        self.reserved_bytes = 0;
        self.shared.reserved_rows.fetch_sub(rows, Ordering::Relaxed);
        self.shared
            .reserved_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
        self.shared.rows.fetch_sub(rows, Ordering::Relaxed);
        self.shared.bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.shared.notify();
    }

    /// The room a tenant with nothing in flight has.
    pub(crate) fn default_room(&self) -> usize {
        self.cfg.tenant_limits("default").max_inflight
    }

    fn tenant_mut(&mut self, tenant: &str) -> &mut Tenant<J> {
        if !self.tenants.contains_key(tenant) {
            let limits = self.cfg.tenant_limits(tenant);
            let weight = self.cfg.tenant_weight(tenant);
            self.tenants.insert(
                tenant.to_string(),
                Tenant {
                    limits,
                    weight,
                    turn: 0,
                    rows: 0,
                    bytes: 0,
                    running: 0,
                    keys: HashMap::new(),
                    ready: VecDeque::new(),
                    in_line: false,
                },
            );
        }
        self.tenants.get_mut(tenant).expect("inserted above")
    }

    /// Count a claimed row against the windows (until [`Slots::settled`]), first from the
    /// room its claim reserved ([`Slots::reserve_claim`]).
    pub(crate) fn hold(&mut self, tenant: &str, bytes: u64) {
        self.rows += 1;
        self.bytes += bytes;
        if self.reserved_rows > 0 {
            self.reserved_rows -= 1;
            self.shared.reserved_rows.fetch_sub(1, Ordering::Relaxed);
        } else {
            self.shared.rows.fetch_add(1, Ordering::Relaxed);
        }
        let from_reserved = bytes.min(self.reserved_bytes);
        self.reserved_bytes -= from_reserved;
        self.shared
            .reserved_bytes
            .fetch_sub(from_reserved, Ordering::Relaxed);
        self.shared
            .bytes
            .fetch_add(bytes - from_reserved, Ordering::Relaxed);
        let t = self.tenant_mut(tenant);
        t.rows += 1;
        t.bytes += bytes;
    }

    /// A row's outcome is in Redis: free its window room.
    pub(crate) fn settled(&mut self, tenant: &str, bytes: u64) {
        let (rows, held) = (self.rows, self.bytes);
        self.rows = self.rows.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
        // Take back exactly what this session held, so the shared sums never drift.
        self.shared
            .rows
            .fetch_sub(rows - self.rows, Ordering::Relaxed);
        self.shared
            .bytes
            .fetch_sub(held - self.bytes, Ordering::Relaxed);
        self.shared.release();
        let remove = match self.tenants.get_mut(tenant) {
            Some(t) => {
                t.rows = t.rows.saturating_sub(1);
                t.bytes = t.bytes.saturating_sub(bytes);
                t.rows == 0 && t.running == 0 && t.keys.is_empty()
            }
            None => false,
        };
        if remove {
            self.tenants.remove(tenant);
        }
    }

    /// Queue a held job behind its sink key.
    pub(crate) fn push(&mut self, job: J) {
        let tenant = job.tenant().to_string();
        let key = job.key().clone();
        let t = self.tenant_mut(&tenant);
        let q = t.keys.entry(key.clone()).or_insert_with(|| KeyQueue {
            jobs: VecDeque::new(),
            running: 0,
        });
        let was_idle = q.jobs.is_empty();
        q.jobs.push_back(job);
        if was_idle {
            t.ready.push_back(key);
        }
        if !t.in_line {
            t.in_line = true;
            self.ready.push_back(tenant);
        }
    }

    /// The next job to start under every cap, round-robin across tenants then keys;
    /// `None` when nothing may start now.
    #[cfg(test)] // only the unit tests call it
    pub(crate) fn next_start(&mut self) -> Option<J> {
        self.next_start_gated(|_| true)
    }

    /// [`Slots::next_start`] where `gate` may hold a key back (its rate limit): a key
    /// it refuses keeps its queue and its place in line and takes no slot.
    pub(crate) fn next_start_gated(&mut self, gate: impl FnMut(&J::Key) -> bool) -> Option<J> {
        // Within the fair share while other sessions wait, then a slot of the
        // process (atomically: other partitions' sessions run on other threads), given back
        // if no job may start.
        let others = self.shared.wanting_slots() - usize::from(self.wants_slots);
        let over_share = others > 0 && self.running >= fair_share(self.global.concurrency, others);
        if over_share || !self.shared.take_slot(self.global.concurrency) {
            let waiting = !self.ready.is_empty();
            mark(
                &mut self.wants_slots,
                &self.shared.wanting_slots,
                waiting,
                &self.shared,
            );
            self.shared.starve();
            return None;
        }
        let job = self.pick(gate);
        // Served, or nothing may start (gated, capped or empty): no longer waiting.
        mark(
            &mut self.wants_slots,
            &self.shared.wanting_slots,
            false,
            &self.shared,
        );
        if job.is_none() {
            self.shared.running.fetch_sub(1, Ordering::Relaxed);
            self.shared.release();
        }
        job
    }

    fn pick(&mut self, mut gate: impl FnMut(&J::Key) -> bool) -> Option<J> {
        let sink_cap = self.sink_concurrency;
        for _ in 0..self.ready.len() {
            let tenant = self.ready.pop_front()?;
            let Some(t) = self.tenants.get_mut(&tenant) else {
                continue;
            };
            let mut picked = None;
            if t.running < t.limits.concurrency {
                for _ in 0..t.ready.len() {
                    let Some(key) = t.ready.pop_front() else {
                        break;
                    };
                    let Some(q) = t.keys.get_mut(&key) else {
                        continue;
                    };
                    if q.running >= sink_cap || (!q.jobs.is_empty() && !gate(&key)) {
                        t.ready.push_back(key);
                        continue;
                    }
                    if let Some(job) = q.jobs.pop_front() {
                        q.running += 1;
                        if !q.jobs.is_empty() {
                            t.ready.push_back(key);
                        }
                        picked = Some(job);
                        break;
                    }
                }
            }
            // A tenant stays in line while it has queued jobs; one that is blocked by its
            // caps goes to the back and is retried when a slot frees. A served tenant keeps
            // the front for `weight` slots in a row (weighted round-robin).
            if t.ready.is_empty() {
                t.in_line = false;
                t.turn = 0;
            } else if picked.is_some() && t.turn + 1 < t.weight {
                t.turn += 1;
                self.ready.push_front(tenant);
            } else {
                t.turn = 0;
                self.ready.push_back(tenant);
            }
            if let Some(job) = picked {
                t.running += 1;
                self.running += 1;
                return Some(job);
            }
        }
        None
    }

    /// An attempt of `key` finished: its slot is free (its window room is freed by `settled`).
    pub(crate) fn finished(&mut self, tenant: &str, key: &J::Key) {
        if self.running > 0 {
            self.running -= 1;
            self.shared.running.fetch_sub(1, Ordering::Relaxed);
            self.shared.release();
        }
        if let Some(t) = self.tenants.get_mut(tenant) {
            t.running = t.running.saturating_sub(1);
            if let Some(q) = t.keys.get_mut(key) {
                q.running = q.running.saturating_sub(1);
                if q.running == 0 && q.jobs.is_empty() {
                    t.keys.remove(key);
                }
            }
        }
    }

    /// Remove every queued (not running) job, e.g. on shutdown or a lost lease.
    pub(crate) fn drain_queued(&mut self) -> Vec<J> {
        let mut out = Vec::new();
        for t in self.tenants.values_mut() {
            for q in t.keys.values_mut() {
                out.extend(q.jobs.drain(..));
            }
            t.keys.retain(|_, q| q.running > 0);
            t.ready.clear();
            t.in_line = false;
        }
        self.ready.clear();
        out
    }

    /// Queued jobs of one sink key, taken out (a breaker opening parks them).
    pub(crate) fn take_key(&mut self, tenant: &str, key: &J::Key) -> Vec<J> {
        let Some(t) = self.tenants.get_mut(tenant) else {
            return Vec::new();
        };
        let jobs: Vec<J> = t
            .keys
            .get_mut(key)
            .map(|q| q.jobs.drain(..).collect())
            .unwrap_or_default();
        t.ready.retain(|k| k != key);
        if t.keys.get(key).is_some_and(|q| q.running == 0) {
            t.keys.remove(key);
        }
        jobs
    }

    /// Jobs queued (not running) behind one sink key.
    pub(crate) fn queued(&self, tenant: &str, key: &J::Key) -> usize {
        self.tenants
            .get(tenant)
            .and_then(|t| t.keys.get(key))
            .map_or(0, |q| q.jobs.len())
    }
}

impl<J: Slotted> Drop for Slots<J> {
    /// A session that ends gives its room back to the process (its rows are requeued by
    /// the next term, its attempts were aborted).
    fn drop(&mut self) {
        self.end_claim();
        self.shared.rows.fetch_sub(self.rows, Ordering::Relaxed);
        self.shared.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        self.shared
            .running
            .fetch_sub(self.running, Ordering::Relaxed);
        mark(
            &mut self.wants_slots,
            &self.shared.wanting_slots,
            false,
            &self.shared,
        );
        mark(
            &mut self.wants_rows,
            &self.shared.wanting_rows,
            false,
            &self.shared,
        );
        self.shared.release();
    }
}

#[cfg(test)]
mod tests;
