//! Observability: the metrics a running worker exports, the catalogue in
//! `docs/metrics.md`, the Grafana dashboards, the Prometheus alert rules (checked and
//! unit-tested with `promtool`) and a real Prometheus scraping a real worker with the compose
//! stack's scrape config. A renamed metric cannot silently blank a panel or mute an alert.
//!
//! Tests that need `promtool` or `prometheus` (Debian package `prometheus`, installed by
//! `.ci/run`) skip with a loud message only when the binary is missing.

mod catalogue;
mod log_panels;
use crate::common;
mod prometheus;

use ankusa::testkit::Behavior;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn root(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

// ---------------------------------------------------------------------------------------
// What the repository's files say
// ---------------------------------------------------------------------------------------

/// The dashboards: `(file name, parsed JSON)`.
fn dashboards() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root("grafana/dashboards")).expect("grafana/dashboards exists") {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            out.push((p.file_name().unwrap().to_string_lossy().into_owned(), v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every panel of a dashboard, rows' nested panels included.
fn panels(dash: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().into_iter().flatten() {
        out.push(p);
        for inner in p["panels"].as_array().into_iter().flatten() {
            out.push(inner);
        }
    }
    out
}

/// The PromQL of a dashboard: `(where, expression)` for every panel target and every
/// templating query.
fn dashboard_exprs(name: &str, dash: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(dash) {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push((
                    format!(
                        "{name}: panel {:?} target {}",
                        p["title"].as_str().unwrap_or(""),
                        t["refId"]
                    ),
                    e.to_string(),
                ));
            }
        }
    }
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] == "query" {
            let q = v["query"]["query"]
                .as_str()
                .or_else(|| v["query"].as_str())
                .unwrap_or_default();
            out.push((format!("{name}: variable {}", v["name"]), q.to_string()));
        }
    }
    out
}

/// `(alert name, expression)` of every rule in `prometheus/alerts.yml`. A plain reader of
/// `- alert:` and `expr:` lines (block scalars included); the count is cross-checked against
/// the `- alert:` lines so that no rule can be skipped.
fn alert_rules() -> Vec<(String, String)> {
    let text = read("prometheus/alerts.yml");
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut name = String::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_start();
        if let Some(n) = l.strip_prefix("- alert:") {
            name = n.trim().to_string();
        } else if let Some(e) = l.strip_prefix("expr:") {
            let e = e.trim();
            let expr = if e == "|" || e == ">" || e.starts_with("|-") || e.starts_with(">-") {
                let indent = lines[i].len() - l.len();
                let mut body = Vec::new();
                while i + 1 < lines.len()
                    && (lines[i + 1].trim().is_empty()
                        || lines[i + 1].len() - lines[i + 1].trim_start().len() > indent)
                {
                    i += 1;
                    body.push(lines[i].trim());
                }
                body.join(" ")
            } else {
                e.trim_matches(|c| c == '\'' || c == '"').to_string()
            };
            assert!(
                !name.is_empty(),
                "alerts.yml: an expr before any `- alert:`"
            );
            out.push((std::mem::take(&mut name), expr));
        }
        i += 1;
    }
    let alerts = lines
        .iter()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    assert_eq!(
        out.len(),
        alerts,
        "alerts.yml: every `- alert:` has exactly one expr"
    );
    assert!(alerts >= 5, "alerts.yml has {alerts} alerts");
    out
}

