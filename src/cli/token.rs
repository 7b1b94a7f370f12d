//! `ankusa token create|list|revoke`: tenant tokens, straight in Redis (no worker needed).

use super::args::{Cli, TokenCmd};
use super::out::json_line;
use super::setup::{load_config, store};
use ankusa::tokens::{parse_scopes, Scope, TokenInfo, TokenRequest};
use ankusa::Error;

/// Run one `token` command.
pub async fn token(cli: &Cli, cmd: &TokenCmd) -> Result<(), Error> {
    let json = cli.json;
    match cmd {
        TokenCmd::Create {
            tenant,
            scopes,
            ttl,
            name,
            create,
        } => {
            let req = TokenRequest {
                tenant: tenant.clone(),
                scopes: parse_scopes(scopes)
                    .map_err(|e| Error::BadRequest(format!("--scopes: {e}")))?,
                ttl: Some(ttl.clone()),
                name: name.clone(),
                create: *create,
            };
            // Checked before connecting: a bad argument is a usage error whatever Redis does.
            ankusa::tokens::mint(&req, 0)?;
            let cfg = load_config(cli)?;
            if let Some(problem) = cfg.admin.minting_problem("tenant tokens") {
                return Err(Error::BadRequest(problem));
            }
            let s = store(&cfg).await?;
            ankusa::admin::check_known_tenant(&s, &cfg, tenant, *create).await?;
            let minted = ankusa::tokens::mint(&req, s.now_ms().await?)?;
            s.put_token(&minted.token.info, &minted.digest).await?;
            if json {
                return json_line(&minted.token);
            }
            outln!("{}", minted.token.token);
            let i = &minted.token.info;
            eprintln!(
                "token {} for tenant {} (scopes {}) expires {}: shown once, store it now",
                i.id,
                i.tenant,
                ankusa::tokens::scopes_csv(&i.scopes),
                when(i.expires_at_ms)
            );
            Ok(())
        }
        TokenCmd::List { tenant } => {
            let cfg = load_config(cli)?;
            let tokens = store(&cfg).await?.list_tokens(tenant.as_deref()).await?;
            if json {
                return json_line(&serde_json::json!({ "tokens": tokens }));
            }
            print_table(&tokens);
            Ok(())
        }
        TokenCmd::Revoke { id } => {
            let gone = || Error::NotFound(format!("token {id}"));
            if !ankusa::tokens::is_id(id) {
                return Err(gone());
            }
            let cfg = load_config(cli)?;
            if !store(&cfg).await?.revoke_token(id).await? {
                return Err(gone());
            }
            if json {
                json_line(&serde_json::json!({"id": id, "revoked": true}))
            } else {
                outln!(
                    "token {id} revoked: every worker refuses it within {} s",
                    ankusa::admin::TOKEN_CACHE.as_secs()
                );
                Ok(())
            }
        }
    }
}

/// `tokens` as a table; "no tokens" when there is none.
fn print_table(tokens: &[TokenInfo]) {
    if tokens.is_empty() {
        outln!("no tokens");
        return;
    }
    let scopes = |t: &TokenInfo| -> String {
        t.scopes
            .iter()
            .map(|s| Scope::as_str(*s))
            .collect::<Vec<_>>()
            .join(",")
    };
    let now = ankusa::admin::console::now_ms();
    // The shared table: padded columns, and every cell escaped (a token's name is free
    // text, written through the admin API too).
    let rows = tokens.iter().map(|t| {
        vec![
            t.id.clone(),
            t.tenant.clone(),
            scopes(t),
            super::human::when(t.expires_at_ms, now),
            t.name.clone(),
        ]
    });
    outln!(
        "{}",
        super::human::table(&["ID", "TENANT", "SCOPES", "EXPIRES", "NAME"], rows)
    );
}

/// `ms` since the epoch as RFC 3339 (UTC, seconds).
fn when(ms: i64) -> String {
    super::human::rfc3339(ms)
}

/// `ankusa portal-link`: a signed link of `tenant`'s portal, minted from the config's
/// `admin.portal_link_key` (no worker needed; Redis only to see that the tenant has a
/// source, unless the config names it or `create`). The URL alone goes to stdout.
pub async fn portal_link(
    cli: &Cli,
    tenant: &str,
    ttl: &str,
    base_url: Option<&str>,
    create: bool,
) -> Result<(), Error> {
    let cfg = load_config(cli)?;
    let now = ankusa::admin::console::now_ms();
    // The request's own faults first (usage errors whatever Redis does), then the tenant.
    ankusa::admin::console::link::mint(&cfg.admin, tenant, Some(ttl), now)?;
    let in_config = cfg.tenants.contains_key(tenant) || cfg.dispatch.tenants.contains_key(tenant);
    if !create && !in_config {
        ankusa::admin::check_known_tenant(&store(&cfg).await?, &cfg, tenant, false).await?;
    }
    let (link, expires_at_ms) =
        ankusa::admin::console::link::mint(&cfg.admin, tenant, Some(ttl), now)?;
    let path = format!("/portal/enter?link={link}");
    let base = match base_url {
        Some(b) => b.trim_end_matches('/').to_string(),
        None => format!("http://{}", cfg.admin.listen),
    };
    let url = format!("{base}{path}");
    if cli.json {
        json_line(&serde_json::json!({"url": url, "path": path, "expires_at_ms": expires_at_ms}))
    } else {
        eprintln!("portal link of tenant {tenant:?}, valid for {ttl}");
        outln!("{url}");
        Ok(())
    }
}
