//! The recording proxy in front of moto or the Pub/Sub emulator: it keeps every batch
//! request (SQS, Kinesis, EventBridge, Pub/Sub publishes) and every S3 request, and can fail
//! chosen entries or uploads.

use super::*;

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
