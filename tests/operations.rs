//! The operations API (R20–R24, dead letters) through its three interfaces — the library,
//! the admin HTTP API of a worker process, and the `ankusa` CLI — against a real
//! redis-server, a real webhook receiver and a pool of two `ankusa worker` processes.

mod common;

use ankusa::config::Config;
use ankusa::dlq::{self, Filter, PurgeScope, ReplayOptions, ReplayProgress, Retention};
use ankusa::ops;
use ankusa::testkit::Behavior;
use ankusa::Error;
use common::procs::eventually;
use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;

/// A pool of two worker processes sharing one config file.
struct Pool {
    dir: tempfile::TempDir,
    config: PathBuf,
    workers: Vec<WorkerProcess>,
}

impl Pool {
    /// Write `env`'s config (tuned) and start two workers; waits until both answer HTTP.
    async fn start(env: &Env, tune: impl FnOnce(&mut Config)) -> Pool {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = env.config_file(&dir, tune);
        let workers = vec![
            WorkerProcess::spawn(&config, &dir, "w1"),
            WorkerProcess::spawn(&config, &dir, "w2"),
        ];
        let pool = Pool {
            dir,
            config,
            workers,
        };
        for i in 0..pool.workers.len() {
            let url = format!("{}/healthz", pool.url(i));
            wait_for("worker answers /healthz", || async {
                reqwest::get(&url)
                    .await
                    .is_ok_and(|r| r.status().is_success())
            })
            .await;
        }
        pool
    }

    fn url(&self, i: usize) -> String {
        format!("http://{}", self.workers[i].admin)
    }

    /// Rewrite the shared config file.
    fn rewrite(&self, env: &Env, tune: impl FnOnce(&mut Config)) {
        let mut c = env.config.clone();
        tune(&mut c);
        std::fs::write(&self.config, toml::to_string(&c).expect("serialises")).expect("written");
    }

    /// The index of the worker that leads now.
    async fn leader(&self) -> usize {
        eventually("a worker leads", LIVENESS, || async {
            for i in 0..self.workers.len() {
                let (status, body) = http_get(&format!("{}/admin/state", self.url(i)), None).await;
                if status == 200 && body["state"]["leading"] == true {
                    return Ok(i);
                }
            }
            Err("none does".to_string())
        })
        .await
    }
}

/// Poll `cond` until it holds; panics after [`LIVENESS`].
async fn wait_for<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually(what, LIVENESS, || {
        let held = cond();
        async move {
            held.await
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        }
    })
    .await
}

async fn http_get(url: &str, token: Option<&str>) -> (u16, Value) {
    admin_call(reqwest::Method::GET, url, token, None).await
}

async fn http_post(url: &str, body: Value) -> (u16, Value) {
    admin_call(reqwest::Method::POST, url, None, Some(body.to_string())).await
}

/// Run `ankusa <args>` against `env`'s Redis and instance; `(exit code, stdout, stderr)`.
async fn cli(env: &Env, args: &[&str]) -> (i32, String, String) {
    env.cli_with(None, args).await
}

