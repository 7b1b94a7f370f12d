//! The `ankusa` command line as a user meets it: the built binary run against its own
//! `redis-server` (and, where a command needs one, a real worker process). One test per
//! stumble: closed pipes, `--json` everywhere, `tick` without a leader, Redis
//! errors in plain words, colours, empty produce, sources without sinks, counters named by
//! unit, a second Ctrl-C, Kubernetes variables, help, completions and the man page.

use crate::common;
mod output;
mod redis;

use common::procs::{poll_until, wait_leader};
use common::{Env, WorkerProcess, LIVENESS};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ankusa");

/// `ankusa <args>` against `env`'s Redis and instance, with `stdin` as input.
/// The CLI, like the workers, delivers and checks sources against the test's loopback
/// receiver: it opts in to loopback as the tests' config does (`http.allow_cidrs`).
const ALLOW_LOOPBACK: (&str, &str) = ("ANKUSA_HTTP__ALLOW_CIDRS", r#"["127.0.0.0/8", "::1/128"]"#);

fn run_in(env: &Env, args: &[&str], stdin: &[u8], vars: &[(&str, &str)]) -> Output {
    let mut child = Command::new(BIN)
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args([
            "--redis-url",
            &env.redis.url(),
            "--instance",
            &env.config.instance,
        ])
        .args(args)
        .env(ALLOW_LOOPBACK.0, ALLOW_LOOPBACK.1)
        .envs(vars.iter().copied())
        .env_remove("ANKUSA_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ankusa runs");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).expect("stdin written");
    drop(input);
    wait_output(child)
}

/// `ankusa <args>` against `env` with an empty stdin.
fn run(env: &Env, args: &[&str]) -> Output {
    run_in(env, args, b"", &[])
}

/// `ankusa <args>` with no Redis given (commands that need none, or that must fail).
fn run_bare(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let child = Command::new(BIN)
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args(args)
        .envs(vars.iter().copied())
        .env_remove("ANKUSA_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ankusa runs");
    wait_output(child)
}

/// The child's output, or a panic when it runs past [`LIVENESS`].
fn wait_output(child: std::process::Child) -> Output {
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIVENESS) {
        Ok(out) => out.expect("output"),
        Err(_) => {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("ankusa did not finish within {LIVENESS:?}")
        }
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// The one JSON document a `--json` command printed on stdout.
fn json(o: &Output) -> Value {
    let text = stdout(o);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {text:?}\nstderr: {}",
            stderr(o)
        )
    })
}

/// Write `text` to `dir/name`; returns the path as a string.
fn file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&p, text).expect("write");
    p.to_string_lossy().into_owned()
}

/// A source spec with one http sink at the receiver's `path`.
fn spec(env: &Env, path: &str) -> String {
    serde_json::json!({"sinks": [{"module": "http", "opts": {"url": env.receiver.url(path)}}]})
        .to_string()
}

/// Run `ankusa <args>` with its stdout closed before it writes anything: the reader of
/// `| head -1` that has already gone.
fn run_with_closed_stdout(env: Option<&Env>, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("ANKUSA_ADMIN__TOKEN");
    if let Some(env) = env {
        cmd.args([
            "--redis-url",
            &env.redis.url(),
            "--instance",
            &env.config.instance,
        ]);
    }
    let mut child = cmd
        .args(args)
        .env(ALLOW_LOOPBACK.0, ALLOW_LOOPBACK.1)
        .env_remove("ANKUSA_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ankusa runs");
    drop(child.stdout.take());
    wait_output(child)
}

