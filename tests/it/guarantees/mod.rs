//! Exactly what the spec promises, under faults: one test per point, each
//! reproducing its scenario at CI size against a real redis-server and a real receiver,
//! with the fault injected for real, and asserting exact counts.

mod bad_input;
use crate::common;
mod full_redis;
use crate::common::proxy;

use ankusa::config::Config;
use ankusa::testkit::{Behavior, Reply};
use ankusa::Worker;
use common::procs::receipts;
use common::*;
use proxy::Proxy;
use std::collections::BTreeMap;
use std::time::Duration;

/// A worker whose Redis traffic goes through a fault-injecting proxy.
async fn worker_behind(env: &Env, tune: impl FnOnce(&mut Config)) -> (Proxy, Worker) {
    let upstream = ([127, 0, 0, 1], env.redis.port()).into();
    let proxy = Proxy::start(upstream).await;
    let mut cfg = env.config.clone();
    cfg.redis.url = proxy.url();
    tune(&mut cfg);
    cfg.validate().expect("test config is valid");
    let worker = Worker::start(cfg, Some("test"))
        .await
        .expect("worker starts");
    (proxy, worker)
}

/// Wait until every row is finished (delivered, dead-lettered or dropped), reading Redis
/// directly (`tick()` over the test's own connection, not the worker's faulty one), including
/// rows waiting out a backoff. Panics after [`LIVENESS`].
async fn drain_direct(env: &Env, worker: &Worker) {
    let deadline = std::time::Instant::now() + LIVENESS;
    let mut state = worker.watch_state();
    loop {
        common::procs::wait_idle(env, LIVENESS).await;
        let left = env.pending_rows();
        if left == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} rows still pending after {LIVENESS:?}"
        );
        // A row waits out its backoff: the scheduler's state moves when it is claimed again.
        let _ = tokio::time::timeout(Duration::from_millis(100), state.changed()).await;
    }
}

/// The SHA of `lua/settle.lua` as called (`EVALSHA <sha>`).
fn settle_sha() -> String {
    ankusa::store::Scripts::default()
        .settle
        .script
        .sha1()
        .to_string()
}

/// Per row id, the `ankusa-attempt` numbers and statuses the receiver saw, in arrival order.
fn attempts_seen(env: &Env) -> BTreeMap<String, Vec<(u32, u16)>> {
    let mut by_row: BTreeMap<String, Vec<(u32, u16)>> = BTreeMap::new();
    for r in env.receiver.requests() {
        let row = r
            .header("ankusa-delivery-id")
            .expect("delivery id")
            .to_string();
        let n: u32 = r
            .header("ankusa-attempt")
            .and_then(|a| a.parse().ok())
            .expect("attempt number");
        by_row.entry(row).or_default().push((n, r.status));
    }
    by_row
}

/// Every one of `hooks` (one sink) was delivered exactly once and each attempt the receiver
/// saw was counted: per row the attempt numbers are 1, 2, …, n in order (a count that went
/// back would repeat a number), the last one answered 2xx and only it; Redis agrees (all
/// delivered, nothing dead, claimed, pending or left in a row hash). Returns the attempts.
async fn check_every_attempt_counted(env: &Env, hooks: &[u64]) -> usize {
    let seen = attempts_seen(env);
    assert_eq!(seen.len(), hooks.len(), "rows that reached the receiver");
    let mut total = 0;
    for h in hooks {
        let row = format!("{h}.0");
        let got = seen
            .get(&row)
            .unwrap_or_else(|| panic!("row {row} never delivered"));
        let numbers: Vec<u32> = got.iter().map(|(n, _)| *n).collect();
        let want: Vec<u32> = (1..=got.len() as u32).collect();
        assert_eq!(numbers, want, "row {row}: attempt numbers {got:?}");
        let ok = got.iter().filter(|(_, s)| (200..300).contains(s)).count();
        assert_eq!(ok, 1, "row {row}: 2xx answers {got:?}");
        assert!(
            (200..300).contains(&got.last().unwrap().1),
            "row {row}: {got:?}"
        );
        assert_eq!(
            env.row_field(&row, "a"),
            None,
            "row {row}: state left behind"
        );
        total += got.len();
    }
    assert_eq!(receipts(env).duplicates(), 0);
    let t = env.store.totals().await.unwrap();
    assert_eq!(
        (t.delivered, t.dead_lettered, t.dropped),
        (hooks.len() as u64, 0, 0),
        "{t:?}"
    );
    assert_eq!(env.store.claimed_count().await.unwrap(), 0, "claimed left");
    assert_eq!(env.pending_rows(), 0);
    total
}

