//! The claim check against real stores: S3 on `moto_server` (through a recording
//! proxy) and the local filesystem. An independent consumer (Python, boto3) resolves the
//! Amazon SQS Extended Client pointers.

use crate::common;
use crate::common_sinks;

use ankusa::model::SinkEntry;
use common::*;
use common_sinks::*;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// An `sqs` sink entry with a short linger, so a lone row is sent at once.
fn sqs_sink(endpoint: &str, queue: &str) -> SinkEntry {
    sqs_entry(endpoint, queue, serde_json::json!({ "linger_ms": 5 }))
}

/// A text body of exactly `n` bytes made of real webhook payloads (SQS carries text).
fn big_body(n: usize) -> Vec<u8> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/github-webhooks");
    let mut out = Vec::with_capacity(n);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    for f in files.iter().cycle().take(10_000) {
        if out.len() >= n {
            break;
        }
        out.extend(std::fs::read(f).unwrap_or_default());
    }
    if out.is_empty() {
        out = b"{\"filler\":true}\n".repeat(n / 16 + 1);
    }
    out.truncate(n);
    out
}

fn s3_puts(p: &Proxy) -> Vec<u16> {
    p.requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path.trim_start_matches('/').contains('/'))
        .map(|r| r.status)
        .collect()
}

