//! Raw commits with bad bytes or over the limit: refused, and the pool never jams.

use super::*;

/// The commit script checks what a raw `EVALSHA` brings by itself: a
/// non-UTF-8 tenant id, an 11 MiB body against the leader's 10 MiB limit (the caller claiming
/// a 20 MiB one), a lease key that is not the prefix's: each refused, nothing stored, and the
/// pool keeps delivering (no row stuck claimed, `tick` returns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_commit_with_bad_bytes_or_over_the_limit_is_refused_and_the_pool_never_jams() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["/o"]).await;
    let worker = env.worker().await;
    let settings = env.key("settings");
    assert!(
        common::procs::poll_until(LIVENESS, || async {
            env.redis_cmd(&["HGET", &settings, "max_hook_bytes"]) == "10485760"
        })
        .await,
        "the leader keeps the limit server side"
    );
    let port = env.redis.port();
    let commit = ankusa::store::Scripts::default().commit;
    let sha = raw_cmd(
        port,
        &[
            b"SCRIPT",
            b"LOAD",
            ankusa::store::scripts::COMMIT.as_bytes(),
        ],
    );
    assert_eq!(sha, [commit.sha1()]);
    let sha = sha[0].clone();
    let lease = env.store.keyspace().lease();
    let prefix = env.store.keyspace().prefix().to_string();
    let hooks_stored = || env.redis_cmd(&["KEYS", &env.key("hook:*")]).lines().count();
    let call = |lease: &[u8], tenant: &[u8], max: &[u8], body: &[u8]| {
        raw_cmd(
            port,
            &[
                b"EVALSHA",
                sha.as_bytes(),
                b"1",
                lease,
                prefix.as_bytes(),
                tenant,
                b"orders",
                max,
                b"1",
                body,
                b"",
            ],
        )
    };
    let bad = call(lease.as_bytes(), b"ac\xffme", b"10485760", b"{}");
    assert_eq!(bad[0], "bad_request", "{bad:?}");
    assert!(bad[1].starts_with("tenant id"), "{bad:?}");
    let big = vec![b'x'; 11 << 20];
    let over = call(
        lease.as_bytes(),
        b"acme",
        (20u64 << 20).to_string().as_bytes(),
        &big,
    );
    assert_eq!(
        over,
        ["too_large", "1", &(11u64 << 20).to_string(), "10485760"]
    );
    let wrong = call(b"ankusa:{other.p0}:lease", b"acme", b"10485760", b"{}");
    assert_eq!(wrong[0], "bad_request", "{wrong:?}");
    assert_eq!(hooks_stored(), 0, "nothing stored");
    assert_eq!(env.store.totals().await.unwrap().committed, 0);

    // A good raw commit right after is delivered; nothing is left claimed.
    let ok = call(lease.as_bytes(), b"acme", b"10485760", b"{\"ok\":1}");
    assert_eq!(ok[0], "ok", "{ok:?}");
    tokio::time::timeout(LIVENESS, worker.tick())
        .await
        .expect("tick returns")
        .unwrap();
    assert_eq!(env.settled().await, 1);
    assert_eq!(env.receiver.count_for("/o"), 1);
    assert_eq!(env.store.claimed_count().await.unwrap(), 0);
    worker.shutdown().await;
}
