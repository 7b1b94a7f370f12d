//! Running one parsed command: config, sources, produce, dead letters, hooks, demo, bench.

use super::args::{Cli, Cmd, ConfigCmd, DlqCmd, LogFormat};
use super::out::{emit_text, json_line};
use super::setup::{load_config, store};
use super::worker::{receiver, worker};
use super::{ops, produce, sources, vis};
use ankusa::config::Config;
use ankusa::Error;
use clap::CommandFactory;

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
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
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

/// Run one parsed command; its error is what `main` prints and maps to the exit code.
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
            create,
        } => super::token::portal_link(&cli, tenant, ttl, base_url.as_deref(), *create).await,
        Cmd::Produce(args) => produce::produce(&cli, args).await,
        Cmd::Hooks { cmd } => {
            let cfg = load_config(&cli)?;
            vis::hooks(&store(&cfg).await?, &cfg, cmd, json).await
        }
        Cmd::Log { cmd } => {
            let cfg = load_config(&cli)?;
            super::log::log(&store(&cfg).await?, &cfg, cmd, json).await
        }
        Cmd::Rows { cmd } => {
            let cfg = load_config(&cli)?;
            vis::rows(&store(&cfg).await?, cmd, json).await
        }
        Cmd::Tenants { cmd } => {
            let cfg = load_config(&cli)?;
            vis::tenants(&store(&cfg).await?, &cfg, cmd, json).await
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
            let mut cfg = Config::load_checked(
                file.as_deref().or(cli.config.as_deref()),
                ankusa::sinks::registry::config_problems,
            )?;
            if let Some(i) = &cli.instance {
                cfg.instance = i.clone();
            }
            cfg.validate_with(ankusa::sinks::registry::config_problems)?;
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
