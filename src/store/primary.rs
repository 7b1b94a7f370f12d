//! Following the primary behind Redis Sentinel: leadership follows the primary, not the
//! connection.
//!
//! A graceful failover (`SENTINEL FAILOVER`, or the sentinels' own after a primary went
//! away and came back) promotes the replica at once, but the old primary stays a writable
//! master until the sentinels convert it into a replica, some ten seconds later, and then
//! throws away everything written to it since the promotion. A worker whose connections
//! still reach it would claim, settle and commit into that void. Three things keep it out:
//!
//! - **Scripts refuse on a primary that lost a replica** (`replicas_lost` in
//!   `lua/prelude.lua`): the promotion detaches the replica from the old primary at once, so
//!   the fenced scripts (lease renewal, claim, settle…) and `commit.lua` refuse there from that
//!   instant, and the term ends.
//! - **A term starts only on the primary the sentinels name** ([`Store::primary_check`]): no
//!   failover in progress on any sentinel, this store's connections reach the server they
//!   name, and that server says `ROLE` master. Until then the campaign waits.
//! - **The switch is followed at once** ([`Store::watch_primary`]): a subscription to every
//!   sentinel's `+switch-master` (and a poll every second, as Pub/Sub is at most once) moves
//!   the pool to the new primary (fred asks the sentinels again on reconnect) and tells the
//!   node, whose terms on the old primary end.
//!
//! Commits are the producers' side of the same story: [`Store::commit`] waits for the
//! replicas (`WAIT`, `redis.commit_wait_ms`) before it answers, and answers a retryable
//! error when they did not all acknowledge it (`CommitError::NotReplicated`). And a commit
//! is refused while the primary has fewer replicas attached than the sentinels know alive
//! (`expected`, written by every lease acquisition and renewal from
//! [`Store::known_replicas`]): right after a graceful failover the new primary has none
//! attached — the old primary is converted into its replica only ~10 s later, and its first
//! sync takes seconds more — and a commit acknowledged then, held by the new primary alone,
//! would be lost if the new primary failed before that sync (found by the soak).

use super::*;
use fred::types::{ClusterHash, CustomCommand};
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Bound of one question to one sentinel.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);
/// How often [`Store::watch_primary`] asks the sentinels without a `+switch-master`.
const POLL: Duration = Duration::from_secs(1);
/// How long the sentinels may disagree on the primary before a term starts on the newest
/// one anyway. After a failover the others learn the new configuration from the sentinel
/// that ran it within a second or two, and the old primary is made a replica within about
/// ten seconds, both well inside this; a sentinel that never learns it (cut off from the
/// servers, or monitoring another deployment under the same name) would otherwise hold
/// every term back for good. The term still starts only on the server the
/// newest configuration names, and only when it says `ROLE` master.
pub const STALE_SENTINEL_GRACE: Duration = Duration::from_secs(20);
/// How long a term waits for the replicas the sentinels know (and do not think down) to
/// attach to the primary before it starts without them. A term counts the replicas attached
/// when it starts and its commits wait for that many (`WAIT`): one started on a primary that
/// just restarted, before its replica is back, would count none, and its commits would be
/// acknowledged without any replica having them — a later failover would lose them. (A
/// guard against that window; the soak's loss of acknowledged hooks in an earlier soak was not
/// traced to it.) A replica that never attaches (broken, or its link refused) would
/// otherwise hold every term back for good.
pub const REPLICA_ATTACH_GRACE: Duration = Duration::from_secs(30);

/// The sentinels of a `redis-sentinel://` store: one client each, and the service name.
#[derive(Clone)]
pub(super) struct Sentinels {
    service: String,
    clients: Vec<Client>,
    /// One config per sentinel, for subscribers.
    configs: Vec<Config>,
    /// The credentials and TLS of the Redis servers behind the sentinels (the URL's, as for
    /// the sentinels), to reach a server the sentinels do not name ([`Store::depose`]).
    servers: Config,
    /// How long the sentinels have disagreed ([`Disagreement`]).
    disagreement: Arc<std::sync::Mutex<Disagreement>>,
    /// How long the primary has had fewer replicas attached than the sentinels know.
    short_of_replicas: Arc<std::sync::Mutex<Disagreement>>,
    /// The replicas the sentinels last said the deployment has and are not down
    /// ([`Store::refresh_known_replicas`]); -1 until a sentinel answered.
    known: Arc<std::sync::atomic::AtomicI64>,
}

