//! The pages' shared parts: the layout, login and error pages, times, and the hook page
//! both sites show. Every string goes through maud, which escapes it for HTML; text a
//! tenant, producer or receiver controls goes through [`text`] (or [`crate::text::esc`])
//! too, which shows its control characters escaped (`\x1b`, `\r`, `\n`).

use super::{Area, Ctx};
use crate::tokens::Scope;
use axum::http::StatusCode;
use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

pub(crate) use crate::text::esc;

/// A whole page of `area`: header with navigation (when signed in), `main`, footer.
pub(crate) fn layout(area: Area, ctx: Option<&Ctx>, title: &str, main: Markup) -> Markup {
    let base = area.base();
    let site = match area {
        Area::Ui => "ankusa console",
        Area::Portal => "Webhooks portal",
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · " (site) }
                link rel="stylesheet" href={ (base) "/assets/console.css" };
                script src={ (base) "/assets/console.js" } defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header {
                    a.brand href={ (base) "/" } { (site) }
                    @if let Some(ctx) = ctx {
                        nav aria-label="Main" {
                            @match area {
                                Area::Ui => {
                                    a href="/ui/" { "Overview" }
                                    a href="/ui/tenants" { "Tenants" }
                                    a href="/ui/dlq" { "Dead letters" }
                                    a href="/ui/config" { "Config" }
                                }
                                Area::Portal => {
                                    a href="/portal/" { "Endpoints" }
                                    a href="/portal/deliveries" { "Deliveries" }
                                }
                            }
                        }
                        @if area == Area::Portal {
                            span.who { "Tenant " code { (ctx.tenant()) } }
                        }
                        @if ctx.csrf.is_some() {
                            form.logout method="post" action={ (base) "/logout" } {
                                (csrf(ctx))
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main id="main" tabindex="-1" { h1 { (title) } (main) }
            }
        }
    }
}

/// The hidden CSRF field of a state-changing form (none with a bearer).
pub(crate) fn csrf(ctx: &Ctx) -> Markup {
    html! {
        @if let Some(t) = &ctx.csrf { input type="hidden" name="csrf" value=(t); }
    }
}

/// The login page of `area`; `nonce` binds the form to the browser's login cookie.
pub(crate) fn login_page(area: Area, nonce: &str, problem: Option<&str>) -> Markup {
    let (what, hint) = match area {
        Area::Ui => (
            "Operator token",
            "The worker's admin.token. Without one configured, leave it empty (loopback only).",
        ),
        Area::Portal => (
            "Access token",
            "A tenant token (ank_…) from your provider, or open the portal link you were given.",
        ),
    };
    layout(
        area,
        None,
        "Log in",
        html! {
            @if let Some(p) = problem { p.problem role="alert" { (p) } }
            form.card method="post" action={ (area.base()) "/login" } {
                input type="hidden" name="nonce" value=(nonce);
                label for="token" { (what) }
                input id="token" name="token" type="password" autocomplete="current-password" autofocus;
                p.hint { (hint) }
                button type="submit" { "Log in" }
            }
        },
    )
}

/// The page of a refusal or failure in `area`: it names that site and links to it only (a
/// tenant reading a portal error is never sent to the operator console).
pub(crate) fn error_page(area: Area, status: StatusCode, message: &str) -> Markup {
    let home = match area {
        Area::Ui => "Back to the console",
        Area::Portal => "Back to the portal",
    };
    layout(
        area,
        None,
        &format!(
            "{} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        ),
        html! { p.problem role="alert" { (message) } p { a href={ (area.base()) "/" } { (home) } } },
    )
}

/// The page a portal link answers: it moves on by itself to `next` (same-origin, so the
/// portal's `SameSite=Strict` cookie is sent there and a live session can be seen).
pub(crate) fn entering_page(next: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content={ "0;url=" (next) };
                title { "Opening the portal" }
                link rel="stylesheet" href="/portal/assets/console.css";
            }
            body { main { p { "Opening the portal… " a href=(next) { "Continue" } } } }
        }
    }
}

