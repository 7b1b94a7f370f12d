//! Configuration: layered, strict, validated once (R24, R29, R14).
//!
//! Layers, later wins:
//! 1. [`DEFAULT_CONFIG_TOML`], the commented file `config/ankusa.toml` embedded in the binary;
//! 2. the TOML file given to [`Config::load`];
//! 3. environment variables `ANKUSA_<SECTION>__<KEY>`: the prefix is dropped, the rest is
//!    lowercased and `__` nests (`ANKUSA_DISPATCH__CONCURRENCY=8` sets `dispatch.concurrency`,
//!    `ANKUSA_INSTANCE=eu` sets `instance`). `ANKUSA_CONFIG`, `ANKUSA_LOG` and
//!    `ANKUSA_LOG_FORMAT` belong to the CLI and are skipped. Because of the lowercasing, a tenant
//!    id with capitals or dots can only be configured in the file. Only variables whose first
//!    segment names a top-level key of the config (`instance`, a section such as `dispatch`)
//!    are read; other `ANKUSA_*` names are ignored, such as the `ANKUSA_PORT=tcp://…` and
//!    `ANKUSA_SERVICE_HOST` that Kubernetes injects into every pod for a Service named
//!    `ankusa`. A misspelt key of a real section (`ANKUSA_DISPATCH__CONCURENCY`) is still an
//!    error naming it.
//!
//! Every struct denies unknown keys, so a typo is an error naming its key path instead of a
//! silently ignored setting, and defaults every field, so a partial file is enough.
//! [`Config::validate`] then reports every invalid value at once, each with its dotted key.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};

/// The default configuration: every key with its default value and a comment.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../config/ankusa.toml");

/// Prefix of the environment variables that override config keys.
const ENV_PREFIX: &str = "ANKUSA_";
/// Names the environment layer in parse errors.
const ENV_SOURCE: &str = "ANKUSA_* environment variables";
/// `ANKUSA_*` variables read by the CLI itself: not config keys.
const CLI_VARS: [&str; 3] = ["ANKUSA_CONFIG", "ANKUSA_LOG", "ANKUSA_LOG_FORMAT"];
/// String keys whose environment value is taken verbatim, so `ANKUSA_ADMIN__TOKEN=1234` stays a
/// string instead of being parsed as a number.
const STRING_KEYS: [&str; 15] = [
    "instance",
    "redis.url",
    "redis.tls_ca_file",
    "redis.tls_cert_file",
    "redis.tls_key_file",
    "admin.listen",
    "admin.token",
    "admin.ingest_token",
    "claim_check.url",
    "claim_check.endpoint",
    "claim_check.region",
    "claim_check.access_key_id",
    "claim_check.secret_access_key",
    "secrets.env_prefix",
    "secrets.file_dir",
];
/// Replaces secrets in [`Config::redacted_toml`].
const REDACTED: &str = "***";
/// The `dispatch.tenants` entry every tenant falls back to.
const DEFAULT_TENANT: &str = "default";

/// The whole configuration of one pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Namespace of every Redis key and metric of this pipeline, so several instances share one
    /// Redis without seeing each other (R29). Must match `[a-z0-9_-]{1,64}`. Default `"default"`.
    pub instance: String,
    /// Redis connection.
    pub redis: RedisConfig,
    /// Leader election (R25).
    pub leader: LeaderConfig,
    /// Scheduler: concurrency, windows, breakers (R5, R7, R13–R16).
    pub dispatch: DispatchConfig,
    /// Retry backoff and horizon (R8, R9).
    pub retry: RetryConfig,
    /// Limits applied when a hook is committed.
    pub commit: CommitConfig,
    /// Metrics and admin HTTP listener (R27).
    pub admin: AdminConfig,
    /// Retention of dead letters and of the hook bodies they keep.
    pub dlq: DlqConfig,
    /// Blob store for bodies over a sink's `inline_max_bytes` (R18).
    pub claim_check: ClaimCheckConfig,
    /// Guards of the requests made to tenants' URLs (SSRF guard; `docs/security.md`).
    pub http: HttpConfig,
    /// Which secret references sink options may resolve (`docs/security.md`).
    pub secrets: SecretsConfig,
    /// Attempt history, resend retention and per-tenant metrics (`docs/operations.md`).
    pub history: HistoryConfig,
    /// Optional OpenTelemetry trace export of attempts (`docs/operations.md`).
    pub telemetry: TelemetryConfig,
}

/// OpenTelemetry: one span per attempt, exported over OTLP/HTTP (protobuf) when
/// `otlp_endpoint` is set; a child of the producer's `traceparent` when the hook carries one.
/// Read at start (SIGHUP does not change it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// OTLP/HTTP collector base URL, e.g. `http://otel-collector:4318` (spans are posted to
    /// `<url>/v1/traces`; a URL already ending in `/v1/traces` is used as is); `http` or
    /// `https`. Empty: no export, and no cost per attempt. Default empty.
    pub otlp_endpoint: String,
    /// The `service.name` resource attribute of the exported spans; 1..=255 characters.
    /// Default `"ankusa"`.
    pub service_name: String,
    /// Fraction of attempts of hooks without a `traceparent` that are exported, 0.0..=1.0; a
    /// hook with one follows its producer's sampled flag. Default 1.0.
    pub sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: String::new(),
            service_name: "ankusa".into(),
            sample_ratio: 1.0,
        }
    }
}

impl TelemetryConfig {
    /// The URL spans are posted to: `otlp_endpoint` + `/v1/traces` (unless it ends so already);
    /// `None` when export is off.
    pub fn traces_url(&self) -> Option<String> {
        let base = self.otlp_endpoint.trim_end_matches('/');
        match base {
            "" => None,
            b if b.ends_with("/v1/traces") => Some(b.to_string()),
            b => Some(format!("{b}/v1/traces")),
        }
    }
}

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
}

/// Which secret references (`${env:NAME}`, `${file:/path}`) sink options may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsConfig {
    /// `${env:NAME}` resolves only names starting with this prefix; `[A-Z0-9_]+`, and under
    /// `ANKUSA_` only `ANKUSA_SECRET_…` (the worker's own settings are never readable).
    /// Default `"ANKUSA_SECRET_"`.
    pub env_prefix: String,
    /// `${file:/path}` resolves only files under this absolute directory (after following
    /// symlinks); empty disables file references. Default `"/run/secrets"`.
    pub file_dir: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            deny_private: true,
            allow_cidrs: Vec::new(),
        }
    }
}

impl Default for SecretsConfig {
    fn default() -> Self {
        SecretsConfig {
            env_prefix: crate::secrets::DEFAULT_ENV_PREFIX.into(),
            file_dir: "/run/secrets".into(),
        }
    }
}

