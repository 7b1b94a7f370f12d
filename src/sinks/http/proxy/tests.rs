use super::*;
use crate::config::HttpConfig;
use crate::testkit::ConnectProxy;

fn config(proxy: &str, no_proxy: &[&str]) -> HttpConfig {
    HttpConfig {
        proxy: Some(proxy.into()),
        no_proxy: no_proxy.iter().map(|s| s.to_string()).collect(),
        ..HttpConfig::default()
    }
}

fn url(s: &str) -> url::Url {
    url::Url::parse(s).unwrap()
}

#[test]
fn the_proxy_url_and_no_proxy_are_parsed_and_bad_ones_named() {
    assert!(EgressProxy::from_config(&HttpConfig::default())
        .unwrap()
        .is_none());
    let p = EgressProxy::from_config(&config("http://squid.internal:3128", &[]))
        .unwrap()
        .unwrap();
    assert_eq!(p.address(), "squid.internal:3128");
    assert!(p.authorization.is_none());
    let p = EgressProxy::from_config(&config("http://egress:p%40ss@10.0.0.5", &[]))
        .unwrap()
        .unwrap();
    assert_eq!(p.address(), "10.0.0.5:80");
    use base64::Engine;
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("egress:p@ss")
    );
    assert_eq!(p.authorization.as_ref().unwrap().to_str().unwrap(), want);
    assert!(!format!("{p:?}").contains("Basic"), "{p:?}");
    for (bad, want) in [
        ("https://proxy:443", "only http:// proxies"),
        ("proxy:3128", "scheme"),
        ("http://proxy:3128/path", "no path"),
        ("not a url", "not a URL"),
    ] {
        let e = EgressProxy::from_config(&config(bad, &[])).unwrap_err();
        assert!(e.contains(want), "{bad}: {e}");
    }
    let e =
        EgressProxy::from_config(&config("http://p:1", &["ok.example", " ", "a b"])).unwrap_err();
    assert!(e.starts_with("no_proxy[1]: "), "{e}");
    let e = EgressProxy::from_config(&config("http://p:1", &["a b"])).unwrap_err();
    assert!(e.starts_with("no_proxy[0]: "), "{e}");
}

#[test]
fn no_proxy_matches_names_subdomains_and_literal_addresses() {
    let p = EgressProxy::from_config(&config(
        "http://p:1",
        &[
            "internal.example",
            ".corp.example",
            "10.0.0.0/8",
            "2001:db8::1",
        ],
    ))
    .unwrap()
    .unwrap();
    for direct in [
        "https://internal.example/x",
        "https://INTERNAL.example./x",
        "https://a.internal.example/x",
        "https://hooks.corp.example/x",
        "http://10.1.2.3:8080/x",
        "http://[2001:db8::1]/x",
    ] {
        assert!(p.bypasses(&url(direct)), "{direct}");
    }
    for proxied in [
        "https://notinternal.example/x",
        "https://corp.example/x",
        "https://example.com/x",
        "http://11.0.0.1/x",
        "http://[2001:db8::2]/x",
    ] {
        assert!(!p.bypasses(&url(proxied)), "{proxied}");
    }
}

/// A plain receiver on 127.0.0.1 answering 200 to anything; its port.
async fn receiver() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
                    ))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    port
}

fn client(proxy: &ConnectProxy, user_info: Option<&str>, policy: AddressPolicy) -> ProxiedClient {
    let p = EgressProxy::from_config(&config(&proxy.url(user_info), &[]))
        .unwrap()
        .unwrap();
    ProxiedClient::new(Arc::new(p), Arc::new(policy), tls_config(None).unwrap())
}

fn post(to: &str) -> reqwest::Request {
    let mut r = reqwest::Request::new(reqwest::Method::POST, url(to));
    *r.body_mut() = Some(b"{}".to_vec().into());
    r
}

/// The guard off (`deny_private = false`): nothing is exempt, so loopback, the only address a
/// test has, goes through the proxy like a public one would.
fn open() -> AddressPolicy {
    AddressPolicy {
        deny_private: false,
        allow: vec![],
    }
}