/// Since when the sentinels have disagreed on the primary, with the same newest one named.
#[derive(Debug, Default)]
struct Disagreement {
    since: Option<(String, Instant)>,
}

impl Disagreement {
    /// How long `newest` has been the newest primary while some sentinel names another
    /// (zero at the first such answer); `None`, and forgotten, once they all agree.
    fn observe(&mut self, newest: &str, agreed: bool, now: Instant) -> Option<Duration> {
        if agreed {
            self.since = None;
            return None;
        }
        match &self.since {
            Some((p, at)) if p == newest => Some(now.saturating_duration_since(*at)),
            _ => {
                self.since = Some((newest.to_string(), now));
                Some(Duration::ZERO)
            }
        }
    }
}

impl Sentinels {
    /// Clients of each sentinel of `config` (a sentinel config), with its credentials (the
    /// URL's `user:password` go to the sentinels and the primary alike, `url.rs`).
    pub(super) async fn connect(config: &Config) -> Result<Option<Sentinels>, StoreError> {
        let ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } = &config.server
        else {
            return Ok(None);
        };
        let mut clients = Vec::with_capacity(hosts.len());
        let mut configs = Vec::with_capacity(hosts.len());
        for h in hosts {
            // The sentinels speak TLS when the URL does (`rediss-sentinel://`).
            let c = Config {
                server: ServerConfig::new_centralized(h.host.to_string(), h.port),
                username: config.username.clone(),
                password: config.password.clone(),
                tls: config.tls.clone(),
                ..Config::default()
            };
            let client = Builder::from_config(c.clone())
                .with_connection_config(|cc| {
                    cc.connection_timeout = SENTINEL_TIMEOUT;
                    cc.max_command_attempts = 1;
                })
                .with_performance_config(|p| p.default_command_timeout = SENTINEL_TIMEOUT)
                .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2))
                .build()?;
            // A sentinel that is down now is asked again later: not an error here.
            let _ = client.init().await;
            clients.push(client);
            configs.push(c);
        }
        let servers = Config {
            username: config.username.clone(),
            password: config.password.clone(),
            tls: config.tls.clone(),
            ..Config::default()
        };
        Ok(Some(Sentinels {
            service: service_name.clone(),
            clients,
            configs,
            servers,
            disagreement: Arc::default(),
            short_of_replicas: Arc::default(),
            known: Arc::new(std::sync::atomic::AtomicI64::new(-1)),
        }))
    }
}

/// What the sentinels say of the primary.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SentinelView {
    /// The `host:port` of the primary in the newest configuration any answering sentinel
    /// holds (highest `config-epoch`): a sentinel that just ran a failover knows the new
    /// primary before the others learn it from its hello messages.
    pub primary: Option<String>,
    /// Every answering sentinel names that same primary. Right after a failover they do not:
    /// the one that ran it names the new primary, the rest still the old one, which stays a
    /// writable master for seconds and whose writes the resync throws away (no term may
    /// start then: a term resets the replica count its fenced scripts hold it to).
    pub agreed: bool,
    /// Some sentinel runs a failover of the service now.
    pub failover_in_progress: bool,
    /// Sentinels that answered.
    pub answered: usize,
}

/// Whether a term may start on the server this store reaches ([`Store::primary_check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrimaryCheck {
    /// Not behind sentinels, or the sentinels name the server this store reaches, which says
    /// it is a master, and no failover is under way.
    Confirmed,
    /// Not now: why (a failover under way, the connections still on another server…).
    Wait(String),
}

impl Store {
    /// What the sentinels say of the primary now (`SENTINEL MASTER <service>` on each);
    /// `None` when this store is not behind sentinels.
    pub async fn sentinel_view(&self) -> Option<SentinelView> {
        let s = self.sentinels.as_ref()?;
        let mut view = SentinelView::default();
        let mut named: Vec<(String, u64)> = Vec::new();
        for c in &s.clients {
            let cmd = CustomCommand::new_static("SENTINEL", ClusterHash::Random, false);
            let asked = c.custom::<Value, _>(cmd, vec!["MASTER", s.service.as_str()]);
            let Ok(Ok(v)) = tokio::time::timeout(SENTINEL_TIMEOUT, asked).await else {
                continue;
            };
            let fields = master_fields(v);
            let (Some(ip), Some(port)) = (fields.get("ip"), fields.get("port")) else {
                continue;
            };
            view.answered += 1;
            if fields
                .get("flags")
                .is_some_and(|f| f.split(',').any(|f| f == "failover_in_progress"))
            {
                view.failover_in_progress = true;
            }
            let epoch = fields
                .get("config-epoch")
                .and_then(|e| e.parse::<u64>().ok())
                .unwrap_or(0);
            named.push((format!("{ip}:{port}"), epoch));
        }
        (view.primary, view.agreed) = newest_primary(&named);
        Some(view)
    }

