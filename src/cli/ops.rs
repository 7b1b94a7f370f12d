//! The operation commands of the `ankusa` CLI (operations, dead letters, stats): each prints a human
//! table or, with `--json`, one JSON document on stdout. Exit codes come from
//! [`Error::exit_code`]: 0 ok, 1 failed, 2 usage or config error, 3 unavailable.

use ankusa::config::Config;
use ankusa::dlq::{self, Filter, PurgeScope, ReplayOptions, ReplayProgress};
use ankusa::store::Store;
use ankusa::{ops, Error};
use serde::Serialize;
use std::time::Duration;

use super::human;

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
    /// Only the dead letters of this hook id (one per sink entry that failed).
    #[arg(long)]
    pub hook: Option<u64>,
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
            hook: a.hook,
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
        .map_err(|e| crate::cli::redis_words::describe(e, &url))
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

/// `ankusa tick`: wait until nothing is claimed, running or due, then say what is still
/// pending (rows waiting out a backoff, parked by a breaker or a rate limit, in a lane) and
/// when the next comes due; with `all`, wait until nothing is pending at all. Exit 3 at once
/// when no leader holds the lease (nothing would settle), when the lease stays unheld for
/// longer than `leader.lease_ms` while waiting (the leader died and no standby took over),
/// or when `timeout_ms` passes, saying which.
pub async fn tick(
    cfg: &Config,
    timeout_ms: Option<u64>,
    all: bool,
    json: bool,
) -> Result<(), Error> {
    let s = connect(cfg).await?;
    // Every partition needs a leader: one without makes the whole wait hopeless, and "idle"
    // would read as "delivered" while rows wait out a backoff nobody will end.
    if !ops::leaderless(&s).await?.is_empty() {
        return Err(no_leader(cfg));
    }
    let start = s.totals().await?;
    let settled_since = |end: ankusa::store::Totals| {
        (end.delivered + end.dead_lettered + end.dropped)
            .saturating_sub(start.delivered + start.dead_lettered + start.dropped)
    };
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
    let wait = async {
        loop {
            ops::tick(&s, None).await?;
            let p = ankusa::visibility::pending(&s).await?;
            if !all || p.is_empty() {
                return Ok::<_, Error>(p);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let pending = tokio::select! {
        p = wait => p?,
        e = watch_leader => return Err(e),
        () = deadline => return Err(tick_timeout(&s, timeout_ms.unwrap_or_default(), all).await),
    };
    let settled = settled_since(s.totals().await?);
    if json {
        return print_json(&serde_json::json!({ "settled": settled, "pending": pending }));
    }
    let rows = human::count(settled, "row", "rows");
    if pending.is_empty() {
        outln!("idle: {rows} settled while waiting; nothing is pending");
    } else {
        outln!(
            "idle: {rows} settled while waiting; {}",
            pending_words(&pending, false)
        );
    }
    Ok(())
}

/// What `tick` says is still pending once nothing is due.
fn pending_words(p: &ankusa::visibility::Pending, all: bool) -> String {
    let mut kinds = Vec::new();
    if p.parked > 0 {
        kinds.push(format!(
            "{} parked by an open breaker or a rate limit",
            p.parked
        ));
    }
    if p.retrying > 0 {
        kinds.push(format!("{} waiting out a retry backoff", p.retrying));
    }
    if p.due_now > 0 {
        kinds.push(format!("{} due now", p.due_now));
    }
    if p.scheduled > 0 {
        kinds.push(format!("{} scheduled for later", p.scheduled));
    }
    if p.in_lane > 0 {
        kinds.push(format!(
            "{} waiting behind their ordered lane's head",
            p.in_lane
        ));
    }
    if p.claimed > 0 {
        kinds.push(format!("{} claimed", p.claimed));
    }
    let total = p.rows + p.in_lane + p.claimed;
    let mut words = format!(
        "{}{} still pending ({})",
        human::count(total, "row", "rows"),
        if p.partial { " or more" } else { "" },
        kinds.join(", ")
    );
    if let Some(next) = p.next_due_ms {
        words.push_str(&format!(
            "; the next is due {}",
            human::when(next, p.now_ms)
        ));
    }
    if !all {
        words.push_str(". `ankusa tick --all` waits for them too");
    }
    words.push_str("; `ankusa tenants top` and `ankusa rows list --tenant T` show them");
    words
}

/// Why `tick` gave up at its deadline: a leader still delivering, none at all, or (with
/// `--all`) rows still pending.
async fn tick_timeout(s: &Store, ms: u64, all: bool) -> Error {
    let leaderless = match ops::leaderless(s).await {
        Ok(v) => !v.is_empty(),
        Err(e) => return Error::Store(e),
    };
    let held = match leaderless {
        false => s.lease_holder().await.ok().flatten(),
        true => None,
    };
    let Some((token, _)) = held else {
        return Error::Unavailable(format!(
            "not idle after {ms} ms, and no leader holds the lease: start a worker (`ankusa worker`)"
        ));
    };
    let leader = ankusa::store::token_node(&token);
    if all {
        if let Ok(p) = ankusa::visibility::pending(s).await {
            if !p.is_empty() {
                return Error::Unavailable(format!(
                    "not done after {ms} ms (the leader is {leader}): {}",
                    pending_words(&p, true)
                ));
            }
        }
    }
    Error::Unavailable(format!(
        "not idle after {ms} ms: the leader ({leader}) is still delivering; rows are claimed, running or due"
    ))
}

/// `ankusa stats`: the running totals named by unit (hooks are committed, of them some
/// scheduled and some of those cancelled; rows — one per hook and sink entry — are
/// delivered, dead-lettered or dropped).
pub fn stats(t: &ankusa::store::Totals, json: bool) -> Result<(), Error> {
    if json {
        return print_json(&serde_json::json!({
            "hooks_committed": t.committed,
            "hooks_scheduled": t.scheduled,
            "hooks_cancelled": t.cancelled,
            "rows_delivered": t.delivered,
            "rows_dead_lettered": t.dead_lettered,
            "rows_dropped": t.dropped,
        }));
    }
    outln!(
        "hooks_committed     {}\nhooks_scheduled     {}\nhooks_cancelled     {}\nrows_delivered      {}\nrows_dead_lettered  {}\nrows_dropped        {}",
        t.committed,
        t.scheduled,
        t.cancelled,
        t.delivered,
        t.dead_lettered,
        t.dropped
    );
    Ok(())
}

/// `ankusa pressure`.
pub async fn pressure(cfg: &Config, json: bool) -> Result<(), Error> {
    let s = connect(cfg).await?;
    let p = ops::pressure(&s).await?;
    if json {
        print_json(&p)
    } else {
        outln!(
            "due lag      {}\nwindow full  {}",
            human::span(p.lag_ms),
            if p.window_full {
                "yes: replays and resends wait"
            } else {
                "no"
            }
        );
        Ok(())
    }
}

/// `ankusa dead-letter-source`.
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
            "dead-lettered {} of {tenant}/{source} as source_gone({source}); dropped {} whose hook was gone",
            human::count(r.count, "pending row", "pending rows"),
            r.dropped
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

/// `ankusa reconfigure`: `POST /admin/reconfigure` on each worker.
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
                if worst.as_ref().is_none_or(|w| e.exit_code() > w.exit_code()) {
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

/// `ankusa dlq list`: a table, newest information first per row (when, what, why), every
/// text a receiver controls escaped; `--json` keeps the stored values (times in ms).
pub async fn dlq_list(s: &Store, filter: &FilterArgs, limit: u64, json: bool) -> Result<(), Error> {
    let page = dlq::browse(s, &filter.into(), limit).await?;
    if json {
        return print_json(&page);
    }
    if page.dead_letters.is_empty() {
        outln!(
            "no dead letters{}",
            if filter_given(filter) { " match" } else { "" }
        );
        return Ok(());
    }
    let now = s.now_ms().await?;
    let rows = page.dead_letters.iter().map(|d| {
        vec![
            d.id.clone(),
            human::when(d.at_ms, now),
            d.tenant.clone(),
            d.source.clone(),
            d.event_type.clone().unwrap_or_else(|| "-".into()),
            d.row.clone(),
            d.module.clone(),
            human::esc_cut(&d.reason, 40),
            d.attempts.to_string(),
            human::esc_cut_middle(&d.error, 60),
        ]
    });
    outln!(
        "{}",
        human::table(
            &[
                "ID",
                "DEAD-LETTERED",
                "TENANT",
                "SOURCE",
                "EVENT",
                "ROW",
                "MODULE",
                "REASON",
                "ATTEMPTS",
                "ERROR"
            ],
            rows
        )
    );
    if page.more {
        outln!("… more match: narrow the filter or raise --limit");
    }
    Ok(())
}

/// Whether any `dlq` filter was given (for the words of an empty answer).
fn filter_given(f: &FilterArgs) -> bool {
    !ankusa::dlq::Filter::from(f).is_empty()
}

/// `ankusa dlq show`: the dead letter in words with its hook's headers and body (escaped,
/// cut at 4 KiB), or one JSON document with `--json`.
pub async fn dlq_show(s: &Store, tenant: &str, id: &str, json: bool) -> Result<(), Error> {
    let d = dlq::show(s, tenant, id).await?;
    if json {
        return print_json(&d);
    }
    let now = s.now_ms().await?;
    let l = &d.dead_letter;
    outln!(
        "dead letter {} of {}/{}, row {} ({})",
        human::esc(&l.id),
        human::esc(&l.tenant),
        human::esc(&l.source),
        human::esc(&l.row),
        human::esc(&l.module)
    );
    outln!("dead-lettered  {}", human::when(l.at_ms, now));
    outln!("reason         {}", human::esc(&l.reason));
    outln!(
        "attempts       {}{}",
        l.attempts,
        l.first_attempt_ms
            .map(|ms| format!(", the first {}", human::when(ms, now)))
            .unwrap_or_default()
    );
    if let Some(et) = &l.event_type {
        outln!("event type     {}", human::esc(et));
    }
    outln!(
        "last error     {}",
        if l.error.is_empty() {
            "-".to_string()
        } else {
            human::esc(&l.error)
        }
    );
    let Some(h) = &d.hook_body else {
        outln!("\nits hook is gone: it cannot be replayed");
        return Ok(());
    };
    outln!(
        "\nhook committed {}, {}; {} still pending, {} referencing it",
        human::when(h.committed_at_ms, now),
        human::count(h.size, "byte", "bytes"),
        human::count(h.rows_left.max(0) as u64, "row", "rows"),
        human::count(h.dead_letters.max(0) as u64, "dead letter", "dead letters")
    );
    for (k, v) in &h.headers {
        outln!("{}: {}", human::esc(k), human::esc(v));
    }
    match (&h.body, &h.body_base64) {
        (Some(body), _) => outln!("\n{}", human::esc_cut(body, 4096)),
        (None, Some(b64)) => outln!("\nbody (not UTF-8, base64): {}", human::esc_cut(b64, 4096)),
        (None, None) => {}
    }
    Ok(())
}

/// The progress bar of a paced operation (`dlq replay`, `hooks resend` of many) on stderr,
/// hidden with `--json`.
pub fn paced_bar(json: bool, what: &str) -> indicatif::ProgressBar {
    let bar = if json {
        indicatif::ProgressBar::hidden()
    } else {
        ankusa::progress::shown(indicatif::ProgressBar::new(0))
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

/// Show one [`ReplayProgress`] on a [`paced_bar`]. Without a bar (`--json`, or stderr not a
/// terminal) a pause and its end are still said on stderr, one line each: a paced command
/// that waits for a live leader or a drained backlog must not look hung for up to
/// `--max-pause-ms`.
pub fn show_pace(bar: &indicatif::ProgressBar, p: ReplayProgress) {
    match p {
        ReplayProgress::Matched { total } => bar.set_length(total),
        ReplayProgress::Step { done, .. } => bar.set_position(done),
        ReplayProgress::Paused { why } if bar.is_hidden() => {
            eprintln!("paused: {}", human::esc(&why))
        }
        ReplayProgress::Paused { why } => bar.set_message(format!("paused: {why}")),
        ReplayProgress::Resumed if bar.is_hidden() => eprintln!("resumed"),
        ReplayProgress::Resumed => bar.set_message(""),
    }
}

/// `ankusa dlq replay`: a progress bar on stderr unless `--json`; `--dry-run` prints what
/// the filter selects (a count and the first few) and replays nothing.
pub async fn dlq_replay(
    s: &Store,
    filter: &FilterArgs,
    opts: &ReplayOptions,
    json: bool,
) -> Result<(), Error> {
    let bar = paced_bar(json || opts.dry_run, "replay");
    let r = dlq::replay(s, &filter.into(), opts, |p| show_pace(&bar, p)).await;
    bar.finish_and_clear();
    let r = r?;
    if json {
        return print_json(&r);
    }
    if r.dry_run {
        let letters = human::count(r.matched, "dead letter", "dead letters");
        if r.matched == 0 {
            outln!("dry run: no dead letters match; nothing would be replayed");
            return Ok(());
        }
        let now = s.now_ms().await?;
        outln!(
            "dry run: {letters} would be replayed{}",
            if r.selected.len() as u64 == r.matched {
                String::new()
            } else {
                format!("; the first {}:", r.selected.len())
            }
        );
        let rows = r.selected.iter().map(|d| {
            vec![
                d.id.clone(),
                human::when(d.at_ms, now),
                d.tenant.clone(),
                d.source.clone(),
                d.row.clone(),
                human::esc_cut(&d.reason, 40),
                human::esc_cut_middle(&d.error, 60),
            ]
        });
        outln!(
            "{}",
            human::table(
                &[
                    "ID",
                    "DEAD-LETTERED",
                    "TENANT",
                    "SOURCE",
                    "ROW",
                    "REASON",
                    "ERROR"
                ],
                rows
            )
        );
        return Ok(());
    }
    outln!(
        "replayed {} of {} (hook gone: {}, row live: {}, gone meanwhile: {}); paused {}, {}",
        r.replayed,
        human::count(r.matched, "dead letter", "dead letters"),
        r.hook_gone,
        r.live,
        r.missing,
        human::count(r.pauses, "time", "times"),
        human::span(r.paused_ms)
    );
    Ok(())
}

/// `ankusa dlq purge`: by filter, `--all`, or (neither) the configured retention. `--all`
/// deletes every dead letter, so it asks first on a terminal and needs `--yes` elsewhere.
pub async fn dlq_purge(
    s: &Store,
    cfg: &Config,
    filter: &FilterArgs,
    (all, yes): (bool, bool),
    json: bool,
) -> Result<(), Error> {
    let filter: Filter = filter.into();
    let retention_only = !all && filter.is_empty();
    if all && !yes {
        confirm_purge_all(s, &filter).await?;
    }
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
        return print_json(&r);
    }
    let letters = human::count(r.purged, "dead letter", "dead letters");
    if retention_only {
        outln!(
            "purged {letters} past the retention (max_age_ms {}, max_per_tenant {})",
            cfg.dlq.max_age_ms,
            cfg.dlq.max_per_tenant
        );
    } else {
        outln!("purged {letters}");
    }
    Ok(())
}

/// Ask on the terminal before `dlq purge --all`; refuse (exit 2) when stdin is not a
/// terminal, since nobody can answer there: a script says `--yes`.
async fn confirm_purge_all(s: &Store, filter: &Filter) -> Result<(), Error> {
    use std::io::{BufRead, IsTerminal, Write};
    let whose = filter.tenant.as_deref().map_or_else(
        || "of every tenant".to_string(),
        |t| format!("of tenant {t}"),
    );
    if !std::io::stdin().is_terminal() {
        return Err(Error::BadRequest(format!(
            "dlq purge --all deletes every dead letter {whose} and the hook bodies only they keep; \
             nobody can confirm without a terminal: pass --yes"
        )));
    }
    let n = dlq::replay(
        s,
        filter,
        &ReplayOptions {
            dry_run: true,
            ..Default::default()
        },
        |_| {},
    )
    .await?
    .matched;
    eprint!(
        "Delete {} {whose}, with the hook bodies only they keep? This cannot be undone. [y/N] ",
        human::count(n, "dead letter", "dead letters")
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Error::Other(format!("stdin: {e}")))?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        Err(Error::Other("not confirmed: nothing purged".into()))
    }
}