/// A `Retry-After: 0`, or an HTTP date in the past, never makes a
/// row retry at once: every retry waits at least `retry.min_backoff_ms`, breakers off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_zero_or_in_the_past_never_retries_sooner_than_the_floor() {
    const FLOOR_MS: u64 = 300;
    let env = Env::tuned(|c| {
        c.dispatch.breaker_failures = 0;
        c.retry.initial_backoff_ms = 1;
        c.retry.min_backoff_ms = FLOOR_MS;
        c.retry.max_backoff_ms = FLOOR_MS;
    })
    .await;
    env.http_source("acme", "orders", &["a"]).await;
    let mut replies: Vec<Reply> = (0..4)
        .map(|_| Reply::status(503).header("Retry-After", "0"))
        .collect();
    replies.push(Reply::status(503).header("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"));
    env.receiver.set("a", Behavior::Sequence(replies));
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", "{}").await;
    env.drain(&worker).await;

    let got = env.receiver.requests_for("a");
    let statuses: Vec<u16> = got.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [503, 503, 503, 503, 503, 200],
        "one row, six attempts"
    );
    for (n, w) in got.windows(2).enumerate() {
        let gap = w[1].at.duration_since(w[0].at);
        // Due times are Redis-clock ms: allow the rounding of two readings.
        assert!(
            gap >= Duration::from_millis(FLOOR_MS - 5),
            "attempt {} came {gap:?} after attempt {}, floor {FLOOR_MS} ms",
            n + 2,
            n + 1
        );
    }
    let t = env.store.totals().await.unwrap();
    assert_eq!((t.delivered, t.dead_lettered), (1, 0), "{t:?}");
    assert_eq!(
        env.row_field(&format!("{id}.0"), "a"),
        None,
        "row state gone"
    );
    worker.shutdown().await;
}

/// At the retry horizon, a sink's `Retry-After` is never cut
/// short by an extra attempt: a row whose horizon comes before the delay the sink asked
/// for is dead-lettered `retry_horizon(http)` after its one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_horizon_never_cuts_a_retry_after_short_by_an_extra_attempt() {
    let env = Env::tuned(|c| {
        c.dispatch.breaker_failures = 0;
        c.retry.max_elapsed_ms = 2_000;
    })
    .await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    // a: asks for 5 s with 2 s left; b: asks for 1 s, which fits, then answers ok.
    env.receiver.set(
        "a",
        Behavior::Sequence(vec![Reply::status(429).header("Retry-After", "5")]),
    );
    env.receiver.set(
        "b",
        Behavior::Sequence(vec![Reply::status(429).header("Retry-After", "1")]),
    );
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", "{}").await;
    env.drain(&worker).await;

    assert_eq!(
        env.receiver.count_for("a"),
        1,
        "no attempt before the sink asked"
    );
    let b = env.receiver.requests_for("b");
    assert_eq!(b.len(), 2, "a hint that fits the horizon is honoured");
    assert!(b[1].at.duration_since(b[0].at) >= Duration::from_millis(995));
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].row, format!("{id}.0"));
    assert_eq!(dead[0].reason, "retry_horizon(http)");
    assert_eq!(dead[0].attempts, 1);
    let t = env.store.totals().await.unwrap();
    assert_eq!((t.delivered, t.dead_lettered), (1, 1), "{t:?}");
    worker.shutdown().await;
}

/// Settle replies lost after the script ran (the proxy forwards the
/// call, drops its reply and resets the connection), with retries shorter than the settle
/// retry delay, so rows are claimed again in the same term before the batch is re-sent. The
/// re-sent batch never applies to the later claim: no attempt count goes back, no real
/// outcome is skipped, no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_resent_after_a_lost_reply_never_applies_to_a_later_claim() {
    // Enough hooks for 2 × LOSSES settle calls even when a loaded machine (the suite runs
    // this file's tests side by side) makes each settle batch larger and the calls fewer.
    const HOOKS: usize = 900;
    const LOSSES: usize = 8;
    let env = Env::tuned(|c| {
        c.dispatch.breaker_failures = 0;
        c.dispatch.concurrency = 16;
        c.dispatch.sink_concurrency = 16;
        c.retry.initial_backoff_ms = 10;
        c.retry.max_backoff_ms = 20;
        c.retry.min_backoff_ms = 10;
    })
    .await;
    env.http_source("acme", "orders", &["a"]).await;
    env.receiver.set(
        "a",
        Behavior::FailFraction {
            status: 503,
            fraction: 0.5,
            seed: 17,
        },
    );
    let (proxy, worker) = worker_behind(&env, |_| {}).await;
    proxy.lose_replies(&settle_sha(), 2, LOSSES);
    let hooks = env.commit_n("acme", "orders", HOOKS).await;
    drain_direct(&env, &worker).await;
    assert_eq!(proxy.lost(), LOSSES, "settle replies lost");
    let attempts = check_every_attempt_counted(&env, &hooks).await;
    eprintln!("{LOSSES} settle replies lost: {HOOKS} rows, {attempts} attempts, 0 duplicates");
    worker.shutdown().await;
}