    /// The servers this store's pool is connected to, as `host:port`.
    fn connected_servers(&self) -> Vec<String> {
        let mut servers: Vec<String> = self
            .pool
            .active_connections()
            .iter()
            .map(|s| format!("{}:{}", s.host, s.port))
            .collect();
        servers.sort();
        servers.dedup();
        servers
    }

    /// Whether a term may start now: always on one server or a Cluster; behind sentinels,
    /// only when no sentinel runs a failover, the pool reaches the primary the sentinels
    /// name (it is moved there when it does not: ask again), and that server says `ROLE`
    /// master. A check that cannot reach the sentinels waits.
    pub async fn primary_check(&self) -> PrimaryCheck {
        let Some(view) = self.sentinel_view().await else {
            return PrimaryCheck::Confirmed;
        };
        let Some(primary) = view.primary else {
            return PrimaryCheck::Wait("no sentinel answers".into());
        };
        if view.failover_in_progress {
            return PrimaryCheck::Wait(format!("a sentinel runs a failover (primary {primary})"));
        }
        let disagreed = self.sentinels.as_ref().and_then(|s| {
            let mut d = s.disagreement.lock().unwrap_or_else(|p| p.into_inner());
            d.observe(&primary, view.agreed, Instant::now())
        });
        match disagreed {
            Some(for_) if for_ < STALE_SENTINEL_GRACE => {
                return PrimaryCheck::Wait(format!(
                    "the sentinels do not all name the primary yet (newest: {primary})"
                ));
            }
            Some(for_) => tracing::warn!(
                %primary,
                disagreeing_s = for_.as_secs(),
                "some sentinel still names another primary; following the newest configuration"
            ),
            None => {}
        }
        let servers = self.connected_servers();
        if servers != [primary.clone()] {
            self.follow_primary(&format!(
                "connected to {servers:?}, the sentinels name {primary}"
            ))
            .await;
            return PrimaryCheck::Wait(format!("moving to the primary {primary}"));
        }
        let cmd = CustomCommand::new_static("ROLE", ClusterHash::Random, false);
        match self
            .client()
            .custom::<Value, _>(cmd, Vec::<Value>::new())
            .await
        {
            Ok(Value::Array(a))
                if a.first().and_then(Value::as_str).as_deref() == Some("master") =>
            {
                self.refresh_known_replicas().await;
                self.replicas_check(&primary).await
            }
            Ok(other) => PrimaryCheck::Wait(format!("{primary} answers ROLE {other:?}")),
            Err(e) => PrimaryCheck::Wait(format!("ROLE on {primary}: {e}")),
        }
    }

    /// The last step of [`Store::primary_check`]: the replicas the sentinels know and do not
    /// think down are attached to `primary`, or have not attached within
    /// [`REPLICA_ATTACH_GRACE`] (then the term starts with a warning). A check that cannot
    /// read the numbers lets the term start, as before this step existed.
    async fn replicas_check(&self, primary: &str) -> PrimaryCheck {
        let Some(s) = self.sentinels.as_ref() else {
            return PrimaryCheck::Confirmed;
        };
        let (Some(known), Ok(attached)) = (
            self.sentinel_replicas(primary).await,
            self.attached_replicas().await,
        ) else {
            return PrimaryCheck::Confirmed;
        };
        let short = {
            let mut d = s
                .short_of_replicas
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            d.observe(primary, attached >= known, Instant::now())
        };
        match short {
            None => PrimaryCheck::Confirmed,
            Some(for_) if for_ < REPLICA_ATTACH_GRACE => PrimaryCheck::Wait(format!(
                "{primary} has {attached} of the {known} replicas the sentinels know attached; \
                 a term started now would count fewer replicas than the deployment has"
            )),
            Some(for_) => {
                tracing::warn!(
                    %primary, attached, known, waited_s = for_.as_secs(),
                    "a replica the sentinels know has not attached; starting the term without it"
                );
                PrimaryCheck::Confirmed
            }
        }
    }

