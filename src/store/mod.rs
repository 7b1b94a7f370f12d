//! The Redis store: one connection pool, the script registry, and a typed
//! wrapper per script (R26). Scripts answer a status word and a payload that
//! is decoded here into Rust types; error text is never matched except
//! `NOSCRIPT`, which fred's reload handles.

mod ops;
pub mod scripts;
mod tls;

use crate::keyspace::Keyspace;
use crate::model::SourceSpec;
use bytes::Bytes;
use fred::prelude::*;
use fred::types::Value;
use std::time::{Duration, Instant};

pub use ops::{DlqPurge, DlqReplayed, PressureRead, SourcePage, SourcePhase};
pub use scripts::{LuaScript, Scripts};

/// Errors of store calls.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis could not be reached or answered an error (connection, timeout, `BUSY`, `LOADING`, `OOM`…).
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
    /// The caller's lease token is no longer the partition's (R25): it must stop moving rows.
    #[error("fenced: this node no longer holds the lease")]
    Fenced,
    /// A `rediss://` connection could not be set up or its handshake failed (a bad CA or
    /// client certificate file, a server that does not speak TLS, a certificate that does
    /// not verify). Never retried in plaintext.
    #[error("redis TLS: {0}")]
    Tls(String),
    /// A script answered a shape this build does not understand.
    #[error("unexpected reply from {script}: {detail}")]
    Protocol {
        /// The script.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl StoreError {
    fn protocol(script: &'static str, detail: impl Into<String>) -> Self {
        StoreError::Protocol {
            script,
            detail: detail.into(),
        }
    }
    /// A short bounded label for the `ankusa_redis_errors_total{kind}` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Redis(e) => {
                let d = e.details();
                if d.starts_with("BUSY") {
                    "busy"
                } else if d.starts_with("LOADING") {
                    "loading"
                } else if d.starts_with("OOM") {
                    "oom"
                } else if d.starts_with("READONLY") {
                    "readonly"
                } else {
                    match e.kind() {
                        fred::error::ErrorKind::Timeout => "timeout",
                        fred::error::ErrorKind::IO | fred::error::ErrorKind::Canceled => {
                            "connection"
                        }
                        _ => "other",
                    }
                }
            }
            StoreError::Fenced => "fenced",
            StoreError::Tls(_) => "tls",
            StoreError::Protocol { .. } => "protocol",
        }
    }
}

/// Errors of a commit (R1). Nothing was written when any of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// No such `(tenant, source)` in the registry.
    #[error("unknown source {tenant}/{source_id}")]
    UnknownSource {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source_id: String,
    },
    /// A body is larger than `commit.max_hook_bytes`.
    #[error("hook {index} is {size} bytes, over max_hook_bytes = {max}")]
    TooLarge {
        /// 0-based index of the hook in the call.
        index: usize,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A malformed request (bad id, bad headers, no hooks).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A producer header named `webhook-*` or `ankusa-*`: those are the delivery's own headers
    /// (signature, ids), set by ankusa alone (`lua/commit.lua`).
    #[error(
        "hook {index}: header {name:?} is reserved (webhook-* and ankusa-* are set by ankusa)"
    )]
    ReservedHeader {
        /// 0-based index of the hook in the call.
        index: usize,
        /// The header name as given.
        name: String,
    },
    /// The store failed; nothing is known to be written (the script is atomic).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<fred::error::Error> for CommitError {
    fn from(e: fred::error::Error) -> Self {
        CommitError::Store(StoreError::Redis(e))
    }
}

/// What a commit stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitReceipt {
    /// Id of the first hook; the call's hooks have consecutive ids.
    pub first_hook: u64,
    /// Rows made per hook (= sink entries of the source at commit).
    pub rows_per_hook: u32,
    /// Commit time (ms, Redis clock).
    pub committed_at_ms: i64,
}

/// The longest producer idempotency key accepted, bytes.
pub const IDEMPOTENCY_KEY_MAX_BYTES: usize = 256;

/// Options of [`Store::commit_with`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitOptions {
    /// One producer idempotency key per hook (`None`: that hook has none), or empty.
    pub idempotency_keys: Vec<Option<String>>,
    /// How long a key answers the first hook's id, ms (`commit.idempotency_ms`).
    pub idempotency_ms: u64,
    /// Make the row of this sink entry only (resend), not one per entry.
    pub only_sink: Option<u32>,
}

fn decode_receipt(v: &[Value]) -> CommitReceipt {
    CommitReceipt {
        first_hook: v.get(1).and_then(Value::int).unwrap_or(0) as u64,
        rows_per_hook: v.get(2).and_then(Value::int).unwrap_or(0) as u32,
        committed_at_ms: v.get(3).and_then(Value::int).unwrap_or(0),
    }
}

/// One row returned by a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRow {
    /// Tenant id (the due set it came from).
    pub tenant: String,
    /// The raw row id (may be malformed if written by hand).
    pub row: String,
    /// Attempts already made.
    pub attempts: u32,
    /// First attempt time (ms, Redis clock), if any attempt was made.
    pub first_attempt_ms: Option<i64>,
    /// The claim token it was claimed under (the claim call's, P6); its outcome carries it.
    pub claim: u64,
}

