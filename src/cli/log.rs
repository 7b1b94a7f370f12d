//! The delivery log's commands: `ankusa log migrate|status`, `ankusa hooks search|erase`,
//! `ankusa tenants erase` ([`ankusa::log`]). Each prints words or, with `--json`, one JSON
//! document on stdout.

use super::human;
use ankusa::config::Config;
use ankusa::log::{HookState, LogStore, Search};
use ankusa::store::Store;
use ankusa::Error;
use clap::{Args, Subcommand};

/// `ankusa log …`.
#[derive(Subcommand, Debug, Clone)]
pub enum LogCmd {
    /// Apply the log store's schema migrations this database lacks (safe to run again, and
    /// from several hosts at once). The worker applies them at start unless
    /// `log.migrate_on_start = false`.
    Migrate,
    /// The log store's schema and, per partition, what waits in the log stream, what was
    /// dropped at its bound, the last entry archived and when.
    Status,
}

/// `ankusa hooks search`: a tenant's ended hooks from the log, newest first.
#[derive(Args, Debug, Clone)]
pub struct SearchArgs {
    /// Tenant id.
    pub tenant: String,
    /// Ended at or after: an RFC 3339 time, ms since the epoch, or a duration ago (15m, 2h,
    /// 7d). Default: 24 h ago.
    #[arg(long)]
    pub since: Option<String>,
    /// Ended before: as `--since`. Default: now.
    #[arg(long)]
    pub until: Option<String>,
    /// Only hooks that ended so: `delivered` or `dead_lettered`.
    #[arg(long)]
    pub state: Option<String>,
    /// Only this event type.
    #[arg(long)]
    pub event_type: Option<String>,
    /// Only this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Only this hook id.
    #[arg(long)]
    pub hook: Option<u64>,
    /// Hooks per page, 1..=1000.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// The `next` cursor a previous page printed.
    #[arg(long)]
    pub after: Option<String>,
}

