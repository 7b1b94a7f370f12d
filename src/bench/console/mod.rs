//! `ankusa bench --console`: the server-side latency of every page of the
//! operator console (`/ui/`) and the tenant portal (`/portal/`) with a large instance in
//! Redis, as an HTTP client on loopback sees it.
//!
//! The world: a private `redis-server`, the testkit receiver (in this process) and one
//! `ankusa worker` child with an admin listener and an operator token. The seed, committed
//! through the worker so that every state is one the worker made:
//!
//! - one big tenant with most hooks: a few delivered (attempt history and kept bodies), some
//!   dead-lettered (its endpoint answers `410`), some retrying (`503`, next attempt hours
//!   away), and the rest a backlog behind an endpoint that never answers (the tenant's
//!   window of 100 in-flight rows hangs, everything else waits due);
//! - every other tenant with one hook: nine in ten retrying (`503`), one in ten
//!   dead-lettered (`410`), so every tenant is in line and many have dead letters.
//!
//! Then every page is requested `--console-requests` times in a row (after a warm-up), each
//! timed from the request to the last byte of the answer. Per page: p50, p99, max, the Redis
//! commands one view costs (`INFO stats` over the timed requests, less the worker's own rate
//! measured with no page requested) and the calls Redis' `SLOWLOG` caught (the worker's
//! included). The admin API calls the pages make are timed the same way, so
//! that a slow page can be traced to the call that makes it slow.

mod seed;

use super::scripts::{slowlog, start_redis, SlowCalls};
use super::{info_field, percentile, print_report, spawn_worker_config, BenchArgs};
use crate::error::Error;
use crate::store::Store;
use crate::testkit::{Behavior, Receiver, ReceiverOptions, RedisServer};
use seed::{background_rate, free_port, other, seed, wait_until, worker_config, Seeded};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The target: every page's p99 at or under this (ms).
const TARGET_P99_MS: f64 = 100.0;
/// Receiver paths, by what they answer.
const OK: &str = "ok";
/// `410 Gone`: permanent, dead-lettered at the first attempt.
const GONE: &str = "gone";
/// `503`: retried after the (hours-long) backoff.
const DOWN: &str = "down";
/// Never answers: the big tenant's backlog waits behind it.
const HANG: &str = "hang";
/// The small tenants' endpoints (apart, to count their attempts).
const SMALL_DOWN: &str = "small-down";
/// The small tenants' dead endpoint.
const SMALL_GONE: &str = "small-gone";
/// The big tenant's id.
const BIG: &str = "big";
/// In-flight rows of the big tenant: the window its hanging endpoint holds.
const BIG_INFLIGHT: usize = 100;

/// How many hooks of the big tenant end in each state.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(super) struct Mix {
    /// Delivered (source `orders`, `200`).
    pub delivered: usize,
    /// Dead-lettered (source `invoices`, `410`).
    pub dead_lettered: usize,
    /// Retrying (source `payments`, `503`).
    pub retrying: usize,
    /// Waiting behind the hanging endpoint (source `events`).
    pub backlog: usize,
}

impl Mix {
    /// The big tenant's share of `hooks` when `small` tenants have one hook each.
    fn of(hooks: usize, small: usize) -> Mix {
        let big = hooks.saturating_sub(small);
        let delivered = (big / 100).clamp(1, 10_000);
        let dead_lettered = (big / 50).clamp(1, 20_000);
        let retrying = (big / 200).clamp(1, 5_000);
        Mix {
            delivered,
            dead_lettered,
            retrying,
            backlog: big.saturating_sub(delivered + dead_lettered + retrying),
        }
    }
}

/// The timing of one page or API call.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(super) struct PageTiming {
    /// What it is, in words.
    pub page: String,
    /// `GET` path (or `POST` for the replay dry run of the API).
    pub path: String,
    /// Who asks: `operator`, or `tenant <id>` (its token).
    pub who: String,
    /// Timed requests (after the warm-up).
    pub samples: usize,
    /// Answers other than 200.
    pub errors: usize,
    /// Status of the last answer.
    pub status: u16,
    /// Size of the last answer (bytes).
    pub bytes: usize,
    /// Median (ms).
    pub p50_ms: f64,
    /// 99th percentile (ms, nearest rank: with fewer than 51 samples, the max).
    pub p99_ms: f64,
    /// Slowest (ms).
    pub max_ms: f64,
    /// Redis commands per request, less the worker's background rate.
    pub redis_commands_per_view: f64,
    /// Calls Redis' SLOWLOG caught over `--slowlog-us` during the timed requests, by
    /// script or command.
    pub slow: BTreeMap<String, SlowCalls>,
}

