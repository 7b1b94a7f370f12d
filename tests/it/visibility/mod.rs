//! Delivery visibility, tried as a user would: idempotent commits (raw script, CLI, ingest),
//! the attempt history (`hooks show`), retrying rows (`rows list`), resend, `tenants top`,
//! and the source registry over HTTP — against a real `redis-server`, real HTTP and the
//! `ankusa` binary.

use crate::common;
mod history;
mod idempotency;

use ankusa::model::SourceSpec;
use ankusa::store::scripts::COMMIT;
use ankusa::testkit::{Behavior, Reply};
use ankusa::Hook;
use common::procs::{poll_until, wait_leader};
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;

/// Run the `ankusa` binary against this env's Redis: `(exit code, stdout, stderr)`.
async fn ankusa(env: &Env, args: &[&str]) -> (i32, String, String) {
    env.cli_with(None, args).await
}

/// `ankusa --json ARGS`, which must succeed; its JSON answer.
async fn ankusa_json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = ankusa(env, &all).await;
    assert_eq!(code, 0, "ankusa {args:?}: {out} {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Poll `read` (a CLI or admin read, a poll interval apart) until `done` holds of its answer
/// or `LIVENESS` passes; the last answer. Panics naming `what` when it never held.
async fn until<F, Fut>(what: &str, mut read: F, done: impl Fn(&Value) -> bool) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Value>,
{
    common::procs::eventually(what, LIVENESS, || {
        let v = read();
        let done = &done;
        async move {
            let v = v.await;
            if done(&v) {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        }
    })
    .await
}

fn statuses(attempts: &Value) -> Vec<Value> {
    attempts
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["status"].clone())
        .collect()
}

/// The `orders.json` of the "why didn't my webhook arrive?" walk in `docs/operations.md`,
/// its URLs pointed at this test's receiver (`s0`, `s1`), and the name of the secret its
/// first sink references.
fn walk_orders(env: &Env) -> (SourceSpec, String) {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .expect("docs/operations.md");
    let open = "cat > orders.json <<'JSON'";
    let at = readme
        .find(open)
        .expect("docs/operations.md writes orders.json");
    let start = at + readme[at..].find('\n').expect("heredoc line ends") + 1;
    let end = start + readme[start..].find("\nJSON\n").expect("heredoc ends");
    let mut spec: Value = serde_json::from_str(&readme[start..end]).expect("orders.json parses");
    for (i, s) in spec["sinks"].as_array_mut().unwrap().iter_mut().enumerate() {
        s["opts"]["url"] = json!(env.receiver.url(&format!("s{i}")));
    }
    let text = spec.to_string();
    let name = text
        .split("${env:")
        .nth(1)
        .and_then(|r| r.split('}').next())
        .expect("orders.json references a secret")
        .to_string();
    (serde_json::from_value(spec).expect("a source spec"), name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_delivers_a_delivered_or_dead_lettered_hook_again_once_per_chosen_sink() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a", "b"]).await;
    let worker = env.worker().await;
    let hook = env.commit("acme", "orders", r#"{"resend":1}"#).await;
    env.drain(&worker).await;
    assert_eq!(
        (env.receiver.count_for("a"), env.receiver.count_for("b")),
        (1, 1)
    );

    let all = ankusa_json(&env, &["hooks", "resend", "acme", &hook.to_string()]).await;
    assert_eq!(all["rows"], 2);
    assert_ne!(all["new_hook"], hook);
    env.drain(&worker).await;
    assert_eq!(
        (env.receiver.count_for("a"), env.receiver.count_for("b")),
        (2, 2)
    );

    let one = ankusa_json(
        &env,
        &["hooks", "resend", "acme", &hook.to_string(), "--sink", "1"],
    )
    .await;
    assert_eq!(one["rows"], 1);
    env.drain(&worker).await;
    assert_eq!(
        (env.receiver.count_for("a"), env.receiver.count_for("b")),
        (2, 3)
    );
    let bodies: Vec<String> = env
        .receiver
        .requests()
        .iter()
        .map(|r| r.body_sha256.clone())
        .collect();
    assert!(bodies.iter().all(|b| *b == sha256_hex(br#"{"resend":1}"#)));

    // a dead-lettered row: sink b refuses permanently, then accepts the resend
    env.receiver.set("b", Behavior::Status(400));
    let dead = env.commit("acme", "orders", r#"{"resend":2}"#).await;
    env.drain(&worker).await;
    let v = ankusa_json(&env, &["hooks", "show", "acme", &dead.to_string()]).await;
    assert_eq!(v["rows"][0]["state"], "delivered");
    assert_eq!(v["rows"][1]["state"], "dead_lettered");
    assert!(v["rows"][1]["dead_letter"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("permanent"));
    env.receiver.set("b", Behavior::Ok);
    let before = env.receiver.count_for("b");
    ankusa_json(
        &env,
        &["hooks", "resend", "acme", &dead.to_string(), "--sink", "1"],
    )
    .await;
    env.drain(&worker).await;
    assert_eq!(env.receiver.count_for("b"), before + 1);
    assert_eq!(env.receiver.count_for("a"), 3);
    // no such sink entry, no such hook
    let (code, _, err) = ankusa(
        &env,
        &["hooks", "resend", "acme", &hook.to_string(), "--sink", "5"],
    )
    .await;
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = ankusa(&env, &["hooks", "resend", "acme", "999"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not found"), "{err}");
    worker.shutdown().await;
}

/// Hook ids are instance-wide: another tenant asking for a hook's view gets `not found`,
/// never its rows, attempts or errors — while it is pending, and after it was delivered and
/// only its attempt history is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_show_never_shows_another_tenants_hook_or_attempts() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    env.http_source("globex", "orders", &["a"]).await;
    env.receiver.set(
        "a",
        Behavior::Sequence(vec![Reply::status(500).body("secret detail of acme")]),
    );
    let worker = env.worker().await;
    let hook = env.commit("acme", "orders", r#"{"acme":1}"#).await;
    env.drain(&worker).await;
    // Delivered after one failure: acme sees two attempts.
    let v = ankusa_json(&env, &["hooks", "show", "acme", &hook.to_string()]).await;
    assert_eq!(v["attempts"].as_array().unwrap().len(), 2, "{v}");
    for (tenant, when) in [("globex", "kept"), ("nosuchtenant", "kept")] {
        let (code, out, err) = ankusa(&env, &["hooks", "show", tenant, &hook.to_string()]).await;
        assert_eq!(code, 1, "{tenant} ({when}): {out}{err}");
        assert!(err.contains("not found"), "{err}");
        assert!(!out.contains("secret detail") && !err.contains("secret detail"));
    }
    // Once the kept hook is gone, only the attempt history names it: still not globex's.
    assert_eq!(
        env.redis_cmd(&["DEL", &env.key(&format!("kept:{hook}"))]),
        "1"
    );
    let (code, out, err) = ankusa(&env, &["hooks", "show", "globex", &hook.to_string()]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(!out.contains("secret detail") && !err.contains("secret detail"));
    let v = ankusa_json(&env, &["hooks", "show", "acme", &hook.to_string()]).await;
    assert_eq!(
        v["attempts"].as_array().unwrap().len(),
        2,
        "acme still sees its history: {v}"
    );
    worker.shutdown().await;
}

/// `hooks resend` with several hooks: each resent once, a missing one reported and the
/// others go on (exit 1); paced by pressure, so with no live leader it pauses after the
/// first and gives up (exit 3) having resent only that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_of_many_hooks_reports_each_and_is_paced_by_pressure() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["a"]).await;
    let worker = env.worker().await;
    let hooks = env.commit_n("acme", "orders", 4).await;
    env.drain(&worker).await;
    assert_eq!(env.receiver.count_for("a"), 4);

    let mut args = vec!["hooks".to_string(), "resend".into(), "acme".into()];
    args.extend(hooks[..3].iter().map(u64::to_string));
    args.push("999".into());
    args.push("--json".into());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = ankusa(&env, &argv).await;
    assert_eq!(code, 1, "one hook was not found: {err}");
    let r: Value = serde_json::from_str(&out).expect("a JSON report on stdout");
    let resent: Vec<u64> = r["resent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["hook"].as_u64().unwrap())
        .collect();
    assert_eq!(resent, hooks[..3]);
    assert_eq!(r["failed"][0]["hook"], 999);
    assert!(r["failed"][0]["error"]
        .as_str()
        .unwrap()
        .contains("not found"));
    env.drain(&worker).await;
    assert_eq!(
        env.receiver.count_for("a"),
        7,
        "each resent hook delivered once more"
    );

    // No leader: pressure has no answer, so the second hook waits and the call gives up.
    worker.shutdown().await;
    let (code, _, err) = ankusa(
        &env,
        &[
            "hooks",
            "resend",
            "acme",
            &hooks[0].to_string(),
            &hooks[1].to_string(),
            "--max-pause-ms",
            "300",
        ],
    )
    .await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("paused"), "{err}");
    // Said when the pause began (stderr is no terminal here, so there is no bar), not only
    // in the final error: a user sees at once why nothing moves.
    assert!(
        err.lines().any(|l| l.starts_with("paused: ")),
        "no pause line before the error: {err}"
    );
    let due = env.redis_cmd(&["ZCARD", &env.key("due:acme")]);
    assert_eq!(due, "1", "only the first hook was resent before the pause");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_hooks_rows_and_resend_over_http_with_the_admin_token() {
    use reqwest::Method;
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    let config = env.config_file(&dir, |c| {
        c.admin.token = Some("s3cret-0123456789abcdefghijklmnopqrstuv".into())
    });
    let w = WorkerProcess::spawn(&config, &dir, "w1");
    wait_leader(&w).await;
    let base = format!("http://{}", w.admin);
    let tok = Some("s3cret-0123456789abcdefghijklmnopqrstuv");
    let spec = json!({"sinks": [{"module": "http", "opts": {"url": env.receiver.url("a")}}]});
    let src = format!("{base}/admin/sources/acme/orders");

    let (s, _) = admin_call(Method::PUT, src.clone(), None, Some(spec.to_string())).await;
    assert_eq!(s, 401);
    let (s, v) = admin_call(Method::PUT, src.clone(), tok, Some(spec.to_string())).await;
    assert_eq!(
        (s, v["version"].clone(), v["sinks"].clone()),
        (200, json!(1), json!(1))
    );
    let (s, v) = admin_call(Method::PUT, src.clone(), tok, Some(spec.to_string())).await;
    assert_eq!((s, v["version"].clone()), (200, json!(2)));
    let (s, v) = admin_call(Method::GET, src.clone(), tok, None).await;
    assert_eq!(s, 200);
    assert_eq!(v["version"], 2);
    assert_eq!(v["spec"]["sinks"][0]["opts"]["url"], env.receiver.url("a"));
    let cli_get = ankusa_json(&env, &["source", "get", "acme", "orders"]).await;
    assert_eq!(cli_get, v["spec"]);
    let (s, v) = admin_call(
        Method::GET,
        format!("{base}/admin/sources?tenant=acme"),
        tok,
        None,
    )
    .await;
    assert_eq!(
        (s, v),
        (
            200,
            json!({"sources": [{"tenant": "acme", "source": "orders"}]})
        )
    );
    let (_, v) = admin_call(
        Method::GET,
        format!("{base}/admin/sources?tenant=globex"),
        tok,
        None,
    )
    .await;
    assert_eq!(v, json!({"sources": []}));

    // invalid specs: the same errors as `ankusa source put`
    let bad = json!({"sinks": [{"module": "smtp", "opts": {}}]});
    let file = dir.path().join("bad.json");
    std::fs::write(&file, bad.to_string()).unwrap();
    let (code, _, cli_err) = ankusa(
        &env,
        &["source", "put", "acme", "bad", file.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 2);
    let (s, v) = admin_call(
        Method::PUT,
        format!("{base}/admin/sources/acme/bad"),
        tok,
        Some(bad.to_string()),
    )
    .await;
    assert_eq!((s, v["error"]["code"].clone()), (400, json!("bad_request")));
    assert_eq!(
        cli_err.trim(),
        format!("error: {}", v["error"]["message"].as_str().unwrap())
    );
    let no_url = json!({"sinks": [{"module": "http", "opts": {}}]}).to_string();
    std::fs::write(&file, &no_url).unwrap();
    let (_, _, cli_err) = ankusa(
        &env,
        &["source", "put", "acme", "bad", file.to_str().unwrap()],
    )
    .await;
    let (s, v) = admin_call(
        Method::PUT,
        format!("{base}/admin/sources/acme/bad"),
        tok,
        Some(no_url),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(
        cli_err.trim(),
        format!("error: {}", v["error"]["message"].as_str().unwrap())
    );
    let (s, v) = admin_call(
        Method::PUT,
        format!("{base}/admin/sources/acme/bad"),
        tok,
        Some("{\"sinks\": 3}".into()),
    )
    .await;
    assert_eq!((s, v["error"]["code"].clone()), (400, json!("bad_request")));
    let (s, _) = admin_call(
        Method::PUT,
        format!("{base}/admin/sources/acme/a:b"),
        tok,
        Some(spec.to_string()),
    )
    .await;
    assert_eq!(s, 400);
    let (_, v) = admin_call(Method::GET, format!("{base}/admin/sources"), tok, None).await;
    assert_eq!(
        v,
        json!({"sources": [{"tenant": "acme", "source": "orders"}]}),
        "nothing stored by a refused put"
    );

    // a hook, its rows and attempts, resend over HTTP
    env.receiver
        .set("a", Behavior::Sequence(vec![Reply::status(503)]));
    let hook = env.commit("acme", "orders", "{}").await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 2)
            .await
    );
    let shown = format!("{base}/admin/hooks/acme/{hook}");
    let v = until(
        "the hook is delivered",
        || async { admin_call(Method::GET, shown.clone(), tok, None).await.1 },
        |v| v["rows"][0]["state"] == "delivered",
    )
    .await;
    assert_eq!(statuses(&v["attempts"]), [json!(503), json!(200)]);
    let (s, _) = admin_call(Method::GET, shown.clone(), None, None).await;
    assert_eq!(s, 401);
    let (s, v) = admin_call(
        Method::GET,
        format!("{base}/admin/hooks/acme/777"),
        tok,
        None,
    )
    .await;
    assert_eq!((s, v["error"]["code"].clone()), (404, json!("not_found")));
    let (s, v) = admin_call(
        Method::GET,
        format!("{base}/admin/rows?tenant=acme&state=retrying"),
        tok,
        None,
    )
    .await;
    assert_eq!((s, v["rows"].clone()), (200, json!([])));
    let (s, _) = admin_call(
        Method::GET,
        format!("{base}/admin/rows?tenant=acme&state=bogus"),
        tok,
        None,
    )
    .await;
    assert_eq!(s, 400);
    let (s, v) = admin_call(Method::POST, format!("{shown}/resend?sink=0"), tok, None).await;
    assert_eq!((s, v["rows"].clone()), (200, json!(1)), "{v}");
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 3)
            .await
    );
    let (s, v) = admin_call(Method::GET, format!("{base}/admin/tenants/top"), tok, None).await;
    assert_eq!(s, 200);
    assert!(v["tenants"].is_array() && v["more"].is_boolean(), "{v}");

    // delete
    let (s, v) = admin_call(Method::DELETE, src.clone(), tok, None).await;
    assert_eq!((s, v), (200, json!({"deleted": true})));
    let (s, _) = admin_call(Method::GET, src.clone(), tok, None).await;
    assert_eq!(s, 404);
    let (s, _) = admin_call(Method::DELETE, src.clone(), tok, None).await;
    assert_eq!(s, 404);

    // every endpoint is in the OpenAPI document, behind the token
    let (_, doc) = admin_call(Method::GET, format!("{base}/openapi.json"), None, None).await;
    for (path, method) in [
        ("/admin/hooks/{tenant}/{hook}", "get"),
        ("/admin/hooks/{tenant}/{hook}/resend", "post"),
        ("/admin/rows", "get"),
        ("/admin/tenants/top", "get"),
        ("/admin/sources", "get"),
        ("/admin/sources/{tenant}/{source}", "get"),
        ("/admin/sources/{tenant}/{source}", "put"),
        ("/admin/sources/{tenant}/{source}", "delete"),
    ] {
        assert!(
            doc["paths"][path][method]["security"].is_array(),
            "{method} {path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_top_shows_due_rows_lag_and_failing_sinks_per_tenant() {
    let env = Env::tuned(|c| {
        c.retry.initial_backoff_ms = 120_000;
        c.retry.max_backoff_ms = 120_000;
    })
    .await;
    env.http_source("acme", "orders", &["bad"]).await;
    env.http_source("globex", "orders", &["good"]).await;
    env.receiver.set("bad", Behavior::Status(503));
    for _ in 0..3 {
        env.commit("acme", "orders", "{}").await;
    }
    env.commit("globex", "orders", "{}").await;
    let worker = env.worker().await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 4)
            .await
    );
    let top = until(
        "acme's three rows retrying",
        || ankusa_json(&env, &["tenants", "top"]),
        |v| v["tenants"][0]["retrying_rows"] == 3,
    )
    .await;
    let top = &top["tenants"];
    assert_eq!(top[0]["tenant"], "acme");
    assert_eq!(top[0]["due_rows"], 3);
    assert_eq!(top[0]["failing_sinks"], json!(["orders/0"]));
    assert!(
        top.as_array()
            .unwrap()
            .iter()
            .all(|t| t["tenant"] != "globex"),
        "globex has nothing left: {top}"
    );
    let (code, out, _) = ankusa(&env, &["tenants", "top"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("acme") && out.contains("orders/0"), "{out}");
    // The search runs over every tenant with rows, before the limit: `initech`, with fewer
    // rows than acme, is found with limit 1 (it used to be searched among the first only).
    env.http_source("initech", "orders", &["bad"]).await;
    env.commit("initech", "orders", "{}").await;
    let page = ankusa::visibility::tenants_top_by(
        &env.store,
        None,
        Some("itech"),
        1,
        ankusa::visibility::TopBy::Rows,
    )
    .await
    .unwrap();
    let names: Vec<&str> = page.tenants.iter().map(|t| t.tenant.as_str()).collect();
    assert_eq!(names, ["initech"], "{page:?}");
    assert!(!page.more);
    let page = ankusa::visibility::tenants_top_by(
        &env.store,
        None,
        None,
        1,
        ankusa::visibility::TopBy::Rows,
    )
    .await
    .unwrap();
    assert_eq!(page.tenants[0].tenant, "acme");
    assert!(page.more, "{page:?}");
    worker.shutdown().await;
}
