//! The Python package (`clients/python`) against a real worker: the Redis producer commits
//! with the script `ankusa commit-script` prints and reads the instance's partition count
//! and size limit from Redis; the HTTP ingest clients (sync and async) commit dict, str and
//! bytes bodies with a token and raise one typed error per refusal; the worker delivers
//! every hook byte-exact. Needs `python3` with redis-py and httpx, which `.ci/run` installs
//! (with the package, built as a wheel).

use crate::common;

use common::procs::{spawn_worker, wait_leader, write_config};
use common::{Env, LIVENESS};
use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn ankusa(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args(args)
        .output()
        .expect("ankusa runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn commit_script_prints_the_prelude_and_commit_script_the_producer_loads_and_its_sha() {
    let script = ankusa(&["commit-script"]);
    assert_eq!(script, ankusa::store::scripts::COMMIT);
    let sha = ankusa(&["commit-script", "--sha"]);
    assert_eq!(sha.trim(), sha1_hex(script.as_bytes()));
    // The Python package ships exactly this script.
    let shipped = std::fs::read_to_string(
        Path::new(ROOT).join("clients/python/src/ankusa_producer/commit.lua"),
    )
    .expect("clients/python ships commit.lua");
    assert!(
        shipped == script,
        "clients/python/src/ankusa_producer/commit.lua is stale: regenerate it with \
         `ankusa commit-script > clients/python/src/ankusa_producer/commit.lua`"
    );
}

/// SHA-1 by `sha1sum`, an implementation outside the binary (which prints the SHA Redis uses).
fn sha1_hex(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha1sum runs");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_producer_commits_and_a_worker_delivers_every_byte() {
    let env = Env::new().await;
    // A receiver that keeps bodies, to compare them byte for byte.
    let receiver = ankusa::testkit::Receiver::start_with(ankusa::testkit::ReceiverOptions {
        record_bodies: true,
        threads: 2,
    })
    .expect("receiver");
    let sink = |path: &str| ankusa::model::SinkEntry::http(&receiver.url(path));
    env.store
        .put_source(
            "acme",
            "orders",
            &ankusa::model::SourceSpec {
                sinks: vec![sink("a"), sink("b")],
            },
        )
        .await
        .expect("source");
    // A source whose entry takes only `push` hooks (event filters).
    env.store
        .put_source(
            "acme",
            "gh",
            &ankusa::model::SourceSpec {
                sinks: vec![ankusa::model::SinkEntry {
                    filter: Some(ankusa::model::EventFilter::types(vec!["push".into()])),
                    ..sink("gh")
                }],
            },
        )
        .await
        .expect("source");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&env, &dir, "w.toml", |_| {});
    let w = spawn_worker(&config, &dir, "py", &[], &[]);
    wait_leader(&w).await;

    // Every byte value, invalid UTF-8 included; a str body; and a refusal.
    let program = r#"
import json, sys, redis
from datetime import timedelta
from ankusa_producer import BadRequest, Hook, Producer, TooLate, UnknownSource
url, instance = sys.argv[1], sys.argv[2]
p = Producer(redis.Redis.from_url(url), instance=instance)
one = p.commit("acme", "orders", bytes(range(256)) + b"\xff\xfe",
               headers={"content-type": "application/octet-stream", "x-from": "python"})
many = p.commit_many("acme", "orders", [Hook("h\u00e9llo {}"), Hook(b"\x00")])
try:
    p.commit("acme", "nowhere", b"x")
    refused = False
except UnknownSource:
    refused = True
try:
    p.commit("acme", "orders", b"x", headers={"bad name": "v"})
    bad_header = False
except BadRequest:
    bad_header = True
typed = p.commit_many("acme", "gh", [Hook("{}", event_type="push"),
                                     Hook("{}", event_type="issues.opened"), Hook("{}")])
# A retry after a lost reply: the same idempotency key commits once and answers its id.
first = p.commit("acme", "orders", b"once", idempotency_key="evt-1")
again = p.commit_many("acme", "orders", [Hook(b"once", idempotency_key="evt-1"),
                                         Hook(b"twice", idempotency_key="evt-2")])
# Scheduled an hour ahead (not delivered in this test); beyond commit.max_delay_ms refused.
later = p.commit("acme", "orders", b"later", delay=timedelta(hours=1))
try:
    p.commit_many("acme", "orders", [Hook(b"x"), Hook(b"y", delay=timedelta(days=31))])
    too_late = None
except TooLate as e:
    too_late = [e.index, e.max_delay_ms]
print(json.dumps({"one": [one.first_hook, one.rows_per_hook], "many": many.hook_ids,
                  "refused": refused, "bad_header": bad_header, "sha": p.sha,
                  "typed": [typed.rows, typed.unmatched],
                  "idem": [first.hook_ids, again.hook_ids],
                  "later": later.first_hook, "too_late": too_late}))
"#;
    let out = Command::new("python3")
        .args(["-c", program, &env.redis.url(), &env.config.instance])
        .env("PYTHONPATH", Path::new(ROOT).join("clients/python/src"))
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python producer failed (redis-py missing? .ci/run installs it):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["one"][1], 2, "{v}");
    assert_eq!(v["refused"], true, "{v}");
    assert_eq!(
        v["bad_header"], true,
        "a header HTTP cannot carry is refused: {v}"
    );
    assert_eq!(v["typed"], serde_json::json!([[1, 0, 0], 2]), "{v}");
    assert_eq!(
        v["too_late"],
        serde_json::json!([1, 2_592_000_000u64]),
        "{v}"
    );
    let later = v["later"].as_u64().expect("scheduled hook id");
    let view = ankusa::visibility::show_hook(&env.store, "acme", later)
        .await
        .expect("the scheduled hook");
    assert!(
        view.rows
            .iter()
            .all(|r| r.state == ankusa::visibility::RowState::Scheduled),
        "{view:?}"
    );
    let first = &v["idem"][0][0];
    assert_eq!(
        v["idem"][1][0], *first,
        "a repeated key answers its first id: {v}"
    );
    assert_ne!(v["idem"][1][1], *first, "a new key commits: {v}");
    assert_eq!(
        v["sha"].as_str(),
        Some(ankusa(&["commit-script", "--sha"]).trim())
    );
    let expected: Vec<Vec<u8>> = vec![
        (0..=255u8).chain([0xff, 0xfe]).collect(),
        "h\u{e9}llo {}".as_bytes().to_vec(),
        vec![0],
        b"once".to_vec(),
        b"twice".to_vec(),
    ];

    assert!(
        receiver
            .wait_until_async(LIVENESS, |r| r.iter().filter(|r| r.status == 200).count()
                >= 10)
            .await,
        "not all 10 rows delivered: {:?}\n{}",
        receiver.requests().len(),
        w.log_text()
    );
    for path in ["a", "b"] {
        let mut got: Vec<Vec<u8>> = receiver
            .requests_for(path)
            .iter()
            .map(|r| r.body.clone().expect("recorded").to_vec())
            .collect();
        got.sort();
        let mut want = expected.clone();
        want.sort();
        assert_eq!(got, want, "bodies on {path} differ");
    }
    let first = receiver
        .requests_for("a")
        .into_iter()
        .find(|r| r.body.as_deref().is_some_and(|b| b.len() == 258))
        .expect("binary body");
    assert_eq!(first.header("x-from"), Some("python"));
    assert_eq!(
        first.header("content-type"),
        Some("application/octet-stream")
    );
}

