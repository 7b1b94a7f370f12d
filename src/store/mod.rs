//! The Redis store: one connection pool, the script registry, and a typed
//! wrapper per script. Scripts answer a status word and a payload that
//! is decoded here into Rust types; error text is never matched except
//! `NOSCRIPT`, which fred's reload handles.

//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | [`Store`]: the pool, the keyspace, loading and calling scripts |
//! | `error.rs` | [`StoreError`], [`CommitError`] |
//! | `decode.rs` | reading replies: status words, integers, per-key replies, the hook hash |
//! | `commit.rs` | `commit.lua` |
//! | `cancel.rs` | `cancel.lua`: cancelling a scheduled hook before it is claimed |
//! | `claim.rs` | `claim.lua`, `requeue.lua` |
//! | `settle.rs` | `settle.lua` |
//! | `lease.rs` | `lease.lua` |
//! | `hooks.rs` | `hooks.lua` (a claimed page's hooks and bodies), `claim_refs.lua`, lanes of a claim |
//! | `sources.rs` | the source registry |
//! | `sink_state.rs` | `sink_state.lua`: disabling / enabling a sink entry, operational events |
//! | `memory.rs` | a full Redis: `admit.lua` (are commits admitted), body bytes per tenant, `kept.lua` (kept hooks giving way) |
//! | `reads.rs` | totals, counts, Redis time, the window |
//! | `ops.rs` | `dead_letter_source.lua`, `pressure.lua`, `dlq_replay.lua`, `dlq_purge.lua` |
//! | `primary.rs` | following the primary behind Redis Sentinel: the sentinels' view, the check before a term, the switch |
//! | `partitions.rs` | routing to a tenant's partition, the recorded partition count, `heartbeat.lua` |
//! | `tokens.rs` | tenant tokens: their records and digests, never the tokens (`crate::tokens`) |
//! | `scripts.rs`, `tls.rs` | the script registry; TLS to Redis |
//! | `url.rs` | which deployment a `redis.url` names (one server, Cluster, Sentinel), or why it is refused |

mod cancel;
mod claim;
mod commit;
mod decode;
mod error;
mod history;
mod hooks;
mod lease;
mod log;
mod memory;
mod ops;
mod partitions;
mod primary;
mod reads;
pub mod scripts;
mod settle;
mod sink_state;
mod sources;
mod subscribe;
mod tls;
mod tokens;
mod views;

use crate::keyspace::Keyspace;
use crate::model::SourceSpec;
use bytes::Bytes;
use fred::prelude::*;
use fred::types::Value;
use std::time::{Duration, Instant};

use decode::*;

pub use crate::config::redis_url as url;
pub use cancel::Cancelled;
pub use claim::{ByteRooms, ClaimRequest, ClaimResult, ClaimWeights, ClaimedRow};
pub use commit::{CommitOptions, CommitReceipt, Quota, Schedule, IDEMPOTENCY_KEY_MAX_BYTES};
pub use decode::first_score;
pub use error::{
    partitions_mismatch, CommitError, PartitionsError, QuotaKind, RedisFailure, SourceError,
    StoreError,
};
pub use history::{history_arg, log_arg, AttemptRecord, ATTEMPTS_PER_HOOK, HISTORY_ERROR_BYTES};
pub use hooks::StoredHook;
pub use lease::{token_node, LeaseAcquire, LeaseRenewal};
pub use log::LogEntry;
pub use memory::{KeptTrim, TenantBytes};
pub use ops::{DlqPurge, DlqReplayed, PressureRead, SourcePage, SourcePhase};
pub use partitions::{LiveWorker, WorkersSeen};
pub use primary::{PrimaryCheck, SentinelView, REPLICA_ATTACH_GRACE, STALE_SENTINEL_GRACE};
pub use reads::{BreakerRead, Totals};
pub use scripts::{LuaScript, Scripts};
pub use settle::{ExhaustedHook, Outcome, SettleOp, Settled};
pub use sink_state::{SinkEvent, SinkStateChange};
pub use subscribe::{Heard, Subscription};
pub use tokens::StoredToken;
pub use url::{Topology, UnsupportedUrl};
pub use views::{DueSummary, HookAttempts, HookRecord, RowRead, SlowCall, StreamEntry};

/// A connection to one partition of one instance; [`Store::partition`] and
/// [`Store::for_tenant`] address the others over the same pool.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// One server, a Cluster or a Sentinel-managed master (from the URL's scheme).
    topology: Topology,
    ks: Keyspace,
    /// The instance's partition count (`partitions`); 1 unless
    /// [`Store::with_partitions`] said otherwise.
    partitions: u32,
    scripts: Scripts,
    /// Guards `put_source` applies to sink options (SSRF literal check, secret references).
    edge: crate::sinks::EdgePolicy,
    /// `redis.commit_wait_ms`: how long a commit waits for its replicas (`WAIT`).
    commit_wait_ms: u64,
    /// Behind Redis Sentinel: a client of each sentinel, to follow the primary.
    sentinels: Option<primary::Sentinels>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("prefix", &self.ks.prefix())
            .field("topology", &self.topology)
            .finish()
    }
}

