//! The command line against a Redis that is not there, not Redis, or not yet up: exit
//! codes and plain-words messages with the password redacted.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tick_without_a_worker_exits_3_at_once_saying_no_leader_holds_the_lease() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["ok"]).await;
    // Nothing due (as while rows wait out a backoff): still no leader to finish anything.
    let out = run(&env, &["tick"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    env.commit("acme", "orders", "{}").await;
    for args in [&["tick"][..], &["tick", "--timeout-ms", "60000"]] {
        let started = Instant::now();
        let out = run(&env, args);
        assert_eq!(code(&out), 3, "{}", stderr(&out));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "tick waited {:?} for a leader that does not exist",
            started.elapsed()
        );
        assert!(
            stderr(&out).contains("no leader holds the lease"),
            "{}",
            stderr(&out)
        );
    }
    let out = run(&env, &["--json", "tick"]);
    assert_eq!(code(&out), 3);
    assert_eq!(json(&out)["error"]["code"], "unavailable");
}

#[test]
fn an_unreachable_redis_is_named_with_its_password_redacted_and_what_to_do() {
    let port = common::free_port();
    let url = format!("redis://:hunter2@127.0.0.1:{port}");
    for args in [
        &["stats"][..],
        &["dlq", "list"],
        &["source", "list"],
        &["tick"],
    ] {
        let mut full = vec!["--redis-url", url.as_str()];
        full.extend_from_slice(args);
        let out = run_bare(&full, &[]);
        let err = stderr(&out);
        assert_eq!(code(&out), 3, "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "cannot reach Redis at redis://:***@127.0.0.1:{port}"
            )),
            "{args:?}: {err}"
        );
        assert!(err.contains("connection refused"), "{err}");
        assert!(err.contains("--redis-url"), "says what to do: {err}");
        assert!(!err.contains("hunter2"), "password leaked: {err}");
        assert!(
            !err.contains("Os {") && !err.contains("kind:"),
            "Debug text: {err}"
        );
    }
    let out = run_bare(&["--json", "--redis-url", &url, "stats"], &[]);
    assert_eq!(code(&out), 3);
    let v = json(&out);
    assert_eq!(v["error"]["code"], "unavailable");
    assert!(!v.to_string().contains("hunter2"), "{v}");
}

/// A server on `redis.url`'s port that is not Redis (here an HTTP server) is named as such,
/// by the commands and by the worker, which does not wait for it; a URL without a scheme is
/// told what to write instead of reading like a limitation of the build.
#[test]
fn a_server_that_is_not_redis_and_a_url_without_a_scheme_are_named_in_plain_words() {
    let http = ankusa::testkit::Receiver::start().expect("receiver starts");
    let url = format!("redis://:hunter2@127.0.0.1:{}", http.port());
    for args in [
        &["stats"][..],
        &[
            "worker",
            "--listen",
            &format!("127.0.0.1:{}", common::free_port()),
        ],
    ] {
        let mut full = vec!["--redis-url", url.as_str()];
        full.extend_from_slice(args);
        let started = Instant::now();
        let out = run_bare(&full, &[]);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "the server at redis://:***@127.0.0.1:{} does not speak the Redis protocol",
                http.port()
            )),
            "{args:?}: {err}"
        );
        assert!(!err.contains("frame_type"), "{args:?}: {err}");
        assert!(!err.contains("hunter2"), "password leaked: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?} waited {:?} for a server that is not Redis",
            started.elapsed()
        );
    }

    let bare = format!("127.0.0.1:{}", common::free_port());
    for args in [&["stats"][..], &["worker"]] {
        let mut full = vec!["--redis-url", bare.as_str()];
        full.extend_from_slice(args);
        let out = run_bare(&full, &[]);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{args:?}: {err}");
        assert!(
            err.contains(&format!("did you mean redis://{bare}?")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("this build"), "{args:?}: {err}");
    }
}

/// At start the worker waits for a Redis that is not up yet (containers starting together),
/// logging each try, and leads once it is; with a short `redis.startup_wait_ms` it gives up
/// after that long with exit status 3, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_waits_for_redis_at_start_up_to_its_bound() {
    let mut env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    let patient = common::procs::write_config(&env, &dir, "patient.toml", |c| {
        c.redis.startup_wait_ms = 120_000
    });
    env.redis.stop();
    let w = common::procs::spawn_worker(&patient, &dir, "patient", &[], &[]);
    assert!(
        poll_until(LIVENESS, || async {
            w.log_text().matches("waiting for redis").count() >= 3
        })
        .await,
        "no progress lines while Redis is down:\n{}",
        w.log_text()
    );
    let log = w.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("waiting for redis"))
        .unwrap();
    for field in [
        "waited_ms=",
        "retry_in_ms=",
        "wait_up_to_ms=120000",
        "attempt=1",
    ] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
    env.redis.start_again().expect("redis starts again");
    wait_leader(&w).await;
    assert!(w.log_text().contains("redis is up"), "{}", w.log_text());

    env.redis.stop();
    let hasty = common::procs::write_config(&env, &dir, "hasty.toml", |c| {
        c.redis.startup_wait_ms = 1_000
    });
    let started = Instant::now();
    let mut h = common::procs::spawn_worker(&hasty, &dir, "hasty", &[], &[]);
    let status = common::procs::wait_exit(&mut h, LIVENESS)
        .await
        .expect("the worker gives up");
    let log = h.log_text();
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "gave up after {:?}",
        started.elapsed()
    );
    assert!(log.contains("waiting for redis"), "{log}");
    assert!(log.contains("giving up"), "{log}");
    assert!(log.contains("cannot reach Redis at"), "{log}");
}
