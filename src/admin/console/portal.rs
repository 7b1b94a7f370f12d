//! The tenant portal's pages (`/portal/`): the tenant's endpoints (sink entries) with add,
//! edit, disable, enable and a test event; its deliveries; a hook with its attempts and
//! resend. The tenant is the session's, never a path or query parameter, and every call
//! goes through the admin API as that tenant, so nothing of another tenant can be named.

use super::deliveries::{deliveries_view, delivery_lines};
use super::ui::{enc, entries, hook_with_body, resend_as, target};
use super::view::{self, badge, csrf, lacks, layout, notice, text, BodyView};
use super::{action, check_csrf, form, html, page, see_other, Area, Ctx, Page, PortalCtx, Refusal};
use crate::admin::AdminState;
use crate::tokens::Scope;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::Router;
use bytes::Bytes;
use maud::{html as m, Markup};
use serde_json::{json, Value};
use std::collections::HashMap;

type Q = Query<HashMap<String, String>>;

pub(super) fn routes() -> Router<AdminState> {
    Router::new()
        .route(
            "/portal/login",
            page(|h: HeaderMap| async move { super::login_form(Area::Portal, &h, None) }).post(
                |State(st): State<AdminState>, h: HeaderMap, b: Bytes| async move {
                    super::login(&st, Area::Portal, &h, &b).await
                },
            ),
        )
        .route(
            "/portal/logout",
            action(
                |State(st): State<AdminState>, h: HeaderMap, b: Bytes| async move {
                    super::logout(&st, Area::Portal, &h, &b)
                },
            ),
        )
        .route(
            "/portal/enter",
            page(
                |State(st): State<AdminState>, h: HeaderMap, Query(q): Q| async move {
                    super::enter(&st, &h, q.get("link").map_or("", String::as_str))
                },
            ),
        )
        .route(
            "/portal/enter/continue",
            page(
                |State(st): State<AdminState>, h: HeaderMap, Query(q): Q| async move {
                    super::enter_continue(&st, &h, q.get("link").map_or("", String::as_str), None)
                },
            )
            .post(
                |State(st): State<AdminState>, h: HeaderMap, b: Bytes| async move {
                    let f = super::form(&b);
                    let link = f.get("link").cloned().unwrap_or_default();
                    let csrf = f.get("csrf").cloned().unwrap_or_default();
                    super::enter_continue(&st, &h, &link, Some(&csrf))
                },
            ),
        )
        .route("/portal", page(|| async { see_other("/portal/", &[]) }))
        .route("/portal/", page(endpoints))
        .route("/portal/endpoints", action(add))
        .route("/portal/endpoints/{source}/{index}", action(edit))
        .route(
            "/portal/endpoints/{source}/{index}/disable",
            action(disable),
        )
        .route("/portal/endpoints/{source}/{index}/enable", action(enable))
        .route("/portal/endpoints/{source}/{index}/rotate", action(rotate))
        .route("/portal/endpoints/{source}/{index}/retire", action(retire))
        .route("/portal/endpoints/{source}/test", action(test_event))
        .route("/portal/deliveries", page(deliveries))
        .route("/portal/hooks/{hook}", page(hook))
        .route("/portal/hooks/{hook}/resend", action(resend))
}

fn portal(ctx: &Ctx, title: &str, main: Markup) -> Page {
    Ok(html(layout(Area::Portal, Some(ctx), title, main)))
}

/// The tenant's sources with their specs.
async fn specs(ctx: &Ctx) -> Result<Vec<(String, Value)>, Refusal> {
    let t = enc(ctx.tenant());
    let list = ctx
        .api
        .get(&ctx.who, &format!("/admin/sources?tenant={t}"))
        .await?;
    let mut out = Vec::new();
    for s in list["sources"].as_array().into_iter().flatten() {
        let name = s["source"].as_str().unwrap_or("").to_string();
        let spec = ctx
            .api
            .get(&ctx.who, &format!("/admin/sources/{t}/{}", enc(&name)))
            .await?;
        out.push((name, spec));
    }
    Ok(out)
}

