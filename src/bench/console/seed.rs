//! The seed of `ankusa bench --console` (see the parent module): the sources, the hooks
//! committed through the running worker, and what the pages then name.

use super::{Mix, BIG, BIG_INFLIGHT, DOWN, GONE, HANG, OK, SMALL_DOWN, SMALL_GONE};
use crate::bench::{info_field, BenchArgs};
use crate::error::Error;
use crate::model::{SinkEntry, SourceSpec};
use crate::producer::{Hook, Producer};
use crate::store::Store;
use crate::testkit::{Receiver, RedisServer};
use std::time::{Duration, Instant};

/// What the seed made that the pages name.
pub(super) struct Seeded {
    /// A small tenant with a retrying row (`t00002`).
    pub(super) small: String,
    /// Its hook.
    pub(super) small_hook: u64,
    /// The big tenant's first delivered hook.
    pub(super) delivered_hook: u64,
    /// Its newest dead-lettered hook (the hook page finds it among the newest 10 000).
    pub(super) dead_hook: u64,
    /// Its first retrying hook.
    pub(super) retrying_hook: u64,
    /// The first hook of its backlog (claimed: hanging).
    pub(super) backlog_hook: u64,
}

/// A setup failure (bind, spawn, HTTP) as the bench's error, with what was said.
pub(super) fn other(e: impl std::fmt::Display) -> Error {
    Error::Other(e.to_string())
}

/// A body of ~1 KiB (the bench's generated bodies, or `--payloads`) with an event type.
pub(super) fn hook(bodies: &[Vec<u8>], k: usize, event_type: &str) -> Hook {
    Hook::new(bodies[k % bodies.len()].clone()).event_type(event_type)
}

/// Register `tenant`/`name` with one HTTP sink entry to `url`.
pub(super) async fn source(
    store: &Store,
    tenant: &str,
    name: &str,
    url: String,
) -> Result<(), Error> {
    store
        .put_source(
            tenant,
            name,
            &SourceSpec {
                sinks: vec![SinkEntry::http(&url)],
            },
        )
        .await?;
    Ok(())
}

/// Rows claimed in every partition.
pub(super) async fn claimed(store: &Store) -> Result<u64, Error> {
    let mut n = 0;
    for p in store.all_partitions() {
        n += p.claimed_count().await?;
    }
    Ok(n)
}

/// Commit `n` hooks of `event_type` to `tenant`/`source` in calls of `batch`; the first
/// hook's id, and the last's.
pub(super) async fn commit_n(
    producer: &Producer,
    bodies: &[Vec<u8>],
    (tenant, source): (&str, &str),
    n: usize,
    batch: usize,
    event_type: impl Fn(usize) -> &'static str,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<(u64, u64), Error> {
    let (mut first, mut last) = (0, 0);
    let mut i = 0;
    while i < n {
        let m = batch.min(n - i);
        let hooks: Vec<Hook> = (i..i + m).map(|k| hook(bodies, k, event_type(k))).collect();
        let r = producer.commit_many(tenant, source, &hooks).await?;
        if i == 0 {
            first = r.first_hook;
        }
        last = r.first_hook + m as u64 - 1;
        i += m;
        if let Some(b) = bar {
            b.inc(m as u64);
        }
    }
    Ok((first, last))
}

