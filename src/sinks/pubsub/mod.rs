//! The Google Cloud Pub/Sub sink: the documented REST `topics.publish` call over
//! reqwest, through a per-topic [`batcher`](super::batcher).
//!
//! Why REST and not a client crate: the maintained Rust clients (`gcloud-pubsub`, Google's
//! own) are gRPC clients that bring tonic, prost and the generated googleapis; ankusa already
//! has an HTTP client, and publishing is one JSON call. `PUBSUB_EMULATOR_HOST` is honoured
//! as the Google client libraries do: plain HTTP to that host, no credentials.
//!
//! Credentials otherwise: an `access_token` option (a `${env:NAME}` reference to an OAuth
//! token), else the metadata server of GCE / GKE / Cloud Run (workload identity), cached
//! until a minute before expiry. The metadata token goes only to Google's own endpoints
//! (`https://*pubsub.googleapis.com`): a custom `endpoint` needs `access_token`, or
//! `no_auth: true` for an emulator, and is refused at `source put` otherwise. The metadata
//! token publishes only to topics the operator granted the tenant
//! (`tenants.<id>.ambient_credentials`), and a custom endpoint needs
//! `tenants.<id>.custom_endpoints`; both are checked at `source put` and again at attempt
//! time ([`PubSubTarget::check_egress`]).
//!
//! Publishing goes through the egress guard ([`crate::sinks::guard`]): names resolve to
//! checked addresses only, a literal IP endpoint is checked as written, no redirects, no
//! proxy, and an answer is read only up to a few KiB.
//!
//! Publishing is all-or-nothing per request, so every entry of a failed request gets the
//! request's error; entries are checked before they are batched so one tenant's invalid
//! message cannot fail another's request.

mod entry;

pub use entry::MODULE;

use super::batcher::{BoxFuture, Limits, Transport};
use super::guard::{
    guarded_reqwest, kept_text, read_bounded, AddressPolicy, EgressGrant, ANSWER_READ_MAX_BYTES,
};
use super::{
    message_header_pairs, truncate, AttemptError, BatchMessage, Delivery, EdgePolicy, ErrorKind,
};
use crate::secrets::{has_reference, SecretPolicy};
use crate::sinks::payload::{generic_pointer, Payload};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// Messages per publish request (a Pub/Sub limit).
pub const MAX_ENTRIES: usize = 1_000;
/// Bytes per publish request (a Pub/Sub limit, 10 MB); counted with base64-encoded data.
pub const MAX_REQUEST_BYTES: usize = 10_000_000;
/// Largest body sent inline before attributes: a 10 MB request holds 7.5 MB of base64 data.
pub const INLINE_MAX_BYTES: usize = 7_000_000;
/// The public endpoint.
pub const GOOGLE_ENDPOINT: &str = "https://pubsub.googleapis.com";
const METADATA_TOKEN_URL: &str =
    "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token";

fn default_true() -> bool {
    true
}
fn default_linger_ms() -> u64 {
    10
}

/// Options of a `pubsub` sink entry. String values may hold `${env:NAME}` references.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PubSubOpts {
    /// The topic, `projects/<project>/topics/<topic>`.
    pub topic: String,
    /// Endpoint override, e.g. a regional endpoint; default `PUBSUB_EMULATOR_HOST` (as
    /// `http://<host>`) when set, else `https://pubsub.googleapis.com`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// An OAuth access token (keep it in the environment: `${env:NAME}`); default: none for
    /// the emulator, else the metadata server's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    /// Send no credentials at all (an emulator behind a custom `endpoint`). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_auth: bool,
    /// Send hook headers as message attributes. Default true.
    #[serde(default = "default_true")]
    pub header_attributes: bool,
    /// Longest wait for a fuller batch, ms: 0..=10000. Default 10.
    #[serde(default = "default_linger_ms")]
    pub linger_ms: u64,
}

/// Whether `endpoint` is Google's own Pub/Sub service (global or regional, HTTPS), the only
/// place the metadata server's token is sent.
fn is_google_endpoint(endpoint: &str) -> bool {
    let Ok(u) = url::Url::parse(endpoint) else {
        return false;
    };
    u.scheme() == "https"
        && u.port().is_none()
        && u.host_str().is_some_and(|h| {
            h == "pubsub.googleapis.com"
                || h.strip_suffix("-pubsub.googleapis.com")
                    .is_some_and(|r| !r.is_empty() && !r.contains('.'))
        })
}

