//! The archiver: run by each partition's leader, it moves the partition's `log` stream into
//! the log store and trims what it wrote; partition 0's leader also applies the retention.
//! PostgreSQL away or slow never touches delivery: the stream grows (bounded by
//! `log.stream_max_bytes`) and the archiver catches up when the store answers again.

use super::{record, LogError, LogStore};
use crate::config::LogConfig;
use crate::store::Store;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use tracing::{info, warn};

/// Batches written per pass at most, so one pass never holds the task for long.
const ROUNDS_PER_PASS: usize = 50;
/// Bytes of stream entries read and written per transaction, about: entries carry bodies
/// (up to `log.keep_bodies` each, a thousand a settle call), so a batch is bounded by bytes
/// as well as by `log.batch_entries`.
const BATCH_BYTES: u64 = 8 << 20;
/// How often the retention is applied (partition 0's leader), ms.
const RETENTION_EVERY_MS: i64 = 3_600_000;

/// What one pass moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Stream entries written to the store.
    pub entries: u64,
    /// Records written.
    pub records: u64,
    /// Lines that were not records, left out.
    pub malformed: u64,
    /// Entries left in the stream after the pass.
    pub backlog: u64,
    /// Records `settle.lua` dropped, in all, because the stream was at its most entries.
    pub dropped: u64,
    /// Age of the oldest entry not yet archived, ms (0: none).
    pub lag_ms: i64,
}

/// Move what `store`'s partition stream holds into `log`, `batch` entries per transaction,
/// until it is empty or [`ROUNDS_PER_PASS`] batches were written.
pub async fn archive_pass(store: &Store, log: &LogStore, batch: u64) -> Result<Pass, LogError> {
    let partition = store.partition_index();
    let mut cursor = log.cursor(partition).await?;
    if !cursor.is_empty() {
        // Entries at or before the cursor are in the store already (a trim that failed, or
        // a leader that stopped between its commit and its trim).
        store.log_trim(&cursor).await?;
    }
    let mut pass = Pass::default();
    // Entries per read: as many as fit BATCH_BYTES at the stream's mean entry size (then at
    // the last read's), at most `batch`.
    let (len, used) = store.log_usage().await?;
    let mut count = entries_for(used, len, batch);
    for _ in 0..ROUNDS_PER_PASS {
        let entries = store.log_read(&cursor, count).await?;
        if entries.is_empty() {
            break;
        }
        let full = entries.len() as u64 >= count;
        let bytes: u64 = entries.iter().map(|e| e.bytes).sum();
        count = entries_for(bytes, entries.len() as u64, batch);
        let parsed: Vec<(String, record::Parsed)> = entries
            .iter()
            .map(|e| (e.id.clone(), record::parse_log_entry(e)))
            .collect();
        let a = log.archive(partition, &parsed).await?;
        // What was read is in the log store now (written here, or by another leader a
        // moment before): its bytes leave the stream's budget.
        store.log_release(bytes).await?;
        pass.entries += a.entries;
        pass.records += a.records;
        pass.malformed += a.malformed;
        match a.through {
            Some(t) => {
                store.log_trim(&t).await?;
                cursor = t;
            }
            None => break,
        }
        if !full {
            break;
        }
    }
    let (backlog, dropped) = store.log_backlog().await?;
    pass.backlog = backlog;
    pass.dropped = dropped;
    if backlog > 0 {
        if let Some(first) = store.log_read(&cursor, 1).await?.first() {
            let ms: i64 = first
                .id
                .split('-')
                .next()
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            let now = store.now_ms().await?;
            pass.lag_ms = (now - ms).max(0);
        }
    }
    Ok(pass)
}

/// `bytes` in MiB, to one decimal.
fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1u32 << 20))
}

/// Entries of `bytes / entries` mean size that fit [`BATCH_BYTES`], in `1..=batch`.
fn entries_for(bytes: u64, entries: u64, batch: u64) -> u64 {
    let mean = bytes.checked_div(entries).unwrap_or(0);
    (BATCH_BYTES / mean.max(1)).clamp(1, batch.max(1))
}

/// The archiver's state across passes of one partition: whether the schema is known good,
/// whether the store was failing (so each failure and recovery is logged once), when the
/// retention last ran.
#[derive(Debug)]
pub struct Archiver {
    schema_ok: AtomicBool,
    failing: AtomicBool,
    retention_at: AtomicI64,
    /// Records dropped in all as of the last tick (`-1`: none seen yet).
    dropped_seen: AtomicI64,
    /// Tenants kept fewer days than `log.retention_days`, and how many.
    tenant_days: Vec<(String, u32)>,
}

impl Default for Archiver {
    fn default() -> Self {
        Archiver {
            schema_ok: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            retention_at: AtomicI64::new(0),
            dropped_seen: AtomicI64::new(-1),
            tenant_days: Vec::new(),
        }
    }
}

