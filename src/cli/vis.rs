//! The delivery-visibility commands of the `ankusa` CLI: `hooks show`, `hooks resend`,
//! `rows list`, `tenants top` ([`ankusa::visibility`]). Each prints a human table or, with
//! `--json`, one JSON document on stdout.

use super::human;
use ankusa::config::Config;
use ankusa::store::Store;
use ankusa::visibility::{self, AttemptRecord, RowFilter, RowState, RowView};
use ankusa::Error;
use clap::Subcommand;

/// `ankusa hooks …`.
#[derive(Subcommand)]
pub enum HooksCmd {
    /// A hook, each row's state (due, retrying, parked, claimed, in its lane, delivered,
    /// dead-lettered) and every recorded attempt with its status or error.
    Show {
        /// Tenant id.
        tenant: String,
        /// Hook id.
        hook: u64,
    },
    /// Commit delivered or dead-lettered hooks again (each a new hook) for one or all sinks.
    /// Several hooks are resent one by one, paced like `dlq replay` (the pipeline's pressure);
    /// a hook that is gone or still being delivered is reported and the others go on (exit 1
    /// at the end when any was not resent).
    ///
    /// With `--since` (and a delivery log store) instead of ids: every hook the log says
    /// ended in the range, oldest first, from the bodies it kept (`log.keep_bodies`);
    /// `--dry-run` counts and lists them.
    Resend {
        /// Tenant id.
        tenant: String,
        /// Hook ids (one or more), or none with `--since`.
        #[arg(required_unless_present = "since", num_args = 0..)]
        hook: Vec<u64>,
        /// Only this sink entry (index).
        #[arg(long, visible_alias = "entry")]
        sink: Option<u32>,
        #[command(flatten)]
        range: super::log::RangeArgs,
        /// With several hooks: pause while the oldest due row is more than this late, ms.
        #[arg(long, default_value_t = 5_000)]
        max_lag_ms: u64,
        /// With several hooks: give up (exit 3) after pausing this long in one stretch, ms.
        #[arg(long, default_value_t = 60_000)]
        max_pause_ms: u64,
        /// With several hooks: do not pace by pressure.
        #[arg(long)]
        no_pace: bool,
    },
    /// A tenant's ended hooks from the delivery log (`[log] url`), newest first, by time
    /// range, state, event type, source or id; one page at a time (`--after` the cursor the
    /// previous page printed).
    Search(super::log::SearchArgs),
    /// Remove what the delivery log holds of these hooks of a tenant (their attempts and how
    /// they ended). The erasure is recorded (who, when, how many) without the data.
    Erase {
        /// Tenant id.
        tenant: String,
        /// Hook ids (one or more).
        #[arg(required = true, num_args = 1..)]
        hook: Vec<u64>,
    },
    /// Cancel a scheduled hook (`produce --delay`, `Ankusa-Deliver-At`…) before it is due:
    /// atomically, only while none of its rows is claimed; it is then never delivered. A hook
    /// already claimed, attempted, delivered or not scheduled is left alone and the answer
    /// says why (exit 1).
    Cancel {
        /// Tenant id.
        tenant: String,
        /// Hook id.
        hook: u64,
    },
}