/// Asked before a portal link replaces this browser's live portal session of another
/// tenant (a link followed from someone else's page must not switch it silently).
pub(crate) fn switch_page(current: &str, next: &str, link: &str, csrf: &str) -> Markup {
    layout(
        Area::Portal,
        None,
        "Switch portal?",
        html! {
            p role="alert" {
                "This browser is signed in to the portal of " strong { (current) } ". "
                "The link you followed opens the portal of " strong { (next) } " instead."
            }
            form.card method="post" action="/portal/enter/continue" {
                input type="hidden" name="link" value=(link);
                input type="hidden" name="csrf" value=(csrf);
                button type="submit" { "Switch to " (next) }
            }
            p { a href="/portal/" { "Stay in " (current) "'s portal" } }
        },
    )
}

/// A time (Unix ms) as `<time>`: UTC text, turned into local time with a relative hint
/// by the script.
pub(crate) fn time(ms: i64) -> Markup {
    if ms <= 0 {
        return html! { "—" };
    }
    // RFC 3339 ends at 9999-12-31: a later time shows as its last second.
    let ms = ms.min(253_402_300_799_000) as u64;
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    let text = humantime::format_rfc3339_millis(t).to_string();
    html! { time datetime=(text) { (text) } }
}

/// A JSON value's time field.
pub(crate) fn time_of(v: &Value) -> Markup {
    time(v.as_i64().unwrap_or(0))
}

/// A value as short text (strings bare, others as JSON, absent as a dash), its control
/// characters escaped.
pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) => esc(s),
        other => other.to_string(),
    }
}

/// Said where an action would be: the session lacks the scope it needs.
pub(crate) fn lacks(scope: crate::tokens::Scope, what: &str) -> Markup {
    html! {
        p.hint.lacks { (what) " needs the " code { (scope.as_str()) } " scope, which this session's token does not have." }
    }
}

/// A state word as a badge.
pub(crate) fn badge(state: &str) -> Markup {
    let class = match state {
        "delivered" => "ok",
        "dead_lettered" | "failed" => "bad",
        "retrying" | "parked" | "retry" | "breaker half-open" => "warn",
        "breaker open" => "bad",
        _ => "",
    };
    html! { span class={ "badge " (class) } { (state) } }
}

/// A status message after an action (`?done=…`).
pub(crate) fn notice(msg: Option<&String>) -> Markup {
    html! { @if let Some(m) = msg { p.notice role="status" { (m) } } }
}

/// How to show a hook's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyView {
    Text,
    Json,
    Hex,
}

impl BodyView {
    pub(crate) fn parse(s: Option<&String>) -> BodyView {
        match s.map(String::as_str) {
            Some("json") => BodyView::Json,
            Some("hex") => BodyView::Hex,
            _ => BodyView::Text,
        }
    }
}

/// The most of a body's rendering a page carries (the whole page stays a few MiB whatever
/// the body: pretty-printing a deeply nested 2 MiB body would otherwise make hundreds of MB).
pub(crate) const VIEW_MAX_BYTES: usize = 1 << 20;