    /// Replicas of the service the first answering sentinel knows, does not think down
    /// (`SENTINEL REPLICAS`, flags without `s_down`, `o_down` or `disconnected`) and that
    /// report following `primary` (`role-reported` slave, `master-host:master-port`). Right
    /// after a graceful failover the old primary is listed too while it still reports
    /// itself master: it is not waited for (it attaches when the sentinels convert it, some
    /// ten seconds later, and the term on the new primary does not wait that long).
    async fn sentinel_replicas(&self, primary: &str) -> Option<usize> {
        let replicas = self.sentinel_replica_list().await?;
        Some(
            replicas
                .iter()
                .filter(|f| {
                    let follows = f.get("role-reported").map(String::as_str) == Some("slave")
                        && matches!(
                            (f.get("master-host"), f.get("master-port")),
                            (Some(h), Some(p)) if format!("{h}:{p}") == primary
                        );
                    replica_alive(f) && follows
                })
                .count(),
        )
    }

    /// The first answering sentinel's `SENTINEL REPLICAS` of the service, as fields;
    /// `None` when none answers.
    async fn sentinel_replica_list(
        &self,
    ) -> Option<Vec<std::collections::HashMap<String, String>>> {
        let s = self.sentinels.as_ref()?;
        for c in &s.clients {
            let cmd = CustomCommand::new_static("SENTINEL", ClusterHash::Random, false);
            let asked = c.custom::<Value, _>(cmd, vec!["REPLICAS", s.service.as_str()]);
            if let Ok(Ok(Value::Array(replicas))) =
                tokio::time::timeout(SENTINEL_TIMEOUT, asked).await
            {
                return Some(replicas.into_iter().map(master_fields).collect());
            }
        }
        None
    }

    /// Ask the sentinels how many replicas the deployment has that they do not think down
    /// ([`replica_alive`]), whatever primary each reports following: the old primary right
    /// after a graceful failover counts (it is alive and will be converted). Kept for
    /// [`Store::known_replicas`]; left as it was when no sentinel answers. Returns the
    /// replica entries the count was made from (`None`: no sentinel answered).
    pub async fn refresh_known_replicas(
        &self,
    ) -> Option<Vec<std::collections::HashMap<String, String>>> {
        let s = self.sentinels.as_ref()?;
        let replicas = self.sentinel_replica_list().await?;
        let alive = replicas.iter().filter(|f| replica_alive(f)).count();
        s.known
            .store(alive as i64, std::sync::atomic::Ordering::Relaxed);
        Some(replicas)
    }

