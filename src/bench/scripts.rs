//! `ankusa bench --scripts`: the bounded-scripts scenario. One tenant with a
//! large backlog plus many tenants with one row each, drained by one `ankusa worker` child
//! into a counting sink, with Redis' `SLOWLOG` catching every script call slower than the
//! threshold; the report gives, per script, how many calls passed it and the slowest.
//!
//! Phases: commit (the backlog, then one row per small tenant, before the worker starts:
//! the first claims see every tenant due); drain, with a second row committed for every
//! small tenant once the first wave is delivered, while the big backlog still drains (a
//! claim page's shape changes from one tenant to thousands under a running worker).

use super::{spawn_worker_config, BenchArgs};
use crate::error::Error;
use crate::model::{SinkEntry, SourceSpec};
use crate::producer::{Hook, Producer};
use crate::store::{Scripts, Store};
use crate::testkit::RedisServer;
use std::collections::{BTreeMap, HashSet};
use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the counting sink saw.
#[derive(Default)]
struct Seen {
    big: AtomicU64,
    small: AtomicU64,
    /// Big-tenant deliveries when the latest small-tenant delivery arrived.
    big_at_last_small: AtomicU64,
    /// Delivery ids seen, for duplicates.
    ids: Mutex<HashSet<u64>>,
    dups: AtomicU64,
}

/// A sink that answers 200 at once and counts: `/big` and `/small`. Runs on its own thread
/// and runtime (one worker thread), like a separate server process.
struct CountingSink {
    seen: Arc<Seen>,
    port: u16,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl CountingSink {
    fn start() -> Result<CountingSink, Error> {
        let seen = Arc::new(Seen::default());
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::Other(format!("bind the sink: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::Other(e.to_string()))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::Other(e.to_string()))?
            .port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let s = seen.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("sink runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
                    let s = s.clone();
                    async move {
                        let id = req
                            .headers()
                            .get("ankusa-delivery-id")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.split('.').next())
                            .and_then(|v| v.parse::<u64>().ok());
                        if let Some(id) = id {
                            if !s.ids.lock().expect("ids").insert(id) {
                                s.dups.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        if req.uri().path() == "/big" {
                            s.big.fetch_add(1, Ordering::Relaxed);
                        } else {
                            s.small.fetch_add(1, Ordering::Relaxed);
                            s.big_at_last_small
                                .store(s.big.load(Ordering::Relaxed), Ordering::Relaxed);
                        }
                        axum::http::StatusCode::OK
                    }
                });
                tokio::select! {
                    _ = axum::serve(listener, app).into_future() => {}
                    _ = stopped => {}
                }
            });
        });
        Ok(CountingSink {
            seen,
            port,
            _stop: stop,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// Slow calls of one script (or command) in one phase.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(super) struct SlowCalls {
    /// Calls at or over the threshold.
    pub count: u64,
    /// The slowest (µs, Redis' own measure of the command).
    pub max_us: u64,
    /// The median of those calls (µs).
    pub median_us: u64,
}

/// The figures of `ankusa bench --scripts`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(super) struct ScriptsReport {
    /// Rows of the big tenant.
    pub backlog: usize,
    /// Tenants with one row (per wave).
    pub small_tenants: usize,
    /// `slowlog-log-slower-than` (µs).
    pub slowlog_us: u64,
    /// Seconds to commit everything.
    pub commit_secs: f64,
    /// Seconds from the worker's start to the last delivery.
    pub drain_secs: f64,
    /// Slow calls while committing, by script name (`commit`) or command.
    pub commit_slow: BTreeMap<String, SlowCalls>,
    /// Slow calls during the drain, by script name or command.
    pub drain_slow: BTreeMap<String, SlowCalls>,
    /// Deliveries seen by the sink, and how many repeated a delivery id.
    pub delivered: u64,
    /// Repeated delivery ids.
    pub duplicates: u64,
    /// Big-tenant deliveries when the last small row of wave 1 / wave 2 arrived.
    pub big_delivered_at_last_small: [u64; 2],
    /// Big-tenant rows committed but not yet delivered when wave 2 was committed.
    pub big_left_at_wave2: u64,
    /// From the worker's `/metrics` at the end of the drain, per script it called: calls,
    /// calls whose round trip was within 5 ms, calls its time budget cut short.
    pub worker_calls: BTreeMap<String, [u64; 3]>,
    /// The worker's claim and settle pages at the end (`ankusa_claim_page_rows`,
    /// `ankusa_settle_page_outcomes`; 0 when it does not export them).
    pub worker_pages: [u64; 2],
}

/// The figures of [`ScriptsReport::worker_calls`] and `worker_pages` from `/metrics`.
async fn worker_metrics(port: u16, report: &mut ScriptsReport) {
    let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else {
        return;
    };
    let Ok(text) = resp.text().await else { return };
    let value = |l: &str| -> u64 {
        l.rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0) as u64
    };
    for script in Scripts::default().all().map(|s| s.name) {
        let label = format!("script=\"{script}\"");
        let mut f = [0u64; 3];
        for l in text.lines().filter(|l| l.contains(&label)) {
            if l.starts_with("ankusa_script_duration_seconds_count") {
                f[0] = value(l);
            } else if l.starts_with("ankusa_script_duration_seconds_bucket")
                && l.contains("le=\"0.005\"")
            {
                f[1] = value(l);
            } else if l.starts_with("ankusa_script_budget_stops_total") {
                f[2] = value(l);
            }
        }
        if f[0] > 0 {
            report.worker_calls.insert(script.to_string(), f);
        }
    }
    for l in text.lines() {
        if l.starts_with("ankusa_claim_page_rows") {
            report.worker_pages[0] = value(l);
        } else if l.starts_with("ankusa_settle_page_outcomes") {
            report.worker_pages[1] = value(l);
        }
    }
}

