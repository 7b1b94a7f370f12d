//! The Amazon SQS sink: `SendMessageBatch` through a per-queue [`batcher`](super::batcher).
//!
//! Pipeline of one attempt: resolve the options (secret references) → build the message
//! ([`SqsTarget::message`]: body or claim-check pointer, attributes, FIFO group and
//! deduplication id) → the queue's batcher → one entry's result of one request, classified
//! per entry ([`classify_entry`]) or for the whole request ([`classify_request`]).
//!
//! Credentials: `access_key_id`/`secret_access_key` (and `session_token`) from the options,
//! usually as `${env:NAME}` references; otherwise the environment's AWS chain (environment
//! variables, web identity / EKS, ECS container credentials, EC2 instance metadata), as
//! implemented by `object_store`'s S3 client, so the worker does not build a second
//! credential stack (`aws-config` and its STS client). The ambient chain signs requests only
//! to AWS's own SQS endpoints (`https://sqs.<region>.amazonaws.com`, no other name under
//! `amazonaws.com`): a custom `endpoint_url` (or a queue URL
//! on another host) needs static credentials in the options, refused at `source put` and at
//! attempt time otherwise, so the worker's own AWS identity never signs for a stranger; and
//! only for queues the operator granted the tenant (`tenants.<id>.ambient_credentials`,
//! [`ambient_queue_arn`]). A custom endpoint itself needs `tenants.<id>.custom_endpoints`.
//!
//! Every request goes through the egress guard's client ([`crate::sinks::guard::guarded_aws_client`]):
//! checked addresses only, no proxy, and an answer read only up to a few KiB.

mod client;
mod entry;
mod opts;

pub use client::*;
pub use entry::MODULE;
pub use opts::*;

use super::batcher::{BoxFuture, Limits, Transport};
use super::guard::EgressGrant;
use super::{
    header_pairs, message_header_pairs, AttemptError, BatchMessage, Delivery, EdgePolicy, ErrorKind,
};
use crate::secrets::{has_reference, SecretPolicy};
use crate::sinks::payload::Payload;
use aws_sdk_sqs::config::{BehaviorVersion, IdentityCache, Region};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Entries per `SendMessageBatch` request (an SQS limit).
pub const MAX_ENTRIES: usize = 10;
/// Bytes of one message and of one request, body plus attributes (the SQS limit, 256 KiB).
pub const MAX_MESSAGE_BYTES: usize = 262_144;
/// Message attributes per message (an SQS limit).
pub const MAX_ATTRIBUTES: usize = 10;
/// Hook headers sent as attributes of their own; more go as one `ankusa-headers` attribute.
/// The rest is ankusa's: delivery id, tenant, event type, and a claim-check's pointer.
pub const HEADER_ATTRIBUTES: usize = MAX_ATTRIBUTES - 4;
/// The message attribute the Amazon SQS Extended Client reads: the offloaded body's size.
pub const EXTENDED_PAYLOAD_SIZE: &str = "ExtendedPayloadSize";
/// The class name at the head of an Amazon SQS Extended Client pointer.
pub const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";

/// Resolved options of one `sqs` sink entry.
#[derive(Debug, Clone)]
pub struct SqsTarget {
    /// The queue URL.
    pub queue_url: String,
    /// A FIFO queue (`.fifo`): every message needs a group id; the delivery's message id
    /// (`webhook-id`) deduplicates.
    pub fifo: bool,
    /// Endpoint override, if any.
    pub endpoint: Option<String>,
    /// Signing region.
    pub region: String,
    /// Static credentials `(key id, secret, session token)`; `None`: the environment's chain.
    creds: Option<crate::sinks::aws::StaticCreds>,
    /// Which client serves this target: endpoint, region, credentials fingerprint.
    pub client_key: String,
    /// Which batcher serves this target: one per queue and client and limits.
    pub destination: String,
    group: Option<String>,
    header_attributes: bool,
    max_message_bytes: usize,
    linger: Duration,
}

