//! [`Config::validate`]: one check per key, one function per section, every problem reported
//! at once in the order of the sections.

use super::{
    AdminConfig, ClaimCheckConfig, CommitConfig, Config, ConfigError, ConfigProblem,
    ConnectionConfig, DispatchConfig, HistoryConfig, HttpConfig, LeaderConfig, LimitsConfig,
    LogConfig, OperatorConfig, RedisConfig, RetryConfig, SecretsConfig, SocketAddr,
    TelemetryConfig, TenantConfig, DEFAULT_TENANT, MAX_PARTITIONS,
};
use std::collections::BTreeMap;

const GT0: &str = "must be > 0";

/// A check of a parsed config that the config itself cannot make because it needs a higher
/// layer (`ankusa::sinks::registry::config_problems`: whether a module name is one of the
/// build's); its problems are reported with the config's own, at once.
pub type Check = fn(&Config) -> Vec<ConfigProblem>;

/// The [`Check`] that finds nothing.
pub fn no_check(_: &Config) -> Vec<ConfigProblem> {
    Vec::new()
}

impl Config {
    /// Checks every key and returns all problems at once, each with its dotted key path.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_with(no_check)
    }

    /// [`Config::validate`], with the problems `check` finds (a check only a higher layer
    /// can make, such as the sink registry's module names) reported in the same list.
    pub fn validate_with(&self, check: Check) -> Result<(), ConfigError> {
        let mut p = Problems::default();
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
        redis(&self.redis, &mut p);
        leader(&self.leader, &mut p);
        dispatch(&self.dispatch, &mut p);
        retry(&self.retry, &mut p);
        commit(&self.commit, &mut p);
        history(&self.history, &mut p);
        log(&self.log, &mut p);
        operator(&self.operator, &mut p);
        telemetry(&self.telemetry, &mut p);
        admin(&self.admin, &mut p);
        claim_check(&self.claim_check, &mut p);
        http(&self.http, &mut p);
        secrets(&self.secrets, &mut p);
        limits(&self.limits, &mut p);
        tenants(&self.tenants, &self.secrets, &mut p);
        for (id, t) in &self.tenants {
            if let Some(days) = t.log_retention_days {
                p.check(
                    (1..=self.log.retention_days).contains(&days),
                    format!("tenants.{id}.log_retention_days"),
                    format!(
                        "must be in 1..={} (log.retention_days bounds it)",
                        self.log.retention_days
                    ),
                );
            }
        }
        connections(&self.connections, &mut p);
        p.0.extend(check(self));
        match p.0.is_empty() {
            true => Ok(()),
            false => Err(ConfigError::Invalid(p.0)),
        }
    }
}

/// `[redis]`: the Redis connection: a URL this build can serve, TLS files only with TLS.
fn redis(r: &RedisConfig, p: &mut Problems) {
    if let Err(e) = super::redis_url::topology(&r.url) {
        p.check(false, "redis.url", format!("{} {}", e.url, e.reason));
    }
    p.check(r.command_timeout_ms > 0, "redis.command_timeout_ms", GT0);
    p.check(
        r.startup_wait_ms <= 86_400_000,
        "redis.startup_wait_ms",
        "must be at most 1 day (86400000 ms); 0 = do not wait",
    );
    p.check(
        r.commit_wait_ms <= 60_000,
        "redis.commit_wait_ms",
        "must be at most 60000 (0 answers commits without waiting for replicas)",
    );
    let tls = super::redis_url::is_tls(&r.url);
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
}

/// `[leader]`: the lease and its renewal, the self-check.
fn leader(l: &LeaderConfig, p: &mut Problems) {
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
}

