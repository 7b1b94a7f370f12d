//! Harness of the batching-sink tests: a real AWS-compatible server (`moto_server`: SQS,
//! S3, Kinesis, EventBridge), Google's Pub/Sub emulator, and a recording proxy in front of
//! either. Every server runs on a free loopback port and is killed on drop.
//!
//! The proxy is the outside observer: it records every `SendMessageBatch` (entries, their
//! sizes with attributes), Kinesis `PutRecords`, EventBridge `PutEvents`, every Pub/Sub
//! publish and every S3 request, and can inject what the local servers cannot produce on
//! demand: a failure of chosen entries inside a batch (as SQS, Kinesis and EventBridge
//! report throttling per entry) and failed S3 uploads.
#![allow(dead_code)]

mod proxy;
mod pubsub;
// Not every binary uses both (a binary without Pub/Sub tests leaves the emulator unused).
#[allow(unused_imports)]
pub use proxy::*;
#[allow(unused_imports)]
pub use pubsub::*;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Let `tenants` name their own SQS/Pub/Sub endpoints (`tenants.<id>.custom_endpoints`): the
/// local servers are custom endpoints on loopback, which the test config's `http.allow_cidrs`
/// exempts from the address guard. Off by default, so every test opts in explicitly.
pub fn grant_custom_endpoints(c: &mut ankusa::config::Config, tenants: &[&str]) {
    for t in tenants {
        c.tenants.entry(t.to_string()).or_default().custom_endpoints = true;
    }
}

/// Fake credentials moto accepts.
pub const KEY: &str = "testing";
/// Region used with moto.
pub const REGION: &str = "us-east-1";

fn free_port() -> u16 {
    ankusa::testkit::free_port().expect("a free port")
}

