//! The operator console's pages (`/ui/`): overview, tenants, a tenant, its deliveries, a
//! hook, dead letters, the effective config. Each is a few calls of the admin API.

use super::deliveries::{deliveries_view, delivery_lines};
use super::view::{self, badge, csrf, layout, notice, text, time_of, BodyView};
use super::{action, form, html, page, see_other, Area, Ctx, Page, Refusal, UiCtx};
use crate::admin::AdminState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method};
use axum::Router;
use bytes::Bytes;
use maud::{html as m, Markup};
use serde_json::{json, Value};
use std::collections::HashMap;

type Q = Query<HashMap<String, String>>;

pub(super) fn routes() -> Router<AdminState> {
    Router::new()
        .route(
            "/ui/login",
            page(|h: HeaderMap| async move { super::login_form(Area::Ui, &h, None) }).post(
                |State(st): State<AdminState>, h: HeaderMap, b: Bytes| async move {
                    super::login(&st, Area::Ui, &h, &b).await
                },
            ),
        )
        .route(
            "/ui/logout",
            action(
                |State(st): State<AdminState>, h: HeaderMap, b: Bytes| async move {
                    super::logout(&st, Area::Ui, &h, &b)
                },
            ),
        )
        .route("/ui", page(|| async { see_other("/ui/", &[]) }))
        .route("/ui/", page(overview))
        .route("/ui/tenants", page(tenants))
        .route(
            "/ui/tenant",
            page(|UiCtx(_): UiCtx, Query(q): Q| async move {
                see_other(
                    &format!("/ui/tenants/{}", enc(q.get("id").map_or("", |s| s.trim()))),
                    &[],
                )
            }),
        )
        .route("/ui/tenants/{tenant}", page(tenant))
        .route("/ui/tenants/{tenant}/deliveries", page(deliveries))
        .route("/ui/tenants/{tenant}/hooks/{hook}", page(hook))
        .route("/ui/tenants/{tenant}/hooks/{hook}/resend", action(resend))
        .route("/ui/dlq", page(dlq))
        .route("/ui/dlq/replay", page(replay_preview).post(replay))
        .route("/ui/dlq/purge", action(purge))
        .route("/ui/config", page(config))
}

/// A path or query component, percent-encoded.
pub(crate) fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn ui(ctx: &Ctx, title: &str, main: Markup) -> Page {
    Ok(html(layout(Area::Ui, Some(ctx), title, main)))
}

async fn overview(UiCtx(ctx): UiCtx) -> Page {
    let who = &ctx.who;
    let state = ctx.api.get(who, "/admin/state").await?;
    let pressure = ctx.api.get(who, "/admin/pressure").await;
    let events = ctx
        .api
        .get(who, "/admin/events")
        .await
        .unwrap_or(Value::Null);
    let top = ctx
        .api
        .get(who, "/admin/tenants/top?limit=10")
        .await
        .unwrap_or(Value::Null);
    let sched = state["state"].as_object().cloned().unwrap_or_default();
    let (lag, window) = match &pressure {
        Ok(p) if p["window_full"] == true => (format!("{} ms", text(&p["lag_ms"])), "full"),
        Ok(p) => (format!("{} ms", text(&p["lag_ms"])), "room"),
        Err(e) => (format!("unavailable: {}", e.message), "—"),
    };
    let main = m! {
        div data-refresh="5" {
            section.cards aria-label="Now" {
                div.card { h2 { "Due lag" } p.big { (lag) } }
                div.card { h2 { "Window" } p.big { (window) } }
                div.card { h2 { "Partitions led here" } p.big {
                    (state["led_partitions"].as_array().map_or(0, |a| a.len())) " of " (text(&state["partitions"]))
                } }
                div.card { h2 { "This worker" } p { code { (text(&state["node_id"])) } } }
            }
            section aria-labelledby="h-sched" {
                h2 id="h-sched" { "Scheduler" }
                table { tbody { @for (k, v) in &sched { tr { th scope="row" { (k) } td { (text(v)) } } } } }
                @let led = state["led_partitions"].as_array().cloned().unwrap_or_default();
                p { "Partition ids led here: "
                    @if led.is_empty() { "none" }
                    @for p in &led { code { (text(p)) } " " } }
            }
            section aria-labelledby="h-top" {
                h2 id="h-top" { "Busiest tenants" }
                (tenant_table(&top))
            }
            section aria-labelledby="h-events" {
                h2 id="h-events" { "Recent operational events" }
                @let evs = events["events"].as_array().cloned().unwrap_or_default();
                @if evs.is_empty() { p.empty { "No operational event lately (a sink entry disabled or enabled, a breaker opened or closed, a row dead-lettered)." } }
                ul { @for e in evs.iter().rev().take(20) {
                    @let tenant = enc(e["tenant"].as_str().unwrap_or(""));
                    li { (time_of(&e["at_ms"])) " " (badge(e["type"].as_str().unwrap_or(""))) " "
                        a href={ "/ui/tenants/" (tenant) } { (text(&e["tenant"])) }
                        "/" (text(&e["source"])) "#" (text(&e["sink"])) " "
                        @if let Some(hook) = e["hook"].as_u64() {
                            a href={ "/ui/tenants/" (tenant) "/hooks/" (hook) } { "hook " (hook) } " "
                        }
                        (text(&e["reason"])) }
                } }
            }
        }
    };
    ui(&ctx, "Overview", main)
}

