//! The operation commands of the `ankusa` CLI (R20–R24, dead letters, stats): each prints a human
//! table or, with `--json`, one JSON document on stdout. Exit codes come from
//! [`Error::exit_code`]: 0 ok, 1 failed, 2 usage or config error, 3 unavailable.

use ankusa::config::Config;
use ankusa::dlq::{self, Filter, PurgeScope, ReplayOptions, ReplayProgress};
use ankusa::store::Store;
use ankusa::{ops, Error};
use serde::Serialize;
use std::time::Duration;

/// Filters shared by the `dlq` commands.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct FilterArgs {
    /// Only this tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only this source id.
    #[arg(long)]
    pub source: Option<String>,
    /// Only this sink: an index (0) or a module (http).
    #[arg(long)]
    pub sink: Option<String>,
    /// Only this reason: a kind (permanent, source_gone…) or the whole text.
    #[arg(long)]
    pub reason: Option<String>,
    /// Dead-lettered at or after: ms since the epoch, or a duration ago (90s, 15m, 2h, 7d).
    #[arg(long)]
    pub since: Option<String>,
    /// Dead-lettered at or before: ms since the epoch, or a duration ago.
    #[arg(long)]
    pub until: Option<String>,
}

impl From<&FilterArgs> for Filter {
    fn from(a: &FilterArgs) -> Filter {
        Filter {
            tenant: a.tenant.clone(),
            source: a.source.clone(),
            sink: a.sink.clone(),
            reason: a.reason.clone(),
            since: a.since.clone(),
            until: a.until.clone(),
        }
    }
}

/// `{"error": {"code", "message"}}`, as the admin API answers.
pub fn error_json(e: &Error) -> serde_json::Value {
    let mut detail = serde_json::json!({"code": e.code(), "message": e.to_string()});
    if let Error::Config(c) = e {
        if !c.problems().is_empty() {
            detail["problems"] = serde_json::to_value(c.problems()).unwrap_or_default();
        }
    }
    serde_json::json!({ "error": detail })
}

fn print_json<T: Serialize>(v: &T) -> Result<(), Error> {
    outln!(
        "{}",
        serde_json::to_string(v).map_err(|e| Error::Other(e.to_string()))?
    );
    Ok(())
}

/// Connect to the config's Redis; a failure says where and what to do
/// ([`crate::cli::redis_words::describe`]).
pub async fn connect(cfg: &Config) -> Result<Store, Error> {
    crate::cli::redis_words::remember(&cfg.redis.url);
    let url = ankusa::config::redact_url(&cfg.redis.url);
    let store = Store::connect_config(&cfg.redis, &cfg.instance)
        .await
        .map_err(|e| match e {
            ankusa::store::StoreError::Redis(r) => crate::cli::redis_words::describe(&r, &url),
            other => Error::Store(other),
        })
        .map(|s| {
            s.with_edge(ankusa::sinks::EdgePolicy::from_config(cfg))
                .with_partitions(cfg.partitions)
        })?;
    // A command routing tenants by another partition count would read and write the wrong
    // partitions: refuse it as a worker would (nothing is recorded by a command).
    store.check_partitions(false).await?;
    Ok(store)
}

/// Why nothing would settle without a leader, for `tick`.
fn no_leader(cfg: &Config) -> Error {
    Error::Unavailable(format!(
        "no leader holds the lease of instance {:?}: no worker of this instance is running, so nothing is delivered; start one with `ankusa worker` (same redis.url and instance)",
        cfg.instance
    ))
}

/// `ankusa tick` (R23): exit 3 at once when no leader holds the lease (nothing would settle),
/// when the lease stays unheld for longer than `leader.lease_ms` while waiting (the leader
/// died and no standby took over), or when `timeout_ms` passes, saying which.
pub async fn tick(cfg: &Config, timeout_ms: Option<u64>, json: bool) -> Result<(), Error> {
    let s = connect(cfg).await?;
    // Every partition needs a leader (issue 13): one without makes the whole wait hopeless,
    // and "idle" would read as "delivered" while rows wait out a backoff nobody will end.
    if !ops::leaderless(&s).await?.is_empty() {
        return Err(no_leader(cfg));
    }
    let watch_leader = async {
        let mut unheld_since: Option<tokio::time::Instant> = None;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            match ops::leaderless(&s).await.map(|v| v.is_empty()) {
                Ok(true) | Err(_) => unheld_since = None,
                Ok(false) => {
                    let since = *unheld_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() > Duration::from_millis(cfg.leader.lease_ms) {
                        return no_leader(cfg);
                    }
                }
            }
        }
    };
    let deadline = async {
        match timeout_ms {
            Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            None => std::future::pending().await,
        }
    };
    let n = tokio::select! {
        n = ops::tick(&s, None) => n?,
        e = watch_leader => return Err(e),
        () = deadline => {
            let ms = timeout_ms.unwrap_or_default();
            let held = match ops::leaderless(&s).await?.is_empty() {
                true => s.lease_holder().await?,
                false => None,
            };
            return Err(match held {
                None => Error::Unavailable(format!("not idle after {ms} ms, and no leader holds the lease: start a worker (`ankusa worker`)")),
                Some((token, _)) => Error::Unavailable(format!(
                    "not idle after {ms} ms: the leader ({}) is still delivering; rows are claimed, running or due",
                    ankusa::store::token_node(&token)
                )),
            });
        }
    };
    if json {
        print_json(&serde_json::json!({ "settled": n }))
    } else {
        outln!("idle; {n} rows settled while waiting");
        Ok(())
    }
}

