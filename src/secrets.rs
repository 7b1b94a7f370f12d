//! Secret references in sink options: `${env:NAME}` and `${file:/path}`, scoped per tenant.
//!
//! A sink option may name a secret instead of holding it, so the secret never reaches Redis.
//! Whoever can write a tenant's sources chooses the reference, so a reference reaches only what
//! the operator set aside for that tenant (`docs/security.md`, `docs/operations.md` "Secret
//! namespaces"):
//! - `${env:NAME}` only for names in the tenant's namespace, `<secrets.env_prefix><T>__…`
//!   ([`env_namespace`]), and the names the operator granted it in `[tenants.<id>]
//!   shared_secrets`; never the worker's own settings (`ANKUSA_ADMIN__TOKEN`) nor the cloud
//!   SDKs' (`AWS_*`);
//! - `${file:/path}` only for files under `<secrets.file_dir>/<tenant>/` after following
//!   symlinks, at most [`FILE_MAX_BYTES`], one trailing newline trimmed; off while
//!   `secrets.file_dir` is unset (the default).
//!
//! A policy resolves for one tenant ([`SecretPolicy::for_tenant`]); without one every reference
//! is refused. [`SecretPolicy::check`] refuses a reference outside the namespace at
//! `source put` (decided from the name alone, never from whether it is set);
//! [`SecretPolicy::resolve`] applies the same rules again at attempt time (a spec written by
//! other means is never trusted), and answers a name it may not read exactly as one that is
//! not set, so a tenant cannot probe for other tenants' secrets. Errors name the reference,
//! never a resolved value.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Why a secret reference could not be checked or resolved: malformed, outside the tenant's
/// namespace, not set, or a file of the tenant's own that cannot be used. The text names the
/// reference, never a resolved value. An attempt that meets one fails with the
/// [`crate::sinks::ErrorKind::Secret`] kind; where only a message is wanted (validation,
/// `source put`) it converts into its text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SecretError(String);

impl From<SecretError> for String {
    fn from(e: SecretError) -> String {
        e.0
    }
}

/// The default `secrets.env_prefix`.
pub const DEFAULT_ENV_PREFIX: &str = "ANKUSA_SECRET_";

/// Largest secret file read by a `${file:…}` reference, bytes.
pub const FILE_MAX_BYTES: u64 = 64 * 1024;

/// Variable prefixes no `secrets.env_prefix` may reach: the worker's own settings and the
/// cloud SDKs' credentials. `ANKUSA_SECRET_…` is the one allowed prefix under `ANKUSA_`.
const RESERVED_ENV_PREFIXES: [&str; 4] = ["ANKUSA_", "AWS_", "GOOGLE_", "AZURE_"];

/// Where Kubernetes, EKS (IRSA) and Azure workload identity mount the pod's credentials
/// (under `/var/run`, which is `/run` on every distribution we know: both are checked).
const TOKEN_MOUNTS: [&str; 4] = [
    "/run/secrets/kubernetes.io",
    "/run/secrets/eks.amazonaws.com",
    "/run/secrets/azure",
    "/run/secrets/tokens",
];

/// Names of directories that hold such mounts, wherever `secrets.file_dir` is.
const TOKEN_DIR_NAMES: [&str; 4] = [
    "kubernetes.io",
    "eks.amazonaws.com",
    "azure",
    "serviceaccount",
];

/// Environment variables naming the cloud SDKs' credential files: a `secrets.file_dir`
/// holding one of them is refused as well.
const TOKEN_FILE_VARS: [&str; 5] = [
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AZURE_FEDERATED_TOKEN_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// Why `p` is not an acceptable `secrets.env_prefix`, or `None`: it must match `[A-Z0-9_]+`,
/// and neither lie under nor be the start of `ANKUSA_` (except `ANKUSA_SECRET_…`), `AWS_`,
/// `GOOGLE_` or `AZURE_`, so no tenant namespace holds the worker's own settings or a cloud
/// SDK's credentials (a prefix `A` would put tenant `nkusa_admin`'s namespace on
/// `ANKUSA_ADMIN__TOKEN`).
pub fn env_prefix_problem(p: &str) -> Option<String> {
    if p.is_empty()
        || !p
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Some("must match [A-Z0-9_]+".into());
    }
    if p.starts_with(DEFAULT_ENV_PREFIX) {
        return None;
    }
    RESERVED_ENV_PREFIXES
        .iter()
        .find(|r| p.starts_with(*r) || r.starts_with(p))
        .map(|r| {
            format!(
                "{p:?} reaches the variables under {r} (the worker's own settings or a cloud \
                 SDK's credentials): use {DEFAULT_ENV_PREFIX} or a prefix outside ANKUSA_, AWS_, \
                 GOOGLE_ and AZURE_"
            )
        })
}

