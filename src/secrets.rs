//! Secret references in sink options: `${env:NAME}` and `${file:/path}` (R19).
//!
//! A sink option may name a secret instead of holding it, so the secret never reaches Redis.
//! Whoever can write a source chooses the reference, so a reference may only reach what the
//! operator set aside for tenants (`docs/security.md`):
//! - `${env:NAME}` only for names under `secrets.env_prefix` (default `ANKUSA_SECRET_`), never
//!   the worker's own settings such as `ANKUSA_ADMIN__TOKEN` or `ANKUSA_REDIS__URL`;
//! - `${file:/path}` only for files under `secrets.file_dir` (default `/run/secrets`) after
//!   following symlinks, at most [`FILE_MAX_BYTES`], one trailing newline trimmed.
//!
//! [`SecretPolicy::check`] refuses a bad reference at `source put`; [`SecretPolicy::resolve`]
//! applies the same rules again at attempt time (a spec written by other means is never
//! trusted). Errors name the reference, never a resolved value.

use crate::config::SecretsConfig;
use std::path::{Component, Path};

/// The default `secrets.env_prefix`.
pub const DEFAULT_ENV_PREFIX: &str = "ANKUSA_SECRET_";

/// Largest secret file read by a `${file:…}` reference, bytes.
pub const FILE_MAX_BYTES: u64 = 64 * 1024;

/// Whether `p` is an acceptable `secrets.env_prefix`: `[A-Z0-9_]+`, and under `ANKUSA_` only
/// `ANKUSA_SECRET_…` (so no prefix exposes the worker's own `ANKUSA_*` settings).
pub fn valid_env_prefix(p: &str) -> bool {
    !p.is_empty()
        && p.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && (!p.starts_with("ANKUSA_") || p.starts_with(DEFAULT_ENV_PREFIX))
}

/// One reference found in a string.
enum Ref<'a> {
    Env(&'a str),
    File(&'a str),
}

/// Which secret references resolve, from `[secrets]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretPolicy {
    /// `${env:NAME}` names must start with this.
    pub env_prefix: String,
    /// `${file:/path}` paths must lie under this directory; empty: file references refused.
    pub file_dir: String,
}

impl Default for SecretPolicy {
    fn default() -> Self {
        SecretPolicy::from_config(&SecretsConfig::default())
    }
}

impl SecretPolicy {
    /// The policy of a `[secrets]` section.
    pub fn from_config(c: &SecretsConfig) -> SecretPolicy {
        SecretPolicy {
            env_prefix: c.env_prefix.clone(),
            file_dir: c.file_dir.trim_end_matches('/').to_string(),
        }
    }

    /// Check every reference in `s` without reading any secret (at `source put`): well
    /// formed, an env name under the prefix, a file path under the directory.
    pub fn check(&self, s: &str) -> Result<(), String> {
        walk(s, |r| self.allowed(&r).map(|()| String::new())).map(drop)
    }

    /// Replace every reference in `s` with its secret (at attempt time). Errors name the
    /// reference and why it cannot be resolved; they never hold a secret.
    pub fn resolve(&self, s: &str) -> Result<String, String> {
        walk(s, |r| {
            self.allowed(&r)?;
            match r {
                Ref::Env(name) => std::env::var(name).map_err(|_| {
                    format!(
                        "secret reference ${{env:{name}}} is not set in the worker's environment"
                    )
                }),
                Ref::File(path) => self.read_file(path),
            }
        })
    }

    fn allowed(&self, r: &Ref<'_>) -> Result<(), String> {
        match *r {
            Ref::Env(name) => {
                let ok_name = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !ok_name || !name.starts_with(&self.env_prefix) {
                    return Err(format!(
                        "secret reference ${{env:{name}}} is refused: only names starting with {} \
                         (secrets.env_prefix) resolve",
                        self.env_prefix
                    ));
                }
                Ok(())
            }
            Ref::File(path) => {
                let p = Path::new(path);
                let plain = p.is_absolute()
                    && p.components()
                        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
                if self.file_dir.is_empty() || !plain || !p.starts_with(&self.file_dir) {
                    return Err(format!(
                        "secret reference ${{file:{path}}} is refused: only absolute paths under \
                         {:?} (secrets.file_dir) resolve",
                        self.file_dir
                    ));
                }
                Ok(())
            }
        }
    }

