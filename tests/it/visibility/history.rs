//! The attempt history: every attempt in order, its error, its trimming and expiry, the
//! per-entry health it feeds, and history off.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_delivered_after_two_failures_shows_three_attempts_500_500_200_in_order() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    env.receiver.set(
        "a",
        Behavior::Sequence(vec![
            Reply::status(500).body("boom"),
            Reply::status(500).body("boom"),
        ]),
    );
    let hook = env.commit("acme", "orders", r#"{"n":1}"#).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let v = ankusa_json(&env, &["hooks", "show", "acme", &hook.to_string()]).await;
    assert_eq!(
        statuses(&v["attempts"]),
        [json!(500), json!(500), json!(200)]
    );
    let a = v["attempts"].as_array().unwrap();
    let outcomes: Vec<&str> = a.iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["retry", "retry", "delivered"]);
    let numbers: Vec<u64> = a.iter().map(|a| a["attempt"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [1, 2, 3]);
    for failed in &a[..2] {
        assert_eq!(failed["error_kind"], "http_status");
        assert!(
            failed["error"].as_str().unwrap().starts_with("http 500"),
            "{failed}"
        );
        assert!(
            failed["next_attempt_ms"].as_i64().unwrap() >= failed["started_ms"].as_i64().unwrap()
        );
    }
    assert!(a[0]["started_ms"].as_i64() <= a[1]["started_ms"].as_i64());
    assert!(a[1]["started_ms"].as_i64() <= a[2]["started_ms"].as_i64());
    assert_eq!(v["rows"][0]["state"], "delivered");
    assert_eq!(v["stored"], "kept");
    // the human form names each attempt's status
    let (code, out, _) = ankusa(&env, &["hooks", "show", "acme", &hook.to_string()]).await;
    assert_eq!(code, 0);
    assert_eq!(out.matches("retry (500)").count(), 2, "{out}");
    assert_eq!(out.matches("delivered (200)").count(), 1, "{out}");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_walks_secret_unset_rows_list_shows_the_retrying_row_with_the_secret_error() {
    let env = Env::new().await;
    let (spec, secret) = walk_orders(&env);
    env.store.put_source("acme", "orders", &spec).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A long backoff: the row waits after its first attempt, so what is listed is that attempt.
    let config = env.config_file(&dir, |c| {
        c.retry.initial_backoff_ms = 120_000;
        c.retry.max_backoff_ms = 120_000;
    });
    let log = dir.path().join("worker.log");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ankusa"));
    cmd.env_remove("ANKUSA_ADMIN__TOKEN");
    // Dies with the test: a failed assertion below must not leave it running.
    let mut child = common::dies_with_test(&mut cmd)
        .args(["worker", "--config"])
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .env_remove(&secret)
        .env("ANKUSA_LOG", "info,fred=warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("worker starts");
    let hook = env.commit("acme", "orders", r#"{"order":{"id":42}}"#).await;
    let row = format!("{hook}.0");
    let listed = until(
        "the row shows as retrying",
        || {
            ankusa_json(
                &env,
                &["rows", "list", "--tenant", "acme", "--state", "retrying"],
            )
        },
        |v| !v["rows"].as_array().unwrap().is_empty(),
    )
    .await;
    let r = &listed["rows"][0];
    assert_eq!(r["row"], row.as_str());
    assert_eq!(r["state"], "retrying");
    assert_eq!(r["attempts"], 1, "{r}");
    let err = r["last_error"].as_str().unwrap();
    assert!(
        err.contains("secret reference") && err.contains(&secret),
        "{err}"
    );
    let next = r["due_at_ms"].as_i64().unwrap();
    let first = r["first_attempt_ms"].as_i64().unwrap();
    assert!(
        next >= first + 90_000,
        "next attempt after the backoff: {r}"
    );
    // the human form too
    let (_, out, _) = ankusa(
        &env,
        &["rows", "list", "--tenant", "acme", "--state", "retrying"],
    )
    .await;
    assert!(
        out.contains(&row) && out.contains("secret reference"),
        "{out}"
    );

    // hooks show: the failed attempt with its error, the audit row delivered
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().any(|x| x.path == "s1"))
            .await
    );
    let hook_s = hook.to_string();
    let show = ["hooks", "show", "acme", hook_s.as_str()];
    let v = until(
        "both attempts recorded",
        || ankusa_json(&env, &show),
        |v| v["attempts"].as_array().unwrap().len() == 2,
    )
    .await;
    let failed = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["row"] == row.as_str())
        .expect("the failed attempt is recorded")
        .clone();
    assert_eq!(failed["error_kind"], "secret");
    assert!(failed["error"].as_str().unwrap().contains(&secret));
    assert_eq!(v["rows"][0]["state"], "retrying");
    assert_eq!(v["rows"][1]["state"], "delivered");
    assert_eq!(env.receiver.count_for("s0"), 0);
    // the worker's log line of the failed attempt carries the error and the next due time
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("attempt failed"))
        .unwrap_or_else(|| panic!("no failed-attempt line in\n{text}"));
    assert!(
        line.contains("secret reference") && line.contains("next_attempt_ms"),
        "{line}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_past_max_per_tenant_is_trimmed_oldest_first() {
    let env = Env::tuned(|c| c.history.max_per_tenant = 2).await;
    env.http_source("acme", "orders", &["a"]).await;
    let worker = env.worker().await;
    let mut hooks = Vec::new();
    for i in 0..4 {
        hooks.push(env.commit("acme", "orders", format!("{{\"n\":{i}}}")).await);
        env.drain(&worker).await;
    }
    assert_eq!(env.redis_cmd(&["ZCARD", &env.key("history:acme")]), "2");
    for old in &hooks[..2] {
        assert_eq!(
            env.redis_cmd(&["EXISTS", &env.key(&format!("attempts:{old}"))]),
            "0"
        );
        assert_eq!(
            env.redis_cmd(&["EXISTS", &env.key(&format!("kept:{old}"))]),
            "0"
        );
        assert_eq!(
            env.redis_cmd(&["EXISTS", &env.key(&format!("keptbody:{old}"))]),
            "0"
        );
        let (code, out, _) =
            ankusa(&env, &["--json", "hooks", "show", "acme", &old.to_string()]).await;
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("not_found"), "{out}");
    }
    for new in &hooks[2..] {
        let v = ankusa_json(&env, &["hooks", "show", "acme", &new.to_string()]).await;
        assert_eq!(statuses(&v["attempts"]), [json!(200)]);
    }
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_past_max_age_ms_expires() {
    let env = Env::tuned(|c| c.history.max_age_ms = 300).await;
    env.http_source("acme", "orders", &["a"]).await;
    let worker = env.worker().await;
    let old = env.commit("acme", "orders", "{}").await;
    env.drain(&worker).await;
    let pttl: i64 = env
        .redis_cmd(&["PTTL", &env.key(&format!("attempts:{old}"))])
        .parse()
        .unwrap();
    assert!((1..=300).contains(&pttl), "{pttl}");
    assert!(
        poll_until(LIVENESS, || async {
            ankusa(&env, &["hooks", "show", "acme", &old.to_string()])
                .await
                .0
                == 1
        })
        .await,
        "the history of hook {old} never expired"
    );
    assert_eq!(
        env.redis_cmd(&["EXISTS", &env.key(&format!("kept:{old}"))]),
        "0"
    );
    assert_eq!(
        env.redis_cmd(&["EXISTS", &env.key(&format!("keptbody:{old}"))]),
        "0"
    );
    // the next write drops the expired hook from the tenant's index
    let new = env.commit("acme", "orders", "{}").await;
    env.drain(&worker).await;
    let index = env.redis_cmd(&["ZRANGE", &env.key("history:acme"), "0", "-1"]);
    assert_eq!(index.lines().collect::<Vec<_>>(), [new.to_string()]);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_history_off_nothing_is_recorded_or_kept() {
    let env = Env::tuned(|c| c.history.enabled = false).await;
    env.http_source("acme", "orders", &["a"]).await;
    env.receiver
        .set("a", Behavior::Sequence(vec![Reply::status(500)]));
    let worker = env.worker().await;
    let hook = env.commit("acme", "orders", "{}").await;
    env.drain(&worker).await;
    assert_eq!(env.receiver.count_for("a"), 2);
    let keys = env.keys();
    assert!(
        keys.iter().all(|k| !k.contains(":attempts:")
            && !k.contains(":kept:")
            && !k.contains(":keptbody:")
            && !k.contains(":body:")
            && !k.contains(":history:")),
        "{keys:?}"
    );
    let (code, out, _) = ankusa(
        &env,
        &["--json", "hooks", "show", "acme", &hook.to_string()],
    )
    .await;
    assert_eq!(code, 1, "{out}");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_health_gives_each_sink_entry_its_success_rate_latency_and_last_error() {
    let env = Env::tuned(|c| {
        c.retry.initial_backoff_ms = 120_000;
        c.retry.max_backoff_ms = 120_000;
    })
    .await;
    env.http_source("acme", "orders", &["good", "bad"]).await;
    env.receiver.set("bad", Behavior::Status(503));
    for i in 0..4 {
        env.commit("acme", "orders", format!("{{\"n\":{i}}}")).await;
    }
    let worker = env.worker().await;
    let health = until(
        "four attempts at each entry",
        || async {
            serde_json::to_value(
                ankusa::visibility::entry_health(&env.store, "acme")
                    .await
                    .unwrap(),
            )
            .unwrap()
        },
        |v| {
            v["entries"]
                .as_array()
                .is_some_and(|e| e.len() == 2 && e.iter().all(|e| e["attempts"] == 4))
        },
    )
    .await;
    let (good, bad) = (&health["entries"][0], &health["entries"][1]);
    assert_eq!(
        (&good["source"], &good["sink"]),
        (&json!("orders"), &json!(0))
    );
    assert_eq!(good["success_rate"], 1.0);
    assert_eq!(good["delivered"], 4);
    assert!(good.get("last_error").is_none(), "{good}");
    assert!(good["p99_ms"].as_u64().unwrap() >= good["p50_ms"].as_u64().unwrap());
    assert_eq!(bad["sink"], 1);
    assert_eq!(bad["success_rate"], 0.0);
    assert!(bad["last_error"].as_str().unwrap().contains("503"), "{bad}");
    assert!(bad["last_error_at_ms"].as_i64().unwrap() >= health["since_ms"].as_i64().unwrap());
    assert_eq!(health["hooks"], 4);
    assert_eq!(health["more"], false);
    // The same from the CLI: a table a person reads, and the JSON document.
    let (code, out, _) = ankusa(&env, &["tenants", "health", "acme"]).await;
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("SINK") && lines[0].contains("SUCCESS"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("orders/0") && lines[1].contains("100.0%"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("orders/1") && lines[2].contains("0.0%") && lines[2].contains("503"),
        "{out}"
    );
    let v = ankusa_json(&env, &["tenants", "health", "acme"]).await;
    assert_eq!(v["entries"][1]["success_rate"], 0.0, "{v}");
    // The delivered rows, newest hook first: the four of the good entry, none of the bad.
    let v = ankusa_json(
        &env,
        &["rows", "list", "--tenant", "acme", "--state", "delivered"],
    )
    .await;
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{v}");
    assert!(
        rows.iter().all(|r| r["state"] == "delivered"
            && r["sink"] == 0
            && r["attempts"] == 1
            && r["source"] == "orders"),
        "{v}"
    );
    let hooks: Vec<u64> = rows.iter().map(|r| r["hook"].as_u64().unwrap()).collect();
    assert!(
        hooks.windows(2).all(|w| w[0] > w[1]),
        "newest first: {hooks:?}"
    );
    let v = ankusa_json(
        &env,
        &[
            "rows",
            "list",
            "--tenant",
            "acme",
            "--state",
            "delivered",
            "--limit",
            "3",
        ],
    )
    .await;
    assert_eq!(
        (v["rows"].as_array().unwrap().len(), &v["more"]),
        (3, &json!(true)),
        "{v}"
    );
    let (code, out, _) = ankusa(&env, &["tenants", "health", "globex"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("no attempt of tenant globex"), "{out}");
    // Another tenant's page is empty, not acme's.
    let other = ankusa::visibility::entry_health(&env.store, "globex")
        .await
        .unwrap();
    assert!(other.entries.is_empty() && other.hooks == 0, "{other:?}");
    worker.shutdown().await;
}
