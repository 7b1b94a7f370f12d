//! The options of an `eventbridge` sink entry and their validation.

use super::*;

fn default_linger_ms() -> u64 {
    10
}

fn default_detail_type() -> String {
    DEFAULT_DETAIL_TYPE.into()
}

/// Options of an `eventbridge` sink entry. String values may hold `${env:NAME}` references
/// (except `source` and `detail_type`, which are event fields, not secrets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventBridgeOpts {
    /// The event bus: its name (`default` for the account's default bus), or its ARN
    /// `arn:aws:events:<region>:<account>:event-bus/<name>` (needed for the worker's own
    /// credentials, which sign only for granted ARNs).
    pub event_bus: String,
    /// The events' `Source`, which rules match on: 1..=256 printable characters, not
    /// starting with `aws.` (AWS's own sources).
    pub source: String,
    /// The `DetailType` of a hook without an event type (a hook's event type is its
    /// detail-type): 1..=128 printable characters. Default `ankusa.hook`.
    #[serde(default = "default_detail_type")]
    pub detail_type: String,
    /// Signing region; default: the bus ARN's, else `AWS_REGION` / `AWS_DEFAULT_REGION`,
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

/// An event bus name: 1..=256 of `A-Z a-z 0-9 . - _ /` (a partner bus's name has `/`).
pub fn valid_bus_name(n: &str) -> bool {
    (1..=256).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/'))
}

/// The `event_bus` option: a bus name or ARN.
pub const EVENT_BUS: ResourceKind = ResourceKind {
    option: "event_bus",
    service: "events",
    kind: "event-bus",
    name_rule: "1..=256 of A-Z a-z 0-9 . - _ /",
    valid_name: valid_bus_name,
};

/// Whether `s` is a valid event field of at most `max` characters: not empty, no control
/// characters.
pub(super) fn valid_field(s: &str, max: usize) -> bool {
    !s.is_empty() && s.chars().count() <= max && !s.chars().any(char::is_control)
}

impl EventBridgeOpts {
    /// Parse and check the options of a sink entry (syntax only); the error names the field.
    pub fn from_opts(
        opts: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<EventBridgeOpts, String> {
        Self::parse(opts, None)
    }

    /// [`EventBridgeOpts::from_opts`] with secret references and a literal IP endpoint
    /// checked against the tenant's `edge` (at `source put`).
    pub fn from_opts_with(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: &EdgePolicy,
    ) -> Result<EventBridgeOpts, String> {
        Self::parse(opts, Some(edge))
    }

    fn parse(
        opts: &serde_json::Map<String, serde_json::Value>,
        edge: Option<&EdgePolicy>,
    ) -> Result<EventBridgeOpts, String> {
        let o: EventBridgeOpts = serde_json::from_value(serde_json::Value::Object(opts.clone()))
            .map_err(|e| e.to_string())?;
        EVENT_BUS.check(&o.event_bus, edge)?;
        if !valid_field(&o.source, 256) || o.source.to_ascii_lowercase().starts_with("aws.") {
            return Err(format!(
                "source {:?}: 1..=256 characters without control characters, not starting \
                 with aws. (AWS's own sources)",
                o.source
            ));
        }
        if !valid_field(&o.detail_type, 128) {
            return Err(format!(
                "detail_type {:?}: 1..=128 characters without control characters",
                o.detail_type
            ));
        }
        o.access().validate(edge)?;
        if o.linger_ms > 10_000 {
            return Err(format!("linger_ms {}: must be <= 10000", o.linger_ms));
        }
        Ok(o)
    }

    /// The access options, as the shared AWS helpers read them.
    fn access(&self) -> AccessOpts<'_> {
        AccessOpts {
            service: EVENT_BUS.service,
            region: self.region.as_deref(),
            endpoint_url: self.endpoint_url.as_deref(),
            access_key_id: self.access_key_id.as_deref(),
            secret_access_key: self.secret_access_key.as_deref(),
            session_token: self.session_token.as_deref(),
        }
    }

    /// The operator's grants to `tenant` (at `source put`): a custom endpoint needs
    /// `tenants.<id>.custom_endpoints`; the worker's own credentials need the bus's ARN in
    /// `tenants.<id>.ambient_credentials` (so the bus must be given as an ARN).
    pub fn check_grant(&self, tenant: &str, grant: &EgressGrant) -> Result<(), String> {
        self.access()
            .check_grant(tenant, grant, &EVENT_BUS, &self.event_bus)
    }

    /// Resolve secret references (under `secrets`) and defaults into what one attempt sends
    /// with. A custom endpoint without static credentials is refused.
    pub fn resolve(
        &self,
        secrets: &SecretPolicy,
    ) -> Result<EventBridgeTarget, crate::sinks::ResolveError> {
        let (event_bus, arn) = EVENT_BUS.resolve(&self.event_bus, secrets)?;
        let access = self
            .access()
            .resolve(arn.as_ref().map(|a| a.region.clone()), secrets)?;
        Ok(EventBridgeTarget {
            destination: format!(
                "eventbridge|{}|{event_bus}|{}|{}",
                access.client_key, self.source, self.linger_ms
            ),
            event_bus,
            arn,
            source: self.source.clone(),
            detail_type: self.detail_type.clone(),
            access,
            linger: Duration::from_millis(self.linger_ms),
        })
    }
}

impl EventBridgeTarget {
    /// The egress checks of one attempt on the resolved options ([`AwsAccess::check_egress`]
    /// with the bus's ARN). Any refusal is permanent.
    pub fn check_egress(&self, tenant: &str, edge: &EdgePolicy) -> Result<(), String> {
        self.access
            .check_egress(tenant, edge, &EVENT_BUS, self.arn.as_ref())
    }
}
