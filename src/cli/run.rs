//! Running one parsed command: config, sources, produce, dead letters, hooks, demo, bench.

use super::args::{Cli, Cmd, ConfigCmd, DlqCmd, LogFormat};
use super::worker::{receiver, worker};
use super::{ops, produce, sources, vis};
use ankusa::config::Config;
use ankusa::model::SourceSpec;
use ankusa::store::Store;
use ankusa::Error;
use clap::CommandFactory;
use std::path::{Path, PathBuf};

/// The log subscriber: stderr (`format`, `ANKUSA_LOG` or `RUST_LOG`, else `default`), plus the
/// export of attempt spans when `telemetry` runs (then the log filter is the fmt layer's own,
/// so attempt spans are exported whatever the log level).
pub fn init_logs(
    format: LogFormat,
    default: &str,
    telemetry: Option<&ankusa::telemetry::Telemetry>,
) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("ANKUSA_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only for a person at a terminal: never into files and pipes, never with NO_COLOR
    // set (https://no-color.org: any value but the empty string).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").map_or(true, |v| v.is_empty());
    if let Some(t) = telemetry {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        use tracing_subscriber::Layer;
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(colour)
            .with_writer(ankusa::progress::Stderr);
        let fmt = match format {
            LogFormat::Json => fmt.json().with_filter(filter).boxed(),
            LogFormat::Pretty => fmt
                .compact()
                .fmt_fields(escaped_fields())
                .with_filter(filter)
                .boxed(),
        };
        tracing_subscriber::registry()
            .with(fmt)
            .with(t.layer())
            .init();
        return;
    }
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(ankusa::progress::Stderr);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Pretty => b.compact().fmt_fields(escaped_fields()).init(),
    }
}

/// The pretty log's field formatter: `name=value` separated by spaces, the message bare, and
/// every value with its control characters escaped, so a text a receiver or tenant controls
/// (an error body) cannot start a forged log line or send a terminal escape sequence. (The
/// JSON log escapes them as JSON does.)
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = super::human::esc(&format!("{value:?}"));
        if field.name() == "message" {
            write!(w, "{text}")
        } else {
            write!(w, "{}={text}", field.name())
        }
    })
    .delimited(" ")
}

pub fn load_config(cli: &Cli) -> Result<Config, Error> {
    let mut cfg = Config::load(cli.config.as_deref())?;
    if let Some(i) = &cli.instance {
        cfg.instance = i.clone();
    }
    if let Some(u) = &cli.redis_url {
        cfg.redis.url = u.clone();
    }
    cfg.validate()?;
    crate::cli::redis_words::remember(&cfg.redis.url);
    Ok(cfg)
}

pub async fn store(cfg: &Config) -> Result<Store, Error> {
    ops::connect(cfg).await
}

pub fn read_spec(path: &Path) -> Result<SourceSpec, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::InvalidSource(format!("{}: {e}", path.display())))?;
    let spec: SourceSpec = if path.extension().is_some_and(|e| e == "toml") {
        toml::from_str(&text)
            .map_err(|e| Error::InvalidSource(format!("{}: {e}", path.display())))?
    } else {
        serde_json::from_str(&text).map_err(|e| {
            Error::InvalidSource(format!(
                "{}: {e} (a source file is JSON, or TOML when its name ends in .toml)",
                path.display()
            ))
        })?
    };
    Ok(spec)
}

