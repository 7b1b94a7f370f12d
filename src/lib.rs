//! # ankusa — a Redis-backed distributed webhook and event delivery worker
//!
//! Producers commit hooks into Redis; a pool of `ankusa worker` processes elects one
//! leader through a lease key; the leader's scheduler claims due delivery rows with
//! atomic Lua scripts, delivers each to its sinks, and records outcomes in batched
//! scripts. Requirements are cited as `R1`…`R29` from `SPEC.md`.
//!
//! ## Map of the crate
//! | module | concept |
//! | --- | --- |
//! | [`config`] | layered config, validation naming the key (R24) |
//! | [`keyspace`] | every Redis key name, hash-tagged per partition (R26, R29) |
//! | [`model`] | ids, sources and sink entries, row ids, dead-letter reasons |
//! | [`store`] | Redis pool, the `lua/` scripts and one typed wrapper each |
//! | [`producer`] | committing hooks (R1, R2) |
//! | [`leader`] | lease, renewal, fencing epoch, standby (R25) |
//! | [`scheduler`] | the leader's loop: claim → slots → attempts → settle (R2–R9, R13–R15) |
//! | [`scheduler::slots`], [`scheduler::backoff`] | pure decisions: windows, slots, backoff |
//! | [`sinks`] | sink modules (http, sqs, pubsub), the batcher, retry classification (R8, R17) |
//! | [`sinks::guard`], [`sinks::signing`], [`secrets`] | the trusted edge: SSRF guard, Standard Webhooks signatures, secret references |
//! | [`claim_check`] | blob store for bodies over a sink's inline limit (R18) |
//! | [`worker`] | a worker process's library face |
//! | [`ops`] | `tick()`, `pressure()` (R21, R23) |
//! | [`dlq`] | reading dead letters |
//! | [`visibility`] | attempt history, `hooks show`, `rows list`, resend, `tenants top` |
//! | [`admin`] | admin HTTP: metrics, health, ingest, operations |
//! | [`metrics`] | the Prometheus recorder (R27) |
//! | [`telemetry`] | optional OpenTelemetry (OTLP/HTTP) export of attempt spans |
//! | [`testkit`] | real `redis-server` and webhook receiver for tests, demo and bench |
//! | [`demo`], [`bench`] | the end-to-end demo and the benchmark |
//!
//! Pure logic (`scheduler::slots`, `scheduler::backoff`, `sinks::http::classify`, config
//! validation) has no I/O and is unit- and property-tested; everything else is tested
//! against a real `redis-server` and real HTTP in `tests/`.
#![deny(missing_docs)]

pub mod admin;
pub mod bench;
pub mod claim_check;
pub mod config;
pub mod demo;
pub mod dlq;
pub mod error;
pub mod keyspace;
pub mod leader;
pub mod metrics;
pub mod model;
pub mod ops;
pub mod producer;
pub mod scheduler;
pub mod secrets;
pub mod sinks;
pub mod store;
pub mod telemetry;
pub mod testkit;
pub mod visibility;
pub mod worker;

pub use config::Config;
pub use error::Error;
pub use producer::{Hook, Producer};
pub use worker::Worker;