/// Run a Python program with the package from this checkout; its stdout as JSON.
fn python(program: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new("python3")
        .arg("-c")
        .arg(program)
        .args(args)
        .env("PYTHONPATH", Path::new(ROOT).join("clients/python/src"))
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python failed (redis-py or httpx missing? .ci/run installs them):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    })
}

/// Register `acme/orders` with one http sink entry nothing listens on (these tests only
/// commit).
async fn put_orders(store: &ankusa::store::Store) {
    store
        .put_source(
            "acme",
            "orders",
            &ankusa::model::SourceSpec {
                sinks: vec![ankusa::model::SinkEntry::http("http://127.0.0.1:9/in")],
            },
        )
        .await
        .expect("source");
}

const INGEST_TOKEN: &str = "py-ingest-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_clients_commit_dict_str_and_bytes_bodies_sync_and_async_and_every_one_is_delivered(
) {
    let env = Env::new().await;
    let receiver = ankusa::testkit::Receiver::start_with(ankusa::testkit::ReceiverOptions {
        record_bodies: true,
        threads: 2,
    })
    .expect("receiver");
    let sink = |path: &str| ankusa::model::SinkEntry::http(&receiver.url(path));
    let spec = |sinks| ankusa::model::SourceSpec { sinks };
    env.store
        .put_source("acme", "orders", &spec(vec![sink("in")]))
        .await
        .expect("source");
    let push_only = ankusa::model::SinkEntry {
        filter: Some(ankusa::model::EventFilter::types(vec!["push".into()])),
        ..sink("gh")
    };
    env.store
        .put_source("acme", "gh", &spec(vec![push_only]))
        .await
        .expect("source");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&env, &dir, "w.toml", |c| {
        c.admin.ingest_token = Some(INGEST_TOKEN.into());
        // Only listed ingest headers are kept with a hook (admin.forward_headers).
        c.admin.forward_headers.push("x-from".into());
    });
    let w = spawn_worker(&config, &dir, "py-http", &[], &[]);
    wait_leader(&w).await;

    let program = r#"
