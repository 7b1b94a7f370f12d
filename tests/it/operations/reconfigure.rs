//! Reconfiguring a running worker and validating a config, over HTTP, the CLI and the
//! library.

use super::*;

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
    // A sink module the build does not have is the sink registry's to refuse, in every
    // interface alike, by its key, in one list with the config's own problems.
    let resp = reqwest::Client::new()
        .post(format!("{}/admin/config/check", pool.url(0)))
        .body("[limits]\nmodules = [\"http\", \"ftp\"]\n")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(
        body["error"]["problems"][0]["key"], "limits.modules[1]",
        "{body}"
    );
    std::fs::write(
        &file,
        "[retry]\njitter = 1.5\n[tenants.acme]\nmodules = [\"sns\"]\n",
    )
    .unwrap();
    let (code, _, err) = cli(&env, &["config", "check", file.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("retry.jitter: must be between 0.0 and 1.0"),
        "{err}"
    );
    assert!(
        err.contains("tenants.acme.modules[0]: \"sns\" is no sink module (known: http, sqs,"),
        "{err}"
    );
    // A usage error is clap's: exit 2 as well.
    let (code, _, _) = cli(&env, &["dlq", "replay", "--batch", "many"]).await;
    assert_eq!(code, 2);
}