/// A writer that refuses to grow past its cap.
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + b.len() > VIEW_MAX_BYTES {
            return Err(std::io::Error::other("over the view's size"));
        }
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The body as text, pretty JSON or a hex dump, at most [`VIEW_MAX_BYTES`] of it.
fn body_view(body: &[u8], view: BodyView) -> String {
    match view {
        BodyView::Json => {
            if body.len() > VIEW_MAX_BYTES {
                return format!(
                    "(the JSON view shows bodies up to {VIEW_MAX_BYTES} bytes; this one is {}: \
                     its start as text follows)\n{}",
                    body.len(),
                    body_view(body, BodyView::Text)
                );
            }
            match serde_json::from_slice::<Value>(body) {
                Ok(v) => {
                    let mut out = Capped(Vec::new());
                    match serde_json::to_writer_pretty(&mut out, &v) {
                        Ok(()) => String::from_utf8(out.0).unwrap_or_default(),
                        Err(_) => format!(
                            "(pretty-printed, this body is over {VIEW_MAX_BYTES} bytes: its \
                             start as text follows)\n{}",
                            body_view(body, BodyView::Text)
                        ),
                    }
                }
                Err(e) => format!("(not JSON: {e})"),
            }
        }
        BodyView::Hex => {
            // Each 16 bytes make a line of 75 characters.
            let shown = body.len().min(VIEW_MAX_BYTES / 5);
            let mut out = body[..shown]
                .chunks(16)
                .enumerate()
                .map(|(i, c)| {
                    let hex: Vec<String> = c.iter().map(|b| format!("{b:02x}")).collect();
                    let asc: String = c
                        .iter()
                        .map(|&b| {
                            if (0x20..0x7f).contains(&b) {
                                b as char
                            } else {
                                '.'
                            }
                        })
                        .collect();
                    format!("{:08x}  {:<48} {asc}", i * 16, hex.join(" "))
                })
                .collect::<Vec<_>>()
                .join("\n");
            if shown < body.len() {
                out.push_str(&format!("\n… {} more bytes not shown", body.len() - shown));
            }
            out
        }
        BodyView::Text => match std::str::from_utf8(body) {
            Ok(t) if t.len() <= VIEW_MAX_BYTES => t.to_string(),
            Ok(t) => {
                let mut end = VIEW_MAX_BYTES;
                while !t.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}\n… {} more bytes not shown", &t[..end], t.len() - end)
            }
            Err(_) => "(binary: choose the hex view)".into(),
        },
    }
}

/// Why a hook page shows no body, by where the hook is kept (`stored`).
fn no_body(stored: &str) -> &'static str {
    match stored {
        "gone" => {
            "The body of this hook is no longer kept: it ended, and only the record of its \
             attempts is left."
        }
        "logged" => "The delivery log keeps this hook's record but not its body.",
        _ => "The body of this hook could not be read just now: reload the page to try again.",
    }
}