import asyncio, json, sys
from datetime import timedelta
from ankusa_producer import AsyncIngestClient, IngestClient
base, token = sys.argv[1], sys.argv[2]
with IngestClient(base, token) as c:
    d = c.commit("acme", "orders", {"order": {"id": 1}}, headers={"x-from": "sync"})
    s = c.commit("acme", "orders", "h\u00e9llo")
    b = c.commit("acme", "orders", bytes(range(256)))
    k1 = c.commit("acme", "orders", b"once", idempotency_key="k-1")
    k2 = c.commit("acme", "orders", b"once", idempotency_key="k-1")
    push = c.commit("acme", "gh", {"ref": "main"}, event_type="push")
    other = c.commit("acme", "gh", {"ref": "main"}, event_type="issues")
    later = c.commit("acme", "orders", b"later", delay=timedelta(hours=1))
async def main():
    async with AsyncIngestClient(base, token) as c:
        rs = await asyncio.gather(*[c.commit("acme", "orders", {"async": i}) for i in range(3)])
        return [[r.hook_id, r.rows] for r in rs]
print(json.dumps({"rows": [d.rows, s.rows, b.rows, k1.rows, push.rows, other.rows],
                  "idem": [k1.hook_id, k2.hook_id], "warning": other.warning,
                  "later": [later.hook_id, later.deliver_at_ms],
                  "async": asyncio.run(main())}))
