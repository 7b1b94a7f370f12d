//! A private `redis-server` process per test.
//!
//! Each [`RedisServer`] listens on its own free loopback port and keeps its files in its own
//! temporary directory, so parallel tests never share data. It can be stopped, killed, paused
//! and started again on the same port and directory, which is what fault tests need.

use std::env;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::TestkitError;

/// How long Redis may take to answer `PING` after being spawned.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a SIGTERM'd Redis may take to flush and exit before it is SIGKILLed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two readiness probes or exit checks (Redis usually starts in ~10 ms).
const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// Connect, read and write bound of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Connect, read and write bound of one [`RedisServer::cmd`], so a paused server cannot hang
/// a test forever.
const CMD_TIMEOUT: Duration = Duration::from_secs(10);
/// Fresh ports tried when another process takes the chosen one between our probe and
/// Redis's own bind.
const PORT_ATTEMPTS: usize = 5;
/// Lines of each log file quoted in a start error.
const LOG_TAIL_LINES: usize = 20;
/// Redis's own log file, inside the temporary directory.
const LOG_FILE: &str = "redis.log";
/// Redis's standard error (config errors are printed there before the log file is opened).
const STDERR_FILE: &str = "redis.stderr";
/// How [`RedisServer::cmd`] renders a nil bulk string or array, as `redis-cli` does.
const NIL: &str = "(nil)";

/// Options for [`RedisServer::start_with`].
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// Turn on the append-only file with `appendfsync always`, so every acknowledged write
    /// survives [`RedisServer::kill`] and [`RedisServer::restart`]. Off by default: without
    /// it (and with `save ''`) a restarted server starts empty.
    pub appendonly: bool,
    /// Further `--name value` arguments, appended after ours so they can override them.
    pub extra_args: Vec<String>,
    /// The server gets SIGTERM when the thread that started it ends (Linux
    /// `PR_SET_PDEATHSIG`), so it never outlives a process killed without its cleanup (the
    /// demo's own Redis, when only the demo's pid is signalled). Off by default: a test
    /// that starts it on a short-lived thread would lose it with that thread.
    pub die_with_parent: bool,
}

/// The certificate files of a TLS-only server ([`RedisServer::start_tls`]), PEM.
#[derive(Debug, Clone)]
pub struct RedisTls {
    /// The server's certificate (`--tls-cert-file`); its names must cover `127.0.0.1`.
    pub cert_file: PathBuf,
    /// Its private key (`--tls-key-file`).
    pub key_file: PathBuf,
    /// The CA that verifies client certificates (`--tls-ca-cert-file`).
    pub ca_file: PathBuf,
    /// Require a client certificate signed by `ca_file` (`--tls-auth-clients yes`).
    pub auth_clients: bool,
}

/// A `redis-server` child process on `127.0.0.1`, killed on drop (its directory is removed).
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    options: RedisOptions,
    /// TLS-only (`--port 0 --tls-port`) when set.
    tls: Option<RedisTls>,
    /// "Ready to accept connections" lines in the log before the latest launch (a TLS
    /// server's readiness is a new one).
    ready_lines: usize,
    port: u16,
    /// Pid of the latest process, kept after it exits for [`RedisServer::pid`].
    pid: u32,
    /// The running process; `None` once stopped or killed. Signals are only sent while it is
    /// unreaped, so its pid cannot have been reused by another process.
    child: Option<Child>,
    dir: TempDir,
}

/// Why a freshly spawned process is not serving.
enum NotReady {
    /// It exited, typically because another process took the port first.
    Exited(ExitStatus),
    /// It did not answer `PING` with its own pid in time; the last probe's outcome.
    TimedOut(String),
}

impl RedisServer {
    /// Starts a server with [`RedisOptions::default`].
    pub fn start() -> Result<RedisServer, TestkitError> {
        Self::start_with(RedisOptions::default())
    }

    /// Starts a server with `options`, returning once it answers `PING`.
    pub fn start_with(options: RedisOptions) -> Result<RedisServer, TestkitError> {
        Self::start_using(options, env::var_os("PATH").as_deref())
    }

    /// The `redis-server` executable on `PATH`, if any.
    pub fn binary() -> Option<PathBuf> {
        find_binary(env::var_os("PATH").as_deref())
    }

