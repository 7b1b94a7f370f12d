//! Shared harness of the integration tests: each test gets its own `redis-server`
//! on a free port and its own webhook receiver, killed on drop. Nothing here is
//! shared between tests, so they run in parallel.
#![allow(dead_code)]

pub mod pg;
pub mod procs;
pub mod proxy;
pub mod spread;

use ankusa::config::Config;
use ankusa::dlq::DeadLetter;
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::store::Store;
use ankusa::testkit::{Receiver, ReceiverOptions, RedisOptions, RedisServer};
use ankusa::{Hook, Producer, Worker};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A generous liveness bound for waits in tests (never a performance claim).
pub const LIVENESS: Duration = Duration::from_secs(30);

/// [`Env::pending_rows`] in one server-side call: ARGV holds each partition's key prefix;
/// answers the sum of the claimed set's and every due set's sizes.
const PENDING_ROWS_LUA: &str = "local n = 0
for _, prefix in ipairs(ARGV) do
  n = n + redis.call('ZCARD', prefix .. 'claimed')
  for _, due in ipairs(redis.call('KEYS', prefix .. 'due:*')) do
    n = n + redis.call('ZCARD', due)
  end
end
return n";

/// [`Env::all_values`] in one server-side call: every key, sorted, each followed by its
/// value (the members, fields, elements or entries of a collection), flattened into one
/// array (the test connection prints an array as its elements, one a line).
const ALL_VALUES_LUA: &str = "local out = {}
local keys = redis.call('KEYS', '*')
table.sort(keys)
for _, k in ipairs(keys) do
  local t = redis.call('TYPE', k).ok
  local v
  if t == 'string' then v = redis.call('GET', k)
  elseif t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'set' then v = redis.call('SMEMBERS', k)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'stream' then v = redis.call('XRANGE', k, '-', '+')
  else v = '<' .. t .. '>' end
  table.insert(out, k)
  table.insert(out, v)
end
return out";

/// One test's world: Redis, a receiver, a config for workers, a store and a producer.
pub struct Env {
    pub redis: RedisServer,
    pub receiver: Receiver,
    pub config: Config,
    pub store: Store,
    pub producer: Producer,
}

/// A config tuned for tests: fast retries, short attempt timeout and lease.
pub fn test_config(url: &str) -> Config {
    let mut c = Config {
        instance: "test".into(),
        ..Config::default()
    };
    c.redis.url = url.into();
    c.retry.initial_backoff_ms = 20;
    c.retry.max_backoff_ms = 200;
    c.retry.min_backoff_ms = 10;
    c.dispatch.attempt_timeout_ms = 2_000;
    c.dispatch.poll_ms = 200;
    c.leader.lease_ms = 2_000;
    c.leader.shutdown_grace_ms = 2_000;
    // Receivers listen on loopback: exempt it from the SSRF guard (tests/security.rs checks
    // the guard itself with its own config).
    ankusa::testkit::allow_loopback(&mut c);
    c
}

/// An instance name no other `Env` of this test process uses (`t<pid>-<n>`), so two tests
/// that ever met on one `redis-server` (a port freed by one and taken by the other, a worker
/// left running past its test) could not read, claim or overwrite each other's keys: every
/// key of an instance carries its name.
pub fn unique_instance() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("t{}-{n}", std::process::id())
}

impl Env {
    /// A fresh world with default options.
    pub async fn new() -> Env {
        Env::with(RedisOptions::default(), |_| {}).await
    }

    /// A fresh world; `tune` adjusts the workers' config.
    pub async fn with(opts: RedisOptions, tune: impl FnOnce(&mut Config)) -> Env {
        let redis = RedisServer::start_with(opts).expect("redis-server starts");
        let receiver = Receiver::start_with(ReceiverOptions {
            record_bodies: false,
            threads: 2,
        })
        .expect("receiver starts");
        let mut config = test_config(&redis.url());
        config.instance = unique_instance();
        tune(&mut config);
        config.validate().expect("test config is valid");
        let store = Store::connect(&redis.url(), &config.instance, 5_000)
            .await
            .expect("store connects")
            .with_edge(ankusa::sinks::EdgePolicy::from_config(&config))
            .with_partitions(config.partitions);
        let producer = Producer::new(store.clone(), config.commit.max_hook_bytes);
        Env {
            redis,
            receiver,
            config,
            store,
            producer,
        }
    }

