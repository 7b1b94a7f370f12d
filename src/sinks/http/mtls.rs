//! Mutual TLS for an `http` entry: `client_cert` + `client_key` present a client certificate
//! to the endpoint, `ca` replaces the public roots with the entry's own (a receiver behind a
//! private CA).
//!
//! A reqwest client holds its TLS identity and roots for its whole life, so an entry with
//! any of these options is delivered through a client of its own (its own connection pool),
//! made on first use under the same guard as the shared one and kept in the worker's memory.
//! The key of that cache is a SHA-256 of the *resolved* PEM text: a rotated certificate (a
//! new `${file:…}` content) gets a new client on the next attempt without a restart, and the
//! PEM itself is never a map key, a log field or a Redis value. With `[http] proxy` the entry
//! gets its own tunnelling client too, with the same identity and roots.

use super::transport::Transport;
use super::{AttemptError, ErrorKind};
use crate::sinks::guard::guarded_reqwest;
use crate::sinks::EdgePolicy;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Clients kept at most; past it the cache is emptied and clients are made again on use
/// (each holds a connection pool, and tenants can write any number of distinct entries).
pub const MAX_TLS_CLIENTS: usize = 512;

/// The resolved TLS material of one attempt (secret references replaced).
#[derive(Clone, PartialEq, Eq)]
pub struct Material {
    /// The client certificate chain, PEM (leaf first), with [`Material::key`].
    pub cert: Option<String>,
    /// The client certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<String>,
    /// The roots trusted for this entry, PEM (one or more certificates); `None`: the public
    /// roots built into the worker.
    pub ca: Option<String>,
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret; the rest is not, but is long and says nothing useful in a log.
        f.debug_struct("Material")
            .field("cert", &self.cert.is_some())
            .field("key", &self.key.as_ref().map(|_| "[redacted]"))
            .field("ca", &self.ca.is_some())
            .finish()
    }
}

impl Material {
    /// The cache key: a digest of each part, length-prefixed so no two materials collide
    /// by moving bytes from one part to the next.
    fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for part in [&self.cert, &self.key, &self.ca] {
            match part {
                Some(p) => {
                    h.update([1]);
                    h.update((p.len() as u64).to_be_bytes());
                    h.update(p.as_bytes());
                }
                None => h.update([0]),
            }
        }
        h.finalize().into()
    }
}

/// The mTLS clients of one worker, shared by every clone of its [`super::HttpSink`].
#[derive(Debug, Default)]
pub struct TlsClients {
    made: Mutex<HashMap<[u8; 32], Transport>>,
}

impl TlsClients {
    /// The clients for `m`, made on first use under `edge`'s destination guard and proxy.
    /// A certificate, key or CA that does not parse is a retry naming the option (the
    /// tenant can fix the secret it points at; the row is not lost meanwhile); the error
    /// never quotes the PEM.
    pub fn client(&self, m: &Material, edge: &EdgePolicy) -> Result<Transport, AttemptError> {
        let key = m.digest();
        if let Some(c) = self.lock().get(&key) {
            return Ok(c.clone());
        }
        let client = build(m, edge)?;
        let mut made = self.lock();
        if made.len() >= MAX_TLS_CLIENTS {
            made.clear();
        }
        made.insert(key, client.clone());
        Ok(client)
    }

