//! Who may call what: the credentials of a request become a [`Principal`], and each route's
//! [`Rule`] (read from the OpenAPI document: the scope its `security` names and where its
//! tenant is) decides whether that principal may call it, for which tenant.
//!
//! - `admin.token` is the **operator**: every route. With no `admin.token` set (a listener
//!   on loopback only), a request without a recognised credential is the operator too.
//! - `admin.ingest_token` is **ingest**: the routes of the `ingest` scope (`POST /v1/hooks/…`,
//!   cancelling a scheduled hook) of every tenant, nothing else.
//! - A tenant token (`ank_…`, [`crate::tokens`]) is its **tenant**, by scope, whether or not
//!   `admin.token` is set: a route naming another tenant (in its path, its `tenant` query
//!   parameter or its body's filter) answers 404 `not_found`, as a missing resource does,
//!   before anything is read, so it tells nothing about the other tenant; a list without a
//!   tenant is narrowed to the token's own; a route of its own tenant that needs a scope it
//!   lacks, or an operator-only route, answers 403 `forbidden`. An `ank_…` bearer that is
//!   not a live token (unknown, revoked, expired) is 401 `unauthorized`, always.
//!
//! [`Authenticator::principal`] is the one place a bearer becomes a principal, so a session
//! of the console (a cookie mapped to the same principal) meets the same route checks.

use super::{AdminState, ApiError};
use crate::config::AdminConfig;
use crate::store::Store;
use crate::tokens::{Scope, TokenInfo};
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a worker remembers what a tenant token is (or that it is not one): a revoke
/// takes effect on every worker within this.
pub const TOKEN_CACHE: Duration = Duration::from_secs(5);
/// Tokens remembered at most; past it the memory is cleared (a flood of made-up tokens
/// costs Redis reads, never the worker's memory).
const CACHE_MAX: usize = 10_000;
/// Largest body read to find the tenant of a body-scoped route, bytes.
const BODY_MAX: usize = 1 << 20;

/// Routes whose tenant is in the JSON body: method, path, and the JSON pointer of the tenant.
const BODY_TENANT: &[(&str, &str, &str)] = &[("post", "/admin/dlq/replay", "/filter/tenant")];

/// Who a request speaks for, once its credentials are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// `admin.token` (or anyone, when no `admin.token` is set): every route.
    Operator,
    /// `admin.ingest_token`: ingest of every tenant.
    Ingest,
    /// A tenant token: its tenant's routes of its scopes.
    Tenant {
        /// The tenant it reaches.
        tenant: String,
        /// What it may do there.
        scopes: Vec<Scope>,
        /// Its id (for logs and audit; never the token).
        token_id: String,
    },
}

/// The principal a console page calls the admin API for (`crate::admin::console`): put in the
/// extensions of an in-process request, it stands for the session's credential.
#[derive(Debug, Clone)]
pub(crate) struct Acting(pub(crate) Principal);

/// What a request's `Authorization` names, before a route is considered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No bearer, or one that is neither configured token nor a tenant token.
    Anonymous,
    /// A recognised credential.
    Known(Principal),
}

/// Why a bearer was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// An `ank_…` bearer that is not a live tenant token.
    Unauthorized,
    /// A tenant token, the right secret, past its expiry (ms since the epoch): its holder
    /// is told so, as a typo's is not (a record is kept a while past expiry for this).
    Expired(i64),
    /// Redis could not say (the tenant token could not be checked).
    Unavailable(String),
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> ApiError {
        match e {
            AuthError::Unauthorized => ApiError::unauthorized(),
            AuthError::Expired(at_ms) => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "token_expired",
                format!("the token expired at {}; ask for a new one", rfc3339(at_ms)),
            ),
            AuthError::Unavailable(m) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("the token could not be checked: {m}"),
            ),
        }
    }
}