impl Archiver {
    /// An archiver that also applies each `(tenant, days)` retention shorter than
    /// `log.retention_days` (partition 0's leader, hourly).
    pub fn with_tenant_retention(tenant_days: Vec<(String, u32)>) -> Archiver {
        Archiver {
            tenant_days,
            ..Archiver::default()
        }
    }
}

/// Lag past which the archiving is reported behind (readiness detail), ms.
const BEHIND_MS: i64 = 60_000;

impl Archiver {
    /// One tick of the leader's task: the schema checked (or migrated) once, a pass, its
    /// metrics; the retention on partition 0 every hour. Errors are logged, never raised:
    /// the next tick tries again. Returns how the archiving is not keeping up (the store
    /// away, over a minute behind, or records dropped since the last tick), if it is not.
    pub async fn tick(&self, store: Store, log: LogStore, cfg: LogConfig) -> Option<String> {
        let partition = store.partition_index().to_string();
        match self.pass(&store, &log, &cfg).await {
            Ok(p) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    info!(partition, "log store reachable again; archiving resumed");
                }
                if p.records > 0 {
                    metrics::counter!("ankusa_log_records_archived_total").increment(p.records);
                }
                if p.malformed > 0 {
                    warn!(
                        partition,
                        lines = p.malformed,
                        "log stream lines that are not records were left out"
                    );
                }
                let labels = [("partition", partition.clone())];
                metrics::gauge!("ankusa_log_stream_entries", &labels).set(p.backlog as f64);
                metrics::gauge!("ankusa_log_archive_lag_seconds", &labels)
                    .set(p.lag_ms as f64 / 1000.0);
                metrics::counter!("ankusa_log_records_dropped_total", &labels).absolute(p.dropped);
                let dropped = p.dropped.min(i64::MAX as u64) as i64;
                let before = self.dropped_seen.swap(dropped, Ordering::Relaxed);
                if before >= 0 && dropped > before {
                    warn!(
                        partition,
                        records = dropped - before,
                        "log stream at log.stream_max_bytes: records dropped"
                    );
                    Some(format!(
                        "{} delivery log records dropped at the stream's bound \
                         (log.stream_max_bytes); delivery goes on",
                        dropped - before
                    ))
                } else if p.lag_ms > BEHIND_MS {
                    Some(format!(
                        "delivery log archiving {} s behind ({} stream entries waiting)",
                        p.lag_ms / 1000,
                        p.backlog
                    ))
                } else {
                    None
                }
            }
            Err(e) => {
                metrics::counter!("ankusa_log_archive_errors_total").increment(1);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    warn!(partition, error = %e, "log store unavailable; records wait in the log stream (bounded by log.stream_max_bytes) and are archived when it answers");
                }
                let waiting = match store.log_usage().await {
                    Ok((entries, bytes)) => format!(
                        "; {entries} stream entries ({} of {} MiB) waiting",
                        mib(bytes),
                        mib(cfg.stream_max_bytes)
                    ),
                    Err(_) => String::new(),
                };
                Some(format!("delivery log store unavailable: {e}{waiting}"))
            }
        }
    }

    async fn pass(&self, store: &Store, log: &LogStore, cfg: &LogConfig) -> Result<Pass, LogError> {
        if !self.schema_ok.load(Ordering::Relaxed) {
            if cfg.migrate_on_start {
                let applied = log.migrate().await?;
                if !applied.is_empty() {
                    info!(?applied, "log store schema migrated");
                }
            } else {
                let (have, need) = log.schema_version().await?;
                if have < need {
                    return Err(LogError::Schema { have, need });
                }
            }
            log.claim_owner().await?;
            self.schema_ok.store(true, Ordering::Relaxed);
        }
        let pass = archive_pass(store, log, cfg.batch_entries).await?;
        if store.partition_index() == 0 {
            let now = store.now_ms().await?;
            if now - self.retention_at.load(Ordering::Relaxed) >= RETENTION_EVERY_MS {
                let dropped = log.drop_expired(cfg.retention_days, now).await?;
                if !dropped.is_empty() {
                    info!(?dropped, "log retention dropped day partitions");
                }
                for (tenant, days) in &self.tenant_days {
                    let n = log.expire_tenant(tenant, *days, now).await?;
                    if n > 0 {
                        info!(tenant, days, rows = n, "tenant log retention deleted rows");
                    }
                }
                self.retention_at.store(now, Ordering::Relaxed);
            }
        }
        Ok(pass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_takes_as_many_entries_as_fit_the_byte_bound() {
        // Small entries (records only): the configured batch.
        assert_eq!(entries_for(200 * 2_000, 200, 200), 200);
        // Nothing known yet: the batch.
        assert_eq!(entries_for(0, 0, 200), 200);
        // Entries of 1 MiB (a thousand 1 KiB bodies): 8 a read.
        assert_eq!(entries_for(10 << 20, 10, 200), 8);
        // One entry larger than the bound: still one at a time, never none.
        assert_eq!(entries_for(64 << 20, 1, 200), 1);
        assert_eq!(entries_for(5, 1, 0), 1);
    }
}
