//! The PostgreSQL log store: a pool of connections (`deadpool-postgres`), the archiving
//! transaction (exactly once through the cursor kept with the records), the reads, erasure and
//! retention.

use super::record::{HookEnded, HookState, LogRecord, Parsed};
use super::schema::{self, DAILY};
use super::LogError;
use crate::config::LogConfig;
use crate::store::AttemptRecord;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Timeouts};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_postgres::NoTls;

/// How long one statement or transaction of the log store may take before it counts as
/// failed (the archiver tries again; a read answers unavailable).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for a connection (new or from the pool).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The log store: cheap to clone (one pool).
#[derive(Clone)]
pub struct LogStore {
    pool: Pool,
    instance: String,
    /// Days whose partitions exist (created by this process or seen), so each is created once.
    days: Arc<Mutex<HashSet<i64>>>,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

/// What one archiving transaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Archived {
    /// The id of the last stream entry now in the log store (the cursor), if any.
    pub through: Option<String>,
    /// Entries written by this call (entries at or before the cursor were already in).
    pub entries: u64,
    /// Records written (a record already in, e.g. re-sent after a lost answer, is not).
    pub records: u64,
    /// Lines that were not records, left out.
    pub malformed: u64,
}

/// One hook of a search answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LoggedHook {
    /// Hook id.
    pub hook: u64,
    /// Partition of its tenant when it ended.
    pub partition: u32,
    /// Source id.
    pub source: String,
    /// The producer's event type, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// `delivered` or `dead_lettered`.
    pub state: String,
    /// When it was committed, ms since the epoch (0: unknown).
    pub committed_ms: i64,
    /// When its last row ended, ms since the epoch.
    pub ended_ms: i64,
    /// Rows of it dead-lettered.
    pub dead_rows: u32,
}

/// A search of a tenant's log, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Search {
    /// Tenant id.
    pub tenant: String,
    /// Ended at or after, ms.
    pub since_ms: Option<i64>,
    /// Ended before, ms.
    pub until_ms: Option<i64>,
    /// Only this state.
    pub state: Option<HookState>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Only this source.
    pub source: Option<String>,
    /// Only this hook id.
    pub hook: Option<u64>,
    /// At most this many (1..=1000).
    pub limit: u32,
    /// The `next` of the previous page.
    pub after: Option<String>,
}

/// One page of a search: the hooks, and the cursor of the next page when there may be one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct SearchPage {
    /// Hooks, the most recently ended first.
    pub hooks: Vec<LoggedHook>,
    /// Pass as `after` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// The archiving state of one partition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CursorState {
    /// Partition.
    pub partition: u32,
    /// The last stream entry archived.
    pub last_id: String,
    /// Records archived in all.
    pub records: i64,
    /// When the cursor last moved, ms since the epoch.
    pub updated_ms: i64,
}

/// Text as PostgreSQL stores it: a NUL (which `text` refuses) becomes U+FFFD, so one odd
/// error text never stops the archiver.
pub(super) fn pg_text(s: &str) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s.to_string()
    }
}

/// A stream entry id as a comparable pair.
fn stream_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// Ms clamped into what PostgreSQL's timestamps and our partitions take (year 1970..9999).
pub(super) fn clamp_ms(ms: i64) -> i64 {
    ms.clamp(0, 253_402_300_799_000)
}

pub(super) async fn timed<T, E: Into<LogError>>(
    what: &'static str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, LogError> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map_err(Into::into),
        Err(_) => Err(LogError::Timeout(what)),
    }
}