/// The metric names a PromQL expression reads, loosely: identifiers starting with
/// `ankusa_` outside label matchers (`{…}`), strings, grouping lists (`by (…)`,
/// `on (…)`…) and Grafana variables (`$…`). `label_values(metric, label)` reads `metric`.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let expr = expr.trim();
    if let Some(args) = expr
        .strip_prefix("label_values(")
        .and_then(|a| a.strip_suffix(')'))
    {
        return match args.rsplit_once(',') {
            Some((metric, _label)) => metric_names(metric),
            None => BTreeSet::new(), // label_values(label): no metric
        };
    }
    let b = expr.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    let mut last_ident = String::new();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' || c == b'`' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == b'{' {
            while i < b.len() && b[i] != b'}' {
                if b[i] == b'"' {
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                }
                i += 1;
            }
            i += 1;
        } else if c == b'('
            && matches!(
                last_ident.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            )
        {
            while i < b.len() && b[i] != b')' {
                i += 1;
            }
            i += 1;
            last_ident.clear();
        } else if c == b'$' {
            i += 1;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let w = &expr[start..i];
            if w.starts_with("ankusa_") {
                out.insert(w.to_string());
            }
            last_ident = w.to_string();
        } else {
            if !c.is_ascii_whitespace() {
                last_ident.clear();
            }
            i += 1;
        }
    }
    out
}

/// The catalogue of `docs/metrics.md`: name → (type, status) from its table rows
/// `| \`name\` | type | unit | labels | meaning | status |`.
fn catalogue() -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for l in read("docs/metrics.md").lines() {
        let Some((family, rest)) = ["ankusa_", "process_"]
            .into_iter()
            .find_map(|f| l.strip_prefix(&format!("| `{f}")).map(|r| (f, r)))
        else {
            continue;
        };
        let cols: Vec<&str> = l.split('|').map(str::trim).collect();
        assert!(
            cols.len() >= 8,
            "docs/metrics.md: a catalogue row needs 6 columns: {l}"
        );
        let name = format!("{family}{}", rest.split('`').next().unwrap());
        let prev = out.insert(name.clone(), (cols[2].to_string(), cols[6].to_string()));
        assert!(prev.is_none(), "docs/metrics.md lists {name} twice");
    }
    out
}

/// What `src/metrics.rs` describes (its catalogue table): name → type (`counter`, `gauge`,
/// `histogram`).
fn described() -> BTreeMap<String, String> {
    use ankusa::metrics::{Kind, CATALOGUE};
    let text = read("src/metrics.rs");
    let mut out = BTreeMap::new();
    for m in CATALOGUE {
        let kind = match m.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let prev = out.insert(m.name.to_string(), kind.to_string());
        assert!(prev.is_none(), "src/metrics.rs catalogues {} twice", m.name);
    }
    // The standard process family, described by the `metrics-process` collector that
    // src/metrics.rs installs.
    if text.contains("metrics_process::Collector") {
        out.insert("process_cpu_seconds_total".into(), "counter".into());
        for g in [
            "process_open_fds",
            "process_max_fds",
            "process_virtual_memory_bytes",
            "process_virtual_memory_max_bytes",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_threads",
        ] {
            out.insert(g.into(), "gauge".into());
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// A running worker
// ---------------------------------------------------------------------------------------

/// The exposition of one scrape.
struct Scrape {
    text: String,
}

impl Scrape {
    /// Sample names as they appear (`…_bucket`, `…_sum`, `…_count` for histograms).
    fn sample_names(&self) -> BTreeSet<String> {
        self.text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
            .collect()
    }

    /// `# TYPE` lines: family → type.
    fn families(&self) -> BTreeMap<String, String> {
        self.lines_after("# TYPE ")
    }

    /// `# HELP` lines: family → text.
    fn helps(&self) -> BTreeMap<String, String> {
        self.lines_after("# HELP ")
    }

    fn lines_after(&self, prefix: &str) -> BTreeMap<String, String> {
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    /// The value of the sample `name` whose labels include every `k="v"` of `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (n, rest) = series.split_once('{').unwrap_or((series, ""));
                let all = labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
                (n == name && all).then(|| value.parse().ok()).flatten()
            })
    }
}

/// A worker process with traffic behind it: 3 hooks committed through its ingest endpoint to
/// a source with a healthy sink (`ok`) and one answering 410 (`gone`), all settled.
struct Running {
    env: Env,
    worker: WorkerProcess,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
}

const HOOKS: usize = 3;

async fn running_worker_with_traffic() -> Running {
    running_worker_with(|_| {}).await
}

/// [`running_worker_with_traffic`] whose worker's config `tune` adjusts.
async fn running_worker_with(tune: impl FnOnce(&mut ankusa::config::Config)) -> Running {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["ok", "gone"]).await;
    env.receiver.set("gone", Behavior::Status(410));
    let dir = tempfile::tempdir().unwrap();
    // A listed tenant, so the per-tenant panels have their series.
    let cfg = env.config_file(&dir, |c| {
        c.history.metrics_tenants = vec!["acme".into()];
        tune(c);
    });
    let worker = WorkerProcess::spawn(&cfg, &dir, "obs");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let r = Running {
        env,
        worker,
        _dir: dir,
        http,
    };
    // Ingest through the worker, so that its own ankusa_commits_total counts the hooks.
    for n in 0..HOOKS {
        let url = format!("http://{}/v1/hooks/acme/orders", r.worker.admin);
        let resp = poll(LIVENESS, || async {
            r.http
                .post(&url)
                .header("content-type", "application/json")
                .body(format!("{{\"order\":{n}}}"))
                .send()
                .await
                .ok()
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "worker's ingest endpoint never answered; log:\n{}",
                r.worker.log_text()
            )
        });
        assert_eq!(
            resp.status().as_u16(),
            202,
            "ingest answered {}",
            resp.status()
        );
    }
    let seen = r.env.receiver.wait_until_async(LIVENESS, |rs| {
        rs.iter().filter(|x| x.path == "ok").count() == HOOKS
            && rs.iter().filter(|x| x.path == "gone").count() == HOOKS
    });
    assert!(
        seen.await,
        "receiver saw {} requests; worker log:\n{}",
        r.env.receiver.count(),
        r.worker.log_text()
    );
    r
}