/// The event type a test event to a source is sent with by default: one its first endpoint
/// with a filter takes (`alert.*` → `alert.test`, `*.created` → `test.created`), else
/// `ankusa.test`.
fn test_event_type(spec: &Value) -> String {
    let first = spec["sinks"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|e| e["filter"]["event_types"].as_array()?.first()?.as_str());
    match first {
        Some(p) => p
            .split('.')
            .map(|seg| if seg == "*" { "test" } else { seg })
            .collect::<Vec<_>>()
            .join("."),
        None => "ankusa.test".into(),
    }
}

fn patterns(e: &Value) -> String {
    e["filter"]["event_types"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

async fn endpoints(PortalCtx(ctx): PortalCtx, Query(q): Q) -> Page {
    if !ctx.may(Scope::Sources) {
        // The list of sources is itself behind `sources`: say so, and where to go instead.
        let main = m! {
            (notice(q.get("done")))
            (lacks(Scope::Sources, "Listing and changing the endpoints"))
            p { a href="/portal/deliveries" { "The deliveries →" } }
        };
        return portal(&ctx, "Endpoints", main);
    }
    let specs = specs(&ctx).await?;
    let health = ctx
        .api
        .get(
            &ctx.who,
            &format!("/admin/tenants/{}/health", enc(ctx.tenant())),
        )
        .await
        .unwrap_or(Value::Null);
    let ingest = ctx.may(Scope::Ingest);
    let main = m! {
        (notice(q.get("done")))
        @if specs.is_empty() { p.empty { "No source yet: add an endpoint below." } }
        @for (source, spec) in &specs {
            section.source aria-label={ "Source " (source) } {
                h2 { "Source " code { (source) } }
                (entries(source, &spec["spec"], &health))
                @for (i, e) in spec["spec"]["sinks"].as_array().into_iter().flatten().enumerate() {
                    @if e["module"] == "http" {
                        details.endpoint {
                            summary { "Endpoint #" (i) " " code { (target(e)) } }
                            form method="post" action={ "/portal/endpoints/" (enc(source)) "/" (i) } {
                                (csrf(&ctx))
                                label for={ "url-" (source) "-" (i) } { "URL" }
                                input id={ "url-" (source) "-" (i) } name="url" type="url" value=(target(e)) required;
                                label for={ "et-" (source) "-" (i) } { "Event types (comma separated, empty: all)" }
                                input id={ "et-" (source) "-" (i) } name="event_types" value=(patterns(e));
                                button type="submit" { "Save" }
                            }
                            p { "Signing secrets: " (secret_count(e)) }
                            form method="post" action={ "/portal/endpoints/" (enc(source)) "/" (i) "/rotate" } {
                                (csrf(&ctx)) button type="submit" { "Rotate the signing secret" }
                            }
                            @if secret_count(e) > 1 {
                                form method="post" action={ "/portal/endpoints/" (enc(source)) "/" (i) "/retire" }
                                    data-confirm="Stop signing with the previous secret?" {
                                    (csrf(&ctx)) button type="submit" { "Retire the previous secret" }
                                }
                            }
                            @if e["disabled"].is_object() {
                                form method="post" action={ "/portal/endpoints/" (enc(source)) "/" (i) "/enable" } {
                                    (csrf(&ctx)) button type="submit" { "Enable" }
                                }
                            } @else {
                                form method="post" action={ "/portal/endpoints/" (enc(source)) "/" (i) "/disable" }
                                    data-confirm="Disable this endpoint? Its pending deliveries are dead-lettered." {
                                    (csrf(&ctx)) button.danger type="submit" { "Disable" }
                                }
                            }
                        }
                    }
                }
                @if ingest {
                    form.test method="post" action={ "/portal/endpoints/" (enc(source)) "/test" } {
                        (csrf(&ctx))
                        label for={ "test-type-" (source) } { "Event type" }
                        input id={ "test-type-" (source) } name="event_type"
                            value=(test_event_type(&spec["spec"])) required;
                        button type="submit" { "Send a test event to " (source) }
                    }
                } @else {
                    (lacks(Scope::Ingest, "Sending a test event"))
                }
            }
        }
        section aria-labelledby="h-add" {
            h2 id="h-add" { "Add an endpoint" }
            form.card method="post" action="/portal/endpoints" {
                (csrf(&ctx))
                label for="add-source" { "Source" }
                input id="add-source" name="source" required
                    value=(specs.first().map(|s| s.0.clone()).unwrap_or_default());
                label for="add-url" { "URL" }
                input id="add-url" name="url" type="url" required placeholder="https://example.com/webhooks";
                label for="add-et" { "Event types (comma separated, empty: all)" }
                input id="add-et" name="event_types";
                p.hint { "The endpoint gets a signing secret of its own, shown once when it is added." }
                button type="submit" { "Add endpoint" }
            }
        }
    };
    portal(&ctx, "Endpoints", main)
}

/// The spec of `source` as the API has it (an empty one when it does not exist yet).
async fn spec_of(ctx: &Ctx, source: &str) -> Result<Value, Refusal> {
    let uri = format!("/admin/sources/{}/{}", enc(ctx.tenant()), enc(source));
    match ctx.api.get(&ctx.who, &uri).await {
        Ok(v) => Ok(v["spec"].clone()),
        Err(f) if f.status == StatusCode::NOT_FOUND => Ok(json!({"sinks": []})),
        Err(f) => Err(f.into()),
    }
}

async fn put_spec(ctx: &Ctx, source: &str, spec: Value) -> Result<(), Refusal> {
    // Retiring a customer's last endpoint leaves a source with none: theirs to choose.
    let uri = format!(
        "/admin/sources/{}/{}?allow_no_sinks=true",
        enc(ctx.tenant()),
        enc(source)
    );
    ctx.api
        .call(&ctx.who, Method::PUT, &uri, Some(spec))
        .await?;
    Ok(())
}

fn filter_of(list: &str) -> Value {
    let pats: Vec<&str> = list
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .collect();
    if pats.is_empty() {
        Value::Null
    } else {
        json!({"event_types": pats})
    }
}

fn done(msg: &str) -> Page {
    Ok(see_other(&format!("/portal/?done={}", enc(msg)), &[]))
}

/// Add an HTTP endpoint: signed from its first delivery with a new secret of its own
/// (as [`rotate`] makes), shown once on this answer.
async fn add(PortalCtx(ctx): PortalCtx, body: Bytes) -> Page {
    let f = form(&body);
    check_csrf(&ctx, &f)?;
    let source = f.get("source").map_or("", |s| s.trim());
    let url = f.get("url").map_or("", |s| s.trim());
    let mut spec = spec_of(&ctx, source).await?;
    let secret = new_secret();
    let mut entry =
        json!({"module": "http", "opts": {"url": url, "signing_secret": [secret.clone()]}});
    let filter = filter_of(f.get("event_types").map_or("", String::as_str));
    if !filter.is_null() {
        entry["filter"] = filter;
    }
    let index = match spec["sinks"].as_array_mut() {
        Some(list) => {
            list.push(entry);
            list.len() - 1
        }
        None => 0,
    };
    put_spec(&ctx, source, spec).await?;
    let main = m! {
        p.notice role="status" { "Endpoint added to " (source) ": endpoint #" (index) ", " code { (url) } "." }
        p { "Its signing secret, shown this once: copy it into your receiver now." }
        pre.body id="new-secret" { (secret) }
        p.hint { "Every delivery to it carries a Standard Webhooks signature made with this secret ("
            code { "webhook-signature" } "). Rotate it from the endpoint's settings." }
        p { a href="/portal/" { "Back to the endpoints" } }
    };
    portal(&ctx, "Endpoint added", main)
}

/// Which entries a portal form may change.
#[derive(Clone, Copy, PartialEq)]
enum Entries {
    /// Any entry.
    Any,
    /// Only an `http` one (its URL and signing secrets are the tenant's to edit).
    Http,
}

/// A form POST that changes entry `i` of `source`: the CSRF check, the source as it is now,
/// `change` on the entry (`404` when there is no such entry of the `which` kind), then the
/// source written back; answers what `change` answered.
async fn change_entry<T>(
    ctx: &Ctx,
    source: &str,
    i: usize,
    body: &[u8],
    which: Entries,
    change: impl FnOnce(&mut Value, &HashMap<String, String>) -> T,
) -> Result<T, Refusal> {
    let f = form(body);
    check_csrf(ctx, &f)?;
    let mut spec = spec_of(ctx, source).await?;
    let Some(e) = spec["sinks"]
        .get_mut(i)
        .filter(|e| which == Entries::Any || e["module"] == "http")
    else {
        return Err(Refusal::Status(StatusCode::NOT_FOUND, "not found".into()));
    };
    let out = change(e, &f);
    put_spec(ctx, source, spec).await?;
    Ok(out)
}

async fn edit(
    PortalCtx(ctx): PortalCtx,
    Path((source, i)): Path<(String, usize)>,
    body: Bytes,
) -> Page {
    change_entry(&ctx, &source, i, &body, Entries::Http, |e, f| {
        e["opts"]["url"] = Value::String(f.get("url").map_or("", |s| s.trim()).into());
        let mut filter = filter_of(f.get("event_types").map_or("", String::as_str));
        // The form edits the event types only: a content predicate set through the API
        // stays as it is.
        let predicate = e["filter"].get("match").cloned();
        if let Some(m) = predicate {
            if filter.is_null() {
                filter = json!({});
            }
            filter["match"] = m;
        }
        match e.as_object_mut() {
            Some(o) if filter.is_null() => {
                o.remove("filter");
            }
            Some(o) => {
                o.insert("filter".into(), filter);
            }
            None => {}
        }
    })
    .await?;
    done(&format!("Endpoint #{i} of {source} saved"))
}

async fn disable(
    PortalCtx(ctx): PortalCtx,
    Path((source, i)): Path<(String, usize)>,
    body: Bytes,
) -> Page {
    change_entry(&ctx, &source, i, &body, Entries::Any, |e, _| {
        e["disabled"] = json!({"at_ms": super::now_ms(), "reason": "disabled in the portal"});
    })
    .await?;
    done(&format!("Endpoint #{i} of {source} disabled"))
}

/// The secrets (or references) an entry signs with, newest first.
fn secrets(e: &Value) -> Vec<Value> {
    match &e["opts"]["signing_secret"] {
        Value::String(s) => vec![Value::String(s.clone())],
        Value::Array(a) => a.clone(),
        _ => Vec::new(),
    }
}

fn secret_count(e: &Value) -> usize {
    secrets(e).len()
}

/// A new Standard Webhooks secret: `whsec_` and 24 random bytes, base64.
fn new_secret() -> String {
    use base64::Engine;
    use rand::RngCore;
    let mut b = [0u8; 24];
    rand::rng().fill_bytes(&mut b);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(b)
    )
}

/// Rotate: a new secret signs first, the newest previous one keeps signing beside it (each
/// delivery carries one signature per secret) until it is retired, so a receiver can move to
/// the new secret at its own pace. The new secret is shown once, on this answer.
async fn rotate(
    PortalCtx(ctx): PortalCtx,
    Path((source, i)): Path<(String, usize)>,
    body: Bytes,
) -> Page {
    let secret = new_secret();
    change_entry(&ctx, &source, i, &body, Entries::Http, |e, _| {
        let mut list = vec![Value::String(secret.clone())];
        list.extend(secrets(e).into_iter().take(1));
        e["opts"]["signing_secret"] = Value::Array(list);
    })
    .await?;
    let main = m! {
        p.notice role="status" { "The signing secret of endpoint #" (i) " of " code { (source) } " was rotated." }
        p { "The new secret, shown this once: copy it into your receiver now." }
        pre.body id="new-secret" { (secret) }
        p.hint { "Deliveries are signed with the new secret and the previous one (one "
            code { "v1," } " signature each in " code { "webhook-signature" } ") until you retire the previous one." }
        p { a href="/portal/" { "Back to the endpoints" } }
    };
    portal(&ctx, "New signing secret", main)
}

/// Retire: only the newest secret signs from now on.
async fn retire(
    PortalCtx(ctx): PortalCtx,
    Path((source, i)): Path<(String, usize)>,
    body: Bytes,
) -> Page {
    change_entry(&ctx, &source, i, &body, Entries::Http, |e, _| {
        let newest: Vec<Value> = secrets(e).into_iter().take(1).collect();
        e["opts"]["signing_secret"] = Value::Array(newest);
    })
    .await?;
    done(&format!(
        "The previous signing secret of endpoint #{i} of {source} is retired"
    ))
}

async fn enable(
    PortalCtx(ctx): PortalCtx,
    Path((source, i)): Path<(String, u32)>,
    body: Bytes,
) -> Page {
    let f = form(&body);
    check_csrf(&ctx, &f)?;
    let uri = format!(
        "/admin/sources/{}/{}/sinks/{i}/enable",
        enc(ctx.tenant()),
        enc(&source)
    );
    ctx.api.call(&ctx.who, Method::POST, &uri, None).await?;
    done(&format!("Endpoint #{i} of {source} enabled"))
}

async fn test_event(PortalCtx(ctx): PortalCtx, Path(source): Path<String>, body: Bytes) -> Page {
    let f = form(&body);
    check_csrf(&ctx, &f)?;
    let uri = format!("/v1/hooks/{}/{}", enc(ctx.tenant()), enc(&source));
    let event_type = f.get("event_type").map_or("", |t| t.trim());
    let event_type = if event_type.is_empty() {
        "ankusa.test"
    } else {
        event_type
    };
    let event = json!({"type": event_type, "message": "a test event sent from the portal", "sent_at_ms": super::now_ms()});
    let r = ctx
        .api
        .call_with(
            &ctx.who,
            Method::POST,
            &uri,
            Some(event),
            &[("x-event-type", event_type)],
        )
        .await?;
    if r["rows"].as_u64() == Some(0) {
        return done(&format!(
            "No endpoint of {source} takes event type {event_type}: nothing was sent. \
             Send one its filters take."
        ));
    }
    let hook = text(&r["hook_id"]);
    Ok(see_other(
        &format!(
            "/portal/hooks/{}?done={}",
            enc(&hook),
            enc("Test event sent")
        ),
        &[],
    ))
}

async fn deliveries(PortalCtx(ctx): PortalCtx, Query(q): Q) -> Page {
    let tenant = ctx.tenant().to_string();
    let (lines, more) = delivery_lines(&ctx, &tenant, &q).await?;
    portal(
        &ctx,
        "Deliveries",
        deliveries_view(&lines, more, &q, "/portal/hooks/"),
    )
}

async fn hook(PortalCtx(ctx): PortalCtx, Path(id): Path<u64>, Query(q): Q) -> Page {
    let tenant = ctx.tenant().to_string();
    let (h, body) = hook_with_body(&ctx, &tenant, id).await?;
    let base = format!("/portal/hooks/{id}");
    let main = m! {
        p { a href="/portal/deliveries" { "← Deliveries" } }
        @if h["attempts"].as_array().is_none_or(|a| a.is_empty()) {
            p.hint data-refresh="2" { "Waiting for the first attempt… " (badge("due")) }
        }
        (view::hook_page(&ctx, &base, &h, body.as_deref(), BodyView::parse(q.get("view")), q.get("done")))
    };
    portal(&ctx, &format!("Hook {id}"), main)
}

async fn resend(PortalCtx(ctx): PortalCtx, Path(id): Path<u64>, body: Bytes) -> Page {
    let tenant = ctx.tenant().to_string();
    let msg = resend_as(&ctx, &tenant, id, &body).await?;
    Ok(see_other(
        &format!("/portal/hooks/{id}?done={}", enc(&msg)),
        &[],
    ))
}
