//! Helpers of the multi-process tests (`tests/pool.rs`, `tests/faults.rs`): talk to worker
//! processes over their admin HTTP API, read their memory, and check a run's counts
//! exactly against the receiver and Redis.
#![allow(dead_code)]

use super::{free_port, Env, WorkerProcess, LIVENESS};
use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How often the multi-process tests look at processes they cannot await (their admin API,
/// Redis): a poll interval, never a synchronisation by itself.
pub const POLL: Duration = Duration::from_millis(20);

/// Poll `probe` every [`POLL`] until it answers `Some(value)`, and answer the value; panics
/// naming `what` (and `probe`'s last answer) after `bound`. For state a test cannot await
/// (a worker's admin API, Redis, a CLI); never a synchronisation by itself.
pub async fn eventually<T, F, Fut>(what: &str, bound: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + bound;
    loop {
        let last = match probe().await {
            Ok(v) => return v,
            Err(last) => last,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {bound:?} waiting until {what}: {last}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Poll `cond` every [`POLL`] until it holds or `timeout` passes; returns whether it held.
pub async fn poll_until<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A short-timeout HTTP client for admin endpoints (a stopped process must not hang a test).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .no_proxy()
        .build()
        .expect("http client")
}

/// GET `http://<admin><path>`: `(status, body)`, `None` when the process does not answer.
pub async fn get(admin: &str, path: &str) -> Option<(u16, String)> {
    let r = http()
        .get(format!("http://{admin}{path}"))
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    Some((status, r.text().await.ok()?))
}

/// `/readyz` as JSON: `Some(json)` when it answered 200.
pub async fn readyz(admin: &str) -> Option<serde_json::Value> {
    match get(admin, "/readyz").await {
        Some((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// Whether the worker answers `/readyz` with `leader: true`.
pub async fn is_leader(admin: &str) -> bool {
    readyz(admin).await.is_some_and(|j| j["leader"] == true)
}

/// The worker's node id, from `/readyz`.
pub async fn node_id(admin: &str) -> Option<String> {
    readyz(admin)
        .await
        .and_then(|j| j["node_id"].as_str().map(str::to_string))
}

/// Wait until the worker answers `/readyz` (Redis reachable, not draining).
pub async fn wait_ready(w: &WorkerProcess) {
    assert!(
        poll_until(LIVENESS, || async { readyz(&w.admin).await.is_some() }).await,
        "worker never ready:\n{}",
        w.log_text()
    );
}

/// Wait until the worker leads.
pub async fn wait_leader(w: &WorkerProcess) {
    assert!(
        poll_until(LIVENESS, || async { is_leader(&w.admin).await }).await,
        "worker never led:\n{}",
        w.log_text()
    );
}

/// The sum of every series of metric `name` whose label set contains each of `labels`
/// (`key="value"` strings) on the worker's `/metrics`; 0 when absent. `None` when the worker
/// does not answer.
pub async fn metric(admin: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let (_, text) = get(admin, "/metrics").await?;
    Some(metric_in(&text, name, labels))
}

/// [`metric`] on a scraped text.
pub fn metric_in(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = match series.split_once('{') {
                Some((m, r)) => (m, r),
                None => (series, ""),
            };
            (metric == name && labels.iter().all(|lb| rest.contains(lb)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Resident memory of a process, KiB, from `/proc/<pid>/status` (`VmRSS`).
pub fn rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Spawn `ankusa worker` like [`WorkerProcess::spawn`], optionally run through `wrapper`
/// (e.g. `["faketime", "-f", "+6h"]`) and with extra environment variables.
pub fn spawn_worker(
    config: &Path,
    dir: &tempfile::TempDir,
    name: &str,
    wrapper: &[&str],
    envs: &[(&str, &str)],
) -> WorkerProcess {
    let admin = format!("127.0.0.1:{}", free_port());
    let log = dir
        .path()
        .join(format!("{name}-{}.log", admin.replace([':', '.'], "_")));
    let out = std::fs::File::create(&log).expect("log file");
    let bin = env!("CARGO_BIN_EXE_ankusa");
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.args(["worker", "--config"])
        .arg(config)
        .args(["--listen", &admin, "--name", name])
        .env("ANKUSA_LOG", "info,fred=warn")
        // The tests share one process: a variable one sets for its own in-process worker
        // (security's operator token) must not reach another's worker process.
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(out);
    let child = super::dies_with_test(&mut cmd)
        .spawn()
        .expect("ankusa binary starts");
    WorkerProcess { child, admin, log }
}

/// What the receiver saw of a run: row id (`ankusa-delivery-id`) → 2xx receipts.
#[derive(Debug)]
pub struct Receipts {
    /// 2xx receipts per row id.
    pub per_row: HashMap<String, usize>,
    /// All 2xx receipts.
    pub total: usize,
}

impl Receipts {
    /// Rows received more than once, counted once per extra receipt.
    pub fn duplicates(&self) -> usize {
        self.total - self.per_row.len()
    }
}

/// The receiver's 2xx receipts by `ankusa-delivery-id`.
pub fn receipts(env: &Env) -> Receipts {
    receipts_of(&env.receiver)
}

/// [`receipts`] of any receiver (a test whose world is not an [`Env`]).
pub fn receipts_of(receiver: &ankusa::testkit::Receiver) -> Receipts {
    let mut per_row = HashMap::new();
    let mut total = 0;
    for r in receiver.requests() {
        if (200..300).contains(&r.status) {
            if let Some(id) = r.header("ankusa-delivery-id") {
                *per_row.entry(id.to_string()).or_insert(0) += 1;
                total += 1;
            }
        }
    }
    Receipts { per_row, total }
}

/// Block until the instance is idle by Redis (nothing claimed, running or due): `ankusa tick`.
/// Redis errors (a restart under way) are retried until `timeout`.
pub async fn wait_idle(env: &Env, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, ankusa::ops::tick(&env.store, None)).await {
            Ok(Ok(_)) => return,
            Ok(Err(_)) if Instant::now() < deadline => tokio::time::sleep(POLL).await,
            r => panic!(
                "not idle within {timeout:?}: {r:?}; totals {:?}",
                env.store.totals().await
            ),
        }
    }
}

/// Check a run exactly: every one of `hooks × sinks` rows reached the receiver at least once,
/// no other row did, duplicates ≤ `window`; Redis counts every row delivered exactly once,
/// no dead letter, nothing claimed. Returns the duplicates.
pub async fn check_exact(env: &Env, hooks: &[u64], sinks: u32, window: usize) -> usize {
    let rows = hooks.len() * sinks as usize;
    let got = receipts(env);
    let missing: Vec<String> = hooks
        .iter()
        .flat_map(|h| (0..sinks).map(move |s| format!("{h}.{s}")))
        .filter(|id| !got.per_row.contains_key(id))
        .take(10)
        .collect();
    assert!(
        missing.is_empty(),
        "rows never delivered (first 10): {missing:?}"
    );
    assert_eq!(got.per_row.len(), rows, "distinct rows received");
    let dups = got.duplicates();
    assert!(dups <= window, "{dups} duplicates > window {window}");
    let t = env.store.totals().await.expect("totals");
    assert_eq!(t.committed, hooks.len() as u64, "{t:?}");
    assert_eq!(t.delivered, rows as u64, "{t:?}");
    assert_eq!((t.dead_lettered, t.dropped), (0, 0), "{t:?}");
    assert!(
        ankusa::dlq::tenants(&env.store)
            .await
            .expect("dlq tenants")
            .is_empty(),
        "dead letters"
    );
    assert_eq!(
        env.store.claimed_count().await.expect("claimed"),
        0,
        "claimed set empty"
    );
    dups
}

/// Write `env`'s worker config, adjusted by `tune`, to `dir/<file>`; returns the path.
pub fn write_config(
    env: &Env,
    dir: &tempfile::TempDir,
    file: &str,
    tune: impl FnOnce(&mut ankusa::config::Config),
) -> std::path::PathBuf {
    let mut c = env.config.clone();
    tune(&mut c);
    write_config_of(&c, dir, file)
}

/// Write `config` to `dir/<file>` for worker processes; returns the path.
pub fn write_config_of(
    c: &ankusa::config::Config,
    dir: &tempfile::TempDir,
    file: &str,
) -> std::path::PathBuf {
    c.validate().expect("test config is valid");
    let path = dir.path().join(file);
    std::fs::write(&path, toml::to_string(c).expect("config serialises")).expect("config written");
    path
}

/// Wait for a worker process to exit; its exit status, `None` if it still runs after `timeout`.
pub async fn wait_exit(
    w: &mut WorkerProcess,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = w.child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The node id in a lease token `<node id>:<epoch>`.
pub fn token_node(token: &str) -> &str {
    token.rsplit_once(':').map_or(token, |(n, _)| n)
}

/// The node id of the lease holder now, if any.
pub async fn lease_node(env: &Env) -> Option<String> {
    env.store
        .lease_holder()
        .await
        .ok()
        .flatten()
        .map(|(t, _)| token_node(&t).to_string())
}

/// libfaketime's preload library, for a worker whose wall clock is skewed (`LD_PRELOAD` with
/// `FAKETIME`). The `faketime` wrapper is not used: it forks and waits, so stopping it would
/// leave the worker running; the worker preloads the library itself and is the child a test
/// stops.
pub fn libfaketime() -> &'static str {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
        "/usr/local/lib/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("this test needs libfaketime (Debian/Ubuntu: apt-get install -y faketime; .ci/run installs it)")
}
