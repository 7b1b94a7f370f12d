//! The HTTP webhook sink: POST the body with the hook's headers and delivery headers.
//!
//! 2xx is ok; 3xx is not success and redirects are never followed (a followed
//! 301/302 turns a POST into a GET); 408/425/429/5xx and transport errors retry,
//! honouring `Retry-After`; any other 4xx is permanent (R8).

use super::guard::{blocked_in, AddressPolicy, GuardedResolver};
use super::signing::{signature_header, SigningKey};
use super::{is_reserved_header, truncate, AttemptError, Delivery, EdgePolicy, ErrorKind};
use crate::secrets::{has_reference, redact_url, SecretPolicy};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Bytes of a response body kept as the row's last error; the rest is never read.
pub const ERROR_BODY_MAX_BYTES: usize = 512;

/// Bytes of a 2xx body read (and dropped) so the connection can be reused; a longer or slower
/// body is abandoned with its connection. The outcome is decided by status and headers.
pub const DRAIN_MAX_BYTES: usize = 16 * 1024;

/// How long reading a response body (the drain of a 2xx, the error prefix) may take at most.
const BODY_READ_MAX: Duration = Duration::from_secs(1);

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
        if let Some(secrets) = &o.signing_secret {
            if secrets.as_slice().is_empty() {
                return Err("signing_secret: the list is empty".into());
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

/// What an HTTP answer means for the row (R8); one function, table-tested.
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

/// The HTTP sink: one shared client (connection pool), no redirects, no proxy, the SSRF
/// guard as its resolver.
#[derive(Debug, Clone)]
pub struct HttpSink {
    client: reqwest::Client,
    edge: EdgePolicy,
}

impl HttpSink {
    /// A client with no redirect following, no proxy (a proxy would resolve the host itself,
    /// past the guard) and no total timeout of its own: the attempt timeout (R7) wraps the
    /// whole attempt, connect to last body byte. Names resolve through [`GuardedResolver`].
    ///
    /// Idle connections are kept per host without a count limit, closed after 30 s unused:
    /// the pool can never hold more than the attempts that ran at once (at most
    /// `dispatch.concurrency`, whatever a reload sets it to), and a cap below that closes
    /// the surplus after every wave of attempts only to open it again for the next one
    /// (issue 12: a cap of 64 at concurrency 100 left ~12 800 sockets in TIME_WAIT per
    /// 50 000 deliveries).
    pub fn new(edge: EdgePolicy) -> Result<HttpSink, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver::new(edge.addresses.clone())))
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(usize::MAX)
            .tcp_nodelay(true)
            .user_agent(concat!("ankusa/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(HttpSink { client, edge })
    }

    /// The secret references this sink (and the batching sinks) may resolve.
    pub fn secrets(&self) -> &SecretPolicy {
        &self.edge.secrets
    }

    /// Deliver one row. Transport errors retry; a blocked address or a refused secret
    /// reference is permanent; the answer is classified by [`classify`] from its status and
    /// headers, reading at most [`ERROR_BODY_MAX_BYTES`] of an error body.
    pub async fn deliver(&self, opts: &HttpOpts, d: &Delivery) -> Result<(), AttemptError> {
        self.deliver_status(opts, d).await.map(drop)
    }

    /// [`HttpSink::deliver`] answering the 2xx status on success (for the attempt history).
    pub async fn deliver_status(&self, opts: &HttpOpts, d: &Delivery) -> Result<u16, AttemptError> {
        let url = self.resolve(&opts.url, "url")?;
        let url = check_url(&url, &self.edge.addresses).map_err(|e| match e {
            UrlProblem::Blocked(b) => AttemptError::permanent(ErrorKind::Other, b.to_string()),
            UrlProblem::Invalid(why) => AttemptError::permanent(
                ErrorKind::Other,
                format!("url (after resolving references) {why}"),
            ),
        })?;
        let headers = self.headers(opts, d)?;
        let req = self.client.post(url).headers(headers).body(d.body.clone());
        let resp = req.send().await.map_err(|e| match blocked_in(&e) {
            Some(b) => AttemptError::permanent(ErrorKind::Other, b.to_string()),
            None => {
                let (kind, error) = transport_error(e);
                AttemptError::retry(kind, error)
            }
        })?;
        let status = resp.status().as_u16();
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

    /// Resolve the secret references of option `what`: a reference the policy refuses is
    /// permanent (it is never sent), an unset one retries.
    fn resolve(&self, v: &str, what: &str) -> Result<String, AttemptError> {
        if !has_reference(v) {
            return Ok(v.to_string());
        }
        let secrets = &self.edge.secrets;
        secrets
            .check(v)
            .map_err(|e| secret_error(AttemptError::permanent, what, e))?;
        secrets
            .resolve(v)
            .map_err(|e| secret_error(AttemptError::retry, what, e))
    }

    /// The request headers: the producer's, then the sink's own, then the delivery headers,
    /// each later one replacing (never appending to) an earlier value of the same name.
    fn headers(&self, opts: &HttpOpts, d: &Delivery) -> Result<HeaderMap, AttemptError> {
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
            let produced = match serde_json::from_str::<serde_json::Value>(&d.headers) {
                Ok(serde_json::Value::Object(h)) => h,
                Ok(_) => return Err(bad("not a JSON object".into())),
                Err(e) => return Err(bad(e.to_string())),
            };
            for (k, v) in produced {
                let lk = k.to_ascii_lowercase();
                if matches!(
                    lk.as_str(),
                    "host" | "content-length" | "connection" | "transfer-encoding"
                ) || is_reserved_header(&lk)
                {
                    continue;
                }
                let Some(v) = v.as_str() else {
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
            let v = self.resolve(v, &format!("headers.{k}"))?;
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
        let ts = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut own = vec![
            ("webhook-id", d.row.clone()),
            ("webhook-timestamp", ts.to_string()),
            ("ankusa-delivery-id", d.row.clone()),
            ("ankusa-hook-id", d.hook.to_string()),
            ("ankusa-attempt", d.attempt.to_string()),
            ("ankusa-tenant", d.tenant.clone()),
            ("ankusa-source", d.source.clone()),
        ];
        if let Some(secrets) = &opts.signing_secret {
            let mut keys = Vec::with_capacity(secrets.as_slice().len());
            for s in secrets.as_slice() {
                let s = self.resolve(s, "signing_secret")?;
                keys.push(
                    SigningKey::parse(&s)
                        .map_err(|e| AttemptError::permanent(ErrorKind::Other, e))?,
                );
            }
            own.push((
                "webhook-signature",
                signature_header(&keys, &d.row, ts, &d.body),
            ));
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
        Ok(h)
    }
}

fn with_body(head: String, body: &str) -> String {
    if body.is_empty() {
        head
    } else {
        format!("{head}: {body}")
    }
}

/// Read at most `max` bytes of a body (more only within the last chunk, which is cut), for at
/// most [`BODY_READ_MAX`]; the rest is never read. Dropping the response closes a connection
/// whose body was not finished.
async fn read_bounded(mut resp: reqwest::Response, max: usize) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(BODY_READ_MAX, async {
        while buf.len() < max {
            match resp.chunk().await {
                Ok(Some(c)) => buf.extend_from_slice(&c[..c.len().min(max - buf.len())]),
                _ => break,
            }
        }
    })
    .await;
    buf
}

/// A secret reference of option `what` that cannot be used: the reference's own message,
/// whose kind is read from it (it names the `secret reference` when it is about one).
fn secret_error(
    make: fn(ErrorKind, String) -> AttemptError,
    what: &str,
    e: String,
) -> AttemptError {
    let error = format!("{what}: {e}");
    make(ErrorKind::of_text(&error), error)
}

/// A transport error's kind and its stored text: kind word and cause chain, without the URL
/// (its query or userinfo may hold a resolved secret).
fn transport_error(e: reqwest::Error) -> (ErrorKind, String) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_classified_answer_carries_the_kind_and_status_its_text_names() {
        for status in [301, 308, 400, 404, 408, 425, 429, 500, 503] {
            let e = classify(status, None, SystemTime::UNIX_EPOCH).unwrap_err();
            let text = match &e {
                AttemptError::Retry { error, .. } | AttemptError::Permanent { error, .. } => {
                    error.clone()
                }
                AttemptError::Timeout(_) => String::new(),
            };
            assert_eq!(e.kind(), ErrorKind::HttpStatus(status), "{status}");
            assert_eq!(e.kind(), ErrorKind::of_text(&text), "{text}");
        }
    }

    #[test]
    fn statuses_map_to_ok_retry_or_permanent() {
        let now = SystemTime::UNIX_EPOCH;
        let table: &[(u16, &str)] = &[
            (200, "ok"),
            (204, "ok"),
            (299, "ok"),
            (301, "permanent"),
            (302, "permanent"),
            (304, "permanent"),
            (400, "permanent"),
            (401, "permanent"),
            (404, "permanent"),
            (410, "permanent"),
            (408, "retry"),
            (425, "retry"),
            (429, "retry"),
            (500, "retry"),
            (503, "retry"),
            (599, "retry"),
        ];
        for (status, want) in table {
            let got = match classify(*status, None, now) {
                Ok(()) => "ok",
                Err(e) => e.outcome(),
            };
            assert_eq!(got, *want, "status {status}");
        }
    }

    #[test]
    fn retry_after_accepts_seconds_and_http_dates_and_ignores_garbage() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:51:37 GMT", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        match classify(429, Some("7"), now) {
            Err(AttemptError::Retry { retry_after, .. }) => {
                assert_eq!(retry_after, Some(Duration::from_secs(7)))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options_need_an_http_url_and_refuse_unknown_fields() {
        let ok = serde_json::json!({"url": "https://example.com/h", "headers": {"authorization": "${env:TOKEN}"}});
        assert!(HttpOpts::from_opts(ok.as_object().unwrap()).is_ok());
        let bad = serde_json::json!({"url": "ftp://x"});
        assert!(HttpOpts::from_opts(bad.as_object().unwrap())
            .unwrap_err()
            .contains("url"));
        let unknown = serde_json::json!({"url": "http://x", "verb": "PUT"});
        assert!(HttpOpts::from_opts(unknown.as_object().unwrap())
            .unwrap_err()
            .contains("verb"));
    }

    #[test]
    fn delivery_headers_replace_earlier_values_never_append() {
        let sink = HttpSink::new(EdgePolicy::default()).unwrap();
        let d = Delivery {
            tenant: "acme".into(),
            source: "s".into(),
            row: "9.0".into(),
            hook: 9,
            attempt: 3,
            body: bytes::Bytes::from_static(b"{}"),
            // stored by other means than a producer, which refuses these at commit
            headers: r#"{"webhook-id":"forged","Ankusa-Tenant":"other","authorization":"producer","x-a":"1"}"#
                .into(),
            committed_at_ms: 0,
        };
        let opts = HttpOpts {
            url: "https://example.com/h".into(),
            headers: BTreeMap::from([("authorization".to_string(), "sink".to_string())]),
            signing_secret: Some(SigningSecrets::One(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            )),
        };
        let h = sink.headers(&opts, &d).unwrap();
        let all = |n: &str| {
            h.get_all(n)
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("webhook-id"), ["9.0"]);
        assert_eq!(all("ankusa-tenant"), ["acme"]);
        assert_eq!(all("ankusa-attempt"), ["3"]);
        assert_eq!(all("authorization"), ["sink"]);
        assert_eq!(all("x-a"), ["1"]);
        assert_eq!(all("webhook-signature").len(), 1);
        assert!(all("webhook-signature")[0].starts_with("v1,"));
    }

    #[test]
    fn options_refuse_reserved_headers_bad_secrets_and_blocked_literals() {
        let o = |v: serde_json::Value| {
            HttpOpts::from_opts_with(v.as_object().unwrap(), &EdgePolicy::default())
        };
        assert!(o(
            serde_json::json!({"url": "https://x/", "headers": {"Webhook-Signature": "v1,x"}})
        )
        .unwrap_err()
        .contains("reserved"));
        assert!(
            o(serde_json::json!({"url": "https://x/", "signing_secret": []}))
                .unwrap_err()
                .contains("empty")
        );
        assert!(o(serde_json::json!({"url": "https://x/", "signing_secret": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "${env:ANKUSA_SECRET_NEXT}"]}))
            .is_ok());
        assert!(o(serde_json::json!({"url": "http://[::1]:8080/"}))
            .unwrap_err()
            .contains("blocked address ::1"));
        assert!(o(serde_json::json!({"url": "${env:ANKUSA_SECRET_URL}"})).is_ok());
        assert!(o(serde_json::json!({"url": "${env:URL}"}))
            .unwrap_err()
            .contains("secrets.env_prefix"));
        // the scheduler's syntax-only parse leaves the guards to attempt time
        assert!(HttpOpts::from_opts(
            serde_json::json!({"url": "http://127.0.0.1/"})
                .as_object()
                .unwrap()
        )
        .is_ok());
    }

    /// Waves of attempts as wide as the concurrency reuse their connections: a pool that
    /// keeps fewer idle connections than that closes the surplus after each wave and opens
    /// it again for the next (issue 12: connections opened ≤ concurrency + 10).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waves_of_concurrent_attempts_reuse_their_connections() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        // A keep-alive HTTP/1.1 endpoint answering 200 to every request, counting accepts.
        let server = tokio::spawn({
            let accepted = accepted.clone();
            async move {
                while let Ok((mut tcp, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        let (mut buf, mut chunk) = (Vec::new(), [0u8; 8192]);
                        loop {
                            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                let head =
                                    String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                                let len: usize = head
                                    .lines()
                                    .find_map(|l| l.strip_prefix("content-length:"))
                                    .and_then(|v| v.trim().parse().ok())
                                    .unwrap_or(0);
                                if buf.len() >= end + 4 + len {
                                    buf.drain(..end + 4 + len);
                                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                                    if tcp.write_all(ok).await.is_err() {
                                        return;
                                    }
                                    continue;
                                }
                            }
                            match tcp.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                    });
                }
            }
        });
        let sink = HttpSink::new(crate::testkit::loopback_edge()).unwrap();
        let opts = HttpOpts {
            url: format!("http://{addr}/h"),
            headers: BTreeMap::new(),
            signing_secret: None,
        };
        let concurrency = 100;
        for wave in 0..10u64 {
            let mut attempts = tokio::task::JoinSet::new();
            for i in 0..concurrency {
                let (sink, opts) = (sink.clone(), opts.clone());
                let d = Delivery {
                    tenant: "acme".into(),
                    source: "s".into(),
                    row: format!("{}.0", wave * 1000 + i),
                    hook: wave * 1000 + i,
                    attempt: 1,
                    body: bytes::Bytes::from(vec![b'x'; 1024]),
                    headers: String::new(),
                    committed_at_ms: 0,
                };
                attempts.spawn(async move { sink.deliver(&opts, &d).await });
            }
            while let Some(r) = attempts.join_next().await {
                assert!(r.unwrap().is_ok());
            }
        }
        let opened = accepted.load(Ordering::SeqCst);
        server.abort();
        assert!(
            opened <= concurrency as usize + 10,
            "{opened} connections opened for 10 waves of {concurrency} attempts"
        );
    }

    /// The cost of signing per delivery (BENCHMARKS.md): building one delivery's headers for
    /// a 1 KiB body, unsigned, signed with one secret and with two (rotation).
    /// `cargo test --release --lib signing_cost -- --ignored --nocapture`
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn signing_cost_per_delivery() {
        let sink = HttpSink::new(EdgePolicy::default()).unwrap();
        let d = Delivery {
            tenant: "acme".into(),
            source: "orders".into(),
            row: "123456.0".into(),
            hook: 123456,
            attempt: 1,
            body: bytes::Bytes::from(vec![b'x'; 1024]),
            headers: r#"{"content-type":"application/json","x-event":"push"}"#.into(),
            committed_at_ms: 0,
        };
        let a = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let b = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24tdGVzdA==";
        let cases = [
            ("unsigned", None),
            ("1 secret", Some(SigningSecrets::One(a.into()))),
            (
                "2 secrets",
                Some(SigningSecrets::Many(vec![a.into(), b.into()])),
            ),
        ];
        let n = 200_000;
        for (name, secret) in cases {
            let opts = HttpOpts {
                url: "https://example.com/h".into(),
                headers: BTreeMap::new(),
                signing_secret: secret,
            };
            let _ = sink.headers(&opts, &d).unwrap();
            let t = std::time::Instant::now();
            for _ in 0..n {
                std::hint::black_box(sink.headers(&opts, &d).unwrap());
            }
            println!(
                "headers for a 1 KiB delivery, {name}: {} ns",
                t.elapsed().as_nanos() / n
            );
        }
    }
}
