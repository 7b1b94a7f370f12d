//! The soak's producers: Rust fan-out and lanes, ingest over HTTP and the Python
//! producer, each recording what was acknowledged.

use super::*;

/// Pull what the receiver saw since the last call into `seen`.
pub(super) fn collect(receiver: &Receiver, seen: &Mutex<Vec<Seen>>) {
    let batch = receiver.take();
    let mut seen = seen.lock().unwrap();
    for r in batch {
        seen.push(Seen {
            hook: r
                .header("ankusa-hook-id")
                .and_then(|h| h.parse().ok())
                .unwrap_or(0),
            sha: r.body_sha256.clone(),
            path: r.path.clone(),
            attempt: r.header("ankusa-attempt").and_then(|a| a.parse().ok()),
            webhook_id: r.header("webhook-id").unwrap_or_default().to_string(),
            status: r.status,
            at: r.at,
        });
    }
}

/// The Rust producer of the `acme/fan` source: 5 hooks per commit every 100 ms.
pub(super) async fn rust_fan(
    producer: Producer,
    acks: Acks,
    stop: Arc<AtomicBool>,
) -> (usize, usize) {
    let (mut tries, mut refused) = (0, 0);
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let hooks: Vec<Hook> = (0..5)
            .map(|i| Hook::new(format!("{{\"via\":\"rust\",\"n\":{},\"i\":{i}}}", n)))
            .collect();
        n += 1;
        tries += 1;
        match producer.commit_many("acme", "fan", &hooks).await {
            Ok(r) => {
                let mut a = acks.lock().unwrap();
                for (i, h) in hooks.iter().enumerate() {
                    a.push(Ack {
                        at: t(),
                        id: r.first_hook + i as u64,
                        sha: sha256_hex(&h.body),
                        paths: FAN,
                        lane: None,
                    });
                }
            }
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (tries, refused)
}

/// The Rust producer of the ordered `acme/lanes` source: one hook per lane per commit, each
/// lane's position advanced only once its commit is acknowledged.
pub(super) async fn rust_lanes(
    producer: Producer,
    acks: Acks,
    stop: Arc<AtomicBool>,
) -> (usize, usize) {
    let (mut tries, mut refused) = (0, 0);
    let mut n = 0u64;
    let mut attempt = 0u64;
    while !stop.load(Ordering::SeqCst) {
        attempt += 1;
        let hooks: Vec<Hook> = (0..LANES)
            .map(|l| {
                Hook::new(
                    serde_json::json!({"lane": format!("L{l}"), "n": n, "try": attempt})
                        .to_string(),
                )
            })
            .collect();
        tries += 1;
        match producer.commit_many("acme", "lanes", &hooks).await {
            Ok(r) => {
                let mut a = acks.lock().unwrap();
                for (l, h) in hooks.iter().enumerate() {
                    a.push(Ack {
                        at: t(),
                        id: r.first_hook + l as u64,
                        sha: sha256_hex(&h.body),
                        paths: ORDERED,
                        lane: Some((l, n)),
                    });
                }
                n += 1;
            }
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    (tries, refused)
}

/// A producer POSTing to the workers' ingest (`acme/web`) every 50 ms, round robin.
pub(super) async fn ingest(
    admins: Arc<Mutex<Vec<String>>>,
    acks: Acks,
    stop: Arc<AtomicBool>,
) -> (usize, usize) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .no_proxy()
        .build()
        .expect("client");
    let (mut tries, mut refused) = (0, 0);
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let admin = {
            let a = admins.lock().unwrap();
            a[n as usize % a.len()].clone()
        };
        let body = format!("{{\"via\":\"ingest\",\"n\":{n}}}");
        n += 1;
        tries += 1;
        let answer = http
            .post(format!("http://{admin}/v1/hooks/acme/web"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await;
        match answer {
            Ok(r) if r.status().as_u16() == 202 => {
                let v: serde_json::Value = match r.text().await {
                    Ok(text) => serde_json::from_str(&text).expect("a 202 answers JSON"),
                    // The answer was cut after its status: not an acknowledgement we read.
                    Err(_) => {
                        refused += 1;
                        continue;
                    }
                };
                let id = v["hook_id"].as_u64().expect("a 202 names its hook_id");
                acks.lock().unwrap().push(Ack {
                    at: t(),
                    id,
                    sha: sha256_hex(body.as_bytes()),
                    paths: FAN,
                    lane: None,
                });
            }
            Ok(r) => {
                assert!(
                    !r.status().is_success(),
                    "ingest answered a success other than 202: {}",
                    r.status()
                );
                refused += 1;
            }
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (tries, refused)
}

/// The Python package's producer (`clients/python`, over redis-py's Sentinel support),
/// committing to `beta/py` every 50 ms for `secs` seconds; one JSON line per commit.
pub(super) const PYTHON: &str = r#"
import hashlib, json, sys, time
from redis.sentinel import Sentinel
from ankusa_producer import Producer
nodes = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in sys.argv[1].split(","))]
until = time.time() + float(sys.argv[2])
sentinel = Sentinel(nodes, socket_timeout=2)
producer = None
n = 0
while time.time() < until:
    body = json.dumps({"via": "python", "n": n}).encode()
    n += 1
    try:
        if producer is None:
            producer = Producer(sentinel.master_for("ankusa", socket_timeout=2), instance="test")
        r = producer.commit("beta", "py", body)
        print(json.dumps({"id": r.first_hook, "sha": hashlib.sha256(body).hexdigest()}), flush=True)
    except Exception as e:
        print(json.dumps({"refused": type(e).__name__}), flush=True)
    time.sleep(0.05)
"#;
