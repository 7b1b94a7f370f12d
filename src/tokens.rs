//! Tenant tokens: bearer credentials that reach one tenant's resources of the admin and
//! ingest API, by scope (`docs/security.md` "Tokens and scopes").
//!
//! A token reads `ank_<id>_<secret>`:
//! - `ank_`, so secret scanners (and people) can tell a leaked one;
//! - `<id>`, 16 lowercase hex digits (64 random bits): names the token's record, is shown by
//!   `token list` and revokes it;
//! - `<secret>`, 64 lowercase hex digits (256 random bits of a CSPRNG seeded by the OS).
//!
//! Redis keeps only the SHA-256 of the whole token, with the record ([`TokenInfo`]), under
//! the instance's own keys (`keyspace::Keyspace::token`), expiring with it: a copy of Redis
//! holds no usable token, and the token is shown once, when minted. Minting, listing and
//! revoking are in `store/tokens.rs`; checking a presented token is
//! [`crate::admin::Authenticator`].

use crate::ids::BadId;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use utoipa::ToSchema;

/// What every token starts with.
pub const PREFIX: &str = "ank_";
/// Hex digits of a token's id.
pub const ID_HEX: usize = 16;
/// Hex digits of a token's secret part.
const SECRET_HEX: usize = 64;
/// Longest token name, characters.
pub const NAME_MAX: usize = 100;
/// Longest lifetime of a token: ten years, ms. A token always expires.
pub const TTL_MAX_MS: u64 = 10 * 365 * 24 * 3_600_000;
/// Lifetime of a token minted without one: 90 days, ms.
pub const TTL_DEFAULT_MS: u64 = 90 * 24 * 3_600_000;

/// What a tenant token may do, each for its own tenant only.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Commit hooks: `POST /v1/hooks/{tenant}/{source}`.
    Ingest,
    /// Read hooks, rows, dead letters and the tenant's line of `tenants/top`.
    Read,
    /// Read, register, replace, delete and re-enable the tenant's sources.
    Sources,
    /// Resend hooks and replay dead letters of the tenant.
    Replay,
}

impl Scope {
    /// Every scope, in order.
    pub const ALL: [Scope; 4] = [Scope::Ingest, Scope::Read, Scope::Sources, Scope::Replay];

    /// The scope's name, as in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Ingest => "ingest",
            Scope::Read => "read",
            Scope::Sources => "sources",
            Scope::Replay => "replay",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Scope, String> {
        Scope::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| format!("unknown scope {s:?}: expected ingest, read, sources or replay"))
    }
}

/// `ingest,read` → the scopes, sorted, each once. Errors: an unknown word, or none at all.
pub fn parse_scopes(csv: &str) -> Result<Vec<Scope>, String> {
    let mut scopes = csv
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(Scope::from_str)
        .collect::<Result<Vec<_>, _>>()?;
    normalise(&mut scopes)?;
    Ok(scopes)
}

/// Sort and de-duplicate `scopes`; none at all is an error (a token that opens nothing).
fn normalise(scopes: &mut Vec<Scope>) -> Result<(), String> {
    scopes.sort();
    scopes.dedup();
    if scopes.is_empty() {
        return Err("no scopes: give at least one of ingest, read, sources, replay".into());
    }
    Ok(())
}

/// The csv form of `scopes` (`ingest,read`), as stored.
pub fn scopes_csv(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// A tenant token's record: everything about it but the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    /// The token's id (16 lowercase hex digits, also inside the token).
    pub id: String,
    /// The one tenant it reaches.
    pub tenant: String,
    /// What it may do there.
    pub scopes: Vec<Scope>,
    /// A label for people (may be empty).
    pub name: String,
    /// When it was minted, ms since the epoch (Redis clock).
    pub created_at_ms: i64,
    /// When it stops working, ms since the epoch (Redis clock).
    pub expires_at_ms: i64,
}

impl TokenInfo {
    /// Whether the token may do `scope`.
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

/// A token just minted: the only answer that carries the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NewToken {
    /// The bearer token, `ank_<id>_<secret>`. Shown once: only its SHA-256 is stored.
    pub token: String,
    /// Its record.
    #[serde(flatten)]
    pub info: TokenInfo,
}