/// The result of one scan's claim.
#[derive(Debug, Clone, Default)]
pub struct ClaimResult {
    /// Redis time of the claim (ms).
    pub now_ms: i64,
    /// When the next tenant not at its window has a due row (ms, Redis clock).
    pub next_due_ms: Option<i64>,
    /// The oldest due time among the claimed rows (ms), for the lag gauge.
    pub oldest_due_ms: Option<i64>,
    /// Lane members in the partition after the sweep; `None` when no sweep ran (R12).
    pub lane_members: Option<u64>,
    /// Lanes whose next member the sweep promoted to head.
    pub lanes_promoted: u64,
    /// This call's claim token (P6): above every token issued before it in the partition.
    pub claim_token: u64,
    /// The byte window stopped the claim short (R5): a due row's hook did not fit, so the
    /// next claim waits for an outcome to free room rather than for the next due time.
    pub bytes_full: bool,
    /// The claimed rows.
    pub rows: Vec<ClaimedRow>,
}

/// The byte window a claim respects row by row (R5, issue 17.1), in bytes of hook bodies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ByteRooms {
    /// Room left in the global window (`dispatch.max_inflight_bytes` less what is claimed).
    pub global: u64,
    /// Nothing is claimed: one hook larger than the whole window may be claimed alone.
    pub alone: bool,
    /// The room of a tenant not in `tenants` (its `max_inflight_bytes`, nothing claimed).
    pub default_tenant: u64,
    /// `(tenant, room, nothing claimed)` of the tenants in flight or with their own limits.
    pub tenants: Vec<(String, u64, bool)>,
}

/// The outcome of one finished attempt, as `settle.lua` takes it.
#[derive(Debug, Clone, PartialEq)]
pub enum SettleOp {
    /// The sink answered ok: delete the row (invariant 1).
    Delivered,
    /// Due again after `delay_ms`; the row records its attempts.
    Retry {
        /// Backoff (ms).
        delay_ms: u64,
        /// Error text, truncated.
        error: String,
    },
    /// A breaker parked the row for `delay_ms`, attempt count unchanged (R16).
    Park {
        /// Until the breaker closes (ms).
        delay_ms: u64,
    },
    /// Dead-letter with a reason.
    DeadLetter {
        /// `permanent(…)`, `retry_horizon(…)`, …
        reason: String,
        /// Error text, truncated.
        error: String,
    },
    /// The hook is gone: nothing to deliver; not counted as a dead letter.
    Drop,
}

/// One row's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Tenant id.
    pub tenant: String,
    /// Raw row id.
    pub row: String,
    /// Attempts made including this one.
    pub attempts: u32,
    /// First attempt time (ms, Redis clock).
    pub first_attempt_ms: i64,
    /// The claim token of the claim this outcome answers ([`ClaimedRow::claim`]); the
    /// outcome is skipped unless the row is still claimed under it (P6).
    pub claim: u64,
    /// What to do.
    pub op: SettleOp,
}

/// A hook read back for delivery.
#[derive(Debug, Clone)]
pub struct StoredHook {
    /// Body bytes, exactly as committed.
    pub body: Bytes,
    /// Producer headers (JSON object text, or empty).
    pub headers: String,
    /// Commit time (ms, Redis clock).
    pub committed_at_ms: i64,
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// Sink modules at commit, by index.
    pub modules: Vec<String>,
    /// The claim-check reference of the body (field `cc`), once checked in (R18).
    pub claim_ref: Option<String>,
}

/// The answer of a lease acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAcquire {
    /// This node leads with this token and epoch.
    Acquired {
        /// `<node>:<epoch>`, passed to every row-moving script.
        token: String,
        /// The fencing epoch.
        epoch: u64,
    },
    /// Someone holds it.
    Held {
        /// The holder's token.
        holder: String,
        /// Time left on it (ms).
        pttl_ms: i64,
    },
}

/// Running totals kept by the scripts in the stats hash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    /// Hooks committed.
    pub committed: u64,
    /// Rows delivered.
    pub delivered: u64,
    /// Rows dead-lettered.
    pub dead_lettered: u64,
    /// Rows dropped because their hook was gone.
    pub dropped: u64,
}

/// A connection to one partition of one instance.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    ks: Keyspace,
    scripts: Scripts,
    /// Guards `put_source` applies to sink options (SSRF literal check, secret references).
    edge: crate::sinks::EdgePolicy,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("prefix", &self.ks.prefix())
            .finish()
    }
}

fn status(v: &[Value]) -> &str {
    v.first().and_then(|s| s.as_str_ref()).unwrap_or("")
}

trait ValueExt {
    fn as_str_ref(&self) -> Option<&str>;
    fn int(&self) -> Option<i64>;
    fn text(&self) -> String;
}

impl ValueExt for Value {
    fn as_str_ref(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            Value::Bytes(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
    fn int(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            Value::Double(d) => Some(*d as i64),
            _ => self.as_str_ref().and_then(|s| {
                s.parse::<i64>()
                    .ok()
                    .or_else(|| s.parse::<f64>().ok().map(|f| f as i64))
            }),
        }
    }
    fn text(&self) -> String {
        self.as_str_ref().map(str::to_string).unwrap_or_default()
    }
}

fn array(script: &'static str, v: Value) -> Result<Vec<Value>, StoreError> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(StoreError::protocol(
            script,
            format!("not an array: {other:?}"),
        )),
    }
}

impl Store {
    /// Connect to `url` (e.g. `redis://127.0.0.1:6379`) for `instance` (R29), partition 0.
    /// Commands time out after `command_timeout_ms`; a lost connection is re-dialled with
    /// exponential backoff (100 ms to 5 s) forever. In-flight commands are not re-sent on
    /// reconnect (`max_command_attempts = 1`): the caller decides, because a re-sent claim
    /// could claim twice.
    ///
    /// A `rediss://` URL uses TLS with the system's trust store and no client certificate;
    /// [`Store::connect_config`] takes `redis.tls_*` files.
    pub async fn connect(
        url: &str,
        instance: &str,
        command_timeout_ms: u64,
    ) -> Result<Store, StoreError> {
        let tls = crate::config::RedisConfig {
            url: url.to_string(),
            ..Default::default()
        };
        Self::open(&tls, instance, command_timeout_ms).await
    }

