//! Dead letters in every interface: dead-lettering a source, listing, showing,
//! replaying (lanes in order) and purging.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_source_counts_pending_rows_drops_hook_gone_ones_and_leaves_claimed_ones_in_every_interface(
) {
    let env = Env::with(Default::default(), |c| {
        hold(c);
        c.dispatch.tenants.insert(
            "default".into(),
            ankusa::config::TenantLimits {
                max_inflight: Some(2),
                ..Default::default()
            },
        );
    })
    .await;
    env.receiver.set("hang", Behavior::Hang);
    let tenants = ["t-lib", "t-http", "t-cli"];
    for t in tenants {
        env.http_source(t, "doomed", &["hang"]).await;
    }
    env.http_source("t-lib", "kept", &["ok"]).await;
    let pool = Pool::start(&env, |_| {}).await;
    let mut hooks = Vec::new();
    for t in tenants {
        hooks.push(env.commit_n(t, "doomed", 10).await);
    }
    // Each tenant's window (2) fills with hanging attempts; 8 rows per tenant stay pending.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 6)
            .await
    );
    let kept = env.commit_n("t-lib", "kept", 4).await;
    // Three pending rows per tenant lose their hook.
    for (t, ids) in tenants.iter().zip(&hooks) {
        let due = env.redis_cmd(&["ZRANGE", &key(&env, &format!("due:{t}")), "0", "-1"]);
        let pending: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|h| due.lines().any(|l| l == format!("{h}.0")))
            .collect();
        assert_eq!(pending.len(), 8, "{t}: {due}");
        for h in &pending[..3] {
            env.redis_cmd(&["DEL", &key(&env, &format!("hook:{h}"))]);
        }
    }

    live_leader(&env).await;
    // Library.
    let r = ops::dead_letter_source(&env.store, "t-lib", "doomed", LIVENESS)
        .await
        .expect("library call");
    assert_eq!((r.count, r.dropped), (5, 3));
    // Admin HTTP, on the second worker (any worker may run it).
    let (status, body) = http_post(
        &format!("{}/admin/dead_letter_source", pool.url(1)),
        json!({"tenant": "t-http", "source": "doomed"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"count": 5, "dropped": 3}));
    // CLI.
    let (code, out, err) = cli(&env, &["--json", "dead-letter-source", "t-cli", "doomed"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(parse(&out), json!({"count": 5, "dropped": 3}));
    let (code, out, _) = cli(&env, &["dead-letter-source", "t-cli", "doomed"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("dead-lettered 0 pending rows"), "{out}");

    for t in tenants {
        assert_eq!(dlq_count(&env, t).await, 5, "{t}");
        let page = dlq::browse(
            &env.store,
            &Filter {
                tenant: Some(t.into()),
                ..Default::default()
            },
            100,
        )
        .await
        .unwrap();
        assert!(page
            .dead_letters
            .iter()
            .all(|d| d.reason == "source_gone(doomed)" && d.source == "doomed"));
    }
    // The claimed rows are left alone; the other source's pending rows too.
    assert_eq!(env.store.claimed_count().await.unwrap(), 6);
    assert_eq!(env.store.pending_count("t-lib").await.unwrap(), 4);
    assert_eq!(env.store.pending_count("t-http").await.unwrap(), 0);
    assert_eq!(env.store.totals().await.unwrap().dropped, 9);
    // A dead-lettered row's hook is kept for replay: no row left, one dead letter.
    let dead_hook = page_hook(&env, "t-lib").await;
    assert_eq!(
        env.redis_cmd(&["HMGET", &key(&env, &format!("hook:{dead_hook}")), "n", "d"]),
        "0\n1"
    );

    // The claimed rows come back pending once the leader dies; the source is gone by then,
    // so the next leader dead-letters them source_gone at their claim.
    for t in tenants {
        assert!(env.store.delete_source(t, "doomed").await.unwrap());
    }
    let mut pool = pool;
    let leader = pool.leader().await;
    pool.workers[leader].kill9();
    idle(&env).await;
    for t in tenants {
        assert_eq!(dlq_count(&env, t).await, 7, "{t}");
    }
    assert_eq!(env.receiver.count_for("ok"), kept.len());
    assert_eq!(env.store.totals().await.unwrap().dead_lettered, 21);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_shown_and_replayed_over_http_and_the_cli_and_none_is_lost() {
    let env = Env::with(Default::default(), |c| c.dispatch.max_inflight = 3).await;
    let pool = Pool::start(&env, |_| {}).await;
    dead_letters(&env, "t-http", "orders", "flaky", 15).await;
    dead_letters(&env, "t-cli", "orders", "flaky", 15).await;
    env.receiver.set("flaky", Behavior::Delay { ms: 5 });

    // Browse: HTTP and CLI agree with the library, filters apply.
    let (status, body) = http_get(
        &format!(
            "{}/admin/dlq?tenant=t-http&reason=permanent&sink=http&since=1h&limit=10",
            pool.url(0)
        ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["dead_letters"].as_array().unwrap().len(), 10);
    assert_eq!(body["more"], true);
    let first = body["dead_letters"][0].clone();
    assert_eq!(first["tenant"], "t-http");
    assert!(
        first["reason"].as_str().unwrap().starts_with("permanent("),
        "{first}"
    );
    let (status, none) = http_get(&format!("{}/admin/dlq?source=billing", pool.url(0)), None).await;
    assert_eq!(
        (status, none["dead_letters"].as_array().unwrap().len()),
        (200, 0)
    );
    let (status, bad) = http_get(&format!("{}/admin/dlq?since=yesterday", pool.url(0)), None).await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    let (code, out, _) = cli(
        &env,
        &[
            "--json",
            "dlq",
            "list",
            "--tenant",
            "t-cli",
            "--reason",
            "permanent",
        ],
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(parse(&out)["dead_letters"].as_array().unwrap().len(), 15);
    let (code, out, _) = cli(&env, &["dlq", "list", "--source", "orders"]).await;
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().filter(|l| l.contains(" orders ")).count(),
        30,
        "{out}"
    );
    // Show: the hook's body is there.
    let id = first["id"].as_str().unwrap();
    let (status, shown) = http_get(&format!("{}/admin/dlq/t-http/{id}", pool.url(1)), None).await;
    assert_eq!(status, 200, "{shown}");
    assert!(
        shown["hook_body"]["body"]
            .as_str()
            .unwrap()
            .starts_with("{\"n\":"),
        "{shown}"
    );
    let (code, out, _) = cli(&env, &["--json", "dlq", "show", "t-http", id]).await;
    assert_eq!(code, 0);
    assert_eq!(parse(&out)["row"], first["row"]);
    // In words: the reason, the row and the body, no JSON document.
    let (code, out, _) = cli(&env, &["dlq", "show", "t-http", id]).await;
    assert_eq!(code, 0, "{out}");
    let row = first["row"].as_str().unwrap();
    assert!(
        out.contains(&format!("row {row}")) && out.contains("reason ") && out.contains("{\"n\":"),
        "{out}"
    );
    assert!(serde_json::from_str::<Value>(out.trim()).is_err(), "{out}");
    let (status, missing) = http_get(&format!("{}/admin/dlq/t-http/1-0", pool.url(1)), None).await;
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (code, _, _) = cli(&env, &["dlq", "show", "t-http", "1-0"]).await;
    assert_eq!(code, 1);

    // Replay over HTTP, then with the CLI, both paced by pressure.
    let (status, report) = http_post(
        &format!("{}/admin/dlq/replay", pool.url(1)),
        json!({"filter": {"tenant": "t-http"}, "options": {"batch": 4, "max_lag_ms": 200}}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        (report["matched"].as_u64(), report["replayed"].as_u64()),
        (Some(15), Some(15))
    );
    let (code, out, err) = cli(
        &env,
        &[
            "--json",
            "dlq",
            "replay",
            "--tenant",
            "t-cli",
            "--reason",
            "permanent",
            "--batch",
            "4",
            "--max-lag-ms",
            "200",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let report = parse(&out);
    assert_eq!(
        (report["matched"].as_u64(), report["replayed"].as_u64()),
        (Some(15), Some(15))
    );

    idle(&env).await;
    assert_eq!(
        env.receiver.count_for("flaky"),
        60,
        "30 refused, then 30 delivered once each"
    );
    assert_eq!(env.store.totals().await.unwrap().delivered, 30);
    assert_eq!(
        dlq_count(&env, "t-http").await + dlq_count(&env, "t-cli").await,
        0
    );
    assert_eq!(hook_keys(&env), 0);
    assert!(dlq::tenants(&env.store).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_keeps_what_the_retention_keeps_and_frees_the_hook_bodies_of_the_rest() {
    let env = Env::new().await;
    // The workers keep 5 dead letters per tenant, whatever their age; none on their own.
    let pool = Pool::start(&env, |c| {
        c.dlq.max_per_tenant = 5;
        c.dlq.max_age_ms = 0;
        c.dlq.sweep_ms = 0;
    })
    .await;

    // Library: count retention for one tenant.
    dead_letters(&env, "t1", "s", "refuse", 8).await;
    let oldest_first = dead_letter_hooks(&env, "t1").await;
    let scope = PurgeScope::Retention {
        retention: Retention {
            max_age_ms: 0,
            max_per_tenant: 5,
        },
        tenant: Some("t1".into()),
    };
    assert_eq!(dlq::purge(&env.store, &scope).await.unwrap().purged, 3);
    assert_eq!(dlq_count(&env, "t1").await, 5);
    assert_eq!(hook_keys(&env), 5);
    // The three oldest went.
    assert_eq!(
        dead_letter_hooks(&env, "t1").await,
        oldest_first[3..].to_vec()
    );

    // Admin HTTP: an empty purge applies the workers' retention to every tenant.
    dead_letters(&env, "t2", "s", "refuse", 7).await;
    let (status, body) = http_post(&format!("{}/admin/dlq/purge", pool.url(0)), json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"purged": 2}));
    assert_eq!(
        (dlq_count(&env, "t1").await, dlq_count(&env, "t2").await),
        (5, 5)
    );
    assert_eq!(hook_keys(&env), 10);

    // CLI: its own config keeps dead letters for 3 s. Once the ten are older than that,
    // three fresh ones of t3 stay and the ten go.
    let cli_config = pool.dir.path().join("cli.toml");
    let mut c = env.config.clone();
    c.dlq.max_age_ms = 3_000;
    c.dlq.max_per_tenant = 0;
    std::fs::write(&cli_config, toml::to_string(&c).unwrap()).unwrap();
    let newest = dlq::browse(
        &env.store,
        &Filter {
            tenant: Some("t2".into()),
            ..Default::default()
        },
        100,
    )
    .await
    .unwrap()
    .dead_letters
    .last()
    .unwrap()
    .at_ms;
    wait_for("the ten are older than 3 s", || async {
        env.store.now_ms().await.unwrap() > newest + 3_000
    })
    .await;
    dead_letters(&env, "t3", "s", "refuse", 3).await;
    let (code, out, err) = env
        .cli_with(Some(&cli_config), &["--json", "dlq", "purge"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(parse(&out), json!({"purged": 10}));
    assert_eq!(
        dlq::tenants(&env.store).await.unwrap(),
        vec!["t3".to_string()]
    );
    assert_eq!(hook_keys(&env), 3);

    // A filtered purge deletes what it selects, whatever the retention.
    let (code, out, _) = cli(
        &env,
        &["dlq", "purge", "--tenant", "t3", "--reason", "permanent"],
    )
    .await;
    assert_eq!(code, 0);
    assert!(out.contains("purged 3 dead letters"), "{out}");
    assert_eq!(hook_keys(&env), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_source_takes_the_members_of_its_lanes_and_a_replay_puts_them_back_in_lane_order(
) {
    use ankusa::model::{SinkEntry, SourceSpec};
    let env = Env::with(Default::default(), hold).await;
    env.receiver.set("o", Behavior::Hang);
    let ordered = SinkEntry {
        ordered: true,
        key: Some("json:/lane".into()),
        ..env.http_sink("o")
    };
    env.store
        .put_source(
            "acme",
            "feed",
            &SourceSpec {
                sinks: vec![ordered],
            },
        )
        .await
        .unwrap();
    let mut pool = Pool::start(&env, |_| {}).await;
    let mut lane_of = std::collections::HashMap::new();
    for n in 0..5 {
        for lane in ["a", "b"] {
            let id = env
                .commit("acme", "feed", json!({"lane": lane, "n": n}).to_string())
                .await;
            lane_of.insert(id, lane);
        }
    }
    // Each lane's head hangs, claimed; its 4 members wait in the lane.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 2)
            .await
    );
    live_leader(&env).await;
    let r = ops::dead_letter_source(&env.store, "acme", "feed", LIVENESS)
        .await
        .unwrap();
    assert_eq!((r.count, r.dropped), (8, 0));
    assert_eq!(env.store.claimed_count().await.unwrap(), 2);
    assert_eq!(env.redis_cmd(&["GET", &key(&env, "lane_members")]), "0");
    assert_eq!(env.redis_cmd(&["SCARD", &key(&env, "lanes:acme")]), "0");

    // The heads come back and are delivered by the next leader; their lanes go idle.
    env.receiver.set("o", Behavior::Ok);
    let leader = pool.leader().await;
    pool.workers[leader].kill9();
    idle(&env).await;
    assert_eq!(env.receiver.count_for("o"), 4);

    // A replay puts the members back in their lanes, in their order.
    let report = dlq::replay(
        &env.store,
        &Filter::default(),
        &ReplayOptions::default(),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(report.replayed, 8);
    idle(&env).await;
    let requests = env.receiver.requests_for("o");
    assert_eq!(requests.len(), 12);
    for lane in ["a", "b"] {
        let order: Vec<u64> = requests[4..]
            .iter()
            .filter_map(|r| r.header("ankusa-hook-id").and_then(|h| h.parse().ok()))
            .filter(|h| lane_of[h] == lane)
            .collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order.len(), 4, "{lane}");
        assert_eq!(order, sorted, "lane {lane} delivered out of order");
    }
    assert_eq!(dlq_count(&env, "acme").await, 0);
    assert_eq!(hook_keys(&env), 0);
}