    /// A fresh world with default Redis options; `tune` adjusts the workers' config.
    pub async fn tuned(tune: impl FnOnce(&mut Config)) -> Env {
        Env::with(RedisOptions::default(), tune).await
    }

    /// The Redis key `rest` of partition `partition` of this env's instance, e.g.
    /// `part_key(1, "due:acme")` is `ankusa:{<instance>.p1}:due:acme`.
    pub fn part_key(&self, partition: u32, rest: &str) -> String {
        let ks = ankusa::keyspace::Keyspace::new(&self.config.instance, partition);
        format!("{}{rest}", ks.prefix())
    }

    /// The instance-wide Redis key `rest` (outside every partition), e.g.
    /// `instance_key("partitions")` is `ankusa:{<instance>}:partitions`.
    pub fn instance_key(&self, rest: &str) -> String {
        format!("ankusa:{{{}}}:{rest}", self.config.instance)
    }

    /// Start an in-process worker with this env's config.
    pub async fn worker(&self) -> Worker {
        Worker::start(self.config.clone(), Some("test"))
            .await
            .expect("worker starts")
    }

    /// An `http` sink entry pointing at the receiver's `path`.
    pub fn http_sink(&self, path: &str) -> SinkEntry {
        SinkEntry::http(&self.receiver.url(path))
    }

    /// Register (or replace) `tenant/source` with one http sink per receiver path, in order.
    pub async fn http_source(&self, tenant: &str, source: &str, paths: &[&str]) {
        let sinks = paths.iter().map(|p| self.http_sink(p)).collect();
        self.put_source(tenant, source, sinks).await;
    }

    /// Register (or replace) `tenant/source` with `sinks`, in order.
    pub async fn put_source(&self, tenant: &str, source: &str, sinks: Vec<SinkEntry>) {
        self.store
            .put_source(tenant, source, &SourceSpec { sinks })
            .await
            .expect("source stored");
    }

    /// Run the `ankusa` binary with `args` against this env's Redis and instance (and
    /// `--config FILE` when given): `(exit code, stdout, stderr)`; -1 when it was killed.
    pub async fn cli_with(&self, config: Option<&Path>, args: &[&str]) -> (i32, String, String) {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ankusa"));
        cmd.env_remove("ANKUSA_ADMIN__TOKEN");
        match &self.config.log.url {
            Some(u) => cmd.env("ANKUSA_LOG__URL", u),
            None => cmd.env_remove("ANKUSA_LOG__URL"),
        };
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        cmd.args([
            "--redis-url",
            &self.redis.url(),
            "--instance",
            &self.config.instance,
        ]);
        cmd.args(args);
        let out = tokio::time::timeout(LIVENESS, cmd.output())
            .await
            .expect("cli finishes")
            .expect("cli runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Commit one hook; returns its id.
    pub async fn commit(&self, tenant: &str, source: &str, body: impl Into<bytes::Bytes>) -> u64 {
        self.producer
            .commit(tenant, source, Hook::new(body))
            .await
            .expect("commit")
            .first_hook
    }

    /// Commit `n` generated hooks in batches of 100; returns the ids.
    pub async fn commit_n(&self, tenant: &str, source: &str, n: usize) -> Vec<u64> {
        let mut ids = Vec::with_capacity(n);
        let mut i = 0;
        while i < n {
            let k = 100.min(n - i);
            let hooks: Vec<Hook> = (i..i + k)
                .map(|j| Hook::new(format!("{{\"n\":{j}}}")))
                .collect();
            let r = self
                .producer
                .commit_many(tenant, source, &hooks)
                .await
                .expect("commit");
            ids.extend((0..k as u64).map(|j| r.first_hook + j));
            i += k;
        }
        ids
    }

    /// A redis-cli-like command on this test's Redis.
    pub fn redis_cmd(&self, args: &[&str]) -> String {
        self.redis.cmd(args).expect("redis command")
    }

    /// The full Redis key of `rest` in this env's partition, e.g. `key("hook:1")`.
    pub fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.store.keyspace().prefix())
    }