impl SqsTarget {
    /// The endpoint, region and credentials of this queue, as the shared AWS client cache
    /// keys them.
    fn access(&self) -> crate::sinks::aws::AwsAccess {
        crate::sinks::aws::AwsAccess {
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            creds: self.creds.clone(),
            client_key: self.client_key.clone(),
        }
    }

    /// The request limits of this queue.
    pub fn limits(&self) -> Limits {
        Limits {
            max_entries: MAX_ENTRIES,
            max_bytes: self.max_message_bytes,
            linger: self.linger,
        }
    }

    /// Build one attempt's message. `lane` is the row's lane id for an ordered entry (its
    /// FIFO `MessageGroupId`). Errors are permanent: the message cannot be valid SQS.
    pub fn message(
        &self,
        d: &Delivery,
        payload: &Payload,
        lane: Option<&str>,
    ) -> Result<BatchMessage, AttemptError> {
        let mut attributes: Vec<(String, String, bool)> = vec![
            ("ankusa-delivery-id".into(), d.row.clone(), false),
            ("ankusa-tenant".into(), d.tenant.clone(), false),
        ];
        if let Some(et) = &d.event_type {
            attributes.push((crate::sinks::EVENT_TYPE_HEADER.into(), et.clone(), false));
        }
        let body = match payload {
            Payload::Inline(b) => b.clone(),
            Payload::Checked { url, size } => match crate::sinks::payload::s3_parts(url) {
                Some((bucket, key)) => {
                    attributes.push((EXTENDED_PAYLOAD_SIZE.into(), size.to_string(), true));
                    extended_pointer(&bucket, &key).into()
                }
                None => {
                    attributes.push(("ankusa-claim-check".into(), url.clone(), false));
                    crate::sinks::payload::generic_pointer(url, *size).into()
                }
            },
        };
        let text = std::str::from_utf8(&body).map_err(|_| {
            AttemptError::permanent(
                ErrorKind::Other,
                "sqs: body is not UTF-8 text; SQS carries text only",
            )
        })?;
        if let Some(c) = text.chars().find(|c| !valid_sqs_char(*c)) {
            return Err(AttemptError::permanent(
                ErrorKind::Other,
                format!(
                    "sqs: body holds character U+{:04X}, which SQS refuses",
                    c as u32
                ),
            ));
        }
        if self.header_attributes {
            let pairs = message_header_pairs(d);
            let individual = pairs.len() <= HEADER_ATTRIBUTES
                && pairs
                    .iter()
                    .all(|(k, v)| valid_attribute_name(k) && valid_attribute_value(v));
            if individual {
                attributes.extend(pairs.into_iter().map(|(k, v)| (k, v, false)));
            } else if !pairs.is_empty() {
                let map: serde_json::Map<String, serde_json::Value> = pairs
                    .into_iter()
                    .map(|(k, v)| (k, serde_json::Value::String(v)))
                    .collect();
                let json = serde_json::Value::Object(map).to_string();
                if valid_attribute_value(&json) {
                    attributes.push(("ankusa-headers".into(), json, false));
                }
            }
        }
        let size = body.len()
            + attributes
                .iter()
                .map(|(k, v, _)| k.len() + v.len() + 6)
                .sum::<usize>();
        if size > self.max_message_bytes {
            return Err(AttemptError::permanent(
                ErrorKind::Other,
                format!(
                    "sqs: message is {size} bytes with its attributes, over {}",
                    self.max_message_bytes
                ),
            ));
        }
        let (group, dedup) = if self.fifo {
            let g = match lane {
                Some(l) => group_id_of_lane(l),
                None => self.group.clone().unwrap_or_else(|| d.row.clone()),
            };
            (Some(g), Some(d.message_id.clone()))
        } else {
            (None, None)
        };
        Ok(BatchMessage {
            body,
            attributes,
            group,
            dedup,
            size,
        })
    }
}

/// What one failed entry of a `SendMessageBatch` means: the service's own faults and
/// throttling retry; the sender's faults (invalid parameters, contents) are permanent,
/// except KMS trouble with the queue's key, which an operator fixes while rows wait.
pub fn classify_entry(code: &str, sender_fault: bool, message: &str) -> AttemptError {
    let error = super::truncate(format!("sqs {code}: {message}"), 512);
    let retryable = !sender_fault || RETRYABLE_CODES.contains(&code) || code.starts_with("Kms");
    sqs_error(retryable, error)
}

