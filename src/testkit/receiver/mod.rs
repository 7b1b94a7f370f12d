//! A local webhook receiver that records every request and answers each endpoint as told.
//!
//! It is the outside observer of delivery tests: duplicates, ordering and concurrency caps
//! are asserted on what it saw, not on the worker's own counters. Any method on any path is
//! accepted; a path answers `200 ok` until [`Receiver::set`] gives it another [`Behavior`].
//!
//! The hot path (one record pushed under a mutex, no logging) stays cheap enough for the
//! benchmark, where it shares two cores with Redis and the worker.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use axum::serve::ListenerExt;
use axum::Router;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{oneshot, Notify};
// `codec` is enabled through fred, which always turns it on; tokio-util's `io` is not.
use tokio_util::codec::{BytesCodec, FramedRead};

use super::TestkitError;

mod plan;
use plan::*;

/// Longest wait [`Receiver::wait_until`] honours (a day), so `Duration::MAX` cannot overflow.
const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);
/// How long dropping a [`Receiver`] waits for its worker threads to exit.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// How an endpoint answers.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Behavior {
    /// `200` with body `ok`.
    #[default]
    Ok,
    /// Always this status, empty body.
    Status(u16),
    /// The n-th request to the path (counted from the [`Receiver::set`] call) gets the n-th
    /// reply; once the list is used up, `200 ok`.
    Sequence(Vec<Reply>),
    /// Fails with `status` for about `fraction` (0.0–1.0) of requests, `200 ok` otherwise.
    /// The draw hashes `seed`, the body's SHA-256 and the path's request count, so a run is
    /// reproducible for the same arrival order, and a retry of the same body draws afresh and
    /// can succeed.
    FailFraction {
        /// Status of a failed request.
        status: u16,
        /// Share of requests that fail, 0.0 (none) to 1.0 (all).
        fraction: f64,
        /// Seed of the draw: another seed fails other requests.
        seed: u64,
    },
    /// Fails with `status` every request whose body's SHA-256 (hex) is listed, `200 ok`
    /// otherwise: a poison hook among good ones.
    FailBodies {
        /// Status of a failed request.
        status: u16,
        /// SHA-256 (lowercase hex) of the bodies to fail.
        sha256: Vec<String>,
    },
    /// Never answers; the connection stays open until the client gives up or the receiver is
    /// dropped. Recorded with status 0.
    Hang,
    /// `200 ok` after `ms` milliseconds.
    Delay {
        /// Delay before the answer, in milliseconds.
        ms: u64,
    },
    /// `200` headers at once, then one body byte every `interval_ms` milliseconds (at least
    /// 1), forever: a response that never completes although bytes keep flowing.
    Trickle {
        /// Pause between two body bytes, in milliseconds.
        interval_ms: u64,
    },
    /// A redirect with this status (301, 302, 307, 308…) to `location`.
    Redirect {
        /// The redirect status.
        status: u16,
        /// The `Location` header's value.
        location: String,
    },
}

/// One scripted answer of a [`Behavior::Sequence`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status; an invalid one (outside 100–999) is answered as 500.
    pub status: u16,
    /// Extra response headers; a name or value HTTP rejects is left out.
    pub headers: Vec<(String, String)>,
    /// The response body.
    pub body: String,
    /// Delay before answering, in milliseconds.
    pub delay_ms: u64,
}

impl Reply {
    /// A reply with this status, no extra header, an empty body and no delay.
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay_ms: 0,
        }
    }

    /// Adds a response header (e.g. `Retry-After`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the response body.
    pub fn body(mut self, body: impl Into<String>) -> Reply {
        self.body = body.into();
        self
    }

    /// Delays the answer by `ms` milliseconds.
    pub fn delay(mut self, ms: u64) -> Reply {
        self.delay_ms = ms;
        self
    }
}

/// One request as the receiver saw it, recorded on arrival (before any delay).
#[derive(Debug, Clone)]
pub struct Received {
    /// The URI path without its leading `/` and without the query, as in [`Receiver::url`].
    pub path: String,
    /// The method, e.g. `POST`.
    pub method: String,
    /// Every header in arrival order, names lowercased, values decoded lossily as UTF-8.
    pub headers: Vec<(String, String)>,
    /// SHA-256 of the body, lowercase hex.
    pub body_sha256: String,
    /// Body length in bytes.
    pub body_len: usize,
    /// The body itself, only with [`ReceiverOptions::record_bodies`].
    pub body: Option<Bytes>,
    /// When it arrived (after its body was read).
    pub at: Instant,
    /// Requests in progress on this path when it arrived, itself included.
    pub concurrent: usize,
    /// The status it was (or is being) answered with; 0 for [`Behavior::Hang`].
    pub status: u16,
}

impl Received {
    /// The first value of `name` (any case) among its headers.
    pub fn header(&self, name: &str) -> Option<&str> {
        let (_, value) = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        Some(value)
    }
}

