//! The config sections that bound what tenants reach: `[http]` (the egress guard),
//! `[secrets]` (secret namespaces), `[connections.<name>]` (operator brokers), `[limits]` and
//! `[tenants.<id>]`, and the operator's bounds on sources built from them.

use super::*;

/// Guards of every HTTP request made to a URL a tenant chose (`docs/security.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Refuse to connect to non-public addresses (loopback, private, link-local, CGNAT, ULA,
    /// multicast, documentation, …): every resolved address is checked and only checked
    /// addresses are connected to. A refused attempt is a permanent dead letter. Default `true`.
    pub deny_private: bool,
    /// CIDR blocks exempt from `deny_private`, e.g. `["10.1.0.0/16", "::1/128"]`. Default empty.
    pub allow_cidrs: Vec<String>,
    /// A forward proxy the `http` sink's requests (deliveries and OAuth2 token requests) go
    /// through, for a fixed egress IP: `http://[user:password@]host[:port]` (port 80 by
    /// default; the password is redacted in dumps). The worker resolves and checks each
    /// destination itself, then asks the proxy to `CONNECT` to the checked address (TLS
    /// still to the host name), so the guard holds through the proxy. The proxy's own
    /// address is the operator's and is not checked. SQS, Pub/Sub, Kinesis, EventBridge,
    /// brokers and `operator.events_url` connect directly. Read at start. Default unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// Destinations reached directly although `proxy` is set: host names (`example.com`
    /// matches it and its subdomains, `.example.com` only its subdomains), IP addresses or
    /// CIDR blocks (matched against IP-literal hosts). The guard applies either way.
    /// Default empty.
    pub no_proxy: Vec<String>,
}

/// Which secret references (`${env:NAME}`, `${file:/path}`) sink options may use: each
/// tenant only its own namespace (`crate::secrets`, `docs/operations.md` "Secret namespaces").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsConfig {
    /// Tenant `T`'s `${env:NAME}` resolves only names starting with this prefix, then `T`'s
    /// part ([`crate::secrets::env_tenant_part`]) and `__`: `ANKUSA_SECRET_ACME__TOKEN`.
    /// `[A-Z0-9_]+`; under `ANKUSA_` only `ANKUSA_SECRET_…`, and never under or a start of
    /// `AWS_`, `GOOGLE_` or `AZURE_`. Default `"ANKUSA_SECRET_"`.
    pub env_prefix: String,
    /// Tenant `T`'s `${file:/path}` resolves only files under `<file_dir>/T/` (after
    /// following symlinks). Empty: file references are refused. An absolute directory other
    /// than `/` that holds no Kubernetes, EKS or Azure token mount and lies in none
    /// ([`crate::secrets::file_dir_problem`]). Default empty.
    pub file_dir: String,
}

/// One `[connections.<name>]` section: a broker the operator names, which tenants' `nats` and
/// `rabbitmq` sink entries reach by its name (`docs/sinks.md`). A tenant never
/// writes a broker address: its entry names the connection and its routing (subject;
/// exchange and routing key). Read at start (SIGHUP does not change it).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionConfig {
    /// The broker: `amqp://host[:port][/vhost]` or `amqps://…` (RabbitMQ, for `rabbitmq`
    /// entries), `nats://host[:port]` or `tls://host[:port]` (NATS, for `nats` entries). No
    /// user or password in it: those are `username` and `password`. Required.
    pub url: String,
    /// The user the worker authenticates as. May be a secret reference (`${env:NAME}`,
    /// `${file:/path}`) to the worker's own environment or files: this file is the
    /// operator's. Default unset: the broker's anonymous or `guest` access.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The password of `username`, best as a secret reference. Default unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// A NATS authentication token (NATS connections only), best as a secret reference.
    /// Default unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A PEM file of the roots that sign the broker's TLS certificate (`amqps://`,
    /// `tls://`), for a private CA; the system roots otherwise. Default unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<String>,
    /// The tenants whose entries may use this connection: tenant ids, or `"*"` for every
    /// tenant. Required and non-empty, so sharing a broker with every tenant is a choice the
    /// operator writes down. Default empty (invalid).
    pub tenants: Vec<String>,
}

