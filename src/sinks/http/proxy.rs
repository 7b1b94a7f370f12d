//! The guarded egress proxy (`[http] proxy`, `no_proxy`): `http` deliveries and their OAuth2
//! token requests leave through the operator's forward proxy, for a fixed egress IP, without
//! giving up the SSRF guard.
//!
//! A forward proxy normally resolves the destination itself, past any check the client made
//! (and a name can answer differently to the proxy than it did to us). So the worker never
//! hands the proxy a name: it resolves the destination with the guard
//! ([`crate::sinks::guard`]; every address must pass), then asks the proxy to
//! `CONNECT <checked-ip>:<port>` and speaks HTTP (or TLS to the *host name*, so the
//! certificate is still checked against it) through that tunnel. A destination on a refused
//! address is refused before the proxy is contacted, and one that passes only through
//! `allow_cidrs` is connected to directly (the proxy's view of a private address is not the
//! one the guard judged).
//!
//! reqwest's own proxy support tunnels to the host name, so the proxied path is a hyper
//! client of its own with the connector below; requests are still built as reqwest
//! requests and answers wrapped back into reqwest responses, so classification and the
//! bounded reads are one path for both ([`super::transport::Transport`]).

use super::mtls::Material;
pub use crate::config::EgressProxy;
use crate::sinks::guard::{non_public, resolve_checked, AddressPolicy};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use reqwest::header::HeaderValue;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long opening a tunnel may take: the proxy's TCP connect, its `CONNECT` answer and the
/// TLS handshake through it (the same bound as a direct connect).
pub const TUNNEL_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of the proxy's answer to `CONNECT` read at most before it is refused.
pub const CONNECT_ANSWER_MAX_BYTES: usize = 8 * 1024;

/// A rustls client configuration like reqwest's (ring, the public webpki roots, HTTP/1.1
/// only) or, with `m`, the entry's `ca` instead of the public roots and its client
/// certificate.
///
/// # Errors
/// The option and why, never the PEM.
pub fn tls_config(m: Option<&Material>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    match m.and_then(|m| m.ca.as_deref()) {
        Some(ca) => {
            super::mtls::check_certificates(ca).map_err(|e| format!("ca: {e}"))?;
            for der in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                let der = der.map_err(|e| format!("ca: not a PEM certificate bundle ({e})"))?;
                roots.add(der).map_err(|e| format!("ca: {e}"))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots);
    let mut config = match m.map(|m| (&m.cert, &m.key)) {
        Some((Some(cert), Some(key))) => {
            super::mtls::check_certificates(cert).map_err(|e| format!("client_cert: {e}"))?;
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client_cert: not a PEM certificate bundle ({e})"))?;
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
                .map_err(|e| format!("client_key: not a PEM private key ({e})"))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                format!("client_cert/client_key: not a usable certificate and key ({e})")
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// An HTTP/1.1 client whose every connection is a tunnel through the proxy to a checked
/// address; its own connection pool (idle connections closed after 30 s, no count limit,
/// like the direct client).
pub struct ProxiedClient {
    proxy: Arc<EgressProxy>,
    client: hyper_util::client::legacy::Client<Tunneller, reqwest::Body>,
}

impl std::fmt::Debug for ProxiedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxiedClient")
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

impl ProxiedClient {
    /// A client through `proxy` to the addresses `policy` allows, with `tls` for https.
    pub fn new(
        proxy: Arc<EgressProxy>,
        policy: Arc<AddressPolicy>,
        tls: rustls::ClientConfig,
    ) -> ProxiedClient {
        let connector = Tunneller {
            proxy: proxy.clone(),
            policy,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        };
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(usize::MAX)
            .build(connector);
        ProxiedClient { proxy, client }
    }

    /// The proxy this client goes through.
    pub fn proxy(&self) -> &EgressProxy {
        &self.proxy
    }

    /// Send `req` through a tunnel (reused from the pool when one is idle), within its
    /// reqwest timeout if it has one; the answer as a reqwest response.
    ///
    /// # Errors
    /// hyper's error, whose source chain holds the guard's [`crate::sinks::guard::Blocked`]
    /// for a refused destination and the proxy's refusal for a failed `CONNECT`; [`TimedOut`]
    /// past the request's timeout.
    pub async fn execute(&self, req: reqwest::Request) -> Result<reqwest::Response, BoxError> {
        let timeout = req.timeout().copied();
        let mut req: http::Request<reqwest::Body> = req.try_into()?;
        if !req.headers().contains_key(reqwest::header::ACCEPT) {
            // What reqwest's direct client adds, so a receiver sees the same request either way.
            req.headers_mut()
                .insert(reqwest::header::ACCEPT, HeaderValue::from_static("*/*"));
        }
        if !req.headers().contains_key(reqwest::header::USER_AGENT) {
            req.headers_mut().insert(
                reqwest::header::USER_AGENT,
                HeaderValue::from_static(concat!("ankusa/", env!("CARGO_PKG_VERSION"))),
            );
        }
        let sent = self.client.request(req);
        let resp = match timeout {
            Some(t) => tokio::time::timeout(t, sent)
                .await
                .map_err(|_| TimedOut(t))??,
            None => sent.await?,
        };
        Ok(reqwest::Response::from(resp.map(reqwest::Body::wrap)))
    }
}

/// A proxied request outlasted its timeout (the attempt's `attempt_timeout_ms`): the kind
/// `timeout`, told by its type rather than its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut(pub Duration);

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "timeout after {} ms", self.0.as_millis())
    }
}

impl std::error::Error for TimedOut {}

/// The proxy refused or broke a `CONNECT` (its status and reason, control characters
/// escaped: the proxy's text is not ours). The proxy's own address is not in it: this text
/// becomes the row's error, which tenants read (it is in the worker's config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRefused {
    /// The address the tunnel was asked for.
    pub target: String,
    /// What went wrong: `407 Proxy Authentication Required`, `closed`, ….
    pub why: String,
}