/// Turns bearers into principals: the configured tokens compared in constant time, tenant
/// tokens looked up in Redis by id and compared by SHA-256, remembered for [`TOKEN_CACHE`].
pub struct Authenticator {
    operator: Option<String>,
    ingest: Option<String>,
    store: Store,
    /// Token digest → when it was looked up, and its record (`None`: not a live token).
    cache: Mutex<HashMap<String, (Instant, Option<TokenInfo>)>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("operator", &self.operator.as_ref().map(|_| "***"))
            .field("ingest", &self.ingest.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Authenticator {
    /// The tokens of `admin`, tenant tokens read through `store`.
    pub fn new(admin: &AdminConfig, store: Store) -> Authenticator {
        Authenticator {
            operator: admin.token.clone(),
            ingest: admin.ingest_token.clone(),
            store,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Who `authorization` (the header's value, if any) names. Errors: an `ank_…` bearer
    /// that is not a live tenant token ([`AuthError::Unauthorized`]); Redis failing while
    /// checking one ([`AuthError::Unavailable`]).
    pub async fn caller(&self, authorization: Option<&str>) -> Result<Caller, AuthError> {
        let Some(bearer) = authorization.and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        }) else {
            return Ok(Caller::Anonymous);
        };
        let bearer = bearer.trim();
        if bearer.starts_with(crate::tokens::PREFIX) {
            return self.principal(bearer).await.map(Caller::Known);
        }
        // Both compared, so the time taken does not tell which one matched.
        let operator = self
            .operator
            .as_deref()
            .is_some_and(|t| same_secret(bearer.as_bytes(), t.as_bytes()));
        let ingest = self
            .ingest
            .as_deref()
            .is_some_and(|t| same_secret(bearer.as_bytes(), t.as_bytes()));
        Ok(match (operator, ingest) {
            (true, _) => Caller::Known(Principal::Operator),
            (false, true) => Caller::Known(Principal::Ingest),
            _ => Caller::Anonymous,
        })
    }

    /// The principal of a tenant token: [`Principal::Tenant`] while it is live (minted, not
    /// revoked, not expired). Errors as [`Authenticator::caller`].
    pub async fn principal(&self, token: &str) -> Result<Principal, AuthError> {
        let info = self.tenant_token(token).await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        match info {
            Some(t) if t.expires_at_ms > now => Ok(Principal::Tenant {
                tenant: t.tenant,
                scopes: t.scopes,
                token_id: t.id,
            }),
            // The digest matched: the holder, not a guesser, learns it expired.
            Some(t) => Err(AuthError::Expired(t.expires_at_ms)),
            None => Err(AuthError::Unauthorized),
        }
    }

    /// The record of `token`, from the cache when looked up within [`TOKEN_CACHE`];
    /// `None` when it is no live token.
    async fn tenant_token(&self, token: &str) -> Result<Option<TokenInfo>, AuthError> {
        let Some(id) = crate::tokens::id_of(token) else {
            return Ok(None);
        };
        let digest = crate::tokens::digest(token);
        if let Some((at, info)) = self.cache.lock().expect("cache").get(&digest) {
            if at.elapsed() < TOKEN_CACHE {
                return Ok(info.clone());
            }
        }
        let stored = self
            .store
            .token(id)
            .await
            .map_err(|e| AuthError::Unavailable(e.to_string()))?;
        let info = stored
            .filter(|s| same_secret(s.digest.as_bytes(), digest.as_bytes()))
            .map(|s| s.info);
        let mut cache = self.cache.lock().expect("cache");
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(digest, (Instant::now(), info.clone()));
        Ok(info)
    }
}

/// `ms` since the epoch as RFC 3339 in UTC, to the second (clamped to what it can write).
fn rfc3339(ms: i64) -> String {
    let ms = ms.clamp(0, 253_402_300_799_000) as u64;
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Compare without an early exit, so the time taken does not tell how much of a guess was right.
pub(super) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a route needs, from its `security` in the OpenAPI document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// `["operator"]`: the operator only.
    Operator,
    /// A scope: the operator, or a tenant token with it for the route's tenant (and for
    /// `ingest`, `admin.ingest_token` too).
    Scope(Scope),
}

/// Where a tenant-scoped route names its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantAt {
    /// The path parameter `{tenant}`.
    Path,
    /// The query parameter `tenant` (absent: narrowed to the token's tenant).
    Query,
    /// The JSON body, at this pointer (absent: narrowed to the token's tenant).
    Body(&'static str),
}

/// The access rule of one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// What it needs.
    pub need: Need,
    /// Where its tenant is; `None` for operator-only routes.
    pub tenant_at: Option<TenantAt>,
}

/// The rule of every secured route, by method and path template.
#[derive(Debug, Clone, Default)]
pub struct Rules(HashMap<(Method, String), Rule>);

impl Rules {
    /// Read the rules from the OpenAPI document (as JSON): each operation's `bearer`
    /// security names one word, `operator` or a scope. Errors name the operation: a route
    /// under `/admin` or `/v1` without security, an unknown word, a tenant-scoped route
    /// that names no tenant.
    pub fn from_doc(doc: &serde_json::Value) -> Result<Rules, String> {
        let mut rules = HashMap::new();
        let paths = doc["paths"]
            .as_object()
            .ok_or("the document has no paths")?;
        for (path, item) in paths {
            for (method, op) in item.as_object().into_iter().flatten() {
                let Ok(m) = method.to_ascii_uppercase().parse::<Method>() else {
                    continue;
                };
                if let Some(rule) = rule_of(method, path, op)? {
                    rules.insert((m, path.clone()), rule);
                }
            }
        }
        Ok(Rules(rules))
    }

    /// The rule of `method path` (a template such as `/admin/hooks/{tenant}/{hook}`);
    /// `None` for an open route.
    pub fn get(&self, method: &Method, path: &str) -> Option<Rule> {
        self.0.get(&(method.clone(), path.to_string())).copied()
    }
}

/// The rule of one operation; `None` when it is open.
fn rule_of(method: &str, path: &str, op: &serde_json::Value) -> Result<Option<Rule>, String> {
    let what = format!("{} {path}", method.to_ascii_uppercase());
    let Some(words) = op["security"]
        .as_array()
        .and_then(|s| s.iter().find_map(|r| r["bearer"].as_array()))
    else {
        if path.starts_with("/admin") || path.starts_with("/v1") {
            return Err(format!(
                "{what}: no bearer security: every /admin and /v1 route needs one"
            ));
        }
        return Ok(None);
    };
    let word = match words.as_slice() {
        [w] => w.as_str().unwrap_or_default(),
        _ => return Err(format!("{what}: the bearer security must name one word")),
    };
    if word == "operator" {
        return Ok(Some(Rule {
            need: Need::Operator,
            tenant_at: None,
        }));
    }
    let scope: Scope = word.parse().map_err(|e| format!("{what}: {e}"))?;
    let param = |place: &str| {
        op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "tenant" && p["in"] == place)
    };
    let body = BODY_TENANT
        .iter()
        .find(|(m, p, _)| *m == method && *p == path)
        .map(|(_, _, pointer)| TenantAt::Body(pointer));
    let tenant_at = if param("path") {
        TenantAt::Path
    } else if param("query") {
        TenantAt::Query
    } else {
        body.ok_or_else(|| {
            format!("{what}: scope {word} but no tenant in its path, query or body")
        })?
    };
    Ok(Some(Rule {
        need: Need::Scope(scope),
        tenant_at: Some(tenant_at),
    }))
}

/// Whether `caller` may call a route needing `need`, before its tenant is looked at.
/// `operator_set` / `ingest_set`: whether `admin.token` / `admin.ingest_token` are set.
pub fn admit(
    need: Need,
    caller: Caller,
    operator_set: bool,
    ingest_set: bool,
) -> Result<Principal, ApiError> {
    let ingest_route = need == Need::Scope(Scope::Ingest);
    match caller {
        Caller::Known(Principal::Operator) => Ok(Principal::Operator),
        Caller::Known(Principal::Ingest) if ingest_route => Ok(Principal::Ingest),
        Caller::Known(p @ Principal::Tenant { .. }) => match need {
            Need::Operator => Err(ApiError::forbidden(
                "this route needs the operator token (admin.token); a tenant token cannot call it",
            )),
            Need::Scope(_) => Ok(p),
        },
        // Anonymous, or the ingest token outside ingest: open only while no token guards it.
        _ if !(operator_set || ingest_route && ingest_set) => Ok(Principal::Operator),
        _ => Err(ApiError::unauthorized()),
    }
}

/// A tenant token naming `other`: the answer of a missing resource.
fn elsewhere(other: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("not found: nothing of tenant {other:?} is visible to this token"),
    )
}

