//! The config sections of the worker itself: `[redis]`, `[leader]`, `[dispatch]`, `[retry]`,
//! `[commit]`, `[admin]`, `[dlq]`, `[history]`, `[operator]`, `[telemetry]`, `[claim_check]`,
//! with their defaults and the per-tenant dispatch limits. The sections that bound
//! what tenants reach are in `edge.rs`.

use super::*;

/// Redis connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// Where Redis is, possibly with `user:password@`: `redis://host:port[/db]` (one
    /// server), `rediss://…` (one server over TLS), `redis-cluster://host:port[?node=host:port…]`
    /// (a Redis Cluster: the nodes are seeds, the rest is discovered) or
    /// `redis-sentinel://host:port[/db]?sentinelServiceName=NAME[&node=host:port…]` (the master
    /// the sentinels name, followed across failovers); `rediss-cluster://…` and
    /// `rediss-sentinel://…` are the same over TLS (every node; the sentinels and the servers
    /// they name). Any other form is refused at start ([`crate::config::redis_url`]). Default
    /// `"redis://127.0.0.1:6379"`.
    pub url: String,
    /// Start even when Redis may evict keys (a `maxmemory-policy` other than `noeviction`);
    /// eviction silently loses queued hooks. Default `false`.
    pub allow_evicting: bool,
    /// Deadline of one Redis command, ms; > 0. Default 5000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub command_timeout_ms: u64,
    /// How long `ankusa worker` waits at start for a Redis it cannot reach yet (connection
    /// refused or timing out, Redis still loading its data), ms, trying again with backoff
    /// and logging each try; then it exits. 0 exits at once. At most 1 day. Default 60000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub startup_wait_ms: u64,
    /// How long a commit waits for every replica attached to the primary to acknowledge it
    /// (`WAIT`) before it is answered, ms; 0 answers as soon as the primary has it. A commit
    /// not acknowledged in time is answered as a retryable error (ingest 503), never as a
    /// success, so a failover cannot lose an acknowledged hook. Only with replicas attached,
    /// and not on a Redis Cluster (set `min-replicas-to-write` there). 0..=60000. Default 1000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub commit_wait_ms: u64,
    /// PEM file of the CA certificates that verify the server of a `rediss://` URL (and the
    /// nodes of `rediss-cluster://`, the sentinels and servers of `rediss-sentinel://`); empty
    /// means the system's trust store. Certificates are always verified (there is no way
    /// to turn verification off). Needs a `rediss…://` URL. Default empty.
    pub tls_ca_file: String,
    /// PEM file of this client's certificate chain for mutual TLS (Redis'
    /// `tls-auth-clients yes`); set together with `tls_key_file`. Needs a `rediss://` URL.
    /// Default empty (no client certificate).
    pub tls_cert_file: String,
    /// PEM file of the private key of `tls_cert_file` (PKCS#8, PKCS#1 or SEC1). Default empty.
    pub tls_key_file: String,
}

/// Leader election through a lease key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaderConfig {
    /// Lifetime of the lease, ms: a standby takes over this long after the leader stops
    /// renewing; >= 1000. Default 10000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub lease_ms: u64,
    /// Renewal interval, ms; 0 means `lease_ms / 3`, otherwise < `lease_ms / 2` so that one
    /// missed renewal does not lose the lease. Default 0. Read it through
    /// [`LeaderConfig::renew_interval_ms`].
    #[serde(deserialize_with = "super::duration::ms")]
    pub renew_ms: u64,
    /// On shutdown, how long in-flight attempts may finish before the lease is released, ms.
    /// Default 10000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub shutdown_grace_ms: u64,
    /// Self-check: a leader whose scheduler made no progress (no rows claimed, no attempt
    /// finished, no outcome settled) for this many lease intervals while rows are due or
    /// claimed gives its lease up and reports unhealthy. The stall bound is never shorter than
    /// `dispatch.attempt_timeout_ms + lease_ms`, so a window full of hanging attempts is not a
    /// stall. 0 disables the check; otherwise >= 2. Default 3.
    pub selfcheck_intervals: u32,
}