/// `[dispatch]`: the loop's limits, and each tenant's overrides.
fn dispatch(d: &DispatchConfig, p: &mut Problems) {
    p.check(d.concurrency > 0, "dispatch.concurrency", GT0);
    p.check(d.max_inflight > 0, "dispatch.max_inflight", GT0);
    p.check(d.max_inflight_bytes > 0, "dispatch.max_inflight_bytes", GT0);
    p.check(d.batch > 0, "dispatch.batch", GT0);
    p.check(d.batch <= 10_000, "dispatch.batch", "must be <= 10000");
    p.check(d.attempt_timeout_ms > 0, "dispatch.attempt_timeout_ms", GT0);
    p.check(d.sink_concurrency > 0, "dispatch.sink_concurrency", GT0);
    p.check(d.breaker_open_ms > 0, "dispatch.breaker_open_ms", GT0);
    p.check(
        d.breaker_max_open_ms >= d.breaker_open_ms,
        "dispatch.breaker_max_open_ms",
        "must be >= dispatch.breaker_open_ms",
    );
    p.check(d.poll_ms > 0, "dispatch.poll_ms", GT0);
    p.check(d.settle_batch > 0, "dispatch.settle_batch", GT0);
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
            GT0,
        );
        p.check(
            t.max_inflight_bytes != Some(0),
            format!("{key}.max_inflight_bytes"),
            GT0,
        );
        p.check(
            t.weight.is_none_or(|w| (1..=1000).contains(&w)),
            format!("{key}.weight"),
            "must be 1..=1000",
        );
        p.check(t.concurrency != Some(0), format!("{key}.concurrency"), GT0);
    }
}

/// `[retry]`: the backoff curve.
fn retry(r: &RetryConfig, p: &mut Problems) {
    p.check(r.initial_backoff_ms > 0, "retry.initial_backoff_ms", GT0);
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
    p.check(r.max_elapsed_ms > 0, "retry.max_elapsed_ms", GT0);
}

/// `[commit]`: the size and idempotency limits of a commit.
fn commit(c: &CommitConfig, p: &mut Problems) {
    p.check(c.max_hook_bytes > 0, "commit.max_hook_bytes", GT0);
    p.check(
        c.max_hook_bytes <= 512 << 20,
        "commit.max_hook_bytes",
        "must be <= 536870912 (Redis' string limit)",
    );
    p.check(c.idempotency_ms > 0, "commit.idempotency_ms", GT0);
    p.check(c.max_delay_ms > 0, "commit.max_delay_ms", GT0);
    p.check(
        c.max_delay_ms <= MAX_DELAY_MS,
        "commit.max_delay_ms",
        "must be <= 3153600000000 (100 years)",
    );
}

/// The largest `commit.max_delay_ms`: 100 years, far inside the 2^53 ms the scripts keep
/// exact.
const MAX_DELAY_MS: u64 = 100 * 365 * 24 * 3_600_000;

/// `[history]`: the attempt history's retention, the tenants given their own series.
fn history(h: &HistoryConfig, p: &mut Problems) {
    p.check(h.max_age_ms > 0, "history.max_age_ms", GT0);
    p.check(h.max_per_tenant > 0, "history.max_per_tenant", GT0);
    for (i, t) in h.metrics_tenants.iter().enumerate() {
        p.check(
            crate::ids::check_id("tenant", t).is_ok(),
            format!("history.metrics_tenants[{i}]"),
            "must match [A-Za-z0-9_.-]{1,128}",
        );
    }
}

/// `[log]`: the delivery log's store and its bounds.
fn log(l: &LogConfig, p: &mut Problems) {
    if let Some(url) = &l.url {
        p.check(
            url.starts_with("postgres://") || url.starts_with("postgresql://"),
            "log.url",
            "must be a postgres:// or postgresql:// URL",
        );
        if let Err(e) = url.parse::<tokio_postgres::Config>() {
            p.check(false, "log.url", format!("is not a PostgreSQL URL: {e}"));
        }
    }
    p.check(
        (1..=3650).contains(&l.retention_days),
        "log.retention_days",
        "must be in 1..=3650",
    );
    p.check(l.stream_max_bytes > 0, "log.stream_max_bytes", GT0);
    p.check(
        (1..=10_000).contains(&l.batch_entries),
        "log.batch_entries",
        "must be in 1..=10000",
    );
    p.check(
        (1..=64).contains(&l.pool_size),
        "log.pool_size",
        "must be in 1..=64",
    );
    p.check(
        l.keep_bodies <= 10 << 20,
        "log.keep_bodies",
        "must be at most 10485760 (10 MiB)",
    );
}

/// `[operator]`: the operator event stream.
fn operator(o: &OperatorConfig, p: &mut Problems) {
    p.check(
        o.events_url
            .as_deref()
            .is_none_or(|u| u.starts_with("http://") || u.starts_with("https://")),
        "operator.events_url",
        "must be an http:// or https:// URL",
    );
    p.check(
        o.signing_secret.as_deref() != Some(""),
        "operator.signing_secret",
        "must not be empty when set",
    );
    p.check(o.events_max_len > 0, "operator.events_max_len", GT0);
}