/// A 2 s partition between the leader and Redis while attempts
/// run, then every connection reset. The failed claim ends the term, but only after the
/// running attempts finished and every outcome observed was settled under that term: each
/// attempt the endpoint received is counted, and a lost ok never becomes a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_then_reset_forgets_no_attempt_and_duplicates_nothing() {
    const HOOKS: usize = 100;
    let env = Env::tuned(|c| {
        c.dispatch.breaker_failures = 0;
        c.retry.initial_backoff_ms = 10;
        c.retry.max_backoff_ms = 20;
        c.leader.lease_ms = 10_000;
        c.redis.command_timeout_ms = 1_000;
    })
    .await;
    env.http_source("acme", "orders", &["a"]).await;
    // Every third answer fails; each takes 150 ms, so attempts are running at the cut.
    let replies: Vec<Reply> = (0..150)
        .map(|i| Reply::status(if i % 3 == 0 { 503 } else { 200 }).delay(150))
        .collect();
    env.receiver.set("a", Behavior::Sequence(replies));
    let (proxy, worker) = worker_behind(&env, |_| {}).await;
    let hooks = env.commit_n("acme", "orders", HOOKS).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 30)
            .await
    );
    proxy.blackhole();
    // The fault's length, not a synchronisation: the partition lasts 2 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.heal_with_reset();
    drain_direct(&env, &worker).await;
    // The failed claim ended the term: a second term requeued what the first left claimed.
    assert_eq!(
        env.redis_cmd(&["GET", &env.key("epoch")]),
        "2",
        "one term change"
    );
    let attempts = check_every_attempt_counted(&env, &hooks).await;
    eprintln!("partition 2 s then reset: {HOOKS} rows, {attempts} attempts, 0 duplicates");
    worker.shutdown().await;
}

/// The window state is written through a fenced script, so a
/// zombie leader (its lease taken over while it was paused) cannot overwrite its successor's
/// state, and `pressure()` keeps answering from the live leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_leaders_window_state_is_refused() {
    use ankusa::store::{LeaseAcquire, StoreError};
    let env = Env::new().await;
    let s = &env.store;
    let LeaseAcquire::Acquired {
        token: old,
        epoch: old_epoch,
    } = s.lease_acquire("node-a", 60_000).await.unwrap()
    else {
        panic!("lease free")
    };
    let state = |epoch: u64, full: bool| {
        serde_json::json!({ "leading": true, "epoch": epoch, "window_full": full }).to_string()
    };
    s.publish_window(&old, &state(old_epoch, true), 60_000, &[])
        .await
        .expect("the leader publishes");
    // node-a is paused past its lease; node-b takes over and publishes.
    env.redis_cmd(&["DEL", &s.keyspace().lease()]);
    let LeaseAcquire::Acquired {
        token: new,
        epoch: new_epoch,
    } = s.lease_acquire("node-b", 60_000).await.unwrap()
    else {
        panic!("lease free")
    };
    s.publish_window(&new, &state(new_epoch, false), 60_000, &[])
        .await
        .expect("the new leader publishes");
    // node-a wakes and writes its stale state at once: refused, nothing overwritten.
    assert!(matches!(
        s.publish_window(&old, &state(old_epoch, true), 60_000, &[])
            .await,
        Err(StoreError::Fenced)
    ));
    let now: serde_json::Value =
        serde_json::from_str(&env.redis_cmd(&["GET", &env.key("window")])).unwrap();
    assert_eq!(now["epoch"], new_epoch);
    match s.pressure(100).await.expect("pressure reads") {
        ankusa::store::PressureRead::Ok { window_full, .. } => {
            assert!(!window_full, "pressure() answered from the zombie's state")
        }
        other => panic!("pressure unavailable: {other:?}"),
    }
}