    /// Starts a TLS-only server (no plaintext port: `--port 0 --tls-port N`) with the
    /// certificates of `tls`, returning once its log says it accepts connections and the
    /// port takes a TCP connection. [`RedisServer::url`] is then `rediss://127.0.0.1:N`;
    /// [`RedisServer::cmd`] speaks plaintext and cannot reach it (use a TLS client).
    pub fn start_tls(options: RedisOptions, tls: RedisTls) -> Result<RedisServer, TestkitError> {
        Self::start_using_tls(options, Some(tls), env::var_os("PATH").as_deref())
    }

    /// [`RedisServer::start_with`] looking for the binary in `path` (a `PATH`-style list).
    fn start_using(options: RedisOptions, path: Option<&OsStr>) -> Result<Self, TestkitError> {
        Self::start_using_tls(options, None, path)
    }

    fn start_using_tls(
        options: RedisOptions,
        tls: Option<RedisTls>,
        path: Option<&OsStr>,
    ) -> Result<Self, TestkitError> {
        let binary = find_binary(path).ok_or(TestkitError::RedisNotFound)?;
        let dir = tempfile::Builder::new()
            .prefix("ankusa-redis-")
            .tempdir()
            .map_err(TestkitError::io("create a temporary directory for redis"))?;
        let mut server = RedisServer {
            binary,
            options,
            tls,
            ready_lines: 0,
            port: 0,
            pid: 0,
            child: None,
            dir,
        };
        let mut attempt = 1;
        loop {
            server.port = free_port()?;
            server.launch()?;
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(NotReady::Exited(_)) if attempt < PORT_ATTEMPTS => attempt += 1,
                Err(why) => return Err(server.start_failed(why)),
            }
        }
    }

    /// `redis://127.0.0.1:PORT` (`rediss://` when TLS-only), for a Redis client.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The TCP port it listens on; the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The pid of the current process (of the last one, once stopped or killed).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The temporary directory holding its log and append-only files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stops it gracefully (SIGTERM, which also wakes a paused server) and waits for it to
    /// exit; Redis flushes the append-only file first. SIGKILLs it after 10 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        signal(&child, libc::SIGTERM);
        signal(&child, libc::SIGCONT);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(POLL_INTERVAL);
        }
        signal(&child, libc::SIGKILL);
        let _ = child.wait();
    }

    /// Kills it at once (SIGKILL, like a crash or an OOM kill) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGKILL);
            let _ = child.wait();
        }
    }

    /// Starts a new process on the same port and directory (so the append-only file, if
    /// enabled, is reloaded), stopping the current one first if it still runs.
    pub fn start_again(&mut self) -> Result<(), TestkitError> {
        self.stop();
        self.launch()?;
        self.wait_ready().map_err(|why| self.start_failed(why))
    }

    /// [`RedisServer::stop`] then [`RedisServer::start_again`].
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop();
        self.start_again()
    }

    /// Freezes the process (SIGSTOP): connections stay open but nothing is answered, like a
    /// stalled server. No effect once stopped.
    pub fn pause(&self) {
        if let Some(child) = &self.child {
            signal(child, libc::SIGSTOP);
        }
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        if let Some(child) = &self.child {
            signal(child, libc::SIGCONT);
        }
    }

    /// Sends one command on a new connection and returns the reply as text: simple strings,
    /// integers and bulk strings as they are (bulk bytes decoded lossily as UTF-8), nil as
    /// `(nil)`, arrays as their elements joined by `'\n'`; an error reply becomes
    /// [`TestkitError::Redis`]. Meant for test setup (`CONFIG SET`, `SCRIPT FLUSH`…), not
    /// speed; each step is bounded by 10 s.
    pub fn cmd(&self, args: &[&str]) -> Result<String, TestkitError> {
        if self.tls.is_some() {
            return Err(TestkitError::Protocol(
                "cmd speaks plaintext RESP and this server is TLS-only".to_owned(),
            ));
        }
        request(self.port, args, CMD_TIMEOUT)
    }

    /// How many times its log says "Ready to accept connections".
    fn log_ready_lines(&self) -> usize {
        fs::read_to_string(self.dir.path().join(LOG_FILE))
            .unwrap_or_default()
            .matches("Ready to accept connections")
            .count()
    }

    /// Spawns the process on `self.port`, without waiting for it.
    fn launch(&mut self) -> Result<(), TestkitError> {
        self.ready_lines = self.log_ready_lines();
        let dir = self.dir.path();
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(STDERR_FILE))
            .map_err(TestkitError::io("open redis's stderr file"))?;
        let mut command = Command::new(&self.binary);
        match &self.tls {
            None => command.arg("--port").arg(self.port.to_string()),
            Some(tls) => command
                .args(["--port", "0", "--tls-port"])
                .arg(self.port.to_string())
                .arg("--tls-cert-file")
                .arg(&tls.cert_file)
                .arg("--tls-key-file")
                .arg(&tls.key_file)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca_file)
                .arg("--tls-auth-clients")
                .arg(if tls.auth_clients { "yes" } else { "no" }),
        };
        command
            .args([
                "--bind",
                "127.0.0.1",
                "--protected-mode",
                "no",
                "--daemonize",
                "no",
            ])
            .args(["--save", ""])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join(LOG_FILE));
        if self.options.appendonly {
            command.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            command.args(["--appendonly", "no"]);
        }
        if self.options.die_with_parent {
            die_with_parent(&mut command);
        }
        let child = command
            .args(&self.options.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(TestkitError::io("spawn redis-server"))?;
        self.pid = child.id();
        self.child = Some(child);
        Ok(())
    }

    /// Polls until our process answers `PING` with `PONG` (`-LOADING` and refused
    /// connections just mean "not yet"), then checks `INFO server` reports our pid, so a
    /// server that another test started on the same port is never mistaken for ours.
    fn wait_ready(&mut self) -> Result<(), NotReady> {
        let deadline = Instant::now() + START_TIMEOUT;
        let own_pid = format!("process_id:{}", self.pid);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(NotReady::Exited(status));
                }
            }
            if self.tls.is_some() {
                // No plaintext PING: our own log (this directory is ours alone) says it is
                // up, and the port takes a connection (its process is the one that logged).
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
                let up = self.log_ready_lines() > self.ready_lines
                    && TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_ok();
                if up {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    return Err(NotReady::TimedOut(
                        "no \"Ready to accept connections\" in its log".into(),
                    ));
                }
                thread::sleep(POLL_INTERVAL);
                continue;
            }
            let last = match request(self.port, &["PING"], PROBE_TIMEOUT) {
                Ok(pong) if pong == "PONG" => {
                    match request(self.port, &["INFO", "server"], PROBE_TIMEOUT) {
                        Ok(info) if info.lines().any(|line| line.trim() == own_pid) => {
                            return Ok(())
                        }
                        Ok(_) => "another process answers on this port".to_owned(),
                        Err(e) => e.to_string(),
                    }
                }
                Ok(other) => format!("PING answered {other:?}"),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(NotReady::TimedOut(last));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Kills what is left of a failed start and describes the failure with the log's tail.
    fn start_failed(&mut self, why: NotReady) -> TestkitError {
        self.kill();
        let reason = match why {
            NotReady::Exited(status) => format!("it exited ({status})"),
            NotReady::TimedOut(last) => {
                format!(
                    "no PONG within {} s (last probe: {last})",
                    START_TIMEOUT.as_secs()
                )
            }
        };
        let log = [LOG_FILE, STDERR_FILE]
            .iter()
            .filter_map(|name| fs::read(self.dir.path().join(name)).ok())
            .map(|bytes| tail(&String::from_utf8_lossy(&bytes), LOG_TAIL_LINES))
            .collect::<Vec<_>>()
            .join("\n");
        TestkitError::RedisStart {
            port: self.port,
            reason,
            log,
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The first executable `redis-server` in `path`, a `PATH`-style list of directories.
fn find_binary(path: Option<&OsStr>) -> Option<PathBuf> {
    find_tool(path, "redis-server")
}

/// The first executable `name` in `path`, a `PATH`-style list of directories.
pub(super) fn find_tool(path: Option<&OsStr>, name: &str) -> Option<PathBuf> {
    env::split_paths(path?)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// A loopback port that was free a moment ago and that no earlier call in this process
/// handed out: bind port 0, read the port, release it. Another process may take it before
/// the caller binds (the caller retries with a new one).
///
/// Why never twice: tests of one binary run side by side, and a port one test freed (its
/// Redis killed, a port it meant to stay closed) must not become another test's server,
/// or the first test's clients and workers — which keep reconnecting — would reach it.
pub fn free_port() -> Result<u16, TestkitError> {
    let listener = listen_loopback().map_err(TestkitError::io("bind a free loopback port"))?;
    let addr = listener
        .local_addr()
        .map_err(TestkitError::io("read a bound port"))?;
    Ok(addr.port())
}

/// A listener on `127.0.0.1` at a port no earlier call of this or [`free_port`] in this
/// process got, so a test's server never takes a port another test of the same binary
/// used before (see [`free_port`]).
///
/// # Errors
/// The bind's error; `AddrNotAvailable` when 1 000 binds in a row gave used ports.
pub fn listen_loopback() -> std::io::Result<TcpListener> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    // The kernel may give back a port released a moment ago: try another while it does.
    let mut held = Vec::new();
    for _ in 0..1_000 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let fresh = HANDED_OUT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(port);
        if fresh {
            return Ok(listener);
        }
        // Held until we return, so the next bind cannot give the same port again.
        held.push(listener);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        "1 000 loopback ports in a row were handed out before in this process",
    ))
}

/// Make the process `command` spawns get SIGTERM when the thread that spawned it ends
/// (Linux `PR_SET_PDEATHSIG`), or at once when its parent is already gone.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (prctl, getppid, kill) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have ended before the prctl: nothing would signal us.
            if libc::getppid() == 1 {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            Ok(())
        });
    }
}