/// `SLOWLOG GET -1` grouped by script (by SHA) or command name, then `SLOWLOG RESET`.
pub(super) async fn slowlog(store: &Store) -> Result<BTreeMap<String, SlowCalls>, Error> {
    let names: BTreeMap<String, &str> = Scripts::default()
        .all()
        .iter()
        .map(|s| (s.sha1(), s.name))
        .collect();
    let calls = store
        .slowlog()
        .await
        .map_err(|e| Error::Other(format!("SLOWLOG GET: {e}")))?;
    let mut all: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for call in calls {
        let (us, args) = (call.micros, call.args);
        let cmd = args
            .first()
            .map(|c| c.to_ascii_uppercase())
            .unwrap_or_default();
        let name = match cmd.as_str() {
            "EVALSHA" | "EVALSHA_RO" => match args
                .get(1)
                .and_then(|sha| names.get(&sha.to_ascii_lowercase()))
            {
                Some(n) => n.to_string(),
                // Another build's script (`ANKUSA_BENCH_WORKER`): told apart by its
                // arguments: settle's first outcome starts with an op letter, claim's
                // page and default room are numbers.
                None => {
                    let op = |k: usize| {
                        args.get(k)
                            .is_some_and(|a| ["D", "R", "P", "X", "G"].contains(&a.as_str()))
                    };
                    let num = |k: usize| args.get(k).is_some_and(|a| a.parse::<u64>().is_ok());
                    if op(7) || op(8) {
                        "settle (worker's build)".to_string()
                    } else if num(7) && num(8) {
                        "claim (worker's build)".to_string()
                    } else {
                        "evalsha (unknown script)".to_string()
                    }
                }
            },
            "EVAL" => "eval".to_string(),
            c => c.to_ascii_lowercase(),
        };
        all.entry(name).or_default().push(us);
    }
    let out = all
        .into_iter()
        .map(|(name, mut v)| {
            v.sort_unstable();
            let s = SlowCalls {
                count: v.len() as u64,
                max_us: v.last().copied().unwrap_or(0),
                median_us: v[v.len() / 2],
            };
            (name, s)
        })
        .collect();
    store
        .slowlog_reset()
        .await
        .map_err(|e| Error::Other(format!("SLOWLOG RESET: {e}")))?;
    Ok(out)
}

