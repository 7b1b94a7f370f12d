//! The process-wide window the scheduler sessions of one worker share, with no
//! I/O: the counters behind the global caps, and the fair share between sessions that
//! wait for room ([`fair_share`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The process-wide counters behind the global caps, shared by the sessions of every
/// partition a worker leads. Each [`Slots`] adds what it holds and takes it
/// back (also when it is dropped with rows still held: a term that ended abruptly), so
/// the counters are always the sum over the live sessions. Room is shared fairly between
/// the sessions that want it: while another session waits for attempt slots (or window
/// rows), a session takes more only below its fair share, `ceil(cap / sessions waiting,
/// itself included)`; uncontended, a session may use the whole cap. A session that found
/// no room marks the window starved, and the next room freed by any session (or a session
/// that stops waiting) signals [`SharedWindow::freed`] so it asks again.
/// Attempt slots are taken atomically, so `dispatch.concurrency` is never exceeded; a claim
/// reserves its rows and the byte room left before it is sent (claims of several
/// partitions in flight together each took the whole room, 1.5–3.1× the byte window with
/// four partitions), its rows' holds draw on that reservation, and what they did not use
/// goes back when the claim's answer is handled. The counters include reservations; the
/// getters ([`SharedWindow::rows`], [`SharedWindow::bytes`]) report what is held.
#[derive(Debug)]
pub(crate) struct SharedWindow {
    /// Rows held plus rows reserved by claims in flight.
    pub(super) rows: AtomicUsize,
    /// Bytes held plus bytes reserved by claims in flight.
    pub(super) bytes: AtomicU64,
    /// The reserved part of `rows`.
    pub(super) reserved_rows: AtomicUsize,
    /// The reserved part of `bytes`.
    pub(super) reserved_bytes: AtomicU64,
    pub(super) running: AtomicUsize,
    /// Sessions denied an attempt slot with jobs queued, not yet served.
    pub(super) wanting_slots: AtomicUsize,
    /// Sessions denied claim room (window rows), not yet served.
    pub(super) wanting_rows: AtomicUsize,
    starved: AtomicBool,
    freed: tokio::sync::watch::Sender<()>,
}

impl Default for SharedWindow {
    fn default() -> Self {
        SharedWindow {
            rows: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            reserved_rows: AtomicUsize::new(0),
            reserved_bytes: AtomicU64::new(0),
            running: AtomicUsize::new(0),
            wanting_slots: AtomicUsize::new(0),
            wanting_rows: AtomicUsize::new(0),
            starved: AtomicBool::new(false),
            freed: tokio::sync::watch::Sender::new(()),
        }
    }
}

impl SharedWindow {
    /// Rows held by every session of the process (claimed, not yet settled).
    pub(crate) fn rows(&self) -> usize {
        self.rows
            .load(Ordering::Relaxed)
            .saturating_sub(self.reserved_rows.load(Ordering::Relaxed))
    }
    /// Bytes held by every session of the process.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
            .load(Ordering::Relaxed)
            .saturating_sub(self.reserved_bytes.load(Ordering::Relaxed))
    }
    /// Rows held or reserved: what the row window's room is counted against.
    pub(super) fn taken_rows(&self) -> usize {
        self.rows.load(Ordering::Relaxed)
    }
    /// Bytes held or reserved: what the byte window's room is counted against.
    pub(super) fn taken_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    /// Attempts running in every session of the process.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }
    /// Changes whenever room freed after a session found none (a watch never misses one).
    pub(crate) fn freed(&self) -> tokio::sync::watch::Receiver<()> {
        self.freed.subscribe()
    }
    /// Take one of `cap` slots if one is free.
    pub(super) fn take_slot(&self, cap: usize) -> bool {
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                (r < cap).then_some(r + 1)
            })
            .is_ok()
    }
    /// Sessions waiting for attempt slots (their fair share).
    pub(crate) fn wanting_slots(&self) -> usize {
        self.wanting_slots.load(Ordering::Relaxed)
    }
    /// Sessions waiting for window rows (their fair share).
    pub(crate) fn wanting_rows(&self) -> usize {
        self.wanting_rows.load(Ordering::Relaxed)
    }
    pub(super) fn starve(&self) {
        self.starved.store(true, Ordering::Relaxed);
    }
    /// Wake every session waiting for room, starved or about to be: a claim's reservation
    /// going back may race a session that is just finding no room.
    pub(super) fn notify(&self) {
        self.starved.store(false, Ordering::Relaxed);
        self.freed.send_replace(());
    }
    pub(super) fn release(&self) {
        if self.starved.swap(false, Ordering::Relaxed) {
            self.freed.send_replace(());
        }
    }
}

/// The most one session may hold of `cap` while `others` sessions wait for it too:
/// `ceil(cap / (others + 1))`, at least 1 (the partitions one worker leads
/// share its caps fairly).
pub(crate) fn fair_share(cap: usize, others: usize) -> usize {
    cap.div_ceil(others + 1).max(1)
}

/// Set `flag` (this session's "waiting" mark) to `on`, keeping `count` (the sessions
/// waiting) in step; a session that stops waiting wakes the others, whose share grows.
pub(super) fn mark(flag: &mut bool, count: &AtomicUsize, on: bool, shared: &SharedWindow) {
    if *flag == on {
        return;
    }
    *flag = on;
    if on {
        count.fetch_add(1, Ordering::Relaxed);
    } else {
        count.fetch_sub(1, Ordering::Relaxed);
        shared.release();
    }
}
