//! The egress guard: every request a tenant can steer goes through it (`[http] deny_private`,
//! `allow_cidrs`): the http sink, the SQS and Pub/Sub clients, and `operator.events_url`.
//!
//! A tenant chooses the URL, so without a guard any tenant can make the worker call its own
//! network: the cloud metadata address, Redis, admin ports. The guard works on addresses,
//! never on the host string:
//! 1. an IP-literal host is checked as is ([`AddressPolicy::check_url`]; the `url` crate has
//!    already normalised `2130706433`, `0177.0.0.1` and `127.1` to `127.0.0.1`);
//! 2. a name is resolved by [`GuardedResolver`], which refuses the name if *any* address is
//!    non-public and hands the HTTP client only the checked addresses, so the connection goes
//!    to an address that passed (no rebinding between check and connect). It is the resolver
//!    of the reqwest clients ([`guarded_reqwest`]) and of the AWS SDK's client
//!    ([`guarded_aws_client`]);
//! 3. a resolution error fails the attempt (retried), it never lets the request through.
//!
//! Redirects are never followed and no proxy from the environment is used (a proxy would
//! resolve the host itself, past the guard); the operator's `[http] proxy` is tunnelled to
//! checked addresses only (`sinks::http::proxy`). Every answer a sink reads is bounded: at
//! most [`ANSWER_READ_MAX_BYTES`] read, at most [`ANSWER_KEEP_BYTES`] kept as an error
//! ([`read_bounded`], and the AWS SDK's connector wrapped by [`guarded_aws_client`]), so an
//! endless answer cannot grow the worker.
//!
//! Which tenants may name a custom SQS/Pub/Sub endpoint, and for which queues and topics the
//! worker's own cloud identity may sign, is [`EgressGrant`] (`[tenants.<id>]`).

use aws_sdk_sqs::config::http::HttpRequest;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::dns::{DnsFuture, ResolveDns, ResolveDnsError};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::{
    RuntimeComponents, RuntimeComponentsBuilder,
};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use http_body_util::BodyExt;
use ipnet::IpNet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

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

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Resolve `host` with the system resolver and check every address: all of them pass, or
/// the name is refused with [`Blocked`].
pub(crate) async fn resolve_checked(
    policy: &AddressPolicy,
    host: &str,
) -> Result<Vec<SocketAddr>, BoxError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
    if addrs.is_empty() {
        return Err(format!("{host}: no address").into());
    }
    for a in &addrs {
        policy.check(host, a.ip())?;
    }
    Ok(addrs)
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let addrs = resolve_checked(&policy, name.as_str()).await?;
            let out: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(out)
        })
    }
}

/// The same resolver for the AWS SDK's HTTP client (the SQS sink): the SDK connects only to
/// the addresses answered here, so its connection goes to a checked address too.
impl ResolveDns for GuardedResolver {
    fn resolve_dns<'a>(&'a self, name: &'a str) -> DnsFuture<'a> {
        DnsFuture::new(async move {
            let addrs = resolve_checked(&self.policy, name)
                .await
                .map_err(ResolveDnsError::new)?;
            Ok(addrs.into_iter().map(|a| a.ip()).collect())
        })
    }
}

/// Bytes of an answer body a sink reads at most: a 2xx body is drained up to this so the
/// connection can be reused, and an SQS answer (a few hundred bytes per entry) is parsed
/// from at most this much; a longer or endless body is abandoned with its connection.
pub const ANSWER_READ_MAX_BYTES: usize = 16 * 1024;

/// Bytes of an answer body kept as a row's last error; the rest is never stored.
pub const ANSWER_KEEP_BYTES: usize = 512;

/// How long reading an answer body may take at most (a trickle cannot hold an attempt).
pub const ANSWER_READ_MAX_TIME: Duration = Duration::from_secs(1);

/// A reqwest client builder under the guard: names resolve through [`GuardedResolver`],
/// redirects are never followed and no proxy is used (a proxy would resolve the host
/// itself, past the guard; `HTTP_PROXY` in the worker's environment is ignored). Literal IP
/// hosts never reach a resolver: check them with [`AddressPolicy::check_url`] first.
pub fn guarded_reqwest(policy: Arc<AddressPolicy>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver::new(policy)))
}

/// Read at most `max` bytes of a body (more only within the last chunk, which is cut), for
/// at most [`ANSWER_READ_MAX_TIME`]; the rest is never read. Dropping the response closes a
/// connection whose body was not finished.
pub async fn read_bounded(mut resp: reqwest::Response, max: usize) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(ANSWER_READ_MAX_TIME, async {
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

/// The kept part of an answer body: at most [`ANSWER_KEEP_BYTES`] of it as text, trimmed,
/// marked `…` when cut (control characters are escaped where it is shown).
pub fn kept_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(ANSWER_KEEP_BYTES + 1)]);
    super::truncate(text.trim().to_string(), ANSWER_KEEP_BYTES)
}

/// An answer longer than a sink reads ([`ANSWER_READ_MAX_BYTES`]): the request fails
/// (retried) with its status and the kept start of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlongAnswer {
    /// The answer's HTTP status.
    pub status: u16,
    /// Its first bytes, as [`kept_text`].
    pub head: String,
}