/// The refusal of a custom endpoint without explicit credentials.
const CUSTOM_ENDPOINT_NEEDS_AUTH: &str = "endpoint: a custom endpoint needs explicit credentials \
     (access_token, or no_auth: true for an emulator); the worker's metadata-server token is \
     sent only to https://pubsub.googleapis.com";

impl PubSubOpts {
    /// Parse and check the options of a sink entry; the error names the field.
    pub fn from_opts(
        opts: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<PubSubOpts, String> {
        Self::parse(opts, None)
    }

    /// [`PubSubOpts::from_opts`] with secret references checked against `edge` (at `source put`).
    pub fn from_opts_with(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: &EdgePolicy,
    ) -> Result<PubSubOpts, String> {
        Self::parse(opts, Some(edge))
    }

    fn parse(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: Option<&EdgePolicy>,
    ) -> Result<PubSubOpts, String> {
        let o: PubSubOpts = serde_json::from_value(serde_json::Value::Object(opts.clone()))
            .map_err(|e| e.to_string())?;
        for (field, v) in [
            ("topic", Some(&o.topic)),
            ("endpoint", o.endpoint.as_ref()),
            ("access_token", o.access_token.as_ref()),
        ] {
            if let (Some(v), Some(edge)) = (v, edge) {
                edge.secrets.check(v).map_err(|e| format!("{field}: {e}"))?;
            }
        }
        if let Some(e) = &o.endpoint {
            let custom = has_reference(e) || !is_google_endpoint(e);
            if custom && o.access_token.is_none() && !o.no_auth {
                return Err(CUSTOM_ENDPOINT_NEEDS_AUTH.into());
            }
        }
        if o.no_auth && o.access_token.is_some() {
            return Err("no_auth: cannot be set together with access_token".into());
        }
        if !has_reference(&o.topic) && topic_parts(&o.topic).is_none() {
            return Err(format!(
                "topic {:?}: must be projects/<project>/topics/<topic>",
                o.topic
            ));
        }
        if let Some(e) = &o.endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://") || e.starts_with("${")) {
                return Err(format!(
                    "endpoint {e:?}: must start with http:// or https://"
                ));
            }
        }
        if o.linger_ms > 10_000 {
            return Err(format!("linger_ms {}: must be <= 10000", o.linger_ms));
        }
        if let (Some(e), Some(edge)) = (&o.endpoint, edge) {
            // A literal IP endpoint is connected to without resolving: checked here as at
            // attempt time (a name is checked by the guard's resolver when connecting).
            if !has_reference(e) {
                check_literal(e, &edge.addresses).map_err(|err| format!("endpoint: {err}"))?;
            }
        }
        Ok(o)
    }

    /// Whether these options name an endpoint other than Google's own.
    fn custom_endpoint(&self) -> bool {
        self.endpoint
            .as_deref()
            .is_some_and(|e| has_reference(e) || !is_google_endpoint(e))
    }

    /// Whether publishing would use the metadata server's token (the worker's own identity),
    /// as [`PubSubOpts::resolve`] decides it in this process.
    fn ambient(&self) -> bool {
        self.access_token.is_none()
            && !self.no_auth
            && match &self.endpoint {
                Some(e) => !has_reference(e) && is_google_endpoint(e),
                None => emulator_host().is_none(),
            }
    }

    /// The operator's grants to `tenant` (at `source put`): a custom endpoint needs
    /// `tenants.<id>.custom_endpoints`; the metadata server's token needs the topic in
    /// `tenants.<id>.ambient_credentials`. A topic that is a secret reference is checked when
    /// it is resolved, at attempt time.
    pub fn check_grant(&self, tenant: &str, grant: &EgressGrant) -> Result<(), String> {
        if self.custom_endpoint() && !grant.custom_endpoints {
            return Err(EgressGrant::custom_refused(tenant, "endpoint"));
        }
        if !self.ambient() {
            return Ok(());
        }
        if has_reference(&self.topic) {
            return match grant.ambient_credentials.is_empty() {
                true => Err(EgressGrant::ambient_refused(
                    tenant,
                    "access_token",
                    "any topic",
                )),
                false => Ok(()),
            };
        }
        match grant.ambient_allows(&self.topic) {
            true => Ok(()),
            false => Err(EgressGrant::ambient_refused(
                tenant,
                "access_token",
                &self.topic,
            )),
        }
    }

    /// Resolve secret references (under `secrets`) and defaults.
    pub fn resolve(
        &self,
        secrets: &SecretPolicy,
    ) -> Result<PubSubTarget, crate::sinks::ResolveError> {
        let resolve_secrets = |s: &str| secrets.resolve(s);
        let topic = resolve_secrets(&self.topic)?;
        if topic_parts(&topic).is_none() {
            return Err(
                format!("topic {topic:?}: must be projects/<project>/topics/<topic>").into(),
            );
        }
        let emulator = emulator_host();
        let (endpoint, auth) = match (&self.endpoint, &emulator) {
            (Some(e), _) => (resolve_secrets(e)?, None),
            (None, Some(h)) => (format!("http://{h}"), Some(Auth::None)),
            (None, None) => (GOOGLE_ENDPOINT.to_string(), None),
        };
        let auth = match (&self.access_token, auth) {
            (Some(t), _) => Auth::Token(resolve_secrets(t)?),
            (None, _) if self.no_auth => Auth::None,
            (None, Some(a)) => a,
            // Ambient credentials only to Google itself (a spec written by other means is
            // checked here again).
            (None, None) if is_google_endpoint(&endpoint) => Auth::Metadata,
            (None, None) => return Err(CUSTOM_ENDPOINT_NEEDS_AUTH.into()),
        };
        let auth_id = match &auth {
            Auth::None => "none".to_string(),
            Auth::Metadata => "metadata".to_string(),
            Auth::Token(t) => {
                use sha2::Digest;
                hex::encode(&sha2::Sha256::digest(t.as_bytes())[..12])
            }
        };
        Ok(PubSubTarget {
            custom: self.endpoint.is_some() && !is_google_endpoint(&endpoint),
            topic: topic.clone(),
            destination: format!(
                "pubsub|{}|{topic}|{auth_id}|{}",
                endpoint.trim_end_matches('/'),
                self.linger_ms
            ),
            url: format!("{}/v1/{topic}:publish", endpoint.trim_end_matches('/')),
            auth,
            header_attributes: self.header_attributes,
            linger: Duration::from_millis(self.linger_ms),
        })
    }
}

