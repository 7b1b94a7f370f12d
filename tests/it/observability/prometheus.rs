//! A real Prometheus scraping a running worker with the shipped config; the per-tenant
//! gauges.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_worker_with_the_compose_config_and_every_panel_has_data() {
    let Some(prometheus) = tool("prometheus") else {
        return skip("prometheus");
    };
    // With a delivery log store, as the compose stack's workers have: the log panels' data.
    let db = crate::common::pg::TestDb::create().await;
    let url = db.url.clone();
    let r = running_worker_with(move |c| c.log.url = Some(url)).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(&cfg, test_prometheus_config(&r.worker.admin)).unwrap();
    if let Some(promtool) = tool("promtool") {
        let out = Command::new(promtool)
            .args(["check", "config"])
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool check config:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let port = free_port();
    let log = dir.path().join("prometheus.log");
    let child = Command::new(prometheus)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("prometheus starts");
    let p = Prometheus {
        child,
        url: format!("http://127.0.0.1:{port}"),
        log,
    };

    // The target is up and its samples are stored.
    let up = poll(LIVENESS, || async {
        let v = p.query(&r.http, r#"up{job="ankusa"}"#).await;
        (v["data"]["result"][0]["value"][1] == "1").then_some(v)
    })
    .await;
    assert!(
        up.is_some(),
        "up{{job=\"ankusa\"}} never became 1; prometheus log:\n{}",
        p.log_text()
    );
    let delivered = poll(LIVENESS, || async {
        let q = format!(
            r#"ankusa_deliveries_total{{job="ankusa", ankusa_instance="{}", module="http", outcome="delivered"}}"#,
            r.env.config.instance
        );
        let v = p.query(&r.http, &q).await;
        (v["data"]["result"][0]["value"][1] == "3").then_some(v)
    })
    .await;
    assert!(
        delivered.is_some(),
        "no ankusa_deliveries_total sample of 3; prometheus log:\n{}",
        p.log_text()
    );

    // The alert rules are loaded from the rule file the stack mounts.
    let rules: Value = r
        .http
        .get(format!("{}/api/v1/rules", p.url))
        .send()
        .await
        .map(json_of)
        .expect("Prometheus answers")
        .await;
    let loaded: BTreeSet<String> = rules["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();
    let want: BTreeSet<String> = alert_rules().into_iter().map(|(n, _)| n).collect();
    assert_eq!(loaded, want, "alert rules loaded by Prometheus");

    // Every dashboard query is valid PromQL and returns data for this worker: a renamed
    // label, a wrong histogram suffix or a broken selector would come back empty.
    let mut exprs = Vec::new();
    for (file, dash) in dashboards() {
        for (at, e) in dashboard_exprs(&file, &dash) {
            if !e.starts_with("label_values(") {
                exprs.push((
                    at,
                    e.replace("$ankusa_instance", &r.env.config.instance)
                        .replace("$__rate_interval", "1m"),
                ));
            }
        }
    }
    let empty_ones = || async {
        let mut empty = Vec::new();
        for (at, e) in &exprs {
            let v = p.query(&r.http, e).await;
            assert_ne!(v["status"], "error", "{at}: Prometheus refuses {e}: {v}");
            if v["data"]["result"].as_array().is_none_or(|a| a.is_empty()) {
                empty.push(format!("{at}: {e}"));
            }
        }
        empty
    };
    if poll(LIVENESS, || async {
        empty_ones().await.is_empty().then_some(())
    })
    .await
    .is_none()
    {
        panic!(
            "dashboard queries with no data for a worker that delivered and dead-lettered:\n{}",
            empty_ones().await.join("\n")
        );
    }
    let values: Value = r
        .http
        .get(format!("{}/api/v1/label/ankusa_instance/values", p.url))
        .send()
        .await
        .map(json_of)
        .expect("Prometheus answers")
        .await;
    assert_eq!(
        values["data"],
        serde_json::json!([r.env.config.instance]),
        "the instance variable's values"
    );
    drop(r);
}

/// `history.metrics_tenants` bounds the `tenant` label: the listed tenant gets its
/// `ankusa_tenant_*` series (set by the leader every 5 s), a tenant that is not listed gets
/// none, however busy it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_tenant_gauges_exist_only_for_the_tenants_the_config_lists() {
    let env = Env::new().await;
    for t in ["acme", "globex"] {
        env.http_source(t, "orders", &["down"]).await;
    }
    env.receiver.set("down", Behavior::Status(503));
    let dir = tempfile::tempdir().unwrap();
    let cfg = env.config_file(&dir, |c| c.history.metrics_tenants = vec!["acme".into()]);
    let worker = WorkerProcess::spawn(&cfg, &dir, "gauges");
    env.commit_n("acme", "orders", 3).await;
    env.commit_n("globex", "orders", 4).await;
    // The value of `family`'s series for `tenant`, whatever other labels it carries.
    let value = |text: &str, family: &str, tenant: &str| -> Option<f64> {
        let label = format!("tenant=\"{tenant}\"");
        text.lines()
            .find(|l| l.starts_with(&format!("{family}{{")) && l.contains(&label))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let http = reqwest::Client::new();
    let url = format!("http://{}/metrics", worker.admin);
    let last = std::sync::Mutex::new(String::new());
    let text = poll(LIVENESS + Duration::from_secs(10), || async {
        let text = http.get(&url).send().await.ok()?.text().await.ok()?;
        *last.lock().unwrap() = text.clone();
        (value(&text, "ankusa_tenant_retrying_rows", "acme") == Some(3.0)).then_some(text)
    })
    .await
    .unwrap_or_else(|| {
        let last = last.lock().unwrap();
        let tenant: Vec<&str> = last.lines().filter(|l| l.contains("tenant")).collect();
        panic!(
            "acme's 3 retrying rows never showed on /metrics; its tenant lines: {tenant:#?}\nlog:\n{}",
            worker.log_text()
        )
    });
    assert_eq!(value(&text, "ankusa_tenant_due_rows", "acme"), Some(3.0));
    assert_eq!(
        value(&text, "ankusa_tenant_failing_sinks", "acme"),
        Some(1.0)
    );
    for family in [
        "ankusa_tenant_claimed_rows",
        "ankusa_tenant_oldest_lag_seconds",
    ] {
        assert!(
            value(&text, family, "acme").is_some(),
            "{family} for acme missing:\n{text}"
        );
    }
    assert!(
        !text.contains("tenant=\"globex\""),
        "a tenant not in history.metrics_tenants got a series:\n{text}"
    );
}
