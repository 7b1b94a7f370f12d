//! Operations any process can run against an instance (R21, R23).

use crate::error::Error;
use crate::scheduler::SchedulerState;
use crate::store::Store;
use std::time::Duration;
use tokio::sync::watch;

/// Block until nothing is claimed, running or due by Redis time (R23); return the rows
/// settled (delivered, dead-lettered or dropped) meanwhile. A row waiting out a backoff is
/// not due, so this does not wait for it. `local` wakes the wait early when this process
/// leads; otherwise Redis is polled every 20 ms. Errors: the store failing.
pub async fn tick(
    store: &Store,
    local: Option<watch::Receiver<SchedulerState>>,
) -> Result<u64, Error> {
    let start = store.totals().await?;
    let mut local = local;
    loop {
        if store.idle().await? {
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

/// The spare capacity a replay job may use now (R21).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pressure {
    /// Lag of the oldest due row (ms; 0 when nothing is due).
    pub lag_ms: u64,
    /// Whether the leader's in-flight window is full.
    pub window_full: bool,
}

/// Read [`Pressure`] from Redis: the lag from the tenants at the front of the line, the
/// window from the state the leader publishes with a short TTL. `Unavailable` when no
/// leader published recently or Redis cannot answer.
pub async fn pressure(store: &Store) -> Result<Pressure, Error> {
    use fred::prelude::{KeysInterface, SortedSetsInterface};
    let ks = store.keyspace();
    let c = store.client();
    let window: Option<String> = c
        .get(ks.window())
        .await
        .map_err(|e| Error::Unavailable(e.to_string()))?;
    let Some(window) = window else {
        return Err(Error::Unavailable("no live leader".into()));
    };
    let state: SchedulerState = serde_json::from_str(&window)
        .map_err(|e| Error::Unavailable(format!("leader state: {e}")))?;
    let now = store
        .now_ms()
        .await
        .map_err(|e| Error::Unavailable(e.to_string()))?;
    // The oldest due row is at the head of some tenant at the front of the line.
    let front: Vec<String> = c
        .zrangebyscore(ks.tenants(), "-inf", now, false, Some((0, 64)))
        .await
        .map_err(|e| Error::Unavailable(e.to_string()))?;
    let mut oldest: Option<i64> = None;
    if !front.is_empty() {
        let pipe = c.pipeline();
        for t in &front {
            let _: () = pipe
                .zrange(ks.due(t), 0, 0, None, false, None, true)
                .await
                .map_err(|e| Error::Unavailable(e.to_string()))?;
        }
        let heads: Vec<fred::types::Value> = pipe
            .all()
            .await
            .map_err(|e| Error::Unavailable(e.to_string()))?;
        oldest = heads
            .iter()
            .filter_map(crate::store::first_score)
            .filter(|s| *s <= now)
            .min();
    }
    Ok(Pressure {
        lag_ms: oldest.map_or(0, |o| (now - o).max(0) as u64),
        window_full: state.window_full,
    })
}
