//! The per-destination batcher of a batching sink.
//!
//! One batcher task runs per destination (an SQS queue with one client configuration, a
//! Pub/Sub topic). Attempts submit one entry each and wait for their own answer. The task:
//!
//! 1. queues entries per tenant and forms each request round-robin across tenants, so one
//!    tenant's flood cannot fill every request while others wait;
//! 2. sends a request when a full one is queued (`max_entries`, or the next entry would pass
//!    `max_bytes`), or when the oldest queued entry has waited `linger`;
//! 3. keeps at most `concurrency` requests in flight (`dispatch.sink_concurrency` counts
//!    requests here, not entries: that is what lets a batch reach 10 with a cap of 8);
//! 4. answers every entry with its own result from the request's per-entry results, so a
//!    partial failure retries only the failed entries.
//!
//! An entry whose attempt timed out (its reply receiver is gone) is dropped when a request is
//! formed, never sent late. [`Batcher::withdraw`] hands back the queued, unsent entries of one
//! sink key (its breaker opened) so they are parked instead of sent. Bounding how many entries
//! a tenant may have here is the caller's job (the scheduler stages the rest, untimed).

use super::{AttemptError, BatchMessage, ErrorKind};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The request limits of one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries per request (SQS 10, Pub/Sub 1 000).
    pub max_entries: usize,
    /// Bytes per request, as the module measures [`BatchMessage::size`] (SQS 262 144).
    pub max_bytes: usize,
    /// Longest wait of a queued entry for a fuller request.
    pub linger: Duration,
}

/// Sends one request of a destination.
pub trait Transport: Send + Sync + 'static {
    /// Send `batch` as one request; exactly one result per message, in order. A failure of
    /// the whole request is that failure repeated for every message.
    fn send(&self, batch: Vec<BatchMessage>) -> BoxFuture<Vec<Result<(), AttemptError>>>;
}

/// The answer to one submitted entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The request carrying the entry answered this for it.
    Done(Result<(), AttemptError>),
    /// Taken back unsent by [`Batcher::withdraw`]: no attempt was spent.
    Withdrawn,
}

/// One entry handed to a batcher.
#[derive(Debug)]
pub struct Submission {
    /// The tenant, for round-robin batch forming.
    pub tenant: Arc<str>,
    /// The sink key's hash, for [`Batcher::withdraw`].
    pub key: u64,
    /// The message.
    pub msg: BatchMessage,
    /// The attempt's deadline: a request is abandoned once every entry in it is past its own.
    pub deadline: Instant,
    /// Where the answer goes.
    pub reply: oneshot::Sender<Reply>,
}

/// The batcher's task has ended; nothing more can be submitted to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the batcher has stopped")]
pub struct BatcherGone;

enum Command {
    Submit(Submission),
    Withdraw(u64),
}

/// A handle on one destination's batcher task; cheap to clone. The task ends when every
/// handle is dropped and its queue is empty.
#[derive(Debug, Clone)]
pub struct Batcher {
    tx: mpsc::UnboundedSender<Command>,
}

impl Batcher {
    /// Start the task of one destination. `module` labels metrics; `concurrency` is read
    /// before every request, so a reconfigure applies at once.
    pub fn spawn(
        module: &'static str,
        transport: Arc<dyn Transport>,
        limits: Limits,
        concurrency: Arc<AtomicUsize>,
    ) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(module, transport, limits, concurrency, rx));
        Batcher { tx }
    }

    /// Queue one entry. Errors: [`BatcherGone`] when the task has ended (the entry's reply
    /// sender is dropped with it).
    pub fn submit(&self, s: Submission) -> Result<(), BatcherGone> {
        self.tx.send(Command::Submit(s)).map_err(|_| BatcherGone)
    }

    /// Answer every queued, unsent entry of sink key `key` with [`Reply::Withdrawn`].
    pub fn withdraw(&self, key: u64) {
        let _ = self.tx.send(Command::Withdraw(key));
    }
}

