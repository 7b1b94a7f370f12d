//! What the AWS sinks (`sqs`, `kinesis`, `eventbridge`) share: where a request goes
//! (region, endpoint), who signs it (static credentials from the options, or the
//! environment's AWS chain), the operator's grants for both, one SDK client per endpoint,
//! region and credentials over the egress guard's HTTP client, and the reading of an SDK
//! error.
//!
//! The rules are the SQS sink's (see [`crate::sinks::sqs`]): a custom endpoint needs static
//! credentials (the worker's own AWS identity never signs a stranger's request) and the
//! tenant's `custom_endpoints` grant; the environment's chain signs only for the resources
//! whose ARN the operator lists in `tenants.<id>.ambient_credentials`; a literal IP endpoint
//! is checked against the address guard as written, a name by the guard's resolver.

use super::guard::{AddressPolicy, EgressGrant};
use super::{AttemptError, BatchMessage, EdgePolicy, ErrorKind, ResolveError};
use crate::secrets::{has_reference, SecretPolicy};
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Static credentials from a sink's options: `(access key id, secret key, session token)`.
pub type StaticCreds = (String, String, Option<String>);

/// The refusal of a custom endpoint without static credentials (`kinesis`, `eventbridge`).
pub const CUSTOM_ENDPOINT_NEEDS_CREDS: &str =
    "endpoint_url: a custom endpoint needs explicit access_key_id and secret_access_key; the \
     worker's own AWS credentials sign only requests to AWS";

/// The region of `host` when it is AWS's own endpoint of `service`:
/// `<service>.<region>.amazonaws.com`, `<service>-fips.<region>.amazonaws.com` or the same
/// under `amazonaws.com.cn`. Any other name under `amazonaws.com` (an EC2 instance, an API
/// Gateway stage, a load balancer: names anyone can hold) is not.
fn service_host_region<'h>(host: &'h str, service: &str) -> Option<&'h str> {
    let rest = host
        .strip_suffix(".amazonaws.com")
        .or_else(|| host.strip_suffix(".amazonaws.com.cn"))?;
    let (svc, region) = rest.split_once('.')?;
    let region_ok = !region.is_empty()
        && region.split('-').count() >= 3
        && region.split('-').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    let svc_ok = svc == service || svc.strip_suffix("-fips") == Some(service);
    (svc_ok && region_ok).then_some(region)
}

/// Whether `endpoint` is AWS's own endpoint of `service` (HTTPS, no port or user, the host
/// `<service>[-fips].<region>.amazonaws.com[.cn]`), the only place the ambient credential
/// chain signs for and the only endpoint that needs no `custom_endpoints` grant.
pub fn is_aws_endpoint(endpoint: &str, service: &str) -> bool {
    let Ok(u) = url::Url::parse(endpoint) else {
        return false;
    };
    u.scheme() == "https"
        && u.port().is_none()
        && u.username().is_empty()
        && u.password().is_none()
        && u.host_str()
            .is_some_and(|h| service_host_region(h, service).is_some())
}

/// The region of an AWS endpoint `https://<service>.<region>.amazonaws.com[.cn]` whose
/// service is `service`, with no port or path; `None` for any other URL.
pub fn aws_endpoint_region(endpoint: &str, service: &str) -> Option<String> {
    let u = url::Url::parse(endpoint).ok()?;
    if !is_aws_endpoint(endpoint, service) || !u.path().trim_matches('/').is_empty() {
        return None;
    }
    service_host_region(u.host_str()?, service).map(str::to_string)
}

/// Check a URL's literal IP host against the address guard (a name is left to the guard's
/// resolver). The error never holds the URL, only the refused address.
pub fn check_literal(u: &str, addresses: &AddressPolicy) -> Result<(), String> {
    let url = url::Url::parse(u).map_err(|e| format!("not a valid URL: {e}"))?;
    addresses.check_url(&url).map_err(|b| b.to_string())
}

/// An ARN split into its parts: `arn:<partition>:<service>:<region>:<account>:<resource>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arn {
    /// `aws`, `aws-cn`, `aws-us-gov`.
    pub partition: String,
    /// The service, e.g. `kinesis`, `events`.
    pub service: String,
    /// The resource's region.
    pub region: String,
    /// The 12-digit account id.
    pub account: String,
    /// The resource, e.g. `stream/orders`, `event-bus/default`.
    pub resource: String,
}

