//! The form of `[http] proxy` and `no_proxy`: the operator's egress proxy as the http
//! sink's transport uses it (`sinks/http/proxy.rs` opens the tunnels). It lives with the
//! config so that validation and the transport agree on one reading.

use ipnet::IpNet;
use reqwest::header::HeaderValue;
use std::net::IpAddr;

/// The operator's egress proxy, from `[http] proxy` and `no_proxy`.
#[derive(Clone)]
pub struct EgressProxy {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `Basic base64(user:password)` from the proxy URL's user info.
    pub(crate) authorization: Option<HeaderValue>,
    no_proxy: Vec<Bypass>,
}

impl std::fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressProxy")
            .field("host", &self.host)
            .field("port", &self.port)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "[redacted]"),
            )
            .field("no_proxy", &self.no_proxy)
            .finish()
    }
}

/// One `no_proxy` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bypass {
    /// A name and its subdomains (`example.com`), or only its subdomains (`.example.com`).
    Name { name: String, subdomains_only: bool },
    /// Literal IP hosts in a block (`10.0.0.0/8`, `192.0.2.7`).
    Net(IpNet),
}

impl EgressProxy {
    /// The proxy of an `[http]` section: `None` without `proxy`.
    ///
    /// # Errors
    /// The config key and why, for a `proxy` that is not `http://[user:password@]host[:port]`
    /// or a `no_proxy` entry that is empty (config validation reports these).
    pub fn from_config(c: &super::HttpConfig) -> Result<Option<EgressProxy>, String> {
        let Some(raw) = c.proxy.as_deref().filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        let url = url::Url::parse(raw).map_err(|e| format!("not a URL ({e})"))?;
        if url.scheme() != "http" {
            return Err(format!(
                "scheme {:?}: only http:// proxies (the tunnel to an https destination is TLS \
                 end to end through it)",
                url.scheme()
            ));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_string(),
            Some(url::Host::Ipv4(a)) => a.to_string(),
            Some(url::Host::Ipv6(a)) => a.to_string(),
            None => return Err("has no host".into()),
        };
        if !matches!(url.path(), "" | "/") || url.query().is_some() {
            return Err("must be http://[user:password@]host[:port] (no path or query)".into());
        }
        let authorization = if url.username().is_empty() && url.password().is_none() {
            None
        } else {
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8()
                    .map(|c| c.into_owned())
                    .map_err(|_| "its user info is not UTF-8 once percent-decoded".to_string())
            };
            let user = decode(url.username())?;
            let pass = decode(url.password().unwrap_or(""))?;
            use base64::Engine;
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
            let mut v = HeaderValue::from_str(&format!("Basic {token}"))
                .map_err(|_| "its user info is not a valid header value".to_string())?;
            v.set_sensitive(true);
            Some(v)
        };
        let mut no_proxy = Vec::with_capacity(c.no_proxy.len());
        for (i, entry) in c.no_proxy.iter().enumerate() {
            no_proxy.push(Bypass::parse(entry).map_err(|why| format!("no_proxy[{i}]: {why}"))?);
        }
        Ok(Some(EgressProxy {
            port: url.port_or_known_default().unwrap_or(80),
            host,
            authorization,
            no_proxy,
        }))
    }

    /// Whether `url` is reached directly (`no_proxy` covers its host) rather than through the
    /// proxy. The guard applies on both paths.
    pub fn bypasses(&self, url: &url::Url) -> bool {
        let host = match url.host() {
            Some(h) => h,
            None => return false,
        };
        self.no_proxy.iter().any(|b| match (b, &host) {
            (Bypass::Net(n), url::Host::Ipv4(a)) => n.contains(&IpAddr::V4(*a)),
            (Bypass::Net(n), url::Host::Ipv6(a)) => n.contains(&IpAddr::V6(*a)),
            (
                Bypass::Name {
                    name,
                    subdomains_only,
                },
                url::Host::Domain(d),
            ) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                (!subdomains_only && d == *name)
                    || d.strip_suffix(name.as_str())
                        .is_some_and(|head| head.ends_with('.'))
            }
            _ => false,
        })
    }

    /// `host:port` of the proxy (for errors and logs; never the user info).
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl Bypass {
    fn parse(entry: &str) -> Result<Bypass, String> {
        let e = entry.trim();
        if e.is_empty() {
            return Err("empty".into());
        }
        if let Ok(n) = e.parse::<IpNet>() {
            return Ok(Bypass::Net(n));
        }
        if let Ok(a) = e
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            return Ok(Bypass::Net(IpNet::from(a)));
        }
        let (name, subdomains_only) = match e.strip_prefix('.') {
            Some(rest) => (rest, true),
            None => (e, false),
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        {
            return Err(format!(
                "{e:?} is not a host name, .domain, IP address or CIDR block"
            ));
        }
        Ok(Bypass::Name {
            name,
            subdomains_only,
        })
    }
}
