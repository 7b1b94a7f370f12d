//! The HTTP webhook sink: POST the body with the hook's headers and delivery headers.
//!
//! 2xx is ok; 3xx is not success and redirects are never followed (a followed
//! 301/302 turns a POST into a GET); 408/425/429/5xx and transport errors retry,
//! honouring `Retry-After`; any other 4xx is permanent.

mod entry;
pub mod mtls;
pub mod oauth2;
pub mod proxy;
pub mod transport;

pub use entry::{check_headers, client, MODULE};

use super::guard::{guarded_reqwest, read_bounded, AddressPolicy};
use super::signing::{SigningKey, MAX_SIGNING_SECRETS};
use super::{
    is_framing_header, is_reserved_header, truncate, AttemptError, Delivery, EdgePolicy, ErrorKind,
};
use crate::secrets::{has_reference, SecretPolicy};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Bytes of a response body kept as the row's last error; the rest is never read.
pub const ERROR_BODY_MAX_BYTES: usize = super::guard::ANSWER_KEEP_BYTES;

/// Bytes of a 2xx body read (and dropped) so the connection can be reused; a longer or slower
/// body is abandoned with its connection. The outcome is decided by status and headers.
pub const DRAIN_MAX_BYTES: usize = super::guard::ANSWER_READ_MAX_BYTES;

/// `signing_secret`: one secret or a list (rotation).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SigningSecrets {
    /// One `whsec_…` secret or secret reference.
    One(String),
    /// Several, each signed with (one `v1,` signature per secret).
    Many(Vec<String>),
}

impl SigningSecrets {
    /// The secrets (or references) in order.
    pub fn as_slice(&self) -> &[String] {
        match self {
            SigningSecrets::One(s) => std::slice::from_ref(s),
            SigningSecrets::Many(v) => v,
        }
    }
}

/// Options of an `http` sink entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpOpts {
    /// Endpoint URL (`http://` or `https://`); may hold `${env:NAME}` / `${file:/path}`
    /// references (scheme and address checked again after resolution, at attempt time).
    pub url: String,
    /// Extra request headers; values may hold secret references. `webhook-*` and `ankusa-*`
    /// names are refused (the delivery's own headers).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Standard Webhooks signing: a `whsec_<base64>` secret or a list of them (rotation), each
    /// possibly a secret reference. Unset: no `webhook-signature` header.
    #[serde(default)]
    pub signing_secret: Option<SigningSecrets>,
    /// HTTP Basic authentication of the endpoint (RFC 7617): sent as
    /// `Authorization: Basic base64(username:password)` on every attempt. Either part may be
    /// a secret reference (the password normally is). Unset: no `Authorization` from here.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
    /// OAuth 2.0 client credentials ([`oauth2::OAuth2`]): every attempt sends
    /// `Authorization: Bearer <token>` from the entry's token endpoint, cached in memory
    /// until shortly before it expires. Unset: no token.
    #[serde(default)]
    pub oauth2: Option<oauth2::OAuth2>,
    /// mTLS: the client certificate chain presented to the endpoint, PEM (leaf first) or a
    /// secret reference to it; needs `client_key` and an `https://` URL.
    #[serde(default)]
    pub client_cert: Option<String>,
    /// mTLS: the private key of `client_cert`, always a secret reference (a key written into
    /// the source itself would be stored in Redis and shown by `source get`).
    #[serde(default)]
    pub client_key: Option<String>,
    /// The roots trusted for this endpoint instead of the public ones, PEM (one or more
    /// certificates) or a secret reference: a receiver behind a private CA.
    #[serde(default)]
    pub ca: Option<String>,
}

/// `basic_auth` of an `http` sink entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// The user name, or a secret reference; it may not contain `:` (RFC 7617).
    pub username: String,
    /// The password, or a secret reference (`${env:ANKUSA_SECRET_<TENANT>__…}`).
    pub password: String,
}