    /// Mark every partition of this instance on the server at `addr` (`host:port`, one
    /// the sentinels do not name) deposed in favour of `named`, the primary they name: the
    /// field `deposed` of each partition's `replication` hash, which makes `commit.lua`
    /// answer `not_primary` and every fenced script and lease renewal refuse there
    /// (`lua/prelude.lua`). Such a server is a master the sentinels will make a replica of
    /// `named`, and the resync throws away everything it took meanwhile: without the mark,
    /// a producer still connected to it (redis-py's sentinel pool keeps its connections, a
    /// `Producer` whose store follows no primary) has its commits acknowledged and lost
    /// (the fault soak lost 1 884 of 11 874 acknowledged deliveries that way). The resync
    /// wipes the mark with the rest; a lease acquisition clears it, as a term starts only
    /// on the primary the sentinels name. A server that cannot be reached, or refuses the
    /// write (a replica already: `READONLY`), is left as it is: it takes no commit either.
    pub async fn depose(&self, addr: &str, named: &str) {
        let Some(s) = self.sentinels.as_ref() else {
            return;
        };
        let Some((host, port)) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        else {
            return;
        };
        let config = Config {
            server: ServerConfig::new_centralized(host.to_string(), port),
            ..s.servers.clone()
        };
        let Ok(client) = Builder::from_config(config)
            .with_connection_config(|cc| {
                cc.connection_timeout = SENTINEL_TIMEOUT;
                cc.max_command_attempts = 1;
            })
            .with_performance_config(|p| p.default_command_timeout = SENTINEL_TIMEOUT)
            .build()
        else {
            return;
        };
        if !matches!(
            tokio::time::timeout(SENTINEL_TIMEOUT, client.init()).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let mut marked = 0;
        for p in 0..self.partitions {
            let key = self.ks.with_partition(p).replication();
            let set: Result<i64, _> = client.hset(key, ("deposed", named)).await;
            if set.is_err() {
                break;
            }
            marked += 1;
        }
        if marked > 0 {
            tracing::warn!(
                server = %addr, %named, partitions = marked,
                "a Redis master the sentinels do not name: its commits are refused until it is a replica"
            );
            metrics::counter!("ankusa_primary_deposed_total").increment(1);
        }
        let _ = client.quit().await;
    }

    /// The replicas a commit must find attached before it is taken (the `expected` field
    /// the lease script writes): behind sentinels, the count they last gave
    /// ([`Store::refresh_known_replicas`]), `None` before any answered (the field is then
    /// left as it is); elsewhere `Some(0)` (no such floor: the replicas attached when a
    /// term starts are what commits wait for).
    pub fn known_replicas(&self) -> Option<u64> {
        match self.sentinels.as_ref() {
            None => Some(0),
            Some(s) => u64::try_from(s.known.load(std::sync::atomic::Ordering::Relaxed)).ok(),
        }
    }

    /// Replicas attached and synced to the server this store reaches ([`online_replicas`]).
    async fn attached_replicas(&self) -> Result<usize, StoreError> {
        let cmd = CustomCommand::new_static("INFO", ClusterHash::Random, false);
        let info: String = self.client().custom(cmd, vec!["replication"]).await?;
        Ok(online_replicas(&info))
    }

    /// Reconnect every connection of the pool: behind sentinels fred asks them for the
    /// primary again, so the pool moves to the new one. In-flight commands fail (retried by
    /// their callers, never re-sent by fred).
    pub async fn follow_primary(&self, why: &str) {
        tracing::warn!(%why, "moving the Redis connections to the primary the sentinels name");
        metrics::counter!("ankusa_primary_switches_total").increment(1);
        if let Err(e) = self.pool.force_reconnection().await {
            tracing::warn!(error = %e, "reconnecting to the new primary failed; fred retries");
        }
    }

    /// Follow the primary until `shutdown`: on every sentinel's `+switch-master` for this
    /// service, and every second, compare the primary the sentinels name with the server the
    /// pool reaches; when they differ (and no failover is under way), move the pool
    /// ([`Store::follow_primary`]) and bump the returned generation, so the node ends its
    /// terms on the old primary at once. Not behind sentinels: the generation never moves.
    pub fn watch_primary(&self, shutdown: CancellationToken) -> watch::Receiver<u64> {
        let (tx, rx) = watch::channel(0u64);
        let Some(s) = self.sentinels.clone() else {
            return rx;
        };
        let (switch_tx, mut switch_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        for cfg in s.configs.iter().cloned() {
            let (switch_tx, shutdown, service) =
                (switch_tx.clone(), shutdown.clone(), s.service.clone());
            tokio::spawn(async move {
                let Ok(sub) = Builder::from_config(cfg)
                    .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2))
                    .build_subscriber_client()
                else {
                    return;
                };
                let mut messages = sub.message_rx();
                let _ = sub.init().await;
                // Re-subscribe after a reconnect; the task lives as long as the client.
                drop(sub.manage_subscriptions());
                let _ = sub.subscribe("+switch-master").await;
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        m = messages.recv() => match m {
                            // `<service> <old ip> <old port> <new ip> <new port>`
                            Ok(m) if m.value.as_str().is_some_and(|v| {
                                v.split(' ').next() == Some(service.as_str())
                            }) => {
                                let _ = switch_tx.send(());
                            }
                            Ok(_) => {}
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                                let _ = switch_tx.send(());
                            }
                            Err(_) => break,
                        },
                    }
                }
                let _ = sub.quit().await;
            });
        }
        let store = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(POLL) => {}
                    _ = switch_rx.recv() => {}
                }
                let Some(view) = store.sentinel_view().await else {
                    return;
                };
                let Some(primary) = view.primary else {
                    continue;
                };
                if view.failover_in_progress {
                    continue;
                }
                let replicas = store.refresh_known_replicas().await;
                // Only on one undisputed view: mid-failover, or while the sentinels disagree,
                // the server they have just promoted may still be listed as a replica that
                // reports `master`.
                if view.agreed {
                    for stale in stale_masters(replicas.as_deref().unwrap_or_default(), &primary) {
                        store.depose(&stale, &primary).await;
                    }
                }
                let servers = store.connected_servers();
                if !servers.is_empty() && servers != [primary.clone()] {
                    if view.agreed {
                        for left in servers.iter().filter(|s| **s != primary) {
                            store.depose(left, &primary).await;
                        }
                    }
                    store
                        .follow_primary(&format!(
                            "the sentinels name {primary}, the pool reaches {servers:?}"
                        ))
                        .await;
                    tx.send_modify(|g| *g += 1);
                }
            }
        });
        rx
    }
}

