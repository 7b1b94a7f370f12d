//! Endpoint authentication of `http` entries, end to end (`docs/sinks.md`, `http`): HTTP
//! Basic, OAuth 2.0 client credentials and mutual TLS, each with its secrets resolved in the
//! tenant's namespace at attempt time and never written to Redis; and the operator's guarded
//! egress proxy (`[http] proxy`) all of them go through.
use crate::common;

use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::Hook;
use common::Env;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn http_entry(opts: serde_json::Value) -> SinkEntry {
    SinkEntry {
        module: "http".into(),
        opts: opts.as_object().cloned().unwrap(),
        ordered: false,
        key: None,
        ..Default::default()
    }
}

/// `basic_auth` reaches the receiver as RFC 7617's `Authorization` with the password
/// resolved from the tenant's own namespace at attempt time, replacing the producer's
/// `Authorization`; the resolved password is never written to Redis. A reference to
/// another tenant's variable is refused at `source put`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_sends_the_tenants_password_and_never_stores_it() {
    const PW: &str = "basic-pw-5d1e93";
    std::env::set_var("ANKUSA_SECRET_ACME__SECURITY_BASIC_PW", PW);
    let env = Env::new().await;
    let entry = |var: &str| {
        http_entry(serde_json::json!({
            "url": env.receiver.url("basic"),
            "basic_auth": {"username": "acme-hooks", "password": format!("${{env:{var}}}")},
        }))
    };
    let other = SourceSpec {
        sinks: vec![entry("ANKUSA_SECRET_GLOBEX__SECURITY_BASIC_PW")],
    };
    let e = env.store.put_source("acme", "s", &other).await.unwrap_err();
    assert!(e.to_string().contains("basic_auth.password"), "{e}");
    let spec = SourceSpec {
        sinks: vec![entry("ANKUSA_SECRET_ACME__SECURITY_BASIC_PW")],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    let hook = Hook::new(b"{}".to_vec()).header("authorization", "Bearer from-producer");
    env.producer.commit("acme", "s", hook).await.unwrap();
    let worker = env.worker().await;
    env.drain(&worker).await;
    let got = env.receiver.requests_for("basic");
    assert_eq!(got.len(), 1);
    let expected = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("acme-hooks:{PW}")
        )
    );
    let auth: Vec<&str> = got[0]
        .headers
        .iter()
        .filter(|(k, _)| k == "authorization")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(auth, [expected.as_str()]);
    // The same credentials as the URL's user info (a reference inside the URL) are sent as
    // Basic authorization too, and never in the request line.
    let in_url = http_entry(serde_json::json!({
        "url": env.receiver.url("userinfo").replace(
            "http://",
            "http://acme-hooks:${env:ANKUSA_SECRET_ACME__SECURITY_BASIC_PW}@",
        ),
    }));
    env.store
        .put_source(
            "acme",
            "userinfo",
            &SourceSpec {
                sinks: vec![in_url],
            },
        )
        .await
        .unwrap();
    env.commit("acme", "userinfo", "{}").await;
    env.drain(&worker).await;
    let got = env.receiver.requests_for("userinfo");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header("authorization"), Some(expected.as_str()));
    assert!(!env.all_values().contains(PW), "the password reached Redis");
    worker.shutdown().await;
}

/// What the token endpoint of the OAuth2 test saw.
#[derive(Default)]
struct TokenRequests {
    /// Each request's `Authorization` header and form body.
    seen: std::sync::Mutex<Vec<(String, String)>>,
}

/// An OAuth 2.0 token endpoint on loopback: answers `tok-<n>` (n counts requests) as a
/// bearer token valid for an hour.
async fn token_endpoint() -> (String, Arc<TokenRequests>) {
    let seen = Arc::new(TokenRequests::default());
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/token",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let s = s.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let n = {
                    let mut seen = s.seen.lock().unwrap();
                    seen.push((auth, body));
                    seen.len()
                };
                axum::Json(serde_json::json!({
                    "access_token": format!("tok-{n}"),
                    "token_type": "Bearer",
                    "expires_in": 3600,
                }))
            }
        }),
    );
    let listener = common::tokio_listener();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// `oauth2` client credentials: one token request (HTTP Basic client authentication with
