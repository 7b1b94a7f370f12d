//! The options of an `sqs` sink entry, their validation, and the SQS naming rules they
//! follow.

use super::*;

pub(super) fn default_true() -> bool {
    true
}
pub(super) fn default_max_message_bytes() -> usize {
    MAX_MESSAGE_BYTES
}
pub(super) fn default_linger_ms() -> u64 {
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
        if o.custom_endpoint() && o.access_key_id.is_none() {
            return Err(CUSTOM_ENDPOINT_NEEDS_CREDS.into());
        }
        if let Some(edge) = edge {
            // A literal IP endpoint is connected to without resolving: checked here as at
            // attempt time (a name is checked by the guard's resolver when connecting).
            for (field, v) in [
                ("endpoint_url", o.endpoint_url.as_deref()),
                ("queue_url", Some(o.queue_url.as_str())),
            ] {
                if let Some(u) = v.filter(|v| !has_reference(v)) {
                    check_literal(u, &edge.addresses).map_err(|e| format!("{field}: {e}"))?;
                }
            }
        }
        Ok(o)
    }

    /// Whether these options name an endpoint of their own: an `endpoint_url` outside AWS (or
    /// a secret reference), or a queue URL outside `amazonaws.com` that becomes the endpoint.
    fn custom_endpoint(&self) -> bool {
        match &self.endpoint_url {
            Some(e) => has_reference(e) || !is_aws_endpoint(e, "sqs"),
            None => !has_reference(&self.queue_url) && endpoint_of(&self.queue_url).is_some(),
        }
    }

    /// The operator's grants to `tenant` (at `source put`): a custom endpoint needs
    /// `tenants.<id>.custom_endpoints`; the worker's own credentials (no `access_key_id`)
    /// need the queue's ARN in `tenants.<id>.ambient_credentials`. A queue URL that is a
    /// secret reference is checked when it is resolved, at attempt time.
    pub fn check_grant(&self, tenant: &str, grant: &EgressGrant) -> Result<(), String> {
        if self.custom_endpoint() && !grant.custom_endpoints {
            let field = match self.endpoint_url {
                Some(_) => "endpoint_url",
                None => "queue_url",
            };
            return Err(EgressGrant::custom_refused(tenant, field));
        }
        if self.access_key_id.is_some() {
            return Ok(());
        }
        let refs = [
            Some(&self.queue_url),
            self.region.as_ref(),
            self.endpoint_url.as_ref(),
        ];
        if refs.into_iter().flatten().any(|v| has_reference(v)) {
            return match grant.ambient_credentials.is_empty() {
                true => Err(EgressGrant::ambient_refused(
                    tenant,
                    "access_key_id",
                    "any queue",
                )),
                false => Ok(()),
            };
        }
        let region = self.region.clone().or_else(|| region_of(&self.queue_url));
        let arn = ambient_queue_arn(
            &self.queue_url,
            region.as_deref().unwrap_or(""),
            self.endpoint_url.as_deref(),
        )
        .map_err(|e| format!("access_key_id: {e}"))?;
        match grant.ambient_allows(&arn) {
            true => Ok(()),
            false => Err(EgressGrant::ambient_refused(tenant, "access_key_id", &arn)),
        }
    }

    /// Resolve secret references (under `secrets`) and defaults into what one attempt sends
    /// with. A custom endpoint without static credentials is refused (never the ambient chain).
    pub fn resolve(&self, secrets: &SecretPolicy) -> Result<SqsTarget, crate::sinks::ResolveError> {
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
        if creds.is_none()
            && endpoint
                .as_deref()
                .is_some_and(|e| !is_aws_endpoint(e, "sqs"))
        {
            return Err(CUSTOM_ENDPOINT_NEEDS_CREDS.into());
        }
        let crate::sinks::aws::AwsAccess {
            endpoint,
            region,
            creds,
            client_key,
        } = crate::sinks::aws::AwsAccess::new(endpoint, region, creds);
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

impl SqsTarget {
    /// The egress checks of one attempt, on the resolved options (a source stored before
    /// the grants, or with secret references, is checked here): a literal IP endpoint
    /// against the address guard, a custom endpoint against `tenants.<id>.custom_endpoints`,
    /// the worker's own credentials against `tenants.<id>.ambient_credentials`. Any refusal
    /// is permanent: the same options fail the same way on every attempt.
    pub fn check_egress(&self, tenant: &str, edge: &EdgePolicy) -> Result<(), String> {
        if let Some(e) = &self.endpoint {
            check_literal(e, &edge.addresses).map_err(|e| format!("endpoint_url: {e}"))?;
        }
        let grant = edge.grant(tenant);
        if self
            .endpoint
            .as_deref()
            .is_some_and(|e| !is_aws_endpoint(e, "sqs"))
            && !grant.custom_endpoints
        {
            return Err(EgressGrant::custom_refused(tenant, "endpoint_url"));
        }
        if self.creds.is_none() {
            let arn = ambient_queue_arn(&self.queue_url, &self.region, self.endpoint.as_deref())
                .map_err(|e| format!("access_key_id: {e}"))?;
            if !grant.ambient_allows(&arn) {
                return Err(EgressGrant::ambient_refused(tenant, "access_key_id", &arn));
            }
        }
        Ok(())
    }
}

pub(super) use crate::sinks::aws::{check_literal, is_aws_endpoint};

/// The ARN of the queue at `queue_url` when the worker's own AWS credentials sign for it:
/// `arn:<partition>:sqs:<region>:<account>:<queue>`. The queue URL must be AWS's
/// (`https://sqs.<region>.amazonaws.com/<account>/<queue>`), in the signing `region`, and
/// an explicit endpoint must be AWS's in that region too, so the request goes to the queue
/// the ARN names and nowhere else.
pub fn ambient_queue_arn(
    queue_url: &str,
    region: &str,
    endpoint: Option<&str>,
) -> Result<String, String> {
    let bad = || {
        format!(
            "the worker's own AWS credentials sign only for a queue URL \
             https://sqs.<region>.amazonaws.com/<account>/<queue> in the signing region \
             (region {region:?})"
        )
    };
    let u = url::Url::parse(queue_url).map_err(|_| bad())?;
    let host = u.host_str().unwrap_or("");
    if u.scheme() != "https"
        || u.port().is_some()
        || region_of(queue_url).as_deref() != Some(region)
    {
        return Err(bad());
    }
    let partition = if host.ends_with(".amazonaws.com.cn") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    };
    if let Some(e) = endpoint {
        let ok = is_aws_endpoint(e, "sqs")
            && url::Url::parse(e).is_ok_and(|e| {
                e.host_str()
                    .and_then(|h| region_of(&format!("https://{h}/")))
                    .as_deref()
                    == Some(region)
            });
        if !ok {
            return Err(bad());
        }
    }
    let mut path = u.path_segments().ok_or_else(bad)?;
    match (path.next(), path.next(), path.next()) {
        (Some(account), Some(queue), None)
            if !account.is_empty()
                && account.bytes().all(|b| b.is_ascii_digit())
                && valid_queue_name(queue) =>
        {
            Ok(format!("arn:{partition}:sqs:{region}:{account}:{queue}"))
        }
        _ => Err(bad()),
    }
}

