//! Scheduled delivery, as a receiver and an operator see it: a hook delayed 2 s arrives
//! after 2 s and not before, a time past is delivered at once, one beyond
//! `commit.max_delay_ms` is refused naming the key; a scheduled row reads `scheduled`;
//! `hooks cancel` before the time means never delivered, after the claim it answers that
//! nothing was cancelled; a scheduled head holds its ordered lane. The ingest headers, the
//! `produce` flags and the cancel route and command against a worker process.

use crate::common;

use ankusa::model::SinkEntry;
use ankusa::store::{Cancelled, CommitError};
use ankusa::testkit::{Behavior, Received};
use ankusa::visibility::{self, RowFilter, RowState};
use ankusa::Hook;
use common::procs::{eventually, wait_leader, write_config};
use common::{admin_call, Env, WorkerProcess, LIVENESS};
use std::time::{Duration, Instant};

/// The requests the receiver saw carrying `x-hook: <name>`.
fn arrivals(reqs: &[Received], name: &str) -> Vec<Instant> {
    reqs.iter()
        .filter(|r| r.header("x-hook") == Some(name))
        .map(|r| r.at)
        .collect()
}

fn named(body: &str, name: &str) -> Hook {
    Hook::new(body.to_string()).header("x-hook", name)
}

/// Wait until the leader has written `commit.max_delay_ms` to the partition's settings, so
/// the commit script enforces the test's limit and not the default.
async fn leader_settings(env: &Env, max_delay_ms: u64) {
    let key = env.key("settings");
    eventually("the leader keeps commit.max_delay_ms", LIVENESS, || async {
        let v = env.redis_cmd(&["HGET", &key, "max_delay_ms"]);
        if v == max_delay_ms.to_string() {
            Ok(())
        } else {
            Err(v)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_hook_arrives_after_its_delay_never_before_and_a_past_time_arrives_at_once() {
    let env = Env::tuned(|c| c.commit.max_delay_ms = 60_000).await;
    env.http_source("acme", "orders", &["a"]).await;
    let worker = env.worker().await;
    leader_settings(&env, 60_000).await;

    // Beyond the operator's limit: refused, naming the key, nothing written.
    let keys = env.keys();
    let e = env
        .producer
        .commit(
            "acme",
            "orders",
            named("{}", "far").delay(Duration::from_secs(61)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, CommitError::TooLate { index: 0, max_ms: 60_000, ahead_ms } if ahead_ms == 61_000),
        "{e:?}"
    );
    assert!(e.to_string().contains("commit.max_delay_ms"), "{e}");
    assert_eq!(env.keys(), keys, "a refused commit writes nothing");

    let before = Instant::now();
    let delayed = env
        .producer
        .commit(
            "acme",
            "orders",
            named("{}", "delayed").delay(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    // A time in the past is due at once, like a hook without one.
    let past = env
        .producer
        .commit("acme", "orders", named("{}", "past").deliver_at_ms(1))
        .await
        .unwrap();

    // Until it is due the row reads `scheduled`, due at the commit's time + 2 s.
    let page = visibility::list_rows(&env.store, "acme", None, Some(RowFilter::Scheduled), 10)
        .await
        .unwrap();
    assert_eq!(page.rows.len(), 1, "{page:?}");
    let row = &page.rows[0];
    assert_eq!(row.hook, delayed.first_hook);
    assert_eq!(row.state, RowState::Scheduled);
    assert_eq!(row.due_at_ms, Some(delayed.committed_at_ms + 2_000));
    let view = visibility::show_hook(&env.store, "acme", delayed.first_hook)
        .await
        .unwrap();
    assert_eq!(view.rows[0].state, RowState::Scheduled);

    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| arrivals(r, "past").len() == 1)
            .await,
        "the hook scheduled in the past is delivered at once"
    );
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| arrivals(r, "delayed").len() == 1)
            .await,
        "the delayed hook arrives"
    );
    let at = arrivals(&env.receiver.requests(), "delayed")[0];
    // Due at the Redis clock's commit ms + 2000; that ms is floored, so at most 1 ms of the
    // 2 s can lie before `before`.
    assert!(
        at.duration_since(before) >= Duration::from_millis(1_999),
        "delivered {:?} after the commit, before its 2 s",
        at.duration_since(before)
    );
    let totals = env.store.totals().await.unwrap();
    assert_eq!((totals.committed, totals.scheduled), (2, 1), "{totals:?}");
    assert!(past.first_hook > delayed.first_hook);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_hook_is_never_delivered_and_a_claimed_one_is_not_cancelled() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    env.http_source("acme", "slow", &["slow"]).await;
    env.receiver.set("slow", Behavior::Hang);
    // An ordered entry: every hook of it is one lane.
    let lane_entry = SinkEntry {
        ordered: true,
        ..env.http_sink("lane")
    };
    env.put_source("acme", "lane", vec![lane_entry]).await;
    let worker = env.worker().await;

    // Cancelled before it is due: both rows go, the hook too, and nothing arrives; a
    // marker scheduled after it shows the time has passed.
    let gone = env
        .producer
        .commit(
            "acme",
            "orders",
            named("{}", "cancelled").delay(Duration::from_millis(1_500)),
        )
        .await
        .unwrap();
    let marker = env
        .producer
        .commit(
            "acme",
            "orders",
            named("{}", "marker").delay(Duration::from_millis(2_500)),
        )
        .await
        .unwrap();
    let c = visibility::cancel(&env.store, "acme", gone.first_hook)
        .await
        .unwrap();
    assert!(c.cancelled, "{c:?}");
    assert_eq!((c.outcome.as_str(), c.rows), ("cancelled", 2));
    assert_eq!(
        env.redis_cmd(&["EXISTS", &env.key(&format!("hook:{}", gone.first_hook))]),
        "0"
    );
    // Cancelled again: nothing of it is left for the tenant.
    let again = visibility::cancel(&env.store, "acme", gone.first_hook).await;
    assert!(
        matches!(again, Err(ankusa::Error::NotFound(_))),
        "{again:?}"
    );
    // Another tenant cannot reach it either way.
    assert_eq!(
        env.store
            .cancel_hook("other", gone.first_hook)
            .await
            .unwrap(),
        Cancelled::NotFound
    );

    // A hook due at its commit is not scheduled: left alone.
    let now_hook = env
        .producer
        .commit("acme", "slow", named("{}", "now"))
        .await
        .unwrap();
    let c = visibility::cancel(&env.store, "acme", now_hook.first_hook)
        .await
        .unwrap();
    assert_eq!((c.cancelled, c.outcome.as_str()), (false, "not_scheduled"));

    // Scheduled, then claimed (its attempt hangs at the receiver): not cancelled.
    let claimed = env
        .producer
        .commit(
            "acme",
            "slow",
            named("{}", "claimed").delay(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| arrivals(r, "claimed").len() == 1)
            .await,
        "the scheduled hook's attempt starts"
    );
    let c = visibility::cancel(&env.store, "acme", claimed.first_hook)
        .await
        .unwrap();
    assert!(!c.cancelled, "{c:?}");
    assert_eq!(c.outcome, "claimed");
    assert_eq!(
        c.row.as_deref(),
        Some(&*format!("{}.0", claimed.first_hook))
    );
    assert!(c.message.contains("not cancelled"), "{}", c.message);

    // A scheduled head holds its lane: the hook committed behind it waits for it.
    let head_before = Instant::now();
    env.producer
        .commit(
            "acme",
            "lane",
            named("{}", "head").delay(Duration::from_millis(1_500)),
        )
        .await
        .unwrap();
    env.producer
        .commit("acme", "lane", named("{}", "behind"))
        .await
        .unwrap();
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| arrivals(r, "marker").len() == 2)
            .await,
        "the marker arrives at both sinks"
    );
    assert!(
        arrivals(&env.receiver.requests(), "cancelled").is_empty(),
        "the cancelled hook was delivered"
    );
    // Delivered (once its outcome is settled): finished, nothing to cancel.
    let c = eventually("the marker's delivery is settled", LIVENESS, || async {
        let c = visibility::cancel(&env.store, "acme", marker.first_hook)
            .await
            .unwrap();
        if c.outcome == "claimed" {
            Err(c.message)
        } else {
            Ok(c)
        }
    })
    .await;
    assert_eq!(
        (c.cancelled, c.outcome.as_str()),
        (false, "finished"),
        "{c:?}"
    );

    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| arrivals(r, "behind").len() == 1)
            .await,
        "the lane's second hook arrives"
    );
    let reqs = env.receiver.requests();
    let (head, behind) = (arrivals(&reqs, "head"), arrivals(&reqs, "behind"));
    assert_eq!(head.len(), 1, "the scheduled head is delivered first");
    assert!(head[0] <= behind[0], "the lane kept its order");
    assert!(
        head[0].duration_since(head_before) >= Duration::from_millis(1_499),
        "the head was delivered before its time"
    );

    // A scheduled head an hour ahead, a hook behind it; cancelling the head lets it go.
    let held = env
        .producer
        .commit(
            "acme",
            "lane",
            named("{}", "held").delay(Duration::from_secs(3_600)),
        )
        .await
        .unwrap();
    env.producer
        .commit("acme", "lane", named("{}", "freed"))
        .await
        .unwrap();
    let c = visibility::cancel(&env.store, "acme", held.first_hook)
        .await
        .unwrap();
    assert_eq!((c.cancelled, c.rows), (true, 1), "{c:?}");
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| arrivals(r, "freed").len() == 1)
            .await,
        "the hook behind a cancelled head is delivered"
    );
    assert!(arrivals(&env.receiver.requests(), "held").is_empty());
    let totals = env.store.totals().await.unwrap();
    assert_eq!(totals.cancelled, 2, "{totals:?}");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_headers_produce_flags_and_the_cancel_route_and_command_schedule_and_cancel() {
    let env = Env::tuned(|c| c.commit.max_delay_ms = 3_600_000).await;
    env.http_source("acme", "orders", &["a"]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&env, &dir, "ankusa.toml", |c| {
        c.admin.token = Some("s3cret-0123456789abcdefghijklmnopqrstuv".into());
    });
    let w = WorkerProcess::spawn(&config, &dir, "w");
    wait_leader(&w).await;
    leader_settings(&env, 3_600_000).await;
    let ingest = format!("http://{}/v1/hooks/acme/orders", w.admin);
    let post = |headers: Vec<(&'static str, String)>| {
        let ingest = ingest.clone();
        async move {
            let mut req = reqwest::Client::new()
                .post(ingest)
                .bearer_auth("s3cret-0123456789abcdefghijklmnopqrstuv")
                .body("{\"n\":1}");
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let r = req.send().await.expect("ingest answers");
            let status = r.status().as_u16();
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&r.bytes().await.unwrap_or_default())
                    .unwrap_or_default(),
            )
        }
    };

    // Ankusa-Delay: due 2 s after the commit, said in the answer; not kept as a header.
    let before = Instant::now();
    let (status, v) = post(vec![
        ("ankusa-delay", "2s".into()),
        ("x-request-id", "delayed".into()),
    ])
    .await;
    assert_eq!(status, 202, "{v}");
    let delayed = v["hook_id"].as_u64().unwrap();
    assert!(v["deliver_at_ms"].as_i64().is_some(), "{v}");

    // RFC 3339 beyond commit.max_delay_ms: 400 naming the key; a bad value: 400 naming the
    // header; both headers at once: 400.
    let far = time::OffsetDateTime::now_utc() + time::Duration::hours(2);
    let far = far
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let (status, v) = post(vec![("ankusa-deliver-at", far)]).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("commit.max_delay_ms"),
        "{v}"
    );
    let (status, v) = post(vec![("ankusa-delay", "soon".into())]).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ankusa-delay"),
        "{v}"
    );
    let (status, _) = post(vec![
        ("ankusa-delay", "1s".into()),
        ("ankusa-deliver-at", "1".into()),
    ])
    .await;
    assert_eq!(status, 400);

    // An hour ahead (ms since the epoch), then cancelled over the API.
    let hour = (time::OffsetDateTime::now_utc().unix_timestamp() + 3_000) * 1_000;
    let (status, v) = post(vec![
        ("ankusa-deliver-at", hour.to_string()),
        ("x-request-id", "api-cancelled".into()),
    ])
    .await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["deliver_at_ms"].as_i64(), Some(hour), "{v}");
    let api_cancelled = v["hook_id"].as_u64().unwrap();
    let (status, v) = admin_call(
        reqwest::Method::POST,
        format!("http://{}/admin/hooks/acme/{api_cancelled}/cancel", w.admin),
        Some("s3cret-0123456789abcdefghijklmnopqrstuv"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["cancelled"].as_bool(), v["rows"].as_u64()),
        (Some(true), Some(1)),
        "{v}"
    );

    // `produce --delay`, listed as scheduled, cancelled by the command.
    let body = dir.path().join("p.json");
    std::fs::write(&body, "{\"n\":2}").unwrap();
    let body = body.to_str().unwrap();
    let (code, out, err) = env
        .cli_with(
            None,
            &[
                "--json",
                "produce",
                "acme",
                "orders",
                body,
                "--delay",
                "1h",
                "-H",
                "x-request-id: cli-cancelled",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cli_cancelled = v["first_hook"].as_u64().unwrap();
    assert!(v["deliver_at_ms"].as_i64().is_some(), "{v}");
    let (code, out, err) = env
        .cli_with(
            None,
            &[
                "--json",
                "rows",
                "list",
                "--tenant",
                "acme",
                "--state",
                "scheduled",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let hooks: Vec<u64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["hook"].as_u64().unwrap())
        .collect();
    assert!(hooks.contains(&cli_cancelled), "{v}");
    let (code, out, err) = env
        .cli_with(
            None,
            &["hooks", "cancel", "acme", &cli_cancelled.to_string()],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cancelled: 1 row removed"), "{out}");
    // A delay past commit.max_delay_ms is the caller's input: a usage error (exit 2) that says
    // how far, not a failed operation.
    let (code, _, err) = env
        .cli_with(None, &["produce", "acme", "orders", body, "--delay", "40d"])
        .await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("40d ahead") && err.contains("commit.max_delay_ms"),
        "{err}"
    );
    // A second time: nothing of it is left (not found, exit 1).
    let (code, _, err) = env
        .cli_with(
            None,
            &["hooks", "cancel", "acme", &cli_cancelled.to_string()],
        )
        .await;
    assert_eq!(code, 1, "{err}");
    // `produce --deliver-at` in the past: delivered now, no `due at`.
    let (code, out, err) = env
        .cli_with(
            None,
            &[
                "produce",
                "acme",
                "orders",
                body,
                "--deliver-at",
                "2020-01-01T00:00:00Z",
                "-H",
                "x-request-id: past",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("due at"), "{out}");

    let arrived = |id: &'static str| {
        move |reqs: &[Received]| reqs.iter().any(|r| r.header("x-request-id") == Some(id))
    };
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, arrived("past"))
            .await
    );
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, arrived("delayed"))
            .await
    );
    let reqs = env.receiver.requests();
    let at = reqs
        .iter()
        .find(|r| r.header("x-request-id") == Some("delayed"))
        .unwrap();
    assert!(
        at.at.duration_since(before) >= Duration::from_millis(1_999),
        "delivered before its 2 s"
    );
    assert!(
        at.header("ankusa-delay").is_none(),
        "the schedule header is not kept"
    );
    let _ = delayed;
    assert!(!reqs.iter().any(|r| matches!(
        r.header("x-request-id"),
        Some("api-cancelled" | "cli-cancelled")
    )));
}
