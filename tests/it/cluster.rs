//! Redis Cluster and Redis Sentinel: a worker, the producer and the CLI on a
//! 3-master cluster made with `redis-cli --cluster create` (scripts on every primary, no
//! CROSSSLOT, NOSCRIPT reloads, a MOVED followed, the eviction check on every primary, the
//! wake channel), `partitions = 6` over worker processes through a kill -9 and a joiner, a
//! worker following a Sentinel failover under load with 0 hooks lost, and URLs this build
//! cannot serve refused before any connection.

use crate::common;

use ankusa::config::Config;
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::store::{Store, StoreError, Topology};
use ankusa::testkit::{Receiver, ReceiverOptions, RedisCluster, RedisSentinel};
use ankusa::{Hook, Producer, Worker};
use common::procs::{self, poll_until};
use common::{spread, test_config, WorkerProcess, LIVENESS};
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ankusa");

/// A test's deployment-independent half: the receiver, the workers' config, a store and a
/// producer on `url`.
struct World {
    receiver: Receiver,
    config: Config,
    store: Store,
    producer: Producer,
}

impl World {
    async fn new(url: &str) -> World {
        let receiver = Receiver::start_with(ReceiverOptions {
            record_bodies: false,
            threads: 2,
        })
        .expect("receiver starts");
        let config = test_config(url);
        config.validate().expect("test config is valid");
        let store = Store::connect_config(&config.redis, &config.instance)
            .await
            .expect("store connects")
            .with_edge(ankusa::sinks::EdgePolicy::from_config(&config));
        let producer = Producer::new(store.clone(), config.commit.max_hook_bytes);
        World {
            receiver,
            config,
            store,
            producer,
        }
    }

    fn sink(&self, path: &str) -> SinkEntry {
        SinkEntry {
            module: "http".into(),
            opts: serde_json::json!({ "url": self.receiver.url(path) })
                .as_object()
                .cloned()
                .expect("object"),
            ..Default::default()
        }
    }

    /// `tenant/src` with one http sink per path.
    async fn source(&self, tenant: &str, paths: &[&str]) {
        let spec = SourceSpec {
            sinks: paths.iter().map(|p| self.sink(p)).collect(),
        };
        self.store
            .put_source(tenant, "src", &spec)
            .await
            .expect("source stored");
    }

