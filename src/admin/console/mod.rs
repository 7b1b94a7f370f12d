//! The operator console (`/ui/`) and the tenant portal (`/portal/`): HTML pages rendered by
//! the worker's admin listener (so every worker of a pool serves them), templates and
//! assets compiled into the binary, nothing fetched from elsewhere. `docs/console.md`
//! describes every page.
//!
//! - **One path to the data**: a page never touches Redis. It calls the admin API's own
//!   router in-process ([`Api`]) as its session's [`Principal`] (an
//!   [`access::Acting`](crate::admin::access) extension), so every read and action meets
//!   the same route rules, tenant narrowing and scopes as a bearer calling over HTTP.
//! - **Who**: the console takes the operator token, the portal a tenant token (`ank_…`) or a
//!   signed portal link ([`link`]); either as `Authorization: Bearer` (scripts, tests) or
//!   through a login form that opens a session: a random id in an `HttpOnly`,
//!   `SameSite=Strict` cookie (`Secure` when the request came over HTTPS, as a TLS proxy
//!   says with `X-Forwarded-Proto: https`), kept in this worker's memory for at most
//!   [`SESSION_TTL`]. A tenant token's session checks the token again on every request, so
//!   a revoke ends it.
//! - **Safe by construction**: maud escapes every interpolated string; every answer carries
//!   a strict `Content-Security-Policy` (scripts and styles only from the binary, no inline
//!   script), `frame-ancestors 'none'` for the console and the origins of
//!   `admin.portal_frame_ancestors` for the portal; every state-changing form carries the
//!   session's CSRF token, and the admin listener's Host and Origin checks apply
//!   ([`crate::admin::browser`]).

use crate::admin::access::{Acting, Caller};
use crate::admin::{AdminState, Principal};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::Markup;
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;
use tower::ServiceExt;

mod deliveries;
pub mod link;
mod portal;
mod session;
mod ui;
mod view;

use session::{random_token, Cred};
pub use session::{Console, SESSIONS_PER_HOLDER_MAX, SESSION_TTL};

/// The console's session cookie (path `/ui`).
const UI_COOKIE: &str = "ankusa_ui";
/// The portal's session cookie (path `/portal`).
const PORTAL_COOKIE: &str = "ankusa_portal";
/// The cookie that binds a login form to its browser (CSRF of the login itself).
const LOGIN_COOKIE: &str = "ankusa_login";

/// The stylesheet, served at `/ui/assets/console.css` and `/portal/assets/console.css`.
const CSS: &str = include_str!("assets/console.css");
/// The enhancement script (local times, live refresh, confirmations): pages read without it.
const JS: &str = include_str!("assets/console.js");

/// Which of the two sites a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Area {
    /// The operator console, `/ui/`.
    Ui,
    /// The tenant portal, `/portal/`.
    Portal,
}

impl Area {
    fn cookie(self) -> &'static str {
        match self {
            Area::Ui => UI_COOKIE,
            Area::Portal => PORTAL_COOKIE,
        }
    }

    /// The path prefix, without the trailing slash.
    pub(crate) fn base(self) -> &'static str {
        match self {
            Area::Ui => "/ui",
            Area::Portal => "/portal",
        }
    }
}

/// The admin API's router, as the console calls it in-process.
#[derive(Clone)]
pub(crate) struct Api(Router);

/// An admin API answer that was not a success.
#[derive(Debug, Clone)]
pub(crate) struct Fail {
    /// Its HTTP status.
    pub(crate) status: StatusCode,
    /// Its error code (`not_found`, `forbidden`, …).
    pub(crate) code: String,
    /// Its message.
    pub(crate) message: String,
}

impl Api {
    /// Call `method uri` (with a JSON `body`) as `who`; the JSON answer.
    pub(crate) async fn call(
        &self,
        who: &Principal,
        method: Method,
        uri: &str,
        body: Option<Value>,
    ) -> Result<Value, Fail> {
        self.call_with(who, method, uri, body, &[]).await
    }

