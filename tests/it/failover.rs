//! A graceful Redis Sentinel failover from outside: nothing acknowledged is lost, no hook id
//! is issued twice, duplicates stay within the in-flight window; and `webhook-id` never
//! names two different deliveries (two instances sharing a receiver, a FLUSHALL).
//!
//! The deployment is Redis' defaults with an append-only file: a primary, one replica,
//! three sentinels (quorum 2). `SENTINEL FAILOVER` promotes the replica at once, while the
//! old primary stays a writable master until the sentinels convert it, about ten seconds
//! later, and then throws away what it took meanwhile (docs/operations.md "Zero
//! acknowledged loss").

use crate::common;

use ankusa::config::Config;
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::store::Store;
use ankusa::testkit::{Behavior, Receiver, ReceiverOptions, RedisOptions, RedisSentinel};
use ankusa::{Hook, Producer, Worker};
use common::procs::{poll_until, spawn_worker};
use common::{sha256_hex, test_config, Env, LIVENESS};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The in-flight window of the failover test's leader (`dispatch.max_inflight`): the bound
/// on duplicates a failover may cause.
const WINDOW: usize = 100;

/// The test config for `url`, and a store on it with the source `acme/src` delivering to
/// the receiver's path `a`.
async fn store_with_source(url: &str, receiver: &Receiver) -> (Config, Store) {
    let config: Config = test_config(url);
    config.validate().expect("valid config");
    let store = Store::connect_config(&config.redis, &config.instance)
        .await
        .expect("store connects")
        .with_edge(ankusa::sinks::EdgePolicy::from_config(&config));
    let spec = SourceSpec {
        sinks: vec![sink(receiver, "a")],
    };
    store
        .put_source("acme", "src", &spec)
        .await
        .expect("source");
    (config, store)
}

/// What a producer was told: hook id → SHA-256 of its body, for acknowledged commits.
type Acked = Arc<Mutex<Vec<(u64, String)>>>;

fn sink(receiver: &Receiver, path: &str) -> SinkEntry {
    SinkEntry::http(&receiver.url(path))
}

/// 2xx receipts: (hook id, body SHA-256, path) → count, and webhook-id → body SHA-256s seen.
struct Seen {
    per_delivery: HashMap<(u64, String, String), usize>,
    ids: HashMap<String, HashSet<(String, String)>>,
    total: usize,
}

fn seen(receiver: &Receiver) -> Seen {
    let mut s = Seen {
        per_delivery: HashMap::new(),
        ids: HashMap::new(),
        total: 0,
    };
    for r in receiver.requests() {
        if !(200..300).contains(&r.status) {
            continue;
        }
        let hook: u64 = r
            .header("ankusa-hook-id")
            .and_then(|h| h.parse().ok())
            .unwrap_or(0);
        *s.per_delivery
            .entry((hook, r.body_sha256.clone(), r.path.clone()))
            .or_insert(0) += 1;
        s.ids
            .entry(r.header("webhook-id").unwrap_or_default().to_string())
            .or_default()
            .insert((r.body_sha256.clone(), r.path.clone()));
        s.total += 1;
    }
    s
}