/// `ankusa rows …`.
#[derive(Subcommand)]
pub enum RowsCmd {
    /// A tenant's claimed and due rows with their last error and next attempt time
    /// (`--state delivered`: the delivered rows of its newest hooks with attempt history).
    List {
        /// Tenant id.
        #[arg(long)]
        tenant: String,
        /// Only this source.
        #[arg(long)]
        source: Option<String>,
        /// Only rows in this state (`retrying` includes parked rows that have failed).
        #[arg(long, value_enum)]
        state: Option<RowFilter>,
        /// Show at most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

/// The order of `ankusa tenants top`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TopOrder {
    /// Most rows (due and claimed) first.
    Rows,
    /// Most body bytes (stored and kept for resend) first.
    Bytes,
}

/// `ankusa tenants …`.
#[derive(Subcommand)]
pub enum TenantsCmd {
    /// Tenants with rows: due rows, claimed, oldest lag, failing sinks, body bytes held
    /// (stored and kept for resend); most rows first, or most bytes with `--by bytes`.
    Top {
        /// Show at most this many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Order: `rows` (who waits) or `bytes` (who holds Redis' memory).
        #[arg(long, value_enum, default_value_t = TopOrder::Rows)]
        by: TopOrder,
        /// Only tenants whose id contains this text (searched over every tenant with rows).
        #[arg(long)]
        search: Option<String>,
    },
    /// Remove everything the delivery log holds of a tenant. The erasure is recorded (who,
    /// when, how many) without the data. Asks for `--yes`.
    Erase {
        /// Tenant id.
        tenant: String,
        /// Yes, erase it: without it nothing is done.
        #[arg(long)]
        yes: bool,
    },
    /// Each sink entry of a tenant over the last hour: attempts, success rate, p50/p99
    /// attempt duration, last error (from the attempt history).
    Health {
        /// Tenant id.
        tenant: String,
    },
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<(), Error> {
    outln!(
        "{}",
        serde_json::to_string(v).map_err(|e| Error::Other(e.to_string()))?
    );
    Ok(())
}

/// The rows of a hook or of `rows list` as a table: state, next attempt (when and how far),
/// attempts, the last error (escaped, cut).
fn rows_table(rows: &[RowView], now: i64) -> String {
    let lines = rows.iter().map(|r| {
        let mut state = r.state.as_str().to_string();
        if let Some(p) = r.lane_position {
            state.push_str(&format!(" (position {p})"));
        }
        let next = match (r.state, r.due_at_ms) {
            (
                RowState::Due | RowState::Scheduled | RowState::Retrying | RowState::Parked,
                Some(at),
            ) => human::when(at, now),
            _ => "-".into(),
        };
        let last = match &r.dead_letter {
            Some(d) => format!("dead letter {}: {}", d.id, d.reason),
            None => r.last_error.clone().unwrap_or_default(),
        };
        vec![
            r.row.clone(),
            state,
            if r.source.is_empty() {
                "-".into()
            } else {
                r.source.clone()
            },
            r.event_type.clone().unwrap_or_else(|| "-".into()),
            r.sink.to_string(),
            r.attempts.to_string(),
            next,
            human::esc_cut_middle(&last, 80),
        ]
    });
    human::table(
        &[
            "ROW",
            "STATE",
            "SOURCE",
            "EVENT",
            "SINK",
            "ATTEMPTS",
            "NEXT ATTEMPT",
            "LAST ERROR",
        ],
        lines,
    )
}

/// A hook's attempts as a table: when each started, how long it ran, its outcome and why.
fn attempts_table(attempts: &[AttemptRecord], now: i64) -> String {
    let lines = attempts.iter().map(|a| {
        let mut result = a.outcome.clone();
        if let Some(st) = a.status {
            result.push_str(&format!(" ({st})"));
        } else if let Some(k) = &a.error_kind {
            result.push_str(&format!(" ({k})"));
        }
        let detail = match (&a.reason, &a.error) {
            (Some(r), Some(e)) => format!("{r}: {e}"),
            (Some(r), None) => r.clone(),
            (None, e) => e.clone().unwrap_or_default(),
        };
        vec![
            a.row.clone(),
            a.attempt.to_string(),
            human::when(a.started_ms, now),
            format!("{} ms", a.duration_ms),
            result,
            human::esc_cut_middle(&detail, 80),
        ]
    });
    human::table(
        &["ROW", "ATTEMPT", "STARTED", "TOOK", "OUTCOME", "DETAIL"],
        lines,
    )
}

/// One resent hook in words.
fn resent_line(r: &visibility::Resent) -> String {
    let mut line = format!(
        "hook {} resent as hook {} ({})",
        r.hook,
        r.new_hook,
        human::count(r.rows.into(), "row", "rows")
    );
    if !r.settled_dead_letters.is_empty() {
        line.push_str(&format!(
            "; its {} deleted (the new hook delivers them)",
            human::count(
                r.settled_dead_letters.len() as u64,
                "dead letter",
                "dead letters"
            )
        ));
    }
    line
}

/// `ankusa hooks show|resend|cancel`.
pub async fn hooks(store: &Store, cfg: &Config, cmd: &HooksCmd, json: bool) -> Result<(), Error> {
    match cmd {
        HooksCmd::Search(a) => super::log::search(store, cfg, a, json).await,
        HooksCmd::Erase { tenant, hook } => {
            super::log::erase(store, cfg, tenant, Some(hook), json).await
        }
        HooksCmd::Show { tenant, hook } => {
            let log = match cfg.log.url {
                Some(_) => Some(super::log::log_store(cfg)?),
                None => None,
            };
            let v = visibility::show_hook_logged(store, log.as_ref(), tenant, *hook).await?;
            if json {
                return print_json(&v);
            }
            let now = store.now_ms().await?;
            let committed = match v.stored.as_str() {
                "gone" => "its body is gone; only its history is left".to_string(),
                _ => format!(
                    "committed {}, {}",
                    human::when(v.committed_at_ms, now),
                    human::count(v.body_bytes, "byte", "bytes")
                ),
            };
            outln!(
                "hook {} of {}/{} ({}; {committed})",
                v.hook,
                v.tenant,
                if v.source.is_empty() { "-" } else { &v.source },
                v.stored
            );
            if let Some(et) = &v.event_type {
                outln!("event type: {}", human::esc(et));
            }
            if !v.headers.is_empty() {
                let headers: Vec<String> = v
                    .headers
                    .iter()
                    .map(|(k, val)| format!("{k}: {val}"))
                    .collect();
                outln!("headers: {}", human::esc(&headers.join(", ")));
            }
            outln!("\nrows:\n{}", rows_table(&v.rows, now));
            if v.attempts.is_empty() {
                outln!("\nattempts: none recorded");
            } else {
                outln!("\nattempts:\n{}", attempts_table(&v.attempts, now));
            }
            Ok(())
        }
        HooksCmd::Cancel { tenant, hook } => {
            let r = visibility::cancel(store, tenant, *hook).await?;
            if json {
                print_json(&r)?;
                if !r.cancelled {
                    // The answer is the one JSON document; the exit code says nothing changed.
                    std::process::exit(1);
                }
                Ok(())
            } else if r.cancelled {
                outln!("{}", r.message);
                Ok(())
            } else {
                // Said once, on stderr, as every other refusal is (the message names why).
                Err(Error::Other(r.message))
            }
        }
        HooksCmd::Resend {
            tenant,
            hook,
            sink,
            max_lag_ms,
            max_pause_ms,
            no_pace,
            range,
        } => {
            let max = cfg.commit.max_hook_bytes;
            let log = match cfg.log.url {
                Some(_) => Some(super::log::log_store(cfg)?),
                None => None,
            };
            let pace = ankusa::dlq::ReplayOptions {
                max_lag_ms: *max_lag_ms,
                max_pause_ms: *max_pause_ms,
                pace: !*no_pace,
                ..Default::default()
            };
            if range.since.is_some() {
                if !hook.is_empty() {
                    return Err(Error::BadRequest(
                        "give hook ids or --since, not both".into(),
                    ));
                }
                return super::log::resend_range(store, cfg, tenant, *sink, range, &pace, json)
                    .await;
            }
            if range.until.is_some()
                || range.state.is_some()
                || range.event_type.is_some()
                || range.source.is_some()
                || range.dry_run
            {
                return Err(Error::BadRequest(
                    "--until, --state, --event-type, --source and --dry-run select by time: \
                     give --since too"
                        .into(),
                ));
            }
            if let [one] = hook.as_slice() {
                let r = visibility::resend_logged(store, log.as_ref(), tenant, *one, *sink, max)
                    .await?;
                if json {
                    return print_json(&r);
                }
                outln!("{}", resent_line(&r));
                return Ok(());
            }
            let bar = super::ops::paced_bar(json, "resend");
            let r = visibility::resend_many(
                store,
                log.as_ref(),
                tenant,
                hook,
                *sink,
                max,
                &pace,
                |p| super::ops::show_pace(&bar, p),
            )
            .await;
            bar.finish_and_clear();
            let r = r?;
            if json {
                print_json(&r)?;
                if !r.failed.is_empty() {
                    // The report is the one JSON document; the exit code says it is partial.
                    std::process::exit(1);
                }
            } else {
                for x in &r.resent {
                    outln!("{}", resent_line(x));
                }
                for f in &r.failed {
                    outln!("hook {} not resent: {}", f.hook, human::esc(&f.error));
                }
                outln!(
                    "resent {} of {}; paused {}, {}",
                    r.resent.len(),
                    human::count(hook.len() as u64, "hook", "hooks"),
                    human::count(r.pauses, "time", "times"),
                    human::span(r.paused_ms)
                );
            }
            if r.failed.is_empty() {
                Ok(())
            } else {
                Err(Error::Other(format!(
                    "{} of {} hooks not resent",
                    r.failed.len(),
                    hook.len()
                )))
            }
        }
    }
}

/// `ankusa rows list`.
pub async fn rows(store: &Store, cmd: &RowsCmd, json: bool) -> Result<(), Error> {
    let RowsCmd::List {
        tenant,
        source,
        state,
        limit,
    } = cmd;
    let page = visibility::list_rows(store, tenant, source.as_deref(), *state, *limit).await?;
    if json {
        return print_json(&page);
    }
    if page.rows.is_empty() {
        let filtered = source.is_some() || state.is_some();
        outln!(
            "no rows{} for tenant {tenant}",
            if filtered { " match" } else { " pending" }
        );
        return Ok(());
    }
    let now = store.now_ms().await?;
    outln!("{}", rows_table(&page.rows, now));
    if page.more {
        outln!("… more rows match: raise --limit");
    }
    Ok(())
}

/// `ankusa tenants top`.
pub async fn tenants(
    store: &Store,
    cfg: &Config,
    cmd: &TenantsCmd,
    json: bool,
) -> Result<(), Error> {
    let (limit, by, search) = match cmd {
        TenantsCmd::Top { limit, by, search } => (limit, by, search),
        TenantsCmd::Health { tenant } => return tenant_health(store, tenant, json).await,
        TenantsCmd::Erase { tenant, yes } => {
            if !yes {
                return Err(Error::BadRequest(format!(
                    "tenants erase removes every record of tenant {} from the delivery log: \
                     add --yes to do it",
                    human::esc(tenant)
                )));
            }
            return super::log::erase(store, cfg, tenant, None, json).await;
        }
    };
    let by = match by {
        TopOrder::Rows => visibility::TopBy::Rows,
        TopOrder::Bytes => visibility::TopBy::Bytes,
    };
    let top = visibility::tenants_top_by(store, None, search.as_deref(), *limit, by).await?;
    if json {
        return print_json(&top);
    }
    if top.tenants.is_empty() {
        outln!(
            "{}",
            if by == visibility::TopBy::Bytes {
                "no tenants hold body bytes"
            } else {
                "no tenants have rows"
            }
        );
        return Ok(());
    }
    let lines = top.tenants.iter().map(|t| {
        vec![
            t.tenant.clone(),
            t.due_rows.to_string(),
            t.due_now.to_string(),
            t.claimed.to_string(),
            if t.oldest_lag_ms > 0 {
                human::span(t.oldest_lag_ms as u64)
            } else {
                "-".into()
            },
            t.retrying_rows.to_string(),
            if t.failing_sinks.is_empty() {
                "-".into()
            } else {
                t.failing_sinks.join(",")
            },
            human::bytes(t.bytes),
            human::bytes(t.kept_bytes),
        ]
    });
    outln!(
        "{}",
        human::table(
            &[
                "TENANT",
                "DUE",
                "DUE NOW",
                "CLAIMED",
                "OLDEST LAG",
                "RETRYING",
                "FAILING SINKS",
                "BYTES",
                "KEPT"
            ],
            lines
        )
    );
    if top.more {
        outln!("… more tenants have rows: raise --limit");
    }
    Ok(())
}

/// `ankusa tenants health TENANT`.
async fn tenant_health(store: &Store, tenant: &str, json: bool) -> Result<(), Error> {
    let h = visibility::entry_health(store, tenant).await?;
    if json {
        return print_json(&h);
    }
    if h.entries.is_empty() {
        outln!(
            "no attempt of tenant {} in the last hour (or history.enabled is false)",
            human::esc(tenant)
        );
        return Ok(());
    }
    let now = h.since_ms + visibility::HEALTH_WINDOW_MS;
    let lines = h.entries.iter().map(|e| {
        vec![
            format!("{}/{}", e.source, e.sink),
            e.attempts.to_string(),
            format!("{:.1}%", e.success_rate * 100.0),
            // Milliseconds as the attempts table's TOOK shows them: a span would print a
            // sub-millisecond p50 as `0s` beside a p99 of `1ms`.
            format!("{} ms", e.p50_ms),
            format!("{} ms", e.p99_ms),
            e.last_error_at_ms
                .map_or("-".into(), |at| human::relative(at, now)),
            e.last_error
                .as_deref()
                .map_or("-".into(), |err| human::esc_cut_middle(err, 60)),
        ]
    });
    outln!(
        "{}",
        human::table(
            &[
                "SINK",
                "ATTEMPTS",
                "SUCCESS",
                "P50",
                "P99",
                "FAILED",
                "LAST ERROR"
            ],
            lines
        )
    );
    if h.more {
        outln!(
            "… of the newest {} hooks of the hour only",
            visibility::HEALTH_HOOKS
        );
    }
    Ok(())
}
