//! The deliveries list both sites show: a tenant's waiting rows, dead letters and delivered
//! hooks, newest first, filtered and paged.

use super::ui::enc;
use super::view::{badge, text, time_of};
use super::{Ctx, Refusal};
use maud::{html as m, Markup};
use serde_json::{json, Value};
use std::collections::HashMap;

/// One line of the deliveries list: a pending row or a dead letter.
struct Line {
    hook: u64,
    row: String,
    source: String,
    event_type: String,
    state: String,
    attempts: String,
    when: i64,
    error: String,
}

/// The most delivered rows a default deliveries list reads when there is no delivery log.
const DELIVERED_MAX: usize = 200;

/// The lines of a `GET /admin/rows` answer (`uri`), and whether it had more.
async fn row_lines(ctx: &Ctx, uri: &str) -> Result<(Vec<Line>, bool), Refusal> {
    let rows = ctx.api.get(&ctx.who, uri).await?;
    let lines = rows["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| Line {
            hook: r["hook"].as_u64().unwrap_or(0),
            row: text(&r["row"]),
            source: text(&r["source"]),
            event_type: r["event_type"].as_str().unwrap_or("").into(),
            state: text(&r["state"]),
            attempts: text(&r["attempts"]),
            // A delivered row has no next attempt: its first attempt dates it.
            when: r["due_at_ms"]
                .as_i64()
                .or_else(|| r["first_attempt_ms"].as_i64())
                .unwrap_or(0),
            error: r["last_error"].as_str().unwrap_or("").into(),
        })
        .collect();
    Ok((lines, rows["more"] == true))
}

/// The hooks of a tenant: rows waiting, dead letters and delivered hooks (from the delivery
/// log, or without one from the attempt history), newest first, filtered.
pub(crate) async fn delivery_lines(
    ctx: &Ctx,
    tenant: &str,
    q: &HashMap<String, String>,
) -> Result<(Vec<Value>, bool), Refusal> {
    let et = enc(tenant);
    let source = q.get("source").filter(|s| !s.is_empty());
    let event = q.get("event_type").filter(|s| !s.is_empty());
    let state = q.get("state").filter(|s| !s.is_empty()).map(String::as_str);
    let mut lines: Vec<Line> = Vec::new();
    let mut more = false;
    let mut logged = false;
    if state != Some("dead_lettered") {
        let mut uri = format!("/admin/rows?tenant={et}&limit=1000");
        if let Some(s) = source {
            uri += &format!("&source={}", enc(s));
        }
        if let Some(s @ ("retrying" | "parked" | "due" | "claimed" | "delivered")) = state {
            uri += &format!("&state={s}");
        }
        let (rows, m) = row_lines(ctx, &uri).await?;
        more |= m;
        lines.extend(rows);
    }
    if state.is_none() || state == Some("dead_lettered") {
        let mut uri = format!("/admin/dlq?tenant={et}&limit=1000");
        if let Some(s) = source {
            uri += &format!("&source={}", enc(s));
        }
        let dlq = ctx.api.get(&ctx.who, &uri).await?;
        more |= dlq["more"] == true;
        for d in dlq["dead_letters"].as_array().into_iter().flatten() {
            lines.push(Line {
                hook: d["hook"].as_u64().unwrap_or(0),
                row: text(&d["row"]),
                source: text(&d["source"]),
                event_type: d["event_type"].as_str().unwrap_or("").into(),
                state: "dead_lettered".into(),
                attempts: text(&d["attempts"]),
                when: d["at_ms"].as_i64().unwrap_or(0),
                error: d["error"].as_str().unwrap_or("").into(),
            });
        }
    }
    // Hooks that ended, from the delivery log (a worker with `[log] url`; without one the
    // route answers that none is configured, and the lines above are all there is).
    if matches!(state, None | Some("delivered") | Some("dead_lettered")) {
        let mut uri = format!("/admin/log/{et}/hooks?since=7d&limit=200");
        for (k, v) in [
            ("source", source),
            ("event_type", event),
            ("state", state.map(String::from).as_ref()),
        ] {
            if let Some(v) = v {
                uri += &format!("&{k}={}", enc(v));
            }
        }
        let log = ctx.api.get(&ctx.who, &uri).await;
        logged = log.is_ok();
        if let Ok(log) = log {
            more |= log["next"].is_string();
            let listed: std::collections::HashSet<u64> = lines.iter().map(|l| l.hook).collect();
            for h in log["hooks"].as_array().into_iter().flatten() {
                let hook = h["hook"].as_u64().unwrap_or(0);
                if listed.contains(&hook) {
                    continue;
                }
                lines.push(Line {
                    hook,
                    row: String::new(),
                    source: text(&h["source"]),
                    event_type: h["event_type"].as_str().unwrap_or("").into(),
                    state: text(&h["state"]),
                    attempts: String::new(),
                    when: h["ended_ms"].as_i64().unwrap_or(0),
                    error: String::new(),
                });
            }
        }
    }
    // Without a delivery log, the delivered rows of the newest hooks with attempt history
    // (what `state=delivered` lists) are listed too, so a default list shows what arrived.
    if state.is_none() && !logged {
        let mut uri = format!("/admin/rows?tenant={et}&state=delivered&limit={DELIVERED_MAX}");
        if let Some(s) = source {
            uri += &format!("&source={}", enc(s));
        }
        if let Ok((rows, m)) = row_lines(ctx, &uri).await {
            more |= m;
            let listed: std::collections::HashSet<String> =
                lines.iter().map(|l| l.row.clone()).collect();
            lines.extend(rows.into_iter().filter(|l| !listed.contains(&l.row)));
        }
    }
    if let Some(e) = event {
        lines.retain(|l| l.event_type == *e);
    }
    lines.sort_by(|a, b| b.hook.cmp(&a.hook).then(a.row.cmp(&b.row)));
    Ok((
        lines
            .into_iter()
            .map(|l| {
                json!({"hook": l.hook, "row": l.row, "source": l.source, "event_type": l.event_type,
                       "state": l.state, "attempts": l.attempts, "when": l.when, "error": l.error})
            })
            .collect(),
        more,
    ))
}