/// Redis connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://`, `rediss://` (TLS) or `unix://` URL, possibly with `user:password@`.
    /// Default `"redis://127.0.0.1:6379"`.
    pub url: String,
    /// Start even when Redis may evict keys (a `maxmemory-policy` other than `noeviction`);
    /// eviction silently loses queued hooks. Default `false`.
    pub allow_evicting: bool,
    /// Deadline of one Redis command, ms; > 0. Default 5000.
    pub command_timeout_ms: u64,
    /// PEM file of the CA certificates that verify the server of a `rediss://` URL; empty
    /// means the system's trust store. Certificates are always verified (there is no way
    /// to turn verification off). Needs a `rediss://` URL. Default empty.
    pub tls_ca_file: String,
    /// PEM file of this client's certificate chain for mutual TLS (Redis'
    /// `tls-auth-clients yes`); set together with `tls_key_file`. Needs a `rediss://` URL.
    /// Default empty (no client certificate).
    pub tls_cert_file: String,
    /// PEM file of the private key of `tls_cert_file` (PKCS#8, PKCS#1 or SEC1). Default empty.
    pub tls_key_file: String,
}

/// Leader election through a lease key (R25).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaderConfig {
    /// Lifetime of the lease, ms: a standby takes over this long after the leader stops
    /// renewing; >= 1000. Default 10000.
    pub lease_ms: u64,
    /// Renewal interval, ms; 0 means `lease_ms / 3`, otherwise < `lease_ms / 2` so that one
    /// missed renewal does not lose the lease. Default 0. Read it through
    /// [`LeaderConfig::renew_interval_ms`].
    pub renew_ms: u64,
    /// On shutdown, how long in-flight attempts may finish before the lease is released, ms.
    /// Default 10000.
    pub shutdown_grace_ms: u64,
    /// Self-check: a leader whose scheduler made no progress (no rows claimed, no attempt
    /// finished, no outcome settled) for this many lease intervals while rows are due or
    /// claimed gives its lease up and reports unhealthy. The stall bound is never shorter than
    /// `dispatch.attempt_timeout_ms + lease_ms`, so a window full of hanging attempts is not a
    /// stall. 0 disables the check; otherwise >= 2. Default 3 (R25).
    pub selfcheck_intervals: u32,
    /// TEST ONLY: the scheduler never claims, as if its claim loop were wedged, so the
    /// self-check can be exercised. Never set it in production. Default `false`.
    pub test_wedge_claim_loop: bool,
}

/// Scheduler limits (R5, R7, R13–R16).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatchConfig {
    /// Attempts running at once across all tenants; > 0. Default 256 (R5).
    pub concurrency: usize,
    /// Window: claimed-but-unfinished rows, so a dead sink cannot exhaust memory; > 0.
    /// Default 10000 (R5).
    pub max_inflight: usize,
    /// Window: bytes of stored hooks claimed but unfinished; > 0. Default 268435456 (256 MiB) (R5).
    pub max_inflight_bytes: u64,
    /// Rows claimed per scan page, shared between tenants by deficit round-robin; 1..=10000.
    /// Default 500 (R13).
    pub batch: usize,
    /// An attempt still running after this is cancelled and counts as failed, ms; > 0.
    /// Default 30000 (R7).
    pub attempt_timeout_ms: u64,
    /// Attempts running at once per sink key; > 0. Default 8 (R15).
    pub sink_concurrency: usize,
    /// Consecutive failures of a sink key that open its breaker; 0 disables breakers.
    /// Default 5 (R16).
    pub breaker_failures: u32,
    /// First open period of a breaker, ms, doubled per consecutive open; > 0. Default 5000 (R16).
    pub breaker_open_ms: u64,
    /// Longest open period of a breaker, ms; >= `breaker_open_ms`. Default 300000 (R16).
    pub breaker_max_open_ms: u64,
    /// Safety poll for due rows when no wake-up arrives, ms; > 0. Default 1000.
    pub poll_ms: u64,
    /// Most outcomes written in one settle batch (one script call); > 0. Default 1000 (R4).
    pub settle_batch: usize,
    /// Per-tenant windows keyed by tenant id, plus `"default"` for every tenant without an entry
    /// (R14). Resolve them with [`DispatchConfig::tenant_limits`]. Default empty.
    pub tenants: BTreeMap<String, TenantLimits>,
}

/// One `dispatch.tenants.<id>` entry (R14): each limit is optional and > 0 when set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantLimits {
    /// The tenant's claimed-but-unfinished rows. Default: unset (fall back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_inflight: Option<usize>,
    /// The tenant's claimed-but-unfinished hook bytes. Default: unset (fall back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_inflight_bytes: Option<u64>,
    /// The tenant's attempts running at once. Default: unset (fall back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
}

/// A tenant's effective limits, from [`DispatchConfig::tenant_limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ResolvedLimits {
    /// Claimed-but-unfinished rows.
    pub max_inflight: usize,
    /// Claimed-but-unfinished hook bytes.
    pub max_inflight_bytes: u64,
    /// Attempts running at once.
    pub concurrency: usize,
}

/// Retry backoff and horizon (R8, R9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Backoff after the first failed attempt, ms; > 0. Default 1000.
    pub initial_backoff_ms: u64,
    /// Longest backoff, ms; >= `initial_backoff_ms`. Default 600000 (10 min).
    pub max_backoff_ms: u64,
    /// Backoff growth factor per failed attempt; finite, >= 1.0. Default 2.0.
    pub multiplier: f64,
    /// Random spread of each backoff as a fraction of it, so retries of one outage do not
    /// arrive together; 0.0..=1.0. Default 0.2.
    pub jitter: f64,
    /// Retry horizon from a row's first attempt, ms; past it the row is dead-lettered; > 0.
    /// Default 86400000 (24 h) (R9).
    pub max_elapsed_ms: u64,
    /// Attempts before a row is dead-lettered; 0 = no limit, only the horizon applies.
    /// Default 0.
    pub max_attempts: u32,
    /// Upper bound on a sink's `Retry-After` hint, ms. Default 3600000 (1 h).
    pub retry_after_max_ms: u64,
    /// Floor of every retry delay, ms: no retry is due sooner after a failed attempt,
    /// whatever the backoff, its jitter or a sink's `Retry-After` (`0`, a date in the
    /// past) says; <= `max_backoff_ms`. Default 1000 (R8).
    pub min_backoff_ms: u64,
}

/// Limits applied when a hook is committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommitConfig {
    /// Largest hook accepted, bytes; 1..=536870912 (Redis' string limit).
    /// Default 10485760 (10 MiB).
    pub max_hook_bytes: usize,
    /// How long a producer idempotency key answers the first hook's id instead of
    /// committing again, ms; > 0. Default 86400000 (24 h).
    pub idempotency_ms: u64,
}

