//! The delivery log through the admin API: a tenant token reads its own tenant's log and
//! nothing of another's; erasure is the operator's.

use crate::common::pg::TestDb;
use crate::common_api::*;
use ankusa::tokens::Scope;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_token_reads_only_its_own_log_and_only_the_operator_erases() {
    let db = TestDb::create().await;
    let w = World::start(|c| c.log.url = Some(db.url.clone())).await;
    let read_a = w.mint(A, &[Scope::Read], "1h").await.token;
    let search = |t: &str| format!("{}/admin/log/{t}/hooks?since=0", w.base());
    // The world's delivered hooks reach the log; its operator sees them.
    let mut hooks: Vec<Value> = Vec::new();
    for _ in 0..300 {
        // 503 until the leader has applied the schema, then the hooks as they are archived.
        let (status, page) = call("GET", &search(A), Some(OPERATOR), &[], None).await;
        assert!(status == 200 || status == 503, "{page}");
        hooks = page["hooks"].as_array().cloned().unwrap_or_default();
        if hooks.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        hooks.len(),
        2,
        "alpha's delivered and dead-lettered hooks: {hooks:?}"
    );

    // Tenant alpha's read token: its own log, never beta's (404, as any other resource).
    let (status, page) = call("GET", &search(A), Some(&read_a), &[], None).await;
    assert_eq!(
        (status, page["hooks"].as_array().map(Vec::len)),
        (200, Some(2))
    );
    let (status, answer) = call("GET", &search(B), Some(&read_a), &[], None).await;
    assert_eq!(status, 404, "{answer}");
    let hook = w.owned[B].hook;
    let attempts = format!("{}/admin/log/{B}/hooks/{hook}/attempts", w.base());
    let (status, _) = call("GET", &attempts, Some(&read_a), &[], None).await;
    assert_eq!(status, 404);
    let (status, _) = call("GET", &search(A), None, &[], None).await;
    assert_eq!(status, 401);

    // Erasure: refused to a tenant token, done for the operator, named hooks or all.
    let erase = format!("{}/admin/log/{A}/erase", w.base());
    let body = |v: Value| Some(("application/json", v.to_string()));
    let (status, _) = call(
        "POST",
        &erase,
        Some(&read_a),
        &[],
        body(json!({"all": true})),
    )
    .await;
    assert_eq!(status, 403);
    let (status, answer) = call("POST", &erase, Some(OPERATOR), &[], body(json!({}))).await;
    assert_eq!(status, 400, "neither hooks nor all: {answer}");
    let (status, answer) = call(
        "POST",
        &erase,
        Some(OPERATOR),
        &[],
        body(json!({"all": true})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["records_erased"].as_u64().unwrap() >= 2, "{answer}");
    let (_, page) = call("GET", &search(A), Some(OPERATOR), &[], None).await;
    assert_eq!(page["hooks"], json!([]), "alpha's log is empty");
    let (_, page) = call("GET", &search(B), Some(OPERATOR), &[], None).await;
    assert_eq!(
        page["hooks"].as_array().map(Vec::len),
        Some(2),
        "beta's stays"
    );
}
