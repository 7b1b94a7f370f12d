//! The process-wide window the scheduler sessions of one worker share (issue 13), with no
//! I/O: the counters behind the global caps, and the fair share between sessions that
//! wait for room ([`fair_share`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The process-wide counters behind the global caps, shared by the sessions of every
/// partition a worker leads (issue 13). Each [`Slots`] adds what it holds and takes it
/// back (also when it is dropped with rows still held: a term that ended abruptly), so
/// the counters are always the sum over the live sessions. Room is shared fairly between
/// the sessions that want it: while another session waits for attempt slots (or window
/// rows), a session takes more only below its fair share, `ceil(cap / sessions waiting,
/// itself included)`; uncontended, a session may use the whole cap. A session that found
/// no room marks the window starved, and the next room freed by any session (or a session
/// that stops waiting) signals [`SharedWindow::freed`] so it asks again.
/// Attempt slots are taken atomically, so `dispatch.concurrency` is never exceeded; the
/// row and byte windows are checked when a claim is sent and held when it returns, so
/// claims of several partitions in flight together can pass them by up to one claim page
/// each (`dispatch.batch`).
#[derive(Debug)]
pub struct SharedWindow {
    pub(super) rows: AtomicUsize,
    pub(super) bytes: AtomicU64,
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
            running: AtomicUsize::new(0),
            wanting_slots: AtomicUsize::new(0),
            wanting_rows: AtomicUsize::new(0),
            starved: AtomicBool::new(false),
            freed: tokio::sync::watch::Sender::new(()),
        }
    }
}

impl SharedWindow {
    /// Rows held by every session of the process.
    pub fn rows(&self) -> usize {
        self.rows.load(Ordering::Relaxed)
    }
    /// Bytes held by every session of the process.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    /// Attempts running in every session of the process.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }
    /// Changes whenever room freed after a session found none (a watch never misses one).
    pub fn freed(&self) -> tokio::sync::watch::Receiver<()> {
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
    /// Sessions waiting for attempt slots (issue 13's fair share).
    pub fn wanting_slots(&self) -> usize {
        self.wanting_slots.load(Ordering::Relaxed)
    }
    /// Sessions waiting for window rows (issue 13's fair share).
    pub fn wanting_rows(&self) -> usize {
        self.wanting_rows.load(Ordering::Relaxed)
    }
    pub(super) fn starve(&self) {
        self.starved.store(true, Ordering::Relaxed);
    }
    pub(super) fn release(&self) {
        if self.starved.swap(false, Ordering::Relaxed) {
            self.freed.send_replace(());
        }
    }
}

/// The most one session may hold of `cap` while `others` sessions wait for it too:
/// `ceil(cap / (others + 1))`, at least 1 (issue 13: the partitions one worker leads
/// share its caps fairly).
pub fn fair_share(cap: usize, others: usize) -> usize {
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