    /// Every key in this test's Redis, sorted: a snapshot to compare before and after a call.
    pub fn keys(&self) -> Vec<String> {
        let all = self.redis_cmd(&["KEYS", "*"]);
        let mut keys: Vec<String> = all
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        keys.sort();
        keys
    }

    /// Every value of every key in this test's Redis, as text: what a secret must never be
    /// found in. Read by one script, so a key a running worker renames or moves meanwhile is
    /// still read once, with its value.
    pub fn all_values(&self) -> String {
        self.redis_cmd(&["EVAL", ALL_VALUES_LUA, "0"])
    }

    /// `DBSIZE`.
    pub fn dbsize(&self) -> u64 {
        self.redis_cmd(&["DBSIZE"])
            .parse()
            .expect("DBSIZE is an integer")
    }

    /// A field of a row's retry hash (`a` attempts, `f` first attempt ms, `e` last error).
    pub fn row_field(&self, row: &str, field: &str) -> Option<String> {
        let v = self.redis_cmd(&["HGET", &self.key(&format!("row:{row}")), field]);
        (v != "(nil)").then_some(v)
    }

    /// Rows not finished yet, in every partition: due (now or later) in any tenant's set, or
    /// claimed. Members of ordered lanes waiting behind their head are not counted (the
    /// settle that finishes a head makes the next member due in the same script).
    ///
    /// One script counts every partition's claimed set and due sets, so the count is one
    /// instant's: a row moving from its due set to the claimed set (claimed once its backoff
    /// is over) is never missed between two reads.
    pub fn pending_rows(&self) -> u64 {
        let prefixes: Vec<String> = self
            .store
            .all_partitions()
            .iter()
            .map(|part| part.keyspace().prefix().to_string())
            .collect();
        let mut args = vec!["EVAL", PENDING_ROWS_LUA, "0"];
        args.extend(prefixes.iter().map(String::as_str));
        self.redis_cmd(&args)
            .parse()
            .expect("the pending-rows script answers an integer")
    }

    /// Rows finished so far (delivered, dead-lettered or dropped), by the store's totals.
    /// Read after `tick()` (and before the commits, when earlier rows finished), it counts
    /// every row the commits made, the ones a running worker settled before `tick()` began
    /// included: `tick()`'s own answer counts only the rows settled during the call.
    pub async fn settled(&self) -> u64 {
        let t = self.store.totals().await.expect("totals");
        t.delivered + t.dead_lettered + t.dropped
    }

    /// The dead letters of `tenant`, oldest first.
    pub async fn dead_letters(&self, tenant: &str) -> Vec<DeadLetter> {
        ankusa::dlq::list(&self.store, tenant, 1_000)
            .await
            .expect("dead letters readable")
    }

    /// Tick until every row is finished (delivered, dead-lettered or dropped), including rows
    /// waiting out a backoff, which `tick()` alone does not wait for. Panics after [`LIVENESS`].
    pub async fn drain(&self, worker: &Worker) {
        self.drain_within(worker, LIVENESS).await;
    }

    /// [`Env::drain`] with its own bound, for a drain that first waits out a sink's
    /// recovery (a restarted broker the worker reconnects to).
    pub async fn drain_within(&self, worker: &Worker, bound: Duration) {
        let deadline = Instant::now() + bound;
        let mut state = worker.watch_state();
        loop {
            tokio::time::timeout(bound, worker.tick())
                .await
                .expect("tick() returns")
                .expect("tick");
            let left = self.pending_rows();
            if left == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{left} rows still pending after {bound:?}"
            );
            // A row waits out its backoff: the scheduler's state moves when it is claimed again.
            let _ = tokio::time::timeout(Duration::from_millis(100), state.changed()).await;
        }
    }

    /// Write this env's config as TOML for worker processes; returns the path.
    pub fn config_file(&self, dir: &tempfile::TempDir, tune: impl FnOnce(&mut Config)) -> PathBuf {
        let mut c = self.config.clone();
        tune(&mut c);
        let path = dir.path().join("ankusa.toml");
        std::fs::write(&path, toml::to_string(&c).expect("config serialises"))
            .expect("config written");
        path
    }
}

