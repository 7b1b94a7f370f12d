//! The console's and portal's pages read over HTTP (no browser): what they say and offer,
//! against a real worker, Redis and receiver. Each test fetches pages as a user's bearer
//! would (the operator token, or a tenant token of chosen scopes) and asserts on the page's
//! visible text and its forms and links; `tests/it/console.rs` drives the same pages in
//! Chromium.

use crate::common;
use crate::common_api;

use ankusa::testkit::{Behavior, Reply};
use ankusa::tokens::Scope;
use common::procs::eventually;
use common::LIVENESS;
use common_api::*;
use serde_json::json;

/// A page fetched with `token` as bearer: `(status, HTML)`.
async fn page(w: &World, path: &str, token: &str) -> (u16, String) {
    let resp = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}{path}", w.base()))
        .bearer_auth(token)
        .timeout(LIVENESS)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// The text a browser shows of `html`: tags left out, the entities maud writes decoded,
/// runs of white space as one space.
fn visible(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The page at `path` once its visible text contains `what` (fetched again until then).
async fn page_showing(w: &World, path: &str, token: &str, what: &str) -> String {
    eventually(&format!("{path} shows {what:?}"), LIVENESS, || async {
        let (status, html) = page(w, path, token).await;
        if status == 200 && visible(&html).contains(what) {
            Ok(html)
        } else {
            Err(format!(
                "{status}: {}",
                visible(&html).chars().take(600).collect::<String>()
            ))
        }
    })
    .await
}

/// A receiver's error text with a terminal escape sequence and a line break shows escaped on
/// the hook page and the tenant page; the overview names led partitions by id; a portal
/// error page is the portal's, with no word or link of the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_show_escaped_and_portal_errors_stay_in_the_portal() {
    let w = World::start(|_| {}).await;
    w.env.receiver.set(
        "ctl",
        Behavior::Sequence(vec![
            Reply::status(400).body("\u{1b}[31mred\u{1b}[0m\r\nforged: line")
        ]),
    );
    w.env.http_source(A, "ctl", &["ctl"]).await;
    let hook = w.env.commit(A, "ctl", "{}").await;
    let html = page_showing(
        &w,
        &format!("/ui/tenants/{A}/hooks/{hook}"),
        OPERATOR,
        "HTTP 400",
    )
    .await;
    assert!(!html.contains('\u{1b}'), "no raw ESC in the page");
    assert!(!html.contains("red\u{1b}") && !html.contains("\r\nforged"));
    let text = visible(&html);
    assert!(
        text.contains(r"\x1b[31mred\x1b[0m\r\nforged: line"),
        "shown escaped: {text}"
    );
    let html = page_showing(&w, &format!("/ui/tenants/{A}"), OPERATOR, "forged").await;
    assert!(
        !html.contains('\u{1b}') && !html.contains("\r\nforged"),
        "tenant page"
    );
    assert!(visible(&html).contains(r"\r\nforged: line"));

    // The overview's partitions are ids, said as such.
    let (_, html) = page(&w, "/ui/", OPERATOR).await;
    let text = visible(&html);
    assert!(text.contains("Partition ids led here:"), "{text}");
    assert!(!text.contains("Partitions this worker leads"), "{text}");

    // A portal error: the portal's name and link, nothing of the console.
    let token = w.mint(A, &Scope::ALL, "1h").await.token;
    let (status, html) = page(&w, "/portal/hooks/987654321", &token).await;
    assert_eq!(status, 404, "{html}");
    let text = visible(&html);
    assert!(text.contains("Webhooks portal"), "{text}");
    assert!(!text.to_lowercase().contains("console"), "{text}");
    assert!(
        !html.contains("href=\"/ui"),
        "no link to the console: {html}"
    );
    assert!(html.contains("href=\"/portal/\""), "{html}");
}