/// The hook page: headers, body, rows, the attempts on a timeline, resend.
/// `hook` is `GET /admin/hooks/{tenant}/{hook}`; `body` the body when the API gave it.
pub(crate) fn hook_page(
    ctx: &Ctx,
    base: &str,
    hook: &Value,
    body: Option<&[u8]>,
    view: BodyView,
    done: Option<&String>,
) -> Markup {
    let id = hook["hook"].as_u64().unwrap_or(0);
    html! {
        (notice(done))
        dl.facts {
            dt { "Source" } dd { code { (text(&hook["source"])) } }
            dt { "Event type" } dd { code { (text(&hook["event_type"])) } }
            dt { "Committed" } dd { (time_of(&hook["committed_at_ms"])) }
            dt { "Stored" } dd { (text(&hook["stored"])) }
            dt { "Body" } dd { (text(&hook["body_bytes"])) " bytes" }
        }
        section aria-labelledby="h-headers" {
            h2 id="h-headers" { "Headers" }
            @let headers = hook["headers"].as_object().cloned().unwrap_or_default();
            @if headers.is_empty() { p.empty { "No producer headers." } }
            @else {
                table { thead { tr { th scope="col" { "Name" } th scope="col" { "Value" } } }
                    tbody { @for (n, v) in &headers { tr { td { code { (esc(n)) } } td { code { (text(v)) } } } } } }
            }
        }
        section aria-labelledby="h-body" {
            h2 id="h-body" { "Body" }
            nav.tabs aria-label="Body view" {
                @for (v, name) in [(BodyView::Text, "text"), (BodyView::Json, "json"), (BodyView::Hex, "hex")] {
                    @if v == view { span aria-current="true" { (name) } }
                    @else { a href={ "?view=" (name) } { (name) } }
                }
            }
            @if let Some(b) = body { pre.body { (body_view(b, view)) } }
            @else { p.empty { (no_body(hook["stored"].as_str().unwrap_or(""))) } }
        }
        section aria-labelledby="h-rows" {
            h2 id="h-rows" { "Rows" }
            table {
                thead { tr { th scope="col" { "Row" } th scope="col" { "Sink" } th scope="col" { "State" }
                    th scope="col" { "Attempts" } th scope="col" { "Next attempt" } th scope="col" { "Last error" } } }
                tbody {
                    @for r in hook["rows"].as_array().into_iter().flatten() {
                        tr {
                            td { code { (text(&r["row"])) } }
                            td { (text(&r["sink"])) }
                            td { (badge(r["state"].as_str().unwrap_or(""))) }
                            td { (text(&r["attempts"])) }
                            td { (time_of(&r["due_at_ms"])) }
                            td.err { (esc(r["last_error"].as_str().unwrap_or(""))) }
                        }
                    }
                }
            }
        }
        section aria-labelledby="h-attempts" {
            h2 id="h-attempts" { "Attempts" }
            @let attempts = hook["attempts"].as_array().cloned().unwrap_or_default();
            @if attempts.is_empty() { p.empty { "No attempt recorded yet." } }
            ol.timeline {
                @for a in &attempts {
                    li.attempt data-outcome=(a["outcome"].as_str().unwrap_or("")) {
                        div.when { (time_of(&a["started_ms"])) }
                        div {
                            "Row " code { (text(&a["row"])) } ", attempt " (text(&a["attempt"])) ": "
                            (badge(a["outcome"].as_str().unwrap_or("")))
                            @if let Some(s) = a["status"].as_u64() { " HTTP " (s) }
                            " in " (text(&a["duration_ms"])) " ms"
                            @if let Some(k) = a["error_kind"].as_str() { " · " (esc(k)) }
                            @if a["next_attempt_ms"].is_i64() { " · next " (time_of(&a["next_attempt_ms"])) }
                            @if let Some(r) = a["reason"].as_str() { " · " (esc(r)) }
                        }
                        @if let Some(e) = a["error"].as_str() { pre.err { (esc(e)) } }
                    }
                }
            }
        }
        section aria-labelledby="h-resend" {
            h2 id="h-resend" { "Resend" }
            @if !ctx.may(Scope::Replay) { (lacks(Scope::Replay, "Resending")) }
            @else { form method="post" action={ (base) "/resend" } data-confirm={ "Resend hook " (id) " to all its sink entries?" } {
                (csrf(ctx))
                button type="submit" { "Resend to every sink entry" }
            } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_renders_within_the_views_bound_in_every_view() {
        // 2 MiB nested 120 deep: pretty-printed, hundreds of MB.
        let mut nested = String::new();
        for _ in 0..120 {
            nested.push('[');
        }
        nested.push_str("\"x\"");
        for _ in 0..120 {
            nested.push(']');
        }
        let body = format!(
            "[{}]",
            vec![nested.as_str(); 2 * 1024 * 1024 / 245].join(",")
        );
        let deep = body.as_bytes();
        for view in [BodyView::Json, BodyView::Text, BodyView::Hex] {
            let out = body_view(deep, view);
            assert!(
                out.len() <= VIEW_MAX_BYTES + 200,
                "{view:?}: {} bytes rendered",
                out.len()
            );
        }
        let json = body_view(deep, BodyView::Json);
        assert!(
            json.starts_with("(the JSON view shows bodies up to"),
            "{}",
            &json[..80]
        );
        // Under the bound as sent, far over it pretty-printed: its text instead.
        let mid = format!("[{}]", vec![nested.as_str(); 2400].join(","));
        assert!(mid.len() < VIEW_MAX_BYTES);
        let json = body_view(mid.as_bytes(), BodyView::Json);
        assert!(
            json.starts_with("(pretty-printed, this body is over"),
            "{}",
            &json[..80]
        );
        assert!(json.len() <= VIEW_MAX_BYTES + 200);
        // A small body is shown whole.
        assert_eq!(body_view(b"{\"a\":1}", BodyView::Json), "{\n  \"a\": 1\n}");
    }
}