/// Metrics, ingest and admin HTTP listener (R27); see `docs/security.md` "Admin and ingest".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Listen address, `host:port` (a `SocketAddr`). A non-loopback address needs `token`.
    /// Default `"127.0.0.1:9187"`.
    pub listen: String,
    /// Secret bearer token of everything under `/admin/*` and `/v1/*` (ingest included);
    /// non-empty. Required when `listen` is not a loopback address. Default unset (open, on
    /// loopback only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Secret bearer token that opens only ingest (`/v1/hooks/…`), for producers; `token`
    /// opens ingest too. Non-empty. Default unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest_token: Option<String>,
    /// A connection must send a request's whole head (request line and headers) within this,
    /// ms, from its start or from the end of its previous response; otherwise it is closed
    /// (slowloris). > 0. Default 5000.
    pub header_timeout_ms: u64,
    /// Deadline of a request to ingest, `/healthz`, `/readyz` and `/metrics`, body upload
    /// included, ms; past it the answer is 408 `timeout`. The operations under `/admin/*`
    /// run under their own deadlines instead. > 0. Default 30000.
    pub request_timeout_ms: u64,
    /// Connections open at once; one more is closed at once, so a flood cannot take the
    /// worker's file descriptors. > 0. Default 512.
    pub max_connections: usize,
}

/// Retention of dead letters and of the hook bodies they keep (a hook is kept while a dead
/// letter references it). Applied by the leader every `sweep_ms` and by `ankusa dlq purge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DlqConfig {
    /// Dead letters older than this are purged, ms; 0 keeps them whatever their age.
    /// Default 604800000 (7 days).
    pub max_age_ms: u64,
    /// Most dead letters kept per tenant; the oldest beyond it are purged; 0 = no limit.
    /// Default 100000.
    pub max_per_tenant: u64,
    /// How often the leader applies the retention, ms; 0 = never on its own (only
    /// `ankusa dlq purge` does). Default 60000.
    pub sweep_ms: u64,
}

/// The attempt history (`ankusa hooks show`, `ankusa rows list`): every attempt's record,
/// written by the settle call of its outcome, and delivered hooks kept for resend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// Record attempts and keep delivered hooks for resend. Default true.
    pub enabled: bool,
    /// Records and kept hooks expire this long after a hook's last record, ms; > 0.
    /// Default 86400000 (24 h).
    pub max_age_ms: u64,
    /// Most hooks per tenant with records or a kept body; the least recently attempted
    /// beyond it lose theirs; > 0. Default 10000.
    pub max_per_tenant: u64,
    /// Tenants that get per-tenant gauges (`ankusa_tenant_*`, labelled `tenant`); others are
    /// seen only with `ankusa tenants top`, so the label stays bounded. Default empty.
    pub metrics_tenants: Vec<String>,
}

/// The claim-check blob store (R18): where bodies larger than a sink's `inline_max_bytes`
/// are checked in. Values may hold `${env:NAME}` secret references.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClaimCheckConfig {
    /// `file:///absolute/dir` (local filesystem) or `s3://bucket[/prefix]`; empty means a
    /// `file://` store in `<system temp dir>/ankusa-claim-check`. SQS consumers resolve only
    /// `s3://` refs (the Amazon SQS Extended Client pointer format). Default empty.
    pub url: String,
    /// S3 endpoint override (`http://127.0.0.1:9000` for MinIO or moto); empty means AWS.
    /// An `http://` endpoint allows plain HTTP. Default empty.
    pub endpoint: String,
    /// S3 region; empty means `AWS_REGION` / `AWS_DEFAULT_REGION`, else `us-east-1`. Default empty.
    pub region: String,
    /// S3 access key id; empty means the AWS credential chain of the environment. Default empty.
    pub access_key_id: String,
    /// S3 secret access key (secret, redacted in dumps); set with `access_key_id`. Default empty.
    pub secret_access_key: String,
}

/// One invalid value: its dotted key path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigProblem {
    /// Dotted key path, e.g. `dispatch.tenants.acme.max_inflight`.
    pub key: String,
    /// What the value must be, e.g. `must be > 0`.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Malformed TOML, an unknown key or a value of the wrong type; names the key path.
    #[error("{message}")]
    Parse {
        /// One line per error, each naming its key path.
        message: String,
    },
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Io {
        /// The file given to [`Config::load`].
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Values out of range: every problem, one `key: message` per line.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<ConfigProblem>),
}

impl ConfigError {
    /// The validation problems; empty unless this is [`ConfigError::Invalid`].
    pub fn problems(&self) -> &[ConfigProblem] {
        match self {
            ConfigError::Invalid(problems) => problems,
            _ => &[],
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            instance: "default".into(),
            redis: RedisConfig::default(),
            leader: LeaderConfig::default(),
            dispatch: DispatchConfig::default(),
            retry: RetryConfig::default(),
            commit: CommitConfig::default(),
            admin: AdminConfig::default(),
            dlq: DlqConfig::default(),
            claim_check: ClaimCheckConfig::default(),
            http: HttpConfig::default(),
            secrets: SecretsConfig::default(),
            history: HistoryConfig::default(),
            telemetry: TelemetryConfig::default(),
        }
    }
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            enabled: true,
            max_age_ms: 24 * 3_600_000,
            max_per_tenant: 10_000,
            metrics_tenants: Vec::new(),
        }
    }
}

impl Default for DlqConfig {
    fn default() -> Self {
        DlqConfig {
            max_age_ms: 7 * 24 * 3_600_000,
            max_per_tenant: 100_000,
            sweep_ms: 60_000,
        }
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            allow_evicting: false,
            command_timeout_ms: 5_000,
            tls_ca_file: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
        }
    }
}

impl Default for LeaderConfig {
    fn default() -> Self {
        LeaderConfig {
            lease_ms: 10_000,
            renew_ms: 0,
            shutdown_grace_ms: 10_000,
            selfcheck_intervals: 3,
            test_wedge_claim_loop: false,
        }
    }
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            concurrency: 256,
            max_inflight: 10_000,
            max_inflight_bytes: 256 << 20,
            batch: 500,
            attempt_timeout_ms: 30_000,
            sink_concurrency: 8,
            breaker_failures: 5,
            breaker_open_ms: 5_000,
            breaker_max_open_ms: 300_000,
            poll_ms: 1_000,
            settle_batch: 1_000,
            tenants: BTreeMap::new(),
        }
    }
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            initial_backoff_ms: 1_000,
            max_backoff_ms: 600_000,
            multiplier: 2.0,
            jitter: 0.2,
            max_elapsed_ms: 86_400_000,
            max_attempts: 0,
            retry_after_max_ms: 3_600_000,
            min_backoff_ms: 1_000,
        }
    }
}

impl Default for CommitConfig {
    fn default() -> Self {
        CommitConfig {
            max_hook_bytes: 10 << 20,
            idempotency_ms: 24 * 3_600_000,
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: "127.0.0.1:9187".into(),
            token: None,
            ingest_token: None,
            header_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            max_connections: 512,
        }
    }
}

