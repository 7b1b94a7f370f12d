//! How an `http` request leaves the worker: straight through the guarded reqwest client, or,
//! with `[http] proxy`, through a tunnel of [`super::proxy`] unless `no_proxy` covers the
//! host. Both paths answer a reqwest response and fail with one [`SendError`], so the sink
//! classifies and reads answers the same way whichever was taken.

use super::proxy::ProxiedClient;
use super::{truncate, AttemptError, ErrorKind, ERROR_BODY_MAX_BYTES};
use crate::secrets::redact_url;
use crate::sinks::guard::{blocked_in, Blocked};
use std::sync::Arc;

/// The clients one entry's requests go through.
#[derive(Debug, Clone)]
pub struct Transport {
    /// The direct client (the guard as its resolver, no redirects, no proxy); it also
    /// builds every request.
    direct: reqwest::Client,
    /// The tunnelling client when `[http] proxy` is set.
    proxied: Option<Arc<ProxiedClient>>,
}

/// Why a request got no answer.
#[derive(Debug)]
pub enum SendError {
    /// The destination is on a refused address (nothing was sent, the proxy not asked).
    Blocked(Blocked),
    /// Connect, TLS, tunnel or transport failure: its kind and text (no URL, which may hold
    /// a resolved secret, beyond its redacted form).
    Failed {
        /// `connect`, `timeout` or `transport`.
        kind: ErrorKind,
        /// The kind word and the cause chain.
        text: String,
    },
}

impl SendError {
    /// The attempt's error: a blocked address is permanent, the rest retries; `what`
    /// prefixes the text (e.g. `oauth2 token endpoint: `).
    pub fn into_attempt(self, what: &str) -> AttemptError {
        match self {
            SendError::Blocked(b) => {
                AttemptError::permanent(ErrorKind::Other, format!("{what}{b}"))
            }
            SendError::Failed { kind, text } => AttemptError::retry(kind, format!("{what}{text}")),
        }
    }
}

impl Transport {
    /// Requests straight through `direct`, or through `proxied` where it applies.
    pub fn new(direct: reqwest::Client, proxied: Option<Arc<ProxiedClient>>) -> Transport {
        Transport { direct, proxied }
    }

    /// A request builder (sent with [`Transport::execute`], never `send`).
    pub fn post(&self, url: url::Url) -> reqwest::RequestBuilder {
        self.direct.post(url)
    }

    /// Send `req` the way its URL goes.
    ///
    /// # Errors
    /// [`SendError`]: blocked (permanent for the row) or failed (retried).
    pub async fn execute(&self, req: reqwest::Request) -> Result<reqwest::Response, SendError> {
        match &self.proxied {
            Some(p) if !p.proxy().bypasses(req.url()) => {
                let host = redact_url(req.url().as_str());
                p.execute(req).await.map_err(|e| proxied_error(&*e, &host))
            }
            _ => self
                .direct
                .execute(req)
                .await
                .map_err(|e| match blocked_in(&e) {
                    Some(b) => SendError::Blocked(b),
                    None => {
                        let (kind, text) = transport_error(e);
                        SendError::Failed { kind, text }
                    }
                }),
        }
    }
}

/// A failure of the proxied path, in the words of the direct one (`connect: …`).
fn proxied_error(e: &(dyn std::error::Error + 'static), url: &str) -> SendError {
    if let Some(b) = blocked_in(e) {
        return SendError::Blocked(b);
    }
    let connect = e
        .downcast_ref::<hyper_util::client::legacy::Error>()
        .is_some_and(|e| e.is_connect());
    let (kind, word) = if connect {
        (ErrorKind::Connect, "connect")
    } else if e.downcast_ref::<super::proxy::TimedOut>().is_some() {
        (ErrorKind::Timeout, "timeout")
    } else {
        (ErrorKind::Transport, "transport")
    };
    // hyper's own top line ("client error (Connect)") says less than its causes.
    let mut s = format!("{word} (via the egress proxy)");
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(inner) = cur {
        if inner
            .downcast_ref::<hyper_util::client::legacy::Error>()
            .is_none()
        {
            s.push_str(&format!(": {inner}"));
        }
        cur = inner.source();
    }
    s.push_str(&format!(" ({url})"));
    SendError::Failed {
        kind,
        text: truncate(s, ERROR_BODY_MAX_BYTES),
    }
}

/// A transport error's kind and its stored text: kind word and cause chain, without the URL
/// (its query or userinfo may hold a resolved secret).
pub(super) fn transport_error(e: reqwest::Error) -> (ErrorKind, String) {
    let (kind, word) = if e.is_connect() {
        (ErrorKind::Connect, "connect")
    } else if e.is_timeout() {
        (ErrorKind::Timeout, "timeout")
    } else if e.is_body() || e.is_decode() {
        (ErrorKind::Transport, "body")
    } else {
        (ErrorKind::Transport, "transport")
    };
    let host = e.url().map(|u| redact_url(u.as_str()));
    let e = e.without_url();
    let mut s = format!("{word}: {e}");
    if let Some(h) = host {
        s.push_str(&format!(" ({h})"));
    }
    let mut src = std::error::Error::source(&e);
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    (kind, truncate(s, ERROR_BODY_MAX_BYTES))
}