/// the secret resolved in the tenant's namespace, `grant_type=client_credentials`, the
/// scope) serves every attempt until the endpoint answers 401, which drops the token so
/// the retry fetches a new one; the client secret and the tokens never reach Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth2_client_credentials_fetch_one_token_and_renew_it_after_a_401() {
    const SECRET: &str = "oauth-secret-77c2a0";
    std::env::set_var("ANKUSA_SECRET_ACME__SECURITY_OAUTH", SECRET);
    let env = Env::new().await;
    let (token_url, tokens) = token_endpoint().await;
    let spec = SourceSpec {
        sinks: vec![http_entry(serde_json::json!({
            "url": env.receiver.url("api"),
            "oauth2": {
                "token_url": token_url,
                "client_id": "acme-client",
                "client_secret": "${env:ANKUSA_SECRET_ACME__SECURITY_OAUTH}",
                "scope": "webhooks:write",
            },
        }))],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    for i in 0..5 {
        env.commit("acme", "s", format!("{{\"n\":{i}}}")).await;
    }
    let worker = env.worker().await;
    env.drain(&worker).await;
    let bearer = |path: &str| -> Vec<String> {
        env.receiver
            .requests_for(path)
            .iter()
            .filter_map(|r| r.header("authorization").map(str::to_string))
            .collect()
    };
    assert_eq!(bearer("api"), vec!["Bearer tok-1".to_string(); 5]);
    {
        let seen = tokens.seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "one token for five attempts");
        let basic = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("acme-client:{SECRET}"),
        );
        assert_eq!(seen[0].0, format!("Basic {basic}"));
        assert_eq!(
            seen[0].1,
            "grant_type=client_credentials&scope=webhooks%3Awrite"
        );
    }
    // The endpoint refuses the token once: the retry carries a new one.
    env.receiver.set(
        "api",
        ankusa::testkit::Behavior::Sequence(vec![ankusa::testkit::Reply::status(401)]),
    );
    env.commit("acme", "s", "{\"n\":5}").await;
    env.drain(&worker).await;
    let all = bearer("api");
    assert_eq!(all[5..], ["Bearer tok-1", "Bearer tok-2"], "{all:?}");
    assert_eq!(tokens.seen.lock().unwrap().len(), 2);
    let everything = env.all_values();
    assert!(
        !everything.contains(SECRET),
        "the client secret reached Redis"
    );
    assert!(!everything.contains("tok-1"), "a token reached Redis");
    worker.shutdown().await;
}

/// A private CA and what it signed, as PEM.
struct Pki {
    /// The server's CA (the entry's `ca`).
    server_ca: String,
    /// The server's certificate for `localhost` and its key.
    server: (rcgen::Certificate, rcgen::KeyPair),
    /// The CA the server trusts for client certificates.
    client_ca: rcgen::Certificate,
    /// The client certificate (`client_cert`) and its key (`client_key`), PEM.
    client: (String, String),
}

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        let cert = p.self_signed(&key).unwrap();
        (cert, Issuer::new(p, key))
    };
    let (server_ca, server_issuer) = ca("ankusa test server CA");
    let (client_ca, client_issuer) = ca("ankusa test client CA");
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&server_key, &server_issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, "acme-hooks");
    let client = p.signed_by(&client_key, &client_issuer).unwrap();
    Pki {
        server_ca: server_ca.pem(),
        server: (server, server_key),
        client_ca,
        client: (client.pem(), client_key.serialize_pem()),
    }
}

/// What the mTLS receiver saw.
#[derive(Default)]
struct Seen {
    /// Bodies of the requests, each with the number of certificates its client presented.
    requests: Mutex<Vec<(usize, Vec<u8>)>>,
    /// TLS handshakes the receiver refused (no or an untrusted client certificate).
    refused: AtomicUsize,
    /// TLS connections accepted.
    connections: AtomicUsize,
}

/// An HTTPS receiver on loopback that requires a client certificate signed by `pki`'s client
/// CA: answers 200 to `POST /hooks`. Returns its port.
async fn mtls_receiver(pki: &Pki) -> (u16, Arc<Seen>) {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.client_ca.der().clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.server.1.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![pki.server.0.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = common::tokio_listener();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = s.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(_) => {
                        seen.refused.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                };
                seen.connections.fetch_add(1, Ordering::SeqCst);
                let certs = tls.get_ref().1.peer_certificates().map_or(0, |c| c.len());
                let app = axum::Router::new().route(
                    "/hooks",
                    axum::routing::post(move |body: axum::body::Bytes| {
                        let seen = seen.clone();
                        async move {
                            seen.requests.lock().unwrap().push((certs, body.to_vec()));
                            "ok"
                        }
                    }),
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(
                        hyper_util::rt::TokioIo::new(tls),
                        hyper_util::service::TowerToHyperService::new(app),
                    )
                    .await;
            });
        }
    });
    (port, seen)
}