impl AdminConfig {
    /// Checked where the listener is served (`ankusa worker`, `ankusa config check`), not by
    /// [`Config::validate`], so the CLI's other commands run in an image whose environment
    /// sets `admin.listen = 0.0.0.0:…`: a `listen` address beyond loopback needs `token`.
    /// Errors: [`ConfigError::Invalid`] naming `admin.token`.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        match self.exposure_problem() {
            Some(problem) => Err(ConfigError::Invalid(vec![problem])),
            None => Ok(()),
        }
    }

    /// The problem of a `listen` address beyond loopback without `token`: anyone who can
    /// reach the port could commit hooks, replay or purge dead letters. `None` when the
    /// address is loopback, a token is set, or the address does not parse (reported apart).
    pub fn exposure_problem(&self) -> Option<ConfigProblem> {
        let addr = self.listen.parse::<SocketAddr>().ok()?;
        (!addr.ip().is_loopback() && self.token.is_none()).then(|| ConfigProblem {
            key: "admin.token".into(),
            message: format!(
                "required: admin.listen = {addr} is reachable beyond loopback; set admin.token \
                 (ANKUSA_ADMIN__TOKEN) or listen on 127.0.0.1"
            ),
        })
    }
}

impl LeaderConfig {
    /// The lease renewal interval, ms: `renew_ms`, or `lease_ms / 3` when it is 0.
    pub fn renew_interval_ms(&self) -> u64 {
        match self.renew_ms {
            0 => self.lease_ms / 3,
            ms => ms,
        }
    }

    /// How long a leader's scheduler may go without progress while work is waiting before
    /// the self-check gives the lease up, ms: `selfcheck_intervals × lease_ms`, but at least
    /// `attempt_timeout_ms + lease_ms`. `None` when the self-check is disabled.
    pub fn stall_limit_ms(&self, attempt_timeout_ms: u64) -> Option<u64> {
        match self.selfcheck_intervals {
            0 => None,
            n => Some((u64::from(n) * self.lease_ms).max(attempt_timeout_ms + self.lease_ms)),
        }
    }
}

impl DispatchConfig {
    /// The limits of `tenant` (R14): each is the tenant's own entry, else the `default` entry,
    /// else the global value, and never more than the global value.
    pub fn tenant_limits(&self, tenant: &str) -> ResolvedLimits {
        let layers = [self.tenants.get(tenant), self.tenants.get(DEFAULT_TENANT)];
        ResolvedLimits {
            max_inflight: resolve(layers, |t| t.max_inflight, self.max_inflight),
            max_inflight_bytes: resolve(layers, |t| t.max_inflight_bytes, self.max_inflight_bytes),
            concurrency: resolve(layers, |t| t.concurrency, self.concurrency),
        }
    }
}

/// The first layer that sets `field`, else `global`; clamped to `global`.
fn resolve<T: Ord + Copy>(
    layers: [Option<&TenantLimits>; 2],
    field: impl Fn(&TenantLimits) -> Option<T>,
    global: T,
) -> T {
    layers
        .into_iter()
        .flatten()
        .find_map(field)
        .unwrap_or(global)
        .min(global)
}