impl Principal {
    /// For a tenant token: `requested` must be its own tenant (else the 404 of a missing
    /// resource), and an absent one becomes its own. Other principals: unchanged.
    pub fn narrow(&self, requested: &mut Option<String>) -> Result<(), ApiError> {
        let Principal::Tenant { tenant, .. } = self else {
            return Ok(());
        };
        match requested {
            Some(t) if t != tenant => Err(elsewhere(t)),
            Some(_) => Ok(()),
            None => {
                *requested = Some(tenant.clone());
                Ok(())
            }
        }
    }
}

/// Middleware of every route: the request's principal, checked against the route's rule,
/// its tenant narrowed; the principal is left in the request's extensions. Open routes
/// (no rule) pass untouched.
pub(super) async fn authorize(State(st): State<AdminState>, req: Request, next: Next) -> Response {
    let Some(path) = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
    else {
        return next.run(req).await;
    };
    let Some(rule) = st.access.rules.get(req.method(), &path) else {
        return next.run(req).await;
    };
    match check(&st, rule, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// [`authorize`] of one secured request.
async fn check(st: &AdminState, rule: Rule, req: Request) -> Result<Request, ApiError> {
    let auth = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // A console page acts for its session's principal (set in-process only: no request
    // from the network carries extensions), meeting the same rule as a bearer would.
    let caller = match req.extensions().get::<Acting>() {
        Some(Acting(p)) => Caller::Known(p.clone()),
        None => st.access.auth.caller(auth).await?,
    };
    let principal = admit(
        rule.need,
        caller,
        st.access.operator_set,
        st.access.ingest_set,
    )?;
    let mut req = req;
    if let Principal::Tenant { scopes, .. } = &principal {
        req = match rule.tenant_at {
            Some(TenantAt::Path) => in_path(&principal, req).await?,
            Some(TenantAt::Query) => in_query(&principal, req)?,
            Some(TenantAt::Body(pointer)) => in_body(&principal, req, pointer).await?,
            None => req,
        };
        if let Need::Scope(s) = rule.need {
            if !scopes.contains(&s) {
                return Err(ApiError::forbidden(format!(
                    "this token lacks the scope {s} this route needs"
                )));
            }
        }
    }
    req.extensions_mut().insert(principal);
    Ok(req)
}

/// The path's `{tenant}` must be the token's.
async fn in_path(p: &Principal, req: Request) -> Result<Request, ApiError> {
    let (mut parts, body) = req.into_parts();
    let params = RawPathParams::from_request_parts(&mut parts, &())
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))?;
    let mut tenant = params
        .iter()
        .find(|(k, _)| *k == "tenant")
        .map(|(_, v)| v.to_string());
    if tenant.is_none() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the path names no tenant",
        ));
    }
    p.narrow(&mut tenant)?;
    Ok(Request::from_parts(parts, body))
}

