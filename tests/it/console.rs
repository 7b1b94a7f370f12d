//! The operator console and the tenant portal in a real browser: Debian's `chromium`
//! driven through `chromedriver` (WebDriver, the `fantoccini` crate) against a real worker,
//! Redis and webhook receiver. One world and ONE browser for the whole binary: the flows
//! run one after another in a single test (each in its own task, so one failing flow does
//! not hide the others), and each ends in an assertion on the page and on Redis or the
//! receiver. Screenshots of the pages at 1280 px and 390 px are written under
//! `$CARGO_TARGET_TMPDIR/console-screenshots/`.

use crate::common;
use crate::common_api;

use ankusa::testkit::{Behavior, Receiver, ReceiverOptions, Reply};
use common::procs::eventually;
use common::{free_port, LIVENESS};
use common_api::*;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// The receiver answer of the XSS flow: markup and a script in a receiver's error body.
const XSS: &str = "<script>alert('xss')</script><img src=x onerror=\"alert('img')\" id=\"pwned\">";

/// `chromedriver`, killed on drop.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The world, the browser, and where screenshots go.
struct Harness {
    w: World,
    b: Client,
    _driver: Driver,
    shots: PathBuf,
}

impl Harness {
    async fn start() -> Harness {
        let w = World::start(|_| {}).await;
        let port = free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (Debian: apt-get install chromium chromium-driver)");
        let driver = Driver(child);
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900",
                         "--no-first-run", "--no-default-browser-check"]
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let b = eventually("chromedriver answers a session", LIVENESS, || {
            let caps = caps.clone();
            let url = url.clone();
            async move {
                let http = hyper_util::client::legacy::connect::HttpConnector::new();
                ClientBuilder::new(http)
                    .capabilities(caps)
                    .connect(&url)
                    .await
                    .map_err(|e| e.to_string())
            }
        })
        .await;
        let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
        std::fs::create_dir_all(&shots).unwrap();
        Harness {
            w,
            b,
            _driver: driver,
            shots,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.w.base())
    }

    async fn go(&self, path: &str) {
        self.b.goto(&self.url(path)).await.unwrap();
    }

    /// The page's visible text. Asked again while the browser is between two documents
    /// (a form just submitted): the body found may go stale before its text is read.
    async fn text(&self) -> String {
        eventually("the page has a body to read", LIVENESS, || async {
            self.b
                .find(Locator::Css("body"))
                .await
                .map_err(|e| e.to_string())?
                .text()
                .await
                .map_err(|e| e.to_string())
        })
        .await
    }

    /// The page's text once it contains `what`. The page is read again as it loads, and
    /// fetched again (a GET of its address, never a browser refresh: refreshing the answer
    /// to a form would submit the form again) when it still lacks `what` after about a
    /// second, for what the server shows only later (a delivery's outcome).
    async fn wait_text(&self, what: &str) -> String {
        let polls = std::sync::atomic::AtomicU32::new(0);
        eventually(&format!("the page shows {what:?}"), LIVENESS, || async {
            let t = self.text().await;
            if t.contains(what) {
                return Ok(t);
            }
            if polls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 50 == 49 {
                let here = self.b.current_url().await.map_err(|e| e.to_string())?;
                self.b
                    .goto(here.as_str())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Err(t.chars().take(400).collect())
        })
        .await
    }

    async fn fill(&self, css: &str, value: &str) {
        let e = self.b.find(Locator::Css(css)).await.unwrap();
        e.clear().await.unwrap();
        e.send_keys(value).await.unwrap();
    }

    /// Open the portal's endpoint of `source` (the tenant has other flows' sources too);
    /// a click on its summary toggles it, so click until it is open.
    async fn open_endpoint(&self, source: &str) {
        let details = format!("section[aria-label='Source {source}'] details.endpoint");
        eventually(&format!("{details} opens"), LIVENESS, || async {
            if self
                .b
                .find(Locator::Css(&format!("{details}[open]")))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if let Ok(summary) = self
                .b
                .find(Locator::Css(&format!("{details} summary")))
                .await
            {
                let _ = summary.click().await;
            }
            Err("closed".to_string())
        })
        .await
    }

    /// Click `css` once it can be clicked: just after a navigation the element found may
    /// belong to the page being left (stale) or not be laid out yet. A refused click did
    /// nothing, so asking again never submits a form twice.
    async fn click(&self, css: &str) {
        eventually(&format!("{css} can be clicked"), LIVENESS, || async {
            self.b
                .find(Locator::Css(css))
                .await
                .map_err(|e| e.to_string())?
                .click()
                .await
                .map_err(|e| e.to_string())
        })
        .await
    }

    /// Accept the confirmation the enhancement script asks for.
    async fn confirm(&self) {
        eventually("a confirmation is asked", LIVENESS, || async {
            self.b.accept_alert().await.map_err(|e| e.to_string())
        })
        .await;
    }

    /// Screenshots of the current page at 1280 px and 390 px: `<name>-1280.png`, `-390.png`.
    async fn shoot(&self, name: &str) {
        for (w, h) in [(1280, 900), (390, 844)] {
            self.b.set_window_size(w, h).await.unwrap();
            let png = self.b.screenshot().await.unwrap();
            std::fs::write(self.shots.join(format!("{name}-{w}.png")), png).unwrap();
        }
        self.b.set_window_size(1280, 900).await.unwrap();
    }

    async fn login_operator(&self) {
        self.b.delete_all_cookies().await.unwrap();
        self.go("/ui/").await;
        assert!(self
            .b
            .current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/ui/login"));
        self.fill("#token", OPERATOR).await;
        self.click("form.card button").await;
        self.wait_text("Overview").await;
    }

    /// A portal link of `tenant` minted through `POST /admin/portal-links`.
    async fn portal_link(&self, tenant: &str) -> String {
        let (s, v) = call(
            "POST",
            &self.url("/admin/portal-links"),
            Some(OPERATOR),
            &[],
            Some((
                "application/json",
                json!({"tenant": tenant, "ttl": "15m"}).to_string(),
            )),
        )
        .await;
        assert_eq!(s, 201, "{v}");
        v["path"].as_str().unwrap().to_string()
    }

    /// Commit through ingest with an event type; the hook id.
    async fn ingest(&self, tenant: &str, source: &str, event_type: &str, body: &str) -> u64 {
        let (s, v) = call(
            "POST",
            &self.url(&format!("/v1/hooks/{tenant}/{source}")),
            Some(OPERATOR),
            &[("x-event-type", event_type)],
            Some(("application/json", body.to_string())),
        )
        .await;
        assert_eq!(s, 202, "{v}");
        v["hook_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no hook id in {v}"))
    }

    /// The dead letters of `tenant` whose hook is `hook`.
    async fn dead_of(&self, tenant: &str, hook: u64) -> usize {
        self.w
            .env
            .dead_letters(tenant)
            .await
            .iter()
            .filter(|d| d.hook == Some(hook))
            .count()
    }
}