/// The figures of `ankusa bench --console`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(super) struct ConsoleReport {
    /// Hooks committed in all.
    pub hooks: usize,
    /// Tenants (the big one and the small ones).
    pub tenants: usize,
    /// The big tenant's hooks by state.
    pub big: Mix,
    /// Small tenants with a retrying row.
    pub small_retrying: usize,
    /// Small tenants with a dead letter.
    pub small_dead_lettered: usize,
    /// Seconds to seed (commit and wait for the worker's attempts).
    pub seed_secs: f64,
    /// Redis `used_memory` once seeded (MiB).
    pub redis_used_memory_mib: f64,
    /// Redis commands per second with no page requested (the worker's own).
    pub background_commands_per_sec: f64,
    /// The target (ms).
    pub target_p99_ms: f64,
    /// Every page, then every admin API call.
    pub pages: Vec<PageTiming>,
    /// Pages (not API calls) over the target, with their p99.
    pub missed: Vec<String>,
}

/// Who a request speaks for.
#[derive(Clone, Copy)]
enum Who {
    /// `admin.token`.
    Operator,
    /// A token of the big tenant.
    Big,
    /// A token of the small tenant [`Seeded::small`].
    Small,
}

/// One thing to time.
struct Probe {
    /// Its name in the table.
    page: String,
    /// Path and query on the admin listener.
    path: String,
    /// Whose token it carries.
    who: Who,
    /// A JSON body: POST instead of GET.
    post: Option<serde_json::Value>,
}

/// A GET of `path` as `who`.
fn probe(page: &str, path: String, who: Who) -> Probe {
    Probe {
        page: page.to_string(),
        path,
        who,
        post: None,
    }
}

/// The HTTP client of the probes, and where the admin listener is.
struct Client {
    http: reqwest::Client,
    base: String,
    operator: String,
    big: String,
    small: String,
}

impl Client {
    fn bearer(&self, who: Who) -> String {
        let t = match who {
            Who::Operator => &self.operator,
            Who::Big => &self.big,
            Who::Small => &self.small,
        };
        format!("Bearer {t}")
    }

    /// One request; its status, its body and how long it took to the last byte.
    async fn send(&self, p: &Probe) -> Result<(u16, bytes::Bytes, Duration), Error> {
        let url = format!("{}{}", self.base, p.path);
        let req = match &p.post {
            Some(b) => self
                .http
                .post(url)
                .header("content-type", "application/json")
                .body(serde_json::to_vec(b).map_err(other)?),
            None => self.http.get(url),
        }
        .header("authorization", self.bearer(p.who));
        let t0 = Instant::now();
        let resp = req.send().await.map_err(other)?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(other)?;
        Ok((status, body, t0.elapsed()))
    }

    /// Mint a tenant token with every scope through `POST /admin/tokens`.
    async fn mint(&self, tenant: &str) -> Result<String, Error> {
        let p = Probe {
            page: String::new(),
            path: "/admin/tokens".into(),
            who: Who::Operator,
            post: Some(serde_json::json!({
                "tenant": tenant,
                "scopes": ["ingest", "read", "sources", "replay"],
                "ttl": "1d",
                "name": "bench --console",
                "create": true
            })),
        };
        let (status, body, _) = self.send(&p).await?;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        match v["token"].as_str() {
            Some(t) if status == 201 => Ok(t.to_string()),
            _ => Err(Error::Other(format!(
                "POST /admin/tokens for {tenant}: {status} {}",
                String::from_utf8_lossy(&body)
            ))),
        }
    }
}