    /// Clients in the cache (for tests and the worker's own accounting).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no client was made yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Transport>> {
        // A panic while holding the lock leaves only a map of clients: still usable.
        self.made.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Clients like the shared ones (guard, no redirects, the operator's proxy if any) with `m`'s
/// identity and roots.
fn build(m: &Material, edge: &EdgePolicy) -> Result<Transport, AttemptError> {
    let bad =
        |what: &str, why: String| AttemptError::retry(ErrorKind::Other, format!("{what}: {why}"));
    let mut b = guarded_reqwest(edge.addresses.clone())
        .use_rustls_tls()
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .user_agent(concat!("ankusa/", env!("CARGO_PKG_VERSION")));
    if let (Some(cert), Some(key)) = (&m.cert, &m.key) {
        check_certificates(cert).map_err(|why| bad("client_cert", why))?;
        check_pem(key, "PRIVATE KEY").map_err(|why| bad("client_key", why))?;
        let pem = format!("{}\n{}\n", cert.trim_end(), key.trim_end());
        let id = reqwest::Identity::from_pem(pem.as_bytes()).map_err(|e| {
            bad(
                "client_cert/client_key",
                format!("not a usable certificate and private key ({e})"),
            )
        })?;
        b = b.identity(id);
    }
    if let Some(ca) = &m.ca {
        let roots = parse_roots(ca).map_err(|why| bad("ca", why))?;
        b = b.tls_built_in_root_certs(false);
        for r in roots {
            b = b.add_root_certificate(r);
        }
    }
    let direct = b.build().map_err(|e| {
        bad(
            "client_cert/ca",
            format!("the TLS client cannot be made ({e})"),
        )
    })?;
    let proxied = match &edge.proxy {
        Some(p) => {
            let tls = super::proxy::tls_config(Some(m))
                .map_err(|e| AttemptError::retry(ErrorKind::Other, e))?;
            Some(Arc::new(super::proxy::ProxiedClient::new(
                p.clone(),
                edge.addresses.clone(),
                tls,
            )))
        }
        None => None,
    };
    Ok(Transport::new(direct, proxied))
}

/// The certificates of a PEM bundle: at least one, each parsed as an X.509 certificate (a
/// PEM block of garbage is refused here, not at the first handshake).
pub fn parse_roots(pem: &str) -> Result<Vec<reqwest::Certificate>, String> {
    check_certificates(pem)?;
    reqwest::Certificate::from_pem_bundle(pem.as_bytes())
        .map_err(|e| format!("not a PEM certificate bundle ({e})"))
}

/// `pem` holds one or more certificates and each parses as X.509; the error names the
/// 1-based certificate that does not.
pub fn check_certificates(pem: &str) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    check_pem(pem, "CERTIFICATE")?;
    let ders = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate bundle ({e})"))?;
    if ders.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    let mut store = rustls::RootCertStore::empty();
    for (i, der) in ders.into_iter().enumerate() {
        store
            .add(der)
            .map_err(|e| format!("certificate {} does not parse ({e})", i + 1))?;
    }
    Ok(())
}

/// `pem` holds a `-----BEGIN …<label>-----` block (a quick, clear answer for a value that is
/// no PEM at all, before the parsers' own less readable errors).
pub fn check_pem(pem: &str, label: &str) -> Result<(), String> {
    let has = pem
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{label}-----")));
    if has {
        Ok(())
    } else {
        Err(format!(
            "holds no PEM block ending in {label:?} (-----BEGIN …{label}-----)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> EdgePolicy {
        EdgePolicy {
            addresses: Arc::new(crate::sinks::guard::AddressPolicy {
                deny_private: false,
                allow: vec![],
            }),
            ..EdgePolicy::default()
        }
    }

    #[test]
    fn a_value_that_is_no_pem_is_named_and_not_quoted() {
        let m = Material {
            cert: Some("not a certificate".into()),
            key: Some("s3cret-key-material".into()),
            ca: None,
        };
        let e = TlsClients::default().client(&m, &open()).unwrap_err();
        let text = format!("{e:?}");
        assert!(text.contains("client_cert"), "{text}");
        assert!(!text.contains("s3cret-key-material"), "{text}");
        assert!(matches!(e, AttemptError::Retry { .. }));
        let m = Material {
            cert: None,
            key: None,
            ca: Some("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----".into()),
        };
        let e = TlsClients::default().client(&m, &open()).unwrap_err();
        assert!(format!("{e:?}").contains("ca: "), "{e:?}");
        assert!(!format!("{m:?}").contains("BEGIN"));
    }

    #[test]
    fn one_client_per_material_and_a_rotated_one_gets_its_own() {
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let clients = TlsClients::default();
        let a = Material {
            cert: None,
            key: None,
            ca: Some(ca.cert.pem()),
        };
        clients.client(&a, &open()).unwrap();
        clients.client(&a, &open()).unwrap();
        assert_eq!(clients.len(), 1);
        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let b = Material {
            cert: Some(other.cert.pem()),
            key: Some(other.signing_key.serialize_pem()),
            ca: Some(ca.cert.pem()),
        };
        clients.client(&b, &open()).unwrap();
        assert_eq!(clients.len(), 2);
    }
}
