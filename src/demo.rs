//! `ankusa demo`: the whole pipeline on one machine, on real input.
//!
//! Starts its own `redis-server` (or uses `--redis-url`), a local webhook receiver,
//! registers sources for several tenants with two HTTP sinks each (the second fails a
//! fraction of requests with 503), commits hooks (generated JSON, or every file of
//! `--payloads DIR`), runs a worker, shows progress and ends with a summary computed
//! from what the receiver actually got. Exit 0 only when nothing is lost and every
//! delivered body is byte-exact.

use crate::config::Config;
use crate::error::Error;
use crate::model::{SinkEntry, SourceSpec};
use crate::producer::{Hook, Producer};
use crate::testkit::{Behavior, Receiver, ReceiverOptions, RedisServer, TestkitError};
use crate::worker::Worker;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of `ankusa demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Use this Redis instead of starting one (the global `--redis-url`).
    #[arg(skip)]
    pub redis_url: Option<String>,
    /// Commit every file of DIR as a hook (e.g. ../shared/data/github-webhooks); default: generated JSON.
    #[arg(long)]
    pub payloads: Option<PathBuf>,
    /// Hooks to commit (payload files are cycled to reach it; default: one pass over the files, or 2000).
    #[arg(long)]
    pub hooks: Option<usize>,
    /// Tenants, each with one source of two HTTP sinks.
    #[arg(long, default_value_t = 4)]
    pub tenants: usize,
    /// Fraction of requests the flaky sink answers 503.
    #[arg(long, default_value_t = 0.2)]
    pub fail_fraction: f64,
    /// Give up waiting after this many seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
    /// Print the summary as one JSON object on the last line (the global `--json`).
    #[arg(skip)]
    pub json: bool,
}

/// The demo's summary (the `--json` line).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DemoSummary {
    /// Hooks committed.
    pub committed: u64,
    /// Delivery rows made (hooks × sinks).
    pub rows: u64,
    /// Rows the receiver answered 2xx at least once.
    pub delivered: u64,
    /// Rows in the dead-letter streams.
    pub dead_lettered: u64,
    /// Rows neither delivered, dead-lettered nor pending: must be 0.
    pub lost: u64,
    /// 2xx receipts beyond the first per row (at-least-once duplicates).
    pub duplicates: u64,
    /// Delivered bodies whose SHA-256 differs from what was committed: must be 0.
    pub mismatched: u64,
    /// Delivered rows per second, first commit to last delivery.
    pub deliveries_per_sec: f64,
    /// Commit → first successful delivery, median (ms).
    pub p50_ms: f64,
    /// Commit → first successful delivery, 99th percentile (ms).
    pub p99_ms: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A generated, realistic webhook body.
pub fn generated_body(i: usize) -> Vec<u8> {
    let kind = [
        "order.created",
        "order.paid",
        "order.shipped",
        "invoice.finalized",
    ][i % 4];
    serde_json::json!({
        "id": format!("evt_{i:08}"),
        "type": kind,
        "created": 1_764_000_000 + i,
        "data": {"object": {"id": format!("ord_{}", i * 7919 % 100_000), "amount": (i * 137) % 100_000,
                 "currency": "eur", "customer": format!("cus_{}", i % 977),
                 "items": (0..(i % 5 + 1)).map(|k| serde_json::json!({"sku": format!("sku-{k}"), "qty": k + 1})).collect::<Vec<_>>()}}
    })
    .to_string()
    .into_bytes()
}

/// The event name GitHub sends in `X-GitHub-Event`, from a payload file name
/// (`push.payload.json` → `push`).
fn event_name(path: &std::path::Path) -> String {
    path.file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| f.split('.').next())
        .unwrap_or("event")
        .to_string()
}

/// Run the demo; prints progress to stderr and the summary to stdout.
pub async fn run(args: DemoArgs) -> Result<DemoSummary, Error> {
    let mut _redis = None;
    let url = match &args.redis_url {
        Some(u) => u.clone(),
        None => match RedisServer::start() {
            Ok(r) => {
                let u = r.url();
                _redis = Some(r);
                u
            }
            Err(e @ TestkitError::RedisNotFound) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
            Err(e) => return Err(Error::Other(e.to_string())),
        },
    };
    let receiver = Receiver::start_with(ReceiverOptions {
        record_bodies: false,
        threads: 1,
    })
    .map_err(|e| Error::Other(e.to_string()))?;

    // Payloads: real files, or generated JSON.
    let mut payloads: Vec<(Vec<u8>, String)> = Vec::new();
    if let Some(dir) = &args.payloads {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::Other(format!("--payloads {}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for f in files {
            let body =
                std::fs::read(&f).map_err(|e| Error::Other(format!("{}: {e}", f.display())))?;
            payloads.push((body, event_name(&f)));
        }
        if payloads.is_empty() {
            return Err(Error::Other(format!(
                "--payloads {}: no .json files",
                dir.display()
            )));
        }
    }
    let hooks_total = args.hooks.unwrap_or(if payloads.is_empty() {
        2000
    } else {
        payloads.len()
    });

    let mut cfg = Config {
        instance: format!("demo-{:06x}", rand::random::<u32>() & 0xff_ffff),
        ..Config::default()
    };
    cfg.redis.url = url.clone();
    cfg.retry.initial_backoff_ms = 50;
    cfg.retry.max_backoff_ms = 1_000;
    cfg.retry.min_backoff_ms = 50;
    cfg.dispatch.attempt_timeout_ms = 10_000;
    // The demo's receiver listens on loopback, which the SSRF guard refuses by default.
    crate::testkit::allow_loopback(&mut cfg);
    let worker = Worker::start(cfg.clone(), Some("demo")).await?;
    let producer = Producer::new(worker.store().clone(), cfg.commit.max_hook_bytes);

    let tenants: Vec<String> = (0..args.tenants.max(1))
        .map(|i| format!("tenant-{i}"))
        .collect();
    for t in &tenants {
        let ok = format!("{t}/orders");
        let flaky = format!("{t}/flaky");
        receiver.set(
            &flaky,
            Behavior::FailFraction {
                status: 503,
                fraction: args.fail_fraction,
                seed: 7,
            },
        );
        let sink = |path: &str| SinkEntry {
            module: "http".into(),
            opts: serde_json::json!({"url": receiver.url(path)})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            ordered: false,
            key: None,
            ..Default::default()
        };
        worker
            .store()
            .put_source(
                t,
                "github",
                &SourceSpec {
                    sinks: vec![sink(&ok), sink(&flaky)],
                },
            )
            .await?;
    }

    eprintln!(
        "demo: redis {url}, receiver {}, {} tenants × 2 sinks, {hooks_total} hooks ({})",
        receiver.url(""),
        tenants.len(),
        if payloads.is_empty() {
            "generated JSON".to_string()
        } else {
            format!("{} real payloads", payloads.len())
        }
    );
    let progress = indicatif::ProgressBar::new(hooks_total as u64 * 2);
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {elapsed_precise} [{bar:40}] {pos}/{len} rows delivered ({per_sec}) {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );

    // Commit, recording when each hook was committed and what its body hashes to.
    let started = Instant::now();
    let mut committed_at: HashMap<u64, Instant> = HashMap::with_capacity(hooks_total);
    let mut sha: HashMap<u64, String> = HashMap::with_capacity(hooks_total);
    let mut i = 0;
    while i < hooks_total {
        let t = &tenants[(i / 10) % tenants.len()];
        let n = 10.min(hooks_total - i);
        let batch: Vec<Hook> = (i..i + n)
            .map(|k| match payloads.get(k % payloads.len().max(1)) {
                Some((body, event)) if !payloads.is_empty() => Hook::new(body.clone())
                    .header("content-type", "application/json")
                    .header("x-github-event", event.clone()),
                _ => Hook::new(generated_body(k)).header("content-type", "application/json"),
            })
            .collect();
        let r = producer.commit_many(t, "github", &batch).await?;
        let now = Instant::now();
        for (j, h) in batch.iter().enumerate() {
            let id = r.first_hook + j as u64;
            committed_at.insert(id, now);
            sha.insert(id, hex::encode(Sha256::digest(&h.body)));
        }
        i += n;
        progress.set_position(receiver_delivered(&receiver));
    }
    let rows = hooks_total as u64 * 2;

    // Wait until every row is settled (delivered or dead-lettered), showing progress.
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    loop {
        let totals = worker.store().totals().await?;
        progress.set_position(receiver_delivered(&receiver));
        progress.set_message(format!("{} dead-lettered", totals.dead_lettered));
        if totals.delivered + totals.dead_lettered + totals.dropped >= rows
            || Instant::now() > deadline
        {
            break;
        }
        let _ = receiver
            .wait_until_async(Duration::from_millis(200), |_| false)
            .await;
    }
    let elapsed = started.elapsed();
    progress.finish_and_clear();

    // Summarise from what the receiver got.
    let mut first_ok: HashMap<String, Instant> = HashMap::new();
    let mut ok_receipts = 0u64;
    let mut mismatched = 0u64;
    let mut seen_bad: HashSet<String> = HashSet::new();
    for r in receiver.requests() {
        if !(200..300).contains(&r.status) {
            continue;
        }
        let Some(delivery) = r.header("ankusa-delivery-id").map(str::to_string) else {
            continue;
        };
        ok_receipts += 1;
        let hook: u64 = delivery
            .split('.')
            .next()
            .and_then(|h| h.parse().ok())
            .unwrap_or(0);
        if sha.get(&hook) != Some(&r.body_sha256) && seen_bad.insert(delivery.clone()) {
            mismatched += 1;
        }
        first_ok.entry(delivery).or_insert(r.at);
    }
    let mut lat: Vec<f64> = first_ok
        .iter()
        .filter_map(|(d, at)| {
            let hook: u64 = d.split('.').next()?.parse().ok()?;
            Some(
                at.saturating_duration_since(*committed_at.get(&hook)?)
                    .as_secs_f64()
                    * 1000.0,
            )
        })
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    let mut dead = 0;
    for t in &tenants {
        dead += crate::dlq::count(worker.store(), t).await?;
    }
    let mut pending = worker.store().claimed_count().await?;
    for t in &tenants {
        pending += worker.store().pending_count(t).await?;
    }
    let delivered = first_ok.len() as u64;
    let summary = DemoSummary {
        committed: hooks_total as u64,
        rows,
        delivered,
        dead_lettered: dead,
        lost: rows.saturating_sub(delivered + dead + pending),
        duplicates: ok_receipts - delivered,
        mismatched,
        deliveries_per_sec: (delivered as f64 / elapsed.as_secs_f64() * 10.0).round() / 10.0,
        p50_ms: (percentile(&lat, 0.50) * 100.0).round() / 100.0,
        p99_ms: (percentile(&lat, 0.99) * 100.0).round() / 100.0,
    };
    worker.shutdown().await;
    let text = format!(
        "committed {} hooks → {} rows: {} delivered, {} dead-lettered, {} pending, {} lost, {} duplicates, {} byte mismatches\n\
         {:.0} deliveries/s; commit → delivery p50 {:.1} ms, p99 {:.1} ms ({} requests seen by the receiver)",
        summary.committed, summary.rows, summary.delivered, summary.dead_lettered, pending, summary.lost, summary.duplicates, summary.mismatched,
        summary.deliveries_per_sec, summary.p50_ms, summary.p99_ms, receiver.count()
    );
    if args.json {
        // One JSON document on stdout, as every command gives with --json; the words on stderr.
        eprintln!("{text}");
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    } else {
        println!("{text}");
    }
    if summary.lost > 0 || summary.mismatched > 0 {
        return Err(Error::Other(format!(
            "{} rows lost, {} bodies not byte-exact",
            summary.lost, summary.mismatched
        )));
    }
    Ok(summary)
}

fn receiver_delivered(r: &Receiver) -> u64 {
    r.header_counts("ankusa-delivery-id").len() as u64
}
