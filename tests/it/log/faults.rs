//! PostgreSQL away never stops delivery: stopped under load, then started again (with the
//! archiving worker killed meanwhile), the log holds every record once; with the stream at its
//! bound, records are dropped and counted while every hook is delivered.

use super::*;
use crate::common::pg::{client, PgCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_stopped_then_started_and_a_worker_killed_lose_and_duplicate_nothing() {
    let cluster = PgCluster::start();
    let url = cluster.url("postgres");
    let env = Env::tuned(|c| {
        c.log.url = Some(url.clone());
        c.log.batch_entries = 3;
    })
    .await;
    env.http_source("acme", "orders", &["ok"]).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = env.config_file(&dir, |_| {});
    let mut first = WorkerProcess::spawn(&cfg, &dir, "first");
    env.commit_n("acme", "orders", 200).await;
    {
        let pg = client(&url).await;
        assert_eq!(archived(&env, &pg, 200).await, (200, 200, 200));
    }

    // PostgreSQL stops; delivery goes on, the records wait in the stream.
    cluster.stop();
    env.commit_n("acme", "orders", 300).await;
    let deadline = std::time::Instant::now() + LIVENESS;
    while env.pending_rows() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "delivery stalled with PostgreSQL stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        env.receiver.requests_for("ok").len(),
        500,
        "every hook delivered meanwhile"
    );
    assert!(
        stream_entries(&env) > 0,
        "the records wait in the log stream"
    );
    let deadline = std::time::Instant::now() + LIVENESS;
    while !first.log_text().contains("log store unavailable") {
        assert!(
            std::time::Instant::now() < deadline,
            "said in the log:\n{}",
            first.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The archiving worker is killed; PostgreSQL comes back; another worker archives the rest.
    first.kill9();
    cluster.start_again();
    let _second = WorkerProcess::spawn(&cfg, &dir, "second");
    let pg = client(&url).await;
    assert_eq!(
        archived(&env, &pg, 500).await,
        (500, 500, 500),
        "each record once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_stream_drops_and_counts_records_and_delivery_goes_on() {
    // A log store that is not there (nothing listens on the port), a stream of 2 000 bytes.
    let port = free_port();
    let env = Env::tuned(|c| {
        c.log.url = Some(format!("postgres://postgres@127.0.0.1:{port}/nowhere"));
        c.log.stream_max_bytes = 2_000;
    })
    .await;
    env.http_source("acme", "orders", &["ok"]).await;
    let worker = env.worker().await;
    for _ in 0..4 {
        env.commit_n("acme", "orders", 10).await;
        env.drain(&worker).await;
    }
    assert_eq!(
        env.receiver.requests_for("ok").len(),
        40,
        "every hook delivered"
    );
    let bytes: u64 = env
        .redis_cmd(&["HGET", &env.part_key(0, "stats"), "log_bytes"])
        .trim()
        .parse()
        .expect("the stream's bytes are counted");
    assert!(bytes <= 2_000, "the stream holds its bound: {bytes} bytes");
    assert!(
        stream_entries(&env) > 0,
        "what fitted waits for the log store"
    );
    let dropped: u64 = env
        .redis_cmd(&["HGET", &env.part_key(0, "stats"), "log_dropped"])
        .trim()
        .parse()
        .expect("dropped records are counted");
    assert!(dropped >= 2, "{dropped} records dropped");
    // Readiness says how the archiving stands (a detail: delivery went on).
    let deadline = std::time::Instant::now() + LIVENESS;
    loop {
        let state = worker.health().log_state();
        if state.iter().any(|l| {
            l.starts_with("partition 0: delivery log store unavailable") && l.contains("waiting")
        }) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{state:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.shutdown().await;
}