/// `PUBSUB_EMULATOR_HOST` of the worker's environment (the operator's, never a tenant's).
fn emulator_host() -> Option<String> {
    std::env::var("PUBSUB_EMULATOR_HOST")
        .ok()
        .filter(|h| !h.is_empty())
}

/// Check a URL's literal IP host against the address guard; the error holds only the address.
fn check_literal(u: &str, addresses: &AddressPolicy) -> Result<(), String> {
    let url = url::Url::parse(u).map_err(|e| format!("not a valid URL: {e}"))?;
    addresses.check_url(&url).map_err(|b| b.to_string())
}

fn topic_parts(t: &str) -> Option<(&str, &str)> {
    let rest = t.strip_prefix("projects/")?;
    let (project, topic) = rest.split_once("/topics/")?;
    let ok = |s: &str| !s.is_empty() && !s.contains('/');
    (ok(project) && ok(topic)).then_some((project, topic))
}

/// How requests authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Auth {
    /// The emulator or a plain-HTTP endpoint: none.
    None,
    /// A bearer token from the options.
    Token(String),
    /// A token from the metadata server.
    Metadata,
}

/// Resolved options of one `pubsub` sink entry.
#[derive(Debug, Clone)]
pub struct PubSubTarget {
    /// Which batcher serves this target: one per endpoint, topic and credentials.
    pub destination: String,
    /// The `…:publish` URL.
    pub url: String,
    /// The tenant's options named the endpoint (not Google's, not the emulator's).
    custom: bool,
    /// The resolved topic.
    topic: String,
    auth: Auth,
    header_attributes: bool,
    linger: Duration,
}

