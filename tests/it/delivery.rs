//! Delivery through one in-process worker against a real redis-server and a real
//! HTTP receiver.

use crate::common;

use ankusa::testkit::{Behavior, Reply};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_hook_reaches_every_sink_of_its_source_once() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", r#"{"order":1}"#).await;
    // tick() counts rows settled during the call; the worker may have begun before it.
    let settled = worker.tick().await.unwrap();
    assert!(settled <= 2);
    let t = env.store.totals().await.unwrap();
    assert_eq!(t.delivered, 2, "{t:?} {}", env.redis_cmd(&["KEYS", "*"]));
    assert_eq!(env.receiver.count_for("a"), 1);
    assert_eq!(env.receiver.count_for("b"), 1);
    let r = &env.receiver.requests_for("a")[0];
    assert_eq!(r.header("ankusa-hook-id"), Some(id.to_string().as_str()));
    assert_eq!(
        r.header("ankusa-delivery-id"),
        Some(format!("{id}.0").as_str())
    );
    // the hook and its rows are gone once delivered
    assert_eq!(
        env.redis_cmd(&["EXISTS", &env.key(&format!("hook:{id}"))]),
        "0"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_then_a_200_is_delivered_on_the_second_attempt() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["flaky"]).await;
    env.receiver.set(
        "flaky",
        Behavior::Sequence(vec![Reply::status(500).body("database down")]),
    );
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", r#"{"order":2}"#).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 2)
            .await,
        "no second attempt"
    );
    env.drain(&worker).await;
    let got = env.receiver.requests_for("flaky");
    assert_eq!(got.len(), 2);
    let attempts: Vec<_> = got
        .iter()
        .map(|r| (r.status, r.header("ankusa-attempt").unwrap().to_string()))
        .collect();
    assert_eq!(attempts, [(500, "1".to_string()), (200, "2".to_string())]);
    // one delivery id across both attempts: the receiver can deduplicate on it
    assert!(got
        .iter()
        .all(|r| r.header("ankusa-delivery-id") == Some(format!("{id}.0").as_str())));
    assert!(got.iter().all(|r| r.body_sha256 == got[0].body_sha256));
    let t = env.store.totals().await.unwrap();
    assert_eq!((t.delivered, t.dead_lettered), (1, 0));
    // the row's retry state, the hook and its body are gone once delivered
    assert_eq!(env.row_field(&format!("{id}.0"), "a"), None);
    assert_eq!(
        env.keys()
            .iter()
            .filter(|k| k.contains(":hook:") || k.contains(":body:") || k.contains(":row:"))
            .count(),
        0,
        "{:?}",
        env.keys()
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_or_410_dead_letters_the_row_at_once_as_permanent() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["missing", "gone"])
        .await;
    env.receiver.set(
        "missing",
        Behavior::Sequence(vec![Reply::status(404).body("no such endpoint")]),
    );
    env.receiver.set("gone", Behavior::Status(410));
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", "{}").await;
    env.drain(&worker).await;
    assert_eq!(
        (
            env.receiver.count_for("missing"),
            env.receiver.count_for("gone")
        ),
        (1, 1)
    );
    let mut dead = env.dead_letters("acme").await;
    dead.sort_by(|a, b| a.get("row").as_str().cmp(b.get("row").as_str()));
    assert_eq!(dead.len(), 2);
    let (d0, d1) = (&dead[0], &dead[1]);
    assert_eq!(d0.get("row").as_str(), format!("{id}.0"));
    assert_eq!(
        d0.get("reason").as_str(),
        "permanent(http 404: no such endpoint)"
    );
    assert_eq!(d0.get("error").as_str(), "http 404: no such endpoint");
    assert_eq!(
        (
            d0.get("hook").as_str(),
            d0.get("source").as_str(),
            d0.get("sink").as_str(),
            d0.get("module").as_str()
        ),
        (id.to_string().as_str(), "orders", "0", "http")
    );
    assert_eq!(d0.get("attempts").as_str(), "1");
    assert_eq!(d1.get("row"), format!("{id}.1"));
    assert_eq!(d1.get("reason"), "permanent(http 410)");
    assert_eq!(d1.get("attempts"), "1");
    assert_eq!(ankusa::dlq::tenants(&env.store).await.unwrap(), ["acme"]);
    let t = env.store.totals().await.unwrap();
    assert_eq!((t.delivered, t.dead_lettered), (0, 2));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_response_body_is_read_up_to_a_bound_and_stored_truncated() {
    let env = Env::tuned(|c| c.retry.max_elapsed_ms = 200).await;
    env.http_source("acme", "orders", &["refused", "down"])
        .await;
    let big = "x".repeat(100_000);
    env.receiver.set(
        "refused",
        Behavior::Sequence(vec![Reply::status(400).body(big.clone())]),
    );
    let down: Vec<Reply> = (0..50)
        .map(|_| Reply::status(503).body(big.clone()))
        .collect();
    env.receiver.set("down", Behavior::Sequence(down));
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", "{}").await;
    env.drain(&worker).await;
    let mut dead = env.dead_letters("acme").await;
    dead.sort_by(|a, b| a.get("row").as_str().cmp(b.get("row").as_str()));
    assert_eq!(dead.len(), 2);
    let kept = format!("{}…", "x".repeat(512));
    assert_eq!(dead[0].get("row").as_str(), format!("{id}.0"));
    assert_eq!(dead[0].get("error").as_str(), format!("http 400: {kept}"));
    assert_eq!(
        dead[0].get("reason").as_str(),
        format!("permanent(http 400: {kept})")
    );
    assert_eq!(dead[1].get("row").as_str(), format!("{id}.1"));
    assert_eq!(dead[1].get("error").as_str(), format!("http 503: {kept}"));
    assert_eq!(dead[1].get("reason").as_str(), "retry_horizon(http)");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_refusing_connections_is_retried_until_the_horizon() {
    let env = Env::tuned(|c| c.retry.max_elapsed_ms = 300).await;
    let closed = format!("http://127.0.0.1:{}/hooks", free_port());
    let sink = ankusa::model::SinkEntry::http(&closed);
    let spec = ankusa::model::SourceSpec { sinks: vec![sink] };
    env.store.put_source("acme", "orders", &spec).await.unwrap();
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", "{}").await;
    env.drain(&worker).await;
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].get("row").as_str(), dead[0].get("reason").as_str()),
        (format!("{id}.0").as_str(), "retry_horizon(http)")
    );
    assert!(
        dead[0].get("error").as_str().starts_with("connect: "),
        "{}",
        dead[0].get("error").as_str()
    );
    assert!(dead[0].get("attempts").as_str().parse::<u32>().unwrap() >= 2);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_301_or_302_is_not_success_and_is_not_followed() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["moved", "found"]).await;
    let location = env.receiver.url("new-home");
    env.receiver.set(
        "moved",
        Behavior::Redirect {
            status: 301,
            location: location.clone(),
        },
    );
    env.receiver.set(
        "found",
        Behavior::Redirect {
            status: 302,
            location,
        },
    );
    let worker = env.worker().await;
    env.commit("acme", "orders", r#"{"order":3}"#).await;
    env.drain(&worker).await;
    let seen: Vec<(String, String)> = env
        .receiver
        .requests()
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    let mut seen = seen;
    seen.sort();
    assert_eq!(
        seen,
        [
            ("POST".to_string(), "found".to_string()),
            ("POST".to_string(), "moved".to_string())
        ]
    );
    assert_eq!(env.receiver.count_for("new-home"), 0);
    let mut reasons: Vec<String> = env
        .dead_letters("acme")
        .await
        .iter()
        .map(|d| d.get("reason").as_str().to_string())
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "permanent(http 301 redirect not followed)",
            "permanent(http 302 redirect not followed)"
        ]
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_endpoint_times_out_is_retried_and_frees_its_slot() {
    let env = Env::tuned(|c| {
        c.dispatch.attempt_timeout_ms = 300;
        c.dispatch.concurrency = 1;
    })
    .await;
    env.http_source("acme", "slow", &["hang"]).await;
    env.http_source("globex", "fast", &["fine"]).await;
    env.receiver.set("hang", Behavior::Hang);
    let worker = env.worker().await;
    let stuck = env.commit("acme", "slow", "{}").await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().any(|r| r.path == "hang"))
            .await
    );
    // the only slot is held by the hanging attempt; the other source's hook still gets through
    env.commit("globex", "fast", "{}").await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().any(|r| r.path == "fine"))
            .await
    );
    // and the hanging row is retried, its last error saying why
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().filter(|r| r.path == "hang").count()
                >= 3)
            .await
    );
    let row = format!("{stuck}.0");
    assert_eq!(
        env.row_field(&row, "e").as_deref(),
        Some("attempt_timeout(300ms)")
    );
    assert!(env.row_field(&row, "a").unwrap().parse::<u32>().unwrap() >= 2);
    let hang = env.receiver.requests_for("hang");
    let attempts: Vec<&str> = hang
        .iter()
        .take(3)
        .map(|r| r.header("ankusa-attempt").unwrap())
        .collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    // each attempt ran its full timeout before the next began
    assert!(hang[1].at.duration_since(hang[0].at) >= std::time::Duration::from_millis(290));
    assert_eq!(env.receiver.count_for("fine"), 1);
    assert_eq!(env.store.totals().await.unwrap().delivered, 1);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_1_delays_the_second_attempt_by_a_second() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["busy"]).await;
    env.receiver.set(
        "busy",
        Behavior::Sequence(vec![Reply::status(429).header("Retry-After", "1")]),
    );
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", "{}").await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 2)
            .await
    );
    env.drain(&worker).await;
    let got = env.receiver.requests_for("busy");
    assert_eq!(got.iter().map(|r| r.status).collect::<Vec<_>>(), [429, 200]);
    let gap = got[1].at.duration_since(got[0].at);
    // a correctness bound (the sink's Retry-After was honoured), not a performance claim
    assert!(
        gap >= std::time::Duration::from_millis(900),
        "second attempt after {gap:?}"
    );
    assert_eq!(env.store.totals().await.unwrap().delivered, 1);
    assert_eq!(env.row_field(&format!("{id}.0"), "a"), None);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_still_failing_at_the_retry_horizon_is_dead_lettered_retry_horizon() {
    let env = Env::tuned(|c| c.retry.max_elapsed_ms = 300).await;
    env.http_source("acme", "orders", &["down"]).await;
    env.receiver.set("down", Behavior::Status(500));
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", "{}").await;
    env.drain(&worker).await;
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!(
        (
            d.get("row").as_str(),
            d.get("reason").as_str(),
            d.get("error").as_str()
        ),
        (
            format!("{id}.0").as_str(),
            "retry_horizon(http)",
            "http 500"
        )
    );
    let tries = env.receiver.count_for("down");
    assert!(tries >= 2, "{tries} attempts");
    assert_eq!(d.get("attempts").as_str(), tries.to_string());
    // the last attempt ran at the horizon, not past it
    let reqs = env.receiver.requests_for("down");
    let span = reqs[tries - 1].at.duration_since(reqs[0].at);
    assert!(span >= std::time::Duration::from_millis(250), "{span:?}");
    let first: i64 = d.get("first").as_str().parse().unwrap();
    let at: i64 = d.get("at").as_str().parse().unwrap();
    // A retry never waits less than the floor, so a row whose horizon is nearer than
    // `retry.min_backoff_ms` is dead-lettered then rather than tried once more.
    let floor = env.config.retry.min_backoff_ms as i64;
    assert!(
        at - first >= 300 - floor,
        "dead-lettered {} ms after the first attempt",
        at - first
    );
    assert_eq!(env.store.totals().await.unwrap().dead_lettered, 1);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_reordered_sinks_keep_their_index_and_take_its_current_options() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let id = env.commit("acme", "orders", "{}").await;
    // the worker is not running: both rows wait while the sinks are swapped
    env.http_source("acme", "orders", &["b", "a"]).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let ids = |path: &str| {
        env.receiver
            .requests_for(path)
            .iter()
            .map(|r| r.header("ankusa-delivery-id").unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids("a"), [format!("{id}.1")]);
    assert_eq!(ids("b"), [format!("{id}.0")]);
    assert_eq!(env.store.totals().await.unwrap().delivered, 2);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_index_is_gone_binds_to_the_one_entry_with_its_module() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let id = env.commit("acme", "orders", "{}").await;
    env.http_source("acme", "orders", &["b"]).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let mut ids: Vec<String> = env
        .receiver
        .requests_for("b")
        .iter()
        .map(|r| r.header("ankusa-delivery-id").unwrap().to_string())
        .collect();
    ids.sort();
    assert_eq!(ids, [format!("{id}.0"), format!("{id}.1")]);
    assert_eq!(env.receiver.count_for("a"), 0);
    assert!(env.dead_letters("acme").await.is_empty());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_sink_entry_was_removed_is_dead_lettered_sink_gone() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let id = env.commit("acme", "orders", "{}").await;
    env.http_source("acme", "orders", &[]).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    assert_eq!(env.receiver.count(), 0);
    let mut dead: Vec<(String, String)> = env
        .dead_letters("acme")
        .await
        .iter()
        .map(|d| {
            (
                d.get("row").as_str().to_string(),
                d.get("reason").as_str().to_string(),
            )
        })
        .collect();
    dead.sort();
    assert_eq!(
        dead,
        [
            (format!("{id}.0"), "sink_gone(0, http)".to_string()),
            (format!("{id}.1"), "sink_gone(1, http)".to_string())
        ]
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_index_is_gone_and_whose_module_is_ambiguous_is_dead_lettered_sink_gone() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b", "c"]).await;
    let id = env.commit("acme", "orders", "{}").await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    assert_eq!(
        (
            env.receiver.count_for("a"),
            env.receiver.count_for("b"),
            env.receiver.count_for("c")
        ),
        (1, 1, 0)
    );
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].get("row").as_str(), dead[0].get("reason").as_str()),
        (format!("{id}.2").as_str(), "sink_gone(2, http)")
    );
    assert_eq!(dead[0].get("attempts").as_str(), "0");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_a_deleted_source_are_dead_lettered_source_gone() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    env.http_source("acme", "refunds", &["r"]).await;
    let ids = env.commit_n("acme", "orders", 3).await;
    let kept = env.commit("acme", "refunds", "{}").await;
    assert!(env.store.delete_source("acme", "orders").await.unwrap());
    let worker = env.worker().await;
    env.drain(&worker).await;
    assert_eq!(env.receiver.count_for("a"), 0);
    assert_eq!(
        env.receiver.requests_for("r")[0].header("ankusa-hook-id"),
        Some(kept.to_string().as_str())
    );
    let dead = env.dead_letters("acme").await;
    let mut rows: Vec<String> = dead
        .iter()
        .map(|d| d.get("row").as_str().to_string())
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        ids.iter().map(|i| format!("{i}.0")).collect::<Vec<_>>()
    );
    assert!(
        dead.iter()
            .all(|d| d.get("reason").as_str() == "source_gone(orders)"
                && d.get("source").as_str() == "orders"),
        "{dead:?}"
    );
    // and a new commit to the deleted source is refused
    assert!(env
        .producer
        .commit("acme", "orders", ankusa::Hook::new("{}"))
        .await
        .is_err());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_dead_lettered_without_an_attempt_of_its_own_keeps_its_last_error() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["busy"]).await;
    env.receiver.set(
        "busy",
        Behavior::Sequence(vec![Reply::status(503)
            .header("Retry-After", "1")
            .body("later")]),
    );
    let worker = env.worker().await;
    let id = env.commit("acme", "orders", "{}").await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| !r.is_empty())
            .await
    );
    // settled as a retry, due in a second: tick() returns while it waits
    worker.tick().await.unwrap();
    let row = format!("{id}.0");
    assert_eq!(env.row_field(&row, "e").as_deref(), Some("http 503: later"));
    assert!(env.store.delete_source("acme", "orders").await.unwrap());
    env.drain(&worker).await;
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!(
        (
            d.get("row").as_str(),
            d.get("reason").as_str(),
            d.get("error").as_str(),
            d.get("attempts").as_str()
        ),
        (row.as_str(), "source_gone(orders)", "http 503: later", "1")
    );
    assert_eq!(env.receiver.count(), 1);
    worker.shutdown().await;
}