/// `ankusa stats`: the running totals named by unit (hooks are committed, rows — one per
/// hook and sink entry — are delivered, dead-lettered or dropped).
pub fn stats(t: &ankusa::store::Totals, json: bool) -> Result<(), Error> {
    if json {
        return print_json(&serde_json::json!({
            "hooks_committed": t.committed,
            "rows_delivered": t.delivered,
            "rows_dead_lettered": t.dead_lettered,
            "rows_dropped": t.dropped,
        }));
    }
    outln!(
        "hooks_committed     {}\nrows_delivered      {}\nrows_dead_lettered  {}\nrows_dropped        {}",
        t.committed,
        t.delivered,
        t.dead_lettered,
        t.dropped
    );
    Ok(())
}

/// `ankusa pressure` (R21).
pub async fn pressure(cfg: &Config, json: bool) -> Result<(), Error> {
    let s = connect(cfg).await?;
    let p = ops::pressure(&s).await?;
    if json {
        print_json(&p)
    } else {
        outln!("lag_ms       {}\nwindow_full  {}", p.lag_ms, p.window_full);
        Ok(())
    }
}

/// `ankusa dead-letter-source` (R20).
pub async fn dead_letter_source(
    cfg: &Config,
    tenant: &str,
    source: &str,
    timeout_ms: u64,
    json: bool,
) -> Result<(), Error> {
    let s = connect(cfg).await?;
    let r = ops::dead_letter_source(&s, tenant, source, Duration::from_millis(timeout_ms)).await?;
    if json {
        print_json(&r)
    } else {
        outln!(
            "dead-lettered {} pending rows of {tenant}/{source} as source_gone({source}); dropped {} whose hook was gone",
            r.count, r.dropped
        );
        Ok(())
    }
}

fn admin_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.starts_with("http://") || base.starts_with("https://") {
        base.to_string()
    } else {
        format!("http://{base}")
    }
}

/// `ankusa reconfigure` (R22): `POST /admin/reconfigure` on each worker.
pub async fn reconfigure(
    cfg: &Config,
    admins: &[String],
    token: Option<String>,
    json: bool,
) -> Result<(), Error> {
    let admins: Vec<String> = if admins.is_empty() {
        vec![cfg.admin.listen.clone()]
    } else {
        admins.to_vec()
    };
    let token = token.or_else(|| cfg.admin.token.clone());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(
            cfg.redis.command_timeout_ms.max(1_000) * 2,
        ))
        .build()
        .map_err(|e| Error::Other(format!("http client: {e}")))?;
    let mut results = Vec::new();
    let mut worst: Option<Error> = None;
    for a in &admins {
        let url = format!("{}/admin/reconfigure", admin_url(a));
        let mut req = client.post(&url);
        if let Some(t) = &token {
            req = req.bearer_auth(t);
        }
        let outcome = match req.send().await {
            Err(e) => Err(Error::Unavailable(format!("{url}: {e}"))),
            Ok(resp) => {
                let status = resp.status();
                let body: serde_json::Value = match resp.bytes().await {
                    Ok(b) => serde_json::from_slice(&b).unwrap_or_default(),
                    Err(_) => serde_json::Value::Null,
                };
                if status.is_success() {
                    Ok(body)
                } else {
                    let code = body["error"]["code"]
                        .as_str()
                        .unwrap_or("failed")
                        .to_string();
                    let mut msg = format!(
                        "{url}: {}",
                        body["error"]["message"].as_str().unwrap_or(status.as_str())
                    );
                    if let Some(problems) = body["error"]["problems"].as_array() {
                        for p in problems {
                            msg.push_str(&format!(
                                "\n  {}: {}",
                                p["key"].as_str().unwrap_or(""),
                                p["message"].as_str().unwrap_or("")
                            ));
                        }
                    }
                    Err(match code.as_str() {
                        "invalid_config" | "bad_request" | "unauthorized" | "no_config_source" => {
                            Error::BadRequest(msg)
                        }
                        "unavailable" => Error::Unavailable(msg),
                        _ => Error::Other(msg),
                    })
                }
            }
        };
        match outcome {
            Ok(limits) => {
                if !json {
                    outln!(
                        "{a}: reconfigured (concurrency {}, sink_concurrency {}, {} tenant entries)",
                        limits["concurrency"], limits["sink_concurrency"],
                        limits["tenants"].as_object().map_or(0, |t| t.len())
                    );
                }
                results.push(serde_json::json!({"admin": a, "ok": true, "limits": limits}));
            }
            Err(e) => {
                if !json {
                    eprintln!("{a}: {e}");
                }
                results.push(
                    serde_json::json!({"admin": a, "ok": false, "error": error_json(&e)["error"]}),
                );
                if worst
                    .as_ref()
                    .map_or(true, |w| e.exit_code() > w.exit_code())
                {
                    worst = Some(e);
                }
            }
        }
    }
    if json {
        print_json(&serde_json::json!({ "workers": results }))?;
    }
    match worst {
        None => Ok(()),
        Some(e) if json => std::process::exit(e.exit_code()),
        Some(e) => Err(e),
    }
}