/// Entries waiting for a request, per tenant, with the round-robin line of tenants.
#[derive(Default)]
struct Queue {
    module: &'static str,
    tenants: HashMap<Arc<str>, VecDeque<Submission>>,
    line: VecDeque<Arc<str>>,
    len: usize,
    bytes: usize,
    /// When the oldest queued entry arrived (approximately, after a partial flush).
    since: Option<Instant>,
}

impl Queue {
    fn push(&mut self, s: Submission) {
        metrics::gauge!("ankusa_batcher_queued", "module" => self.module).increment(1.0);
        self.len += 1;
        self.bytes += s.msg.size;
        self.since.get_or_insert_with(Instant::now);
        let q = self.tenants.entry(s.tenant.clone()).or_default();
        if q.is_empty() {
            self.line.push_back(s.tenant.clone());
        }
        q.push_back(s);
    }

    fn withdraw(&mut self, key: u64) {
        for q in self.tenants.values_mut() {
            let mut kept = VecDeque::with_capacity(q.len());
            for s in q.drain(..) {
                if s.key == key {
                    metrics::gauge!("ankusa_batcher_queued", "module" => self.module)
                        .decrement(1.0);
                    self.len -= 1;
                    self.bytes -= s.msg.size;
                    let _ = s.reply.send(Reply::Withdrawn);
                } else {
                    kept.push_back(s);
                }
            }
            *q = kept;
        }
        self.tenants.retain(|_, q| !q.is_empty());
        let tenants = &self.tenants;
        self.line.retain(|t| tenants.contains_key(t));
        if self.len == 0 {
            self.since = None;
        }
    }

    /// Whether a request should leave now.
    fn ready(&self, limits: &Limits, now: Instant, closing: bool) -> bool {
        self.len > 0
            && (closing
                || self.len >= limits.max_entries
                || self.bytes >= limits.max_bytes
                || self.since.is_some_and(|s| now >= s + limits.linger))
    }

    /// Take one request's entries: one per tenant per round, while they fit.
    fn form(&mut self, limits: &Limits) -> Vec<Submission> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut misses = 0;
        while batch.len() < limits.max_entries && misses < self.line.len() {
            let Some(t) = self.line.pop_front() else {
                break;
            };
            let Some(q) = self.tenants.get_mut(&t) else {
                continue;
            };
            // An entry whose attempt gave up is dropped, never sent late.
            while q.front().is_some_and(|s| s.reply.is_closed()) {
                if let Some(s) = q.pop_front() {
                    metrics::gauge!("ankusa_batcher_queued", "module" => self.module)
                        .decrement(1.0);
                    self.len -= 1;
                    self.bytes -= s.msg.size;
                }
            }
            let Some(head) = q.front() else {
                self.tenants.remove(&t);
                continue;
            };
            if !batch.is_empty() && bytes + head.msg.size > limits.max_bytes {
                self.line.push_back(t);
                misses += 1;
                continue;
            }
            misses = 0;
            let Some(s) = q.pop_front() else { continue };
            metrics::gauge!("ankusa_batcher_queued", "module" => self.module).decrement(1.0);
            self.len -= 1;
            self.bytes -= s.msg.size;
            bytes += s.msg.size;
            batch.push(s);
            if q.is_empty() {
                self.tenants.remove(&t);
            } else {
                self.line.push_back(t);
            }
        }
        self.since = (self.len > 0).then(Instant::now);
        batch
    }
}

