//! The faults the soak injects: Redis and sentinel kills, pauses and restarts, hostile
//! receivers, worker kills, and the CLI it drives.

use super::*;

/// The sentinels' `host:port` list of a `redis-sentinel://` URL.
pub(super) fn sentinel_nodes(url: &str) -> String {
    let rest = url.trim_start_matches("redis-sentinel://");
    let (first, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut nodes = vec![first.to_string()];
    for kv in query.split('&') {
        if let Some(n) = kv.strip_prefix("node=") {
            nodes.push(n.to_string());
        }
    }
    nodes.join(",")
}

/// A 2xx answer with a hostile body: 1 MiB, odd headers (a tenant's endpoint gone wrong).
pub(super) fn hostile_replies(n: usize) -> Behavior {
    let body = "\u{fffd}<script>x</script>".repeat((1 << 20) / 20);
    Behavior::Sequence(
        (0..n)
            .map(|_| {
                Reply::status(200)
                    .header("content-type", "text/html; charset=\"\u{1}\"")
                    .header("x-huge", "y".repeat(4000))
                    .body(body.clone())
            })
            .collect(),
    )
}

/// Whether the server that is not the master is its replica with the link up (waits up to
/// 15 s for the sentinels to convert a demoted primary).
pub(super) async fn replica_in_sync(d: &RedisSentinel) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ok = blocking(|| {
            let Ok(m) = d.master() else { return false };
            let port = format!("master_port:{}", d.servers()[m].port());
            let master_ok = d.servers()[m]
                .cmd(&["INFO", "replication"])
                .is_ok_and(|i| i.contains("role:master") && i.contains("connected_slaves:1"));
            d.servers()[1 - m]
                .cmd(&["INFO", "replication"])
                .is_ok_and(|i| {
                    master_ok
                        && i.contains("role:slave")
                        && i.contains(&port)
                        && i.contains("master_link_status:up")
                })
        });
        if ok {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One fault, drawn from `rng`, injected and (where it has an end) ended.
pub(super) async fn inject(
    rng: &mut StdRng,
    d: &mut RedisSentinel,
    pool: &mut Pool,
    receiver: &Receiver,
    injected: &mut Injected,
    sink_faults_until: &mut HashMap<&'static str, Instant>,
) {
    let worker_kinds = [
        "kill9",
        "kill9",
        "sigstop",
        "sigstop",
        "clock_skew",
        "redis_restart",
        "redis_kill_restart",
        "failover_graceful",
        "failover_forced",
        "redis_cut_clients",
        "redis_stall",
        "sink_flap",
        "sink_hang",
        "sink_hostile",
    ];
    let mut kind = worker_kinds[rng.random_range(0..worker_kinds.len())];
    // A failover (or a primary killed) needs a replica in sync: after a graceful failover
    // the old primary is converted only ~10 s later.
    if matches!(
        kind,
        "redis_kill_restart" | "failover_graceful" | "failover_forced"
    ) && !replica_in_sync(d).await
    {
        kind = "skip";
    }
    match kind {
        "kill9" | "sigstop" | "clock_skew" => {
            let leader = pool.leader().await;
            // Every draw is made whatever the answers, so a seed replays the same draws.
            let want_leader = rng.random_bool(0.6);
            let (offset, any) = (rng.random_range(1..WORKERS), rng.random_range(0..WORKERS));
            let target = match leader {
                Some(l) if want_leader => l,
                Some(l) => (l + offset) % WORKERS,
                None => any,
            };
            let role = if Some(target) == leader {
                "leader"
            } else {
                "standby"
            };
            match kind {
                "kill9" => {
                    pool.slots[target].signal(libc::SIGKILL);
                    injected.add(
                        if role == "leader" {
                            "kill -9 leader"
                        } else {
                            "kill -9 standby"
                        },
                        true,
                    );
                    tokio::time::sleep(Duration::from_millis(rng.random_range(0..1_500))).await;
                    pool.replace(target, None);
                }
                "sigstop" => {
                    let ms = rng.random_range(300..2 * LEASE_MS + 1_000);
                    pool.slots[target].signal(libc::SIGSTOP);
                    injected.add(
                        if role == "leader" {
                            "SIGSTOP leader"
                        } else {
                            "SIGSTOP standby"
                        },
                        true,
                    );
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    pool.slots[target].signal(libc::SIGCONT);
                }
                _ => {
                    let skews = ["+2h", "-1h", "+90s", "-45s", "+1d"];
                    let skew = skews[rng.random_range(0..skews.len())];
                    injected.add("clock skew (worker restarted skewed)", true);
                    pool.replace(target, Some(skew));
                }
            }
        }
        "skip" => {
            injected.add("(skipped: no replica in sync yet)", false);
        }
        "redis_restart" | "redis_kill_restart" => {
            let m = blocking(|| d.master()).expect("the sentinels name a master");
            if kind == "redis_kill_restart" {
                injected.add("redis primary kill -9 + restart (AOF)", true);
                blocking(|| {
                    d.kill_master().expect("kill the primary");
                });
            } else {
                injected.add("redis primary restart (AOF)", true);
            }
            blocking(|| d.restart_server(m)).expect("redis starts again");
        }
        "failover_graceful" => {
            // The sentinels may still refuse (`NOGOODSLAVE`, `INPROG`) while they catch up.
            match blocking(|| d.failover()) {
                Ok(old) => match blocking(|| d.wait_failover(old)) {
                    Ok(_) => injected.add("sentinel failover, graceful", true),
                    // Sentinel may abort a failover it accepted (`-failover-abort-slave-
                    // timeout`: the replica it chose was still resyncing after the previous
                    // fault); the old primary stays, so no fault happened.
                    Err(e) => {
                        let why = e.to_string();
                        eprintln!(
                            "soak: the sentinels aborted the failover: {}",
                            why.lines().next().unwrap_or_default()
                        );
                        injected.add("(skipped: sentinels aborted a failover)", false)
                    }
                },
                Err(_) => injected.add("(skipped: sentinels refused a failover)", false),
            }
        }
        "failover_forced" => {
            injected.add("sentinel failover, forced (primary killed)", true);
            blocking(|| {
                let old = d.kill_master().expect("kill the primary");
                d.wait_failover(old).expect("the replica is promoted");
                d.restart_server(old).expect("the old primary comes back");
            });
        }
        "redis_cut_clients" => {
            injected.add("redis client connections cut", true);
            blocking(|| {
                let m = d.master().expect("master");
                let _ = d.servers()[m].cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
            });
        }
        "redis_stall" => {
            let ms = rng.random_range(100..700);
            injected.add("redis primary stalled (SIGSTOP < 0.7 s)", true);
            let m = blocking(|| d.master()).expect("master");
            d.servers()[m].pause();
            tokio::time::sleep(Duration::from_millis(ms)).await;
            d.servers()[m].resume();
        }
        _ => {
            let paths = ["a", "b", "o"];
            let path = paths[rng.random_range(0..paths.len())];
            let secs = rng.random_range(1..5);
            let behavior = match kind {
                "sink_flap" => {
                    injected.add("sink flaps (503)", false);
                    Behavior::Status(503)
                }
                "sink_hang" => {
                    injected.add("sink hangs", false);
                    Behavior::Hang
                }
                _ => {
                    injected.add("sink answers hostile 2xx bodies", false);
                    hostile_replies(40)
                }
            };
            receiver.set(path, behavior);
            sink_faults_until.insert(path, Instant::now() + Duration::from_secs(secs));
        }
    }
}

/// One command through `redis-cli` to a loopback port (the servers and sentinels are
/// restarted on the same ports, so a monitor thread needs only the ports).
pub(super) fn cli(port: u16, args: &[&str]) -> String {
    std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--raw"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