/// The filter form and the page of lines; `hook_base` is where a hook's page is.
pub(crate) fn deliveries_view(
    lines: &[Value],
    more: bool,
    q: &HashMap<String, String>,
    hook_base: &str,
) -> Markup {
    let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(0);
    const PER: usize = 50;
    let shown = lines.iter().skip(page * PER).take(PER);
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    let state = get("state");
    let next_q = |p: usize| {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for k in ["source", "event_type", "state"] {
            if let Some(v) = q.get(k) {
                s.append_pair(k, v);
            }
        }
        s.append_pair("page", &p.to_string());
        s.finish()
    };
    m! {
        form.filters method="get" {
            label for="f-source" { "Source" } input id="f-source" name="source" value=(get("source"));
            label for="f-et" { "Event type" } input id="f-et" name="event_type" value=(get("event_type"));
            label for="f-state" { "State" }
            select id="f-state" name="state" {
                option value="" { "any" }
                @for s in ["retrying", "parked", "due", "claimed", "dead_lettered", "delivered"] {
                    option value=(s) selected[state == s] { (s) }
                }
            }
            button type="submit" { "Filter" }
        }
        @if lines.is_empty() { p.empty { @if state == "delivered" { "No delivered hook matches (delivered hooks are listed from the attempt history)." }
            @else { "No hook matches." } } }
        @else {
            table.deliveries {
                thead { tr { th scope="col" { "Hook" } th scope="col" { "Row" } th scope="col" { "Source" }
                    th scope="col" { "Event type" } th scope="col" { "State" } th scope="col" { "Attempts" }
                    th scope="col" { "Due / dead-lettered / first attempt" } th scope="col" { "Last error" } } }
                tbody { @for l in shown {
                    tr {
                        td { a href={ (hook_base) (text(&l["hook"])) } { (text(&l["hook"])) } }
                        td { code { (text(&l["row"])) } }
                        td { (text(&l["source"])) }
                        td { code { (text(&l["event_type"])) } }
                        td { (badge(l["state"].as_str().unwrap_or(""))) }
                        td { (text(&l["attempts"])) }
                        td { (time_of(&l["when"])) }
                        td.err { (text(&l["error"])) }
                    }
                } }
            }
            nav.pager aria-label="Pages" {
                @if page > 0 { a href={ "?" (next_q(page - 1)) } rel="prev" { "← Newer" } }
                @if (page + 1) * PER < lines.len() { a href={ "?" (next_q(page + 1)) } rel="next" { "Older →" } }
                @if more { span.hint { " (the first 1000 rows and dead letters are searched)" } }
            }
        }
        p.hint { "Any hook, listed or not, is found by id: " code { "…/hooks/<id>" } "." }
    }
}