const RETRYABLE_CODES: &[&str] = &[
    "ThrottlingException",
    "RequestThrottled",
    "ServiceUnavailable",
    "InternalError",
    "InternalFailure",
    "ExpiredToken",
    "RequestExpired",
    "RequestTimeout",
    "OverLimit",
];

/// What a failed `SendMessageBatch` request means for every entry in it: transport
/// errors, throttling, 429 and 5xx retry; a request that could not be built and other 4xx
/// (queue does not exist, access denied, invalid parameter) are permanent.
pub fn classify_request(status: Option<u16>, code: Option<&str>, message: &str) -> AttemptError {
    let error = super::truncate(
        format!(
            "sqs {}{}: {message}",
            code.unwrap_or("error"),
            status.map(|s| format!(" (http {s})")).unwrap_or_default()
        ),
        512,
    );
    let retry = match (status, code) {
        (_, Some(c)) if RETRYABLE_CODES.contains(&c) || c.starts_with("Kms") => true,
        (None, _) => true,
        (Some(s), _) => s == 408 || s == 429 || s >= 500,
    };
    sqs_error(retry, error)
}

/// An SQS failure: retryable or permanent, of no kind the history names apart.
fn sqs_error(retry: bool, error: String) -> AttemptError {
    match retry {
        true => AttemptError::retry(ErrorKind::Other, error),
        false => AttemptError::permanent(ErrorKind::Other, error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::guard::NO_GRANT;

    fn kind(e: &AttemptError) -> &'static str {
        e.outcome()
    }

    #[test]
    fn failed_entries_map_to_retry_or_permanent() {
        let table: &[(&str, bool, &str)] = &[
            ("InternalError", false, "retry"),
            ("ServiceUnavailable", false, "retry"),
            ("ThrottlingException", true, "retry"),
            ("RequestThrottled", true, "retry"),
            ("KmsThrottled", true, "retry"),
            ("KmsAccessDenied", true, "retry"),
            ("InvalidParameterValue", true, "permanent"),
            ("InvalidMessageContents", true, "permanent"),
            ("MissingParameter", true, "permanent"),
            ("SomethingNew", false, "retry"),
            ("SomethingNew", true, "permanent"),
        ];
        for (code, sender, want) in table {
            assert_eq!(kind(&classify_entry(code, *sender, "x")), *want, "{code}");
        }
    }

    #[test]
    fn failed_requests_map_to_retry_or_permanent() {
        let table: &[(Option<u16>, Option<&str>, &str)] = &[
            (None, None, "retry"),
            (Some(500), Some("InternalFailure"), "retry"),
            (Some(503), None, "retry"),
            (Some(429), None, "retry"),
            (Some(400), Some("ThrottlingException"), "retry"),
            (Some(400), Some("RequestThrottled"), "retry"),
            (Some(400), Some("ExpiredToken"), "retry"),
            (
                Some(400),
                Some("AWS.SimpleQueueService.NonExistentQueue"),
                "permanent",
            ),
            (Some(400), Some("QueueDoesNotExist"), "permanent"),
            (Some(403), Some("AccessDenied"), "permanent"),
            (Some(400), Some("InvalidParameterValue"), "permanent"),
            (Some(400), Some("TooManyEntriesInBatchRequest"), "permanent"),
        ];
        for (status, code, want) in table {
            assert_eq!(
                kind(&classify_request(*status, *code, "x")),
                *want,
                "{status:?} {code:?}"
            );
        }
    }

    fn opts(v: serde_json::Value) -> Result<SqsOpts, String> {
        SqsOpts::from_opts(v.as_object().unwrap())
    }

    #[test]
    fn options_are_checked_and_name_the_bad_field() {
        assert!(
            opts(serde_json::json!({"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q"}))
                .is_ok()
        );
        assert!(opts(serde_json::json!({"queue_url": "sqs://x"}))
            .unwrap_err()
            .contains("queue_url"));
        assert!(
            opts(serde_json::json!({"queue_url": "http://x/1/q", "access_key_id": "a"}))
                .unwrap_err()
                .contains("secret_access_key")
        );
        assert!(opts(
            serde_json::json!({"queue_url": "http://x/1/q", "max_message_bytes": 2_000_000})
        )
        .unwrap_err()
        .contains("max_message_bytes"));
        assert!(
            opts(serde_json::json!({"queue_url": "http://x/1/q", "batch": 3}))
                .unwrap_err()
                .contains("batch")
        );
    }

    #[test]
    fn region_and_endpoint_come_from_the_queue_url() {
        let t =
            opts(serde_json::json!({"queue_url": "https://sqs.eu-west-3.amazonaws.com/1/q.fifo"}))
                .unwrap()
                .resolve(&SecretPolicy::default())
                .unwrap();
        assert_eq!(
            (t.region.as_str(), t.endpoint.as_deref(), t.fifo),
            ("eu-west-3", None, true)
        );
        let t = opts(
            serde_json::json!({"queue_url": "http://127.0.0.1:5000/123/q", "region": "us-east-1",
            "access_key_id": "k", "secret_access_key": "s"}),
        )
        .unwrap()
        .resolve(&SecretPolicy::default())
        .unwrap();
        assert_eq!(t.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
        assert!(!t.fifo);
    }

    #[test]
    fn a_queue_url_on_another_amazonaws_name_is_a_custom_endpoint_that_needs_the_grant() {
        let o = opts(serde_json::json!({
            "queue_url": "https://abc123.execute-api.us-east-1.amazonaws.com/123456789012/q",
            "access_key_id": "k", "secret_access_key": "s"}))
        .unwrap();
        let no_grant = EgressGrant {
            custom_endpoints: false,
            ambient_credentials: vec![],
        };
        let e = o.check_grant("acme", &no_grant).unwrap_err();
        assert!(e.contains("custom_endpoints"), "{e}");
        let t = o.resolve(&SecretPolicy::default()).unwrap();
        assert_eq!(
            t.endpoint.as_deref(),
            Some("https://abc123.execute-api.us-east-1.amazonaws.com")
        );
        let own = opts(serde_json::json!({
            "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
            "access_key_id": "k", "secret_access_key": "s"}))
        .unwrap();
        assert!(own.check_grant("acme", &no_grant).is_ok());
    }

    #[test]
    fn custom_endpoints_need_static_credentials() {
        for o in [
            serde_json::json!({"queue_url": "http://127.0.0.1:5000/123/q"}),
            serde_json::json!({"queue_url": "https://sqs.eu-west-3.amazonaws.com/1/q", "endpoint_url": "https://evil.example"}),
            serde_json::json!({"queue_url": "https://sqs.eu-west-3.amazonaws.com/1/q", "endpoint_url": "${env:ANKUSA_SECRET_EP}"}),
        ] {
            let e = opts(o.clone()).unwrap_err();
            assert!(e.contains("explicit access_key_id"), "{o}: {e}");
        }
        // A spec written past validation is refused again at attempt time.
        let raw: SqsOpts =
            serde_json::from_value(serde_json::json!({"queue_url": "http://127.0.0.1:5000/123/q"}))
                .unwrap();
        let e = raw.resolve(&SecretPolicy::default()).unwrap_err();
        assert!(e.text.contains("explicit"), "{e}");
        assert_eq!(e.kind, ErrorKind::Other, "{e}");
        // A secret reference that cannot be read fails the attempt as a secret's, from its
        // type and not from its words.
        let hidden: SqsOpts =
            serde_json::from_value(serde_json::json!({"queue_url": "${env:ANKUSA_SECRET_X__Q}"}))
                .unwrap();
        let e = hidden.resolve(&SecretPolicy::default()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Secret, "{e}");
        assert!(e.text.contains("${env:ANKUSA_SECRET_X__Q}"), "{e}");
        assert!(opts(
            serde_json::json!({"queue_url": "https://sqs.eu-west-3.amazonaws.com/1/q",
            "endpoint_url": "https://sqs.eu-west-3.amazonaws.com"})
        )
        .is_ok());
    }

    fn delivery(headers: &str) -> Delivery {
        Delivery {
            tenant: "acme".into(),
            source: "s".into(),
            row: "7.0".into(),
            message_id: "msg_0123456789abcdef_7.0".into(),
            hook: 7,
            attempt: 1,
            body: bytes::Bytes::from_static(b"{}"),
            headers: headers.into(),
            committed_at_ms: 0,
            event_type: None,
            traceparent: None,
            at_ms: None,
        }
    }

    #[test]
    fn headers_become_attributes_or_one_json_attribute_when_too_many() {
        let t = opts(serde_json::json!({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q"}))
            .unwrap()
            .resolve(&SecretPolicy::default())
            .unwrap();
        let m = t
            .message(
                &delivery(r#"{"X-Event":"push","Content-Length":"2"}"#),
                &Payload::Inline("{}".into()),
                None,
            )
            .unwrap();
        let names: Vec<&str> = m.attributes.iter().map(|a| a.0.as_str()).collect();
        assert_eq!(names, ["ankusa-delivery-id", "ankusa-tenant", "X-Event"]);
        let many: serde_json::Map<String, serde_json::Value> = (0..9)
            .map(|i| (format!("h{i}"), serde_json::json!("v")))
            .collect();
        let m = t
            .message(
                &delivery(&serde_json::Value::Object(many).to_string()),
                &Payload::Inline("{}".into()),
                None,
            )
            .unwrap();
        assert_eq!(m.attributes.len(), 3);
        assert_eq!(m.attributes[2].0, "ankusa-headers");
    }

    #[test]
    fn the_attempt_spans_traceparent_replaces_the_producers() {
        let t = opts(serde_json::json!({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q"}))
            .unwrap()
            .resolve(&SecretPolicy::default())
            .unwrap();
        let producer = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let attempt = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
        let mut d = delivery(&serde_json::json!({ "traceparent": producer }).to_string());
        let tp = |m: &BatchMessage| {
            m.attributes
                .iter()
                .filter(|a| a.0 == "traceparent")
                .map(|a| a.1.clone())
                .collect::<Vec<_>>()
        };
        // Export off: the producer's passes through as it came.
        let m = t.message(&d, &Payload::Inline("{}".into()), None).unwrap();
        assert_eq!(tp(&m), [producer]);
        // Export on: the attempt's, once.
        d.traceparent = Some(attempt.into());
        let m = t.message(&d, &Payload::Inline("{}".into()), None).unwrap();
        assert_eq!(tp(&m), [attempt]);
    }

    #[test]
    fn the_event_type_is_an_attribute_within_the_limit_of_ten() {
        let t = opts(serde_json::json!({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q"}))
            .unwrap()
            .resolve(&SecretPolicy::default())
            .unwrap();
        let most: serde_json::Map<String, serde_json::Value> = (0..HEADER_ATTRIBUTES)
            .map(|i| (format!("h{i}"), serde_json::json!("v")))
            .collect();
        let mut d = delivery(&serde_json::Value::Object(most).to_string());
        d.event_type = Some("order.created".into());
        // The fullest message: every header on its own, the event type and a pointer.
        let m = t
            .message(
                &d,
                &Payload::Checked {
                    url: "s3://b/k/7".into(),
                    size: 2_097_152,
                },
                None,
            )
            .unwrap();
        assert!(m.attributes.len() <= MAX_ATTRIBUTES, "{:?}", m.attributes);
        assert!(m.attributes.contains(&(
            "ankusa-event-type".into(),
            "order.created".into(),
            false
        )));
        assert!(
            m.attributes.iter().any(|a| a.0 == "h0"),
            "{:?}",
            m.attributes
        );
    }

    #[test]
    fn a_claim_checked_body_is_an_extended_client_pointer() {
        let t =
            opts(serde_json::json!({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q.fifo"}))
                .unwrap()
                .resolve(&SecretPolicy::default())
                .unwrap();
        let m = t
            .message(
                &delivery(""),
                &Payload::Checked {
                    url: "s3://b/k/7".into(),
                    size: 2_097_152,
                },
                Some("acme:s:0:abc"),
            )
            .unwrap();
        assert_eq!(
            std::str::from_utf8(&m.body).unwrap(),
            r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k/7"}]"#
        );
        assert!(m
            .attributes
            .contains(&("ExtendedPayloadSize".into(), "2097152".into(), true)));
        assert_eq!(m.group.as_deref(), Some("acme:s:0:abc"));
        // The delivery's message id, not the bare row id: row ids start again after a
        // Redis reset and repeat across instances, and SQS would drop a different delivery
        // as a duplicate within its 5-minute window.
        assert_eq!(m.dedup.as_deref(), Some("msg_0123456789abcdef_7.0"));
    }

    #[test]
    fn ambient_credentials_sign_only_for_the_queue_the_arn_names() {
        let url = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo";
        assert_eq!(
            ambient_queue_arn(url, "eu-west-1", None).unwrap(),
            "arn:aws:sqs:eu-west-1:123456789012:orders.fifo"
        );
        assert_eq!(
            ambient_queue_arn(
                url,
                "eu-west-1",
                Some("https://sqs.eu-west-1.amazonaws.com")
            )
            .unwrap(),
            "arn:aws:sqs:eu-west-1:123456789012:orders.fifo"
        );
        assert_eq!(
            ambient_queue_arn(
                "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q",
                "cn-north-1",
                None
            )
            .unwrap(),
            "arn:aws-cn:sqs:cn-north-1:123456789012:q"
        );
        for (u, region, endpoint) in [
            (url, "us-east-1", None),
            (
                url,
                "eu-west-1",
                Some("https://sqs.us-east-1.amazonaws.com"),
            ),
            (
                "http://sqs.eu-west-1.amazonaws.com/123456789012/q",
                "eu-west-1",
                None,
            ),
            (
                "https://sqs.eu-west-1.amazonaws.com:444/123456789012/q",
                "eu-west-1",
                None,
            ),
            (
                "https://sqs.eu-west-1.amazonaws.com/123456789012/q/x",
                "eu-west-1",
                None,
            ),
            (
                "https://sqs.eu-west-1.amazonaws.com/acct/q",
                "eu-west-1",
                None,
            ),
            (
                "https://sqs.eu-west-1.amazonaws.com/123456789012/q%2Fx",
                "eu-west-1",
                None,
            ),
            ("https://evil.example/123456789012/q", "eu-west-1", None),
        ] {
            assert!(
                ambient_queue_arn(u, region, endpoint).is_err(),
                "{u} {region} {endpoint:?}"
            );
        }
        let grant = EgressGrant {
            custom_endpoints: false,
            ambient_credentials: vec!["arn:aws:sqs:eu-west-1:123456789012:acme-*".into()],
        };
        assert!(grant.ambient_allows("arn:aws:sqs:eu-west-1:123456789012:acme-orders"));
        assert!(!grant.ambient_allows("arn:aws:sqs:eu-west-1:123456789012:beta-orders"));
        assert!(!NO_GRANT.ambient_allows("arn:aws:sqs:eu-west-1:123456789012:acme-x"));
        assert!(crate::sinks::guard::valid_ambient_grant(
            "arn:aws:sqs:eu-west-1:123456789012:acme-*"
        ));
        for bad in [
            "*",
            "arn:aws:sqs:*",
            "arn:aws:sqs:eu-west-1:*:q",
            "projects/*",
            "projects/p/topics/",
        ] {
            assert!(!crate::sinks::guard::valid_ambient_grant(bad), "{bad}");
        }
    }

    #[test]
    fn binary_bodies_are_refused_as_permanent() {
        let t = opts(serde_json::json!({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q"}))
            .unwrap()
            .resolve(&SecretPolicy::default())
            .unwrap();
        let e = t
            .message(
                &delivery(""),
                &Payload::Inline(bytes::Bytes::from_static(b"\x00\x01")),
                None,
            )
            .unwrap_err();
        assert!(matches!(e, AttemptError::Permanent { .. }));
    }
}
