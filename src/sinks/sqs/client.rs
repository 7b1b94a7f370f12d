//! The SQS clients (one per endpoint, region and credentials) and the batch transport
//! over them.

use super::*;

/// The SQS clients of a worker process ([`crate::sinks::registry::Sinks`]), one per endpoint,
/// region and credentials, sharing one HTTP client (rustls with ring, no aws-lc; the egress
/// guard's resolver; bounded answers): [`crate::sinks::aws::AwsClients`].
pub type SqsClients = crate::sinks::aws::AwsClients<aws_sdk_sqs::Client>;

/// The client of `t`, built on first use. SDK retries are off (ankusa retries rows) and
/// credentials are not cached by the SDK (the chain caches and refreshes them).
pub fn client(clients: &SqsClients, t: &SqsTarget) -> Result<aws_sdk_sqs::Client, String> {
    clients.client(&t.access(), |http, creds| {
        let mut b = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(t.region.clone()))
            .credentials_provider(creds)
            .identity_cache(IdentityCache::no_cache())
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .http_client(http);
        if let Some(e) = &t.endpoint {
            b = b.endpoint_url(e.clone());
        }
        aws_sdk_sqs::Client::from_conf(b.build())
    })
}

/// The transport of one queue.
pub fn transport(clients: &SqsClients, t: &SqsTarget) -> Result<Arc<dyn Transport>, String> {
    Ok(Arc::new(SqsTransport {
        client: client(clients, t)?,
        queue_url: t.queue_url.clone(),
    }))
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
    crate::sinks::aws::request_error("sqs", e, |_, status, code, message| {
        classify_request(status, code, message)
    })
}