impl PubSubTarget {
    /// The egress checks of one attempt, on the resolved options (a source stored before
    /// the grants, or with secret references, is checked here): a literal IP endpoint
    /// against the address guard, a custom endpoint against `tenants.<id>.custom_endpoints`,
    /// the metadata token against `tenants.<id>.ambient_credentials`. Any refusal is
    /// permanent: the same options fail the same way on every attempt.
    pub fn check_egress(&self, tenant: &str, edge: &EdgePolicy) -> Result<(), String> {
        check_literal(&self.url, &edge.addresses).map_err(|e| format!("endpoint: {e}"))?;
        let grant = edge.grant(tenant);
        if self.custom && !grant.custom_endpoints {
            return Err(EgressGrant::custom_refused(tenant, "endpoint"));
        }
        if self.auth == Auth::Metadata && !grant.ambient_allows(&self.topic) {
            return Err(EgressGrant::ambient_refused(
                tenant,
                "access_token",
                &self.topic,
            ));
        }
        Ok(())
    }

    /// The request limits of this topic.
    pub fn limits(&self) -> Limits {
        Limits {
            max_entries: MAX_ENTRIES,
            max_bytes: MAX_REQUEST_BYTES - 64 * 1024,
            linger: self.linger,
        }
    }

    /// Build one attempt's message; `lane` (an ordered entry's lane id) is its ordering key.
    pub fn message(
        &self,
        d: &Delivery,
        payload: &Payload,
        lane: Option<&str>,
    ) -> Result<BatchMessage, AttemptError> {
        let mut attributes: Vec<(String, String, bool)> = vec![
            ("ankusa-delivery-id".into(), d.row.clone(), false),
            ("ankusa-tenant".into(), d.tenant.clone(), false),
            ("ankusa-source".into(), d.source.clone(), false),
            ("ankusa-hook-id".into(), d.hook.to_string(), false),
            ("ankusa-attempt".into(), d.attempt.to_string(), false),
        ];
        if let Some(et) = &d.event_type {
            attributes.push((crate::sinks::EVENT_TYPE_HEADER.into(), et.clone(), false));
        }
        let body = match payload {
            Payload::Inline(b) => b.clone(),
            Payload::Checked { url, size } => {
                attributes.push(("ankusa-claim-check".into(), url.clone(), false));
                generic_pointer(url, *size).into()
            }
        };
        if self.header_attributes {
            let pairs = message_header_pairs(d);
            let ok = |k: &str, v: &str| {
                (1..=256).contains(&k.len())
                    && !k.to_ascii_lowercase().starts_with("goog")
                    && !k.to_ascii_lowercase().starts_with("ankusa-")
                    && v.len() <= 1024
            };
            if pairs.len() <= 90 && pairs.iter().all(|(k, v)| ok(k, v)) {
                attributes.extend(pairs.into_iter().map(|(k, v)| (k, v, false)));
            }
        }
        let size = body.len().div_ceil(3) * 4
            + 64
            + attributes
                .iter()
                .map(|(k, v, _)| k.len() + v.len() + 8)
                .sum::<usize>()
            + lane.map_or(0, |l| l.len() + 16);
        if size > MAX_REQUEST_BYTES - 64 * 1024 {
            return Err(AttemptError::permanent(
                ErrorKind::Other,
                format!("pubsub: message is {size} bytes encoded, over the 10 MB request limit"),
            ));
        }
        Ok(BatchMessage {
            body,
            attributes,
            group: lane.map(str::to_string),
            dedup: None,
            size,
        })
    }
}

/// Whether a publish answered with `status` is worth retrying: 408, 429 and 5xx, and
/// 401 (an expired token is fetched again); other 4xx (bad request, permission denied,
/// topic not found) are permanent. Transport errors always retry.
pub fn is_retryable(status: u16) -> bool {
    matches!(status, 401 | 408 | 429 | 500..=599)
}

/// The HTTP clients and token cache of the Pub/Sub sinks of a worker process
/// ([`crate::sinks::registry::Sinks`]).
#[derive(Debug, Clone)]
pub struct PubSubClients {
    /// Publishing: the egress guard's client (the endpoint may be the tenant's).
    http: reqwest::Client,
    /// The metadata server only (a fixed, link-local address the guard refuses by design;
    /// no tenant can steer it): no redirects, no proxy.
    metadata: reqwest::Client,
    token: Arc<Mutex<Option<(String, Instant)>>>,
}