async fn run(
    module: &'static str,
    transport: Arc<dyn Transport>,
    limits: Limits,
    concurrency: Arc<AtomicUsize>,
    mut rx: mpsc::UnboundedReceiver<Command>,
) {
    let mut queue = Queue {
        module,
        ..Queue::default()
    };
    let mut inflight: JoinSet<()> = JoinSet::new();
    let mut closing = false;
    loop {
        let now = Instant::now();
        while inflight.len() < concurrency.load(Ordering::Relaxed).max(1)
            && queue.ready(&limits, now, closing)
        {
            let batch = queue.form(&limits);
            if batch.is_empty() {
                continue;
            }
            inflight.spawn(send(module, transport.clone(), batch));
        }
        if closing && queue.len == 0 && inflight.is_empty() {
            return;
        }
        let linger_at = queue
            .since
            .map(|s| s + limits.linger)
            .filter(|_| queue.len > 0 && inflight.len() < concurrency.load(Ordering::Relaxed));
        tokio::select! {
            cmd = rx.recv(), if !closing => match cmd {
                Some(Command::Submit(s)) => queue.push(s),
                Some(Command::Withdraw(key)) => queue.withdraw(key),
                None => closing = true,
            },
            Some(_) = inflight.join_next(), if !inflight.is_empty() => {}
            _ = tokio::time::sleep_until(linger_at.unwrap_or(now)), if linger_at.is_some() => {}
        }
        // Take every command already queued before forming the next request.
        while !closing {
            match rx.try_recv() {
                Ok(Command::Submit(s)) => queue.push(s),
                Ok(Command::Withdraw(key)) => queue.withdraw(key),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => closing = true,
            }
        }
    }
}

