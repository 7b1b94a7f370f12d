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
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.threads.max(1))
            .thread_name("testkit-receiver")
            .enable_all()
            .build()
            .map_err(TestkitError::io("build the receiver's runtime"))?;
        let listener = std::net::TcpListener::bind(addr)
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .map_err(TestkitError::io("bind the receiver"))?;
        let addr = listener
            .local_addr()
            .map_err(TestkitError::io("read the receiver's port"))?;
        let listener = {
            let _in_runtime = runtime.enter();
            tokio::net::TcpListener::from_std(listener)
                .map_err(TestkitError::io("register the receiver's socket"))?
        };
        let shared = Arc::new(Shared {
            record_bodies: options.record_bodies,
            book: Mutex::default(),
            arrived: Condvar::new(),
            arrived_async: Notify::new(),
        });
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

/// The answer decided on arrival, so that it can be recorded before it is carried out.
enum Plan {
    Answer {
        status: StatusCode,
        headers: Vec<(String, String)>,
        body: Bytes,
        delay: Duration,
    },
    Hang,
    Trickle {
        interval: Duration,
    },
}

impl Plan {
    /// The answer of `behavior` to the path's request number `n` (from 0) with body `sha`.
    fn new(behavior: &Behavior, n: u64, sha: &[u8; 32]) -> Plan {
        let ok = |delay| Plan::Answer {
            status: StatusCode::OK,
            headers: Vec::new(),
            body: Bytes::from_static(b"ok"),
            delay,
        };
        let bare = |status| Plan::Answer {
            status: status_code(status),
            headers: Vec::new(),
            body: Bytes::new(),
            delay: Duration::ZERO,
        };
        match behavior {
            Behavior::Ok => ok(Duration::ZERO),
            Behavior::Status(status) => bare(*status),
            Behavior::Sequence(replies) => {
                match usize::try_from(n).ok().and_then(|n| replies.get(n)) {
                    Some(reply) => Plan::Answer {
                        status: status_code(reply.status),
                        headers: reply.headers.clone(),
                        body: Bytes::from(reply.body.clone()),
                        delay: Duration::from_millis(reply.delay_ms),
                    },
                    None => ok(Duration::ZERO),
                }
            }
            Behavior::FailFraction {
                status,
                fraction,
                seed,
            } if draw(*seed, sha, n) < *fraction => bare(*status),
            Behavior::FailFraction { .. } => ok(Duration::ZERO),
            Behavior::FailBodies { status, sha256 }
                if sha256.iter().any(|h| *h == hex::encode(sha)) =>
            {
                bare(*status)
            }
            Behavior::FailBodies { .. } => ok(Duration::ZERO),
            Behavior::Hang => Plan::Hang,
            Behavior::Delay { ms } => ok(Duration::from_millis(*ms)),
            Behavior::Trickle { interval_ms } => Plan::Trickle {
                interval: Duration::from_millis((*interval_ms).max(1)),
            },
            Behavior::Redirect { status, location } => Plan::Answer {
                status: status_code(*status),
                headers: vec![("location".to_owned(), location.clone())],
                body: Bytes::new(),
                delay: Duration::ZERO,
            },
        }
    }

    /// The status recorded for this plan (0: never answered).
    fn status(&self) -> u16 {
        match self {
            Plan::Answer { status, .. } => status.as_u16(),
            Plan::Hang => 0,
            Plan::Trickle { .. } => 200,
        }
    }

    /// Carries the plan out; the request counts as in progress while `in_flight` lives.
    async fn run(self, in_flight: InFlight) -> Response {
        match self {
            Plan::Answer {
                status,
                headers,
                body,
                delay,
            } => {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let response = answer(status, headers, body);
                drop(in_flight);
                response
            }
            Plan::Hang => {
                let _in_flight = in_flight;
                std::future::pending().await
            }
            Plan::Trickle { interval } => {
                let mut ticks = tokio::time::interval(interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let trickle = Trickle {
                    ticks,
                    _in_flight: in_flight,
                };
                Response::new(Body::from_stream(FramedRead::new(
                    trickle,
                    BytesCodec::new(),
                )))
            }
        }
    }
}

/// A response with `status`, the valid ones of `headers` and `body`.
fn answer(status: StatusCode, headers: Vec<(String, String)>, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// An endless body yielding one `.` per tick of its interval.
struct Trickle {
    ticks: tokio::time::Interval,
    _in_flight: InFlight,
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.ticks.poll_tick(cx));
        buf.put_slice(b".");
        Poll::Ready(Ok(()))
    }
}

/// `status` as a [`StatusCode`], or 500 if HTTP cannot carry it.
fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A path as records and endpoints are keyed: without its leading `/`.
fn key(path: &str) -> &str {
    path.strip_prefix('/').unwrap_or(path)
}

