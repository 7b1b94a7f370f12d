//! The operations API (dead letters) through its three interfaces — the library,
//! the admin HTTP API of a worker process, and the `ankusa` CLI — against a real
//! redis-server, a real webhook receiver and a pool of two `ankusa worker` processes.

use crate::common;
mod dead_letters;
mod reconfigure;

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
async fn the_admin_api_refuses_a_missing_or_wrong_token_with_a_json_401() {
    let env = Env::new().await;
    let pool = Pool::start(&env, |c| {
        c.admin.token = Some("s3cret-0123456789abcdefghijklmnopqrstuv".into())
    })
    .await;
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
    let (status, _) = http_get(
        &format!("{url}/admin/pressure"),
        Some("s3cret-0123456789abcdefghijklmnopqrstuv"),
    )
    .await;
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
