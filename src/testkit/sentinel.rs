//! A private Redis Sentinel deployment per test: a master and a replica ([`RedisServer`]s)
//! and one or more `redis-sentinel` processes monitoring them under the name
//! [`RedisSentinel::SERVICE`], all killed on drop.
//!
//! The sentinels are quick to act (`down-after-milliseconds 1000`), so killing the master
//! promotes the replica within a few seconds.

use std::env;
use std::fs::{self, OpenOptions};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::redis::{find_tool, free_port, request, signal, tail, RedisOptions, RedisServer};
use super::TestkitError;

/// How long the deployment may take to come up (the replica in sync, each sentinel aware of
/// the replica), and a failover to complete.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two probes.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Bound of one probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A master, one replica and sentinels, on `127.0.0.1`.
#[derive(Debug)]
pub struct RedisSentinel {
    /// `[first master, first replica]`; which is master now is [`RedisSentinel::master`].
    servers: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

/// One `redis-sentinel` process and its directory.
#[derive(Debug)]
struct Sentinel {
    port: u16,
    child: Option<Child>,
    dir: TempDir,
}

impl Sentinel {
    fn cmd(&self, args: &[&str]) -> Result<String, TestkitError> {
        request(self.port, args, PROBE_TIMEOUT)
    }

    fn log(&self) -> String {
        let text = fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default();
        tail(&text, 20)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGKILL);
            let _ = child.wait();
        }
    }
}

impl RedisSentinel {
    /// The master name the sentinels monitor (`sentinelServiceName` of the URL).
    pub const SERVICE: &'static str = "ankusa";

    /// [`RedisSentinel::start_with`] one sentinel.
    pub fn start() -> Result<RedisSentinel, TestkitError> {
        Self::start_with(1)
    }

    /// Starts a master, a replica of it, and `sentinels` sentinels (quorum: a majority),
    /// returning once the replica is in sync and every sentinel has found the replica.
    pub fn start_with(sentinels: usize) -> Result<RedisSentinel, TestkitError> {
        Self::start_opts(sentinels, RedisOptions::default())
    }