impl fmt::Display for OverlongAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "answer http {} longer than {ANSWER_READ_MAX_BYTES} bytes or slower than {}s, not read further: {}",
            self.status,
            ANSWER_READ_MAX_TIME.as_secs(),
            self.head
        )
    }
}

impl std::error::Error for OverlongAnswer {}

/// The AWS SDK's HTTP client under the guard (the SQS sink): rustls (ring), names resolved
/// by [`GuardedResolver`], no proxy, and every answer body read into memory only up to
/// [`ANSWER_READ_MAX_BYTES`] before the SDK sees it — a longer or endless answer fails the
/// request with [`OverlongAnswer`] instead of being buffered whole. Literal IP endpoints
/// never reach a resolver: check them with [`AddressPolicy::check_url`] first.
pub fn guarded_aws_client(policy: Arc<AddressPolicy>) -> SharedHttpClient {
    use aws_smithy_http_client::tls;
    let inner = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_with_resolver(GuardedResolver::new(policy));
    SharedHttpClient::new(BoundedAnswers { inner })
}

/// An AWS SDK HTTP client whose connectors bound every answer body.
#[derive(Debug)]
struct BoundedAnswers {
    inner: SharedHttpClient,
}

impl HttpClient for BoundedAnswers {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(BoundedConnector(
            self.inner.http_connector(settings, components),
        ))
    }

    fn validate_base_client_config(
        &self,
        runtime_components: &RuntimeComponentsBuilder,
        cfg: &ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        self.inner
            .validate_base_client_config(runtime_components, cfg)
    }

    fn validate_final_config(
        &self,
        runtime_components: &RuntimeComponents,
        cfg: &ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        self.inner.validate_final_config(runtime_components, cfg)
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

#[derive(Debug)]
struct BoundedConnector(SharedHttpConnector);

impl HttpConnector for BoundedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let inner = self.0.clone();
        HttpConnectorFuture::new(async move {
            let mut resp = inner.call(request).await?;
            let status = resp.status().as_u16();
            let mut body = resp.take_body();
            let mut buf: Vec<u8> = Vec::new();
            let read = tokio::time::timeout(ANSWER_READ_MAX_TIME, async {
                while let Some(frame) = body.frame().await {
                    let Ok(data) = frame?.into_data() else {
                        continue;
                    };
                    let room = ANSWER_READ_MAX_BYTES + 1 - buf.len();
                    buf.extend_from_slice(&data[..data.len().min(room)]);
                    if buf.len() > ANSWER_READ_MAX_BYTES {
                        break;
                    }
                }
                Ok::<(), BoxError>(())
            })
            .await;
            match read {
                Ok(Ok(())) if buf.len() <= ANSWER_READ_MAX_BYTES => {
                    *resp.body_mut() = SdkBody::from(buf);
                    Ok(resp)
                }
                Ok(Err(e)) => Err(ConnectorError::io(e)),
                // Longer than read, or still flowing after the read time: never buffered whole.
                _ => Err(ConnectorError::other(
                    Box::new(OverlongAnswer {
                        status,
                        head: kept_text(&buf),
                    }),
                    None,
                )),
            }
        })
    }
}

/// What the operator grants one tenant's sinks beyond the secure default
/// (`[tenants.<id>]`); the default grants nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressGrant {
    /// `tenants.<id>.custom_endpoints`: the tenant may name its own SQS, Kinesis and
    /// EventBridge endpoint (or a queue URL outside AWS) and its own Pub/Sub endpoint; the
    /// address guard still applies.
    pub custom_endpoints: bool,
    /// `tenants.<id>.ambient_credentials`: the SQS queue, Kinesis stream and EventBridge
    /// bus ARNs and the Pub/Sub topics the
    /// worker's own cloud identity (the AWS credential chain, the metadata server's token)
    /// may publish to for this tenant; an entry ending in `*` grants every name it prefixes.
    pub ambient_credentials: Vec<String>,
}

pub use crate::config::valid_ambient_grant;

/// The grant of a tenant the config does not name: nothing.
pub static NO_GRANT: EgressGrant = EgressGrant {
    custom_endpoints: false,
    ambient_credentials: Vec::new(),
};

impl EgressGrant {
    /// Whether `resource` (a queue ARN, a topic) is granted the worker's own credentials.
    pub fn ambient_allows(&self, resource: &str) -> bool {
        self.ambient_credentials
            .iter()
            .any(|g| match g.strip_suffix('*') {
                Some(prefix) => resource.starts_with(prefix),
                None => g == resource,
            })
    }

    /// The refusal of a custom endpoint for `tenant`, naming option `field` and the config
    /// key that would allow it.
    pub fn custom_refused(tenant: &str, field: &str) -> String {
        format!(
            "{field}: custom endpoints are off for tenant {tenant:?}; the operator allows them \
             with tenants.{tenant}.custom_endpoints = true"
        )
    }

    /// The refusal of the worker's own credentials for `resource` of `tenant`.
    pub fn ambient_refused(tenant: &str, what: &str, resource: &str) -> String {
        format!(
            "{what}: the worker's own cloud credentials publish only to what \
             tenants.{tenant}.ambient_credentials grants, and {resource} is not granted to \
             tenant {tenant:?}; bring credentials by reference instead"
        )
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