/// The payload files of `produce`: files as given, directories expanded to their regular
/// files (sorted), or to those matching `pattern` (a glob relative to the directory).
pub fn collect_files(paths: &[PathBuf], pattern: Option<&str>) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for p in paths {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let mut entries: Vec<PathBuf> = match pattern {
            Some(g) => {
                let full = p.join(g);
                glob::glob(&full.to_string_lossy())
                    .map_err(|e| Error::BadRequest(format!("--glob {g:?}: {e}")))?
                    .filter_map(Result::ok)
                    .filter(|p| p.is_file())
                    .collect()
            }
            None => std::fs::read_dir(p)
                .map_err(|e| Error::BadRequest(format!("{}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect(),
        };
        if entries.is_empty() {
            return Err(Error::BadRequest(format!(
                "{}: no files to commit{}",
                p.display(),
                pattern.map_or(String::new(), |g| format!(" match --glob {g:?}"))
            )));
        }
        entries.sort();
        out.extend(entries);
    }
    Ok(out)
}

/// Print `value` as one JSON line.
pub fn json_line<T: serde::Serialize>(value: &T) -> Result<(), Error> {
    outln!(
        "{}",
        serde_json::to_string(value).map_err(|e| Error::Other(e.to_string()))?
    );
    Ok(())
}

pub async fn run(cli: Cli) -> Result<(), Error> {
    let json = cli.json;
    match &cli.cmd {
        Cmd::Config { cmd } => config(&cli, cmd),
        Cmd::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "ankusa", &mut buf);
            emit_text(json, "script", &buf)
        }
        Cmd::CommitScript { sha } => commit_script(json, *sha),
        Cmd::Man { command, dir } => super::man::man(command, dir.as_deref(), json),
        Cmd::Demo(args) => {
            let mut args = args.clone();
            args.json = json;
            args.redis_url = cli.redis_url.clone();
            ankusa::demo::run(args).await.map(|_| ())
        }
        Cmd::Bench(args) => {
            let mut args = args.clone();
            args.json = json;
            ankusa::bench::run(args).await
        }
        Cmd::Receiver { listen, fail } => receiver(*listen, fail).await,
        Cmd::Worker { name, listen } => worker(&cli, name.as_deref(), listen.as_deref()).await,
        Cmd::Source { cmd } => sources::source(&cli, cmd).await,
        Cmd::Token { cmd } => super::token::token(&cli, cmd).await,
        Cmd::PortalLink {
            tenant,
            ttl,
            base_url,
        } => super::token::portal_link(&cli, tenant, ttl, base_url.as_deref()),
        Cmd::Produce(args) => produce::produce(&cli, args).await,
        Cmd::Hooks { cmd } => {
            let cfg = load_config(&cli)?;
            vis::hooks(&store(&cfg).await?, &cfg, cmd, json).await
        }
        Cmd::Rows { cmd } => {
            let cfg = load_config(&cli)?;
            vis::rows(&store(&cfg).await?, cmd, json).await
        }
        Cmd::Tenants { cmd } => {
            let cfg = load_config(&cli)?;
            vis::tenants(&store(&cfg).await?, cmd, json).await
        }
        Cmd::Tick { timeout_ms, all } => {
            ops::tick(&load_config(&cli)?, *timeout_ms, *all, json).await
        }
        Cmd::Pressure => ops::pressure(&load_config(&cli)?, json).await,
        Cmd::DeadLetterSource {
            tenant,
            source,
            timeout_ms,
        } => ops::dead_letter_source(&load_config(&cli)?, tenant, source, *timeout_ms, json).await,
        Cmd::Reconfigure { admin, token } => {
            ops::reconfigure(&load_config(&cli)?, admin, token.clone(), json).await
        }
        Cmd::Openapi => {
            let doc = ankusa::admin::openapi();
            let text = if json {
                serde_json::to_string(&doc)
            } else {
                serde_json::to_string_pretty(&doc)
            };
            outln!("{}", text.map_err(|e| Error::Other(e.to_string()))?);
            Ok(())
        }
        Cmd::Stats => {
            let cfg = load_config(&cli)?;
            let t = store(&cfg).await?.totals().await?;
            ops::stats(&t, json)
        }
        Cmd::Dlq { cmd } => dlq(&cli, cmd).await,
    }
}

/// `ankusa config default|check`.
fn config(cli: &Cli, cmd: &ConfigCmd) -> Result<(), Error> {
    let json = cli.json;
    match cmd {
        ConfigCmd::Default => {
            if json {
                json_line(&Config::default())
            } else {
                crate::cli::out::text(ankusa::config::DEFAULT_CONFIG_TOML);
                Ok(())
            }
        }
        ConfigCmd::Check { file } => {
            let mut cfg = Config::load(file.as_deref().or(cli.config.as_deref()))?;
            if let Some(i) = &cli.instance {
                cfg.instance = i.clone();
            }
            cfg.validate()?;
            cfg.admin.check_exposure()?;
            if json {
                json_line(&serde_json::json!({"ok": true}))
            } else {
                crate::cli::out::text(&cfg.redacted_toml());
                eprintln!("config ok");
                Ok(())
            }
        }
    }
}

/// `ankusa commit-script [--sha]`: the script producers in other languages load.
fn commit_script(json: bool, sha: bool) -> Result<(), Error> {
    let script = ankusa::store::scripts::COMMIT;
    let digest = ankusa::store::scripts::commit_sha1();
    match (json, sha) {
        (true, _) => json_line(&serde_json::json!({"sha": digest, "script": script})),
        (false, true) => {
            outln!("{digest}");
            Ok(())
        }
        (false, false) => {
            crate::cli::out::text(script);
            Ok(())
        }
    }
}

/// `ankusa dlq list|show|replay|purge`.
async fn dlq(cli: &Cli, cmd: &DlqCmd) -> Result<(), Error> {
    let json = cli.json;
    let cfg = load_config(cli)?;
    let s = store(&cfg).await?;
    match cmd {
        DlqCmd::List { filter, limit } => ops::dlq_list(&s, filter, *limit, json).await,
        DlqCmd::Show { tenant, id } => ops::dlq_show(&s, tenant, id, json).await,
        DlqCmd::Replay {
            filter,
            max_lag_ms,
            batch,
            limit,
            max_pause_ms,
            no_pace,
            dry_run,
        } => {
            let opts = ankusa::dlq::ReplayOptions {
                max_lag_ms: *max_lag_ms,
                batch: *batch,
                limit: *limit,
                max_pause_ms: *max_pause_ms,
                pace: !*no_pace,
                dry_run: *dry_run,
            };
            ops::dlq_replay(&s, filter, &opts, json).await
        }
        DlqCmd::Purge { filter, all, yes } => {
            ops::dlq_purge(&s, &cfg, filter, (*all, *yes), json).await
        }
    }
}

/// Print generated text (a completion script, a man page) as is, or with `--json` as
/// `{"<key>": "<text>"}`.
pub fn emit_text(json: bool, key: &str, text: &[u8]) -> Result<(), Error> {
    let text = String::from_utf8_lossy(text);
    if json {
        json_line(&serde_json::json!({ key: text }))
    } else {
        crate::cli::out::text(&text);
        Ok(())
    }
}
