//! The Amazon SQS sink (R17): `SendMessageBatch` through a per-queue [`batcher`](super::batcher).
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
//! to AWS's own endpoints (`https://….amazonaws.com`): a custom `endpoint_url` (or a queue URL
//! on another host) needs static credentials in the options, refused at `source put` and at
//! attempt time otherwise, so the worker's own AWS identity never signs for a stranger.

use super::batcher::{BoxFuture, Limits, Transport};
use super::{header_pairs, AttemptError, BatchMessage, Delivery, EdgePolicy, Sink};
use crate::claim_check::Payload;
use crate::secrets::{has_reference, SecretPolicy};
use aws_sdk_sqs::config::{
    BehaviorVersion, Credentials, IdentityCache, ProvideCredentials, Region,
    SharedCredentialsProvider, SharedHttpClient,
};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Entries per `SendMessageBatch` request (an SQS limit).
pub const MAX_ENTRIES: usize = 10;
/// Bytes of one message and of one request, body plus attributes (the SQS limit, 256 KiB).
pub const MAX_MESSAGE_BYTES: usize = 262_144;
/// Message attributes per message (an SQS limit).
pub const MAX_ATTRIBUTES: usize = 10;
/// Hook headers sent as attributes of their own; more go as one `ankusa-headers` attribute.
pub const HEADER_ATTRIBUTES: usize = MAX_ATTRIBUTES - 3;
/// The message attribute the Amazon SQS Extended Client reads: the offloaded body's size.
pub const EXTENDED_PAYLOAD_SIZE: &str = "ExtendedPayloadSize";
/// The class name at the head of an Amazon SQS Extended Client pointer.
pub const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";

fn default_true() -> bool {
    true
}
fn default_max_message_bytes() -> usize {
    MAX_MESSAGE_BYTES
}
fn default_linger_ms() -> u64 {
    10
}

/// Options of an `sqs` sink entry. String values may hold `${env:NAME}` references.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqsOpts {
    /// The queue URL; a name ending in `.fifo` is a FIFO queue.
    pub queue_url: String,
    /// Region; default: from an `sqs.<region>.amazonaws.com` URL, else `AWS_REGION` /
    /// `AWS_DEFAULT_REGION`, else `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Endpoint override (tests, LocalStack, other providers); default: AWS for an
    /// `amazonaws.com` queue URL, else the queue URL's scheme, host and port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    /// Static access key id (with `secret_access_key`); default: the environment's AWS chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// Static secret key; keep it in the environment: `${env:NAME}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key: Option<String>,
    /// Static session token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token: Option<String>,
    /// FIFO queues, unordered entries: the `MessageGroupId` of every message; default the
    /// row id (no ordering, full parallelism). Ordered entries use their lane id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_group_id: Option<String>,
    /// Send hook headers as message attributes. Default true.
    #[serde(default = "default_true")]
    pub header_attributes: bool,
    /// Largest message and request, bytes: 1024..=1048576. Default 262144 (256 KiB).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// Longest wait for a fuller batch, ms: 0..=10000. Default 10.
    #[serde(default = "default_linger_ms")]
    pub linger_ms: u64,
}

impl SqsOpts {
    /// Parse and check the options of a sink entry; the error names the field.
    pub fn from_opts(opts: &serde_json::Map<String, serde_json::Value>) -> Result<SqsOpts, String> {
        Self::parse(opts, None)
    }

    /// [`SqsOpts::from_opts`] with secret references checked against `edge` (at `source put`).
    pub fn from_opts_with(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: &EdgePolicy,
    ) -> Result<SqsOpts, String> {
        Self::parse(opts, Some(edge))
    }