/// What to mint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// The tenant the token reaches (`[A-Za-z0-9_.-]{1,128}`).
    pub tenant: String,
    /// What it may do there; at least one: a list (`["ingest", "read"]`) or a
    /// comma-separated string (`"ingest,read"`, as `ankusa token create --scopes` takes).
    #[serde(deserialize_with = "scope_list")]
    #[schema(value_type = Vec<Scope>)]
    pub scopes: Vec<Scope>,
    /// How long it lives: a duration such as `30d`, `12h`, `90m` (default `90d`, at most
    /// ten years).
    #[serde(default)]
    pub ttl: Option<String>,
    /// A label for people, at most 100 printable characters.
    #[serde(default)]
    pub name: Option<String>,
    /// Mint it for a tenant that is not known yet (no source, nothing in the config);
    /// otherwise such a tenant is refused (`ankusa token create --create`).
    #[serde(default)]
    pub create: bool,
}

/// `scopes` as a list of names or one comma-separated string.
fn scope_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Scope>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        List(Vec<Scope>),
        Csv(String),
    }
    match Form::deserialize(d) {
        Ok(Form::List(l)) => Ok(l),
        Ok(Form::Csv(s)) => parse_scopes(&s).map_err(serde::de::Error::custom),
        Err(_) => Err(serde::de::Error::custom(
            "scopes: a list such as [\"ingest\", \"read\"] or a string such as \"ingest,read\" \
             (ingest, read, sources, replay)",
        )),
    }
}

/// A minted token with the digest Redis keeps.
#[derive(Debug, Clone)]
pub struct Minted {
    /// The token and its record.
    pub token: NewToken,
    /// SHA-256 of the token, lowercase hex.
    pub digest: String,
}

/// `30d`, `12h`, `1h 30m` → ms (a positive duration, at most [`TTL_MAX_MS`]). Errors name
/// the value and say what is expected.
pub fn parse_ttl(s: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("ttl {s:?}: {e} (expected a duration such as 30d, 12h, 90m)"))?;
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return Err(format!("ttl {s:?}: must be longer than 0"));
    }
    if ms > TTL_MAX_MS {
        return Err(format!("ttl {s:?}: at most 3650d (a token always expires)"));
    }
    Ok(ms)
}

/// Why a token request is refused; each names the field. [`crate::Error`] carries them as
/// `BadId` and `BadRequest` (exit code 2, admin API code `bad_request`).
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// The tenant id is malformed.
    #[error(transparent)]
    BadId(#[from] BadId),
    /// No or unknown scopes, a bad ttl, a name too long or with control characters.
    #[error("bad request: {0}")]
    BadRequest(String),
}

/// Check a request and mint its token at `now_ms` (Redis clock). Errors ([`MintError`])
/// name the field: a bad tenant id, no or unknown scopes, a bad ttl, a name too long or
/// with control characters.
pub fn mint(req: &TokenRequest, now_ms: i64) -> Result<Minted, MintError> {
    crate::ids::check_id("tenant", &req.tenant)?;
    let mut scopes = req.scopes.clone();
    normalise(&mut scopes).map_err(|e| MintError::BadRequest(format!("scopes: {e}")))?;
    let ttl_ms = match &req.ttl {
        Some(t) => parse_ttl(t).map_err(MintError::BadRequest)?,
        None => TTL_DEFAULT_MS,
    };
    let name = req.name.clone().unwrap_or_default();
    check_name(&name).map_err(MintError::BadRequest)?;
    let id = random_hex(ID_HEX / 2);
    let token = format!("{PREFIX}{id}_{}", random_hex(SECRET_HEX / 2));
    let digest = digest(&token);
    Ok(Minted {
        token: NewToken {
            token,
            info: TokenInfo {
                id,
                tenant: req.tenant.clone(),
                scopes,
                name,
                created_at_ms: now_ms,
                expires_at_ms: now_ms.saturating_add(ttl_ms as i64),
            },
        },
        digest,
    })
}

