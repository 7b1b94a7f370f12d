//! The Amazon Kinesis Data Streams sink: `PutRecords` through a per-stream
//! [`batcher`](super::batcher).
//!
//! One attempt: resolve the options (secret references) → build the record
//! ([`KinesisTarget::message`]: the body byte for byte as the record's data, the partition
//! key) → the stream's batcher → that record's result of one request: a record the answer
//! marks with an `ErrorCode` retries alone, the others are delivered ([`classify_record`]);
//! a failed request fails each of its records ([`crate::sinks::aws::classify_request`]).
//!
//! Partition key: an ordered entry's lane id (so a lane's records land on one shard, in
//! commit order: lanes deliver one hook at a time), otherwise the hook id, which spreads
//! hooks over the shards.
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

/// Records per `PutRecords` request. Kinesis takes 500, but the answer (a sequence number
/// and shard, or an error code and message, per record) must fit the
/// [`ANSWER_READ_MAX_BYTES`](crate::sinks::guard::ANSWER_READ_MAX_BYTES) the egress guard
/// reads; 50 records answer in well under it even when every one failed.
pub const MAX_RECORDS: usize = 50;
/// Bytes of one `PutRecords` request, data plus partition keys (the Kinesis limit, 5 MiB).
pub const MAX_REQUEST_BYTES: usize = 5 * 1024 * 1024;
/// Bytes of one record, data plus partition key (the Kinesis limit, 1 MiB).
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;
/// Bytes kept free for the partition key under [`MAX_RECORD_BYTES`] when deciding what is
/// sent inline (a lane id is at most 128 bytes as a key, a hook id 20).
pub const PARTITION_KEY_RESERVE: usize = 256;

/// Resolved options of one `kinesis` sink entry.
#[derive(Debug, Clone)]
pub struct KinesisTarget {
    /// The stream as the options name it (name or ARN).
    pub stream: String,
    /// The stream's ARN when it is given as one (sent as `StreamARN`).
    pub arn: Option<Arn>,
    /// Endpoint, region and credentials.
    pub access: AwsAccess,
    /// Which batcher serves this target: one per stream, client and linger.
    pub destination: String,
    linger: Duration,
}

impl KinesisTarget {
    /// The request limits of this stream.
    pub fn limits(&self) -> Limits {
        Limits {
            max_entries: MAX_RECORDS,
            max_bytes: MAX_REQUEST_BYTES,
            linger: self.linger,
        }
    }

    /// Build one attempt's record. `lane` is the row's lane id for an ordered entry: the
    /// partition key (as an SQS `MessageGroupId`, shortened to `lane:` and its SHA-256 past
    /// 128 characters); otherwise the hook id. A claim-checked body is sent as its generic
    /// pointer. Errors are permanent: a record over 1 MiB can never be put.
    pub fn message(
        &self,
        d: &Delivery,
        payload: &Payload,
        lane: Option<&str>,
    ) -> Result<BatchMessage, AttemptError> {
        let data = match payload {
            Payload::Inline(b) => b.clone(),
            Payload::Checked { url, size } => {
                crate::sinks::payload::generic_pointer(url, *size).into()
            }
        };
        let key = match lane {
            Some(l) => super::sqs::group_id_of_lane(l),
            None => d.hook.to_string(),
        };
        let size = data.len() + key.len();
        if size > MAX_RECORD_BYTES {
            return Err(AttemptError::permanent(
                ErrorKind::Other,
                format!("kinesis: record is {size} bytes with its partition key, over {MAX_RECORD_BYTES}"),
            ));
        }
        Ok(BatchMessage {
            body: data,
            attributes: Vec::new(),
            group: Some(key),
            dedup: None,
            size,
        })
    }
}

/// What one failed record of a `PutRecords` answer means: it retries. Kinesis reports
/// only throttling (`ProvisionedThroughputExceededException`), its own faults
/// (`InternalFailure`) and KMS trouble with the stream's key per record, all of which pass
/// or are fixed by an operator while rows wait; the other records of the request are
/// delivered and not sent again.
pub fn classify_record(code: &str, message: &str) -> AttemptError {
    AttemptError::retry(
        ErrorKind::Other,
        super::truncate(format!("kinesis {code}: {message}"), 512),
    )
}