    fn parse(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: Option<&EdgePolicy>,
    ) -> Result<SqsOpts, String> {
        let o: SqsOpts = serde_json::from_value(serde_json::Value::Object(opts.clone()))
            .map_err(|e| e.to_string())?;
        for (field, v) in [
            ("queue_url", Some(&o.queue_url)),
            ("region", o.region.as_ref()),
            ("endpoint_url", o.endpoint_url.as_ref()),
            ("access_key_id", o.access_key_id.as_ref()),
            ("secret_access_key", o.secret_access_key.as_ref()),
            ("session_token", o.session_token.as_ref()),
        ] {
            if let (Some(v), Some(edge)) = (v, edge) {
                edge.secrets.check(v).map_err(|e| format!("{field}: {e}"))?;
            }
        }
        let url_ok =
            |u: &str| u.starts_with("http://") || u.starts_with("https://") || u.starts_with("${");
        if !url_ok(&o.queue_url) {
            return Err(format!(
                "queue_url {:?}: must start with http:// or https://",
                o.queue_url
            ));
        }
        if let Some(e) = &o.endpoint_url {
            if !url_ok(e) {
                return Err(format!(
                    "endpoint_url {e:?}: must start with http:// or https://"
                ));
            }
        }
        if o.access_key_id.is_some() != o.secret_access_key.is_some() {
            return Err("access_key_id and secret_access_key: set both or neither".into());
        }
        if o.session_token.is_some() && o.access_key_id.is_none() {
            return Err("session_token: needs access_key_id and secret_access_key".into());
        }
        if !(1024..=1_048_576).contains(&o.max_message_bytes) {
            return Err(format!(
                "max_message_bytes {}: must be 1024..=1048576",
                o.max_message_bytes
            ));
        }
        if o.linger_ms > 10_000 {
            return Err(format!("linger_ms {}: must be <= 10000", o.linger_ms));
        }
        if let Some(g) = &o.message_group_id {
            if !valid_group_id(g) {
                return Err(format!(
                    "message_group_id {g:?}: 1..=128 printable ASCII characters"
                ));
            }
        }
        let custom = match &o.endpoint_url {
            Some(e) => has_reference(e) || !is_aws_endpoint(e),
            None => !has_reference(&o.queue_url) && endpoint_of(&o.queue_url).is_some(),
        };
        if custom && o.access_key_id.is_none() {
            return Err(CUSTOM_ENDPOINT_NEEDS_CREDS.into());
        }
        Ok(o)
    }

    /// Resolve secret references (under `secrets`) and defaults into what one attempt sends
    /// with. A custom endpoint without static credentials is refused (never the ambient chain).
    pub fn resolve(&self, secrets: &SecretPolicy) -> Result<SqsTarget, String> {
        let resolve_secrets = |s: &str| secrets.resolve(s);
        let queue_url = resolve_secrets(&self.queue_url)?;
        let endpoint = match &self.endpoint_url {
            Some(e) => Some(resolve_secrets(e)?),
            None => endpoint_of(&queue_url),
        };
        let region = match &self.region {
            Some(r) => resolve_secrets(r)?,
            None => region_of(&queue_url)
                .or_else(|| std::env::var("AWS_REGION").ok())
                .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
                .unwrap_or_else(|| "us-east-1".into()),
        };
        let creds = match (&self.access_key_id, &self.secret_access_key) {
            (Some(k), Some(s)) => Some((
                resolve_secrets(k)?,
                resolve_secrets(s)?,
                self.session_token
                    .as_deref()
                    .map(resolve_secrets)
                    .transpose()?,
            )),
            _ => None,
        };
        if creds.is_none() && endpoint.as_deref().is_some_and(|e| !is_aws_endpoint(e)) {
            return Err(CUSTOM_ENDPOINT_NEEDS_CREDS.into());
        }
        let fingerprint = match &creds {
            Some((k, s, t)) => {
                let mut h = Sha256::new();
                h.update(k.as_bytes());
                h.update([0]);
                h.update(s.as_bytes());
                h.update([0]);
                h.update(t.as_deref().unwrap_or("").as_bytes());
                hex::encode(&h.finalize()[..12])
            }
            None => "chain".into(),
        };
        let client_key = format!(
            "{}|{region}|{fingerprint}",
            endpoint.as_deref().unwrap_or("aws")
        );
        Ok(SqsTarget {
            fifo: queue_url.ends_with(".fifo"),
            destination: format!(
                "sqs|{client_key}|{queue_url}|{}|{}",
                self.max_message_bytes, self.linger_ms
            ),
            client_key,
            queue_url,
            endpoint,
            region,
            creds,
            group: self.message_group_id.clone(),
            header_attributes: self.header_attributes,
            max_message_bytes: self.max_message_bytes,
            linger: Duration::from_millis(self.linger_ms),
        })
    }
}

