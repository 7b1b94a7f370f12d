//! A Redis restarted from an append-only file that lost its last writes (`appendfsync
//! everysec` and an OS crash): rows claimed before the cut and settled after it come back
//! claimed under a term that still holds its lease and has forgotten them.
//!
//! The crash is made exact: the append-only files are copied while every row is claimed (the
//! fsynced state), the term then delivers and settles them all, and Redis is killed and
//! started again on the copy, on the same port. The worker must notice the restart, settle
//! again what it settled since the copy, and so deliver nothing twice, soon and healthy.

use crate::common;

use ankusa::testkit::{Behavior, RedisOptions};
use common::procs::*;
use common::*;
use std::path::Path;
use std::time::Instant;

/// Hooks committed, all claimed at once (one sink each).
const HOOKS: usize = 20;
/// How long the sink holds each request: long enough to copy the files while every row is
/// claimed and none settled.
const SINK_DELAY_MS: u64 = 1_000;
/// The append-only files' folder inside Redis' directory (Redis 7's `appenddirname`).
const AOF_DIR: &str = "appendonlydir";

/// Copy every file of `from` into `to` (created), as they are now.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("copy folder");
    for entry in std::fs::read_dir(from).expect("append-only folder") {
        let entry = entry.expect("append-only file");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("file copied");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_that_lost_its_last_second_delivers_nothing_twice() {
    let mut env = Env::with(
        RedisOptions {
            appendonly: true,
            extra_args: vec!["--appendfsync".into(), "everysec".into()],
            ..Default::default()
        },
        |c| {
            // The lease outlives the restart (it is renewed every 2 s); the self-check would
            // give a stalled term up after 12 s.
            c.leader.lease_ms = 6_000;
            c.leader.selfcheck_intervals = 2;
            c.dispatch.concurrency = 64;
            c.dispatch.sink_concurrency = 64;
        },
    )
    .await;
    env.http_source("acme", "orders", &["slow"]).await;
    env.receiver
        .set("slow", Behavior::Delay { ms: SINK_DELAY_MS });
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&env, &dir, "pool.toml", |_| {});
    // Two workers: without the fix the stalled leader's self-check hands over to the other,
    // whose takeover shows the duplicates within the bound.
    let pool = [
        spawn_worker(&cfg, &dir, "a", &[], &[]),
        spawn_worker(&cfg, &dir, "b", &[], &[]),
    ];
    for w in &pool {
        wait_ready(w).await;
    }
    assert!(
        poll_until(LIVENESS, || async {
            is_leader(&pool[0].admin).await || is_leader(&pool[1].admin).await
        })
        .await,
        "nobody leads"
    );

    let hooks = env.commit_n("acme", "orders", HOOKS).await;
    // Every row reached the sink, which holds it: all are claimed, none settled.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= HOOKS)
            .await
    );
    assert_eq!(env.store.claimed_count().await.unwrap(), HOOKS as u64);
    // The state the disk keeps: what Redis wrote so far, every claim in it.
    let saved = dir.path().join("aof-at-cut");
    copy_dir(&env.redis.dir().join(AOF_DIR), &saved);
    // The sink answers, the term settles every row and forgets it.
    eventually("every row is settled", LIVENESS, || async {
        match env.store.claimed_count().await {
            Ok(0) => Ok(()),
            other => Err(format!("claimed: {other:?}")),
        }
    })
    .await;

    // The crash: the settles were not on disk yet.
    env.redis.kill();
    let live = env.redis.dir().join(AOF_DIR);
    std::fs::remove_dir_all(&live).expect("append-only folder removed");
    copy_dir(&saved, &live);
    env.redis
        .start_again()
        .expect("redis starts on the files of the cut");
    let restarted = Instant::now();

    // Back to idle (nothing claimed or due) within the liveness bound: without the fix the
    // rows sat claimed until the self-check gave the lease up.
    wait_idle(&env, LIVENESS).await;
    let took = restarted.elapsed();
    let got = receipts(&env);
    let twice: Vec<&String> = got
        .per_row
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(row, _)| row)
        .collect();
    eprintln!(
        "redis restarted without its last writes: {} duplicates, idle {took:?} after the restart",
        got.duplicates()
    );
    assert!(
        twice.is_empty(),
        "{} duplicates (rows {twice:?})\n{}\n{}",
        got.duplicates(),
        pool[0].log_text(),
        pool[1].log_text()
    );
    assert_eq!(check_exact(&env, &hooks, 1, 0).await, 0);
    // Not the self-check's doing: both workers stay healthy.
    for w in &pool {
        let health = get(&w.admin, "/healthz").await;
        assert!(
            matches!(&health, Some((200, _))),
            "/healthz {health:?}\n{}",
            w.log_text()
        );
    }
}
