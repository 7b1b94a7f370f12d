//! The claim check: bodies too large for a sink are stored once in a blob store and
//! the sink carries a reference instead.
//!
//! Life of a blob:
//! 1. **Check-in, once per hook.** When a scan claims rows of a batching sink whose hook body
//!    is larger than the sink's inline limit and the hook has no reference yet, the
//!    scheduler packs those bodies per tenant and uploads each pack in a background task
//!    (`dispatch::check_in`); the reference (`s3://bucket/key` or `file:///dir/key`) is written
//!    to the hook's hash (field `cc`) in one call fenced by the leader's token (a deposed
//!    leader's check-in writes nothing). Every sink of the hook and every
//!    retry reuses it: a later claim reads `cc` with the hook.
//! 2. **Fallback.** If a pack fails, its rows still run: the first attempt of each hook checks
//!    the body in on its own (`dispatch::check_in`) inside its attempt deadline; the other
//!    attempts of the hook wait for that one. The store client does not retry by itself.
//! 3. **Retention, then delete.** A pointer may still wait on a queue after its hook is
//!    finished (an SQS Extended Client consumer deletes the payload itself), so `settle.lua`
//!    files the `cc` of every hook it deletes (and of hooks a dead-letter purge deleted) in
//!    `blob_retain` for `claim_check.retention_ms`, and returns the references whose retention
//!    is over; the scheduler deletes those blobs in the background
//!    ([`BlobStore::delete_later`]). A delete that fails leaves an orphan blob: give the
//!    bucket a lifecycle rule on the `ankusa/` prefix as a backstop (`docs/sinks.md`).
//!
//! What a sink sends for a checked-in body: SQS uses the Amazon SQS Extended Client pointer
//! for `s3://` references, so standard consumers resolve it; otherwise (and for Pub/Sub) a
//! [`generic_pointer`](crate::sinks::payload::generic_pointer).

use crate::config::ClaimCheckConfig;
use crate::secrets::resolve_operator as resolve_secrets;
use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::sync::Arc;
use tracing::warn;

/// The blob store of claim-checked bodies: a local directory or an S3 bucket
/// (`object_store`), from `[claim_check]`.
#[derive(Clone)]
pub(crate) struct BlobStore {
    store: Arc<dyn ObjectStore>,
    /// `s3://bucket` or `file:///dir`, without a trailing slash.
    root: String,
    /// Key prefix of this instance's blobs, e.g. `ankusa/prod`.
    prefix: String,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStore")
            .field("root", &self.root)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl BlobStore {
    /// Open the store of `cfg` for `instance`. Errors: an unusable URL, an unresolved
    /// secret reference, a directory that cannot be created.
    /// The error's kind is `secret` for a secret reference that cannot be resolved, `other`
    /// for the rest: an attempt that needs the store fails with it.
    pub(crate) fn from_config(
        cfg: &ClaimCheckConfig,
        instance: &str,
    ) -> Result<BlobStore, crate::sinks::ResolveError> {
        let url = resolve_secrets(&cfg.url)?;
        let no_retry = object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        };
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err("claim_check.url: s3:// needs a bucket".into());
            }
            let mut b = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(no_retry);
            let endpoint = resolve_secrets(&cfg.endpoint)?;
            if !endpoint.is_empty() {
                b = b
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_endpoint(endpoint);
            }
            let region = resolve_secrets(&cfg.region)?;
            let region = if !region.is_empty() {
                region
            } else {
                std::env::var("AWS_REGION")
                    .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
                    .unwrap_or_else(|_| "us-east-1".into())
            };
            b = b.with_region(region);
            if !cfg.access_key_id.is_empty() {
                b = b
                    .with_access_key_id(resolve_secrets(&cfg.access_key_id)?)
                    .with_secret_access_key(resolve_secrets(&cfg.secret_access_key)?);
            }
            let store = b.build().map_err(|e| format!("claim_check: {e}"))?;
            let path = path.trim_matches('/');
            Ok(BlobStore {
                store: Arc::new(store),
                root: format!("s3://{bucket}"),
                prefix: join(path, &format!("ankusa/{instance}")),
            })
        } else {
            let dir = match url.strip_prefix("file://") {
                Some(d) => {
                    let dir = std::path::PathBuf::from(d);
                    explicit_dir(&dir)?;
                    dir
                }
                None if url.is_empty() => private_dir(&std::env::temp_dir())?,
                None => return Err(format!("claim_check.url {url:?}: unknown scheme").into()),
            };
            let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                .map_err(|e| format!("claim_check: {e}"))?;
            Ok(BlobStore {
                store: Arc::new(store),
                root: format!("file://{}", dir.display().to_string().trim_end_matches('/')),
                prefix: format!("ankusa/{instance}"),
            })
        }
    }

    /// Store one body; returns its reference. The key is
    /// `<prefix>/<tenant>/<hook id>-<random>`, so two stores of one hook never collide.
    pub(crate) async fn put(&self, tenant: &str, hook: u64, body: Bytes) -> Result<String, String> {
        let key = format!(
            "{}/{tenant}/{hook}-{:016x}",
            self.prefix,
            rand::random::<u64>()
        );
        let size = body.len();
        self.store
            .put(
                &ObjectPath::from(key.as_str()),
                PutPayload::from_bytes(body),
            )
            .await
            .map_err(|e| crate::sinks::truncate(format!("claim check: {e}"), 512))?;
        metrics::counter!("ankusa_claim_check_bytes_total").increment(size as u64);
        Ok(format!("{}/{key}", self.root))
    }

    /// Read a blob back by its reference.
    #[cfg(test)] // only the unit tests call it
    pub(crate) async fn get(&self, url: &str) -> Result<Bytes, String> {
        let path = self.path_of(url)?;
        let r = self.store.get(&path).await.map_err(|e| e.to_string())?;
        r.bytes().await.map_err(|e| e.to_string())
    }

    /// Delete a blob by its reference; a reference to another store is refused.
    pub(crate) async fn delete(&self, url: &str) -> Result<(), String> {
        let path = self.path_of(url)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Delete blobs in a background task (finished hooks); failures are logged.
    pub(crate) fn delete_later(&self, urls: Vec<String>) {
        if urls.is_empty() {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            for url in urls {
                match me.delete(&url).await {
                    Ok(()) => {
                        metrics::counter!("ankusa_claim_check_deletes_total", "result" => "ok")
                            .increment(1)
                    }
                    Err(e) => {
                        metrics::counter!("ankusa_claim_check_deletes_total", "result" => "error")
                            .increment(1);
                        warn!(%url, error = %e, "could not delete a claim-check blob");
                    }
                }
            }
        });
    }

    fn path_of(&self, url: &str) -> Result<ObjectPath, String> {
        let key = url
            .strip_prefix(&self.root)
            .and_then(|k| k.strip_prefix('/'))
            .ok_or_else(|| format!("{url} is not in the claim-check store {}", self.root))?;
        Ok(ObjectPath::from(key))
    }
}