/// Sends `sig` to a child that has not been reaped yet (so its pid is still its own).
#[allow(unsafe_code)]
pub(super) fn signal(child: &Child, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe { libc::kill(pid, sig) };
    }
}

/// The last `n` lines of `text`.
pub(super) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Sends one RESP2 command to `127.0.0.1:port` and reads its reply (see
/// [`RedisServer::cmd`]); `timeout` bounds the connect and each read and write.
pub(super) fn request(port: u16, args: &[&str], timeout: Duration) -> Result<String, TestkitError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(TestkitError::io("connect to redis"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(TestkitError::io("set redis socket timeouts"))?;
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    (&stream)
        .write_all(&out)
        .map_err(TestkitError::io("send a redis command"))?;
    read_reply(&mut BufReader::new(stream))
}

/// Reads one RESP2 reply and renders it as text (see [`RedisServer::cmd`]).
fn read_reply(reader: &mut impl BufRead) -> Result<String, TestkitError> {
    let mut head = Vec::new();
    let read = reader
        .read_until(b'\n', &mut head)
        .map_err(TestkitError::io("read a redis reply"))?;
    if read == 0 {
        return Err(TestkitError::Protocol(
            "connection closed before the reply".to_owned(),
        ));
    }
    let head = String::from_utf8_lossy(&head);
    let head = head.trim_end_matches(['\r', '\n']);
    let Some(kind) = head.chars().next() else {
        return Err(TestkitError::Protocol("empty reply line".to_owned()));
    };
    let rest = &head[kind.len_utf8()..];
    let length = || -> Result<Option<usize>, TestkitError> {
        let n: i64 = rest
            .parse()
            .map_err(|_| TestkitError::Protocol(format!("bad length in {head:?}")))?;
        Ok(usize::try_from(n).ok()) // -1 is nil
    };
    match kind {
        '+' | ':' => Ok(rest.to_owned()),
        '-' => Err(TestkitError::Redis(rest.to_owned())),
        '$' => {
            let Some(len) = length()? else {
                return Ok(NIL.to_owned());
            };
            let mut data = vec![0; len + 2]; // the payload and its "\r\n"
            reader
                .read_exact(&mut data)
                .map_err(TestkitError::io("read a redis bulk string"))?;
            data.truncate(len);
            Ok(String::from_utf8_lossy(&data).into_owned())
        }
        '*' => {
            let Some(len) = length()? else {
                return Ok(NIL.to_owned());
            };
            let items = (0..len)
                .map(|_| read_reply(reader))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(items.join("\n"))
        }
        _ => Err(TestkitError::Protocol(format!("unexpected reply {head:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn appendonly() -> RedisOptions {
        RedisOptions {
            appendonly: true,
            ..RedisOptions::default()
        }
    }

    #[test]
    fn a_started_server_answers_ping_through_cmd() {
        let redis = RedisServer::start().unwrap();
        assert_eq!(redis.cmd(&["PING"]).unwrap(), "PONG");
        assert_eq!(redis.url(), format!("redis://127.0.0.1:{}", redis.port()));
    }

    #[test]
    fn two_servers_listen_on_different_ports() {
        let (a, b) = (RedisServer::start().unwrap(), RedisServer::start().unwrap());
        assert_ne!(a.port(), b.port());
        a.cmd(&["SET", "k", "a"]).unwrap();
        assert_eq!(b.cmd(&["GET", "k"]).unwrap(), NIL);
    }

    #[test]
    fn cmd_renders_integers_arrays_nil_and_error_replies() {
        let redis = RedisServer::start().unwrap();
        assert_eq!(redis.cmd(&["RPUSH", "list", "a", "b c"]).unwrap(), "2");
        assert_eq!(redis.cmd(&["LRANGE", "list", "0", "-1"]).unwrap(), "a\nb c");
        assert_eq!(redis.cmd(&["GET", "missing"]).unwrap(), NIL);
        match redis.cmd(&["INCR", "list"]) {
            Err(TestkitError::Redis(message)) => {
                assert!(message.starts_with("WRONGTYPE"), "{message}")
            }
            other => panic!("expected an error reply, got {other:?}"),
        }
    }

    #[test]
    fn extra_args_reach_redis() {
        let options = RedisOptions {
            extra_args: vec!["--maxmemory".into(), "10mb".into()],
            ..RedisOptions::default()
        };
        let redis = RedisServer::start_with(options).unwrap();
        assert_eq!(
            redis.cmd(&["CONFIG", "GET", "maxmemory"]).unwrap(),
            "maxmemory\n10485760"
        );
    }

    #[test]
    fn a_restart_with_appendonly_keeps_a_key_set_before_it() {
        let mut redis = RedisServer::start_with(appendonly()).unwrap();
        redis.cmd(&["SET", "k", "v"]).unwrap();
        let (port, pid) = (redis.port(), redis.pid());
        redis.restart().unwrap();
        assert_eq!(
            (redis.port(), redis.cmd(&["GET", "k"]).unwrap()),
            (port, "v".to_owned())
        );
        assert_ne!(redis.pid(), pid);
    }

    #[test]
    fn kill_then_start_again_serves_on_the_same_port_with_the_data() {
        let mut redis = RedisServer::start_with(appendonly()).unwrap();
        redis.cmd(&["SET", "k", "v"]).unwrap();
        redis.kill();
        assert!(matches!(redis.cmd(&["PING"]), Err(TestkitError::Io { .. })));
        redis.start_again().unwrap();
        assert_eq!(redis.cmd(&["GET", "k"]).unwrap(), "v");
    }

    #[test]
    fn a_resumed_server_answers_again() {
        let redis = RedisServer::start().unwrap();
        redis.pause();
        redis.resume();
        assert_eq!(redis.cmd(&["PING"]).unwrap(), "PONG");
    }

    #[test]
    fn a_missing_binary_is_reported_as_redis_not_found() {
        let result = RedisServer::start_using(
            RedisOptions::default(),
            Some(OsStr::new("/nonexistent:/also/missing")),
        );
        let error = result.unwrap_err();
        assert!(matches!(error, TestkitError::RedisNotFound));
        assert!(error
            .to_string()
            .contains("apt-get install -y redis-server"));
    }

    #[test]
    fn a_bad_argument_is_reported_with_the_log_tail() {
        let options = RedisOptions {
            extra_args: vec!["--no-such-option".into(), "1".into()],
            ..RedisOptions::default()
        };
        match RedisServer::start_with(options) {
            Err(TestkitError::RedisStart { log, .. }) => {
                assert!(log.contains("no-such-option"), "{log}")
            }
            other => panic!("expected a start error, got {other:?}"),
        }
    }
}