/// A worker process on `env` with `tune` applied to its config; waits until it leads.
async fn leading_worker(
    env: &Env,
    dir: &tempfile::TempDir,
    name: &str,
    vars: &[(&str, &str)],
    tune: impl FnOnce(&mut ankusa::config::Config),
) -> WorkerProcess {
    let config = common::procs::write_config(env, dir, &format!("{name}.toml"), tune);
    let w = common::procs::spawn_worker(&config, dir, name, &[], vars);
    wait_leader(&w).await;
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_refuses_an_empty_body_unless_allowed_and_globs_directories() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["ok"]).await;
    let committed = |env: &Env| json(&run(env, &["--json", "stats"]))["hooks_committed"].clone();

    let out = run(&env, &["produce", "acme", "orders"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("empty body") && stderr(&out).contains("--allow-empty"),
        "{}",
        stderr(&out)
    );
    assert_eq!(committed(&env), 0, "a refused produce commits nothing");
    // One empty file among good ones: nothing at all is committed.
    let dir = tempfile::tempdir().unwrap();
    let good = file(dir.path(), "one/a.json", "{\"a\":1}");
    let empty = file(dir.path(), "one/empty.json", "");
    let out = run(&env, &["produce", "acme", "orders", &good, &empty]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("empty.json"), "{}", stderr(&out));
    assert_eq!(committed(&env), 0);

    let out = run(
        &env,
        &["--json", "produce", "--allow-empty", "acme", "orders"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["committed"], 1);

    // --glob picks files of a directory; `**` descends.
    let tree = tempfile::tempdir().unwrap();
    file(tree.path(), "a.json", "{\"a\":1}");
    file(tree.path(), "notes.txt", "not a payload");
    file(tree.path(), "sub/b.json", "{\"b\":2}");
    let root = tree.path().to_string_lossy().into_owned();
    let n = |glob: &str| {
        let out = run(
            &env,
            &["--json", "produce", "acme", "orders", &root, "--glob", glob],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        json(&out)["committed"].as_u64().unwrap()
    };
    assert_eq!(n("*.json"), 1);
    assert_eq!(n("**/*.json"), 2);
    let out = run(
        &env,
        &["produce", "acme", "orders", &root, "--glob", "*.xml"],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("no files"), "{}", stderr(&out));
    assert_eq!(committed(&env), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_without_sinks_needs_a_flag_and_its_hooks_are_answered_with_a_warning() {
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    let empty = file(dir.path(), "empty.json", "{\"sinks\": []}");
    let out = run(&env, &["source", "put", "acme", "void", &empty]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--allow-no-sinks"),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.store.get_source("acme", "void").await.unwrap(), None);

    let out = run(
        &env,
        &["source", "put", "acme", "void", &empty, "--allow-no-sinks"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run_in(&env, &["--json", "produce", "acme", "void"], b"{}", &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["rows_per_hook"], 0);
    assert!(json(&out)["warning"].as_str().unwrap().contains("no sinks"));

    // Ingest over HTTP says so too.
    let w = leading_worker(&env, &dir, "ingest", &[], |_| {}).await;
    let resp = reqwest::Client::new()
        .post(format!("http://{}/v1/hooks/acme/void", w.admin))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(body["rows"], 0, "{body}");
    assert!(
        body["warning"].as_str().unwrap().contains("no sinks"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_names_its_counters_by_unit_hooks_and_rows() {
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    env.http_source("acme", "orders", &["a", "b"]).await;
    env.receiver
        .set("b", ankusa::testkit::Behavior::Status(400));
    let w = leading_worker(&env, &dir, "stats", &[], |_| {}).await;
    env.commit_n("acme", "orders", 3).await;
    let out = run(&env, &["--json", "tick", "--timeout-ms", "30000"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(&env, &["--json", "stats"]);
    assert_eq!(
        json(&out),
        serde_json::json!({"hooks_committed": 3, "hooks_scheduled": 0, "hooks_cancelled": 0, "rows_delivered": 3, "rows_dead_lettered": 3, "rows_dropped": 0})
    );
    let out = run(&env, &["stats"]);
    assert!(
        stdout(&out).contains("hooks_committed     3"),
        "{}",
        stdout(&out)
    );
    // The worker's metrics by unit too, with the build and the process.
    let (_, text) = common::procs::get(&w.admin, "/metrics")
        .await
        .expect("scrape");
    let m = |name: &str, labels: &[&str]| common::procs::metric_in(&text, name, labels);
    assert_eq!(m("ankusa_rows_delivered_total", &["module=\"http\""]), 3.0);
    assert_eq!(
        m("ankusa_rows_dead_lettered_total", &["reason=\"permanent\""]),
        3.0
    );
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert_eq!(m("ankusa_build_info", &[version.as_str()]), 1.0, "{text}");
    assert!(m("process_resident_memory_bytes", &[]) > 1e6, "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("process_cpu_seconds_total")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigint_stops_a_draining_worker_at_once_and_its_claims_come_due_again() {
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    env.receiver.set("slow", ankusa::testkit::Behavior::Hang);
    env.http_source("acme", "orders", &["slow"]).await;
    let tune = |c: &mut ankusa::config::Config| {
        c.leader.shutdown_grace_ms = 120_000;
        c.dispatch.attempt_timeout_ms = 120_000;
    };
    let mut w = leading_worker(&env, &dir, "first", &[], tune).await;
    env.commit("acme", "orders", "{\"held\":true}").await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().any(|r| r.path == "slow"))
            .await,
        "the attempt never started"
    );
    w.signal(libc::SIGINT);
    assert!(
        poll_until(LIVENESS, || async {
            w.log_text().contains("shutting down")
        })
        .await,
        "{}",
        w.log_text()
    );
    let second = Instant::now();
    w.signal(libc::SIGINT);
    let status = common::procs::wait_exit(&mut w, LIVENESS)
        .await
        .expect("worker exits");
    assert!(
        second.elapsed() < Duration::from_secs(10),
        "the second SIGINT waited {:?} (grace 120 s)",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{}", w.log_text());
    assert!(
        w.log_text().contains("second stop signal"),
        "{}",
        w.log_text()
    );

    // Nothing lost: the next leader takes the claim over and delivers the row.
    env.receiver.set("slow", ankusa::testkit::Behavior::Ok);
    let _next = leading_worker(&env, &dir, "next", &[], |_| {}).await;
    let out = run(&env, &["--json", "tick", "--timeout-ms", "30000"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.store.totals().await.unwrap().delivered, 1);
}

#[test]
fn kubernetes_service_variables_are_ignored_and_a_misspelt_key_is_refused() {
    let k8s = [
        ("ANKUSA_PORT", "tcp://10.96.0.12:9187"),
        ("ANKUSA_PORT_9187_TCP", "tcp://10.96.0.12:9187"),
        ("ANKUSA_PORT_9187_TCP_PROTO", "tcp"),
        ("ANKUSA_SERVICE_HOST", "10.96.0.12"),
        ("ANKUSA_SERVICE_PORT", "9187"),
    ];
    let out = run_bare(&["config", "check"], &k8s);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run_bare(
        &["config", "check"],
        &[("ANKUSA_DISPATCH__CONCURENCY", "8")],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("dispatch.concurency"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producers_traceparent_reaches_every_delivery_request() {
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    env.http_source("acme", "orders", &["a", "b"]).await;
    // Ingest forwards trace context only when admin.forward_headers lists it.
    let w = leading_worker(&env, &dir, "trace", &[], |c| {
        c.admin
            .forward_headers
            .extend(["traceparent".into(), "tracestate".into()])
    })
    .await;
    let ingest = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let resp = reqwest::Client::new()
        .post(format!("http://{}/v1/hooks/acme/orders", w.admin))
        .header("content-type", "application/json")
        .header("traceparent", ingest)
        .header("tracestate", "vendor=1")
        .body("{\"via\":\"ingest\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let cli = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let header = format!("traceparent: {cli}");
    let out = run_in(
        &env,
        &["produce", "acme", "orders", "-H", &header],
        b"{}",
        &[],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(&env, &["tick", "--timeout-ms", "30000"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for path in ["a", "b"] {
        let mut seen: Vec<String> = env
            .receiver
            .requests_for(path)
            .iter()
            .filter_map(|r| r.header("traceparent").map(str::to_string))
            .collect();
        seen.sort();
        let mut want = vec![ingest.to_string(), cli.to_string()];
        want.sort();
        assert_eq!(seen, want, "traceparent on {path}");
    }
    let with_state = env.receiver.requests_for("a");
    assert!(with_state
        .iter()
        .any(|r| r.header("tracestate") == Some("vendor=1")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_types_from_produce_and_from_ingest_headers_meet_the_filters_and_source_enable_clears_a_mark(
) {
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    let spec_file = file(
        dir.path(),
        "filtered.json",
        &serde_json::json!({"sinks": [
            {"module": "http", "opts": {"url": env.receiver.url("push")},
             "filter": {"event_types": ["push"]}},
            {"module": "http", "opts": {"url": env.receiver.url("all")}},
        ]})
        .to_string(),
    );
    let out = run(&env, &["source", "put", "acme", "gh", &spec_file]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run_in(
        &env,
        &["--json", "produce", "acme", "gh", "--event-type", "push"],
        b"{}",
        &[],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["rows_per_hook"], 2);
    let out = run_in(
        &env,
        &[
            "--json",
            "produce",
            "acme",
            "gh",
            "--event-type",
            "issues.opened",
        ],
        b"{}",
        &[],
    );
    assert_eq!(json(&out)["rows_per_hook"], 1);
    let out = run_in(
        &env,
        &["produce", "acme", "gh", "--event-type", "bad type"],
        b"{}",
        &[],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    // Ingest takes the event type from x-github-event (admin.event_type_headers).
    let w = leading_worker(&env, &dir, "ingest", &[], |_| {}).await;
    let post = |event: &'static str| {
        reqwest::Client::new()
            .post(format!("http://{}/v1/hooks/acme/gh", w.admin))
            .header("x-github-event", event)
            .body("{}")
            .send()
    };
    let body: Value =
        serde_json::from_slice(&post("push").await.unwrap().bytes().await.unwrap()).unwrap();
    assert_eq!(body["rows"], 2, "{body}");
    let body: Value =
        serde_json::from_slice(&post("ping").await.unwrap().bytes().await.unwrap()).unwrap();
    assert_eq!(body["rows"], 1, "{body}");
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 6)
            .await
    );
    assert_eq!(env.receiver.count_for("push"), 2);
    assert_eq!(env.receiver.count_for("all"), 4);
    // An entry disabled (as the leader marks it) shows in `source get`; `source enable`
    // clears the mark, and says when there was none.
    env.store
        .set_sink_disabled(
            None,
            "acme",
            "gh",
            0,
            None,
            Some(ankusa::model::Disabled {
                at_ms: 1,
                reason: "test".into(),
            }),
            100,
        )
        .await
        .unwrap();
    let out = run(&env, &["--json", "source", "get", "acme", "gh"]);
    assert_eq!(json(&out)["sinks"][0]["disabled"]["reason"], "test");
    let out = run(&env, &["--json", "source", "enable", "acme", "gh", "0"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["was_disabled"], true);
    let out = run(&env, &["--json", "source", "get", "acme", "gh"]);
    assert!(json(&out)["sinks"][0].get("disabled").is_none());
    let out = run(&env, &["--json", "source", "enable", "acme", "gh", "0"]);
    assert_eq!(json(&out)["was_disabled"], false);
    let out = run(&env, &["source", "enable", "acme", "gh", "7"]);
    assert_ne!(code(&out), 0);
}