/// A claim-check reference is recorded through a fenced script,
/// so a zombie leader's check-in writes nothing into a hook its successor handles; a hook
/// that is gone is not recreated by the write (its reference comes back to be deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_leaders_claim_check_reference_is_refused() {
    use ankusa::store::{LeaseAcquire, StoreError};
    let env = Env::new().await;
    env.http_source("acme", "s", &["/a"]).await;
    let hook = env.commit("acme", "s", "body").await;
    let s = &env.store;
    let LeaseAcquire::Acquired { token: old, .. } =
        s.lease_acquire("node-a", 60_000).await.unwrap()
    else {
        panic!("lease free")
    };
    // node-a is paused past its lease; node-b takes over.
    env.redis_cmd(&["DEL", &s.keyspace().lease()]);
    let LeaseAcquire::Acquired { token: new, .. } =
        s.lease_acquire("node-b", 60_000).await.unwrap()
    else {
        panic!("lease free")
    };
    let cc = env.key(&format!("hook:{hook}"));
    assert!(matches!(
        s.set_claim_refs(&old, &[(hook, "s3://b/stale".into())])
            .await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(
        env.redis_cmd(&["HEXISTS", &cc, "cc"]),
        "0",
        "the zombie wrote nothing"
    );
    assert_eq!(
        s.set_claim_refs(&new, &[(hook, "s3://b/live".into())])
            .await
            .unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(env.redis_cmd(&["HGET", &cc, "cc"]), "s3://b/live");
    // A hook that is gone is not made again by the write.
    assert_eq!(
        s.set_claim_refs(&new, &[(hook + 1000, "s3://b/orphan".into())])
            .await
            .unwrap(),
        vec!["s3://b/orphan".to_string()]
    );
    assert_eq!(
        env.redis_cmd(&["EXISTS", &env.key(&format!("hook:{}", hook + 1000))]),
        "0"
    );
}

/// One raw RESP command on a fresh connection (any bytes, any size); the reply flattened to
/// lines, each bulk string or integer one line, an error `ERR: …`.
fn raw_cmd(port: u16, args: &[&[u8]]) -> Vec<String> {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(LIVENESS)).unwrap();
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend(format!("${}\r\n", a.len()).as_bytes());
        req.extend(*a);
        req.extend(b"\r\n");
    }
    s.write_all(&req).expect("write");
    let mut r = BufReader::new(s);
    fn read(r: &mut BufReader<std::net::TcpStream>, out: &mut Vec<String>) {
        let mut line = String::new();
        r.read_line(&mut line).expect("reply");
        let line = line.trim_end();
        let (kind, rest) = line.split_at(1);
        match kind {
            "*" => {
                for _ in 0..rest.parse::<i64>().unwrap_or(0).max(0) {
                    read(r, out);
                }
            }
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n >= 0 {
                    let mut b = vec![0; n as usize + 2];
                    r.read_exact(&mut b).unwrap();
                    b.truncate(n as usize);
                    out.push(String::from_utf8_lossy(&b).into_owned());
                }
            }
            "-" => out.push(format!("ERR: {rest}")),
            _ => out.push(rest.to_string()),
        }
    }
    let mut out = Vec::new();
    read(&mut r, &mut out);
    out
}

