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
    /// Commit every `.json` file of DIR as a hook (e.g. ../shared/data/github-webhooks); default: generated JSON.
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
    /// After the summary, keep the worker running and serve the operator console and the
    /// tenant portal on this address (e.g. 127.0.0.1:9187) until Ctrl-C: the demo prints
    /// the console's URL with an operator token made for this run, and a portal link.
    #[arg(long)]
    pub console: Option<std::net::SocketAddr>,
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
    /// Rows still waiting (due, in backoff, parked or claimed) when the run ended.
    pub pending: u64,
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

/// Run the demo; prints progress to stderr and the summary to stdout. Errors: no
/// `redis-server` on `PATH` without `--redis-url` ([`Error::Unavailable`], exit 3), Redis or
/// the worker failing, and rows lost or bodies not byte-exact at the end.
pub async fn run(args: DemoArgs) -> Result<DemoSummary, Error> {
    // The console's address is taken first: a busy port fails at once, not after the run.
    let console = match args.console {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr)
                .map_err(|e| Error::Other(format!("--console {addr}: {e}")))?,
        ),
        None => None,
    };
    let (url, _redis) = redis_for(&args)?;
    let receiver = Receiver::start_with(ReceiverOptions {
        record_bodies: false,
        threads: 1,
    })
    .map_err(|e| Error::Other(e.to_string()))?;
    let payloads = load_payloads(args.payloads.as_deref())?;
    let hooks_total = args.hooks.unwrap_or(if payloads.is_empty() {
        2000
    } else {
        payloads.len()
    });
    let cfg = demo_config(&url);
    let worker = Worker::start(cfg.clone(), Some("demo")).await?;
    let producer = Producer::new(worker.store().clone(), cfg.commit.max_hook_bytes);
    let tenants: Vec<String> = (0..args.tenants.max(1))
        .map(|i| format!("tenant-{i}"))
        .collect();
    register_sources(&worker, &receiver, &tenants, args.fail_fraction).await?;
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
    let rows = hooks_total as u64 * 2;
    let progress = crate::progress::shown(progress_bar(rows));
    let started = Instant::now();
    let sent = Committer {
        producer: &producer,
        tenants: &tenants,
        payloads: &payloads,
        receiver: &receiver,
        progress: &progress,
    }
    .commit_all(hooks_total)
    .await?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    wait_settled(&worker, &receiver, &progress, rows, deadline).await?;
    let elapsed = started.elapsed();
    progress.finish_and_clear();

    let summary = summarise(&worker, &receiver, &tenants, &sent, elapsed).await?;
    let text = format!(
        "committed {} hooks → {} rows: {} delivered, {} dead-lettered, {} pending, {} lost, {} duplicates, {} byte mismatches\n\
         {:.0} deliveries/s; commit → delivery p50 {:.1} ms, p99 {:.1} ms ({} requests seen by the receiver)",
        summary.committed, summary.rows, summary.delivered, summary.dead_lettered, summary.pending, summary.lost, summary.duplicates, summary.mismatched,
        summary.deliveries_per_sec, summary.p50_ms, summary.p99_ms, receiver.count()
    );
    // The summary first, also with --console (which then serves until Ctrl-C).
    if args.json {
        // One JSON document on stdout, as every command gives with --json; the words on stderr.
        eprintln!("{text}");
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    } else {
        println!("{text}");
    }
    let worker = std::sync::Arc::new(worker);
    if let Some(listener) = console {
        serve_console(&worker, &producer, cfg.clone(), listener, &tenants[0]).await?;
    }
    worker.shutdown().await;
    if summary.lost > 0 || summary.mismatched > 0 {
        return Err(Error::Other(format!(
            "{} rows lost, {} bodies not byte-exact",
            summary.lost, summary.mismatched
        )));
    }
    Ok(summary)
}