/// POST a hook every 20 ms to the workers' ingest, alternating, until `stop`; records the
/// 202s in `acked` and counts the other answers. Returns (202s, other answers, the longest
/// time without a 202 while posting).
async fn ingest_loop(
    admins: Vec<String>,
    acked: Acked,
    stop: Arc<AtomicBool>,
    tried: Arc<AtomicUsize>,
) -> (usize, usize, Duration) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let (mut ok, mut refused) = (0, 0);
    let mut last_ok = Instant::now();
    let mut gap = Duration::ZERO;
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let admin = &admins[n as usize % admins.len()];
        let body = format!("{{\"via\":\"ingest\",\"n\":{n}}}");
        n += 1;
        tried.fetch_add(1, Ordering::SeqCst);
        let answer = http
            .post(format!("http://{admin}/v1/hooks/acme/src"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await;
        match answer {
            Ok(r) if r.status().as_u16() == 202 => {
                let text = r.text().await.expect("202 answers a body");
                let v: serde_json::Value = serde_json::from_str(&text).expect("202 answers JSON");
                let id = v["hook_id"].as_u64().expect("hook_id");
                acked
                    .lock()
                    .unwrap()
                    .push((id, sha256_hex(body.as_bytes())));
                ok += 1;
                gap = gap.max(last_ok.elapsed());
                last_ok = Instant::now();
            }
            Ok(r) => {
                assert!(
                    !r.status().is_success(),
                    "a success other than 202: {}",
                    r.status()
                );
                refused += 1;
            }
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (ok, refused, gap.max(last_ok.elapsed()))
}

/// [`ingest_loop`] running in the background over some workers' admin listeners.
struct Ingest {
    /// Its answer: POSTs acknowledged, refused, the longest gap between two 202s.
    handle: tokio::task::JoinHandle<(usize, usize, Duration)>,
    /// Set to stop it.
    stop: Arc<AtomicBool>,
    /// POSTs it tried so far.
    tried: Arc<AtomicUsize>,
}

/// Start [`ingest_loop`] over `workers`, recording acknowledged hooks in `acked`.
fn start_ingest(workers: &[common::WorkerProcess], acked: &Acked) -> Ingest {
    let stop = Arc::new(AtomicBool::new(false));
    let tried = Arc::new(AtomicUsize::new(0));
    let admins: Vec<String> = workers.iter().map(|w| w.admin.clone()).collect();
    let handle = tokio::spawn(ingest_loop(
        admins,
        acked.clone(),
        stop.clone(),
        tried.clone(),
    ));
    Ingest {
        handle,
        stop,
        tried,
    }
}

/// The case: hooks committed and draining to two slow sinks, a producer POSTing to
/// ingest every 20 ms, `SENTINEL FAILOVER` during the drain. Every acknowledged hook (an Ok
/// from the Rust producer, a 202 from ingest) reaches both sinks with its own body; no hook
/// id is acknowledged twice; a `webhook-id` never carries two different deliveries; the
/// duplicates stay within the leader's in-flight window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_sentinel_failover_loses_nothing_acknowledged_and_repeats_no_id() {
    let started = Instant::now();
    let d = RedisSentinel::start_opts(
        3,
        RedisOptions {
            appendonly: true,
            ..RedisOptions::default()
        },
    )
    .expect("sentinel deployment starts");
    let receiver = Receiver::start_with(ReceiverOptions {
        record_bodies: false,
        threads: 4,
    })
    .expect("receiver starts");
    for p in ["a", "b"] {
        receiver.set(p, Behavior::Delay { ms: 20 });
    }
    let mut config: Config = test_config(&d.url());
    config.dispatch.max_inflight = WINDOW;
    config.dispatch.batch = 50;
    config.dispatch.concurrency = 8;
    config.validate().expect("valid config");
    let store = Store::connect_config(&config.redis, &config.instance)
        .await
        .expect("store connects")
        .with_edge(ankusa::sinks::EdgePolicy::from_config(&config));
    store
        .put_source(
            "acme",
            "src",
            &SourceSpec {
                sinks: vec![sink(&receiver, "a"), sink(&receiver, "b")],
            },
        )
        .await
        .expect("source stored");
    let producer = Producer::new(store.clone(), config.commit.max_hook_bytes);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ankusa.toml");
    std::fs::write(&path, toml::to_string(&config).expect("toml")).expect("config written");
    let workers = [
        spawn_worker(&path, &dir, "f1", &[], &[]),
        spawn_worker(&path, &dir, "f2", &[], &[]),
    ];
    let acked: Acked = Arc::default();
    // 1 000 hooks through the Rust producer, before and while the workers drain them.
    let mut refused_rust = 0;
    for batch in 0..20 {
        let hooks: Vec<Hook> = (0..50)
            .map(|i| Hook::new(format!("{{\"via\":\"rust\",\"n\":{}}}", batch * 50 + i)))
            .collect();
        let deadline = Instant::now() + LIVENESS;
        let receipt = loop {
            match producer.commit_many("acme", "src", &hooks).await {
                Ok(r) => break r,
                Err(e) => {
                    refused_rust += 1;
                    assert!(Instant::now() < deadline, "commits keep failing: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let mut a = acked.lock().unwrap();
        for (i, h) in hooks.iter().enumerate() {
            a.push((receipt.first_hook + i as u64, sha256_hex(&h.body)));
        }
    }
    let Ingest {
        handle: ingest,
        stop,
        ..
    } = start_ingest(&workers, &acked);
    // The failover during the drain: a fifth of the rows delivered, most not yet.
    assert!(
        receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 400)
            .await,
        "delivery never got going; logs:\n{}\n{}",
        workers[0].log_text(),
        workers[1].log_text()
    );
    let delivered_before = seen(&receiver).total;
    let old = d.failover().expect("SENTINEL FAILOVER");
    let failover_at = started.elapsed();
    let new = d.wait_failover(old).expect("the replica is promoted");
    assert_ne!(new, old);
    // The producer keeps posting through the switch and the old primary's conversion.
    let posting_until = Instant::now() + Duration::from_secs(14);
    assert!(
        poll_until(LIVENESS, || async {
            Instant::now() >= posting_until
                && d.servers()[old]
                    .cmd(&["INFO", "replication"])
                    .is_ok_and(|i| i.contains("role:slave"))
        })
        .await,
        "the old primary was never converted into a replica"
    );
    stop.store(true, Ordering::SeqCst);
    let (ingest_ok, ingest_refused, gap) = ingest.await.expect("ingest loop");
    let acked = acked.lock().unwrap().clone();
    // No hook id acknowledged twice.
    let mut ids = HashSet::new();
    let repeated: Vec<u64> = acked
        .iter()
        .filter(|(id, _)| !ids.insert(*id))
        .map(|(id, _)| *id)
        .collect();
    assert!(
        repeated.is_empty(),
        "{} hook ids acknowledged twice, e.g. {:?}",
        repeated.len(),
        &repeated[..repeated.len().min(10)]
    );
    // Every acknowledged hook delivered to both sinks, with its own body.
    let want: Vec<(u64, String, String)> = acked
        .iter()
        .flat_map(|(id, sha)| ["a", "b"].map(|p| (*id, sha.clone(), p.to_string())))
        .collect();
    let all = poll_until(LIVENESS * 2, || async {
        let s = seen(&receiver);
        want.iter().all(|k| s.per_delivery.contains_key(k))
    })
    .await;
    let s = seen(&receiver);
    let lost: Vec<&(u64, String, String)> = want
        .iter()
        .filter(|k| !s.per_delivery.contains_key(*k))
        .collect();
    assert!(
        all && lost.is_empty(),
        "{} of {} acknowledged deliveries never arrived (e.g. {:?}); logs:\n{}\n{}",
        lost.len(),
        want.len(),
        &lost[..lost.len().min(5)],
        workers[0].log_text(),
        workers[1].log_text()
    );
    // A webhook-id names one delivery: never two bodies or two sinks.
    let reused: Vec<(&String, &HashSet<(String, String)>)> =
        s.ids.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(
        reused.is_empty(),
        "{} webhook-ids carried different deliveries, e.g. {:?}",
        reused.len(),
        reused.first()
    );
    let duplicates: usize = s.per_delivery.values().map(|n| n - 1).sum();
    assert!(
        duplicates <= WINDOW,
        "{duplicates} duplicate deliveries, over the in-flight window of {WINDOW}"
    );
    println!(
        "graceful sentinel failover: {} hooks acknowledged ({} through ingest, {ingest_refused} \
         ingest POSTs refused, longest gap between 202s {gap:?}; {refused_rust} Rust commits \
         refused and retried), 0 lost, 0 ids repeated, {duplicates} duplicates of {} \
         deliveries (window {WINDOW}); {delivered_before} delivered before the failover at \
         {failover_at:?}; run {:?}",
        acked.len(),
        ingest_ok,
        s.total,
        started.elapsed()
    );
}

/// The soak's loss: a graceful failover, then the new primary dies before the
/// old one — converted into its replica some ten seconds later — finished its first sync,
/// so the sentinels promote the old one back with none of the new primary's writes. A
/// commit is refused while the primary has fewer replicas attached than the sentinels know
/// alive, so nothing acknowledged was held by the new primary alone: every 202 of a
/// producer posting all along is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_primary_lost_before_its_old_primary_synced_loses_nothing_acknowledged() {
    let mut d = RedisSentinel::start_opts(
        3,
        RedisOptions {
            appendonly: true,
            ..RedisOptions::default()
        },
    )
    .expect("sentinel deployment starts");
    let receiver = Receiver::start_with(ReceiverOptions {
        record_bodies: false,
        threads: 2,
    })
    .expect("receiver starts");
    let mut config: Config = test_config(&d.url());
    // The sink refuses during the failovers so that the hooks acknowledged then are still
    // in Redis (a hook delivered at once cannot be lost): no attempt limit, short breaker.
    config.retry.max_attempts = 0;
    config.retry.max_backoff_ms = 500;
    config.dispatch.breaker_open_ms = 500;
    config.dispatch.breaker_max_open_ms = 1_000;
    config.validate().expect("valid config");
    let store = Store::connect_config(&config.redis, &config.instance)
        .await
        .expect("store connects")
        .with_edge(ankusa::sinks::EdgePolicy::from_config(&config));
    store
        .put_source(
            "acme",
            "src",
            &SourceSpec {
                sinks: vec![sink(&receiver, "a")],
            },
        )
        .await
        .expect("source stored");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ankusa.toml");
    std::fs::write(&path, toml::to_string(&config).expect("toml")).expect("config written");
    let workers = [
        spawn_worker(&path, &dir, "g1", &[], &[]),
        spawn_worker(&path, &dir, "g2", &[], &[]),
    ];
    let logs = || format!("{}\n{}", workers[0].log_text(), workers[1].log_text());
    let acked: Acked = Arc::default();
    let Ingest {
        handle: ingest,
        stop,
        tried,
    } = start_ingest(&workers, &acked);
    assert!(
        receiver.wait_until_async(LIVENESS, |r| r.len() >= 20).await,
        "delivery never got going; logs:\n{}",
        logs()
    );
    receiver.set("a", Behavior::Status(503));
    // The graceful failover (the sentinels may refuse while the replica catches up).
    let old = {
        let deadline = Instant::now() + LIVENESS;
        loop {
            match d.failover() {
                Ok(old) => break old,
                Err(e) => {
                    assert!(Instant::now() < deadline, "SENTINEL FAILOVER refused: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    };
    let new = d.wait_failover(old).expect("the replica is promoted");
    let acked_at_promotion = acked.lock().unwrap().len();
    // The moment the old primary is made a replica, before its first sync ends (Redis
    // waits `repl-diskless-sync-delay`, 5 s, before it sends the data), the new one dies.
    assert!(
        poll_until(LIVENESS, || async {
            d.servers()[old]
                .cmd(&["INFO", "replication"])
                .is_ok_and(|i| i.contains("role:slave") && i.contains("master_link_status:down"))
        })
        .await,
        "the old primary was never converted into a replica"
    );
    let acked_at_conversion = acked.lock().unwrap().len();
    // The old primary is connected to the new one but waits for its first sync (`state=`
    // `wait_bgsave`, which `connected_slaves` counts): the producer goes on posting for a
    // while, longer than a lease renewal, before the new primary dies. Nothing it takes
    // then may be acknowledged (a CI run lost 20 of 50 that way).
    assert!(
        poll_until(LIVENESS, || async {
            d.servers()[new]
                .cmd(&["INFO", "replication"])
                .is_ok_and(|i| i.contains("state=wait_bgsave") || i.contains("state=send_bulk"))
        })
        .await,
        "the old primary never connected to the new one"
    );
    let posted = tried.load(Ordering::SeqCst);
    assert!(
        poll_until(LIVENESS, || async {
            tried.load(Ordering::SeqCst) >= posted + 40
        })
        .await,
        "the producer stopped posting"
    );
    let acked_unsynced = acked.lock().unwrap().len() - acked_at_conversion;
    assert!(
        d.servers()[old]
            .cmd(&["INFO", "replication"])
            .is_ok_and(|i| i.contains("master_link_status:down")),
        "the old primary synced before the new one was killed; the case was not played"
    );
    let killed = d.kill_master().expect("kill the new primary");
    let acked_at_kill = acked.lock().unwrap().len();
    assert_eq!(killed, new);
    assert_eq!(
        d.wait_failover(new).expect("the old primary is promoted"),
        old
    );
    d.restart_server(new)
        .expect("the killed primary comes back");
    // Posting goes on until commits are taken again on the old primary.
    let resumed = acked.lock().unwrap().len();
    let acked_list = acked.lock().unwrap().clone();
    let phase = |k: &(u64, String)| -> &'static str {
        match acked_list.iter().position(|a| a == k).unwrap_or(usize::MAX) {
            i if i < acked_at_promotion => "before the promotion",
            i if i < acked_at_conversion => "on the new primary before the old one was converted",
            i if i < acked_at_kill => "beside the old primary unsynced",
            i if i < resumed => "between the kill and the restart",
            _ => "after the restart",
        }
    };
    assert!(
        poll_until(LIVENESS, || async {
            acked.lock().unwrap().len() >= resumed + 20
        })
        .await,
        "commits were never taken again; logs:\n{}",
        logs()
    );
    stop.store(true, Ordering::SeqCst);
    let (ok, refused, gap) = ingest.await.expect("ingest loop");
    receiver.set("a", Behavior::Ok);
    let acked = acked.lock().unwrap().clone();
    let want: HashSet<(u64, String)> = acked.iter().cloned().collect();
    let delivered = |receiver: &Receiver| -> HashSet<(u64, String)> {
        receiver
            .requests()
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .map(|r| {
                let id = r.header("ankusa-hook-id").and_then(|h| h.parse().ok());
                (id.unwrap_or(0), r.body_sha256.clone())
            })
            .collect()
    };
    let all = poll_until(LIVENESS * 2, || async {
        want.is_subset(&delivered(&receiver))
    })
    .await;
    let got = delivered(&receiver);
    let lost: Vec<&(u64, String)> = want.iter().filter(|k| !got.contains(*k)).collect();
    let mut by_phase: std::collections::BTreeMap<&str, usize> = Default::default();
    for k in &lost {
        *by_phase.entry(phase(k)).or_default() += 1;
    }
    assert!(
        all && lost.is_empty(),
        "{} of {} acknowledged hooks never arrived (e.g. {:?}; acknowledged {:?}); logs:\n{}",
        lost.len(),
        want.len(),
        &lost[..lost.len().min(5)],
        by_phase,
        logs()
    );
    assert_eq!(
        acked_unsynced, 0,
        "commits were acknowledged while the only replica was unsynced"
    );
    println!(
        "failover then the new primary lost before the old one synced: {ok} ingest POSTs \
         acknowledged, {refused} refused (longest gap between 202s {gap:?}), 0 lost"
    );
}

/// `webhook-id` is `msg_<message space>_<row id>`: two instances sharing a receiver send
/// different ids for their row `1.0`, a FLUSHALL gives the next row `1.0` yet another, and
/// every retry of one row carries the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_ids_differ_between_instances_and_across_a_flushall_and_stay_per_row() {
    let env = Env::new().await;
    let other_config = {
        let mut c = env.config.clone();
        c.instance = "other".into();
        c
    };
    let other = Store::connect(&env.redis.url(), "other", 5_000)
        .await
        .expect("store connects")
        .with_edge(ankusa::sinks::EdgePolicy::from_config(&env.config));
    // The first attempt of each instance's row is answered 500: its retry must carry its id.
    env.receiver.set(
        "one",
        Behavior::Sequence(vec![ankusa::testkit::Reply::status(500)]),
    );
    env.http_source("acme", "s", &["one"]).await;
    other
        .put_source(
            "acme",
            "s",
            &SourceSpec {
                sinks: vec![env.http_sink("two")],
            },
        )
        .await
        .expect("source stored");
    let a = env.commit("acme", "s", "{\"n\":1}").await;
    let b = Producer::new(other.clone(), env.config.commit.max_hook_bytes)
        .commit("acme", "s", Hook::new("{\"n\":2}"))
        .await
        .expect("commit")
        .first_hook;
    assert_eq!((a, b), (1, 1), "both instances' first hook is 1");
    let one = env.worker().await;
    let two = Worker::start(other_config, Some("other"))
        .await
        .expect("worker starts");
    env.drain(&one).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().any(|r| r.path == "two"))
            .await,
        "the other instance delivered"
    );
    let ids = |path: &str| -> Vec<String> {
        env.receiver
            .requests_for(path)
            .iter()
            .map(|r| r.header("webhook-id").unwrap_or_default().to_string())
            .collect()
    };
    let first = ids("one");
    assert_eq!(first.len(), 2, "one 500 and its retry: {first:?}");
    assert_eq!(first[0], first[1], "a retry keeps its webhook-id");
    assert!(
        first[0].starts_with("msg_") && first[0].ends_with("_1.0"),
        "{first:?}"
    );
    let second = ids("two");
    assert_ne!(first[0], second[0], "two instances, one receiver");
    // Wipe Redis: the next hook 1 of the instance gets a webhook-id of its own.
    env.redis_cmd(&["FLUSHALL"]);
    env.http_source("acme", "s", &["three"]).await;
    assert_eq!(env.commit("acme", "s", "{\"n\":3}").await, 1);
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().any(|r| r.path == "three"))
            .await,
        "delivered after the FLUSHALL"
    );
    let third = ids("three");
    assert!(third[0].ends_with("_1.0"), "{third:?}");
    assert_ne!(first[0], third[0], "a FLUSHALL does not bring an id back");
    one.shutdown().await;
    two.shutdown().await;
}

/// a sentinel that never learns the primary the others name (here one that
/// monitors another deployment under the same service name, so it names that deployment's
/// master for good) holds leadership back for the grace only
/// (`ankusa::store::STALE_SENTINEL_GRACE`): the worker then leads on the primary the others
/// name and delivers. Before, no term ever started while the sentinels disagreed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_naming_another_primary_for_good_delays_leadership_by_the_grace_only() {
    let d = RedisSentinel::start_with(2).expect("sentinel deployment starts");
    let stray = RedisSentinel::start_with(1).expect("a second deployment starts");
    let stray_url = stray.url();
    let stray_sentinel = stray_url
        .trim_start_matches("redis-sentinel://")
        .split('?')
        .next()
        .expect("sentinel address");
    let url = format!("{}&node={stray_sentinel}", d.url());
    let receiver = Receiver::start().expect("receiver starts");
    let (config, store) = store_with_source(&url, &receiver).await;
    let producer = Producer::new(store.clone(), config.commit.max_hook_bytes);
    let hooks: Vec<Hook> = (0..5)
        .map(|i| Hook::new(format!("{{\"n\":{i}}}")))
        .collect();
    producer
        .commit_many("acme", "src", &hooks)
        .await
        .expect("committed");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ankusa.toml");
    std::fs::write(&path, toml::to_string(&config).expect("toml")).expect("config written");
    let worker = spawn_worker(&path, &dir, "w", &[], &[]);
    let bound = LIVENESS + ankusa::store::STALE_SENTINEL_GRACE;
    assert!(
        poll_until(bound, || async { receiver.count_for("a") >= 5 }).await,
        "{} of 5 delivered within {bound:?} beside a stray sentinel:\n{}",
        receiver.count_for("a"),
        worker.log_text()
    );
}

/// A master the sentinels do not name — here their replica, promoted by hand
/// (`REPLICAOF NO ONE`) while they still list it as a replica — refuses commits once a
/// worker's watch of the sentinels has seen it (`not_primary`, nothing written), while the
/// primary they name keeps taking them; when the sentinels make it a replica again, the
/// resync leaves no mark behind. Without it, a producer still connected to such a server
/// (redis-py's sentinel pool keeps its connections) had its commits acknowledged and then
/// thrown away by the resync (the fault soak lost 1 884 of 11 874 acknowledged deliveries
/// to an old primary restarted with its own data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_the_sentinels_do_not_name_refuses_commits_until_it_is_a_replica() {
    let d = RedisSentinel::start().expect("sentinel deployment starts");
    let receiver = Receiver::start().expect("receiver starts");
    let (config, store) = store_with_source(&d.url(), &receiver).await;
    let producer = Producer::new(store.clone(), config.commit.max_hook_bytes);
    // Acknowledged once the replica has it (`WAIT`): the source is on both servers.
    producer
        .commit("acme", "src", Hook::new("{\"n\":0}"))
        .await
        .expect("committed on the primary");
    let primary = d.master().expect("the sentinels name a master");
    let rogue = 1 - primary;
    d.servers()[rogue]
        .cmd(&["REPLICAOF", "NO", "ONE"])
        .expect("the replica is promoted by hand");
    // A producer on the rogue server's own address, as a pool that stays where it connected.
    let rogue_url = format!("redis://127.0.0.1:{}", d.servers()[rogue].port());
    let on_rogue = Producer::new(
        Store::connect(&rogue_url, &config.instance, 2_000)
            .await
            .expect("the rogue server answers"),
        config.commit.max_hook_bytes,
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _switches = store.watch_primary(shutdown.clone());
    let named = format!("127.0.0.1:{}", d.servers()[primary].port());
    let refused = Arc::new(Mutex::new(None));
    assert!(
        poll_until(LIVENESS, || {
            let (on_rogue, refused) = (on_rogue.clone(), refused.clone());
            async move {
                match on_rogue.commit("acme", "src", Hook::new("{\"n\":1}")).await {
                    Err(e @ ankusa::store::CommitError::NotPrimary { .. }) => {
                        *refused.lock().unwrap() = Some(e);
                        true
                    }
                    _ => false,
                }
            }
        })
        .await,
        "the rogue master never refused a commit"
    );
    let refused = refused.lock().unwrap().take().expect("the refusal");
    assert!(
        matches!(&refused, ankusa::store::CommitError::NotPrimary { named: n } if *n == named),
        "{refused:?} should name the primary {named}"
    );
    assert!(
        refused.to_string().contains("not the primary") && refused.to_string().contains(&named),
        "{refused}"
    );
    producer
        .commit("acme", "src", Hook::new("{\"n\":2}"))
        .await
        .expect("the primary the sentinels name still takes commits");
    // The sentinels convert the rogue server back and it resyncs: the mark went with it.
    // (They look at a replica every 10 s and wait 8 s after they saw its role change.)
    let replication = store.keyspace().replication();
    assert!(
        poll_until(2 * LIVENESS, || async {
            let rogue = &d.servers()[rogue];
            rogue
                .cmd(&["INFO", "replication"])
                .is_ok_and(|i| i.contains("role:slave") && i.contains("master_link_status:up"))
                && rogue
                    .cmd(&["HGET", &replication, "deposed"])
                    .is_ok_and(|v| matches!(v.trim(), "" | "(nil)"))
        })
        .await,
        "the sentinels never made the rogue server a replica, or the mark survived the \
         resync: {:?} / deposed {:?}",
        d.servers()[rogue].cmd(&["INFO", "replication"]),
        d.servers()[rogue].cmd(&["HGET", &replication, "deposed"]),
    );
    producer
        .commit("acme", "src", Hook::new("{\"n\":3}"))
        .await
        .expect("the primary still takes commits");
    shutdown.cancel();
}