impl Store {
    /// Connect to `url` (e.g. `redis://127.0.0.1:6379`) for `instance`, partition 0.
    /// Commands time out after `command_timeout_ms`; a lost connection is re-dialled with
    /// exponential backoff (100 ms to 5 s) forever. In-flight commands are not re-sent on
    /// reconnect (`max_command_attempts = 1`): the caller decides, because a re-sent claim
    /// could claim twice.
    ///
    /// A `rediss://` (`rediss-cluster://`, `rediss-sentinel://`) URL uses TLS with the system's trust store and no client certificate;
    /// [`Store::connect_config`] takes `redis.tls_*` files. `redis-cluster://` serves a Redis
    /// Cluster and `redis-sentinel://` the master a sentinel names ([`url`] lists the forms);
    /// a URL this build cannot serve is [`StoreError::UnsupportedUrl`], before any connection.
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
    /// (it names the file or the server), [`StoreError::Redis`] when Redis cannot be reached,
    /// [`StoreError::UnsupportedUrl`] for a URL this build cannot serve ([`url`]).
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
        let topology = url::topology(url)?;
        let mut config = Config::from_url(url)?;
        // TLS to the one server, to every node of a cluster, or to the sentinels and the
        // servers they name (the same connector, `redis.tls_*`).
        let tls = url::is_tls(url);
        if tls {
            config.tls = Some(tls::connector(redis)?.into());
        }
        let sentinels = primary::Sentinels::connect(&config).await?;
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
                false => not_redis(url, e),
            });
        }
        let store = Store {
            pool,
            topology,
            ks: Keyspace::new(instance, 0),
            partitions: 1,
            scripts: Scripts::default(),
            edge: crate::sinks::EdgePolicy::default(),
            commit_wait_ms: redis.commit_wait_ms,
            sentinels,
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

    /// The deployment this store talks to: one server, a Cluster or a Sentinel-managed master.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// A client of the pool (round-robin): private to `store/`, so every other module of the
    /// crate reaches Redis only through the store's typed calls (the compiler checks it).
    pub(super) fn client(&self) -> &Client {
        self.pool.next()
    }

    /// A fresh subscriber connection to the same server, for [`Store::subscribe`].
    fn subscriber(&self) -> Result<fred::clients::SubscriberClient, StoreError> {
        let cfg = self.pool.next().client_config();
        Ok(Builder::from_config(cfg)
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build_subscriber_client()?)
    }

    /// `SCRIPT LOAD` every script, on every primary of a cluster (a script's `EVALSHA` goes
    /// to the primary of its partition's slot).
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        for s in self.scripts.all() {
            s.script.load(self.pool.next()).await?;
        }
        Ok(())
    }

    /// `EVALSHA` of `s` with the partition's lease key as its one key (so a cluster routes it
    /// to the partition's slot; every key a script touches carries the partition's hash tag),
    /// reloading on `NOSCRIPT`.
    ///
    /// On a cluster, a call answered `MOVED` / `ASK` (its slot moved) makes fred refresh the
    /// client's slot map, but with one write attempt per command fred does not write it
    /// again and answers `Too many failed write attempts.`: the call fails once, unrun, and
    /// the caller's next call goes to the new node. It is not sent again here, because fred
    /// gives the same answer for a command that was in flight on a connection that broke,
    /// which may have run (a claim or a commit must never run twice unasked).
    async fn call(&self, s: &LuaScript, args: Vec<Value>) -> Result<Vec<Value>, StoreError> {
        self.call_keys(s, vec![self.ks.lease()], args).await
    }

    /// [`Store::call`] with other keys than the partition's lease (the instance's own keys).
    async fn call_keys(
        &self,
        s: &LuaScript,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Vec<Value>, StoreError> {
        self.call_on(self.pool.next(), s, keys, args).await
    }

    /// [`Store::call_keys`] on one client of the pool, for a caller that sends a command
    /// after it on the same connection (a commit's `WAIT` counts that connection's writes).
    async fn call_on(
        &self,
        client: &Client,
        s: &LuaScript,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Vec<Value>, StoreError> {
        let started = Instant::now();
        let r: Result<Value, _> = s.script.evalsha_with_reload(client, keys, args).await;
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
}

/// A failed first connection to `url` (plaintext): a reply the client cannot decode means
/// another kind of server listens there, which the user must hear in those words rather
/// than as the decoder's `frame_type: Invalid frame type`.
fn not_redis(url: &str, e: fred::error::Error) -> StoreError {
    let details = e.details().to_ascii_lowercase();
    let undecodable = matches!(
        e.kind(),
        fred::error::ErrorKind::Protocol | fred::error::ErrorKind::Parse
    ) && (details.contains("frame") || details.contains("decode"));
    if undecodable {
        tracing::debug!(error = %e, "the first reply is not RESP");
        StoreError::NotRedis {
            url: crate::config::redact_url(url),
        }
    } else {
        StoreError::Redis(e)
    }
}
