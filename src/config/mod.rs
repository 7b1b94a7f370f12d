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

mod env;
mod sections;

use env::{parse_error, EnvOverrides};
pub use sections::{
    AdminConfig, ClaimCheckConfig, CommitConfig, DispatchConfig, DlqConfig, HistoryConfig,
    HttpConfig, LeaderConfig, OperatorConfig, RedisConfig, ResolvedLimits, RetryConfig,
    SecretsConfig, TelemetryConfig, TenantLimits,
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
const STRING_KEYS: [&str; 17] = [
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
    /// Redis without seeing each other (R29). Must match `[a-z0-9_-]{1,64}`. Default `"default"`.
    pub instance: String,
    /// Partitions of the instance (issue 13): each tenant lives in one, by
    /// [`crate::keyspace::partition_of`] its id; each has its own lease, so up to this many
    /// workers lead at once. `1..=1024`, default 1 (the layout from before partitions).
    /// Recorded in Redis at first start; changing it needs the procedure of
    /// `docs/operations.md` ("Partitions").
    pub partitions: u32,
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
    /// Blob store for bodies over a sink's inline limit (R18).
    pub claim_check: ClaimCheckConfig,
    /// Guards of the requests made to tenants' URLs (SSRF guard; `docs/security.md`).
    pub http: HttpConfig,
    /// Which secret references sink options may resolve (`docs/security.md`).
    pub secrets: SecretsConfig,
    /// Attempt history, resend retention and per-tenant metrics (`docs/operations.md`).
    pub history: HistoryConfig,
    /// Optional OpenTelemetry trace export of attempts (`docs/operations.md`).
    pub telemetry: TelemetryConfig,
    /// Operational events: the `events` stream and an operator URL (P9, `docs/sinks.md`).
    pub operator: OperatorConfig,
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
            history: HistoryConfig::default(),
            telemetry: TelemetryConfig::default(),
            operator: OperatorConfig::default(),
        }
    }
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
        p.check(
            (1..=MAX_PARTITIONS).contains(&self.partitions),
            "partitions",
            "must be in 1..=1024",
        );

        let r = &self.redis;
        if let Err(e) = crate::store::url::topology(&r.url) {
            p.check(
                false,
                "redis.url",
                format!("{} cannot be served by this build: {}", e.url, e.reason),
            );
        }
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
        p.check(
            (1..=1000).contains(&d.script_budget_ms),
            "dispatch.script_budget_ms",
            "must be 1..=1000",
        );
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

        let o = &self.operator;
        p.check(
            o.events_url.as_deref().map_or(true, |u| {
                u.starts_with("http://") || u.starts_with("https://")
            }),
            "operator.events_url",
            "must be an http:// or https:// URL",
        );
        p.check(
            o.signing_secret.as_deref() != Some(""),
            "operator.signing_secret",
            "must not be empty when set",
        );
        p.check(o.events_max_len > 0, "operator.events_max_len", gt0);
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
        p.check(
            a.event_type_headers.iter().all(|h| {
                !h.is_empty()
                    && h.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            }),
            "admin.event_type_headers",
            "every name must be a lowercase header name ([a-z0-9-]+)",
        );

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
        if config
            .operator
            .signing_secret
            .as_deref()
            .is_some_and(|s| !s.starts_with("${"))
        {
            config.operator.signing_secret = Some(REDACTED.into());
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

#[cfg(test)]
mod tests;