    fn read_file(&self, path: &str) -> Result<String, String> {
        let what = |why: String| format!("secret reference ${{file:{path}}}: {why}");
        // Symlinks are followed before the directory check, so a link cannot lead out.
        let real = std::fs::canonicalize(path).map_err(|e| what(e.kind().to_string()))?;
        let dir = std::fs::canonicalize(&self.file_dir).map_err(|e| what(e.kind().to_string()))?;
        if !real.starts_with(&dir) {
            return Err(what(format!(
                "leads outside {:?} (secrets.file_dir)",
                self.file_dir
            )));
        }
        let f = std::fs::File::open(&real).map_err(|e| what(e.kind().to_string()))?;
        let mut buf = Vec::new();
        use std::io::Read;
        f.take(FILE_MAX_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(|e| what(e.kind().to_string()))?;
        if buf.len() as u64 > FILE_MAX_BYTES {
            return Err(what(format!("larger than {FILE_MAX_BYTES} bytes")));
        }
        let mut s = String::from_utf8(buf).map_err(|_| what("not UTF-8".into()))?;
        if s.ends_with('\n') {
            s.pop();
            if s.ends_with('\r') {
                s.pop();
            }
        }
        Ok(s)
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
pub fn resolve_operator(s: &str) -> Result<String, String> {
    walk(s, |r| match r {
        Ref::Env(name) => std::env::var(name).map_err(|_| {
            format!("secret reference ${{env:{name}}} is not set in the worker's environment")
        }),
        Ref::File(path) => std::fs::read_to_string(path)
            .map(|v| v.trim_end_matches(['\r', '\n']).to_string())
            .map_err(|e| format!("secret reference ${{file:{path}}}: {}", e.kind())),
    })
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

    fn policy(dir: &str) -> SecretPolicy {
        SecretPolicy {
            env_prefix: DEFAULT_ENV_PREFIX.into(),
            file_dir: dir.into(),
        }
    }

    #[test]
    fn env_references_resolve_only_under_the_prefix_and_missing_ones_are_named() {
        std::env::set_var("ANKUSA_SECRET_UNIT_X", "s3cret");
        std::env::set_var("ANKUSA_UNIT_ADMIN__TOKEN", "admin");
        let p = policy("");
        assert_eq!(
            p.resolve("Bearer ${env:ANKUSA_SECRET_UNIT_X}!").unwrap(),
            "Bearer s3cret!"
        );
        assert_eq!(p.resolve("plain").unwrap(), "plain");
        let e = p.resolve("${env:ANKUSA_SECRET_SURELY_UNSET}").unwrap_err();
        assert!(e.contains("ANKUSA_SECRET_SURELY_UNSET"), "{e}");
        for bad in ["${env:ANKUSA_UNIT_ADMIN__TOKEN}", "${env:HOME}", "${env:}"] {
            let e = p.resolve(bad).unwrap_err();
            assert!(e.contains("secrets.env_prefix"), "{e}");
            assert!(!e.contains("admin\""), "{e}");
            assert!(p.check(bad).is_err());
        }
        assert!(p.check("${env:ANKUSA_SECRET_ANY}").is_ok());
        assert!(p.check("${vault:x}").is_err());
        assert!(p.check("${env:ANKUSA_SECRET_X").is_err());
    }

    #[test]
    fn file_references_stay_under_the_directory_are_bounded_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap().to_string();
        std::fs::write(dir.path().join("tok"), "abc\n").unwrap();
        std::fs::write(
            dir.path().join("big"),
            vec![b'a'; FILE_MAX_BYTES as usize + 1],
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("out")).unwrap();
        let p = policy(&d);
        assert_eq!(p.resolve(&format!("${{file:{d}/tok}}")).unwrap(), "abc");
        assert!(p
            .resolve(&format!("${{file:{d}/big}}"))
            .unwrap_err()
            .contains("larger"));
        assert!(p
            .resolve(&format!("${{file:{d}/out}}"))
            .unwrap_err()
            .contains("outside"));
        assert!(p.check(&format!("${{file:{d}/../etc/passwd}}")).is_err());
        assert!(p.check("${file:/etc/passwd}").is_err());
        assert!(policy("").check(&format!("${{file:{d}/tok}}")).is_err());
    }

    #[test]
    fn prefixes_cannot_expose_the_workers_own_settings() {
        assert!(valid_env_prefix("ANKUSA_SECRET_"));
        assert!(valid_env_prefix("ACME_HOOKS_"));
        assert!(!valid_env_prefix("ANKUSA_"));
        assert!(!valid_env_prefix(""));
        assert!(!valid_env_prefix("lower_"));
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
