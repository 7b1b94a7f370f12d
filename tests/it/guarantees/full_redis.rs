//! A full Redis (maxmemory, noeviction) and an evicting one: drained by a leader elected
//! on it, health red while writes fail, the policy read and rechecked.

use super::*;

/// Redis full (`noeviction`, `maxmemory` reached under a running
/// pool). Commits are refused, but the scripts that free memory still run (`allow-oom`): the
/// backlog drains with every hook deleted, none recorded delivered while its body stays, and
/// a new leader is elected on the full Redis. While Redis refuses the writes the leader
/// needs (`NOREPLICAS`), its health is red; green again once they pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_is_drained_by_a_leader_elected_on_it_and_failing_writes_turn_health_red() {
    const HOOKS: usize = 200;
    let env = Env::tuned(|c| {
        c.dispatch.breaker_failures = 0;
        c.retry.initial_backoff_ms = 50;
        c.retry.max_backoff_ms = 100;
    })
    .await;
    env.http_source("acme", "orders", &["a"]).await;
    env.receiver.set("a", Behavior::Status(503));
    let first = env.worker().await;
    let hooks = env.commit_n("acme", "orders", HOOKS).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= HOOKS)
            .await
    );

    // Full: nothing that grows memory is accepted.
    assert_eq!(env.redis_cmd(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    let refused = tokio::time::timeout(
        LIVENESS,
        env.producer
            .commit("acme", "orders", ankusa::Hook::new("x")),
    )
    .await
    .expect("commit answers");
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("OOM")),
        "a commit on a full Redis is refused: {refused:?}"
    );

    // Writes refused for another reason: the leader's health turns red, then green again.
    assert_eq!(
        env.redis_cmd(&["CONFIG", "SET", "min-replicas-to-write", "1"]),
        "OK"
    );
    assert!(
        common::procs::poll_until(LIVENESS, || async { first.health().problem().is_some() }).await,
        "health stays green while Redis refuses writes"
    );
    let why = first.health().problem().unwrap();
    assert!(why.contains("NOREPLICAS"), "{why}");
    assert_eq!(
        env.redis_cmd(&["CONFIG", "SET", "min-replicas-to-write", "0"]),
        "OK"
    );
    assert!(
        common::procs::poll_until(LIVENESS, || async { first.health().problem().is_none() }).await,
        "health stays red after writes pass again"
    );

    // A leader change on the full Redis: the lease is taken (its epoch INCR allowed).
    first.shutdown().await;
    let second = env.worker().await;
    assert!(
        common::procs::poll_until(LIVENESS, || async { second.is_leader() }).await,
        "no leader elected on a full Redis"
    );
    env.receiver.set("a", Behavior::Ok);
    drain_direct(&env, &second).await;
    // Still full: the drain happened on a full Redis.
    assert_eq!(
        env.redis_cmd(&["CONFIG", "GET", "maxmemory"]),
        "maxmemory\n1"
    );
    let got = receipts(&env);
    assert_eq!(got.per_row.len(), HOOKS, "rows delivered");
    assert_eq!(got.duplicates(), 0);
    for h in &hooks {
        assert_eq!(got.per_row.get(&format!("{h}.0")), Some(&1));
    }
    let t = env.store.totals().await.unwrap();
    assert_eq!(
        (t.delivered, t.dead_lettered, t.dropped),
        (HOOKS as u64, 0, 0),
        "{t:?}"
    );
    assert_eq!(
        env.redis_cmd(&["KEYS", &env.key("hook:*")]),
        "",
        "hooks left"
    );
    assert_eq!(
        env.redis_cmd(&["KEYS", &env.key("body:*")]),
        "",
        "hook bodies left"
    );
    assert_eq!(
        env.redis_cmd(&["KEYS", &env.key("row:*")]),
        "",
        "row state left"
    );
    assert_eq!(env.store.claimed_count().await.unwrap(), 0);
    assert_eq!(env.redis_cmd(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    second.shutdown().await;
}

/// With `CONFIG` renamed away (as managed Redis services do), the eviction
/// policy is still read (from `INFO memory`): an `allkeys-lru` Redis is refused at start, and
/// a policy changed to an evicting one at run time turns health red until it is undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eviction_policy_is_read_without_config_and_rechecked_while_running() {
    let renamed = |policy: &str, config_as: &str| ankusa::testkit::RedisOptions {
        appendonly: false,
        die_with_parent: false,
        extra_args: vec![
            "--maxmemory-policy".into(),
            policy.into(),
            "--rename-command".into(),
            "CONFIG".into(),
            config_as.into(),
        ],
    };
    // CONFIG gone entirely: refused at start, naming the policy.
    let env = Env::with(renamed("allkeys-lru", ""), |_| {}).await;
    assert!(env
        .redis
        .cmd(&["CONFIG", "GET", "maxmemory-policy"])
        .is_err());
    match Worker::start(env.config.clone(), Some("test")).await {
        Err(ankusa::Error::EvictingRedis(p)) => assert_eq!(p, "allkeys-lru"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("an allkeys-lru Redis was accepted"),
    }

    // CONFIG renamed for the operator only: a run-time change is noticed.
    const CFG: &str = "operator-config-3f9a";
    let env = Env::with(renamed("noeviction", CFG), |_| {}).await;
    let worker = env.worker().await;
    assert_eq!(worker.health().problem(), None);
    assert_eq!(
        env.redis_cmd(&[CFG, "SET", "maxmemory-policy", "volatile-lru"]),
        "OK"
    );
    assert!(
        common::procs::poll_until(LIVENESS, || async { worker.health().problem().is_some() }).await,
        "an evicting policy set at run time went unnoticed"
    );
    let why = worker.health().problem().unwrap();
    assert!(why.contains("\"volatile-lru\""), "{why}");
    assert_eq!(
        env.redis_cmd(&[CFG, "SET", "maxmemory-policy", "noeviction"]),
        "OK"
    );
    assert!(
        common::procs::poll_until(LIVENESS, || async { worker.health().problem().is_none() }).await,
        "health stays red after noeviction is back"
    );
    worker.shutdown().await;
}
