//! Which Redis deployment a `redis.url` names, and whether this build can serve it.
//!
//! | form | served as |
//! | --- | --- |
//! | `redis://[user:password@]host[:port][/db]` | one server |
//! | `rediss://…` | one server over TLS (`redis.tls_*`) |
//! | `redis-cluster://[user:password@]host:port[?node=host:port&node=…]` | a Redis Cluster, through fred's cluster mode (the nodes are seeds; the others are discovered) |
//! | `redis-sentinel://[user:password@]host:port[/db]?sentinelServiceName=NAME[&node=host:port…]` | the master of `NAME` as the sentinels at `host:port` (and each `node`) report it, re-resolved on every reconnect |
//!
//! Everything else is refused with [`UnsupportedUrl`] before any connection is made, so a URL
//! is never half-served (a cluster URL read as one server, a sentinel option ignored): TLS to
//! a cluster or through sentinels, sentinel credentials of their own (`sentinelUsername`,
//! `sentinelPassword`), Unix sockets, a database other than 0 on a cluster, query parameters
//! the form does not take, and unknown schemes.

/// The Redis deployment a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One server: `redis://` or `rediss://` (TLS).
    Standalone,
    /// A Redis Cluster: `redis-cluster://`.
    Cluster,
    /// A master behind Redis Sentinel: `redis-sentinel://`.
    Sentinel,
}

/// A `redis.url` this build cannot serve; `url` has its password redacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("redis.url {url} cannot be served by this build: {reason}")]
pub struct UnsupportedUrl {
    /// The URL, password redacted.
    pub url: String,
    /// Why, and what to use instead.
    pub reason: String,
}

/// The forms this build serves, for error messages.
pub const SUPPORTED_FORMS: &str = "redis://[user:password@]host:port[/db], rediss://… (TLS), \
     redis-cluster://host:port[?node=host:port…] or \
     redis-sentinel://host:port[/db]?sentinelServiceName=NAME[&node=host:port…]";

/// The topology of `url`, or why this build refuses it.
pub fn topology(url: &str) -> Result<Topology, UnsupportedUrl> {
    let refuse = |reason: String| UnsupportedUrl {
        url: crate::config::redact_url(url),
        reason,
    };
    let parsed = url::Url::parse(url)
        .map_err(|e| refuse(format!("not a URL ({e}); expected {SUPPORTED_FORMS}")))?;
    let scheme = parsed.scheme();
    let topology = match scheme {
        "redis" | "rediss" => Topology::Standalone,
        "redis-cluster" => Topology::Cluster,
        "redis-sentinel" => Topology::Sentinel,
        "rediss-cluster" | "rediss-sentinel" => {
            return Err(refuse(format!(
                "{scheme}:// (TLS to a Redis Cluster or through Redis Sentinel) is not supported; \
                 use redis-cluster:// or redis-sentinel:// on a trusted network, or rediss:// to one server"
            )))
        }
        "unix" | "redis+unix" => {
            return Err(refuse(format!(
                "{scheme}:// (a Unix socket) is not supported; use redis://host:port"
            )))
        }
        other => {
            return Err(refuse(format!(
                "unknown scheme {other:?}; expected {SUPPORTED_FORMS}"
            )))
        }
    };
    if parsed.host_str().map_or(true, str::is_empty) {
        return Err(refuse(format!("no host; expected {SUPPORTED_FORMS}")));
    }
    let mut service = None;
    for (name, value) in parsed.query_pairs() {
        match (topology, name.as_ref()) {
            (Topology::Cluster | Topology::Sentinel, "node") => {
                if !is_host_port(&value) {
                    return Err(refuse(format!(
                        "node={value} is not host:port (one node= per seed node)"
                    )));
                }
            }
            (Topology::Sentinel, "sentinelServiceName") => service = Some(value.to_string()),
            (Topology::Sentinel, "sentinelUsername" | "sentinelPassword") => {
                return Err(refuse(format!(
                    "{name} (sentinel credentials of their own) is not supported; the URL's \
                     user:password is sent to the sentinels and to the master alike"
                )))
            }
            (Topology::Standalone, "node" | "sentinelServiceName") => {
                return Err(refuse(format!(
                    "{name}= on a {scheme}:// URL would be ignored; use redis-cluster:// for a \
                     cluster or redis-sentinel:// for sentinels"
                )))
            }
            (_, other) => {
                return Err(refuse(format!(
                    "query parameter {other:?} is not understood by a {scheme}:// URL"
                )))
            }
        }
    }
    match topology {
        Topology::Cluster if !matches!(parsed.path(), "" | "/" | "/0") => Err(refuse(format!(
            "database {} on a cluster: Redis Cluster has database 0 only",
            parsed.path().trim_start_matches('/')
        ))),
        Topology::Sentinel if service.as_deref().map_or(true, str::is_empty) => Err(refuse(
            "no sentinelServiceName=NAME (the master name the sentinels monitor)".into(),
        )),
        _ => Ok(topology),
    }
}

/// Whether `s` is `host:port` with a numeric port.
fn is_host_port(s: &str) -> bool {
    s.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_served_forms_name_their_topology() {
        for (url, want) in [
            ("redis://127.0.0.1:6379", Topology::Standalone),
            ("rediss://u:p@h:6380/2", Topology::Standalone),
            ("redis-cluster://h:7000", Topology::Cluster),
            (
                "redis-cluster://u:p@h:7000?node=h:7001&node=h:7002",
                Topology::Cluster,
            ),
            (
                "redis-sentinel://h:26379/0?sentinelServiceName=m&node=h:26380",
                Topology::Sentinel,
            ),
        ] {
            assert_eq!(topology(url), Ok(want), "{url}");
        }
    }

    #[test]
    fn what_this_build_cannot_serve_is_refused_naming_the_redacted_url() {
        for (url, words) in [
            ("http://x", "unknown scheme \"http\""),
            ("rediss-cluster://u:secret@h:7000", "TLS to a Redis Cluster"),
            (
                "rediss-sentinel://h:1?sentinelServiceName=m",
                "not supported",
            ),
            ("unix:///tmp/redis.sock", "Unix socket"),
            ("redis-cluster://h:7000/3", "database 3 on a cluster"),
            (
                "redis-cluster://h:7000?node=nope",
                "node=nope is not host:port",
            ),
            ("redis-sentinel://h:26379", "no sentinelServiceName"),
            (
                "redis-sentinel://h:1?sentinelServiceName=m&sentinelPassword=x",
                "sentinelPassword",
            ),
            ("redis://h:6379?node=h:2", "would be ignored"),
            (
                "redis-cluster://h:1?timeout=3",
                "\"timeout\" is not understood",
            ),
            ("redis-cluster:///x", "no host"),
        ] {
            let e = topology(url).expect_err(url);
            let text = e.to_string();
            assert!(text.contains(words), "{url}: {text}");
            assert!(!text.contains("secret"), "{url}: {text}");
            assert!(text.starts_with("redis.url "), "{text}");
        }
    }
}