#[tokio::test]
async fn a_name_is_resolved_and_checked_here_and_the_proxy_asked_for_the_address() {
    let port = receiver().await;
    let proxy = ConnectProxy::start(None);
    let c = client(&proxy, None, open());
    for _ in 0..3 {
        let resp = c
            .execute(post(&format!("http://localhost:{port}/hooks")))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.bytes().await.unwrap(), "ok");
    }
    // The checked address, never the name; one tunnel reused for the three requests.
    assert_eq!(proxy.targets(), [format!("127.0.0.1:{port}")]);
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test]
async fn a_blocked_destination_is_refused_before_the_proxy_is_contacted() {
    let port = receiver().await;
    let proxy = ConnectProxy::start(None);
    let c = client(&proxy, None, AddressPolicy::default());
    for to in [
        format!("http://localhost:{port}/hooks"),
        format!("http://127.0.0.1:{port}/hooks"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
    ] {
        let e = c.execute(post(&to)).await.unwrap_err();
        let blocked = crate::sinks::guard::blocked_in(&*e);
        assert!(blocked.is_some(), "{to}: {e:?}");
    }
    assert_eq!(proxy.connections(), 0);
}

#[tokio::test]
async fn the_proxy_gets_its_credentials_and_a_refusal_is_said() {
    let port = receiver().await;
    use base64::Engine;
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("egress:s3cret")
    );
    let proxy = ConnectProxy::start(Some(want.clone()));
    let to = format!("http://127.0.0.1:{port}/hooks");
    let ok = client(&proxy, Some("egress:s3cret"), open());
    assert_eq!(ok.execute(post(&to)).await.unwrap().status(), 200);
    let wrong = client(&proxy, Some("egress:wrong"), open());
    let e = wrong.execute(post(&to)).await.unwrap_err();
    let mut chain = String::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
    while let Some(inner) = cur {
        chain.push_str(&format!("{inner} / "));
        cur = inner.source();
    }
    assert!(
        chain.contains("407 Proxy Authentication Required"),
        "{chain}"
    );
    assert!(
        !chain.contains("s3cret") && !chain.contains("wrong"),
        "{chain}"
    );
    assert_eq!(
        proxy.authorizations()[0].as_deref(),
        Some(want.as_str()),
        "the credentials from the proxy URL"
    );
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = String::new();
    let mut cur = Some(e);
    while let Some(inner) = cur {
        chain.push_str(&format!("{inner} / "));
        cur = inner.source();
    }
    chain
}

#[tokio::test]
async fn an_address_exempted_by_allow_cidrs_is_reached_directly_not_through_the_proxy() {
    let port = receiver().await;
    let proxy = ConnectProxy::start(None);
    let loopback = AddressPolicy {
        deny_private: true,
        allow: vec!["127.0.0.0/8".parse().unwrap()],
    };
    let c = client(&proxy, None, loopback);
    for to in [
        format!("http://localhost:{port}/hooks"),
        format!("http://127.0.0.1:{port}/hooks"),
    ] {
        assert_eq!(c.execute(post(&to)).await.unwrap().status(), 200, "{to}");
    }
    assert_eq!(proxy.connections(), 0, "the proxy's 127.0.0.1 is not ours");
}

#[tokio::test]
async fn a_proxy_that_cannot_reach_the_target_is_a_retry_with_its_answer() {
    let closed = crate::testkit::free_port().unwrap();
    let proxy = ConnectProxy::start(None);
    let c = client(&proxy, None, open());
    let e = c
        .execute(post(&format!("http://127.0.0.1:{closed}/hooks")))
        .await
        .unwrap_err();
    let text = chain(&*e);
    assert!(text.contains("502 Bad Gateway"), "{text}");
    assert!(crate::sinks::guard::blocked_in(&*e).is_none());
    assert_eq!(proxy.targets(), [format!("127.0.0.1:{closed}")]);
}