/// `[telemetry]`: the OTLP exporter.
fn telemetry(t: &TelemetryConfig, p: &mut Problems) {
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
}

/// `[admin]`: the admin listener and its tokens.
fn admin(a: &AdminConfig, p: &mut Problems) {
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
    if let Some(weak) = a
        .token
        .as_deref()
        .filter(|t| !t.is_empty() && !a.allow_weak_token)
        .and_then(AdminConfig::weakness)
    {
        p.check(
            false,
            "admin.token",
            format!("{weak}; a demo or test on loopback may set admin.allow_weak_token = true"),
        );
    }
    if let Some(weak) = a.portal_link_key.as_deref().and_then(AdminConfig::weakness) {
        p.check(false, "admin.portal_link_key", weak);
    }
    p.check(
        a.ingest_token.as_deref() != Some(""),
        "admin.ingest_token",
        "must not be empty when set",
    );
    p.check(a.header_timeout_ms > 0, "admin.header_timeout_ms", GT0);
    p.check(a.request_timeout_ms > 0, "admin.request_timeout_ms", GT0);
    p.check(a.max_connections > 0, "admin.max_connections", GT0);
    p.check(
        a.event_type_headers.iter().all(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        }),
        "admin.event_type_headers",
        "every name must be a lowercase header name ([a-z0-9-]+)",
    );
    for (i, h) in a.public_hosts.iter().enumerate() {
        let name = super::split_host(h).map(|(n, _)| n);
        p.check(
            name.is_some_and(|n| {
                !n.starts_with('.')
                    && !n.ends_with('.')
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
            }),
            format!("admin.public_hosts[{i}]"),
            "must be a host name or name:port (no scheme, path or wildcard), e.g. worker-1 or ankusa.example.com:443",
        );
    }
    for (i, o) in a.portal_frame_ancestors.iter().enumerate() {
        p.check(
            super::frame_origin(o).is_some(),
            format!("admin.portal_frame_ancestors[{i}]"),
            "must be an origin: http(s)://host[:port], no path, query or wildcard, e.g. https://app.example.com",
        );
    }
    for (i, h) in a.forward_headers.iter().enumerate() {
        let key = format!("admin.forward_headers[{i}]");
        let name = h.strip_suffix('*').unwrap_or(h);
        p.check(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            &key,
            "must be a lowercase header name ([a-z0-9-]+), or a prefix of one ending in * (not * alone)",
        );
        p.check(
            !AdminConfig::NEVER_FORWARDED.contains(&h.as_str()),
            &key,
            "is never forwarded: the request's credentials, framing and hop-by-hop headers stay with it",
        );
        p.check(
            !["webhook-", "ankusa-"].iter().any(|r| h.starts_with(r)),
            &key,
            "webhook-* and ankusa-* headers are the product's own: a producer cannot set them",
        );
    }
}

/// `[claim_check]`: the claim-check store.
fn claim_check(cc: &ClaimCheckConfig, p: &mut Problems) {
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
}

/// `[http]`: the allowed CIDR blocks of the http sink, its egress proxy.
fn http(http: &HttpConfig, p: &mut Problems) {
    if let Err(why) = super::EgressProxy::from_config(http) {
        match why
            .split_once(": ")
            .filter(|(k, _)| k.starts_with("no_proxy["))
        {
            Some((key, why)) => p.check(false, format!("http.{key}"), why),
            None => p.check(false, "http.proxy", why),
        }
    }
    for (i, c) in http.allow_cidrs.iter().enumerate() {
        if let Err(e) = c.parse::<ipnet::IpNet>() {
            p.check(
                false,
                format!("http.allow_cidrs[{i}]"),
                format!("{c:?} is not a CIDR block such as 10.0.0.0/8 or ::1/128: {e}"),
            );
        }
    }
}

/// `[secrets]`: where secret references are read from: a prefix that reaches neither the
/// worker's own settings nor a cloud SDK's, a directory that holds no platform token.
fn secrets(s: &SecretsConfig, p: &mut Problems) {
    if let Some(why) = crate::secrets::env_prefix_problem(&s.env_prefix) {
        p.check(false, "secrets.env_prefix", why);
    }
    let env = |name: &str| std::env::var(name).ok();
    if let Some(why) = crate::secrets::file_dir_problem(&s.file_dir, &env) {
        p.check(false, "secrets.file_dir", why);
    }
}