impl Config {
    /// Loads defaults → the file at `path` (if given; a missing file is an error) → environment
    /// overrides, then validates.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_with_env(path, std::env::vars_os())
    }

    /// [`Config::load`] with the environment given as `vars`, so tests need not touch the
    /// process environment.
    fn load_with_env(
        path: Option<&Path>,
        vars: impl IntoIterator<Item = (impl AsRef<std::ffi::OsStr>, impl AsRef<std::ffi::OsStr>)>,
    ) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULT_CONFIG_TOML));
        if let Some(path) = path {
            // figment treats a missing file as empty; a named file must exist.
            std::fs::File::open(path).map_err(|source| ConfigError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            figment = figment.merge(Toml::file_exact(path));
        }
        Self::extract(figment.merge(EnvOverrides::from_vars(vars)))
    }

    /// Defaults → the TOML in `toml`, without environment overrides, then validates.
    pub fn from_toml_str(toml: &str) -> Result<Config, ConfigError> {
        Self::extract(Figment::from(Toml::string(DEFAULT_CONFIG_TOML)).merge(Toml::string(toml)))
    }

    fn extract(figment: Figment) -> Result<Config, ConfigError> {
        let config: Config = figment.extract().map_err(parse_error)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every key and returns all problems at once, each with its dotted key path.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        let gt0 = "must be > 0";

        p.check(
            is_name(&self.instance, 64, |c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'
            }),
            "instance",
            "must match [a-z0-9_-]{1,64}",
        );

        let r = &self.redis;
        p.check(
            ["redis://", "rediss://", "unix://"]
                .iter()
                .any(|s| r.url.starts_with(s)),
            "redis.url",
            "must start with redis:// or rediss:// or unix://",
        );
        p.check(r.command_timeout_ms > 0, "redis.command_timeout_ms", gt0);
        let tls = r.url.starts_with("rediss://");
        for (key, file) in [
            ("redis.tls_ca_file", &r.tls_ca_file),
            ("redis.tls_cert_file", &r.tls_cert_file),
            ("redis.tls_key_file", &r.tls_key_file),
        ] {
            p.check(
                tls || file.is_empty(),
                key,
                "needs a rediss:// redis.url (TLS)",
            );
        }
        p.check(
            r.tls_cert_file.is_empty() == r.tls_key_file.is_empty(),
            "redis.tls_key_file",
            "must be set together with redis.tls_cert_file",
        );

        let l = &self.leader;
        p.check(l.lease_ms >= 1_000, "leader.lease_ms", "must be >= 1000");
        p.check(
            l.renew_ms == 0 || l.renew_ms < l.lease_ms / 2,
            "leader.renew_ms",
            format!(
                "must be 0 (lease_ms / 3) or < leader.lease_ms / 2 = {}",
                l.lease_ms / 2
            ),
        );
        p.check(
            l.selfcheck_intervals == 0 || l.selfcheck_intervals >= 2,
            "leader.selfcheck_intervals",
            "must be 0 (off) or >= 2",
        );

        let d = &self.dispatch;
        p.check(d.concurrency > 0, "dispatch.concurrency", gt0);
        p.check(d.max_inflight > 0, "dispatch.max_inflight", gt0);
        p.check(d.max_inflight_bytes > 0, "dispatch.max_inflight_bytes", gt0);
        p.check(d.batch > 0, "dispatch.batch", gt0);
        p.check(d.batch <= 10_000, "dispatch.batch", "must be <= 10000");
        p.check(d.attempt_timeout_ms > 0, "dispatch.attempt_timeout_ms", gt0);
        p.check(d.sink_concurrency > 0, "dispatch.sink_concurrency", gt0);
        p.check(d.breaker_open_ms > 0, "dispatch.breaker_open_ms", gt0);
        p.check(
            d.breaker_max_open_ms >= d.breaker_open_ms,
            "dispatch.breaker_max_open_ms",
            "must be >= dispatch.breaker_open_ms",
        );
        p.check(d.poll_ms > 0, "dispatch.poll_ms", gt0);
        p.check(d.settle_batch > 0, "dispatch.settle_batch", gt0);
        for (name, t) in &d.tenants {
            let key = format!("dispatch.tenants.{name}");
            p.check(
                name == DEFAULT_TENANT
                    || is_name(name, 128, |c| {
                        c.is_ascii_alphanumeric() || "_.-".contains(c)
                    }),
                &key,
                "tenant id must match [A-Za-z0-9_.-]{1,128}",
            );
            p.check(
                t.max_inflight != Some(0),
                format!("{key}.max_inflight"),
                gt0,
            );
            p.check(
                t.max_inflight_bytes != Some(0),
                format!("{key}.max_inflight_bytes"),
                gt0,
            );
            p.check(t.concurrency != Some(0), format!("{key}.concurrency"), gt0);
        }

        let r = &self.retry;
        p.check(r.initial_backoff_ms > 0, "retry.initial_backoff_ms", gt0);
        p.check(
            r.max_backoff_ms >= r.initial_backoff_ms,
            "retry.max_backoff_ms",
            "must be >= retry.initial_backoff_ms",
        );
        p.check(
            r.min_backoff_ms <= r.max_backoff_ms,
            "retry.min_backoff_ms",
            "must be <= retry.max_backoff_ms",
        );
        p.check(
            r.multiplier.is_finite() && r.multiplier >= 1.0,
            "retry.multiplier",
            "must be a finite number >= 1.0",
        );
        p.check(
            (0.0..=1.0).contains(&r.jitter),
            "retry.jitter",
            "must be between 0.0 and 1.0",
        );
        p.check(r.max_elapsed_ms > 0, "retry.max_elapsed_ms", gt0);

        let c = &self.commit;
        p.check(c.max_hook_bytes > 0, "commit.max_hook_bytes", gt0);
        p.check(
            c.max_hook_bytes <= 512 << 20,
            "commit.max_hook_bytes",
            "must be <= 536870912 (Redis' string limit)",
        );
        p.check(c.idempotency_ms > 0, "commit.idempotency_ms", gt0);

        let h = &self.history;
        p.check(h.max_age_ms > 0, "history.max_age_ms", gt0);
        p.check(h.max_per_tenant > 0, "history.max_per_tenant", gt0);
        for (i, t) in h.metrics_tenants.iter().enumerate() {
            p.check(
                crate::model::check_id("tenant", t).is_ok(),
                format!("history.metrics_tenants[{i}]"),
                "must match [A-Za-z0-9_.-]{1,128}",
            );
        }

        let t = &self.telemetry;
        if !t.otlp_endpoint.is_empty() {
            let ok = url::Url::parse(&t.otlp_endpoint).is_ok_and(|u| {
                matches!(u.scheme(), "http" | "https")
                    && u.host_str().is_some_and(|h| !h.is_empty())
                    && u.query().is_none()
                    && u.username().is_empty()
                    && u.password().is_none()
            });
            p.check(
                ok,
                "telemetry.otlp_endpoint",
                "must be empty or an http(s) URL such as http://otel-collector:4318 \
                 (no query, no credentials: set OTEL_EXPORTER_OTLP_HEADERS for auth)",
            );
        }
        p.check(
            !t.service_name.is_empty() && t.service_name.len() <= 255,
            "telemetry.service_name",
            "must be 1..=255 characters",
        );
        p.check(
            (0.0..=1.0).contains(&t.sample_ratio),
            "telemetry.sample_ratio",
            "must be between 0.0 and 1.0",
        );

        let a = &self.admin;
        p.check(
            a.listen.parse::<SocketAddr>().is_ok(),
            "admin.listen",
            "must be a socket address such as 127.0.0.1:9187",
        );
        p.check(
            a.token.as_deref() != Some(""),
            "admin.token",
            "must not be empty when set",
        );
        p.check(
            a.ingest_token.as_deref() != Some(""),
            "admin.ingest_token",
            "must not be empty when set",
        );
        p.check(a.header_timeout_ms > 0, "admin.header_timeout_ms", gt0);
        p.check(a.request_timeout_ms > 0, "admin.request_timeout_ms", gt0);
        p.check(a.max_connections > 0, "admin.max_connections", gt0);

        let cc = &self.claim_check;
        p.check(
            cc.url.is_empty() || cc.url.starts_with("file:///") || cc.url.starts_with("s3://"),
            "claim_check.url",
            "must be empty, file:///absolute/dir or s3://bucket[/prefix]",
        );
        p.check(
            cc.endpoint.is_empty()
                || cc.endpoint.starts_with("http://")
                || cc.endpoint.starts_with("https://"),
            "claim_check.endpoint",
            "must be empty or an http:// or https:// URL",
        );
        p.check(
            cc.access_key_id.is_empty() == cc.secret_access_key.is_empty(),
            "claim_check.secret_access_key",
            "must be set together with claim_check.access_key_id",
        );

        for (i, c) in self.http.allow_cidrs.iter().enumerate() {
            if let Err(e) = c.parse::<ipnet::IpNet>() {
                p.check(
                    false,
                    format!("http.allow_cidrs[{i}]"),
                    format!("{c:?} is not a CIDR block such as 10.0.0.0/8 or ::1/128: {e}"),
                );
            }
        }
        let s = &self.secrets;
        p.check(
            crate::secrets::valid_env_prefix(&s.env_prefix),
            "secrets.env_prefix",
            "must match [A-Z0-9_]+ and, under ANKUSA_, start with ANKUSA_SECRET_",
        );
        p.check(
            s.file_dir.is_empty() || (s.file_dir.starts_with('/') && s.file_dir != "/"),
            "secrets.file_dir",
            "must be empty (no file references) or an absolute directory other than /",
        );

        match p.0.is_empty() {
            true => Ok(()),
            false => Err(ConfigError::Invalid(p.0)),
        }
    }

    /// The merged configuration as TOML, with the secrets (`admin.token` and the password in
    /// `redis.url`) replaced by `***`: safe to log or serve from `/admin`.
    pub fn redacted_toml(&self) -> String {
        let mut config = self.clone();
        config.redis.url = redact_url(&config.redis.url);
        if config.admin.token.is_some() {
            config.admin.token = Some(REDACTED.into());
        }
        if config.admin.ingest_token.is_some() {
            config.admin.ingest_token = Some(REDACTED.into());
        }
        if !config.claim_check.secret_access_key.is_empty()
            && !config.claim_check.secret_access_key.starts_with("${env:")
        {
            config.claim_check.secret_access_key = REDACTED.into();
        }
        toml::to_string(&config).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

/// Collects validation problems so that all are reported at once.
#[derive(Default)]
struct Problems(Vec<ConfigProblem>);

impl Problems {
    fn check(&mut self, ok: bool, key: impl Into<String>, message: impl Into<String>) {
        if !ok {
            self.0.push(ConfigProblem {
                key: key.into(),
                message: message.into(),
            });
        }
    }
}

/// Whether `s` has 1..=`max` characters, all accepted by `allowed`.
fn is_name(s: &str, max: usize, allowed: impl Fn(char) -> bool) -> bool {
    (1..=max).contains(&s.len()) && s.chars().all(allowed)
}

/// Replaces the password of a URL's `user:password@` (or a lone `secret@`) with `***`.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    // The last `@` ends the user info, even if an unencoded password holds `/` or `@`.
    let Some(at) = url[scheme_end..].rfind('@').map(|i| scheme_end + i) else {
        return url.to_string();
    };
    let user = match url[scheme_end..at].find(':') {
        Some(colon) => &url[scheme_end..=scheme_end + colon],
        None => "",
    };
    format!("{}{user}{REDACTED}{}", &url[..scheme_end], &url[at..])
}