impl ConnectionConfig {
    /// Whether `tenant` may use this connection (`tenants` holds it or `"*"`).
    pub fn allows(&self, tenant: &str) -> bool {
        self.tenants.iter().any(|t| t == "*" || t == tenant)
    }

    /// The broker family of `url`'s scheme: `"rabbitmq"` for `amqp`/`amqps`, `"nats"` for
    /// `nats`/`tls`; `None` for any other scheme or text that is no URL.
    pub fn broker(&self) -> Option<&'static str> {
        let scheme = self.url.split_once("://")?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "amqp" | "amqps" => Some("rabbitmq"),
            "nats" | "tls" => Some("nats"),
            _ => None,
        }
    }
}

/// The operator's bounds on every source (`[limits]`), checked at `source put` by the CLI,
/// the admin API and [`crate::store::Store::put_source`] alike; `[tenants.<id>]` overrides
/// them for one tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most sink entries of one source (one hook makes a row per entry); 1..=1000.
    /// Default 20.
    pub max_sinks_per_source: usize,
    /// Most `headers` of one http sink entry; <= 1000. Default 32.
    pub max_headers_per_entry: usize,
    /// Most bytes of one http entry's `headers`, names and values as written; <= 1048576.
    /// Default 8192.
    pub max_header_bytes: usize,
    /// Sink modules a source may use, by the names of the sink registry (`http`, `sqs`,
    /// `pubsub`, ...). Default unset: every module this build has (a broker entry also needs a
    /// `[connections.<name>]` listing the tenant). The names are checked against the
    /// registry when the config is loaded (`ankusa::sinks::registry::config_problems`), not
    /// here, so that the config need not know the sinks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules: Option<Vec<String>>,
    /// Most sources one tenant may have; a new source past it is refused (an existing one
    /// may still be replaced); 1..=1000000. Default 100.
    pub max_sources_per_tenant: usize,
    /// Most bytes of one source's spec as stored (its JSON); 1024..=10485760. Default 262144.
    pub max_source_bytes: usize,
    /// Most body bytes one tenant's hooks may hold in Redis, pending or dead-lettered: a
    /// commit through ingest past it is refused (`429 quota_exceeded`) until deliveries,
    /// cancels or a dead-letter purge make room; >= 1. Default 268435456 (256 MiB).
    pub max_pending_bytes: u64,
    /// Most hooks one tenant may hold in Redis, pending or dead-lettered (as
    /// `max_pending_bytes`); >= 1. Default 1000000.
    pub max_pending_hooks: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_sinks_per_source: 20,
            max_headers_per_entry: 32,
            max_header_bytes: 8192,
            modules: None,
            max_sources_per_tenant: 100,
            max_source_bytes: 256 << 10,
            max_pending_bytes: 256 << 20,
            max_pending_hooks: 1_000_000,
        }
    }
}