/// The byte window holds row by row inside the claim. 400 hooks of
/// 64 KiB to a sink that never answers, `max_inflight_bytes` = 1 MiB: the bytes the worker
/// holds claimed, and the hook bytes of Redis's claimed set, never pass 1 MiB plus one hook,
/// over several windows' worth of attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_byte_window_holds_row_by_row_inside_the_claim() {
    const HOOK: u64 = 64 << 10;
    const WINDOW: u64 = 1 << 20;
    let env = Env::tuned(|c| {
        c.dispatch.max_inflight_bytes = WINDOW;
        c.dispatch.attempt_timeout_ms = 300;
        c.dispatch.breaker_failures = 0;
    })
    .await;
    env.receiver.set("/hang", Behavior::Hang);
    env.http_source("acme", "big", &["/hang"]).await;
    let body = vec![b'x'; HOOK as usize];
    for _ in 0..4 {
        let hooks: Vec<ankusa::Hook> = (0..100).map(|_| ankusa::Hook::new(body.clone())).collect();
        env.producer
            .commit_many("acme", "big", &hooks)
            .await
            .unwrap();
    }
    let worker = env.worker().await;
    let state = worker.watch_state();
    let claimed = env.key("claimed");
    let (mut max_held, mut max_redis) = (0u64, 0u64);
    let deadline = std::time::Instant::now() + LIVENESS;
    // Three windows' worth of attempts (16 rows each) have timed out and been claimed again.
    while env.receiver.requests_for("/hang").len() < 48 {
        assert!(std::time::Instant::now() < deadline, "attempts stalled");
        max_held = max_held.max(state.borrow().claimed_bytes);
        let rows = env.redis_cmd(&["ZRANGE", &claimed, "0", "-1"]);
        let mut bytes = 0;
        for m in rows.lines().filter(|l| !l.is_empty()) {
            let hook = m.rsplit('/').next().unwrap().split('.').next().unwrap();
            let z = env.redis_cmd(&["HGET", &env.key(&format!("hook:{hook}")), "z"]);
            bytes += z.parse::<u64>().unwrap_or(0);
        }
        max_redis = max_redis.max(bytes);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        max_held >= HOOK && max_redis >= HOOK,
        "rows were claimed at all"
    );
    assert!(
        max_held <= WINDOW + HOOK,
        "held {max_held} bytes over the window"
    );
    assert!(
        max_redis <= WINDOW + HOOK,
        "Redis held {max_redis} bytes claimed"
    );
    worker.shutdown().await;
}

/// A lane head whose hook is gone still releases its lane in the same
/// settle call (its lane is recorded with the head, not only in the hook), and a drained
/// partition keeps no tenant in `lane_tenants`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_hook_is_gone_releases_its_lane_in_the_same_batch() {
    use ankusa::model::{SinkEntry, SourceSpec};
    use ankusa::store::{ClaimRequest, LeaseAcquire, Outcome, SettleOp};
    let env = Env::new().await;
    let sink = SinkEntry {
        ordered: true,
        key: Some("json:/lane".into()),
        ..env.http_sink("/o")
    };
    env.store
        .put_source("acme", "orders", &SourceSpec { sinks: vec![sink] })
        .await
        .unwrap();
    let head = env.commit("acme", "orders", r#"{"lane":"a","n":0}"#).await;
    let next = env.commit("acme", "orders", r#"{"lane":"a","n":1}"#).await;
    let LeaseAcquire::Acquired { token, epoch } =
        env.store.lease_acquire("t", 60_000).await.unwrap()
    else {
        panic!("lease")
    };
    let c = env
        .store
        .claim(&token, epoch, ClaimRequest::new(10, 10))
        .await
        .unwrap();
    assert_eq!(c.rows.len(), 1, "only the head is due");
    assert_eq!(c.rows[0].row, format!("{head}.0"));
    // The head's hook is gone (deleted by other means): the worker would drop the row.
    env.redis_cmd(&["DEL", &env.key(&format!("hook:{head}"))]);
    let gone = Outcome {
        tenant: "acme".into(),
        row: c.rows[0].row.clone(),
        attempts: 0,
        first_attempt_ms: c.now_ms,
        claim: c.rows[0].claim,
        op: SettleOp::Drop,
    };
    env.store.settle(&token, epoch, &[gone]).await.unwrap();
    // Released in that very call: the next member is the head and due now.
    let lanehead = env.redis_cmd(&["KEYS", &env.key("lanehead:*")]);
    assert_eq!(
        env.redis_cmd(&["GET", lanehead.trim()]),
        format!("{next}.0")
    );
    assert!(env
        .redis_cmd(&["ZSCORE", &env.key("due:acme"), &format!("{next}.0")])
        .parse::<i64>()
        .is_ok());
    env.redis_cmd(&["DEL", &env.key("lease")]);

    // Drained: no tenant left in lane_tenants, no head recorded.
    for n in 2..6 {
        env.commit("acme", "orders", format!(r#"{{"lane":"a","n":{n}}}"#))
            .await;
    }
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.receiver.count_for("/o"), 5);
    assert_eq!(env.redis_cmd(&["SCARD", &env.key("lane_tenants")]), "0");
    assert_eq!(env.redis_cmd(&["HLEN", &env.key("head_lane")]), "0");
    assert_eq!(env.redis_cmd(&["GET", &env.key("lane_members")]), "0");
    worker.shutdown().await;
}
