//! Real servers for integration tests, the `demo` command and the benchmark.
//!
//! - [`RedisServer`]: a private `redis-server` process on a free loopback port, in its own
//!   temporary directory, killed and removed on drop.
//! - [`RedisCluster`]: a Redis Cluster of such servers made with `redis-cli --cluster create`.
//! - [`RedisSentinel`]: a master, a replica and sentinels monitoring them.
//! - [`Receiver`]: a local webhook receiver that records every request and answers each
//!   endpoint the way a test tells it to (fail, hang, slow down, redirect…).
//! - [`ConnectProxy`]: a forward proxy answering `CONNECT`, recording what it was asked
//!   (runs on the calling tokio runtime).
//!
//! Both are started and stopped synchronously and run on their own process or threads, so
//! they work from any runtime or none, and a test's current-thread runtime that blocks never
//! starves them. Every instance binds its own port, so tests run in parallel.

pub mod cluster;
pub mod connect_proxy;
pub mod receiver;
pub mod redis;
pub mod sentinel;

pub use cluster::RedisCluster;
pub use connect_proxy::ConnectProxy;
pub use receiver::{Behavior, Received, Receiver, ReceiverOptions, Reply};
pub use redis::{free_port, listen_loopback, RedisOptions, RedisServer, RedisTls};
pub use sentinel::RedisSentinel;

/// The loopback blocks the tests, the demo and the bench exempt from the SSRF guard
/// (`http.allow_cidrs`): their receivers listen on loopback.
pub const LOOPBACK_CIDRS: [&str; 2] = ["127.0.0.0/8", "::1/128"];

/// Exempt loopback ([`LOOPBACK_CIDRS`]) from `config`'s SSRF guard.
pub fn allow_loopback(config: &mut crate::config::Config) {
    config.http.allow_cidrs = LOOPBACK_CIDRS.iter().map(|s| s.to_string()).collect();
}

/// The secure default guards with loopback exempt, for stores that register sources
/// pointing at a local receiver ([`crate::store::Store::with_edge`]).
pub fn loopback_edge() -> crate::sinks::EdgePolicy {
    let mut c = crate::config::Config::default();
    allow_loopback(&mut c);
    crate::sinks::EdgePolicy::from_config(&c)
}

/// Why a test server could not be started or queried.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// No `redis-server` executable on `PATH`.
    #[error("redis-server not found on PATH: install it (Debian/Ubuntu: apt-get install -y redis-server)")]
    RedisNotFound,
    /// `redis-server` exited or did not answer `PING` in time; `log` is the tail of its log.
    #[error("redis-server on port {port} did not start: {reason}\n--- log tail ---\n{log}")]
    RedisStart {
        /// The port it was asked to listen on.
        port: u16,
        /// What went wrong, in a few words.
        reason: String,
        /// The last lines of its log file and standard error.
        log: String,
    },
    /// A tool a test deployment needs (`redis-cli`, `redis-sentinel`) is not on `PATH`.
    #[error("{tool} not found on PATH: install it (Debian/Ubuntu: apt-get install -y {package})")]
    ToolNotFound {
        /// The executable.
        tool: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// A cluster or sentinel deployment did not come up (or did not change as asked) in time.
    #[error("{what}: {reason}")]
    NotReady {
        /// The deployment and the step, e.g. `redis cluster of 3 masters`.
        what: String,
        /// What was seen last.
        reason: String,
    },
    /// Redis answered a command with an error reply (the text after `-`).
    #[error("redis error reply: {0}")]
    Redis(String),
    /// Redis sent something that is not RESP2.
    #[error("malformed redis reply: {0}")]
    Protocol(String),
    /// An operating-system call failed; `context` says which.
    #[error("{context}: {source}")]
    Io {
        /// The operation that failed.
        context: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl TestkitError {
    /// Builds a `map_err` adapter that wraps an [`std::io::Error`] with `context`.
    fn io(context: &'static str) -> impl FnOnce(std::io::Error) -> TestkitError {
        move |source| TestkitError::Io { context, source }
    }
}