async fn wait_http(url: &str, what: &str, child: &mut Child) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = client.get(url).send().await {
            if r.status().is_success() {
                return;
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before it was ready: {status}");
        }
        assert!(Instant::now() < deadline, "{what} not ready after 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `moto_server` (SQS and S3) on a free port.
pub struct Moto {
    child: Child,
    pub url: String,
}

impl Moto {
    pub async fn start() -> Moto {
        let port = free_port();
        let args = [
            "-H".to_string(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
        ];
        let mut child = Command::new("moto_server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .or_else(|_| {
                Command::new("python3")
                    .args(["-m", "moto.server"])
                    .args(&args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
            })
            .expect("moto_server starts (pip install 'moto[server]'; .ci/run installs it)");
        let url = format!("http://127.0.0.1:{port}");
        wait_http(&format!("{url}/moto-api/"), "moto_server", &mut child).await;
        Moto { child, url }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An SQS client for the test itself (creating queues, receiving), against `endpoint`.
pub fn sqs_client(endpoint: &str) -> aws_sdk_sqs::Client {
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new(REGION))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            KEY, KEY, None, None, "test",
        ))
        .http_client({
            use aws_smithy_http_client::tls;
            aws_smithy_http_client::Builder::new()
                .tls_provider(tls::Provider::Rustls(
                    tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https()
        })
        .endpoint_url(endpoint)
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

/// Create a queue (`.fifo` names make FIFO queues); returns its URL.
pub async fn create_queue(c: &aws_sdk_sqs::Client, name: &str) -> String {
    let mut req = c.create_queue().queue_name(name);
    if name.ends_with(".fifo") {
        req = req.attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true");
    }
    req.send()
        .await
        .expect("queue created")
        .queue_url()
        .expect("queue url")
        .to_string()
}

/// An `sqs` sink entry sending to `queue` through `endpoint` (moto itself, or a [`Proxy`]
/// in front of it) with moto's credentials; `extra` options (`linger_ms`, …) are merged in.
pub fn sqs_entry(
    endpoint: &str,
    queue: &str,
    extra: serde_json::Value,
) -> ankusa::model::SinkEntry {
    let mut opts = serde_json::json!({
        "queue_url": queue,
        "endpoint_url": endpoint,
        "region": REGION,
        "access_key_id": KEY,
        "secret_access_key": KEY,
    });
    if let (Some(o), Some(e)) = (opts.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    ankusa::model::SinkEntry {
        module: "sqs".into(),
        opts: opts.as_object().cloned().expect("an object"),
        ..Default::default()
    }
}

/// The world of an SQS sink test: a moto server, a recording proxy in front of it, the
/// test's own SQS client and one queue (`.fifo` names make a FIFO queue).
pub struct SqsWorld {
    pub moto: Moto,
    pub proxy: Proxy,
    pub sqs: aws_sdk_sqs::Client,
    /// The queue's URL.
    pub queue: String,
}

impl SqsWorld {
    pub async fn start(queue: &str) -> SqsWorld {
        let moto = Moto::start().await;
        let proxy = Proxy::start(&moto.url).await;
        let sqs = sqs_client(&moto.url);
        let queue = create_queue(&sqs, queue).await;
        SqsWorld {
            moto,
            proxy,
            sqs,
            queue,
        }
    }

    /// An `sqs` sink entry for the queue, through the proxy.
    pub fn entry(&self, extra: serde_json::Value) -> ankusa::model::SinkEntry {
        sqs_entry(&self.proxy.url, &self.queue, extra)
    }
}

/// The HTTP client of the test's own AWS clients (rustls with ring, no guard).
fn test_aws_http() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    use aws_smithy_http_client::tls;
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// A Kinesis client for the test itself (creating streams, reading records), against
/// `endpoint`.
pub fn kinesis_client(endpoint: &str) -> aws_sdk_kinesis::Client {
    use aws_sdk_kinesis::config::{BehaviorVersion, Credentials, Region};
    let conf = aws_sdk_kinesis::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new(KEY, KEY, None, None, "test"))
        .http_client(test_aws_http())
        .endpoint_url(endpoint)
        .build();
    aws_sdk_kinesis::Client::from_conf(conf)
}

/// Create a stream of `shards` shards; returns its ARN.
pub async fn create_stream(c: &aws_sdk_kinesis::Client, name: &str, shards: i32) -> String {
    c.create_stream()
        .stream_name(name)
        .shard_count(shards)
        .send()
        .await
        .expect("stream created");
    c.describe_stream_summary()
        .stream_name(name)
        .send()
        .await
        .expect("stream described")
        .stream_description_summary()
        .expect("a summary")
        .stream_arn()
        .to_string()
}

/// One record read back from a stream.
#[derive(Debug, Clone)]
pub struct StreamRecord {
    pub shard: String,
    pub partition_key: String,
    pub data: Vec<u8>,
}

/// Every record of `stream`, shard by shard, each shard's in sequence order.
pub async fn read_stream(c: &aws_sdk_kinesis::Client, stream: &str) -> Vec<StreamRecord> {
    let shards = c
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .expect("shards listed");
    let mut out = Vec::new();
    for shard in shards.shards() {
        let mut it = c
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("a shard iterator")
            .shard_iterator()
            .map(str::to_string);
        while let Some(i) = it {
            let r = c
                .get_records()
                .shard_iterator(i)
                .limit(10_000)
                .send()
                .await
                .expect("records read");
            if r.records().is_empty() {
                break;
            }
            for rec in r.records() {
                out.push(StreamRecord {
                    shard: shard.shard_id().to_string(),
                    partition_key: rec.partition_key().unwrap_or_default().to_string(),
                    data: rec.data().as_ref().to_vec(),
                });
            }
            it = r.next_shard_iterator().map(str::to_string);
        }
    }
    out
}

/// Read `stream` until it holds `n` records (liveness bound 30 s), then return them all.
pub async fn read_stream_n(
    c: &aws_sdk_kinesis::Client,
    stream: &str,
    n: usize,
) -> Vec<StreamRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = read_stream(c, stream).await;
        if got.len() >= n || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `kinesis` sink entry putting to `stream` (name or ARN) through `endpoint` (moto
/// itself, or a [`Proxy`] in front of it) with moto's credentials; `extra` merged in.
pub fn kinesis_entry(
    endpoint: &str,
    stream: &str,
    extra: serde_json::Value,
) -> ankusa::model::SinkEntry {
    aws_entry(
        "kinesis",
        serde_json::json!({"stream": stream, "endpoint_url": endpoint}),
        extra,
    )
}

/// An EventBridge client for the test itself (buses, rules, targets), against `endpoint`.
pub fn events_client(endpoint: &str) -> aws_sdk_eventbridge::Client {
    use aws_sdk_eventbridge::config::{BehaviorVersion, Credentials, Region};
    let conf = aws_sdk_eventbridge::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new(KEY, KEY, None, None, "test"))
        .http_client(test_aws_http())
        .endpoint_url(endpoint)
        .build();
    aws_sdk_eventbridge::Client::from_conf(conf)
}

/// Create bus `bus` with a rule matching `source` whose target is a new SQS queue `queue`,
/// so the events the bus takes can be read back from the queue; returns the queue's URL.
pub async fn bus_into_queue(
    events: &aws_sdk_eventbridge::Client,
    sqs: &aws_sdk_sqs::Client,
    bus: &str,
    source: &str,
    queue: &str,
) -> String {
    let q = create_queue(sqs, queue).await;
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&q)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("queue attributes")
        .attributes()
        .and_then(|a| {
            a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .cloned()
        })
        .expect("a queue ARN");
    events
        .create_event_bus()
        .name(bus)
        .send()
        .await
        .expect("bus created");
    events
        .put_rule()
        .name(format!("{bus}-to-{queue}"))
        .event_bus_name(bus)
        .event_pattern(serde_json::json!({"source": [source]}).to_string())
        .send()
        .await
        .expect("rule put");
    events
        .put_targets()
        .rule(format!("{bus}-to-{queue}"))
        .event_bus_name(bus)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("queue")
                .arn(arn)
                .build()
                .expect("a target"),
        )
        .send()
        .await
        .expect("target put");
    q
}

/// An `eventbridge` sink entry putting to `bus` with `source` through `endpoint` (moto
/// itself, or a [`Proxy`]) with moto's credentials; `extra` merged in.
pub fn eventbridge_entry(
    endpoint: &str,
    bus: &str,
    source: &str,
    extra: serde_json::Value,
) -> ankusa::model::SinkEntry {
    aws_entry(
        "eventbridge",
        serde_json::json!({"event_bus": bus, "source": source, "endpoint_url": endpoint}),
        extra,
    )
}

/// A sink entry of an AWS `module` with `opts`, moto's region and credentials, and `extra`.
fn aws_entry(
    module: &str,
    mut opts: serde_json::Value,
    extra: serde_json::Value,
) -> ankusa::model::SinkEntry {
    if let Some(o) = opts.as_object_mut() {
        o.insert("region".into(), REGION.into());
        o.insert("access_key_id".into(), KEY.into());
        o.insert("secret_access_key".into(), KEY.into());
        if let Some(e) = extra.as_object() {
            o.extend(e.clone());
        }
    }
    ankusa::model::SinkEntry {
        module: module.into(),
        opts: opts.as_object().cloned().expect("an object"),
        ..Default::default()
    }
}

/// Points the claim check at moto's S3: `url` (`s3://bucket[/prefix]`) through `endpoint`
/// (moto itself or a [`Proxy`]), with moto's credentials.
pub fn s3_claim_check(c: &mut ankusa::config::Config, url: &str, endpoint: String) {
    c.claim_check.url = url.into();
    c.claim_check.endpoint = endpoint;
    c.claim_check.region = REGION.into();
    c.claim_check.access_key_id = KEY.into();
    c.claim_check.secret_access_key = KEY.into();
}

/// One received message.
#[derive(Debug, Clone)]
pub struct Received {
    pub body: String,
    pub attrs: BTreeMap<String, String>,
    pub group: Option<String>,
    pub dedup: Option<String>,
}

/// Receive and delete messages until `n` have arrived (or the liveness bound passes).
pub async fn receive_n(c: &aws_sdk_sqs::Client, queue: &str, n: usize) -> Vec<Received> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < n && Instant::now() < deadline {
        let r = c
            .receive_message()
            .queue_url(queue)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        let msgs = r.messages();
        if msgs.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        for m in msgs {
            let attrs = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.clone(), v.string_value().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let sys = m.attributes();
            let get = |name: aws_sdk_sqs::types::MessageSystemAttributeName| {
                sys.and_then(|s| s.get(&name)).cloned()
            };
            out.push(Received {
                body: m.body().unwrap_or("").to_string(),
                attrs,
                group: get(aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId),
                dedup: get(aws_sdk_sqs::types::MessageSystemAttributeName::MessageDeduplicationId),
            });
            c.delete_message()
                .queue_url(queue)
                .receipt_handle(m.receipt_handle().unwrap_or(""))
                .send()
                .await
                .expect("delete");
        }
    }
    out
}

/// Messages currently in a queue (visible and in flight).
pub async fn queue_depth(c: &aws_sdk_sqs::Client, queue: &str) -> usize {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let r = c
        .get_queue_attributes()
        .queue_url(queue)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("queue attributes");
    let a = r.attributes().cloned().unwrap_or_default();
    let n = |k: A| a.get(&k).and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
    n(A::ApproximateNumberOfMessages) + n(A::ApproximateNumberOfMessagesNotVisible)
}

/// Create an S3 bucket on moto (moto takes unsigned requests).
pub async fn create_bucket(moto_url: &str, bucket: &str) {
    let r = reqwest::Client::new()
        .put(format!("{moto_url}/{bucket}"))
        .send()
        .await
        .expect("bucket request");
    assert!(r.status().is_success(), "bucket created: {}", r.status());
}

/// Tick until `n` rows have ended (delivered or dead-lettered) since the store's start: a
/// row waiting out a backoff is not due, so one `tick()` can return before it is retried.
/// Returns the rows ended; the liveness bound is 30 s.
pub async fn until_ended(worker: &ankusa::Worker, store: &ankusa::store::Store, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        worker.tick().await.expect("tick");
        let t = store.totals().await.expect("totals");
        let ended = t.delivered + t.dead_lettered;
        if ended >= n || Instant::now() > deadline {
            return ended;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