/// An SQS queue name: 1..=80 alphanumerics, `-` and `_`, a FIFO queue's ending in `.fifo`.
fn valid_queue_name(q: &str) -> bool {
    let base = q.strip_suffix(".fifo").unwrap_or(q);
    (1..=80).contains(&q.len())
        && !base.is_empty()
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The Amazon SQS Extended Client pointer to an offloaded body.
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

pub(super) fn valid_group_id(g: &str) -> bool {
    (1..=128).contains(&g.len()) && g.bytes().all(|b| b.is_ascii_graphic())
}

/// Characters SQS accepts in a message: `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
/// #x10000-#x10FFFF`.
pub fn valid_sqs_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

pub(super) fn valid_attribute_name(n: &str) -> bool {
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

pub(super) fn valid_attribute_value(v: &str) -> bool {
    !v.is_empty() && v.chars().all(valid_sqs_char)
}

/// The refusal of a custom endpoint without static credentials.
pub(super) const CUSTOM_ENDPOINT_NEEDS_CREDS: &str =
    "endpoint_url: a custom endpoint (or a queue URL \
     on another host than sqs.<region>.amazonaws.com) needs explicit access_key_id and secret_access_key; the worker's \
     own AWS credentials sign only requests to AWS";

pub(super) fn endpoint_of(queue_url: &str) -> Option<String> {
    let (scheme, rest) = queue_url.split_once("://")?;
    let host = rest.split('/').next()?;
    if is_aws_endpoint(&format!("{scheme}://{host}"), "sqs") {
        None
    } else {
        Some(format!("{scheme}://{host}"))
    }
}

pub(super) fn region_of(queue_url: &str) -> Option<String> {
    let host = queue_url.split_once("://")?.1.split('/').next()?;
    let mut parts = host.split('.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("sqs"), Some(region), Some("amazonaws")) => Some(region.to_string()),
        _ => None,
    }
}
