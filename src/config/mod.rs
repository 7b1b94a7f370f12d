//! Configuration: layered, strict, validated once.
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

mod duration;
mod edge;
mod env;
mod forms;
mod proxy;
pub mod redis_url;
mod sections;
mod validate;
pub use validate::{no_check, Check};

pub use duration::parse_ms;
pub use edge::{
    Bound, ConnectionConfig, HttpConfig, LimitsConfig, SecretsConfig, SourceBounds, SourcePolicy,
    TenantConfig, TenantQuota,
};
use env::{parse_error, EnvOverrides};
pub use forms::{frame_origin, split_host, valid_ambient_grant};
pub use proxy::EgressProxy;
pub use sections::{
    AdminConfig, ClaimCheckConfig, CommitConfig, DispatchConfig, DlqConfig, HistoryConfig,
    LeaderConfig, LogConfig, OperatorConfig, RedisConfig, ResolvedLimits, RetryConfig,
    TelemetryConfig, TenantLimits,
};

/// The default configuration: every key with its default value and a comment.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../../config/ankusa.toml");

/// Prefix of the environment variables that override config keys.
const ENV_PREFIX: &str = "ANKUSA_";
/// Names the environment layer in parse errors.
const ENV_SOURCE: &str = "ANKUSA_* environment variables";
/// `ANKUSA_*` variables read by the CLI itself: not config keys.
const CLI_VARS: [&str; 3] = ["ANKUSA_CONFIG", "ANKUSA_LOG", "ANKUSA_LOG_FORMAT"];
/// String keys whose environment value is taken verbatim, so `ANKUSA_ADMIN__TOKEN=1234` stays a
/// string instead of being parsed as a number.
const STRING_KEYS: [&str; 19] = [
    "instance",
    "redis.url",
    "redis.tls_ca_file",
    "redis.tls_cert_file",
    "redis.tls_key_file",
    "admin.listen",
    "admin.token",
    "admin.ingest_token",
    "admin.portal_link_key",
    "claim_check.url",
    "log.url",
    "claim_check.endpoint",
    "claim_check.region",
    "claim_check.access_key_id",
    "claim_check.secret_access_key",
    "operator.events_url",
    "operator.signing_secret",
    "secrets.env_prefix",
    "secrets.file_dir",
];
/// Replaces secrets in [`Config::redacted_toml`].
const REDACTED: &str = "***";
/// The most partitions an instance may have (`partitions`).
pub const MAX_PARTITIONS: u32 = 1024;
/// The `dispatch.tenants` entry every tenant falls back to.
const DEFAULT_TENANT: &str = "default";

/// The whole configuration of one pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Namespace of every Redis key and metric of this pipeline, so several instances share one
    /// Redis without seeing each other. Must match `[a-z0-9_-]{1,64}`. Default `"default"`.
    pub instance: String,
    /// Partitions of the instance: each tenant lives in one, by
    /// [`crate::keyspace::partition_of`] its id; each has its own lease, so up to this many
    /// workers lead at once. `1..=1024`, default 1 (the layout from before partitions).
    /// Recorded in Redis at first start; changing it needs the procedure of
    /// `docs/running.md` ("Partitions").
    pub partitions: u32,
    /// Redis connection.
    pub redis: RedisConfig,
    /// Leader election.
    pub leader: LeaderConfig,
    /// Scheduler: concurrency, windows, breakers.
    pub dispatch: DispatchConfig,
    /// Retry backoff and horizon.
    pub retry: RetryConfig,
    /// Limits applied when a hook is committed.
    pub commit: CommitConfig,
    /// Metrics and admin HTTP listener.
    pub admin: AdminConfig,
    /// Retention of dead letters and of the hook bodies they keep.
    pub dlq: DlqConfig,
    /// Blob store for bodies over a sink's inline limit.
    pub claim_check: ClaimCheckConfig,
    /// Guards of the requests made to tenants' URLs (SSRF guard; `docs/security.md`).
    pub http: HttpConfig,
    /// Which secret references sink options may resolve (`docs/security.md`).
    pub secrets: SecretsConfig,
    /// The operator's bounds on every source (`docs/operations.md` "Source limits").
    pub limits: LimitsConfig,
    /// The operator's policy per tenant, `[tenants.<id>]` (`docs/security.md`): overrides of
    /// `[limits]`, shared secrets granted to it, custom SQS/Pub/Sub endpoints, the worker's
    /// own cloud credentials for named queues and topics. Default empty.
    pub tenants: BTreeMap<String, TenantConfig>,
    /// Attempt history, resend retention and per-tenant metrics (`docs/operations.md`).
    pub history: HistoryConfig,
    /// The delivery log's store (PostgreSQL), its retention (`docs/operations.md` "The
    /// delivery log").
    pub log: LogConfig,
    /// Optional OpenTelemetry trace export of attempts (`docs/operations.md`).
    pub telemetry: TelemetryConfig,
    /// Operational events: the `events` stream and an operator URL (`docs/sinks.md`).
    pub operator: OperatorConfig,
    /// Brokers the operator names for the `nats` and `rabbitmq` sinks,
    /// `[connections.<name>]` (`docs/sinks.md`). Default empty.
    pub connections: BTreeMap<String, ConnectionConfig>,
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
            partitions: 1,
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
            limits: LimitsConfig::default(),
            tenants: BTreeMap::new(),
            history: HistoryConfig::default(),
            log: LogConfig::default(),
            telemetry: TelemetryConfig::default(),
            operator: OperatorConfig::default(),
            connections: BTreeMap::new(),
        }
    }
}