/// Scheduler limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatchConfig {
    /// Attempts running at once across all tenants; > 0. Default 256.
    pub concurrency: usize,
    /// Window: claimed-but-unfinished rows, so a dead sink cannot exhaust memory; > 0.
    /// Default 10000.
    pub max_inflight: usize,
    /// Window: bytes of stored hooks claimed but unfinished; > 0. Default 268435456 (256 MiB).
    pub max_inflight_bytes: u64,
    /// Rows claimed per scan page, shared between tenants by deficit round-robin; 1..=10000.
    /// Default 500.
    pub batch: usize,
    /// An attempt still running after this is cancelled and counts as failed, ms; > 0.
    /// Default 30000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub attempt_timeout_ms: u64,
    /// Attempts running at once per sink key; > 0. Default 8.
    pub sink_concurrency: usize,
    /// Consecutive failures of a sink key that open its breaker; 0 disables breakers.
    /// Default 5.
    pub breaker_failures: u32,
    /// First open period of a breaker, ms, doubled per consecutive open; > 0. Default 5000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub breaker_open_ms: u64,
    /// Longest open period of a breaker, ms; >= `breaker_open_ms`. Default 300000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub breaker_max_open_ms: u64,
    /// Safety poll for due rows when no wake-up arrives, ms; > 0. Default 1000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub poll_ms: u64,
    /// Most outcomes written in one settle batch (one script call); > 0. Default 1000.
    pub settle_batch: usize,
    /// Time budget of one claim or settle script call, ms, by Redis' clock (a script blocks
    /// every other client of Redis while it runs): a call stops taking tenants, rows or
    /// outcomes once 3/5 of it has passed, and the pages adapt so calls stay under 4/5 of it
    /// (`batch` and `settle_batch` are the upper bounds); 1..=1000. Default 5.
    #[serde(deserialize_with = "super::duration::ms")]
    pub script_budget_ms: u64,
    /// Per-tenant windows keyed by tenant id, plus `"default"` for every tenant without an entry.
    /// Resolve them with [`DispatchConfig::tenant_limits`]. Default empty.
    pub tenants: BTreeMap<String, TenantLimits>,
}

/// One `dispatch.tenants.<id>` entry: each limit is optional and > 0 when set.
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
    /// The tenant's share against other tenants that want more than there is: each claim
    /// page (rows and body bytes) and the free attempt slots are split in proportion to the
    /// weights of the tenants due; 1..=1000. Default: unset (fall back to
    /// `dispatch.tenants.default.weight`, then 1). Reloadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
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

/// Retry backoff and horizon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Backoff after the first failed attempt, ms; > 0. Default 1000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub initial_backoff_ms: u64,
    /// Longest backoff, ms; >= `initial_backoff_ms`. Default 600000 (10 min).
    #[serde(deserialize_with = "super::duration::ms")]
    pub max_backoff_ms: u64,
    /// Backoff growth factor per failed attempt; finite, >= 1.0. Default 2.0.
    pub multiplier: f64,
    /// Random spread of each backoff as a fraction of it, so retries of one outage do not
    /// arrive together; 0.0..=1.0. Default 0.2.
    pub jitter: f64,
    /// Retry horizon from a row's first attempt, ms; past it the row is dead-lettered; > 0.
    /// Default 86400000 (24 h).
    #[serde(deserialize_with = "super::duration::ms")]
    pub max_elapsed_ms: u64,
    /// Attempts before a row is dead-lettered; 0 = no limit, only the horizon applies.
    /// Default 0.
    pub max_attempts: u32,
    /// Upper bound on a sink's `Retry-After` hint, ms. Default 3600000 (1 h).
    #[serde(deserialize_with = "super::duration::ms")]
    pub retry_after_max_ms: u64,
    /// Floor of every retry delay, ms: no retry is due sooner after a failed attempt,
    /// whatever the backoff, its jitter or a sink's `Retry-After` (`0`, a date in the
    /// past) says; <= `max_backoff_ms`. Default 1000.
    #[serde(deserialize_with = "super::duration::ms")]
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
    #[serde(deserialize_with = "super::duration::ms")]
    pub idempotency_ms: u64,
    /// How far ahead a hook may be scheduled (`deliver_at`, a delay), ms; a commit further
    /// ahead is refused naming this key. Kept server side by the leader (the commit script
    /// enforces it whoever commits). 1..=3153600000000 (100 years). Default 2592000000 (30 days).
    #[serde(deserialize_with = "super::duration::ms")]
    pub max_delay_ms: u64,
}