fn parse(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Wait until the leader has published its window state (it does within ~100 ms of leading).
async fn live_leader(env: &Env) {
    wait_for("a live leader publishes its window", || async {
        ops::pressure(&env.store).await.is_ok()
    })
    .await;
}

/// Block until the pipeline is idle (library tick from this process, bounded).
async fn idle(env: &Env) -> u64 {
    tokio::time::timeout(LIVENESS, ops::tick(&env.store, None))
        .await
        .expect("idle in time")
        .expect("tick")
}

fn key(env: &Env, rest: &str) -> String {
    format!("ankusa:{{{}.p0}}:{rest}", env.config.instance)
}

fn hook_keys(env: &Env) -> usize {
    let out = env.redis_cmd(&["KEYS", &key(env, "hook:*")]);
    out.lines().filter(|l| !l.is_empty()).count()
}

async fn dlq_count(env: &Env, tenant: &str) -> u64 {
    dlq::count(&env.store, tenant).await.expect("xlen")
}

/// A test config: long attempt timeout, so rows held by a hanging endpoint stay claimed.
fn hold(c: &mut Config) {
    c.dispatch.attempt_timeout_ms = 60_000;
}

/// Dead-letter `n` hooks of `tenant/source` through a sink answering 400 (permanent).
async fn dead_letters(env: &Env, tenant: &str, source: &str, path: &str, n: usize) -> Vec<u64> {
    env.receiver.set(path, Behavior::Status(400));
    env.http_source(tenant, source, &[path]).await;
    let before = dlq_count(env, tenant).await;
    let ids = env.commit_n(tenant, source, n).await;
    idle(env).await;
    assert_eq!(dlq_count(env, tenant).await, before + n as u64);
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_source_counts_pending_rows_drops_hook_gone_ones_and_leaves_claimed_ones_in_every_interface(
) {
    let env = Env::with(Default::default(), |c| {
        hold(c);
        c.dispatch.tenants.insert(
            "default".into(),
            ankusa::config::TenantLimits {
                max_inflight: Some(2),
                ..Default::default()
            },
        );
    })
    .await;
    env.receiver.set("hang", Behavior::Hang);
    let tenants = ["t-lib", "t-http", "t-cli"];
    for t in tenants {
        env.http_source(t, "doomed", &["hang"]).await;
    }
    env.http_source("t-lib", "kept", &["ok"]).await;
    let pool = Pool::start(&env, |_| {}).await;
    let mut hooks = Vec::new();
    for t in tenants {
        hooks.push(env.commit_n(t, "doomed", 10).await);
    }
    // Each tenant's window (2) fills with hanging attempts; 8 rows per tenant stay pending.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 6)
            .await
    );
    let kept = env.commit_n("t-lib", "kept", 4).await;
    // Three pending rows per tenant lose their hook.
    for (t, ids) in tenants.iter().zip(&hooks) {
        let due = env.redis_cmd(&["ZRANGE", &key(&env, &format!("due:{t}")), "0", "-1"]);
        let pending: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|h| due.lines().any(|l| l == format!("{h}.0")))
            .collect();
        assert_eq!(pending.len(), 8, "{t}: {due}");
        for h in &pending[..3] {
            env.redis_cmd(&["DEL", &key(&env, &format!("hook:{h}"))]);
        }
    }

    live_leader(&env).await;
    // Library.
    let r = ops::dead_letter_source(&env.store, "t-lib", "doomed", LIVENESS)
        .await
        .expect("library call");
    assert_eq!((r.count, r.dropped), (5, 3));
    // Admin HTTP, on the second worker (any worker may run it).
    let (status, body) = http_post(
        &format!("{}/admin/dead_letter_source", pool.url(1)),
        json!({"tenant": "t-http", "source": "doomed"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"count": 5, "dropped": 3}));
    // CLI.
    let (code, out, err) = cli(&env, &["--json", "dead-letter-source", "t-cli", "doomed"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(parse(&out), json!({"count": 5, "dropped": 3}));
    let (code, out, _) = cli(&env, &["dead-letter-source", "t-cli", "doomed"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("dead-lettered 0 pending rows"), "{out}");

    for t in tenants {
        assert_eq!(dlq_count(&env, t).await, 5, "{t}");
        let page = dlq::browse(
            &env.store,
            &Filter {
                tenant: Some(t.into()),
                ..Default::default()
            },
            100,
        )
        .await
        .unwrap();
        assert!(page
            .dead_letters
            .iter()
            .all(|d| d.reason == "source_gone(doomed)" && d.source == "doomed"));
    }
    // The claimed rows are left alone; the other source's pending rows too.
    assert_eq!(env.store.claimed_count().await.unwrap(), 6);
    assert_eq!(env.store.pending_count("t-lib").await.unwrap(), 4);
    assert_eq!(env.store.pending_count("t-http").await.unwrap(), 0);
    assert_eq!(env.store.totals().await.unwrap().dropped, 9);
    // A dead-lettered row's hook is kept for replay: no row left, one dead letter.
    let dead_hook = page_hook(&env, "t-lib").await;
    assert_eq!(
        env.redis_cmd(&["HMGET", &key(&env, &format!("hook:{dead_hook}")), "n", "d"]),
        "0\n1"
    );

    // The claimed rows come back pending once the leader dies; the source is gone by then,
    // so the next leader dead-letters them source_gone at their claim.
    for t in tenants {
        assert!(env.store.delete_source(t, "doomed").await.unwrap());
    }
    let mut pool = pool;
    let leader = pool.leader().await;
    pool.workers[leader].kill9();
    idle(&env).await;
    for t in tenants {
        assert_eq!(dlq_count(&env, t).await, 7, "{t}");
    }
    assert_eq!(env.receiver.count_for("ok"), kept.len());
    assert_eq!(env.store.totals().await.unwrap().dead_lettered, 21);
}

async fn dead_letter_hooks(env: &Env, tenant: &str) -> Vec<u64> {
    let page = dlq::browse(
        &env.store,
        &Filter {
            tenant: Some(tenant.into()),
            ..Default::default()
        },
        1000,
    )
    .await
    .unwrap();
    page.dead_letters.iter().filter_map(|d| d.hook).collect()
}

async fn page_hook(env: &Env, tenant: &str) -> u64 {
    let page = dlq::browse(
        &env.store,
        &Filter {
            tenant: Some(tenant.into()),
            ..Default::default()
        },
        1,
    )
    .await
    .unwrap();
    page.dead_letters[0].hook.expect("hook id")
}

async fn pressure_everywhere(env: &Env, pool: &Pool) -> [Value; 3] {
    let lib =
        serde_json::to_value(ops::pressure(&env.store).await.expect("library pressure")).unwrap();
    let (status, http) = http_get(&format!("{}/admin/pressure", pool.url(0)), None).await;
    assert_eq!(status, 200, "{http}");
    let (code, out, err) = cli(env, &["--json", "pressure"]).await;
    assert_eq!(code, 0, "{out}{err}");
    [lib, http, parse(&out)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pressure_shows_nothing_due_a_backlog_and_a_full_window_in_every_interface() {
    let env = Env::with(Default::default(), |c| {
        hold(c);
        c.dispatch.max_inflight = 4;
        c.dispatch.tenants.insert(
            "default".into(),
            ankusa::config::TenantLimits {
                max_inflight: Some(2),
                ..Default::default()
            },
        );
    })
    .await;
    env.receiver.set("hang", Behavior::Hang);
    env.http_source("a", "s", &["hang"]).await;
    env.http_source("b", "s", &["hang"]).await;
    let pool = Pool::start(&env, |_| {}).await;
    wait_for("the leader publishes its window", || async {
        ops::pressure(&env.store).await.is_ok()
    })
    .await;

    // Nothing due.
    for p in pressure_everywhere(&env, &pool).await {
        assert_eq!(p, json!({"lag_ms": 0, "window_full": false}));
    }

    // A backlog: tenant a's window (2) is full, 3 rows wait; the global window (4) is not.
    env.commit_n("a", "s", 5).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 2)
            .await
    );
    wait_for("the backlog shows as lag", || async {
        ops::pressure(&env.store).await.is_ok_and(|p| p.lag_ms > 0)
    })
    .await;
    for p in pressure_everywhere(&env, &pool).await {
        assert!(p["lag_ms"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(p["window_full"], false, "{p}");
    }

    // The global window full: tenant b takes the last 2 rows of room.
    env.commit_n("b", "s", 5).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 4)
            .await
    );
    wait_for("the window shows full", || async {
        ops::pressure(&env.store).await.is_ok_and(|p| p.window_full)
    })
    .await;
    for p in pressure_everywhere(&env, &pool).await {
        assert!(p["lag_ms"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(p["window_full"], true, "{p}");
    }
    let (code, out, _) = cli(&env, &["pressure"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("window full  yes"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_live_leader_pressure_and_dead_letter_source_are_unavailable_in_every_interface() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["ok"]).await;
    // Someone else holds the lease: both workers stand by.
    env.redis_cmd(&["SET", &key(&env, "lease"), "ghost:999", "PX", "600000"]);
    let mut pool = Pool::start(&env, |_| {}).await;
    env.commit_n("acme", "orders", 3).await;

    assert!(matches!(
        ops::pressure(&env.store).await,
        Err(Error::Unavailable(_))
    ));
    assert!(matches!(
        ops::dead_letter_source(&env.store, "acme", "orders", LIVENESS).await,
        Err(Error::Unavailable(_))
    ));
    let (status, body) = http_get(&format!("{}/admin/pressure", pool.url(0)), None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    let (status, body) = http_post(
        &format!("{}/admin/dead_letter_source", pool.url(1)),
        json!({"tenant": "acme", "source": "orders"}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    let (code, out, _) = cli(&env, &["--json", "pressure"]).await;
    assert_eq!(code, 3);
    assert_eq!(parse(&out)["error"]["code"], "unavailable");
    let (code, _, err) = cli(&env, &["dead-letter-source", "acme", "orders"]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("unavailable"), "{err}");
    // Nothing was touched.
    assert_eq!(env.store.pending_count("acme").await.unwrap(), 3);

    // The ghost's lease goes: a worker takes over, delivers, and pressure answers.
    env.redis_cmd(&["DEL", &key(&env, "lease")]);
    wait_for("a leader publishes", || async {
        ops::pressure(&env.store).await.is_ok()
    })
    .await;
    idle(&env).await;
    assert_eq!(env.receiver.count_for("ok"), 3);

    // Both workers die: once the lease lapses there is no live leader again.
    for w in pool.workers.iter_mut() {
        w.kill9();
    }
    wait_for("pressure is unavailable", || async {
        matches!(ops::pressure(&env.store).await, Err(Error::Unavailable(_)))
    })
    .await;
    let (code, _, _) = cli(&env, &["pressure"]).await;
    assert_eq!(code, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_paced_by_pressure_waits_while_the_window_is_full_then_delivers_every_dead_letter_once(
) {
    let env = Env::with(Default::default(), |c| {
        hold(c);
        c.dispatch.max_inflight = 2;
    })
    .await;
    let mut pool = Pool::start(&env, |_| {}).await;
    dead_letters(&env, "acme", "orders", "flaky", 20).await;
    env.receiver.set("flaky", Behavior::Ok);

    // Two hanging attempts of another tenant fill the window (2).
    env.receiver.set("hang", Behavior::Hang);
    env.http_source("block", "jam", &["hang"]).await;
    env.commit_n("block", "jam", 2).await;
    wait_for("the window is full", || async {
        ops::pressure(&env.store).await.is_ok_and(|p| p.window_full)
    })
    .await;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let store = env.store.clone();
    let replay = tokio::spawn(async move {
        let filter = Filter {
            tenant: Some("acme".into()),
            ..Default::default()
        };
        let opts = ReplayOptions {
            batch: 5,
            max_lag_ms: 1_000,
            ..Default::default()
        };
        dlq::replay(&store, &filter, &opts, |p| {
            let _ = tx.send(p);
        })
        .await
    });
    assert_eq!(rx.recv().await, Some(ReplayProgress::Matched { total: 20 }));
    match rx.recv().await {
        Some(ReplayProgress::Paused { why }) => assert!(why.contains("window is full"), "{why}"),
        other => panic!("expected a pause, got {other:?}"),
    }
    assert_eq!(
        dlq_count(&env, "acme").await,
        20,
        "nothing is replayed while the window is full"
    );

    // Free the window: the jam's source goes and its leader dies; the next leader
    // dead-letters the jam rows source_gone and the replay goes on.
    env.store.delete_source("block", "jam").await.unwrap();
    let leader = pool.leader().await;
    pool.workers[leader].kill9();
    let report = tokio::time::timeout(LIVENESS, replay)
        .await
        .expect("replay ends")
        .unwrap()
        .expect("replay ok");
    assert_eq!(
        (
            report.matched,
            report.replayed,
            report.hook_gone,
            report.missing,
            report.live
        ),
        (20, 20, 0, 0, 0)
    );
    assert!(report.pauses >= 1);
    idle(&env).await;
    assert_eq!(
        env.receiver.count_for("flaky"),
        40,
        "20 refused, then 20 delivered once each"
    );
    assert_eq!(env.store.totals().await.unwrap().delivered, 20);
    assert_eq!(dlq_count(&env, "acme").await, 0);
    assert_eq!(dlq_count(&env, "block").await, 2);
    assert_eq!(
        hook_keys(&env),
        2,
        "only the jam's hooks stay, for their dead letters"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_shown_and_replayed_over_http_and_the_cli_and_none_is_lost() {
    let env = Env::with(Default::default(), |c| c.dispatch.max_inflight = 3).await;
    let pool = Pool::start(&env, |_| {}).await;
    dead_letters(&env, "t-http", "orders", "flaky", 15).await;
    dead_letters(&env, "t-cli", "orders", "flaky", 15).await;
    env.receiver.set("flaky", Behavior::Delay { ms: 5 });

    // Browse: HTTP and CLI agree with the library, filters apply.
    let (status, body) = http_get(
        &format!(
            "{}/admin/dlq?tenant=t-http&reason=permanent&sink=http&since=1h&limit=10",
            pool.url(0)
        ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["dead_letters"].as_array().unwrap().len(), 10);
    assert_eq!(body["more"], true);
    let first = body["dead_letters"][0].clone();
    assert_eq!(first["tenant"], "t-http");
    assert!(
        first["reason"].as_str().unwrap().starts_with("permanent("),
        "{first}"
    );
    let (status, none) = http_get(&format!("{}/admin/dlq?source=billing", pool.url(0)), None).await;
    assert_eq!(
        (status, none["dead_letters"].as_array().unwrap().len()),
        (200, 0)
    );
    let (status, bad) = http_get(&format!("{}/admin/dlq?since=yesterday", pool.url(0)), None).await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    let (code, out, _) = cli(
        &env,
        &[
            "--json",
            "dlq",
            "list",
            "--tenant",
            "t-cli",
            "--reason",
            "permanent",
        ],
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(parse(&out)["dead_letters"].as_array().unwrap().len(), 15);
    let (code, out, _) = cli(&env, &["dlq", "list", "--source", "orders"]).await;
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().filter(|l| l.contains(" orders ")).count(),
        30,
        "{out}"
    );
    // Show: the hook's body is there.
    let id = first["id"].as_str().unwrap();
    let (status, shown) = http_get(&format!("{}/admin/dlq/t-http/{id}", pool.url(1)), None).await;
    assert_eq!(status, 200, "{shown}");
    assert!(
        shown["hook_body"]["body"]
            .as_str()
            .unwrap()
            .starts_with("{\"n\":"),
        "{shown}"
    );
    let (code, out, _) = cli(&env, &["--json", "dlq", "show", "t-http", id]).await;
    assert_eq!(code, 0);
    assert_eq!(parse(&out)["row"], first["row"]);
    // In words: the reason, the row and the body, no JSON document.
    let (code, out, _) = cli(&env, &["dlq", "show", "t-http", id]).await;
    assert_eq!(code, 0, "{out}");
    let row = first["row"].as_str().unwrap();
    assert!(
        out.contains(&format!("row {row}")) && out.contains("reason ") && out.contains("{\"n\":"),
        "{out}"
    );
    assert!(serde_json::from_str::<Value>(out.trim()).is_err(), "{out}");
    let (status, missing) = http_get(&format!("{}/admin/dlq/t-http/1-0", pool.url(1)), None).await;
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (code, _, _) = cli(&env, &["dlq", "show", "t-http", "1-0"]).await;
    assert_eq!(code, 1);

    // Replay over HTTP, then with the CLI, both paced by pressure.
    let (status, report) = http_post(
        &format!("{}/admin/dlq/replay", pool.url(1)),
        json!({"filter": {"tenant": "t-http"}, "options": {"batch": 4, "max_lag_ms": 200}}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        (report["matched"].as_u64(), report["replayed"].as_u64()),
        (Some(15), Some(15))
    );
    let (code, out, err) = cli(
        &env,
        &[
            "--json",
            "dlq",
            "replay",
            "--tenant",
            "t-cli",
            "--reason",
            "permanent",
            "--batch",
            "4",
            "--max-lag-ms",
            "200",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let report = parse(&out);
    assert_eq!(
        (report["matched"].as_u64(), report["replayed"].as_u64()),
        (Some(15), Some(15))
    );

    idle(&env).await;
    assert_eq!(
        env.receiver.count_for("flaky"),
        60,
        "30 refused, then 30 delivered once each"
    );
    assert_eq!(env.store.totals().await.unwrap().delivered, 30);
    assert_eq!(
        dlq_count(&env, "t-http").await + dlq_count(&env, "t-cli").await,
        0
    );
    assert_eq!(hook_keys(&env), 0);
    assert!(dlq::tenants(&env.store).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_keeps_what_the_retention_keeps_and_frees_the_hook_bodies_of_the_rest() {
    let env = Env::new().await;
    // The workers keep 5 dead letters per tenant, whatever their age; none on their own.
    let pool = Pool::start(&env, |c| {
        c.dlq.max_per_tenant = 5;
        c.dlq.max_age_ms = 0;
        c.dlq.sweep_ms = 0;
    })
    .await;

    // Library: count retention for one tenant.
    dead_letters(&env, "t1", "s", "refuse", 8).await;
    let oldest_first = dead_letter_hooks(&env, "t1").await;
    let scope = PurgeScope::Retention {
        retention: Retention {
            max_age_ms: 0,
            max_per_tenant: 5,
        },
        tenant: Some("t1".into()),
    };
    assert_eq!(dlq::purge(&env.store, &scope).await.unwrap().purged, 3);
    assert_eq!(dlq_count(&env, "t1").await, 5);
    assert_eq!(hook_keys(&env), 5);
    // The three oldest went.
    assert_eq!(
        dead_letter_hooks(&env, "t1").await,
        oldest_first[3..].to_vec()
    );

    // Admin HTTP: an empty purge applies the workers' retention to every tenant.
    dead_letters(&env, "t2", "s", "refuse", 7).await;
    let (status, body) = http_post(&format!("{}/admin/dlq/purge", pool.url(0)), json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"purged": 2}));
    assert_eq!(
        (dlq_count(&env, "t1").await, dlq_count(&env, "t2").await),
        (5, 5)
    );
    assert_eq!(hook_keys(&env), 10);

    // CLI: its own config keeps dead letters for 3 s. Once the ten are older than that,
    // three fresh ones of t3 stay and the ten go.
    let cli_config = pool.dir.path().join("cli.toml");
    let mut c = env.config.clone();
    c.dlq.max_age_ms = 3_000;
    c.dlq.max_per_tenant = 0;
    std::fs::write(&cli_config, toml::to_string(&c).unwrap()).unwrap();
    let newest = dlq::browse(
        &env.store,
        &Filter {
            tenant: Some("t2".into()),
            ..Default::default()
        },
        100,
    )
    .await
    .unwrap()
    .dead_letters
    .last()
    .unwrap()
    .at_ms;
    wait_for("the ten are older than 3 s", || async {
        env.store.now_ms().await.unwrap() > newest + 3_000
    })
    .await;
    dead_letters(&env, "t3", "s", "refuse", 3).await;
    let (code, out, err) = env
        .cli_with(Some(&cli_config), &["--json", "dlq", "purge"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(parse(&out), json!({"purged": 10}));
    assert_eq!(
        dlq::tenants(&env.store).await.unwrap(),
        vec!["t3".to_string()]
    );
    assert_eq!(hook_keys(&env), 3);

    // A filtered purge deletes what it selects, whatever the retention.
    let (code, out, _) = cli(
        &env,
        &["dlq", "purge", "--tenant", "t3", "--reason", "permanent"],
    )
    .await;
    assert_eq!(code, 0);
    assert!(out.contains("purged 3 dead letters"), "{out}");
    assert_eq!(hook_keys(&env), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconfigure_takes_new_limits_from_the_config_file_over_http_and_the_cli() {
    let env = Env::with(Default::default(), |c| {
        hold(c);
        c.dispatch.concurrency = 1;
    })
    .await;
    env.receiver.set("hang", Behavior::Hang);
    env.http_source("acme", "orders", &["hang"]).await;
    let pool = Pool::start(&env, |_| {}).await;
    env.commit_n("acme", "orders", 8).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 1)
            .await
    );

    // HTTP: both workers re-read the file.
    pool.rewrite(&env, |c| {
        hold(c);
        c.dispatch.concurrency = 3;
    });
    for i in 0..2 {
        let (status, body) =
            http_post(&format!("{}/admin/reconfigure", pool.url(i)), json!({})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["concurrency"], 3);
    }
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 3)
            .await
    );

    // CLI, naming every worker of the pool.
    pool.rewrite(&env, |c| {
        hold(c);
        c.dispatch.concurrency = 5;
    });
    let (a, b) = (pool.url(0), pool.url(1));
    let (code, out, err) = cli(
        &env,
        &["--json", "reconfigure", "--admin", &a, "--admin", &b],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let workers = parse(&out)["workers"].as_array().unwrap().clone();
    assert!(
        workers
            .iter()
            .all(|w| w["ok"] == true && w["limits"]["concurrency"] == 5),
        "{workers:?}"
    );
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 5)
            .await
    );

    // An invalid file changes nothing and names the key.
    pool.rewrite(&env, |c| {
        hold(c);
        c.dispatch.concurrency = 0;
    });
    let (status, body) = http_post(&format!("{}/admin/reconfigure", pool.url(0)), json!({})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_config");
    assert_eq!(body["error"]["problems"][0]["key"], "dispatch.concurrency");
    let (code, _, err) = cli(&env, &["reconfigure", "--admin", &a]).await;
    assert_eq!(code, 2);
    assert!(err.contains("dispatch.concurrency: must be > 0"), "{err}");
    let (_, state) = http_get(&format!("{a}/admin/state"), None).await;
    assert_eq!(state["limits"]["concurrency"], 5);
    // A worker that is not there is unavailable.
    let (code, _, _) = cli(
        &env,
        &[
            "reconfigure",
            "--admin",
            &format!("127.0.0.1:{}", free_port()),
        ],
    )
    .await;
    assert_eq!(code, 3);
    assert_eq!(env.receiver.count_for("hang"), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconfigure_as_a_library_call_takes_new_limits_and_refuses_an_invalid_config() {
    let env = Env::with(Default::default(), |c| {
        hold(c);
        c.dispatch.concurrency = 1;
    })
    .await;
    env.receiver.set("hang", Behavior::Hang);
    env.http_source("acme", "orders", &["hang"]).await;
    let worker = env.worker().await;
    env.commit_n("acme", "orders", 4).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 1)
            .await
    );
    let mut next = env.config.clone();
    next.dispatch.concurrency = 3;
    worker.reconfigure(&next).expect("valid");
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 3)
            .await
    );
    next.dispatch.concurrency = 0;
    let err = worker.reconfigure(&next).expect_err("invalid");
    assert_eq!(err.exit_code(), 2);
    assert!(
        err.to_string()
            .contains("dispatch.concurrency: must be > 0"),
        "{err}"
    );
    assert_eq!(worker.config().dispatch.concurrency, 3);
    worker.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tick_returns_once_everything_settled_in_every_interface() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["ok"]).await;
    let pool = Pool::start(&env, |_| {}).await;

    env.commit_n("acme", "orders", 5).await;
    let settled = idle(&env).await;
    assert!(settled <= 5);
    assert_eq!(env.store.totals().await.unwrap().delivered, 5);

    env.commit_n("acme", "orders", 5).await;
    let (status, body) = http_post(&format!("{}/admin/tick", pool.url(1)), json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["settled"].as_u64().unwrap() <= 5);
    assert_eq!(env.store.totals().await.unwrap().delivered, 10);

    env.commit_n("acme", "orders", 5).await;
    let (code, out, _) = cli(&env, &["--json", "tick"]).await;
    assert_eq!(code, 0);
    assert!(parse(&out)["settled"].as_u64().unwrap() <= 5);
    assert_eq!(env.store.totals().await.unwrap().delivered, 15);
    assert_eq!(env.receiver.count_for("ok"), 15);

    // A row that cannot settle: the CLI's deadline answers unavailable.
    env.receiver.set("hang", Behavior::Hang);
    env.http_source("acme", "stuck", &["hang"]).await;
    env.commit("acme", "stuck", "{}").await;
    let (code, _, err) = cli(&env, &["tick", "--timeout-ms", "300"]).await;
    assert_eq!(code, 3, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_config_names_each_bad_key_in_every_interface() {
    let env = Env::new().await;
    let pool = Pool::start(&env, |_| {}).await;
    let bad = "[dispatch.tenants.acme]\nmax_inflight = 0\n[retry]\njitter = 1.5\n";

    let err = ops::validate_config_toml(bad).expect_err("invalid");
    let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["dispatch.tenants.acme.max_inflight", "retry.jitter"]);
    assert!(ops::validate_config(&env.config).is_ok());

    let resp = reqwest::Client::new()
        .post(format!("{}/admin/config/check", pool.url(0)))
        .header("content-type", "application/toml")
        .body(bad)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "invalid_config");
    assert_eq!(
        body["error"]["problems"][0]["key"],
        "dispatch.tenants.acme.max_inflight"
    );
    assert_eq!(body["error"]["problems"][0]["message"], "must be > 0");
    let resp = reqwest::Client::new()
        .post(format!("{}/admin/config/check", pool.url(0)))
        .body("[dispatch]\nconcurency = 8\n")
        .send()
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("dispatch.concurency"),
        "{body}"
    );

    let file = pool.dir.path().join("bad.toml");
    std::fs::write(&file, bad).unwrap();
    let (code, _, err) = cli(&env, &["config", "check", file.to_str().unwrap()]).await;
    assert_eq!(code, 2);
    assert!(
        err.contains("dispatch.tenants.acme.max_inflight: must be > 0"),
        "{err}"
    );
    assert!(
        err.contains("retry.jitter: must be between 0.0 and 1.0"),
        "{err}"
    );
    let (code, out, _) = cli(&env, &["--json", "config", "check", file.to_str().unwrap()]).await;
    assert_eq!(code, 2);
    assert_eq!(parse(&out)["error"]["problems"][1]["key"], "retry.jitter");
    let (code, out, _) = cli(
        &env,
        &["--json", "config", "check", pool.config.to_str().unwrap()],
    )
    .await;
    assert_eq!((code, parse(&out)), (0, json!({"ok": true})));
    // A usage error is clap's: exit 2 as well.
    let (code, _, _) = cli(&env, &["dlq", "replay", "--batch", "many"]).await;
    assert_eq!(code, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_refuses_a_missing_or_wrong_token_with_a_json_401() {
    let env = Env::new().await;
    let pool = Pool::start(&env, |c| c.admin.token = Some("s3cret".into())).await;
    let url = pool.url(0);
    for token in [None, Some("wrong"), Some("s3cre")] {
        for (method, path) in [
            (reqwest::Method::GET, "/admin/pressure"),
            (reqwest::Method::POST, "/admin/tick"),
            (reqwest::Method::POST, "/admin/reconfigure"),
            (reqwest::Method::GET, "/admin/dlq"),
            (reqwest::Method::POST, "/admin/dlq/purge"),
            (reqwest::Method::GET, "/admin/state"),
            (reqwest::Method::POST, "/v1/hooks/acme/orders"),
        ] {
            let (status, body) =
                admin_call(method, &format!("{url}{path}"), token, Some("{}".into())).await;
            assert_eq!(status, 401, "{path} {token:?}");
            assert_eq!(body["error"]["code"], "unauthorized", "{path}");
        }
    }
    wait_for("a leader publishes", || async {
        ops::pressure(&env.store).await.is_ok()
    })
    .await;
    let (status, _) = http_get(&format!("{url}/admin/pressure"), Some("s3cret")).await;
    assert_eq!(status, 200);
    // Health, metrics and the OpenAPI document stay open.
    assert_eq!(http_get(&format!("{url}/readyz"), None).await.0, 200);
    let (status, doc) = http_get(&format!("{url}/openapi.json"), None).await;
    assert_eq!(status, 200);
    assert!(doc["paths"]["/admin/dlq/replay"]["post"].is_object());
    let (status, body) = http_get(&format!("{url}/no/such/thing"), None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    // The CLI's reconfigure sends the config's token, or --token.
    let (code, _, err) = cli(&env, &["reconfigure", "--admin", &url, "--token", "wrong"]).await;
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = env
        .cli_with(Some(&pool.config), &["reconfigure", "--admin", &url])
        .await;
    assert_eq!(code, 0, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_source_takes_the_members_of_its_lanes_and_a_replay_puts_them_back_in_lane_order(
) {
    use ankusa::model::{SinkEntry, SourceSpec};
    let env = Env::with(Default::default(), hold).await;
    env.receiver.set("o", Behavior::Hang);
    let ordered = SinkEntry {
        ordered: true,
        key: Some("json:/lane".into()),
        ..env.http_sink("o")
    };
    env.store
        .put_source(
            "acme",
            "feed",
            &SourceSpec {
                sinks: vec![ordered],
            },
        )
        .await
        .unwrap();
    let mut pool = Pool::start(&env, |_| {}).await;
    let mut lane_of = std::collections::HashMap::new();
    for n in 0..5 {
        for lane in ["a", "b"] {
            let id = env
                .commit("acme", "feed", json!({"lane": lane, "n": n}).to_string())
                .await;
            lane_of.insert(id, lane);
        }
    }
    // Each lane's head hangs, claimed; its 4 members wait in the lane.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() == 2)
            .await
    );
    live_leader(&env).await;
    let r = ops::dead_letter_source(&env.store, "acme", "feed", LIVENESS)
        .await
        .unwrap();
    assert_eq!((r.count, r.dropped), (8, 0));
    assert_eq!(env.store.claimed_count().await.unwrap(), 2);
    assert_eq!(env.redis_cmd(&["GET", &key(&env, "lane_members")]), "0");
    assert_eq!(env.redis_cmd(&["SCARD", &key(&env, "lanes:acme")]), "0");

    // The heads come back and are delivered by the next leader; their lanes go idle.
    env.receiver.set("o", Behavior::Ok);
    let leader = pool.leader().await;
    pool.workers[leader].kill9();
    idle(&env).await;
    assert_eq!(env.receiver.count_for("o"), 4);

    // A replay puts the members back in their lanes, in their order.
    let report = dlq::replay(
        &env.store,
        &Filter::default(),
        &ReplayOptions::default(),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(report.replayed, 8);
    idle(&env).await;
    let requests = env.receiver.requests_for("o");
    assert_eq!(requests.len(), 12);
    for lane in ["a", "b"] {
        let order: Vec<u64> = requests[4..]
            .iter()
            .filter_map(|r| r.header("ankusa-hook-id").and_then(|h| h.parse().ok()))
            .filter(|h| lane_of[h] == lane)
            .collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order.len(), 4, "{lane}");
        assert_eq!(order, sorted, "lane {lane} delivered out of order");
    }
    assert_eq!(dlq_count(&env, "acme").await, 0);
    assert_eq!(hook_keys(&env), 0);
}
