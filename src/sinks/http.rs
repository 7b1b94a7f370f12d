//! The HTTP webhook sink: POST the body with the hook's headers and delivery headers.
//!
//! 2xx is ok; 3xx is not success and redirects are never followed (a followed
//! 301/302 turns a POST into a GET); 408/425/429/5xx and transport errors retry,
//! honouring `Retry-After`; any other 4xx is permanent (R8).

use super::{resolve_secrets, truncate, AttemptError, Delivery};
use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Bytes of a response body kept as the row's last error.
pub const ERROR_BODY_MAX_BYTES: usize = 512;

/// Options of an `http` sink entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpOpts {
    /// Endpoint URL (`http://` or `https://`); may hold `${env:NAME}` references.
    pub url: String,
    /// Extra request headers; values may hold `${env:NAME}` references.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

impl HttpOpts {
    /// Parse and check the options of a sink entry; the error says which field is wrong.
    pub fn from_opts(
        opts: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<HttpOpts, String> {
        let o: HttpOpts = serde_json::from_value(serde_json::Value::Object(opts.clone()))
            .map_err(|e| e.to_string())?;
        if !(o.url.starts_with("http://")
            || o.url.starts_with("https://")
            || o.url.starts_with("${env:"))
        {
            return Err(format!(
                "url {:?}: must start with http:// or https://",
                o.url
            ));
        }
        Ok(o)
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
        }),
        300..=399 => Err(AttemptError::Permanent(format!(
            "http {status} redirect not followed"
        ))),
        _ => Err(AttemptError::Permanent(format!("http {status}"))),
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

/// The HTTP sink: one shared client (connection pool), no redirects.
#[derive(Debug, Clone)]
pub struct HttpSink {
    client: reqwest::Client,
}

impl HttpSink {
    /// A client with no redirect following and no total timeout of its own: the attempt
    /// timeout (R7) wraps the whole attempt, connect to last body byte.
    pub fn new() -> Result<HttpSink, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .user_agent(concat!("ankusa/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(HttpSink { client })
    }

    /// Deliver one row. Transport errors retry; the answer is classified by [`classify`].
    pub async fn deliver(&self, opts: &HttpOpts, d: &Delivery) -> Result<(), AttemptError> {
        self.deliver_status(opts, d).await.map(drop)
    }

    /// [`HttpSink::deliver`] answering the 2xx status on success (for the attempt history).
    pub async fn deliver_status(&self, opts: &HttpOpts, d: &Delivery) -> Result<u16, AttemptError> {
        let url = resolve_secrets(&opts.url).map_err(|e| AttemptError::Retry {
            error: e,
            retry_after: None,
        })?;
        let mut req = self.client.post(&url).body(d.body.clone());
        let mut has_content_type = false;
        if !d.headers.is_empty() {
            // The producer checks headers at commit; headers written by other means that
            // HTTP cannot carry would fail every attempt alike, so they are permanent.
            let bad =
                |what: String| AttemptError::Permanent(format!("invalid hook headers: {what}"));
            let h = match serde_json::from_str::<serde_json::Value>(&d.headers) {
                Ok(serde_json::Value::Object(h)) => h,
                Ok(_) => return Err(bad("not a JSON object".into())),
                Err(e) => return Err(bad(e.to_string())),
            };
            for (k, v) in h {
                let lk = k.to_ascii_lowercase();
                if matches!(
                    lk.as_str(),
                    "host" | "content-length" | "connection" | "transfer-encoding"
                ) {
                    continue;
                }
                let Some(v) = v.as_str() else {
                    return Err(bad(format!("value of {k:?} is not a string")));
                };
                let name =
                    HeaderName::from_bytes(k.as_bytes()).map_err(|_| bad(format!("name {k:?}")))?;
                let value = HeaderValue::from_str(v).map_err(|_| bad(format!("value of {k:?}")))?;
                has_content_type |= lk == "content-type";
                req = req.header(name, value);
            }
        }
        if !has_content_type {
            req = req.header("content-type", "application/json");
        }
        for (k, v) in &opts.headers {
            let v = resolve_secrets(v).map_err(|e| AttemptError::Retry {
                error: e,
                retry_after: None,
            })?;
            req = req.header(k, v);
        }
        let ts = d.committed_at_ms / 1000;
        req = req
            .header("webhook-id", &d.row)
            .header("webhook-timestamp", ts.to_string())
            .header("ankusa-delivery-id", &d.row)
            .header("ankusa-hook-id", d.hook.to_string())
            .header("ankusa-attempt", d.attempt.to_string())
            .header("ankusa-tenant", &d.tenant)
            .header("ankusa-source", &d.source);
        let resp = req.send().await.map_err(|e| AttemptError::Retry {
            error: transport_error(&e),
            retry_after: None,
        })?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match classify(status, retry_after.as_deref(), SystemTime::now()) {
            Ok(()) => {
                // Drain so the connection returns to the pool.
                let _ = resp.bytes().await;
                Ok(status)
            }
            Err(e) => {
                let body = read_bounded(resp, ERROR_BODY_MAX_BYTES).await;
                Err(match e {
                    AttemptError::Retry { error, retry_after } => AttemptError::Retry {
                        error: with_body(error, &body),
                        retry_after,
                    },
                    AttemptError::Permanent(r) => AttemptError::Permanent(with_body(r, &body)),
                })
            }
        }
    }
}

fn with_body(head: String, body: &str) -> String {
    if body.is_empty() {
        head
    } else {
        format!("{head}: {body}")
    }
}

async fn read_bounded(mut resp: reqwest::Response, max: usize) -> String {
    let mut buf = Vec::new();
    while buf.len() < max {
        match resp.chunk().await {
            Ok(Some(c)) => buf.extend_from_slice(&c),
            _ => break,
        }
    }
    truncate(String::from_utf8_lossy(&buf).into_owned(), max)
}

fn transport_error(e: &reqwest::Error) -> String {
    let kind = if e.is_connect() {
        "connect"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else {
        "transport"
    };
    let mut s = format!("{kind}: {e}");
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    truncate(s, ERROR_BODY_MAX_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

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
                Err(AttemptError::Retry { .. }) => "retry",
                Err(AttemptError::Permanent(_)) => "permanent",
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
}