/// `--console`: serve the admin listener (console and portal) on `listener` with an operator
/// token made for this run, print how to open both, and wait for Ctrl-C.
async fn serve_console(
    worker: &std::sync::Arc<Worker>,
    producer: &Producer,
    mut cfg: Config,
    listener: std::net::TcpListener,
    tenant: &str,
) -> Result<(), Error> {
    let token = format!("demo-{:032x}", rand::random::<u128>());
    cfg.admin.token = Some(token.clone());
    cfg.admin.portal_link_key = Some(format!("{:032x}", rand::random::<u128>()));
    let bound = listener
        .local_addr()
        .map_err(|e| Error::Other(format!("--console: {e}")))?;
    cfg.admin.listen = bound.to_string();
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Other(format!("--console {bound}: {e}")))?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| Error::Other(format!("--console {bound}: {e}")))?;
    let st = crate::admin::AdminState::new(worker.clone(), producer.clone(), None, &cfg, None);
    let stop = tokio_util::sync::CancellationToken::new();
    let limits = crate::admin::ServeLimits::from(&cfg.admin);
    let server = tokio::spawn(crate::admin::serve(listener, st, limits, stop.clone()));
    let (link, _) = crate::admin::console::link::mint(
        &cfg.admin,
        tenant,
        Some("1h"),
        crate::admin::console::now_ms(),
    )?;
    eprintln!(
        "demo: the console is at http://{bound}/ui/ — operator token for this run: {token}\n\
         demo: {tenant}'s portal (link valid 1 h): http://{bound}/portal/enter?link={link}\n\
         demo: Ctrl-C stops the worker"
    );
    let _ = tokio::signal::ctrl_c().await;
    stop.cancel();
    let _ = server.await;
    Ok(())
}

/// The Redis to use: `--redis-url`, or a private `redis-server` kept alive by the returned
/// handle.
fn redis_for(args: &DemoArgs) -> Result<(String, Option<RedisServer>), Error> {
    if let Some(u) = &args.redis_url {
        return Ok((u.clone(), None));
    }
    // Its Redis dies with the demo, even when the demo's pid alone is killed.
    let options = crate::testkit::RedisOptions {
        die_with_parent: true,
        ..Default::default()
    };
    match RedisServer::start_with(options) {
        Ok(r) => Ok((r.url(), Some(r))),
        Err(e @ TestkitError::RedisNotFound) => Err(Error::Unavailable(e.to_string())),
        Err(e) => Err(Error::Other(e.to_string())),
    }
}

/// The `.json` files of `--payloads`, sorted by name, each with its GitHub event name; empty
/// without the flag (the demo then generates JSON).
fn load_payloads(dir: Option<&std::path::Path>) -> Result<Vec<(Vec<u8>, String)>, Error> {
    let Some(dir) = dir else {
        return Ok(Vec::new());
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| {
            Error::BadRequest(format!(
                "--payloads {}: {e}; name a directory of .json files, or leave --payloads out \
                 and the demo makes its own JSON bodies",
                dir.display()
            ))
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut payloads = Vec::with_capacity(files.len());
    for f in files {
        let body = std::fs::read(&f).map_err(|e| Error::Other(format!("{}: {e}", f.display())))?;
        payloads.push((body, event_name(&f)));
    }
    if payloads.is_empty() {
        return Err(Error::BadRequest(format!(
            "--payloads {}: no .json files",
            dir.display()
        )));
    }
    Ok(payloads)
}

/// The demo worker's config: a fresh instance name, quick retries, and the loopback receiver
/// allowed past the SSRF guard (which refuses it by default).
fn demo_config(url: &str) -> Config {
    let mut cfg = Config {
        instance: format!("demo-{:06x}", rand::random::<u32>() & 0xff_ffff),
        ..Config::default()
    };
    cfg.redis.url = url.to_string();
    cfg.retry.initial_backoff_ms = 50;
    cfg.retry.max_backoff_ms = 1_000;
    cfg.retry.min_backoff_ms = 50;
    cfg.dispatch.attempt_timeout_ms = 10_000;
    crate::testkit::allow_loopback(&mut cfg);
    cfg
}

/// Each tenant's `github` source: one reliable sink and one failing `fail_fraction` of
/// attempts with 503.
async fn register_sources(
    worker: &Worker,
    receiver: &Receiver,
    tenants: &[String],
    fail_fraction: f64,
) -> Result<(), Error> {
    for t in tenants {
        let ok = format!("{t}/orders");
        let flaky = format!("{t}/flaky");
        receiver.set(
            &flaky,
            Behavior::FailFraction {
                status: 503,
                fraction: fail_fraction,
                seed: 7,
            },
        );
        let sink = |path: &str| SinkEntry::http(&receiver.url(path));
        let spec = SourceSpec {
            sinks: vec![sink(&ok), sink(&flaky)],
        };
        worker.store().put_source(t, "github", &spec).await?;
    }
    Ok(())
}

fn progress_bar(rows: u64) -> indicatif::ProgressBar {
    let progress = indicatif::ProgressBar::new(rows);
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {elapsed_precise} [{bar:40}] {pos}/{len} rows delivered ({rate}) {msg}",
        )
        .map(|style| {
            // indicatif's own {per_sec} prints four decimals (`3,326.6636/s`).
            style.with_key(
                "rate",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0}/s", state.per_sec());
                },
            )
        })
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    progress
}

/// What was committed: when each hook was, and the SHA-256 of its body.
struct Sent {
    at: HashMap<u64, Instant>,
    sha: HashMap<u64, String>,
}