/// The `ANKUSA_*` environment variables as a figment layer of `(dotted key, value)` pairs.
struct EnvOverrides(Vec<(String, String)>);

impl EnvOverrides {
    fn from_vars(
        vars: impl IntoIterator<Item = (impl AsRef<std::ffi::OsStr>, impl AsRef<std::ffi::OsStr>)>,
    ) -> Self {
        // The top-level keys the config defines (`instance`, `redis`, `dispatch`, …): a variable
        // whose first segment is none of them is not ours (Kubernetes' `ANKUSA_PORT`, …).
        let top: Vec<String> = match serde_json::to_value(Config::default()) {
            Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            _ => Vec::new(),
        };
        let pairs = vars.into_iter().filter_map(|(name, value)| {
            let name = name.as_ref().to_string_lossy();
            // Secrets for `${env:…}` references share the `ANKUSA_` prefix but are no config key.
            if CLI_VARS.contains(&name.as_ref())
                || name.starts_with(crate::secrets::DEFAULT_ENV_PREFIX)
            {
                return None;
            }
            let key = name
                .strip_prefix(ENV_PREFIX)?
                .to_ascii_lowercase()
                .replace("__", ".");
            let head = key.split('.').next().unwrap_or_default();
            if !top.iter().any(|t| t == head) {
                return None;
            }
            Some((key, value.as_ref().to_string_lossy().into_owned()))
        });
        EnvOverrides(pairs.collect())
    }
}

impl Provider for EnvOverrides {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENV_SOURCE)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut dict = Dict::new();
        for (key, raw) in &self.0 {
            // Like figment's `Env`: "8" becomes a number, "true" a bool; string keys stay verbatim.
            let value = match STRING_KEYS.contains(&key.as_str()) {
                true => Value::from(raw.clone()),
                false => raw.parse::<Value>().unwrap_or_else(|never| match never {}),
            };
            insert(&mut dict, key, value);
        }
        // Untagged values: figment tags them with this provider, so errors name the environment.
        Ok(Profile::Default.collect(dict))
    }
}

/// Puts `value` at the dotted `key` path of `dict`, creating tables on the way.
fn insert(dict: &mut Dict, key: &str, value: Value) {
    let Some((head, rest)) = key.split_once('.') else {
        dict.insert(key.to_string(), value);
        return;
    };
    match dict
        .entry(head.to_string())
        .or_insert_with(|| Dict::new().into())
    {
        Value::Dict(_, table) => insert(table, rest, value),
        scalar => *scalar = figment::util::nest(rest, value),
    }
}