impl HttpOpts {
    /// Parse and check the syntax of a sink entry's options (the scheduler's view; the
    /// guards apply at attempt time); the error says which field is wrong.
    pub fn from_opts(
        opts: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<HttpOpts, String> {
        Self::parse(opts, None)
    }

    /// [`HttpOpts::from_opts`] plus the guards of `edge` (at `source put`): secret references
    /// within `secrets.*`, a literal IP host allowed by the SSRF guard.
    pub fn from_opts_with(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: &EdgePolicy,
    ) -> Result<HttpOpts, String> {
        Self::parse(opts, Some(edge))
    }

    fn parse(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: Option<&EdgePolicy>,
    ) -> Result<HttpOpts, String> {
        let o: HttpOpts = serde_json::from_value(serde_json::Value::Object(opts.clone()))
            .map_err(|e| e.to_string())?;
        let refs = |field: &str, v: &str| match edge {
            Some(edge) => edge.secrets.check(v).map_err(|e| format!("{field}: {e}")),
            None => Ok(()),
        };
        if has_reference(&o.url) {
            refs("url", &o.url)?;
            if !(o.url.starts_with("http://")
                || o.url.starts_with("https://")
                || o.url.starts_with("${"))
            {
                return Err("url: must start with http:// or https://".into());
            }
        } else {
            let open = AddressPolicy {
                deny_private: false,
                allow: Vec::new(),
            };
            let guard = edge.map(|e| &*e.addresses).unwrap_or(&open);
            check_url(&o.url, guard).map_err(|e| format!("url: {e}"))?;
        }
        for (k, v) in &o.headers {
            if HeaderName::from_bytes(k.as_bytes()).is_err() {
                return Err(format!("headers: {k:?} is not a valid header name"));
            }
            if is_reserved_header(k) {
                return Err(format!(
                    "headers: {k:?} is reserved (webhook-* and ankusa-* are set by ankusa)"
                ));
            }
            refs(&format!("headers.{k}"), v)?;
        }
        if let Some(oa) = &o.oauth2 {
            if o.basic_auth.is_some()
                || o.headers
                    .keys()
                    .any(|k| k.eq_ignore_ascii_case("authorization"))
            {
                return Err(
                    "oauth2: basic_auth or headers.authorization is set too; keep one of them"
                        .into(),
                );
            }
            if has_reference(&oa.token_url) {
                refs("oauth2.token_url", &oa.token_url)?;
            } else {
                let open = AddressPolicy {
                    deny_private: false,
                    allow: Vec::new(),
                };
                let guard = edge.map(|e| &*e.addresses).unwrap_or(&open);
                check_url(&oa.token_url, guard).map_err(|e| format!("oauth2.token_url: {e}"))?;
            }
            refs("oauth2.client_id", &oa.client_id)?;
            refs("oauth2.client_secret", &oa.client_secret)?;
        }
        if let Some(auth) = &o.basic_auth {
            if o.headers
                .keys()
                .any(|k| k.eq_ignore_ascii_case("authorization"))
            {
                return Err(
                    "basic_auth: headers.authorization is set too; keep one of them".into(),
                );
            }
            if auth.username.contains(':') && !has_reference(&auth.username) {
                return Err("basic_auth.username: may not contain ':' (RFC 7617)".into());
            }
            refs("basic_auth.username", &auth.username)?;
            refs("basic_auth.password", &auth.password)?;
        }
        check_tls(&o, &refs)?;
        if let Some(secrets) = &o.signing_secret {
            if secrets.as_slice().is_empty() {
                return Err("signing_secret: the list is empty".into());
            }
            if secrets.as_slice().len() > MAX_SIGNING_SECRETS {
                return Err(format!(
                    "signing_secret: {} secrets listed, at most {MAX_SIGNING_SECRETS} (the \
                     current one and the next are what a rotation needs)",
                    secrets.as_slice().len()
                ));
            }
            for s in secrets.as_slice() {
                if has_reference(s) {
                    refs("signing_secret", s)?;
                } else {
                    SigningKey::parse(s)?;
                }
            }
        }
        Ok(o)
    }
}

/// The `source put` checks of `client_cert`, `client_key` and `ca`: the pair set together, the
/// key only by reference, an `https://` URL, literal PEM that parses; `refs` checks a secret
/// reference in the tenant's namespace.
fn check_tls(o: &HttpOpts, refs: &dyn Fn(&str, &str) -> Result<(), String>) -> Result<(), String> {
    match (&o.client_cert, &o.client_key) {
        (Some(_), None) => {
            return Err(
                "client_cert: set client_key too (mTLS needs the certificate and its \
                        private key)"
                    .into(),
            )
        }
        (None, Some(_)) => {
            return Err("client_key: set client_cert too (the key of which certificate?)".into())
        }
        _ => {}
    }
    if o.client_cert.is_none() && o.ca.is_none() {
        return Ok(());
    }
    if o.url.starts_with("http://") {
        let what = if o.client_cert.is_some() {
            "client_cert"
        } else {
            "ca"
        };
        return Err(format!(
            "{what}: needs an https:// url (TLS options on a plain http url)"
        ));
    }
    if let Some(key) = &o.client_key {
        if !has_reference(key) {
            return Err(
                "client_key: must be a secret reference (${env:ANKUSA_SECRET_<TENANT>__…} \
                        or ${file:…}), never the key itself: the source is stored in Redis"
                    .into(),
            );
        }
        refs("client_key", key)?;
    }
    if let Some(cert) = &o.client_cert {
        if has_reference(cert) {
            refs("client_cert", cert)?;
        } else {
            mtls::check_certificates(cert).map_err(|e| format!("client_cert: {e}"))?;
        }
    }
    if let Some(ca) = &o.ca {
        if has_reference(ca) {
            refs("ca", ca)?;
        } else {
            mtls::parse_roots(ca).map_err(|e| format!("ca: {e}"))?;
        }
    }
    Ok(())
}

/// Check a (resolved) endpoint URL: it parses, is `http`/`https`, and an IP-literal host is
/// allowed by the guard. Errors never hold the URL (it may carry a resolved secret), only the
/// blocked address.
fn check_url(url: &str, guard: &AddressPolicy) -> Result<url::Url, UrlProblem> {
    let u =
        url::Url::parse(url).map_err(|e| UrlProblem::Invalid(format!("not a valid URL: {e}")))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(UrlProblem::Invalid(
            "must start with http:// or https://".into(),
        ));
    }
    if u.host().is_none() {
        return Err(UrlProblem::Invalid("has no host".into()));
    }
    guard.check_url(&u).map_err(UrlProblem::Blocked)?;
    Ok(u)
}

