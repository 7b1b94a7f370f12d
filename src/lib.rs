//! # ankusa — a Redis-backed distributed webhook and event delivery worker
//!
//! Producers commit hooks into Redis; a pool of `ankusa worker` processes elects one
//! leader through a lease key; the leader's dispatch loop claims due delivery rows with
//! atomic Lua scripts, delivers each to its sinks, and records outcomes in batched
//! scripts.
//!
//! ## Map of the crate
//! | module | concept |
//! | --- | --- |
//! | [`config`] | layered config, validation naming the key; `config/sections.rs` holds the worker's sections, `config/edge.rs` those that bound tenants and the operator's bounds on sources (`[http]`, `[secrets]`, `[connections]`, `[limits]`, `[tenants.<id>]`); `config/redis_url.rs` which deployment a `redis.url` names, `config/forms.rs` the value forms the servers read too |
//! | [`ids`] | the tenant and source id check, below every layer |
//! | [`text`] | escaping the control characters of text a tenant or receiver controls, for the command line's tables and the console's pages; below every layer |
//! | [`keyspace`] | every Redis key name, hash-tagged per partition |
//! | [`model`] | ids, sources and sink entries, row ids, dead-letter reasons |
//! | [`filter`] | a sink entry's filter: event type patterns, predicates on body and headers |
//! | [`store`] | the only door to Redis: pool, the `lua/` scripts and one typed wrapper file each, plain reads and writes, the wake subscription (a test keeps every other module off the client library) |
//! | [`producer`] | committing hooks |
//! | `leader` | lease, renewal, fencing epoch, standby, one campaign per partition |
//! | `spread` | how many partitions each worker leads: heartbeats, shares, hand-over |
//! | `health` | what `/healthz` and `/readyz` report beyond "the process answers" |
//! | `dispatch` | the leader's loop: claim → slots → attempts → settle |
//! | `scheduler` | pure decisions: `scheduler::slots`, `scheduler::breaker`, `scheduler::backoff` |
//! | [`sinks`] | sink modules (http, sqs, pubsub, nats, rabbitmq, kinesis, eventbridge) behind [`sinks::registry`], the batcher, retry classification |
//! | [`sinks::guard`], [`sinks::signing`], [`secrets`] | the trusted edge: SSRF guard, Standard Webhooks signatures, secret references scoped per tenant |
//! | `claim_check` | blob store for bodies over a sink's inline limit; a sink carries a [`sinks::payload::Payload`] |
//! | [`worker`] | a worker process's library face |
//! | [`ops`] | `tick()`, `pressure()` |
//! | [`dlq`] | reading, replaying and purging dead letters |
//! | [`log`] | the delivery log: the `log` stream the settle script writes, the archiver that moves it into PostgreSQL, search, erasure, retention |
//! | [`visibility`] | attempt history, `hooks show`, `rows list`, resend, `tenants top` |
//! | [`admin`] | admin HTTP: metrics, health, ingest, operations; who may call what ([`admin::Principal`]); [`admin::console`], the operator console (`/ui/`) and tenant portal (`/portal/`): server-rendered pages over the admin API, served by the same listener |
//! | [`tokens`] | tenant tokens: minting, their scopes, what Redis keeps of them |
//! | [`metrics`] | the Prometheus recorder |
//! | [`telemetry`] | optional OpenTelemetry (OTLP/HTTP) export of attempt spans |
//! | [`progress`] | the progress bar on stderr and the log lines written around it |
//! | [`testkit`] | real `redis-server` and webhook receiver for tests, demo and bench |
//! | [`demo`], [`bench`] | the end-to-end demo and the benchmark |
//!
//! `leader`, `spread`, `health`, `dispatch`, `scheduler` and `claim_check` are the worker's
//! insides, crate-private: a program drives them through [`Worker`], [`ops`] and [`admin`]
//! (the map still names them because their files are where the decisions are).
//!
//! The command line lives in the binary (`src/main.rs`, `src/cli/`). `docs/architecture.md`
//! walks one hook from commit to settle through these files; `CONTRIBUTING.md` says where a
//! new sink, script, metric or config key goes.
//!
//! Pure logic (`scheduler::slots`, `scheduler::backoff`, `sinks::http::classify`, config
//! validation) has no I/O and is unit- and property-tested; everything else is tested
//! against a real `redis-server` and real HTTP in `tests/`.
#![deny(missing_docs)]
// No unsafe code outside the testkit, which signals the processes it starts (kill(2)).
#![deny(unsafe_code)]
#![deny(unreachable_pub)]

pub mod admin;
pub mod bench;
pub(crate) mod claim_check;
pub mod config;
pub mod demo;
pub(crate) mod dispatch;
pub mod dlq;
pub mod error;
mod fault;
pub mod filter;
pub(crate) mod health;
pub mod ids;
pub mod keyspace;
pub(crate) mod leader;
pub mod log;
pub mod metrics;
pub mod model;
pub mod ops;
pub mod producer;
pub mod progress;
pub(crate) mod scheduler;
pub mod secrets;
pub mod sinks;
pub(crate) mod spread;
pub mod store;
pub mod telemetry;
pub mod testkit;
pub mod text;
pub mod tokens;
pub mod visibility;
pub mod worker;

pub use config::Config;
pub use error::Error;
pub use producer::{Hook, Producer};
pub use store::Schedule;
pub use worker::Worker;
