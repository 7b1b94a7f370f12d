//! Per-sink rate limits against a real redis-server and receiver. Alone in its
//! test binary (cargo runs binaries one after another), so the 20 s of paced deliveries share
//! the machine with nothing heavy; the times are the bounds the limit guarantees, not
//! performance claims.

use crate::common;

use ankusa::model::{SinkEntry, SourceSpec};
use common::*;
use std::collections::HashMap;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_of_20_per_second_burst_5_spreads_400_hooks_and_leaves_the_other_sink_alone() {
    use ankusa::model::RateLimit;
    use std::time::{Duration, Instant};
    let env = Env::new().await;
    let spec = SourceSpec {
        sinks: vec![
            SinkEntry {
                rate_limit: Some(RateLimit {
                    per_second: 20.0,
                    burst: Some(5),
                }),
                ..env.http_sink("limited")
            },
            env.http_sink("free"),
        ],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    env.commit_n("acme", "s", 400).await;
    let started = Instant::now();
    let worker = env.worker().await;
    env.drain(&worker).await;
    let drained = started.elapsed();
    let limited = env.receiver.requests_for("limited");
    let free = env.receiver.requests_for("free");
    assert_eq!((limited.len(), free.len()), (400, 400), "each row once");
    // Per-second counts, from the first request: at most burst + rate.
    let t0 = limited[0].at;
    let mut per_second: HashMap<u64, usize> = HashMap::new();
    for r in &limited {
        *per_second
            .entry(r.at.duration_since(t0).as_secs())
            .or_default() += 1;
    }
    let worst = per_second.values().copied().max().unwrap_or(0);
    assert!(worst <= 25, "per-second counts {per_second:?}");
    // 400 rows at 20/s after a burst of 5 take (400 - 5) / 20 = 19.75 s.
    let span = limited[399].at.duration_since(t0);
    assert!(
        span >= Duration::from_secs(19),
        "limited sink drained in {span:?}"
    );
    assert!(drained >= Duration::from_secs(19));
    // The unlimited sink of the same tenant is not slowed: done well before.
    let free_done = free[399].at.duration_since(started);
    assert!(
        free_done < Duration::from_secs(10),
        "the free sink took {free_done:?}"
    );
    // Waiting for a token is no failure: no retry, no dead letter, no attempt counted.
    let t = env.store.totals().await.unwrap();
    assert_eq!((t.delivered, t.dead_lettered), (800, 0));
    assert!(env.dead_letters("acme").await.is_empty());
    worker.shutdown().await;
}