/// Metrics, ingest and admin HTTP listener; see `docs/security.md` "Admin and ingest".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Listen address, `host:port` (a `SocketAddr`). A non-loopback address needs `token`.
    /// Default `"127.0.0.1:9187"`.
    pub listen: String,
    /// Secret bearer token of everything under `/admin/*` and `/v1/*` (ingest included):
    /// at least [`AdminConfig::TOKEN_MIN_CHARS`] characters with
    /// [`AdminConfig::TOKEN_MIN_DISTINCT`] different ones (a random string, e.g. `openssl
    /// rand -hex 32`) unless `allow_weak_token`. Required when `listen` is not a loopback
    /// address, and for tenant tokens and portal links (without it anyone who reaches the
    /// listener is the operator, so they would mean nothing). Default unset (open, on
    /// loopback only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Accept a `token` that fails the strength check: for a demo or a test on loopback,
    /// never where anyone else reaches the listener. Default false.
    pub allow_weak_token: bool,
    /// Secret key portal links are signed with (`ankusa portal-link`, `POST
    /// /admin/portal-links`): a random string of at least [`AdminConfig::TOKEN_MIN_CHARS`]
    /// characters, the same on every worker of the pool and for the CLI; changing it voids
    /// every link. Apart from `token`, so a link tells nothing about the operator token.
    /// Default unset: portal links are off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub portal_link_key: Option<String>,
    /// Secret bearer token that opens only ingest (`/v1/hooks/…`), for producers; `token`
    /// opens ingest too. Non-empty. Default unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest_token: Option<String>,
    /// A connection must send a request's whole head (request line and headers) within this,
    /// ms, from its start or from the end of its previous response; otherwise it is closed
    /// (slowloris). > 0. Default 5000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub header_timeout_ms: u64,
    /// Deadline of a request to ingest, `/healthz`, `/readyz` and `/metrics`, body upload
    /// included, ms; past it the answer is 408 `timeout`. Every other route's body (login
    /// forms included) must arrive within it too; the operations under `/admin/*` then run
    /// under their own deadlines. > 0. Default 30000.
    #[serde(deserialize_with = "super::duration::ms")]
    pub request_timeout_ms: u64,
    /// Connections open at once; one more is closed at once, so a flood cannot take the
    /// worker's file descriptors. > 0. Default 512.
    pub max_connections: usize,
    /// Of `max_connections`, the most one client address holds at once; its surplus is closed
    /// at once, so one client cannot take every slot from probes, scrapes and other
    /// producers. Behind a proxy every connection has the proxy's address: raise it to
    /// `max_connections` there, or 0 for no per-address bound. Default 128.
    pub max_connections_per_client: usize,
    /// Request headers ingest reads a hook's event type from, in order; the first one
    /// present sets it (what sink entries' event filters match). Lowercase names; the
    /// value must be a valid event type (`model::check_event_type`) or the request is a 400.
    /// Default `["x-event-type", "x-github-event"]`.
    pub event_type_headers: Vec<String>,
    /// Host names the listener answers to besides IP addresses and `localhost` (any
    /// port): `name` (any port) or `name:port`, e.g. the service name Prometheus scrapes or
    /// the name behind a reverse proxy. A request with another `Host` is 403
    /// `untrusted_host`, so a web page cannot reach the API by DNS rebinding. Default empty.
    pub public_hosts: Vec<String>,
    /// Request headers of an ingest that a hook keeps and its deliveries carry: lowercase
    /// names, or prefixes ending in `*` (`x-acme-*`); no other header is forwarded. Never
    /// `authorization`, `cookie`, framing or hop-by-hop headers
    /// ([`AdminConfig::NEVER_FORWARDED`]), nor `webhook-*` / `ankusa-*`. Default
    /// `["content-type", "content-encoding", "user-agent", "x-event-type", "x-request-id",
    /// "x-github-event", "x-github-delivery", "x-gitlab-event"]`; the W3C trace context
    /// (`traceparent`, `tracestate`) only when listed.
    pub forward_headers: Vec<String>,
    /// Origins that may frame the tenant portal (`/portal/`) in an iframe, e.g. the
    /// operator's own product: `https://app.example.com` (scheme, host and port; no path).
    /// Sent as the portal's `Content-Security-Policy: frame-ancestors`; empty (the
    /// default): no site may frame it. The operator console (`/ui/`) is never framed.
    pub portal_frame_ancestors: Vec<String>,
}

