//! The SSRF guard of requests to tenants' URLs (`[http] deny_private`, `allow_cidrs`).
//!
//! A tenant chooses the URL, so without a guard any tenant can make the worker call its own
//! network: the cloud metadata address, Redis, admin ports. The guard works on addresses,
//! never on the host string:
//! 1. an IP-literal host is checked as is ([`AddressPolicy::check_url`]; the `url` crate has
//!    already normalised `2130706433`, `0177.0.0.1` and `127.1` to `127.0.0.1`);
//! 2. a name is resolved by [`GuardedResolver`], which refuses the name if *any* address is
//!    non-public and hands the HTTP client only the checked addresses, so the connection goes
//!    to an address that passed (no rebinding between check and connect);
//! 3. a resolution error fails the attempt (retried), it never lets the request through.
//!
//! Redirects are never followed (see [`super::http`]), so a 30x cannot lead elsewhere.

use ipnet::IpNet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// An address refused by the guard: the address and the range it falls in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The host as written in the URL (a name or a literal).
    pub host: String,
    /// The refused address.
    pub addr: IpAddr,
    /// The range it falls in, e.g. `loopback`, `private (RFC 1918)`.
    pub range: &'static str,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "blocked address {} ({}) for host {} (http.deny_private; exempt with http.allow_cidrs)",
            self.addr, self.range, self.host
        )
    }
}

impl std::error::Error for Blocked {}

/// Which addresses requests may go to, from `[http]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPolicy {
    /// Refuse non-public addresses.
    pub deny_private: bool,
    /// Exemptions from `deny_private`.
    pub allow: Vec<IpNet>,
}

impl Default for AddressPolicy {
    fn default() -> Self {
        AddressPolicy {
            deny_private: true,
            allow: Vec::new(),
        }
    }
}

impl AddressPolicy {
    /// The policy of an `[http]` section; CIDRs that do not parse are skipped (config
    /// validation has refused them already, naming `http.allow_cidrs`).
    pub fn from_config(c: &crate::config::HttpConfig) -> AddressPolicy {
        AddressPolicy {
            deny_private: c.deny_private,
            allow: c
                .allow_cidrs
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect(),
        }
    }

    /// `Err` when `addr` is non-public and not exempt.
    pub fn check(&self, host: &str, addr: IpAddr) -> Result<(), Blocked> {
        if !self.deny_private {
            return Ok(());
        }
        let range = match non_public(addr) {
            Some(r) => r,
            None => return Ok(()),
        };
        // An IPv4-mapped form is exempt like the IPv4 address it carries.
        let v4 = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        if self
            .allow
            .iter()
            .any(|n| n.contains(&addr) || v4.is_some_and(|a| n.contains(&a)))
        {
            return Ok(());
        }
        Err(Blocked {
            host: host.to_string(),
            addr,
            range,
        })
    }

    /// Check an IP-literal host of `url` (which the HTTP client connects to without resolving).
    /// A name is left to [`GuardedResolver`]; a URL without a host is not checked here.
    pub fn check_url(&self, url: &url::Url) -> Result<(), Blocked> {
        match url.host() {
            Some(url::Host::Ipv4(a)) => self.check(&a.to_string(), IpAddr::V4(a)),
            Some(url::Host::Ipv6(a)) => self.check(&format!("[{a}]"), IpAddr::V6(a)),
            _ => Ok(()),
        }
    }
}

/// The range a non-public address falls in; `None` for a public address.
pub fn non_public(addr: IpAddr) -> Option<&'static str> {
    match addr {
        IpAddr::V4(a) => non_public_v4(a),
        IpAddr::V6(a) => non_public_v6(a),
    }
}

fn non_public_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    let r = match o {
        [0, ..] => "this network (0.0.0.0/8)",
        [10, ..] => "private (RFC 1918)",
        [100, b, ..] if (64..128).contains(&b) => "shared CGNAT (100.64.0.0/10)",
        [127, ..] => "loopback",
        [169, 254, ..] => "link-local (incl. metadata 169.254.169.254)",
        [172, b, ..] if (16..32).contains(&b) => "private (RFC 1918)",
        [192, 0, 0, _] => "IETF protocol assignments (192.0.0.0/24)",
        [192, 0, 2, _] => "documentation (192.0.2.0/24)",
        [192, 88, 99, _] => "6to4 relay (192.88.99.0/24)",
        [192, 168, ..] => "private (RFC 1918)",
        [198, b, ..] if b == 18 || b == 19 => "benchmarking (198.18.0.0/15)",
        [198, 51, 100, _] => "documentation (198.51.100.0/24)",
        [203, 0, 113, _] => "documentation (203.0.113.0/24)",
        [255, 255, 255, 255] => "broadcast",
        [b, ..] if (224..240).contains(&b) => "multicast",
        [b, ..] if b >= 240 => "reserved (240.0.0.0/4)",
        _ => return None,
    };
    Some(r)
}