const PAYLOADS: &str = "/work/shared/data/github-webhooks";

/// The real GitHub webhook bodies, with the event name from each file name.
fn real_payloads() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(PAYLOADS)
        .expect("payload directory readable")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let event = p
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .split('.')
                .next()
                .unwrap()
                .to_string();
            (event, std::fs::read(&p).unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_270_real_github_payloads_arrive_byte_exact_and_none_is_lost() {
    let env = Env::new().await;
    env.http_source("octo", "github", &["hooks"]).await;
    let payloads = real_payloads();
    assert_eq!(payloads.len(), 270);
    let worker = env.worker().await;
    let mut want = std::collections::HashMap::new();
    for chunk in payloads.chunks(25) {
        let hooks: Vec<ankusa::Hook> = chunk
            .iter()
            .map(|(event, body)| {
                ankusa::Hook::new(body.clone())
                    .header("content-type", "application/json")
                    .header("x-github-event", event.clone())
            })
            .collect();
        let r = env
            .producer
            .commit_many("octo", "github", &hooks)
            .await
            .unwrap();
        for (i, (event, body)) in chunk.iter().enumerate() {
            want.insert(
                (r.first_hook + i as u64).to_string(),
                (sha256_hex(body), event.clone()),
            );
        }
    }
    env.drain(&worker).await;
    let got = env.receiver.requests_for("hooks");
    let mut seen = std::collections::HashSet::new();
    for r in &got {
        let id = r.header("ankusa-hook-id").unwrap().to_string();
        let (sha, event) = want.get(&id).unwrap_or_else(|| panic!("unknown hook {id}"));
        assert_eq!(&r.body_sha256, sha, "hook {id} ({event}) body differs");
        assert_eq!(r.header("x-github-event"), Some(event.as_str()));
        assert_eq!(r.header("content-type"), Some("application/json"));
        seen.insert(id);
    }
    assert_eq!(got.len(), 270, "duplicates or extra requests");
    assert_eq!(
        seen.len(),
        270,
        "lost: {:?}",
        want.keys()
            .filter(|k| !seen.contains(*k))
            .collect::<Vec<_>>()
    );
    let t = env.store.totals().await.unwrap();
    assert_eq!(
        (t.committed, t.delivered, t.dead_lettered, t.dropped),
        (270, 270, 0, 0)
    );
    worker.shutdown().await;
}

#[test]
fn the_demo_on_the_real_payloads_exits_0_with_nothing_lost_or_mismatched() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args(["demo", "--payloads", PAYLOADS, "--json"])
        .env("ANKUSA_LOG", "warn")
        .output()
        .expect("ankusa demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // With --json stdout is one JSON document, nothing else.
    let summary: serde_json::Value =
        serde_json::from_str(stdout.trim()).expect("stdout is one JSON document");
    assert_eq!(summary["committed"], 270);
    assert_eq!(summary["rows"], 540);
    assert_eq!(summary["lost"], 0);
    assert_eq!(summary["pending"], 0);
    assert_eq!(summary["mismatched"], 0);
    assert_eq!(
        summary["delivered"].as_u64().unwrap() + summary["dead_lettered"].as_u64().unwrap(),
        540,
        "{summary}"
    );
}

/// the demo's own `redis-server` does not outlive a demo killed by its pid alone
/// (`kill -9`, no cleanup runs): it dies with the demo.
#[test]
fn the_demos_redis_dies_with_a_demo_killed_by_its_pid() {
    let mut demo = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args(["demo", "--hooks", "1000000"])
        .env("ANKUSA_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("ankusa demo runs");
    let pid = demo.id();
    // The demo's children, from every thread's list.
    let children = || -> Vec<u32> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Vec::new();
        };
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
            .flat_map(|c| {
                c.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect()
    };
    let is_redis = |p: u32| {
        std::fs::read_to_string(format!("/proc/{p}/comm"))
            .is_ok_and(|c| c.starts_with("redis-server"))
    };
    let deadline = std::time::Instant::now() + LIVENESS;
    let redis = loop {
        if let Some(r) = children().into_iter().find(|p| is_redis(*p)) {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the demo started no redis-server"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    demo.kill().expect("kill -9 the demo");
    demo.wait().expect("the demo is reaped");
    let deadline = std::time::Instant::now() + LIVENESS;
    // Gone, or a zombie nobody reaps yet (its parent is dead): state `Z` in /proc.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{redis}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    };
    while alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "redis-server {redis} outlived the demo killed by its pid"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