/// Retention of dead letters and of the hook bodies they keep (a hook is kept while a dead
/// letter references it). Applied by the leader every `sweep_ms` and by `ankusa dlq purge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DlqConfig {
    /// Dead letters older than this are purged, ms; 0 keeps them whatever their age.
    /// Default 604800000 (7 days).
    #[serde(deserialize_with = "super::duration::ms")]
    pub max_age_ms: u64,
    /// Most dead letters kept per tenant; the oldest beyond it are purged; 0 = no limit.
    /// Default 100000.
    pub max_per_tenant: u64,
    /// How often the leader applies the retention, ms; 0 = never on its own (only
    /// `ankusa dlq purge` does). Default 60000.
    #[serde(deserialize_with = "super::duration::ms")]
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
    #[serde(deserialize_with = "super::duration::ms")]
    pub max_age_ms: u64,
    /// Most hooks per tenant with records or a kept body; the least recently attempted
    /// beyond it lose theirs; > 0. Default 10000.
    pub max_per_tenant: u64,
    /// Most body bytes of delivered hooks kept for resend, per partition; past it the oldest
    /// kept give way (as every kept hook does while Redis refuses commits for memory); 0 = no
    /// budget (age and count only). Default 67108864 (64 MiB).
    pub kept_max_bytes: u64,
    /// Tenants that get per-tenant gauges (`ankusa_tenant_*`, labelled `tenant`); others are
    /// seen only with `ankusa tenants top`, so the label stays bounded. Default empty.
    pub metrics_tenants: Vec<String>,
}

/// The delivery log: where what happened to each hook (every attempt, how each hook ended) is
/// kept once Redis is done with it. With `url` set, each settle call appends its records to
/// the partition's `log` stream in Redis, the partition's leader moves them into PostgreSQL
/// (tables partitioned by day, kept `retention_days`) and trims what it archived, and
/// nothing is kept per hook in Redis after it ends. Unset: the attempt history (`[history]`)
/// is kept in Redis as before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A PostgreSQL connection URL, `postgres://user:password@host:port/database`
    /// (`?sslmode=disable` is the only TLS mode this build speaks; keep the database on a
    /// private network). Default unset: no log store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Days of log kept; older days are dropped as whole partitions; 1..=3650. Default 30.
    pub retention_days: u32,
    /// Apply the embedded schema migrations when the worker starts (`ankusa log migrate`
    /// applies them by hand). Default true.
    pub migrate_on_start: bool,
    /// Most bytes of records the `log` stream of a partition holds while the log store is
    /// away (counted as the settle script writes them, released as they are archived); past
    /// it new records are dropped and counted (`ankusa_log_records_dropped_total`), delivery
    /// never waits; > 0. Default 268435456 (256 MiB).
    pub stream_max_bytes: u64,
    /// Most stream entries archived per PostgreSQL transaction; 1..=10000. Default 200.
    pub batch_entries: u64,
    /// Connections of the worker's pool to PostgreSQL; 1..=64. Default 4.
    pub pool_size: usize,
    /// Most bytes of a hook's body (and its producer headers) kept in the log store when it
    /// ends, so it can be shown and resent after Redis has let it go (`hooks resend --since`);
    /// a larger body, or one held by claim check, is not kept. 0 keeps none; at most 10 MiB.
    /// Default 65536 (64 KiB).
    pub keep_bodies: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            url: None,
            retention_days: 30,
            migrate_on_start: true,
            stream_max_bytes: 256 << 20,
            batch_entries: 200,
            pool_size: 4,
            keep_bodies: 64 << 10,
        }
    }
}

/// Operational events: an entry disabled after prolonged failure, an entry enabled
/// again. Each is appended to the partition's `events` stream and, with `events_url`,
/// POSTed there signed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OperatorConfig {
    /// An `http://` or `https://` URL each operational event is POSTed to (JSON), under the
    /// same destination guard as an http sink (`[http]`). Default unset: the stream only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_url: Option<String>,
    /// A Standard Webhooks secret `whsec_<base64>` (or a secret reference to one) that
    /// signs each POST (`webhook-id`, `webhook-timestamp`, `webhook-signature`). Default
    /// unset: unsigned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    /// Most events kept in the stream (older ones are trimmed); > 0. Default 10000.
    pub events_max_len: u64,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        OperatorConfig {
            events_url: None,
            signing_secret: None,
            events_max_len: 10_000,
        }
    }
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

/// The claim-check blob store: where bodies larger than a sink's inline limit (SQS:
/// its `max_message_bytes` less the attributes; Pub/Sub: about 7 MB) are checked in. Values
/// may hold `${env:NAME}` secret references.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// How long a finished hook's blob is kept before ankusa deletes it, ms: its pointer may
    /// still wait on a queue, and an SQS Extended Client consumer deletes the payload itself.
    /// 0 = ankusa never deletes blobs (the consumer or a bucket lifecycle rule does).
    /// Default 604800000 (7 days).
    #[serde(deserialize_with = "super::duration::ms")]
    pub retention_ms: u64,
}

