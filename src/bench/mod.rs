//! `ankusa bench`: measures, on this machine and in one run, what `BENCHMARKS.md` reports:
//! end-to-end deliveries/s into a local receiver with real payload sizes, commit → delivery
//! p50/p99 at half that rate, Redis CPU and commands per delivered row, Redis memory per
//! pending row, and the worker's RSS (peak, and over time behind a dead sink).
//!
//! Redis, the receiver (in this process) and a worker (a child `ankusa worker` process)
//! all run here, so the figures are for everything sharing this machine's cores.

mod args;
mod console;
mod phases;
mod scripts;
pub use args::BenchArgs;

use crate::error::Error;
use crate::model::{SinkEntry, SourceSpec};
use crate::producer::{Hook, Producer};
use crate::store::Store;
use crate::testkit::{Behavior, Receiver, ReceiverOptions, RedisServer};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether the bench's hooks and entries carry per-entry policy (set once by [`run`]).
static BENCH_POLICY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A bench hook: with `--policy` it carries the event type the entries' filter matches.
fn hook(body: &[u8]) -> Hook {
    let h = Hook::new(body.to_vec());
    if BENCH_POLICY.load(std::sync::atomic::Ordering::Relaxed) {
        h.event_type("bench.push")
    } else {
        h
    }
}

/// `history.enabled` of the bench's workers (set once by [`run`] from `--no-history`).
static WORKER_HISTORY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

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
    /// The same with 2 sinks per hook (bytes per row; the body counted once per hook).
    pub redis_bytes_per_pending_row_2_sinks: f64,
    /// The same with 4 sinks per hook (bytes per row).
    pub redis_bytes_per_pending_row_4_sinks: f64,
    /// Redis memory still held per delivered row once the backlog is drained (bytes): the
    /// attempt history and the delivered hooks kept for resend; ~0 with `--no-history`.
    pub redis_bytes_per_delivered_row: f64,
    /// Whether the workers recorded the attempt history.
    pub history: bool,
    /// Whether the entries carried an event filter and a rate limit (`--policy`).
    pub policy: bool,
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
    /// p99 commit → delivery of 4 small tenants alone (ms).
    pub fairness_p99_ms_without_backlog: f64,
    /// The same beside another tenant's backlog (ms).
    pub fairness_p99_ms_with_backlog: f64,
    /// with / without (target ≤ 1.5).
    pub fairness_ratio: f64,
    /// Deliveries/s of 7 tenants when all 8 are healthy.
    pub isolation_healthy_per_sec: f64,
    /// Deliveries/s of the same 7 while the 8th tenant's endpoint hangs.
    pub isolation_one_down_per_sec: f64,
    /// one_down / healthy (target ≥ 0.9).
    pub isolation_ratio: f64,
    /// Deliveries/s, unordered sink.
    pub unordered_per_sec: f64,
    /// Deliveries/s, the same load over ordered lanes.
    pub ordered_per_sec: f64,
    /// ordered / unordered.
    pub ordered_ratio: f64,
}

async fn put_http(
    store: &Store,
    receiver: &Receiver,
    tenant: &str,
    path: &str,
    ordered: bool,
) -> Result<(), Error> {
    let sink = SinkEntry {
        ordered,
        key: ordered.then(|| "json:/lane".to_string()),
        ..SinkEntry::http(&receiver.url(path))
    };
    store
        .put_source(tenant, "s", &SourceSpec { sinks: vec![sink] })
        .await?;
    Ok(())
}

/// Commit `rate` hooks/s spread over `tenants` for `secs`; returns commit instants by hook id.
async fn paced(
    producer: &Producer,
    tenants: &[String],
    bodies: &[Vec<u8>],
    rate: f64,
    secs: u64,
) -> Result<HashMap<u64, Instant>, Error> {
    let mut at = HashMap::new();
    let tick = Duration::from_millis(20);
    let per_tenant = ((rate * tick.as_secs_f64()) / tenants.len() as f64)
        .ceil()
        .max(1.0) as usize;
    let until = Instant::now() + Duration::from_secs(secs);
    let mut next = Instant::now();
    let mut k = 0;
    while Instant::now() < until {
        for t in tenants {
            let hooks: Vec<Hook> = (0..per_tenant)
                .map(|j| hook(&bodies[(k + j) % bodies.len()]))
                .collect();
            k += per_tenant;
            let r = producer.commit_many(t, "s", &hooks).await?;
            let now = Instant::now();
            for j in 0..per_tenant as u64 {
                at.insert(r.first_hook + j, now);
            }
        }
        next += tick;
        tokio::time::sleep_until(next.into()).await;
    }
    Ok(at)
}

fn p99_for(receiver: &Receiver, prefix: &str, at: &HashMap<u64, Instant>) -> f64 {
    let mut lat: Vec<f64> = receiver
        .requests()
        .iter()
        .filter(|r| r.path.starts_with(prefix))
        .filter_map(|r| {
            let id: u64 = r.header("ankusa-hook-id")?.parse().ok()?;
            Some(r.at.saturating_duration_since(*at.get(&id)?).as_secs_f64() * 1000.0)
        })
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    (percentile(&lat, 0.99) * 10.0).round() / 10.0
}