/// Why an endpoint URL is refused.
#[derive(Debug)]
enum UrlProblem {
    Invalid(String),
    Blocked(super::guard::Blocked),
}

impl std::fmt::Display for UrlProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UrlProblem::Invalid(s) => f.write_str(s),
            UrlProblem::Blocked(b) => b.fmt(f),
        }
    }
}

/// What an HTTP answer means for the row; one function, table-tested.
pub fn classify(
    status: u16,
    retry_after: Option<&str>,
    now: SystemTime,
) -> Result<(), AttemptError> {
    match status {
        200..=299 => Ok(()),
        408 | 425 | 429 | 500..=599 => Err(AttemptError::Retry {
            error: format!("http {status}"),
            retry_after: retry_after.and_then(|v| parse_retry_after(v, now)),
            kind: ErrorKind::HttpStatus(status),
        }),
        300..=399 => Err(AttemptError::permanent(
            ErrorKind::HttpStatus(status),
            format!("http {status} redirect not followed"),
        )),
        _ => Err(AttemptError::permanent(
            ErrorKind::HttpStatus(status),
            format!("http {status}"),
        )),
    }
}

/// `Retry-After` as seconds or an HTTP date; garbage is `None` (normal backoff applies).
pub fn parse_retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate(v)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parse an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form RFC 9110 requires.
fn httpdate(v: &str) -> Option<SystemTime> {
    let parts: Vec<&str> = v.split_whitespace().collect();
    if parts.len() != 6 || parts[5] != "GMT" {
        return None;
    }
    let day: u64 = parts[1].parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == parts[2])? as u64
        + 1;
    let year: u64 = parts[3].parse().ok()?;
    let hms: Vec<u64> = parts[4]
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if hms.len() != 3 || !(1..=31).contains(&day) || year < 1970 {
        return None;
    }
    // days from civil (Howard Hinnant's algorithm)
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(days * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2]),
    )
}