fn tenant_table(top: &Value) -> Markup {
    m! {
        table {
            thead { tr { th scope="col" { "Tenant" } th scope="col" { "Due rows" } th scope="col" { "Due now" }
                th scope="col" { "Claimed" } th scope="col" { "Oldest lag (ms)" } th scope="col" { "Retrying" }
                th scope="col" { "Failing sinks" } th scope="col" { "Bytes" } } }
            tbody { @for t in top["tenants"].as_array().into_iter().flatten() {
                @let name = t["tenant"].as_str().unwrap_or("");
                tr {
                    td { a href={ "/ui/tenants/" (enc(name)) } { (name) } }
                    td { (text(&t["due_rows"])) } td { (text(&t["due_now"])) } td { (text(&t["claimed"])) }
                    td { (text(&t["oldest_lag_ms"])) } td { (text(&t["retrying_rows"])) }
                    td { @for s in t["failing_sinks"].as_array().into_iter().flatten() { code { (text(s)) } " " } }
                    td { (text(&t["bytes"])) }
                }
            } }
        }
    }
}

/// Tenants a page of the Tenants list shows.
const TENANTS_PER_PAGE: usize = 100;

async fn tenants(State(st): State<AdminState>, UiCtx(ctx): UiCtx, Query(q): Q) -> Page {
    let by = match q.get("by").map(String::as_str) {
        Some("bytes") => "bytes",
        _ => "rows",
    };
    let search = q.get("q").cloned().unwrap_or_default();
    let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(0);
    let end = (page + 1) * TENANTS_PER_PAGE;
    // The search runs over every tenant with rows (the API's `q`); those come first, by
    // backlog or bytes, then the tenants set up with nothing waiting (a source, or a
    // `[tenants.<id>]` section), by id.
    let top = ctx
        .api
        .get(
            &ctx.who,
            &format!("/admin/tenants/top?limit={end}&by={by}&q={}", enc(&search)),
        )
        .await?;
    let mut list: Vec<Value> = top["tenants"].as_array().cloned().unwrap_or_default();
    let mut more = top["more"] == true;
    if !more {
        // Every tenant with rows is listed: the rest have none.
        let sources = ctx.api.get(&ctx.who, "/admin/sources").await?;
        let config = st.worker.config();
        let mut idle: std::collections::BTreeSet<String> = sources["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["tenant"].as_str().map(str::to_string))
            .chain(config.tenants.keys().cloned())
            // `dispatch.tenants.default` is every tenant's fallback, not a tenant.
            .chain(
                config
                    .dispatch
                    .tenants
                    .keys()
                    .filter(|t| *t != "default")
                    .cloned(),
            )
            .filter(|t| t.contains(search.as_str()))
            .collect();
        for t in &list {
            idle.remove(t["tenant"].as_str().unwrap_or(""));
        }
        more = list.len() + idle.len() > end;
        list.extend(idle.into_iter().take(end.saturating_sub(list.len())).map(|t| {
            json!({"tenant": t, "due_rows": 0, "due_now": 0, "claimed": 0, "oldest_lag_ms": 0,
                   "retrying_rows": 0, "failing_sinks": [], "bytes": 0})
        }));
    }
    let shown: Vec<Value> = list.into_iter().skip(page * TENANTS_PER_PAGE).collect();
    let at = |p: usize| {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        s.append_pair("q", &search).append_pair("by", by);
        s.append_pair("page", &p.to_string());
        s.finish()
    };
    let main = m! {
        form.filters method="get" role="search" {
            label for="q" { "Tenant" } input id="q" name="q" value=(search) type="search";
            label for="by" { "Sort by" }
            select id="by" name="by" {
                option value="rows" selected[by == "rows"] { "backlog (rows)" }
                option value="bytes" selected[by == "bytes"] { "bytes held" }
            }
            button type="submit" { "Show" }
        }
        p.hint { "Tenants with rows waiting first, then those set up with nothing waiting; open any tenant by its id:" }
        form.filters method="get" action="/ui/tenant" {
            label for="open" { "Tenant id" } input id="open" name="id" required;
            button type="submit" { "Open" }
        }
        @if shown.is_empty() { p.empty { "No tenant matches." } }
        @else { (tenant_table(&json!({"tenants": shown}))) }
        nav.pager aria-label="Pages" {
            @if page > 0 { a href={ "?" (at(page - 1)) } rel="prev" { "← Previous" } }
            @if more { a href={ "?" (at(page + 1)) } rel="next" { "Next →" } }
        }
    };
    ui(&ctx, "Tenants", main)
}

async fn tenant(UiCtx(ctx): UiCtx, Path(t): Path<String>) -> Page {
    let who = &ctx.who;
    let et = enc(&t);
    let sources = ctx
        .api
        .get(who, &format!("/admin/sources?tenant={et}"))
        .await?;
    let mut specs = Vec::new();
    for s in sources["sources"].as_array().into_iter().flatten() {
        let name = s["source"].as_str().unwrap_or("").to_string();
        let spec = ctx
            .api
            .get(who, &format!("/admin/sources/{et}/{}", enc(&name)))
            .await
            .unwrap_or(Value::Null);
        specs.push((name, spec));
    }
    let health = ctx
        .api
        .get(who, &format!("/admin/tenants/{et}/health"))
        .await
        .unwrap_or(Value::Null);
    let top = ctx
        .api
        .get(who, &format!("/admin/tenants/top?tenant={et}"))
        .await
        .unwrap_or(Value::Null);
    let rows = ctx
        .api
        .get(who, &format!("/admin/rows?tenant={et}&limit=1000"))
        .await
        .unwrap_or(Value::Null);
    let dlq = ctx
        .api
        .get(who, &format!("/admin/dlq?tenant={et}&limit=1000"))
        .await
        .unwrap_or(Value::Null);
    let mut by_state: std::collections::BTreeMap<String, u64> = Default::default();
    for r in rows["rows"].as_array().into_iter().flatten() {
        *by_state.entry(text(&r["state"])).or_default() += 1;
    }
    let dead = dlq["dead_letters"].as_array().map_or(0, |a| a.len());
    let main = m! {
        p { a href={ "/ui/tenants/" (et) "/deliveries" } { "Deliveries of this tenant →" } }
        section aria-labelledby="h-state" {
            h2 id="h-state" { "Rows by state" }
            dl.facts {
                @for (s, n) in &by_state { dt { (badge(s)) } dd { (n) @if rows["more"] == true { "+" } } }
                dt { (badge("dead_lettered")) } dd { (dead) @if dlq["more"] == true { "+" } }
            }
            (tenant_table(&top))
        }
        section aria-labelledby="h-sources" {
            h2 id="h-sources" { "Sources and sink entries" }
            @if specs.is_empty() { p.empty { "No source registered." } }
            @for (name, spec) in &specs {
                h3 { code { (name) } }
                (entries(name, &spec["spec"], &health))
            }
        }
    };
    ui(&ctx, &format!("Tenant {t}"), main)
}

/// A source's sink entries: module, target, filter, policy, disabled, and their health over
/// the last hour from `health` (a `GET /admin/tenants/{tenant}/health` answer; `Null` when
/// it could not be read).
pub(crate) fn entries(source: &str, spec: &Value, health: &Value) -> Markup {
    let of = |i: usize| {
        health["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["source"] == source && e["sink"].as_u64() == Some(i as u64))
    };
    m! {
        table {
            thead { tr { th scope="col" { "#" } th scope="col" { "Module" } th scope="col" { "Target" }
                th scope="col" { "Event filter" } th scope="col" { "Rate limit" } th scope="col" { "State" }
                th scope="col" { "Success (last hour)" } th scope="col" { "p50 / p99 (ms)" } th scope="col" { "Last error" } } }
            tbody { @for (i, e) in spec["sinks"].as_array().into_iter().flatten().enumerate() {
                tr {
                    td { (i) }
                    td { (text(&e["module"])) }
                    td { code { (target(e)) } }
                    td { @for p in e["filter"]["event_types"].as_array().into_iter().flatten() { code { (text(p)) } " " }
                        @if let Some(m) = e["filter"].get("match") { code { "match " (m.to_string()) } } }
                    td { @if !e["rate_limit"].is_null() { code { (e["rate_limit"].to_string()) } } }
                    td { @if e["disabled"].is_object() {
                            (badge("disabled")) " " (time_of(&e["disabled"]["at_ms"])) " " (text(&e["disabled"]["reason"]))
                        } @else { (badge("enabled")) }
                        @if let Some(h) = of(i) { (breaker(h)) } }
                    @match of(i) {
                        Some(h) => {
                            td.health { (format!("{:.1} %", h["success_rate"].as_f64().unwrap_or(0.0) * 100.0))
                                " of " (text(&h["attempts"])) " attempts" }
                            td { (text(&h["p50_ms"])) " / " (text(&h["p99_ms"])) }
                            td { @if let Some(err) = h["last_error"].as_str() {
                                (time_of(&h["last_error_at_ms"])) " " code { (view::esc(err)) } } }
                        }
                        None => { td.empty { "no attempt" } td {} td {} }
                    }
                }
            } }
        }
    }
}

/// An entry's breaker and parked rows, from its health line: "breaker open until … · 3
/// parked", "breaker half-open (the next attempt probes)"; nothing while it is closed with
/// nothing parked.
fn breaker(h: &Value) -> Markup {
    let parked = h["parked"].as_u64().unwrap_or(0);
    m! {
        @match h["breaker"].as_str() {
            Some("open") => { " " span.breaker { (badge("breaker open")) " until " (time_of(&h["breaker_until_ms"])) } }
            Some(_) => { " " span.breaker { (badge("breaker half-open")) " the next attempt probes" } }
            None => {}
        }
        @if parked > 0 { " · " (parked) " parked" }
    }
}

/// Where an entry delivers: its URL, queue or topic.
pub(crate) fn target(e: &Value) -> String {
    for k in ["url", "queue_url", "topic"] {
        if let Some(v) = e["opts"][k].as_str() {
            return v.to_string();
        }
    }
    String::new()
}

async fn deliveries(UiCtx(ctx): UiCtx, Path(t): Path<String>, Query(q): Q) -> Page {
    let (lines, more) = delivery_lines(&ctx, &t, &q).await?;
    let base = format!("/ui/tenants/{}/hooks/", enc(&t));
    let main = m! {
        p { a href={ "/ui/tenants/" (enc(&t)) } { "← Tenant " (t) } }
        (deliveries_view(&lines, more, &q, &base))
    };
    ui(&ctx, &format!("Deliveries of {t}"), main)
}

/// The bytes of an answer's `body` (text) or `body_base64`.
fn body_of(v: &Value) -> Option<Vec<u8>> {
    if let Some(t) = v["body"].as_str() {
        return Some(t.as_bytes().to_vec());
    }
    use base64::Engine;
    let b = v["body_base64"].as_str()?;
    base64::engine::general_purpose::STANDARD.decode(b).ok()
}

/// The hook and its body, wherever it is still kept: in Redis (pending, dead-lettered, or
/// delivered and kept for resend) or in the delivery log (`GET /admin/hooks/{t}/{h}/body`).
pub(crate) async fn hook_with_body(
    ctx: &Ctx,
    tenant: &str,
    hook: u64,
) -> Result<(Value, Option<Vec<u8>>), Refusal> {
    let et = enc(tenant);
    let h = ctx
        .api
        .get(&ctx.who, &format!("/admin/hooks/{et}/{hook}"))
        .await?;
    let body = match h["stored"].as_str() {
        Some("gone") => None,
        _ => ctx
            .api
            .get(&ctx.who, &format!("/admin/hooks/{et}/{hook}/body"))
            .await
            .ok()
            .and_then(|b| body_of(&b)),
    };
    Ok((h, body))
}

async fn hook(UiCtx(ctx): UiCtx, Path((t, id)): Path<(String, u64)>, Query(q): Q) -> Page {
    let (h, body) = hook_with_body(&ctx, &t, id).await?;
    let base = format!("/ui/tenants/{}/hooks/{id}", enc(&t));
    let main = m! {
        p { a href={ "/ui/tenants/" (enc(&t)) "/deliveries" } { "← Deliveries of " (t) } }
        (view::hook_page(&ctx, &base, &h, body.as_deref(), BodyView::parse(q.get("view")), q.get("done")))
    };
    ui(&ctx, &format!("Hook {id}"), main)
}

/// Resend a hook (all its sink entries) as `ctx`; the message to show.
pub(crate) async fn resend_as(
    ctx: &Ctx,
    tenant: &str,
    id: u64,
    body: &[u8],
) -> Result<String, Refusal> {
    let fields = form(body);
    super::check_csrf(ctx, &fields)?;
    let r = ctx
        .api
        .call(
            &ctx.who,
            Method::POST,
            &format!("/admin/hooks/{}/{id}/resend", enc(tenant)),
            None,
        )
        .await?;
    Ok(format!("Resent as hook {}", text(&r["new_hook"])))
}

async fn resend(UiCtx(ctx): UiCtx, Path((t, id)): Path<(String, u64)>, body: Bytes) -> Page {
    let msg = resend_as(&ctx, &t, id, &body).await?;
    Ok(see_other(
        &format!("/ui/tenants/{}/hooks/{id}?done={}", enc(&t), enc(&msg)),
        &[],
    ))
}

const FILTER_KEYS: [&str; 6] = ["tenant", "source", "sink", "reason", "since", "until"];

fn filter_of(q: &HashMap<String, String>) -> Value {
    let mut f = serde_json::Map::new();
    for k in FILTER_KEYS {
        if let Some(v) = q.get(k).filter(|v| !v.is_empty()) {
            f.insert(k.into(), Value::String(v.clone()));
        }
    }
    Value::Object(f)
}

fn filter_query(q: &HashMap<String, String>) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for k in FILTER_KEYS {
        if let Some(v) = q.get(k).filter(|v| !v.is_empty()) {
            s.append_pair(k, v);
        }
    }
    s.finish()
}

fn filter_form(q: &HashMap<String, String>, action: &str, button: &str) -> Markup {
    m! {
        form.filters method="get" action=(action) {
            @for k in FILTER_KEYS {
                label for={ "f-" (k) } { (k) }
                input id={ "f-" (k) } name=(k) value=(q.get(k).cloned().unwrap_or_default());
            }
            button type="submit" { (button) }
        }
    }
}

fn dead_letter_table(list: &[Value]) -> Markup {
    m! {
        table {
            thead { tr { th scope="col" { "Dead-lettered" } th scope="col" { "Tenant" } th scope="col" { "Hook" }
                th scope="col" { "Source" } th scope="col" { "Event type" } th scope="col" { "Reason" }
                th scope="col" { "Attempts" } th scope="col" { "Error" } } }
            tbody { @for d in list {
                @let t = d["tenant"].as_str().unwrap_or("");
                tr {
                    td { (time_of(&d["at_ms"])) }
                    td { a href={ "/ui/tenants/" (enc(t)) } { (t) } }
                    td { a href={ "/ui/tenants/" (enc(t)) "/hooks/" (text(&d["hook"])) } { (text(&d["hook"])) } }
                    td { (text(&d["source"])) }
                    td { code { (text(&d["event_type"])) } }
                    td { (text(&d["reason"])) }
                    td { (text(&d["attempts"])) }
                    td.err { (text(&d["error"])) }
                }
            } }
        }
    }
}

async fn dlq(UiCtx(ctx): UiCtx, Query(q): Q) -> Page {
    let fq = filter_query(&q);
    let list = ctx
        .api
        .get(&ctx.who, &format!("/admin/dlq?limit=100&{fq}"))
        .await?;
    let dl = list["dead_letters"].as_array().cloned().unwrap_or_default();
    let main = m! {
        (notice(q.get("done")))
        (filter_form(&q, "/ui/dlq", "Filter"))
        p { a.button href={ "/ui/dlq/replay?" (fq) } { "Replay what this filter selects…" } }
        @if dl.is_empty() { p.empty { "No dead letter matches." } }
        @else { (dead_letter_table(&dl)) @if list["more"] == true { p.hint { "The first 100 are shown." } } }
        section aria-labelledby="h-purge" {
            h2 id="h-purge" { "Purge" }
            form method="post" action="/ui/dlq/purge" {
                (csrf(&ctx))
                @for k in FILTER_KEYS { @if let Some(v) = q.get(k).filter(|v| !v.is_empty()) {
                    input type="hidden" name=(k) value=(v);
                } }
                label for="confirm" { "Type " code { "purge" } " to delete every dead letter this filter selects"
                    @if fq.is_empty() { " (no filter: every dead letter of every tenant)" } }
                input id="confirm" name="confirm" autocomplete="off";
                button.danger type="submit" { "Purge" }
            }
        }
    };
    ui(&ctx, "Dead letters", main)
}

async fn replay_preview(UiCtx(ctx): UiCtx, Query(q): Q) -> Page {
    let body = json!({"filter": filter_of(&q), "options": {"dry_run": true}});
    let r = ctx
        .api
        .call(&ctx.who, Method::POST, "/admin/dlq/replay", Some(body))
        .await?;
    let selected = r["selected"].as_array().cloned().unwrap_or_default();
    let main = m! {
        (filter_form(&q, "/ui/dlq/replay", "Count again"))
        p.big { "This filter selects " strong id="matched" { (text(&r["matched"])) } " dead letters." }
        @if !selected.is_empty() { h2 { "The first of them" } (dead_letter_table(&selected)) }
        form id="confirm-replay" method="post" action="/ui/dlq/replay" data-confirm={ "Replay " (text(&r["matched"])) " dead letters?" } {
            (csrf(&ctx))
            @for k in FILTER_KEYS { @if let Some(v) = q.get(k).filter(|v| !v.is_empty()) {
                input type="hidden" name=(k) value=(v);
            } }
            input type="hidden" name="expect" value=(text(&r["matched"]));
            button type="submit" { "Replay these " (text(&r["matched"])) }
        }
    };
    ui(&ctx, "Replay dead letters", main)
}

async fn replay(UiCtx(ctx): UiCtx, body: Bytes) -> Page {
    let fields = form(&body);
    super::check_csrf(&ctx, &fields)?;
    let req = json!({"filter": filter_of(&fields), "options": {"pace": false}});
    let r = ctx
        .api
        .call(&ctx.who, Method::POST, "/admin/dlq/replay", Some(req))
        .await?;
    let msg = format!(
        "Replayed {} of {} selected ({} no longer stored, {} still live)",
        text(&r["replayed"]),
        text(&r["matched"]),
        text(&r["hook_gone"]),
        text(&r["live"])
    );
    Ok(see_other(
        &format!("/ui/dlq?{}&done={}", filter_query(&fields), enc(&msg)),
        &[],
    ))
}

async fn purge(UiCtx(ctx): UiCtx, body: Bytes) -> Page {
    let fields = form(&body);
    super::check_csrf(&ctx, &fields)?;
    if fields.get("confirm").map(|c| c.trim()) != Some("purge") {
        return Ok(see_other(
            &format!(
                "/ui/dlq?{}&done={}",
                filter_query(&fields),
                enc("Nothing purged: type purge to confirm")
            ),
            &[],
        ));
    }
    let filter = filter_of(&fields);
    let all = filter.as_object().is_some_and(|f| f.is_empty());
    let r = ctx
        .api
        .call(
            &ctx.who,
            Method::POST,
            "/admin/dlq/purge",
            Some(json!({"filter": filter, "all": all})),
        )
        .await?;
    let msg = format!("Purged: {r}");
    Ok(see_other(
        &format!("/ui/dlq?{}&done={}", filter_query(&fields), enc(&msg)),
        &[],
    ))
}

async fn config(State(st): State<AdminState>, UiCtx(ctx): UiCtx) -> Page {
    // The worker's own config, read from memory (no Redis), secrets redacted.
    let dump = st.worker.config().redacted_toml();
    let main = m! {
        p.hint { "This worker's effective config; tokens, passwords and secrets are redacted." }
        pre.body { (dump) }
    };
    ui(&ctx, "Effective config", main)
}