/// Every `tenant=` of the query must be the token's; none: `tenant=<its own>` is added.
fn in_query(p: &Principal, mut req: Request) -> Result<Request, ApiError> {
    let query = req.uri().query().unwrap_or_default().to_string();
    let named: Vec<String> = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "tenant")
        .map(|(_, v)| v.into_owned())
        .collect();
    for t in &named {
        p.narrow(&mut Some(t.clone()))?;
    }
    if named.is_empty() {
        let mut own = None;
        p.narrow(&mut own)?;
        let mut q = url::form_urlencoded::Serializer::new(query.clone());
        q.append_pair("tenant", own.as_deref().unwrap_or_default());
        let path_and_query = format!("{}?{}", req.uri().path(), q.finish());
        let mut parts = req.uri().clone().into_parts();
        parts.path_and_query = Some(
            path_and_query
                .parse()
                .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", "bad query"))?,
        );
        *req.uri_mut() = Uri::from_parts(parts)
            .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", "bad query"))?;
    }
    Ok(req)
}

/// The body's tenant (at `pointer`) must be the token's; absent: set to its own. A body
/// that is not a JSON object is left to the handler (400).
async fn in_body(p: &Principal, req: Request, pointer: &str) -> Result<Request, ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, BODY_MAX).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is over {BODY_MAX} bytes"),
        )
    })?;
    let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Ok(Request::from_parts(parts, bytes.into()));
    };
    let mut tenant = doc
        .pointer(pointer)
        .and_then(|v| v.as_str())
        .map(str::to_string);
    if doc
        .pointer(pointer)
        .is_some_and(|v| !v.is_string() && !v.is_null())
    {
        // Not a tenant id at all: the handler's own 400 says so.
        return Ok(Request::from_parts(parts, bytes.into()));
    }
    p.narrow(&mut tenant)?;
    set_pointer(&mut doc, pointer, serde_json::Value::from(tenant))
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e))?;
    let bytes = serde_json::to_vec(&doc).expect("a JSON value serialises");
    let mut parts = parts;
    parts
        .headers
        .insert(axum::http::header::CONTENT_LENGTH, bytes.len().into());
    Ok(Request::from_parts(parts, bytes.into()))
}