/// Options for [`Receiver::start_with`].
#[derive(Debug, Clone)]
pub struct ReceiverOptions {
    /// Keep every body in [`Received::body`]; off by default, when only its SHA-256 and
    /// length are kept, so a long benchmark does not hold every body in memory.
    pub record_bodies: bool,
    /// Worker threads of the receiver's own tokio runtime (at least 1; default 1).
    pub threads: usize,
}

impl Default for ReceiverOptions {
    fn default() -> Self {
        ReceiverOptions {
            record_bodies: false,
            threads: 1,
        }
    }
}

/// A webhook receiver on `127.0.0.1`, served from its own thread and tokio runtime. Dropping
/// it stops the server and closes every connection, hanging and trickling ones included.
#[derive(Debug)]
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Sending (or dropping) it ends the server thread's `block_on`.
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// What the request handlers and the [`Receiver`] handle share.
#[derive(Debug)]
struct Shared {
    record_bodies: bool,
    book: Mutex<Book>,
    /// Signalled on every new record, for [`Receiver::wait_until`].
    arrived: Condvar,
    /// Signalled on every new record, for [`Receiver::wait_until_async`].
    arrived_async: Notify,
}

/// The records and per-path state, under one lock so that arrival order, the n-th request
/// of a [`Behavior::Sequence`] and [`Received::concurrent`] all agree.
#[derive(Debug, Default)]
struct Book {
    records: Vec<Received>,
    endpoints: HashMap<String, Endpoint>,
}

/// One path's behaviour and counters.
#[derive(Debug, Default)]
struct Endpoint {
    behavior: Behavior,
    /// Requests since the behaviour was set: the index of the next one.
    arrivals: u64,
    /// Requests being answered now; shared with their [`InFlight`] guards.
    in_flight: Arc<AtomicUsize>,
}

