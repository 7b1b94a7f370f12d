//! Delivery through one in-process worker against a real redis-server and a real
//! HTTP receiver (R1–R9, R19).

mod common;

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
        env.redis_cmd(&["EXISTS", &format!("ankusa:{{test.p0}}:hook:{id}")]),
        "0"
    );
    worker.shutdown().await;
}
