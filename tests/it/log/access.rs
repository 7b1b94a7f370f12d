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
    // The body the log kept: the tenant's own, never another's.
    let body = |t: &str, h: u64| format!("{}/admin/log/{t}/hooks/{h}/body", w.base());
    let (status, kept) = call("GET", &body(A, w.owned[A].hook), Some(&read_a), &[], None).await;
    assert_eq!(status, 200, "{kept}");
    assert_eq!(kept["body"], format!("{{\"tenant\":\"{A}\"}}"), "{kept}");
    assert_eq!(kept["state"], "delivered");
    let (status, _) = call("GET", &body(B, hook), Some(&read_a), &[], None).await;
    assert_eq!(status, 404);
    let (status, _) = call("GET", &search(A), None, &[], None).await;
    assert_eq!(status, 401);

    // Resend by time range needs `replay`: refused to a read token, a dry run for the
    // operator lists alpha's two hooks; since is required.
    let resend = format!("{}/admin/log/{A}/resend", w.base());
    let dry = || {
        Some((
            "application/json",
            json!({"since": "0", "dry_run": true}).to_string(),
        ))
    };
    let (status, _) = call("POST", &resend, Some(&read_a), &[], dry()).await;
    assert_eq!(status, 403);
    let (status, answer) = call("POST", &resend, Some(OPERATOR), &[], dry()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["matched"], 2, "{answer}");
    assert_eq!(
        answer["hooks"].as_array().map(Vec::len),
        Some(2),
        "{answer}"
    );
    let (status, answer) = call(
        "POST",
        &resend,
        Some(OPERATOR),
        &[],
        Some(("application/json", json!({"dry_run": true}).to_string())),
    )
    .await;
    assert_eq!(status, 400, "{answer}");

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

/// The value of cookie `name` among `resp`'s `Set-Cookie` headers.
fn set_cookie(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no {name} cookie"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_delivered_hooks_from_the_log() {
    let db = TestDb::create().await;
    let w = World::start(|c| c.log.url = Some(db.url.clone())).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // Log in as the operator: the form's nonce and its cookie, then the token.
    let form = http
        .get(format!("{}/ui/login", w.base()))
        .send()
        .await
        .unwrap();
    let nonce_cookie = set_cookie(&form, "ankusa_login");
    let html = form.text().await.unwrap();
    let nonce = html
        .split("name=\"nonce\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the login form carries a nonce");
    let resp = http
        .post(format!("{}/ui/login", w.base()))
        .header("cookie", format!("ankusa_login={nonce_cookie}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("nonce={nonce}&token={OPERATOR}"))
        .send()
        .await
        .unwrap();
    let session = format!("ankusa_ui={}", set_cookie(&resp, "ankusa_ui"));
    // The delivered hook is gone from Redis; the deliveries page finds it in the log.
    let hook = w.owned[A].hook;
    let page = format!("{}/ui/tenants/{A}/deliveries?state=delivered", w.base());
    let link = format!("/ui/tenants/{A}/hooks/{hook}");
    let mut text = String::new();
    for _ in 0..300 {
        let resp = http
            .get(&page)
            .header("cookie", &session)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        text = resp.text().await.unwrap();
        if text.contains(&link) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(text.contains(&link), "no line for hook {hook}:\n{text}");
    // Its page shows its attempt, read from the log.
    let resp = http
        .get(format!("{}{link}", w.base()))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("logged") && text.contains("delivered"),
        "its body is kept in the log: {text}"
    );
    assert!(
        !text.contains("this hook has none"),
        "the page shows the body the log kept: {text}"
    );
}