/// `client_cert` + `client_key` + `ca`: every hook reaches a receiver that requires a client
/// certificate from a private CA, byte-exact, at most a connection per hook. Without the certificate the handshake is refused and the row dead-letters with
/// the TLS error; without `ca` the private server certificate is not trusted. The key never
/// reaches Redis, and `source put` refuses a key written into the source, a certificate
/// without its key, TLS options on a plain http URL and another tenant's reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_client_certificates_reach_a_receiver_that_requires_them_and_only_them() {
    let pki = pki();
    std::env::set_var("ANKUSA_SECRET_ACME__MTLS_CERT", &pki.client.0);
    std::env::set_var("ANKUSA_SECRET_ACME__MTLS_KEY", &pki.client.1);
    std::env::set_var("ANKUSA_SECRET_ACME__MTLS_CA", &pki.server_ca);
    std::env::set_var("ANKUSA_SECRET_GLOBEX__MTLS_KEY", &pki.client.1);
    let env = Env::tuned(|c| {
        c.retry.max_attempts = 1;
        c.dispatch.breaker_failures = 0;
    })
    .await;
    let (port, seen) = mtls_receiver(&pki).await;
    let url = format!("https://localhost:{port}/hooks");
    let entry = |extra: serde_json::Value| {
        let mut o = serde_json::json!({"url": url});
        o.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        http_entry(o)
    };
    let with_cert = entry(serde_json::json!({
        "client_cert": "${env:ANKUSA_SECRET_ACME__MTLS_CERT}",
        "client_key": "${env:ANKUSA_SECRET_ACME__MTLS_KEY}",
        "ca": "${env:ANKUSA_SECRET_ACME__MTLS_CA}",
    }));

    // What `source put` refuses, each naming the option.
    let refused = [
        (
            entry(serde_json::json!({
                "client_cert": "${env:ANKUSA_SECRET_ACME__MTLS_CERT}",
                "client_key": pki.client.1,
            })),
            "client_key: must be a secret reference",
        ),
        (
            entry(serde_json::json!({"client_cert": "${env:ANKUSA_SECRET_ACME__MTLS_CERT}"})),
            "client_cert: set client_key too",
        ),
        (
            entry(serde_json::json!({
                "client_cert": "${env:ANKUSA_SECRET_ACME__MTLS_CERT}",
                "client_key": "${env:ANKUSA_SECRET_GLOBEX__MTLS_KEY}",
            })),
            "client_key",
        ),
        (
            http_entry(serde_json::json!({
                "url": format!("http://localhost:{port}/hooks"),
                "ca": pki.server_ca,
            })),
            "ca: needs an https:// url",
        ),
        (
            entry(
                serde_json::json!({"ca": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}),
            ),
            "ca: ",
        ),
    ];
    for (e, want) in refused {
        let spec = SourceSpec { sinks: vec![e] };
        let err = env
            .store
            .put_source("acme", "bad", &spec)
            .await
            .unwrap_err();
        assert!(err.to_string().contains(want), "{err} (wanted {want:?})");
    }

    env.store
        .put_source(
            "acme",
            "mtls",
            &SourceSpec {
                sinks: vec![with_cert],
            },
        )
        .await
        .unwrap();
    // The private CA as literal PEM is fine (it is no secret); no client certificate.
    let no_cert = entry(serde_json::json!({"ca": pki.server_ca}));
    env.store
        .put_source(
            "acme",
            "no-cert",
            &SourceSpec {
                sinks: vec![no_cert],
            },
        )
        .await
        .unwrap();
    let no_ca = entry(serde_json::json!({
        "client_cert": "${env:ANKUSA_SECRET_ACME__MTLS_CERT}",
        "client_key": "${env:ANKUSA_SECRET_ACME__MTLS_KEY}",
    }));
    env.store
        .put_source("acme", "no-ca", &SourceSpec { sinks: vec![no_ca] })
        .await
        .unwrap();

    let bodies: Vec<Vec<u8>> = (0..20)
        .map(|i| format!("{{\"n\":{i},\"pad\":\"{}\"}}", "é".repeat(i)).into_bytes())
        .collect();
    for b in &bodies {
        env.producer
            .commit("acme", "mtls", Hook::new(b.clone()))
            .await
            .unwrap();
    }
    env.commit("acme", "no-cert", "{\"to\":\"no-cert\"}").await;
    env.commit("acme", "no-ca", "{\"to\":\"no-ca\"}").await;
    let worker = env.worker().await;
    env.drain(&worker).await;

    let got = seen.requests.lock().unwrap().clone();
    let mut got_bodies: Vec<Vec<u8>> = got.iter().map(|(_, b)| b.clone()).collect();
    got_bodies.sort();
    let mut want = bodies.clone();
    want.sort();
    assert_eq!(
        got_bodies, want,
        "the 20 hooks, byte-exact, and nothing else"
    );
    assert!(
        got.iter().all(|(certs, _)| *certs >= 1),
        "each with a client certificate"
    );
    // Attempts run at once open a connection each (seen: 17 for 20 on a loaded machine);
    // never more than one per hook.
    assert!(
        seen.connections.load(Ordering::SeqCst) <= 20,
        "at most a connection per hook ({} for 20 hooks)",
        seen.connections.load(Ordering::SeqCst)
    );
    assert!(
        seen.refused.load(Ordering::SeqCst) >= 1,
        "the handshake without a certificate"
    );

    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    let error_of = |source: &str| {
        dead.iter()
            .find(|d| d.source == source)
            .unwrap_or_else(|| panic!("{source} dead-lettered: {dead:?}"))
            .error
            .clone()
            .to_lowercase()
    };
    let e = error_of("no-cert");
    assert!(e.contains("certificate"), "no-cert: {e}");
    let e = error_of("no-ca");
    assert!(
        e.contains("unknownissuer") || e.contains("unknown issuer"),
        "no-ca: {e}"
    );
    assert!(
        !env.all_values()
            .contains(pki.client.1.lines().nth(1).unwrap()),
        "the client key reached Redis"
    );
    worker.shutdown().await;
}

