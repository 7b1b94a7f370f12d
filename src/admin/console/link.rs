//! Portal links: a short-lived signed URL that opens one tenant's portal, minted by the
//! operator (`ankusa portal-link`, `POST /admin/portal-links`) for embedding in the
//! operator's own product.
//!
//! A link is `<payload>.<tag>` (both base64url): the payload `v1\n<tenant>\n<expiry ms>`, the
//! tag its HMAC-SHA-256 under a key derived from `admin.portal_link_key`, so every worker of
//! a pool (and the CLI, which reads the same config) mints and checks the same links without
//! storing anything, and changing the key voids every link at once. The key is a random
//! string of its own, never the operator token: a link and its payload are known to whoever
//! holds it, so a tag under a key derived from `admin.token` would let them test guesses of
//! the token offline.

use crate::config::AdminConfig;
use crate::error::Error;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::hmac;

/// The longest a portal link may live: 24 h.
pub const LINK_TTL_MAX_MS: u64 = 24 * 3_600_000;
/// A link's lifetime when none is given: 1 h.
pub const LINK_TTL_DEFAULT_MS: u64 = 3_600_000;

/// What a valid link grants: its tenant's portal until `expires_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortalLink {
    /// The tenant whose portal it opens.
    pub tenant: String,
    /// When it stops opening it, Unix ms.
    pub expires_at_ms: i64,
}

/// Why a link does not open the portal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// Not a link this instance signed (altered, truncated, another `admin.portal_link_key`).
    #[error("this portal link is not valid")]
    Invalid,
    /// Signed, but past its expiry.
    #[error("this portal link has expired: ask for a new one")]
    Expired,
}

/// The key links are signed with, derived from `admin.portal_link_key`.
pub fn key(link_key: &str) -> hmac::Key {
    let root = hmac::Key::new(hmac::HMAC_SHA256, link_key.as_bytes());
    let derived = hmac::sign(&root, b"ankusa portal link v1");
    hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
}

/// The link of `tenant` valid until `expires_at_ms`.
pub fn sign(key: &hmac::Key, tenant: &str, expires_at_ms: i64) -> String {
    let payload = B64.encode(format!("v1\n{tenant}\n{expires_at_ms}"));
    let tag = B64.encode(hmac::sign(key, payload.as_bytes()).as_ref());
    format!("{payload}.{tag}")
}

/// Check `link` at `now_ms`. Errors: [`LinkError::Invalid`] for anything not signed by
/// `key` (checked before anything in it is believed), [`LinkError::Expired`].
pub fn verify(key: &hmac::Key, link: &str, now_ms: i64) -> Result<PortalLink, LinkError> {
    let (payload, tag) = link.split_once('.').ok_or(LinkError::Invalid)?;
    let tag = B64.decode(tag).map_err(|_| LinkError::Invalid)?;
    hmac::verify(key, payload.as_bytes(), &tag).map_err(|_| LinkError::Invalid)?;
    let text = B64.decode(payload).map_err(|_| LinkError::Invalid)?;
    let text = String::from_utf8(text).map_err(|_| LinkError::Invalid)?;
    let mut parts = text.split('\n');
    let (Some("v1"), Some(tenant), Some(exp), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(LinkError::Invalid);
    };
    let expires_at_ms: i64 = exp.parse().map_err(|_| LinkError::Invalid)?;
    crate::model::check_id("tenant", tenant).map_err(|_| LinkError::Invalid)?;
    if expires_at_ms <= now_ms {
        return Err(LinkError::Expired);
    }
    Ok(PortalLink {
        tenant: tenant.to_string(),
        expires_at_ms,
    })
}

