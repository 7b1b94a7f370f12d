//! Faults around `ankusa worker` processes: a kill -9 mid-flight, scripts
//! flushed, Redis restarted with persistence, Redis out of memory and busy, a dead sink
//! behind a large backlog, and a Redis that could evict keys.
//!
//! Each test starts the built binary as separate processes, its own redis-server and its own
//! receiver, and checks exact counts against the receiver and Redis (`procs::check_exact`).

use crate::common;

use ankusa::config::Config;
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::testkit::{Behavior, RedisOptions};
use ankusa::Hook;
use common::procs::*;
use common::*;
use std::time::{Duration, Instant};

/// The row window (`dispatch.max_inflight`): the bound on duplicates.
const WINDOW: usize = 300;

fn tune(c: &mut Config) {
    c.dispatch.max_inflight = WINDOW;
    c.dispatch.concurrency = 64;
    c.dispatch.sink_concurrency = 64;
    c.dispatch.batch = 200;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_flight_and_restarted_delivers_every_row() {
    let env = Env::with(RedisOptions::default(), tune).await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&env, &dir, "worker.toml", |_| {});
    let mut w = spawn_worker(&cfg, &dir, "w", &[], &[]);
    wait_leader(&w).await;
    let hooks = env.commit_n("acme", "orders", 5_000).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 3_000)
            .await
    );
    w.kill9();
    assert!(
        env.store.claimed_count().await.unwrap() > 0
            || env.store.totals().await.unwrap().delivered < 10_000
    );

    let again = spawn_worker(&cfg, &dir, "w", &[], &[]);
    wait_leader(&again).await;
    wait_idle(&env, LIVENESS).await;
    let dups = check_exact(&env, &hooks, 2, WINDOW).await;
    eprintln!("kill -9 and restart: {dups} duplicates (window {WINDOW})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run_reloads_the_scripts_without_losing_or_repeating_anything() {
    let env = Env::with(RedisOptions::default(), tune).await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&env, &dir, "worker.toml", |_| {});
    let w = spawn_worker(&cfg, &dir, "w", &[], &[]);
    wait_leader(&w).await;
    let hooks = env.commit_n("acme", "orders", 3_000).await;
    for seen in [1_000, 2_500, 4_000] {
        assert!(
            env.receiver
                .wait_until_async(LIVENESS, |r| r.len() >= seen)
                .await
        );
        assert_eq!(env.redis_cmd(&["SCRIPT", "FLUSH"]), "OK");
    }
    wait_idle(&env, LIVENESS).await;
    // NOSCRIPT was answered and the scripts reloaded in place: the leader never stepped down
    // (one term), so no claim was requeued and nothing was sent twice.
    assert_eq!(check_exact(&env, &hooks, 2, WINDOW).await, 0);
    assert_eq!(
        metric(&w.admin, "ankusa_leadership_changes_total", &[]).await,
        Some(1.0),
        "{}",
        w.log_text()
    );
    assert!(is_leader(&w.admin).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_rides_out_a_redis_restart_with_persistence_and_loses_nothing() {
    let mut env = Env::with(
        RedisOptions {
            appendonly: true,
            ..Default::default()
        },
        tune,
    )
    .await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&env, &dir, "pool.toml", |_| {});
    let mut pool = vec![
        spawn_worker(&cfg, &dir, "a", &[], &[]),
        spawn_worker(&cfg, &dir, "b", &[], &[]),
    ];
    for w in &pool {
        wait_ready(w).await;
    }
    let hooks = env.commit_n("acme", "orders", 5_000).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 2_000)
            .await
    );
    env.redis
        .restart()
        .expect("redis restarts with its append-only file");
    let after_restart = env.receiver.count();

    wait_idle(&env, LIVENESS).await;
    assert!(
        env.receiver.count() > after_restart,
        "deliveries resumed after the restart"
    );
    // One window of duplicates per leader change (each ended term may leave its in-flight
    // attempts unsettled).
    let mut terms = 0.0;
    for w in &pool {
        terms += metric(&w.admin, "ankusa_leadership_changes_total", &[])
            .await
            .unwrap_or(0.0);
    }
    let changes = (terms as usize).saturating_sub(1);
    let dups = check_exact(&env, &hooks, 2, WINDOW * changes.max(1)).await;
    // Both workers are still up (no crash loop) and one of them leads again.
    for w in &mut pool {
        assert!(
            w.child.try_wait().unwrap().is_none(),
            "worker exited:\n{}",
            w.log_text()
        );
        wait_ready(w).await;
    }
    let leaders = [
        is_leader(&pool[0].admin).await,
        is_leader(&pool[1].admin).await,
    ];
    assert_eq!(leaders.iter().filter(|l| **l).count(), 1, "{leaders:?}");
    eprintln!("redis restart: {dups} duplicates (window {WINDOW}, {changes} leader changes)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_out_of_memory_then_busy_loses_no_outcome() {
    let env = Env::with(RedisOptions::default(), tune).await;
    env.http_source("acme", "orders", &["a"]).await;
    env.receiver.set("a", Behavior::Delay { ms: 100 });
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&env, &dir, "worker.toml", |_| {});
    let w = spawn_worker(&cfg, &dir, "w", &[], &[]);
    wait_leader(&w).await;
    let hooks = env.commit_n("acme", "orders", 4_000).await;

    // OOM: every write that could grow memory is refused while attempts are in flight.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 500)
            .await
    );
    env.redis_cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    let refused = env.producer.commit("acme", "orders", Hook::new("x")).await;
    assert!(
        refused.is_err(),
        "a commit under OOM is refused, not half-written"
    );
    let seen = env.receiver.count();
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= seen + 200)
            .await
    );
    env.redis_cmd(&["CONFIG", "SET", "maxmemory", "0"]);

    // BUSY: a script that spins past the busy threshold makes Redis answer BUSY to everyone.
    let seen = env.receiver.count();
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= seen + 500)
            .await
    );
    env.redis_cmd(&["CONFIG", "SET", "lua-time-limit", "100"]);
    let port = env.redis.port();
    let spin = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        use std::io::{Read, Write};
        s.write_all(b"*3\r\n$4\r\nEVAL\r\n$17\r\nwhile true do end\r\n$1\r\n0\r\n")
            .unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).to_string()
    });
    let busy_from = Instant::now();
    assert!(
        poll_until(LIVENESS, || async {
            matches!(env.redis.cmd(&["PING"]), Err(ankusa::testkit::TestkitError::Redis(e)) if e.starts_with("BUSY"))
        })
        .await
    );
    // The fault's duration (not a synchronisation): Redis stays busy for longer than a lease
    // renewal interval, so the leader sees renewals, claims and settles answered BUSY.
    tokio::time::sleep(Duration::from_millis(
        env.config.leader.renew_interval_ms() + 200,
    ))
    .await;
    eprintln!("redis busy for {:?}", busy_from.elapsed());
    env.redis_cmd(&["SCRIPT", "KILL"]);
    let reply = spin.join().unwrap();
    assert!(reply.contains("killed"), "{reply}");

    wait_idle(&env, LIVENESS).await;
    let text = get(&w.admin, "/metrics").await.unwrap().1;
    // The bound is one window per leader change (each ended term may leave its in-flight
    // attempts unsettled), and these faults may end a term.
    let changes =
        (metric_in(&text, "ankusa_leadership_changes_total", &[]) as usize).saturating_sub(1);
    let dups = check_exact(&env, &hooks, 1, WINDOW * changes.max(1)).await;
    let busy = metric_in(&text, "ankusa_redis_errors_total", &["kind=\"busy\""]);
    let oom = metric_in(&text, "ankusa_redis_errors_total", &["kind=\"oom\""]);
    let log = w.log_text();
    let retried = log.matches("settle failed; will retry the batch").count();
    let terms = metric_in(&text, "ankusa_leadership_changes_total", &[]);
    eprintln!("oom + busy: {dups} duplicates; errors seen by the worker: busy {busy}, oom {oom}; settle batches retried {retried}; terms {terms}");
    assert!(
        w.log_text().lines().all(|l| !l.contains("panicked")),
        "{}",
        w.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_sink_behind_a_large_backlog_keeps_claims_within_the_window_and_memory_flat() {
    // 100 000 rows, as the issue asks; each is attempted once (the backoff is 10 minutes).
    const ROWS: usize = 100_000;
    const MAX_INFLIGHT: usize = 1_000;
    let env = Env::with(RedisOptions::default(), |c| {
        c.dispatch.max_inflight = MAX_INFLIGHT;
        c.dispatch.batch = 500;
        c.retry.initial_backoff_ms = 600_000;
        c.retry.max_backoff_ms = 600_000;
    })
    .await;
    // Nothing listens on this port: every attempt fails at once (connection refused).
    let dead = format!("http://127.0.0.1:{}/dead", free_port());
    let sink = SinkEntry::http(&dead);
    env.store
        .put_source("acme", "orders", &SourceSpec { sinks: vec![sink] })
        .await
        .unwrap();
    let body = r#"{"action":"opened","number":1347,"repository":{"full_name":"octocat/Hello-World"},"sender":{"login":"octocat"}}"#;
    for _ in 0..ROWS / 1_000 {
        let hooks: Vec<Hook> = (0..1_000).map(|_| Hook::new(body)).collect();
        env.producer
            .commit_many("acme", "orders", &hooks)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&env, &dir, "worker.toml", |_| {});
    let w = spawn_worker(&cfg, &dir, "w", &[], &[]);
    let pid = w.pid();

    let mut max_claimed = 0;
    let mut rss = Vec::new();
    let deadline = Instant::now() + LIVENESS;
    loop {
        let claimed = env.store.claimed_count().await.unwrap() as usize;
        max_claimed = max_claimed.max(claimed);
        if let Some(kib) = rss_kib(pid) {
            rss.push(kib);
        }
        let went_through = metric(&w.admin, "ankusa_rows_claimed_total", &[])
            .await
            .unwrap_or(0.0);
        if went_through >= ROWS as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {went_through} rows claimed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        max_claimed <= MAX_INFLIGHT,
        "{max_claimed} rows claimed at once > max_inflight {MAX_INFLIGHT}"
    );
    // Flat: after the first quarter of the run, while the remaining three quarters of the
    // backlog go through the window, the last quarter's lowest RSS is within 16 MiB of the
    // first quarter's, and no sample is over 48 MiB above it. A transient plateau of settle
    // batches piling up on a loaded machine (+30 MiB for a second or two in a full suite run,
    // gone at the next samples) raises the mean, not the lowest; memory held per row would
    // raise every sample (75 000 rows × ≥ 500 B ≥ 36 MiB).
    assert!(rss.len() >= 8, "too few samples: {rss:?}");
    let quarter = rss[rss.len() / 4];
    let peak = *rss[rss.len() / 4..].iter().max().unwrap();
    let last = &rss[rss.len() * 3 / 4..];
    let last_low = *last.iter().min().unwrap();
    eprintln!("dead sink: {} samples, max claimed {max_claimed}, RSS at 1/4 {quarter} KiB, last quarter's lowest {last_low} KiB, peak {peak} KiB", rss.len());
    assert!(
        last_low <= quarter + 16 * 1024,
        "RSS grew from {quarter} KiB to at least {last_low} KiB: {rss:?}"
    );
    assert!(
        peak <= quarter + 48 * 1024,
        "RSS peaked at {peak} KiB from {quarter} KiB: {rss:?}"
    );
    assert_eq!(env.store.totals().await.unwrap().delivered, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_an_evicting_redis_unless_told_to_allow_it() {
    let env = Env::new().await;
    env.redis_cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let dir = tempfile::tempdir().unwrap();
    let strict = write_config(&env, &dir, "strict.toml", |_| {});
    let mut w = spawn_worker(&strict, &dir, "strict", &[], &[]);
    let status = wait_exit(&mut w, LIVENESS).await.expect("the worker exits");
    assert!(!status.success(), "exit status {status:?}");
    let log = w.log_text();
    assert!(
        log.contains("maxmemory-policy is \"allkeys-lru\"")
            && log.contains("noeviction")
            && log.contains("redis.allow_evicting"),
        "{log}"
    );

    let lenient = write_config(&env, &dir, "lenient.toml", |c| {
        c.redis.allow_evicting = true
    });
    let w = spawn_worker(&lenient, &dir, "lenient", &[], &[]);
    wait_leader(&w).await;
    assert!(
        w.log_text().contains("redis may evict keys"),
        "{}",
        w.log_text()
    );
}
