//! The Amazon EventBridge sink: `PutEvents` through a per-bus [`batcher`](super::batcher).
//!
//! One attempt: resolve the options (secret references) → build the event
//! ([`EventBridgeTarget::message`]: the body as `Detail`, which must be a JSON object; the
//! hook's event type as `DetailType`) → the bus's batcher → that event's result of one
//! request: an entry the answer marks with an `ErrorCode` fails alone
//! ([`classify_entry`]), the others are delivered; a failed request fails each of its
//! events ([`crate::sinks::aws::classify_request`]).
//!
//! Region, endpoint, credentials and grants are the SQS sink's rules, shared in
//! [`crate::sinks::aws`]; every request goes through the egress guard's client.

mod entry;
mod opts;

pub use entry::MODULE;
pub use opts::*;

use super::aws::{
    classify_request, request_error, send_in_order, AccessOpts, Arn, AwsAccess, AwsClients,
    ResourceKind,
};
use super::batcher::{BoxFuture, Limits, Transport};
use super::guard::EgressGrant;
use super::{AttemptError, BatchMessage, Delivery, EdgePolicy, ErrorKind};
use crate::secrets::SecretPolicy;
use crate::sinks::payload::Payload;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Events per `PutEvents` request (an EventBridge limit).
pub const MAX_ENTRIES: usize = 10;
/// Bytes of one `PutEvents` request, and so of one event (the EventBridge limit, 256 KiB),
/// as [`event_size`] counts them.
pub const MAX_REQUEST_BYTES: usize = 262_144;
/// Bytes kept free under [`MAX_REQUEST_BYTES`] for an event's other fields when deciding
/// what is sent inline: source (256), detail-type (128), time (14), the bus name (up to
/// 1 600 as an ARN).
pub const FIELDS_RESERVE: usize = 2_048;
/// The `DetailType` of a hook without an event type, unless the entry's `detail_type` says
/// otherwise.
pub const DEFAULT_DETAIL_TYPE: &str = "ankusa.hook";
/// The batch-message attribute that carries an event's detail-type to the transport.
const DETAIL_TYPE: &str = "detail-type";

/// Resolved options of one `eventbridge` sink entry.
#[derive(Debug, Clone)]
pub struct EventBridgeTarget {
    /// The bus as the options name it (name or ARN), sent as `EventBusName`.
    pub event_bus: String,
    /// The bus's ARN when it is given as one.
    pub arn: Option<Arn>,
    /// The events' `Source`.
    pub source: String,
    /// The `DetailType` of a hook without an event type.
    pub detail_type: String,
    /// Endpoint, region and credentials.
    pub access: AwsAccess,
    /// Which batcher serves this target: one per bus, source, client and linger.
    pub destination: String,
    linger: Duration,
}

/// The size of one event as EventBridge counts it toward its 256 KiB (UTF-8 bytes of
/// `Source`, `DetailType` and `Detail`, and 14 for `Time`), plus the bus name, so a request
/// is never over.
pub fn event_size(source: &str, detail_type: &str, bus: &str, detail: usize) -> usize {
    14 + source.len() + detail_type.len() + bus.len() + detail
}

impl EventBridgeTarget {
    /// The request limits of this bus.
    pub fn limits(&self) -> Limits {
        Limits {
            max_entries: MAX_ENTRIES,
            max_bytes: MAX_REQUEST_BYTES,
            linger: self.linger,
        }
    }

