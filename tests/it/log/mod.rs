//! The delivery log against a real PostgreSQL and a real Redis: what the settle script writes
//! to each partition's `log` stream reaches the log store once, Redis keeps nothing per hook
//! once it ended, search pages through what was committed, erasure and retention remove what
//! they say, and PostgreSQL away (stopped, then started) or a killed worker lose and duplicate
//! nothing.

mod access;
mod archive;
mod bodies;
mod faults;
mod retention;

use crate::common::pg::TestDb;
use crate::common::*;
use std::time::Duration;

/// Hooks and attempts in the log store: (hooks, attempts, distinct attempt keys).
pub async fn log_counts(pg: &tokio_postgres::Client) -> (i64, i64, i64) {
    let h: i64 = pg
        .query_one("SELECT count(*) FROM ankusa_hooks", &[])
        .await
        .map(|r| r.get(0))
        .unwrap_or(-1);
    let a = pg
        .query_one(
            "SELECT count(*), count(DISTINCT (partition, hook, sink, attempt)) FROM ankusa_attempts",
            &[],
        )
        .await;
    match a {
        Ok(r) => (h, r.get(0), r.get(1)),
        Err(_) => (h, -1, -1),
    }
}

/// Entries left in every partition's log stream of `env`'s instance.
pub fn stream_entries(env: &Env) -> u64 {
    (0..env.config.partitions)
        .map(|p| {
            env.redis_cmd(&["XLEN", &env.part_key(p, "log")])
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
        })
        .sum()
}

/// Wait until the log store holds `hooks` ended hooks and the streams are empty; answers the
/// counts. Panics after [`LIVENESS`] with what it saw.
pub async fn archived(env: &Env, pg: &tokio_postgres::Client, hooks: i64) -> (i64, i64, i64) {
    let deadline = std::time::Instant::now() + LIVENESS;
    loop {
        let c = log_counts(pg).await;
        let left = stream_entries(env);
        if c.0 >= hooks && left == 0 {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "log store holds {c:?}, {left} stream entries left, after {LIVENESS:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An env whose workers keep the delivery log in `db`.
pub async fn log_env(db: &TestDb, tune: impl FnOnce(&mut ankusa::config::Config)) -> Env {
    let url = db.url.clone();
    Env::tuned(move |c| {
        c.log.url = Some(url);
        tune(c);
    })
    .await
}