/// `[http] proxy`: deliveries (plain HTTP by name, HTTPS with mTLS by name) and the OAuth2
/// token request go through the operator's proxy, which is asked to `CONNECT` to the
/// checked address, never to the name, with the proxy credentials from its URL; TLS is still
/// to the host name (the private CA's certificate for `localhost` verifies). `no_proxy`
/// hosts go direct. The guard is off in this first world (`deny_private = false`), so
/// loopback, the only address a test has, is tunnelled like a public address would be.
/// In the second world (the guard on, loopback exempted by `allow_cidrs`), the exempted
/// receiver is reached directly, since the proxy's loopback is not the worker's, and the
/// metadata address dead-letters; that proxy is never contacted. The proxy password is
/// redacted in the config dump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_proxy_carries_deliveries_to_checked_addresses_only() {
    use ankusa::testkit::{ConnectProxy, Receiver};
    const PROXY_PW: &str = "proxy-pw-0c4e1b";
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("egress:{PROXY_PW}"),
    );
    let proxy = ConnectProxy::start(Some(format!("Basic {basic}")));
    let pki = pki();
    std::env::set_var("ANKUSA_SECRET_ACME__PROXY_CERT", &pki.client.0);
    std::env::set_var("ANKUSA_SECRET_ACME__PROXY_KEY", &pki.client.1);
    std::env::set_var("ANKUSA_SECRET_ACME__PROXY_OAUTH", "proxy-oauth-secret");
    std::env::set_var(
        "ANKUSA_SECRET_ACME__PROXY_METADATA",
        "http://169.254.169.254/latest/meta-data/",
    );
    let proxy_url = proxy.url(Some(&format!("egress:{PROXY_PW}")));
    let env = Env::tuned(|c| {
        c.http.deny_private = false;
        c.http.proxy = Some(proxy_url.clone());
        c.http.no_proxy = vec!["127.0.0.1".into()];
        c.retry.max_attempts = 1;
        c.dispatch.breaker_failures = 0;
    })
    .await;
    let dump = env.config.redacted_toml();
    assert!(!dump.contains(PROXY_PW), "{dump}");
    assert!(dump.contains("egress:***@127.0.0.1"), "{dump}");

    let by_name = |url: String| url.replace("127.0.0.1", "localhost");
    let (tls_port, seen) = mtls_receiver(&pki).await;
    let (token_url, tokens) = token_endpoint().await;
    let direct = Receiver::start().unwrap();
    let sources = [
        (
            "plain",
            http_entry(serde_json::json!({"url": by_name(env.receiver.url("plain"))})),
        ),
        (
            "mtls",
            http_entry(serde_json::json!({
                "url": format!("https://localhost:{tls_port}/hooks"),
                "client_cert": "${env:ANKUSA_SECRET_ACME__PROXY_CERT}",
                "client_key": "${env:ANKUSA_SECRET_ACME__PROXY_KEY}",
                "ca": pki.server_ca,
            })),
        ),
        (
            "oauth",
            http_entry(serde_json::json!({
                "url": by_name(env.receiver.url("oauth")),
                "oauth2": {
                    "token_url": by_name(token_url),
                    "client_id": "acme-client",
                    "client_secret": "${env:ANKUSA_SECRET_ACME__PROXY_OAUTH}",
                },
            })),
        ),
        (
            "direct",
            http_entry(serde_json::json!({"url": direct.url("direct")})),
        ),
    ];
    for (name, e) in sources {
        env.store
            .put_source("acme", name, &SourceSpec { sinks: vec![e] })
            .await
            .unwrap();
    }
    let bodies: Vec<Vec<u8>> = (0..10)
        .map(|i| format!("{{\"n\":{i},\"pad\":\"{}\"}}", "ü".repeat(i * 50)).into_bytes())
        .collect();
    for name in ["plain", "mtls", "oauth", "direct"] {
        for b in &bodies {
            env.producer
                .commit("acme", name, Hook::new(b.clone()))
                .await
                .unwrap();
        }
    }
    let worker = env.worker().await;
    env.drain(&worker).await;

    let mut want = bodies.clone();
    want.sort();
    let mut want_sha: Vec<String> = bodies
        .iter()
        .map(|b| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b)))
        .collect();
    want_sha.sort();
    for (receiver, path) in [
        (&env.receiver, "plain"),
        (&env.receiver, "oauth"),
        (&direct, "direct"),
    ] {
        let mut got: Vec<String> = receiver
            .requests_for(path)
            .iter()
            .map(|r| r.body_sha256.clone())
            .collect();
        got.sort();
        assert_eq!(got, want_sha, "{path}: every hook byte-exact, once");
    }
    let mut got: Vec<Vec<u8>> = seen
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|(certs, b)| {
            assert!(*certs >= 1, "the client certificate through the tunnel");
            b.clone()
        })
        .collect();
    got.sort();
    assert_eq!(got, want, "mtls: every hook byte-exact, once");
    let host = format!("localhost:{}", env.receiver.port());
    assert!(env
        .receiver
        .requests_for("plain")
        .iter()
        .all(|r| r.header("host") == Some(host.as_str())));
    assert_eq!(
        tokens.seen.lock().unwrap().len(),
        1,
        "one token, fetched through the proxy"
    );

    // What the proxy was asked: only checked addresses (never a name), with its credentials;
    // never the no_proxy receiver.
    let targets = proxy.targets();
    let token_port: u16 = tokens_port(&targets, env.receiver.port(), tls_port);
    for t in &targets {
        assert!(t.starts_with("127.0.0.1:"), "an address, not a name: {t}");
    }
    for port in [env.receiver.port(), tls_port, token_port] {
        assert!(
            targets.contains(&format!("127.0.0.1:{port}")),
            "{port} through the proxy: {targets:?}"
        );
    }
    assert!(
        !targets.contains(&format!("127.0.0.1:{}", direct.port())),
        "the no_proxy host went direct: {targets:?}"
    );
    assert!(proxy
        .authorizations()
        .iter()
        .all(|a| a.as_deref() == Some(&format!("Basic {basic}")[..])));
    worker.shutdown().await;

    // The guard on, loopback exempted: the exempted receiver is reached directly and the
    // metadata address is refused; this proxy never hears of either.
    let guarded_proxy = ConnectProxy::start(None);
    let guarded = Env::tuned(|c| {
        c.http.proxy = Some(guarded_proxy.url(None));
        c.retry.max_attempts = 1;
        c.dispatch.breaker_failures = 0;
    })
    .await;
    for (name, url) in [
        ("exempt", by_name(guarded.receiver.url("exempt"))),
        (
            "metadata",
            "${env:ANKUSA_SECRET_ACME__PROXY_METADATA}".to_string(),
        ),
    ] {
        let spec = SourceSpec {
            sinks: vec![http_entry(serde_json::json!({ "url": url }))],
        };
        guarded.store.put_source("acme", name, &spec).await.unwrap();
        guarded.commit("acme", name, "{\"guarded\":true}").await;
    }
    let worker = guarded.worker().await;
    guarded.drain(&worker).await;
    assert_eq!(guarded.receiver.requests_for("exempt").len(), 1);
    let dead = guarded.dead_letters("acme").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].source, "metadata");
    assert!(
        dead[0].error.contains("blocked address 169.254.169.254"),
        "{dead:?}"
    );
    assert_eq!(guarded_proxy.connections(), 0);
    worker.shutdown().await;
}

/// The port of the one CONNECT target that is neither the receiver's nor the TLS one's: the
/// token endpoint's.
fn tokens_port(targets: &[String], receiver: u16, tls: u16) -> u16 {
    targets
        .iter()
        .filter_map(|t| t.rsplit(':').next()?.parse::<u16>().ok())
        .find(|p| *p != receiver && *p != tls)
        .unwrap_or_else(|| panic!("the token endpoint through the proxy: {targets:?}"))
}
