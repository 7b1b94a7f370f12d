//! A fault-injecting TCP proxy between a worker and its redis-server, on loopback.
//!
//! It forwards bytes both ways and understands just enough RESP to pair each command with
//! its reply, so a test can:
//! - lose the reply of a command that ran: forward the command (Redis runs it), drop its
//!   reply, then reset the connection (the client sees the command fail and reconnects);
//! - partition: stop forwarding in both directions (nothing sent reaches Redis, no reply
//!   reaches the client, new connections are held), then reset every connection.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// A rule: lose the reply of every `every`-th command containing `needle`, `times` times.
#[derive(Debug, Clone)]
struct LoseReply {
    needle: Vec<u8>,
    every: usize,
    times: usize,
    seen: usize,
}

#[derive(Default)]
struct Shared {
    rule: Mutex<Option<LoseReply>>,
    /// Replies lost so far.
    lost: AtomicUsize,
    /// Commands forwarded so far.
    forwarded: AtomicUsize,
    blackhole: AtomicBool,
}

/// The proxy; dropping it stops accepting (live connections end with the test's runtime).
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Bumped to reset every live connection.
    reset: watch::Sender<u64>,
    /// Opened after a partition ends; new connections wait on it while blackholed.
    open: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.reset.send_modify(|n| *n += 1);
    }
}

impl Proxy {
    /// Listen on a free loopback port and forward to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = super::tokio_listener();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let (reset, _) = watch::channel(0u64);
        let (open, _) = watch::channel(true);
        let (s, r, o) = (shared.clone(), reset.clone(), open.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (s, mut r, mut o) = (s.clone(), r.subscribe(), o.subscribe());
                tokio::spawn(async move {
                    // A partition holds new connections too, until it ends.
                    while !*o.borrow_and_update() {
                        if o.changed().await.is_err() {
                            return;
                        }
                    }
                    r.borrow_and_update();
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        connection(client, server, s, r).await;
                    }
                });
            }
        });
        Proxy {
            addr,
            shared,
            reset,
            open,
            task,
        }
    }

    /// `redis://` URL of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Lose the reply of every `every`-th command whose bytes contain `needle` (e.g. a
    /// script's SHA), `times` times in all; each loss resets its connection.
    pub fn lose_replies(&self, needle: &str, every: usize, times: usize) {
        *self.shared.rule.lock().unwrap() = Some(LoseReply {
            needle: needle.as_bytes().to_vec(),
            every: every.max(1),
            times,
            seen: 0,
        });
    }

    /// Replies lost so far.
    pub fn lost(&self) -> usize {
        self.shared.lost.load(Ordering::SeqCst)
    }

    /// Commands forwarded to Redis so far.
    pub fn forwarded(&self) -> usize {
        self.shared.forwarded.load(Ordering::SeqCst)
    }

    /// Start a partition: nothing is forwarded either way and new connections are held.
    pub fn blackhole(&self) {
        self.open.send_replace(false);
        self.shared.blackhole.store(true, Ordering::SeqCst);
    }

    /// End a partition: reset every connection (what was held is lost) and forward again.
    pub fn heal_with_reset(&self) {
        self.reset.send_modify(|n| *n += 1);
        self.shared.blackhole.store(false, Ordering::SeqCst);
        self.open.send_replace(true);
    }
}

/// Length of the one RESP value at the start of `buf`, once it is complete.
fn resp_len(buf: &[u8]) -> Option<usize> {
    let line_end = |from: usize| -> Option<usize> {
        buf.get(from..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p + 2)
    };
    let first = *buf.first()?;
    let end = line_end(1)?;
    let num = || -> Option<i64> { std::str::from_utf8(&buf[1..end - 2]).ok()?.parse().ok() };
    match first {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Some(end),
        b'$' | b'!' | b'=' => {
            let n = num()?;
            if n < 0 {
                return Some(end);
            }
            let total = end + n as usize + 2;
            (buf.len() >= total).then_some(total)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = num()?;
            if n < 0 {
                return Some(end);
            }
            let items = if matches!(first, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut at = end;
            for _ in 0..items {
                at += resp_len(&buf[at..])?;
            }
            if first == b'|' {
                // An attribute precedes the reply it annotates.
                at += resp_len(&buf[at..])?;
            }
            Some(at)
        }
        _ => Some(buf.len()), // inline command: take what came
    }
}

async fn connection(
    client: TcpStream,
    server: TcpStream,
    shared: Arc<Shared>,
    mut reset: watch::Receiver<u64>,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // One flag per forwarded command, in order: lose its reply?
    let pending: Arc<Mutex<VecDeque<bool>>> = Arc::default();

    let up = {
        let (shared, pending) = (shared.clone(), pending.clone());
        async move {
            let mut buf = Vec::new();
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let n = cr.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
                if shared.blackhole.load(Ordering::SeqCst) {
                    continue; // sent into the partition: never arrives
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Some(len) = resp_len(&buf) {
                    let cmd: Vec<u8> = buf.drain(..len).collect();
                    let lose = {
                        let mut rule = shared.rule.lock().unwrap();
                        match rule.as_mut() {
                            Some(r)
                                if r.times > 0
                                    && cmd.windows(r.needle.len()).any(|w| w == r.needle) =>
                            {
                                r.seen += 1;
                                let hit = r.seen % r.every == 0;
                                if hit {
                                    r.times -= 1;
                                }
                                hit
                            }
                            _ => false,
                        }
                    };
                    pending.lock().unwrap().push_back(lose);
                    shared.forwarded.fetch_add(1, Ordering::SeqCst);
                    sw.write_all(&cmd).await.ok()?;
                }
            }
            #[allow(unreachable_code)]
            Some(())
        }
    };
    let down = {
        let (shared, pending) = (shared.clone(), pending.clone());
        async move {
            let mut buf = Vec::new();
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let n = sr.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
                if shared.blackhole.load(Ordering::SeqCst) {
                    continue; // the reply is lost in the partition
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Some(len) = resp_len(&buf) {
                    let reply: Vec<u8> = buf.drain(..len).collect();
                    // Push messages (RESP3 `>`) answer no command.
                    let lose = reply.first() != Some(&b'>')
                        && pending.lock().unwrap().pop_front().unwrap_or(false);
                    if lose {
                        shared.lost.fetch_add(1, Ordering::SeqCst);
                        return Some(()); // the command ran; its reply never arrives
                    }
                    cw.write_all(&reply).await.ok()?;
                }
            }
            #[allow(unreachable_code)]
            Some(())
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = reset.changed() => {}
    }
    // Dropping both halves of both sockets closes them; the client sees its in-flight
    // commands fail.
}
