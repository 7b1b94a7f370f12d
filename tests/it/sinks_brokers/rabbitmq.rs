//! RabbitMQ: confirmed delivery with headers, unroutable and missing exchanges, order,
//! a restart, a worker killed mid-run, amqps with a private CA.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_hooks_arrive_byte_exact_confirmed_with_their_headers() {
    let rabbit = rabbit().await;
    let env = Env::tuned(with_bus(&rabbit.url())).await;
    let ch = bound_queue(&rabbit.url(), "exact-x", "exact-q", "github.#").await;
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "rabbitmq",
            serde_json::json!({"connection": "bus", "exchange": "exact-x",
                               "routing_key": "github.hooks", "mandatory": true}),
        )],
    )
    .await;
    let bodies = github_hooks(60);
    let ids = commit_github(&env, &bodies).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let got = take(&ch, "exact-q", 60).await;
    assert_eq!(queue_depth(&ch, "exact-q").await, 0, "no duplicates");
    let mut by_row = BTreeMap::new();
    for m in &got {
        let props = &m.delivery.properties;
        let row = amqp_header(m, "ankusa-delivery-id");
        let msg_id = props.message_id().as_ref().expect("message_id").to_string();
        assert_eq!(msg_id, amqp_header(m, "webhook-id"));
        assert!(msg_id.ends_with(&format!("_{row}")));
        assert_eq!(*props.delivery_mode(), Some(2), "persistent");
        assert_eq!(m.delivery.routing_key.as_str(), "github.hooks");
        assert_eq!(amqp_header(m, "ankusa-tenant"), "acme");
        by_row.insert(row, m);
    }
    for (id, (body, event)) in ids.iter().zip(&bodies) {
        let m = by_row[&format!("{id}.0")];
        assert_eq!(m.delivery.data, *body, "hook {id} byte-exact");
        assert_eq!(amqp_header(m, "X-GitHub-Event"), *event);
        assert_eq!(amqp_header(m, "ankusa-event-type"), *event);
    }
    assert_eq!(env.store.totals().await.unwrap().delivered, 60);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_mandatory_message_retries_then_delivers_once_a_queue_is_bound() {
    let rabbit = rabbit().await;
    let env = Env::tuned(with_bus(&rabbit.url())).await;
    // The exchange exists; no queue is bound to it yet.
    let ch = bound_queue(&rabbit.url(), "late-x", "", "").await;
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "rabbitmq",
            serde_json::json!({"connection": "bus", "exchange": "late-x",
                               "routing_key": "k", "mandatory": true}),
        )],
    )
    .await;
    let id = env.commit("acme", "s", "{\"late\":1}").await;
    let row = format!("{id}.0");
    let worker = env.worker().await;
    until("the attempt comes back unroutable", LIVENESS, || {
        let (worker, env, row) = (&worker, &env, row.clone());
        async move {
            let _ = worker.tick().await;
            env.row_field(&row, "e")
                .filter(|e| e.contains("unroutable"))
        }
    })
    .await;
    assert_eq!(env.pending_rows(), 1, "retried, not dead-lettered");
    bound_queue(&rabbit.url(), "late-x", "late-q", "k").await;
    env.drain(&worker).await;
    let got = take(&ch, "late-q", 1).await;
    assert_eq!(got[0].delivery.data, b"{\"late\":1}");
    assert_eq!(queue_depth(&ch, "late-q").await, 0, "delivered once");
    assert!(env.dead_letters("acme").await.is_empty());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_exchange_retries_and_other_entries_keep_delivering() {
    let rabbit = rabbit().await;
    let env = Env::tuned(with_bus(&rabbit.url())).await;
    let ch = bound_queue(&rabbit.url(), "fine-x", "fine-q", "#").await;
    env.put_source(
        "acme",
        "s",
        vec![
            entry(
                "rabbitmq",
                serde_json::json!({"connection": "bus", "exchange": "no-such-x"}),
            ),
            entry(
                "rabbitmq",
                serde_json::json!({"connection": "bus", "exchange": "fine-x", "routing_key": "k"}),
            ),
        ],
    )
    .await;
    let ids = env.commit_n("acme", "s", 20).await;
    let worker = env.worker().await;
    let first = format!("{}.0", ids[0]);
    until("the missing exchange is reported", LIVENESS, || {
        let (worker, env, row) = (&worker, &env, first.clone());
        async move {
            let _ = worker.tick().await;
            env.row_field(&row, "e")
                .filter(|e| e.contains("no-such-x") || e.contains("NOT_FOUND"))
        }
    })
    .await;
    // The second entry's rows all arrive, though the first keeps closing the channel.
    take(&ch, "fine-q", 20).await;
    bound_queue(&rabbit.url(), "no-such-x", "late2-q", "#").await;
    env.drain(&worker).await;
    assert_eq!(queue_depth(&ch, "late2-q").await, 20);
    assert_eq!(env.store.totals().await.unwrap().delivered, 40);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_rabbitmq_entry_keeps_commit_order() {
    let rabbit = rabbit().await;
    let env = Env::tuned(with_bus(&rabbit.url())).await;
    let ch = bound_queue(&rabbit.url(), "ordered-x", "ordered-q", "#").await;
    let mut e = entry(
        "rabbitmq",
        serde_json::json!({"connection": "bus", "exchange": "ordered-x", "routing_key": "o"}),
    );
    e.ordered = true;
    env.put_source("acme", "s", vec![e]).await;
    let ids = env.commit_n("acme", "s", 80).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let got = take(&ch, "ordered-q", 80).await;
    let rows: Vec<String> = got
        .iter()
        .map(|m| amqp_header(m, "ankusa-delivery-id"))
        .collect();
    let want: Vec<String> = ids.iter().map(|id| format!("{id}.0")).collect();
    assert_eq!(rows, want, "queue order is commit order");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_restart_mid_run_loses_nothing() {
    let mut rabbit = Rabbit::start().await;
    let bus = with_bus(&rabbit.url());
    // Retries every ~1 s and no breaker: the default backoff (1 s doubling to 10 min) and
    // breaker (open 5 s, doubling) grow through the outage, so on a loaded machine a row's
    // next attempt came after the drain's liveness bound (seen: 820 rows still pending).
    let env = Env::tuned(|c| {
        bus(c);
        c.retry.max_backoff_ms = c.retry.initial_backoff_ms;
        c.dispatch.breaker_failures = 0;
    })
    .await;
    bound_queue(&rabbit.url(), "restart-x", "restart-q", "#").await;
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "rabbitmq",
            serde_json::json!({"connection": "bus", "exchange": "restart-x",
                               "routing_key": "r", "mandatory": true}),
        )],
    )
    .await;
    let ids = env.commit_n("acme", "s", 1000).await;
    let worker = env.worker().await;
    // The worker delivers while the test waits for part of the run.
    until("some hooks are delivered", LIVENESS, || {
        let store = env.store.clone();
        async move { (store.totals().await.ok()?.delivered >= 50).then_some(()) }
    })
    .await;
    kill_group(rabbit.pid);
    let at_kill = env.store.totals().await.unwrap().delivered;
    assert!(
        at_kill < 1000,
        "the kill came after the run ({at_kill} delivered)"
    );
    rabbit.restart().await;
    // The worker reconnects first (its connection's own backoff), on a loaded machine after
    // a while (seen: one tick() over 30 s in CI while other builds ran): the broker's bound.
    env.drain_within(&worker, BROKER_START).await;
    // Confirmed messages were persisted before their confirm: the restarted broker holds
    // them. A publish whose confirm the kill swallowed is published again (same message_id).
    let ch = amqp_connect(&rabbit.url())
        .await
        .unwrap()
        .create_channel()
        .await
        .unwrap();
    let n = queue_depth(&ch, "restart-q").await as usize;
    let got = take(&ch, "restart-q", n).await;
    let rows: std::collections::BTreeSet<String> = got
        .iter()
        .map(|m| amqp_header(m, "ankusa-delivery-id"))
        .collect();
    let want: std::collections::BTreeSet<String> = ids.iter().map(|id| format!("{id}.0")).collect();
    assert_eq!(rows, want, "every hook in the queue");
    let dups = got.len() - rows.len();
    assert!(
        dups <= env.config.dispatch.concurrency,
        "{dups} duplicates: at most the publishes in flight at the kill"
    );
    assert!(env.dead_letters("acme").await.is_empty());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_run_leaves_every_hook_in_the_queue_with_its_message_id() {
    let rabbit = rabbit().await;
    let env = Env::tuned(with_bus(&rabbit.url())).await;
    let ch = bound_queue(&rabbit.url(), "kill-x", "kill-q", "#").await;
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "rabbitmq",
            serde_json::json!({"connection": "bus", "exchange": "kill-x", "routing_key": "k"}),
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
    until("the first worker published some hooks", LIVENESS, || {
        let ch = ch.clone();
        async move { (queue_depth(&ch, "kill-q").await >= 200).then_some(()) }
    })
    .await;
    w1.kill9();
    let at_kill = queue_depth(&ch, "kill-q").await;
    assert!(
        at_kill < 1000,
        "the kill came after the run ({at_kill} published)"
    );
    let _w2 = WorkerProcess::spawn(&config, &dir, "w2");
    common::procs::wait_idle(&env, LIVENESS * 2).await;
    let n = queue_depth(&ch, "kill-q").await as usize;
    let got = take(&ch, "kill-q", n).await;
    // A publish confirmed but not settled before the kill is published again, with the
    // same message_id: a consumer deduplicating on it sees each hook once.
    let mut by_id: BTreeMap<String, &lapin::message::BasicGetMessage> = BTreeMap::new();
    for m in &got {
        let id = m
            .delivery
            .properties
            .message_id()
            .as_ref()
            .unwrap()
            .to_string();
        if let Some(prev) = by_id.insert(id, m) {
            assert_eq!(
                prev.delivery.data, m.delivery.data,
                "a duplicate is the same hook"
            );
        }
    }
    assert_eq!(by_id.len(), 1000, "every hook once by message_id");
    let dups = got.len() - by_id.len();
    assert!(
        dups <= env.config.dispatch.concurrency,
        "{dups} duplicates: at most the attempts in flight at the kill"
    );
    let want: BTreeMap<String, &[u8]> = ids
        .iter()
        .zip(&bodies)
        .map(|(id, (b, _))| (format!("{id}.0"), b.as_slice()))
        .collect();
    for m in by_id.values() {
        let row = amqp_header(m, "ankusa-delivery-id");
        assert_eq!(
            m.delivery.data.as_slice(),
            want[&row],
            "hook {row} byte-exact"
        );
    }
    assert_eq!(env.store.totals().await.unwrap().delivered, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amqps_connection_with_a_private_ca_and_a_password_reference_delivers() {
    let rabbit = rabbit().await;
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "guest\n").unwrap();
    let ca = rabbit.dir.path().join("ca.pem").display().to_string();
    let env = Env::tuned(|c| {
        c.connections.insert(
            "secure".into(),
            ConnectionConfig {
                url: format!("amqps://127.0.0.1:{}", rabbit.tls_port),
                username: Some("guest".into()),
                password: Some(format!("${{file:{}}}", password.display())),
                tls_ca_file: Some(ca),
                tenants: vec!["acme".into()],
                ..ConnectionConfig::default()
            },
        );
    })
    .await;
    let ch = bound_queue(&rabbit.url(), "tls-x", "tls-q", "#").await;
    env.put_source(
        "acme",
        "s",
        vec![entry(
            "rabbitmq",
            serde_json::json!({"connection": "secure", "exchange": "tls-x", "routing_key": "t"}),
        )],
    )
    .await;
    let id = env.commit("acme", "s", "{\"amqps\":true}").await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let got = take(&ch, "tls-q", 1).await;
    assert_eq!(got[0].delivery.data, b"{\"amqps\":true}");
    assert_eq!(
        amqp_header(&got[0], "ankusa-delivery-id"),
        format!("{id}.0")
    );
    let states = ankusa::sinks::connections::states();
    assert_eq!(states.get("secure").map(String::as_str), Some("up"));
    worker.shutdown().await;
}