    /// [`Api::call`] with request `headers`.
    pub(crate) async fn call_with(
        &self,
        who: &Principal,
        method: Method,
        uri: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Result<Value, Fail> {
        let mut req = axum::http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = match body {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(serde_json::to_vec(&b).unwrap_or_default())
            }
            None => Body::empty(),
        };
        let fail = |m: String| Fail {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "failed".into(),
            message: m,
        };
        let mut req = req.body(body).map_err(|e| fail(e.to_string()))?;
        req.extensions_mut().insert(Acting(who.clone()));
        let resp = self
            .0
            .clone()
            .oneshot(req)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 64 << 20)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() {
            Ok(v)
        } else {
            Err(Fail {
                status,
                code: v["error"]["code"].as_str().unwrap_or("failed").into(),
                message: v["error"]["message"].as_str().unwrap_or("").into(),
            })
        }
    }

    /// GET `uri` as `who`.
    pub(crate) async fn get(&self, who: &Principal, uri: &str) -> Result<Value, Fail> {
        self.call(who, Method::GET, uri, None).await
    }
}

/// Who a page request speaks for, and its CSRF token (`None` with a bearer: a browser never
/// attaches one on its own, so such a request cannot be forged cross-site).
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    /// The principal the page acts for.
    pub(crate) who: Principal,
    /// The session's CSRF token, for the page's forms.
    pub(crate) csrf: Option<String>,
    /// The API to call.
    pub(crate) api: Api,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Api")
    }
}

impl Ctx {
    /// Whether the page's principal has `scope`: the operator has every one, a portal
    /// session opened with a tenant token that token's, one opened with a portal link every
    /// one. A page offers only the actions its session may take.
    pub(crate) fn may(&self, scope: crate::tokens::Scope) -> bool {
        match &self.who {
            Principal::Operator => true,
            Principal::Ingest => scope == crate::tokens::Scope::Ingest,
            Principal::Tenant { scopes, .. } => scopes.contains(&scope),
        }
    }

    /// The tenant of a portal page.
    pub(crate) fn tenant(&self) -> &str {
        match &self.who {
            Principal::Tenant { tenant, .. } => tenant,
            _ => "",
        }
    }
}

/// Why a page is not shown.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// No credential: the login page (GET) or 401.
    Login(Area),
    /// A credential that does not open this site, a bad CSRF token, …
    Status(StatusCode, String),
}

impl From<Fail> for Refusal {
    fn from(f: Fail) -> Refusal {
        // Another tenant's resource reads as missing, and says nothing of it.
        let message = if f.status == StatusCode::NOT_FOUND {
            "not found".to_string()
        } else {
            format!("{}: {}", f.code, f.message)
        };
        Refusal::Status(f.status, message)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Login(area) => {
                see_other(&format!("{}/login", area.base()), &[]).into_response()
            }
            Refusal::Status(status, message) => {
                // Rendered by [`headers_layer`], which knows the site from the path.
                let mut r = status.into_response();
                r.extensions_mut().insert(ErrorPage(message));
                r
            }
        }
    }
}

/// The message of a refusal, rendered into its site's error page by [`headers_layer`].
#[derive(Debug, Clone)]
struct ErrorPage(String);

/// A page answer.
pub(crate) type Page = Result<Response, Refusal>;

/// `markup` as an HTML answer.
pub(crate) fn html(markup: Markup) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

/// 303 to `to`, setting `cookies`.
pub(crate) fn see_other(to: &str, cookies: &[String]) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    for c in cookies {
        if let Ok(v) = HeaderValue::from_str(c) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

fn cookie_of(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Whether the request came over HTTPS (a TLS proxy in front says so).
fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
}

/// A `Set-Cookie` value of `area`'s path: `HttpOnly; SameSite=Strict`, `Secure` over TLS;
/// `max_age` 0 deletes it.
fn set_cookie(area: Area, name: &str, value: &str, max_age: u64, headers: &HeaderMap) -> String {
    let secure = if over_tls(headers) { "; Secure" } else { "" };
    format!(
        "{name}={value}; Path={}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}",
        area.base()
    )
}

/// The principal of a request to `area`, from its bearer or its session cookie.
pub(crate) async fn resolve(
    st: &AdminState,
    api: Api,
    area: Area,
    headers: &HeaderMap,
) -> Result<Ctx, Refusal> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if auth.is_some() {
        let invalid =
            || Refusal::Status(StatusCode::UNAUTHORIZED, "this token is not valid".into());
        let who = match st.access.auth.caller(auth).await.map_err(|_| invalid())? {
            Caller::Known(p) => p,
            Caller::Anonymous => return Err(invalid()),
        };
        return admit(area, who, None, api);
    }
    let Some(id) = cookie_of(headers, area.cookie()) else {
        return Err(Refusal::Login(area));
    };
    let Some((cred, csrf)) = st.console.session(area, &id) else {
        return Err(Refusal::Login(area));
    };
    let who = match cred {
        Cred::Operator => Principal::Operator,
        Cred::Token(t) => match st.access.auth.principal(&t).await {
            Ok(p) => p,
            Err(_) => {
                st.console.close(area, &id);
                return Err(Refusal::Login(area));
            }
        },
        Cred::Link {
            tenant,
            expires_at_ms,
        } => {
            if expires_at_ms <= now_ms() {
                st.console.close(area, &id);
                return Err(Refusal::Login(area));
            }
            Principal::Tenant {
                tenant,
                scopes: crate::tokens::Scope::ALL.to_vec(),
                token_id: "portal-link".into(),
            }
        }
    };
    admit(area, who, Some(csrf), api)
}