/// Run the scenario and print its report.
pub(super) async fn run(args: &BenchArgs) -> Result<(), Error> {
    let hooks = args.console_hooks;
    let tenants = args.console_tenants.max(1);
    let small_n = tenants - 1;
    if hooks < small_n + 4 {
        return Err(Error::Other(format!(
            "--console-hooks {hooks} is too few for {tenants} tenants: at least {}",
            small_n + 4
        )));
    }
    let redis = start_redis(args)?;
    let receiver = Receiver::start_with(ReceiverOptions {
        record_bodies: false,
        threads: 1,
    })
    .map_err(other)?;
    receiver.set(GONE, Behavior::Status(410));
    receiver.set(SMALL_GONE, Behavior::Status(410));
    receiver.set(DOWN, Behavior::Status(503));
    receiver.set(SMALL_DOWN, Behavior::Status(503));
    receiver.set(HANG, Behavior::Hang);
    let (store, producer) = super::connect_instance(&redis, "console").await?;
    let dir = tempfile::tempdir().map_err(other)?;
    let admin = free_port()?;
    let operator = format!("bench-operator-{:032x}", rand::random::<u128>());
    let worker = spawn_worker_config(&dir, "console", &worker_config(&redis, admin, &operator))?;
    let mut client = Client {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(other)?,
        base: format!("http://127.0.0.1:{admin}"),
        operator,
        big: String::new(),
        small: String::new(),
    };
    let c = &client;
    wait_until("the worker's admin listener", 60, || async move {
        Ok(c.http
            .get(format!("{}/healthz", c.base))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success()))
    })
    .await?;
    let mix = Mix::of(hooks, small_n);
    let mut report = ConsoleReport {
        hooks,
        tenants,
        small_dead_lettered: small_n.div_ceil(10),
        small_retrying: small_n - small_n.div_ceil(10),
        big: mix.clone(),
        target_p99_ms: TARGET_P99_MS,
        ..Default::default()
    };
    eprintln!(
        "bench: console: redis {}, worker admin {}, {hooks} hooks over {tenants} tenants: {BIG} has {} delivered, {} dead-lettered, {} retrying, {} behind a hanging endpoint; {} small tenants with 1 hook ({} dead-lettered, the rest retrying)",
        redis.url(),
        client.base,
        mix.delivered,
        mix.dead_lettered,
        mix.retrying,
        mix.backlog,
        small_n,
        report.small_dead_lettered
    );
    let started = Instant::now();
    let seeded = seed(args, &store, &producer, &receiver, &mix, small_n).await?;
    report.seed_secs = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    report.redis_used_memory_mib =
        (info_field(&redis, "memory", "used_memory") / 1048576.0 * 10.0).round() / 10.0;
    eprintln!(
        "bench: seeded in {:.1} s, Redis holds {:.0} MiB",
        report.seed_secs, report.redis_used_memory_mib
    );
    client.big = client.mint(BIG).await?;
    client.small = client.mint(&seeded.small).await?;
    report.background_commands_per_sec = background_rate(&redis).await;
    eprintln!(
        "bench: {:.0} Redis commands/s with no page requested (the worker's own)",
        report.background_commands_per_sec
    );
    for p in probes(&seeded) {
        let t = time_probe(args, &redis, &store, &client, &p, &report).await?;
        eprintln!(
            "bench: {:<44} {:>4} × p50 {:>8.1} ms  p99 {:>8.1} ms  max {:>8.1} ms  {:>8.0} cmds/view{}",
            t.page,
            t.samples,
            t.p50_ms,
            t.p99_ms,
            t.max_ms,
            t.redis_commands_per_view,
            if t.errors > 0 {
                format!("  ({} answers not 200, last {})", t.errors, t.status)
            } else {
                String::new()
            }
        );
        report.pages.push(t);
    }
    drop(worker);
    report.missed = report
        .pages
        .iter()
        .filter(|p| !p.page.starts_with("api "))
        .filter(|p| p.p99_ms > TARGET_P99_MS || p.errors > 0)
        .map(|p| format!("{} ({}): p99 {:.1} ms", p.page, p.path, p.p99_ms))
        .collect();
    print_table(&report);
    print_csv(args, &report);
    print_report(&report, args.json);
    Ok(())
}