/// `ankusa dlq list`.
pub async fn dlq_list(s: &Store, filter: &FilterArgs, limit: u64, json: bool) -> Result<(), Error> {
    let page = dlq::browse(s, &filter.into(), limit).await?;
    if json {
        return print_json(&page);
    }
    outln!(
        "{:<16} {:<12} {:<16} {:<10} {:<6} {:<28} {:>8}  ERROR",
        "ID",
        "TENANT",
        "SOURCE",
        "ROW",
        "MODULE",
        "REASON",
        "ATTEMPTS"
    );
    for d in &page.dead_letters {
        let mut err = d.error.replace('\n', " ");
        if err.len() > 60 {
            let mut cut = 60;
            while !err.is_char_boundary(cut) {
                cut -= 1;
            }
            err.truncate(cut);
            err.push('…');
        }
        outln!(
            "{:<16} {:<12} {:<16} {:<10} {:<6} {:<28} {:>8}  {err}",
            d.id,
            d.tenant,
            d.source,
            d.row,
            d.module,
            d.reason,
            d.attempts
        );
    }
    if page.more {
        outln!("… more match: narrow the filter or raise --limit");
    }
    Ok(())
}

/// `ankusa dlq show`: pretty JSON, or one line with `--json`.
pub async fn dlq_show(s: &Store, tenant: &str, id: &str, json: bool) -> Result<(), Error> {
    let d = dlq::show(s, tenant, id).await?;
    if json {
        return print_json(&d);
    }
    outln!(
        "{}",
        serde_json::to_string_pretty(&d).map_err(|e| Error::Other(e.to_string()))?
    );
    Ok(())
}

/// The progress bar of a paced operation (`dlq replay`, `hooks resend` of many) on stderr,
/// hidden with `--json`.
pub fn paced_bar(json: bool, what: &str) -> indicatif::ProgressBar {
    let bar = if json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(0)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} [{{bar:40}}] {{pos}}/{{len}} {{msg}}"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar
}

/// Show one [`ReplayProgress`] on a [`paced_bar`].
pub fn show_pace(bar: &indicatif::ProgressBar, p: ReplayProgress) {
    match p {
        ReplayProgress::Matched { total } => bar.set_length(total),
        ReplayProgress::Step { done, .. } => bar.set_position(done),
        ReplayProgress::Paused { why } => bar.set_message(format!("paused: {why}")),
        ReplayProgress::Resumed => bar.set_message(""),
    }
}

/// `ankusa dlq replay`: a progress bar on stderr unless `--json`.
pub async fn dlq_replay(
    s: &Store,
    filter: &FilterArgs,
    opts: &ReplayOptions,
    json: bool,
) -> Result<(), Error> {
    let bar = paced_bar(json, "replay");
    let r = dlq::replay(s, &filter.into(), opts, |p| show_pace(&bar, p)).await;
    bar.finish_and_clear();
    let r = r?;
    if json {
        print_json(&r)
    } else {
        outln!(
            "replayed {} of {} dead letters (hook gone: {}, row live: {}, gone meanwhile: {}); paused {} times, {} ms",
            r.replayed, r.matched, r.hook_gone, r.live, r.missing, r.pauses, r.paused_ms
        );
        Ok(())
    }
}

/// `ankusa dlq purge`: by filter, `--all`, or (neither) the configured retention.
pub async fn dlq_purge(
    s: &Store,
    cfg: &Config,
    filter: &FilterArgs,
    all: bool,
    json: bool,
) -> Result<(), Error> {
    let filter: Filter = filter.into();
    let retention_only = !all && filter.is_empty();
    let scope = if retention_only {
        PurgeScope::Retention {
            retention: (&cfg.dlq).into(),
            tenant: None,
        }
    } else {
        PurgeScope::Matching(filter)
    };
    let r = dlq::purge(s, &scope).await?;
    if json {
        print_json(&r)
    } else {
        let letters = if r.purged == 1 {
            "dead letter"
        } else {
            "dead letters"
        };
        if retention_only {
            outln!(
                "purged {} {letters} past the retention (max_age_ms {}, max_per_tenant {})",
                r.purged,
                cfg.dlq.max_age_ms,
                cfg.dlq.max_per_tenant
            );
        } else {
            outln!("purged {} {letters}", r.purged);
        }
        Ok(())
    }
}
