//! The options of a `kinesis` sink entry and their validation.

use super::*;

fn default_linger_ms() -> u64 {
    10
}

/// Options of a `kinesis` sink entry. String values may hold `${env:NAME}` references.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KinesisOpts {
    /// The stream: its name, or its ARN `arn:aws:kinesis:<region>:<account>:stream/<name>`
    /// (needed for the worker's own credentials, which sign only for granted ARNs).
    pub stream: String,
    /// Signing region; default: the stream ARN's, else `AWS_REGION` / `AWS_DEFAULT_REGION`,
    /// else `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Endpoint override (tests, LocalStack, other providers); default AWS's. A non-AWS one
    /// needs static credentials and the tenant's `custom_endpoints` grant.
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
    /// Longest wait for a fuller batch, ms: 0..=10000. Default 10.
    #[serde(default = "default_linger_ms")]
    pub linger_ms: u64,
}

/// A Kinesis stream name: 1..=128 of `A-Z a-z 0-9 _ . -`.
pub fn valid_stream_name(n: &str) -> bool {
    (1..=128).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The `stream` option: a stream name or ARN.
pub const STREAM: ResourceKind = ResourceKind {
    option: "stream",
    service: "kinesis",
    kind: "stream",
    name_rule: "1..=128 of A-Z a-z 0-9 _ . -",
    valid_name: valid_stream_name,
};

impl KinesisOpts {
    /// Parse and check the options of a sink entry (syntax only); the error names the field.
    pub fn from_opts(
        opts: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<KinesisOpts, String> {
        Self::parse(opts, None)
    }

    /// [`KinesisOpts::from_opts`] with secret references and a literal IP endpoint checked
    /// against the tenant's `edge` (at `source put`).
    pub fn from_opts_with(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: &EdgePolicy,
    ) -> Result<KinesisOpts, String> {
        Self::parse(opts, Some(edge))
    }

    fn parse(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: Option<&EdgePolicy>,
    ) -> Result<KinesisOpts, String> {
        let o: KinesisOpts = serde_json::from_value(serde_json::Value::Object(opts.clone()))
            .map_err(|e| e.to_string())?;
        STREAM.check(&o.stream, edge)?;
        o.access().validate(edge)?;
        if o.linger_ms > 10_000 {
            return Err(format!("linger_ms {}: must be <= 10000", o.linger_ms));
        }
        Ok(o)
    }

    /// The access options, as the shared AWS helpers read them.
    fn access(&self) -> AccessOpts<'_> {
        AccessOpts {
            service: STREAM.service,
            region: self.region.as_deref(),
            endpoint_url: self.endpoint_url.as_deref(),
            access_key_id: self.access_key_id.as_deref(),
            secret_access_key: self.secret_access_key.as_deref(),
            session_token: self.session_token.as_deref(),
        }
    }

    /// The operator's grants to `tenant` (at `source put`): a custom endpoint needs
    /// `tenants.<id>.custom_endpoints`; the worker's own credentials need the stream's ARN
    /// in `tenants.<id>.ambient_credentials` (so the stream must be given as an ARN).
    pub fn check_grant(&self, tenant: &str, grant: &EgressGrant) -> Result<(), String> {
        self.access()
            .check_grant(tenant, grant, &STREAM, &self.stream)
    }

    /// Resolve secret references (under `secrets`) and defaults into what one attempt sends
    /// with. A custom endpoint without static credentials is refused.
    pub fn resolve(
        &self,
        secrets: &SecretPolicy,
    ) -> Result<KinesisTarget, crate::sinks::ResolveError> {
        let (stream, arn) = STREAM.resolve(&self.stream, secrets)?;
        let access = self
            .access()
            .resolve(arn.as_ref().map(|a| a.region.clone()), secrets)?;
        Ok(KinesisTarget {
            destination: format!("kinesis|{}|{stream}|{}", access.client_key, self.linger_ms),
            stream,
            arn,
            access,
            linger: Duration::from_millis(self.linger_ms),
        })
    }
}

impl KinesisTarget {
    /// The egress checks of one attempt on the resolved options ([`AwsAccess::check_egress`]
    /// with the stream's ARN). Any refusal is permanent.
    pub fn check_egress(&self, tenant: &str, edge: &EdgePolicy) -> Result<(), String> {
        self.access
            .check_egress(tenant, edge, &STREAM, self.arn.as_ref())
    }
}