impl PubSubClients {
    /// One client for every topic (connection pool) under the egress guard of `addresses`.
    pub fn new(addresses: Arc<AddressPolicy>) -> Result<PubSubClients, String> {
        let http = guarded_reqwest(addresses)
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .user_agent(concat!("ankusa/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("pubsub client: {e}"))?;
        let metadata = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("pubsub metadata client: {e}"))?;
        Ok(PubSubClients {
            http,
            metadata,
            token: Arc::default(),
        })
    }

    /// The transport of one topic.
    pub fn transport(&self, t: &PubSubTarget) -> Arc<dyn Transport> {
        Arc::new(PubSubTransport {
            clients: self.clone(),
            url: t.url.clone(),
            auth: t.auth.clone(),
        })
    }

    async fn metadata_token(&self) -> Result<String, String> {
        let mut cached = self.token.lock().await;
        if let Some((t, until)) = cached.as_ref() {
            if Instant::now() < *until {
                return Ok(t.clone());
            }
        }
        #[derive(Deserialize)]
        struct Token {
            access_token: String,
            expires_in: u64,
        }
        let r = self
            .metadata
            .get(METADATA_TOKEN_URL)
            .header("Metadata-Flavor", "Google")
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| format!("pubsub: metadata server token: {e}"))?;
        if !r.status().is_success() {
            return Err(format!(
                "pubsub: metadata server token: http {}",
                r.status()
            ));
        }
        let body = read_bounded(r, ANSWER_READ_MAX_BYTES).await;
        let t: Token = serde_json::from_slice(&body)
            .map_err(|e| format!("pubsub: metadata server token: {e}"))?;
        let until = Instant::now() + Duration::from_secs(t.expires_in.saturating_sub(60));
        *cached = Some((t.access_token.clone(), until));
        Ok(t.access_token)
    }
}

struct PubSubTransport {
    clients: PubSubClients,
    url: String,
    auth: Auth,
}

impl Transport for PubSubTransport {
    fn send(&self, batch: Vec<BatchMessage>) -> BoxFuture<Vec<Result<(), AttemptError>>> {
        let clients = self.clients.clone();
        let url = self.url.clone();
        let auth = self.auth.clone();
        Box::pin(async move {
            let n = batch.len();
            let r = publish(&clients, &url, &auth, batch).await;
            vec![r; n]
        })
    }
}

async fn publish(
    clients: &PubSubClients,
    url: &str,
    auth: &Auth,
    batch: Vec<BatchMessage>,
) -> Result<(), AttemptError> {
    let retry = |error: String| AttemptError::Retry {
        error: truncate(error, 512),
        retry_after: None,
        kind: ErrorKind::Other,
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let n = batch.len();
    let messages: Vec<serde_json::Value> = batch
        .into_iter()
        .map(|m| {
            let attrs: serde_json::Map<String, serde_json::Value> = m
                .attributes
                .into_iter()
                .map(|(k, v, _)| (k, serde_json::Value::String(v)))
                .collect();
            let mut msg = serde_json::json!({"data": b64.encode(&m.body), "attributes": attrs});
            if let Some(k) = m.group {
                msg["orderingKey"] = serde_json::Value::String(k);
            }
            msg
        })
        .collect();
    let body = serde_json::json!({ "messages": messages }).to_string();
    let mut req = clients
        .http
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    match auth {
        Auth::None => {}
        Auth::Token(t) => req = req.bearer_auth(t),
        Auth::Metadata => req = req.bearer_auth(clients.metadata_token().await.map_err(retry)?),
    }
    let resp = req.send().await.map_err(|e| {
        // The egress guard refused the endpoint's address: the same on every attempt.
        if let Some(b) = super::guard::blocked_in(&e) {
            return AttemptError::permanent(ErrorKind::Other, format!("pubsub: {b}"));
        }
        // Without the URL: a custom endpoint may come from a secret reference.
        retry(format!("pubsub: transport: {}", e.without_url()))
    })?;
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        // Pub/Sub answers a publish with one message id per message. A 2xx without them is
        // not Pub/Sub having taken the batch (a proxy, a captive portal, a wrong endpoint):
        // retried, as a duplicate is better than a loss. Read within a bound that fits the
        // ids of the largest batch; an endless answer is dropped with its connection.
        let most = ANSWER_READ_MAX_BYTES.max(64 + 64 * n);
        let answer = read_bounded(resp, most).await;
        return published(&answer, n).map_err(|why| {
            retry(format!(
                "pubsub http {status} without the publish answer ({why}): {}",
                kept_text(&answer)
            ))
        });
    }
    if status == 401 {
        *clients.token.lock().await = None;
    }
    let text = kept_text(&read_bounded(resp, super::guard::ANSWER_KEEP_BYTES + 1).await);
    let error = truncate(format!("pubsub http {status}: {text}"), 512);
    if is_retryable(status) {
        Err(retry(error))
    } else {
        Err(AttemptError::permanent(ErrorKind::Other, error))
    }
}