impl LogStore {
    /// A pool for `cfg.url` (no connection is made until one is needed). Errors: no or a
    /// malformed URL.
    pub fn connect(cfg: &LogConfig, instance: &str) -> Result<LogStore, LogError> {
        let url = cfg
            .url
            .as_deref()
            .ok_or_else(|| LogError::Config("log.url is not set".into()))?;
        let mut pg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| LogError::Config(format!("log.url: {e}")))?;
        pg.connect_timeout(CONNECT_TIMEOUT);
        pg.application_name("ankusa");
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(cfg.pool_size.max(1))
            .timeouts(Timeouts {
                wait: Some(CONNECT_TIMEOUT),
                create: Some(CONNECT_TIMEOUT),
                recycle: Some(CONNECT_TIMEOUT),
            })
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| LogError::Config(e.to_string()))?;
        Ok(LogStore {
            pool,
            instance: instance.to_string(),
            days: Arc::default(),
        })
    }

    /// The instance whose log this store writes.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub(super) async fn client(&self) -> Result<deadpool_postgres::Object, LogError> {
        self.pool.get().await.map_err(LogError::from)
    }

    /// Apply the migrations this database lacks, in order, under an advisory lock (several
    /// workers starting at once apply each once). Returns the versions applied now.
    pub async fn migrate(&self) -> Result<Vec<u32>, LogError> {
        let mut c = self.client().await?;
        timed("migrate", async {
            let tx = c.transaction().await?;
            tx.execute(
                "SELECT pg_advisory_xact_lock($1)",
                &[&schema::MIGRATION_LOCK],
            )
            .await?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS ankusa_log_migrations (
                     version integer PRIMARY KEY,
                     applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .await?;
            let have: i32 = tx
                .query_one(
                    "SELECT coalesce(max(version), 0) FROM ankusa_log_migrations",
                    &[],
                )
                .await?
                .get(0);
            let mut applied = Vec::new();
            for (i, sql) in schema::MIGRATIONS.iter().enumerate() {
                let version = i as i32 + 1;
                if version <= have {
                    continue;
                }
                tx.batch_execute(sql).await?;
                tx.execute(
                    "INSERT INTO ankusa_log_migrations (version) VALUES ($1)",
                    &[&version],
                )
                .await?;
                applied.push(version as u32);
            }
            tx.commit().await?;
            Ok::<_, tokio_postgres::Error>(applied)
        })
        .await
    }

    /// The schema version of the database (0: none), and the version this build needs.
    pub async fn schema_version(&self) -> Result<(u32, u32), LogError> {
        let c = self.client().await?;
        let v: i32 = timed("schema version", async {
            let exists: bool = c
                .query_one(
                    "SELECT to_regclass('ankusa_log_migrations') IS NOT NULL",
                    &[],
                )
                .await?
                .get(0);
            if !exists {
                return Ok(0);
            }
            Ok::<i32, tokio_postgres::Error>(
                c.query_one(
                    "SELECT coalesce(max(version), 0) FROM ankusa_log_migrations",
                    &[],
                )
                .await?
                .get(0),
            )
        })
        .await?;
        Ok((v.max(0) as u32, schema::MIGRATIONS.len() as u32))
    }

    /// The last stream entry of `partition` archived (`""`: none yet).
    pub async fn cursor(&self, partition: u32) -> Result<String, LogError> {
        let c = self.client().await?;
        let row = timed(
            "cursor",
            c.query_opt(
                "SELECT last_id FROM ankusa_log_cursor WHERE instance = $1 AND partition = $2",
                &[&self.instance, &(partition as i32)],
            ),
        )
        .await?;
        Ok(row.map(|r| r.get(0)).unwrap_or_default())
    }

    /// Every partition's archiving state.
    pub async fn cursors(&self) -> Result<Vec<CursorState>, LogError> {
        let c = self.client().await?;
        let rows = timed(
            "cursors",
            c.query(
                "SELECT partition, last_id, records,
                        (extract(epoch FROM updated_at) * 1000)::bigint
                 FROM ankusa_log_cursor WHERE instance = $1 ORDER BY partition",
                &[&self.instance],
            ),
        )
        .await?;
        Ok(rows
            .iter()
            .map(|r| CursorState {
                partition: r.get::<_, i32>(0).max(0) as u32,
                last_id: r.get(1),
                records: r.get(2),
                updated_ms: r.get(3),
            })
            .collect())
    }

    /// The day partitions of every day `ms` falls in, created where missing.
    async fn ensure_days(&self, ms: Vec<i64>) -> Result<(), LogError> {
        let want: Vec<i64> = {
            let known = self.days.lock().unwrap_or_else(|p| p.into_inner());
            let mut w: Vec<i64> = ms
                .into_iter()
                .map(|m| schema::day_of(clamp_ms(m)))
                .filter(|d| !known.contains(d))
                .collect();
            w.sort_unstable();
            w.dedup();
            w
        };
        if want.is_empty() {
            return Ok(());
        }
        let mut c = self.client().await?;
        timed("create day partitions", async {
            let tx = c.transaction().await?;
            tx.execute(
                "SELECT pg_advisory_xact_lock($1)",
                &[&schema::PARTITION_LOCK],
            )
            .await?;
            for d in &want {
                for table in DAILY {
                    tx.batch_execute(&schema::create_partition(table, *d))
                        .await?;
                }
            }
            tx.commit().await
        })
        .await?;
        self.days
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(want);
        Ok(())
    }

    /// Write the records of `entries` (stream id, parsed records) of `partition` in one
    /// transaction, with the partition's cursor: entries at or before the cursor are left
    /// out (already archived), and every record is idempotent on its key, so a batch
    /// written twice (a lost answer, two leaders for a moment) is written once.
    pub async fn archive(
        &self,
        partition: u32,
        entries: &[(String, Parsed)],
    ) -> Result<Archived, LogError> {
        let mut times = Vec::new();
        for (_, p) in entries {
            for r in &p.records {
                times.push(match r {
                    LogRecord::Attempt { record, .. } => record.started_ms,
                    LogRecord::Ended(e) => e.ended_ms,
                });
            }
        }
        self.ensure_days(times).await?;
        let mut c = self.client().await?;
        let part = partition as i32;
        let instance = self.instance.clone();
        let days = self.days.clone();
        let r = timed("archive", async move {
            let tx = c.transaction().await?;
            tx.execute(
                "INSERT INTO ankusa_log_cursor (instance, partition, last_id) VALUES ($1, $2, '')
                 ON CONFLICT DO NOTHING",
                &[&instance, &part],
            )
            .await?;
            let cursor: String = tx
                .query_one(
                    "SELECT last_id FROM ankusa_log_cursor
                     WHERE instance = $1 AND partition = $2 FOR UPDATE",
                    &[&instance, &part],
                )
                .await?
                .get(0);
            let floor = stream_id(&cursor);
            let fresh: Vec<&(String, Parsed)> = entries
                .iter()
                .filter(|(id, _)| match (floor, stream_id(id)) {
                    (Some(f), Some(i)) => i > f,
                    (None, Some(_)) => true,
                    (_, None) => false,
                })
                .collect();
            let mut out = Archived {
                through: (!cursor.is_empty()).then(|| cursor.clone()),
                ..Archived::default()
            };
            let Some((last, _)) = fresh.last() else {
                tx.commit().await?;
                return Ok(out);
            };
            let mut a = AttemptColumns::default();
            let mut h = HookColumns::default();
            for (_, p) in &fresh {
                out.malformed += p.malformed as u64;
                for r in &p.records {
                    match r {
                        LogRecord::Attempt {
                            tenant,
                            hook,
                            record,
                        } => a.push(tenant, part, *hook, record),
                        LogRecord::Ended(e) => h.push(part, e),
                    }
                }
            }
            let mut written = 0;
            if !a.tenant.is_empty() {
                written += tx
                    .execute(
                        "INSERT INTO ankusa_attempts (tenant, partition, hook, sink, attempt,
                             started_at, duration_ms, outcome, status, error_kind, error,
                             next_attempt_at, reason)
                         SELECT t, p, h, s, n, to_timestamp(st::double precision / 1000), d, o,
                             c, k, e, to_timestamp(nx::double precision / 1000), r
                         FROM unnest($1::text[], $2::int4[], $3::int8[], $4::int4[], $5::int4[],
                             $6::int8[], $7::int8[], $8::text[], $9::int4[], $10::text[],
                             $11::text[], $12::int8[], $13::text[])
                             AS x(t, p, h, s, n, st, d, o, c, k, e, nx, r)
                         ON CONFLICT DO NOTHING",
                        &[
                            &a.tenant,
                            &a.partition,
                            &a.hook,
                            &a.sink,
                            &a.attempt,
                            &a.started,
                            &a.duration,
                            &a.outcome,
                            &a.status,
                            &a.kind,
                            &a.error,
                            &a.next,
                            &a.reason,
                        ],
                    )
                    .await?;
            }
            if !h.tenant.is_empty() {
                written += tx
                    .execute(
                        "INSERT INTO ankusa_hooks (tenant, partition, hook, source, event_type,
                             state, committed_at, ended_at, dead_rows)
                         SELECT t, p, h, s, et, st, to_timestamp(c::double precision / 1000),
                             to_timestamp(e::double precision / 1000), d
                         FROM unnest($1::text[], $2::int4[], $3::int8[], $4::text[], $5::text[],
                             $6::text[], $7::int8[], $8::int8[], $9::int4[])
                             AS x(t, p, h, s, et, st, c, e, d)
                         ON CONFLICT DO NOTHING",
                        &[
                            &h.tenant,
                            &h.partition,
                            &h.hook,
                            &h.source,
                            &h.event_type,
                            &h.state,
                            &h.committed,
                            &h.ended,
                            &h.dead,
                        ],
                    )
                    .await?;
            }
            super::bodies::insert(&tx, part, &fresh).await?;
            tx.execute(
                "UPDATE ankusa_log_cursor SET last_id = $3, records = records + $4,
                     updated_at = now()
                 WHERE instance = $1 AND partition = $2",
                &[&instance, &part, last, &(written as i64)],
            )
            .await?;
            tx.commit().await?;
            out.through = Some(last.clone());
            out.entries = fresh.len() as u64;
            out.records = written;
            Ok::<_, tokio_postgres::Error>(out)
        })
        .await;
        if r.is_err() {
            // A day partition this process thought present may have been dropped (the
            // retention of another process, or by hand): look again next time.
            days.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        r
    }

    /// A page of `q.tenant`'s ended hooks, newest first (keyset pagination: each page is one
    /// index range scan, however deep).
    pub async fn search(&self, q: &Search) -> Result<SearchPage, LogError> {
        let limit = i64::from(q.limit.clamp(1, 1000));
        let after = match q.after.as_deref() {
            None => None,
            Some(a) => Some(parse_after(a).ok_or_else(|| {
                LogError::BadRequest(format!("after {a:?}: not a cursor of a previous page"))
            })?),
        };
        let (a_ms, a_part, a_hook) = match after {
            Some((m, p, h)) => (Some(clamp_ms(m)), Some(p), Some(h)),
            None => (None, None, None),
        };
        let state = q.state.map(|s| s.as_str().to_string());
        let hook = q.hook.map(|h| h as i64);
        let c = self.client().await?;
        let rows = timed(
            "search",
            c.query(
                "SELECT hook, partition, source, event_type, state,
                        coalesce((extract(epoch FROM committed_at) * 1000)::bigint, 0),
                        (extract(epoch FROM ended_at) * 1000)::bigint, dead_rows
                 FROM ankusa_hooks
                 WHERE tenant = $1
                   AND ($2::int8 IS NULL OR ended_at >= to_timestamp($2::double precision / 1000))
                   AND ($3::int8 IS NULL OR ended_at < to_timestamp($3::double precision / 1000))
                   AND ($4::text IS NULL OR state = $4)
                   AND ($5::text IS NULL OR event_type = $5)
                   AND ($6::text IS NULL OR source = $6)
                   AND ($7::int8 IS NULL OR hook = $7)
                   AND ($8::int8 IS NULL OR (ended_at, partition, hook)
                        < (to_timestamp($8::double precision / 1000), $9::int4, $10::int8))
                 ORDER BY ended_at DESC, partition DESC, hook DESC
                 LIMIT $11",
                &[
                    &q.tenant,
                    &q.since_ms.map(clamp_ms),
                    &q.until_ms.map(clamp_ms),
                    &state,
                    &q.event_type,
                    &q.source,
                    &hook,
                    &a_ms,
                    &a_part,
                    &a_hook,
                    &(limit + 1),
                ],
            ),
        )
        .await?;
        let mut hooks: Vec<LoggedHook> = rows
            .iter()
            .map(|r| LoggedHook {
                hook: r.get::<_, i64>(0).max(0) as u64,
                partition: r.get::<_, i32>(1).max(0) as u32,
                source: r.get(2),
                event_type: r.get(3),
                state: r.get(4),
                committed_ms: r.get(5),
                ended_ms: r.get(6),
                dead_rows: r.get::<_, i32>(7).max(0) as u32,
            })
            .collect();
        let next = if hooks.len() as i64 > limit {
            hooks.truncate(limit as usize);
            hooks
                .last()
                .map(|h| format!("{}.{}.{}", h.ended_ms, h.partition, h.hook))
        } else {
            None
        };
        Ok(SearchPage { hooks, next })
    }

    /// Every attempt of `tenant`'s hook `hook` in the log, oldest first (at most 1000).
    pub async fn attempts(&self, tenant: &str, hook: u64) -> Result<Vec<AttemptRecord>, LogError> {
        let c = self.client().await?;
        let rows = timed(
            "attempts",
            c.query(
                "SELECT sink, attempt, (extract(epoch FROM started_at) * 1000)::bigint,
                        duration_ms, outcome, status, error_kind, error,
                        (extract(epoch FROM next_attempt_at) * 1000)::bigint, reason
                 FROM ankusa_attempts WHERE tenant = $1 AND hook = $2
                 ORDER BY started_at, sink, attempt LIMIT 1000",
                &[&tenant, &(hook as i64)],
            ),
        )
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let sink = r.get::<_, i32>(0).max(0) as u32;
                AttemptRecord {
                    row: format!("{hook}.{sink}"),
                    sink,
                    attempt: r.get::<_, i32>(1).max(0) as u32,
                    started_ms: r.get(2),
                    duration_ms: r.get::<_, i64>(3).max(0) as u64,
                    outcome: r.get(4),
                    status: r
                        .get::<_, Option<i32>>(5)
                        .and_then(|s| u16::try_from(s).ok()),
                    error_kind: r.get(6),
                    error: r.get(7),
                    next_attempt_ms: r.get(8),
                    reason: r.get(9),
                }
            })
            .collect())
    }

    /// Remove what the log holds of `tenant` (all of it with `hooks` `None`, else those
    /// hooks), and record the erasure (who, what, how many; never the data) in the audit
    /// table. Returns the records removed.
    pub async fn erase(
        &self,
        actor: &str,
        tenant: &str,
        hooks: Option<&[u64]>,
    ) -> Result<u64, LogError> {
        let mut c = self.client().await?;
        let ids: Option<Vec<i64>> = hooks.map(|h| h.iter().map(|&x| x as i64).collect());
        let (actor, tenant) = (pg_text(actor), tenant.to_string());
        timed("erase", async move {
            let tx = c.transaction().await?;
            let mut n = 0;
            for table in DAILY {
                // A kept body goes with its hook; the count is of records (attempts, ends).
                let removed = tx
                    .execute(
                        &format!(
                            "DELETE FROM {table} WHERE tenant = $1 AND ($2::int8[] IS NULL OR hook = ANY($2))"
                        ),
                        &[&tenant, &ids],
                    )
                    .await?;
                if table != "ankusa_bodies" {
                    n += removed;
                }
            }
            let (action, detail) = match &ids {
                None => ("erase_tenant", format!("{n} records")),
                Some(ids) => ("erase_hooks", format!("{} hooks, {n} records", ids.len())),
            };
            tx.execute(
                "INSERT INTO ankusa_audit (actor, action, tenant, detail) VALUES ($1, $2, $3, $4)",
                &[&actor, &action, &tenant, &detail],
            )
            .await?;
            tx.commit().await?;
            Ok::<_, tokio_postgres::Error>(n)
        })
        .await
    }

    /// Drop the day partitions wholly older than `retention_days` before `now_ms`. Returns
    /// the tables dropped.
    pub async fn drop_expired(
        &self,
        retention_days: u32,
        now_ms: i64,
    ) -> Result<Vec<String>, LogError> {
        let keep_from = schema::day_of(now_ms) - i64::from(retention_days);
        let mut c = self.client().await?;
        let dropped = timed("retention", async {
            let tx = c.transaction().await?;
            tx.execute(
                "SELECT pg_advisory_xact_lock($1)",
                &[&schema::PARTITION_LOCK],
            )
            .await?;
            let rows = tx
                .query(
                    "SELECT c.relname::text, p.relname::text FROM pg_inherits i
                     JOIN pg_class c ON c.oid = i.inhrelid
                     JOIN pg_class p ON p.oid = i.inhparent
                     WHERE p.relname = ANY($1)",
                    &[&DAILY.to_vec()],
                )
                .await?;
            let mut dropped = Vec::new();
            for r in rows {
                let (name, parent): (String, String) = (r.get(0), r.get(1));
                if schema::partition_day(&parent, &name).is_some_and(|d| d < keep_from) {
                    tx.batch_execute(&format!("DROP TABLE IF EXISTS {name}"))
                        .await?;
                    dropped.push(name);
                }
            }
            tx.commit().await?;
            Ok::<_, tokio_postgres::Error>(dropped)
        })
        .await?;
        let mut days = self.days.lock().unwrap_or_else(|p| p.into_inner());
        days.retain(|d| *d >= keep_from);
        Ok(dropped)
    }

    /// The day partitions of `table` (`ankusa_hooks` or `ankusa_attempts`), oldest first.
    pub async fn days(&self, table: &str) -> Result<Vec<String>, LogError> {
        let c = self.client().await?;
        let rows = timed(
            "days",
            c.query(
                "SELECT c.relname::text FROM pg_inherits i
                 JOIN pg_class c ON c.oid = i.inhrelid
                 JOIN pg_class p ON p.oid = i.inhparent
                 WHERE p.relname = $1 ORDER BY 1",
                &[&table],
            ),
        )
        .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

/// `<ended ms>.<partition>.<hook>`, the `next` of a search page.
fn parse_after(s: &str) -> Option<(i64, i32, i64)> {
    let mut it = s.splitn(3, '.');
    Some((
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    ))
}

#[derive(Default)]
struct AttemptColumns {
    tenant: Vec<String>,
    partition: Vec<i32>,
    hook: Vec<i64>,
    sink: Vec<i32>,
    attempt: Vec<i32>,
    started: Vec<i64>,
    duration: Vec<i64>,
    outcome: Vec<String>,
    status: Vec<Option<i32>>,
    kind: Vec<Option<String>>,
    error: Vec<Option<String>>,
    next: Vec<Option<i64>>,
    reason: Vec<Option<String>>,
}

impl AttemptColumns {
    fn push(&mut self, tenant: &str, partition: i32, hook: u64, r: &AttemptRecord) {
        self.tenant.push(pg_text(tenant));
        self.partition.push(partition);
        self.hook.push(hook as i64);
        self.sink.push(r.sink.min(i32::MAX as u32) as i32);
        self.attempt.push(r.attempt.min(i32::MAX as u32) as i32);
        self.started.push(clamp_ms(r.started_ms));
        self.duration
            .push(r.duration_ms.min(i64::MAX as u64) as i64);
        self.outcome.push(pg_text(&r.outcome));
        self.status.push(r.status.map(i32::from));
        self.kind.push(r.error_kind.as_deref().map(pg_text));
        self.error.push(r.error.as_deref().map(pg_text));
        self.next.push(r.next_attempt_ms.map(clamp_ms));
        self.reason.push(r.reason.as_deref().map(pg_text));
    }
}

#[derive(Default)]
struct HookColumns {
    tenant: Vec<String>,
    partition: Vec<i32>,
    hook: Vec<i64>,
    source: Vec<String>,
    event_type: Vec<Option<String>>,
    state: Vec<String>,
    committed: Vec<i64>,
    ended: Vec<i64>,
    dead: Vec<i32>,
}

impl HookColumns {
    fn push(&mut self, partition: i32, e: &HookEnded) {
        self.tenant.push(pg_text(&e.tenant));
        self.partition.push(partition);
        self.hook.push(e.hook as i64);
        self.source.push(pg_text(&e.source));
        self.event_type.push(e.event_type.as_deref().map(pg_text));
        self.state.push(e.state.as_str().into());
        self.committed.push(clamp_ms(e.committed_ms));
        self.ended.push(clamp_ms(e.ended_ms));
        self.dead.push(e.dead_rows.min(i32::MAX as u32) as i32);
    }
}
