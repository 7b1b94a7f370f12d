//! Partitions in one Redis against a real redis-server and receiver: tenants
//! routed by CRC-32, one lease per partition spread over the workers, a killed worker's
//! partitions moving alone, a joining worker getting one by hand-over, the recorded
//! partition count, ordered lanes and fairness with P = 4, and P = 1 data committed by the
//! binary before partitions (its commit script, tests/fixtures/commit-before-partitions.lua).

use crate::common;

use ankusa::config::{Config, TenantLimits};
use ankusa::keyspace::partition_of;
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::testkit::Behavior;
use ankusa::{Error, Hook, Worker};
use common::*;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const P: u32 = 4;

fn four(c: &mut Config) {
    c.partitions = P;
}

/// Await a synchronous `cond` for at most `bound` with the shared poll
/// ([`common::procs::poll_until`]); whether it held.
async fn eventually(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    common::procs::poll_until(bound, || std::future::ready(cond())).await
}

async fn start(env: &Env, name: &str) -> Worker {
    Worker::start(env.config.clone(), Some(name))
        .await
        .expect("worker starts")
}

/// Each partition's fencing epoch, from its lease in Redis (every partition led).
async fn epochs(env: &Env) -> Vec<u64> {
    spread::epochs(&spread::leases(&env.store).await.expect("leases read"))
}

/// Every partition led exactly once, each worker leading `lo..=hi` of them (by the workers'
/// own view).
fn spread_is(workers: &[&Worker], lo: usize, hi: usize) -> bool {
    let led: Vec<Vec<u32>> = workers.iter().map(|w| w.led_partitions()).collect();
    spread::spread_is(&led, P, lo, hi)
}

/// Distinct `(path, hook id)` pairs answered 2xx, and all 2xx answers.
fn delivered(env: &Env) -> (usize, usize) {
    let mut seen = HashSet::new();
    let mut all = 0;
    for r in env.receiver.requests() {
        if (200..300).contains(&r.status) {
            all += 1;
            seen.insert((
                r.path.clone(),
                r.header("ankusa-hook-id").map(str::to_string),
            ));
        }
    }
    (seen.len(), all)
}

fn tenants() -> Vec<String> {
    spread::tenants_covering(P, 12)
}

async fn commit_round(env: &Env, tenants: &[String], n: usize) {
    for t in tenants {
        env.commit_n(t, "s", n).await;
    }
}

