//! A forward proxy for tests of `[http] proxy`: it answers `CONNECT host:port` by opening a
//! TCP connection to that target and relaying bytes both ways, and records every target and
//! `Proxy-Authorization` it was sent, so a test can assert what the worker asked of it.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the proxy was asked.
#[derive(Debug, Default)]
pub struct ProxyLog {
    /// The `CONNECT` targets, in order (e.g. `127.0.0.1:8080`).
    pub targets: Vec<String>,
    /// The `Proxy-Authorization` value of each `CONNECT` (`None` without one).
    pub authorizations: Vec<Option<String>>,
    /// TCP connections accepted (a connection that sends nothing counts too).
    pub connections: usize,
}

/// A CONNECT proxy on a free loopback port, running until the test's runtime ends.
#[derive(Debug, Clone)]
pub struct ConnectProxy {
    /// Its port on 127.0.0.1.
    pub port: u16,
    log: Arc<Mutex<ProxyLog>>,
}

impl ConnectProxy {
    /// Start one. `require` makes it answer `407` to a `CONNECT` without exactly this
    /// `Proxy-Authorization` value.
    ///
    /// # Panics
    /// Outside a tokio runtime, or when no loopback port can be bound.
    pub fn start(require: Option<String>) -> ConnectProxy {
        let std = super::listen_loopback().expect("a loopback listener");
        std.set_nonblocking(true).expect("non-blocking");
        let listener = tokio::net::TcpListener::from_std(std).expect("inside a tokio runtime");
        let port = listener.local_addr().expect("bound").port();
        let log = Arc::new(Mutex::new(ProxyLog::default()));
        let l = log.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                l.lock().unwrap().connections += 1;
                tokio::spawn(serve(tcp, l.clone(), require.clone()));
            }
        });
        ConnectProxy { port, log }
    }

    /// `http://127.0.0.1:<port>`, with `user:password@` when given.
    pub fn url(&self, user_info: Option<&str>) -> String {
        match user_info {
            Some(u) => format!("http://{u}@127.0.0.1:{}", self.port),
            None => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// The `CONNECT` targets so far.
    pub fn targets(&self) -> Vec<String> {
        self.log.lock().unwrap().targets.clone()
    }

    /// The `Proxy-Authorization` values so far, one per `CONNECT`.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.log.lock().unwrap().authorizations.clone()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.log.lock().unwrap().connections
    }
}

async fn serve(mut tcp: tokio::net::TcpStream, log: Arc<Mutex<ProxyLog>>, require: Option<String>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    // Byte by byte up to the blank line: nothing of the tunnel's bytes is read here.
    while !head.ends_with(b"\r\n\r\n") {
        match tcp.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
        if head.len() > 16 * 1024 {
            return;
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let request = lines.next().unwrap_or_default().to_string();
    let auth = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("proxy-authorization"))
        .map(|(_, v)| v.trim().to_string());
    let mut parts = request.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "CONNECT" {
        let _ = tcp
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    }
    {
        let mut l = log.lock().unwrap();
        l.targets.push(target.to_string());
        l.authorizations.push(auth.clone());
    }
    if require.is_some() && auth != require {
        let _ = tcp
            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    }
    let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else {
        let _ = tcp
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    if tcp
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
}