    /// Build one attempt's event: `Detail` is the body, which must be a JSON object (a
    /// claim-checked body is sent as its generic pointer, which is one); `DetailType` the
    /// hook's event type, or the entry's `detail_type`. Errors are permanent and name the
    /// reason: a body that is not a JSON object, an event type EventBridge refuses, an
    /// event over 256 KiB — the same row fails the same way on every attempt.
    pub fn message(&self, d: &Delivery, payload: &Payload) -> Result<BatchMessage, AttemptError> {
        let detail = match payload {
            Payload::Inline(b) => b.clone(),
            Payload::Checked { url, size } => {
                crate::sinks::payload::generic_pointer(url, *size).into()
            }
        };
        let perm =
            |e: String| AttemptError::permanent(ErrorKind::Other, format!("eventbridge: {e}"));
        let is_object =
            serde_json::from_slice::<serde_json::Value>(&detail).is_ok_and(|v| v.is_object());
        if !is_object {
            return Err(perm(
                "body is not a JSON object; EventBridge's Detail must be one".into(),
            ));
        }
        let detail_type = d
            .event_type
            .clone()
            .unwrap_or_else(|| self.detail_type.clone());
        if !valid_field(&detail_type, 128) {
            return Err(perm(format!(
                "event type is not a valid DetailType (1..=128 characters without control \
                 characters; {} bytes)",
                detail_type.len()
            )));
        }
        let size = event_size(&self.source, &detail_type, &self.event_bus, detail.len());
        if size > MAX_REQUEST_BYTES {
            return Err(perm(format!(
                "event is {size} bytes with its fields, over {MAX_REQUEST_BYTES}"
            )));
        }
        Ok(BatchMessage {
            body: detail,
            attributes: vec![(DETAIL_TYPE.into(), detail_type, false)],
            group: None,
            dedup: None,
            size,
        })
    }
}

/// Entry error codes that are the sender's fault: the same event fails the same way again,
/// so the row is dead-lettered. Every other code (throttling, `InternalFailure`, KMS
/// trouble, codes this build does not know) retries.
pub const PERMANENT_ENTRY_CODES: &[&str] = &[
    "MalformedDetail",
    "InvalidArgument",
    "InvalidArgumentException",
    "ValidationException",
    "AccessDeniedException",
    "NotAuthorizedForSourceException",
    "NotAuthorizedForDetailTypeException",
    "ResourceNotFoundException",
];

/// What one failed entry of a `PutEvents` answer means: permanent for
/// [`PERMANENT_ENTRY_CODES`], otherwise a retry of that row alone.
pub fn classify_entry(code: &str, message: &str) -> AttemptError {
    let error = super::truncate(format!("eventbridge {code}: {message}"), 512);
    match PERMANENT_ENTRY_CODES.contains(&code) {
        true => AttemptError::permanent(ErrorKind::Other, error),
        false => AttemptError::retry(ErrorKind::Other, error),
    }
}

/// The EventBridge clients of a worker process, one per endpoint, region and credentials.
pub type EventBridgeClients = AwsClients<aws_sdk_eventbridge::Client>;

/// The client of `t`, built on first use; SDK retries are off (ankusa retries rows) and
/// the SDK caches no credentials (the chain does).
fn client(
    clients: &EventBridgeClients,
    t: &EventBridgeTarget,
) -> Result<aws_sdk_eventbridge::Client, String> {
    use aws_sdk_eventbridge::config::{BehaviorVersion, IdentityCache, Region};
    clients.client(&t.access, |http, creds| {
        let mut b = aws_sdk_eventbridge::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(t.access.region.clone()))
            .credentials_provider(creds)
            .identity_cache(IdentityCache::no_cache())
            .retry_config(aws_sdk_eventbridge::config::retry::RetryConfig::disabled())
            .http_client(http);
        if let Some(e) = &t.access.endpoint {
            b = b.endpoint_url(e.clone());
        }
        aws_sdk_eventbridge::Client::from_conf(b.build())
    })
}

/// One bus's requests.
struct EventBridgeTransport {
    client: aws_sdk_eventbridge::Client,
    event_bus: String,
    source: String,
}