impl Config {
    /// Loads defaults → the file at `path` (if given; a missing file is an error) → environment
    /// overrides, then validates.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_checked(path, no_check)
    }

    /// [`Config::load`], with `check`'s problems reported beside the config's own
    /// ([`Config::validate_with`]).
    pub fn load_checked(path: Option<&Path>, check: Check) -> Result<Config, ConfigError> {
        Self::load_env_checked(path, std::env::vars_os(), check)
    }

    /// [`Config::load`] with the environment given as `vars`, so tests need not touch the
    /// process environment.
    #[cfg(test)]
    fn load_with_env(
        path: Option<&Path>,
        vars: impl IntoIterator<Item = (impl AsRef<std::ffi::OsStr>, impl AsRef<std::ffi::OsStr>)>,
    ) -> Result<Config, ConfigError> {
        Self::load_env_checked(path, vars, no_check)
    }

    fn load_env_checked(
        path: Option<&Path>,
        vars: impl IntoIterator<Item = (impl AsRef<std::ffi::OsStr>, impl AsRef<std::ffi::OsStr>)>,
        check: Check,
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
        Self::extract(figment.merge(EnvOverrides::from_vars(vars)), check)
    }

    /// Defaults → the TOML in `toml`, without environment overrides, then validates.
    pub fn from_toml_str(toml: &str) -> Result<Config, ConfigError> {
        Self::from_toml_str_checked(toml, no_check)
    }

    /// [`Config::from_toml_str`], with `check`'s problems reported beside the config's own.
    pub fn from_toml_str_checked(toml: &str, check: Check) -> Result<Config, ConfigError> {
        Self::extract(
            Figment::from(Toml::string(DEFAULT_CONFIG_TOML)).merge(Toml::string(toml)),
            check,
        )
    }

    fn extract(figment: Figment, check: Check) -> Result<Config, ConfigError> {
        let config: Config = figment
            .extract()
            .map_err(|e| parse_error(env::every_unknown_key(&figment, e)))?;
        config
            .validate_with(check)
            .map_err(|e| env::name_env_sources(&figment, e))?;
        Ok(config)
    }

    /// The merged configuration as TOML, with the secrets (`admin.token` and the passwords in
    /// `redis.url` and `log.url`) replaced by `***`: safe to log or serve from `/admin`.
    pub fn redacted_toml(&self) -> String {
        let mut config = self.clone();
        config.redis.url = redact_url(&config.redis.url);
        config.http.proxy = config.http.proxy.as_deref().map(redact_url);
        config.log.url = config.log.url.as_deref().map(redact_url);
        if config.admin.token.is_some() {
            config.admin.token = Some(REDACTED.into());
        }
        if config.admin.ingest_token.is_some() {
            config.admin.ingest_token = Some(REDACTED.into());
        }
        if config.admin.portal_link_key.is_some() {
            config.admin.portal_link_key = Some(REDACTED.into());
        }
        if config
            .operator
            .signing_secret
            .as_deref()
            .is_some_and(|s| !only_a_reference(s))
        {
            config.operator.signing_secret = Some(REDACTED.into());
        }
        for t in config.tenants.values_mut() {
            if t.events_signing_secret
                .as_deref()
                .is_some_and(|s| !only_a_reference(s))
            {
                t.events_signing_secret = Some(REDACTED.into());
            }
        }
        if !config.claim_check.secret_access_key.is_empty()
            && !only_a_reference(&config.claim_check.secret_access_key)
        {
            config.claim_check.secret_access_key = REDACTED.into();
        }
        for c in config.connections.values_mut() {
            for secret in [&mut c.password, &mut c.token] {
                if secret.as_deref().is_some_and(|s| !only_a_reference(s)) {
                    *secret = Some(REDACTED.into());
                }
            }
        }
        toml::to_string(&config).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

/// Whether a secret's value is one whole reference (`${env:NAME}`, `${file:name}`) and no
/// more, so it can be shown as written: `${env:X}whsec_…` holds a literal secret after it.
fn only_a_reference(s: &str) -> bool {
    s.strip_prefix("${")
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|inner| !inner.contains(['{', '}', '$']))
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

#[cfg(test)]
mod tests;