/// Whether `bucket/key` exists, asked with boto3 (a signed HEAD), outside ankusa.
fn s3_exists(endpoint: &str, bucket: &str, key: &str) -> bool {
    let code = "import sys, boto3\n\
        s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1',\n\
            aws_access_key_id='testing', aws_secret_access_key='testing')\n\
        try:\n    s3.head_object(Bucket=sys.argv[2], Key=sys.argv[3]); print('yes')\n\
        except Exception:\n    print('no')\n";
    let out = std::process::Command::new("python3")
        .args(["-c", code, endpoint, bucket, key])
        .output()
        .expect("python3 runs");
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

fn consume(endpoint: &str, queues: &[&str]) -> Vec<serde_json::Value> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/extended_consumer.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(endpoint)
        .args(queues)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "consumer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2_mib_body_is_uploaded_once_for_three_sinks_and_their_retries_and_read_back_through_the_pointer(
) {
    let moto = Moto::start().await;
    let s3 = Proxy::start(&moto.url).await;
    let sqs_proxy = Proxy::start(&moto.url).await;
    create_bucket(&moto.url, "claims").await;
    let s3_url = s3.url.clone();
    let env = Env::with(Default::default(), |c| {
        grant_custom_endpoints(c, &["acme"]);
        s3_claim_check(c, "s3://claims", s3_url);
    })
    .await;
    let sqs = sqs_client(&moto.url);
    let queues = [
        create_queue(&sqs, "q0").await,
        create_queue(&sqs, "q1").await,
        create_queue(&sqs, "q2").await,
    ];
    let sinks = queues.iter().map(|q| sqs_sink(&sqs_proxy.url, q)).collect();
    env.put_source("acme", "s", sinks).await;
    // Sink 0's entry fails until the consumer has read the other two queues (at least twice).
    let open = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let (o2, f2) = (open.clone(), failures.clone());
    sqs_proxy.fail_entries(move |e| {
        let fail = e.attr("ankusa-delivery-id").ends_with(".0")
            && (!o2.load(Ordering::SeqCst) || f2.load(Ordering::SeqCst) < 2);
        if fail {
            f2.fetch_add(1, Ordering::SeqCst);
        }
        fail
    });
    let body = big_body(2 << 20);
    let sha = hex::encode(Sha256::digest(&body));
    let hook = env.commit("acme", "s", body.clone()).await;
    let worker = env.worker().await;

    // Sinks 1 and 2 deliver; sink 0 keeps failing meanwhile.
    let q1 = queues[1].clone();
    let q2 = queues[2].clone();
    let delivered = async {
        for _ in 0..1500 {
            if queue_depth(&sqs, &q1).await == 1
                && queue_depth(&sqs, &q2).await == 1
                && failures.load(Ordering::SeqCst) >= 2
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    };
    assert!(delivered.await);
    let read = consume(&moto.url, &[&q1, &q2]);
    assert_eq!(read.len(), 2, "{read:?}");
    for m in &read {
        assert_eq!(m["size"], 2 << 20);
        assert_eq!(m["len"], 2 << 20);
        assert_eq!(
            m["sha256"], sha,
            "the consumer read the exact body through the pointer"
        );
    }
    assert_eq!(
        read[0]["key"], read[1]["key"],
        "both sinks point at one blob"
    );
    open.store(true, Ordering::SeqCst);
    assert_eq!(until_ended(&worker, &env.store, 3).await, 3);
    assert!(
        failures.load(Ordering::SeqCst) >= 2,
        "sink 0 was retried at least twice"
    );

    assert_eq!(
        s3_puts(&s3),
        vec![200],
        "uploaded exactly once for 3 sinks and every retry"
    );
    let got0 = receive_n(&sqs, &queues[0], 1).await;
    assert_eq!(got0[0].attrs["ExtendedPayloadSize"], (2 << 20).to_string());
    assert_eq!(got0[0].attrs["ankusa-delivery-id"], format!("{hook}.0"));
    // The hook is finished, but its blob is kept for the retention: the pointer of a
    // message still on a queue resolves.
    let key = read[0]["key"].as_str().unwrap().to_string();
    assert_eq!(
        env.redis_cmd(&["EXISTS", &env.key(&format!("hook:{hook}"))]),
        "0"
    );
    assert_eq!(env.redis_cmd(&["ZCARD", &env.key("blob_retain")]), "1");
    assert!(
        s3_exists(&moto.url, "claims", &key),
        "the blob of a finished hook is kept"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_pack_fails_the_first_attempt_checks_the_body_in_itself() {
    let moto = Moto::start().await;
    let s3 = Proxy::start(&moto.url).await;
    let sqs_proxy = Proxy::start(&moto.url).await;
    create_bucket(&moto.url, "claims").await;
    let s3_url = s3.url.clone();
    let env = Env::with(Default::default(), |c| {
        grant_custom_endpoints(c, &["acme"]);
        s3_claim_check(c, "s3://claims/pfx", s3_url);
    })
    .await;
    let sqs = sqs_client(&moto.url);
    let qa = create_queue(&sqs, "qa").await;
    let qb = create_queue(&sqs, "qb").await;
    let sinks = vec![sqs_sink(&sqs_proxy.url, &qa), sqs_sink(&sqs_proxy.url, &qb)];
    env.put_source("acme", "s", sinks).await;
    // The blob store is down for the pack's upload. Sink 1 waits (failing) until the
    // consumer has read sink 0's message, so the blob is still there to read.
    s3.fail_next_puts(1);
    let open = Arc::new(AtomicBool::new(false));
    let o2 = open.clone();
    sqs_proxy.fail_entries(move |e| {
        e.attr("ankusa-delivery-id").ends_with(".1") && !o2.load(Ordering::SeqCst)
    });
    let body = big_body(300_000);
    let sha = hex::encode(Sha256::digest(&body));
    let hook = env.commit("acme", "s", body).await;
    let worker = env.worker().await;
    let arrived = async {
        for _ in 0..1500 {
            if queue_depth(&sqs, &qa).await == 1 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    };
    assert!(arrived.await);
    let read = consume(&moto.url, &[&qa]);
    assert_eq!(read.len(), 1);
    assert_eq!(
        read[0]["sha256"], sha,
        "the body checked in by the attempt reads back"
    );
    let prefix = format!("pfx/ankusa/{}/acme/", env.config.instance);
    assert!(
        read[0]["key"].as_str().unwrap().starts_with(&prefix),
        "{read:?}"
    );
    open.store(true, Ordering::SeqCst);
    assert_eq!(until_ended(&worker, &env.store, 2).await, 2);

    assert_eq!(
        s3_puts(&s3),
        vec![503, 200],
        "the pack failed; one attempt checked in, for both sinks and every retry"
    );
    let sent0 = sqs_proxy
        .batches()
        .iter()
        .flat_map(|b| b.entries.clone())
        .filter(|e| e.attr("ankusa-delivery-id") == format!("{hook}.0"))
        .count();
    assert_eq!(
        sent0, 1,
        "sink 0's first attempt ran and delivered despite the failed pack"
    );
    let got = receive_n(&sqs, &qb, 1).await;
    assert_eq!(got[0].attrs["ExtendedPayloadSize"], "300000");
    assert_eq!(env.store.totals().await.unwrap().delivered, 2);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_store_holds_the_body_until_the_hook_is_finished() {
    let dir = tempfile::tempdir().unwrap();
    let moto = Moto::start().await;
    let d = dir.path().display().to_string();
    let env = Env::with(Default::default(), |c| {
        grant_custom_endpoints(c, &["acme"]);
        c.claim_check.url = format!("file://{d}");
        c.claim_check.retention_ms = 1;
    })
    .await;
    let sqs = sqs_client(&moto.url);
    let q = create_queue(&sqs, "q").await;
    env.http_source("acme", "small", &["/small"]).await;
    env.put_source("acme", "s", vec![sqs_sink(&moto.url, &q)])
        .await;
    let body = big_body(400_000);
    env.commit("acme", "s", body.clone()).await;
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await, 1);
    let got = receive_n(&sqs, &q, 1).await;
    let ptr: serde_json::Value = serde_json::from_str(&got[0].body).unwrap();
    let url = ptr["ankusaClaimCheck"]["url"].as_str().unwrap().to_string();
    assert_eq!(ptr["ankusaClaimCheck"]["size"], 400_000);
    assert_eq!(got[0].attrs["ankusa-claim-check"], url);
    let path = url.strip_prefix("file://").unwrap().to_string();
    assert!(path.starts_with(&d), "{path} in {d}");
    // Finished, the blob is kept for the retention (1 ms here); a later settle hands it over
    // for deletion, and the file goes.
    assert!(std::path::Path::new(&path).exists());
    env.commit("acme", "small", "x").await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await, 2);
    let gone = async {
        for _ in 0..500 {
            if !std::path::Path::new(&path).exists() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    };
    assert!(gone.await, "blob {path} deleted after the hook finished");
    worker.shutdown().await;
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_keeps_its_blob_until_it_is_purged() {
    let dir = tempfile::tempdir().unwrap();
    let moto = Moto::start().await;
    let d = dir.path().display().to_string();
    let env = Env::with(Default::default(), |c| {
        grant_custom_endpoints(c, &["acme"]);
        c.claim_check.url = format!("file://{d}");
        c.claim_check.retention_ms = 1;
    })
    .await;
    let sqs = sqs_client(&moto.url);
    let q = create_queue(&sqs, "q").await;
    let missing = format!("{}/123456789012/missing", moto.url);
    env.put_source("acme", "gone", vec![sqs_sink(&moto.url, &missing)])
        .await;
    env.put_source("acme", "ok", vec![sqs_sink(&moto.url, &q)])
        .await;
    env.commit("acme", "gone", big_body(400_000)).await;
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await, 1);
    assert_eq!(
        ankusa::dlq::list(&env.store, "acme", 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        files_under(dir.path()).len(),
        1,
        "the dead letter keeps its body's blob"
    );

    let report = ankusa::dlq::purge(
        &env.store,
        &ankusa::dlq::PurgeScope::Matching(Default::default()),
    )
    .await
    .unwrap();
    assert_eq!(report.purged, 1);
    // The next settle files the purged hook's reference for the retention (1 ms here); the
    // one after hands it to the leader, which deletes it.
    let before = env.settled().await;
    env.commit("acme", "ok", "small").await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await - before, 1);
    assert_eq!(files_under(dir.path()).len(), 1, "kept for the retention");
    env.commit("acme", "ok", "small").await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await - before, 2);
    let gone = async {
        for _ in 0..500 {
            if files_under(dir.path()).is_empty() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    };
    assert!(gone.await, "blob deleted after the purge");
    worker.shutdown().await;
}

/// A source with an `sqs` and an `http` sink, 300 KiB bodies. After
/// every row is delivered (each hook finished and gone from Redis, and a later settle has
/// run), every Extended Client pointer still on the queue resolves to its exact body: the
/// blobs are kept for `claim_check.retention_ms`, never deleted under a queued pointer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pointer_still_on_the_queue_resolves_after_every_row_is_delivered() {
    let moto = Moto::start().await;
    create_bucket(&moto.url, "claims").await;
    let moto_url = moto.url.clone();
    let env = Env::with(Default::default(), |c| {
        grant_custom_endpoints(c, &["acme"]);
        s3_claim_check(c, "s3://claims", moto_url);
    })
    .await;
    let sqs = sqs_client(&moto.url);
    let q = create_queue(&sqs, "mixed").await;
    env.put_source(
        "acme",
        "s",
        vec![sqs_sink(&moto.url, &q), env.http_sink("/hook")],
    )
    .await;
    env.http_source("acme", "later", &["/later"]).await;
    let mut shas = std::collections::BTreeMap::new();
    let mut hooks = Vec::new();
    for i in 0..5u8 {
        let mut body = big_body(300 * 1024);
        body[0] = b'0' + i; // five distinct bodies
        let hook = env.commit("acme", "s", body.clone()).await;
        shas.insert(format!("{hook}.0"), hex::encode(Sha256::digest(&body)));
        hooks.push(hook);
    }
    let worker = env.worker().await;
    assert_eq!(until_ended(&worker, &env.store, 10).await, 10);
    for h in &hooks {
        assert_eq!(
            env.redis_cmd(&["EXISTS", &env.key(&format!("hook:{h}"))]),
            "0"
        );
    }
    assert_eq!(
        env.receiver.count_for("/hook"),
        5,
        "the http sink got every hook"
    );
    // A later settle runs: any delete handed over by the first would have gone out by now.
    env.commit("acme", "later", "x").await;
    assert_eq!(until_ended(&worker, &env.store, 11).await, 11);
    assert_eq!(env.redis_cmd(&["ZCARD", &env.key("blob_retain")]), "5");
    let now_ms = env.store.now_ms().await.unwrap();
    let first = env.redis_cmd(&["ZRANGE", &env.key("blob_retain"), "0", "0", "WITHSCORES"]);
    let at: i64 = first.lines().nth(1).and_then(|s| s.parse().ok()).unwrap();
    assert!(
        at >= now_ms + 6 * 24 * 3_600_000,
        "kept for the default retention (7 days): {at} vs now {now_ms}"
    );

    let read = consume(&moto.url, &[&q]);
    assert_eq!(read.len(), 5, "{read:?}");
    for m in &read {
        let id = m["delivery"].as_str().unwrap();
        assert_eq!(m["size"], 300 * 1024, "{m}");
        assert_eq!(m["len"], 300 * 1024, "{m}");
        assert_eq!(
            m["sha256"].as_str(),
            shas.get(id).map(String::as_str),
            "{id}"
        );
    }
    worker.shutdown().await;
}