impl Sink for SqsOpts {
    fn batched(&self) -> bool {
        true
    }
    /// 256 KiB (`max_message_bytes`) minus a bound on the attributes: the ankusa attributes,
    /// the pointer's `ExtendedPayloadSize` and the hook's headers.
    fn inline_max_bytes(&self, headers: &str) -> Option<usize> {
        let pairs = header_pairs(headers).len();
        let overhead = 512 + headers.len() + 16 * pairs;
        Some(self.max_message_bytes.saturating_sub(overhead))
    }
}

/// Resolved options of one `sqs` sink entry.
#[derive(Debug, Clone)]
pub struct SqsTarget {
    /// The queue URL.
    pub queue_url: String,
    /// A FIFO queue (`.fifo`): every message needs a group id; the row id deduplicates.
    pub fifo: bool,
    /// Endpoint override, if any.
    pub endpoint: Option<String>,
    /// Signing region.
    pub region: String,
    /// Static credentials `(key id, secret, session token)`; `None`: the environment's chain.
    creds: Option<(String, String, Option<String>)>,
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
        let body = match payload {
            Payload::Inline(b) => b.clone(),
            Payload::Checked { url, size } => match crate::claim_check::s3_parts(url) {
                Some((bucket, key)) => {
                    attributes.push((EXTENDED_PAYLOAD_SIZE.into(), size.to_string(), true));
                    extended_pointer(&bucket, &key).into()
                }
                None => {
                    attributes.push(("ankusa-claim-check".into(), url.clone(), false));
                    crate::claim_check::generic_pointer(url, *size).into()
                }
            },
        };
        let text = std::str::from_utf8(&body).map_err(|_| {
            AttemptError::Permanent("sqs: body is not UTF-8 text; SQS carries text only".into())
        })?;
        if let Some(c) = text.chars().find(|c| !valid_sqs_char(*c)) {
            return Err(AttemptError::Permanent(format!(
                "sqs: body holds character U+{:04X}, which SQS refuses",
                c as u32
            )));
        }
        if self.header_attributes {
            let pairs = header_pairs(&d.headers);
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
            return Err(AttemptError::Permanent(format!(
                "sqs: message is {size} bytes with its attributes, over {}",
                self.max_message_bytes
            )));
        }
        let (group, dedup) = if self.fifo {
            let g = match lane {
                Some(l) => group_id_of_lane(l),
                None => self.group.clone().unwrap_or_else(|| d.row.clone()),
            };
            (Some(g), Some(d.row.clone()))
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

/// The Amazon SQS Extended Client pointer to an offloaded body (R18).
pub fn extended_pointer(bucket: &str, key: &str) -> String {
    serde_json::json!([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}]).to_string()
}

/// A lane id as a FIFO `MessageGroupId` (at most 128 characters): itself when it fits,
/// else `lane:` and its SHA-256 prefix.
pub fn group_id_of_lane(lane: &str) -> String {
    if valid_group_id(lane) {
        lane.to_string()
    } else {
        format!(
            "lane:{}",
            &hex::encode(Sha256::digest(lane.as_bytes()))[..64]
        )
    }
}

fn valid_group_id(g: &str) -> bool {
    (1..=128).contains(&g.len()) && g.bytes().all(|b| b.is_ascii_graphic())
}

/// Characters SQS accepts in a message: `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
/// #x10000-#x10FFFF`.
pub fn valid_sqs_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

fn valid_attribute_name(n: &str) -> bool {
    let lower = n.to_ascii_lowercase();
    (1..=256).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !n.starts_with('.')
        && !n.ends_with('.')
        && !n.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.")
        && !lower.starts_with("ankusa-")
        && lower != EXTENDED_PAYLOAD_SIZE.to_ascii_lowercase()
}

fn valid_attribute_value(v: &str) -> bool {
    !v.is_empty() && v.chars().all(valid_sqs_char)
}

/// The refusal of a custom endpoint without static credentials.
const CUSTOM_ENDPOINT_NEEDS_CREDS: &str = "endpoint_url: a custom endpoint (or a queue URL \
     outside amazonaws.com) needs explicit access_key_id and secret_access_key; the worker's \
     own AWS credentials sign only requests to AWS";

/// Whether `endpoint` is AWS's own (HTTPS, an `amazonaws.com` host), the only place the
/// ambient credential chain signs for.
fn is_aws_endpoint(endpoint: &str) -> bool {
    let Ok(u) = url::Url::parse(endpoint) else {
        return false;
    };
    u.scheme() == "https"
        && u.host_str()
            .is_some_and(|h| h.ends_with(".amazonaws.com") || h.ends_with(".amazonaws.com.cn"))
}

fn endpoint_of(queue_url: &str) -> Option<String> {
    let (scheme, rest) = queue_url.split_once("://")?;
    let host = rest.split('/').next()?;
    if host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn") {
        None
    } else {
        Some(format!("{scheme}://{host}"))
    }
}