impl Running {
    async fn scrape(&self) -> Scrape {
        let url = format!("http://{}/metrics", self.worker.admin);
        let resp = self.http.get(&url).send().await.expect("GET /metrics");
        assert_eq!(resp.status().as_u16(), 200);
        Scrape {
            text: resp.text().await.unwrap(),
        }
    }

    /// Scrape until `done` holds (the worker records an attempt's outcome just after the
    /// receiver saw it) or `LIVENESS` passes; returns the last scrape.
    async fn scrape_until(&self, done: impl Fn(&Scrape) -> bool) -> Scrape {
        let deadline = Instant::now() + LIVENESS;
        loop {
            let s = self.scrape().await;
            if done(&s) || Instant::now() > deadline {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Call `f` until it returns `Some` or `limit` passes (for processes that offer no event to
/// wait on).
async fn poll<T, F, Fut>(limit: Duration, f: F) -> Option<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every `ankusa_` name the dashboards and alert rules read, with where each is used.
fn used_names() -> BTreeMap<String, Vec<String>> {
    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, dash) in dashboards() {
        for (at, expr) in dashboard_exprs(&file, &dash) {
            for n in metric_names(&expr) {
                used.entry(n).or_default().push(at.clone());
            }
        }
    }
    for (alert, expr) in alert_rules() {
        for n in metric_names(&expr) {
            used.entry(n)
                .or_default()
                .push(format!("prometheus/alerts.yml: {alert}"));
        }
    }
    used
}

fn tool(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn skip(what: &str) {
    eprintln!("\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    eprintln!(
        "!!! SKIPPED: {what} is not installed (Debian package `prometheus`; .ci/run installs it)"
    );
    eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_in_the_dashboards_and_alert_rules_is_exported_by_a_running_worker() {
    let r = running_worker_with_traffic().await;
    // The delivery log's panels need a worker with a log store: log_panels.rs.
    let mut used = used_names();
    used.retain(|n, _| !n.starts_with("ankusa_log_"));
    assert!(used.len() >= 15, "{used:?}");
    let s = r
        .scrape_until(|s| {
            let names = s.sample_names();
            used.keys().all(|n| names.contains(n))
                && s.value("ankusa_deliveries_total", &[("outcome", "delivered")])
                    == Some(HOOKS as f64)
                && s.value("ankusa_dead_letters_total", &[("reason", "permanent")])
                    == Some(HOOKS as f64)
                && s.value(
                    "ankusa_partition_hooks_committed_total",
                    &[("partition", "0")],
                ) == Some(HOOKS as f64)
        })
        .await;
    let names = s.sample_names();
    let missing: BTreeMap<_, _> = used.iter().filter(|(n, _)| !names.contains(*n)).collect();
    assert!(missing.is_empty(), "used but not exported by a running worker (rename? typo? a histogram without _bucket?):\n{missing:#?}\n\n/metrics:\n{}", s.text);

    // The numbers are the user's: what was committed, delivered and dead-lettered.
    let labels = [("ankusa_instance", r.env.config.instance.as_str())];
    assert_eq!(
        s.value("ankusa_commits_total", &labels),
        Some(HOOKS as f64),
        "{}",
        s.text
    );
    assert_eq!(
        s.value(
            "ankusa_deliveries_total",
            &[("module", "http"), ("outcome", "delivered")]
        ),
        Some(HOOKS as f64)
    );
    assert_eq!(
        s.value(
            "ankusa_deliveries_total",
            &[("module", "http"), ("outcome", "dead_lettered")]
        ),
        Some(HOOKS as f64)
    );
    assert_eq!(
        s.value(
            "ankusa_deliveries_total",
            &[("module", "http"), ("outcome", "retry")]
        ),
        Some(0.0)
    );
    assert_eq!(
        s.value("ankusa_dead_letters_total", &[("reason", "permanent")]),
        Some(HOOKS as f64)
    );
    assert_eq!(
        s.value("ankusa_dead_letters_total", &[("reason", "sink_gone")]),
        Some(0.0),
        "rare reasons are exported at 0"
    );
    assert_eq!(
        s.value("ankusa_redis_errors_total", &[("kind", "oom")]),
        Some(0.0)
    );
    // Operational events are exported at 0 before the first one is posted (none here).
    for name in ["ankusa_operator_events_total", "ankusa_tenant_events_total"] {
        for result in ["ok", "failed"] {
            assert_eq!(s.value(name, &[("result", result)]), Some(0.0), "{name}");
        }
    }
    assert_eq!(s.value("ankusa_leader", &labels), Some(1.0));
    assert_eq!(
        s.value("ankusa_attempt_duration_seconds_count", &[("result", "ok")]),
        Some(HOOKS as f64)
    );
    assert_eq!(
        s.value(
            "ankusa_attempt_duration_seconds_count",
            &[("result", "error")]
        ),
        Some(HOOKS as f64)
    );
    assert_eq!(
        s.value(
            "ankusa_delivery_latency_seconds_count",
            &[("module", "http")]
        ),
        Some(HOOKS as f64)
    );

    // Hooks committed through Redis are counted too (the commit script's own count), and a
    // partition-labelled gauge has no unlabelled series stuck at 0 beside it.
    assert_eq!(
        s.value(
            "ankusa_partition_hooks_unmatched_total",
            &[("partition", "0")]
        ),
        Some(0.0),
        "{}",
        s.text
    );
    for name in ankusa::metrics::PARTITIONED {
        let lines: Vec<&str> = s
            .text
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .collect();
        assert!(!lines.is_empty(), "{name} not exported");
        for l in lines {
            assert!(
                l.contains("partition=\""),
                "{name} without its partition label: {l}"
            );
        }
    }

    // Every series names the instance under a label Prometheus will not rename.
    for l in s.text.lines().filter(|l| l.starts_with("ankusa_")) {
        assert!(
            l.contains(&format!("ankusa_instance=\"{}\"", r.env.config.instance)),
            "series without the instance label: {l}"
        );
        assert!(
            !l.contains("{instance=") && !l.contains(",instance="),
            "`instance` is Prometheus' target label: {l}"
        );
    }

    // Everything exported is described and catalogued as exported.
    let catalogue = catalogue();
    let helps = s.helps();
    for (family, kind) in s.families() {
        assert!(
            helps.contains_key(&family),
            "{family} is exported without a description (src/metrics.rs describe())"
        );
        match catalogue.get(&family) {
            Some((k, status)) => {
                assert_eq!(k, &kind, "docs/metrics.md gives {family} the wrong type");
                assert_eq!(
                    status, "exported",
                    "{family} is exported now: mark it `exported` in docs/metrics.md"
                );
            }
            None => panic!("{family} is exported but not catalogued in docs/metrics.md"),
        }
    }
}

/// A Prometheus server, killed on drop.
struct Prometheus {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON body of a response (`Null` when it is not JSON).
async fn json_of(r: reqwest::Response) -> Value {
    let text = r.text().await.unwrap_or_default();
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

impl Prometheus {
    async fn query(&self, http: &reqwest::Client, q: &str) -> Value {
        let r = http
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", q)])
            .send()
            .await;
        match r {
            Ok(r) => json_of(r).await,
            Err(_) => Value::Null,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The compose stack's `prometheus/prometheus.yml` with its targets pointed at `target`, its
/// rule file at the repository's, and a 1 s interval: each change must match exactly once,
/// so the file under test is the file the stack runs.
fn test_prometheus_config(target: &str) -> String {
    let mut text = read("prometheus/prometheus.yml");
    let alerts = root("prometheus/alerts.yml");
    for (from, to) in [
        (
            r#"["worker-1:9187", "worker-2:9187", "worker-3:9187"]"#,
            format!("[\"{target}\"]"),
        ),
        ("/etc/prometheus/alerts.yml", alerts.display().to_string()),
        ("scrape_interval: 5s", "scrape_interval: 1s".to_string()),
        (
            "evaluation_interval: 5s",
            "evaluation_interval: 1s".to_string(),
        ),
    ] {
        assert_eq!(
            text.matches(from).count(),
            1,
            "prometheus/prometheus.yml should contain {from:?} once"
        );
        text = text.replace(from, &to);
    }
    text
}
