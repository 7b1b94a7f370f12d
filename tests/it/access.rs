//! Who may call what, tried on a real worker and Redis: tenant tokens by scope against their
//! own tenant's and another tenant's resources, on every route of the served OpenAPI
//! document (the routes are read from it, so a new route cannot be left out); the operator
//! and ingest tokens; revoked and expired tokens; lists narrowed to a token's tenant; the
//! `ankusa token` commands.

use crate::common;
use crate::common_api;

use ankusa::tokens::Scope;
use common::procs::eventually;
use common::LIVENESS;
use common_api::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// The routes a tenant token may reach, with the scope each needs: what the document must
/// declare (checked below), so widening a route's access is a deliberate change here too.
const TENANT_ROUTES: &[(&str, &str, &str)] = &[
    ("POST", "/v1/hooks/{tenant}/{source}", "ingest"),
    ("GET", "/admin/hooks/{tenant}/{hook}", "read"),
    ("GET", "/admin/hooks/{tenant}/{hook}/body", "read"),
    ("GET", "/admin/log/{tenant}/hooks", "read"),
    ("GET", "/admin/log/{tenant}/hooks/{hook}/attempts", "read"),
    ("GET", "/admin/log/{tenant}/hooks/{hook}/body", "read"),
    ("POST", "/admin/log/{tenant}/resend", "replay"),
    ("POST", "/admin/hooks/{tenant}/{hook}/resend", "replay"),
    ("POST", "/admin/hooks/{tenant}/{hook}/cancel", "ingest"),
    ("GET", "/admin/rows", "read"),
    ("GET", "/admin/tenants/top", "read"),
    ("GET", "/admin/tenants/{tenant}/health", "read"),
    ("GET", "/admin/dlq", "read"),
    ("GET", "/admin/dlq/{tenant}/{id}", "read"),
    ("POST", "/admin/dlq/replay", "replay"),
    ("GET", "/admin/sources", "sources"),
    ("GET", "/admin/sources/{tenant}/{source}", "sources"),
    ("PUT", "/admin/sources/{tenant}/{source}", "sources"),
    ("DELETE", "/admin/sources/{tenant}/{source}", "sources"),
    (
        "POST",
        "/admin/sources/{tenant}/{source}/sinks/{index}/enable",
        "sources",
    ),
];

/// Who calls.
#[derive(Debug, Clone)]
enum Who {
    Nobody,
    Ingest,
    Operator,
    Tenant(Scope, String),
}

impl Who {
    fn token(&self) -> Option<&str> {
        match self {
            Who::Nobody => None,
            Who::Ingest => Some(INGEST),
            Who::Operator => Some(OPERATOR),
            Who::Tenant(_, t) => Some(t),
        }
    }
}