/// A uniform draw in [0, 1) from the seed, the body's hash and the request number.
fn draw(seed: u64, sha: &[u8; 32], n: u64) -> f64 {
    let [a, b, c, d, e, f, g, h, ..] = *sha;
    let x =
        splitmix64(seed ^ splitmix64(u64::from_le_bytes([a, b, c, d, e, f, g, h]) ^ splitmix64(n)));
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// SplitMix64's finaliser: a cheap, well-mixed 64-bit hash.
fn splitmix64(x: u64) -> u64 {
    let x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;

    /// Generous bound for anything that should happen at once.
    const PATIENCE: Duration = Duration::from_secs(10);

    /// Writes one HTTP/1.1 request by hand (so the body can be any bytes) and returns the
    /// open connection without reading the answer.
    fn send(port: u16, path: &str, headers: &[(&str, &str)], body: &[u8]) -> TcpStream {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut head = format!(
            "POST /{path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            head += &format!("{name}: {value}\r\n");
        }
        stream.write_all(format!("{head}\r\n").as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        stream
    }

    /// Sends a request and reads the whole answer: its status and its raw text.
    fn call(port: u16, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
        let mut answer = Vec::new();
        send(port, path, headers, body)
            .read_to_end(&mut answer)
            .unwrap();
        let answer = String::from_utf8_lossy(&answer).into_owned();
        (answer[9..12].parse().unwrap(), answer)
    }

    #[test]
    fn records_the_exact_sha256_of_a_non_utf8_body() {
        let receiver = Receiver::start_with(ReceiverOptions {
            record_bodies: true,
            ..ReceiverOptions::default()
        })
        .unwrap();
        let body = [0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28, b'\n'];
        let (status, answer) = call(
            receiver.port(),
            "hooks/a/b?x=1",
            &[("X-Hook-Id", "h1")],
            &body,
        );
        assert_eq!(status, 200);
        assert!(answer.ends_with("ok"), "{answer}");
        let got = receiver.requests();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body_sha256, hex::encode(Sha256::digest(body)));
        assert_eq!(
            (got[0].body_len, got[0].body.as_deref()),
            (body.len(), Some(&body[..]))
        );
        assert_eq!(
            (got[0].path.as_str(), got[0].method.as_str(), got[0].status),
            ("hooks/a/b", "POST", 200)
        );
        assert_eq!(got[0].header("x-hook-id"), Some("h1"));
        assert!(got[0]
            .headers
            .contains(&("x-hook-id".to_owned(), "h1".to_owned())));
        assert_eq!(
            receiver.url("hooks/a/b"),
            format!("http://127.0.0.1:{}/hooks/a/b", receiver.port())
        );
    }

    #[test]
    fn bodies_are_not_kept_unless_asked() {
        let receiver = Receiver::start().unwrap();
        call(receiver.port(), "a", &[], b"{}");
        assert_eq!(receiver.requests()[0].body, None);
    }

    #[test]
    fn a_sequence_answers_500_then_200() {
        let receiver = Receiver::start().unwrap();
        receiver.set(
            "flaky",
            Behavior::Sequence(vec![Reply::status(500)
                .header("Retry-After", "7")
                .body("down")]),
        );
        let (first, text) = call(receiver.port(), "flaky", &[], b"");
        assert_eq!(first, 500);
        assert!(
            text.to_ascii_lowercase().contains("retry-after: 7") && text.ends_with("down"),
            "{text}"
        );
        assert_eq!(call(receiver.port(), "flaky", &[], b"").0, 200);
        let statuses: Vec<u16> = receiver
            .requests_for("/flaky")
            .iter()
            .map(|r| r.status)
            .collect();
        assert_eq!(statuses, [500, 200]);
    }

    #[test]
    fn a_redirect_answers_302_with_its_location() {
        let receiver = Receiver::start().unwrap();
        receiver.set(
            "old",
            Behavior::Redirect {
                status: 302,
                location: "http://example.test/new".into(),
            },
        );
        let (status, text) = call(receiver.port(), "old", &[], b"");
        assert_eq!(status, 302);
        assert!(
            text.to_ascii_lowercase()
                .contains("location: http://example.test/new"),
            "{text}"
        );
    }

    #[test]
    fn status_and_fail_fraction_answer_their_status() {
        let receiver = Receiver::start().unwrap();
        receiver.set("gone", Behavior::Status(410));
        receiver.set(
            "always",
            Behavior::FailFraction {
                status: 503,
                fraction: 1.0,
                seed: 1,
            },
        );
        receiver.set(
            "never",
            Behavior::FailFraction {
                status: 503,
                fraction: 0.0,
                seed: 1,
            },
        );
        assert_eq!(call(receiver.port(), "gone", &[], b"").0, 410);
        assert_eq!(call(receiver.port(), "always", &[], b"x").0, 503);
        assert_eq!(call(receiver.port(), "never", &[], b"x").0, 200);
    }

    #[test]
    fn fail_fraction_is_reproducible_and_close_to_its_fraction() {
        let statuses = || {
            let receiver = Receiver::start().unwrap();
            receiver.set(
                "half",
                Behavior::FailFraction {
                    status: 500,
                    fraction: 0.5,
                    seed: 42,
                },
            );
            (0..200)
                .map(|i| {
                    call(
                        receiver.port(),
                        "half",
                        &[],
                        format!("body {}", i % 20).as_bytes(),
                    )
                    .0
                })
                .collect::<Vec<_>>()
        };
        let first = statuses();
        assert_eq!(first, statuses());
        let failed = first.iter().filter(|&&s| s == 500).count();
        assert!((60..=140).contains(&failed), "{failed} of 200 failed");
    }

    #[test]
    fn a_hanging_endpoint_does_not_block_requests_on_another_path() {
        let receiver = Receiver::start().unwrap(); // one worker thread
        receiver.set("stuck", Behavior::Hang);
        let _hanging: Vec<TcpStream> = (0..20)
            .map(|_| send(receiver.port(), "stuck", &[], b""))
            .collect();
        assert!(receiver.wait_until(PATIENCE, |r| r.len() == 20));
        assert_eq!(call(receiver.port(), "fine", &[], b"").0, 200);
        assert_eq!(receiver.max_concurrency("stuck"), 20);
        assert!(receiver.requests_for("stuck").iter().all(|r| r.status == 0));
    }

    #[test]
    fn dropping_the_receiver_closes_hanging_and_trickling_connections() {
        let receiver = Receiver::start().unwrap();
        receiver.set("stuck", Behavior::Hang);
        receiver.set("slow", Behavior::Trickle { interval_ms: 1 });
        let mut stuck = send(receiver.port(), "stuck", &[], b"");
        let mut slow = send(receiver.port(), "slow", &[], b"");
        assert!(receiver.wait_until(PATIENCE, |r| r.len() == 2));
        drop(receiver);
        let mut sink = Vec::new();
        assert!(stuck.read_to_end(&mut sink).is_ok_and(|n| n == 0));
        // The trickle ends mid-body: the connection closes rather than timing out.
        let closed = slow.read_to_end(&mut sink);
        assert!(
            closed
                .as_ref()
                .map_or_else(|e| e.kind() != io::ErrorKind::WouldBlock, |_| true),
            "{closed:?}"
        );
    }

    #[test]
    fn a_trickle_sends_headers_then_one_byte_at_a_time() {
        let receiver = Receiver::start().unwrap();
        receiver.set("slow", Behavior::Trickle { interval_ms: 1 });
        let mut stream = send(receiver.port(), "slow", &[], b"");
        let mut seen = Vec::new();
        let mut chunk = [0; 64];
        while seen.iter().filter(|&&b| b == b'.').count() < 3 {
            let n = stream.read(&mut chunk).unwrap();
            assert_ne!(n, 0, "closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&seen);
        assert!(
            text.starts_with("HTTP/1.1 200") && text.contains("\r\n1\r\n.\r\n"),
            "{text}"
        );
        assert_eq!(receiver.requests_for("slow")[0].status, 200);
    }

    #[test]
    fn max_concurrency_counts_overlapping_delay_requests() {
        let receiver = Receiver::start().unwrap();
        call(receiver.port(), "quick", &[], b"");
        call(receiver.port(), "quick", &[], b"");
        // A minute-long delay keeps all three in progress until the receiver is dropped.
        receiver.set("slow", Behavior::Delay { ms: 60_000 });
        let _slow: Vec<TcpStream> = (0..3)
            .map(|_| send(receiver.port(), "slow", &[], b""))
            .collect();
        assert!(receiver.wait_until(PATIENCE, |r| r.len() == 5));
        assert_eq!(
            (
                receiver.max_concurrency("slow"),
                receiver.max_concurrency("quick")
            ),
            (3, 1)
        );
        assert_eq!(receiver.max_concurrency("never-called"), 0);
    }

    #[test]
    fn header_counts_reveal_duplicates_and_clear_forgets_them() {
        let receiver = Receiver::start().unwrap();
        for id in ["a", "a", "b"] {
            call(receiver.port(), "h", &[("Idempotency-Key", id)], b"");
        }
        let counts = receiver.header_counts("idempotency-key");
        assert_eq!(
            counts,
            HashMap::from([("a".to_owned(), 2), ("b".to_owned(), 1)])
        );
        receiver.clear();
        assert_eq!((receiver.count(), receiver.count_for("h")), (0, 0));
    }

    #[test]
    fn wait_until_returns_true_once_n_requests_arrived_and_false_on_timeout() {
        let receiver = Receiver::start().unwrap();
        let port = receiver.port();
        let sender =
            std::thread::spawn(move || (0..3).for_each(|_| drop(call(port, "x", &[], b""))));
        assert!(receiver.wait_until(PATIENCE, |r| r.len() >= 3));
        assert!(!receiver.wait_until(Duration::from_millis(50), |r| r.len() >= 4));
        sender.join().unwrap();
        assert_eq!(receiver.count_for("x"), 3);
    }

    #[tokio::test]
    async fn wait_until_async_wakes_a_current_thread_runtime() {
        let receiver = Receiver::start().unwrap();
        let port = receiver.port();
        let sender =
            std::thread::spawn(move || (0..2).for_each(|_| drop(call(port, "x", &[], b""))));
        assert!(receiver.wait_until_async(PATIENCE, |r| r.len() >= 2).await);
        assert!(
            !receiver
                .wait_until_async(Duration::from_millis(50), |r| r.len() >= 3)
                .await
        );
        sender.join().unwrap();
    }
}