/// Every page, then the admin API calls behind them.
fn probes(s: &Seeded) -> Vec<Probe> {
    let b = format!("/ui/tenants/{BIG}");
    let small = &s.small;
    // A search that matches ten small tenants (`t0001…`).
    let q = small.get(..small.len().saturating_sub(1)).unwrap_or(small);
    let mut v = vec![
        probe("ui overview", "/ui/".into(), Who::Operator),
        probe("ui tenants", "/ui/tenants".into(), Who::Operator),
        probe(
            "ui tenants by bytes",
            "/ui/tenants?by=bytes".into(),
            Who::Operator,
        ),
        probe(
            "ui tenants search",
            format!("/ui/tenants?q={q}"),
            Who::Operator,
        ),
        probe("ui tenant (big)", b.clone(), Who::Operator),
        probe(
            "ui tenant (small)",
            format!("/ui/tenants/{small}"),
            Who::Operator,
        ),
        probe(
            "ui deliveries (big)",
            format!("{b}/deliveries"),
            Who::Operator,
        ),
        probe(
            "ui deliveries (big) state=retrying",
            format!("{b}/deliveries?state=retrying"),
            Who::Operator,
        ),
        probe(
            "ui deliveries (big) state=dead_lettered",
            format!("{b}/deliveries?state=dead_lettered"),
            Who::Operator,
        ),
        probe(
            "ui deliveries (big) event_type",
            format!("{b}/deliveries?event_type=user.updated"),
            Who::Operator,
        ),
        probe(
            "ui deliveries (big) source+state+page",
            format!("{b}/deliveries?source=events&state=due&page=3"),
            Who::Operator,
        ),
        probe(
            "ui deliveries (small)",
            format!("/ui/tenants/{small}/deliveries"),
            Who::Operator,
        ),
        probe(
            "ui hook delivered (big)",
            format!("{b}/hooks/{}", s.delivered_hook),
            Who::Operator,
        ),
        probe(
            "ui hook dead-lettered (big)",
            format!("{b}/hooks/{}", s.dead_hook),
            Who::Operator,
        ),
        probe(
            "ui hook retrying (big)",
            format!("{b}/hooks/{}", s.retrying_hook),
            Who::Operator,
        ),
        probe(
            "ui hook in the backlog (big)",
            format!("{b}/hooks/{}", s.backlog_hook),
            Who::Operator,
        ),
        probe(
            "ui hook (small)",
            format!("/ui/tenants/{small}/hooks/{}", s.small_hook),
            Who::Operator,
        ),
        probe("ui dlq", "/ui/dlq".into(), Who::Operator),
        probe(
            "ui dlq tenant=big",
            format!("/ui/dlq?tenant={BIG}"),
            Who::Operator,
        ),
        probe(
            "ui dlq reason matching none",
            "/ui/dlq?reason=retry_horizon".into(),
            Who::Operator,
        ),
        probe(
            "ui dlq replay preview tenant=big",
            format!("/ui/dlq/replay?tenant={BIG}"),
            Who::Operator,
        ),
        probe(
            "ui dlq replay preview (all)",
            "/ui/dlq/replay".into(),
            Who::Operator,
        ),
        probe("ui config", "/ui/config".into(), Who::Operator),
        probe("portal endpoints (big)", "/portal/".into(), Who::Big),
        probe(
            "portal deliveries (big)",
            "/portal/deliveries".into(),
            Who::Big,
        ),
        probe(
            "portal deliveries (big) state=dead_lettered",
            "/portal/deliveries?state=dead_lettered".into(),
            Who::Big,
        ),
        probe(
            "portal hook delivered (big)",
            format!("/portal/hooks/{}", s.delivered_hook),
            Who::Big,
        ),
        probe(
            "portal hook dead-lettered (big)",
            format!("/portal/hooks/{}", s.dead_hook),
            Who::Big,
        ),
        probe("portal endpoints (small)", "/portal/".into(), Who::Small),
        probe(
            "portal deliveries (small)",
            "/portal/deliveries".into(),
            Who::Small,
        ),
        probe(
            "portal hook (small)",
            format!("/portal/hooks/{}", s.small_hook),
            Who::Small,
        ),
    ];
    for (page, path) in [
        ("api state", "/admin/state".to_string()),
        ("api pressure", "/admin/pressure".into()),
        ("api events", "/admin/events".into()),
        ("api tenants top 10", "/admin/tenants/top?limit=10".into()),
        (
            "api tenants top 1000",
            "/admin/tenants/top?limit=1000&by=rows".into(),
        ),
        (
            "api tenants top tenant=big",
            format!("/admin/tenants/top?tenant={BIG}"),
        ),
        (
            "api rows big limit=1000",
            format!("/admin/rows?tenant={BIG}&limit=1000"),
        ),
        (
            "api dlq big limit=1000",
            format!("/admin/dlq?tenant={BIG}&limit=1000"),
        ),
        ("api dlq limit=100", "/admin/dlq?limit=100".into()),
        (
            "api hook dead-lettered (big)",
            format!("/admin/hooks/{BIG}/{}", s.dead_hook),
        ),
        (
            "api hook delivered (big)",
            format!("/admin/hooks/{BIG}/{}", s.delivered_hook),
        ),
    ] {
        v.push(probe(page, path, Who::Operator));
    }
    for (page, filter) in [
        (
            "api dlq replay dry run tenant=big",
            serde_json::json!({"tenant": BIG}),
        ),
        ("api dlq replay dry run (all)", serde_json::json!({})),
    ] {
        v.push(Probe {
            page: page.into(),
            path: "/admin/dlq/replay".into(),
            who: Who::Operator,
            post: Some(serde_json::json!({"filter": filter, "options": {"dry_run": true}})),
        });
    }
    v
}

