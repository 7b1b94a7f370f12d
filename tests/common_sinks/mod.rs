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

/// One entry of a recorded `SendMessageBatch`.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: String,
    pub body: String,
    pub attrs: BTreeMap<String, String>,
    pub group: Option<String>,
    /// Body plus every attribute's name, type and value, bytes (what SQS counts).
    pub size: usize,
}

impl Entry {
    pub fn attr(&self, name: &str) -> &str {
        self.attrs.get(name).map(String::as_str).unwrap_or("")
    }
}

/// A recorded batch request (SQS `SendMessageBatch` or a Pub/Sub publish).
#[derive(Debug, Clone)]
pub struct Batch {
    pub target: String,
    pub entries: Vec<Entry>,
    /// Ids of entries the proxy failed.
    pub failed: Vec<String>,
}

impl Batch {
    pub fn size(&self) -> usize {
        self.entries.iter().map(|e| e.size).sum()
    }
}

/// One recorded request of any kind.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub status: u16,
}

type EntryRule = Arc<dyn Fn(&Entry) -> bool + Send + Sync>;

#[derive(Default)]
struct ProxyState {
    upstream: String,
    batches: Mutex<Vec<Batch>>,
    requests: Mutex<Vec<Request>>,
    fail_entry: Mutex<Option<EntryRule>>,
    fail_puts: AtomicUsize,
    inflight: AtomicUsize,
    max_inflight: AtomicUsize,
}

/// A recording, fault-injecting HTTP proxy in front of `upstream`.
pub struct Proxy {
    state: Arc<ProxyState>,
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    pub async fn start(upstream: &str) -> Proxy {
        let state = Arc::new(ProxyState {
            upstream: upstream.trim_end_matches('/').to_string(),
            ..Default::default()
        });
        let listener = tokio::net::TcpListener::from_std(
            ankusa::testkit::listen_loopback()
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .expect("a loopback listener"),
        )
        .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let st = state.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let st = st.clone();
            let client = client.clone();
            async move { handle(st, client, req).await }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { state, url, task }
    }

    /// Fail every SQS entry, Kinesis record or EventBridge event `rule` picks (retryably:
    /// `InternalError`, `ProvisionedThroughputExceededException`, `InternalFailure`), until
    /// cleared.
    pub fn fail_entries(&self, rule: impl Fn(&Entry) -> bool + Send + Sync + 'static) {
        *self.state.fail_entry.lock().unwrap() = Some(Arc::new(rule));
    }

    /// Answer the next `n` S3 object uploads (PUT) with 503.
    pub fn fail_next_puts(&self, n: usize) {
        self.state.fail_puts.store(n, Ordering::SeqCst);
    }

    /// Every recorded batch request.
    pub fn batches(&self) -> Vec<Batch> {
        self.state.batches.lock().unwrap().clone()
    }

    /// Every request (method, path, status).
    pub fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Most batch requests in flight at once.
    pub fn max_inflight(&self) -> usize {
        self.state.max_inflight.load(Ordering::SeqCst)
    }

