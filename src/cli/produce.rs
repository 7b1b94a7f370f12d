//! `ankusa produce`: commit hooks from files, directories of payloads, or stdin.

use super::args::{Cli, ProduceArgs};
use super::out::json_line;
use super::setup::{collect_files, load_config, store};
use ankusa::{Error, Hook, Producer};

/// Read every body and check it before the first commit (a refusal commits nothing), then
/// commit 100 per call; with `--idempotency-key`, the one hook under its key.
pub async fn produce(cli: &Cli, args: &ProduceArgs) -> Result<(), Error> {
    let json = cli.json;
    let (tenant, source) = (&args.tenant, &args.source);
    let cfg = load_config(cli)?;
    let base = base_hook(args)?;
    let mut bodies = read_bodies(args)?;
    let producer = Producer::new(store(&cfg).await?, cfg.commit.max_hook_bytes)
        .with_idempotency_ms(cfg.commit.idempotency_ms);
    if let Some(key) = &args.idempotency_key {
        if bodies.len() * args.repeat != 1 {
            return Err(Error::BadRequest(
                "--idempotency-key names one hook: give one file (or stdin) and no --repeat".into(),
            ));
        }
        let mut hook = base.clone().idempotency_key(key.as_str());
        hook.body = bodies.remove(0).1.into();
        let r = producer.commit(tenant, source, hook).await?;
        let due = due_at(&base, r.committed_at_ms, r.rows_per_hook);
        return if json {
            let mut v = serde_json::json!({
                "committed": 1, "first_hook": r.first_hook, "rows_per_hook": r.rows_per_hook
            });
            if let Some(at) = due {
                v["deliver_at_ms"] = at.into();
            }
            json_line(&v)
        } else {
            outln!(
                "committed 1 hook to {tenant}/{source} (hook id {}, {}){}",
                r.first_hook,
                super::human::count(r.rows_per_hook.into(), "row", "rows"),
                scheduled_words(due)
            );
            Ok(())
        };
    }
    let mut n = 0u64;
    let mut first = None;
    let mut rows = 0u32;
    // When the first call's hooks are due, for a scheduled commit.
    let mut due = None;
    for _ in 0..args.repeat {
        for chunk in bodies.chunks(100) {
            let hooks: Vec<Hook> = chunk
                .iter()
                .map(|(_, b)| Hook {
                    body: b.clone().into(),
                    headers: base.headers.clone(),
                    idempotency_key: None,
                    event_type: base.event_type.clone(),
                    schedule: base.schedule,
                })
                .collect();
            let r = producer.commit_many(tenant, source, &hooks).await?;
            first.get_or_insert(r.first_hook);
            due = due.or(due_at(&base, r.committed_at_ms, r.rows_per_hook));
            rows = r.rows_per_hook;
            n += hooks.len() as u64;
        }
    }
    let warning = (n > 0 && rows == 0).then(|| {
        format!("{tenant}/{source} has no sinks taking these hooks (no sink entry, or every entry filtered them out): they go nowhere")
    });
    if json {
        let mut v = serde_json::json!({
            "committed": n, "first_hook": first.unwrap_or(0), "rows_per_hook": rows
        });
        if let Some(w) = &warning {
            v["warning"] = w.clone().into();
        }
        if let Some(at) = due {
            v["deliver_at_ms"] = at.into();
        }
        return json_line(&v);
    }
    let hooks = super::human::count(n, "hook", "hooks");
    let rows = super::human::count(rows.into(), "row", "rows");
    let (id, each) = match n {
        1 => ("hook id", ""),
        _ => ("first hook id", " each"),
    };
    outln!(
        "committed {hooks} to {tenant}/{source} ({id} {}, {rows}{each}){}",
        first.unwrap_or(0),
        scheduled_words(due)
    );
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    Ok(())
}

/// The headers and event type every hook of the call carries.
fn base_hook(args: &ProduceArgs) -> Result<Hook, Error> {
    let mut base = Hook::default();
    if let Some(d) = &args.delay {
        base.schedule = Some(
            ankusa::producer::parse_delay(d)
                .map_err(|e| Error::BadRequest(format!("--delay {e}")))?,
        );
    }
    if let Some(d) = &args.deliver_at {
        base.schedule = Some(
            ankusa::producer::parse_deliver_at(d)
                .map_err(|e| Error::BadRequest(format!("--deliver-at {e}")))?,
        );
    }
    if let Some(e) = &args.event_type {
        ankusa::model::check_event_type(e)
            .map_err(|e| Error::BadRequest(format!("--event-type: {e}")))?;
        base = base.event_type(e.as_str());
    }
    for h in &args.headers {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| Error::BadRequest(format!("--header {h:?}: expected `name: value`")))?;
        let (k, v) = (k.trim(), v.trim());
        // Bad input is a usage error (exit 2) here, before anything is committed, as for
        // every other flag; the commit would refuse it too, as a failed operation.
        if ankusa::sinks::is_reserved_header(k) {
            return Err(Error::BadRequest(format!(
                "--header {k:?}: webhook-* and ankusa-* headers are the delivery's own; the worker sets them"
            )));
        }
        if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err()
            || reqwest::header::HeaderValue::from_str(v).is_err()
        {
            return Err(Error::BadRequest(format!(
                "--header {h:?}: the name must be an HTTP token and the value visible ASCII, spaces and tabs"
            )));
        }
        base = base.header(k, v);
    }
    Ok(base)
}

/// Every body, named by its file (or `stdin`); an empty one is refused without
/// `--allow-empty`.
fn read_bodies(args: &ProduceArgs) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let files = collect_files(&args.paths, args.glob.as_deref())?;
    let mut bodies: Vec<(String, Vec<u8>)> = Vec::new();
    if files.is_empty() || files.iter().any(|f| f.as_os_str() == "-") {
        use std::io::Read;
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Error::Other(format!("stdin: {e}")))?;
        bodies.push(("stdin".into(), buf));
    }
    for f in files.iter().filter(|f| f.as_os_str() != "-") {
        let b = std::fs::read(f).map_err(|e| Error::BadRequest(format!("{}: {e}", f.display())))?;
        bodies.push((f.display().to_string(), b));
    }
    if !args.allow_empty {
        if let Some((name, _)) = bodies.iter().find(|(_, b)| b.is_empty()) {
            return Err(Error::BadRequest(format!(
                "{name}: empty body (0 bytes); nothing committed. Pass --allow-empty to commit empty hooks"
            )));
        }
    }
    Ok(bodies)
}

/// When hooks committed with `base`'s schedule at `committed_at_ms` are due (ms), if later
/// than the commit and anything was made.
fn due_at(base: &Hook, committed_at_ms: i64, rows: u32) -> Option<i64> {
    base.schedule
        .and_then(|s| s.due_at_ms(committed_at_ms))
        .filter(|_| rows > 0)
}

/// `, due at <RFC 3339, UTC> (in <how long>)` for a scheduled commit, else nothing.
fn scheduled_words(due: Option<i64>) -> String {
    let Some(ms) = due else {
        return String::new();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    format!(", due at {}", super::human::when(ms, now))
}