/// A new link of `tenant` living `ttl` (a duration such as `15m`, `1h`; default 1 h, at
/// most 24 h) from `now_ms`: `(link, expires_at_ms)`. Errors ([`Error::BadRequest`]): no
/// `admin.token` (a link's tenant session would narrow nothing), no
/// `admin.portal_link_key` (links are signed with it), a bad tenant id or ttl.
pub fn mint(
    admin: &AdminConfig,
    tenant: &str,
    ttl: Option<&str>,
    now_ms: i64,
) -> Result<(String, i64), Error> {
    if let Some(problem) = admin.minting_problem("portal links") {
        return Err(Error::BadRequest(problem));
    }
    let link_key = admin.portal_link_key.as_deref().ok_or_else(|| {
        Error::BadRequest(
            "portal links need admin.portal_link_key (ANKUSA_ADMIN__PORTAL_LINK_KEY): a random \
             key of 32 or more characters they are signed with, the same on every worker and \
             here, e.g. `openssl rand -hex 32`"
                .into(),
        )
    })?;
    crate::model::check_id("tenant", tenant)?;
    let ttl_ms = match ttl {
        None => LINK_TTL_DEFAULT_MS,
        Some(t) => {
            let d = humantime::parse_duration(t)
                .map_err(|e| Error::BadRequest(format!("ttl {t:?}: {e}")))?;
            let ms = d.as_millis();
            if ms == 0 || ms > LINK_TTL_MAX_MS as u128 {
                return Err(Error::BadRequest(format!(
                    "ttl {t:?}: must be more than 0 and at most 24h"
                )));
            }
            ms as u64
        }
    };
    let expires_at_ms = now_ms + ttl_ms as i64;
    Ok((sign(&key(link_key), tenant, expires_at_ms), expires_at_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_opens_its_tenant_until_it_expires_and_nothing_else_opens() {
        let k = key("operator-s3cret");
        let link = sign(&k, "alpha", 2_000);
        assert_eq!(
            verify(&k, &link, 1_999),
            Ok(PortalLink {
                tenant: "alpha".into(),
                expires_at_ms: 2_000
            })
        );
        assert_eq!(verify(&k, &link, 2_000), Err(LinkError::Expired));
        assert_eq!(
            verify(&key("another"), &link, 0),
            Err(LinkError::Invalid),
            "another admin.portal_link_key"
        );
        // Another tenant or a later expiry in the payload breaks the tag.
        let (_, tag) = link.split_once('.').unwrap();
        let forged = format!("{}.{tag}", B64.encode("v1\nbeta\n2000"));
        assert_eq!(verify(&k, &forged, 0), Err(LinkError::Invalid));
        for junk in ["", ".", "abc", "a.b", &link[..link.len() - 2]] {
            assert_eq!(verify(&k, junk, 0), Err(LinkError::Invalid), "{junk}");
        }
    }

    #[test]
    fn minting_needs_the_operator_token_the_link_key_and_a_bounded_ttl() {
        let mut admin = AdminConfig {
            portal_link_key: Some("k".repeat(40)),
            ..AdminConfig::default()
        };
        assert!(mint(&admin, "alpha", None, 0)
            .unwrap_err()
            .to_string()
            .contains("admin.token"));
        admin.token = Some("t".into());
        admin.portal_link_key = None;
        assert!(mint(&admin, "alpha", None, 0)
            .unwrap_err()
            .to_string()
            .contains("admin.portal_link_key"));
        admin.portal_link_key = Some("link-key".into());
        let (link, exp) = mint(&admin, "alpha", Some("15m"), 1_000).unwrap();
        assert_eq!(exp, 1_000 + 900_000);
        assert_eq!(
            verify(&key("link-key"), &link, 1_000).unwrap().tenant,
            "alpha"
        );
        // The operator token signs nothing: a link is no oracle for it.
        assert_eq!(verify(&key("t"), &link, 1_000), Err(LinkError::Invalid));
        assert_eq!(mint(&admin, "alpha", None, 0).unwrap().1, 3_600_000);
        for bad in ["25h", "0s", "soon"] {
            assert!(mint(&admin, "alpha", Some(bad), 0).is_err(), "{bad}");
        }
        assert!(mint(&admin, "no/slash", None, 0).is_err());
    }
}