/// A portal session of a token offers only what the token's scopes allow and says which
/// scope an action needs; a full one offers everything. An endpoint added in the portal
/// gets a signing secret, shown once, and its deliveries are signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portal_offers_only_what_the_sessions_scopes_allow() {
    let w = World::start(|_| {}).await;
    let hook = w.owned[A].hook;
    let read = w.mint(A, &[Scope::Read], "1h").await.token;
    let (status, html) = page(&w, "/portal/", &read).await;
    assert_eq!(status, 200, "a read token opens the portal: {html}");
    let text = visible(&html);
    assert!(text.contains("needs the sources scope"), "{text}");
    assert!(
        !html.contains("action=\"/portal/endpoints"),
        "no endpoint form: {html}"
    );
    let html = page_showing(&w, &format!("/portal/hooks/{hook}"), &read, "Resend").await;
    assert!(visible(&html).contains("needs the replay scope"), "{html}");
    assert!(!html.contains("/resend\""), "no resend form: {html}");

    let sources = w.mint(A, &[Scope::Read, Scope::Sources], "1h").await.token;
    let (status, html) = page(&w, "/portal/", &sources).await;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("action=\"/portal/endpoints/orders/0/rotate\""),
        "{html}"
    );
    assert!(
        html.contains("action=\"/portal/endpoints\""),
        "the add form: {html}"
    );
    assert!(!html.contains("/test\""), "no test event form: {html}");
    assert!(visible(&html).contains("needs the ingest scope"), "{html}");

    let all = w.mint(A, &Scope::ALL, "1h").await.token;
    let (_, html) = page(&w, "/portal/", &all).await;
    assert!(
        html.contains("action=\"/portal/endpoints/orders/test\""),
        "{html}"
    );
    assert!(
        !visible(&html).contains("scope, which"),
        "nothing missing: {html}"
    );
    let html = page_showing(&w, &format!("/portal/hooks/{hook}"), &all, "Resend").await;
    assert!(
        html.contains(&format!("action=\"/portal/hooks/{hook}/resend\"")),
        "{html}"
    );

    // Adding an endpoint: its secret shown once, its deliveries signed with it.
    let form = format!(
        "source=signed&url={}&event_types=",
        url::form_urlencoded::byte_serialize(w.env.receiver.url("signed").as_bytes())
            .collect::<String>()
    );
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{}/portal/endpoints", w.base()))
        .bearer_auth(&sources)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    let html = resp.text().await.unwrap();
    let secret = html
        .split("id=\"new-secret\">")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .unwrap_or_else(|| panic!("the secret is shown: {html}"))
        .to_string();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let spec = w.env.store.get_source(A, "signed").await.unwrap().unwrap();
    let opts = serde_json::to_value(&spec.sinks[0]).unwrap()["opts"].clone();
    assert_eq!(opts["signing_secret"], json!([secret]), "{opts}");
    let (_, html) = page(&w, "/portal/", &all).await;
    assert!(!html.contains(&secret), "shown once only");
    w.env.commit(A, "signed", "{\"signed\":true}").await;
    let got = eventually("the hook reaches the new endpoint", LIVENESS, || async {
        w.env
            .receiver
            .requests_for("/signed")
            .first()
            .cloned()
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
    let sig = got.header("webhook-signature").unwrap_or_default();
    assert!(sig.starts_with("v1,"), "signed: {sig:?}");
}

/// The Tenants page lists tenants with nothing waiting (a source, or a config section),
/// after those with rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenants_page_lists_tenants_with_nothing_waiting() {
    let w = World::start(|c| {
        c.tenants.insert("gamma".into(), Default::default());
    })
    .await;
    w.env.http_source("delta", "quiet", &["ok"]).await;
    let (status, html) = page(&w, "/ui/tenants", OPERATOR).await;
    assert_eq!(status, 200, "{html}");
    for t in [A, B, "gamma", "delta"] {
        assert!(
            html.contains(&format!("href=\"/ui/tenants/{t}\"")),
            "{t} listed: {}",
            visible(&html)
        );
    }
    // The search box narrows them too.
    let (_, html) = page(&w, "/ui/tenants?q=elt", OPERATOR).await;
    assert!(html.contains("href=\"/ui/tenants/delta\""), "{html}");
    assert!(!html.contains("href=\"/ui/tenants/gamma\""), "{html}");
}

/// A delivered hook Redis still keeps shows its body on the hook page, in the console and
/// the portal; and the portal's deliveries list it by default (no delivery log here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivered_hooks_show_their_kept_body_and_are_listed_by_default() {
    let w = World::start(|_| {}).await;
    let hook = w.owned[A].hook;
    let token = w.mint(A, &Scope::ALL, "1h").await.token;
    let body = format!("{{\"tenant\":\"{A}\"}}");
    let html = page_showing(
        &w,
        &format!("/ui/tenants/{A}/hooks/{hook}"),
        OPERATOR,
        "Body",
    )
    .await;
    assert!(
        visible(&html).contains(&body),
        "console: {}",
        visible(&html)
    );
    let (_, html) = page(&w, &format!("/portal/hooks/{hook}"), &token).await;
    let text = visible(&html);
    assert!(text.contains(&body), "portal: {text}");
    assert!(!text.contains("admin API"), "{text}");

    let (status, html) = page(&w, "/portal/deliveries", &token).await;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains(&format!("href=\"/portal/hooks/{hook}\"")),
        "the delivered hook is listed: {}",
        visible(&html)
    );
    assert!(visible(&html).contains("delivered"), "{html}");
}

/// An endpoint answering 500 opens its breaker: the tenant page and the portal say so,
/// with the rows it parked, instead of a bare "enabled".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_and_its_parked_rows_are_shown() {
    let w = World::start(|c| {
        c.dispatch.breaker_failures = 3;
        c.dispatch.breaker_open_ms = 600_000;
        c.dispatch.breaker_max_open_ms = 600_000;
        c.retry.initial_backoff_ms = 10;
        c.retry.max_backoff_ms = 20;
        c.dispatch.sink_concurrency = 1;
    })
    .await;
    w.env.receiver.set("down", Behavior::Status(500));
    w.env.http_source(A, "down", &["down"]).await;
    w.env.commit_n(A, "down", 5).await;
    let parked = regex::Regex::new(r"breaker open\s+until .*· \d+ parked").unwrap();
    for (path, token) in [
        (format!("/ui/tenants/{A}"), OPERATOR.to_string()),
        ("/portal/".into(), w.mint(A, &Scope::ALL, "1h").await.token),
    ] {
        eventually(
            &format!("{path} shows the open breaker"),
            LIVENESS,
            || async {
                let (_, html) = page(&w, &path, &token).await;
                let text = visible(&html)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                parked.is_match(&text).then_some(()).ok_or(text)
            },
        )
        .await;
    }
    let (_, health) = call(
        "GET",
        &format!("{}/admin/tenants/{A}/health", w.base()),
        Some(OPERATOR),
        &[],
        None,
    )
    .await;
    let down = health["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["source"] == "down")
        .unwrap_or_else(|| panic!("{health}"))
        .clone();
    assert_eq!(down["breaker"], "open", "{down}");
    assert!(down["breaker_until_ms"].as_i64().unwrap() > 0, "{down}");
    assert!(down["parked"].as_u64().unwrap() >= 1, "{down}");
}