/// Wait until `done` says so, polling every 200 ms, at most `secs`; `what` names it in the
/// error.
pub(super) async fn wait_until<F, Fut>(what: &str, secs: u64, mut done: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, Error>>,
{
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        if done().await? {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(Error::Other(format!("{what}: not done after {secs} s")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The worker's config: the admin listener with the operator token; breakers off and a
/// 3-hour backoff (retrying rows stay retrying), a 1-hour attempt timeout (the hanging
/// endpoint keeps its window claimed), the big tenant's window at [`BIG_INFLIGHT`], the
/// self-check off (a window of hanging attempts is not a stall here), and an attempt
/// history that keeps every hook of the big tenant.
pub(super) fn worker_config(redis: &RedisServer, admin: u16, token: &str) -> String {
    format!(
        "instance = \"console\"\n[redis]\nurl = \"{}\"\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\ntoken = \"{token}\"\nrequest_timeout_ms = 120000\n\
         [leader]\nselfcheck_intervals = 0\n\
         [dispatch]\nconcurrency = 256\nsink_concurrency = 128\nbreaker_failures = 0\nattempt_timeout_ms = 3600000\n\
         [dispatch.tenants.{BIG}]\nmax_inflight = {BIG_INFLIGHT}\n\
         [retry]\ninitial_backoff_ms = 10800000\nmax_backoff_ms = 10800000\n\
         [history]\nmax_per_tenant = 100000\n\
         [http]\nallow_cidrs = [\"127.0.0.0/8\", \"::1/128\"]\n",
        redis.url()
    )
}

/// A free loopback port for the worker's admin listener.
pub(super) fn free_port() -> Result<u16, Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(other)
}

/// Commit the seed through the running worker and wait for the states it should reach.
pub(super) async fn seed(
    args: &BenchArgs,
    store: &Store,
    producer: &Producer,
    receiver: &Receiver,
    mix: &Mix,
    small_n: usize,
) -> Result<Seeded, Error> {
    let bodies = crate::bench::bodies(args)?;
    let batch = args.commit_batch.max(1);
    for (name, path) in [
        ("orders", OK),
        ("invoices", GONE),
        ("payments", DOWN),
        ("events", HANG),
    ] {
        source(store, BIG, name, receiver.url(path)).await?;
    }
    // The small tenants: one source and one hook each, committed by 16 tasks at once.
    let small: Vec<String> = (1..=small_n).map(|k| format!("t{k:05}")).collect();
    let bar = indicatif::ProgressBar::new(small_n as u64);
    bar.set_message("small tenants");
    let mut tasks = tokio::task::JoinSet::new();
    let shares = 16usize;
    for share in 0..shares {
        let (store, producer, bar) = (store.clone(), producer.clone(), bar.clone());
        let mine: Vec<(usize, String)> = small
            .iter()
            .enumerate()
            .filter(|(k, _)| k % shares == share)
            .map(|(k, t)| (k, t.clone()))
            .collect();
        let (down, gone) = (receiver.url(SMALL_DOWN), receiver.url(SMALL_GONE));
        let body = bodies[share % bodies.len()].clone();
        tasks.spawn(async move {
            let mut first = Vec::new();
            for (k, t) in mine {
                // One in ten small tenants has a dead endpoint: dead letters spread over
                // many tenants.
                let url = if k % 10 == 0 { &gone } else { &down };
                source(&store, &t, "s", url.clone()).await?;
                let r = producer
                    .commit(&t, "s", Hook::new(body.clone()).event_type("ping"))
                    .await?;
                first.push((k, r.first_hook));
                bar.inc(1);
            }
            Ok::<_, Error>(first)
        });
    }
    let mut small_hooks = vec![0u64; small_n];
    while let Some(r) = tasks.join_next().await {
        for (k, h) in r.map_err(other)?? {
            small_hooks[k] = h;
        }
    }
    bar.finish_and_clear();
    // The big tenant's delivered, dead-lettered and retrying hooks.
    let (delivered, _) = commit_n(
        producer,
        &bodies,
        (BIG, "orders"),
        mix.delivered,
        batch,
        |_| "order.created",
        None,
    )
    .await?;
    let (_, dead) = commit_n(
        producer,
        &bodies,
        (BIG, "invoices"),
        mix.dead_lettered,
        batch,
        |_| "invoice.paid",
        None,
    )
    .await?;
    let (retrying, _) = commit_n(
        producer,
        &bodies,
        (BIG, "payments"),
        mix.retrying,
        batch,
        |_| "payment.failed",
        None,
    )
    .await?;
    eprintln!("bench: committed the first hooks; waiting for their attempts");
    let want_small = small_n;
    let want_dead = mix.dead_lettered as u64;
    wait_until("the first attempts", 600, || async move {
        let small_seen = receiver.count_for(SMALL_DOWN) + receiver.count_for(SMALL_GONE);
        let big_seen = receiver.count_for(OK) >= mix.delivered
            && receiver.count_for(DOWN) >= mix.retrying
            && crate::dlq::count(store, BIG).await? >= want_dead;
        Ok(small_seen >= want_small && big_seen && claimed(store).await? == 0)
    })
    .await?;
    // The backlog: behind the hanging endpoint, committed last so that nothing else waits
    // for the endpoint's connections.
    let bar = indicatif::ProgressBar::new(mix.backlog as u64);
    const TYPES: [&str; 3] = ["user.created", "user.updated", "user.deleted"];
    let (backlog, _) = commit_n(
        producer,
        &bodies,
        (BIG, "events"),
        mix.backlog,
        batch,
        |k| TYPES[k % TYPES.len()],
        Some(&bar),
    )
    .await?;
    bar.finish_and_clear();
    let want_claimed = BIG_INFLIGHT.min(mix.backlog) as u64;
    wait_until("the big tenant's window", 120, || async move {
        Ok(claimed(store).await? >= want_claimed)
    })
    .await?;
    Ok(Seeded {
        small: small.get(1).or(small.first()).cloned().unwrap_or_default(),
        small_hook: small_hooks
            .get(1)
            .or(small_hooks.first())
            .copied()
            .unwrap_or(0),
        delivered_hook: delivered,
        dead_hook: dead,
        retrying_hook: retrying,
        backlog_hook: backlog,
    })
}

/// Redis commands per second over 5 s with no page requested.
pub(super) async fn background_rate(redis: &RedisServer) -> f64 {
    let n0 = info_field(redis, "stats", "total_commands_processed");
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let n1 = info_field(redis, "stats", "total_commands_processed");
    // Less the two INFO calls of this reading.
    ((n1 - n0 - 1.0).max(0.0) / t0.elapsed().as_secs_f64() * 10.0).round() / 10.0
}