/// Fairness: p99 lag of 4 small tenants committing 100 hooks/s each, alone and then
/// beside another tenant's backlog of `backlog` rows.
async fn fairness(
    redis: &RedisServer,
    receiver: &Receiver,
    dir: &tempfile::TempDir,
    bodies: &[Vec<u8>],
    backlog: usize,
) -> Result<(f64, f64), Error> {
    let mut out = [0.0; 2];
    for (round, big) in [0, backlog].into_iter().enumerate() {
        let instance = format!("fair{round}");
        let (store, producer) = connect_instance(redis, &instance).await?;
        let small: Vec<String> = (0..4).map(|i| format!("small{i}")).collect();
        for t in &small {
            put_http(&store, receiver, t, &format!("{instance}/{t}"), false).await?;
        }
        // The big tenant's endpoint answers in 20 ms, like a remote one: the backlog keeps
        // its key busy for the whole run without the receiver eating the machine's CPU.
        receiver.set(&format!("{instance}/big"), Behavior::Delay { ms: 20 });
        put_http(&store, receiver, "big", &format!("{instance}/big"), false).await?;
        if big > 0 {
            let bar = indicatif::ProgressBar::new(big as u64);
            let hooks: Vec<Hook> = (0..1000).map(|k| hook(&bodies[k % bodies.len()])).collect();
            for i in (0..big).step_by(1000) {
                producer
                    .commit_many("big", "s", &hooks[..1000.min(big - i)])
                    .await?;
                bar.set_position(i as u64);
            }
            bar.finish_and_clear();
        }
        receiver.clear();
        let worker = spawn_worker(&redis.url(), dir, &instance)?;
        // Let the worker start and the big tenant's drain reach full speed.
        receiver
            .wait_until_async(Duration::from_secs(2), |_| false)
            .await;
        let at = paced(&producer, &small, bodies, 400.0, 5).await?;
        let n = at.len();
        receiver
            .wait_until_async(Duration::from_secs(30), |r| {
                r.iter().filter(|r| r.path.contains("/small")).count() >= n
            })
            .await;
        out[round] = p99_for(receiver, &format!("{instance}/small"), &at);
        drop(worker);
    }
    Ok((out[0], out[1]))
}

/// Isolation: deliveries/s of 7 healthy tenants, with the 8th healthy and then
/// with its endpoint hanging.
async fn isolation(
    redis: &RedisServer,
    receiver: &Receiver,
    dir: &tempfile::TempDir,
    bodies: &[Vec<u8>],
    rows: usize,
) -> Result<(f64, f64), Error> {
    let mut out = [0.0; 2];
    for (round, down) in [false, true].into_iter().enumerate() {
        let instance = format!("iso{round}");
        let (store, producer) = connect_instance(redis, &instance).await?;
        let tenants: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
        for t in &tenants {
            let path = format!("{instance}/{t}");
            receiver.set(
                &path,
                if down && t == "t7" {
                    Behavior::Hang
                } else {
                    Behavior::Ok
                },
            );
            put_http(&store, receiver, t, &path, false).await?;
            commit_backlog(&producer, std::slice::from_ref(t), bodies, rows).await?;
        }
        receiver.clear();
        let started = Instant::now();
        let worker = spawn_worker(&redis.url(), dir, &instance)?;
        let healthy = 7 * rows;
        receiver
            .wait_until_async(Duration::from_secs(300), |r| {
                r.iter()
                    .filter(|r| r.status == 200 && !r.path.ends_with("/t7"))
                    .count()
                    >= healthy
            })
            .await;
        out[round] = (healthy as f64 / started.elapsed().as_secs_f64()).round();
        drop(worker);
    }
    Ok((out[0], out[1]))
}