/// This process's effective user id: the owner of a file it creates (no `unsafe` call).
fn own_uid() -> Result<u32, String> {
    use std::os::unix::fs::MetadataExt;
    let probe = tempfile::tempfile().map_err(|e| format!("claim_check: temp file: {e}"))?;
    probe
        .metadata()
        .map(|m| m.uid())
        .map_err(|e| format!("claim_check: temp file: {e}"))
}

/// The default store directory under `base` (the system temp dir, shared by every user):
/// `<base>/ankusa-claim-check-<uid>`, created 0700. One already there must be a real
/// directory (not a symlink) owned by this user; its mode is narrowed to 0700 — bodies are
/// tenants' data and the shared temp dir is readable by everyone.
pub(crate) fn private_dir(base: &std::path::Path) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let uid = own_uid()?;
    let dir = base.join(format!("ankusa-claim-check-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("claim_check: cannot create {}: {e}", dir.display())),
    }
    check_owned(&dir, uid)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("claim_check: cannot chmod 0700 {}: {e}", dir.display()))?;
    Ok(dir)
}

/// An operator's `file://` directory: created 0700 (with its parents) when missing,
/// refused when it is owned by another user. Its mode is the operator's.
fn explicit_dir(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("claim_check: cannot create {}: {e}", dir.display()))?;
    }
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("claim_check: {}: {e}", dir.display()))?;
    check_owned(&dir, own_uid()?)
}

/// `dir` is a directory, not a symlink, owned by `uid`; the error names the directory and
/// says what is wrong.
pub(crate) fn check_owned(dir: &std::path::Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("claim_check: {}: {e}", dir.display()))?;
    if m.file_type().is_symlink() || !m.is_dir() {
        return Err(format!(
            "claim_check: {} is not a directory (a symlink or a file); remove it or set claim_check.url",
            dir.display()
        ));
    }
    if m.uid() != uid {
        return Err(format!(
            "claim_check: {} is owned by user {}, not this worker's user {uid}; remove it or set claim_check.url",
            dir.display(),
            m.uid()
        ));
    }
    Ok(())
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}/{b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_directory_is_private_and_one_owned_by_another_user_is_refused() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = tempfile::tempdir().unwrap();
        let uid = own_uid().unwrap();
        let dir = private_dir(base.path()).unwrap();
        assert_eq!(dir, base.path().join(format!("ankusa-claim-check-{uid}")));
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "{mode:o}");
        // Opened to others by someone: narrowed again on the next start.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        private_dir(base.path()).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        // A symlink planted in its place is refused.
        std::fs::remove_dir(&dir).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &dir).unwrap();
        let e = private_dir(base.path()).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
        // A directory owned by another user ("/" unless we are root; then one we give away).
        let foreign = if uid == 0 {
            let d = base.path().join("foreign");
            std::fs::create_dir(&d).unwrap();
            std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
            d
        } else {
            std::path::PathBuf::from("/")
        };
        let e = check_owned(&foreign, uid).unwrap_err();
        assert!(e.contains("owned by user"), "{e}");
        let cfg = ClaimCheckConfig {
            url: format!("file://{}", foreign.display()),
            ..Default::default()
        };
        let e = BlobStore::from_config(&cfg, "t").unwrap_err();
        assert!(e.text.contains("owned by user"), "{e}");
    }

    #[tokio::test]
    async fn a_file_store_round_trips_and_deletes_a_blob() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ClaimCheckConfig {
            url: format!("file://{}", dir.path().display()),
            ..Default::default()
        };
        let s = BlobStore::from_config(&cfg, "t").unwrap();
        let url = s
            .put("acme", 7, Bytes::from_static(b"hello"))
            .await
            .unwrap();
        assert!(url.starts_with("file:///"), "{url}");
        assert_eq!(&s.get(&url).await.unwrap()[..], b"hello");
        s.delete(&url).await.unwrap();
        assert!(s.get(&url).await.is_err());
        assert!(s.delete("s3://other/x").await.is_err());
    }
}