/// Whether `p` is an acceptable `secrets.env_prefix` ([`env_prefix_problem`]).
pub fn valid_env_prefix(p: &str) -> bool {
    env_prefix_problem(p).is_none()
}

/// The tenant part of an env namespace: a tenant id of lowercase letters and digits with
/// single `_` between them (`acme`, `acme_eu`) is written in capitals (`ACME`, `ACME_EU`);
/// any other id (capitals, `.`, `-`, `__`, a `_` at either end) is `_X` followed by the id
/// with `a-z` in capitals, digits as they are, and every other character as `_` and its
/// two hex digits (`acme-eu` → `_XACME_2DEU`, `Acme` → `_X_41CME`). No two ids share a form:
/// the plain forms are the ids themselves, the `_X` forms decode back to their id, and only
/// `_X` forms start with `_`. No form holds `__` or ends with `_`, so `__` ends the tenant
/// part of a name unambiguously ([`env_namespace`]).
pub fn env_tenant_part(tenant: &str) -> String {
    let plain = !tenant.is_empty()
        && tenant.split('_').all(|w| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if plain {
        return tenant.to_ascii_uppercase();
    }
    let mut out = String::from("_X");
    for b in tenant.bytes() {
        match b {
            b'a'..=b'z' => out.push(b.to_ascii_uppercase() as char),
            b'0'..=b'9' => out.push(b as char),
            _ => out.push_str(&format!("_{b:02X}")),
        }
    }
    out
}

/// The names `${env:…}` may use for `tenant`: those starting with
/// `<prefix><tenant part>__` ([`env_tenant_part`]) and longer than that, e.g.
/// `ANKUSA_SECRET_ACME__ORDERS_TOKEN` for tenant `acme`. A name lies in at most one tenant's
/// namespace: the first `__` after the prefix ends the tenant part.
pub fn env_namespace(prefix: &str, tenant: &str) -> String {
    format!("{prefix}{}__", env_tenant_part(tenant))
}

/// The directory `${file:…}` may read for `tenant`: `<file_dir>/<tenant>`; `None` while file
/// references are off (no `file_dir`) or for the ids `.` and `..`, which name no directory of
/// their own.
pub fn file_namespace(file_dir: &str, tenant: &str) -> Option<PathBuf> {
    let dir = file_dir.trim_end_matches('/');
    (!dir.is_empty() && tenant != "." && tenant != ".." && !tenant.is_empty())
        .then(|| Path::new(dir).join(tenant))
}

/// Why `dir` cannot be `secrets.file_dir`, or `None`. It must be an absolute directory other
/// than `/`, and hold no credential of the platform: not a Kubernetes, EKS or Azure token
/// mount, nor a directory above or below one (checked on the path as written and, when it
/// exists, on the real path, among its entries two levels down, and against the files the
/// cloud SDK variables of `env` name).
pub fn file_dir_problem(dir: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if dir.is_empty() {
        return None;
    }
    let p = Path::new(dir);
    let plain = p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain || p.parent().is_none() {
        return Some(
            "must be empty (no file references) or an absolute directory other than / \
             (without . or ..)"
                .into(),
        );
    }
    let mut paths = vec![p.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(p) {
        paths.push(real);
    }
    for path in &paths {
        let path = run_spelling(path);
        for mount in TOKEN_MOUNTS {
            let m = Path::new(mount);
            if path.starts_with(m) || m.starts_with(&path) {
                return Some(token_refusal(dir, mount));
            }
        }
        if let Some(c) = path.components().find(|c| {
            matches!(c, Component::Normal(n) if TOKEN_DIR_NAMES.iter().any(|t| n.to_str() == Some(*t)))
        }) {
            let name = c.as_os_str().to_string_lossy();
            return Some(token_refusal(dir, &name));
        }
        for var in TOKEN_FILE_VARS {
            if let Some(f) = env(var).filter(|f| f.starts_with('/')) {
                let f = run_spelling(Path::new(&f));
                if f.starts_with(&path) {
                    return Some(token_refusal(dir, var));
                }
            }
        }
    }
    if let Some(found) = token_dir_below(p, 2) {
        return Some(token_refusal(dir, &found.to_string_lossy()));
    }
    None
}

fn token_refusal(dir: &str, what: &str) -> String {
    format!(
        "{dir:?} holds or lies in a platform credential mount ({what}): tenants could read the \
         pod's own tokens; use a directory of its own, e.g. /etc/ankusa/tenant-secrets"
    )
}

/// `path` with a leading `/var/run` written `/run`.
fn run_spelling(path: &Path) -> PathBuf {
    match path.strip_prefix("/var/run") {
        Ok(rest) => Path::new("/run").join(rest),
        Err(_) => path.to_path_buf(),
    }
}

/// The first entry of `dir`, at most `depth` levels down, named like a token mount (a bounded
/// walk: the first 1 000 entries of each directory).
fn token_dir_below(dir: &Path, depth: u32) -> Option<PathBuf> {
    if depth == 0 {
        return None;
    }
    let entries = std::fs::read_dir(dir).ok()?;
    for e in entries.flatten().take(1_000) {
        let name = e.file_name();
        if TOKEN_DIR_NAMES.iter().any(|t| name == *t) {
            return Some(e.path());
        }
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            if let Some(found) = token_dir_below(&e.path(), depth - 1) {
                return Some(found);
            }
        }
    }
    None
}

/// One reference found in a string.
enum Ref<'a> {
    Env(&'a str),
    File(&'a str),
}

/// Which secret references resolve, from `[secrets]` and `[tenants.<id>] shared_secrets`,
/// for one tenant once bound with [`SecretPolicy::for_tenant`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretPolicy {
    /// The prefix of every tenant's env namespace (`secrets.env_prefix`).
    pub env_prefix: String,
    /// Each tenant's files lie under `<file_dir>/<tenant>/`; empty: file references refused.
    pub file_dir: String,
    /// Variable names the operator granted each tenant beyond its namespace
    /// (`[tenants.<id>] shared_secrets`), by tenant id.
    pub shared: Arc<BTreeMap<String, Vec<String>>>,
    /// The tenant whose references this policy resolves; `None`: none resolves.
    pub tenant: Option<String>,
}

impl Default for SecretPolicy {
    fn default() -> Self {
        SecretPolicy {
            env_prefix: DEFAULT_ENV_PREFIX.into(),
            file_dir: String::new(),
            shared: Arc::default(),
            tenant: None,
        }
    }
}

impl SecretPolicy {
    /// The policy of `secrets.env_prefix`, `secrets.file_dir` (empty: file references off)
    /// and the names each tenant was granted (`[tenants.<id>] shared_secrets`), for no
    /// tenant yet ([`SecretPolicy::for_tenant`]).
    pub fn new(
        env_prefix: &str,
        file_dir: &str,
        shared: BTreeMap<String, Vec<String>>,
    ) -> SecretPolicy {
        SecretPolicy {
            env_prefix: env_prefix.to_string(),
            file_dir: file_dir.trim_end_matches('/').to_string(),
            shared: Arc::new(shared),
            tenant: None,
        }
    }

    /// This policy resolving `tenant`'s references.
    pub fn for_tenant(&self, tenant: &str) -> SecretPolicy {
        SecretPolicy {
            tenant: Some(tenant.to_string()),
            ..self.clone()
        }
    }

    /// Check every reference in `s` without reading any secret (at `source put`): well
    /// formed, an env name in the tenant's namespace or granted to it, a file path under its
    /// directory. Decided from the reference alone: a name set in the environment and one
    /// that is not get the same answer.
    pub fn check(&self, s: &str) -> Result<(), SecretError> {
        walk(s, |r| self.allowed(&r).map(|()| String::new()))
            .map(drop)
            .map_err(SecretError)
    }

    /// Check only that every reference in `s` is well formed (`${env:NAME}` or
    /// `${file:/path}`, terminated): what may fail an attempt at once, as retrying cannot fix
    /// it.
    pub fn check_form(&self, s: &str) -> Result<(), SecretError> {
        walk(s, |_| Ok(String::new()))
            .map(drop)
            .map_err(SecretError)
    }

    /// Replace every reference in `s` with its secret (at attempt time). A reference the
    /// tenant may not read and one that is not set (or not readable) get the same error,
    /// naming the reference; no error holds a secret.
    pub fn resolve(&self, s: &str) -> Result<String, SecretError> {
        let resolved = walk(s, |r| {
            let unavailable = || self.unavailable(&r);
            if self.allowed(&r).is_err() {
                return Err(unavailable());
            }
            match r {
                Ref::Env(name) => std::env::var(name).map_err(|_| unavailable()),
                Ref::File(path) => self.read_file(path).map_err(|why| match why {
                    // The tenant's own file exists but cannot be used: saying why helps and
                    // tells nothing about another tenant.
                    Some(why) => format!("{}: {why}", reference(&r)),
                    None => unavailable(),
                }),
            }
        });
        resolved.map_err(SecretError)
    }

    /// The one answer for a reference that cannot be read: refused or not set alike.
    fn unavailable(&self, r: &Ref<'_>) -> String {
        let tenant = self.tenant.as_deref().unwrap_or("");
        match r {
            Ref::Env(_) => format!(
                "secret reference {} is not set for tenant {tenant:?} in the worker's environment",
                reference(r)
            ),
            Ref::File(_) => format!(
                "secret reference {} is not a readable file for tenant {tenant:?}",
                reference(r)
            ),
        }
    }

    fn allowed(&self, r: &Ref<'_>) -> Result<(), String> {
        let Some(tenant) = self.tenant.as_deref() else {
            return Err(format!(
                "secret reference {}: references resolve only for a tenant's source",
                reference(r)
            ));
        };
        match *r {
            Ref::Env(name) => {
                let ok_name = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                let ns = env_namespace(&self.env_prefix, tenant);
                let own = name.len() > ns.len() && name.starts_with(&ns);
                let granted = self
                    .shared
                    .get(tenant)
                    .is_some_and(|names| names.iter().any(|n| n == name));
                if !ok_name || !(own || granted) {
                    return Err(format!(
                        "secret reference ${{env:{name}}} is refused: tenant {tenant:?} may use \
                         names starting with {ns} (secrets.env_prefix, then the tenant's part) and \
                         the names of tenants.{tenant}.shared_secrets"
                    ));
                }
                Ok(())
            }
            Ref::File(path) => {
                let p = Path::new(path);
                let plain = p.is_absolute()
                    && p.components()
                        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
                let dir = file_namespace(&self.file_dir, tenant);
                let under = dir.as_deref().is_some_and(|d| p.starts_with(d) && p != d);
                if !plain || !under {
                    return Err(match dir {
                        None => format!(
                            "secret reference ${{file:{path}}} is refused: file references are \
                             off (secrets.file_dir is not set)"
                        ),
                        Some(d) => format!(
                            "secret reference ${{file:{path}}} is refused: tenant {tenant:?} may \
                             read only files under {}/ (secrets.file_dir, then the tenant id)",
                            d.display()
                        ),
                    });
                }
                Ok(())
            }
        }
    }

    /// Read an allowed `${file:…}`: `Err(None)` when it is missing, leads outside the tenant's
    /// directory or cannot be opened (all answered alike); `Err(Some(why))` for a file of
    /// the tenant's own that cannot be used (too large, not UTF-8).
    fn read_file(&self, path: &str) -> Result<String, Option<String>> {
        let tenant = self.tenant.as_deref().unwrap_or("");
        let dir = file_namespace(&self.file_dir, tenant).ok_or(None)?;
        // Symlinks are followed before the directory check, so a link cannot lead out.
        let real = std::fs::canonicalize(path).map_err(|_| None)?;
        let dir = std::fs::canonicalize(dir).map_err(|_| None)?;
        if !real.starts_with(&dir) {
            return Err(None);
        }
        let f = std::fs::File::open(&real).map_err(|_| None)?;
        let mut buf = Vec::new();
        use std::io::Read;
        f.take(FILE_MAX_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Some(e.kind().to_string()))?;
        if buf.len() as u64 > FILE_MAX_BYTES {
            return Err(Some(format!("larger than {FILE_MAX_BYTES} bytes")));
        }
        let mut s = String::from_utf8(buf).map_err(|_| Some("not UTF-8".to_string()))?;
        if s.ends_with('\n') {
            s.pop();
            if s.ends_with('\r') {
                s.pop();
            }
        }
        Ok(s)
    }
}

/// A reference as written: `${env:NAME}` / `${file:/path}`.
fn reference(r: &Ref<'_>) -> String {
    match r {
        Ref::Env(name) => format!("${{env:{name}}}"),
        Ref::File(path) => format!("${{file:{path}}}"),
    }
}
/// Replace `${env:…}` / `${file:…}` references in `s` with what `each` returns for them.
fn walk(
    s: &str,
    mut each: impl FnMut(Ref<'_>) -> Result<String, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("unterminated ${…} secret reference".into());
        };
        let inner = &after[..end];
        let r = if let Some(name) = inner.strip_prefix("env:") {
            Ref::Env(name)
        } else if let Some(path) = inner.strip_prefix("file:") {
            Ref::File(path)
        } else {
            return Err(format!(
                "${{{inner}}}: a secret reference is ${{env:NAME}} or ${{file:/path}}"
            ));
        };
        out.push_str(&each(r)?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether `s` holds a secret reference (its final value is only known at attempt time).
pub fn has_reference(s: &str) -> bool {
    s.contains("${env:") || s.contains("${file:")
}

/// Resolve `${env:NAME}` references of the operator's own config file (e.g. `[claim_check]`),
/// which no tenant writes: any variable of the worker's environment.
pub fn resolve_operator(s: &str) -> Result<String, SecretError> {
    let resolved = walk(s, |r| match r {
        Ref::Env(name) => std::env::var(name).map_err(|_| {
            format!("secret reference ${{env:{name}}} is not set in the worker's environment")
        }),
        Ref::File(path) => std::fs::read_to_string(path)
            .map(|v| v.trim_end_matches(['\r', '\n']).to_string())
            .map_err(|e| format!("secret reference ${{file:{path}}}: {}", e.kind())),
    });
    resolved.map_err(SecretError)
}

/// A URL fit for a stored error or a log line: only its origin (`scheme://host:port`), as
/// userinfo, path and query may hold resolved secrets. Text that is no URL is `[url]`.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) if u.has_host() => u.origin().ascii_serialization(),
        _ => "[url]".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &str, tenant: &str) -> SecretPolicy {
        SecretPolicy {
            file_dir: dir.into(),
            ..SecretPolicy::default()
        }
        .for_tenant(tenant)
    }

    #[test]
    fn env_references_resolve_only_in_the_tenants_namespace_and_refused_ones_read_as_unset() {
        std::env::set_var("ANKUSA_SECRET_UNIT__X", "s3cret");
        std::env::set_var("ANKUSA_SECRET_OTHER__X", "theirs");
        std::env::set_var("ANKUSA_UNIT_ADMIN__TOKEN", "admin");
        let p = policy("", "unit");
        assert_eq!(
            p.resolve("Bearer ${env:ANKUSA_SECRET_UNIT__X}!").unwrap(),
            "Bearer s3cret!"
        );
        assert_eq!(p.resolve("plain").unwrap(), "plain");
        let unset = p
            .resolve("${env:ANKUSA_SECRET_UNIT__UNSET}")
            .unwrap_err()
            .to_string();
        let theirs = p
            .resolve("${env:ANKUSA_SECRET_OTHER__X}")
            .unwrap_err()
            .to_string();
        assert_eq!(
            unset.replace("UNIT__UNSET", "NAME"),
            theirs.replace("OTHER__X", "NAME"),
            "a refused name answers as an unset one"
        );
        for bad in [
            "${env:ANKUSA_SECRET_OTHER__X}",
            "${env:ANKUSA_UNIT_ADMIN__TOKEN}",
            "${env:HOME}",
            "${env:}",
            "${env:ANKUSA_SECRET_UNIT__}",
            "${env:ANKUSA_SECRET_UNIT_X}",
        ] {
            let e = p.check(bad).unwrap_err().to_string();
            assert!(e.contains("ANKUSA_SECRET_UNIT__"), "{e}");
            assert!(!e.contains("theirs") && !e.contains("admin\""), "{e}");
        }
        assert!(p.check("${env:ANKUSA_SECRET_UNIT__ANY}").is_ok());
        assert!(p.check("${vault:x}").is_err());
        assert!(p.check("${env:ANKUSA_SECRET_UNIT__X").is_err());
        // Without a tenant, nothing resolves.
        let none = SecretPolicy::default();
        assert!(none.check("${env:ANKUSA_SECRET_UNIT__X}").is_err());
        assert!(none.resolve("${env:ANKUSA_SECRET_UNIT__X}").is_err());
    }

    #[test]
    fn shared_secrets_resolve_only_for_the_tenants_they_are_granted_to() {
        std::env::set_var("ANKUSA_SECRET_SHARED_SLACK", "hook");
        let mut grants = BTreeMap::new();
        grants.insert(
            "acme".to_string(),
            vec!["ANKUSA_SECRET_SHARED_SLACK".to_string()],
        );
        let p = SecretPolicy {
            shared: Arc::new(grants),
            ..SecretPolicy::default()
        };
        let r = "${env:ANKUSA_SECRET_SHARED_SLACK}";
        assert_eq!(p.for_tenant("acme").resolve(r).unwrap(), "hook");
        assert!(p.for_tenant("beta").check(r).is_err());
        assert!(p.for_tenant("beta").resolve(r).is_err());
    }

    #[test]
    fn tenant_parts_are_distinct_for_distinct_ids_and_never_hold_a_double_underscore() {
        assert_eq!(env_tenant_part("acme"), "ACME");
        assert_eq!(env_tenant_part("acme_eu2"), "ACME_EU2");
        assert_eq!(env_tenant_part("acme-eu"), "_XACME_2DEU");
        assert_eq!(env_tenant_part("Acme"), "_X_41CME");
        assert_eq!(
            env_namespace("ANKUSA_SECRET_", "acme"),
            "ANKUSA_SECRET_ACME__"
        );
        let ids = [
            "a", "A", "a_b", "a-b", "a.b", "a__b", "_a", "a_", "ab", "a_b_c", "a_bc", "ab_c", "x",
            "_x", "-", ".", "..", "_", "__", "0", "a0", "a_0", "xa", "_xa", "a_2db", "a_5fb",
            "A_B", "a-B",
        ];
        let mut seen = std::collections::HashMap::new();
        for id in ids {
            let part = env_tenant_part(id);
            assert!(!part.contains("__") && !part.ends_with('_'), "{id}: {part}");
            assert!(part
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'));
            if let Some(other) = seen.insert(part.clone(), id) {
                panic!("{id} and {other} share {part}");
            }
        }
        // No name lies in two namespaces: the first `__` after the prefix ends the part.
        for a in ids {
            for b in ids {
                let name = format!("{}K", env_namespace("P_", a));
                let in_b = name.starts_with(&env_namespace("P_", b));
                assert_eq!(in_b, a == b, "{name} in the namespaces of {a} and {b}");
            }
        }
    }

    #[test]
    fn file_references_stay_under_the_tenants_directory_are_bounded_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap().to_string();
        std::fs::create_dir(dir.path().join("acme")).unwrap();
        std::fs::create_dir(dir.path().join("beta")).unwrap();
        std::fs::write(dir.path().join("acme/tok"), "abc\n").unwrap();
        std::fs::write(dir.path().join("beta/tok"), "theirs").unwrap();
        std::fs::write(
            dir.path().join("acme/big"),
            vec![b'a'; FILE_MAX_BYTES as usize + 1],
        )
        .unwrap();
        std::os::unix::fs::symlink(dir.path().join("beta/tok"), dir.path().join("acme/out"))
            .unwrap();
        let p = policy(&d, "acme");
        assert_eq!(
            p.resolve(&format!("${{file:{d}/acme/tok}}")).unwrap(),
            "abc"
        );
        assert!(p
            .resolve(&format!("${{file:{d}/acme/big}}"))
            .unwrap_err()
            .to_string()
            .contains("larger"));
        let out = p
            .resolve(&format!("${{file:{d}/acme/out}}"))
            .unwrap_err()
            .to_string();
        let missing = p
            .resolve(&format!("${{file:{d}/acme/nope}}"))
            .unwrap_err()
            .to_string();
        let theirs = p
            .resolve(&format!("${{file:{d}/beta/tok}}"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            out.replace("acme/out", "X"),
            missing.replace("acme/nope", "X")
        );
        assert_eq!(
            theirs.replace("beta/tok", "X"),
            missing.replace("acme/nope", "X")
        );
        assert!(p.check(&format!("${{file:{d}/beta/tok}}")).is_err());
        assert!(p.check(&format!("${{file:{d}/acme/../beta/tok}}")).is_err());
        assert!(p.check(&format!("${{file:{d}/acme}}")).is_err());
        assert!(p.check("${file:/etc/passwd}").is_err());
        assert!(policy(&d, ".")
            .check(&format!("${{file:{d}/./beta/tok}}"))
            .is_err());
        assert!(policy("", "acme")
            .check(&format!("${{file:{d}/acme/tok}}"))
            .unwrap_err()
            .to_string()
            .contains("secrets.file_dir is not set"));
    }

    #[test]
    fn prefixes_cannot_expose_the_workers_own_settings_or_cloud_credentials() {
        assert!(valid_env_prefix("ANKUSA_SECRET_"));
        assert!(valid_env_prefix("ANKUSA_SECRET_HOOKS_"));
        assert!(valid_env_prefix("ACME_HOOKS_"));
        for bad in [
            "ANKUSA_",
            "ANKUSA",
            "A",
            "AN",
            "ANKUSA_ADMIN",
            "AWS_",
            "AWS",
            "AWS_X_",
            "GOOGLE_",
            "GOOGLE",
            "AZURE_",
            "AZ",
            "",
            "lower_",
        ] {
            assert!(!valid_env_prefix(bad), "{bad}");
        }
    }

    #[test]
    fn a_file_dir_holding_or_inside_a_token_mount_is_refused() {
        let no_env = |_: &str| None;
        for bad in [
            "/run/secrets",
            "/var/run/secrets",
            "/run",
            "/var/run",
            "/var/run/secrets/kubernetes.io/serviceaccount",
            "/run/secrets/eks.amazonaws.com",
            "/var/run/secrets/azure/tokens",
            "/srv/x/serviceaccount",
            "/",
            "relative",
            "/etc/../run",
        ] {
            assert!(file_dir_problem(bad, &no_env).is_some(), "{bad}");
        }
        assert!(file_dir_problem("", &no_env).is_none());
        assert!(file_dir_problem("/etc/ankusa/tenant-secrets", &no_env).is_none());
        let aws = |v: &str| {
            (v == "AWS_WEB_IDENTITY_TOKEN_FILE")
                .then(|| "/etc/ankusa/tenant-secrets/aws/token".into())
        };
        assert!(file_dir_problem("/etc/ankusa/tenant-secrets", &aws).is_some());
        // On disk: a mount two levels below, or a symlink into one.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("acme/kubernetes.io")).unwrap();
        let d = dir.path().to_str().unwrap();
        assert!(file_dir_problem(d, &no_env)
            .unwrap()
            .contains("kubernetes.io"));
        let clean = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(clean.path().join("acme")).unwrap();
        assert!(file_dir_problem(clean.path().to_str().unwrap(), &no_env).is_none());
    }

    #[test]
    fn redacted_urls_lose_userinfo_and_query() {
        assert_eq!(
            redact_url("https://u:p@example.com:8443/h/s3cret?token=abc#f"),
            "https://example.com:8443"
        );
        assert_eq!(redact_url("not a url"), "[url]");
    }
}