/// Ordered lanes: the same rows over `lanes` ordered lanes vs one unordered sink.
async fn lanes(
    redis: &RedisServer,
    receiver: &Receiver,
    dir: &tempfile::TempDir,
    bodies: &[Vec<u8>],
    rows: usize,
    lanes: usize,
) -> Result<(f64, f64), Error> {
    let mut out = [0.0; 2];
    for (round, ordered) in [false, true].into_iter().enumerate() {
        let instance = format!("lanes{round}");
        let (store, producer) = connect_instance(redis, &instance).await?;
        let tenants: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
        for t in &tenants {
            put_http(&store, receiver, t, &format!("{instance}/{t}"), ordered).await?;
        }
        let mut i = 0;
        while i < rows {
            let n = 500.min(rows - i);
            let hooks: Vec<Hook> = (i..i + n)
                .map(|k| {
                    // Each lane lives in one tenant: 1000 lanes = 125 per tenant × 8.
                    let t = (i / 500) % tenants.len();
                    let lane = t + tenants.len() * (k % (lanes / tenants.len()).max(1));
                    Hook::new(format!(
                        "{{\"lane\":{lane},\"k\":{k},\"pad\":\"{}\"}}",
                        "x".repeat(bodies[k % bodies.len()].len().min(2000))
                    ))
                })
                .collect();
            producer
                .commit_many(&tenants[(i / 500) % tenants.len()], "s", &hooks)
                .await?;
            i += n;
        }
        receiver.clear();
        let started = Instant::now();
        let worker = spawn_worker(&redis.url(), dir, &instance)?;
        receiver
            .wait_until_async(Duration::from_secs(300), |r| r.len() >= rows)
            .await;
        out[round] = (receiver.count() as f64 / started.elapsed().as_secs_f64()).round();
        drop(worker);
    }
    Ok((out[0], out[1]))
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

/// Spawn `ankusa worker` (this executable, or `$ANKUSA_BENCH_WORKER`) with the config text
/// `cfg`, logging to `<dir>/<name>.log`.
fn spawn_worker_config(
    dir: &tempfile::TempDir,
    name: &str,
    cfg: &str,
) -> Result<WorkerChild, Error> {
    let path = dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, cfg).map_err(|e| Error::Other(e.to_string()))?;
    // `ANKUSA_BENCH_WORKER`: another build as the worker (e.g. the commit before a change),
    // for a before/after comparison in the same harness.
    let exe = match std::env::var_os("ANKUSA_BENCH_WORKER") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe().map_err(|e| Error::Other(e.to_string()))?,
    };
    let log = std::fs::File::create(dir.path().join(format!("{name}.log")))
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

fn spawn_worker(
    redis_url: &str,
    dir: &tempfile::TempDir,
    instance: &str,
) -> Result<WorkerChild, Error> {
    let cfg = format!(
        "instance = \"{instance}\"\n[redis]\nurl = \"{redis_url}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [dispatch]\nconcurrency = 256\nsink_concurrency = 32\nmax_inflight = 10000\nbatch = 1000\n\
         attempt_timeout_ms = 5000\nbreaker_failures = 0\n[dispatch.tenants.default]\nmax_inflight = 2000\n\
         [retry]\ninitial_backoff_ms = 1000\n[http]\nallow_cidrs = [\"127.0.0.0/8\", \"::1/128\"]\n[history]\nenabled = {}\n",
        WORKER_HISTORY.load(std::sync::atomic::Ordering::Relaxed)
    );
    spawn_worker_config(dir, instance, &cfg)
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
            .map(|k| hook(&bodies[k % bodies.len()]))
            .collect();
        body_bytes += hooks.iter().map(|h| h.body.len() as u64).sum::<u64>();
        producer.commit_many(t, "s", &hooks).await?;
        i += n;
    }
    Ok(body_bytes)
}

/// Run the benchmark and print the report (JSON on stdout; progress and the targets met or
/// missed on stderr).
pub async fn run(args: BenchArgs) -> Result<(), Error> {
    if args.scripts {
        return scripts::run(&args).await;
    }
    if args.console {
        return console::run(&args).await;
    }
    WORKER_HISTORY.store(!args.no_history, std::sync::atomic::Ordering::Relaxed);
    BENCH_POLICY.store(args.policy, std::sync::atomic::Ordering::Relaxed);
    let world = phases::World::start(&args).await?;
    let mut report = BenchReport {
        rows: args.rows,
        history: !args.no_history,
        policy: args.policy,
        ..Default::default()
    };
    world.memory_by_sinks(&args, &mut report).await?;
    let mem0 = world.memory_per_pending_row(&args, &mut report).await?;
    let dir = tempfile::tempdir().map_err(|e| Error::Other(e.to_string()))?;
    let worker = world.throughput(&args, &dir, mem0, &mut report).await?;
    world.latency(&args, worker.0.id(), &mut report).await?;
    if args.dead_backlog > 0 {
        world
            .dead_backlog(&args, worker.0.id(), &mut report)
            .await?;
    }
    drop(worker);
    world.extras(&args, &dir, &mut report).await?;
    phases::check_targets(&args, &report);
    print_report(&report, args.json);
    Ok(())
}

/// A store of `instance` on `redis` that may reach loopback sinks, and a producer over it.
async fn connect_instance(redis: &RedisServer, instance: &str) -> Result<(Store, Producer), Error> {
    let store = Store::connect(&redis.url(), instance, 30_000)
        .await?
        .with_edge(crate::testkit::loopback_edge());
    let producer = Producer::new(store.clone(), 16 << 20);
    Ok((store, producer))
}

/// A report on stdout: one JSON line with `--json`, else pretty-printed.
fn print_report(report: &impl serde::Serialize, json: bool) {
    let text = match json {
        true => serde_json::to_string(report),
        false => serde_json::to_string_pretty(report),
    };
    println!("{}", text.unwrap_or_default());
}