/// A request of one route for `tenant`'s resources: `(url, body)`.
async fn request_for(
    w: &World,
    method: &str,
    path: &str,
    tenant: &str,
) -> (String, Option<(&'static str, String)>) {
    let owned = &w.owned[if tenant == A { A } else { B }];
    let source = if method == "DELETE" {
        "spare"
    } else {
        "orders"
    };
    let id = if path.starts_with("/admin/tokens") {
        w.mint(A, &[Scope::Read], "1h").await.info.id
    } else {
        owned.dead_letter.clone()
    };
    let filled = path
        .replace("{tenant}", tenant)
        .replace("{source}", source)
        .replace("{hook}", &owned.hook.to_string())
        .replace("{index}", "0")
        .replace("{id}", &id);
    let query = match path {
        "/admin/rows" | "/admin/dlq" | "/admin/sources" | "/admin/tenants/top" => {
            format!("?tenant={tenant}")
        }
        _ => String::new(),
    };
    let json_body = |v: Value| Some(("application/json", v.to_string()));
    let body = match (method, path) {
        ("POST", "/v1/hooks/{tenant}/{source}") => {
            Some(("application/json", "{\"n\":1}".to_string()))
        }
        ("PUT", "/admin/sources/{tenant}/{source}") => json_body(json!({
            "sinks": [{"module": "http", "opts": {"url": w.env.receiver.url("ok")}}]
        })),
        ("POST", "/admin/dlq/replay") => {
            json_body(json!({"filter": {"tenant": tenant, "reason": "nothing_matches"}}))
        }
        ("POST", "/admin/dlq/purge") => json_body(json!({"filter": {"tenant": "nobody"}})),
        ("POST", "/admin/dead_letter_source") => {
            json_body(json!({"tenant": tenant, "source": "nothing-here"}))
        }
        ("POST", "/admin/config/check") => Some(("application/toml", String::new())),
        ("POST", "/admin/tokens") => json_body(json!({"tenant": tenant, "scopes": ["read"]})),
        ("POST", "/admin/portal-links") => json_body(json!({"tenant": tenant, "ttl": "5m"})),
        ("POST", "/admin/log/{tenant}/erase") => json_body(json!({"hooks": [owned.hook]})),
        ("POST", "/admin/log/{tenant}/resend") => {
            json_body(json!({"since": "1h", "dry_run": true}))
        }
        _ => None,
    };
    (format!("{}{filled}{query}", w.base()), body)
}

/// What the document says `who` gets from `op` on `tenant`'s resources: `Ok(the 2xx status)`
/// or `Err(the refusal status)`.
fn expected(op: &Value, who: &Who, tenant: &str) -> Result<u16, u16> {
    let ok = op["responses"]
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|k| k.parse::<u16>().ok())
        .find(|s| (200..300).contains(s))
        .expect("a 2xx answer");
    let Some(word) = op["security"][0]["bearer"][0].as_str() else {
        return Ok(ok);
    };
    match who {
        Who::Operator => Ok(ok),
        Who::Nobody => Err(401),
        Who::Ingest if word == "ingest" => Ok(ok),
        Who::Ingest => Err(401),
        Who::Tenant(..) if word == "operator" => Err(403),
        Who::Tenant(..) if tenant != A => Err(404),
        Who::Tenant(s, _) if s.as_str() == word => Ok(ok),
        Who::Tenant(..) => Err(403),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_of_the_document_admits_exactly_whom_its_scope_says_for_each_tenant() {
    let w = World::start(|_| {}).await;
    let doc = served_doc(&w.base()).await;
    let ops = operations(&doc);
    assert!(ops.len() >= 25, "{} operations", ops.len());
    // The document's tenant-reachable routes are exactly the list above.
    let declared: BTreeSet<(String, String, String)> = ops
        .iter()
        .filter_map(|(m, p, op)| {
            let word = op["security"][0]["bearer"][0].as_str()?;
            (word != "operator").then(|| (m.clone(), p.clone(), word.to_string()))
        })
        .collect();
    let listed: BTreeSet<(String, String, String)> = TENANT_ROUTES
        .iter()
        .map(|(m, p, s)| (m.to_string(), p.to_string(), s.to_string()))
        .collect();
    assert_eq!(declared, listed, "routes a tenant token reaches");

    let mut callers = vec![Who::Nobody, Who::Ingest];
    for s in Scope::ALL {
        callers.push(Who::Tenant(s, w.mint(A, &[s], "1h").await.token));
    }
    callers.push(Who::Operator);
    let mut cases = Vec::new();
    let mut tried = 0;
    for (method, path, op) in &ops {
        for who in &callers {
            for tenant in [A, B] {
                if method == "DELETE" && path == "/admin/sources/{tenant}/{source}" {
                    w.env.http_source(tenant, "spare", &["ok"]).await;
                }
                let (url, body) = request_for(&w, method, path, tenant).await;
                let (status, answer) = call(method, &url, who.token(), &[], body).await;
                let want = expected(op, who, tenant);
                // This world has no delivery log store: the log's routes answer whom they
                // admit that none is configured (tests/it/log/access.rs checks them with one).
                let no_log = path.starts_with("/admin/log/")
                    && status == 400
                    && answer
                        .to_string()
                        .contains("no delivery log store is configured");
                let got = if (200..300).contains(&status) {
                    Ok(status)
                } else if no_log && want.is_ok() {
                    want
                } else {
                    Err(status)
                };
                assert_eq!(
                    got, want,
                    "{method} {path} for {tenant} by {who:?}: {answer}"
                );
                if let Err(refused) = want {
                    let code = answer["error"]["code"].as_str().unwrap_or_default();
                    let want_code = match refused {
                        401 => "unauthorized",
                        403 => "forbidden",
                        _ => "not_found",
                    };
                    assert_eq!(code, want_code, "{method} {path} by {who:?}: {answer}");
                }
                if let Some(schema) = answer_schema(op, status) {
                    cases.push(Case {
                        name: format!("{method} {path} → {status}"),
                        schema,
                        instance: answer,
                    });
                }
                tried += 1;
            }
        }
    }
    eprintln!("{tried} calls over {} operations", ops.len());
    // Every answer, allowed or refused, has the shape the document declares for its status.
    check_against_schemas(&doc, &cases);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_without_a_tenant_are_narrowed_to_the_tokens_tenant_and_never_widened() {
    let w = World::start(|_| {}).await;
    let read = w.mint(A, &[Scope::Read, Scope::Sources], "1h").await.token;
    let base = w.base();
    let get = |path: &str| {
        let url = format!("{base}{path}");
        let read = read.clone();
        async move { call("GET", &url, Some(&read), &[], None).await }
    };
    // The operator sees both tenants; the token only its own, with or without the filter.
    let (status, all) = call(
        "GET",
        &format!("{base}/admin/dlq"),
        Some(OPERATOR),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 200, "{all}");
    let tenants = |v: &Value, list: &str| -> BTreeSet<String> {
        v[list]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .map(|d| d["tenant"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        tenants(&all, "dead_letters"),
        [A, B].map(String::from).into()
    );
    for path in ["/admin/dlq", "/admin/dlq?tenant=alpha"] {
        let (status, mine) = get(path).await;
        assert_eq!(status, 200, "{mine}");
        assert_eq!(
            tenants(&mine, "dead_letters"),
            [A.to_string()].into(),
            "{path}"
        );
    }
    let (status, sources) = get("/admin/sources").await;
    assert_eq!(status, 200, "{sources}");
    let sources: BTreeSet<String> = sources
        .as_array()
        .unwrap_or_else(|| sources["sources"].as_array().expect("a list"))
        .iter()
        .map(|s| s["tenant"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sources, [A.to_string()].into());
    let (status, top) = get("/admin/tenants/top").await;
    assert_eq!(status, 200, "{top}");
    let rows = top
        .as_array()
        .unwrap_or_else(|| top["tenants"].as_array().expect("a list"));
    assert!(rows.iter().all(|t| t["tenant"] == A), "{top}");
    let (status, rows) = get("/admin/rows").await;
    assert_eq!(status, 200, "{rows}");
    // Another tenant named anywhere reads as missing, and a second filter cannot sneak it in.
    for path in [
        "/admin/dlq?tenant=beta",
        "/admin/dlq?tenant=alpha&tenant=beta",
        "/admin/rows?tenant=beta",
        "/admin/sources?tenant=beta",
        "/admin/tenants/top?tenant=beta",
        "/admin/dlq/beta/0-1",
    ] {
        let (status, body) = get(path).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (404, &json!("not_found")),
            "{path}"
        );
    }
    // A replay without a tenant replays only the token's own dead letters.
    let replay = w.mint(A, &[Scope::Replay], "1h").await.token;
    let (status, report) = call(
        "POST",
        &format!("{base}/admin/dlq/replay"),
        Some(&replay),
        &[],
        Some(("application/json", "{}".into())),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    // Only alpha's one dead letter was selected and put back (its sink still answers 400,
    // so it may come back as a new dead letter, with a new id); beta's is the same one.
    assert_eq!(
        (&report["matched"], &report["replayed"]),
        (&json!(1), &json!(1)),
        "{report}"
    );
    assert!(
        w.env
            .dead_letters(A)
            .await
            .iter()
            .all(|d| d.id != w.owned[A].dead_letter),
        "alpha's replayed"
    );
    let beta: Vec<String> = w
        .env
        .dead_letters(B)
        .await
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(beta, [w.owned[B].dead_letter.clone()], "beta's untouched");
    let (status, body) = call(
        "POST",
        &format!("{base}/admin/dlq/replay"),
        Some(&replay),
        &[],
        Some((
            "application/json",
            json!({"filter": {"tenant": B}}).to_string(),
        )),
    )
    .await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")));
    let beta: Vec<String> = w
        .env
        .dead_letters(B)
        .await
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(beta, [w.owned[B].dead_letter.clone()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_or_expired_token_is_refused_and_tenant_tokens_work_without_an_operator_token() {
    let w = World::start(|c| c.admin.token = None).await;
    let base = w.base();
    let hook = w.owned[A].hook;
    let path = format!("{base}/admin/hooks/{A}/{hook}");
    let token = w.mint(A, &[Scope::Read], "1h").await;
    let (status, body) = call("GET", &path, Some(&token.token), &[], None).await;
    assert_eq!(status, 200, "{body}");
    // No admin.token: the API is open on loopback, but a tenant token stays narrowed.
    let other = format!("{base}/admin/hooks/{B}/{}", w.owned[B].hook);
    assert_eq!(
        call("GET", &other, Some(&token.token), &[], None).await.0,
        404
    );
    assert_eq!(call("GET", &other, None, &[], None).await.0, 200);
    let tick = format!("{base}/admin/tick");
    assert_eq!(
        call("POST", &tick, Some(&token.token), &[], None).await.0,
        403
    );
    // Revoked through the API: refused within the cache bound, on this worker.
    let (status, body) = call(
        "DELETE",
        &format!("{base}/admin/tokens/{}", token.info.id),
        None,
        &[],
        None,
    )
    .await;
    assert_eq!((status, &body["revoked"]), (200, &json!(true)), "{body}");
    let revoked_at = std::time::Instant::now();
    eventually("the revoked token is refused", LIVENESS, || async {
        match call("GET", &path, Some(&token.token), &[], None).await {
            (401, _) => Ok(()),
            (s, b) => Err(format!("{s} {b}")),
        }
    })
    .await;
    let took = revoked_at.elapsed();
    assert!(
        took <= ankusa::admin::TOKEN_CACHE + std::time::Duration::from_secs(5),
        "refused only after {took:?}"
    );
    // Expired: refused once its time has passed, whatever the cache holds.
    let short = w.mint(A, &[Scope::Read], "5s").await;
    assert_eq!(
        call("GET", &path, Some(&short.token), &[], None).await.0,
        200
    );
    // Its holder is told it expired, and when, not the same as for a typo.
    eventually("the expired token is refused", LIVENESS, || async {
        match call("GET", &path, Some(&short.token), &[], None).await {
            (401, b)
                if b["error"]["code"] == "token_expired"
                    && b["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("expired at")) =>
            {
                Ok(())
            }
            (s, b) => Err(format!("{s} {b}")),
        }
    })
    .await;
    // Only the holder: the expired token's id with another secret learns nothing of it.
    let mut guessed = short.token.clone();
    guessed.pop();
    guessed.push(if short.token.ends_with('0') { '1' } else { '0' });
    let (status, b) = call("GET", &path, Some(&guessed), &[], None).await;
    assert_eq!(
        (status, &b["error"]["code"]),
        (401, &json!("unauthorized")),
        "{b}"
    );
    // A made-up, a truncated and a tampered token are refused like them.
    let mut tampered = token.token.clone();
    tampered.pop();
    tampered.push('0');
    for bad in [
        "ank_0000000000000000_".to_string() + &"0".repeat(64),
        token.token[..40].to_string(),
        tampered,
    ] {
        assert_eq!(
            call("GET", &path, Some(&bad), &[], None).await.0,
            401,
            "{bad}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_minted_listed_and_revoked_by_cli_and_api_and_redis_keeps_only_their_digest() {
    let w = World::start(|_| {}).await;
    let base = w.base();
    // The CLI reads the world's config: minting needs the operator token configured.
    let config = w.dir.path().join("ankusa.toml");
    let config = Some(config.as_path());
    // The CLI: the token alone on stdout, once.
    let (code, out, err) = w
        .env
        .cli_with(
            config,
            &[
                "token",
                "create",
                "--tenant",
                A,
                "--scopes",
                "ingest,read",
                "--ttl",
                "30d",
                "--name",
                "ci",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let cli_token = out.trim().to_string();
    assert!(
        cli_token.starts_with("ank_") && !cli_token.contains(' '),
        "{out}"
    );
    assert!(err.contains("shown once"), "{err}");
    let (code, out, err) = w
        .env
        .cli_with(
            config,
            &[
                "--json", "token", "create", "--tenant", B, "--scopes", "sources",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let minted: Value = serde_json::from_str(&out).expect("one JSON document");
    for field in ["token", "id", "tenant", "scopes", "expires_at_ms"] {
        assert!(!minted[field].is_null(), "{field}: {minted}");
    }
    assert_eq!(minted["scopes"], json!(["sources"]));
    // The API mints too (operator only).
    let (status, api) = call(
        "POST",
        &format!("{base}/admin/tokens"),
        Some(OPERATOR),
        &[],
        Some((
            "application/json",
            json!({"tenant": A, "scopes": ["replay"], "ttl": "1h"}).to_string(),
        )),
    )
    .await;
    assert_eq!(status, 201, "{api}");
    let (status, bad) = call(
        "POST",
        &format!("{base}/admin/tokens"),
        Some(OPERATOR),
        &[],
        Some((
            "application/json",
            json!({"tenant": A, "scopes": ["root"]}).to_string(),
        )),
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    // The CLI token works for its scopes.
    let (status, body) = call(
        "POST",
        &format!("{base}/v1/hooks/{A}/orders"),
        Some(&cli_token),
        &[],
        Some(("application/json", "{}".into())),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    // Listed everywhere without a secret; Redis holds no token, only digests.
    let (code, table, err) = w.env.cli_with(None, &["token", "list"]).await;
    assert_eq!(code, 0, "{err}");
    let (status, listed) = call(
        "GET",
        &format!("{base}/admin/tokens?tenant={A}"),
        Some(OPERATOR),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["tokens"].as_array().unwrap().len(), 2, "{listed}");
    for secret in [
        &cli_token,
        minted["token"].as_str().unwrap(),
        api["token"].as_str().unwrap(),
    ] {
        let secret_part = &secret[21..];
        assert!(!table.contains(secret_part), "{table}");
        assert!(!listed.to_string().contains(secret_part), "{listed}");
        for key in w.env.keys() {
            assert!(!key.contains(secret_part), "{key}");
            if key.contains(":token:") {
                let fields = w.env.redis_cmd(&["HGETALL", &key]);
                assert!(!fields.contains(secret_part), "{key}: {fields}");
            }
        }
        let record = w.env.redis_cmd(&[
            "HGET",
            &w.env.instance_key(&format!("token:{}", &secret[4..20])),
            "h",
        ]);
        assert_eq!(record, ankusa::tokens::digest(secret));
    }
    assert!(
        table.contains(minted["id"].as_str().unwrap()) && table.contains("ci"),
        "{table}"
    );
    // Revoked by the CLI: gone from the list, refused; an unknown id is exit 1, not found.
    let id = ankusa::tokens::id_of(&cli_token).unwrap().to_string();
    let (code, out, err) = w.env.cli_with(None, &["token", "revoke", &id]).await;
    assert_eq!(code, 0, "{out} {err}");
    let (code, _, err) = w.env.cli_with(None, &["token", "revoke", &id]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not found"), "{err}");
    let (_, out, _) = w
        .env
        .cli_with(None, &["--json", "token", "list", "--tenant", A])
        .await;
    assert!(!out.contains(&id), "{out}");
    // A bad scope or ttl is a usage error naming the argument, before Redis is asked.
    let (code, _, err) = w
        .env
        .cli_with(
            None,
            &["token", "create", "--tenant", A, "--scopes", "admin"],
        )
        .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--scopes") && err.contains("admin"), "{err}");
    let (code, _, err) = w
        .env
        .cli_with(
            None,
            &["token", "create", "--tenant", A, "--ttl", "forever"],
        )
        .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ttl"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_operator_token_no_tenant_token_or_portal_link_is_minted_and_the_refusal_says_why(
) {
    let w = World::start(|c| c.admin.token = None).await;
    let base = w.base();
    for (path, body) in [
        ("/admin/tokens", json!({"tenant": A, "scopes": ["read"]})),
        ("/admin/portal-links", json!({"tenant": A})),
    ] {
        let (status, answer) = call(
            "POST",
            &format!("{base}{path}"),
            None,
            &[],
            Some(("application/json", body.to_string())),
        )
        .await;
        assert_eq!(status, 400, "{path}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("need admin.token") && message.contains("anyone who reaches"),
            "{path}: {answer}"
        );
    }
    let config = w.dir.path().join("ankusa.toml");
    for args in [
        vec!["token", "create", "--tenant", A, "--scopes", "read"],
        vec!["portal-link", "--tenant", A],
    ] {
        let (code, out, err) = w.env.cli_with(Some(&config), &args).await;
        assert_eq!(code, 2, "{args:?}: {out} {err}");
        assert!(err.contains("need admin.token"), "{args:?}: {err}");
        assert!(out.is_empty(), "nothing minted: {out}");
    }
    assert!(
        !w.env.keys().iter().any(|k| k.contains(":token:")),
        "no token record written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_or_portal_link_for_a_tenant_nobody_set_up_is_refused_unless_asked_to_create_it() {
    let w = World::start(|_| {}).await;
    let base = w.base();
    let config = w.dir.path().join("ankusa.toml");
    let post = |path: &'static str, body: Value| {
        let url = format!("{base}{path}");
        async move {
            call(
                "POST",
                &url,
                Some(OPERATOR),
                &[],
                Some(("application/json", body.to_string())),
            )
            .await
        }
    };
    // "alpah": a typo of a tenant with sources.
    for (path, body) in [
        (
            "/admin/tokens",
            json!({"tenant": "alpah", "scopes": ["read"]}),
        ),
        ("/admin/portal-links", json!({"tenant": "alpah"})),
    ] {
        let (status, answer) = post(path, body.clone()).await;
        assert_eq!(status, 404, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "not_found", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("\"alpah\"") && message.contains("--create"),
            "{answer}"
        );
        let mut create = body;
        create["create"] = json!(true);
        let (status, answer) = post(path, create).await;
        assert_eq!(status, 201, "{path} with create: {answer}");
    }
    for args in [
        vec!["token", "create", "--tenant", "alpah"],
        vec!["portal-link", "--tenant", "alpah"],
    ] {
        let (code, out, err) = w.env.cli_with(Some(&config), &args).await;
        assert_eq!(code, 1, "{args:?}: {out} {err}");
        assert!(
            err.contains("\"alpah\"") && err.contains("--create"),
            "{err}"
        );
        assert!(out.is_empty(), "{out}");
        let mut create = args.clone();
        create.push("--create");
        let (code, out, err) = w.env.cli_with(Some(&config), &create).await;
        assert_eq!(code, 0, "{create:?}: {err}");
        assert!(!out.trim().is_empty(), "{err}");
    }
    // A tenant with sources needs no flag; the API takes scopes as the CLI writes them too.
    let (status, answer) = post(
        "/admin/tokens",
        json!({"tenant": A, "scopes": "ingest,read"}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["scopes"], json!(["ingest", "read"]), "{answer}");
    let (status, answer) = post(
        "/admin/tokens",
        json!({"tenant": A, "scopes": "ingest,root"}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
}