    /// Wait until `f` holds over the recorded batches (liveness bound 30 s).
    pub async fn wait_batches(&self, f: impl Fn(&[Batch]) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if f(&self.batches()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

fn attr_map(v: &serde_json::Value) -> (BTreeMap<String, String>, usize) {
    let mut out = BTreeMap::new();
    let mut size = 0;
    if let Some(m) = v.as_object() {
        for (k, a) in m {
            let ty = a["DataType"].as_str().unwrap_or("");
            let val = a["StringValue"].as_str().unwrap_or("");
            size += k.len() + ty.len() + val.len();
            out.insert(k.clone(), val.to_string());
        }
    }
    (out, size)
}

/// The batch calls of Kinesis (`PutRecords`) and EventBridge (`PutEvents`), as the proxy
/// records them and fails chosen entries: both answer one result per request entry, in
/// order, an error code marking a failed one, with a count of the failed.
struct StreamShape {
    /// The request's and the answer's list of entries.
    list: &'static str,
    result_list: &'static str,
    /// The answer's count of failed entries.
    count: &'static str,
    /// The result of an entry the proxy fails (a retryable code).
    error: serde_json::Value,
    kinesis: bool,
}

impl StreamShape {
    fn of(target: &str) -> Option<StreamShape> {
        match target {
            "Kinesis_20131202.PutRecords" => Some(StreamShape {
                list: "Records",
                result_list: "Records",
                count: "FailedRecordCount",
                error: serde_json::json!({"ErrorCode": "ProvisionedThroughputExceededException",
                    "ErrorMessage": "injected by the test proxy"}),
                kinesis: true,
            }),
            "AWSEvents.PutEvents" => Some(StreamShape {
                list: "Entries",
                result_list: "Entries",
                count: "FailedEntryCount",
                error: serde_json::json!({"ErrorCode": "InternalFailure",
                    "ErrorMessage": "injected by the test proxy"}),
                kinesis: false,
            }),
            _ => None,
        }
    }

    /// One request entry as recorded: a Kinesis record's data (decoded, as text) and
    /// partition key (`group`); an event's detail, with its detail-type, source and bus as
    /// attributes.
    fn entry(&self, i: usize, e: &serde_json::Value) -> Entry {
        let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
        if self.kinesis {
            use base64::Engine;
            let data = base64::engine::general_purpose::STANDARD
                .decode(s("Data"))
                .unwrap_or_default();
            Entry {
                id: i.to_string(),
                body: String::from_utf8_lossy(&data).into_owned(),
                attrs: BTreeMap::new(),
                size: data.len() + s("PartitionKey").len(),
                group: Some(s("PartitionKey")),
            }
        } else {
            let attrs: BTreeMap<String, String> = [
                ("detail-type", s("DetailType")),
                ("source", s("Source")),
                ("bus", s("EventBusName")),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            Entry {
                id: i.to_string(),
                size: s("Detail").len(),
                body: s("Detail"),
                attrs,
                group: None,
            }
        }
    }

    /// The stream or bus a request goes to.
    fn destination(&self, v: &serde_json::Value) -> String {
        match self.kinesis {
            true => v["StreamARN"].as_str().or(v["StreamName"].as_str()),
            false => v["Entries"][0]["EventBusName"].as_str(),
        }
        .unwrap_or("")
        .to_string()
    }

    /// The upstream's answer to the entries forwarded, with the failed positions put back
    /// in request order as errors and counted.
    fn merge(&self, mut v: serde_json::Value, failed_at: &[usize]) -> serde_json::Value {
        let mut upstream = v[self.result_list]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter();
        let total = upstream.len() + failed_at.len();
        let merged: Vec<serde_json::Value> = (0..total)
            .map(|i| match failed_at.contains(&i) {
                true => self.error.clone(),
                false => upstream.next().unwrap_or_default(),
            })
            .collect();
        let count = v[self.count].as_u64().unwrap_or(0) + failed_at.len() as u64;
        v[self.result_list] = serde_json::Value::Array(merged);
        v[self.count] = count.into();
        v
    }
}

async fn handle(
    st: Arc<ProxyState>,
    client: reqwest::Client,
    req: axum::extract::Request,
) -> axum::response::Response {
    let method = req.method().clone();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let is_sqs_batch = target.ends_with("SendMessageBatch");
    let is_publish = path.ends_with(":publish");
    let stream_shape = StreamShape::of(&target);
    let is_batch = is_sqs_batch || is_publish || stream_shape.is_some();
    let mut forward_body = body.clone();
    let mut injected: Vec<serde_json::Value> = Vec::new();
    // Kinesis and EventBridge: which positions of the request the proxy failed.
    let mut failed_at: Vec<usize> = Vec::new();
    if let Some(shape) = &stream_shape {
        let mut v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let rule = st.fail_entry.lock().unwrap().clone();
        let mut entries = Vec::new();
        let mut kept = Vec::new();
        for (i, e) in v[shape.list]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let rec = shape.entry(i, &e);
            if rule.as_ref().is_some_and(|r| r(&rec)) {
                failed_at.push(i);
            } else {
                kept.push(e);
            }
            entries.push(rec);
        }
        st.batches.lock().unwrap().push(Batch {
            target: shape.destination(&v),
            failed: failed_at.iter().map(|i| i.to_string()).collect(),
            entries,
        });
        v[shape.list] = serde_json::Value::Array(kept);
        forward_body = serde_json::to_vec(&v).unwrap().into();
    } else if is_sqs_batch {
        let mut v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let rule = st.fail_entry.lock().unwrap().clone();
        let mut entries = Vec::new();
        let mut kept = Vec::new();
        let mut failed = Vec::new();
        for e in v["Entries"].as_array().cloned().unwrap_or_default() {
            let (attrs, asize) = attr_map(&e["MessageAttributes"]);
            let rec = Entry {
                id: e["Id"].as_str().unwrap_or("").into(),
                body: e["MessageBody"].as_str().unwrap_or("").into(),
                attrs,
                group: e["MessageGroupId"].as_str().map(str::to_string),
                size: e["MessageBody"].as_str().map_or(0, str::len) + asize,
            };
            if rule.as_ref().is_some_and(|r| r(&rec)) {
                injected.push(serde_json::json!({"Id": rec.id, "SenderFault": false,
                    "Code": "InternalError", "Message": "injected by the test proxy"}));
                failed.push(rec.id.clone());
            } else {
                kept.push(e);
            }
            entries.push(rec);
        }
        st.batches.lock().unwrap().push(Batch {
            target: v["QueueUrl"].as_str().unwrap_or("").into(),
            entries,
            failed,
        });
        v["Entries"] = serde_json::Value::Array(kept);
        forward_body = serde_json::to_vec(&v).unwrap().into();
    } else if is_publish {
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let entries = v["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                let attrs: BTreeMap<String, String> = m["attributes"]
                    .as_object()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                Entry {
                    id: String::new(),
                    body: m["data"].as_str().unwrap_or("").into(),
                    size: m["data"].as_str().map_or(0, str::len),
                    attrs,
                    group: m["orderingKey"].as_str().map(str::to_string),
                }
            })
            .collect();
        st.batches.lock().unwrap().push(Batch {
            target: path.clone(),
            entries,
            failed: Vec::new(),
        });
    }
    if is_batch {
        let now = st.inflight.fetch_add(1, Ordering::SeqCst) + 1;
        st.max_inflight.fetch_max(now, Ordering::SeqCst);
    }
    let record = |status: u16| {
        st.requests.lock().unwrap().push(Request {
            method: method.to_string(),
            path: path.clone(),
            status,
        });
    };
    let is_put_object = method == axum::http::Method::PUT
        && path.trim_start_matches('/').contains('/')
        && target.is_empty();
    if is_put_object
        && st
            .fail_puts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    {
        record(503);
        return axum::response::Response::builder()
            .status(503)
            .body(axum::body::Body::from(
                "<Error><Code>SlowDown</Code></Error>",
            ))
            .unwrap();
    }
    let all_failed = is_sqs_batch
        && serde_json::from_slice::<serde_json::Value>(&forward_body)
            .ok()
            .and_then(|v| v["Entries"].as_array().map(Vec::is_empty))
            .unwrap_or(false);
    let all_failed_stream = stream_shape.is_some()
        && !failed_at.is_empty()
        && serde_json::from_slice::<serde_json::Value>(&forward_body)
            .ok()
            .and_then(|v| {
                v[stream_shape.as_ref().unwrap().list]
                    .as_array()
                    .map(Vec::is_empty)
            })
            .unwrap_or(false);
    let (status, resp_headers, resp_body) = if all_failed_stream {
        let shape = stream_shape.as_ref().unwrap();
        (
            200u16,
            vec![(
                "content-type".to_string(),
                "application/x-amz-json-1.1".to_string(),
            )],
            shape
                .merge(serde_json::json!({}), &failed_at)
                .to_string()
                .into_bytes(),
        )
    } else if all_failed {
        (
            200u16,
            vec![(
                "content-type".to_string(),
                "application/x-amz-json-1.0".to_string(),
            )],
            serde_json::json!({"Successful": [], "Failed": injected.clone()})
                .to_string()
                .into_bytes(),
        )
    } else {
        let mut r = client.request(method.clone(), format!("{}{}", st.upstream, path));
        for (k, v) in headers.iter() {
            if k != "host" && k != "content-length" {
                r = r.header(k, v);
            }
        }
        match r.body(forward_body).send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let hs: Vec<(String, String)> = resp
                    .headers()
                    .iter()
                    .filter(|(k, _)| *k != "content-length" && *k != "transfer-encoding")
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                    .collect();
                let mut b = resp.bytes().await.unwrap_or_default().to_vec();
                if let (Some(shape), 200, false) = (&stream_shape, status, failed_at.is_empty()) {
                    let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
                    b = serde_json::to_vec(&shape.merge(v, &failed_at)).unwrap();
                }
                if is_sqs_batch && !injected.is_empty() && status == 200 {
                    let mut v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
                    let mut failed = v["Failed"].as_array().cloned().unwrap_or_default();
                    failed.extend(injected.iter().cloned());
                    v["Failed"] = serde_json::Value::Array(failed);
                    b = serde_json::to_vec(&v).unwrap();
                }
                (status, hs, b)
            }
            Err(e) => (502, Vec::new(), e.to_string().into_bytes()),
        }
    };
    if is_batch {
        st.inflight.fetch_sub(1, Ordering::SeqCst);
    }
    record(status);
    let mut b = axum::response::Response::builder().status(status);
    for (k, v) in resp_headers {
        b = b.header(k, v);
    }
    b.body(axum::body::Body::from(resp_body)).unwrap()
}