    /// [`RedisSentinel::start_with`] with `options` for both Redis servers (the append-only
    /// file, say); the replica's `--replicaof` follows them.
    pub fn start_opts(
        sentinels: usize,
        options: RedisOptions,
    ) -> Result<RedisSentinel, TestkitError> {
        let what = "redis sentinel deployment".to_string();
        let path = env::var_os("PATH");
        // the redis-sentinel package's binary; redis-server --sentinel is the same program
        let (binary, mode) = match find_tool(path.as_deref(), "redis-sentinel") {
            Some(b) => (b, None),
            None => (
                find_tool(path.as_deref(), "redis-server").ok_or(TestkitError::ToolNotFound {
                    tool: "redis-sentinel",
                    package: "redis-sentinel",
                })?,
                Some("--sentinel"),
            ),
        };
        let master = RedisServer::start_with(options.clone())?;
        // The replica is attached by command, not `--replicaof`: a server started again
        // ([`RedisSentinel::restart_server`]) must not come back as a replica of whichever
        // server was master at first, but follow the master the sentinels name now.
        let replica = RedisServer::start_with(options)?;
        replica.cmd(&["REPLICAOF", "127.0.0.1", &master.port().to_string()])?;
        let mut deployment = RedisSentinel {
            servers: vec![master, replica],
            sentinels: Vec::new(),
        };
        deployment.wait_until(&what, "the replica in sync", |d| {
            let info = d.servers[1].cmd(&["INFO", "replication"])?;
            Ok(info.contains("master_link_status:up"))
        })?;
        let quorum = sentinels / 2 + 1;
        for _ in 0..sentinels.max(1) {
            let s = deployment.spawn_sentinel(&binary, mode, quorum)?;
            deployment.sentinels.push(s);
        }
        let replica_port = format!("{}", deployment.servers[1].port());
        deployment.wait_until(&what, "every sentinel knowing the replica", |d| {
            for s in &d.sentinels {
                let replicas = match s.cmd(&["SENTINEL", "REPLICAS", Self::SERVICE]) {
                    Ok(r) => r,
                    Err(TestkitError::Io { .. }) => return Ok(false),
                    Err(e) => return Err(e),
                };
                if !replicas.lines().any(|l| l == replica_port) {
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        Ok(deployment)
    }

    fn spawn_sentinel(
        &self,
        binary: &PathBuf,
        mode: Option<&str>,
        quorum: usize,
    ) -> Result<Sentinel, TestkitError> {
        // The port is picked free, then bound by the sentinel: another process may take it
        // in between. The sentinel then exits, and a PING could be answered by that other
        // process, so readiness is our own pid in `INFO server`, and an exit means a fresh
        // port (as `RedisServer` does).
        let mut attempt = 1;
        loop {
            let dir = tempfile::Builder::new()
                .prefix("ankusa-sentinel-")
                .tempdir()
                .map_err(TestkitError::io(
                    "create a temporary directory for a sentinel",
                ))?;
            let port = free_port()?;
            let mut sentinel = self.launch_sentinel(binary, mode, quorum, dir, port)?;
            let pid = sentinel.child.as_ref().map_or(0, Child::id);
            let own_pid = format!("process_id:{pid}");
            let deadline = Instant::now() + READY_TIMEOUT;
            loop {
                if let Some(child) = sentinel.child.as_mut() {
                    if let Ok(Some(_)) = child.try_wait() {
                        sentinel.child = None;
                        break;
                    }
                }
                let ours = sentinel.cmd(&["PING"]).is_ok_and(|p| p == "PONG")
                    && sentinel
                        .cmd(&["INFO", "server"])
                        .is_ok_and(|i| i.lines().any(|l| l.trim() == own_pid));
                if ours {
                    return Ok(sentinel);
                }
                if Instant::now() >= deadline {
                    return Err(TestkitError::NotReady {
                        what: format!("redis-sentinel on port {port}"),
                        reason: format!(
                            "no PONG from pid {pid}\n--- log tail ---\n{}",
                            sentinel.log()
                        ),
                    });
                }
                thread::sleep(POLL_INTERVAL);
            }
            if attempt >= 5 {
                return Err(TestkitError::NotReady {
                    what: format!("redis-sentinel on port {port}"),
                    reason: format!(
                        "it exited, {attempt} ports tried\n--- log tail ---\n{}",
                        sentinel.log()
                    ),
                });
            }
            attempt += 1;
        }
    }

    /// Writes `sentinel.conf` for `port` in `dir` and spawns the sentinel, without waiting.
    fn launch_sentinel(
        &self,
        binary: &PathBuf,
        mode: Option<&str>,
        quorum: usize,
        dir: TempDir,
        port: u16,
    ) -> Result<Sentinel, TestkitError> {
        let conf = dir.path().join("sentinel.conf");
        let master = self.servers[0].port();
        let name = Self::SERVICE;
        fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
                 dir {dir}\nlogfile {dir}/sentinel.log\n\
                 sentinel monitor {name} 127.0.0.1 {master} {quorum}\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 10000\n\
                 sentinel parallel-syncs {name} 1\n",
                dir = dir.path().display()
            ),
        )
        .map_err(TestkitError::io("write sentinel.conf"))?;
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("sentinel.stderr"))
            .map_err(TestkitError::io("open a sentinel's stderr file"))?;
        let mut command = Command::new(binary);
        command.arg(&conf);
        if let Some(mode) = mode {
            command.arg(mode);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(TestkitError::io("spawn redis-sentinel"))?;
        Ok(Sentinel {
            port,
            child: Some(child),
            dir,
        })
    }

    /// Polls `ready` until it holds or [`READY_TIMEOUT`] passes; an I/O error counts as
    /// "not yet".
    fn wait_until(
        &self,
        what: &str,
        step: &str,
        ready: impl Fn(&RedisSentinel) -> Result<bool, TestkitError>,
    ) -> Result<(), TestkitError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let last = match ready(self) {
                Ok(true) => return Ok(()),
                Ok(false) => "not yet".to_string(),
                Err(TestkitError::Io { .. }) => "not reachable yet".to_string(),
                Err(e) => return Err(e),
            };
            if Instant::now() >= deadline {
                let logs: Vec<String> = self.sentinels.iter().map(Sentinel::log).collect();
                return Err(TestkitError::NotReady {
                    what: what.to_string(),
                    reason: format!(
                        "{step}: {last} after {READY_TIMEOUT:?}\n--- sentinel logs ---\n{}",
                        logs.join("\n---\n")
                    ),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// `redis-sentinel://127.0.0.1:S1?sentinelServiceName=ankusa&node=127.0.0.1:S2…`.
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName={}",
            self.sentinels[0].port,
            Self::SERVICE
        );
        for s in &self.sentinels[1..] {
            url.push_str(&format!("&node=127.0.0.1:{}", s.port));
        }
        url
    }

    /// The two Redis servers: `[0]` was the master at start, `[1]` its replica.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The index (in [`RedisSentinel::servers`]) of the master the first live sentinel names.
    pub fn master(&self) -> Result<usize, TestkitError> {
        let mut last = TestkitError::Redis("no sentinel answers".into());
        for s in &self.sentinels {
            match s.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::SERVICE]) {
                Ok(addr) => {
                    let port = addr.lines().nth(1).unwrap_or_default().to_string();
                    return self
                        .servers
                        .iter()
                        .position(|r| r.port().to_string() == port)
                        .ok_or_else(|| {
                            TestkitError::Protocol(format!("sentinel names master {addr:?}"))
                        });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A graceful failover, as an operator starts one: `SENTINEL FAILOVER` on the first
    /// sentinel that answers. The replica is promoted at once; the old master stays a
    /// writable master until the sentinels convert it into a replica, seconds later. Returns
    /// the index of the master it started from ([`RedisSentinel::wait_failover`] waits for
    /// the new one).
    pub fn failover(&self) -> Result<usize, TestkitError> {
        let old = self.master()?;
        let mut last = TestkitError::Redis("no sentinel answers".into());
        for s in &self.sentinels {
            match s.cmd(&["SENTINEL", "FAILOVER", Self::SERVICE]) {
                Ok(_) => return Ok(old),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// SIGKILLs the current master (like a crash), leaving the sentinels to promote the
    /// replica; returns the killed server's index.
    pub fn kill_master(&mut self) -> Result<usize, TestkitError> {
        let i = self.master()?;
        self.servers[i].kill();
        Ok(i)
    }

    /// Restarts server `i` (SIGTERM, so the append-only file is flushed, then the same port
    /// and directory: what it had persisted is reloaded; a killed server is just started
    /// again). It comes back as a master; when the sentinels name another server master, it
    /// is made that master's replica at once (`REPLICAOF`), as the sentinels would a few
    /// seconds later, so it resyncs from it and drops what the new master does not have.
    pub fn restart_server(&mut self, i: usize) -> Result<(), TestkitError> {
        self.servers[i].stop();
        self.servers[i].start_again()?;
        let named = std::cell::Cell::new(i);
        self.wait_until("redis sentinel restart", "a master named", |d| {
            d.master().map(|m| {
                named.set(m);
                true
            })
        })?;
        let master = named.get();
        if master != i {
            let port = self.servers[master].port().to_string();
            self.servers[i].cmd(&["REPLICAOF", "127.0.0.1", &port])?;
        }
        Ok(())
    }

    /// Waits until the sentinels name a master other than `old` and it answers
    /// `role:master`; returns its index.
    pub fn wait_failover(&self, old: usize) -> Result<usize, TestkitError> {
        self.wait_until("redis sentinel failover", "a new master", |d| {
            match d.master() {
                Ok(i) if i != old => {
                    let info = d.servers[i].cmd(&["INFO", "replication"])?;
                    Ok(info.contains("role:master"))
                }
                Ok(_) => Ok(false),
                Err(TestkitError::Io { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })?;
        self.master()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn killing_the_master_promotes_the_replica() {
        let mut d = RedisSentinel::start().unwrap();
        assert!(
            d.url().contains("sentinelServiceName=ankusa"),
            "{}",
            d.url()
        );
        assert_eq!(d.master().unwrap(), 0);
        d.servers()[0].cmd(&["SET", "k", "v"]).unwrap();
        let deadline = Instant::now() + READY_TIMEOUT;
        while d.servers()[1].cmd(&["GET", "k"]).unwrap() != "v" {
            assert!(Instant::now() < deadline, "never replicated");
            thread::sleep(POLL_INTERVAL);
        }
        let old = d.kill_master().unwrap();
        let new = d.wait_failover(old).unwrap();
        assert_eq!(new, 1);
        assert_eq!(d.servers()[1].cmd(&["GET", "k"]).unwrap(), "v");
        d.servers()[1].cmd(&["SET", "k2", "v"]).unwrap();
    }
}