/// The Kinesis clients of a worker process, one per endpoint, region and credentials.
pub type KinesisClients = AwsClients<aws_sdk_kinesis::Client>;

/// The client of `t`, built on first use; SDK retries are off (ankusa retries rows) and
/// the SDK caches no credentials (the chain does).
fn client(clients: &KinesisClients, t: &KinesisTarget) -> Result<aws_sdk_kinesis::Client, String> {
    use aws_sdk_kinesis::config::{BehaviorVersion, IdentityCache, Region};
    clients.client(&t.access, |http, creds| {
        let mut b = aws_sdk_kinesis::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(t.access.region.clone()))
            .credentials_provider(creds)
            .identity_cache(IdentityCache::no_cache())
            .retry_config(aws_sdk_kinesis::config::retry::RetryConfig::disabled())
            .http_client(http);
        if let Some(e) = &t.access.endpoint {
            b = b.endpoint_url(e.clone());
        }
        aws_sdk_kinesis::Client::from_conf(b.build())
    })
}

/// One stream's requests.
struct KinesisTransport {
    client: aws_sdk_kinesis::Client,
    stream: String,
    by_arn: bool,
}

impl Transport for KinesisTransport {
    fn send(&self, batch: Vec<BatchMessage>) -> BoxFuture<Vec<Result<(), AttemptError>>> {
        let client = self.client.clone();
        let (stream, by_arn) = (self.stream.clone(), self.by_arn);
        Box::pin(send_in_order(
            "kinesis",
            batch,
            record,
            move |records| async move {
                let req = client.put_records().set_records(Some(records));
                let req = match by_arn {
                    true => req.stream_arn(stream),
                    false => req.stream_name(stream),
                };
                let out = req
                    .send()
                    .await
                    .map_err(|e| request_error("kinesis", &e, classify_request))?;
                // The answer's records are the request's, in order.
                Ok(out
                    .records()
                    .iter()
                    .map(|r| match r.error_code() {
                        Some(code) => Err(classify_record(code, r.error_message().unwrap_or(""))),
                        None => Ok(()),
                    })
                    .collect())
            },
        ))
    }
}

