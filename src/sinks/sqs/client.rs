//! The SQS clients (one per endpoint, region and credentials) and the batch transport
//! over them (R17).

use super::*;

/// The SQS clients of a worker process ([`crate::sinks::registry::Sinks`]), one per endpoint, region and credentials, sharing one HTTP
/// client (rustls with ring, no aws-lc; the egress guard's resolver; bounded answers).
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

impl SqsClients {
    /// The clients of a process, all through the egress guard's HTTP client under
    /// `addresses` ([`crate::sinks::guard::guarded_aws_client`]).
    pub fn new(addresses: Arc<crate::sinks::guard::AddressPolicy>) -> SqsClients {
        SqsClients {
            http: crate::sinks::guard::guarded_aws_client(addresses),
            clients: Arc::default(),
        }
    }

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
pub(super) struct EnvChain(object_store::aws::AwsCredentialProvider);

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
pub(super) struct SqsTransport {
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
                            kind: ErrorKind::Other,
                        })
                    })
                })
                .collect()
        })
    }
}

pub(super) fn entry(
    i: usize,
    m: BatchMessage,
) -> Result<SendMessageBatchRequestEntry, AttemptError> {
    let perm =
        |e: &dyn std::fmt::Display| AttemptError::permanent(ErrorKind::Other, format!("sqs: {e}"));
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

pub(super) fn request_error<E>(
    e: &SdkError<E, aws_sdk_sqs::config::http::HttpResponse>,
) -> AttemptError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    // The egress guard refused the endpoint's address: the same on every attempt.
    if let Some(b) = crate::sinks::guard::blocked_in(e) {
        return AttemptError::permanent(ErrorKind::Other, format!("sqs: {b}"));
    }
    match e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            classify_request(
                Some(se.raw().status().as_u16()),
                err.code(),
                err.message().unwrap_or(""),
            )
        }
        SdkError::ConstructionFailure(_) => AttemptError::permanent(
            ErrorKind::Other,
            crate::sinks::truncate(
                format!("sqs: request could not be built: {}", chain(e)),
                512,
            ),
        ),
        _ => classify_request(None, None, &chain(e)),
    }
}

pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    s
}
