//! Which Redis deployment a `redis.url` names, and whether this build can serve it.
//!
//! | form | served as |
//! | --- | --- |
//! | `redis://[user:password@]host[:port][/db]` | one server |
//! | `rediss://…` | one server over TLS (`redis.tls_*`) |
//! | `redis-cluster://[user:password@]host:port[?node=host:port&node=…]` | a Redis Cluster, through fred's cluster mode (the nodes are seeds; the others are discovered) |
//! | `redis-sentinel://[user:password@]host:port[/db]?sentinelServiceName=NAME[&node=host:port…]` | the master of `NAME` as the sentinels at `host:port` (and each `node`) report it, re-resolved on every reconnect |
//! | `rediss-cluster://…`, `rediss-sentinel://…` | the same over TLS (`redis.tls_*`): every node of the cluster; the sentinels and the master and replicas they name |
//!
//! Everything else is refused with [`UnsupportedUrl`] before any connection is made, so a URL
//! is never half-served (a cluster URL read as one server, a sentinel option ignored):
//! sentinel credentials of their own (`sentinelUsername`,
//! `sentinelPassword`), Unix sockets, a database other than 0 on a cluster, query parameters
//! the form does not take, and unknown schemes.

/// The Redis deployment a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One server: `redis://` or `rediss://` (TLS).
    Standalone,
    /// A Redis Cluster: `redis-cluster://` or `rediss-cluster://` (TLS).
    Cluster,
    /// A master behind Redis Sentinel: `redis-sentinel://` or `rediss-sentinel://` (TLS).
    Sentinel,
}

/// Whether `url` asks for TLS: `rediss://`, `rediss-cluster://` or `rediss-sentinel://`.
pub fn is_tls(url: &str) -> bool {
    ["rediss://", "rediss-cluster://", "rediss-sentinel://"]
        .iter()
        .any(|s| url.starts_with(s))
}

/// A `redis.url` this build cannot serve, or that is no URL at all; `url` has its password
/// redacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("redis.url {url} {reason}")]
pub struct UnsupportedUrl {
    /// The URL, password redacted.
    pub url: String,
    /// What is wrong (`cannot be served by this build: …`, `has no scheme: …`), and what
    /// to use instead.
    pub reason: String,
}

/// The forms this build serves, for error messages.
pub const SUPPORTED_FORMS: &str = "redis://[user:password@]host:port[/db], rediss://… (TLS), \
     redis-cluster://host:port[?node=host:port…], \
     redis-sentinel://host:port[/db]?sentinelServiceName=NAME[&node=host:port…], \
     or rediss-cluster:// / rediss-sentinel:// (the same over TLS)";

/// The topology of `url`, or why this build refuses it.
pub fn topology(url: &str) -> Result<Topology, UnsupportedUrl> {
    // `host:port` alone is the usual slip (it is how redis-cli takes an address): say what to
    // write, not that this build lacks something.
    if !url.contains("://") {
        let meant = crate::config::redact_url(&format!("redis://{url}"));
        return Err(UnsupportedUrl {
            url: meant.trim_start_matches("redis://").to_string(),
            reason: format!(
                "has no scheme: did you mean {meant}? A Redis URL starts with redis:// \
                 (rediss:// for TLS, redis-cluster:// or redis-sentinel://, rediss-cluster:// \
                 or rediss-sentinel:// with TLS)"
            ),
        });
    }
    let refuse = |reason: String| UnsupportedUrl {
        url: crate::config::redact_url(url),
        reason: format!("cannot be served by this build: {reason}"),
    };
    let parsed = url::Url::parse(url)
        .map_err(|e| refuse(format!("not a URL ({e}); expected {SUPPORTED_FORMS}")))?;
    let scheme = parsed.scheme();
    let topology = match scheme {
        "redis" | "rediss" => Topology::Standalone,
        "redis-cluster" | "rediss-cluster" => Topology::Cluster,
        "redis-sentinel" | "rediss-sentinel" => Topology::Sentinel,
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
    if parsed.host_str().is_none_or(str::is_empty) {
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
                    "{name}= on a {scheme}:// URL would be ignored; use redis-cluster:// \
                     (rediss-cluster://) for a cluster or redis-sentinel:// (rediss-sentinel://) \
                     for sentinels"
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
        Topology::Sentinel if service.as_deref().is_none_or(str::is_empty) => Err(refuse(
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
            ("rediss-cluster://u:p@h:7000?node=h:7001", Topology::Cluster),
            (
                "rediss-sentinel://h:26379?sentinelServiceName=m",
                Topology::Sentinel,
            ),
        ] {
            assert_eq!(topology(url), Ok(want), "{url}");
            assert_eq!(is_tls(url), url.starts_with("rediss"), "{url}");
        }
    }

    #[test]
    fn what_this_build_cannot_serve_is_refused_naming_the_redacted_url() {
        for (url, words) in [
            ("http://x", "unknown scheme \"http\""),
            (
                "rediss-cluster://u:secret@h:7000/2",
                "database 2 on a cluster",
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
            assert!(text.contains("cannot be served by this build"), "{text}");
        }
    }

    #[test]
    fn a_url_without_a_scheme_is_told_what_to_write_with_its_password_redacted() {
        for (url, meant) in [
            ("127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("localhost:6379", "redis://localhost:6379"),
            ("redis.internal", "redis://redis.internal"),
            ("u:secret@db:6380", "redis://u:***@db:6380"),
        ] {
            let text = topology(url).expect_err(url).to_string();
            assert!(text.contains(&format!("did you mean {meant}?")), "{text}");
            assert!(!text.contains("this build"), "{text}");
            assert!(!text.contains("secret"), "{text}");
        }
    }
}