    /// [`Store::connect`] with the whole `[redis]` section: `url`, `command_timeout_ms`, and
    /// for a `rediss://` URL the `tls_ca_file` and the `tls_cert_file` / `tls_key_file` of
    /// mutual TLS. Errors: [`StoreError::Tls`] for an unreadable file or a failed handshake
    /// (it names the file or the server), [`StoreError::Redis`] when Redis cannot be reached.
    pub async fn connect_config(
        redis: &crate::config::RedisConfig,
        instance: &str,
    ) -> Result<Store, StoreError> {
        Self::open(redis, instance, redis.command_timeout_ms).await
    }

    async fn open(
        redis: &crate::config::RedisConfig,
        instance: &str,
        command_timeout_ms: u64,
    ) -> Result<Store, StoreError> {
        let url = redis.url.as_str();
        let mut config = Config::from_url(url)?;
        let tls = url.starts_with("rediss://");
        if tls {
            config.tls = Some(tls::connector(redis)?.into());
        }
        let pool = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = Duration::from_secs(5);
                c.max_command_attempts = 1;
                c.tcp = TcpConfig {
                    nodelay: Some(true),
                    ..Default::default()
                };
            })
            .with_performance_config(|p| {
                p.default_command_timeout = Duration::from_millis(command_timeout_ms);
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build_pool(4)?;
        if let Err(e) = pool.init().await {
            return Err(match tls {
                true => tls::classify(url, e).await,
                false => StoreError::Redis(e),
            });
        }
        let store = Store {
            pool,
            ks: Keyspace::new(instance, 0),
            scripts: Scripts::default(),
            edge: crate::sinks::EdgePolicy::default(),
        };
        store.load_scripts().await?;
        Ok(store)
    }

    /// This store with the guards of `[http]` and `[secrets]` that [`Store::put_source`]
    /// applies (the default is the secure default: `deny_private`, `ANKUSA_SECRET_`).
    pub fn with_edge(mut self, edge: crate::sinks::EdgePolicy) -> Store {
        self.edge = edge;
        self
    }

    /// The keyspace of this store's partition.
    pub fn keyspace(&self) -> &Keyspace {
        &self.ks
    }

    /// A client of the pool (round-robin).
    pub fn client(&self) -> &Client {
        self.pool.next()
    }

    /// A fresh subscriber connection to the same server, for the wake channel (R2).
    pub fn subscriber(&self) -> Result<fred::clients::SubscriberClient, StoreError> {
        let cfg = self.pool.next().client_config();
        Ok(Builder::from_config(cfg)
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build_subscriber_client()?)
    }

    /// `SCRIPT LOAD` every script.
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        for s in self.scripts.all() {
            s.script.load(self.pool.next()).await?;
        }
        Ok(())
    }

    async fn call(&self, s: &LuaScript, args: Vec<Value>) -> Result<Vec<Value>, StoreError> {
        let started = Instant::now();
        let r: Result<Value, _> = s
            .script
            .evalsha_with_reload(self.pool.next(), vec![self.ks.lease()], args)
            .await;
        metrics::histogram!("ankusa_script_duration_seconds", "script" => s.name)
            .record(started.elapsed().as_secs_f64());
        match r {
            Ok(v) => array(s.name, v),
            Err(e) => {
                let e = StoreError::from(e);
                metrics::counter!("ankusa_redis_errors_total", "kind" => e.kind()).increment(1);
                Err(e)
            }
        }
    }

    fn prefix(&self) -> Value {
        Value::from(self.ks.prefix())
    }

    /// Commit hooks to `(tenant, source)` atomically (R1): each body stored once, one row per
    /// sink entry due now, the scheduler woken (R2). `hooks` are `(body, headers JSON or "")`.
    /// Errors: unknown source, a body over `max_hook_bytes`, bad ids; nothing written then.
    pub async fn commit(
        &self,
        tenant: &str,
        source: &str,
        hooks: &[(Bytes, String)],
        max_hook_bytes: usize,
    ) -> Result<CommitReceipt, CommitError> {
        let v = self
            .commit_call(tenant, source, hooks, max_hook_bytes, Vec::new())
            .await?;
        Ok(decode_receipt(&v))
    }

    /// The commit script call behind [`Store::commit`] and [`Store::commit_with`]: checks,
    /// then the script with `extra` options after the hooks; the `ok` reply as it came.
    async fn commit_call(
        &self,
        tenant: &str,
        source: &str,
        hooks: &[(Bytes, String)],
        max_hook_bytes: usize,
        extra: Vec<Value>,
    ) -> Result<Vec<Value>, CommitError> {
        crate::model::check_id("tenant", tenant)
            .map_err(|e| CommitError::BadRequest(e.to_string()))?;
        crate::model::check_id("source", source)
            .map_err(|e| CommitError::BadRequest(e.to_string()))?;
        if hooks.is_empty() {
            return Err(CommitError::BadRequest("no hooks".into()));
        }
        for (index, (body, _)) in hooks.iter().enumerate() {
            if body.len() > max_hook_bytes {
                return Err(CommitError::TooLarge {
                    index,
                    size: body.len(),
                    max: max_hook_bytes,
                });
            }
        }
        let mut args = Vec::with_capacity(5 + 2 * hooks.len() + extra.len());
        args.extend([
            self.prefix(),
            tenant.into(),
            source.into(),
            (max_hook_bytes as i64).into(),
            (hooks.len() as i64).into(),
        ]);
        for (body, headers) in hooks {
            args.push(Value::Bytes(body.clone()));
            args.push(Value::from(headers.as_str()));
        }
        args.extend(extra);
        let v = self.call(&self.scripts.commit, args).await?;
        match status(&v) {
            "ok" => Ok(v),
            "unknown_source" => Err(CommitError::UnknownSource {
                tenant: tenant.into(),
                source_id: source.into(),
            }),
            "too_large" => Err(CommitError::TooLarge {
                index: v.get(1).and_then(Value::int).unwrap_or(1).saturating_sub(1) as usize,
                size: v.get(2).and_then(Value::int).unwrap_or(0) as usize,
                // The limit the script enforced (kept server side, issue 17.10).
                max: v
                    .get(3)
                    .and_then(Value::int)
                    .map_or(max_hook_bytes, |m| m.max(0) as usize),
            }),
            "bad_request" => Err(CommitError::BadRequest(
                v.get(1).map(Value::text).unwrap_or_default(),
            )),
            "reserved_header" => Err(CommitError::ReservedHeader {
                index: v.get(1).and_then(Value::int).unwrap_or(1).saturating_sub(1) as usize,
                name: v.get(2).map(Value::text).unwrap_or_default(),
            }),
            other => Err(StoreError::protocol("commit", format!("status {other:?}")).into()),
        }
    }

    /// [`Store::commit`] with options (`docs/commit-protocol.md`): producer idempotency keys
    /// (one per hook, `None` for none) honoured for `opts.idempotency_ms`, and/or rows for one
    /// sink entry only. Returns the receipt and each hook's id: a hook whose key was
    /// committed within the window answers the first hook's id and is not written again.
    pub async fn commit_with(
        &self,
        tenant: &str,
        source: &str,
        hooks: &[(Bytes, String)],
        max_hook_bytes: usize,
        opts: &CommitOptions,
    ) -> Result<(CommitReceipt, Vec<u64>), CommitError> {
        if !opts.idempotency_keys.is_empty() && opts.idempotency_keys.len() != hooks.len() {
            return Err(CommitError::BadRequest(
                "one idempotency key (or none) per hook".into(),
            ));
        }
        let mut extra: Vec<Value> = Vec::new();
        if opts.idempotency_keys.iter().any(Option::is_some) {
            extra.push("idem".into());
            extra.push((opts.idempotency_ms.max(1) as i64).into());
            for k in &opts.idempotency_keys {
                let k = k.as_deref().unwrap_or("");
                if k.len() > IDEMPOTENCY_KEY_MAX_BYTES {
                    return Err(CommitError::BadRequest(format!(
                        "idempotency key over {IDEMPOTENCY_KEY_MAX_BYTES} bytes"
                    )));
                }
                extra.push(k.into());
            }
        }
        if let Some(i) = opts.only_sink {
            extra.push("sink".into());
            extra.push((i as i64).into());
        }
        let v = self
            .commit_call(tenant, source, hooks, max_hook_bytes, extra)
            .await?;
        let receipt = decode_receipt(&v);
        let ids = if v.len() > 4 {
            v[4..].iter().map(|x| x.int().unwrap_or(0) as u64).collect()
        } else {
            (0..hooks.len() as u64)
                .map(|i| receipt.first_hook + i)
                .collect()
        };
        Ok((receipt, ids))
    }

    /// One scan's claim (R13, R14): up to `page` rows, split across due tenants by deficit
    /// round-robin; `skip` are tenants at their window; `rooms` are tenants whose window room
    /// (rows) is below the page, others get `default_room`. Errors: [`StoreError::Fenced`].
    pub async fn claim(
        &self,
        token: &str,
        epoch: u64,
        page: usize,
        default_room: usize,
        skip: &[&str],
        rooms: &[(&str, usize)],
    ) -> Result<ClaimResult, StoreError> {
        self.claim_within(token, epoch, page, default_room, skip, rooms, None)
            .await
    }

    /// [`Store::claim`] inside a byte window: no row is claimed whose hook would pass its
    /// tenant's or the global byte room, except one hook alone where nothing is claimed
    /// (R5, issue 17.1). Errors: [`StoreError::Fenced`].
    #[allow(clippy::too_many_arguments)]
    pub async fn claim_within(
        &self,
        token: &str,
        epoch: u64,
        page: usize,
        default_room: usize,
        skip: &[&str],
        rooms: &[(&str, usize)],
        bytes: Option<&ByteRooms>,
    ) -> Result<ClaimResult, StoreError> {
        let mut args = Vec::with_capacity(8 + skip.len() + 2 * rooms.len());
        args.extend([
            self.prefix(),
            token.into(),
            (epoch as i64).into(),
            (page as i64).into(),
            (default_room as i64).into(),
        ]);
        args.push((skip.len() as i64).into());
        args.extend(skip.iter().map(|t| Value::from(*t)));
        args.push((rooms.len() as i64).into());
        for (t, r) in rooms {
            args.push(Value::from(*t));
            args.push((*r as i64).into());
        }
        if let Some(b) = bytes {
            let n = |x: u64| Value::from(x.min(i64::MAX as u64) as i64);
            args.extend([
                "bytes".into(),
                n(b.global),
                (if b.alone { "1" } else { "0" }).into(),
                n(b.default_tenant),
                (b.tenants.len() as i64).into(),
            ]);
            for (t, room, empty) in &b.tenants {
                args.push(t.as_str().into());
                args.push(n(*room));
                args.push((if *empty { "1" } else { "0" }).into());
            }
        }
        let v = self.call(&self.scripts.claim, args).await?;
        match status(&v) {
            "ok" => {}
            "fenced" => return Err(StoreError::Fenced),
            other => return Err(StoreError::protocol("claim", format!("status {other:?}"))),
        }
        let opt = |x: Option<&Value>| x.and_then(Value::int).filter(|&n| n >= 0);
        let mut res = ClaimResult {
            now_ms: opt(v.get(1)).unwrap_or(0),
            next_due_ms: opt(v.get(2)),
            oldest_due_ms: opt(v.get(3)),
            lane_members: opt(v.get(4)).map(|n| n as u64),
            lanes_promoted: opt(v.get(5)).unwrap_or(0) as u64,
            claim_token: opt(v.get(6)).unwrap_or(0) as u64,
            bytes_full: opt(v.get(7)).unwrap_or(0) == 1,
            rows: Vec::with_capacity((v.len().saturating_sub(8)) / 4),
        };
        for c in v[8.min(v.len())..].chunks_exact(4) {
            res.rows.push(ClaimedRow {
                tenant: c[0].text(),
                row: c[1].text(),
                attempts: c[2].int().unwrap_or(0).max(0) as u32,
                first_attempt_ms: c[3].int(),
                claim: res.claim_token,
            });
        }
        Ok(res)
    }

    /// Record a batch of outcomes in one script call (R4). Returns `(applied, skipped, blobs)`,
    /// `blobs` being the claim-check references of the hooks the call deleted (R18; lane
    /// releases are counted in `ankusa_lane_releases_total`);
    /// an outcome whose row is no longer claimed under its claim token ([`Outcome::claim`],
    /// P6) is skipped, so re-sending a batch after an error never applies it twice, not even
    /// to a later claim of the same row. Errors: [`StoreError::Fenced`].
    pub async fn settle(
        &self,
        token: &str,
        epoch: u64,
        outcomes: &[Outcome],
    ) -> Result<(u64, u64, Vec<String>), StoreError> {
        self.settle_with(token, epoch, outcomes, None).await
    }

    /// [`Store::settle`] that also writes the attempt history in the same call: `history` is
    /// the JSON argument of [`crate::visibility::history_arg`].
    pub async fn settle_with(
        &self,
        token: &str,
        epoch: u64,
        outcomes: &[Outcome],
        history: Option<String>,
    ) -> Result<(u64, u64, Vec<String>), StoreError> {
        let mut args = Vec::with_capacity(4 + 8 * outcomes.len());
        args.extend([self.prefix(), token.into(), (epoch as i64).into()]);
        for o in outcomes {
            let (op, x, err): (&str, Value, &str) = match &o.op {
                SettleOp::Delivered => ("D", "".into(), ""),
                SettleOp::Retry { delay_ms, error } => ("R", (*delay_ms as i64).into(), error),
                SettleOp::Park { delay_ms } => ("P", (*delay_ms as i64).into(), ""),
                SettleOp::DeadLetter { reason, error } => ("X", reason.as_str().into(), error),
                SettleOp::Drop => ("G", "".into(), ""),
            };
            args.extend([
                op.into(),
                o.tenant.as_str().into(),
                o.row.as_str().into(),
                (o.claim as i64).into(),
                x,
                (o.attempts as i64).into(),
                o.first_attempt_ms.into(),
                err.into(),
            ]);
        }
        if let Some(h) = history {
            args.push(h.into());
        }
        let v = self.call(&self.scripts.settle, args).await?;
        match status(&v) {
            "ok" => {
                let released = v.get(3).and_then(Value::int).unwrap_or(0);
                if released > 0 {
                    metrics::counter!("ankusa_lane_releases_total").increment(released as u64);
                }
                Ok((
                    v.get(1).and_then(Value::int).unwrap_or(0) as u64,
                    v.get(2).and_then(Value::int).unwrap_or(0) as u64,
                    v.iter().skip(4).map(Value::text).collect(),
                ))
            }
            "fenced" => Err(StoreError::Fenced),
            other => Err(StoreError::protocol("settle", format!("status {other:?}"))),
        }
    }

    /// Make every row claimed in an earlier term than `epoch`'s due now (R3): those whose
    /// claim token is at or below the floor this term's lease acquisition recorded; repeats
    /// the bounded script until none is left. Returns the rows moved.
    pub async fn requeue_claimed(&self, token: &str, epoch: u64) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let args = vec![
                self.prefix(),
                token.into(),
                (epoch as i64).into(),
                1000i64.into(),
            ];
            let v = self.call(&self.scripts.requeue_claimed, args).await?;
            match status(&v) {
                "ok" => {}
                "fenced" => return Err(StoreError::Fenced),
                other => {
                    return Err(StoreError::protocol(
                        "requeue_claimed",
                        format!("status {other:?}"),
                    ))
                }
            }
            total += v.get(1).and_then(Value::int).unwrap_or(0) as u64;
            if v.get(2).and_then(Value::int).unwrap_or(0) <= 0 {
                return Ok(total);
            }
        }
    }

    async fn lease(
        &self,
        op: &str,
        node: &str,
        token: &str,
        ttl_ms: u64,
    ) -> Result<Vec<Value>, StoreError> {
        let args = vec![
            self.prefix(),
            op.into(),
            node.into(),
            token.into(),
            (ttl_ms as i64).into(),
        ];
        self.call(&self.scripts.lease, args).await
    }

    /// Try to take the lease for `ttl_ms` (R25); increments the epoch when it succeeds.
    pub async fn lease_acquire(&self, node: &str, ttl_ms: u64) -> Result<LeaseAcquire, StoreError> {
        let v = self.lease("acquire", node, "", ttl_ms).await?;
        match status(&v) {
            "ok" => Ok(LeaseAcquire::Acquired {
                token: v.get(1).map(Value::text).unwrap_or_default(),
                epoch: v.get(2).and_then(Value::int).unwrap_or(0) as u64,
            }),
            "held" => Ok(LeaseAcquire::Held {
                holder: v.get(1).map(Value::text).unwrap_or_default(),
                pttl_ms: v.get(2).and_then(Value::int).unwrap_or(0),
            }),
            other => Err(StoreError::protocol("lease", format!("status {other:?}"))),
        }
    }

    /// Extend the lease by `ttl_ms` if `token` still holds it. `Ok(false)`: lost.
    pub async fn lease_renew(
        &self,
        node: &str,
        token: &str,
        ttl_ms: u64,
    ) -> Result<bool, StoreError> {
        let v = self.lease("renew", node, token, ttl_ms).await?;
        Ok(status(&v) == "ok")
    }

    /// Give the lease up so a standby takes over at once (graceful shutdown).
    pub async fn lease_release(&self, node: &str, token: &str) -> Result<bool, StoreError> {
        let v = self.lease("release", node, token, 0).await?;
        Ok(status(&v) == "ok")
    }

    /// The current lease holder's token and its time left (ms), if any.
    pub async fn lease_holder(&self) -> Result<Option<(String, i64)>, StoreError> {
        let c = self.client();
        let holder: Option<String> = c.get(self.ks.lease()).await?;
        match holder {
            None => Ok(None),
            Some(h) => {
                let pttl: i64 = c.pttl(self.ks.lease()).await?;
                Ok(Some((h, pttl)))
            }
        }
    }

    /// Read hooks for delivery with one pipelined round trip: `None` where a hook is gone,
    /// `Some(Err(what))` where its key holds something else than a readable hook (another
    /// type, a missing or garbage field: a malformed hook). Errors: Redis failing as a whole.
    pub async fn fetch_hooks(
        &self,
        ids: &[u64],
    ) -> Result<Vec<Option<Result<StoredHook, String>>>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let pipe = self.client().pipeline();
        for id in ids {
            let _: () = pipe.hmget(self.ks.hook(*id), HOOK_FIELDS.to_vec()).await?;
        }
        let replies = per_key_replies(pipe.try_all::<Value>().await, ids.len())?;
        Ok(replies
            .into_iter()
            .map(|r| match r {
                Ok(v) => decode_hook(v),
                Err(e) => Some(Err(e)),
            })
            .collect())
    }

    /// Record claim-check references with their hooks (field `cc`, R18) in one call of
    /// `lua/claim_refs.lua`, fenced by the lease `token` (issue 17.12). Returns the references
    /// whose hook is gone (not recorded: the caller deletes those blobs).
    /// Errors: [`StoreError::Fenced`] for a deposed leader.
    pub async fn set_claim_refs(
        &self,
        token: &str,
        refs: &[(u64, String)],
    ) -> Result<Vec<String>, StoreError> {
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = Vec::with_capacity(2 + 2 * refs.len());
        args.extend([self.prefix(), token.into()]);
        for (hook, url) in refs {
            args.push((*hook as i64).into());
            args.push(url.as_str().into());
        }
        let v = self.call(&self.scripts.claim_refs, args).await?;
        match status(&v) {
            "ok" => Ok(v.iter().skip(1).map(Value::text).collect()),
            "fenced" => Err(StoreError::Fenced),
            other => Err(StoreError::protocol(
                "claim_refs",
                format!("status {other:?}"),
            )),
        }
    }

    /// The lane id of an ordered row (hook field `L<sink index at commit>`), if any (R10).
    pub async fn lane_of(&self, hook: u64, sink: u32) -> Result<Option<String>, StoreError> {
        Ok(self
            .client()
            .hget(self.ks.hook(hook), format!("L{sink}"))
            .await?)
    }

    /// Read source specs with one pipelined round trip; `None` where a source is gone;
    /// `Some(Err)` where its stored spec is not valid JSON or its key is of another type.
    pub async fn fetch_sources(
        &self,
        keys: &[(String, String)],
    ) -> Result<Vec<Option<Result<SourceSpec, String>>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let pipe = self.client().pipeline();
        for (t, s) in keys {
            let _: () = pipe.hget(self.ks.source(t, s), "spec").await?;
        }
        let replies = per_key_replies(pipe.try_all::<Option<Bytes>>().await, keys.len())?;
        Ok(replies
            .into_iter()
            .map(|r| match r {
                Ok(spec) => spec
                    .map(|b| serde_json::from_slice::<SourceSpec>(&b).map_err(|e| e.to_string())),
                Err(e) => Some(Err(e)),
            })
            .collect())
    }

    /// Register or replace a source (R19). The spec is validated first, under this store's
    /// [`Store::with_edge`] guards (a literal blocked IP or a refused secret reference is an
    /// [`crate::Error::InvalidSource`] naming it).
    pub async fn put_source(
        &self,
        tenant: &str,
        source: &str,
        spec: &SourceSpec,
    ) -> Result<u64, crate::Error> {
        crate::model::check_id("tenant", tenant)?;
        crate::model::check_id("source", source)?;
        spec.validate_with(&self.edge)
            .map_err(crate::Error::InvalidSource)?;
        let json =
            serde_json::to_string(spec).map_err(|e| crate::Error::InvalidSource(e.to_string()))?;
        let key = self.ks.source(tenant, source);
        let c = self.client();
        let pipe = c.pipeline();
        let _: () = pipe
            .hset(&key, vec![("spec", json), ("modules", spec.modules_csv())])
            .await
            .map_err(StoreError::from)?;
        let _: () = pipe
            .hincrby(&key, "version", 1)
            .await
            .map_err(StoreError::from)?;
        match spec.lanes_json() {
            Some(l) => {
                let _: () = pipe
                    .hset(&key, ("lanes", l))
                    .await
                    .map_err(StoreError::from)?;
            }
            None => {
                let _: () = pipe.hdel(&key, "lanes").await.map_err(StoreError::from)?;
            }
        }
        let _: () = pipe
            .sadd(self.ks.sources(), format!("{tenant}/{source}"))
            .await
            .map_err(StoreError::from)?;
        let replies: Vec<Value> = pipe.all().await.map_err(StoreError::from)?;
        // replies: hset, hincrby (the new version), hset/hdel lanes, sadd
        Ok(replies.get(1).and_then(Value::int).unwrap_or(0) as u64)
    }

    /// A source's spec, if registered.
    pub async fn get_source(
        &self,
        tenant: &str,
        source: &str,
    ) -> Result<Option<SourceSpec>, crate::Error> {
        let spec: Option<String> = self
            .client()
            .hget(self.ks.source(tenant, source), "spec")
            .await
            .map_err(StoreError::from)?;
        match spec {
            None => Ok(None),
            Some(s) => serde_json::from_str(&s).map(Some).map_err(|e| {
                crate::Error::InvalidSource(format!("stored spec of {tenant}/{source}: {e}"))
            }),
        }
    }

    /// Every registered `(tenant, source)`, sorted.
    pub async fn list_sources(&self) -> Result<Vec<(String, String)>, StoreError> {
        let members: Vec<String> = self.client().smembers(self.ks.sources()).await?;
        let mut out: Vec<(String, String)> = members
            .into_iter()
            .filter_map(|m| {
                m.split_once('/')
                    .map(|(t, s)| (t.to_string(), s.to_string()))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Delete a source; its pending rows are dead-lettered `source_gone` when claimed (R19).
    /// Returns whether it existed.
    pub async fn delete_source(&self, tenant: &str, source: &str) -> Result<bool, StoreError> {
        let c = self.client();
        let n: i64 = c.del(self.ks.source(tenant, source)).await?;
        let _: i64 = c
            .srem(self.ks.sources(), format!("{tenant}/{source}"))
            .await?;
        Ok(n > 0)
    }

    /// The running totals of the instance.
    pub async fn totals(&self) -> Result<Totals, StoreError> {
        let v: Vec<Option<u64>> = self
            .client()
            .hmget(
                self.ks.stats(),
                vec!["committed", "delivered", "dead_lettered", "dropped"],
            )
            .await?;
        let g = |i: usize| v.get(i).copied().flatten().unwrap_or(0);
        Ok(Totals {
            committed: g(0),
            delivered: g(1),
            dead_lettered: g(2),
            dropped: g(3),
        })
    }

    /// Rows claimed right now (all epochs).
    pub async fn claimed_count(&self) -> Result<u64, StoreError> {
        Ok(self.client().zcard(self.ks.claimed()).await?)
    }

    /// Redis server time (ms).
    pub async fn now_ms(&self) -> Result<i64, StoreError> {
        let cmd = fred::types::CustomCommand::new_static(
            "TIME",
            fred::types::ClusterHash::FirstKey,
            false,
        );
        let t: Vec<String> = self.client().custom(cmd, Vec::<String>::new()).await?;
        let s: i64 = t.first().and_then(|s| s.parse().ok()).unwrap_or(0);
        let us: i64 = t.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        Ok(s * 1000 + us / 1000)
    }

    /// The earliest place in line of any active tenant (ms), if any tenant has rows.
    pub async fn earliest_due_ms(&self) -> Result<Option<i64>, StoreError> {
        let v: Value = self
            .client()
            .zrange(self.ks.tenants(), 0, 0, None, false, None, true)
            .await?;
        Ok(first_score(&v))
    }

    /// True when nothing is claimed and no row is due by Redis time (R23's idle condition).
    pub async fn idle(&self) -> Result<bool, StoreError> {
        let v = self.call(&self.scripts.idle, vec![self.prefix()]).await?;
        let n = |i: usize| v.get(i).and_then(Value::int).unwrap_or(0);
        Ok(n(0) == 0 && (n(1) < 0 || n(1) > n(2)))
    }

    /// Rows waiting in a tenant's due set (due now or later).
    pub async fn pending_count(&self, tenant: &str) -> Result<u64, StoreError> {
        Ok(self.client().zcard(self.ks.due(tenant)).await?)
    }

    /// The Redis `maxmemory-policy`, read from `INFO memory` (field `maxmemory_policy`), which
    /// servers answer also where `CONFIG` is renamed away, as managed services do (issue
    /// 17.9). `None` only when the server does not report it. Errors: Redis unreachable.
    pub async fn maxmemory_policy(&self) -> Result<Option<String>, StoreError> {
        let info: String = self
            .client()
            .info(Some(fred::types::InfoKind::Memory))
            .await?;
        Ok(info.lines().find_map(|l| {
            l.trim()
                .strip_prefix("maxmemory_policy:")
                .map(|p| p.trim().to_string())
        }))
    }

    /// Write breaker snapshots for the next term (`lua/breakers.lua`, R16, issue 17.4):
    /// `(sink key, snapshot)`, an empty snapshot deleting the key's entry; fenced by the lease
    /// `token`. Errors: [`StoreError::Fenced`].
    pub async fn save_breakers(
        &self,
        token: &str,
        changes: &[(String, String)],
    ) -> Result<(), StoreError> {
        let mut args = vec![self.prefix(), token.into()];
        for (k, v) in changes {
            args.push(k.as_str().into());
            args.push(v.as_str().into());
        }
        let v = self.call(&self.scripts.breakers, args).await?;
        match status(&v) {
            "ok" => Ok(()),
            "fenced" => Err(StoreError::Fenced),
            other => Err(StoreError::protocol(
                "breakers",
                format!("status {other:?}"),
            )),
        }
    }

    /// Every breaker snapshot kept for a new term: `(sink key, snapshot)`.
    pub async fn load_breakers(&self) -> Result<Vec<(String, String)>, StoreError> {
        let m: std::collections::HashMap<String, String> =
            self.client().hgetall(self.ks.breakers()).await?;
        Ok(m.into_iter().collect())
    }

    /// Publish the leader's window state with a short TTL, for `pressure()` from anywhere
    /// (R21), fenced by the lease `token` like every write (`lua/window.lua`), so a deposed
    /// leader cannot overwrite its successor's state; an empty `json` writes the settings
    /// only. `settings` (name, value) go to the
    /// partition's `settings` hash, which the scripts read instead of trusting their callers
    /// (`max_hook_bytes` for commit, `cc_retention_ms` for settle; issue 17.10, R18).
    /// Errors: [`StoreError::Fenced`].
    pub async fn publish_window(
        &self,
        token: &str,
        json: &str,
        ttl_ms: u64,
        settings: &[(&str, u64)],
    ) -> Result<(), StoreError> {
        let mut args = vec![
            self.prefix(),
            token.into(),
            json.into(),
            (ttl_ms as i64).into(),
        ];
        for (name, value) in settings {
            args.push((*name).into());
            args.push((*value as i64).into());
        }
        let v = self.call(&self.scripts.window, args).await?;
        match status(&v) {
            "ok" => Ok(()),
            "fenced" => Err(StoreError::Fenced),
            other => Err(StoreError::protocol("window", format!("status {other:?}"))),
        }
    }
}

/// The first score of a `ZRANGE … WITHSCORES` reply, flat (RESP2) or nested (RESP3).
pub fn first_score(v: &Value) -> Option<i64> {
    let Value::Array(a) = v else { return None };
    match a.first()? {
        Value::Array(pair) => pair.get(1).and_then(Value::int),
        _ => a.get(1).and_then(Value::int),
    }
}

/// The fields of a hook hash read for delivery, in [`decode_hook`]'s order.
const HOOK_FIELDS: [&str; 8] = ["b", "h", "t", "tn", "s", "k", "n", "cc"];

/// Split a pipeline's replies into one result per key: a key's own error reply (it holds
/// another type: `WRONGTYPE`) is that key's `Err(text)`; anything else failing (connection,
/// timeout) fails the whole call, so a lost reply is never taken for a malformed key.
fn per_key_replies<R>(
    replies: Vec<Result<R, fred::error::Error>>,
    expected: usize,
) -> Result<Vec<Result<R, String>>, StoreError> {
    let per_key = |e: &fred::error::Error| e.details().starts_with("WRONGTYPE");
    if replies.len() != expected {
        let e = replies.into_iter().find_map(Result::err);
        return Err(e.map(StoreError::from).unwrap_or_else(|| {
            StoreError::protocol("pipeline", format!("{expected} replies expected"))
        }));
    }
    replies
        .into_iter()
        .map(|r| match r {
            Ok(v) => Ok(Ok(v)),
            Err(e) if per_key(&e) => Ok(Err(e.details().to_string())),
            Err(e) => Err(StoreError::from(e)),
        })
        .collect()
}

/// Decode a hook read with [`HOOK_FIELDS`]: `None` when the hook is gone (every field
/// absent), `Some(Err(what))` naming the first field that is missing or unreadable.
fn decode_hook(v: Value) -> Option<Result<StoredHook, String>> {
    let Value::Array(f) = v else {
        return Some(Err("unexpected reply".into()));
    };
    if f.len() != HOOK_FIELDS.len() {
        return Some(Err("unexpected reply".into()));
    }
    if f.iter().all(|v| matches!(v, Value::Null)) {
        return None;
    }
    let bad = |i: usize| {
        let shown = match &f[i] {
            Value::Null => "missing".to_string(),
            v => format!("{:?} unreadable", truncate_text(&v.text(), 32)),
        };
        format!("field {} {shown}", HOOK_FIELDS[i])
    };
    let text = |i: usize| f[i].as_str_ref().map(str::to_string).ok_or_else(|| bad(i));
    let hook = (|| {
        let body = match &f[0] {
            Value::Bytes(b) => b.clone(),
            Value::String(s) => Bytes::copy_from_slice(s.as_bytes()),
            _ => return Err(bad(0)),
        };
        f[6].int().ok_or_else(|| bad(6))?;
        Ok(StoredHook {
            body,
            headers: f[1].text(),
            committed_at_ms: f[2].int().ok_or_else(|| bad(2))?,
            tenant: text(3)?,
            source: text(4)?,
            modules: text(5)?.split(',').map(str::to_string).collect(),
            claim_ref: f[7].as_str_ref().map(str::to_string),
        })
    })();
    Some(hook)
}

fn truncate_text(s: &str, max: usize) -> String {
    crate::sinks::truncate(s.to_string(), max)
}