/// One request: send, then answer every entry with its own result. The request is abandoned
/// (and every entry answered as timed out) once the last entry's deadline has passed.
async fn send(module: &'static str, transport: Arc<dyn Transport>, batch: Vec<Submission>) {
    let started = std::time::Instant::now();
    let deadline = batch.iter().map(|s| s.deadline).max();
    let n = batch.len();
    let bytes: usize = batch.iter().map(|s| s.msg.size).sum();
    let mut replies = Vec::with_capacity(n);
    let mut msgs = Vec::with_capacity(n);
    for s in batch {
        replies.push(s.reply);
        msgs.push(s.msg);
    }
    metrics::histogram!("ankusa_batch_entries", "module" => module).record(n as f64);
    metrics::histogram!("ankusa_batch_bytes", "module" => module).record(bytes as f64);
    let fut = transport.send(msgs);
    let results = match deadline {
        Some(d) => tokio::time::timeout_at(d, fut).await.ok(),
        None => Some(fut.await),
    };
    let outcome = match &results {
        None => "timeout",
        Some(r) if r.iter().all(|x| x.is_ok()) => "ok",
        Some(r) if r.iter().all(|x| x.is_err()) => "error",
        Some(_) => "partial",
    };
    metrics::counter!("ankusa_batch_requests_total", "module" => module, "outcome" => outcome)
        .increment(1);
    metrics::histogram!("ankusa_batch_request_duration_seconds", "module" => module)
        .record(started.elapsed().as_secs_f64());
    let mut results = results.unwrap_or_default().into_iter();
    for reply in replies {
        let r = results.next().unwrap_or_else(|| {
            Err(AttemptError::Retry {
                error: format!(
                    "{module} request abandoned after {} ms",
                    started.elapsed().as_millis()
                ),
                retry_after: None,
                kind: ErrorKind::Other,
            })
        });
        let _ = reply.send(Reply::Done(r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records every request's entries (by body) and answers per a rule.
    struct Recorder {
        requests: Mutex<Vec<Vec<String>>>,
        fail: fn(&str) -> bool,
        gate: Option<Arc<tokio::sync::Semaphore>>,
    }

    impl Transport for Recorder {
        fn send(&self, batch: Vec<BatchMessage>) -> BoxFuture<Vec<Result<(), AttemptError>>> {
            let bodies: Vec<String> = batch
                .iter()
                .map(|m| String::from_utf8_lossy(&m.body).into_owned())
                .collect();
            self.requests.lock().unwrap().push(bodies.clone());
            let fail = self.fail;
            let gate = self.gate.clone();
            Box::pin(async move {
                if let Some(g) = gate {
                    let _p = g.acquire().await;
                }
                bodies
                    .iter()
                    .map(|b| {
                        if fail(b) {
                            Err(AttemptError::permanent(
                                ErrorKind::Other,
                                format!("bad {b}"),
                            ))
                        } else {
                            Ok(())
                        }
                    })
                    .collect()
            })
        }
    }

    fn msg(body: &str, size: usize) -> BatchMessage {
        BatchMessage {
            body: bytes::Bytes::from(body.to_string()),
            attributes: Vec::new(),
            group: None,
            dedup: None,
            size,
        }
    }

    fn submit(
        b: &Batcher,
        tenant: &str,
        key: u64,
        body: &str,
        size: usize,
    ) -> oneshot::Receiver<Reply> {
        let (tx, rx) = oneshot::channel();
        b.submit(Submission {
            tenant: tenant.into(),
            key,
            msg: msg(body, size),
            deadline: Instant::now() + Duration::from_secs(30),
            reply: tx,
        })
        .unwrap();
        rx
    }

    fn limits() -> Limits {
        Limits {
            max_entries: 10,
            max_bytes: 1000,
            linger: Duration::from_millis(20),
        }
    }

    #[tokio::test]
    async fn entries_go_out_in_requests_of_at_most_ten_and_each_gets_its_own_answer() {
        let rec = Arc::new(Recorder {
            requests: Mutex::new(Vec::new()),
            fail: |b| b.ends_with('7'),
            gate: None,
        });
        let b = Batcher::spawn("test", rec.clone(), limits(), Arc::new(AtomicUsize::new(8)));
        let rxs: Vec<_> = (0..25)
            .map(|i| submit(&b, "t", 1, &format!("m{i}"), 10))
            .collect();
        let mut failed = Vec::new();
        for (i, rx) in rxs.into_iter().enumerate() {
            match rx.await.unwrap() {
                Reply::Done(Ok(())) => {}
                Reply::Done(Err(_)) => failed.push(i),
                Reply::Withdrawn => panic!("not withdrawn"),
            }
        }
        assert_eq!(failed, vec![7, 17]);
        let sizes: Vec<usize> = rec.requests.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![10, 10, 5]);
    }

    #[tokio::test]
    async fn a_request_never_passes_the_byte_limit() {
        let rec = Arc::new(Recorder {
            requests: Mutex::new(Vec::new()),
            fail: |_| false,
            gate: None,
        });
        let b = Batcher::spawn("test", rec.clone(), limits(), Arc::new(AtomicUsize::new(1)));
        let rxs: Vec<_> = (0..10)
            .map(|i| submit(&b, "t", 1, &format!("m{i}"), 300))
            .collect();
        for rx in rxs {
            assert_eq!(rx.await.unwrap(), Reply::Done(Ok(())));
        }
        let sizes: Vec<usize> = rec.requests.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            vec![3, 3, 3, 1],
            "3 × 300 bytes fit in 1000, 4 do not"
        );
    }

    #[tokio::test]
    async fn requests_alternate_tenants_and_withdrawn_entries_are_never_sent() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let rec = Arc::new(Recorder {
            requests: Mutex::new(Vec::new()),
            fail: |_| false,
            gate: Some(gate.clone()),
        });
        let b = Batcher::spawn("test", rec.clone(), limits(), Arc::new(AtomicUsize::new(1)));
        // The first request holds the only in-flight slot while the rest queue up.
        let first = submit(&b, "a", 1, "a-first", 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let a: Vec<_> = (0..8)
            .map(|i| submit(&b, "a", 1, &format!("a{i}"), 1))
            .collect();
        let bb: Vec<_> = (0..3)
            .map(|i| submit(&b, "b", 2, &format!("b{i}"), 1))
            .collect();
        let c: Vec<_> = (0..3)
            .map(|i| submit(&b, "c", 3, &format!("c{i}"), 1))
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        b.withdraw(3);
        gate.add_permits(100);
        assert_eq!(first.await.unwrap(), Reply::Done(Ok(())));
        for rx in c {
            assert_eq!(rx.await.unwrap(), Reply::Withdrawn);
        }
        for rx in a.into_iter().chain(bb) {
            assert_eq!(rx.await.unwrap(), Reply::Done(Ok(())));
        }
        let reqs = rec.requests.lock().unwrap().clone();
        assert_eq!(reqs[1][..6], ["a0", "b0", "a1", "b1", "a2", "b2"]);
        assert!(reqs.iter().flatten().all(|m| !m.starts_with('c')));
    }
}
