//! `/admin/tokens`: minting, listing and revoking tenant tokens over HTTP (the operator
//! token only), as `ankusa token create|list|revoke` does from the command line; and
//! `POST /admin/portal-links`, the signed links of the tenant portal (`ankusa portal-link`).

use super::*;
use crate::tokens::{NewToken, TokenInfo, TokenRequest};

/// The token routes (operator only, [`super::access`]).
pub(super) fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(token_create, tokens_list))
        .routes(routes!(token_revoke))
        .routes(routes!(portal_link_create))
}

/// Refuse a credential for a tenant nobody set up, unless `create` says it is meant: a tenant
/// is known when it has a source, or `[tenants.<id>]` or `[dispatch.tenants.<id>]` in the
/// config. A typo in a tenant id would otherwise mint a working credential for an empty
/// tenant. Errors: [`Error::NotFound`] naming the tenant and the way out; a store failure.
pub async fn check_known_tenant(
    store: &crate::store::Store,
    config: &Config,
    tenant: &str,
    create: bool,
) -> Result<(), Error> {
    crate::ids::check_id("tenant", tenant)?;
    if create
        || config.tenants.contains_key(tenant)
        || config.dispatch.tenants.contains_key(tenant)
        || store.tenant_has_sources(tenant).await?
    {
        return Ok(());
    }
    Err(Error::NotFound(format!(
        "tenant {tenant:?}: it has no source and no [tenants.{tenant}] in the config; to set \
         up a new tenant pass --create (API: \"create\": true)"
    )))
}

/// Body of `POST /admin/portal-links`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PortalLinkRequest {
    /// The tenant whose portal the link opens.
    pub tenant: String,
    /// How long it opens it: a duration such as `15m` or `1h` (default `1h`, at most `24h`).
    #[serde(default)]
    pub ttl: Option<String>,
    /// Mint it for a tenant that is not known yet (no source, nothing in the config);
    /// otherwise such a tenant is refused with 404 `not_found`.
    #[serde(default)]
    pub create: bool,
}

/// A minted portal link.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(super) struct PortalLink {
    /// The path to open on any worker of the pool: `/portal/enter?link=…`.
    pub path: String,
    /// When it stops opening the portal (a session it opened ends then too), Unix ms.
    pub expires_at_ms: i64,
}

/// Mint a short-lived signed link that opens one tenant's portal (`/portal/`) without a
/// token, e.g. from the operator's own product. Signed with a key derived from
/// `admin.portal_link_key`: nothing is stored, and changing the key voids every link.
/// Errors: 400 `bad_request` (no `admin.token` or `admin.portal_link_key`, a bad tenant id
/// or ttl); 404 `not_found` (a tenant with no source and nothing in the config, without
/// `create`).
#[utoipa::path(post, path = "/admin/portal-links", tag = "tokens", request_body = PortalLinkRequest,
    responses((status = 201, body = PortalLink), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
async fn portal_link_create(
    State(st): State<AdminState>,
    body: Result<Json<PortalLinkRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<PortalLink>), ApiError> {
    let Json(req) = body?;
    let config = st.worker.config();
    let now = crate::admin::console::now_ms();
    // The request's own faults first, then whether the tenant is known (a Redis read).
    crate::admin::console::link::mint(&config.admin, &req.tenant, req.ttl.as_deref(), now)?;
    check_known_tenant(st.worker.store(), &config, &req.tenant, req.create).await?;
    let (link, expires_at_ms) =
        crate::admin::console::link::mint(&config.admin, &req.tenant, req.ttl.as_deref(), now)?;
    tracing::info!(tenant = req.tenant, expires_at_ms, "portal link minted");
    Ok((
        StatusCode::CREATED,
        Json(PortalLink {
            path: format!("/portal/enter?link={link}"),
            expires_at_ms,
        }),
    ))
}

/// Mint a tenant token. The answer is the only place the token appears: Redis keeps its
/// SHA-256. Errors: 400 `bad_request` naming the field (tenant id, scopes, ttl, name), or
/// when the worker has no `admin.token` (a tenant token would narrow nothing); 404
/// `not_found` for a tenant with no source and nothing in the config, without `create`.
#[utoipa::path(post, path = "/admin/tokens", tag = "tokens", request_body = TokenRequest,
    responses((status = 201, body = NewToken), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
async fn token_create(
    State(st): State<AdminState>,
    body: Result<Json<TokenRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<NewToken>), ApiError> {
    let Json(req) = body?;
    let config = st.worker.config();
    if let Some(problem) = config.admin.minting_problem("tenant tokens") {
        return Err(Error::BadRequest(problem).into());
    }
    let store = st.worker.store();
    crate::tokens::mint(&req, 0).map_err(Error::from)?;
    check_known_tenant(store, &config, &req.tenant, req.create).await?;
    let minted = crate::tokens::mint(&req, store.now_ms().await.map_err(Error::from)?)
        .map_err(Error::from)?;
    store
        .put_token(&minted.token.info, &minted.digest)
        .await
        .map_err(Error::from)?;
    tracing::info!(
        id = minted.token.info.id,
        tenant = minted.token.info.tenant,
        "tenant token minted"
    );
    Ok((StatusCode::CREATED, Json(minted.token)))
}

/// Query of `GET /admin/tokens`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema, utoipa::IntoParams)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct TokensQuery {
    /// Only this tenant's tokens.
    pub tenant: Option<String>,
}

/// The live tenant tokens.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(super) struct TokenList {
    /// Their records (never the tokens), by tenant and creation time.
    pub tokens: Vec<TokenInfo>,
}

/// The live tenant tokens (of one tenant): ids, scopes, names and expiry, never a token.
#[utoipa::path(get, path = "/admin/tokens", tag = "tokens", params(TokensQuery),
    responses((status = 200, body = TokenList), (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
async fn tokens_list(
    State(st): State<AdminState>,
    q: Result<Query<TokensQuery>, QueryRejection>,
) -> Result<Json<TokenList>, ApiError> {
    let Query(q) = q?;
    let tokens = st
        .worker
        .store()
        .list_tokens(q.tenant.as_deref())
        .await
        .map_err(Error::from)?;
    Ok(Json(TokenList { tokens }))
}

/// The answer of a revoke.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(super) struct TokenRevoked {
    /// The token's id.
    pub id: String,
    /// Always true (an unknown id is `not_found`).
    pub revoked: bool,
}

/// Revoke a tenant token: refused from the next check on, by every worker within
/// `TOKEN_CACHE` (5 s). Errors: 404 `not_found` for an unknown, expired or revoked id.
#[utoipa::path(delete, path = "/admin/tokens/{id}", tag = "tokens",
    params(("id" = String, Path, description = "the token's id, 16 lowercase hex digits")),
    responses((status = 200, body = TokenRevoked), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
async fn token_revoke(
    State(st): State<AdminState>,
    Path(id): Path<String>,
) -> Result<Json<TokenRevoked>, ApiError> {
    let gone = || Error::NotFound(format!("token {id}"));
    if !crate::tokens::is_id(&id) {
        return Err(gone().into());
    }
    if !st
        .worker
        .store()
        .revoke_token(&id)
        .await
        .map_err(Error::from)?
    {
        return Err(gone().into());
    }
    tracing::info!(id, "tenant token revoked");
    Ok(Json(TokenRevoked { id, revoked: true }))
}