impl Transport for EventBridgeTransport {
    fn send(&self, batch: Vec<BatchMessage>) -> BoxFuture<Vec<Result<(), AttemptError>>> {
        let client = self.client.clone();
        let (bus, source) = (self.event_bus.clone(), self.source.clone());
        let build = move |m: BatchMessage| event(&bus, &source, m);
        Box::pin(send_in_order(
            "eventbridge",
            batch,
            build,
            move |entries| async move {
                let out = client
                    .put_events()
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .map_err(|e| request_error("eventbridge", &e, classify_request))?;
                // The answer's entries are the request's, in order.
                Ok(out
                    .entries()
                    .iter()
                    .map(|e| match e.error_code() {
                        Some(code) => Err(classify_entry(code, e.error_message().unwrap_or(""))),
                        None => Ok(()),
                    })
                    .collect())
            },
        ))
    }
}

/// One message as a `PutEvents` entry on `bus` from `source`: its detail-type and detail
/// (checked to be a JSON object when the message was built, so UTF-8).
fn event(
    bus: &str,
    source: &str,
    m: BatchMessage,
) -> Result<aws_sdk_eventbridge::types::PutEventsRequestEntry, String> {
    let detail_type = m
        .attributes
        .into_iter()
        .find(|a| a.0 == DETAIL_TYPE)
        .map(|a| a.1);
    let detail = String::from_utf8(m.body.to_vec()).map_err(|_| "body is not UTF-8 text")?;
    Ok(aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(bus)
        .source(source)
        .set_detail_type(detail_type)
        .detail(detail)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::guard::NO_GRANT;

    fn opts(v: serde_json::Value) -> Result<EventBridgeOpts, String> {
        EventBridgeOpts::from_opts(v.as_object().unwrap())
    }

    #[test]
    fn options_are_checked_and_name_the_bad_field() {
        let ok = serde_json::json!({"event_bus": "default", "source": "acme.orders"});
        assert!(opts(ok).is_ok());
        assert!(opts(serde_json::json!({"event_bus": "arn:aws:events:eu-west-1:123456789012:event-bus/aws.partner/x/y", "source": "s"})).is_ok());
        let table = [
            (serde_json::json!({"source": "s"}), "event_bus"),
            (serde_json::json!({"event_bus": "b"}), "source"),
            (
                serde_json::json!({"event_bus": "a b", "source": "s"}),
                "event_bus",
            ),
            (
                serde_json::json!({"event_bus": "b", "source": ""}),
                "source",
            ),
            (
                serde_json::json!({"event_bus": "b", "source": "aws.ec2"}),
                "source",
            ),
            (
                serde_json::json!({"event_bus": "b", "source": "x".repeat(257)}),
                "source",
            ),
            (
                serde_json::json!({"event_bus": "b", "source": "s", "detail_type": "x".repeat(129)}),
                "detail_type",
            ),
            (
                serde_json::json!({"event_bus": "b", "source": "s", "region": "Mars"}),
                "region",
            ),
            (
                serde_json::json!({"event_bus": "b", "source": "s", "endpoint_url": "events.example"}),
                "endpoint_url",
            ),
            (
                serde_json::json!({"event_bus": "b", "source": "s", "secret_access_key": "k"}),
                "access_key_id",
            ),
            (
                serde_json::json!({"event_bus": "b", "source": "s", "linger_ms": 20_000}),
                "linger_ms",
            ),
            (
                serde_json::json!({"event_bus": "b", "source": "s", "detail-type": "x"}),
                "detail-type",
            ),
        ];
        for (o, field) in table {
            let e = opts(o.clone()).unwrap_err();
            assert!(e.contains(field), "{o}: {e}");
        }
    }

    #[test]
    fn a_blocked_endpoint_is_refused_at_source_put_and_at_attempt_time() {
        let edge = EdgePolicy::default();
        for ep in [
            "http://169.254.169.254",
            "http://127.0.0.1:4566",
            "http://10.0.0.1",
        ] {
            let o = serde_json::json!({"event_bus": "b", "source": "s", "endpoint_url": ep,
                "access_key_id": "k", "secret_access_key": "s"});
            let e = EventBridgeOpts::from_opts_with(o.as_object().unwrap(), &edge).unwrap_err();
            assert!(e.starts_with("endpoint_url:"), "{ep}: {e}");
            let t = opts(o).unwrap().resolve(&SecretPolicy::default()).unwrap();
            assert!(t
                .check_egress("acme", &edge)
                .unwrap_err()
                .starts_with("endpoint_url:"));
        }
    }

    #[test]
    fn ambient_credentials_need_a_granted_bus_arn() {
        let arn = "arn:aws:events:eu-west-1:123456789012:event-bus/orders";
        let grant = EgressGrant {
            custom_endpoints: false,
            ambient_credentials: vec![arn.into()],
        };
        assert!(crate::sinks::guard::valid_ambient_grant(arn));
        assert!(crate::sinks::guard::valid_ambient_grant(
            "arn:aws:kinesis:eu-west-1:123456789012:stream/acme-*"
        ));
        for bad in [
            "arn:aws:events:eu-west-1:123456789012:*",
            "arn:aws:events:eu-west-1:123456789012:event-bus/",
            "arn:aws:kinesis:eu-west-1:123456789012:orders",
            "arn:aws:events:eu-west-1:*:event-bus/x",
        ] {
            assert!(!crate::sinks::guard::valid_ambient_grant(bad), "{bad}");
        }
        let o = opts(serde_json::json!({"event_bus": arn, "source": "s"})).unwrap();
        assert!(o.check_grant("acme", &grant).is_ok());
        assert!(o
            .check_grant("acme", &NO_GRANT)
            .unwrap_err()
            .contains("ambient_credentials"));
        let named = opts(serde_json::json!({"event_bus": "orders", "source": "s"})).unwrap();
        assert!(named
            .check_grant("acme", &grant)
            .unwrap_err()
            .contains("ARN"));
    }

    fn delivery(body: &'static [u8], event_type: Option<&str>) -> Delivery {
        Delivery {
            tenant: "acme".into(),
            source: "s".into(),
            row: "7.0".into(),
            message_id: "msg_0123456789abcdef_7.0".into(),
            hook: 7,
            attempt: 1,
            body: bytes::Bytes::from_static(body),
            headers: Default::default(),
            committed_at_ms: 0,
            event_type: event_type.map(str::to_string),
            traceparent: None,
            at_ms: None,
        }
    }

    #[test]
    fn detail_is_the_json_body_and_detail_type_the_event_type() {
        let t = opts(serde_json::json!({"event_bus": "b", "source": "acme.orders"}))
            .unwrap()
            .resolve(&SecretPolicy::default())
            .unwrap();
        let d = delivery(br#"{"n":1}"#, Some("order.created"));
        let m = t.message(&d, &Payload::Inline(d.body.clone())).unwrap();
        assert_eq!(&m.body[..], br#"{"n":1}"#);
        assert_eq!(
            m.attributes,
            [(
                "detail-type".to_string(),
                "order.created".to_string(),
                false
            )]
        );
        let d = delivery(br#"{}"#, None);
        let m = t.message(&d, &Payload::Inline(d.body.clone())).unwrap();
        assert_eq!(m.attributes[0].1, DEFAULT_DETAIL_TYPE);
        for body in [&b"not json"[..], b"[1,2]", b"\"s\"", b"\xff"] {
            let d = delivery(b"", None);
            let e = t
                .message(&d, &Payload::Inline(bytes::Bytes::copy_from_slice(body)))
                .unwrap_err();
            assert_eq!(e.outcome(), "permanent");
            assert!(format!("{e:?}").contains("JSON object"), "{e:?}");
        }
        let checked = Payload::Checked {
            url: "s3://b/k".into(),
            size: 9,
        };
        assert!(t.message(&delivery(b"", None), &checked).is_ok());
        assert_eq!(
            classify_entry("MalformedDetail", "x").outcome(),
            "permanent"
        );
        assert_eq!(
            classify_entry("ThrottlingException", "x").outcome(),
            "retry"
        );
        assert_eq!(classify_entry("InternalFailure", "x").outcome(), "retry");
    }
}