/// Whether a sentinel's replica entry is up in its eyes: flags without `s_down` or
/// `o_down`. A `disconnected` entry counts: right after a failover the sentinel creates the
/// entry of the old primary with its link not yet made, and a count that left it out
/// would let the new primary acknowledge commits no replica holds (seen in CI).
/// Counting a replica that is really gone only refuses commits until the sentinel marks it
/// `s_down` (`down-after-milliseconds`), the safe side.
fn replica_alive(f: &std::collections::HashMap<String, String>) -> bool {
    f.get("flags")
        .is_some_and(|flags| !flags.split(',').any(|f| matches!(f, "s_down" | "o_down")))
}

/// The `host:port` of each replica entry the sentinels list, do not think down and that
/// reports itself a master while they name `primary`: an old primary restarted with its
/// own data, or a replica someone promoted by hand. The sentinels convert it into a replica
/// of `primary` (some ten seconds after they see it), and its writes are thrown away then.
fn stale_masters(
    replicas: &[std::collections::HashMap<String, String>],
    primary: &str,
) -> Vec<String> {
    replicas
        .iter()
        .filter(|f| {
            // A `disconnected` entry cannot be reached by the sentinels either: its role
            // is old news, and a connection attempt would only hold up the watch.
            let flags = f.get("flags").map(String::as_str).unwrap_or_default();
            replica_alive(f)
                && !flags.split(',').any(|f| f == "disconnected")
                && f.get("role-reported").map(String::as_str) == Some("master")
        })
        .filter_map(|f| Some(format!("{}:{}", f.get("ip")?, f.get("port")?)))
        .filter(|addr| addr != primary)
        .collect()
}

/// Replicas in `state=online` in an `INFO replication` answer: `connected_slaves` also
/// counts a replica waiting for or receiving its first full sync, which holds nothing yet
/// (the same count as `replication()` in `lua/prelude.lua`).
fn online_replicas(info: &str) -> usize {
    info.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .filter(|(name, fields)| {
            name.strip_prefix("slave")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                && fields.split(',').any(|f| f == "state=online")
        })
        .count()
}

/// The primary of the newest configuration among `(host:port, config-epoch)` answers (the
/// highest epoch; on a tie the address named most), and whether every answer names it.
fn newest_primary(named: &[(String, u64)]) -> (Option<String>, bool) {
    let best = named
        .iter()
        .max_by_key(|(addr, epoch)| (*epoch, named.iter().filter(|(a, _)| a == addr).count()))
        .map(|(a, _)| a.clone());
    let agreed = best
        .as_ref()
        .is_some_and(|b| named.iter().all(|(a, _)| a == b));
    (best, agreed)
}

