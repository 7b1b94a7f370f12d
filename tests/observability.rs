//! Observability: the metrics a running worker exports, the catalogue in
//! `docs/metrics.md`, the Grafana dashboards, the Prometheus alert rules (checked and
//! unit-tested with `promtool`) and a real Prometheus scraping a real worker with the compose
//! stack's scrape config. A renamed metric cannot silently blank a panel or mute an alert.
//!
//! Tests that need `promtool` or `prometheus` (Debian package `prometheus`, installed by
//! `.ci/run`) skip with a loud message only when the binary is missing.

mod common;

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
    let env = Env::new().await;
    env.http_source("acme", "orders", &["ok", "gone"]).await;
    env.receiver.set("gone", Behavior::Status(410));
    let dir = tempfile::tempdir().unwrap();
    // A listed tenant, so the per-tenant panels have their series.
    let cfg = env.config_file(&dir, |c| c.history.metrics_tenants = vec!["acme".into()]);
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

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[test]
fn the_promql_reader_finds_metric_names_and_skips_labels_strings_and_variables() {
    let e = r#"histogram_quantile(0.99, sum by (le, ankusa_instance) (rate(ankusa_x_seconds_bucket{ankusa_instance=~"$ankusa_instance", k="ankusa_not"}[$__rate_interval]))) / on (ankusa_instance) group_left ankusa_y"#;
    let got: Vec<String> = metric_names(e).into_iter().collect();
    assert_eq!(got, ["ankusa_x_seconds_bucket", "ankusa_y"]);
    assert_eq!(
        metric_names("label_values(ankusa_leader, ankusa_instance)")
            .into_iter()
            .collect::<Vec<_>>(),
        ["ankusa_leader"]
    );
    assert!(metric_names("label_values(ankusa_instance)").is_empty());
    assert!(metric_names(r#"absent(up{job="ankusa"} == 1)"#).is_empty());
}

#[test]
fn every_described_metric_is_in_the_catalogue_with_its_type_and_a_status() {
    let described = described();
    let catalogue = catalogue();
    assert!(described.len() >= 20, "{described:?}");
    let only_code: Vec<_> = described
        .keys()
        .filter(|n| !catalogue.contains_key(*n))
        .collect();
    let only_docs: Vec<_> = catalogue
        .keys()
        .filter(|n| !described.contains_key(*n))
        .collect();
    assert!(
        only_code.is_empty(),
        "described in src/metrics.rs but not catalogued in docs/metrics.md: {only_code:?}"
    );
    assert!(
        only_docs.is_empty(),
        "catalogued in docs/metrics.md but not described in src/metrics.rs: {only_docs:?}"
    );
    for (name, (kind, status)) in &catalogue {
        assert_eq!(
            kind, &described[name],
            "docs/metrics.md gives {name} the wrong type"
        );
        assert!(
            status == "exported" || status == "planned",
            "{name}: status {status:?} is neither `exported` nor `planned`"
        );
        let suffix_ok = match kind.as_str() {
            "counter" => name.ends_with("_total"),
            _ => !name.ends_with("_total"),
        };
        assert!(
            suffix_ok,
            "{name}: a counter and only a counter ends in _total"
        );
    }
}

#[test]
fn every_alert_has_a_runbook_url_naming_its_section_of_docs_runbooks() {
    let text = read("prometheus/alerts.yml");
    let runbooks = read("docs/runbooks.md");
    let headings: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    let mut alert: Option<String> = None;
    let mut urls = BTreeMap::new();
    for l in text.lines().map(str::trim_start) {
        if let Some(n) = l.strip_prefix("- alert:") {
            alert = Some(n.trim().to_string());
        } else if let Some(u) = l.strip_prefix("runbook_url:") {
            let name = alert.clone().expect("a runbook_url before any alert");
            urls.insert(name, u.trim().trim_matches('"').to_string());
        }
    }
    for (name, _) in alert_rules() {
        let url = urls
            .get(&name)
            .unwrap_or_else(|| panic!("{name}: no runbook_url annotation"));
        let want = format!("docs/runbooks.md#{}", name.to_lowercase());
        assert_eq!(url, &want, "{name}: runbook_url");
        assert!(
            headings.contains(&name.to_lowercase()),
            "{name}: docs/runbooks.md has no `## {name}` section"
        );
    }
}

#[test]
fn dashboards_are_well_formed_and_every_panel_queries_something() {
    let dashes = dashboards();
    assert!(
        dashes.len() >= 3,
        "overview, tenants and sinks, leader and Redis: {:?}",
        dashes.iter().map(|d| &d.0).collect::<Vec<_>>()
    );
    let mut uids = BTreeSet::new();
    for (file, d) in &dashes {
        let uid = d["uid"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: no uid"));
        assert!(uids.insert(uid.to_string()), "{file}: uid {uid} used twice");
        assert!(
            d["title"].as_str().is_some_and(|t| t.starts_with("ankusa")),
            "{file}: title"
        );
        let vars: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert!(
            vars.contains(&"datasource") && vars.contains(&"ankusa_instance"),
            "{file}: variables {vars:?}"
        );
        let mut ids = BTreeSet::new();
        for p in panels(d) {
            let title = p["title"].as_str().unwrap_or_default();
            assert!(
                ids.insert(
                    p["id"]
                        .as_u64()
                        .unwrap_or_else(|| panic!("{file}: panel {title:?} has no id"))
                ),
                "{file}: panel id {} twice",
                p["id"]
            );
            assert!(
                p["gridPos"]["w"]
                    .as_u64()
                    .is_some_and(|w| (1..=24).contains(&w)),
                "{file}: {title:?} gridPos"
            );
            if p["type"] == "row" || p["type"] == "text" {
                continue;
            }
            assert_eq!(
                p["datasource"]["uid"], "${datasource}",
                "{file}: {title:?} must use the datasource variable"
            );
            let targets = p["targets"]
                .as_array()
                .unwrap_or_else(|| panic!("{file}: {title:?} has no targets"));
            assert!(
                !targets.is_empty()
                    && targets.iter().all(|t| t["expr"]
                        .as_str()
                        .is_some_and(|e| e.contains("ankusa_") || e.contains("up{"))),
                "{file}: {title:?} targets {targets:?}"
            );
            for t in targets {
                let e = t["expr"].as_str().unwrap();
                if e.contains("ankusa_") {
                    assert!(
                        e.contains("$ankusa_instance"),
                        "{file}: {title:?} ignores the instance variable: {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = tool("promtool") else {
        return skip("promtool");
    };
    let check = Command::new(&promtool)
        .args(["check", "rules", "alerts.yml"])
        .current_dir(root("prometheus"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "promtool check rules:\n{out}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", alert_rules().len())),
        "{out}"
    );
    let test = Command::new(&promtool)
        .args(["test", "rules", "alerts_test.yml"])
        .current_dir(root("prometheus"))
        .output()
        .unwrap();
    let out =
        String::from_utf8_lossy(&test.stdout).to_string() + &String::from_utf8_lossy(&test.stderr);
    assert!(
        test.status.success() && out.contains("SUCCESS"),
        "promtool test rules:\n{out}"
    );
    // Every alert has at least one unit test case.
    let tests = read("prometheus/alerts_test.yml");
    for (alert, _) in alert_rules() {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "prometheus/alerts_test.yml has no case for {alert}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_in_the_dashboards_and_alert_rules_is_exported_by_a_running_worker() {
    let r = running_worker_with_traffic().await;
    let used = used_names();
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

    // Every series names the instance (R29) under a label Prometheus will not rename.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_worker_with_the_compose_config_and_every_panel_has_data() {
    let Some(prometheus) = tool("prometheus") else {
        return skip("prometheus");
    };
    let r = running_worker_with_traffic().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(&cfg, test_prometheus_config(&r.worker.admin)).unwrap();
    if let Some(promtool) = tool("promtool") {
        let out = Command::new(promtool)
            .args(["check", "config"])
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool check config:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let port = free_port();
    let log = dir.path().join("prometheus.log");
    let child = Command::new(prometheus)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("prometheus starts");
    let p = Prometheus {
        child,
        url: format!("http://127.0.0.1:{port}"),
        log,
    };

    // The target is up and its samples are stored.
    let up = poll(LIVENESS, || async {
        let v = p.query(&r.http, r#"up{job="ankusa"}"#).await;
        (v["data"]["result"][0]["value"][1] == "1").then_some(v)
    })
    .await;
    assert!(
        up.is_some(),
        "up{{job=\"ankusa\"}} never became 1; prometheus log:\n{}",
        p.log_text()
    );
    let delivered = poll(LIVENESS, || async {
        let q = format!(
            r#"ankusa_deliveries_total{{job="ankusa", ankusa_instance="{}", module="http", outcome="delivered"}}"#,
            r.env.config.instance
        );
        let v = p.query(&r.http, &q).await;
        (v["data"]["result"][0]["value"][1] == "3").then_some(v)
    })
    .await;
    assert!(
        delivered.is_some(),
        "no ankusa_deliveries_total sample of 3; prometheus log:\n{}",
        p.log_text()
    );

    // The alert rules are loaded from the rule file the stack mounts.
    let rules: Value = r
        .http
        .get(format!("{}/api/v1/rules", p.url))
        .send()
        .await
        .map(json_of)
        .expect("Prometheus answers")
        .await;
    let loaded: BTreeSet<String> = rules["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();
    let want: BTreeSet<String> = alert_rules().into_iter().map(|(n, _)| n).collect();
    assert_eq!(loaded, want, "alert rules loaded by Prometheus");

    // Every dashboard query is valid PromQL and returns data for this worker: a renamed
    // label, a wrong histogram suffix or a broken selector would come back empty.
    let mut exprs = Vec::new();
    for (file, dash) in dashboards() {
        for (at, e) in dashboard_exprs(&file, &dash) {
            if !e.starts_with("label_values(") {
                exprs.push((
                    at,
                    e.replace("$ankusa_instance", &r.env.config.instance)
                        .replace("$__rate_interval", "1m"),
                ));
            }
        }
    }
    let empty_ones = || async {
        let mut empty = Vec::new();
        for (at, e) in &exprs {
            let v = p.query(&r.http, e).await;
            assert_ne!(v["status"], "error", "{at}: Prometheus refuses {e}: {v}");
            if v["data"]["result"].as_array().is_none_or(|a| a.is_empty()) {
                empty.push(format!("{at}: {e}"));
            }
        }
        empty
    };
    if poll(LIVENESS, || async {
        empty_ones().await.is_empty().then_some(())
    })
    .await
    .is_none()
    {
        panic!(
            "dashboard queries with no data for a worker that delivered and dead-lettered:\n{}",
            empty_ones().await.join("\n")
        );
    }
    let values: Value = r
        .http
        .get(format!("{}/api/v1/label/ankusa_instance/values", p.url))
        .send()
        .await
        .map(json_of)
        .expect("Prometheus answers")
        .await;
    assert_eq!(
        values["data"],
        serde_json::json!([r.env.config.instance]),
        "the instance variable's values"
    );
    drop(r);
}

/// `history.metrics_tenants` bounds the `tenant` label: the listed tenant gets its
/// `ankusa_tenant_*` series (set by the leader every 5 s), a tenant that is not listed gets
/// none, however busy it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_tenant_gauges_exist_only_for_the_tenants_the_config_lists() {
    let env = Env::new().await;
    for t in ["acme", "globex"] {
        env.http_source(t, "orders", &["down"]).await;
    }
    env.receiver.set("down", Behavior::Status(503));
    let dir = tempfile::tempdir().unwrap();
    let cfg = env.config_file(&dir, |c| c.history.metrics_tenants = vec!["acme".into()]);
    let worker = WorkerProcess::spawn(&cfg, &dir, "gauges");
    env.commit_n("acme", "orders", 3).await;
    env.commit_n("globex", "orders", 4).await;
    // The value of `family`'s series for `tenant`, whatever other labels it carries.
    let value = |text: &str, family: &str, tenant: &str| -> Option<f64> {
        let label = format!("tenant=\"{tenant}\"");
        text.lines()
            .find(|l| l.starts_with(&format!("{family}{{")) && l.contains(&label))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let http = reqwest::Client::new();
    let url = format!("http://{}/metrics", worker.admin);
    let last = std::sync::Mutex::new(String::new());
    let text = poll(LIVENESS + Duration::from_secs(10), || async {
        let text = http.get(&url).send().await.ok()?.text().await.ok()?;
        *last.lock().unwrap() = text.clone();
        (value(&text, "ankusa_tenant_retrying_rows", "acme") == Some(3.0)).then_some(text)
    })
    .await
    .unwrap_or_else(|| {
        let last = last.lock().unwrap();
        let tenant: Vec<&str> = last.lines().filter(|l| l.contains("tenant")).collect();
        panic!(
            "acme's 3 retrying rows never showed on /metrics; its tenant lines: {tenant:#?}\nlog:\n{}",
            worker.log_text()
        )
    });
    assert_eq!(value(&text, "ankusa_tenant_due_rows", "acme"), Some(3.0));
    assert_eq!(
        value(&text, "ankusa_tenant_failing_sinks", "acme"),
        Some(1.0)
    );
    for family in [
        "ankusa_tenant_claimed_rows",
        "ankusa_tenant_oldest_lag_seconds",
    ] {
        assert!(
            value(&text, family, "acme").is_some(),
            "{family} for acme missing:\n{text}"
        );
    }
    assert!(
        !text.contains("tenant=\"globex\""),
        "a tenant not in history.metrics_tenants got a series:\n{text}"
    );
}