impl Arn {
    /// Parse `s` as an ARN of `service` whose resource starts with `<kind>/` followed by a
    /// name that `valid_name` accepts; `None` otherwise.
    pub fn parse(s: &str, service: &str, kind: &str, valid_name: fn(&str) -> bool) -> Option<Arn> {
        let mut p = s.splitn(6, ':');
        let (arn, partition, svc, region, account, resource) = (
            p.next()?,
            p.next()?,
            p.next()?,
            p.next()?,
            p.next()?,
            p.next()?,
        );
        let name = resource.strip_prefix(kind)?.strip_prefix('/')?;
        let ok = arn == "arn"
            && partition.starts_with("aws")
            && svc == service
            && !region.is_empty()
            && region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && account.len() == 12
            && account.bytes().all(|b| b.is_ascii_digit())
            && valid_name(name);
        ok.then(|| Arn {
            partition: partition.into(),
            service: svc.into(),
            region: region.into(),
            account: account.into(),
            resource: resource.into(),
        })
    }
}

/// The ARN a resource option names when the worker's own AWS credentials sign for it: the
/// option must be an ARN (`what` names its form in the error), the signing `region` the
/// ARN's, and an explicit `endpoint` AWS's own for `service` in that region, so the request
/// goes to the resource the ARN names and nowhere else.
pub fn ambient_arn(
    arn: Option<&Arn>,
    what: &str,
    region: &str,
    endpoint: Option<&str>,
    service: &str,
) -> Result<String, String> {
    let bad = || {
        format!(
            "the worker's own AWS credentials sign only for {what} given as an ARN, in the \
             signing region (region {region:?}) and through AWS's own endpoint"
        )
    };
    let arn = arn.ok_or_else(bad)?;
    if arn.region != region {
        return Err(bad());
    }
    if let Some(e) = endpoint {
        if aws_endpoint_region(e, service).as_deref() != Some(region) {
            return Err(bad());
        }
    }
    Ok(format!(
        "arn:{}:{}:{}:{}:{}",
        arn.partition, arn.service, arn.region, arn.account, arn.resource
    ))
}

/// The kind of resource an AWS sink entry sends to (a Kinesis stream, an EventBridge bus):
/// the option that names it, by name or by ARN, and the ARN's form.
#[derive(Debug, Clone, Copy)]
pub struct ResourceKind {
    /// The option naming it, e.g. `stream`.
    pub option: &'static str,
    /// The ARN's service, e.g. `kinesis`, `events`.
    pub service: &'static str,
    /// The ARN resource's kind, e.g. `stream`, `event-bus`.
    pub kind: &'static str,
    /// A valid name, as refusals state it, e.g. `1..=128 of A-Z a-z 0-9 _ . -`.
    pub name_rule: &'static str,
    /// Whether a name is valid.
    pub valid_name: fn(&str) -> bool,
}

impl ResourceKind {
    /// The ARN `s` is, if it is one of this kind.
    pub fn arn(&self, s: &str) -> Option<Arn> {
        Arn::parse(s, self.service, self.kind, self.valid_name)
    }

    /// The ARN form, e.g. `arn:aws:kinesis:<region>:<account>:stream/<name>`.
    fn form(&self) -> String {
        format!(
            "arn:aws:{}:<region>:<account>:{}/<name>",
            self.service, self.kind
        )
    }

    /// Check the option as written: a secret reference allowed under `edge` (at `source
    /// put`), else a valid name or ARN. The error names the option.
    pub fn check(&self, v: &str, edge: Option<&EdgePolicy>) -> Result<(), String> {
        if let Some(edge) = edge {
            edge.secrets
                .check(v)
                .map_err(|e| format!("{}: {e}", self.option))?;
        }
        if has_reference(v) || (self.valid_name)(v) || self.arn(v).is_some() {
            return Ok(());
        }
        Err(format!(
            "{} {v:?}: a {} name ({}) or an ARN {}",
            self.option,
            self.kind,
            self.name_rule,
            self.form()
        ))
    }

