//! The Python producer package (`clients/python`) against a real worker: it commits with the
//! script `ankusa commit-script` prints, and the worker delivers its hooks byte-exact.
//! Needs `python3` with redis-py, which `.ci/run` installs (with the package) when missing.

mod common;

use common::procs::{spawn_worker, wait_leader, write_config};
use common::{Env, LIVENESS};
use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn ankusa(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ankusa"))
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
    // A source whose entry takes only `push` hooks (P9 event filters).
    env.store
        .put_source(
            "acme",
            "gh",
            &ankusa::model::SourceSpec {
                sinks: vec![ankusa::model::SinkEntry {
                    filter: Some(ankusa::model::EventFilter {
                        event_types: vec!["push".into()],
                    }),
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
from ankusa_producer import BadRequest, Hook, Producer, UnknownSource
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
print(json.dumps({"one": [one.first_hook, one.rows_per_hook], "many": many.hook_ids,
                  "refused": refused, "bad_header": bad_header, "sha": p.sha,
                  "typed": [typed.rows, typed.unmatched],
                  "idem": [first.hook_ids, again.hook_ids]}))
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