/// One message as a `PutRecords` entry: its data and partition key.
fn record(m: BatchMessage) -> Result<aws_sdk_kinesis::types::PutRecordsRequestEntry, String> {
    aws_sdk_kinesis::types::PutRecordsRequestEntry::builder()
        .data(aws_sdk_kinesis::primitives::Blob::new(m.body.to_vec()))
        .set_partition_key(m.group)
        .build()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::guard::NO_GRANT;

    fn opts(v: serde_json::Value) -> Result<KinesisOpts, String> {
        KinesisOpts::from_opts(v.as_object().unwrap())
    }

    fn creds(mut v: serde_json::Value) -> serde_json::Value {
        v["access_key_id"] = "k".into();
        v["secret_access_key"] = "s".into();
        v
    }

    #[test]
    fn options_are_checked_and_name_the_bad_field() {
        assert!(opts(serde_json::json!({"stream": "orders"})).is_ok());
        assert!(opts(
            serde_json::json!({"stream": "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"})
        )
        .is_ok());
        let table = [
            (serde_json::json!({}), "stream"),
            (serde_json::json!({"stream": "a b"}), "stream"),
            (
                serde_json::json!({"stream": "arn:aws:kinesis:eu-west-1:1:stream/x"}),
                "stream",
            ),
            (
                serde_json::json!({"stream": "s", "region": "EU WEST"}),
                "region",
            ),
            (
                serde_json::json!({"stream": "s", "endpoint_url": "ftp://x"}),
                "endpoint_url",
            ),
            (
                serde_json::json!({"stream": "s", "access_key_id": "k"}),
                "secret_access_key",
            ),
            (
                serde_json::json!({"stream": "s", "session_token": "t"}),
                "session_token",
            ),
            (
                serde_json::json!({"stream": "s", "linger_ms": 10_001}),
                "linger_ms",
            ),
            (
                serde_json::json!({"stream": "s", "partition_key": "x"}),
                "partition_key",
            ),
            (
                serde_json::json!({"stream": "s", "endpoint_url": "http://127.0.0.1:1"}),
                "access_key_id",
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
            "http://[::1]:1",
        ] {
            let o = creds(serde_json::json!({"stream": "s", "endpoint_url": ep}));
            let e = KinesisOpts::from_opts_with(o.as_object().unwrap(), &edge).unwrap_err();
            assert!(e.starts_with("endpoint_url:"), "{ep}: {e}");
            let t = opts(o).unwrap().resolve(&SecretPolicy::default()).unwrap();
            let e = t.check_egress("acme", &edge).unwrap_err();
            assert!(e.starts_with("endpoint_url:"), "{ep}: {e}");
        }
    }

    #[test]
    fn custom_endpoints_need_the_grant_and_ambient_credentials_a_granted_arn() {
        let o = opts(creds(
            serde_json::json!({"stream": "s", "endpoint_url": "https://kinesis.example"}),
        ))
        .unwrap();
        assert!(o
            .check_grant("acme", &NO_GRANT)
            .unwrap_err()
            .contains("custom_endpoints"));
        let grant = EgressGrant {
            custom_endpoints: true,
            ambient_credentials: vec![],
        };
        assert!(o.check_grant("acme", &grant).is_ok());
        let arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders";
        let grant = EgressGrant {
            custom_endpoints: false,
            ambient_credentials: vec!["arn:aws:kinesis:eu-west-1:123456789012:stream/ord*".into()],
        };
        assert!(opts(serde_json::json!({"stream": arn}))
            .unwrap()
            .check_grant("acme", &grant)
            .is_ok());
        assert!(opts(serde_json::json!({"stream": arn}))
            .unwrap()
            .check_grant("acme", &NO_GRANT)
            .is_err());
        // A bare name has no account: the worker's credentials never sign for it.
        assert!(opts(serde_json::json!({"stream": "orders"}))
            .unwrap()
            .check_grant("acme", &grant)
            .unwrap_err()
            .contains("ARN"));
        // Nor for the ARN in another signing region.
        assert!(
            opts(serde_json::json!({"stream": arn, "region": "us-east-1"}))
                .unwrap()
                .check_grant("acme", &grant)
                .is_err()
        );
        let t = opts(serde_json::json!({"stream": arn}))
            .unwrap()
            .resolve(&SecretPolicy::default())
            .unwrap();
        assert_eq!(t.access.region, "eu-west-1");
        let edge = EdgePolicy {
            grants: std::sync::Arc::new([("acme".to_string(), grant)].into_iter().collect()),
            ..Default::default()
        };
        assert!(t.check_egress("acme", &edge).is_ok());
        assert!(t.check_egress("beta", &edge).is_err());
    }

    fn delivery() -> Delivery {
        Delivery {
            tenant: "acme".into(),
            source: "s".into(),
            row: "7.0".into(),
            message_id: "msg_0123456789abcdef_7.0".into(),
            hook: 7,
            attempt: 1,
            body: bytes::Bytes::from_static(b"\x00\xffraw"),
            headers: Default::default(),
            committed_at_ms: 0,
            event_type: None,
            traceparent: None,
            at_ms: None,
        }
    }

    #[test]
    fn records_carry_the_body_as_is_keyed_by_hook_or_lane() {
        let t = opts(serde_json::json!({"stream": "s"}))
            .unwrap()
            .resolve(&SecretPolicy::default())
            .unwrap();
        let d = delivery();
        let m = t
            .message(&d, &Payload::Inline(d.body.clone()), None)
            .unwrap();
        assert_eq!(
            (&m.body[..], m.group.as_deref()),
            (&b"\x00\xffraw"[..], Some("7"))
        );
        let m = t
            .message(&d, &Payload::Inline(d.body.clone()), Some("acme:s:0:abc"))
            .unwrap();
        assert_eq!(m.group.as_deref(), Some("acme:s:0:abc"));
        let long = "x".repeat(300);
        let m = t
            .message(&d, &Payload::Inline(d.body.clone()), Some(&long))
            .unwrap();
        assert!(m.group.as_deref().unwrap().len() <= 128);
        let big = bytes::Bytes::from(vec![b'x'; MAX_RECORD_BYTES]);
        let e = t.message(&d, &Payload::Inline(big), None).unwrap_err();
        assert_eq!(e.outcome(), "permanent");
        assert_eq!(
            classify_record("ProvisionedThroughputExceededException", "x").outcome(),
            "retry"
        );
    }
}