    /// Resolve the option (under `secrets`) into the value sent and its ARN, if it is one;
    /// a value that resolves to neither a name nor an ARN is refused (its size only named).
    pub fn resolve(
        &self,
        v: &str,
        secrets: &SecretPolicy,
    ) -> Result<(String, Option<Arn>), ResolveError> {
        let value = secrets.resolve(v)?;
        let arn = self.arn(&value);
        if arn.is_none() && !(self.valid_name)(&value) {
            return Err(format!(
                "{}: resolves to neither a {} name nor an ARN ({} bytes)",
                self.option,
                self.kind,
                value.len()
            )
            .into());
        }
        Ok((value, arn))
    }

    /// The ARN the worker's own credentials would sign for ([`ambient_arn`]).
    fn ambient_arn(
        &self,
        arn: Option<&Arn>,
        region: &str,
        endpoint: Option<&str>,
    ) -> Result<String, String> {
        let what = format!("a {} ({})", self.kind, self.form());
        ambient_arn(arn, &what, region, endpoint, self.service)
    }
}

/// The access options every AWS sink has besides its resource, as written (values may be
/// `${env:NAME}` references): a view on the module's own options struct.
#[derive(Debug, Clone, Copy)]
pub struct AccessOpts<'a> {
    /// The AWS service the sink calls (`kinesis`, `events`): its endpoints are AWS's own.
    pub service: &'static str,
    /// `region`.
    pub region: Option<&'a str>,
    /// `endpoint_url`.
    pub endpoint_url: Option<&'a str>,
    /// `access_key_id`.
    pub access_key_id: Option<&'a str>,
    /// `secret_access_key`.
    pub secret_access_key: Option<&'a str>,
    /// `session_token`.
    pub session_token: Option<&'a str>,
}