/// One `[tenants.<id>]` section: the operator's policy for one tenant. Unset bounds fall
/// back to `[limits]`; a tenant is granted nothing beyond the secure default (no shared
/// secret, no custom endpoint, no ambient credentials: `docs/security.md`, "Egress") unless
/// its section says so.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantConfig {
    /// `limits.max_sinks_per_source` for this tenant. Default: unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sinks_per_source: Option<usize>,
    /// `limits.max_headers_per_entry` for this tenant. Default: unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_headers_per_entry: Option<usize>,
    /// `limits.max_header_bytes` for this tenant. Default: unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_header_bytes: Option<usize>,
    /// `limits.modules` for this tenant. Default: unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules: Option<Vec<String>>,
    /// `limits.max_sources_per_tenant` for this tenant. Default: unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sources_per_tenant: Option<usize>,
    /// `limits.max_source_bytes` for this tenant. Default: unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_source_bytes: Option<usize>,
    /// `limits.max_pending_bytes` for this tenant. Default: unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending_bytes: Option<u64>,
    /// `limits.max_pending_hooks` for this tenant. Default: unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending_hooks: Option<u64>,
    /// Environment variables this tenant's `${env:…}` may read beyond its own namespace,
    /// granted by the operator (e.g. a secret several tenants share); each a full name under
    /// `secrets.env_prefix`. Default empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_secrets: Vec<String>,
    /// The tenant may name its own SQS endpoint (`endpoint_url`, or a queue URL outside AWS)
    /// and its own Pub/Sub `endpoint`; the address guard (`[http]`) still applies to them.
    /// Default false.
    pub custom_endpoints: bool,
    /// SQS queue ARNs (`arn:aws:sqs:<region>:<account>:<queue>`) and Pub/Sub topics
    /// (`projects/<project>/topics/<topic>`) the worker's own cloud credentials (the AWS
    /// credential chain, the metadata server's token) may publish to for this tenant; an
    /// entry ending in `*` grants every name it prefixes. Default empty: the tenant brings
    /// its own credentials by reference.
    pub ambient_credentials: Vec<String>,
    /// An `http://` or `https://` URL this tenant's operational events (an entry disabled,
    /// a breaker opened or closed, a row dead-lettered: those of its own sources) are POSTed
    /// to as well, so the tenant learns that its endpoint fails. Set by the operator, under
    /// the same destination guard as an http sink. Default unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_url: Option<String>,
    /// A Standard Webhooks secret `whsec_<base64>` (or a secret reference) signing the POSTs
    /// to `events_url`. Default unset: unsigned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_signing_secret: Option<String>,
    /// Days of this tenant's delivery log kept (attempts, ended hooks, kept bodies), fewer
    /// than `log.retention_days`, which bounds it (a contract with a shorter retention, a
    /// tenant's own request); 1..=`log.retention_days`. Default unset: `log.retention_days`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_retention_days: Option<u32>,
}

/// One bound on sources with the config key that sets it, so a refusal can name both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound<T> {
    /// The value in force.
    pub value: T,
    /// The dotted key it comes from: `limits.<key>` or `tenants.<id>.<key>`.
    pub key: String,
}

/// The bounds on one tenant's sources: `[limits]` under its `[tenants.<id>]` overrides, and
/// the `[retry]` caps no entry's own retry policy may exceed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceBounds {
    /// Most sink entries of one source.
    pub max_sinks_per_source: Bound<usize>,
    /// Most `headers` of one http entry.
    pub max_headers_per_entry: Bound<usize>,
    /// Most bytes of one http entry's `headers`.
    pub max_header_bytes: Bound<usize>,
    /// Sink modules the tenant may use; `None`: every module.
    pub modules: Bound<Option<Vec<String>>>,
    /// Most sources of the tenant.
    pub max_sources_per_tenant: Bound<usize>,
    /// Most bytes of one source's stored spec.
    pub max_source_bytes: Bound<usize>,
    /// `retry.max_attempts` (0: no limit): an entry's `retry.max_attempts` must be
    /// 1..=this when it is set.
    pub max_attempts: u32,
    /// `retry.max_elapsed_ms`: an entry's `retry.max_elapsed_ms` must be <= this.
    pub max_elapsed_ms: u64,
}

impl SourceBounds {
    /// Whether the tenant may use the sink module `name` (every module when the key is unset).
    pub fn allows_module(&self, name: &str) -> bool {
        self.modules
            .value
            .as_ref()
            .is_none_or(|m| m.iter().any(|m| m == name))
    }
}

/// The operator's bounds on every tenant's sources: what [`SourceBounds`] are made of.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourcePolicy {
    /// `[limits]`.
    pub limits: LimitsConfig,
    /// `[tenants.<id>]`, by tenant id.
    pub tenants: BTreeMap<String, TenantConfig>,
    /// `[retry]`, whose caps entries' retry policies stay under.
    pub retry: RetryConfig,
}

