//! TLS of a `rediss://` connection: fred's rustls connector (ring provider, the one reqwest
//! uses), built from `redis.tls_ca_file` (else the system trust store) and, for mutual TLS,
//! `redis.tls_cert_file` / `redis.tls_key_file`. Certificates are always verified.

use super::StoreError;
use crate::config::RedisConfig;
use fred::types::config::TlsConnector;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use std::sync::Arc;

/// The connector of `redis`: its CA file's certificates as the only roots (or the system's
/// when empty), with its client certificate when set. Errors name the key and the file.
pub(super) fn connector(redis: &RedisConfig) -> Result<TlsConnector, StoreError> {
    let mut roots = RootCertStore::empty();
    if redis.tls_ca_file.is_empty() {
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            // A system certificate rustls cannot parse is skipped, as browsers do.
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(StoreError::Tls(format!(
                "no CA certificates in the system trust store ({}): set redis.tls_ca_file",
                native
                    .errors
                    .first()
                    .map(ToString::to_string)
                    .unwrap_or_else(|| "it is empty".into())
            )));
        }
    } else {
        for cert in certificates("redis.tls_ca_file", &redis.tls_ca_file)? {
            roots.add(cert).map_err(|e| {
                StoreError::Tls(format!("redis.tls_ca_file {}: {e}", redis.tls_ca_file))
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    let config = if redis.tls_cert_file.is_empty() {
        builder.with_no_client_auth()
    } else {
        let chain = certificates("redis.tls_cert_file", &redis.tls_cert_file)?;
        let key = PrivateKeyDer::from_pem_file(&redis.tls_key_file).map_err(|e| {
            StoreError::Tls(format!(
                "redis.tls_key_file {}: no private key: {e}",
                redis.tls_key_file
            ))
        })?;
        builder.with_client_auth_cert(chain, key).map_err(|e| {
            StoreError::Tls(format!(
                "redis.tls_cert_file {} / redis.tls_key_file {}: {e}",
                redis.tls_cert_file, redis.tls_key_file
            ))
        })?
    };
    Ok(config.into())
}

/// Every certificate of the PEM file at `path`; at least one.
fn certificates(key: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let bad = |e: String| StoreError::Tls(format!("{key} {path}: {e}"));
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    match certs.is_empty() {
        true => Err(bad("no PEM certificate in it".into())),
        false => Ok(certs),
    }
}

/// `host:port` of a Redis URL, without its user info: safe to show.
pub(super) fn server(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

/// The error of a `rediss://` pool's first connection: [`StoreError::Tls`] when the TLS
/// layer failed, [`StoreError::Redis`] when the server could not be reached at all. fred
/// reports a certificate that does not verify as a TLS error, but a peer that does not
/// speak TLS as an I/O error (rustls: corrupt message) or as a timeout (a plaintext Redis
/// waits for the rest of a "command" and never answers the ClientHello); a timeout counts as
/// TLS when the port takes a plain TCP connection.
pub(super) async fn classify(url: &str, e: fred::error::Error) -> StoreError {
    let server = server(url);
    let text = e.details().to_ascii_lowercase();
    let tls_words = [
        "corrupt message",
        "invalidcontenttype",
        "tls",
        "handshake",
        "certificate",
    ];
    if matches!(e.kind(), fred::error::ErrorKind::Tls) || tls_words.iter().any(|w| text.contains(w))
    {
        return StoreError::Tls(format!("handshake with {server} failed: {e}"));
    }
    if matches!(e.kind(), fred::error::ErrorKind::Timeout) {
        let probe = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            tokio::net::TcpStream::connect(server),
        );
        if matches!(probe.await, Ok(Ok(_))) {
            return StoreError::Tls(format!(
                "no TLS handshake with {server}: it takes TCP connections but does not answer \
                 TLS (a plaintext Redis on this port? use redis:// only if it is meant to be \
                 plaintext): {e}"
            ));
        }
    }
    StoreError::Redis(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_of_a_url_hides_the_user_info() {
        assert_eq!(server("rediss://u:p@w@h:6380/0"), "h:6380");
        assert_eq!(server("rediss://h:6380"), "h:6380");
        assert_eq!(server("rediss://:pw@10.0.0.1:1?x=1"), "10.0.0.1:1");
    }

    #[test]
    fn a_missing_ca_file_is_an_error_naming_the_key_and_the_file() {
        let redis = RedisConfig {
            url: "rediss://127.0.0.1:1".into(),
            tls_ca_file: "/nonexistent/ca.pem".into(),
            ..Default::default()
        };
        let err = connector(&redis).expect_err("refused");
        let text = err.to_string();
        assert!(
            text.starts_with("redis TLS: redis.tls_ca_file /nonexistent/ca.pem"),
            "{text}"
        );
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.pem");
        std::fs::write(&path, "not a certificate\n").expect("write");
        let redis = RedisConfig {
            url: "rediss://127.0.0.1:1".into(),
            tls_ca_file: path.display().to_string(),
            ..Default::default()
        };
        let text = connector(&redis).expect_err("refused").to_string();
        assert!(text.contains("no PEM certificate"), "{text}");
    }
}