/// A console page's request: its [`Ctx`] (the login page when there is none).
#[derive(Debug)]
pub(crate) struct UiCtx(pub(crate) Ctx);

/// A portal page's request: its [`Ctx`] (the login page when there is none).
#[derive(Debug)]
pub(crate) struct PortalCtx(pub(crate) Ctx);

async fn ctx_of(
    parts: &mut axum::http::request::Parts,
    st: &AdminState,
    area: Area,
) -> Result<Ctx, Refusal> {
    let api = parts
        .extensions
        .get::<Api>()
        .cloned()
        .ok_or_else(|| Refusal::Status(StatusCode::INTERNAL_SERVER_ERROR, "no API".into()))?;
    resolve(st, api, area, &parts.headers).await
}

impl axum::extract::FromRequestParts<AdminState> for UiCtx {
    type Rejection = Refusal;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &AdminState,
    ) -> Result<Self, Self::Rejection> {
        ctx_of(parts, st, Area::Ui).await.map(UiCtx)
    }
}

impl axum::extract::FromRequestParts<AdminState> for PortalCtx {
    type Rejection = Refusal;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &AdminState,
    ) -> Result<Self, Self::Rejection> {
        ctx_of(parts, st, Area::Portal).await.map(PortalCtx)
    }
}

/// The console opens to the operator only, the portal to a tenant only.
fn admit(area: Area, who: Principal, csrf: Option<String>, api: Api) -> Result<Ctx, Refusal> {
    let fits = matches!(
        (&who, area),
        (Principal::Operator, Area::Ui) | (Principal::Tenant { .. }, Area::Portal)
    );
    if !fits {
        let what = match area {
            Area::Ui => "the console needs the operator token",
            Area::Portal => "the portal needs a tenant token or a portal link",
        };
        return Err(Refusal::Status(StatusCode::FORBIDDEN, what.into()));
    }
    Ok(Ctx { who, csrf, api })
}