/// Google's Pub/Sub emulator (a Java program) on a free port.
pub struct PubSubEmulator {
    child: Child,
    pub host: String,
    pub url: String,
}

/// Where the emulator's jar is: `ANKUSA_PUBSUB_EMULATOR_JAR`, the Debian package's
/// directory, or what `dpkg -L google-cloud-cli-pubsub-emulator` lists.
pub fn emulator_jar() -> Option<String> {
    if let Ok(j) = std::env::var("ANKUSA_PUBSUB_EMULATOR_JAR") {
        return Some(j);
    }
    let dir = "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/lib";
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path().display().to_string();
            if p.ends_with("-all.jar") {
                return Some(p);
            }
        }
    }
    let out = Command::new("dpkg")
        .args(["-L", "google-cloud-cli-pubsub-emulator"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with("-all.jar"))
        .map(str::to_string)
}

impl PubSubEmulator {
    /// Start the emulator. A missing emulator fails the test (never a skip): install the
    /// Debian package google-cloud-cli-pubsub-emulator (`.ci/run` does) or point
    /// `ANKUSA_PUBSUB_EMULATOR_JAR` at its jar.
    pub async fn start() -> PubSubEmulator {
        let Some(jar) = emulator_jar() else {
            panic!(
                "the Pub/Sub emulator is not installed: install the Debian package \
                 google-cloud-cli-pubsub-emulator (.ci/run does) or set \
                 ANKUSA_PUBSUB_EMULATOR_JAR to its *-all.jar"
            );
        };
        let port = free_port();
        let mut child = Command::new("java")
            .args([
                "-Xmx256m",
                "-jar",
                &jar,
                "--host=127.0.0.1",
                &format!("--port={port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("java starts the Pub/Sub emulator");
        let host = format!("127.0.0.1:{port}");
        let url = format!("http://{host}");
        wait_http(&format!("{url}/"), "the Pub/Sub emulator", &mut child).await;
        PubSubEmulator { child, host, url }
    }

    /// Create a topic and a subscription on it (`ordered`: message ordering enabled).
    pub async fn topic(&self, project: &str, topic: &str, sub: &str, ordered: bool) {
        let c = reqwest::Client::new();
        let r = c
            .put(format!("{}/v1/projects/{project}/topics/{topic}", self.url))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "topic: {}", r.status());
        let r = c
            .put(format!(
                "{}/v1/projects/{project}/subscriptions/{sub}",
                self.url
            ))
            .header("content-type", "application/json")
            .body(
                serde_json::json!({
                    "topic": format!("projects/{project}/topics/{topic}"),
                    "enableMessageOrdering": ordered,
                    "ackDeadlineSeconds": 60,
                })
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "subscription: {}", r.status());
    }

    /// Pull and acknowledge until `n` messages arrived; each is `(data, attributes,
    /// ordering key)`, in the order pulled.
    pub async fn pull_n(
        &self,
        project: &str,
        sub: &str,
        n: usize,
    ) -> Vec<(Vec<u8>, BTreeMap<String, String>, String)> {
        use base64::Engine;
        let c = reqwest::Client::new();
        let base = format!("{}/v1/projects/{project}/subscriptions/{sub}", self.url);
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while out.len() < n && Instant::now() < deadline {
            let raw = c
                .post(format!("{base}:pull"))
                .header("content-type", "application/json")
                .body(r#"{"maxMessages": 1000}"#)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&raw).unwrap_or_default();
            let msgs = v["receivedMessages"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if msgs.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let mut acks = Vec::new();
            for m in msgs {
                acks.push(m["ackId"].clone());
                let msg = &m["message"];
                let data = base64::engine::general_purpose::STANDARD
                    .decode(msg["data"].as_str().unwrap_or(""))
                    .unwrap_or_default();
                let attrs = msg["attributes"]
                    .as_object()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                let key = msg["orderingKey"].as_str().unwrap_or("").to_string();
                out.push((data, attrs, key));
            }
            c.post(format!("{base}:acknowledge"))
                .header("content-type", "application/json")
                .body(serde_json::json!({ "ackIds": acks }).to_string())
                .send()
                .await
                .unwrap();
        }
        out
    }
}

impl Drop for PubSubEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
