//! OAuth 2.0 client credentials (RFC 6749 §4.4) for `http` sink entries: the entry names a
//! token endpoint and its client; each attempt sends `Authorization: Bearer <token>`.
//!
//! Tokens are cached per entry credentials in the worker's memory (never in Redis) until
//! shortly before they expire; one fetch runs at a time per credentials, so a burst of
//! attempts asks the endpoint once. The token endpoint is reached through the same guarded
//! client as the deliveries (the egress guard checks its address), without redirects. A
//! delivery answered 401 drops the cached token, so the retry fetches a new one.

use super::transport::Transport;
use super::{check_url, UrlProblem};
use crate::sinks::guard::read_bounded;
use crate::sinks::{AttemptError, ErrorKind};
use reqwest::header::HeaderValue;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `oauth2` of an `http` sink entry: where and as whom to get a token.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuth2 {
    /// The token endpoint (`https://…`, or `http://` on a private network the guard
    /// allows); may be a secret reference.
    pub token_url: String,
    /// The client id, or a secret reference.
    pub client_id: String,
    /// The client secret, normally a secret reference
    /// (`${env:ANKUSA_SECRET_<TENANT>__…}`).
    pub client_secret: String,
    /// `scope` of the token request (space-separated scopes), if the endpoint wants one.
    #[serde(default)]
    pub scope: Option<String>,
    /// `audience` of the token request (Auth0 and others), if the endpoint wants one.
    #[serde(default)]
    pub audience: Option<String>,
    /// How the client authenticates to the endpoint: `"basic"` (HTTP Basic, RFC 6749
    /// §2.3.1, the default) or `"post"` (`client_id` and `client_secret` in the form).
    #[serde(default)]
    pub client_auth: ClientAuth,
}

/// [`OAuth2::client_auth`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// `Authorization: Basic base64(urlencode(id):urlencode(secret))`.
    #[default]
    Basic,
    /// `client_id` and `client_secret` as form fields.
    Post,
}

/// The credentials of a token request, resolved (secret references replaced).
#[derive(Debug)]
pub(super) struct Credentials {
    /// Token endpoint URL.
    pub url: String,
    /// Client id.
    pub id: String,
    /// Client secret.
    pub secret: String,
    /// Requested scope.
    pub scope: Option<String>,
    /// Requested audience.
    pub audience: Option<String>,
    /// Client authentication method.
    pub auth: ClientAuth,
}

impl Credentials {
    /// The cache key: a digest, so the map holds no secret in the clear.
    fn key(&self, tenant: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        for part in [
            tenant,
            &self.url,
            &self.id,
            &self.secret,
            self.scope.as_deref().unwrap_or("\u{0}"),
            self.audience.as_deref().unwrap_or("\u{0}"),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        h.update([self.auth as u8]);
        h.finalize().into()
    }
}

/// A token and until when it is used.
#[derive(Debug, Clone)]
struct Cached {
    header: HeaderValue,
    until: Instant,
}

/// One credentials' token; its lock is held while a token is fetched, so concurrent
/// attempts wait for that one request instead of sending their own.
type Slot = Arc<tokio::sync::Mutex<Option<Cached>>>;

/// The tokens of every entry, shared by all clones of the sink.
#[derive(Debug, Default)]
pub(super) struct Tokens {
    slots: Mutex<HashMap<[u8; 32], Slot>>,
}

/// Largest token answer read; a bigger one is refused.
const ANSWER_MAX_BYTES: usize = 64 * 1024;
/// Lifetime assumed when the answer has no `expires_in`.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);
/// Slots kept at most; past it the map is cleared (tokens are fetched again).
const SLOTS_MAX: usize = 10_000;

impl Tokens {
    fn slot(&self, key: [u8; 32]) -> Slot {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() >= SLOTS_MAX && !slots.contains_key(&key) {
            slots.clear();
        }
        slots.entry(key).or_default().clone()
    }

    /// The `Authorization` value for `creds`: the cached token while it is fresh, else a
    /// new one from the endpoint (one request at a time per credentials).
    ///
    /// # Errors
    /// A blocked token endpoint is permanent; a transport error, a non-2xx answer or an
    /// answer without a bearer `access_token` retries (the kind says which).
    pub(super) async fn bearer(
        &self,
        client: &Transport,
        guard: &crate::sinks::guard::AddressPolicy,
        tenant: &str,
        creds: &Credentials,
    ) -> Result<HeaderValue, AttemptError> {
        let slot = self.slot(creds.key(tenant));
        let mut cached = slot.lock().await;
        if let Some(c) = cached.as_ref().filter(|c| c.until > Instant::now()) {
            return Ok(c.header.clone());
        }
        let fresh = fetch(client, guard, creds).await?;
        let header = fresh.header.clone();
        *cached = Some(fresh);
        Ok(header)
    }

    /// Forget the token of `creds` (the endpoint answered 401 with it).
    pub(super) fn forget(&self, tenant: &str, creds: &Credentials) {
        let key = creds.key(tenant);
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&key);
    }
}

/// The token endpoint's answer (RFC 6749 §5.1); unknown fields are ignored.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    token_type: String,
    #[serde(default)]
    expires_in: Option<f64>,
}