#[test]
fn tenants_are_routed_by_crc32_of_their_id() {
    // zlib.crc32(b"tenant-0") % 4 etc., computed by Python.
    let want = [
        ("tenant-0", 0x8ce8_3969u32),
        ("acme", 0x05c4_ba3e),
        ("123456789", 0xcbf4_3926),
    ];
    for (t, crc) in want {
        assert_eq!(partition_of(t, P), crc % P, "{t}");
    }
    let parts: HashSet<u32> = tenants().iter().map(|t| partition_of(t, P)).collect();
    assert_eq!(
        parts.len(),
        P as usize,
        "the 12 test tenants cover every partition"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_share_four_partitions_and_a_killed_one_moves_only_its_own() {
    let env = Env::tuned(four).await;
    let tenants = tenants();
    for t in &tenants {
        let (a, b) = (format!("{t}-a"), format!("{t}-b"));
        env.http_source(t, "s", &[&a, &b]).await;
    }
    // Sources and hooks live in their tenant's partition.
    for t in &tenants {
        let n = partition_of(t, P);
        let key = env.part_key(n, &format!("source:{t}:s"));
        assert_eq!(env.redis_cmd(&["EXISTS", &key]), "1", "{key}");
    }
    commit_round(&env, &tenants, 200).await;
    let rows = tenants.len() * 200 * 2;

    let w: Vec<Worker> = vec![
        start(&env, "w0").await,
        start(&env, "w1").await,
        start(&env, "w2").await,
    ];
    let all: Vec<&Worker> = w.iter().collect();
    assert!(
        eventually(LIVENESS, || spread_is(&all, 1, 2)).await,
        "each of 3 workers leads 1 or 2 of 4 partitions: {:?}",
        all.iter().map(|w| w.led_partitions()).collect::<Vec<_>>()
    );
    assert!(
        eventually(LIVENESS, || delivered(&env).0 >= rows).await,
        "all {rows} rows delivered: {:?}",
        delivered(&env)
    );

    // Under load, kill one worker: only its partitions get a new epoch.
    commit_round(&env, &tenants, 200).await;
    let before = epochs(&env).await;
    let dead = &w[0];
    let its: Vec<u32> = dead.led_partitions();
    dead.abort();
    let alive: Vec<&Worker> = vec![&w[1], &w[2]];
    assert!(
        eventually(LIVENESS, || spread_is(&alive, 1, 2)).await,
        "the survivors lead every partition: {:?}",
        alive.iter().map(|w| w.led_partitions()).collect::<Vec<_>>()
    );
    spread::assert_only_moved(&before, &epochs(&env).await, &its);
    assert!(
        eventually(LIVENESS, || delivered(&env).0 >= 2 * rows).await,
        "0 lost after the kill: {:?}",
        delivered(&env)
    );

    // A fourth worker (third live one) joins: a partition is handed over to it, with no
    // duplicate among the rows committed meanwhile.
    for w in &alive {
        w.tick().await.expect("idle");
    }
    let (_, answered) = delivered(&env);
    let joiner = start(&env, "w3").await;
    commit_round(&env, &tenants, 100).await;
    let three: Vec<&Worker> = vec![&w[1], &w[2], &joiner];
    assert!(
        eventually(LIVENESS, || spread_is(&three, 1, 2)).await,
        "the joiner got a partition: {:?}",
        three.iter().map(|w| w.led_partitions()).collect::<Vec<_>>()
    );
    let total = 2 * rows + tenants.len() * 100 * 2;
    assert!(
        eventually(LIVENESS, || delivered(&env).0 >= total).await,
        "all delivered after the hand-over: {:?}",
        delivered(&env)
    );
    joiner.tick().await.expect("idle");
    let (distinct, all_ok) = delivered(&env);
    assert_eq!(distinct, total);
    assert_eq!(
        all_ok - answered,
        tenants.len() * 100 * 2,
        "no duplicate while the partition was handed over"
    );
    let totals = env.store.totals().await.expect("totals");
    assert_eq!(totals.committed as usize, tenants.len() * 500);
    for w in [&w[1], &w[2], &joiner] {
        w.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_ids_and_webhook_ids_are_unique_across_partitions() {
    let env = Env::tuned(four).await;
    // One tenant per partition, each with its own first hooks.
    let mut by_partition: HashMap<u32, String> = HashMap::new();
    for t in tenants() {
        by_partition.entry(partition_of(&t, P)).or_insert(t);
    }
    let mut ids = HashMap::new();
    for (n, t) in &by_partition {
        env.http_source(t, "s", &["one"]).await;
        let got = env.commit_n(t, "s", 3).await;
        // Partition N's ids start at N * 2^40 + 1; partition 0's are 1, 2, 3 as before.
        let base = u64::from(*n) << 40;
        assert_eq!(got, vec![base + 1, base + 2, base + 3], "partition {n}");
        ids.insert(t.clone(), got);
    }
    let w = start(&env, "w").await;
    assert!(
        eventually(LIVENESS, || delivered(&env).0 >= 3 * by_partition.len()).await,
        "every hook delivered: {:?}",
        delivered(&env)
    );
    w.tick().await.expect("idle");
    let mut webhook_ids = HashSet::new();
    for r in env.receiver.requests_for("one") {
        let tenant = r.header("ankusa-tenant").expect("tenant").to_string();
        let hook: u64 = r
            .header("ankusa-hook-id")
            .expect("hook id")
            .parse()
            .expect("u64");
        assert!(ids[&tenant].contains(&hook), "{tenant} got hook {hook}");
        let id = r.header("webhook-id").expect("webhook-id").to_string();
        // `msg_<message space>_<row>`: the row part is the hook's first sink's row.
        assert!(
            id.starts_with("msg_") && id.ends_with(&format!("_{hook}.0")),
            "webhook-id {id} names row {hook}.0"
        );
        webhook_ids.insert(id);
    }
    assert_eq!(
        webhook_ids.len(),
        3 * by_partition.len(),
        "no webhook-id seen twice"
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_another_partition_count_is_refused_with_the_way_to_change_it() {
    let env = Env::tuned(four).await;
    let first = start(&env, "w").await;
    assert_eq!(
        env.redis_cmd(&["GET", &env.instance_key("partitions")]),
        P.to_string()
    );
    let mut other = env.config.clone();
    other.partitions = 2;
    match Worker::start(other, Some("x")).await {
        Err(e @ Error::PartitionsMismatch { .. }) => {
            let Error::PartitionsMismatch {
                configured,
                recorded,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((*configured, *recorded), (2, P));
            assert!(e.to_string().contains("docs/running.md"), "{e}");
            assert_eq!(e.exit_code(), 2);
        }
        other => panic!("expected PartitionsMismatch, got {other:?}"),
    }
    first.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_keep_commit_order_in_every_partition() {
    let env = Env::tuned(four).await;
    let tenants: Vec<String> = (0..8).map(|i| format!("lt-{i}")).collect();
    for t in &tenants {
        env.receiver.set(
            t,
            Behavior::FailFraction {
                status: 500,
                fraction: 0.2,
                seed: 7,
            },
        );
        let spec = SourceSpec {
            sinks: vec![SinkEntry {
                ordered: true,
                key: Some("json:/lane".into()),
                ..env.http_sink(t)
            }],
        };
        env.store.put_source(t, "o", &spec).await.unwrap();
    }
    // (tenant, hook id) -> (lane, n)
    let mut hooks: HashMap<(String, u64), (String, usize)> = HashMap::new();
    for n in 0..10 {
        for t in &tenants {
            let batch: Vec<Hook> = (0..10)
                .map(|l| {
                    Hook::new(serde_json::json!({"lane": format!("k{l}"), "n": n}).to_string())
                })
                .collect();
            let r = env.producer.commit_many(t, "o", &batch).await.unwrap();
            for l in 0..10u64 {
                hooks.insert((t.clone(), r.first_hook + l), (format!("k{l}"), n));
            }
        }
    }
    let a = start(&env, "a").await;
    let b = start(&env, "b").await;
    let total = hooks.len();
    let ok = env.receiver.wait_until_async(LIVENESS * 2, |reqs| {
        reqs.iter()
            .filter(|r| r.status == 200)
            .filter_map(|r| Some((r.path.clone(), r.header("ankusa-hook-id")?.to_string())))
            .collect::<HashSet<_>>()
            .len()
            >= total
    });
    assert!(ok.await, "all {total} hooks delivered");
    for t in &tenants {
        let mut seen = HashSet::new();
        let mut order: HashMap<String, Vec<usize>> = HashMap::new();
        for r in env.receiver.requests_for(t) {
            if r.status != 200 {
                continue;
            }
            let id: u64 = r.header("ankusa-hook-id").unwrap().parse().unwrap();
            if seen.insert(id) {
                let (lane, n) = &hooks[&(t.clone(), id)];
                order.entry(lane.clone()).or_default().push(*n);
            }
        }
        assert_eq!(order.len(), 10, "{t}");
        for (lane, ns) in &order {
            assert_eq!(
                ns,
                &(0..10).collect::<Vec<_>>(),
                "{t} lane {lane} out of order"
            );
        }
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_tenant_holds_only_its_window_while_one_worker_leads_four_partitions() {
    let env = Env::tuned(|c| {
        four(c);
        c.dispatch.tenants.insert(
            "default".into(),
            TenantLimits {
                max_inflight: Some(40),
                max_inflight_bytes: None,
                concurrency: Some(16),
                weight: None,
            },
        );
        c.dispatch.attempt_timeout_ms = 30_000;
    })
    .await;
    env.receiver.set("hang", Behavior::Hang);
    env.http_source("stuck", "s", &["hang"]).await;
    env.commit_n("stuck", "s", 300).await;
    // Others in every partition.
    let others: Vec<String> = tenants();
    for t in &others {
        env.http_source(t, "s", &[t]).await;
        env.commit_n(t, "s", 50).await;
    }
    let worker = start(&env, "solo").await;
    assert!(
        eventually(LIVENESS, || worker.led_partitions().len() == P as usize).await,
        "alone, the worker leads every partition"
    );
    let want = others.len() * 50;
    let ok = env
        .receiver
        .wait_until_async(LIVENESS, |r| {
            r.iter().filter(|r| r.status == 200).count() >= want
        })
        .await;
    assert!(
        ok,
        "the other tenants' {want} rows are delivered while one hangs"
    );
    let n = partition_of("stuck", P);
    let claimed = env.redis_cmd(&["ZRANGE", &env.part_key(n, "claimed"), "0", "-1"]);
    let stuck = claimed.lines().filter(|m| m.starts_with("stuck/")).count();
    assert!(
        stuck <= 40,
        "the hanging tenant holds at most its window: {stuck}"
    );
    assert!(
        env.receiver.count_for("hang") <= 16,
        "and at most its concurrency"
    );
    worker.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_concurrency_is_shared_by_the_partitions_it_leads() {
    let env = Env::tuned(|c| {
        four(c);
        c.dispatch.concurrency = 6;
        c.dispatch.sink_concurrency = 6;
    })
    .await;
    env.receiver.set("slow", Behavior::Delay { ms: 30 });
    let tenants = tenants();
    for t in &tenants {
        env.http_source(t, "s", &["slow"]).await;
        env.commit_n(t, "s", 20).await;
    }
    let worker = start(&env, "solo").await;
    assert!(
        eventually(LIVENESS, || worker.led_partitions().len() == P as usize).await,
        "alone, the worker leads every partition"
    );
    // Not tick() alone: a row whose attempt failed (a 2 s attempt timeout is reachable on a
    // loaded 2-core machine) waits out its backoff, which tick() counts as idle.
    env.drain(&worker).await;
    let got = procs::receipts(&env);
    assert_eq!(got.per_row.len(), tenants.len() * 20, "every row delivered");
    if got.duplicates() > 0 || env.receiver.count_for("slow") > got.total {
        eprintln!(
            "{} retried or repeated attempts (a loaded machine)",
            env.receiver.count_for("slow") - got.per_row.len()
        );
    }
    let peak = env.receiver.max_concurrency("slow");
    assert!(
        peak <= 6,
        "4 partitions' sessions together stay under dispatch.concurrency: {peak}"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_dead_letters_and_pressure_answer_for_every_partition() {
    let env = Env::tuned(four).await;
    env.receiver.set("gone", Behavior::Status(410));
    let tenants = tenants();
    for t in &tenants {
        env.http_source(t, "s", &["gone"]).await;
        env.commit_n(t, "s", 5).await;
    }
    // No worker: pressure names a partition without a live leader.
    match ankusa::ops::pressure(&env.store).await {
        Err(Error::Unavailable(why)) => assert!(why.contains("partition"), "{why}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    let worker = start(&env, "solo").await;
    assert!(
        eventually(LIVENESS, || worker.led_partitions().len() == P as usize).await,
        "alone, the worker leads every partition"
    );
    worker.tick().await.expect("idle");
    let totals = env.store.totals().await.expect("totals");
    assert_eq!(totals.committed as usize, tenants.len() * 5);
    assert_eq!(totals.dead_lettered as usize, tenants.len() * 5);
    // Dead letters of every partition are listed, shown and replayed from one call.
    let page = ankusa::dlq::browse(&env.store, &Default::default(), 10_000)
        .await
        .expect("browse");
    assert_eq!(page.dead_letters.len(), tenants.len() * 5);
    let seen: HashSet<String> = page.dead_letters.iter().map(|d| d.tenant.clone()).collect();
    assert_eq!(seen.len(), tenants.len());
    for d in page.dead_letters.iter().take(3) {
        let shown = ankusa::dlq::show(&env.store, &d.tenant, &d.id)
            .await
            .expect("shown from its tenant's partition");
        assert!(shown.hook_body.is_some());
    }
    // Each partition's leader publishes its window about every second.
    common::procs::eventually("every partition has a leader", LIVENESS, || async {
        ankusa::ops::pressure(&env.store)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    env.receiver.set("gone", Behavior::Ok);
    let opts = ankusa::dlq::ReplayOptions {
        pace: false,
        ..Default::default()
    };
    let report = ankusa::dlq::replay(&env.store, &Default::default(), &opts, |_| {})
        .await
        .expect("replay");
    assert_eq!(report.replayed as usize, tenants.len() * 5);
    worker.tick().await.expect("idle");
    let totals = env.store.totals().await.expect("totals");
    assert_eq!(totals.delivered as usize, tenants.len() * 5);
    worker.shutdown().await;
}

/// `ankusa <args>` against `env`'s Redis and instance with `ANKUSA_PARTITIONS=<p>`.
fn cli(env: &Env, partitions: u32, args: &[&str], stdin: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args([
            "--redis-url",
            &env.redis.url(),
            "--instance",
            &env.config.instance,
        ])
        .args(args)
        .env("ANKUSA_PARTITIONS", partitions.to_string())
        .env_remove("ANKUSA_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ankusa runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("stdin written");
    child.wait_with_output().expect("ankusa ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_routes_by_tenant_and_refuses_another_partition_count() {
    let env = Env::tuned(four).await;
    let worker = start(&env, "w").await;
    let tenant = "tenant-3";
    env.http_source(tenant, "s", &["in"]).await;
    let out = cli(&env, P, &["produce", tenant, "s"], b"{\"x\":1}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    worker.tick().await.expect("idle");
    assert_eq!(env.receiver.count_for("in"), 1);
    let n = partition_of(tenant, P);
    let stats = env.redis_cmd(&["HGET", &env.part_key(n, "stats"), "committed"]);
    assert_eq!(stats, "1", "the hook went to its tenant's partition");
    let out = cli(&env, 2, &["stats"], b"");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("partitions = 4"), "{err}");
    worker.shutdown().await;
}

/// The commit script of the last ankusa before partitions (the fixture's header says which
/// commit), byte for byte after that header.
const PRE_PARTITION_COMMIT: &str = include_str!("../fixtures/commit-before-partitions.lua");

/// `tenant/source` with one http sink per path, stored as the binary before partitions stored
/// it (its `Store::put_source`, reproduced minimally: HSET spec, modules, version 1 on
/// `source:<tenant>:<source>`, SADD `<tenant>/<source>` to `sources`; the spec's JSON is
/// unchanged since).
fn old_put_source(env: &Env, tenant: &str, source: &str, paths: &[&str]) {
    let spec = SourceSpec {
        sinks: paths.iter().map(|p| env.http_sink(p)).collect(),
    };
    let json = serde_json::to_string(&spec).expect("spec JSON");
    let key = env.key(&format!("source:{tenant}:{source}"));
    let modules = vec!["http"; paths.len()].join(",");
    env.redis_cmd(&[
        "HSET", &key, "spec", &json, "modules", &modules, "version", "1",
    ]);
    env.redis_cmd(&["SADD", &env.key("sources"), &format!("{tenant}/{source}")]);
}

/// `n` hooks committed to `tenant/source` by EVAL of the pre-partition script, with the
/// argument shape of that binary's `Store::commit` (reproduced minimally: KEYS the
/// partition's lease key; ARGV the prefix, tenant, source, max_hook_bytes, n, then body and
/// headers per hook). The hook ids.
fn old_commit(env: &Env, tenant: &str, source: &str, n: usize) -> Vec<u64> {
    let max = env.config.commit.max_hook_bytes.to_string();
    let count = n.to_string();
    let bodies: Vec<String> = (0..n)
        .map(|i| format!("{{\"old\":true,\"tenant\":\"{tenant}\",\"n\":{i}}}"))
        .collect();
    let (lease, prefix) = (env.key("lease"), env.key(""));
    let mut args = vec![
        "EVAL",
        PRE_PARTITION_COMMIT,
        "1",
        &lease,
        &prefix,
        tenant,
        source,
        &max,
        &count,
    ];
    for b in &bodies {
        args.extend([b.as_str(), ""]);
    }
    let reply = env.redis_cmd(&args);
    let fields: Vec<&str> = reply.lines().collect();
    assert_eq!(fields.first(), Some(&"ok"), "old commit: {reply}");
    let first: u64 = fields
        .get(1)
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("old commit's first hook id: {reply}"));
    (first..first + n as u64).collect()
}

/// P = 1 data from before partitions: sources stored and hooks committed exactly
/// as the binary before partitions did, on a Redis that has no partition count yet; this
/// build's worker, with the default `partitions = 1`, records the count and delivers every
/// row once, and the new producer's commits continue the old hook ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p1_data_committed_by_the_binary_before_partitions_is_delivered_once() {
    let env = Env::new().await;
    assert_eq!(env.config.partitions, 1);
    old_put_source(&env, "acme", "orders", &["acme-a", "acme-b"]);
    old_put_source(&env, "globex", "events", &["globex"]);
    let mut old = Vec::new();
    for _ in 0..3 {
        old.extend(old_commit(&env, "acme", "orders", 50));
        old.extend(old_commit(&env, "globex", "events", 50));
    }
    assert_eq!(old.first(), Some(&1), "ids start at 1 as before partitions");
    assert_eq!(
        env.redis_cmd(&["EXISTS", &env.instance_key("partitions")]),
        "0",
        "the old binary recorded no partition count"
    );
    let acme: HashSet<u64> = old.chunks(50).step_by(2).flatten().copied().collect();

    let worker = start(&env, "new").await;
    env.drain(&worker).await;
    assert_eq!(
        env.redis_cmd(&["GET", &env.instance_key("partitions")]),
        "1",
        "recorded at first start"
    );
    // The new producer on the same data: the ids go on from the old ones.
    let new = env.commit_n("acme", "orders", 20).await;
    assert_eq!(new.first(), Some(&(old.len() as u64 + 1)));
    env.drain(&worker).await;

    let rows: Vec<String> = old
        .iter()
        .chain(&new)
        .flat_map(|h| {
            let sinks = if acme.contains(h) || new.contains(h) {
                2
            } else {
                1
            };
            (0..sinks).map(move |s| format!("{h}.{s}"))
        })
        .collect();
    let got = procs::receipts(&env);
    for r in &rows {
        assert_eq!(got.per_row.get(r), Some(&1), "row {r} delivered once");
    }
    assert_eq!(got.per_row.len(), rows.len(), "no other row");
    assert_eq!(got.total, rows.len(), "no duplicate");
    let t = env.store.totals().await.expect("totals");
    assert_eq!(t.committed as usize, old.len() + new.len(), "{t:?}");
    assert_eq!(t.delivered as usize, rows.len(), "{t:?}");
    assert_eq!((t.dead_lettered, t.dropped), (0, 0), "{t:?}");
    worker.shutdown().await;
}

/// the partitions one worker leads share its byte window, also while their claims
/// are in flight together. Four tenants, one per partition, each 100 hooks of 64 KiB to a
/// sink that never answers, `max_inflight_bytes` = 1 MiB: the bytes the worker holds claimed
/// never pass 1 MiB plus one hook, over several windows' worth of attempts. Before, each
/// partition's claim was given the whole room left (1.5–3.1× the window held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_partitions_led_by_one_worker_never_hold_more_than_one_byte_window() {
    const HOOK: u64 = 64 << 10;
    const WINDOW: u64 = 1 << 20;
    let env = Env::tuned(|c| {
        four(c);
        c.dispatch.max_inflight_bytes = WINDOW;
        c.dispatch.attempt_timeout_ms = 300;
        c.dispatch.breaker_failures = 0;
    })
    .await;
    env.receiver.set("/hang", Behavior::Hang);
    let tenants = spread::tenants_covering(P, P as usize);
    let body = vec![b'x'; HOOK as usize];
    for t in &tenants {
        env.http_source(t, "big", &["/hang"]).await;
        let hooks: Vec<Hook> = (0..100).map(|_| Hook::new(body.clone())).collect();
        env.producer.commit_many(t, "big", &hooks).await.unwrap();
    }
    let worker = start(&env, "w").await;
    let state = worker.watch_state();
    let mut max_held = 0u64;
    let deadline = std::time::Instant::now() + LIVENESS;
    // Three windows' worth of attempts (16 rows each) have timed out and been claimed again.
    while env.receiver.requests_for("/hang").len() < 48 {
        assert!(std::time::Instant::now() < deadline, "attempts stalled");
        max_held = max_held.max(state.borrow().claimed_bytes);
        tokio::time::sleep(Duration::from_millis(2)).await; // a sample, not a wait
    }
    assert!(max_held >= HOOK, "rows were claimed at all");
    assert!(
        max_held <= WINDOW + HOOK,
        "the four partitions held {max_held} bytes, over the window of {WINDOW}"
    );
    worker.shutdown().await;
}