/// The most `limits.max_sinks_per_source` may be: one hook makes a row per entry in one
/// commit-script call.
const MAX_SINKS_CAP: usize = 1_000;
/// The most `limits.max_headers_per_entry` may be.
const MAX_HEADERS_CAP: usize = 1_000;
/// The most `limits.max_header_bytes` may be.
const MAX_HEADER_BYTES_CAP: usize = 1 << 20;

/// One set of source bounds, `[limits]` or a `[tenants.<id>]` section (`section` is the key
/// path before the field names).
fn source_bounds(
    section: &str,
    sinks: Option<usize>,
    headers: Option<usize>,
    header_bytes: Option<usize>,
    modules: Option<&[String]>,
    quotas: [Option<u64>; 4],
    p: &mut Problems,
) {
    let [sources, source_bytes, pending_bytes, pending_hooks] = quotas;
    if let Some(v) = sources {
        p.check(
            (1..=1_000_000).contains(&v),
            format!("{section}.max_sources_per_tenant"),
            "must be 1..=1000000",
        );
    }
    if let Some(v) = source_bytes {
        p.check(
            (1024..=10 << 20).contains(&v),
            format!("{section}.max_source_bytes"),
            "must be 1024..=10485760",
        );
    }
    for (v, name) in [
        (pending_bytes, "max_pending_bytes"),
        (pending_hooks, "max_pending_hooks"),
    ] {
        if let Some(v) = v {
            p.check(
                (1..1 << 53).contains(&v),
                format!("{section}.{name}"),
                "must be 1 or more (and below 2^53)",
            );
        }
    }
    if let Some(v) = sinks {
        p.check(
            (1..=MAX_SINKS_CAP).contains(&v),
            format!("{section}.max_sinks_per_source"),
            format!("must be 1..={MAX_SINKS_CAP}"),
        );
    }
    if let Some(v) = headers {
        p.check(
            v <= MAX_HEADERS_CAP,
            format!("{section}.max_headers_per_entry"),
            format!("must be <= {MAX_HEADERS_CAP}"),
        );
    }
    if let Some(v) = header_bytes {
        p.check(
            v <= MAX_HEADER_BYTES_CAP,
            format!("{section}.max_header_bytes"),
            format!("must be <= {MAX_HEADER_BYTES_CAP}"),
        );
    }
    // Whether a name is one of this build's modules is the sink registry's to say
    // (`sinks::registry::config_problems`); the config only checks that it can be one.
    for (i, m) in modules.unwrap_or_default().iter().enumerate() {
        p.check(
            is_name(m, 32, |c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
            }),
            format!("{section}.modules[{i}]"),
            format!("{m:?} is no sink module name ([a-z0-9_]{{1,32}})"),
        );
    }
}

/// `[limits]`: the bounds on every source.
fn limits(l: &LimitsConfig, p: &mut Problems) {
    source_bounds(
        "limits",
        Some(l.max_sinks_per_source),
        Some(l.max_headers_per_entry),
        Some(l.max_header_bytes),
        l.modules.as_deref(),
        [
            Some(l.max_sources_per_tenant as u64),
            Some(l.max_source_bytes as u64),
            Some(l.max_pending_bytes),
            Some(l.max_pending_hooks),
        ],
        p,
    );
}

