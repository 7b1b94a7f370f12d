//! What an operator reads: the `ankusa` binary run against its own `redis-server` and, where
//! rows must move, a real worker process. Receiver-controlled text is escaped in every table
//! and in the pretty log; times read as RFC 3339; `tick` says what is still pending and
//! `--all` waits for it; `dlq replay --dry-run` and the confirmation of `dlq purge --all`;
//! a resend settles the dead letter it replaces; bad `produce` headers are usage errors;
//! every list answers in one shape; one manual page per command.

use crate::common;

use ankusa::testkit::{Behavior, Reply};
use common::procs::{poll_until, wait_leader};
use common::{Env, WorkerProcess, LIVENESS};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_ankusa");

/// The CLI checks sources against the test's loopback receiver, as the workers deliver to it.
const ALLOW_LOOPBACK: (&str, &str) = ("ANKUSA_HTTP__ALLOW_CIDRS", r#"["127.0.0.0/8", "::1/128"]"#);

/// `ankusa <args>` against `env`'s Redis and instance, `stdin` piped in (so never a terminal).
fn run_in(env: &Env, args: &[&str], stdin: &[u8]) -> Output {
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
        .env_remove("ANKUSA_CONFIG")
        .env_remove("ANKUSA_LOG_FORMAT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ankusa runs");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin).expect("stdin written");
    drop(input);
    child.wait_with_output().expect("output")
}

fn run(env: &Env, args: &[&str]) -> Output {
    run_in(env, args, b"")
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

/// `ankusa --json <args>`: exit 0 and one JSON document.
fn json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let o = run(env, &all);
    assert_eq!(code(&o), 0, "{args:?}: {}{}", stdout(&o), stderr(&o));
    serde_json::from_str(stdout(&o).trim())
        .unwrap_or_else(|e| panic!("{args:?}: not one JSON document ({e}): {}", stdout(&o)))
}