/// Renders figment errors one per line, each naming its dotted key path and, if it came from
/// one, the file or the environment.
fn parse_error(err: figment::Error) -> ConfigError {
    use figment::error::{Kind, OneOf};
    let lines: Vec<String> = err
        .into_iter()
        .map(|e| {
            let mut path = e.path.clone();
            let what = match &e.kind {
                Kind::UnknownField(field, expected) => {
                    if path.last() != Some(field) {
                        path.push(field.clone());
                    }
                    format!(
                        "unknown field `{field}` at {}, expected {}",
                        path.join("."),
                        OneOf(expected)
                    )
                }
                kind if path.is_empty() => kind.to_string().trim_end().to_string(),
                kind => format!("{kind} at {}", path.join(".")),
            };
            match &e.metadata {
                Some(md) if md.name == ENV_SOURCE => format!("{what} (from {ENV_SOURCE})"),
                Some(md) => match md.source.as_ref().and_then(|s| s.file_path()) {
                    Some(file) => format!("{what} (in {})", file.display()),
                    None => what,
                },
                None => what,
            }
        })
        .collect();
    ConfigError::Parse {
        message: lines.join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(toml: &str) -> Vec<String> {
        match Config::from_toml_str(toml) {
            Err(e) => e.problems().iter().map(ToString::to_string).collect(),
            Ok(_) => vec![],
        }
    }

    fn parse_message(result: Result<Config, ConfigError>) -> String {
        match result {
            Err(ConfigError::Parse { message }) => message,
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn the_embedded_default_file_parses_to_exactly_the_default_config() {
        let parsed: Config = toml::from_str(DEFAULT_CONFIG_TOML).expect("default file parses");
        assert_eq!(parsed, Config::default());
        assert_eq!(
            Config::from_toml_str("").expect("defaults are valid"),
            Config::default()
        );
    }

    #[test]
    fn the_default_file_lists_every_key() {
        let listed = DEFAULT_CONFIG_TOML
            .replace("# token =", "token =")
            .replace("# ingest_token =", "ingest_token =");
        let keys: toml::Table = toml::from_str(&listed).expect("parses");
        let mut config = Config::default();
        config.admin.token = Some("t".into());
        config.admin.ingest_token = Some("i".into());
        let all: toml::Table = toml::from_str(&config.redacted_toml()).expect("parses");
        for (section, table) in &all {
            match table.as_table() {
                Some(table) => {
                    for key in table.keys().filter(|k| *k != "tenants") {
                        assert!(keys[section].get(key).is_some(), "{section}.{key} missing");
                    }
                }
                None => assert!(keys.contains_key(section), "{section} missing"),
            }
        }
    }

    #[test]
    fn telemetry_is_off_by_default_and_its_keys_are_checked() {
        let c = Config::default();
        assert_eq!(c.telemetry.traces_url(), None);
        let ok = |url: &str| {
            let toml = format!("[telemetry]\notlp_endpoint = {url:?}\n");
            let c = Config::from_toml_str(&toml).expect("valid");
            c.telemetry.traces_url().expect("on")
        };
        assert_eq!(
            ok("http://collector:4318"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            ok("https://c.example/otlp/"),
            "https://c.example/otlp/v1/traces"
        );
        assert_eq!(ok("http://c:4318/v1/traces"), "http://c:4318/v1/traces");
        for bad in [
            "collector:4318",
            "ftp://c/",
            "http://u:p@c:4318",
            "http://c/?a=1",
        ] {
            let got = problems(&format!("[telemetry]\notlp_endpoint = {bad:?}\n"));
            assert_eq!(got.len(), 1, "{bad}: {got:?}");
            assert!(got[0].starts_with("telemetry.otlp_endpoint: "), "{got:?}");
        }
        let got = problems("[telemetry]\nservice_name = \"\"\nsample_ratio = 1.5\n");
        assert_eq!(
            got,
            vec![
                "telemetry.service_name: must be 1..=255 characters",
                "telemetry.sample_ratio: must be between 0.0 and 1.0"
            ]
        );
    }

    #[test]
    fn a_partial_file_keeps_the_other_defaults() {
        let config = Config::from_toml_str("[dispatch]\nconcurrency = 8\n").expect("valid");
        assert_eq!(config.dispatch.concurrency, 8);
        assert_eq!(config.dispatch.batch, 500);
    }

    #[test]
    fn an_unknown_key_is_rejected_naming_its_path() {
        let message = parse_message(Config::from_toml_str("[dispatch]\nconcurency = 8\n"));
        assert!(
            message.contains("unknown field `concurency` at dispatch.concurency"),
            "{message}"
        );
    }

    #[test]
    fn an_unknown_key_inside_a_tenant_is_rejected_naming_its_path() {
        let message = parse_message(Config::from_toml_str(
            "[dispatch.tenants.acme]\nmax_infight = 5\n",
        ));
        assert!(
            message.contains("dispatch.tenants.acme.max_infight"),
            "{message}"
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_is_a_parse_error_naming_the_key() {
        let message = parse_message(Config::from_toml_str(
            "[dispatch]\nconcurrency = \"many\"\n",
        ));
        assert!(message.contains("at dispatch.concurrency"), "{message}");
    }

    #[test]
    fn validation_reports_every_problem_with_its_key_path() {
        let found = problems(
            "instance = \"Bad Name\"\n\
             [redis]\nurl = \"http://x\"\n\
             [leader]\nlease_ms = 9000\nrenew_ms = 4500\n\
             [dispatch]\nconcurrency = 0\nbatch = 20000\nbreaker_max_open_ms = 10\n\
             [retry]\nmultiplier = 0.5\njitter = 1.5\nmax_backoff_ms = 10\n\
             [commit]\nmax_hook_bytes = 0\n\
             [admin]\nlisten = \"nowhere\"\n",
        );
        for expected in [
            "instance: must match [a-z0-9_-]{1,64}",
            "redis.url: must start with redis:// or rediss:// or unix://",
            "leader.renew_ms: must be 0 (lease_ms / 3) or < leader.lease_ms / 2 = 4500",
            "dispatch.concurrency: must be > 0",
            "dispatch.batch: must be <= 10000",
            "dispatch.breaker_max_open_ms: must be >= dispatch.breaker_open_ms",
            "retry.max_backoff_ms: must be >= retry.initial_backoff_ms",
            "retry.min_backoff_ms: must be <= retry.max_backoff_ms",
            "retry.multiplier: must be a finite number >= 1.0",
            "retry.jitter: must be between 0.0 and 1.0",
            "commit.max_hook_bytes: must be > 0",
            "admin.listen: must be a socket address such as 127.0.0.1:9187",
        ] {
            assert!(
                found.iter().any(|p| p == expected),
                "{expected} not in {found:#?}"
            );
        }
        assert_eq!(found.len(), 12, "{found:#?}");
    }

    #[test]
    fn the_invalid_error_displays_one_problem_per_line() {
        let err = Config::from_toml_str("[dispatch]\npoll_ms = 0\nsettle_batch = 0\n")
            .expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "dispatch.poll_ms: must be > 0\ndispatch.settle_batch: must be > 0"
        );
    }

    #[test]
    fn a_zero_tenant_limit_names_the_tenant_key() {
        let found = problems("[dispatch.tenants.acme]\nmax_inflight = 0\n");
        assert_eq!(found, ["dispatch.tenants.acme.max_inflight: must be > 0"]);
    }

    #[test]
    fn a_tenant_id_outside_the_allowed_characters_is_rejected() {
        let found = problems("[dispatch.tenants.\"a b\"]\nconcurrency = 1\n");
        assert_eq!(
            found,
            ["dispatch.tenants.a b: tenant id must match [A-Za-z0-9_.-]{1,128}"]
        );
    }

    #[test]
    fn tenant_limits_fall_back_from_tenant_to_default_to_global_and_never_exceed_global() {
        let config = Config::from_toml_str(
            "[dispatch]\nconcurrency = 100\nmax_inflight = 1000\n\
             [dispatch.tenants.default]\nmax_inflight = 50\nconcurrency = 500\n\
             [dispatch.tenants.acme]\nmax_inflight = 70\n",
        )
        .expect("valid");
        let d = &config.dispatch;
        let acme = d.tenant_limits("acme");
        assert_eq!((acme.max_inflight, acme.concurrency), (70, 100));
        assert_eq!(acme.max_inflight_bytes, 256 << 20);
        let other = d.tenant_limits("other");
        assert_eq!((other.max_inflight, other.concurrency), (50, 100));
        let bare = DispatchConfig::default().tenant_limits("acme");
        assert_eq!((bare.max_inflight, bare.concurrency), (10_000, 256));
    }

    #[test]
    fn the_renew_interval_defaults_to_a_third_of_the_lease() {
        let mut leader = LeaderConfig::default();
        assert_eq!(leader.renew_interval_ms(), 3_333);
        leader.renew_ms = 2_000;
        assert_eq!(leader.renew_interval_ms(), 2_000);
    }

    #[test]
    fn the_selfcheck_needs_two_lease_intervals_and_outlasts_an_attempt() {
        let found = problems("[leader]\nselfcheck_intervals = 1\n");
        assert_eq!(
            found,
            vec!["leader.selfcheck_intervals: must be 0 (off) or >= 2".to_string()]
        );
        let mut leader = LeaderConfig::default();
        assert_eq!(leader.stall_limit_ms(1_000), Some(30_000));
        // a window of hanging attempts finishes only at the attempt timeout: not a stall
        assert_eq!(leader.stall_limit_ms(60_000), Some(70_000));
        leader.selfcheck_intervals = 0;
        assert_eq!(leader.stall_limit_ms(1_000), None);
    }

    #[test]
    fn environment_variables_override_the_file_and_cli_variables_are_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("ankusa.toml");
        std::fs::write(
            &file,
            "instance = \"file\"\n[dispatch]\nconcurrency = 16\nbatch = 7\n",
        )
        .expect("write");
        let env = [
            ("ANKUSA_DISPATCH__CONCURRENCY", "8"),
            ("ANKUSA_DISPATCH__TENANTS__ACME__MAX_INFLIGHT", "5"),
            ("ANKUSA_ADMIN__TOKEN", "1234"),
            ("ANKUSA_REDIS__ALLOW_EVICTING", "true"),
            ("ANKUSA_CONFIG", "/elsewhere.toml"),
            ("ANKUSA_LOG", "debug"),
            ("ANKUSA_LOG_FORMAT", "json"),
            ("HOME", "/root"),
        ];
        let config = Config::load_with_env(Some(&file), env).expect("valid");
        assert_eq!(config.instance, "file");
        assert_eq!(config.dispatch.concurrency, 8);
        assert_eq!(config.dispatch.batch, 7);
        assert_eq!(config.dispatch.tenant_limits("acme").max_inflight, 5);
        assert_eq!(config.admin.token.as_deref(), Some("1234"));
        assert!(config.redis.allow_evicting);
    }

    #[test]
    fn edge_guards_are_validated_and_secret_variables_are_no_config_keys() {
        let env = [
            (
                "ANKUSA_HTTP__ALLOW_CIDRS",
                r#"["172.16.0.0/12", "::1/128"]"#,
            ),
            ("ANKUSA_SECRET_ORDERS_TOKEN", "s3cret"),
        ];
        let config = Config::load_with_env(None, env).expect("valid");
        assert_eq!(config.http.allow_cidrs, ["172.16.0.0/12", "::1/128"]);
        assert!(config.http.deny_private);
        assert_eq!(config.secrets.env_prefix, "ANKUSA_SECRET_");
        let found = problems(
            "[http]\nallow_cidrs = [\"10.0.0.0/8\", \"10.0.0.1/33\", \"nope\"]\n\
             [secrets]\nenv_prefix = \"ANKUSA_\"\nfile_dir = \"relative\"\n",
        );
        for key in [
            "http.allow_cidrs[1]",
            "http.allow_cidrs[2]",
            "secrets.env_prefix",
            "secrets.file_dir",
        ] {
            assert!(found.iter().any(|p| p.starts_with(key)), "{key}: {found:?}");
        }
        assert!(!found.iter().any(|p| p.starts_with("http.allow_cidrs[0]")));
    }

    #[test]
    fn an_unknown_environment_key_is_rejected_naming_its_path() {
        let env = [("ANKUSA_DISPATCH__BOGUS", "1")];
        let message = parse_message(Config::load_with_env(None, env));
        assert!(message.contains("at dispatch.bogus"), "{message}");
        assert!(message.contains("environment"), "{message}");
    }

    #[test]
    fn kubernetes_service_variables_are_ignored_but_a_misspelt_section_key_is_refused() {
        let env = [
            ("ANKUSA_PORT", "tcp://10.0.0.7:9187"),
            ("ANKUSA_PORT_9187_TCP_ADDR", "10.0.0.7"),
            ("ANKUSA_SERVICE_HOST", "10.0.0.7"),
            ("ANKUSA_SERVICE_PORT", "9187"),
            ("ANKUSA_REDIS_SERVICE_HOST", "10.0.0.8"),
            ("ANKUSA_DISPATCH__CONCURRENCY", "8"),
        ];
        let config = Config::load_with_env(None, env).expect("k8s variables are not config");
        assert_eq!(config.dispatch.concurrency, 8);
        let env = [("ANKUSA_DISPATCH__CONCURENCY", "8")];
        let message = parse_message(Config::load_with_env(None, env));
        assert!(message.contains("dispatch.concurency"), "{message}");
    }

    #[test]
    fn a_missing_config_file_is_an_error_naming_the_path() {
        let path = Path::new("/nonexistent/ankusa.toml");
        let err = Config::load_with_env(Some(path), [("HOME", "/root")]).expect_err("missing");
        assert!(matches!(err, ConfigError::Io { .. }), "{err:?}");
        assert!(
            err.to_string().contains("/nonexistent/ankusa.toml"),
            "{err}"
        );
    }

    #[test]
    fn a_type_error_in_a_file_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "[retry]\njitter = \"lots\"\n").expect("write");
        let message = parse_message(Config::load_with_env(Some(&file), [("HOME", "/root")]));
        assert!(message.contains("at retry.jitter"), "{message}");
        assert!(message.contains("bad.toml"), "{message}");
    }

    #[test]
    fn redaction_hides_the_admin_token_and_the_redis_password() {
        let mut config = Config::default();
        config.redis.url = "redis://user:secret@host:6379/0".into();
        config.admin.token = Some("hunter2".into());
        config.claim_check.access_key_id = "AKIA".into();
        config.claim_check.secret_access_key = "s3kr1t".into();
        let dump = config.redacted_toml();
        assert!(
            !dump.contains(":secret@") && !dump.contains("hunter2") && !dump.contains("s3kr1t"),
            "{dump}"
        );
        assert!(
            dump.contains("url = \"redis://user:***@host:6379/0\""),
            "{dump}"
        );
        assert!(dump.contains("token = \"***\""), "{dump}");
        let back: Config = toml::from_str(&dump).expect("the dump parses back");
        assert_eq!(back.dispatch, config.dispatch);
    }

    #[test]
    fn a_listen_address_beyond_loopback_needs_the_admin_token() {
        let exposed = "[admin]\nlisten = \"0.0.0.0:9187\"\ningest_token = \"i\"\n";
        let config = Config::from_toml_str(exposed).expect("valid for the other commands");
        let err = config.admin.check_exposure().expect_err("not for a worker");
        let found: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].starts_with("admin.token: required: admin.listen = 0.0.0.0:9187"),
            "{found:#?}"
        );
        for fine in [
            "[admin]\nlisten = \"0.0.0.0:9187\"\ntoken = \"t\"\n",
            "[admin]\nlisten = \"127.0.0.1:9187\"\n",
            "[admin]\nlisten = \"[::1]:9187\"\n",
        ] {
            let config = Config::from_toml_str(fine).expect("valid");
            assert!(config.admin.check_exposure().is_ok(), "{fine}");
        }
        let found = problems(
            "[admin]\ningest_token = \"\"\nheader_timeout_ms = 0\nrequest_timeout_ms = 0\nmax_connections = 0\n",
        );
        assert_eq!(
            found,
            [
                "admin.ingest_token: must not be empty when set",
                "admin.header_timeout_ms: must be > 0",
                "admin.request_timeout_ms: must be > 0",
                "admin.max_connections: must be > 0",
            ]
        );
    }

    #[test]
    fn tls_files_need_a_rediss_url_and_a_certificate_needs_its_key() {
        let found = problems("[redis]\ntls_ca_file = \"/ca.pem\"\ntls_cert_file = \"/c.pem\"\n");
        assert_eq!(
            found,
            [
                "redis.tls_ca_file: needs a rediss:// redis.url (TLS)",
                "redis.tls_cert_file: needs a rediss:// redis.url (TLS)",
                "redis.tls_key_file: must be set together with redis.tls_cert_file",
            ]
        );
        let ok = "[redis]\nurl = \"rediss://h:6380\"\ntls_ca_file = \"/ca.pem\"\n\
                  tls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\n";
        assert_eq!(problems(ok), Vec::<String>::new());
    }

    #[test]
    fn redaction_hides_the_ingest_token() {
        let mut config = Config::default();
        config.admin.ingest_token = Some("pr0ducer".into());
        let dump = config.redacted_toml();
        assert!(!dump.contains("pr0ducer"), "{dump}");
        assert!(dump.contains("ingest_token = \"***\""), "{dump}");
    }

    #[test]
    fn url_redaction_covers_every_user_info_shape() {
        assert_eq!(redact_url("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact_url("rediss://pw@h:1"), "rediss://***@h:1");
        assert_eq!(redact_url("redis://u:p/w@h"), "redis://u:***@h");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        assert_eq!(
            redact_url("unix:///tmp/redis.sock"),
            "unix:///tmp/redis.sock"
        );
    }
}