/// Whether `answer` is Pub/Sub's answer to a publish of `n` messages
/// (`{"messageIds": ["…", …]}`, one id each); else why not.
fn published(answer: &[u8], n: usize) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "messageIds")]
        message_ids: Vec<String>,
    }
    let a: Answer = serde_json::from_slice(answer)
        .map_err(|_| "not a JSON object with messageIds".to_string())?;
    if a.message_ids.len() != n {
        return Err(format!(
            "{} message ids for {n} messages",
            a.message_ids.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_2xx_counts_only_with_one_message_id_per_message() {
        assert_eq!(published(br#"{"messageIds":["1","2"]}"#, 2), Ok(()));
        for (answer, n) in [
            (&b"<html>welcome to the hotel wifi</html>"[..], 1),
            (b"", 1),
            (b"{}", 1),
            (br#"{"messageIds":["1"]}"#, 2),
            (br#"{"messageIds":"1"}"#, 1),
        ] {
            assert!(published(answer, n).is_err(), "{answer:?}");
        }
    }

    #[test]
    fn publish_statuses_map_to_retry_or_permanent() {
        for (status, retry) in [
            (400, false),
            (401, true),
            (403, false),
            (404, false),
            (408, true),
            (409, false),
            (429, true),
            (500, true),
            (503, true),
        ] {
            assert_eq!(is_retryable(status), retry, "{status}");
        }
    }

    #[test]
    fn custom_endpoints_need_explicit_credentials() {
        let opts = |v: serde_json::Value| PubSubOpts::from_opts(v.as_object().unwrap());
        let t = "projects/p/topics/t";
        for e in [
            "https://evil.example",
            "http://127.0.0.1:8085",
            "https://pubsub.googleapis.com.evil.example",
            "${env:ANKUSA_SECRET_EP}",
        ] {
            let err = opts(serde_json::json!({"topic": t, "endpoint": e})).unwrap_err();
            assert!(err.contains("explicit credentials"), "{e}: {err}");
            assert!(opts(serde_json::json!({"topic": t, "endpoint": e, "no_auth": true})).is_ok());
            assert!(opts(serde_json::json!({"topic": t, "endpoint": e, "access_token": "${env:ANKUSA_SECRET_T}"})).is_ok());
        }
        for e in [
            "https://pubsub.googleapis.com",
            "https://europe-west1-pubsub.googleapis.com",
        ] {
            assert!(
                opts(serde_json::json!({"topic": t, "endpoint": e})).is_ok(),
                "{e}"
            );
        }
        let err = PubSubOpts::from_opts_with(
            serde_json::json!({"topic": t, "access_token": "${env:ANKUSA_ADMIN__TOKEN}"})
                .as_object()
                .unwrap(),
            &EdgePolicy::default().for_tenant("t"),
        )
        .unwrap_err();
        assert!(err.contains("secrets.env_prefix"), "{err}");
    }

    #[test]
    fn options_need_a_full_topic_name() {
        let ok = serde_json::json!({"topic": "projects/p/topics/t"});
        assert!(PubSubOpts::from_opts(ok.as_object().unwrap()).is_ok());
        for bad in [
            "t",
            "projects/p/t",
            "projects//topics/t",
            "projects/p/topics/",
        ] {
            let v = serde_json::json!({ "topic": bad });
            assert!(
                PubSubOpts::from_opts(v.as_object().unwrap())
                    .unwrap_err()
                    .contains("topic"),
                "{bad}"
            );
        }
    }
}