/// The field/value pairs of a `SENTINEL MASTER` answer (an array in RESP2, a map in RESP3).
fn master_fields(v: Value) -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    match v {
        Value::Array(items) => {
            for pair in items.chunks(2) {
                if let [k, v] = pair {
                    if let (Some(k), Some(v)) = (k.as_string(), v.as_string()) {
                        out.insert(k, v);
                    }
                }
            }
        }
        Value::Map(m) => {
            for (k, v) in m.inner() {
                if let (Some(k), Some(v)) = (k.as_str(), v.as_string()) {
                    out.insert(k.to_string(), v);
                }
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_online_replicas_count_as_attached() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n\
                    slave0:ip=127.0.0.1,port=7001,state=wait_bgsave,offset=0,lag=0\r\n\
                    slave1:ip=127.0.0.1,port=7002,state=online,offset=42,lag=0\r\n\
                    slave2:ip=127.0.0.1,port=7003,state=send_bulk,offset=0,lag=0\r\n\
                    master_failover_state:no-failover\r\nmaster_replid:ab12\r\n";
        assert_eq!(online_replicas(info), 1);
        assert_eq!(online_replicas("role:master\r\nconnected_slaves:0\r\n"), 0);
    }

    #[test]
    fn a_disconnected_replica_entry_counts_until_the_sentinel_thinks_it_down() {
        let entry = |flags: &str| {
            std::collections::HashMap::from([("flags".to_string(), flags.to_string())])
        };
        assert!(replica_alive(&entry("slave")));
        assert!(replica_alive(&entry("slave,disconnected")));
        assert!(!replica_alive(&entry("s_down,slave,disconnected")));
        assert!(!replica_alive(&entry("slave,o_down")));
        assert!(!replica_alive(&std::collections::HashMap::new()));
    }

    #[test]
    fn a_sentinel_master_answer_reads_as_fields() {
        let v = Value::Array(
            [
                "name",
                "ankusa",
                "ip",
                "127.0.0.1",
                "port",
                "6380",
                "flags",
                "master,failover_in_progress",
            ]
            .into_iter()
            .map(Value::from)
            .collect(),
        );
        let f = master_fields(v);
        assert_eq!(f.get("ip").map(String::as_str), Some("127.0.0.1"));
        assert_eq!(f.get("port").map(String::as_str), Some("6380"));
        assert!(f["flags"].contains("failover_in_progress"));
    }

    /// A sentinel that never learns the new primary holds a term back for the grace only:
    /// the clock of a disagreement restarts when the newest primary changes, and stops when
    /// they agree.
    #[test]
    fn a_disagreement_is_timed_per_newest_primary_and_forgotten_on_agreement() {
        let t0 = Instant::now();
        let s = |n| t0 + Duration::from_secs(n);
        let mut d = Disagreement::default();
        assert_eq!(d.observe("new:2", false, s(0)), Some(Duration::ZERO));
        assert_eq!(
            d.observe("new:2", false, s(25)),
            Some(Duration::from_secs(25))
        );
        assert!(d.observe("new:2", false, s(25)).unwrap() >= STALE_SENTINEL_GRACE);
        assert_eq!(d.observe("newer:3", false, s(26)), Some(Duration::ZERO));
        assert_eq!(d.observe("newer:3", true, s(27)), None);
        assert_eq!(d.observe("newer:3", false, s(28)), Some(Duration::ZERO));
    }

    /// Only an entry up and connected in the sentinels' eyes, reporting `master`, other
    /// than the primary they name, is stale.
    #[test]
    fn a_replica_entry_reporting_master_is_a_stale_master() {
        let entry = |port: &str, flags: &str, role: &str| {
            [
                ("ip", "127.0.0.1"),
                ("port", port),
                ("flags", flags),
                ("role-reported", role),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<std::collections::HashMap<_, _>>()
        };
        let list = [
            entry("7001", "slave", "slave"),
            entry("7002", "slave", "master"),
            entry("7003", "s_down,slave", "master"),
            entry("7004", "slave,disconnected", "master"),
            entry("7000", "slave", "master"),
        ];
        assert_eq!(stale_masters(&list, "127.0.0.1:7000"), ["127.0.0.1:7002"]);
        assert!(stale_masters(&[], "127.0.0.1:7000").is_empty());
    }

    fn answers(a: &[(&str, u64)]) -> Vec<(String, u64)> {
        a.iter().map(|(s, e)| (s.to_string(), *e)).collect()
    }

    /// Right after a failover the sentinel that ran it names the new primary under a newer
    /// epoch while two still name the old one: the newest wins, and they do not agree (the
    /// case of the soak's lost hooks: a majority named the old primary, a term started there).
    #[test]
    fn the_newest_epoch_wins_over_a_stale_majority() {
        let (p, agreed) = newest_primary(&answers(&[("old:1", 0), ("new:2", 1), ("old:1", 0)]));
        assert_eq!(p.as_deref(), Some("new:2"));
        assert!(!agreed);
        let (p, agreed) = newest_primary(&answers(&[("new:2", 1), ("new:2", 1)]));
        assert_eq!(p.as_deref(), Some("new:2"));
        assert!(agreed);
        assert_eq!(newest_primary(&[]), (None, false));
    }
}