/// `ankusa <args>` that must succeed; its stdout.
fn ok(env: &Env, args: &[&str]) -> String {
    let o = run(env, args);
    assert_eq!(code(&o), 0, "{args:?}: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// A worker process on `env` with `tune` applied to its config; waits until it leads.
async fn leading_worker(
    env: &Env,
    dir: &tempfile::TempDir,
    name: &str,
    tune: impl FnOnce(&mut ankusa::config::Config),
) -> WorkerProcess {
    let config = common::procs::write_config(env, dir, &format!("{name}.toml"), tune);
    let w = common::procs::spawn_worker(&config, dir, name, &[], &[]);
    wait_leader(&w).await;
    w
}

/// Dead letters of the instance now.
fn dead_letters(env: &Env) -> Vec<Value> {
    json(env, &["dlq", "list"])["dead_letters"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Wait until `n` dead letters exist.
async fn wait_dead_letters(env: &Env, n: usize, w: &WorkerProcess) {
    assert!(
        poll_until(LIVENESS, || async { dead_letters(env).len() == n }).await,
        "not {n} dead letters: {:?}\n{}",
        dead_letters(env),
        w.log_text()
    );
}

/// An error text a hostile receiver controls: a forged log line, a carriage return and a
/// terminal colour sequence.
const EVIL: &str = "bad\nFORGED line\r\u{1b}[31mred";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receivers_error_text_is_escaped_in_dlq_list_hooks_show_rows_and_the_pretty_log() {
    let env = Env::new().await;
    let mut reply = Reply::status(422);
    reply.body = EVIL.into();
    env.receiver
        .set("evil", Behavior::Sequence(vec![reply; 20]));
    env.http_source("acme", "orders", &["evil"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = leading_worker(&env, &dir, "evil", |_| {}).await;
    let hook = env.commit("acme", "orders", "{}").await;
    wait_dead_letters(&env, 1, &w).await;

    // --json keeps the stored text as it is (JSON escapes it in transport).
    let raw = dead_letters(&env)[0]["error"].as_str().unwrap().to_string();
    assert!(raw.contains("\u{1b}[31m") && raw.contains('\n'), "{raw:?}");

    let list = ok(&env, &["dlq", "list"]);
    let show = ok(&env, &["hooks", "show", "acme", &hook.to_string()]);
    for (what, text) in [("dlq list", &list), ("hooks show", &show)] {
        assert!(!text.contains('\u{1b}'), "{what}: a raw escape:\n{text}");
        assert!(
            !text.contains('\r'),
            "{what}: a raw carriage return:\n{text}"
        );
        assert!(
            text.contains("\\x1b[31m") && text.contains("\\n"),
            "{what}: escaped text missing:\n{text}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("FORGED")),
            "{what}: a forged line:\n{text}"
        );
    }
    assert_eq!(
        list.lines().count(),
        2,
        "a header and one dead letter:\n{list}"
    );
    assert!(list.starts_with("ID"), "{list}");
    // Times in words: RFC 3339 and how long ago, never raw epoch milliseconds.
    let at = dead_letters(&env)[0]["at_ms"].as_i64().unwrap();
    let rfc3339 = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(at as u64),
    )
    .to_string();
    assert!(
        list.contains(&format!("{rfc3339} (")),
        "{rfc3339} missing:\n{list}"
    );
    assert!(
        show.contains("committed 20") && show.contains("Z ("),
        "{show}"
    );
    assert!(!show.contains("committed_at_ms"), "{show}");

    // The pretty log: the attempt's error on one line, escaped.
    let log = w.log_text();
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("attempt failed"))
        .collect();
    assert!(!failed.is_empty(), "no `attempt failed` line:\n{log}");
    for l in &failed {
        assert!(l.contains("\\x1b[31m") && l.contains("\\r"), "{l}");
        // Logged in the attempt's span: the line names what was attempted.
        for field in [
            "tenant=acme",
            "source=orders",
            "sink=0",
            "module=http",
            "row=1.0",
        ] {
            assert!(l.contains(field), "{field} missing: {l}");
        }
        assert!(l.contains(" attempt=") && l.contains("status=422"), "{l}");
    }
    assert!(!log.contains('\u{1b}'), "a raw escape in the log:\n{log}");
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED")),
        "a forged log line:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tick_says_what_waits_behind_an_open_breaker_and_all_waits_for_it() {
    let env = Env::new().await;
    env.receiver.set("down", Behavior::Status(503));
    env.http_source("acme", "orders", &["down"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = leading_worker(&env, &dir, "tick", |c| {
        c.dispatch.breaker_failures = 2;
        c.dispatch.breaker_open_ms = 3_000;
        c.retry.max_elapsed_ms = 600_000;
        // Rows attempted before the breaker opened retry by their backoff, not the breaker:
        // with the test config's 20 ms they came due again and were claimed between tick's
        // return and the read of what is pending (a CI run saw 3 claimed). A backoff longer
        // than the open period keeps them waiting while the test looks.
        c.retry.initial_backoff_ms = 5_000;
        c.retry.max_backoff_ms = 5_000;
        c.retry.min_backoff_ms = 5_000;
    })
    .await;
    for _ in 0..5 {
        env.commit("acme", "orders", "{}").await;
    }

    // Nothing is due once the breaker parked the rows: tick returns and says what waits.
    let v = json(&env, &["tick"]);
    let p = &v["pending"];
    let waiting = p["parked"].as_u64().unwrap() + p["retrying"].as_u64().unwrap();
    assert_eq!(p["rows"], 5, "{v}\n{}", w.log_text());
    assert_eq!(waiting, 5, "{v}");
    assert!(p["next_due_ms"].as_i64().is_some(), "{v}");
    let text = ok(&env, &["tick"]);
    assert!(
        text.contains("5 rows still pending") && text.contains("tick --all"),
        "{text}"
    );
    assert!(text.contains("the next is due 20"), "{text}");

    // --all waits for them: past its deadline while the sink is down (exit 3, saying why)…
    let o = run(&env, &["tick", "--all", "--timeout-ms", "1500"]);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("still pending"), "{}", stderr(&o));
    // … and until every row is delivered once it is back.
    env.receiver.set("down", Behavior::Ok);
    let bound = LIVENESS.as_millis().to_string();
    let v = json(&env, &["tick", "--all", "--timeout-ms", &bound]);
    assert_eq!(v["pending"]["rows"], 0, "{v}");
    assert_eq!(
        env.receiver
            .requests_for("down")
            .iter()
            .filter(|r| r.status == 200)
            .count(),
        5
    );
    let text = ok(&env, &["tick"]);
    assert!(text.contains("nothing is pending"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_replay_dry_run_replays_nothing_and_purge_all_asks_for_confirmation() {
    let env = Env::new().await;
    env.receiver.set("gone", Behavior::Status(410));
    env.http_source("acme", "orders", &["gone"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = leading_worker(&env, &dir, "dry", |_| {}).await;
    for _ in 0..3 {
        env.commit("acme", "orders", "{}").await;
    }
    wait_dead_letters(&env, 3, &w).await;
    let sent = env.receiver.count_for("gone");

    let v = json(&env, &["dlq", "replay", "--tenant", "acme", "--dry-run"]);
    assert_eq!(v["dry_run"], true, "{v}");
    assert_eq!(v["matched"], 3, "{v}");
    assert_eq!(v["replayed"], 0, "{v}");
    assert_eq!(v["selected"].as_array().map(Vec::len), Some(3), "{v}");
    let text = ok(&env, &["dlq", "replay", "--dry-run"]);
    assert!(
        text.starts_with("dry run: 3 dead letters would be replayed"),
        "{text}"
    );
    for d in dead_letters(&env) {
        assert!(text.contains(d["id"].as_str().unwrap()), "{text}");
    }
    let none = ok(
        &env,
        &["dlq", "replay", "--dry-run", "--reason", "source_gone"],
    );
    assert!(none.contains("no dead letters match"), "{none}");
    assert_eq!(dead_letters(&env).len(), 3, "a dry run replays nothing");
    assert_eq!(env.receiver.count_for("gone"), sent);

    // --all without a terminal to confirm on: refused, nothing purged.
    let o = run_in(&env, &["dlq", "purge", "--all"], b"y\n");
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("--yes"), "{}", stderr(&o));
    assert_eq!(dead_letters(&env).len(), 3);
    let text = ok(&env, &["dlq", "purge", "--all", "--yes"]);
    assert_eq!(text.trim(), "purged 3 dead letters");
    assert!(dead_letters(&env).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resending_a_dead_lettered_hook_settles_its_dead_letter_so_a_replay_sends_nothing_twice() {
    let env = Env::new().await;
    env.receiver.set("flaky", Behavior::Status(410));
    env.http_source("acme", "orders", &["flaky"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = leading_worker(&env, &dir, "resend", |_| {}).await;
    let hook = env.commit("acme", "orders", "resend me").await;
    wait_dead_letters(&env, 1, &w).await;
    let id = dead_letters(&env)[0]["id"].as_str().unwrap().to_string();
    env.receiver.set("flaky", Behavior::Ok);

    let v = json(&env, &["hooks", "resend", "acme", &hook.to_string()]);
    assert_eq!(v["settled_dead_letters"], serde_json::json!([id]), "{v}");
    assert!(dead_letters(&env).is_empty(), "the resend settled it");
    let text = ok(&env, &["dlq", "replay"]);
    assert!(text.starts_with("replayed 0 of 0 dead letters"), "{text}");
    ok(
        &env,
        &[
            "tick",
            "--all",
            "--timeout-ms",
            &LIVENESS.as_millis().to_string(),
        ],
    );
    let delivered = env
        .receiver
        .requests_for("flaky")
        .iter()
        .filter(|r| r.status == 200)
        .count();
    assert_eq!(delivered, 1, "delivered once, by the resent hook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_refuses_a_reserved_or_malformed_header_as_a_usage_error_before_committing() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["in"]).await;
    for header in [
        "webhook-id: forged",
        "Ankusa-Delivery-Id: 1.0",
        "bad name: v",
    ] {
        let o = run_in(&env, &["produce", "acme", "orders", "-H", header], b"{}");
        assert_eq!(code(&o), 2, "{header}: {}", stderr(&o));
        let name = header.split(':').next().unwrap();
        assert!(stderr(&o).contains(name), "{header}: {}", stderr(&o));
    }
    assert_eq!(json(&env, &["stats"])["hooks_committed"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_show_json_has_headers_as_an_object_and_a_delivered_row_counts_its_attempt() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["ok"]).await;
    let dir = tempfile::tempdir().unwrap();
    let _w = leading_worker(&env, &dir, "show", |_| {}).await;
    let o = run_in(
        &env,
        &[
            "produce",
            "acme",
            "orders",
            "-H",
            "content-type: application/json",
            "-H",
            "x-a: 1",
        ],
        b"{}",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim(),
        "committed 1 hook to acme/orders (hook id 1, 1 row)",
        "one hook, one row: no `1 rows`"
    );
    ok(&env, &["tick"]);
    let v = json(&env, &["hooks", "show", "acme", "1"]);
    assert_eq!(
        v["headers"],
        serde_json::json!({"content-type": "application/json", "x-a": "1"}),
        "{v}"
    );
    assert_eq!(v["rows"][0]["state"], "delivered", "{v}");
    assert_eq!(
        v["rows"][0]["attempts"], 1,
        "a delivered row made one attempt: {v}"
    );
    let text = ok(&env, &["hooks", "show", "acme", "1"]);
    assert!(
        text.contains("headers: content-type: application/json, x-a: 1"),
        "{text}"
    );
    assert!(
        text.contains("1 byte") || text.contains("2 bytes"),
        "{text}"
    );
}

/// The event type a producer sets reaches the receiver (`ankusa-event-type`, absent for a
/// hook without one) and is shown wherever the hook is: `hooks show`, `rows list`, `dlq list`
/// and `dlq show`, their `--json`, and the admin API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_type_reaches_the_receiver_and_is_shown_wherever_the_hook_is() {
    let env = Env::new().await;
    env.receiver.set("gone", Behavior::Status(404));
    env.receiver.set("busy", Behavior::Status(503));
    env.http_source("acme", "orders", &["ok", "gone", "busy"])
        .await;
    let dir = tempfile::tempdir().unwrap();
    let w = leading_worker(&env, &dir, "events", |_| {}).await;
    let typed = run_in(
        &env,
        &["produce", "acme", "orders", "--event-type", "order.created"],
        b"{}",
    );
    assert_eq!(code(&typed), 0, "{}", stderr(&typed));
    let plain = run_in(&env, &["produce", "acme", "orders"], b"{}");
    assert_eq!(code(&plain), 0, "{}", stderr(&plain));
    wait_dead_letters(&env, 2, &w).await;
    assert!(
        poll_until(LIVENESS, || async {
            env.receiver.count_for("ok") == 2 && env.receiver.count_for("busy") >= 2
        })
        .await,
        "{:?}",
        env.receiver.requests()
    );

    // The receiver: on every sink and attempt, the typed hook's header, none on the other.
    for r in env.receiver.requests() {
        let expected = match r.header("ankusa-hook-id") {
            Some("1") => Some("order.created"),
            Some("2") => None,
            other => panic!("hook {other:?}: {r:?}"),
        };
        assert_eq!(r.header("ankusa-event-type"), expected, "{r:?}");
    }

    // Dead letters: the list (text and JSON) and one shown.
    let list = ok(&env, &["dlq", "list", "--tenant", "acme"]);
    assert!(list.lines().next().unwrap().contains("EVENT"), "{list}");
    let typed_line = list.lines().find(|l| l.contains(" 1.1 ")).expect(&list);
    assert!(typed_line.contains("order.created"), "{list}");
    let plain_line = list.lines().find(|l| l.contains(" 2.1 ")).expect(&list);
    assert!(!plain_line.contains("order.created"), "{list}");
    let letters = dead_letters(&env);
    let by_hook = |h: u64| {
        letters
            .iter()
            .find(|d| d["hook"] == h)
            .cloned()
            .unwrap_or_else(|| panic!("no dead letter of hook {h}: {letters:?}"))
    };
    assert_eq!(by_hook(1)["event_type"], "order.created", "{letters:?}");
    assert!(by_hook(2).get("event_type").is_none(), "{letters:?}");
    let id = by_hook(1)["id"].as_str().unwrap().to_string();
    let shown = json(&env, &["dlq", "show", "acme", &id]);
    assert_eq!(shown["event_type"], "order.created", "{shown}");

    // hooks show and rows list.
    let show = ok(&env, &["hooks", "show", "acme", "1"]);
    assert!(show.contains("\nevent type: order.created\n"), "{show}");
    assert!(show.contains("EVENT"), "{show}");
    let v = json(&env, &["hooks", "show", "acme", "1"]);
    assert_eq!(v["event_type"], "order.created", "{v}");
    assert!(
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["event_type"] == "order.created"),
        "{v}"
    );
    let v = json(&env, &["hooks", "show", "acme", "2"]);
    assert!(v.get("event_type").is_none(), "{v}");
    assert!(!ok(&env, &["hooks", "show", "acme", "2"]).contains("event type"));
    let rows = json(&env, &["rows", "list", "--tenant", "acme"]);
    let pending = rows["rows"].as_array().unwrap();
    let of = |row: &str| pending.iter().find(|r| r["row"] == row).cloned();
    assert_eq!(
        of("1.2").expect("the typed hook's busy row is pending")["event_type"],
        "order.created",
        "{rows}"
    );
    assert!(
        of("2.2")
            .expect("the plain hook's busy row is pending")
            .get("event_type")
            .is_none(),
        "{rows}"
    );
    let text = ok(&env, &["rows", "list", "--tenant", "acme"]);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("1.2 "))
        .expect(&text);
    assert!(line.contains("order.created"), "{text}");

    // The admin API answers the same.
    let base = format!("http://{}", w.admin);
    let (status, v) = common::admin_call(
        reqwest::Method::GET,
        format!("{base}/admin/hooks/acme/1"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["event_type"], "order.created", "{v}");
    let (status, v) = common::admin_call(
        reqwest::Method::GET,
        format!("{base}/admin/rows?tenant=acme"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["row"] == "1.2" && r["event_type"] == "order.created"),
        "{v}"
    );
    let (status, v) = common::admin_call(
        reqwest::Method::GET,
        format!("{base}/admin/dlq?tenant=acme"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(
        v["dead_letters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["hook"] == 1 && d["event_type"] == "order.created"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_answers_in_one_wrapped_shape_and_an_empty_one_says_so_in_words() {
    let env = Env::new().await;
    let shapes = [
        (vec!["tenants", "top"], "tenants", true),
        (vec!["source", "list"], "sources", false),
        (vec!["rows", "list", "--tenant", "acme"], "rows", true),
        (vec!["dlq", "list"], "dead_letters", true),
    ];
    for (args, key, paged) in &shapes {
        let v = json(&env, args);
        assert_eq!(v[key], serde_json::json!([]), "{args:?}: {v}");
        if *paged {
            assert_eq!(v["more"], false, "{args:?}: {v}");
        }
        let text = ok(&env, args);
        assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        assert!(text.starts_with("no "), "{args:?}: {text}");
    }
}

#[test]
fn man_writes_one_page_per_command_each_with_exit_status_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .expect("ankusa runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for want in [
        "ankusa.1",
        "ankusa-worker.1",
        "ankusa-tick.1",
        "ankusa-dlq.1",
        "ankusa-dlq-replay.1",
        "ankusa-hooks-show.1",
    ] {
        assert!(pages.iter().any(|p| p == want), "{want} missing: {pages:?}");
    }
    // Every page another page names exists, and every page has the shared sections.
    for p in &pages {
        let text = std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert!(text.contains(".SH \"EXIT STATUS\""), "{p}");
        assert!(
            text.contains(".SH ENVIRONMENT") && text.contains("ANKUSA_CONFIG"),
            "{p}"
        );
        for (i, _) in text.match_indices("(1)") {
            let start = text[..i]
                .rfind(|c: char| c.is_whitespace() || c == 'B' || c == 'R')
                .map_or(0, |s| s + 1);
            let name = text[start..i].replace("\\-", "-").replace("\\fB", "");
            if name.starts_with("ankusa") {
                assert!(
                    pages.contains(&format!("{name}.1")),
                    "{p} names {name}(1), which is not generated"
                );
            }
        }
    }
    let one = Command::new(BIN)
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args(["man", "dlq", "replay"])
        .output()
        .expect("ankusa runs");
    let text = String::from_utf8_lossy(&one.stdout);
    assert!(
        text.contains("ankusa\\-dlq\\-replay") && text.contains("dry\\-run"),
        "{text}"
    );
    let bad = Command::new(BIN)
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args(["man", "nope"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
