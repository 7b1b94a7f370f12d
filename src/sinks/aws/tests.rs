//! Unit tests of the AWS access rules: endpoints, ARNs, grants, error classes.
use super::*;

#[test]
fn arns_parse_only_in_their_service_and_kind() {
    let ok = |n: &str| !n.is_empty() && !n.contains('/');
    let a = Arn::parse(
        "arn:aws:kinesis:eu-west-1:123456789012:stream/orders",
        "kinesis",
        "stream",
        ok,
    )
    .unwrap();
    assert_eq!(
        (a.region.as_str(), a.account.as_str()),
        ("eu-west-1", "123456789012")
    );
    for bad in [
        "arn:aws:kinesis:eu-west-1:123456789012:stream/",
        "arn:aws:kinesis:eu-west-1:12345:stream/orders",
        "arn:aws:sqs:eu-west-1:123456789012:stream/orders",
        "arn:aws:kinesis:eu-west-1:123456789012:bus/orders",
        "arn:aws:kinesis::123456789012:stream/orders",
        "orders",
    ] {
        assert!(Arn::parse(bad, "kinesis", "stream", ok).is_none(), "{bad}");
    }
}

#[test]
fn ambient_arns_need_the_arns_region_and_aws_endpoint() {
    let ok = |n: &str| !n.is_empty();
    let a = Arn::parse(
        "arn:aws:events:eu-west-1:123456789012:event-bus/b",
        "events",
        "event-bus",
        ok,
    );
    let got = ambient_arn(a.as_ref(), "the bus", "eu-west-1", None, "events").unwrap();
    assert_eq!(got, "arn:aws:events:eu-west-1:123456789012:event-bus/b");
    assert!(ambient_arn(
        a.as_ref(),
        "the bus",
        "eu-west-1",
        Some("https://events.eu-west-1.amazonaws.com"),
        "events"
    )
    .is_ok());
    for (region, endpoint) in [
        ("us-east-1", None),
        ("eu-west-1", Some("https://events.us-east-1.amazonaws.com")),
        ("eu-west-1", Some("http://events.eu-west-1.amazonaws.com")),
        ("eu-west-1", Some("https://evil.example")),
        (
            "eu-west-1",
            Some("https://events.eu-west-1.amazonaws.com:444"),
        ),
    ] {
        assert!(
            ambient_arn(a.as_ref(), "the bus", region, endpoint, "events").is_err(),
            "{region} {endpoint:?}"
        );
    }
    assert!(ambient_arn(None, "the bus", "eu-west-1", None, "events").is_err());
}

#[test]
fn requests_retry_on_throttling_and_faults_and_not_on_client_errors() {
    let table: &[(Option<u16>, Option<&str>, &str)] = &[
        (None, None, "retry"),
        (Some(500), None, "retry"),
        (Some(429), None, "retry"),
        (
            Some(400),
            Some("ProvisionedThroughputExceededException"),
            "retry",
        ),
        (Some(400), Some("KMSThrottlingException"), "retry"),
        (Some(400), Some("ResourceNotFoundException"), "permanent"),
        (Some(400), Some("ValidationException"), "permanent"),
        (Some(403), Some("AccessDeniedException"), "permanent"),
    ];
    for (status, code, want) in table {
        assert_eq!(
            classify_request("m", *status, *code, "x").outcome(),
            *want,
            "{status:?} {code:?}"
        );
    }
}

#[test]
fn only_the_services_own_endpoints_pass_as_aws_and_skip_the_custom_endpoint_grant() {
    for ok in [
        "https://kinesis.eu-west-1.amazonaws.com",
        "https://kinesis-fips.us-gov-west-1.amazonaws.com",
        "https://kinesis.cn-north-1.amazonaws.com.cn",
    ] {
        assert!(is_aws_endpoint(ok, "kinesis"), "{ok}");
    }
    // Names anyone can hold under amazonaws.com: an EC2 instance, an API Gateway stage, a
    // load balancer, an S3 website; another service; a port, a user, plain HTTP.
    for stranger in [
        "https://ec2-203-0-113-7.compute-1.amazonaws.com",
        "https://abc123.execute-api.us-east-1.amazonaws.com",
        "https://my-lb-1234.us-east-1.elb.amazonaws.com",
        "https://bucket.s3-website-us-east-1.amazonaws.com",
        "https://kinesis.evil.amazonaws.com",
        "https://kinesis.eu-west-1.amazonaws.com.evil.example",
        "https://events.eu-west-1.amazonaws.com",
        "https://kinesis.eu-west-1.amazonaws.com:8443",
        "https://u:p@kinesis.eu-west-1.amazonaws.com",
        "http://kinesis.eu-west-1.amazonaws.com",
    ] {
        assert!(!is_aws_endpoint(stranger, "kinesis"), "{stranger}");
        let access = AccessOpts {
            service: "kinesis",
            region: Some("us-east-1"),
            endpoint_url: Some(stranger),
            access_key_id: Some("k"),
            secret_access_key: Some("s"),
            session_token: None,
        };
        let no_grant = EgressGrant {
            custom_endpoints: false,
            ambient_credentials: vec![],
        };
        let stream = ResourceKind {
            option: "stream",
            service: "kinesis",
            kind: "stream",
            name_rule: "a name",
            valid_name: |n| !n.is_empty(),
        };
        let e = access
            .check_grant("acme", &no_grant, &stream, "orders")
            .unwrap_err();
        assert!(e.contains("custom_endpoints"), "{stranger}: {e}");
    }
}
