//! `ankusa bench`: measures, on this machine and in one run, what `BENCHMARKS.md` reports:
//! end-to-end deliveries/s into a local receiver with real payload sizes, commit → delivery
//! p50/p99 at half that rate, Redis CPU and commands per delivered row, Redis memory per
//! pending row, and the worker's RSS (peak, and over time behind a dead sink).
//!
//! Redis, the receiver (in this process) and a worker (a child `ankusa worker` process)
//! all run here, so the figures are for everything sharing this machine's cores.

use crate::error::Error;
use crate::model::{SinkEntry, SourceSpec};
use crate::producer::{Hook, Producer};
use crate::store::Store;
use crate::testkit::{Behavior, Receiver, ReceiverOptions, RedisServer};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of `ankusa bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Rows for the throughput run (one sink per hook).
    #[arg(long, default_value_t = 100_000)]
    pub rows: usize,
    /// Tenants the rows are spread over (each one source, one sink).
    #[arg(long, default_value_t = 8)]
    pub tenants: usize,
    /// Payload files (e.g. ../shared/data/github-webhooks); default: generated ~1 KiB JSON.
    #[arg(long)]
    pub payloads: Option<PathBuf>,
    /// Seconds of the latency run at half the measured rate.
    #[arg(long, default_value_t = 5)]
    pub latency_secs: u64,
    /// Rows behind a dead sink for the memory run (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub dead_backlog: usize,
    /// Print the results as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
}

/// The figures of one run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BenchReport {
    /// Rows delivered in the throughput run.
    pub rows: usize,
    /// Mean payload size (bytes).
    pub mean_body_bytes: usize,
    /// Deliveries per second, pre-committed backlog drained end to end.
    pub deliveries_per_sec: f64,
    /// Redis CPU per delivered row (µs, user + sys).
    pub redis_cpu_us_per_row: f64,
    /// Redis commands per delivered row (scripts count as one each).
    pub redis_commands_per_row: f64,
    /// Redis memory per pending row beyond the body (bytes).
    pub redis_bytes_per_pending_row: f64,
    /// Rate of the latency run (hooks/s).
    pub latency_rate: f64,
    /// Commit → delivery median at that rate (ms).
    pub p50_ms: f64,
    /// Commit → delivery 99th percentile at that rate (ms).
    pub p99_ms: f64,
    /// Worker peak RSS over the throughput and latency runs (MiB).
    pub worker_peak_rss_mib: f64,
    /// Rows behind the dead sink in the memory run.
    pub dead_backlog: usize,
    /// Worker RSS samples (MiB) during the dead-sink run, first to last.
    pub dead_backlog_rss_mib: Vec<f64>,
    /// Rows claimed (held in the window) at the end of the dead-sink run.
    pub dead_backlog_claimed: u64,
}

struct WorkerChild(Child);

impl Drop for WorkerChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn status_kib(pid: u32, field: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn info_field(redis: &RedisServer, section: &str, field: &str) -> f64 {
    let text = redis.cmd(&["INFO", section]).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn redis_cpu(redis: &RedisServer) -> f64 {
    info_field(redis, "cpu", "used_cpu_user") + info_field(redis, "cpu", "used_cpu_sys")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn spawn_worker(redis_url: &str, dir: &tempfile::TempDir) -> Result<WorkerChild, Error> {
    let cfg = format!(
        "instance = \"bench\"\n[redis]\nurl = \"{redis_url}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [dispatch]\nconcurrency = 256\nsink_concurrency = 32\nmax_inflight = 10000\nbatch = 1000\n\
         breaker_failures = 0\n[retry]\ninitial_backoff_ms = 1000\n"
    );
    let path = dir.path().join("bench.toml");
    std::fs::write(&path, cfg).map_err(|e| Error::Other(e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| Error::Other(e.to_string()))?;
    let log = std::fs::File::create(dir.path().join("worker.log"))
        .map_err(|e| Error::Other(e.to_string()))?;
    let child = Command::new(exe)
        .args(["worker", "--config"])
        .arg(&path)
        .env("ANKUSA_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| Error::Other(format!("spawn worker: {e}")))?;
    Ok(WorkerChild(child))
}

fn bodies(args: &BenchArgs) -> Result<Vec<Vec<u8>>, Error> {
    if let Some(dir) = &args.payloads {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::Other(format!("{}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        let v: Vec<Vec<u8>> = files.iter().filter_map(|f| std::fs::read(f).ok()).collect();
        if !v.is_empty() {
            return Ok(v);
        }
    }
    Ok((0..256)
        .map(|i| {
            let mut b = crate::demo::generated_body(i);
            while b.len() < 1000 {
                b = format!(
                    "{{\"pad\":\"{}\",\"event\":{}}}",
                    "x".repeat(1000 - b.len()),
                    String::from_utf8_lossy(&b)
                )
                .into_bytes();
            }
            b
        })
        .collect())
}

async fn commit_backlog(
    producer: &Producer,
    tenants: &[String],
    bodies: &[Vec<u8>],
    rows: usize,
) -> Result<u64, Error> {
    let mut body_bytes = 0u64;
    let mut i = 0;
    while i < rows {
        let t = &tenants[(i / 500) % tenants.len()];
        let n = 500.min(rows - i);
        let hooks: Vec<Hook> = (i..i + n)
            .map(|k| Hook::new(bodies[k % bodies.len()].clone()))
            .collect();
        body_bytes += hooks.iter().map(|h| h.body.len() as u64).sum::<u64>();
        producer.commit_many(t, "s", &hooks).await?;
        i += n;
    }
    Ok(body_bytes)
}

/// Run the benchmark and print the report.
pub async fn run(args: BenchArgs) -> Result<(), Error> {
    let redis = RedisServer::start().map_err(|e| Error::Other(e.to_string()))?;
    let receiver = Receiver::start_with(ReceiverOptions {
        record_bodies: false,
        threads: 1,
    })
    .map_err(|e| Error::Other(e.to_string()))?;
    let store = Store::connect(&redis.url(), "bench", 30_000).await?;
    let producer = Producer::new(store.clone(), 16 << 20);
    let tenants: Vec<String> = (0..args.tenants.max(1)).map(|i| format!("t{i}")).collect();
    for t in &tenants {
        let sink = SinkEntry {
            module: "http".into(),
            opts: serde_json::json!({"url": receiver.url(&format!("{t}/hook"))})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            ordered: false,
            key: None,
        };
        store
            .put_source(t, "s", &SourceSpec { sinks: vec![sink] })
            .await?;
    }
    let bodies = bodies(&args)?;
    let mut report = BenchReport {
        rows: args.rows,
        ..Default::default()
    };
    eprintln!(
        "bench: redis {}, receiver {}, {} tenants, {} bodies",
        redis.url(),
        receiver.url(""),
        tenants.len(),
        bodies.len()
    );

    // 1. Memory per pending row: commit the backlog with no worker running.
    let mem0 = info_field(&redis, "memory", "used_memory");
    let body_bytes = commit_backlog(&producer, &tenants, &bodies, args.rows).await?;
    let mem1 = info_field(&redis, "memory", "used_memory");
    report.mean_body_bytes = (body_bytes / args.rows.max(1) as u64) as usize;
    report.redis_bytes_per_pending_row =
        ((mem1 - mem0 - body_bytes as f64) / args.rows as f64).round();
    eprintln!(
        "bench: {} rows pending, {:.0} bytes of Redis memory per row beyond the body",
        args.rows, report.redis_bytes_per_pending_row
    );

    // 2. Throughput: a worker drains the backlog.
    let dir = tempfile::tempdir().map_err(|e| Error::Other(e.to_string()))?;
    let cpu0 = redis_cpu(&redis);
    let cmds0 = info_field(&redis, "stats", "total_commands_processed");
    let started = Instant::now();
    let worker = spawn_worker(&redis.url(), &dir)?;
    let pid = worker.0.id();
    let bar = indicatif::ProgressBar::new(args.rows as u64);
    let deadline = Instant::now() + Duration::from_secs(600);
    while receiver.count() < args.rows && Instant::now() < deadline {
        receiver
            .wait_until_async(Duration::from_millis(250), |_| false)
            .await;
        bar.set_position(receiver.count() as u64);
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    let delivered = receiver.count();
    // Let the last settle land before reading Redis' counters.
    crate::ops::tick(&store, None).await?;
    let cpu1 = redis_cpu(&redis);
    let cmds1 = info_field(&redis, "stats", "total_commands_processed");
    report.deliveries_per_sec = (delivered as f64 / elapsed).round();
    report.redis_cpu_us_per_row = ((cpu1 - cpu0) * 1e6 / delivered as f64 * 10.0).round() / 10.0;
    report.redis_commands_per_row = ((cmds1 - cmds0) / delivered as f64 * 100.0).round() / 100.0;
    eprintln!(
        "bench: {delivered} rows in {elapsed:.2} s = {:.0} deliveries/s; Redis {:.1} µs CPU and {:.2} commands per row",
        report.deliveries_per_sec, report.redis_cpu_us_per_row, report.redis_commands_per_row
    );

    // 3. Latency at half that rate.
    let rate = (report.deliveries_per_sec / 2.0).max(100.0);
    report.latency_rate = rate.round();
    receiver.clear();
    let mut committed_at: HashMap<u64, Instant> = HashMap::new();
    let tick = Duration::from_millis(10);
    let per_tick = ((rate * tick.as_secs_f64()).round() as usize).max(1);
    let run_until = Instant::now() + Duration::from_secs(args.latency_secs);
    let mut next = Instant::now();
    let mut k = 0usize;
    while Instant::now() < run_until {
        for chunk_t in 0..tenants.len() {
            let n = per_tick / tenants.len() + usize::from(chunk_t < per_tick % tenants.len());
            if n == 0 {
                continue;
            }
            let hooks: Vec<Hook> = (0..n)
                .map(|j| Hook::new(bodies[(k + j) % bodies.len()].clone()))
                .collect();
            k += n;
            let r = producer.commit_many(&tenants[chunk_t], "s", &hooks).await?;
            let now = Instant::now();
            for j in 0..n as u64 {
                committed_at.insert(r.first_hook + j, now);
            }
        }
        next += tick;
        tokio::time::sleep_until(next.into()).await;
    }
    let expected = committed_at.len();
    receiver
        .wait_until_async(Duration::from_secs(30), |r| r.len() >= expected)
        .await;
    let mut lat: Vec<f64> = receiver
        .requests()
        .iter()
        .filter_map(|r| {
            let id: u64 = r.header("ankusa-hook-id")?.parse().ok()?;
            Some(
                r.at.saturating_duration_since(*committed_at.get(&id)?)
                    .as_secs_f64()
                    * 1000.0,
            )
        })
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    report.p50_ms = (percentile(&lat, 0.5) * 100.0).round() / 100.0;
    report.p99_ms = (percentile(&lat, 0.99) * 100.0).round() / 100.0;
    report.worker_peak_rss_mib =
        (status_kib(pid, "VmHWM:").unwrap_or(0.0) / 1024.0 * 10.0).round() / 10.0;
    eprintln!("bench: {expected} hooks at {rate:.0}/s: p50 {:.2} ms, p99 {:.2} ms; worker peak RSS {:.1} MiB", report.p50_ms, report.p99_ms, report.worker_peak_rss_mib);

    // 4. RSS behind a dead sink: every endpoint hangs, a large backlog waits in Redis.
    if args.dead_backlog > 0 {
        for t in &tenants {
            receiver.set(&format!("{t}/hook"), Behavior::Status(503));
        }
        let small: Vec<Vec<u8>> = vec![b"{\"dead\":true}".to_vec()];
        let bar = indicatif::ProgressBar::new(args.dead_backlog as u64);
        let mut i = 0;
        let mut samples = Vec::new();
        let mut last_sample = Instant::now();
        while i < args.dead_backlog {
            let n = 1000.min(args.dead_backlog - i);
            let hooks: Vec<Hook> = (0..n).map(|_| Hook::new(small[0].clone())).collect();
            producer
                .commit_many(&tenants[(i / 1000) % tenants.len()], "s", &hooks)
                .await?;
            i += n;
            bar.set_position(i as u64);
            if last_sample.elapsed() >= Duration::from_secs(1) {
                samples.push(
                    (status_kib(pid, "VmRSS:").unwrap_or(0.0) / 1024.0 * 10.0).round() / 10.0,
                );
                last_sample = Instant::now();
            }
        }
        bar.finish_and_clear();
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            samples.push((status_kib(pid, "VmRSS:").unwrap_or(0.0) / 1024.0 * 10.0).round() / 10.0);
        }
        report.dead_backlog = args.dead_backlog;
        report.dead_backlog_rss_mib = samples;
        report.dead_backlog_claimed = store.claimed_count().await?;
        eprintln!(
            "bench: {} rows behind a dead sink: worker RSS {:?} MiB, {} rows claimed",
            args.dead_backlog, report.dead_backlog_rss_mib, report.dead_backlog_claimed
        );
    }
    drop(worker);
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    }
    Ok(())
}
