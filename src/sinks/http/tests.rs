//! Unit tests of the HTTP sink: classification, Retry-After, options, delivery headers, connection reuse, signing cost.
use super::*;
use std::sync::Arc;

#[test]
fn a_classified_answer_carries_the_kind_and_status_its_text_names() {
    for status in [301, 308, 400, 404, 408, 425, 429, 500, 503] {
        let e = classify(status, None, SystemTime::UNIX_EPOCH).unwrap_err();
        let text = match &e {
            AttemptError::Retry { error, .. } | AttemptError::Permanent { error, .. } => {
                error.clone()
            }
            AttemptError::Timeout(_) => String::new(),
        };
        assert_eq!(e.kind(), ErrorKind::HttpStatus(status), "{status}");
        assert!(text.starts_with(&format!("http {status}")), "{text}");
    }
}

#[test]
fn statuses_map_to_ok_retry_or_permanent() {
    let now = SystemTime::UNIX_EPOCH;
    let table: &[(u16, &str)] = &[
        (200, "ok"),
        (204, "ok"),
        (299, "ok"),
        (301, "permanent"),
        (302, "permanent"),
        (304, "permanent"),
        (400, "permanent"),
        (401, "permanent"),
        (404, "permanent"),
        (410, "permanent"),
        (408, "retry"),
        (425, "retry"),
        (429, "retry"),
        (500, "retry"),
        (503, "retry"),
        (599, "retry"),
    ];
    for (status, want) in table {
        let got = match classify(*status, None, now) {
            Ok(()) => "ok",
            Err(e) => e.outcome(),
        };
        assert_eq!(got, *want, "status {status}");
    }
}

