//! Erasure removes a tenant's or a hook's records and leaves an audit record without the data;
//! retention drops whole days past `log.retention_days`.

use super::*;
use ankusa::log::{record::parse_entry, LogStore, Search};
use ankusa::producer::Hook;

/// Every row of every log table as text, concatenated.
async fn all_rows(pg: &tokio_postgres::Client) -> String {
    let mut all = String::new();
    for t in [
        "ankusa_hooks",
        "ankusa_attempts",
        "ankusa_audit",
        "ankusa_log_cursor",
    ] {
        let r = pg
            .query_one(
                &format!("SELECT coalesce(string_agg(x::text, '|'), '') FROM {t} x"),
                &[],
            )
            .await
            .unwrap();
        all.push_str(&r.get::<_, String>(0));
    }
    // Bodies as their bytes (a row's text would show them in hex).
    let r = pg
        .query_one(
            "SELECT coalesce(string_agg(tenant || headers || encode(body, 'escape'), '|'), '') \
             FROM ankusa_bodies",
            &[],
        )
        .await
        .unwrap();
    all.push_str(&r.get::<_, String>(0));
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_leaves_no_byte_of_a_tenant_and_is_audited_without_the_data() {
    let db = TestDb::create().await;
    let env = log_env(&db, |_| {}).await;
    env.http_source("acme", "orders", &["ok"]).await;
    env.http_source("other", "orders", &["ok"]).await;
    let worker = env.worker().await;
    let secret: Vec<Hook> = (0..5)
        .map(|i| {
            Hook::new(format!("{{\"i\":{i},\"m\":\"acme-secret-7781\"}}"))
                .event_type("acme-secret-7781")
        })
        .collect();
    let r = env
        .producer
        .commit_many("acme", "orders", &secret)
        .await
        .unwrap();
    let kept: Vec<Hook> = (0..5)
        .map(|i| Hook::new(format!("{{\"i\":{i}}}")).event_type("other-kept-4410"))
        .collect();
    env.producer
        .commit_many("other", "orders", &kept)
        .await
        .unwrap();
    env.drain(&worker).await;
    let pg = db.client().await;
    archived(&env, &pg, 10).await;
    assert!(
        all_rows(&pg).await.contains("acme-secret-7781"),
        "the marker was archived"
    );

    let first = r.first_hook.to_string();
    let (code, out, err) = env
        .cli_with(None, &["hooks", "erase", "acme", &first])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("erased 2 records of 1 hook"), "{out}");
    let (code, _, err) = env.cli_with(None, &["tenants", "erase", "acme"]).await;
    assert_eq!(code, 2, "asks for --yes: {err}");
    let (code, out, err) = env
        .cli_with(None, &["tenants", "erase", "acme", "--yes", "--json"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["records_erased"],
        8
    );

    let rows = all_rows(&pg).await;
    assert!(
        !rows.contains("acme-secret-7781"),
        "the marker is gone from every table"
    );
    assert!(
        rows.contains("other-kept-4410"),
        "another tenant's records stay"
    );
    assert!(
        !env.all_values().contains("acme-secret-7781"),
        "and from Redis"
    );
    let audit: Vec<(String, String)> = pg
        .query(
            "SELECT action, detail FROM ankusa_audit WHERE tenant = 'acme' ORDER BY at",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        audit,
        [
            ("erase_hooks".into(), "1 hooks, 2 records".into()),
            ("erase_tenant".into(), "8 records".into())
        ]
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_whole_days_past_it_and_keeps_the_rest() {
    let db = TestDb::create().await;
    let cfg = ankusa::config::LogConfig {
        url: Some(db.url.clone()),
        ..Default::default()
    };
    let log = LogStore::connect(&cfg, "retention").unwrap();
    assert_eq!(log.migrate().await.unwrap(), [1, 2, 3]);
    assert!(
        log.migrate().await.unwrap().is_empty(),
        "migrations apply once"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let day = 86_400_000;
    let ended = |tenant: &str, hook: u64, at: i64| {
        format!(r#"{{"t":"{tenant}","h":{hook},"e":"delivered","s":"s","c":{at},"d":0,"at":{at}}}"#)
    };
    let entries: Vec<(String, ankusa::log::Parsed)> = [
        (1, now - 40 * day),
        (2, now - 31 * day),
        (3, now - day),
        (4, now),
    ]
    .iter()
    .map(|(h, at)| (format!("{h}-0"), parse_entry(&ended("acme", *h, *at))))
    .collect();
    let a = log.archive(0, &entries).await.unwrap();
    assert_eq!((a.entries, a.records), (4, 4));
    assert_eq!(
        log.archive(0, &entries).await.unwrap().records,
        0,
        "written once"
    );

    let dropped = log.drop_expired(30, now).await.unwrap();
    assert_eq!(dropped.len(), 6, "two days of three tables: {dropped:?}");
    let search = |since| Search {
        tenant: "acme".into(),
        since_ms: Some(since),
        limit: 100,
        ..Search::default()
    };
    let left: Vec<u64> = log
        .search(&search(0))
        .await
        .unwrap()
        .hooks
        .iter()
        .map(|h| h.hook)
        .collect();
    assert_eq!(
        left,
        [4, 3],
        "the days inside the retention stay, newest first"
    );
    assert_eq!(log.days("ankusa_hooks").await.unwrap().len(), 2);

    // A tenant kept fewer days loses its older records; another tenant's stay.
    let entries: Vec<(String, ankusa::log::Parsed)> = [
        ("short", 11, now - 3 * day),
        ("short", 12, now),
        ("acme", 13, now - 3 * day),
    ]
    .iter()
    .enumerate()
    .map(|(i, (t, h, at))| (format!("{}-0", 10 + i), parse_entry(&ended(t, *h, *at))))
    .collect();
    assert_eq!(log.archive(0, &entries).await.unwrap().records, 3);
    assert_eq!(log.expire_tenant("short", 2, now).await.unwrap(), 1);
    let ids = |t: &'static str| {
        let log = log.clone();
        async move {
            log.search(&Search {
                tenant: t.into(),
                since_ms: Some(0),
                limit: 100,
                ..Search::default()
            })
            .await
            .unwrap()
            .hooks
            .iter()
            .map(|h| h.hook)
            .collect::<Vec<u64>>()
        }
    };
    assert_eq!(ids("short").await, [12]);
    assert_eq!(ids("acme").await, [4, 3, 13]);

    // The database is one instance's: another is refused, naming both.
    log.claim_owner().await.unwrap();
    log.claim_owner().await.unwrap();
    let other = LogStore::connect(&cfg, "other").unwrap();
    let err = other.claim_owner().await.unwrap_err().to_string();
    assert!(
        err.contains("\"retention\"") && err.contains("\"other\"") && err.contains("of its own"),
        "{err}"
    );
}