impl AccessOpts<'_> {
    /// Whether the options name an endpoint of their own: an `endpoint_url` outside AWS, or
    /// a secret reference (which may resolve to anything).
    pub fn custom_endpoint(&self) -> bool {
        self.endpoint_url
            .is_some_and(|e| has_reference(e) || !is_aws_endpoint(e, self.service))
    }

    /// Check the access options (at `source put` with the tenant's `edge`, else syntax
    /// only): secret references allowed under `edge`, an `http(s)://` endpoint, both keys or
    /// neither, a session token only with keys, static keys with a custom endpoint, and a
    /// literal IP endpoint past the address guard. The error names the option.
    pub fn validate(&self, edge: Option<&EdgePolicy>) -> Result<(), String> {
        for (field, v) in [
            ("region", self.region),
            ("endpoint_url", self.endpoint_url),
            ("access_key_id", self.access_key_id),
            ("secret_access_key", self.secret_access_key),
            ("session_token", self.session_token),
        ] {
            if let (Some(v), Some(edge)) = (v, edge) {
                edge.secrets.check(v).map_err(|e| format!("{field}: {e}"))?;
            }
        }
        if let Some(r) = self.region.filter(|r| !has_reference(r)) {
            let ok = !r.is_empty()
                && r.len() <= 64
                && r.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                return Err(format!(
                    "region {r:?}: an AWS region such as us-east-1 (lower-case letters, digits, -)"
                ));
            }
        }
        if let Some(e) = self.endpoint_url {
            let ok = e.starts_with("http://") || e.starts_with("https://") || has_reference(e);
            if !ok {
                return Err(format!(
                    "endpoint_url {e:?}: must start with http:// or https://"
                ));
            }
        }
        if self.access_key_id.is_some() != self.secret_access_key.is_some() {
            return Err("access_key_id and secret_access_key: set both or neither".into());
        }
        if self.session_token.is_some() && self.access_key_id.is_none() {
            return Err("session_token: needs access_key_id and secret_access_key".into());
        }
        if self.custom_endpoint() && self.access_key_id.is_none() {
            return Err(CUSTOM_ENDPOINT_NEEDS_CREDS.into());
        }
        if let (Some(edge), Some(e)) = (edge, self.endpoint_url.filter(|e| !has_reference(e))) {
            // A literal IP endpoint is connected to without resolving: checked here as at
            // attempt time (a name is checked by the guard's resolver when connecting).
            check_literal(e, &edge.addresses).map_err(|e| format!("endpoint_url: {e}"))?;
        }
        Ok(())
    }

    /// The operator's grants to `tenant` (at `source put`): a custom endpoint needs
    /// `tenants.<id>.custom_endpoints`; the worker's own credentials (no `access_key_id`)
    /// need the ARN of the resource the option `value` of `resource` names in
    /// `tenants.<id>.ambient_credentials` (so it must be written as an ARN, in the signing
    /// region). Options that are secret references are checked when resolved, at attempt
    /// time.
    pub fn check_grant(
        &self,
        tenant: &str,
        grant: &EgressGrant,
        resource: &ResourceKind,
        value: &str,
    ) -> Result<(), String> {
        if self.custom_endpoint() && !grant.custom_endpoints {
            return Err(EgressGrant::custom_refused(tenant, "endpoint_url"));
        }
        if self.access_key_id.is_some() {
            return Ok(());
        }
        let refs = [self.region, self.endpoint_url];
        if has_reference(value) || refs.into_iter().flatten().any(has_reference) {
            return match grant.ambient_credentials.is_empty() {
                true => Err(EgressGrant::ambient_refused(
                    tenant,
                    "access_key_id",
                    "any resource",
                )),
                false => Ok(()),
            };
        }
        let parsed = resource.arn(value);
        let region = self
            .region
            .map(str::to_string)
            .or_else(|| parsed.as_ref().map(|a| a.region.clone()))
            .unwrap_or_default();
        let arn = resource
            .ambient_arn(parsed.as_ref(), &region, self.endpoint_url)
            .map_err(|e| format!("access_key_id: {e}"))?;
        match grant.ambient_allows(&arn) {
            true => Ok(()),
            false => Err(EgressGrant::ambient_refused(tenant, "access_key_id", &arn)),
        }
    }

    /// Resolve secret references (under `secrets`) and defaults: the region from the option,
    /// else `default_region` (e.g. the resource ARN's), else `AWS_REGION` /
    /// `AWS_DEFAULT_REGION`, else `us-east-1`. A custom endpoint without static credentials
    /// is refused (never the ambient chain).
    pub fn resolve(
        &self,
        default_region: Option<String>,
        secrets: &SecretPolicy,
    ) -> Result<AwsAccess, ResolveError> {
        let res = |s: &str| secrets.resolve(s);
        let endpoint = self.endpoint_url.map(res).transpose()?;
        let region = match self.region {
            Some(r) => res(r)?,
            None => default_region
                .or_else(|| std::env::var("AWS_REGION").ok())
                .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
                .unwrap_or_else(|| "us-east-1".into()),
        };
        let creds = match (self.access_key_id, self.secret_access_key) {
            (Some(k), Some(s)) => {
                Some((res(k)?, res(s)?, self.session_token.map(res).transpose()?))
            }
            _ => None,
        };
        if creds.is_none()
            && endpoint
                .as_deref()
                .is_some_and(|e| !is_aws_endpoint(e, self.service))
        {
            return Err(CUSTOM_ENDPOINT_NEEDS_CREDS.into());
        }
        Ok(AwsAccess::new(endpoint, region, creds))
    }
}

/// Resolved access of one attempt: endpoint, signing region, credentials, and the key of
/// the SDK client that serves them.
#[derive(Debug, Clone)]
pub struct AwsAccess {
    /// Endpoint override; `None`: AWS's own, chosen by the SDK.
    pub endpoint: Option<String>,
    /// Signing region.
    pub region: String,
    /// Static credentials; `None`: the environment's chain.
    pub creds: Option<StaticCreds>,
    /// Which client serves this access: endpoint, region and a credentials fingerprint
    /// (never the secret itself).
    pub client_key: String,
}

impl AwsAccess {
    /// The access of `endpoint`, `region` and `creds`, with its client key.
    pub fn new(endpoint: Option<String>, region: String, creds: Option<StaticCreds>) -> AwsAccess {
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
        AwsAccess {
            endpoint,
            region,
            creds,
            client_key,
        }
    }