/// Time one probe: a warm-up, then up to `--console-requests` requests in a row, or fewer
/// when they take longer than `--console-page-secs` (at least 3).
async fn time_probe(
    args: &BenchArgs,
    redis: &RedisServer,
    store: &Store,
    client: &Client,
    p: &Probe,
    report: &ConsoleReport,
) -> Result<PageTiming, Error> {
    let budget = Duration::from_secs(args.console_page_secs.max(1));
    let mut t = PageTiming {
        page: p.page.clone(),
        path: p.path.clone(),
        who: match p.who {
            Who::Operator => "operator".into(),
            Who::Big => format!("tenant {BIG}"),
            Who::Small => "tenant (small)".into(),
        },
        ..Default::default()
    };
    let warm = Instant::now();
    for _ in 0..args.console_warmup {
        let (status, body, _) = client.send(p).await?;
        if status != 200 {
            eprintln!(
                "bench: {} {}: {status}: {}",
                p.page,
                p.path,
                String::from_utf8_lossy(&body[..body.len().min(300)])
            );
        }
        if warm.elapsed() > budget / 4 {
            break;
        }
    }
    let _ = slowlog(store).await?;
    let n0 = info_field(redis, "stats", "total_commands_processed");
    let started = Instant::now();
    let mut ms = Vec::new();
    while ms.len() < args.console_requests.max(1) && (ms.len() < 3 || started.elapsed() < budget) {
        let (status, body, took) = client.send(p).await?;
        ms.push(took.as_secs_f64() * 1000.0);
        t.status = status;
        t.bytes = body.len();
        if status != 200 {
            t.errors += 1;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n1 = info_field(redis, "stats", "total_commands_processed");
    t.slow = slowlog(store).await?;
    ms.sort_by(|a, b| a.total_cmp(b));
    let round = |x: f64| (x * 10.0).round() / 10.0;
    t.samples = ms.len();
    t.p50_ms = round(percentile(&ms, 0.5));
    t.p99_ms = round(percentile(&ms, 0.99));
    t.max_ms = round(ms.last().copied().unwrap_or(0.0));
    // Less the worker's own commands over the same time and the SLOWLOG and INFO calls.
    let own = report.background_commands_per_sec * elapsed + 3.0;
    t.redis_commands_per_view = ((n1 - n0 - own).max(0.0) / ms.len() as f64).round();
    Ok(t)
}

/// The table on stdout: per page p50, p99 and max, the Redis commands of one view, and
/// whether it meets the target.
fn print_table(report: &ConsoleReport) {
    println!(
        "{:<44} {:>7} {:>9} {:>9} {:>9} {:>10}  verdict",
        "page", "samples", "p50 ms", "p99 ms", "max ms", "cmds/view"
    );
    for p in &report.pages {
        let verdict = if p.errors > 0 {
            format!("{} answers not 200", p.errors)
        } else if p.page.starts_with("api ") {
            String::new()
        } else if p.p99_ms <= TARGET_P99_MS {
            "met".into()
        } else {
            format!("MISSED ({:.1}× the target)", p.p99_ms / TARGET_P99_MS)
        };
        println!(
            "{:<44} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>10.0}  {verdict}",
            p.page, p.samples, p.p50_ms, p.p99_ms, p.max_ms, p.redis_commands_per_view
        );
    }
}

/// Every page as CSV on stdout (for BENCHMARKS.md), like the `--scripts` scenario's.
fn print_csv(args: &BenchArgs, report: &ConsoleReport) {
    println!("page,path,who,samples,errors,bytes,p50_ms,p99_ms,max_ms,redis_cmds_per_view,slowlog_us,slow_calls,slowest_ms,slowest_command");
    for p in &report.pages {
        let slowest = p.slow.iter().max_by_key(|(_, s)| s.max_us);
        println!(
            "{},{},{},{},{},{},{:.1},{:.1},{:.1},{:.0},{},{},{:.1},{}",
            p.page,
            p.path.replace(',', "%2C"),
            p.who,
            p.samples,
            p.errors,
            p.bytes,
            p.p50_ms,
            p.p99_ms,
            p.max_ms,
            p.redis_commands_per_view,
            args.slowlog_us,
            p.slow.values().map(|s| s.count).sum::<u64>(),
            slowest.map_or(0.0, |(_, s)| s.max_us as f64 / 1000.0),
            slowest.map_or("", |(n, _)| n.as_str())
        );
    }
}
