//! Delivered and dead-lettered hooks reach the log store once, Redis keeps none of them, and
//! the CLI reads them back: search by state, event type and source, page by page.

use super::*;
use ankusa::producer::Hook;
use ankusa::testkit::Behavior;
use std::collections::HashSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_and_how_each_hook_ended_reach_postgresql_once_and_redis_keeps_none() {
    let db = TestDb::create().await;
    let env = log_env(&db, |_| {}).await;
    env.http_source("acme", "orders", &["ok"]).await;
    env.http_source("beta", "bills", &["ok", "gone"]).await;
    env.receiver.set("gone", Behavior::Status(410));
    let worker = env.worker().await;
    let acme = env.commit_n("acme", "orders", 150).await;
    let paid: Vec<Hook> = (0..20)
        .map(|i| Hook::new(format!("{{\"i\":{i}}}")).event_type("invoice.paid"))
        .collect();
    env.producer
        .commit_many("beta", "bills", &paid)
        .await
        .expect("commit");
    env.commit_n("beta", "bills", 30).await;
    env.drain(&worker).await;

    let pg = db.client().await;
    let (hooks, attempts, distinct) = archived(&env, &pg, 200).await;
    assert_eq!(hooks, 200, "one ended record per hook");
    // acme: 150 delivered; beta: 50 delivered to `ok`, 50 dead-lettered at `gone`.
    assert_eq!((attempts, distinct), (250, 250), "each attempt once");
    let by_state = pg
        .query(
            "SELECT tenant, state, count(*) FROM ankusa_hooks GROUP BY 1, 2 ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap();
    let by_state: Vec<(String, String, i64)> = by_state
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        by_state,
        [
            ("acme".into(), "delivered".into(), 150),
            ("beta".into(), "dead_lettered".into(), 50)
        ]
    );
    let gone: i64 = pg
        .query_one(
            "SELECT count(*) FROM ankusa_attempts WHERE outcome = 'dead_lettered' AND status = 410",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(gone, 50, "the dead-lettered attempts keep their status");

    // Redis keeps nothing of a delivered hook: no history, no kept body, no hook (a
    // dead-lettered one stays, held by its dead letters for replay).
    let keys = env.keys();
    let history: Vec<&String> = keys
        .iter()
        .filter(|k| {
            ["attempts:", "kept:", "keptbody:", "history:"]
                .iter()
                .any(|p| k.contains(p))
        })
        .collect();
    assert!(history.is_empty(), "history keys in Redis: {history:?}");
    let delivered: Vec<&String> = keys
        .iter()
        .filter(|k| {
            acme.iter()
                .any(|h| k.ends_with(&format!(":hook:{h}")) || k.ends_with(&format!(":body:{h}")))
        })
        .collect();
    assert!(
        delivered.is_empty(),
        "delivered hooks left in Redis: {delivered:?}"
    );

    // The CLI pages through a tenant's log: every hook once, newest first.
    let mut seen = HashSet::new();
    let mut after: Option<String> = None;
    let mut last_end = i64::MAX;
    loop {
        let mut args = vec!["hooks", "search", "acme", "--limit", "40", "--json"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let (code, out, err) = env.cli_with(None, &args).await;
        assert_eq!(code, 0, "{err}");
        let page: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
        for h in page["hooks"].as_array().unwrap() {
            let end = h["ended_ms"].as_i64().unwrap();
            assert!(end <= last_end, "newest first");
            last_end = end;
            assert!(
                seen.insert(h["hook"].as_u64().unwrap()),
                "a hook twice: {h}"
            );
            assert_eq!(h["state"], "delivered");
        }
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, acme.iter().copied().collect::<HashSet<u64>>());

    let (code, out, err) = env
        .cli_with(
            None,
            &[
                "hooks",
                "search",
                "beta",
                "--event-type",
                "invoice.paid",
                "--state",
                "dead_lettered",
                "--json",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let page: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(page["hooks"].as_array().unwrap().len(), 20, "{page}");
    assert!(page["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|h| h["event_type"] == "invoice.paid"));

    // `hooks show` of an ended hook reads its attempts from the log.
    let (code, out, err) = env
        .cli_with(None, &["hooks", "show", "acme", &acme[0].to_string()])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("delivered (200)"), "{out}");

    // A state that is none is a clear error; a tenant without a log store is told how to set one.
    let (code, _, err) = env
        .cli_with(None, &["hooks", "search", "acme", "--state", "lost"])
        .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expected delivered or dead_lettered"), "{err}");
    // A time past what PostgreSQL's timestamps hold finds nothing; it is not an outage.
    let (code, out, err) = env
        .cli_with(
            None,
            &["hooks", "search", "acme", "--since", "9000000000000000000"],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no hook of tenant acme ended"), "{out}");
    worker.shutdown().await;
}