impl Default for ClaimCheckConfig {
    fn default() -> Self {
        ClaimCheckConfig {
            url: String::new(),
            endpoint: String::new(),
            region: String::new(),
            access_key_id: String::new(),
            secret_access_key: String::new(),
            retention_ms: 7 * 24 * 3_600_000,
        }
    }
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            enabled: true,
            max_age_ms: 24 * 3_600_000,
            max_per_tenant: 10_000,
            kept_max_bytes: 64 << 20,
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
            startup_wait_ms: 60_000,
            commit_wait_ms: 1_000,
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
            script_budget_ms: 5,
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
            max_delay_ms: 30 * 24 * 3_600_000,
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: "127.0.0.1:9187".into(),
            token: None,
            allow_weak_token: false,
            portal_link_key: None,
            ingest_token: None,
            header_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            max_connections: 512,
            max_connections_per_client: 128,
            event_type_headers: vec!["x-event-type".into(), "x-github-event".into()],
            public_hosts: Vec::new(),
            portal_frame_ancestors: Vec::new(),
            forward_headers: [
                "content-type",
                "content-encoding",
                "user-agent",
                "x-event-type",
                "x-request-id",
                "x-github-event",
                "x-github-delivery",
                "x-gitlab-event",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

impl AdminConfig {
    /// Request headers ingest never forwards, whatever `forward_headers` says: the
    /// request's own credentials, its framing, and hop-by-hop headers.
    pub const NEVER_FORWARDED: &'static [&'static str] = &[
        "authorization",
        "proxy-authorization",
        "cookie",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "expect",
    ];

    /// The fewest characters of a strong `admin.token` or `admin.portal_link_key`.
    pub const TOKEN_MIN_CHARS: usize = 32;
    /// The fewest different characters among them (so `aaaa…` or a word repeated is weak).
    pub const TOKEN_MIN_DISTINCT: usize = 8;

    /// Why `secret` is too weak for an operator token or a link key, if it is: shorter than
    /// [`Self::TOKEN_MIN_CHARS`] characters or with fewer than [`Self::TOKEN_MIN_DISTINCT`]
    /// different ones. A guessable operator token opens every tenant's data.
    pub fn weakness(secret: &str) -> Option<String> {
        let chars = secret.chars().count();
        let distinct = secret
            .chars()
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        (chars < Self::TOKEN_MIN_CHARS || distinct < Self::TOKEN_MIN_DISTINCT).then(|| {
            format!(
                "too weak ({chars} characters, {distinct} different): use at least {} random \
                 characters, e.g. the output of `openssl rand -hex 32`",
                Self::TOKEN_MIN_CHARS
            )
        })
    }

    /// Why minting tenant tokens or portal links is refused, if it is: with no `token`
    /// anyone who reaches the listener is the operator, so a tenant's narrower credential
    /// would protect nothing.
    pub fn minting_problem(&self, what: &str) -> Option<String> {
        self.token.is_none().then(|| {
            format!(
                "{what} need admin.token: without an operator token anyone who reaches the \
                 admin listener is the operator, so {what} would narrow nothing; set admin.token \
                 (ANKUSA_ADMIN__TOKEN, 32 or more random characters) on the workers and here"
            )
        })
    }

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
    /// The limits of `tenant`: each is the tenant's own entry, else the `default` entry,
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

impl DispatchConfig {
    /// A tenant's weight (`dispatch.tenants.<id>.weight`, else the `default` entry's, else
    /// 1): its share of a claim page and of free slots against the other tenants due.
    pub fn tenant_weight(&self, tenant: &str) -> u32 {
        [self.tenants.get(tenant), self.tenants.get(DEFAULT_TENANT)]
            .into_iter()
            .flatten()
            .find_map(|t| t.weight)
            .unwrap_or(1)
            .max(1)
    }

    /// The tenants whose weight is not 1, with their weight, and the weight of a tenant not
    /// listed (`default`'s, else 1): what a claim is told.
    pub fn tenant_weights(&self) -> (u32, Vec<(&str, u32)>) {
        let default = self.tenant_weight(DEFAULT_TENANT);
        let listed = self
            .tenants
            .keys()
            .filter(|id| id.as_str() != DEFAULT_TENANT)
            .map(|id| (id.as_str(), self.tenant_weight(id)))
            .filter(|(_, w)| *w != default)
            .collect();
        (default, listed)
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