#[test]
fn retry_after_accepts_seconds_and_http_dates_and_ignores_garbage() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
    assert_eq!(
        parse_retry_after("120", now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:51:37 GMT", now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon", now), None);
    assert_eq!(parse_retry_after("-5", now), None);
    match classify(429, Some("7"), now) {
        Err(AttemptError::Retry { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn options_need_an_http_url_and_refuse_unknown_fields() {
    let ok = serde_json::json!({"url": "https://example.com/h", "headers": {"authorization": "${env:TOKEN}"}});
    assert!(HttpOpts::from_opts(ok.as_object().unwrap()).is_ok());
    let bad = serde_json::json!({"url": "ftp://x"});
    assert!(HttpOpts::from_opts(bad.as_object().unwrap())
        .unwrap_err()
        .contains("url"));
    let unknown = serde_json::json!({"url": "http://x", "verb": "PUT"});
    assert!(HttpOpts::from_opts(unknown.as_object().unwrap())
        .unwrap_err()
        .contains("verb"));
}

#[test]
fn delivery_headers_replace_earlier_values_never_append() {
    let sink = HttpSink::new(EdgePolicy::default()).unwrap();
    let d = Delivery {
        tenant: "acme".into(),
        source: "s".into(),
        row: "9.0".into(),
        message_id: crate::sinks::message_id("0123456789abcdef", "9.0"),
        hook: 9,
        attempt: 3,
        body: bytes::Bytes::from_static(b"{}"),
        // stored by other means than a producer, which refuses these at commit
        headers: r#"{"webhook-id":"forged","Ankusa-Tenant":"other","ankusa-event-type":"forged","authorization":"producer","x-a":"1"}"#
            .into(),
        committed_at_ms: 0,
        event_type: Some("order.created".into()),
        traceparent: None,
        at_ms: Some(1_700_000_123_456),
    };
    let opts = HttpOpts {
        url: "https://example.com/h".into(),
        headers: BTreeMap::from([("authorization".to_string(), "sink".to_string())]),
        signing_secret: Some(SigningSecrets::One(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        )),
        basic_auth: None,
        oauth2: None,
        client_cert: None,
        client_key: None,
        ca: None,
    };
    let (h, signing) = sink.headers(&opts, &d).unwrap();
    let all = |n: &str| {
        h.get_all(n)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(all("webhook-id"), ["msg_0123456789abcdef_9.0"]);
    assert_eq!(all("ankusa-tenant"), ["acme"]);
    assert_eq!(all("ankusa-attempt"), ["3"]);
    assert_eq!(all("ankusa-event-type"), ["order.created"]);
    assert_eq!(all("authorization"), ["sink"]);
    assert_eq!(all("x-a"), ["1"]);
    // Signed by the caller, at the timestamp the headers carry.
    let (keys, ts) = signing.expect("a signing secret is set");
    assert_eq!(keys.len(), 1);
    assert_eq!(all("webhook-timestamp"), [ts.to_string()]);
    // The attempt's time by Redis' clock, not this host's.
    assert_eq!(ts, 1_700_000_123);
    let sig = crate::sinks::signing::signature_header(&keys, &d.message_id, ts, &d.body);
    assert!(sig.starts_with("v1,") && !sig.contains(' '), "{sig}");
}

/// `basic_auth` becomes RFC 7617's header (the RFC's own example), replacing a producer's
/// `Authorization`; it cannot sit beside `headers.authorization`, and a user name with `:`
/// is refused (the receiver would split it there).
#[test]
fn basic_auth_is_the_rfc_7617_header_and_refuses_ambiguity() {
    let sink = HttpSink::new(EdgePolicy::default()).unwrap();
    let d = Delivery {
        tenant: "acme".into(),
        source: "s".into(),
        row: "9.0".into(),
        message_id: crate::sinks::message_id("0123456789abcdef", "9.0"),
        hook: 9,
        attempt: 1,
        body: bytes::Bytes::from_static(b"{}"),
        headers: r#"{"authorization":"producer"}"#.into(),
        committed_at_ms: 0,
        event_type: None,
        traceparent: None,
        at_ms: None,
    };
    let json = serde_json::json!({"url": "https://example.com/h",
        "basic_auth": {"username": "Aladdin", "password": "open sesame"}});
    let opts = HttpOpts::from_opts(json.as_object().unwrap()).unwrap();
    let (h, _) = sink.headers(&opts, &d).unwrap();
    let auth: Vec<_> = h.get_all("authorization").iter().collect();
    assert_eq!(auth, ["Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="]);
    assert!(auth[0].is_sensitive());

    let o = |v: serde_json::Value| {
        HttpOpts::from_opts_with(
            v.as_object().unwrap(),
            &EdgePolicy::default().for_tenant("t"),
        )
    };
    let both = o(
        serde_json::json!({"url": "https://x/", "headers": {"Authorization": "Bearer x"},
        "basic_auth": {"username": "u", "password": "p"}}),
    );
    assert!(both.unwrap_err().contains("keep one"));
    let colon = o(serde_json::json!({"url": "https://x/",
        "basic_auth": {"username": "a:b", "password": "p"}}));
    assert!(colon.unwrap_err().contains("basic_auth.username"));
    let foreign = o(serde_json::json!({"url": "https://x/",
        "basic_auth": {"username": "u", "password": "${env:ANKUSA_ADMIN__TOKEN}"}}));
    assert!(foreign.unwrap_err().contains("basic_auth.password"));
    assert!(o(serde_json::json!({"url": "https://x/",
        "basic_auth": {"username": "u", "password": "${env:ANKUSA_SECRET_T__PW}"}}))
    .is_ok());
    let missing = o(serde_json::json!({"url": "https://x/", "basic_auth": {"username": "u"}}));
    assert!(missing.unwrap_err().contains("password"));
}

#[test]
fn options_refuse_reserved_headers_bad_secrets_and_blocked_literals() {
    let o = |v: serde_json::Value| {
        HttpOpts::from_opts_with(
            v.as_object().unwrap(),
            &EdgePolicy::default().for_tenant("t"),
        )
    };
    assert!(
        o(serde_json::json!({"url": "https://x/", "headers": {"Webhook-Signature": "v1,x"}}))
            .unwrap_err()
            .contains("reserved")
    );
    assert!(
        o(serde_json::json!({"url": "https://x/", "signing_secret": []}))
            .unwrap_err()
            .contains("empty")
    );
    let many: Vec<&str> = vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"; 5];
    assert!(
        o(serde_json::json!({"url": "https://x/", "signing_secret": many}))
            .unwrap_err()
            .contains("at most 4")
    );
    assert!(o(serde_json::json!({"url": "https://x/", "signing_secret": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "${env:ANKUSA_SECRET_T__NEXT}"]}))
        .is_ok());
    assert!(o(serde_json::json!({"url": "http://[::1]:8080/"}))
        .unwrap_err()
        .contains("blocked address ::1"));
    assert!(o(serde_json::json!({"url": "${env:ANKUSA_SECRET_T__URL}"})).is_ok());
    assert!(o(serde_json::json!({"url": "${env:URL}"}))
        .unwrap_err()
        .contains("secrets.env_prefix"));
    // the scheduler's syntax-only parse leaves the guards to attempt time
    assert!(HttpOpts::from_opts(
        serde_json::json!({"url": "http://127.0.0.1/"})
            .as_object()
            .unwrap()
    )
    .is_ok());
}

/// Waves of attempts as wide as the concurrency reuse their connections: a pool that
/// keeps fewer idle connections than that closes the surplus after each wave and opens
/// it again for the next (connections opened ≤ concurrency + 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_of_concurrent_attempts_reuse_their_connections() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    // A keep-alive HTTP/1.1 endpoint answering 200 to every request, counting accepts.
    let server = tokio::spawn({
        let accepted = accepted.clone();
        async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut buf, mut chunk) = (Vec::new(), [0u8; 8192]);
                    loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                            let len: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                buf.drain(..end + 4 + len);
                                let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                                if tcp.write_all(ok).await.is_err() {
                                    return;
                                }
                                continue;
                            }
                        }
                        match tcp.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        }
    });
    let sink = HttpSink::new(crate::testkit::loopback_edge()).unwrap();
    let opts = HttpOpts {
        url: format!("http://{addr}/h"),
        headers: BTreeMap::new(),
        signing_secret: None,
        basic_auth: None,
        oauth2: None,
        client_cert: None,
        client_key: None,
        ca: None,
    };
    let concurrency = 100;
    for wave in 0..10u64 {
        let mut attempts = tokio::task::JoinSet::new();
        for i in 0..concurrency {
            let (sink, opts) = (sink.clone(), opts.clone());
            let d = Delivery {
                tenant: "acme".into(),
                source: "s".into(),
                row: format!("{}.0", wave * 1000 + i),
                message_id: format!("msg_0123456789abcdef_{}.0", wave * 1000 + i),
                hook: wave * 1000 + i,
                attempt: 1,
                body: bytes::Bytes::from(vec![b'x'; 1024]),
                headers: Default::default(),
                committed_at_ms: 0,
                event_type: None,
                traceparent: None,
                at_ms: None,
            };
            attempts.spawn(async move { sink.deliver(&opts, &d).await });
        }
        while let Some(r) = attempts.join_next().await {
            assert!(r.unwrap().is_ok());
        }
    }
    let opened = accepted.load(Ordering::SeqCst);
    server.abort();
    assert!(
        opened <= concurrency as usize + 10,
        "{opened} connections opened for 10 waves of {concurrency} attempts"
    );
}