/// One token request.
async fn fetch(
    client: &Transport,
    guard: &crate::sinks::guard::AddressPolicy,
    creds: &Credentials,
) -> Result<Cached, AttemptError> {
    let url = check_url(&creds.url, guard).map_err(|e| match e {
        UrlProblem::Blocked(b) => {
            AttemptError::permanent(ErrorKind::Other, format!("oauth2.token_url: {b}"))
        }
        UrlProblem::Invalid(why) => {
            AttemptError::permanent(ErrorKind::Other, format!("oauth2.token_url {why}"))
        }
    })?;
    // Built apart: the serializer is not `Send` and must not live across the request.
    let form = {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if let Some(s) = &creds.scope {
            form.append_pair("scope", s);
        }
        if let Some(a) = &creds.audience {
            form.append_pair("audience", a);
        }
        if creds.auth == ClientAuth::Post {
            form.append_pair("client_id", &creds.id);
            form.append_pair("client_secret", &creds.secret);
        }
        form.finish()
    };
    let mut req = client
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json");
    if creds.auth == ClientAuth::Basic {
        // RFC 6749 §2.3.1: each part form-urlencoded before the Basic encoding.
        let enc =
            |s: &str| -> String { url::form_urlencoded::byte_serialize(s.as_bytes()).collect() };
        req = req.header(
            reqwest::header::AUTHORIZATION,
            super::basic_authorization(&enc(&creds.id), &enc(&creds.secret))?,
        );
    }
    let req = req.body(form).build().map_err(|e| {
        AttemptError::permanent(ErrorKind::Other, format!("oauth2 token request: {e}"))
    })?;
    let resp = client.execute(req).await.map_err(|e| match e {
        blocked @ super::transport::SendError::Blocked(_) => {
            blocked.into_attempt("oauth2.token_url: ")
        }
        failed => failed.into_attempt("oauth2 token endpoint: "),
    })?;
    let status = resp.status().as_u16();
    let body = read_bounded(resp, ANSWER_MAX_BYTES + 1).await;
    if !(200..300).contains(&status) {
        // The error answer (RFC 6749 §5.2) names the problem; its first 256 bytes are kept.
        let text = String::from_utf8_lossy(&body[..body.len().min(256)]).into_owned();
        return Err(AttemptError::retry(
            ErrorKind::Other,
            format!("oauth2 token endpoint answered {status}: {text}"),
        ));
    }
    if body.len() > ANSWER_MAX_BYTES {
        return Err(AttemptError::retry(
            ErrorKind::Other,
            format!("oauth2 token endpoint: answer over {ANSWER_MAX_BYTES} bytes"),
        ));
    }
    let answer: TokenAnswer = serde_json::from_slice(&body).map_err(|e| {
        AttemptError::retry(
            ErrorKind::Other,
            format!("oauth2 token endpoint: not a token answer: {e}"),
        )
    })?;
    if !answer.token_type.eq_ignore_ascii_case("bearer") {
        return Err(AttemptError::retry(
            ErrorKind::Other,
            format!(
                "oauth2 token endpoint: token_type {:?}, not Bearer",
                answer.token_type.chars().take(32).collect::<String>()
            ),
        ));
    }
    let mut header =
        HeaderValue::from_str(&format!("Bearer {}", answer.access_token)).map_err(|_| {
            AttemptError::retry(
                ErrorKind::Other,
                "oauth2 token endpoint: access_token is not a valid header value",
            )
        })?;
    header.set_sensitive(true);
    Ok(Cached {
        header,
        until: Instant::now() + usable_for(answer.expires_in),
    })
}

/// How long a token answered with `expires_in` (seconds) is used: until 30 s before it
/// expires, or half its life when that is shorter (a short-lived token is still used a
/// little); [`DEFAULT_LIFETIME`] without `expires_in`.
fn usable_for(expires_in: Option<f64>) -> Duration {
    let life = match expires_in {
        Some(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s.min(86_400.0 * 365.0)),
        Some(_) => Duration::ZERO,
        None => DEFAULT_LIFETIME,
    };
    life.saturating_sub(Duration::from_secs(30).min(life / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_used_until_shortly_before_it_expires() {
        assert_eq!(usable_for(Some(3600.0)), Duration::from_secs(3570));
        assert_eq!(usable_for(Some(20.0)), Duration::from_secs(10));
        assert_eq!(usable_for(None), Duration::from_secs(270));
        assert_eq!(usable_for(Some(0.0)), Duration::ZERO);
        assert_eq!(usable_for(Some(f64::NAN)), Duration::ZERO);
    }

    #[test]
    fn the_cache_key_changes_with_every_part_and_the_tenant() {
        let c = |secret: &str, scope: Option<&str>| Credentials {
            url: "https://auth.example/token".into(),
            id: "id".into(),
            secret: secret.into(),
            scope: scope.map(str::to_string),
            audience: None,
            auth: ClientAuth::Basic,
        };
        let base = c("s", None).key("acme");
        assert_ne!(base, c("s2", None).key("acme"));
        assert_ne!(base, c("s", Some("a")).key("acme"));
        assert_ne!(base, c("s", None).key("globex"));
        assert_eq!(base, c("s", None).key("acme"));
    }
}