fn region_of(queue_url: &str) -> Option<String> {
    let host = queue_url.split_once("://")?.1.split('/').next()?;
    let mut parts = host.split('.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("sqs"), Some(region), Some("amazonaws")) => Some(region.to_string()),
        _ => None,
    }
}

/// What one failed entry of a `SendMessageBatch` means (R8): the service's own faults and
/// throttling retry; the sender's faults (invalid parameters, contents) are permanent,
/// except KMS trouble with the queue's key, which an operator fixes while rows wait.
pub fn classify_entry(code: &str, sender_fault: bool, message: &str) -> AttemptError {
    let error = super::truncate(format!("sqs {code}: {message}"), 512);
    let retryable = !sender_fault || RETRYABLE_CODES.contains(&code) || code.starts_with("Kms");
    if retryable {
        AttemptError::Retry {
            error,
            retry_after: None,
        }
    } else {
        AttemptError::Permanent(error)
    }
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

/// What a failed `SendMessageBatch` request means for every entry in it (R8): transport
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
    if retry {
        AttemptError::Retry {
            error,
            retry_after: None,
        }
    } else {
        AttemptError::Permanent(error)
    }
}

/// SQS clients of one session, one per endpoint, region and credentials, sharing one HTTP
/// client (rustls with ring, no aws-lc).
#[derive(Clone)]
pub struct SqsClients {
    http: SharedHttpClient,
    clients: Arc<Mutex<HashMap<String, aws_sdk_sqs::Client>>>,
}

impl std::fmt::Debug for SqsClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsClients").finish_non_exhaustive()
    }
}

impl Default for SqsClients {
    fn default() -> Self {
        use aws_smithy_http_client::tls;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        SqsClients {
            http,
            clients: Arc::default(),
        }
    }
}

impl SqsClients {
    /// The client for `t`, built on first use. SDK retries are off (ankusa retries rows)
    /// and credentials are not cached by the SDK (the chain caches and refreshes them).
    pub fn client(&self, t: &SqsTarget) -> Result<aws_sdk_sqs::Client, String> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(&t.client_key) {
            return Ok(c.clone());
        }
        let creds = match &t.creds {
            Some((k, s, tok)) => SharedCredentialsProvider::new(Credentials::new(
                k,
                s,
                tok.clone(),
                None,
                "ankusa-sink-opts",
            )),
            None => SharedCredentialsProvider::new(EnvChain::new(&t.region)?),
        };
        let mut b = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(t.region.clone()))
            .credentials_provider(creds)
            .identity_cache(IdentityCache::no_cache())
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .http_client(self.http.clone());
        if let Some(e) = &t.endpoint {
            b = b.endpoint_url(e.clone());
        }
        let client = aws_sdk_sqs::Client::from_conf(b.build());
        clients.insert(t.client_key.clone(), client.clone());
        Ok(client)
    }

    /// The transport of one queue.
    pub fn transport(&self, t: &SqsTarget) -> Result<Arc<dyn Transport>, String> {
        Ok(Arc::new(SqsTransport {
            client: self.client(t)?,
            queue_url: t.queue_url.clone(),
        }))
    }
}

/// The environment's AWS credential chain, through `object_store`'s implementation.
#[derive(Debug)]
struct EnvChain(object_store::aws::AwsCredentialProvider);

impl EnvChain {
    fn new(region: &str) -> Result<EnvChain, String> {
        let s3 = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name("ankusa-credential-chain")
            .with_region(region)
            .build()
            .map_err(|e| format!("aws credential chain: {e}"))?;
        Ok(EnvChain(s3.credentials().clone()))
    }
}

impl ProvideCredentials for EnvChain {
    fn provide_credentials<'a>(
        &'a self,
    ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        aws_credential_types::provider::future::ProvideCredentials::new(async move {
            let c = self.0.get_credential().await.map_err(|e| {
                aws_credential_types::provider::error::CredentialsError::provider_error(e)
            })?;
            Ok(Credentials::new(
                &c.key_id,
                &c.secret_key,
                c.token.clone(),
                None,
                "ankusa-env-chain",
            ))
        })
    }
}

