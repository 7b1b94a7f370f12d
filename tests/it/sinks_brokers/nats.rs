//! NATS JetStream: byte-exact delivery with headers and message ids, a missing stream,
//! order, a restart, a worker killed mid-stream, TLS with a private CA.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_hooks_arrive_byte_exact_with_their_headers_and_the_message_id() {
    let nats = nats().await;
    let env = Env::tuned(with_conn("exact", &nats.url())).await;
    let mut s = stream(&nats.url(), "EXACT", &["exact.>"]).await;
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "nats",
            serde_json::json!({"connection": "exact", "subject": "exact.github"}),
        )],
    )
    .await;
    let bodies = github_hooks(60);
    let ids = commit_github(&env, &bodies).await;
    let worker = env.worker().await;
    env.drain(&worker).await;

    let got = stream_messages(&mut s, 60).await;
    assert_eq!(s.info().await.unwrap().state.messages, 60, "no duplicates");
    let mut by_row: BTreeMap<String, &jetstream::message::StreamMessage> = BTreeMap::new();
    for m in &got {
        assert_eq!(m.subject.as_str(), "exact.github");
        let row = nats_header(m, "ankusa-delivery-id").to_string();
        assert_eq!(
            nats_header(m, "Nats-Msg-Id"),
            nats_header(m, "webhook-id"),
            "JetStream deduplicates on the row's webhook-id"
        );
        assert!(nats_header(m, "webhook-id").ends_with(&format!("_{row}")));
        assert_eq!(nats_header(m, "ankusa-tenant"), "acme");
        assert_eq!(nats_header(m, "ankusa-source"), "s");
        assert_eq!(nats_header(m, "ankusa-attempt"), "1");
        by_row.insert(row, m);
    }
    for (id, (body, event)) in ids.iter().zip(&bodies) {
        let m = by_row[&format!("{id}.0")];
        assert_eq!(m.payload.as_ref(), body.as_slice(), "hook {id} byte-exact");
        assert_eq!(nats_header(m, "X-GitHub-Event"), event);
        assert_eq!(nats_header(m, "ankusa-event-type"), event);
        assert_eq!(nats_header(m, "ankusa-hook-id"), id.to_string());
    }
    assert_eq!(env.store.totals().await.unwrap().delivered, 60);
    let states = ankusa::sinks::connections::states();
    assert_eq!(states.get("exact").map(String::as_str), Some("up"));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_without_a_stream_retries_until_one_captures_the_subject() {
    let nats = nats().await;
    let env = Env::tuned(with_bus(&nats.url())).await;
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "nats",
            serde_json::json!({"connection": "bus", "subject": "late.orders"}),
        )],
    )
    .await;
    let id = env.commit("acme", "s", "{\"late\":true}").await;
    let row = format!("{id}.0");
    let worker = env.worker().await;
    until("the attempt fails for want of a stream", LIVENESS, || {
        let worker = &worker;
        let env = &env;
        let row = row.clone();
        async move {
            let _ = worker.tick().await;
            env.row_field(&row, "e")
                .filter(|e| e.contains("no stream captures subject \"late.orders\""))
        }
    })
    .await;
    assert_eq!(env.pending_rows(), 1, "retried, not dead-lettered");
    let mut s = stream(&nats.url(), "LATE", &["late.>"]).await;
    env.drain(&worker).await;
    let got = stream_messages(&mut s, 1).await;
    assert_eq!(got[0].payload.as_ref(), b"{\"late\":true}");
    assert_eq!(s.info().await.unwrap().state.messages, 1);
    assert!(env.dead_letters("acme").await.is_empty());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_nats_entry_publishes_in_commit_order() {
    let nats = nats().await;
    let env = Env::tuned(with_bus(&nats.url())).await;
    let mut s = stream(&nats.url(), "ORDERED", &["ordered.>"]).await;
    let mut e = entry(
        "nats",
        serde_json::json!({"connection": "bus", "subject": "ordered.x"}),
    );
    e.ordered = true;
    env.put_source("acme", "s", vec![e]).await;
    let ids = env.commit_n("acme", "s", 80).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let got = stream_messages(&mut s, 80).await;
    let rows: Vec<String> = got
        .iter()
        .map(|m| nats_header(m, "ankusa-delivery-id").to_string())
        .collect();
    let want: Vec<String> = ids.iter().map(|id| format!("{id}.0")).collect();
    assert_eq!(rows, want, "stream order is commit order");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_mid_run_loses_nothing_and_duplicates_nothing() {
    let mut nats = Nats::start().await;
    let env = Env::tuned(with_bus(&nats.url())).await;
    let s = stream(&nats.url(), "RESTART", &["restart.>"]).await;
    // File storage survives the kill -9; the duplicate window covers the run.
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "nats",
            serde_json::json!({"connection": "bus", "subject": "restart.x"}),
        )],
    )
    .await;
    let ids = env.commit_n("acme", "s", 1000).await;
    let worker = env.worker().await;
    until("some hooks are delivered", LIVENESS, || {
        let mut s = s.clone();
        async move { (s.info().await.ok()?.state.messages >= 50).then_some(()) }
    })
    .await;
    kill_group(nats.pid);
    let at_kill = env.store.totals().await.unwrap().delivered;
    assert!(
        at_kill < 1000,
        "the kill came after the run ({at_kill} delivered)"
    );
    nats.restart().await;
    env.drain(&worker).await;
    let mut s2 = jetstream::new(async_nats::connect(nats.url()).await.unwrap())
        .get_stream("RESTART")
        .await
        .unwrap();
    let got = stream_messages(&mut s2, 1000).await;
    assert_eq!(
        s2.info().await.unwrap().state.messages,
        1000,
        "no duplicates"
    );
    let rows: std::collections::BTreeSet<String> = got
        .iter()
        .map(|m| nats_header(m, "ankusa-delivery-id").to_string())
        .collect();
    let want: std::collections::BTreeSet<String> = ids.iter().map(|id| format!("{id}.0")).collect();
    assert_eq!(rows, want, "every hook once");
    assert!(env.dead_letters("acme").await.is_empty());
    drop(s);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_stream_leaves_every_hook_in_the_stream_exactly_once() {
    let nats = nats().await;
    let dead_port = free_port();
    let env = Env::tuned(|c| {
        with_conn("live", &nats.url())(c);
        with_conn("dead", &format!("amqp://127.0.0.1:{dead_port}"))(c);
    })
    .await;
    let s = stream(&nats.url(), "KILL", &["kill.>"]).await;
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "nats",
            serde_json::json!({"connection": "live", "subject": "kill.github"}),
        )],
    )
    .await;
    let bodies = github_hooks(1000);
    let mut ids = Vec::new();
    for chunk in bodies.chunks(100) {
        ids.extend(commit_github(&env, chunk).await);
    }
    let dir = tempfile::tempdir().unwrap();
    let config = env.config_file(&dir, |_| {});
    let mut w1 = WorkerProcess::spawn(&config, &dir, "w1");

    // The connections' states: a /readyz detail (the worker stays ready with one down) and
    // the gauge.
    let admin = w1.admin.clone();
    let ready = until("readyz shows both connections", LIVENESS, || {
        let admin = admin.clone();
        async move {
            let r = common::procs::readyz(&admin).await?;
            let dead = r["connections"]["dead"].as_str()?.starts_with("down");
            (r["connections"]["live"] == "up" && dead).then_some(r)
        }
    })
    .await;
    assert_eq!(ready["ready"], true, "{ready}");
    let (_, text) = common::procs::get(&w1.admin, "/metrics").await.unwrap();
    assert_eq!(
        common::procs::metric_in(&text, "ankusa_connection_up", &["connection=\"live\""]),
        1.0
    );
    assert!(
        text.lines().any(|l| l.starts_with("ankusa_connection_up{")
            && l.contains("connection=\"dead\"")
            && l.ends_with(" 0")),
        "the dead connection's series is 0:\n{text}"
    );

    until("the first worker published some hooks", LIVENESS, || {
        let mut s = s.clone();
        async move { (s.info().await.ok()?.state.messages >= 200).then_some(()) }
    })
    .await;
    w1.kill9();
    let mut s = s;
    let at_kill = s.info().await.unwrap().state.messages;
    assert!(
        at_kill < 1000,
        "the kill came after the run ({at_kill} published)"
    );
    let w2 = WorkerProcess::spawn(&config, &dir, "w2");
    common::procs::wait_idle(&env, LIVENESS * 2).await;
    let got = stream_messages(&mut s, 1000).await;
    assert_eq!(
        s.info().await.unwrap().state.messages,
        1000,
        "the retried publishes were dropped as duplicates"
    );
    let mut by_row = BTreeMap::new();
    for m in &got {
        by_row.insert(nats_header(m, "ankusa-delivery-id").to_string(), m);
    }
    assert_eq!(by_row.len(), 1000);
    for (id, (body, _)) in ids.iter().zip(&bodies) {
        let m = by_row[&format!("{id}.0")];
        assert_eq!(m.payload.as_ref(), body.as_slice(), "hook {id} byte-exact");
    }
    let totals = env.store.totals().await.unwrap();
    assert_eq!(totals.delivered, 1000, "{totals:?}\n{}", w2.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_nats_connection_with_a_private_ca_and_a_token_reference_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(dir.path());
    let token = "s3cret-token";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let port = free_port();
    let mut cmd = Command::new("nats-server");
    cmd.args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir.path().join("js"))
        .args(["--auth", token, "--tls", "--tlscert"])
        .arg(&cert)
        .arg("--tlskey")
        .arg(&key)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn_shared(cmd);
    let url = format!("tls://127.0.0.1:{port}");
    let consumer = || {
        async_nats::ConnectOptions::new()
            .add_root_certificates(ca.clone())
            .require_tls(true)
            .token(token.to_string())
            .connect(url.clone())
    };
    let client = until(
        "the TLS nats-server accepts connections",
        BROKER_START,
        || {
            let c = consumer();
            async move { c.await.ok() }
        },
    )
    .await;
    let js = jetstream::new(client);
    let mut s = js
        .create_stream(jetstream::stream::Config {
            name: "TLS".into(),
            subjects: vec!["tls.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let reference = format!("${{file:{}}}", token_file.display());
    let env = Env::tuned(|c| {
        for (name, ca) in [
            ("tls-ok", Some(ca.display().to_string())),
            ("tls-untrusted", None),
        ] {
            c.connections.insert(
                name.into(),
                ConnectionConfig {
                    url: url.clone(),
                    token: Some(reference.clone()),
                    tls_ca_file: ca,
                    tenants: vec!["acme".into()],
                    ..ConnectionConfig::default()
                },
            );
        }
    })
    .await;
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "nats",
            serde_json::json!({"connection": "tls-ok", "subject": "tls.ok"}),
        )],
    )
    .await;
    env.put_source(
        "acme",
        "u",
        vec![entry(
            "nats",
            serde_json::json!({"connection": "tls-untrusted", "subject": "tls.untrusted"}),
        )],
    )
    .await;
    let id = env.commit("acme", "s", "{\"tls\":true}").await;
    let untrusted = env.commit("acme", "u", "{\"tls\":false}").await;
    let worker = env.worker().await;
    let got = stream_messages(&mut s, 1).await;
    assert_eq!(got[0].payload.as_ref(), b"{\"tls\":true}");
    assert_eq!(
        nats_header(&got[0], "ankusa-delivery-id"),
        format!("{id}.0")
    );
    // Without the private CA the server's certificate is not trusted: nothing is published,
    // the row retries.
    let row = format!("{untrusted}.0");
    until("the untrusted connection's attempt fails", LIVENESS, || {
        let (worker, env, row) = (&worker, &env, row.clone());
        async move {
            let _ = worker.tick().await;
            env.row_field(&row, "e")
        }
    })
    .await;
    assert_eq!(s.info().await.unwrap().state.messages, 1);
    let states = ankusa::sinks::connections::states();
    assert_eq!(states.get("tls-ok").map(String::as_str), Some("up"));
    assert_ne!(states.get("tls-untrusted").map(String::as_str), Some("up"));
    worker.shutdown().await;
}