/// Commits the demo's hooks, ten per call, round robin over the tenants.
struct Committer<'a> {
    producer: &'a Producer,
    tenants: &'a [String],
    payloads: &'a [(Vec<u8>, String)],
    receiver: &'a Receiver,
    progress: &'a indicatif::ProgressBar,
}

impl Committer<'_> {
    async fn commit_all(&self, hooks_total: usize) -> Result<Sent, Error> {
        let mut sent = Sent {
            at: HashMap::with_capacity(hooks_total),
            sha: HashMap::with_capacity(hooks_total),
        };
        let mut i = 0;
        while i < hooks_total {
            let t = &self.tenants[(i / 10) % self.tenants.len()];
            let n = 10.min(hooks_total - i);
            let batch: Vec<Hook> = (i..i + n).map(|k| self.hook(k)).collect();
            let r = self.producer.commit_many(t, "github", &batch).await?;
            let now = Instant::now();
            for (j, h) in batch.iter().enumerate() {
                let id = r.first_hook + j as u64;
                sent.at.insert(id, now);
                sent.sha.insert(id, hex::encode(Sha256::digest(&h.body)));
            }
            i += n;
            self.progress
                .set_position(receiver_delivered(self.receiver));
        }
        Ok(sent)
    }

    /// Hook `k`: the next real payload with its `x-github-event`, or generated JSON.
    fn hook(&self, k: usize) -> Hook {
        match self.payloads.get(k % self.payloads.len().max(1)) {
            // The GitHub event name is the hook's event type too, so the console and
            // `hooks show` name it and an entry's event filter could select on it.
            Some((body, event)) => Hook::new(body.clone())
                .header("content-type", "application/json")
                .header("x-github-event", event.clone())
                .event_type(event.clone()),
            None => Hook::new(generated_body(k)).header("content-type", "application/json"),
        }
    }
}

/// Wait until every row is settled (delivered or dead-lettered) or `deadline`, showing
/// progress.
async fn wait_settled(
    worker: &Worker,
    receiver: &Receiver,
    progress: &indicatif::ProgressBar,
    rows: u64,
    deadline: Instant,
) -> Result<(), Error> {
    loop {
        let totals = worker.store().totals().await?;
        progress.set_position(receiver_delivered(receiver));
        progress.set_message(format!("{} dead-lettered", totals.dead_lettered));
        if totals.delivered + totals.dead_lettered + totals.dropped >= rows
            || Instant::now() > deadline
        {
            return Ok(());
        }
        let _ = receiver
            .wait_until_async(Duration::from_millis(200), |_| false)
            .await;
    }
}

/// The summary, from what the receiver got and what Redis still holds.
async fn summarise(
    worker: &Worker,
    receiver: &Receiver,
    tenants: &[String],
    sent: &Sent,
    elapsed: Duration,
) -> Result<DemoSummary, Error> {
    let hook_of = |delivery: &str| -> Option<u64> { delivery.split('.').next()?.parse().ok() };
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
        let hook = hook_of(&delivery).unwrap_or(0);
        if sent.sha.get(&hook) != Some(&r.body_sha256) && seen_bad.insert(delivery.clone()) {
            mismatched += 1;
        }
        first_ok.entry(delivery).or_insert(r.at);
    }
    let mut lat: Vec<f64> = first_ok
        .iter()
        .filter_map(|(d, at)| {
            let committed = sent.at.get(&hook_of(d)?)?;
            Some(at.saturating_duration_since(*committed).as_secs_f64() * 1000.0)
        })
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    let mut dead = 0;
    let mut pending = worker.store().claimed_count().await?;
    for t in tenants {
        dead += crate::dlq::count(worker.store(), t).await?;
        pending += worker.store().pending_count(t).await?;
    }
    let committed = sent.sha.len() as u64;
    let rows = committed * 2;
    let delivered = first_ok.len() as u64;
    let summary = DemoSummary {
        committed,
        rows,
        delivered,
        dead_lettered: dead,
        pending,
        lost: rows.saturating_sub(delivered + dead + pending),
        duplicates: ok_receipts - delivered,
        mismatched,
        deliveries_per_sec: (delivered as f64 / elapsed.as_secs_f64() * 10.0).round() / 10.0,
        p50_ms: (percentile(&lat, 0.50) * 100.0).round() / 100.0,
        p99_ms: (percentile(&lat, 0.99) * 100.0).round() / 100.0,
    };
    Ok(summary)
}

fn receiver_delivered(r: &Receiver) -> u64 {
    r.header_counts("ankusa-delivery-id").len() as u64
}