/// SHA-256 of `bytes`, lowercase hex, as the receiver records bodies.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A free loopback port no other test of this process had (bind 0, read, release).
pub fn free_port() -> u16 {
    ankusa::testkit::free_port().expect("a free port")
}

/// A tokio listener on a loopback port no other test of this process had
/// ([`ankusa::testkit::listen_loopback`]); call it inside a runtime.
pub fn tokio_listener() -> tokio::net::TcpListener {
    let listener = ankusa::testkit::listen_loopback()
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .expect("a loopback listener");
    tokio::net::TcpListener::from_std(listener).expect("inside a tokio runtime")
}

/// Make a child process `cmd` spawns die with the test: it gets SIGKILL when the thread
/// that spawned it ends (`PR_SET_PDEATHSIG`: a test's thread, or its runtime's, which ends
/// with the test, a panicking one included, or with the whole test process), and it leads
/// its own process group, so [`kill_group`] also reaches anything it spawned itself (the
/// `faketime` wrapper forks the worker). A child left running outlives its test's Redis and
/// keeps reconnecting to that port, where a later test's Redis may start.
pub fn dies_with_test(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    // SAFETY: only async-signal-safe calls (prctl, getppid, kill) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have ended before the prctl: then nothing would signal us.
            if libc::getppid() == 1 {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            Ok(())
        });
    }
    cmd
}

/// SIGKILL the process group `pid` leads (a child spawned with [`dies_with_test`]).
pub fn kill_group(pid: i32) {
    if pid > 0 {
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}

/// A worker process (`ankusa worker`), killed on drop.
pub struct WorkerProcess {
    pub child: Child,
    pub admin: String,
    pub log: PathBuf,
}

impl WorkerProcess {
    /// Spawn `ankusa worker --config <file> --listen 127.0.0.1:<free port>`; logs go to a file in `dir`.
    pub fn spawn(config: &std::path::Path, dir: &tempfile::TempDir, name: &str) -> WorkerProcess {
        let port = free_port();
        let admin = format!("127.0.0.1:{port}");
        let log = dir.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ankusa"));
        cmd.env_remove("ANKUSA_ADMIN__TOKEN");
        cmd.args(["worker", "--config"])
            .arg(config)
            .args(["--listen", &admin, "--name", name])
            .env("ANKUSA_LOG", "info,fred=warn")
            .stdout(Stdio::null())
            .stderr(out);
        let child = dies_with_test(&mut cmd)
            .spawn()
            .expect("ankusa binary starts");
        WorkerProcess { child, admin, log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Send a signal (libc constant, e.g. `libc::SIGKILL`).
    pub fn signal(&self, sig: i32) {
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// SIGKILL it (and its process group) and reap it.
    pub fn kill9(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            kill_group(self.pid());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        // Unreaped, so its pid (and group id) cannot be another process's yet.
        if matches!(self.child.try_wait(), Ok(None)) {
            unsafe {
                libc::kill(self.pid(), libc::SIGCONT);
            }
            kill_group(self.pid());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One admin HTTP call: `method url` with an optional bearer `token` and JSON `body`;
/// answers `(status, the JSON body or Null)`.
pub async fn admin_call(
    method: reqwest::Method,
    url: impl reqwest::IntoUrl,
    token: Option<&str>,
    body: Option<String>,
) -> (u16, serde_json::Value) {
    let mut req = reqwest::Client::new().request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    let resp = req.send().await.expect("the admin API answers");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("a body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}