    /// Commit `n` hooks to `tenant/src` in batches of 50; a failed batch (a failover under
    /// way) is retried until [`LIVENESS`] passes. Returns the hook ids.
    async fn commit_n(&self, tenant: &str, n: usize) -> Vec<u64> {
        let mut ids = Vec::with_capacity(n);
        let mut i = 0;
        while i < n {
            let k = 50.min(n - i);
            let hooks: Vec<Hook> = (i..i + k)
                .map(|j| Hook::new(format!("{{\"tenant\":\"{tenant}\",\"n\":{j}}}")))
                .collect();
            let deadline = Instant::now() + LIVENESS;
            let receipt = loop {
                match self.producer.commit_many(tenant, "src", &hooks).await {
                    Ok(r) => break r,
                    Err(e) => {
                        assert!(Instant::now() < deadline, "commit keeps failing: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
            ids.extend((0..k as u64).map(|j| receipt.first_hook + j));
            i += k;
        }
        ids
    }

    /// 2xx receipts per `ankusa-delivery-id`.
    fn receipts(&self) -> HashMap<String, usize> {
        let mut per_row = HashMap::new();
        for r in self.receiver.requests() {
            if (200..300).contains(&r.status) {
                if let Some(id) = r.header("ankusa-delivery-id") {
                    *per_row.entry(id.to_string()).or_insert(0) += 1;
                }
            }
        }
        per_row
    }

    /// Waits until every `hook.sink` row of `hooks × sinks` reached the receiver.
    async fn wait_delivered(&self, hooks: &[u64], sinks: u32) {
        let want: Vec<String> = hooks
            .iter()
            .flat_map(|h| (0..sinks).map(move |s| format!("{h}.{s}")))
            .collect();
        let all = poll_until(LIVENESS * 2, || async {
            let got = self.receipts();
            want.iter().all(|id| got.contains_key(id))
        })
        .await;
        if !all {
            let got = self.receipts();
            let missing: Vec<&String> = want.iter().filter(|id| !got.contains_key(*id)).collect();
            panic!(
                "{} of {} rows never delivered (first: {:?}); totals {:?}",
                missing.len(),
                want.len(),
                missing.iter().take(10).collect::<Vec<_>>(),
                self.store.totals().await
            );
        }
    }

    /// Waits until Redis says the instance is idle (`ankusa tick`), retrying Redis errors.
    async fn wait_idle(&self) {
        let deadline = Instant::now() + LIVENESS;
        loop {
            match tokio::time::timeout(LIVENESS, ankusa::ops::tick(&self.store, None)).await {
                Ok(Ok(_)) => return,
                r => {
                    assert!(Instant::now() < deadline, "not idle: {r:?}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// The count of `errorstat_<kind>` errors in a node's `INFO errorstats` (0 when absent).
fn error_count(info: &str, kind: &str) -> u64 {
    let prefix = format!("errorstat_{kind}:count=");
    info.lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// No node of `cluster` ever answered CROSSSLOT.
fn assert_no_crossslot(cluster: &RedisCluster) {
    for (i, info) in cluster
        .cmd_all(&["INFO", "errorstats"])
        .expect("INFO errorstats")
        .iter()
        .enumerate()
    {
        assert_eq!(error_count(info, "CROSSSLOT"), 0, "node {i}: {info}");
    }
}

/// `ankusa <args>` with `url` and instance `test`: (exit code, stdout, stderr).
fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args(["--redis-url", url, "--instance", "test"])
        .args(args)
        .env_remove("ANKUSA_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("ankusa runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The acceptance run on a 3-master cluster with today's single partition: 2 tenants × 300
/// hooks × 2 sinks delivered exactly once by one worker, with the script cache flushed on
/// every node halfway (NOSCRIPT reloads on every primary); no CROSSSLOT anywhere; every key
/// in the partition's one slot; `ankusa stats` and `ankusa dlq list` served on the cluster
/// URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_a_three_master_cluster_delivers_every_hook_exactly_once() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3).expect("cluster forms");
    let w = World::new(&cluster.url()).await;
    assert_eq!(w.store.topology(), Topology::Cluster);
    // every script is loaded on every primary, whichever holds the partition's slot
    for s in ankusa::store::Scripts::default().all() {
        let sha = s.sha1();
        for (i, exists) in cluster
            .cmd_all(&["SCRIPT", "EXISTS", &sha])
            .expect("SCRIPT EXISTS")
            .iter()
            .enumerate()
        {
            assert_eq!(exists, "1", "{} not loaded on node {i}", s.name);
        }
    }
    w.source("t1", &["/t1a", "/t1b"]).await;
    w.source("t2", &["/t2a", "/t2b"]).await;
    // a third tenant whose sink refuses for good: one dead letter for `dlq list`
    w.source("t3", &["/gone"]).await;
    w.receiver
        .set("/gone", ankusa::testkit::Behavior::Status(400));
    let worker = Worker::start(w.config.clone(), Some("c1"))
        .await
        .expect("worker starts on the cluster");

    let mut hooks = w.commit_n("t1", 150).await;
    hooks.extend(w.commit_n("t2", 150).await);
    // Redis forgets the scripts on every node (as after a restart): calls reload them
    for reply in cluster.cmd_all(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH") {
        assert_eq!(reply, "OK");
    }
    hooks.extend(w.commit_n("t1", 150).await);
    hooks.extend(w.commit_n("t2", 150).await);
    let dead = w.commit_n("t3", 1).await;
    w.wait_delivered(&hooks, 2).await;
    w.wait_idle().await;

    let got = w.receipts();
    let rows = hooks.len() * 2;
    let dups: usize = got.values().map(|n| n - 1).sum();
    assert_eq!(hooks.len(), 600);
    assert_eq!(got.len(), rows, "distinct rows received");
    assert_eq!(dups, 0, "one worker, no faults: exactly once");
    let t = w.store.totals().await.expect("totals");
    assert_eq!(t.committed, 601, "{t:?}");
    assert_eq!(t.delivered, rows as u64, "{t:?}");
    assert_eq!((t.dead_lettered, t.dropped), (1, 0), "{t:?}");
    assert_eq!(w.store.claimed_count().await.expect("claimed"), 0);

    // every key of the partition sits in its slot, on one node; the instance's own keys
    // (partition count, heartbeats, who leads what) are the only others
    let ks = w.store.keyspace();
    let home = cluster.node_of(&ks.lease()).expect("slot owner");
    let keys = cluster.keys().expect("keys");
    assert!(keys.len() > 600, "{} keys", keys.len());
    let instance_keys = [ks.partition_count(), ks.workers(), ks.leads()];
    for k in &keys {
        if k.starts_with(ks.prefix()) {
            assert_eq!(
                cluster.node_of(k).ok(),
                Some(home),
                "{k} is off the partition's node"
            );
        } else {
            assert!(
                instance_keys.contains(k),
                "{k} is neither the partition's nor the instance's"
            );
        }
    }
    assert_no_crossslot(&cluster);

    // the CLI on the cluster URL
    let (code, out, err) = cli(&cluster.url(), &["--json", "stats"]);
    assert_eq!(code, 0, "stats: {out}{err}");
    let stats: serde_json::Value = serde_json::from_str(&out).expect("stats JSON");
    assert_eq!(stats["hooks_committed"], 601, "{stats}");
    let (code, out, err) = cli(&cluster.url(), &["--json", "dlq", "list"]);
    assert_eq!(code, 0, "dlq list: {out}{err}");
    assert!(
        out.contains(&format!("{}", dead[0])) && out.contains("t3"),
        "dlq list: {out}"
    );
    assert_no_crossslot(&cluster);
    worker.shutdown().await;
    println!(
        "cluster acceptance: {rows} rows delivered exactly once ({dups} duplicates) in {:?}",
        started.elapsed()
    );
}

/// The partition's slot moves to another primary while a worker runs: each client's next
/// call gets `MOVED`, fred syncs its slot map and fails that call unrun (one write attempt
/// per command), later calls go to the new node, and every hook committed is delivered
/// exactly once.
/// Partitions on the cluster: `partitions = 6`, whose slots spread over the three
/// masters, and three `ankusa worker` processes. Once settled each leads two partitions, and
/// 12 tenants (two per partition) × 100 hooks × 2 sinks are delivered exactly once. Then, under
/// load (12 × 250 hooks being delivered), one worker is killed with SIGKILL: only its two
/// partitions get a new epoch, the two survivors lead three each, 12 × 250 more hooks are
/// committed meanwhile, 0 rows are lost and the duplicates stay within the dead worker's
/// window (`dispatch.max_inflight`, shared by its partitions). Last, a fourth process joins:
/// each survivor hands one partition over to it (drain, release), only those two partitions
/// get a new epoch, and the 12 × 100 hooks committed during the hand-over are delivered with
/// 0 duplicates. No CROSSSLOT anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_partitions_on_the_cluster_spread_over_worker_processes_through_a_kill_9_and_a_joiner()
{
    const P: u32 = 6;
    /// The row window of each worker process: the bound on the duplicates of a kill -9.
    const WINDOW: usize = 200;
    let started = Instant::now();
    let cluster = RedisCluster::start(3).expect("cluster forms");
    let mut w = World::new(&cluster.url()).await;
    w.config.partitions = P;
    w.config.dispatch.max_inflight = WINDOW;
    w.config.dispatch.concurrency = 32;
    w.config.dispatch.sink_concurrency = 32;
    w.store = w.store.clone().with_partitions(P);
    w.producer = Producer::new(w.store.clone(), w.config.commit.max_hook_bytes);
    let homes: std::collections::HashSet<usize> = (0..P)
        .map(|n| {
            cluster
                .node_of(&w.store.partition(n).keyspace().lease())
                .expect("slot owner")
        })
        .collect();
    assert!(homes.len() > 1, "the partitions' slots sit on {homes:?}");
    let tenants = spread::tenants_covering(P, 12);
    for t in &tenants {
        let (a, b) = (format!("/{t}/a"), format!("/{t}/b"));
        w.source(t, &[&a, &b]).await;
    }
    let commit_round = |n: usize| {
        let (w, tenants) = (&w, &tenants);
        async move {
            let mut hooks = Vec::new();
            for t in tenants {
                hooks.extend(w.commit_n(t, n).await);
            }
            hooks
        }
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = procs::write_config_of(&w.config, &dir, "worker.toml");
    let mut workers: Vec<WorkerProcess> = ["c0", "c1", "c2"]
        .iter()
        .map(|name| procs::spawn_worker(&cfg, &dir, name, &[], &[]))
        .collect();
    let mut nodes = Vec::new();
    for p in &workers {
        procs::wait_ready(p).await;
        nodes.push(procs::node_id(&p.admin).await.expect("node id"));
    }
    // 1. Spread first (a hand-over drains and releases, but this phase asserts exactly once).
    spread::settled(&w.store, &nodes, 2, 2).await;
    let first = commit_round(100).await;
    w.wait_delivered(&first, 2).await;
    w.wait_idle().await;
    let got = procs::receipts_of(&w.receiver);
    assert_eq!(got.per_row.len(), first.len() * 2, "every row delivered");
    assert_eq!(got.duplicates(), 0, "no fault, no hand-over under load");

    // 2. kill -9 one worker under load (while the second round is committed and delivered):
    // only its partitions move.
    let leases = spread::settled(&w.store, &nodes, 2, 2).await;
    let before = spread::epochs(&leases);
    let its = spread::led_by(&leases, &nodes[..1]).remove(0);
    let mut hooks = first.clone();
    let by_then = (first.len() + tenants.len() * 250) * 2;
    let kill = async {
        assert!(
            w.receiver
                .wait_until_async(LIVENESS, |r| r.len() >= first.len() * 2 + 1_000)
                .await,
            "delivery of the second round never got going"
        );
        workers[0].kill9();
        let t = w.store.totals().await.expect("totals");
        assert!(t.delivered < by_then as u64, "killed under load: {t:?}");
    };
    let (second, ()) = tokio::join!(commit_round(250), kill);
    hooks.extend(&second);
    let third = commit_round(250).await;
    hooks.extend(&third);
    let after = spread::epochs(&spread::settled(&w.store, &nodes[1..], 3, 3).await);
    spread::assert_only_moved(&before, &after, &its);
    w.wait_delivered(&hooks, 2).await;
    w.wait_idle().await;
    let got = procs::receipts_of(&w.receiver);
    assert_eq!(got.per_row.len(), hooks.len() * 2, "0 lost, none foreign");
    let dups = got.duplicates();
    assert!(
        dups <= WINDOW,
        "{dups} duplicates > the dead worker's window {WINDOW}"
    );

    // 3. A fourth process joins: each survivor hands one partition over, under load, with
    // no duplicate.
    let answered = got.total;
    workers.push(procs::spawn_worker(&cfg, &dir, "c3", &[], &[]));
    procs::wait_ready(&workers[3]).await;
    let joiner = procs::node_id(&workers[3].admin).await.expect("node id");
    nodes.push(joiner);
    let fourth = commit_round(100).await;
    let leases = spread::settled(&w.store, &nodes[1..], 2, 2).await;
    let taken = spread::led_by(&leases, &nodes[3..]).remove(0);
    spread::assert_only_moved(&after, &spread::epochs(&leases), &taken);
    w.wait_delivered(&fourth, 2).await;
    w.wait_idle().await;
    hooks.extend(&fourth);
    let got = procs::receipts_of(&w.receiver);
    assert_eq!(got.per_row.len(), hooks.len() * 2, "every row delivered");
    assert_eq!(
        got.total - answered,
        fourth.len() * 2,
        "no duplicate while partitions {taken:?} were handed over"
    );
    let t = w.store.totals().await.expect("totals");
    assert_eq!(t.committed, hooks.len() as u64, "{t:?}");
    assert_eq!(t.delivered, (hooks.len() * 2) as u64, "{t:?}");
    assert_no_crossslot(&cluster);
    for p in workers.iter().skip(1) {
        p.signal(libc::SIGTERM);
    }
    for p in workers.iter_mut().skip(1) {
        assert!(
            procs::wait_exit(p, LIVENESS).await.is_some(),
            "a worker did not stop on SIGTERM:\n{}",
            p.log_text()
        );
    }
    println!(
        "cluster P={P}: {} rows; kill -9 moved {its:?} with {dups} duplicates (window \
         {WINDOW}); the joiner took {taken:?} with 0; run {:?}",
        hooks.len() * 2,
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_slot_is_followed() {
    let cluster = RedisCluster::start(3).expect("cluster forms");
    let w = World::new(&cluster.url()).await;
    w.source("t1", &["/a"]).await;
    let worker = Worker::start(w.config.clone(), Some("m1"))
        .await
        .expect("worker starts");
    let before = w.commit_n("t1", 50).await;
    w.wait_delivered(&before, 1).await;
    w.wait_idle().await;

    // a raw client configured as the store's (one write attempt per command), its slot map
    // made before the move
    use fred::interfaces::{ClientLike, KeysInterface};
    let raw = fred::types::Builder::from_config(
        fred::types::config::Config::from_url(&cluster.url()).expect("url"),
    )
    .with_connection_config(|c| c.max_command_attempts = 1)
    .build()
    .expect("client");
    raw.init().await.expect("raw client connects");
    let lease = w.store.keyspace().lease();
    let _: Option<String> = raw.get(&lease).await.expect("GET before the move");

    // move the slot of `{test.p0}` with its keys from its node to the next one
    let slot = cluster.nodes()[0]
        .cmd(&["CLUSTER", "KEYSLOT", &lease])
        .expect("KEYSLOT");
    let from = cluster.node_of(&lease).expect("owner");
    let to = (from + 1) % 3;
    let (src, dst) = (&cluster.nodes()[from], &cluster.nodes()[to]);
    let id = |n: &ankusa::testkit::RedisServer| n.cmd(&["CLUSTER", "MYID"]).expect("MYID");
    let (src_id, dst_id) = (id(src), id(dst));
    dst.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id])
        .expect("importing");
    src.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id])
        .expect("migrating");
    let dst_port = dst.port().to_string();
    loop {
        let keys = src
            .cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"])
            .expect("GETKEYSINSLOT");
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        let mut args = vec!["MIGRATE", "127.0.0.1", &dst_port, "", "0", "10000", "KEYS"];
        args.extend(keys);
        src.cmd(&args).expect("MIGRATE");
    }
    for n in cluster.nodes() {
        n.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id])
            .expect("SETSLOT NODE");
    }
    assert_eq!(cluster.node_of(&lease).expect("owner"), to);
    // what the store works around: fred follows the MOVED (syncs its slot map) but refuses
    // to write the command again with one attempt; the next command goes to the new node
    let moved = raw.get::<Option<String>, _>(&lease).await;
    match &moved {
        Err(e) => assert!(
            e.details().starts_with("Too many failed write attempts"),
            "{e:?}"
        ),
        Ok(_) => panic!("no MOVED after the slot moved"),
    }
    let _: Option<String> = raw.get(&lease).await.expect("GET after the sync");
    let _ = raw.quit().await;

    // Each client of the test's store (a pool of 4) still routes the slot to the old node:
    // its first call there is answered MOVED, refreshes its map and fails unrun (at most one
    // failure per client); every later call succeeds on the new node.
    let mut after = Vec::new();
    let mut failed = 0;
    for i in 0..12 {
        let hooks: Vec<Hook> = (0..5)
            .map(|j| Hook::new(format!("{{\"after\":{i},\"n\":{j}}}")))
            .collect();
        match w.producer.commit_many("t1", "src", &hooks).await {
            Ok(r) => after.extend((0..5).map(|j| r.first_hook + j)),
            Err(e) => {
                failed += 1;
                assert!(
                    e.to_string().contains("Too many failed write attempts"),
                    "commit {i} after the move: {e}"
                );
                assert!(
                    i < 8,
                    "commit {i} failed after every client had synced: {e}"
                );
            }
        }
    }
    assert!(failed <= 4, "{failed} failed commits for 4 clients");
    assert!(after.len() >= 40, "{} hooks committed", after.len());
    after.extend(w.commit_n("t1", 10).await);
    w.wait_delivered(&after, 1).await;
    w.wait_idle().await;
    let got = w.receipts();
    let rows = before.len() + after.len();
    assert_eq!(got.len(), rows, "distinct rows");
    let dups: usize = got.values().map(|n| n - 1).sum();
    let t = w.store.totals().await.expect("totals");
    // the failed commits did not run: Redis counts only the acknowledged ones
    assert_eq!(
        (t.committed, t.delivered),
        (rows as u64, rows as u64),
        "{t:?}"
    );
    assert_no_crossslot(&cluster);
    worker.shutdown().await;
    println!(
        "moved slot {slot} from node {from} to {to}: {failed} commits failed unrun (MOVED), \
         {rows} rows delivered, {dups} duplicates"
    );
}

/// `maxmemory-policy` is checked on every primary, not only the one holding the partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_primary_anywhere_in_the_cluster_refuses_the_worker() {
    let cluster = RedisCluster::start(3).expect("cluster forms");
    let w = World::new(&cluster.url()).await;
    let home = cluster.node_of(&w.store.keyspace().lease()).expect("owner");
    let other = (home + 1) % 3;
    cluster.nodes()[other]
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .expect("CONFIG SET");
    let policy = w.store.maxmemory_policy().await.expect("policy read");
    let port = cluster.nodes()[other].port();
    assert_eq!(
        policy.as_deref(),
        Some(format!("allkeys-lru on 127.0.0.1:{port}").as_str())
    );
    let err = Worker::start(w.config.clone(), Some("e1"))
        .await
        .expect_err("refused");
    assert!(
        matches!(err, ankusa::Error::EvictingRedis(_)),
        "{err:?}: {err}"
    );
    cluster.nodes()[other]
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .expect("CONFIG SET");
    assert_eq!(
        w.store.maxmemory_policy().await.expect("policy").as_deref(),
        Some("noeviction")
    );
}

/// A commit's wake message (classic PUBLISH from inside the script) reaches a subscriber
/// made by [`Store::subscribe`] on the cluster, as the worker's wake and lease channels need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wake_channel_works_on_a_cluster() {
    use ankusa::store::Heard;
    let cluster = RedisCluster::start(3).expect("cluster forms");
    let w = World::new(&cluster.url()).await;
    w.source("t1", &["/a"]).await;
    let mut sub = w
        .store
        .subscribe(vec![w.store.keyspace().wake()])
        .await
        .expect("subscriber connects and subscribes");
    // Pub/Sub is at-most-once and a wake is only a hint (the worker's poll is the fallback).
    // On a cluster fred may answer SUBSCRIBE before the node has it (seen: PUBSUB NUMSUB 0 on
    // every node just after subscribe() returned, 1 a moment later), so the first wake can be
    // missed: a commit per second until one wake arrives, within LIVENESS.
    let deadline = Instant::now() + LIVENESS;
    let mut commits = 0;
    let m = loop {
        w.commit_n("t1", 1).await;
        commits += 1;
        match tokio::time::timeout(Duration::from_secs(1), sub.next()).await {
            Ok(m) => break m.expect("message"),
            Err(_) => assert!(Instant::now() < deadline, "no wake message in {LIVENESS:?}"),
        }
    };
    assert_eq!(m, Heard::Channel(w.store.keyspace().wake()));
    println!("wake on a cluster: received after {commits} commit(s)");
    sub.close().await;
}

/// Sentinel (three sentinels, one replica): a worker delivering 2 tenants × 300 hooks × 2
/// sinks; the master is SIGKILLed under way; the sentinels promote the replica; the worker
/// and the producer follow; every row is delivered (0 lost; duplicates allowed and counted), and hooks committed after the
/// failover are delivered too.
///
/// The hooks are committed, and replicated, before the kill: Redis replicates asynchronously,
/// so a commit acknowledged by a master killed before its replica read it is lost with the
/// master, which is Sentinel's guarantee and not ankusa's to give (docs/operations.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_follows_a_sentinel_failover_under_load_and_loses_nothing() {
    let started = Instant::now();
    // three sentinels (quorum 2), all in the URL (the first as host, the others as node=)
    let mut d = RedisSentinel::start_with(3).expect("sentinel deployment starts");
    assert_eq!(d.url().matches("&node=").count(), 2, "{}", d.url());
    let w = World::new(&d.url()).await;
    assert_eq!(w.store.topology(), Topology::Sentinel);
    w.source("t1", &["/t1a", "/t1b"]).await;
    w.source("t2", &["/t2a", "/t2b"]).await;
    // slow receivers: the run is still delivering when the master dies
    for p in ["/t1a", "/t1b", "/t2a", "/t2b"] {
        w.receiver
            .set(p, ankusa::testkit::Behavior::Delay { ms: 20 });
    }
    let mut config = w.config.clone();
    config.dispatch.concurrency = 4;
    let worker = Worker::start(config, Some("s1"))
        .await
        .expect("worker starts behind sentinels");
    let mut hooks = w.commit_n("t1", 300).await;
    hooks.extend(w.commit_n("t2", 300).await);
    // every commit is on the replica before the master dies
    let offset = |info: &str, field: &str| -> u64 {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(field)?.parse().ok())
            .unwrap_or(0)
    };
    let master = d.master().expect("master");
    let replica = 1 - master;
    let written = offset(
        &d.servers()[master]
            .cmd(&["INFO", "replication"])
            .expect("INFO"),
        "master_repl_offset:",
    );
    assert!(
        poll_until(LIVENESS, || async {
            let info = d.servers()[replica]
                .cmd(&["INFO", "replication"])
                .unwrap_or_default();
            offset(&info, "slave_repl_offset:") >= written
        })
        .await,
        "the replica never caught up"
    );
    // kill the master under load: some rows delivered, many not yet
    assert!(
        w.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 200)
            .await,
        "delivery never got going"
    );
    let delivered_before = w.receipts().len();
    let old = d.kill_master().expect("master killed");
    let new = d.wait_failover(old).expect("replica promoted");
    let failed_over = started.elapsed();
    assert_ne!(new, old);
    // the producer follows too
    let after = w.commit_n("t1", 50).await;
    hooks.extend(&after);
    w.wait_delivered(&hooks, 2).await;
    w.wait_idle().await;
    let got = w.receipts();
    let rows = hooks.len() * 2;
    assert_eq!(
        got.len(),
        rows,
        "distinct rows received: 0 lost, none foreign"
    );
    let dups: usize = got.values().map(|n| n - 1).sum();
    worker.shutdown().await;
    println!(
        "sentinel failover: {rows} rows, 0 lost, {dups} duplicates; {delivered_before} \
         delivered before the kill; failover done at {failed_over:?}, run {:?}",
        started.elapsed()
    );
}

/// URLs this build cannot serve are refused before any connection, with a typed error
/// naming the URL (password redacted): by the store, the worker (config validation) and the
/// CLI (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_url_is_refused_with_a_typed_error_naming_it() {
    for url in [
        "rediss-sentinel://u:secret@127.0.0.1:1",
        "redis-sentinel://:secret@127.0.0.1:1",
        "redis-cluster://127.0.0.1:1/2",
        "valkey://127.0.0.1:1",
        "unix:///tmp/redis.sock",
    ] {
        let started = Instant::now();
        match Store::connect(url, "test", 5_000).await {
            Err(StoreError::UnsupportedUrl(e)) => {
                assert!(!e.url.contains("secret"), "{e}");
                assert!(e.to_string().contains(&e.url), "{e}");
                assert!(e.to_string().contains("cannot be served"), "{e}");
            }
            other => panic!("{url}: {other:?}"),
        }
        // refused before any connection: no dial, no timeout
        assert!(started.elapsed() < Duration::from_secs(1), "{url}");

        let mut config = test_config("redis://127.0.0.1:1");
        config.redis.url = url.into();
        let err = Worker::start(config, Some("u1"))
            .await
            .expect_err("refused");
        let text = err.to_string();
        assert!(matches!(err, ankusa::Error::Config(_)), "{url}: {text}");
        assert!(
            text.contains("redis.url") && text.contains("cannot be served"),
            "{text}"
        );
        assert!(!text.contains("secret"), "{text}");

        let (code, out, err) = cli(url, &["stats"]);
        assert_eq!(code, 2, "{url}: {out}{err}");
        assert!(err.contains("cannot be served"), "{url}: {err}");
        assert!(!err.contains("secret") && !out.contains("secret"), "{err}");
    }
}