/// Unix ms now (this host's clock: portal links and sessions are checked against it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A form body's fields (the last value of a repeated name wins).
pub(crate) fn form(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

/// A state-changing form must carry its session's CSRF token (a bearer request needs none).
pub(crate) fn check_csrf(ctx: &Ctx, fields: &HashMap<String, String>) -> Result<(), Refusal> {
    let Some(want) = &ctx.csrf else {
        return Ok(());
    };
    let got = fields.get("csrf").map(String::as_str).unwrap_or_default();
    if same(got.as_bytes(), want.as_bytes()) {
        Ok(())
    } else {
        Err(Refusal::Status(
            StatusCode::FORBIDDEN,
            "the form's CSRF token does not match this session: reload the page and try again"
                .into(),
        ))
    }
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Security headers of every console and portal answer.
async fn headers_layer(State(st): State<AdminState>, req: Request, next: Next) -> Response {
    let portal = req.uri().path().starts_with("/portal");
    let mut resp = next.run(req).await;
    if let Some(ErrorPage(message)) = resp.extensions_mut().remove::<ErrorPage>() {
        let area = if portal { Area::Portal } else { Area::Ui };
        let status = resp.status();
        resp = (status, html(view::error_page(area, status, &message))).into_response();
    }
    let ancestors = if portal && !st.console.frame_ancestors.is_empty() {
        st.console.frame_ancestors.join(" ")
    } else {
        "'none'".to_string()
    };
    let csp = format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors {ancestors}"
    );
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    if ancestors == "'none'" {
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null`
    // with a form's POST (the Fetch standard), which the cross-site guard rightly refuses;
    // other sites still get no referrer.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

fn asset(kind: &'static str, text: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        text,
    )
        .into_response()
}

/// The most of a console or portal form read (login included): its forms are a few fields.
pub const FORM_MAX_BYTES: usize = 64 * 1024;

/// The console's and portal's routes; `api` is the admin API they call. A form is read up to
/// [`FORM_MAX_BYTES`] (413 past it), within the body deadline every route has.
pub(crate) fn router(st: AdminState, api: Router) -> Router {
    let css = || get(|| async { asset("text/css; charset=utf-8", CSS) });
    let js = || get(|| async { asset("text/javascript; charset=utf-8", JS) });
    Router::new()
        .route("/ui/assets/console.css", css())
        .route("/ui/assets/console.js", js())
        .route("/portal/assets/console.css", css())
        .route("/portal/assets/console.js", js())
        .merge(ui::routes())
        .merge(portal::routes())
        .layer(axum::Extension(Api(api)))
        .layer(axum::extract::DefaultBodyLimit::max(FORM_MAX_BYTES))
        .layer(middleware::from_fn_with_state(st.clone(), headers_layer))
        .with_state(st)
}

/// The login page's answer for `area`: a form bound to this browser by a cookie.
pub(crate) fn login_form(area: Area, headers: &HeaderMap, problem: Option<&str>) -> Response {
    let nonce = random_token();
    let mut r = html(view::login_page(area, &nonce, problem));
    if let Ok(v) = HeaderValue::from_str(&set_cookie(area, LOGIN_COOKIE, &nonce, 600, headers)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// A login form's POST: the nonce must match the form's cookie (so another site cannot
/// log a browser into its own session), and `token` must open `area`.
pub(crate) async fn login(
    st: &AdminState,
    area: Area,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let fields = form(body);
    let nonce = cookie_of(headers, LOGIN_COOKIE).unwrap_or_default();
    let sent = fields.get("nonce").map(String::as_str).unwrap_or_default();
    if nonce.is_empty() || !same(nonce.as_bytes(), sent.as_bytes()) {
        return login_form(area, headers, Some("the form expired: try again"));
    }
    let token = fields.get("token").map(|t| t.trim()).unwrap_or_default();
    let cred = match area {
        Area::Ui => {
            let bearer = format!("Bearer {token}");
            let caller = st.access.auth.caller(Some(&bearer)).await;
            let open = !st.console.operator_set && token.is_empty();
            match caller {
                Ok(Caller::Known(Principal::Operator)) => Some(Cred::Operator),
                _ if open => Some(Cred::Operator),
                _ => None,
            }
        }
        Area::Portal => match st.access.auth.principal(token).await {
            Ok(Principal::Tenant { .. }) => Some(Cred::Token(token.to_string())),
            _ => None,
        },
    };
    let Some(cred) = cred else {
        return login_form(area, headers, Some("that token does not open this site"));
    };
    let (id, _) = st.console.open(area, cred, SESSION_TTL);
    see_other(
        &format!("{}/", area.base()),
        &[
            set_cookie(area, area.cookie(), &id, SESSION_TTL.as_secs(), headers),
            set_cookie(area, LOGIN_COOKIE, "", 0, headers),
        ],
    )
}

/// Log out: the session is forgotten by this worker and its cookie deleted.
pub(crate) fn logout(st: &AdminState, area: Area, headers: &HeaderMap, body: &[u8]) -> Response {
    let fields = form(body);
    if let Some(id) = cookie_of(headers, area.cookie()) {
        // The CSRF token of the session guards a logout too (no forced logouts).
        if let Some((_, csrf)) = st.console.session(area, &id) {
            let sent = fields.get("csrf").map(String::as_str).unwrap_or_default();
            if !same(sent.as_bytes(), csrf.as_bytes()) {
                return Refusal::Status(StatusCode::FORBIDDEN, "bad CSRF token".into())
                    .into_response();
            }
        }
        st.console.close(area, &id);
    }
    see_other(
        &format!("{}/login", area.base()),
        &[set_cookie(area, area.cookie(), "", 0, headers)],
    )
}

/// A portal link: checked, then a page that moves on by itself to
/// `/portal/enter/continue` (a `meta refresh`: a same-origin navigation, so the portal's
/// `SameSite=Strict` cookie is sent there even when the link was followed from another
/// site, and a live session is seen before anything replaces it).
pub(crate) fn enter(st: &AdminState, _headers: &HeaderMap, link_text: &str) -> Response {
    let Some(key) = &st.console.link_key else {
        return links_off();
    };
    match link::verify(key, link_text, now_ms()) {
        Err(e) => Refusal::Status(StatusCode::FORBIDDEN, e.to_string()).into_response(),
        Ok(_) => html(view::entering_page(&continue_url(link_text))),
    }
}

fn links_off() -> Response {
    Refusal::Status(
        StatusCode::FORBIDDEN,
        "portal links are off: this worker has no admin.token or no admin.portal_link_key".into(),
    )
    .into_response()
}

fn continue_url(link_text: &str) -> String {
    let q: String = url::form_urlencoded::byte_serialize(link_text.as_bytes()).collect();
    format!("/portal/enter/continue?link={q}")
}

/// The second step of a portal link: open its session, unless this browser holds a live
/// portal session of someone else, in which case ask first ([`view::switch_page`]); the
/// answer to that question (`csrf`, a POST) must carry the live session's CSRF token.
/// Reached from another site directly, it moves on to itself once more, same-origin.
pub(crate) fn enter_continue(
    st: &AdminState,
    headers: &HeaderMap,
    link_text: &str,
    csrf: Option<&str>,
) -> Response {
    let Some(key) = &st.console.link_key else {
        return links_off();
    };
    let l = match link::verify(key, link_text, now_ms()) {
        Err(e) => return Refusal::Status(StatusCode::FORBIDDEN, e.to_string()).into_response(),
        Ok(l) => l,
    };
    let same_origin = headers
        .get("sec-fetch-site")
        .is_none_or(|s| s.as_bytes() == b"same-origin");
    if csrf.is_none() && !same_origin {
        return html(view::entering_page(&continue_url(link_text)));
    }
    let live = cookie_of(headers, PORTAL_COOKIE)
        .and_then(|id| st.console.session(Area::Portal, &id).map(|s| (id, s)));
    if let Some((id, (cred, session_csrf))) = live {
        let current = match &cred {
            Cred::Link { tenant, .. } => Some(tenant.clone()),
            _ => None,
        };
        if current.as_deref() != Some(l.tenant.as_str()) {
            match csrf {
                None => {
                    let who = current.unwrap_or_else(|| "the tenant of your token".into());
                    return html(view::switch_page(&who, &l.tenant, link_text, &session_csrf));
                }
                Some(sent) if same(sent.as_bytes(), session_csrf.as_bytes()) => {
                    st.console.close(Area::Portal, &id);
                }
                Some(_) => {
                    return Refusal::Status(StatusCode::FORBIDDEN, "bad CSRF token".into())
                        .into_response()
                }
            }
        }
    }
    let left = Duration::from_millis((l.expires_at_ms - now_ms()).max(0) as u64);
    let (id, _) = st.console.open(
        Area::Portal,
        Cred::Link {
            tenant: l.tenant,
            expires_at_ms: l.expires_at_ms,
        },
        left,
    );
    see_other(
        "/portal/",
        &[set_cookie(
            Area::Portal,
            PORTAL_COOKIE,
            &id,
            left.as_secs().max(1),
            headers,
        )],
    )
}

/// `Method` for the routes' use.
pub(crate) use axum::routing::MethodRouter;

/// Shorthand: a route answering GET.
pub(crate) fn page<H, T>(h: H) -> MethodRouter<AdminState>
where
    H: axum::handler::Handler<T, AdminState>,
    T: 'static,
{
    get(h)
}

/// Shorthand: a route answering POST.
pub(crate) fn action<H, T>(h: H) -> MethodRouter<AdminState>
where
    H: axum::handler::Handler<T, AdminState>,
    T: 'static,
{
    post(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::frame_origin;

    #[test]
    fn frame_ancestors_are_plain_origins() {
        assert_eq!(
            frame_origin("https://app.example.com").as_deref(),
            Some("https://app.example.com")
        );
        assert_eq!(
            frame_origin("http://localhost:8080").as_deref(),
            Some("http://localhost:8080")
        );
        for bad in [
            "app.example.com",
            "https://*.example.com",
            "https://app.example.com/path",
            "https://u:p@app.example.com",
            "javascript:alert(1)",
            "https://a.example?x=1",
            "'self'",
        ] {
            assert_eq!(frame_origin(bad), None, "{bad}");
        }
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=1; ankusa_ui=xyz; b=2".parse().unwrap());
        assert_eq!(cookie_of(&h, UI_COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie_of(&h, PORTAL_COOKIE), None);
        let c = set_cookie(Area::Ui, UI_COOKIE, "v", 60, &h);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && !c.contains("Secure"));
        h.insert("x-forwarded-proto", "https".parse().unwrap());
        assert!(set_cookie(Area::Portal, PORTAL_COOKIE, "v", 60, &h).ends_with("; Secure"));
    }
}