fn non_public_v6(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    if a.is_unspecified() {
        return Some("unspecified");
    }
    if a.is_loopback() {
        return Some("loopback");
    }
    // Forms that carry an IPv4 address: blocked when the IPv4 address is.
    let embedded =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = a.to_ipv4_mapped() {
        return non_public_v4(v4).map(|_| "IPv4-mapped non-public address");
    }
    if s[..6] == [0; 6] {
        return Some("IPv4-compatible (deprecated, ::/96)");
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return non_public_v4(embedded(s[6], s[7])).map(|_| "NAT64 form of a non-public address");
    }
    if s[0] == 0x2002 {
        return non_public_v4(embedded(s[1], s[2])).map(|_| "6to4 form of a non-public address");
    }
    let r = match s {
        [0, 0, 0, 0, 0, 0xffff, 0, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => {
            "IPv4-translated (::ffff:0:0:0/96)"
        }
        [0x64, 0xff9b, 1, ..] => "local-use NAT64 (64:ff9b:1::/48)",
        [0x100, 0, 0, 0, ..] => "discard-only (100::/64)",
        [0x2001, 0xdb8, ..] => "documentation (2001:db8::/32)",
        [0x2001, b, ..] if b < 0x200 => "IETF protocol assignments incl. Teredo (2001::/23)",
        [b, ..] if b & 0xfff0 == 0x3ff0 => "documentation (3fff::/20)",
        [b, ..] if b & 0xfe00 == 0xfc00 => "unique local (fc00::/7)",
        [b, ..] if b & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        [b, ..] if b & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        [b, ..] if b & 0xff00 == 0xff00 => "multicast",
        _ => return None,
    };
    Some(r)
}

/// A DNS resolver for the HTTP client: the system resolver, then the guard on every address.
/// A name with any refused address fails with [`Blocked`] (nothing is connected to); otherwise
/// only the checked addresses are returned, so the client connects to nothing else.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<AddressPolicy>,
}

impl GuardedResolver {
    /// A resolver applying `policy`.
    pub fn new(policy: Arc<AddressPolicy>) -> GuardedResolver {
        GuardedResolver { policy }
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() {
                return Err(format!("{host}: no address").into());
            }
            for a in &addrs {
                policy.check(&host, a.ip())?;
            }
            let out: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(out)
        })
    }
}

/// The [`Blocked`] refusal somewhere in an error's source chain, if any.
pub fn blocked_in(e: &(dyn std::error::Error + 'static)) -> Option<Blocked> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(b) = err.downcast_ref::<Blocked>() {
            return Some(b.clone());
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn non_public_addresses_are_refused_and_public_ones_pass() {
        let blocked = [
            "127.0.0.1",
            "127.255.0.9",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "239.1.1.1",
            "240.0.0.1",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "198.19.255.1",
            "198.51.100.7",
            "203.0.113.9",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1",
            "2002:7f00:1::1",
            "fd00::1",
            "fc00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "100::1",
            "3fff::1",
        ];
        let p = AddressPolicy::default();
        for a in blocked {
            let e = p.check("h", ip(a)).expect_err(a);
            assert_eq!(e.addr, ip(a));
            assert!(e.to_string().contains(&ip(a).to_string()), "{e}");
        }
        for a in [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.0.1",
            "172.32.0.1",
            "192.0.1.1",
            "198.20.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2a00:1450::1",
        ] {
            assert!(p.check("h", ip(a)).is_ok(), "{a} is public");
        }
    }

    #[test]
    fn allow_cidrs_exempt_addresses_and_their_mapped_forms() {
        let p = AddressPolicy {
            deny_private: true,
            allow: vec!["127.0.0.0/8".parse().unwrap()],
        };
        assert!(p.check("h", ip("127.0.0.1")).is_ok());
        assert!(p.check("h", ip("::ffff:127.0.0.1")).is_ok());
        assert!(p.check("h", ip("::1")).is_err());
        assert!(p.check("h", ip("10.0.0.1")).is_err());
        let open = AddressPolicy {
            deny_private: false,
            allow: vec![],
        };
        assert!(open.check("h", ip("169.254.169.254")).is_ok());
    }

    #[test]
    fn literal_hosts_are_checked_in_every_spelling() {
        let p = AddressPolicy::default();
        for u in [
            "http://127.0.0.1/x",
            "http://2130706433/x",
            "http://0177.0.0.1/x",
            "http://127.1/x",
            "http://0x7f.1/x",
            "http://[::1]/x",
            "http://[::ffff:127.0.0.1]/x",
            "http://169.254.169.254/latest/meta-data",
            "http://[fd00::1]/",
            "http://100.64.0.1/",
        ] {
            let url = url::Url::parse(u).unwrap();
            assert!(p.check_url(&url).is_err(), "{u}");
        }
        let named = url::Url::parse("http://example.com/").unwrap();
        assert!(p.check_url(&named).is_ok());
    }
}
