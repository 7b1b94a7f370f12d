//! Committing hooks: what a commit stores, every refusal leaving Redis untouched,
//! and bodies kept as bytes, delivered byte-exact.

use crate::common;

use ankusa::store::scripts::COMMIT;
use ankusa::store::CommitError;
use ankusa::Hook;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_of_several_hooks_stores_each_once_with_one_due_row_per_sink_entry() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let big = "x".repeat(4096);
    let hooks = [
        Hook::new("one"),
        Hook::new("two").header("x-github-event", "push"),
        Hook::new(big.clone()),
    ];
    let r = env
        .producer
        .commit_many("acme", "orders", &hooks)
        .await
        .unwrap();
    assert_eq!((r.first_hook, r.rows_per_hook), (1, 2));
    for (i, body) in ["one", "two", big.as_str()].iter().enumerate() {
        let id = r.first_hook + i as u64;
        let hook = env.key(&format!("hook:{id}"));
        // The body apart, so the hash of small fields stays a listpack.
        assert_eq!(
            env.redis_cmd(&["GET", &env.key(&format!("body:{id}"))]),
            *body
        );
        assert_eq!(env.redis_cmd(&["HEXISTS", &hook, "b"]), "0");
        assert_eq!(env.redis_cmd(&["OBJECT", "ENCODING", &hook]), "listpack");
        assert_eq!(env.redis_cmd(&["HGET", &hook, "tn"]), "acme");
        assert_eq!(env.redis_cmd(&["HGET", &hook, "s"]), "orders");
        assert_eq!(env.redis_cmd(&["HGET", &hook, "k"]), "http,http");
        assert_eq!(env.redis_cmd(&["HGET", &hook, "n"]), "2");
        assert_eq!(env.redis_cmd(&["HGET", &hook, "z"]), body.len().to_string());
    }
    assert_eq!(
        env.redis_cmd(&["HGET", &env.key("hook:2"), "h"]),
        r#"{"x-github-event":"push"}"#
    );
    let due = env.redis_cmd(&["ZRANGE", &env.key("due:acme"), "0", "-1"]);
    let mut due: Vec<&str> = due.lines().collect();
    due.sort();
    assert_eq!(due, ["1.0", "1.1", "2.0", "2.1", "3.0", "3.1"]);
    assert_eq!(
        env.redis_cmd(&["ZRANGE", &env.key("tenants"), "0", "-1"]),
        "acme"
    );
    assert_eq!(env.store.totals().await.unwrap().committed, 3);
    // no row hash until an attempt fails
    assert!(
        env.keys().iter().all(|k| !k.contains(":row:")),
        "{:?}",
        env.keys()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_to_an_unknown_source_is_refused_and_writes_nothing() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    let before = env.keys();
    let n = env.dbsize();
    let e = env
        .producer
        .commit("acme", "payments", Hook::new("{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, CommitError::UnknownSource { tenant, source_id } if tenant == "acme" && source_id == "payments"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "unknown source acme/payments");
    // the same source id under another tenant is another source
    let e = env
        .producer
        .commit("globex", "orders", Hook::new("{}"))
        .await
        .unwrap_err();
    assert!(matches!(e, CommitError::UnknownSource { .. }), "{e:?}");
    assert_eq!(env.dbsize(), n);
    assert_eq!(env.keys(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_max_hook_bytes_is_refused_and_one_at_the_limit_is_stored() {
    let env = Env::tuned(|c| c.commit.max_hook_bytes = 16).await;
    env.http_source("acme", "orders", &["a"]).await;
    let before = env.keys();
    let e = env
        .producer
        .commit("acme", "orders", Hook::new(vec![b'x'; 17]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            CommitError::TooLarge {
                index: 0,
                size: 17,
                max: 16
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "hook 0 is 17 bytes, over max_hook_bytes = 16"
    );
    assert_eq!(env.keys(), before);
    let r = env
        .producer
        .commit("acme", "orders", Hook::new(vec![b'x'; 16]))
        .await
        .unwrap();
    assert_eq!(r.first_hook, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_over_size_hook_in_a_multi_hook_commit_means_none_is_stored() {
    let env = Env::tuned(|c| c.commit.max_hook_bytes = 16).await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let before = env.keys();
    let hooks = [
        Hook::new("small"),
        Hook::new("also small"),
        Hook::new(vec![0u8; 100]),
        Hook::new("tail"),
    ];
    let e = env
        .producer
        .commit_many("acme", "orders", &hooks)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            CommitError::TooLarge {
                index: 2,
                size: 100,
                max: 16
            }
        ),
        "{e:?}"
    );
    assert_eq!(env.keys(), before);
    // the hook sequence did not move either: the next commit gets id 1
    assert_eq!(
        env.producer
            .commit("acme", "orders", Hook::new("ok"))
            .await
            .unwrap()
            .first_hook,
        1
    );
}

/// `EVAL` of the commit script with plain Redis arguments, as a producer in another language
/// does (docs/commit-protocol.md): `KEYS[1]` the lease key, then prefix, tenant, source,
/// max bytes, n and n (body, headers) pairs. Returns the reply lines.
fn eval_commit(
    env: &Env,
    tenant: &str,
    source: &str,
    max: usize,
    hooks: &[(&str, &str)],
) -> Vec<String> {
    let (max, n) = (max.to_string(), hooks.len().to_string());
    let lease = env.store.keyspace().lease();
    let mut args = vec![
        "EVAL",
        COMMIT,
        "1",
        &lease,
        env.store.keyspace().prefix(),
        tenant,
        source,
        &max,
        &n,
    ];
    for (body, headers) in hooks {
        args.push(body);
        args.push(headers);
    }
    env.redis_cmd(&args).lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_script_itself_refuses_an_over_size_hook_from_a_producer_in_another_language() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    let before = env.keys();
    let reply = eval_commit(
        &env,
        "acme",
        "orders",
        8,
        &[("fits", ""), ("far too large", "")],
    );
    assert_eq!(reply, ["too_large", "2", "13", "8"]);
    assert_eq!(env.keys(), before);
    let reply = eval_commit(&env, "acme", "payments", 8, &[("fits", "")]);
    assert_eq!(reply, ["unknown_source"]);
    assert_eq!(env.keys(), before);
    let reply = eval_commit(&env, "acme", "orders", 8, &[("fits", "")]);
    assert_eq!(reply[..3], ["ok", "1", "1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_tenant_or_source_id_is_refused_and_writes_nothing() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    let before = env.keys();
    let long = "t".repeat(129);
    for (tenant, source, which) in [
        ("", "orders", "tenant"),
        ("acme/eu", "orders", "tenant"),
        ("ac me", "orders", "tenant"),
        ("{acme}", "orders", "tenant"),
        (long.as_str(), "orders", "tenant"),
        ("acme", "", "source"),
        ("acme", "orders:v2", "source"),
        ("acme", "ördérs", "source"),
    ] {
        let e = env
            .producer
            .commit(tenant, source, Hook::new("{}"))
            .await
            .unwrap_err();
        match &e {
            CommitError::BadRequest(m) => assert!(
                m.starts_with(&format!("{which} id")),
                "{tenant:?}/{source:?}: {m}"
            ),
            other => panic!("{tenant:?}/{source:?}: {other:?}"),
        }
    }
    let e = env
        .producer
        .commit_many("acme", "orders", &[])
        .await
        .unwrap_err();
    assert!(
        matches!(&e, CommitError::BadRequest(m) if m == "no hooks"),
        "{e:?}"
    );
    assert_eq!(env.keys(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_that_http_cannot_carry_is_refused_and_writes_nothing() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    let before = env.keys();
    for (name, value) in [
        ("", "v"),
        ("x hook", "v"),
        ("x-hook:", "v"),
        ("x-(hook)", "v"),
        ("x-hooké", "v"),
        ("x-hook", "line\nbreak"),
        ("x-hook", "carriage\rreturn"),
        ("x-hook", "nul\0"),
        ("x-hook", "bell\u{7}"),
    ] {
        // one good hook first: the whole call is refused
        let hooks = [Hook::new("fine"), Hook::new("{}").header(name, value)];
        let r = env.producer.commit_many("acme", "orders", &hooks).await;
        let e = r.expect_err(&format!("{name:?}: {value:?} is refused"));
        assert!(
            matches!(&e, CommitError::BadRequest(m) if m.starts_with("invalid header")),
            "{name:?}: {value:?}: {e:?}"
        );
    }
    assert_eq!(env.keys(), before);
    // what HTTP allows goes through, UTF-8 values included
    let hook = Hook::new("{}")
        .header("X-GitHub-Event", "push")
        .header("x-note", "café\tau lait");
    env.producer.commit("acme", "orders", hook).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_and_invalid_utf8_bodies_are_delivered_byte_exact() {
    let env = Env::new().await;
    env.http_source("acme", "blobs", &["a"]).await;
    let bodies: Vec<Vec<u8>> = vec![
        (0..=255u8).collect(),
        b"\xff\xfe".to_vec(),
        b"{\"ok\":\"\xc3\x28\"}\x00\x00trailing".to_vec(),
        "ünïcödé ✓".as_bytes().to_vec(),
        (0..=255u8).rev().cycle().take(70_000).collect(),
        Vec::new(),
    ];
    let worker = env.worker().await;
    let mut want = std::collections::HashMap::new();
    for b in &bodies {
        let id = env
            .producer
            .commit(
                "acme",
                "blobs",
                Hook::new(b.clone()).header("content-type", "application/octet-stream"),
            )
            .await
            .unwrap();
        want.insert(id.first_hook.to_string(), (sha256_hex(b), b.len()));
    }
    worker.tick().await.unwrap();
    let got = env.receiver.requests_for("a");
    assert_eq!(got.len(), bodies.len());
    for r in &got {
        let id = r.header("ankusa-hook-id").unwrap();
        assert_eq!(
            Some(&(r.body_sha256.clone(), r.body_len)),
            want.get(id),
            "hook {id}"
        );
        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    }
    assert_eq!(
        env.store.totals().await.unwrap().delivered,
        bodies.len() as u64
    );
    worker.shutdown().await;
}

/// [`eval_commit`] of one hook with options after it (`idem`, `events`), as a producer in
/// another language sends them.
fn eval_commit_with(env: &Env, options: &[&str]) -> Vec<String> {
    let lease = env.store.keyspace().lease();
    let mut args = vec![
        "EVAL",
        COMMIT,
        "1",
        &lease,
        env.store.keyspace().prefix(),
        "acme",
        "orders",
        "1048576",
        "1",
        "{\"id\":1}",
        "",
    ];
    args.extend_from_slice(options);
    env.redis_cmd(&args).lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_idempotency_ttl_or_event_type_is_refused_before_the_first_write() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    let before = env.keys();
    // Each of these once wrote the hook's body and hash, or the sequence, before failing.
    let long = "e".repeat(129);
    for (options, detail) in [
        (vec!["idem", "0", "k1"], "idem ttl_ms"),
        (vec!["idem", "-5", "k1"], "idem ttl_ms"),
        (vec!["idem", "1.5", "k1"], "idem ttl_ms"),
        (vec!["idem", "1e300", "k1"], "idem ttl_ms"),
        (vec!["events", "push event"], "event type of hook 1"),
        (vec!["events", "a*"], "event type of hook 1"),
        (vec!["events", long.as_str()], "event type of hook 1"),
        (vec!["events", "push", "idem", "0", "k1"], "idem ttl_ms"),
        (
            vec!["idem", "60000", "k1", "events", "{x}"],
            "event type of hook 1",
        ),
    ] {
        let reply = eval_commit_with(&env, &options);
        assert_eq!(
            reply.first().map(String::as_str),
            Some("bad_request"),
            "{options:?}: {reply:?}"
        );
        assert!(reply[1].starts_with(detail), "{options:?}: {reply:?}");
        assert_eq!(env.keys(), before, "{options:?} left keys behind");
    }
    // The same calls, well formed, commit (an older producer's call is unchanged).
    let ok = eval_commit_with(
        &env,
        &["idem", "60000", "k1", "events", "pull_request.opened"],
    );
    assert_eq!(ok[..3], ["ok", "1", "1"], "{ok:?}");
    let ok = eval_commit_with(&env, &["events", ""]);
    assert_eq!(ok[..3], ["ok", "2", "1"], "{ok:?}");
    let ok = eval_commit_with(&env, &[]);
    assert_eq!(ok[..3], ["ok", "3", "1"], "{ok:?}");
}

/// two servers whose histories fork from one point — the promoted replica, and
/// the old primary restarted beside it before the sentinels make it a replica — each issue
/// hook ids on a new replication history. Both jump ahead, by offsets drawn from their own
/// replication ids, so a hook id issued on the side that is later thrown away is not issued
/// again on the side that survives (a receiver deduplicating on `webhook-id` would drop the
/// survivor's different hook). Before, both jumped exactly 2^24 and issued the same ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_histories_forked_from_one_point_issue_different_hook_ids() {
    let mut env = Env::with(
        ankusa::testkit::RedisOptions {
            appendonly: true,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    env.http_source("acme", "orders", &["a"]).await;
    assert_eq!(
        eval_commit(&env, "acme", "orders", 64, &[("one", "")])[..2],
        ["ok", "1"]
    );

    let replica = ankusa::testkit::RedisServer::start().expect("replica starts");
    let port = env.redis.port().to_string();
    replica.cmd(&["REPLICAOF", "127.0.0.1", &port]).unwrap();
    let seq = env.key("seq");
    assert!(
        common::procs::poll_until(LIVENESS, || async {
            replica.cmd(&["GET", &seq]).unwrap_or_default() == "1"
        })
        .await,
        "the replica never synced"
    );
    replica.cmd(&["REPLICAOF", "NO", "ONE"]).unwrap(); // promoted: a new history
    env.redis.restart().expect("the old primary restarts"); // a new history too

    let lease = env.store.keyspace().lease();
    let commit_on = |server: &ankusa::testkit::RedisServer, body: &str| -> u64 {
        let reply = server
            .cmd(&[
                "EVAL",
                COMMIT,
                "1",
                &lease,
                env.store.keyspace().prefix(),
                "acme",
                "orders",
                "64",
                "1",
                body,
                "",
            ])
            .expect("commit");
        let lines: Vec<&str> = reply.lines().collect();
        assert_eq!(lines.first(), Some(&"ok"), "{reply}");
        lines[1].parse().expect("hook id")
    };
    let (old, new) = (commit_on(&env.redis, "lost"), commit_on(&replica, "kept"));
    for id in [old, new] {
        assert!(id > 1 + (1 << 24), "id {id} did not jump past 2^24");
        assert!(
            id <= 1 + (1 << 24) + (1 << 26),
            "id {id} jumped past 2^24 + 2^26"
        );
    }
    assert_ne!(old, new, "both sides of the fork issued hook id {old}");
}