    /// The egress checks of one attempt on the resolved options (a source stored before the
    /// grants, or with secret references, is checked here): a literal IP endpoint against
    /// the address guard, a custom endpoint against `tenants.<id>.custom_endpoints`, the
    /// worker's own credentials against `tenants.<id>.ambient_credentials` for `arn`, the
    /// resolved `resource`'s (none when it is named by name: refused). Any refusal is
    /// permanent: the same options fail the same way on every attempt.
    pub fn check_egress(
        &self,
        tenant: &str,
        edge: &EdgePolicy,
        resource: &ResourceKind,
        arn: Option<&Arn>,
    ) -> Result<(), String> {
        if let Some(e) = &self.endpoint {
            check_literal(e, &edge.addresses).map_err(|e| format!("endpoint_url: {e}"))?;
        }
        let grant = edge.grant(tenant);
        if self
            .endpoint
            .as_deref()
            .is_some_and(|e| !is_aws_endpoint(e, resource.service))
            && !grant.custom_endpoints
        {
            return Err(EgressGrant::custom_refused(tenant, "endpoint_url"));
        }
        if self.creds.is_none() {
            let arn = resource
                .ambient_arn(arn, &self.region, self.endpoint.as_deref())
                .map_err(|e| format!("access_key_id: {e}"))?;
            if !grant.ambient_allows(&arn) {
                return Err(EgressGrant::ambient_refused(tenant, "access_key_id", &arn));
            }
        }
        Ok(())
    }

    /// The credentials provider of this access: the static keys, or the environment's chain
    /// (errors: the chain cannot be built for the region).
    pub fn credentials(&self) -> Result<SharedCredentialsProvider, String> {
        Ok(match &self.creds {
            Some((k, s, tok)) => SharedCredentialsProvider::new(Credentials::new(
                k,
                s,
                tok.clone(),
                None,
                "ankusa-sink-opts",
            )),
            None => SharedCredentialsProvider::new(EnvChain::new(&self.region)?),
        })
    }
}

/// The SDK clients of type `C` of a worker process, one per [`AwsAccess::client_key`],
/// sharing one HTTP client under the egress guard (rustls with ring, the guard's resolver,
/// bounded answers: [`crate::sinks::guard::guarded_aws_client`]).
pub struct AwsClients<C> {
    http: SharedHttpClient,
    clients: Mutex<HashMap<String, C>>,
}

impl<C> std::fmt::Debug for AwsClients<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsClients").finish_non_exhaustive()
    }
}

impl<C: Clone> AwsClients<C> {
    /// The clients of a process, all through the egress guard's HTTP client under
    /// `addresses`.
    pub fn new(addresses: Arc<AddressPolicy>) -> AwsClients<C> {
        AwsClients {
            http: super::guard::guarded_aws_client(addresses),
            clients: Mutex::default(),
        }
    }

    /// The client of `access`, made by `make` (given the guarded HTTP client and the
    /// credentials provider) on first use; a failure is not kept.
    pub fn client(
        &self,
        access: &AwsAccess,
        make: impl FnOnce(SharedHttpClient, SharedCredentialsProvider) -> C,
    ) -> Result<C, String> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(&access.client_key) {
            return Ok(c.clone());
        }
        let client = make(self.http.clone(), access.credentials()?);
        clients.insert(access.client_key.clone(), client.clone());
        Ok(client)
    }
}

/// The environment's AWS credential chain, through `object_store`'s implementation
/// (environment variables, web identity, ECS, EC2 instance metadata), so the worker does
/// not build a second credential stack.
#[derive(Debug)]
pub struct EnvChain(object_store::aws::AwsCredentialProvider);