/// Set `doc[pointer] = value`, creating the objects on the way. Errors: a step through
/// something that is not an object.
fn set_pointer(
    doc: &mut serde_json::Value,
    pointer: &str,
    value: serde_json::Value,
) -> Result<(), String> {
    let mut at = doc;
    let steps: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, step) in steps.iter().enumerate() {
        let obj = at
            .as_object_mut()
            .ok_or_else(|| format!("{}: expected an object", steps[..i].join(".")))?;
        if i + 1 == steps.len() {
            obj.insert(step.to_string(), value);
            return Ok(());
        }
        at = obj
            .entry(step.to_string())
            .or_insert_with(|| serde_json::json!({}));
        if at.is_null() {
            *at = serde_json::json!({});
        }
    }
    Ok(())
}

/// The access checks of one admin server: its authenticator and the rules of its routes.
#[derive(Debug)]
pub struct Access {
    /// Bearers → principals.
    pub auth: Authenticator,
    /// Each secured route's rule.
    pub rules: Rules,
    /// `admin.token` is set.
    pub operator_set: bool,
    /// `admin.ingest_token` is set.
    pub ingest_set: bool,
    /// The `Host` names answered to (`admin.public_hosts`).
    pub hosts: super::browser::Hosts,
}

impl Access {
    /// The checks of `admin`, with the rules of [`super::openapi`]. Panics if the document's
    /// security is inconsistent (a unit test builds it: a build that passes its tests cannot).
    pub fn new(admin: &AdminConfig, store: Store) -> Access {
        let doc = serde_json::to_value(super::openapi()).expect("the document serialises");
        Access {
            auth: Authenticator::new(admin, store),
            rules: Rules::from_doc(&doc).unwrap_or_else(|e| panic!("OpenAPI security: {e}")),
            operator_set: admin.token.is_some(),
            ingest_set: admin.ingest_token.is_some(),
            hosts: super::browser::Hosts::new(&admin.public_hosts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(scopes: &[Scope]) -> Caller {
        Caller::Known(Principal::Tenant {
            tenant: "a".into(),
            scopes: scopes.to_vec(),
            token_id: "0".repeat(16),
        })
    }

    #[test]
    fn every_admin_and_v1_route_of_the_document_has_a_rule_and_open_routes_have_none() {
        let doc = serde_json::to_value(super::super::openapi()).unwrap();
        let rules = Rules::from_doc(&doc).expect("consistent security");
        let paths = doc["paths"].as_object().unwrap();
        for (path, item) in paths {
            for method in item.as_object().unwrap().keys() {
                let m: Method = method.to_ascii_uppercase().parse().unwrap();
                let secured = path.starts_with("/admin") || path.starts_with("/v1");
                assert_eq!(rules.get(&m, path).is_some(), secured, "{method} {path}");
            }
        }
        let rule = |m: Method, p: &str| rules.get(&m, p).unwrap();
        assert_eq!(
            rule(Method::GET, "/admin/hooks/{tenant}/{hook}"),
            Rule {
                need: Need::Scope(Scope::Read),
                tenant_at: Some(TenantAt::Path)
            }
        );
        assert_eq!(
            rule(Method::GET, "/admin/dlq").tenant_at,
            Some(TenantAt::Query)
        );
        assert_eq!(
            rule(Method::POST, "/admin/dlq/replay").tenant_at,
            Some(TenantAt::Body("/filter/tenant"))
        );
        assert_eq!(rule(Method::POST, "/admin/tick").need, Need::Operator);
    }

    #[test]
    fn a_route_without_security_or_without_a_tenant_is_refused_when_rules_are_read() {
        let doc = serde_json::json!({"paths": {"/admin/x": {"get": {}}}});
        assert!(Rules::from_doc(&doc).unwrap_err().contains("GET /admin/x"));
        let doc = serde_json::json!({"paths": {"/admin/x": {"get": {"security": [{"bearer": ["read"]}]}}}});
        assert!(Rules::from_doc(&doc).unwrap_err().contains("no tenant"));
        let doc = serde_json::json!({"paths": {"/admin/x": {"get": {"security": [{"bearer": ["root"]}]}}}});
        assert!(Rules::from_doc(&doc).unwrap_err().contains("root"));
    }

    #[test]
    fn who_is_admitted_where() {
        let read = Need::Scope(Scope::Read);
        let ingest = Need::Scope(Scope::Ingest);
        let op = Caller::Known(Principal::Operator);
        let ing = Caller::Known(Principal::Ingest);
        let anon = Caller::Anonymous;
        let status = |r: Result<Principal, ApiError>| r.map_err(|e| e.status.as_u16());
        // Tokens set: anonymous is refused everywhere, ingest only opens ingest.
        assert_eq!(
            status(admit(read, op.clone(), true, true)),
            Ok(Principal::Operator)
        );
        assert_eq!(
            status(admit(Need::Operator, anon.clone(), true, true)),
            Err(401)
        );
        assert_eq!(
            status(admit(ingest, ing.clone(), true, true)),
            Ok(Principal::Ingest)
        );
        assert_eq!(status(admit(read, ing.clone(), true, true)), Err(401));
        assert_eq!(
            status(admit(Need::Operator, tenant(&Scope::ALL), true, true)),
            Err(403)
        );
        assert!(
            admit(read, tenant(&[]), true, true).is_ok(),
            "scope checked after the tenant"
        );
        // No admin.token: open to anonymous, but ingest stays behind its own token.
        assert_eq!(
            status(admit(Need::Operator, anon.clone(), false, true)),
            Ok(Principal::Operator)
        );
        assert_eq!(status(admit(ingest, anon.clone(), false, true)), Err(401));
        assert_eq!(
            status(admit(ingest, anon, false, false)),
            Ok(Principal::Operator)
        );
        // A tenant token stays narrowed whether or not admin.token is set.
        assert_eq!(
            status(admit(Need::Operator, tenant(&Scope::ALL), false, false)),
            Err(403)
        );
    }

    #[test]
    fn a_tenant_principal_narrows_lists_to_its_own_tenant_and_never_widens_them() {
        let Caller::Known(p) = tenant(&[Scope::Read]) else {
            unreachable!()
        };
        let mut none = None;
        p.narrow(&mut none).unwrap();
        assert_eq!(none.as_deref(), Some("a"));
        let err = p.narrow(&mut Some("b".into())).unwrap_err();
        assert_eq!(err.status, StatusCode::NOT_FOUND);
        p.narrow(&mut Some("a".into())).unwrap();
        let mut untouched = None;
        Principal::Operator.narrow(&mut untouched).unwrap();
        assert_eq!(untouched, None);
    }

    #[test]
    fn a_body_pointer_is_set_creating_the_objects_on_the_way() {
        let mut doc = serde_json::json!({"options": {"limit": 1}});
        set_pointer(&mut doc, "/filter/tenant", "a".into()).unwrap();
        assert_eq!(
            doc,
            serde_json::json!({"options": {"limit": 1}, "filter": {"tenant": "a"}})
        );
        let mut doc = serde_json::json!({"filter": null});
        set_pointer(&mut doc, "/filter/tenant", "a".into()).unwrap();
        assert_eq!(doc["filter"]["tenant"], "a");
        let mut doc = serde_json::json!({"filter": 3});
        assert!(set_pointer(&mut doc, "/filter/tenant", "a".into()).is_err());
    }
}