"#;
    let v = python(program, &[&format!("http://{}", w.admin), INGEST_TOKEN]);
    assert_eq!(v["rows"], serde_json::json!([1, 1, 1, 1, 1, 0]), "{v}");
    // Scheduled an hour ahead: the answer says when, and the row waits (not delivered here).
    assert!(v["later"][1].as_i64().is_some_and(|at| at > 0), "{v}");
    let later = ankusa::visibility::show_hook(&env.store, "acme", v["later"][0].as_u64().unwrap())
        .await
        .expect("the scheduled hook");
    assert_eq!(later.rows[0].state, ankusa::visibility::RowState::Scheduled);
    assert_eq!(
        v["idem"][0], v["idem"][1],
        "a repeated key answers its first id: {v}"
    );
    assert!(
        v["warning"]
            .as_str()
            .is_some_and(|w| w.contains("no sinks")),
        "a hook no entry takes is answered with a warning: {v}"
    );
    let async_ids: Vec<u64> = v["async"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_u64().unwrap())
        .collect();
    assert_eq!(async_ids.len(), 3, "{v}");
    assert!(
        async_ids.iter().all(|id| *id > 0)
            && v["async"].as_array().unwrap().iter().all(|r| r[1] == 1),
        "{v}"
    );

    assert!(
        receiver
            .wait_until_async(LIVENESS, |r| r.iter().filter(|r| r.status == 200).count()
                >= 8)
            .await,
        "not all 8 rows delivered: {}\n{}",
        receiver.requests().len(),
        w.log_text()
    );
    let mut got: Vec<Vec<u8>> = receiver
        .requests_for("in")
        .iter()
        .map(|r| r.body.clone().expect("recorded").to_vec())
        .collect();
    got.sort();
    let mut want: Vec<Vec<u8>> = vec![
        br#"{"order":{"id":1}}"#.to_vec(),
        "h\u{e9}llo".as_bytes().to_vec(),
        (0..=255u8).collect(),
        b"once".to_vec(),
        br#"{"async":0}"#.to_vec(),
        br#"{"async":1}"#.to_vec(),
        br#"{"async":2}"#.to_vec(),
    ];
    want.sort();
    assert_eq!(got, want, "bodies delivered");
    let dict = receiver
        .requests_for("in")
        .into_iter()
        .find(|r| r.body.as_deref() == Some(br#"{"order":{"id":1}}"#.as_slice()))
        .expect("the dict body");
    assert_eq!(dict.header("content-type"), Some("application/json"));
    assert_eq!(dict.header("x-from"), Some("sync"));
    assert_eq!(receiver.requests_for("gh").len(), 1, "only the push hook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_client_raises_one_typed_error_per_refusal_and_unavailable_is_retryable() {
    let mut env = Env::new().await;
    env.http_source("acme", "orders", &["in"]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&env, &dir, "w.toml", |c| {
        c.admin.ingest_token = Some(INGEST_TOKEN.into());
        c.commit.max_hook_bytes = 1024;
        c.redis.command_timeout_ms = 1_000;
    });
    let w = spawn_worker(&config, &dir, "py-errors", &[], &[]);
    wait_leader(&w).await;
    let base = format!("http://{}", w.admin);

    let program = r#"
import json, sys
from ankusa_producer import AnkusaError, IngestClient
base, token, calls = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
def expect(name, f):
    try:
        f()
        out[name] = "no error"
    except AnkusaError as e:
        out[name] = [type(e).__name__, e.code, e.status, e.retryable,
                     getattr(e, "retry_after", "n/a") is None or getattr(e, "retry_after", 0) >= 0]
c = IngestClient(base, token, timeout=60)
if calls == "refusals":
    expect("unauthorized", lambda: IngestClient(base, "wrong").commit("acme", "orders", b"x"))
    expect("no_token", lambda: IngestClient(base).commit("acme", "orders", b"x"))
    expect("unknown_source", lambda: c.commit("acme", "nowhere", b"x"))
    expect("too_large", lambda: c.commit("acme", "orders", b"x" * 5000))
    expect("reserved_header", lambda: c.commit("acme", "orders", b"x", headers={"webhook-id": "forged"}))
    expect("bad_event_type", lambda: c.commit("acme", "orders", b"x", event_type="not an event"))
else:
    expect("unavailable", lambda: c.commit("acme", "orders", b"x", idempotency_key="k"))
print(json.dumps(out))
"#;
    let v = python(program, &[&base, INGEST_TOKEN, "refusals"]);
    let want = serde_json::json!({
        "unauthorized": ["Unauthorized", "unauthorized", 401, false, true],
        "no_token": ["Unauthorized", "unauthorized", 401, false, true],
        "unknown_source": ["UnknownSource", "unknown_source", 404, false, true],
        "too_large": ["TooLarge", "too_large", 413, false, true],
        "reserved_header": ["BadRequest", "bad_request", 400, false, true],
        "bad_event_type": ["BadRequest", "bad_request", 400, false, true],
    });
    assert_eq!(v, want, "typed errors");
    assert_eq!(
        env.store.totals().await.expect("totals").committed,
        0,
        "a refusal commits nothing"
    );

    // Redis gone: the worker answers 503 (or 408 past its deadline): retryable.
    env.redis.stop();
    let v = python(program, &[&base, INGEST_TOKEN, "unavailable"]);
    assert_eq!(v["unavailable"][0], "Unavailable", "{v}\n{}", w.log_text());
    assert_eq!(v["unavailable"][3], true, "retryable: {v}");
    assert!(
        matches!(v["unavailable"][2].as_u64(), Some(503 | 408)),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_producer_reads_the_partition_count_and_size_limit_the_instance_recorded() {
    let env = Env::new().await;
    let instance = env.config.instance.clone();
    // What a first worker records: 4 partitions, and its leader's limit of 100 bytes.
    env.redis
        .cmd(&["SET", &format!("ankusa:{{{instance}}}:partitions"), "4"])
        .expect("SET");
    env.redis
        .cmd(&[
            "HSET",
            &format!("ankusa:{{{instance}.p0}}:settings"),
            "max_hook_bytes",
            "100",
        ])
        .expect("HSET");
    put_orders(&env.store.clone().with_partitions(4)).await;
    let program = r#"
import json, sys, redis
from ankusa_producer import BadRequest, Producer, TooLarge
url, instance = sys.argv[1], sys.argv[2]
r = redis.Redis.from_url(url)
p = Producer(r, instance=instance)
receipt = p.commit("acme", "orders", {"id": 1})
try:
    p.commit("acme", "orders", b"x" * 200)
    too_large = None
except TooLarge as e:
    too_large = e.max_bytes
try:
    Producer(r, instance=instance, partitions=2).commit("acme", "orders", b"x")
    mismatch = None
except BadRequest as e:
    mismatch = str(e)
print(json.dumps({"partitions": p.partitions, "max": p.max_hook_bytes,
                  "rows": receipt.rows_per_hook, "too_large": too_large, "mismatch": mismatch}))
"#;
    let v = python(program, &[&env.redis.url(), &instance]);
    assert_eq!(v["partitions"], 4, "{v}");
    assert_eq!(v["max"], 100, "{v}");
    assert_eq!(v["rows"], 1, "{v}");
    assert_eq!(v["too_large"], 100, "{v}");
    assert!(
        v["mismatch"]
            .as_str()
            .is_some_and(|m| m.contains("records 4")),
        "{v}"
    );
    // The hook went to acme's partition among 4, where a leader of 4 partitions claims it.
    let p = ankusa::keyspace::partition_of("acme", 4);
    let due = env
        .redis
        .cmd(&["ZCARD", &format!("ankusa:{{{instance}.p{p}}}:due:acme")])
        .expect("ZCARD");
    assert_eq!(due.trim(), "1", "partition {p}");
}

/// A server a worker marked deposed (a master the sentinels no longer name, field
/// `deposed` of the partition's `replication` hash) refuses commits from both producers,
/// nothing written: the Rust `CommitError::NotPrimary`, the Python `Unavailable` with code
/// `not_primary`; a lease renewal there refuses, so a term ends; and a lease acquisition,
/// which a worker makes only on the primary the sentinels name, clears the mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_server_refuses_commits_from_both_producers_until_a_term_starts_there() {
    let env = Env::new().await;
    let instance = env.config.instance.clone();
    put_orders(&env.store).await;
    let lease = env
        .store
        .lease_acquire("n1", 60_000)
        .await
        .expect("lease script");
    let ankusa::store::LeaseAcquire::Acquired { token, .. } = lease else {
        panic!("no lease: {lease:?}")
    };
    let replication = env.store.keyspace().replication();
    let depose = || {
        env.redis
            .cmd(&["HSET", &replication, "deposed", "127.0.0.1:6390"])
            .expect("HSET");
    };
    depose();
    let refused = env
        .producer
        .commit("acme", "orders", ankusa::Hook::new("{}"))
        .await
        .expect_err("a deposed server takes no commit");
    assert!(
        matches!(&refused, ankusa::store::CommitError::NotPrimary { named } if named == "127.0.0.1:6390"),
        "{refused:?}"
    );
    let program = r#"
import json, sys, redis
from ankusa_producer import Producer, Unavailable
url, instance = sys.argv[1], sys.argv[2]
try:
    Producer(redis.Redis.from_url(url), instance=instance).commit("acme", "orders", b"x")
    code = None
except Unavailable as e:
    code = [e.code, str(e)]
print(json.dumps({"refused": code}))
"#;
    let v = python(program, &[&env.redis.url(), &instance]);
    assert_eq!(v["refused"][0], "not_primary", "{v}");
    assert!(
        v["refused"][1]
            .as_str()
            .is_some_and(|m| m.contains("127.0.0.1:6390")),
        "{v}"
    );
    let due = env
        .redis
        .cmd(&["ZCARD", &format!("ankusa:{{{instance}.p0}}:due:acme")])
        .expect("ZCARD");
    assert_eq!(due.trim(), "0", "nothing written");
    assert!(
        !env.store
            .lease_renew("n1", &token, 60_000)
            .await
            .expect("lease script"),
        "a renewal on a deposed server ends the term"
    );
    // A new term (its acquisition made after the sentinels named this server) clears it.
    let again = env
        .store
        .lease_acquire("n1", 60_000)
        .await
        .expect("lease script");
    assert!(
        matches!(again, ankusa::store::LeaseAcquire::Acquired { .. }),
        "{again:?}"
    );
    env.producer
        .commit("acme", "orders", ankusa::Hook::new("{}"))
        .await
        .expect("committed once a term started here");
}
