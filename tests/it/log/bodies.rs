//! Bodies of ended hooks kept in the log store (`log.keep_bodies`): `hooks show` finds them
//! once Redis has let the hook go, `hooks resend` resends one by id or every hook that ended
//! in a time range (a dry run first), the receiver gets the same bytes again, and erasure
//! takes the bodies with the records.

use super::*;
use ankusa::producer::Hook;
use std::collections::HashMap;

/// Bodies in `ankusa_bodies` whose bytes contain `marker`.
async fn bodies_with(pg: &tokio_postgres::Client, marker: &str) -> i64 {
    pg.query_one(
        "SELECT count(*) FROM ankusa_bodies WHERE position($1::bytea IN body) > 0",
        &[&marker.as_bytes()],
    )
    .await
    .unwrap()
    .get(0)
}

/// Requests the receiver got, by the SHA-256 of their body.
fn deliveries_by_body(env: &Env) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for r in env.receiver.requests() {
        *m.entry(r.body_sha256).or_default() += 1;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_hooks_bodies_are_kept_in_the_log_and_resent_by_id_or_time_range() {
    let db = TestDb::create().await;
    // Bodies up to 64 bytes are kept: the 12 small hooks, not the large one.
    let env = log_env(&db, |c| c.log.keep_bodies = 64).await;
    env.http_source("acme", "orders", &["ok"]).await;
    env.http_source("beta", "orders", &["ok"]).await;
    let worker = env.worker().await;
    let small: Vec<Hook> = (0..12)
        .map(|i| {
            Hook::new(format!("{{\"m\":\"body-marker-5521\",\"i\":{i}}}"))
                .event_type("order.paid")
                .header("x-order", format!("o-{i}"))
        })
        .collect();
    let r = env
        .producer
        .commit_many("acme", "orders", &small)
        .await
        .expect("commit");
    let ids: Vec<u64> = (0..12).map(|i| r.first_hook + i).collect();
    let large = env
        .commit(
            "acme",
            "orders",
            format!("{{\"pad\":\"{}\"}}", "x".repeat(200)),
        )
        .await;
    env.commit("beta", "orders", "{\"m\":\"beta-marker-9012\"}")
        .await;
    env.drain(&worker).await;
    let pg = db.client().await;
    archived(&env, &pg, 14).await;
    assert_eq!(bodies_with(&pg, "body-marker-5521").await, 12);
    let first_round = env.receiver.count();
    assert_eq!(first_round, 14);
    let sums = deliveries_by_body(&env);

    // `hooks show` of a hook Redis let go: its body and headers, from the log.
    let (code, out, err) = env
        .cli_with(
            None,
            &["hooks", "show", "acme", &ids[3].to_string(), "--json"],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["stored"], "logged", "{v}");
    assert_eq!(v["headers"]["x-order"], "o-3", "{v}");
    assert_eq!(
        v["body_bytes"].as_u64().unwrap() as usize,
        "{\"m\":\"body-marker-5521\",\"i\":3}".len()
    );
    let (code, out, _) = env
        .cli_with(
            None,
            &["hooks", "show", "acme", &large.to_string(), "--json"],
        )
        .await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["stored"], "gone",
        "a body over log.keep_bodies is not kept: {v}"
    );

    // A dry run counts and lists, oldest first, and sends nothing.
    let (code, out, err) = env
        .cli_with(
            None,
            &[
                "hooks",
                "resend",
                "acme",
                "--since",
                "1h",
                "--dry-run",
                "--json",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["matched"], 13, "{v}");
    let listed: Vec<u64> = v["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_u64().unwrap())
        .collect();
    assert_eq!(listed.len(), 13);
    assert!(listed.contains(&large) && ids.iter().all(|i| listed.contains(i)));
    assert_eq!(env.receiver.count(), first_round, "a dry run sends nothing");
    // Filters narrow it; a bad state is a clear error.
    let (code, out, err) = env
        .cli_with(
            None,
            &[
                "hooks",
                "resend",
                "acme",
                "--since",
                "1h",
                "--state",
                "dead_lettered",
                "--dry-run",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("would resend 0 hooks"), "{out}");
    let (code, _, err) = env
        .cli_with(
            None,
            &[
                "hooks", "resend", "acme", "--since", "1h", "--state", "lost",
            ],
        )
        .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expected delivered or dead_lettered"), "{err}");

    // The range resent: the 12 kept bodies go again, the large one is reported (exit 1).
    let (code, out, err) = env
        .cli_with(
            None,
            &["hooks", "resend", "acme", "--since", "1h", "--json"],
        )
        .await;
    assert_eq!(code, 1, "one hook not resent: {out} {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["resent"].as_array().unwrap().len(), 12, "{v}");
    let failed = v["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{v}");
    assert_eq!(failed[0]["hook"], large);
    assert!(
        failed[0]["error"]
            .as_str()
            .unwrap()
            .contains("log.keep_bodies"),
        "{v}"
    );
    // One hook by id, from the log, to its one entry.
    let (code, out, err) = env
        .cli_with(
            None,
            &[
                "hooks",
                "resend",
                "acme",
                &ids[0].to_string(),
                "--sink",
                "0",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("resent"), "{out}");
    env.drain(&worker).await;
    assert_eq!(env.receiver.count(), first_round + 13);
    // The same bytes arrived again: every small body now twice (the first three times).
    let again = deliveries_by_body(&env);
    let twice = again
        .iter()
        .filter(|(s, n)| sums.get(*s).is_some_and(|was| **n == was + 1))
        .count();
    let thrice = again
        .iter()
        .filter(|(s, n)| sums.get(*s).is_some_and(|was| **n == was + 2))
        .count();
    assert_eq!((twice, thrice), (11, 1), "{again:?}");
    let with_header = env
        .receiver
        .requests()
        .iter()
        .filter(|r| r.header("x-order") == Some("o-5"))
        .count();
    assert!(with_header >= 2, "the producer headers go again");

    // Erasure takes the bodies with the records; another tenant's stay.
    archived(&env, &pg, 27).await;
    let (code, _, err) = env
        .cli_with(None, &["tenants", "erase", "acme", "--yes"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(bodies_with(&pg, "body-marker-5521").await, 0);
    assert_eq!(bodies_with(&pg, "beta-marker-9012").await, 1);
    worker.shutdown().await;
}
