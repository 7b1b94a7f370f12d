//! A full Redis (`maxmemory` reached under `noeviction`), seen from outside: a tenant whose
//! sink hangs fills Redis with big bodies, another tenant's commits are refused for memory;
//! readiness (not liveness) turns red naming the reason, a metric counts the refused commits,
//! and once the backlog drains (its delivered bodies kept for resend included) producers are
//! admitted again. Real worker process, real redis-server, real HTTP on loopback.

use crate::common;

use ankusa::testkit::{Behavior, RedisOptions};
use common::procs::{eventually, get, http, metric, wait_ready, write_config};
use common::{Env, WorkerProcess, LIVENESS};
use serde_json::Value;

/// The size of a body of the tenant that fills Redis.
const BODY: usize = 50 * 1024;

/// POST `body` to ingest `tenant/source`: `(status, JSON body)`.
async fn ingest(admin: &str, tenant: &str, source: &str, body: Vec<u8>) -> (u16, Value) {
    let resp = http()
        .post(format!("http://{admin}/v1/hooks/{tenant}/{source}"))
        .timeout(LIVENESS)
        .body(body)
        .send()
        .await
        .expect("ingest answers");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A Redis of `mb` MiB that refuses writes once full (the default `noeviction`).
fn small_redis(mb: u32) -> RedisOptions {
    RedisOptions {
        appendonly: false,
        die_with_parent: false,
        extra_args: vec!["--maxmemory".into(), format!("{mb}mb")],
    }
}

/// Commit `BODY`-byte hooks to `tenant/source` until Redis refuses one, then smaller ones
/// down to 16 bytes (a command's arguments count against `maxmemory` while it runs, so a
/// smaller commit may fit after a big one was refused); answers the hooks committed and the
/// last refusal's text.
async fn fill(env: &Env, tenant: &str, source: &str) -> (Vec<u64>, String) {
    let mut hooks = Vec::new();
    let mut refused = String::new();
    let mut size = BODY;
    while size >= 16 {
        for i in 0..10_000 {
            let body = vec![b'a' + (i % 26) as u8; size];
            match env
                .producer
                .commit(tenant, source, ankusa::Hook::new(body))
                .await
            {
                Ok(r) => hooks.push(r.first_hook),
                Err(e) => {
                    refused = e.to_string();
                    break;
                }
            }
            assert!(i < 9_999, "{} hooks never filled Redis", hooks.len());
        }
        size /= 4;
    }
    (hooks, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_turns_readiness_red_with_the_reason_and_green_again_once_the_backlog_drains()
{
    let env = Env::with(small_redis(24), |_| {}).await;
    env.http_source("hog", "big", &["hog"]).await;
    env.http_source("calm", "small", &["calm"]).await;
    env.receiver.set("hog", Behavior::Hang);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&env, &dir, "ankusa.toml", |_| {});
    let w = WorkerProcess::spawn(&config, &dir, "w");
    wait_ready(&w).await;
    let a = w.admin.as_str();
    assert_eq!(ingest(a, "calm", "small", b"{}".to_vec()).await.0, 202);

    // The hog's sink hangs: its bodies pile up until Redis refuses the next commit.
    let (hooks, refused) = fill(&env, "hog", "big").await;
    assert!(refused.contains("OOM"), "{refused}");
    assert!(hooks.len() > 100, "{} hooks filled Redis", hooks.len());

    // At the margin a small command may still fit (the refused commands' buffers are freed
    // by the server's cron); the scripts that drain a full Redis may grow it past
    // `maxmemory` (allow-oom). Made decisive: `maxmemory` 1 MiB under what is used.
    let used: u64 = env
        .redis_cmd(&["INFO", "memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    let lowered = (used - (1 << 20)).to_string();
    assert_eq!(
        env.redis_cmd(&["CONFIG", "SET", "maxmemory", &lowered]),
        "OK"
    );

    // Another tenant's commits are refused too, explicitly (never a 2xx).
    let (status, body) = ingest(a, "calm", "small", b"{}".to_vec()).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.to_string().contains("OOM"), "{body}");

    // Readiness turns red and says why; liveness stays green (restarting would not help).
    let why = eventually("/readyz turns red on a full Redis", LIVENESS, || async {
        match get(a, "/readyz").await {
            Some((200, b)) => Err(format!("still 200: {b}")),
            Some((status, b)) => Ok((status, b)),
            None => Err("no answer".into()),
        }
    })
    .await;
    assert_eq!(why.0, 503, "{}", why.1);
    assert!(why.1.contains("out of memory"), "{}", why.1);
    assert!(why.1.contains("commits are refused"), "{}", why.1);
    assert_eq!(get(a, "/healthz").await.map(|r| r.0), Some(200));
    let counted = metric(a, "ankusa_commits_refused_total", &["reason=\"oom\""])
        .await
        .unwrap_or(0.0);
    assert!(counted >= 1.0, "refused commits counted: {counted}");
    let full = metric(a, "ankusa_redis_full", &["partition=\"0\""])
        .await
        .unwrap_or(0.0);
    assert_eq!(full, 1.0, "the gauge says Redis is full");

    // The sink answers again: the backlog drains and its bodies are kept for resend; the
    // kept bodies give way, so producers are admitted again and readiness is green.
    env.receiver.set("hog", Behavior::Ok);
    let want = hooks.len() as u64 + 1;
    eventually("the hog's backlog drains", LIVENESS * 4, || async {
        match env.store.totals().await {
            Ok(t) if t.delivered >= want => Ok(()),
            other => Err(format!("{other:?}, want {want} delivered")),
        }
    })
    .await;
    eventually("/readyz turns green again", LIVENESS, || async {
        match get(a, "/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (status, body) = ingest(a, "calm", "small", b"{}".to_vec()).await;
    assert_eq!(status, 202, "producers are admitted again: {body}");
    // Not only tiny ones: the kept bodies gave way entirely, so real commits fit (the probe
    // behind readiness carries a commit's bytes, and no kept body holds Redis at the line).
    for i in 0..10 {
        let (status, body) = ingest(a, "calm", "small", vec![b'x'; BODY]).await;
        assert_eq!(status, 202, "a {BODY}-byte commit {i} is admitted: {body}");
    }
    assert_eq!(
        metric(a, "ankusa_redis_full", &["partition=\"0\""]).await,
        Some(0.0)
    );
}

/// The `tenants top --by bytes` line of `tenant`, from the library.
async fn held(env: &Env, tenant: &str) -> (u64, u64) {
    let page = ankusa::visibility::tenants_top_by(
        &env.store,
        Some(&[tenant.to_string()]),
        None,
        10,
        ankusa::visibility::TopBy::Bytes,
    )
    .await
    .unwrap();
    page.tenants
        .iter()
        .find(|t| t.tenant == tenant)
        .map_or((0, 0), |t| (t.bytes, t.kept_bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_per_tenant_follow_commits_deliveries_and_purges_and_kept_bodies_stay_in_their_budget(
) {
    // Room for 3 kept bodies of 10 000 bytes.
    let env = Env::tuned(|c| c.history.kept_max_bytes = 35_000).await;
    env.http_source("a", "s", &["ok"]).await;
    env.http_source("b", "s", &["down"]).await;
    env.receiver.set("down", Behavior::Status(400));
    for i in 0..10u8 {
        env.commit("a", "s", vec![b'a' + i; 10_000]).await;
    }
    for i in 0..6u8 {
        env.commit("b", "s", vec![b'a' + i; 20_000]).await;
    }
    assert_eq!(held(&env, "a").await, (100_000, 0));
    assert_eq!(held(&env, "b").await, (120_000, 0));
    let (code, out, err) = env
        .cli_with(None, &["--json", "tenants", "top", "--by", "bytes"])
        .await;
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).expect("JSON");
    let names: Vec<&str> = json["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["b", "a"], "most bytes first: {out}");
    assert_eq!(json["tenants"][0]["bytes"], 120_000);
    assert_eq!(json["tenants"][0]["due_rows"], 6, "rows counted too");

    let w = env.worker().await;
    env.drain(&w).await;
    // a: every body delivered; 3 of them kept for resend, the older ones gave way.
    let (bytes, kept) = held(&env, "a").await;
    assert_eq!(bytes, 0);
    assert_eq!(
        kept, 30_000,
        "kept bodies stay within history.kept_max_bytes"
    );
    let kept_bodies = env.redis_cmd(&["KEYS", &env.key("keptbody:*")]);
    assert_eq!(kept_bodies.lines().count(), 3, "{kept_bodies}");
    // b: dead letters hold their bodies until purged.
    assert_eq!(held(&env, "b").await, (120_000, 0));
    let (code, out, err) = env
        .cli_with(None, &["tenants", "top", "--by", "bytes"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("BYTES") && out.contains("KEPT"), "{out}");
    assert!(out.contains("117.2 KiB"), "b's bytes for people: {out}");
    let (code, _, err) = env
        .cli_with(None, &["dlq", "purge", "--tenant", "b", "--all", "--yes"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(held(&env, "b").await, (0, 0));
    w.shutdown().await;
}