impl SourcePolicy {
    /// The policy of a validated config.
    pub fn from_config(c: &Config) -> SourcePolicy {
        SourcePolicy {
            limits: c.limits.clone(),
            tenants: c.tenants.clone(),
            retry: c.retry.clone(),
        }
    }

    /// What `tenant`'s hooks may hold in Redis: `limits.max_pending_bytes` and
    /// `limits.max_pending_hooks` under its `[tenants.<id>]` overrides.
    pub fn quota(&self, tenant: &str) -> TenantQuota {
        let t = self.tenants.get(tenant);
        let l = &self.limits;
        TenantQuota {
            max_pending_bytes: pick(
                t.and_then(|t| t.max_pending_bytes.as_ref()),
                &l.max_pending_bytes,
                tenant,
                "max_pending_bytes",
            ),
            max_pending_hooks: pick(
                t.and_then(|t| t.max_pending_hooks.as_ref()),
                &l.max_pending_hooks,
                tenant,
                "max_pending_hooks",
            ),
        }
    }

    /// The bounds on `tenant`'s sources.
    pub fn bounds(&self, tenant: &str) -> SourceBounds {
        let t = self.tenants.get(tenant);
        let l = &self.limits;
        SourceBounds {
            max_sinks_per_source: pick(
                t.and_then(|t| t.max_sinks_per_source.as_ref()),
                &l.max_sinks_per_source,
                tenant,
                "max_sinks_per_source",
            ),
            max_headers_per_entry: pick(
                t.and_then(|t| t.max_headers_per_entry.as_ref()),
                &l.max_headers_per_entry,
                tenant,
                "max_headers_per_entry",
            ),
            max_header_bytes: pick(
                t.and_then(|t| t.max_header_bytes.as_ref()),
                &l.max_header_bytes,
                tenant,
                "max_header_bytes",
            ),
            modules: pick(
                t.and_then(|t| t.modules.as_ref())
                    .map(|m| Some(m.clone()))
                    .as_ref(),
                &l.modules,
                tenant,
                "modules",
            ),
            max_sources_per_tenant: pick(
                t.and_then(|t| t.max_sources_per_tenant.as_ref()),
                &l.max_sources_per_tenant,
                tenant,
                "max_sources_per_tenant",
            ),
            max_source_bytes: pick(
                t.and_then(|t| t.max_source_bytes.as_ref()),
                &l.max_source_bytes,
                tenant,
                "max_source_bytes",
            ),
            max_attempts: self.retry.max_attempts,
            max_elapsed_ms: self.retry.max_elapsed_ms,
        }
    }
}

/// The value of a bound for `tenant`: its own (`tenants.<id>.<name>`) when set, else the
/// operator's (`limits.<name>`), with the key it comes from.
fn pick<T: Clone>(own: Option<&T>, global: &T, tenant: &str, name: &str) -> Bound<T> {
    match own {
        Some(v) => Bound {
            value: v.clone(),
            key: format!("tenants.{tenant}.{name}"),
        },
        None => Bound {
            value: global.clone(),
            key: format!("limits.{name}"),
        },
    }
}

/// What one tenant's hooks may hold in Redis ([`SourcePolicy::quota`]), checked by the
/// commit script in the same call that would store them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantQuota {
    /// Most body bytes of its hooks, pending or dead-lettered.
    pub max_pending_bytes: Bound<u64>,
    /// Most hooks, pending or dead-lettered.
    pub max_pending_hooks: Bound<u64>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            deny_private: true,
            allow_cidrs: Vec::new(),
            proxy: None,
            no_proxy: Vec::new(),
        }
    }
}

impl Default for SecretsConfig {
    fn default() -> Self {
        SecretsConfig {
            env_prefix: crate::secrets::DEFAULT_ENV_PREFIX.into(),
            file_dir: String::new(),
        }
    }
}
