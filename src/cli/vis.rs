//! The delivery-visibility commands of the `ankusa` CLI: `hooks show`, `hooks resend`,
//! `rows list`, `tenants top` ([`ankusa::visibility`]). Each prints a human table or, with
//! `--json`, one JSON document on stdout.

use ankusa::config::Config;
use ankusa::store::Store;
use ankusa::visibility::{self, AttemptRecord, RowFilter, RowView};
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
    Resend {
        /// Tenant id.
        tenant: String,
        /// Hook ids (one or more).
        #[arg(required = true, num_args = 1..)]
        hook: Vec<u64>,
        /// Only this sink entry (index).
        #[arg(long)]
        sink: Option<u32>,
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
}

/// `ankusa rows …`.
#[derive(Subcommand)]
pub enum RowsCmd {
    /// A tenant's claimed and due rows with their last error and next attempt time.
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

/// `ankusa tenants …`.
#[derive(Subcommand)]
pub enum TenantsCmd {
    /// Tenants with rows: due rows, claimed, oldest lag, failing sinks; most rows first.
    Top {
        /// Show at most this many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<(), Error> {
    println!(
        "{}",
        serde_json::to_string(v).map_err(|e| Error::Other(e.to_string()))?
    );
    Ok(())
}

fn at(ms: Option<i64>) -> String {
    ms.map_or_else(|| "-".into(), |m| m.to_string())
}

fn row_line(r: &RowView) -> String {
    let mut s = format!(
        "{:<10} {:<14} source={} sink={} attempts={} next_attempt_ms={}",
        r.row,
        r.state.as_str(),
        if r.source.is_empty() { "-" } else { &r.source },
        r.sink,
        r.attempts,
        at(r.due_at_ms)
    );
    if let Some(p) = r.lane_position {
        s.push_str(&format!(" lane_position={p}"));
    }
    if let Some(d) = &r.dead_letter {
        s.push_str(&format!(" dead_letter={} reason={}", d.id, d.reason));
    }
    if let Some(e) = &r.last_error {
        s.push_str(&format!(" last_error={e:?}"));
    }
    s
}

fn attempt_line(a: &AttemptRecord) -> String {
    let mut s = format!(
        "  {} attempt {} at {} ({} ms): {}",
        a.row, a.attempt, a.started_ms, a.duration_ms, a.outcome
    );
    if let Some(st) = a.status {
        s.push_str(&format!(" status={st}"));
    }
    if let Some(k) = &a.error_kind {
        s.push_str(&format!(" kind={k}"));
    }
    if let Some(e) = &a.error {
        s.push_str(&format!(" error={e:?}"));
    }
    if let Some(n) = a.next_attempt_ms {
        s.push_str(&format!(" next_attempt_ms={n}"));
    }
    if let Some(r) = &a.reason {
        s.push_str(&format!(" reason={r}"));
    }
    s
}

/// `ankusa hooks show|resend`.
pub async fn hooks(store: &Store, cfg: &Config, cmd: &HooksCmd, json: bool) -> Result<(), Error> {
    match cmd {
        HooksCmd::Show { tenant, hook } => {
            let v = visibility::show_hook(store, tenant, *hook).await?;
            if json {
                return print_json(&v);
            }
            println!(
                "hook {} of {}/{} ({}; committed_at_ms={}, {} bytes)",
                v.hook, v.tenant, v.source, v.stored, v.committed_at_ms, v.body_bytes
            );
            println!("rows:");
            for r in &v.rows {
                println!("  {}", row_line(r));
            }
            println!("attempts:");
            if v.attempts.is_empty() {
                println!("  (none recorded)");
            }
            for a in &v.attempts {
                println!("{}", attempt_line(a));
            }
            Ok(())
        }
        HooksCmd::Resend {
            tenant,
            hook,
            sink,
            max_lag_ms,
            max_pause_ms,
            no_pace,
        } => {
            let max = cfg.commit.max_hook_bytes;
            if let [one] = hook.as_slice() {
                let r = visibility::resend(store, tenant, *one, *sink, max).await?;
                if json {
                    return print_json(&r);
                }
                println!(
                    "hook {} resent as hook {} ({} rows)",
                    r.hook, r.new_hook, r.rows
                );
                return Ok(());
            }
            let pace = ankusa::dlq::ReplayOptions {
                max_lag_ms: *max_lag_ms,
                max_pause_ms: *max_pause_ms,
                pace: !*no_pace,
                ..Default::default()
            };
            let bar = super::ops::paced_bar(json, "resend");
            let r = visibility::resend_many(store, tenant, hook, *sink, max, &pace, |p| {
                super::ops::show_pace(&bar, p)
            })
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
                    println!(
                        "hook {} resent as hook {} ({} rows)",
                        x.hook, x.new_hook, x.rows
                    );
                }
                for f in &r.failed {
                    println!("hook {} not resent: {}", f.hook, f.error);
                }
                println!(
                    "resent {} of {} hooks; paused {} times, {} ms",
                    r.resent.len(),
                    hook.len(),
                    r.pauses,
                    r.paused_ms
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
    for r in &page.rows {
        println!("{}", row_line(r));
    }
    if page.truncated {
        println!("(more rows: raise --limit)");
    }
    if page.rows.is_empty() {
        eprintln!("no rows");
    }
    Ok(())
}

/// `ankusa tenants top`.
pub async fn tenants(store: &Store, cmd: &TenantsCmd, json: bool) -> Result<(), Error> {
    let TenantsCmd::Top { limit } = cmd;
    let top = visibility::tenants_top(store, None, *limit).await?;
    if json {
        return print_json(&top);
    }
    println!(
        "{:<24} {:>9} {:>9} {:>9} {:>13} {:>9}  failing sinks",
        "tenant", "due", "due now", "claimed", "oldest lag ms", "retrying"
    );
    for t in &top {
        println!(
            "{:<24} {:>9} {:>9} {:>9} {:>13} {:>9}  {}",
            t.tenant,
            t.due_rows,
            t.due_now,
            t.claimed,
            t.oldest_lag_ms,
            t.retrying_rows,
            t.failing_sinks.join(",")
        );
    }
    Ok(())
}