/// `ankusa hooks resend --since …`: which ended hooks to resend by time.
#[derive(Args, Debug, Clone, Default)]
pub struct RangeArgs {
    /// Resend every hook that ended at or after this (from the delivery log), instead of
    /// ids: an RFC 3339 time, ms since the epoch, or a duration ago (15m, 2h, 7d).
    #[arg(long)]
    pub since: Option<String>,
    /// With `--since`: ended before this, as `--since`. Default: now.
    #[arg(long)]
    pub until: Option<String>,
    /// With `--since`: only hooks that ended so, `delivered` or `dead_lettered`.
    #[arg(long)]
    pub state: Option<String>,
    /// With `--since`: only this event type.
    #[arg(long)]
    pub event_type: Option<String>,
    /// With `--since`: only this source.
    #[arg(long)]
    pub source: Option<String>,
    /// With `--since`: count and list the hooks; resend nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// The log store of `cfg`, or why there is none.
pub fn log_store(cfg: &Config) -> Result<LogStore, Error> {
    if cfg.log.url.is_none() {
        return Err(Error::BadRequest(
            "no delivery log store is configured: set [log] url (or ANKUSA_LOG__URL) to a \
             postgres:// URL"
                .into(),
        ));
    }
    Ok(LogStore::connect(&cfg.log, &cfg.instance)?)
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<(), Error> {
    outln!(
        "{}",
        serde_json::to_string(v).map_err(|e| Error::Other(e.to_string()))?
    );
    Ok(())
}

/// `ankusa log migrate|status`.
pub async fn log(store: &Store, cfg: &Config, cmd: &LogCmd, json: bool) -> Result<(), Error> {
    let log = log_store(cfg)?;
    match cmd {
        LogCmd::Migrate => {
            let applied = log.migrate().await?;
            let (have, _) = log.schema_version().await?;
            if json {
                return print_json(&serde_json::json!({"applied": applied, "version": have}));
            }
            if applied.is_empty() {
                outln!("log store schema is up to date (version {have})");
            } else {
                outln!("applied migrations {applied:?}; log store schema is version {have}");
            }
            Ok(())
        }
        LogCmd::Status => {
            let (have, need) = log.schema_version().await?;
            let cursors = log.cursors().await?;
            let mut parts = Vec::new();
            for p in store.all_partitions() {
                let (entries, dropped) = p.log_backlog().await?;
                let n = p.partition_index();
                let c = cursors.iter().find(|c| c.partition == n);
                parts.push(serde_json::json!({
                    "partition": n,
                    "stream_entries": entries,
                    "records_dropped": dropped,
                    "last_archived": c.map(|c| c.last_id.clone()),
                    "records_archived": c.map_or(0, |c| c.records),
                    "archived_at_ms": c.map(|c| c.updated_ms),
                }));
            }
            if json {
                return print_json(&serde_json::json!({
                    "schema_version": have, "schema_needed": need, "partitions": parts,
                }));
            }
            let now = store.now_ms().await?;
            outln!("log store schema: version {have} (this build needs {need})");
            let rows = parts.iter().map(|p| {
                vec![
                    p["partition"].to_string(),
                    p["stream_entries"].to_string(),
                    p["records_dropped"].to_string(),
                    p["records_archived"].to_string(),
                    p["archived_at_ms"]
                        .as_i64()
                        .map_or("never".into(), |t| human::when(t, now)),
                ]
            });
            outln!(
                "{}",
                human::table(
                    &[
                        "PARTITION",
                        "IN STREAM",
                        "DROPPED",
                        "ARCHIVED",
                        "LAST ARCHIVED"
                    ],
                    rows
                )
            );
            if have < need {
                return Err(Error::Unavailable(
                    "the log store's schema is older than this build's: run `ankusa log migrate`"
                        .into(),
                ));
            }
            Ok(())
        }
    }
}

/// `ankusa hooks search`.
pub async fn search(store: &Store, cfg: &Config, a: &SearchArgs, json: bool) -> Result<(), Error> {
    ankusa::model::check_id("tenant", &a.tenant)?;
    let state = a.state.as_deref().map(parse_state).transpose()?;
    if !(1..=1000).contains(&a.limit) {
        return Err(Error::BadRequest("--limit must be in 1..=1000".into()));
    }
    let log = log_store(cfg)?;
    let now = store.now_ms().await?;
    let since = match &a.since {
        Some(s) => ankusa::dlq::parse_time(s, now)?,
        None => now - 86_400_000,
    };
    let until = a
        .until
        .as_deref()
        .map(|s| ankusa::dlq::parse_time(s, now))
        .transpose()?;
    let page = log
        .search(&Search {
            tenant: a.tenant.clone(),
            since_ms: Some(since),
            until_ms: until,
            state,
            event_type: a.event_type.clone(),
            source: a.source.clone(),
            hook: a.hook,
            limit: a.limit,
            after: a.after.clone(),
        })
        .await?;
    if json {
        return print_json(&page);
    }
    if page.hooks.is_empty() {
        outln!(
            "no hook of tenant {} ended in that range (since {})",
            human::esc(&a.tenant),
            human::rfc3339(since)
        );
        return Ok(());
    }
    let rows = page.hooks.iter().map(|h| {
        vec![
            h.hook.to_string(),
            human::esc(&h.source),
            human::esc_cut(h.event_type.as_deref().unwrap_or("-"), 40),
            h.state.clone(),
            human::when(h.ended_ms, now),
            if h.committed_ms > 0 {
                human::span(h.ended_ms.saturating_sub(h.committed_ms).max(0) as u64)
            } else {
                "-".into()
            },
        ]
    });
    outln!(
        "{}",
        human::table(
            &["HOOK", "SOURCE", "EVENT TYPE", "STATE", "ENDED", "TOOK"],
            rows
        )
    );
    if let Some(next) = &page.next {
        outln!("more: --after {next}");
    }
    Ok(())
}

/// `--state S` as a hook state, or a clear error.
fn parse_state(s: &str) -> Result<HookState, Error> {
    HookState::parse(s).ok_or_else(|| {
        Error::BadRequest(format!(
            "--state {:?}: expected delivered or dead_lettered",
            human::esc(s)
        ))
    })
}

/// `ankusa hooks resend TENANT --since …`: resend what the log says ended in the range,
/// paced, with a progress bar; exit 1 when any hook was not resent.
pub async fn resend_range(
    store: &Store,
    cfg: &Config,
    tenant: &str,
    sink: Option<u32>,
    a: &RangeArgs,
    pace: &ankusa::dlq::ReplayOptions,
    json: bool,
) -> Result<(), Error> {
    ankusa::model::check_id("tenant", tenant)?;
    let log = log_store(cfg)?;
    let now = store.now_ms().await?;
    let since = match &a.since {
        Some(s) => ankusa::dlq::parse_time(s, now)?,
        None => now - 86_400_000,
    };
    let until = match &a.until {
        Some(u) => ankusa::dlq::parse_time(u, now)?,
        None => now,
    };
    let range = ankusa::visibility::ResendRange {
        since_ms: since,
        until_ms: until,
        state: a.state.as_deref().map(parse_state).transpose()?,
        event_type: a.event_type.clone(),
        source: a.source.clone(),
        sink,
        dry_run: a.dry_run,
    };
    let bar = super::ops::paced_bar(json || a.dry_run, "resend");
    let r = ankusa::visibility::resend_range(
        store,
        &log,
        tenant,
        &range,
        cfg.commit.max_hook_bytes,
        pace,
        |p| super::ops::show_pace(&bar, p),
    )
    .await;
    bar.finish_and_clear();
    let r = r?;
    let failed = !r.report.failed.is_empty();
    if json {
        print_json(&r)?;
        if failed {
            // The report is the one JSON document; the exit code says it is partial.
            std::process::exit(1);
        }
        return Ok(());
    }
    let span = format!(
        "ended {} .. {}",
        human::rfc3339(since),
        human::rfc3339(until)
    );
    if r.dry_run {
        outln!(
            "would resend {} of tenant {} ({span}; nothing sent)",
            human::count(r.matched, "hook", "hooks"),
            human::esc(tenant)
        );
        for chunk in r.hooks.chunks(20) {
            let ids: Vec<String> = chunk.iter().map(u64::to_string).collect();
            outln!("  {}", ids.join(" "));
        }
        return Ok(());
    }
    for f in &r.report.failed {
        outln!("hook {} not resent: {}", f.hook, human::esc(&f.error));
    }
    outln!(
        "resent {} of {} ({span}); paused {}, {}",
        r.report.resent.len(),
        human::count(r.matched, "hook", "hooks"),
        human::count(r.report.pauses, "time", "times"),
        human::span(r.report.paused_ms)
    );
    if failed {
        return Err(Error::Other(format!(
            "{} of {} hooks not resent",
            r.report.failed.len(),
            r.matched
        )));
    }
    Ok(())
}

/// `ankusa hooks erase` (`hooks` given) and `ankusa tenants erase` (none).
pub async fn erase(
    store: &Store,
    cfg: &Config,
    tenant: &str,
    hooks: Option<&[u64]>,
    json: bool,
) -> Result<(), Error> {
    ankusa::model::check_id("tenant", tenant)?;
    let log = log_store(cfg)?;
    let actor = format!("cli:{}", whoami());
    let e = ankusa::log::erase(store, &log, cfg.log.batch_entries, &actor, tenant, hooks).await?;
    if json {
        return print_json(&e);
    }
    match hooks {
        Some(h) => outln!(
            "erased {} of {} from the delivery log",
            human::count(e.records_erased, "record", "records"),
            human::count(h.len() as u64, "hook", "hooks")
        ),
        None => outln!(
            "erased {} of tenant {} from the delivery log, and {}",
            human::count(e.records_erased, "record", "records"),
            human::esc(tenant),
            human::count(e.dead_letters_purged, "dead letter", "dead letters")
        ),
    }
    Ok(())
}

/// Who runs the CLI, for the audit record: `$USER` or `unknown`.
fn whoami() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty() && u.len() <= 64)
        .unwrap_or_else(|| "unknown".into())
}
