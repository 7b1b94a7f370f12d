//! Operations any process can run against an instance: each is a library call
//! here, an admin HTTP endpoint ([`crate::admin`]) and an `ankusa` command.
//!
//! | operation | library | admin HTTP | CLI |
//! | --- | --- | --- | --- |
//! | dead_letter_source | [`dead_letter_source`] | `POST /admin/dead_letter_source` | `ankusa dead-letter-source` |
//! | pressure | [`pressure`] | `GET /admin/pressure` | `ankusa pressure` |
//! | reconfigure | [`crate::Worker::reconfigure`] | `POST /admin/reconfigure` | `ankusa reconfigure` |
//! | tick | [`tick`], [`crate::Worker::tick`] | `POST /admin/tick` | `ankusa tick` |
//! | validate_config | [`validate_config`] | `POST /admin/config/check` | `ankusa config check` |
//! | dead letters | [`crate::dlq`] | `/admin/dlq…` | `ankusa dlq list\|show\|replay\|purge` |

use crate::config::{Config, ConfigError};
use crate::dispatch::SchedulerState;
use crate::error::Error;
use crate::store::{PressureRead, SourcePage, SourcePhase, Store, StoreError};
use std::time::Duration;
use tokio::sync::watch;

/// Whether every partition of the instance is idle (nothing claimed, nothing due by
/// Redis time), each read atomically by `idle.lua`.
pub async fn all_idle(store: &Store) -> Result<bool, StoreError> {
    for p in store.all_partitions() {
        if !p.idle().await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The partitions whose lease no leader holds now; empty while every partition
/// has a leader.
pub async fn leaderless(store: &Store) -> Result<Vec<u32>, StoreError> {
    let mut out = Vec::new();
    for p in store.all_partitions() {
        if p.lease_holder().await?.is_none() {
            out.push(p.partition_index());
        }
    }
    Ok(out)
}

/// Block until nothing is claimed, running or due by Redis time in any partition;
/// return the rows settled (delivered, dead-lettered or dropped) meanwhile. A row waiting
/// out a backoff is not due, so this does not wait for it. `local` wakes the wait early when
/// this process leads; otherwise Redis is polled every 20 ms. Errors: the store failing.
pub async fn tick(
    store: &Store,
    local: Option<watch::Receiver<SchedulerState>>,
) -> Result<u64, Error> {
    let start = store.totals().await?;
    let mut local = local;
    loop {
        if all_idle(store).await? {
            let end = store.totals().await?;
            return Ok((end.delivered + end.dead_lettered + end.dropped)
                .saturating_sub(start.delivered + start.dead_lettered + start.dropped));
        }
        let poll = tokio::time::sleep(Duration::from_millis(20));
        match local.as_mut() {
            Some(rx) => {
                tokio::select! {
                    _ = rx.changed() => {}
                    _ = poll => {}
                }
            }
            None => poll.await,
        }
    }
}

/// The spare capacity a replay job may use now.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct Pressure {
    /// Lag of the oldest due row (ms; 0 when nothing is due).
    pub lag_ms: u64,
    /// Whether the leader's in-flight window is full.
    pub window_full: bool,
}

/// Tenants at the front of the line that [`pressure`] looks at for the oldest due row.
pub const PRESSURE_TENANTS: usize = 1_000;

/// Read [`Pressure`] with one atomic script (`pressure.lua`) per partition: the lag of the
/// oldest due row from the heads of the (first 1 000) tenants in line, the window state
/// from what the leader holding the partition's lease publishes every second with a 3 s
/// TTL. Over partitions the lag is the largest and the window is full when any
/// partition's leader says so.
/// Errors: [`Error::Unavailable`] when nobody holds a partition's lease, its leader has not
/// published (it died or is starting), or Redis cannot answer; with several partitions the
/// message names the partition.
pub async fn pressure(store: &Store) -> Result<Pressure, Error> {
    let mut out = Pressure {
        lag_ms: 0,
        window_full: false,
    };
    let many = store.partitions() > 1;
    for p in store.all_partitions() {
        match p.pressure(PRESSURE_TENANTS).await {
            Ok(PressureRead::Ok {
                lag_ms,
                window_full,
            }) => {
                out.lag_ms = out.lag_ms.max(lag_ms);
                out.window_full |= window_full;
            }
            Ok(PressureRead::Unavailable(why)) if many => {
                return Err(Error::Unavailable(format!(
                    "partition {} of {} has no live leader: {why}",
                    p.partition_index(),
                    store.partitions()
                )))
            }
            Ok(PressureRead::Unavailable(why)) => return Err(Error::Unavailable(why)),
            Err(e) => return Err(unavailable(e)),
        }
    }
    Ok(out)
}

fn unavailable(e: StoreError) -> Error {
    match e {
        StoreError::Redis(e) => Error::Unavailable(format!("redis: {e}")),
        other => Error::Store(other),
    }
}

/// What [`dead_letter_source`] did.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
pub struct SourceDeadLettered {
    /// Pending rows dead-lettered as `source_gone(<source>)`.
    pub count: u64,
    /// Pending rows of the tenant dropped because their hook was gone (not counted).
    pub dropped: u64,
}

/// Rows looked at per `dead_letter_source.lua` call: bounds how long one call holds Redis.
pub const DEAD_LETTER_SOURCE_PAGE: usize = 500;

/// Dead-letter every pending row of `tenant`'s source `source` now as
/// `source_gone(<source>)` and return how many, for deleting a source that still
/// has a backlog. Rows of the tenant whose hook is gone are dropped and not counted. Rows
/// claimed by a running attempt are left to settle; one that comes back pending after the
/// source is deleted is dead-lettered `source_gone` when it is next claimed.
///
/// The walk is a loop of bounded atomic script calls, first over the source's ordered lanes
/// (their waiting members), then over `due:<tenant>` (a dead-lettered lane head releases
/// its lane), so no claim can race a row, and other work goes on between pages. The
/// call needs a live leader: one that holds the lease and has published its window state
/// (as for [`pressure`]).
/// Errors: [`Error::BadId`] for a malformed id; [`Error::Unavailable`] when no leader holds
/// the lease, Redis cannot answer, or `deadline` passes (the rows dead-lettered so far stay
/// so; calling again finishes the walk).
pub async fn dead_letter_source(
    store: &Store,
    tenant: &str,
    source: &str,
    deadline: Duration,
) -> Result<SourceDeadLettered, Error> {
    crate::model::check_id("tenant", tenant)?;
    crate::model::check_id("source", source)?;
    let started = tokio::time::Instant::now();
    let mut total = SourceDeadLettered::default();
    // The tenant's partition.
    let routed = store.for_tenant(tenant);
    let store = &*routed;
    for phase in [SourcePhase::Lanes, SourcePhase::Due] {
        let mut cursor = "0".to_string();
        loop {
            let page = tokio::time::timeout_at(
                started + deadline,
                store.dead_letter_source(tenant, source, phase, &cursor, DEAD_LETTER_SOURCE_PAGE),
            )
            .await;
            let page = match page {
                Err(_) => {
                    return Err(Error::Unavailable(format!(
                        "dead_letter_source {tenant}/{source}: deadline of {} ms passed after {} rows dead-lettered; call again to finish",
                        deadline.as_millis(),
                        total.count
                    )))
                }
                Ok(r) => r.map_err(unavailable)?,
            };
            match page {
                SourcePage::Unavailable => {
                    return Err(Error::Unavailable(format!(
                        "no live leader: the pipeline is down ({} rows dead-lettered before)",
                        total.count
                    )))
                }
                SourcePage::Page {
                    cursor: next,
                    dead_lettered,
                    dropped,
                } => {
                    total.count += dead_lettered;
                    total.dropped += dropped;
                    if next == "0" {
                        break;
                    }
                    cursor = next;
                }
            }
        }
    }
    Ok(total)
}

/// Check a config: every `dispatch.*` / `retry.*` key and the rest; the error names
/// each bad key, e.g. `dispatch.tenants.acme.max_inflight: must be > 0`.
pub fn validate_config(config: &Config) -> Result<(), Error> {
    Ok(config.validate_with(crate::sinks::registry::config_problems)?)
}

/// Parse and check a config file's text (defaults for missing keys, no environment):
/// unknown keys and wrong types are named with their key path too.
pub fn validate_config_toml(toml: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str_checked(toml, crate::sinks::registry::config_problems)
}

/// What [`enable_sink`] answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct SinkEnabled {
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// The entry's index.
    pub sink: u32,
    /// Whether it was disabled (false: it was enabled already, nothing changed).
    pub was_disabled: bool,
}

/// `ankusa source enable` / `POST /admin/sources/{tenant}/{source}/sinks/{index}/enable`
///: clear an entry's `disabled` mark, so new hooks make rows for it again, and append a
/// `sink_enabled` event to the `events` stream. Rows dead-lettered `sink_disabled` stay in
/// the dead-letter queue: replay them (`ankusa dlq replay --reason sink_disabled`). Needs no
/// leader. Errors: [`Error::NotFound`] for an unknown source or index.
pub async fn enable_sink(
    store: &Store,
    tenant: &str,
    source: &str,
    index: u32,
    events_max_len: u64,
) -> Result<SinkEnabled, Error> {
    let change = store
        .set_sink_disabled(None, tenant, source, index, None, None, events_max_len)
        .await?;
    Ok(SinkEnabled {
        tenant: tenant.into(),
        source: source.into(),
        sink: index,
        was_disabled: matches!(change, crate::store::SinkStateChange::Changed(_)),
    })
}