/// The cost of signing per delivery (BENCHMARKS.md): building one delivery's headers for
/// a 1 KiB body, unsigned, signed with one secret and with two (rotation).
/// `cargo test --release --lib signing_cost -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, run by hand"]
fn signing_cost_per_delivery() {
    let sink = HttpSink::new(EdgePolicy::default()).unwrap();
    let d = Delivery {
        tenant: "acme".into(),
        source: "orders".into(),
        row: "123456.0".into(),
        message_id: "msg_0123456789abcdef_123456.0".into(),
        hook: 123456,
        attempt: 1,
        body: bytes::Bytes::from(vec![b'x'; 1024]),
        headers: r#"{"content-type":"application/json","x-event":"push"}"#.into(),
        committed_at_ms: 0,
        event_type: None,
        traceparent: None,
        at_ms: None,
    };
    let a = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let b = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24tdGVzdA==";
    let cases = [
        ("unsigned", None),
        ("1 secret", Some(SigningSecrets::One(a.into()))),
        (
            "2 secrets",
            Some(SigningSecrets::Many(vec![a.into(), b.into()])),
        ),
    ];
    let n = 200_000;
    for (name, secret) in cases {
        let opts = HttpOpts {
            url: "https://example.com/h".into(),
            headers: BTreeMap::new(),
            signing_secret: secret,
            basic_auth: None,
            oauth2: None,
            client_cert: None,
            client_key: None,
            ca: None,
        };
        let signed = |sink: &HttpSink| {
            let (h, signing) = sink.headers(&opts, &d).unwrap();
            let sig = signing.map(|(keys, ts)| {
                crate::sinks::signing::signature_header(&keys, &d.message_id, ts, &d.body)
            });
            (h, sig)
        };
        let _ = signed(&sink);
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(signed(&sink));
        }
        println!(
            "headers for a 1 KiB delivery, {name}: {} ns",
            t.elapsed().as_nanos() / n
        );
    }
}
