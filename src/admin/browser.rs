//! The admin listener within a browser's reach: a web page the operator opens must not be
//! able to read or drive the API, with or without a token (`docs/security.md` "Browsers").
//!
//! - **DNS rebinding**: a page of `evil.example` whose name is made to resolve to
//!   `127.0.0.1` reaches the listener with `Host: evil.example:9187`. Only a `Host` the
//!   worker answers to is served: any IP literal (rebinding needs a name), `localhost`, and
//!   the names of `admin.public_hosts`; any other is 403 `untrusted_host`.
//! - **Cross-site requests** (a form or `fetch` posting `text/plain` to ingest or
//!   `/admin/tick`, which needs no preflight): an `Origin` that is not the request's own
//!   origin, and a `Sec-Fetch-Site` other than `same-origin` or `none`, are 403
//!   `cross_site`. Programs (curl, SDKs, Prometheus) send neither header.
//!
//! Every route is guarded, `/healthz`, `/readyz`, `/metrics` and `/openapi.json` included.

use super::{AdminState, ApiError};
use crate::config::split_host;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;

/// The names the worker answers to besides IP literals and `localhost`.
#[derive(Debug, Clone, Default)]
pub struct Hosts {
    /// `(name, port)`: lowercase name; `None` port matches any.
    public: Vec<(String, Option<u16>)>,
}

impl Hosts {
    /// `admin.public_hosts` (entries `name` or `name:port`, validated by the config).
    pub fn new(public: &[String]) -> Hosts {
        Hosts {
            public: public
                .iter()
                .filter_map(|h| split_host(h))
                .map(|(name, port)| (name.to_ascii_lowercase(), port))
                .collect(),
        }
    }

    /// Whether a request with this `Host` header value is served.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        let name = name.to_ascii_lowercase();
        if name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok()
            || name == "localhost"
        {
            return true;
        }
        self.public
            .iter()
            .any(|(n, p)| *n == name && p.is_none_or(|p| Some(p) == port))
    }
}

/// Why a request is refused as cross-site, if it is: its `Sec-Fetch-Site`, or its `Origin`
/// compared with its `Host`.
pub fn cross_site(headers: &HeaderMap) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("?");
        if site != "same-origin" && site != "none" {
            return Some(format!("Sec-Fetch-Site: {site}"));
        }
    }
    let origin = headers.get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or("?");
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    (!same_origin(origin, host)).then(|| format!("Origin: {origin}"))
}

/// Whether `origin` (`scheme://host[:port]`) names the same host and port as `host`.
fn same_origin(origin: &str, host: &str) -> bool {
    let Ok(o) = url::Url::parse(origin) else {
        return false;
    };
    let (Some(oh), Some(op)) = (o.host_str(), o.port_or_known_default()) else {
        return false;
    };
    let Some((name, port)) = split_host(host) else {
        return false;
    };
    oh.eq_ignore_ascii_case(name) && port.unwrap_or(op) == op
}

/// Middleware of every request: refuse an untrusted `Host` and cross-site requests.
pub(super) async fn guard(State(st): State<AdminState>, req: Request, next: Next) -> Response {
    if page_navigation(req.method(), req.uri().path(), req.headers()) {
        // A link to a console page from another site (a portal link in the operator's
        // product, a bookmark): a read the other site cannot see into, which changes
        // nothing; the Host check still applies, and every form POST stays same-origin.
        return match check(&st.access.hosts, &host_only(req.headers())) {
            Ok(()) => next.run(req).await,
            Err(e) => e.into_response(),
        };
    }
    match check(&st.access.hosts, req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Whether a request is a browser's top-level or frame navigation (`Sec-Fetch-Mode:
/// navigate`) that reads a console page (`GET`/`HEAD` under `/ui/` or `/portal/`).
pub fn page_navigation(method: &axum::http::Method, path: &str, headers: &HeaderMap) -> bool {
    let read = method == axum::http::Method::GET || method == axum::http::Method::HEAD;
    let page = path == "/ui"
        || path == "/portal"
        || path.starts_with("/ui/")
        || path.starts_with("/portal/");
    let navigate = headers
        .get("sec-fetch-mode")
        .is_some_and(|m| m.as_bytes() == b"navigate");
    read && page && navigate
}

/// The request's `Host` alone, for the host check of a page navigation.
fn host_only(headers: &HeaderMap) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(host) = headers.get(header::HOST) {
        h.insert(header::HOST, host.clone());
    }
    h
}

/// [`guard`]'s decision. A request without `Host` (HTTP/1.0) comes from no browser and
/// passes the host check.
fn check(hosts: &Hosts, headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or("?");
        if !hosts.allows(host) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "untrusted_host",
                format!(
                    "Host {host:?} is not a name this worker answers to: list it in \
                     admin.public_hosts (IP addresses and localhost are always answered)"
                ),
            ));
        }
    }
    match cross_site(headers) {
        Some(why) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_site",
            format!("cross-site request refused ({why}): the admin API serves no other site"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn ip_literals_localhost_and_public_hosts_are_answered_and_other_names_are_not() {
        let hosts = Hosts::new(&["ankusa.internal".into(), "worker-1:9187".into()]);
        for ok in [
            "127.0.0.1:9187",
            "127.0.0.1",
            "[::1]:9187",
            "10.0.0.7:80",
            "localhost:9187",
            "LOCALHOST",
            "ankusa.internal",
            "Ankusa.Internal:443",
            "worker-1:9187",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example:9187",
            "localhost.evil.example",
            "worker-1:9188",
            "worker-1",
            "user@127.0.0.1",
            "127.0.0.1:x",
            "",
            "ankusa.internal.",
            "2130706433",
        ] {
            assert!(!hosts.allows(bad), "{bad}");
        }
    }

    #[test]
    fn cross_site_requests_are_refused_and_same_origin_ones_pass() {
        let host = ("host", "localhost:9187");
        assert_eq!(cross_site(&headers(&[host])), None);
        assert_eq!(
            cross_site(&headers(&[host, ("origin", "http://localhost:9187")])),
            None
        );
        assert_eq!(
            cross_site(&headers(&[
                ("host", "ankusa.example"),
                ("origin", "https://ankusa.example")
            ])),
            None
        );
        assert_eq!(
            cross_site(&headers(&[host, ("sec-fetch-site", "same-origin")])),
            None
        );
        assert_eq!(
            cross_site(&headers(&[host, ("sec-fetch-site", "none")])),
            None
        );
        for refused in [
            &[host, ("origin", "http://evil.example")][..],
            &[host, ("origin", "http://localhost:3000")],
            &[host, ("origin", "null")],
            &[host, ("sec-fetch-site", "cross-site")],
            &[host, ("sec-fetch-site", "same-site")],
            &[("origin", "http://localhost:9187")],
        ] {
            assert!(cross_site(&headers(refused)).is_some(), "{refused:?}");
        }
    }

    #[test]
    fn refusals_name_the_host_and_the_key_that_lists_hosts() {
        let e = check(&Hosts::default(), &headers(&[("host", "evil.example")])).unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert_eq!(e.body.error.code, "untrusted_host");
        assert!(e.body.error.message.contains("admin.public_hosts"));
        assert!(check(&Hosts::default(), &HeaderMap::new()).is_ok());
    }
}