/// Flow 1: the operator logs in, finds a failing hook by event type, opens it, sees its
/// attempts in order, resends it and sees the new delivery arrive.
async fn operator_finds_and_resends_a_failing_hook(h: Arc<Harness>) {
    let hook = h
        .ingest(A, "broken", "order.failed", "{\"order\":\"flow-1\"}")
        .await;
    eventually("the hook is dead-lettered", LIVENESS, || async {
        (h.dead_of(A, hook).await == 1)
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
    h.login_operator().await;
    h.shoot("overview").await;
    h.go("/ui/tenants").await;
    h.shoot("tenants").await;
    h.go(&format!("/ui/tenants/{A}")).await;
    // Each sink entry's last hour: the broken endpoint's attempts all failed.
    let page = h.wait_text("Success (last hour)").await;
    assert!(
        page.contains("0.0 % of"),
        "the broken entry's health: {page}"
    );
    h.shoot("tenant").await;
    h.go(&format!("/ui/tenants/{A}/deliveries")).await;
    h.fill("#f-et", "order.failed").await;
    h.click("form.filters button").await;
    let page = h.wait_text("order.failed").await;
    assert!(page.contains(&hook.to_string()), "{page}");
    h.shoot("deliveries").await;
    h.click(&format!("a[href$='/hooks/{hook}']")).await;
    let page = h.wait_text(&format!("Hook {hook}")).await;
    assert!(page.contains("attempt 1"), "attempts shown: {page}");
    assert!(page.contains("HTTP 400"), "{page}");
    assert!(page.contains("flow-1"), "the body is shown: {page}");
    h.shoot("hook").await;
    let before = h.w.env.receiver.requests_for("/bad").len();
    h.click("form[action$='/resend'] button").await;
    h.confirm().await;
    let page = h.wait_text("Resent as hook").await;
    let new: u64 = page
        .split("Resent as hook ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{page}"));
    assert_ne!(new, hook);
    h.go(&format!("/ui/tenants/{A}/hooks/{new}")).await;
    h.wait_text("attempt 1").await;
    let got = h.w.env.receiver.requests_for("/bad");
    assert!(got.len() > before, "the resent hook reached the receiver");
    let sha = common::sha256_hex(b"{\"order\":\"flow-1\"}");
    assert!(
        got[before..].iter().any(|r| r.body_sha256 == sha),
        "the same body"
    );
}

/// Flow 2: dead letters selected by a filter, the dry-run count, the confirmed replay; the
/// receiver gets exactly those hooks and no other tenant's dead letter moves.
async fn operator_replays_dead_letters_by_filter(h: Arc<Harness>) {
    let mut hooks = vec![h.w.owned[B].broken_hook];
    for i in 0..2 {
        hooks.push(
            h.ingest(B, "broken", "order.failed", &format!("{{\"replay\":{i}}}"))
                .await,
        );
    }
    for &hook in &hooks {
        eventually("beta's hooks are dead letters", LIVENESS, || async {
            (h.dead_of(B, hook).await == 1)
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        })
        .await;
    }
    let alpha_dead = h.w.env.dead_letters(A).await.len();
    h.w.env.receiver.set("bad", Behavior::Ok);
    h.w.env.receiver.clear();
    h.login_operator().await;
    h.go(&format!("/ui/dlq?tenant={B}&source=broken")).await;
    h.shoot("dead-letters").await;
    h.click("a.button").await;
    let page = h.wait_text("This filter selects").await;
    let shown =
        h.b.find(Locator::Id("matched"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    assert_eq!(shown, hooks.len().to_string(), "{page}");
    h.shoot("replay").await;
    h.click("#confirm-replay button").await;
    h.confirm().await;
    h.wait_text("Replayed 3 of 3").await;
    eventually("the receiver got the replayed hooks", LIVENESS, || async {
        let n = h.w.env.receiver.requests_for("/bad").len();
        (n >= hooks.len()).then_some(()).ok_or(format!("{n}"))
    })
    .await;
    eventually("beta has no dead letter left", LIVENESS, || async {
        h.w.env
            .dead_letters(B)
            .await
            .is_empty()
            .then_some(())
            .ok_or_else(|| "some left".to_string())
    })
    .await;
    let got = h.w.env.receiver.requests_for("/bad");
    assert_eq!(got.len(), hooks.len(), "exactly the selected hooks");
    for r in &got {
        assert_eq!(r.header("ankusa-tenant"), Some(B), "only beta's hooks");
    }
    assert_eq!(
        h.w.env.dead_letters(A).await.len(),
        alpha_dead,
        "alpha untouched"
    );
    h.w.env.receiver.set("bad", Behavior::Status(400));
}

/// Whether `r` carries a Standard Webhooks signature made with `secret` (`whsec_…`),
/// checked here from the headers and the exact body received.
fn signed_by(r: &ankusa::testkit::Received, secret: &str) -> bool {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(secret.trim_start_matches("whsec_")).unwrap();
    let (Some(id), Some(ts), Some(sigs)) = (
        r.header("webhook-id"),
        r.header("webhook-timestamp"),
        r.header("webhook-signature"),
    ) else {
        return false;
    };
    let mut msg = format!("{id}.{ts}.").into_bytes();
    msg.extend_from_slice(r.body.as_deref().unwrap_or_default());
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key), &msg);
    let want = format!("v1,{}", b64.encode(tag.as_ref()));
    sigs.split(' ').any(|s| s == want)
}

/// Flow 3: a tenant opens a portal link, adds an endpoint (its signing secret shown once),
/// sends a test event and sees it delivered signed, rotates the signing secret: the receiver verifies with the new secret, and
/// the old one keeps working until it is retired. A test event is typed to what the
/// endpoint's filter takes, and one of a type no endpoint takes is said so.
async fn tenant_adds_an_endpoint_and_sends_a_test_event(h: Arc<Harness>) {
    let rec = Receiver::start_with(ReceiverOptions {
        record_bodies: true,
        threads: 1,
    })
    .unwrap();
    h.b.delete_all_cookies().await.unwrap();
    let link = h.portal_link(A).await;
    h.go(&link).await;
    let page = h.wait_text("Endpoints").await;
    assert!(page.contains(&format!("Tenant {A}")), "{page}");
    assert!(!page.contains(B), "nothing of another tenant: {page}");
    h.fill("#add-source", "portal").await;
    h.fill("#add-url", &rec.url("portal-ep")).await;
    h.click("#h-add + form button").await;
    let page = h.wait_text("Endpoint added to portal").await;
    assert!(page.contains("/portal-ep"), "{page}");
    let first =
        h.b.find(Locator::Id("new-secret"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    assert!(
        first.starts_with("whsec_"),
        "the secret is shown once: {page}"
    );
    h.go("/portal/").await;
    assert!(!h.text().await.contains(&first), "and only once");
    let stored =
        h.w.env
            .store
            .get_source(A, "portal")
            .await
            .unwrap()
            .unwrap();
    assert_eq!(stored.sinks.len(), 1);
    h.shoot("portal-endpoints").await;
    let test = "form[action='/portal/endpoints/portal/test'] button";
    h.click(test).await;
    h.wait_text("Test event sent").await;
    h.wait_text("delivered").await;
    h.shoot("portal-hook").await;
    let got = rec.requests_for("/portal-ep");
    assert_eq!(got.len(), 1);
    assert!(String::from_utf8_lossy(got[0].body.as_deref().unwrap()).contains("ankusa.test"));
    assert_eq!(got[0].header("ankusa-tenant"), Some(A));
    assert!(signed_by(&got[0], &first), "signed from the first delivery");

    // Rotate twice: the second rotation keeps the first secret signing beside the new one.
    let mut secrets = Vec::new();
    for _ in 0..2 {
        h.go("/portal/").await;
        h.open_endpoint("portal").await;
        h.click("form[action='/portal/endpoints/portal/0/rotate'] button")
            .await;
        h.wait_text("shown this once").await;
        let s =
            h.b.find(Locator::Id("new-secret"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
        assert!(s.starts_with("whsec_"), "{s}");
        secrets.push(s);
    }
    h.shoot("portal-secret").await;
    let (old, new) = (&secrets[0], &secrets[1]);
    let deliveries = |n: usize| {
        let rec = &rec;
        async move {
            eventually("the test event arrives", LIVENESS, || async {
                let got = rec.requests_for("/portal-ep");
                (got.len() >= n)
                    .then(|| got[n - 1].clone())
                    .ok_or(got.len().to_string())
            })
            .await
        }
    };
    h.go("/portal/").await;
    h.click(test).await;
    h.wait_text("Test event sent").await;
    let r = deliveries(2).await;
    assert!(signed_by(&r, new), "the new secret verifies");
    assert!(signed_by(&r, old), "the old one too, until it is retired");
    h.go("/portal/").await;
    h.open_endpoint("portal").await;
    h.click("form[action='/portal/endpoints/portal/0/retire'] button")
        .await;
    h.confirm().await;
    h.wait_text("is retired").await;
    h.click(test).await;
    h.wait_text("Test event sent").await;
    let r = deliveries(3).await;
    assert!(
        signed_by(&r, new) && !signed_by(&r, old),
        "only the new secret now"
    );

    // The endpoint takes only `alert.*`: the test event is typed to match by default, and a
    // type no endpoint takes is said so, nothing sent.
    let mut spec =
        h.w.env
            .store
            .get_source(A, "portal")
            .await
            .unwrap()
            .unwrap();
    spec.sinks[0].filter = Some(ankusa::model::EventFilter {
        event_types: vec!["alert.*".into()],
        predicate: None,
    });
    h.w.env.store.put_source(A, "portal", &spec).await.unwrap();
    h.go("/portal/").await;
    let typed =
        h.b.find(Locator::Id("test-type-portal"))
            .await
            .unwrap()
            .prop("value")
            .await
            .unwrap();
    assert_eq!(typed.as_deref(), Some("alert.test"));
    h.click(test).await;
    h.wait_text("Test event sent").await;
    let r = deliveries(4).await;
    assert_eq!(r.header("ankusa-event-type"), Some("alert.test"));
    h.go("/portal/").await;
    h.fill("#test-type-portal", "billing.paid").await;
    h.click(test).await;
    let page = h
        .wait_text("No endpoint of portal takes event type billing.paid")
        .await;
    assert!(page.contains("nothing was sent"), "{page}");
    assert_eq!(rec.requests_for("/portal-ep").len(), 4);
    h.go("/portal/deliveries").await;
    h.shoot("portal-deliveries").await;
}

/// Flow 4: tenant A's portal with B's hook id in the URL, and B's token on A's hook: 404,
/// nothing of B shown.
async fn a_tenant_never_sees_another(h: Arc<Harness>) {
    h.b.delete_all_cookies().await.unwrap();
    let link = h.portal_link(A).await;
    h.go(&link).await;
    h.wait_text("Endpoints").await;
    let theirs = h.w.owned[B].hook;
    h.go(&format!("/portal/hooks/{theirs}")).await;
    let page = h.text().await;
    assert!(page.contains("404"), "{page}");
    assert!(!page.contains(B) && !page.contains("\"tenant\""), "{page}");
    // B's token on A's hook: the same 404, whoever asks.
    let b_token = h.w.mint(B, &ankusa::tokens::Scope::ALL, "1h").await.token;
    let ours = h.w.owned[A].hook;
    let (s, body) = call(
        "GET",
        &h.url(&format!("/portal/hooks/{ours}")),
        Some(b_token.as_str()),
        &[],
        None,
    )
    .await;
    assert_eq!(s, 404, "{body}");
    assert!(!body.to_string().contains(A));
    // A tenant token never opens the operator console.
    let (s, _) = call("GET", &h.url("/ui/"), Some(b_token.as_str()), &[], None).await;
    assert_eq!(s, 403);
}

/// Flow 5: a receiver answering 500 with markup: shown as text, no script runs, CSP present.
async fn receiver_markup_is_text(h: Arc<Harness>) {
    h.w.env.receiver.set(
        "xss",
        Behavior::Sequence((0..50).map(|_| Reply::status(500).body(XSS)).collect()),
    );
    h.w.env.http_source(A, "xss", &["xss"]).await;
    let hook = h.ingest(A, "xss", "order.xss", "{\"x\":1}").await;
    h.login_operator().await;
    h.go(&format!("/ui/tenants/{A}/hooks/{hook}")).await;
    let page = h.wait_text("HTTP 500").await;
    assert!(
        page.contains("<script>alert('xss')</script>"),
        "shown as text: {page}"
    );
    assert!(h.b.get_alert_text().await.is_err(), "no alert ran");
    assert!(
        h.b.find(Locator::Id("pwned")).await.is_err(),
        "no injected element"
    );
    let scripts = h.b.find_all(Locator::Css("script")).await.unwrap();
    assert_eq!(scripts.len(), 1, "only the console's own script");
    h.shoot("xss").await;
    let resp = reqwest::Client::new()
        .get(h.url(&format!("/ui/tenants/{A}/hooks/{hook}")))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    let csp = resp.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"));
}

/// Flow 6: an expired portal link and a logged-out session are refused; a cross-site form
/// POST is refused and changes nothing.
async fn expired_logged_out_and_cross_site_are_refused(h: Arc<Harness>) {
    h.b.delete_all_cookies().await.unwrap();
    let key = ankusa::admin::console::link::key(LINK_KEY);
    let expired =
        ankusa::admin::console::link::sign(&key, A, ankusa::admin::console::now_ms() - 1_000);
    h.go(&format!("/portal/enter?link={expired}")).await;
    let page = h.text().await;
    assert!(page.contains("expired"), "{page}");
    h.go("/portal/").await;
    assert!(h
        .b
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/portal/login"));

    h.login_operator().await;
    let cookie = h.b.get_named_cookie("ankusa_ui").await.unwrap();
    let stolen = format!("ankusa_ui={}", cookie.value());
    h.click("form.logout button").await;
    h.wait_text("Log in").await;
    let resp = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(h.url("/ui/"))
        .header("cookie", &stolen)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303, "the logged-out session is refused");
    assert_eq!(resp.headers()["location"], "/ui/login");

    // Another origin's page posts a purge form to the console, with the session's cookie.
    h.login_operator().await;
    let before = h.w.env.dead_letters(A).await.len();
    assert!(before > 0);
    let evil = evil_site(&h.url("/ui/dlq/purge")).await;
    h.b.goto(&evil).await.unwrap();
    h.click("button").await;
    let page = eventually("the refusal is shown", LIVENESS, || async {
        let t = h.text().await;
        t.contains("cross_site").then_some(t.clone()).ok_or(t)
    })
    .await;
    assert!(page.contains("cross-site request refused"), "{page}");
    assert_eq!(
        h.w.env.dead_letters(A).await.len(),
        before,
        "nothing purged"
    );
}

/// Flow 7: with tenant A's portal open, tenant B's portal link followed from another site
/// asks before it switches the browser's session (login CSRF): A's portal stays until the
/// user says so, then B's opens.
async fn a_link_from_another_site_never_silently_switches_the_portal(h: Arc<Harness>) {
    h.b.delete_all_cookies().await.unwrap();
    let a_link = h.portal_link(A).await;
    h.go(&a_link).await;
    h.wait_text("Endpoints").await;
    let b_link = h.portal_link(B).await;
    let evil = evil_link(&h.url(&b_link)).await;
    h.b.goto(&evil).await.unwrap();
    h.click("a").await;
    let page = h.wait_text("Switch to").await;
    assert!(
        page.contains(&format!("signed in to the portal of {A}")) && page.contains(B),
        "{page}"
    );
    // Nothing switched meanwhile: the portal is still A's.
    h.go("/portal/deliveries").await;
    let mine = h.text().await;
    assert!(
        mine.contains(&format!("Tenant {A}")) && !mine.contains(&format!("Tenant {B}")),
        "{mine}"
    );
    // Asked and answered: B's portal.
    h.b.goto(&evil).await.unwrap();
    h.click("a").await;
    h.wait_text("Switch to").await;
    h.click("form.card button").await;
    h.wait_text("Endpoints").await;
    h.go("/portal/deliveries").await;
    let theirs = h.text().await;
    assert!(
        theirs.contains(&format!("Tenant {B}")) && !theirs.contains(&format!("Tenant {A}")),
        "{theirs}"
    );
}

/// A page of another origin linking to `target`.
async fn evil_link(target: &str) -> String {
    serve_page(format!(
        "<!doctype html><p>Read this: <a href=\"{target}\">your invoice</a></p>"
    ))
}

/// A page of another origin with a form posting to `target`.
async fn evil_site(target: &str) -> String {
    serve_page(format!(
        "<!doctype html><form method=post action=\"{target}\">\
         <input name=confirm value=purge><input name=csrf value=guess>\
         <button type=submit>win a prize</button></form>"
    ))
}

/// Serve `page` at the root of a new loopback origin; its URL.
fn serve_page(page: String) -> String {
    let listener = common::tokio_listener();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/")
}

/// The flows, in the order they run.
const FLOWS: [&str; 7] = [
    "1 operator finds and resends a failing hook",
    "2 operator replays dead letters by filter",
    "3 tenant adds an endpoint, sends a test event, rotates the secret",
    "4 a tenant never sees another",
    "5 receiver markup is text",
    "6 expired, logged-out and cross-site are refused",
    "7 a link from another site never silently switches the portal",
];

fn flow(i: usize, h: Arc<Harness>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    match i {
        0 => Box::pin(operator_finds_and_resends_a_failing_hook(h)),
        1 => Box::pin(operator_replays_dead_letters_by_filter(h)),
        2 => Box::pin(tenant_adds_an_endpoint_and_sends_a_test_event(h)),
        3 => Box::pin(a_tenant_never_sees_another(h)),
        4 => Box::pin(receiver_markup_is_text(h)),
        5 => Box::pin(expired_logged_out_and_cross_site_are_refused(h)),
        _ => Box::pin(a_link_from_another_site_never_silently_switches_the_portal(
            h,
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_and_portal_flows_in_chromium() {
    let h = Arc::new(Harness::start().await);
    let only = std::env::var("CONSOLE_FLOW").ok();
    let mut failed = Vec::new();
    for (i, name) in FLOWS.iter().enumerate() {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        eprintln!("flow {name}");
        let run = tokio::time::timeout(Duration::from_secs(180), tokio::spawn(flow(i, h.clone())));
        match run.await {
            Ok(Ok(())) => eprintln!("flow {name}: ok"),
            Ok(Err(e)) => failed.push(format!("{name}: {e}")),
            Err(_) => failed.push(format!("{name}: timed out")),
        }
    }
    let h = Arc::into_inner(h);
    if let Some(h) = h {
        let _ = h.b.close().await;
    }
    assert!(failed.is_empty(), "flows failed:\n{}", failed.join("\n"));
}