/// Counts a request as in progress on its path until dropped: when its answer is returned,
/// or for a trickle when its body is dropped.
#[derive(Debug)]
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Receiver {
    /// Starts a receiver with [`ReceiverOptions::default`].
    pub fn start() -> Result<Receiver, TestkitError> {
        Self::start_with(ReceiverOptions::default())
    }

    /// Binds a free port on `127.0.0.1` and serves it from a new thread; returns once bound.
    pub fn start_with(options: ReceiverOptions) -> Result<Receiver, TestkitError> {
        Self::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), options)
    }

    /// Binds `addr` (port 0 picks a free one) and serves it from a new thread; returns once
    /// bound. `ankusa receiver` uses it to listen on a container's address.
    pub fn bind(addr: SocketAddr, options: ReceiverOptions) -> Result<Receiver, TestkitError> {
        Receiver::bind_with(addr, options, Vec::new())
    }

    /// [`Receiver::bind`] with `behaviors` set ([`Receiver::set`]) before the first request
    /// is served, so no request can meet a path before its behavior (`ankusa receiver
    /// --fail`).
    pub fn bind_with(
        addr: SocketAddr,
        options: ReceiverOptions,
        behaviors: Vec<(String, Behavior)>,
    ) -> Result<Receiver, TestkitError> {
        // Bound before the runtime exists: a runtime dropped on an error path inside an async
        // caller (the CLI's `ankusa receiver`) would panic.
        // Port 0 on loopback: a port no other test of this process had (see `free_port`).
        let bound = if addr == SocketAddr::from((Ipv4Addr::LOCALHOST, 0)) {
            super::redis::listen_loopback()
        } else {
            std::net::TcpListener::bind(addr)
        };
        let listener = bound
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .map_err(TestkitError::io("bind the receiver"))?;
        let addr = listener
            .local_addr()
            .map_err(TestkitError::io("read the receiver's port"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.threads.max(1))
            .thread_name("testkit-receiver")
            .enable_all()
            .build()
            .map_err(TestkitError::io("build the receiver's runtime"))?;
        let registered = {
            let _in_runtime = runtime.enter();
            tokio::net::TcpListener::from_std(listener)
        };
        let listener = match registered {
            Ok(listener) => listener,
            Err(e) => {
                runtime.shutdown_background();
                return Err(TestkitError::io("register the receiver's socket")(e));
            }
        };
        let shared = Arc::new(Shared {
            record_bodies: options.record_bodies,
            book: Mutex::default(),
            arrived: Condvar::new(),
            arrived_async: Notify::new(),
        });
        for (path, behavior) in behaviors {
            let mut book = shared.lock();
            book.endpoints
                .entry(key(&path).to_owned())
                .or_default()
                .behavior = behavior;
        }
        let app = Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::disable())
            .with_state(Arc::clone(&shared));
        let (shutdown, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("testkit-receiver".to_owned())
            .spawn(move || {
                // Small answers must not wait for Nagle's algorithm.
                let listener = listener.tap_io(|tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                runtime.block_on(async move {
                    tokio::select! {
                        _ = axum::serve(listener, app).into_future() => {}
                        _ = stopped => {}
                    }
                });
                // Shutting the runtime down drops every connection task, which ends hanging
                // and trickling requests and closes their sockets.
                runtime.shutdown_timeout(SHUTDOWN_TIMEOUT);
            })
            .map_err(TestkitError::io("spawn the receiver's thread"))?;
        Ok(Receiver {
            addr,
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT/<path>`; `path` may contain `/` and needs no leading one.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.addr, key(path))
    }

    /// The TCP port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Makes `path` (exact match, leading `/` optional) answer with `behavior` from its next
    /// request on, and restarts its request count, so a [`Behavior::Sequence`] begins with
    /// its first reply.
    pub fn set(&self, path: &str, behavior: Behavior) {
        let mut book = self.shared.lock();
        let endpoint = book.endpoints.entry(key(path).to_owned()).or_default();
        endpoint.behavior = behavior;
        endpoint.arrivals = 0;
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Received> {
        self.shared.lock().records.clone()
    }

    /// The requests to `path` so far, in arrival order.
    pub fn requests_for(&self, path: &str) -> Vec<Received> {
        let path = key(path);
        self.shared
            .lock()
            .records
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// How many requests arrived.
    pub fn count(&self) -> usize {
        self.shared.lock().records.len()
    }

    /// How many requests arrived on `path`.
    pub fn count_for(&self, path: &str) -> usize {
        let path = key(path);
        self.shared
            .lock()
            .records
            .iter()
            .filter(|r| r.path == path)
            .count()
    }

    /// The most requests ever in progress at once on `path` (0 if none arrived): what a
    /// per-endpoint concurrency cap is checked against.
    pub fn max_concurrency(&self, path: &str) -> usize {
        let path = key(path);
        let book = self.shared.lock();
        book.records
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.concurrent)
            .max()
            .unwrap_or(0)
    }

    /// For each value of `header` (any case), how many requests carried it (counting the
    /// first value in each request): a count above 1 for an idempotency key is a duplicate.
    pub fn header_counts(&self, header: &str) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for record in &self.shared.lock().records {
            if let Some(value) = record.header(header) {
                *counts.entry(value.to_owned()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Forgets every record; behaviours and request counts are kept.
    pub fn clear(&self) {
        self.shared.lock().records.clear();
    }

    /// Returns every record and forgets them in one step (no request falls between the
    /// two); behaviours and request counts are kept.
    pub fn take(&self) -> Vec<Received> {
        std::mem::take(&mut self.shared.lock().records)
    }

    /// Blocks until `pred` holds for the records (checked now and after each new request) or
    /// `timeout` passes; returns whether it held. `pred` runs under the records' lock, so it
    /// should be quick.
    pub fn wait_until(&self, timeout: Duration, pred: impl Fn(&[Received]) -> bool) -> bool {
        let deadline = Instant::now() + timeout.min(MAX_WAIT);
        let mut book = self.shared.lock();
        loop {
            if pred(&book.records) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            book = self
                .shared
                .arrived
                .wait_timeout(book, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// [`Receiver::wait_until`] for async tests: waits without blocking the caller's runtime
    /// (which needs its time driver enabled, as `#[tokio::test]` has).
    pub async fn wait_until_async(
        &self,
        timeout: Duration,
        pred: impl Fn(&[Received]) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout.min(MAX_WAIT);
        loop {
            let arrived = self.shared.arrived_async.notified();
            tokio::pin!(arrived);
            // Registered before the check, so a request landing in between still wakes us.
            arrived.as_mut().enable();
            if pred(&self.shared.lock().records) {
                return true;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return pred(&self.shared.lock().records);
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    /// The book, even if a panicking test poisoned its lock.
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Decides the answer to a request on `path`, records it and wakes the waiters.
    fn arrive(&self, path: &str, sha: &[u8; 32], mut received: Received) -> (Plan, InFlight) {
        let answer = {
            let mut book = self.lock();
            let book = &mut *book;
            let endpoint = match book.endpoints.get_mut(path) {
                Some(endpoint) => endpoint,
                None => book.endpoints.entry(path.to_owned()).or_default(),
            };
            let plan = Plan::new(&endpoint.behavior, endpoint.arrivals, sha);
            endpoint.arrivals += 1;
            received.concurrent = endpoint.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
            received.status = plan.status();
            book.records.push(received);
            (plan, InFlight(Arc::clone(&endpoint.in_flight)))
        };
        self.arrived.notify_all();
        self.arrived_async.notify_waiters();
        answer
    }
}

/// The one handler: reads the whole body, records the request, then answers as planned.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let at = Instant::now();
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return answer(StatusCode::BAD_REQUEST, Vec::new(), Bytes::new());
    };
    let sha: [u8; 32] = Sha256::digest(&body).into();
    let path = key(parts.uri.path());
    let received = Received {
        path: path.to_owned(),
        method: parts.method.as_str().to_owned(),
        headers: (parts.headers.iter())
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body_sha256: hex::encode(sha),
        body_len: body.len(),
        body: shared.record_bodies.then(|| body.clone()),
        at,
        concurrent: 0,
        status: 0,
    };
    let (plan, in_flight) = shared.arrive(path, &sha, received);
    plan.run(in_flight).await
}

#[cfg(test)]
mod tests;