impl EnvChain {
    /// The chain for `region`; errors: `object_store` refuses the environment.
    pub fn new(region: &str) -> Result<EnvChain, String> {
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

/// Codes that retry whichever AWS service answers them: throttling, the service's own
/// faults, credentials that expired mid-flight.
pub const RETRYABLE_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "RequestThrottled",
    "ProvisionedThroughputExceededException",
    "LimitExceededException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "InternalError",
    "InternalFailure",
    "InternalException",
    "InternalServiceError",
    "ExpiredToken",
    "ExpiredTokenException",
    "RequestExpired",
    "RequestTimeout",
    "OverLimit",
];

/// Whether `code` retries: one of [`RETRYABLE_CODES`], or a KMS fault (the resource's key,
/// fixed by an operator while rows wait).
pub fn retryable_code(code: &str) -> bool {
    RETRYABLE_CODES.contains(&code) || code.starts_with("Kms") || code.starts_with("KMS")
}

/// What a failed request of `module` means for every entry in it: transport errors,
/// throttling, 408, 429 and 5xx and the [`retryable_code`]s retry; other 4xx (the resource
/// does not exist, access denied, invalid parameter) are permanent.
pub fn classify_request(
    module: &str,
    status: Option<u16>,
    code: Option<&str>,
    message: &str,
) -> AttemptError {
    let error = super::truncate(
        format!(
            "{module} {}{}: {message}",
            code.unwrap_or("error"),
            status.map(|s| format!(" (http {s})")).unwrap_or_default()
        ),
        512,
    );
    let retry = match (status, code) {
        (_, Some(c)) if retryable_code(c) => true,
        (None, _) => true,
        (Some(s), _) => s == 408 || s == 429 || s >= 500,
    };
    match retry {
        true => AttemptError::retry(ErrorKind::Other, error),
        false => AttemptError::permanent(ErrorKind::Other, error),
    }
}

/// The meaning of a failed SDK request of `module` for each of its entries: the egress
/// guard's refusal is permanent (the same on every attempt); a service error goes to
/// `classify` with its status, code and message; a request that could not be built is
/// permanent; anything else (transport, timeout, an overlong answer) to `classify` without
/// a status, which retries.
pub fn request_error<E>(
    module: &str,
    e: &SdkError<E, aws_smithy_runtime_api::http::Response>,
    classify: fn(&str, Option<u16>, Option<&str>, &str) -> AttemptError,
) -> AttemptError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    if let Some(b) = super::guard::blocked_in(e) {
        return AttemptError::permanent(ErrorKind::Other, format!("{module}: {b}"));
    }
    match e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            classify(
                module,
                Some(se.raw().status().as_u16()),
                err.code(),
                err.message().unwrap_or(""),
            )
        }
        SdkError::ConstructionFailure(_) => AttemptError::permanent(
            ErrorKind::Other,
            super::truncate(
                format!("{module}: request could not be built: {}", chain(e)),
                512,
            ),
        ),
        _ => classify(module, None, None, &chain(e)),
    }
}

/// One request of an AWS batch call whose answer holds one result per request entry, in
/// request order (Kinesis `PutRecords`, EventBridge `PutEvents`): `build` makes each
/// message's entry (an error is a permanent failure of that message alone, never sent),
/// `send` sends the entries and answers each one's result in order, or the request's
/// failure, which every sent entry gets. Exactly one result per message, in order; an
/// entry the answer leaves out retries ([`no_result`]).
pub async fn send_in_order<E, Fut>(
    module: &'static str,
    batch: Vec<BatchMessage>,
    mut build: impl FnMut(BatchMessage) -> Result<E, String>,
    send: impl FnOnce(Vec<E>) -> Fut,
) -> Vec<Result<(), AttemptError>>
where
    Fut: std::future::Future<Output = Result<Vec<Result<(), AttemptError>>, AttemptError>>,
{
    let mut results: Vec<Option<Result<(), AttemptError>>> = vec![None; batch.len()];
    // Which batch position each sent entry holds.
    let mut sent = Vec::with_capacity(batch.len());
    let mut entries = Vec::with_capacity(batch.len());
    for (i, m) in batch.into_iter().enumerate() {
        match build(m) {
            Ok(e) => {
                sent.push(i);
                entries.push(e);
            }
            Err(e) => {
                let e = AttemptError::permanent(ErrorKind::Other, format!("{module}: {e}"));
                results[i] = Some(Err(e));
            }
        }
    }
    if !entries.is_empty() {
        match send(entries).await {
            Ok(answers) => {
                for (i, r) in sent.iter().zip(answers) {
                    results[*i] = Some(r);
                }
            }
            Err(e) => {
                for i in &sent {
                    results[*i] = Some(Err(e.clone()));
                }
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(no_result(module))))
        .collect()
}

/// An error and its sources, `: `-separated.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    s
}

/// The result of every entry of a batch whose request gave none (an answer shorter than
/// the request): retried, as nothing says it arrived.
pub fn no_result(module: &str) -> AttemptError {
    AttemptError::retry(
        ErrorKind::Other,
        format!("{module}: no result for this entry"),
    )
}

#[cfg(test)]
mod tests;