/// The HTTP sink: one shared client (connection pool), no redirects, the SSRF guard as its
/// resolver, and no proxy but the operator's guarded one ([`proxy`]).
#[derive(Debug, Clone)]
pub struct HttpSink {
    transport: transport::Transport,
    edge: EdgePolicy,
    /// OAuth 2.0 tokens of the entries that use `oauth2`, shared by every clone.
    tokens: std::sync::Arc<oauth2::Tokens>,
    /// The clients of the entries that use `client_cert` or `ca`, shared by every clone.
    tls: std::sync::Arc<mtls::TlsClients>,
}

impl HttpSink {
    /// A client with no redirect following, no proxy from the environment (a proxy resolves
    /// the host itself, past the guard; `[http] proxy` is tunnelled to checked addresses
    /// instead) and no total timeout of its own: the attempt timeout wraps the whole
    /// attempt, connect to last body byte. Names resolve through the guard's resolver.
    ///
    /// Idle connections are kept per host without a count limit, closed after 30 s unused:
    /// the pool can never hold more than the attempts that ran at once (at most
    /// `dispatch.concurrency`, whatever a reload sets it to), and a cap below that closes
    /// the surplus after every wave of attempts only to open it again for the next one
    /// (a cap of 64 at concurrency 100 left ~12 800 sockets in TIME_WAIT per
    /// 50 000 deliveries).
    ///
    /// # Errors
    /// The client cannot be made (the TLS backend failed to start).
    pub fn new(edge: EdgePolicy) -> Result<HttpSink, String> {
        let client = guarded_reqwest(edge.addresses.clone())
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(usize::MAX)
            .tcp_nodelay(true)
            .user_agent(concat!("ankusa/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.to_string())?;
        let proxied = match &edge.proxy {
            Some(p) => Some(std::sync::Arc::new(proxy::ProxiedClient::new(
                p.clone(),
                edge.addresses.clone(),
                proxy::tls_config(None)?,
            ))),
            None => None,
        };
        Ok(HttpSink {
            transport: transport::Transport::new(client, proxied),
            edge,
            tokens: Default::default(),
            tls: Default::default(),
        })
    }

    /// The secret references this sink (and the batching sinks) may resolve.
    pub fn secrets(&self) -> &SecretPolicy {
        &self.edge.secrets
    }

    /// The whole edge policy: addresses, secret references, tenants' grants (the batching
    /// sinks check their targets against it at attempt time).
    pub fn edge(&self) -> &EdgePolicy {
        &self.edge
    }

    /// Deliver one row. Transport errors retry; a blocked address or a refused secret
    /// reference is permanent; the answer is classified by [`classify`] from its status and
    /// headers, reading at most [`ERROR_BODY_MAX_BYTES`] of an error body.
    pub async fn deliver(&self, opts: &HttpOpts, d: &Delivery) -> Result<(), AttemptError> {
        self.deliver_status(opts, d).await.map(drop)
    }

    /// [`HttpSink::deliver`] answering the 2xx status on success (for the attempt history).
    pub async fn deliver_status(&self, opts: &HttpOpts, d: &Delivery) -> Result<u16, AttemptError> {
        let url = self.resolve(&d.tenant, &opts.url, "url")?;
        let url = check_url(&url, &self.edge.addresses).map_err(|e| match e {
            UrlProblem::Blocked(b) => AttemptError::permanent(ErrorKind::Other, b.to_string()),
            UrlProblem::Invalid(why) => AttemptError::permanent(
                ErrorKind::Other,
                format!("url (after resolving references) {why}"),
            ),
        })?;
        let (mut headers, signing) = self.headers(opts, d)?;
        if let Some((keys, ts)) = signing {
            let header = super::signing::signature_header_off_runtime(
                keys,
                d.message_id.clone(),
                ts,
                d.body.clone(),
            )
            .await;
            let value = HeaderValue::from_str(&header).map_err(|_| {
                AttemptError::permanent(ErrorKind::Other, "webhook-signature: not a header value")
            })?;
            headers.insert(HeaderName::from_static("webhook-signature"), value);
        }
        let oauth = match &opts.oauth2 {
            Some(o) => {
                let creds = self.oauth_credentials(&d.tenant, o)?;
                let bearer = self
                    .tokens
                    .bearer(&self.transport, &self.edge.addresses, &d.tenant, &creds)
                    .await?;
                headers.insert(AUTHORIZATION, bearer);
                Some(creds)
            }
            None => None,
        };
        let transport = self.client_for(opts, &d.tenant)?;
        // Built by reqwest's builder, which turns a URL's `user:password@` into Basic
        // `Authorization` (and takes it out of the URL) as `send` always did.
        let req = transport
            .post(url)
            .headers(headers)
            .body(d.body.clone())
            .build()
            .map_err(|e| {
                AttemptError::permanent(ErrorKind::Other, format!("request: {}", e.without_url()))
            })?;
        let resp = transport
            .execute(req)
            .await
            .map_err(|e| e.into_attempt(""))?;
        let status = resp.status().as_u16();
        if let (401, Some(creds)) = (status, &oauth) {
            // The token was refused (revoked, rotated keys): a retry, not the permanent 4xx
            // it would be without oauth2, and it fetches a new token.
            self.tokens.forget(&d.tenant, creds);
            let body = read_bounded(resp, ERROR_BODY_MAX_BYTES + 1).await;
            let body = truncate(
                String::from_utf8_lossy(&body).into_owned(),
                ERROR_BODY_MAX_BYTES,
            );
            return Err(AttemptError::retry(
                ErrorKind::HttpStatus(401),
                with_body(
                    "http 401 with the oauth2 token, dropped: the retry fetches a new one".into(),
                    &body,
                ),
            ));
        }
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match classify(status, retry_after.as_deref(), SystemTime::now()) {
            Ok(()) => {
                // A short body is drained so the connection returns to the pool; a long or
                // endless one is dropped unread with its connection.
                let _ = read_bounded(resp, DRAIN_MAX_BYTES).await;
                Ok(status)
            }
            Err(e) => {
                // One byte more than kept, so a longer body is marked cut (`…`).
                let body = read_bounded(resp, ERROR_BODY_MAX_BYTES + 1).await;
                let body = truncate(
                    String::from_utf8_lossy(&body).into_owned(),
                    ERROR_BODY_MAX_BYTES,
                );
                Err(match e {
                    AttemptError::Retry {
                        error,
                        retry_after,
                        kind,
                    } => AttemptError::Retry {
                        error: with_body(error, &body),
                        retry_after,
                        kind,
                    },
                    AttemptError::Permanent { error, kind } => AttemptError::Permanent {
                        error: with_body(error, &body),
                        kind,
                    },
                    timeout @ AttemptError::Timeout(_) => timeout,
                })
            }
        }
    }

    /// The clients for an entry: the shared ones, or with `client_cert`/`ca` its own, made
    /// from the material resolved in `tenant`'s namespace.
    fn client_for(
        &self,
        opts: &HttpOpts,
        tenant: &str,
    ) -> Result<transport::Transport, AttemptError> {
        if opts.client_cert.is_none() && opts.ca.is_none() {
            return Ok(self.transport.clone());
        }
        let resolve = |v: &Option<String>, what: &str| {
            v.as_deref()
                .map(|v| self.resolve(tenant, v, what))
                .transpose()
        };
        let material = mtls::Material {
            cert: resolve(&opts.client_cert, "client_cert")?,
            key: resolve(&opts.client_key, "client_key")?,
            ca: resolve(&opts.ca, "ca")?,
        };
        if material.cert.is_some() != material.key.is_some() {
            return Err(AttemptError::permanent(
                ErrorKind::Other,
                "client_cert and client_key: set both or neither",
            ));
        }
        self.tls.client(&material, &self.edge)
    }

    /// The resolved credentials of an entry's `oauth2` in `tenant`'s namespace.
    fn oauth_credentials(
        &self,
        tenant: &str,
        o: &oauth2::OAuth2,
    ) -> Result<oauth2::Credentials, AttemptError> {
        Ok(oauth2::Credentials {
            url: self.resolve(tenant, &o.token_url, "oauth2.token_url")?,
            id: self.resolve(tenant, &o.client_id, "oauth2.client_id")?,
            secret: self.resolve(tenant, &o.client_secret, "oauth2.client_secret")?,
            scope: o.scope.clone(),
            audience: o.audience.clone(),
            auth: o.client_auth,
        })
    }

    /// Resolve the secret references of option `what` in `tenant`'s namespace: a malformed
    /// reference is permanent (it is never sent); one outside the namespace and an unset one
    /// retry alike, so neither tells the tenant whether another's secret exists.
    fn resolve(&self, tenant: &str, v: &str, what: &str) -> Result<String, AttemptError> {
        if !has_reference(v) {
            return Ok(v.to_string());
        }
        let secrets = self.edge.secrets.for_tenant(tenant);
        secrets
            .check_form(v)
            .map_err(|e| secret_error(AttemptError::permanent, what, e))?;
        secrets
            .resolve(v)
            .map_err(|e| secret_error(AttemptError::retry, what, e))
    }

    /// The request headers: the producer's, then the sink's own, then the delivery headers,
    /// each later one replacing (never appending to) an earlier value of the same name.
    /// The attempt's headers, and the keys to sign it with at the timestamp it carries (the
    /// signature is computed by the caller, off the runtime when the body is large).
    fn headers(
        &self,
        opts: &HttpOpts,
        d: &Delivery,
    ) -> Result<(HeaderMap, Option<Signing>), AttemptError> {
        let mut h = HeaderMap::new();
        if !d.headers.is_empty() {
            // The producer checks headers at commit; headers written by other means that
            // HTTP cannot carry would fail every attempt alike, so they are permanent.
            let bad = |what: String| {
                AttemptError::permanent(
                    ErrorKind::InvalidHeaders,
                    format!("invalid hook headers: {what}"),
                )
            };
            if let Some(why) = d.headers.problem() {
                return Err(bad(why.to_string()));
            }
            for (k, v) in d.headers.entries() {
                let lk = k.to_ascii_lowercase();
                if matches!(
                    lk.as_str(),
                    "host" | "content-length" | "connection" | "transfer-encoding"
                ) || is_reserved_header(&lk)
                {
                    continue;
                }
                let Some(v) = v else {
                    return Err(bad(format!("value of {k:?} is not a string")));
                };
                let name =
                    HeaderName::from_bytes(k.as_bytes()).map_err(|_| bad(format!("name {k:?}")))?;
                let value = HeaderValue::from_str(v).map_err(|_| bad(format!("value of {k:?}")))?;
                h.append(name, value);
            }
        }
        if !h.contains_key(CONTENT_TYPE) {
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        for (k, v) in &opts.headers {
            // Refused at `source put`; a spec stored before that is refused here.
            if is_framing_header(k) {
                return Err(AttemptError::permanent(
                    ErrorKind::Other,
                    format!("headers: {k:?} is a framing or hop-by-hop header"),
                ));
            }
            let v = self.resolve(&d.tenant, v, &format!("headers.{k}"))?;
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                AttemptError::permanent(
                    ErrorKind::Other,
                    format!("headers: {k:?} is not a valid header name"),
                )
            })?;
            let value = HeaderValue::from_str(&v).map_err(|_| {
                AttemptError::permanent(
                    ErrorKind::Other,
                    format!("headers.{k}: not a valid header value"),
                )
            })?;
            h.insert(name, value);
        }
        if let Some(auth) = &opts.basic_auth {
            let user = self.resolve(&d.tenant, &auth.username, "basic_auth.username")?;
            let pass = self.resolve(&d.tenant, &auth.password, "basic_auth.password")?;
            if user.contains(':') {
                return Err(AttemptError::permanent(
                    ErrorKind::Other,
                    "basic_auth.username: may not contain ':' (RFC 7617)",
                ));
            }
            h.insert(AUTHORIZATION, basic_authorization(&user, &pass)?);
        }
        // Redis' clock, as every due time: a worker whose clock runs hours off still stamps a
        // time receivers' replay windows accept.
        let ts = match d.at_ms {
            Some(ms) if ms > 0 => (ms / 1000) as u64,
            _ => SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        };
        let mut own = super::delivery_headers(d);
        own.insert(1, ("webhook-timestamp", ts.to_string()));
        let mut signing = None;
        if let Some(secrets) = &opts.signing_secret {
            // Refused at `source put`; a spec stored before that is refused here.
            if secrets.as_slice().len() > MAX_SIGNING_SECRETS {
                return Err(AttemptError::permanent(
                    ErrorKind::Other,
                    format!(
                        "signing_secret: {} secrets listed, at most {MAX_SIGNING_SECRETS}",
                        secrets.as_slice().len()
                    ),
                ));
            }
            let mut keys = Vec::with_capacity(secrets.as_slice().len());
            for s in secrets.as_slice() {
                let s = self.resolve(&d.tenant, s, "signing_secret")?;
                keys.push(
                    SigningKey::parse(&s)
                        .map_err(|e| AttemptError::permanent(ErrorKind::Other, e))?,
                );
            }
            signing = Some((keys, ts));
        }
        for (k, v) in own {
            let value = HeaderValue::from_str(&v).map_err(|_| {
                AttemptError::permanent(
                    ErrorKind::Other,
                    format!("{k}: {v:?} is not a valid header value"),
                )
            })?;
            h.insert(HeaderName::from_static(k), value);
        }
        Ok((h, signing))
    }
}

/// What an attempt is signed with: its keys and the `webhook-timestamp` it carries.
type Signing = (Vec<SigningKey>, u64);

/// `Basic base64(user:pass)` (RFC 7617, UTF-8), marked sensitive so that it is never
/// printed by a `Debug` of the request.
fn basic_authorization(user: &str, pass: &str) -> Result<HeaderValue, AttemptError> {
    use base64::Engine;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    let mut v = HeaderValue::from_str(&format!("Basic {token}")).map_err(|_| {
        AttemptError::permanent(ErrorKind::Other, "basic_auth: not a valid header value")
    })?;
    v.set_sensitive(true);
    Ok(v)
}

fn with_body(head: String, body: &str) -> String {
    if body.is_empty() {
        head
    } else {
        format!("{head}: {body}")
    }
}

/// A secret reference of option `what` that cannot be used, of kind `secret`: the
/// reference's own message after the option's name.
fn secret_error(
    make: fn(ErrorKind, String) -> AttemptError,
    what: &str,
    e: crate::secrets::SecretError,
) -> AttemptError {
    make(ErrorKind::Secret, format!("{what}: {e}"))
}

#[cfg(test)]
mod tests;
