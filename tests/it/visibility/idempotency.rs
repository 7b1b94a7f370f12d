//! Idempotency keys through the raw script, the CLI, ingest and the Rust producer: one
//! hook per key inside the window.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotency_key_through_the_raw_script_makes_one_hook_and_a_new_one_after_the_window(
) {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let sha = env.redis_cmd(&["SCRIPT", "LOAD", COMMIT]);
    let lease = env.key("lease");
    let prefix = env.store.keyspace().prefix().to_string();
    let commit = |key: &str, ttl: &str| {
        let reply = env.redis_cmd(&[
            "EVALSHA",
            &sha,
            "1",
            &lease,
            &prefix,
            "acme",
            "orders",
            "1048576",
            "1",
            r#"{"id":1}"#,
            "",
            "idem",
            ttl,
            key,
        ]);
        let lines: Vec<String> = reply.lines().map(str::to_string).collect();
        assert_eq!(lines[0], "ok", "{reply}");
        // ok, first hook id, rows per hook, committed at, then the id of each hook
        assert_eq!(lines[1], lines[4], "{reply}");
        lines[1].parse::<u64>().expect("hook id")
    };
    let first = commit("order-1", "60000");
    let before = env.keys();
    let dump = |k: &str| env.redis_cmd(&["DUMP", k]);
    let hook_before = dump(&env.key(&format!("hook:{first}")));
    assert_eq!(commit("order-1", "60000"), first);
    assert_eq!(env.keys(), before, "a repeated key writes nothing");
    assert_eq!(dump(&env.key(&format!("hook:{first}"))), hook_before);
    assert_eq!(env.redis_cmd(&["ZCARD", &env.key("due:acme")]), "2");
    assert_eq!(env.store.totals().await.unwrap().committed, 1);
    // another key is another hook
    let other = commit("order-2", "60000");
    assert_ne!(other, first);

    // a short window: once it has passed, the same key commits a new hook
    let short = commit("order-3", "200");
    assert_eq!(commit("order-3", "200"), short);
    let idem_keys = || env.redis_cmd(&["KEYS", &env.key("idem:*")]).lines().count();
    assert_eq!(idem_keys(), 3);
    assert!(
        poll_until(LIVENESS, || async { idem_keys() == 2 }).await,
        "the 200 ms key never expired"
    );
    let again = commit("order-3", "200");
    assert!(again > short, "{again} after {short}");

    let worker = env.worker().await;
    env.drain(&worker).await;
    // hooks first, other, short, again: one delivery each per sink
    assert_eq!(env.receiver.count_for("a"), 4);
    assert_eq!(env.receiver.count_for("b"), 4);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotency_key_through_the_cli_and_ingest_makes_one_hook_one_delivery_per_sink()
{
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let dir = tempfile::tempdir().unwrap();
    let payload = dir.path().join("payload.json");
    std::fs::write(&payload, r#"{"order":{"id":7}}"#).unwrap();
    let p = payload.to_str().unwrap();
    let produce = |key: &'static str| {
        let env = &env;
        async move {
            let (code, out, err) = ankusa(
                env,
                &["produce", "acme", "orders", p, "--idempotency-key", key],
            )
            .await;
            assert_eq!(code, 0, "{out} {err}");
            out
        }
    };
    let one = produce("cli-1").await;
    assert!(one.contains("hook id 1,"), "{one}");
    assert_eq!(produce("cli-1").await, one);
    // several hooks with one key is a usage error
    let (code, _, err) = ankusa(
        &env,
        &[
            "produce",
            "acme",
            "orders",
            p,
            p,
            "--idempotency-key",
            "cli-2",
        ],
    )
    .await;
    assert_eq!(code, 2, "{err}");

    // ingest: a worker process with an admin token
    let config = env.config_file(&dir, |c| {
        c.admin.token = Some("s3cret-0123456789abcdefghijklmnopqrstuv".into())
    });
    let w = WorkerProcess::spawn(&config, &dir, "w1");
    wait_leader(&w).await;
    let post = |key: &'static str| {
        let url = format!("http://{}/v1/hooks/acme/orders", w.admin);
        async move {
            let r = reqwest::Client::new()
                .post(url)
                .bearer_auth("s3cret-0123456789abcdefghijklmnopqrstuv")
                .header("idempotency-key", key)
                .body(r#"{"order":{"id":8}}"#)
                .send()
                .await
                .expect("ingest answers");
            assert_eq!(r.status().as_u16(), 202);
            serde_json::from_slice::<Value>(&r.bytes().await.expect("body")).expect("JSON")
        }
    };
    let a = post("ingest-1").await;
    let b = post("ingest-1").await;
    assert_eq!(a["hook_id"], b["hook_id"]);
    assert_eq!(a["hook_id"], 2);
    assert_eq!(env.store.totals().await.unwrap().committed, 2);
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 4)
            .await,
        "both hooks delivered to both sinks"
    );
    let tick = reqwest::Client::new()
        .post(format!("http://{}/admin/tick", w.admin))
        .bearer_auth("s3cret-0123456789abcdefghijklmnopqrstuv")
        .send()
        .await
        .expect("tick");
    assert_eq!(tick.status().as_u16(), 200);
    assert_eq!(env.receiver.count_for("a"), 2);
    assert_eq!(env.receiver.count_for("b"), 2);
    let mut hooks = env.receiver.header_counts("ankusa-hook-id");
    hooks.retain(|_, n| *n != 2);
    assert!(
        hooks.is_empty(),
        "one delivery per sink per hook: {hooks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_producer_honours_idempotency_keys_per_hook() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    let hooks = [
        Hook::new("x").idempotency_key("k1"),
        Hook::new("y"),
        Hook::new("z").idempotency_key("k1"),
    ];
    let (r, ids) = env
        .producer
        .commit_ids("acme", "orders", &hooks)
        .await
        .unwrap();
    assert_eq!(ids, [r.first_hook, r.first_hook + 1, r.first_hook]);
    let (_, again) = env
        .producer
        .commit_ids("acme", "orders", &[Hook::new("x").idempotency_key("k1")])
        .await
        .unwrap();
    assert_eq!(again, [r.first_hook]);
    assert_eq!(env.store.totals().await.unwrap().committed, 2);
    let too_long = Hook::new("x").idempotency_key("k".repeat(257));
    assert!(env
        .producer
        .commit("acme", "orders", too_long)
        .await
        .is_err());
}