impl std::fmt::Display for ProxyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the egress proxy did not open a tunnel to {}: {}",
            self.target, self.why
        )
    }
}

impl std::error::Error for ProxyRefused {}

/// The connector of [`ProxiedClient`]: resolve and check, then tunnel, then TLS if https.
#[derive(Clone)]
struct Tunneller {
    proxy: Arc<EgressProxy>,
    policy: Arc<AddressPolicy>,
    tls: tokio_rustls::TlsConnector,
}

impl tower::Service<http::Uri> for Tunneller {
    type Response = TokioIo<Tunnel>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<Tunnel>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            tokio::time::timeout(TUNNEL_TIMEOUT, this.open(uri))
                .await
                .map_err(|_| format!("tunnel not open within {} s", TUNNEL_TIMEOUT.as_secs()))?
                .map(TokioIo::new)
        })
    }
}

impl Tunneller {
    async fn open(&self, uri: http::Uri) -> Result<Tunnel, BoxError> {
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("only http and https go through the egress proxy".into()),
        };
        let host = uri.host().ok_or("the URL has no host")?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => {
                self.policy.check(host, ip)?;
                vec![SocketAddr::new(ip, port)]
            }
            Err(_) => resolve_checked(&self.policy, bare)
                .await?
                .into_iter()
                .map(|a| SocketAddr::new(a.ip(), port))
                .collect(),
        };
        // An address that passed only through `allow_cidrs` is a private network the
        // operator opened as the worker sees it; the proxy would reach whatever that address
        // is on its own side (its own loopback, another 10.x). Such addresses are connected
        // to directly, never tunnelled.
        let direct = self.policy.deny_private && addrs.iter().any(|a| non_public(a.ip()).is_some());
        // Each checked address in turn, as a direct connect would, each with its share of the
        // tunnel's time (one that hangs cannot starve the others); the last error is said.
        let share = (TUNNEL_TIMEOUT / addrs.len().max(1) as u32).max(Duration::from_secs(2));
        let mut last: Option<BoxError> = None;
        for addr in addrs {
            let tcp = if direct {
                tokio::time::timeout(share, TcpStream::connect(addr))
                    .await
                    .map_err(|_| BoxError::from(format!("connect to {addr} timed out")))
                    .and_then(|r| r.map_err(BoxError::from))
                    .and_then(|tcp| tcp.set_nodelay(true).map(|()| tcp).map_err(BoxError::from))
            } else {
                tokio::time::timeout(share, self.tunnel(addr))
                    .await
                    .unwrap_or_else(|_| {
                        Err(ProxyRefused {
                            target: addr.to_string(),
                            why: format!("no tunnel within {} ms", share.as_millis()),
                        }
                        .into())
                    })
            };
            match tcp {
                Ok(tcp) => {
                    if !https {
                        return Ok(Tunnel::Plain(tcp));
                    }
                    let name = rustls::pki_types::ServerName::try_from(bare.to_string())?;
                    let tls = self.tls.connect(name, tcp).await?;
                    return Ok(Tunnel::Tls(Box::new(tls)));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| "no address".into()))
    }

    /// A TCP connection to the proxy, tunnelled to `addr` by `CONNECT`.
    async fn tunnel(&self, addr: SocketAddr) -> Result<TcpStream, BoxError> {
        let refused = |why: String| ProxyRefused {
            target: addr.to_string(),
            why,
        };
        let mut tcp = TcpStream::connect((self.proxy.host.as_str(), self.proxy.port))
            .await
            .map_err(|e| refused(format!("cannot connect to the proxy ({e})")))?;
        tcp.set_nodelay(true)?;
        let mut head = format!("CONNECT {addr} HTTP/1.1\r\nHost: {addr}\r\n");
        if let Some(auth) = &self.proxy.authorization {
            head.push_str("Proxy-Authorization: ");
            head.push_str(auth.to_str().unwrap_or_default());
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        tcp.write_all(head.as_bytes()).await?;
        let mut buf = Vec::with_capacity(256);
        let mut chunk = [0u8; 1024];
        let end = loop {
            let n = tcp.read(&mut chunk).await?;
            if n == 0 {
                return Err(refused("closed the connection before answering".into()).into());
            }
            let from = buf.len().saturating_sub(3);
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                break from + i + 4;
            }
            if buf.len() > CONNECT_ANSWER_MAX_BYTES {
                return Err(
                    refused(format!("answer head over {CONNECT_ANSWER_MAX_BYTES} bytes")).into(),
                );
            }
        };
        let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let mut parts = line.trim_end().splitn(3, ' ');
        let (version, status) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let success = status.len() == 3
            && status.starts_with('2')
            && status.bytes().all(|b| b.is_ascii_digit());
        if !matches!(version, "HTTP/1.0" | "HTTP/1.1") || !success {
            let said: String = line.trim_end().chars().take(120).collect();
            return Err(refused(format!("answered {}", said.escape_debug())).into());
        }
        if end != buf.len() {
            // Nothing may follow the answer before we speak: those bytes would be read as
            // the destination's.
            return Err(refused("sent bytes after its answer".into()).into());
        }
        Ok(tcp)
    }
}

/// One tunnel: plain for `http://`, TLS to the host name for `https://`.
enum Tunnel {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Connection for Tunnel {
    fn connected(&self) -> Connected {
        // A tunnel, not a proxy hop: requests go in origin form, as to the destination.
        Connected::new()
    }
}

impl AsyncRead for Tunnel {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Tunnel::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Tunnel {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Tunnel::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Tunnel::Plain(s) => Pin::new(s).poll_flush(cx),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Tunnel::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests;