/// A token's name: at most [`NAME_MAX`] characters, none of them a control character (names
/// are printed in tables and logs).
fn check_name(name: &str) -> Result<(), String> {
    if name.chars().count() > NAME_MAX {
        return Err(format!("name: at most {NAME_MAX} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("name: control characters are not allowed".into());
    }
    Ok(())
}

/// `n` random bytes of `rand`'s thread generator (ChaCha, seeded and reseeded from the OS), as
/// lowercase hex.
fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rand::fill(&mut bytes[..]);
    hex::encode(bytes)
}

/// SHA-256 of `token`, lowercase hex: what Redis keeps.
pub fn digest(token: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// The id inside a well-formed token (`ank_<16 hex>_<64 hex>`); `None` for anything else,
/// so a malformed bearer never reaches Redis.
pub fn id_of(token: &str) -> Option<&str> {
    let rest = token.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    (hex(id, ID_HEX) && hex(secret, SECRET_HEX)).then_some(id)
}

/// Whether `id` is a well-formed token id (16 lowercase hex digits).
pub fn is_id(id: &str) -> bool {
    id.len() == ID_HEX
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(scopes: &[Scope]) -> TokenRequest {
        TokenRequest {
            create: false,
            tenant: "acme".into(),
            scopes: scopes.to_vec(),
            ttl: Some("30d".into()),
            name: Some("ci".into()),
        }
    }

    #[test]
    fn a_minted_token_carries_its_id_256_random_bits_and_is_stored_only_as_its_digest() {
        let m = mint(&request(&[Scope::Read, Scope::Ingest, Scope::Read]), 1_000).unwrap();
        let t = &m.token;
        assert!(t.token.starts_with("ank_"), "{}", t.token);
        assert_eq!(id_of(&t.token), Some(t.info.id.as_str()));
        assert_eq!(t.token.len(), 4 + 16 + 1 + 64);
        assert_eq!(t.info.scopes, [Scope::Ingest, Scope::Read]);
        assert_eq!(t.info.expires_at_ms, 1_000 + 30 * 86_400_000);
        assert_eq!(m.digest, digest(&t.token));
        assert_eq!(m.digest.len(), 64);
        assert!(!m.digest.contains(&t.token[21..]));
        let other = mint(&request(&[Scope::Read]), 1_000).unwrap();
        assert_ne!(other.token.token, t.token);
        assert_ne!(other.token.info.id, t.info.id);
    }

    #[test]
    fn malformed_tokens_have_no_id() {
        let good = format!("ank_{}_{}", "0".repeat(16), "a".repeat(64));
        assert_eq!(id_of(&good), Some("0000000000000000"));
        for bad in [
            "",
            "ank_",
            "ank_0000000000000000",
            &format!("ank_{}_{}", "0".repeat(15), "a".repeat(64)),
            &format!("ank_{}_{}", "0".repeat(16), "a".repeat(63)),
            &format!("ank_{}_{}", "0".repeat(16), "A".repeat(64)),
            &format!("ANK_{}_{}", "0".repeat(16), "a".repeat(64)),
            &format!("ank_{}_{}x", "0".repeat(16), "a".repeat(64)),
        ] {
            assert_eq!(id_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn bad_requests_are_refused_naming_the_field() {
        let mut r = request(&[]);
        assert!(mint(&r, 0).unwrap_err().to_string().contains("scopes"));
        r.scopes = vec![Scope::Read];
        r.tenant = "a b".into();
        assert!(mint(&r, 0).unwrap_err().to_string().contains("tenant"));
        r.tenant = "acme".into();
        for (ttl, says) in [("0s", "longer than 0"), ("soon", "30d"), ("3651d", "3650d")] {
            r.ttl = Some(ttl.into());
            let e = mint(&r, 0).unwrap_err().to_string();
            assert!(e.contains("ttl") && e.contains(says), "{ttl}: {e}");
        }
        r.ttl = None;
        assert_eq!(
            mint(&r, 0).unwrap().token.info.expires_at_ms,
            TTL_DEFAULT_MS as i64
        );
        r.name = Some("evil\u{1b}[31m".into());
        assert!(mint(&r, 0).unwrap_err().to_string().contains("name"));
        r.name = Some("x".repeat(101));
        assert!(mint(&r, 0).unwrap_err().to_string().contains("name"));
    }

    #[test]
    fn scopes_parse_from_a_comma_list_and_unknown_words_are_named() {
        assert_eq!(
            parse_scopes("replay, ingest,ingest").unwrap(),
            [Scope::Ingest, Scope::Replay]
        );
        assert!(parse_scopes("read,admin")
            .unwrap_err()
            .contains("\"admin\""));
        assert!(parse_scopes(" , ").unwrap_err().contains("no scopes"));
        assert_eq!(scopes_csv(&Scope::ALL), "ingest,read,sources,replay");
    }
}