/// One queue's requests.
struct SqsTransport {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl Transport for SqsTransport {
    fn send(&self, batch: Vec<BatchMessage>) -> BoxFuture<Vec<Result<(), AttemptError>>> {
        let client = self.client.clone();
        let queue_url = self.queue_url.clone();
        Box::pin(async move {
            let n = batch.len();
            let mut results: Vec<Option<Result<(), AttemptError>>> = vec![None; n];
            let mut entries = Vec::with_capacity(n);
            for (i, m) in batch.into_iter().enumerate() {
                match entry(i, m) {
                    Ok(e) => entries.push(e),
                    Err(e) => results[i] = Some(Err(e)),
                }
            }
            if !entries.is_empty() {
                let r = client
                    .send_message_batch()
                    .queue_url(queue_url)
                    .set_entries(Some(entries))
                    .send()
                    .await;
                match r {
                    Ok(out) => {
                        for ok in out.successful() {
                            if let Some(slot) = ok
                                .id()
                                .parse::<usize>()
                                .ok()
                                .and_then(|i| results.get_mut(i))
                            {
                                *slot = Some(Ok(()));
                            }
                        }
                        for f in out.failed() {
                            if let Some(slot) = f
                                .id()
                                .parse::<usize>()
                                .ok()
                                .and_then(|i| results.get_mut(i))
                            {
                                *slot = Some(Err(classify_entry(
                                    f.code(),
                                    f.sender_fault(),
                                    f.message().unwrap_or(""),
                                )));
                            }
                        }
                    }
                    Err(e) => {
                        let err = request_error(&e);
                        for slot in results.iter_mut().filter(|s| s.is_none()) {
                            *slot = Some(Err(err.clone()));
                        }
                    }
                }
            }
            results
                .into_iter()
                .map(|r| {
                    r.unwrap_or_else(|| {
                        Err(AttemptError::Retry {
                            error: "sqs: no result for this entry".into(),
                            retry_after: None,
                        })
                    })
                })
                .collect()
        })
    }
}

fn entry(i: usize, m: BatchMessage) -> Result<SendMessageBatchRequestEntry, AttemptError> {
    let perm = |e: &dyn std::fmt::Display| AttemptError::Permanent(format!("sqs: {e}"));
    let mut attrs = HashMap::with_capacity(m.attributes.len());
    for (k, v, numeric) in m.attributes {
        let value = MessageAttributeValue::builder()
            .data_type(if numeric { "Number" } else { "String" })
            .string_value(v)
            .build()
            .map_err(|e| perm(&e))?;
        attrs.insert(k, value);
    }
    let body = String::from_utf8(m.body.to_vec()).map_err(|e| perm(&e))?;
    SendMessageBatchRequestEntry::builder()
        .id(i.to_string())
        .message_body(body)
        .set_message_attributes(Some(attrs))
        .set_message_group_id(m.group)
        .set_message_deduplication_id(m.dedup)
        .build()
        .map_err(|e| perm(&e))
}

fn request_error<E>(e: &SdkError<E, aws_sdk_sqs::config::http::HttpResponse>) -> AttemptError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            classify_request(
                Some(se.raw().status().as_u16()),
                err.code(),
                err.message().unwrap_or(""),
            )
        }
        SdkError::ConstructionFailure(_) => AttemptError::Permanent(super::truncate(
            format!("sqs: request could not be built: {}", chain(e)),
            512,
        )),
        _ => classify_request(None, None, &chain(e)),
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(e: &AttemptError) -> &'static str {
        match e {
            AttemptError::Retry { .. } => "retry",
            AttemptError::Permanent(_) => "permanent",
        }
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
        assert!(raw
            .resolve(&SecretPolicy::default())
            .unwrap_err()
            .contains("explicit"));
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
            hook: 7,
            attempt: 1,
            body: bytes::Bytes::from_static(b"{}"),
            headers: headers.into(),
            committed_at_ms: 0,
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
        assert_eq!(m.dedup.as_deref(), Some("7.0"));
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
        assert!(matches!(e, AttemptError::Permanent(_)));
    }
}