/// `[tenants.<id>]`: a valid tenant id, its bounds, shared secrets under the env prefix, every
/// ambient-credential grant a queue ARN or a topic, its events URL.
fn tenants(t: &BTreeMap<String, TenantConfig>, s: &SecretsConfig, p: &mut Problems) {
    for (id, c) in t {
        let key = format!("tenants.{id}");
        p.check(
            crate::ids::check_id("tenant", id).is_ok(),
            &key,
            "tenant id must match [A-Za-z0-9_.-]{1,128}",
        );
        source_bounds(
            &key,
            c.max_sinks_per_source,
            c.max_headers_per_entry,
            c.max_header_bytes,
            c.modules.as_deref(),
            [
                c.max_sources_per_tenant.map(|v| v as u64),
                c.max_source_bytes.map(|v| v as u64),
                c.max_pending_bytes,
                c.max_pending_hooks,
            ],
            p,
        );
        for (i, name) in c.shared_secrets.iter().enumerate() {
            p.check(
                name.len() > s.env_prefix.len()
                    && name.starts_with(&s.env_prefix)
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                format!("{key}.shared_secrets[{i}]"),
                format!(
                    "{name:?} must be an environment variable name ([A-Z0-9_]+) under \
                     secrets.env_prefix = {:?}",
                    s.env_prefix
                ),
            );
        }
        p.check(
            c.events_url
                .as_deref()
                .is_none_or(|u| u.starts_with("http://") || u.starts_with("https://")),
            format!("{key}.events_url"),
            "must be an http:// or https:// URL",
        );
        p.check(
            c.events_signing_secret.as_deref() != Some(""),
            format!("{key}.events_signing_secret"),
            "must not be empty when set",
        );
        for (i, g) in c.ambient_credentials.iter().enumerate() {
            p.check(
                super::valid_ambient_grant(g),
                format!("{key}.ambient_credentials[{i}]"),
                format!(
                    "{g:?} must be an SQS queue ARN (arn:aws:sqs:<region>:<account>:<queue>) or a \
                     Pub/Sub topic (projects/<project>/topics/<topic>), optionally ending in *"
                ),
            );
        }
    }
}

/// `[connections.<name>]`: a name of `[a-z0-9_-]{1,64}` (the metric label and the name
/// entries use), a broker URL of a known scheme with a host and without credentials in it,
/// secret references well formed, a NATS token only on a NATS connection, and a non-empty
/// `tenants` of valid ids or `"*"`.
fn connections(c: &BTreeMap<String, ConnectionConfig>, p: &mut Problems) {
    for (name, conn) in c {
        let key = format!("connections.{name}");
        p.check(
            is_name(name, 64, |c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'
            }),
            &key,
            "connection name must match [a-z0-9_-]{1,64}",
        );
        if let Err(e) = connection_url(&conn.url) {
            p.check(false, format!("{key}.url"), e);
        }
        for (field, v) in [
            ("username", &conn.username),
            ("password", &conn.password),
            ("token", &conn.token),
        ] {
            if let Some(v) = v {
                let form = crate::secrets::SecretPolicy::default().check_form(v);
                p.check(
                    !v.is_empty() && form.is_ok(),
                    format!("{key}.{field}"),
                    form.err().map_or_else(
                        || "must not be empty (omit it instead)".to_string(),
                        String::from,
                    ),
                );
            }
        }
        p.check(
            conn.token.is_none() || conn.broker() != Some("rabbitmq"),
            format!("{key}.token"),
            "a token is for NATS connections only (RabbitMQ: username and password)",
        );
        p.check(
            conn.password.is_none() || conn.username.is_some(),
            format!("{key}.password"),
            "a password needs a username",
        );
        if let Some(f) = &conn.tls_ca_file {
            p.check(
                std::path::Path::new(f).is_absolute(),
                format!("{key}.tls_ca_file"),
                "must be an absolute path to a PEM file",
            );
        }
        p.check(
            !conn.tenants.is_empty(),
            format!("{key}.tenants"),
            "must list the tenants that may use this connection ([\"*\"] for every tenant)",
        );
        for (i, t) in conn.tenants.iter().enumerate() {
            p.check(
                t == "*" || crate::ids::check_id("tenant", t).is_ok(),
                format!("{key}.tenants[{i}]"),
                format!("{t:?} must be a tenant id ([A-Za-z0-9_.-]{{1,128}}) or \"*\""),
            );
        }
    }
}

/// Why `url` cannot be a connection's broker URL, or `Ok`.
fn connection_url(url: &str) -> Result<(), String> {
    let u = url::Url::parse(url).map_err(|e| format!("not a valid URL: {e}"))?;
    if !matches!(u.scheme(), "amqp" | "amqps" | "nats" | "tls") {
        return Err(format!(
            "scheme {:?} is none of amqp, amqps (RabbitMQ), nats, tls (NATS)",
            u.scheme()
        ));
    }
    if u.host_str().is_none_or(|h| h.is_empty()) {
        return Err("has no host".into());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(
            "holds credentials; set username and password (as secret references) instead".into(),
        );
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err("must have no query or fragment".into());
    }
    if matches!(u.scheme(), "nats" | "tls") && !matches!(u.path(), "" | "/") {
        return Err("a NATS URL has no path".into());
    }
    Ok(())
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