/// Run a scheduling tool (`renice`, `chrt`) on the bench's redis-server; its failure is the
/// bench's error, with what the tool said.
fn run_tool(tool: &str, args: &[&str]) -> Result<(), Error> {
    let out = std::process::Command::new(tool)
        .args(args)
        .output()
        .map_err(|e| Error::Other(format!("{tool}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Other(format!(
            "{tool} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

async fn http_source(store: &Store, tenant: &str, url: String) -> Result<(), Error> {
    let sink = SinkEntry::http(&url);
    store
        .put_source(tenant, "s", &SourceSpec { sinks: vec![sink] })
        .await?;
    Ok(())
}

fn body(i: usize) -> Vec<u8> {
    format!(
        "{{\"id\":\"evt_{i:08}\",\"type\":\"order.created\",\"pad\":\"{}\"}}",
        "x".repeat(160)
    )
    .into_bytes()
}

fn print_slow(phase: &str, m: &BTreeMap<String, SlowCalls>, us: u64) {
    if m.is_empty() {
        eprintln!("bench: {phase}: no command took {us} µs or more");
    }
    for (name, s) in m {
        eprintln!(
            "bench: {phase}: {name}: {} calls ≥ {us} µs, median of those {:.1} ms, slowest {:.1} ms",
            s.count,
            s.median_us as f64 / 1000.0,
            s.max_us as f64 / 1000.0
        );
    }
}

/// Run the scenario and print its report.
pub(super) async fn run(args: &BenchArgs) -> Result<(), Error> {
    let redis = start_redis(args)?;
    let sink = CountingSink::start()?;
    let (store, producer) = super::connect_instance(&redis, "slow").await?;
    let mut report = ScriptsReport {
        backlog: args.scripts_backlog,
        small_tenants: args.scripts_tenants,
        slowlog_us: args.slowlog_us,
        ..Default::default()
    };
    eprintln!(
        "bench: scripts: redis {}, {} rows in one tenant + {} tenants × 1 row, slowlog ≥ {} µs",
        redis.url(),
        args.scripts_backlog,
        args.scripts_tenants,
        args.slowlog_us
    );
    let small = commit_phase(args, &store, &producer, &sink, &mut report).await?;
    let total = drain_phase(args, &redis, &producer, &sink, &small, &mut report).await?;
    report.drain_slow = slowlog(&store).await?;
    print_drain(args, total, &report);
    super::print_report(&report, args.json);
    if report.delivered < total {
        return Err(Error::Other(format!(
            "only {} of {total} rows delivered within {} s",
            report.delivered, args.scripts_max_secs
        )));
    }
    Ok(())
}

/// A fresh redis-server with a slowlog that keeps every call over `--slowlog-us`, niced or
/// on SCHED_FIFO as asked.
pub(super) fn start_redis(args: &BenchArgs) -> Result<RedisServer, Error> {
    let redis = RedisServer::start().map_err(|e| Error::Other(e.to_string()))?;
    let pid = redis.pid().to_string();
    if args.redis_nice != 0 {
        // util-linux's renice, so the library needs no unsafe code.
        run_tool("renice", &["-n", &args.redis_nice.to_string(), "-p", &pid])?;
    }
    if args.redis_fifo {
        // SCHED_FIFO (priority 10) for the redis-server's main thread: on a machine busy
        // with other work it runs as soon as it is runnable, so `SLOWLOG` shows the
        // scripts' own time rather than the time other processes held the core.
        run_tool("chrt", &["-f", "-p", "10", &pid])?;
    }
    let cfg = |k: &str, v: &str| -> Result<(), Error> {
        redis
            .cmd(&["CONFIG", "SET", k, v])
            .map(|_| ())
            .map_err(|e| Error::Other(e.to_string()))
    };
    cfg("slowlog-max-len", "1000000")?;
    cfg("slowlog-log-slower-than", &args.slowlog_us.to_string())?;
    Ok(redis)
}

/// Commit: the big backlog in calls of `commit_batch` hooks, then one row per small tenant.
/// Returns the small tenants.
async fn commit_phase(
    args: &BenchArgs,
    store: &Store,
    producer: &Producer,
    sink: &CountingSink,
    report: &mut ScriptsReport,
) -> Result<Vec<String>, Error> {
    let (backlog, tenants) = (args.scripts_backlog, args.scripts_tenants);
    let started = Instant::now();
    http_source(store, "big", sink.url("/big")).await?;
    let bar = indicatif::ProgressBar::new(backlog as u64);
    let step = args.commit_batch.max(1);
    let mut i = 0;
    while i < backlog {
        let n = step.min(backlog - i);
        let hooks: Vec<Hook> = (i..i + n).map(|k| Hook::new(body(k))).collect();
        producer.commit_many("big", "s", &hooks).await?;
        i += n;
        bar.set_position(i as u64);
    }
    bar.finish_and_clear();
    let small: Vec<String> = (0..tenants).map(|k| format!("s{k:05}")).collect();
    for t in &small {
        http_source(store, t, sink.url("/small")).await?;
    }
    for (k, t) in small.iter().enumerate() {
        producer.commit(t, "s", Hook::new(body(k))).await?;
    }
    report.commit_secs = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    report.commit_slow = slowlog(store).await?;
    eprintln!("bench: committed in {:.1} s", report.commit_secs);
    print_slow("commit", &report.commit_slow, args.slowlog_us);
    Ok(small)
}

/// Drain: one worker child delivers everything; once the first wave of small rows is in,
/// the second wave is committed. Returns the rows expected in all.
async fn drain_phase(
    args: &BenchArgs,
    redis: &RedisServer,
    producer: &Producer,
    sink: &CountingSink,
    small: &[String],
    report: &mut ScriptsReport,
) -> Result<u64, Error> {
    let (backlog, tenants) = (args.scripts_backlog, args.scripts_tenants);
    let dir = tempfile::tempdir().map_err(|e| Error::Other(e.to_string()))?;
    let extra = args
        .script_budget_ms
        .map(|ms| format!("script_budget_ms = {ms}\n"))
        .unwrap_or_default();
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::Other(e.to_string()))?
        .port();
    let worker = spawn_worker_config(
        &dir,
        "slow",
        &format!(
            "instance = \"slow\"\n[redis]\nurl = \"{}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [dispatch]\nconcurrency = 256\nsink_concurrency = 64\nbreaker_failures = 0\n{extra}\
             [http]\nallow_cidrs = [\"127.0.0.0/8\", \"::1/128\"]\n",
            redis.url()
        ),
    )?;
    let started = Instant::now();
    let total = (backlog + 2 * tenants) as u64;
    let seen = sink.seen.clone();
    let bar = indicatif::ProgressBar::new(total);
    let deadline = Instant::now() + Duration::from_secs(args.scripts_max_secs);
    let mut wave2 = false;
    let delivered = || seen.big.load(Ordering::Relaxed) + seen.small.load(Ordering::Relaxed);
    while delivered() < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        bar.set_position(delivered());
        if !wave2 && seen.small.load(Ordering::Relaxed) >= tenants as u64 {
            wave2 = true;
            report.big_delivered_at_last_small[0] = seen.big_at_last_small.load(Ordering::Relaxed);
            report.big_left_at_wave2 = backlog as u64 - seen.big.load(Ordering::Relaxed);
            for (k, t) in small.iter().enumerate() {
                producer.commit(t, "s", Hook::new(body(k))).await?;
            }
        }
    }
    bar.finish_and_clear();
    report.drain_secs = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    report.big_delivered_at_last_small[1] = seen.big_at_last_small.load(Ordering::Relaxed);
    report.delivered = delivered();
    report.duplicates = seen.dups.load(Ordering::Relaxed);
    worker_metrics(admin, report).await;
    drop(worker);
    Ok(total)
}

/// The drain's summary on stderr: deliveries, the small tenants' wait, the slow calls, and
/// what the worker's own metrics say of its scripts.
fn print_drain(args: &BenchArgs, total: u64, report: &ScriptsReport) {
    eprintln!(
        "bench: {} of {total} rows delivered in {:.1} s ({} duplicates); the big tenant had {} delivered when wave 1's last small row arrived, {} when wave 2's did ({} left when wave 2 was committed)",
        report.delivered,
        report.drain_secs,
        report.duplicates,
        report.big_delivered_at_last_small[0],
        report.big_delivered_at_last_small[1],
        report.big_left_at_wave2
    );
    print_slow("drain", &report.drain_slow, args.slowlog_us);
    for (script, [calls, within, stops]) in &report.worker_calls {
        eprintln!("bench: worker: {script}: {calls} calls, {within} with a round trip ≤ 5 ms, {stops} cut short by the budget");
    }
    eprintln!(
        "bench: worker: pages at the end: claim {} rows, settle {} outcomes",
        report.worker_pages[0], report.worker_pages[1]
    );
    print_csv(args, report);
}

/// Every script's calls and slow calls as CSV on stdout (for BENCHMARKS.md): per phase and
/// script, the calls the worker made (its `/metrics`; the bench's own commits in the commit
/// phase), those Redis logged at or over `--slowlog-us`, the slowest and the median of those.
fn print_csv(args: &BenchArgs, report: &ScriptsReport) {
    let row = |phase: &str, name: &str, calls: Option<u64>, s: Option<&SlowCalls>| {
        let s = s.cloned().unwrap_or_default();
        println!(
            "{phase},{name},{},{},{},{:.1},{:.1}",
            calls.map_or(String::new(), |c| c.to_string()),
            args.slowlog_us,
            s.count,
            s.max_us as f64 / 1000.0,
            s.median_us as f64 / 1000.0
        );
    };
    println!("phase,script,calls,slowlog_us,slow_calls,slowest_ms,median_slow_ms");
    let commits = args.scripts_backlog.div_ceil(args.commit_batch.max(1)) + args.scripts_tenants;
    row(
        "commit",
        "commit",
        Some(commits as u64),
        report.commit_slow.get("commit"),
    );
    for (name, s) in report.commit_slow.iter().filter(|(n, _)| *n != "commit") {
        row("commit", name, None, Some(s));
    }
    let mut names: std::collections::BTreeSet<&str> =
        report.worker_calls.keys().map(String::as_str).collect();
    names.extend(report.drain_slow.keys().map(String::as_str));
    for name in names {
        let calls = report.worker_calls.get(name).map(|f| f[0]);
        row("drain", name, calls, report.drain_slow.get(name));
    }
}
