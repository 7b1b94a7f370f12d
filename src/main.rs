//! The `ankusa` command line: worker, producer, sources, dead letters, demo, bench.
//!
//! Exit codes: 0 ok, 1 operation failed, 2 usage or config error, 3 unavailable (Redis
//! unreachable, no leader). With `--json` every command prints one JSON document on stdout,
//! errors included (`{"error": {"code", "message"}}`, argument errors too). Output to a pipe
//! closed early (`ankusa dlq list | head -1`) ends the command quietly with exit 0.

/// `println!` that survives a closed stdout: a broken pipe ends the process with exit 0, any
/// other write error with exit 1 (see [`cli::out`]).
macro_rules! outln {
    ($($t:tt)*) => { $crate::cli::out::line(format_args!($($t)*)) };
}

mod cli;
mod cli_ops;

use ankusa::config::Config;
use ankusa::model::SourceSpec;
use ankusa::store::Store;
use ankusa::{Error, Hook, Producer, Worker};
use clap::{CommandFactory, Parser, Subcommand};

mod cli_vis;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The allocator of the binary: mimalloc, with per-thread heaps. Under glibc `malloc` the
/// worker spent ~16 % of its CPU in `malloc`/`free`, much of it in futex waits on the
/// arena locks its runtime threads share (issue 12; profile in BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Heading of the options every command takes, so `--help` shows them apart.
const GLOBAL: &str = "Global options";

#[derive(Parser)]
#[command(
    name = "ankusa",
    version,
    about = "Redis-backed distributed webhook and event delivery worker",
    after_help = "Exit codes: 0 ok, 1 operation failed, 2 usage or config error, 3 unavailable \
(Redis unreachable, no leader).\nWith --json every command prints one JSON document on stdout; \
errors, argument errors included, are {\"error\": {\"code\", \"message\"}} on stdout."
)]
struct Cli {
    /// Config file (TOML); `ANKUSA_<SECTION>__<KEY>` environment variables override it.
    #[arg(long, short, global = true, env = "ANKUSA_CONFIG", help_heading = GLOBAL)]
    config: Option<PathBuf>,
    /// Instance name (the namespace of keys and metrics); overrides the config's `instance`.
    #[arg(long, global = true, help_heading = GLOBAL)]
    instance: Option<String>,
    /// Redis URL; overrides the config's `redis.url`.
    #[arg(long, global = true, help_heading = GLOBAL)]
    redis_url: Option<String>,
    /// Log format (logs go to stderr; colours only on a terminal and without NO_COLOR).
    #[arg(
        long,
        global = true,
        default_value = "pretty",
        env = "ANKUSA_LOG_FORMAT",
        help_heading = GLOBAL
    )]
    log_format: LogFormat,
    /// Print one JSON document on stdout for scripts (errors too: `{"error": {"code", "message"}}`).
    #[arg(long, global = true, help_heading = GLOBAL)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Pretty,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a worker: elect, lead or stand by, serve /metrics and the admin API.
    ///
    /// SIGTERM or SIGINT drains (running attempts get `leader.shutdown_grace_ms`); a second
    /// signal stops at once (exit 130): its claims come due again at the next takeover.
    /// SIGHUP re-reads the config file and takes the new dispatch limits.
    Worker {
        /// Node name (a random suffix is added: ids are unique per start).
        #[arg(long)]
        name: Option<String>,
        /// Admin listen address; overrides `admin.listen`.
        #[arg(long)]
        listen: Option<String>,
    },
    /// Config: check a file and print the merged result with secrets redacted.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Sources: the registry of (tenant, source) → sink entries.
    Source {
        #[command(subcommand)]
        cmd: SourceCmd,
    },
    /// Commit hooks from files, directories of payloads, or stdin.
    Produce {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source: String,
        /// Payload files or directories (every regular file inside, or those matching
        /// --glob); none or `-` reads stdin.
        paths: Vec<PathBuf>,
        /// Header `name: value` to send with every hook (repeatable).
        #[arg(long = "header", short = 'H')]
        headers: Vec<String>,
        /// Commit each file this many times.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// In directories, commit only the files matching this pattern (`*.json`,
        /// `**/*.json` to descend).
        #[arg(long)]
        glob: Option<String>,
        /// Commit empty bodies too (refused by default: an empty stdin is usually a mistake).
        #[arg(long)]
        allow_empty: bool,
        /// Producer idempotency key of the one hook committed: a repeat within
        /// `commit.idempotency_ms` prints the first hook's id and writes nothing.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Hooks: show one with its rows and attempts, or resend it.
    Hooks {
        #[command(subcommand)]
        cmd: cli_vis::HooksCmd,
    },
    /// Delivery rows: list a tenant's due, retrying, parked and claimed rows.
    Rows {
        #[command(subcommand)]
        cmd: cli_vis::RowsCmd,
    },
    /// Tenants: the busiest by due rows, with lag and failing sinks.
    Tenants {
        #[command(subcommand)]
        cmd: cli_vis::TenantsCmd,
    },
    /// Block until nothing is claimed, running or due; print the rows settled.
    ///
    /// Needs a live leader: exits 3 at once when no worker holds the lease.
    Tick {
        /// Give up after this long (exit 3), ms; default: wait as long as it takes.
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
    /// Spare capacity for replay jobs: lag of the oldest due row and window state; exit 3 when
    /// no leader is live.
    Pressure,
    /// Dead-letter every pending row of a source as source_gone(SOURCE); print the count.
    ///
    /// Needs a live leader (exit 3 when none).
    DeadLetterSource {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source: String,
        /// Deadline of the whole call, ms (exit 3 past it; calling again finishes the walk).
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Make running workers re-read their config file and take the new dispatch limits.
    Reconfigure {
        /// Admin base URL of a worker (repeat for every worker of the pool); default:
        /// `http://<admin.listen>` of the config.
        #[arg(long)]
        admin: Vec<String>,
        /// Bearer token; default: the config's `admin.token`.
        #[arg(long)]
        token: Option<String>,
    },
    /// Print the admin API's OpenAPI document (JSON), generated from the code.
    Openapi,
    /// Running totals: hooks committed; rows delivered, dead-lettered, dropped.
    Stats,
    /// Dead letters.
    Dlq {
        #[command(subcommand)]
        cmd: DlqCmd,
    },
    /// Print the commit script for producers in other languages: `lua/prelude.lua` +
    /// `lua/commit.lua`, exactly what this binary loads (docs/commit-protocol.md).
    CommitScript {
        /// Print only its SHA-1, the name `EVALSHA` calls it by once loaded.
        #[arg(long)]
        sha: bool,
    },
    /// Print a shell completion script: `ankusa completions bash > /etc/bash_completion.d/ankusa`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `ankusa man > ankusa.1 && man ./ankusa.1`.
    Man,
    /// Run everything on this machine: Redis, a receiver, a worker, real hooks, a summary.
    Demo(ankusa::demo::DemoArgs),
    /// Measure throughput, latency, Redis cost and memory on this machine.
    Bench(ankusa::bench::BenchArgs),
    /// Run a webhook receiver for demos (the compose stack's): `200 ok` on every path, except
    /// paths given with `--fail`; logs a count per path and status every 10 s.
    Receiver {
        /// Listen address (ip:port).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// `PATH=FRACTION`: answer 503 to about FRACTION (0.0–1.0) of the requests on PATH (repeatable).
        #[arg(long = "fail", value_parser = parse_fail)]
        fail: Vec<(String, f64)>,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Validate a config file (plus environment overrides); exit 2 naming each bad key.
    Check {
        /// The TOML file to check; default: --config.
        file: Option<PathBuf>,
    },
    /// Print the commented default config (with --json: the defaults as a JSON object).
    Default,
}

#[derive(Subcommand)]
enum SourceCmd {
    /// Register or replace a source from a JSON or TOML file: `{"sinks": [{"module": "http", "opts": {"url": …}}]}`.
    Put {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source: String,
        /// The source spec, JSON (or TOML when the name ends in `.toml`).
        file: PathBuf,
        /// Accept a spec with no sinks (`"sinks": []`): its hooks are stored but go nowhere.
        #[arg(long)]
        allow_no_sinks: bool,
    },
    /// Print a source's spec as JSON.
    Get {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source: String,
    },
    /// List sources.
    List,
    /// Delete a source; its pending rows are dead-lettered `source_gone` when claimed.
    Delete {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source: String,
    },
}

#[derive(Subcommand)]
enum DlqCmd {
    /// List dead letters, oldest first per tenant.
    List {
        #[command(flatten)]
        filter: cli_ops::FilterArgs,
        /// Show at most this many.
        #[arg(long, default_value_t = 100)]
        limit: u64,
    },
    /// Show one dead letter with its hook (body and headers).
    Show {
        /// Tenant id.
        tenant: String,
        /// Dead letter id (`<ms>-<n>`, as `dlq list` prints it).
        id: String,
    },
    /// Put dead letters back as new due rows (attempts reset, horizon restarted), paced by pressure.
    Replay {
        #[command(flatten)]
        filter: cli_ops::FilterArgs,
        /// Pause while the oldest due row is more than this late, ms.
        #[arg(long, default_value_t = 5_000)]
        max_lag_ms: u64,
        /// Dead letters put back per step.
        #[arg(long, default_value_t = 100)]
        batch: usize,
        /// Replay at most this many.
        #[arg(long)]
        limit: Option<u64>,
        /// Give up (exit 3) after pausing this long in one stretch, ms.
        #[arg(long, default_value_t = 60_000)]
        max_pause_ms: u64,
        /// Do not pace by pressure: put everything back at once.
        #[arg(long)]
        no_pace: bool,
    },
    /// Delete dead letters and the hook bodies only they keep. With no filter and no
    /// --all: apply the retention of [dlq] (max_age_ms, max_per_tenant).
    Purge {
        #[command(flatten)]
        filter: cli_ops::FilterArgs,
        /// Delete every dead letter (of --tenant, if given).
        #[arg(long)]
        all: bool,
    },
}

fn init_logs(format: LogFormat, default: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("ANKUSA_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only for a person at a terminal: never into files and pipes, never with NO_COLOR
    // set (https://no-color.org: any value but the empty string).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").map_or(true, |v| v.is_empty());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Pretty => b.compact().init(),
    }
}

fn load_config(cli: &Cli) -> Result<Config, Error> {
    let mut cfg = Config::load(cli.config.as_deref())?;
    if let Some(i) = &cli.instance {
        cfg.instance = i.clone();
    }
    if let Some(u) = &cli.redis_url {
        cfg.redis.url = u.clone();
    }
    cfg.validate()?;
    cli::redis_words::remember(&cfg.redis.url);
    Ok(cfg)
}

async fn store(cfg: &Config) -> Result<Store, Error> {
    cli_ops::connect(cfg).await
}

fn read_spec(path: &Path) -> Result<SourceSpec, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::InvalidSource(format!("{}: {e}", path.display())))?;
    let spec: SourceSpec = if path.extension().is_some_and(|e| e == "toml") {
        toml::from_str(&text)
            .map_err(|e| Error::InvalidSource(format!("{}: {e}", path.display())))?
    } else {
        serde_json::from_str(&text)
            .map_err(|e| Error::InvalidSource(format!("{}: {e}", path.display())))?
    };
    Ok(spec)
}

/// The payload files of `produce`: files as given, directories expanded to their regular
/// files (sorted), or to those matching `pattern` (a glob relative to the directory).
fn collect_files(paths: &[PathBuf], pattern: Option<&str>) -> Result<Vec<PathBuf>, Error> {
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
                .map_err(|e| Error::Other(format!("{}: {e}", p.display())))?
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
fn json_line<T: serde::Serialize>(value: &T) -> Result<(), Error> {
    outln!(
        "{}",
        serde_json::to_string(value).map_err(|e| Error::Other(e.to_string()))?
    );
    Ok(())
}

async fn run(cli: Cli) -> Result<(), Error> {
    let json = cli.json;
    match &cli.cmd {
        Cmd::Config {
            cmd: ConfigCmd::Default,
        } => {
            if json {
                json_line(&Config::default())
            } else {
                cli::out::text(ankusa::config::DEFAULT_CONFIG_TOML);
                Ok(())
            }
        }
        Cmd::Config {
            cmd: ConfigCmd::Check { file },
        } => {
            let mut cfg = Config::load(file.as_deref().or(cli.config.as_deref()))?;
            if let Some(i) = &cli.instance {
                cfg.instance = i.clone();
            }
            cfg.validate()?;
            cfg.admin.check_exposure()?;
            if json {
                json_line(&serde_json::json!({"ok": true}))
            } else {
                cli::out::text(&cfg.redacted_toml());
                eprintln!("config ok");
                Ok(())
            }
        }
        Cmd::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "ankusa", &mut buf);
            emit_text(json, "script", &buf)
        }
        Cmd::CommitScript { sha } => {
            let script = ankusa::store::scripts::COMMIT;
            let digest = fred::types::scripts::Script::from_lua(script)
                .sha1()
                .to_string();
            match (json, sha) {
                (true, _) => json_line(&serde_json::json!({"sha": digest, "script": script})),
                (false, true) => {
                    outln!("{digest}");
                    Ok(())
                }
                (false, false) => {
                    cli::out::text(script);
                    Ok(())
                }
            }
        }
        Cmd::Man => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut buf)
                .map_err(|e| Error::Other(format!("man page: {e}")))?;
            emit_text(json, "man", &buf)
        }
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
        Cmd::Source { cmd } => {
            let cfg = load_config(&cli)?;
            if let SourceCmd::Put {
                tenant,
                source,
                file,
                allow_no_sinks,
            } = cmd
            {
                // Read and check the file before connecting: a bad file is a usage error.
                let spec = read_spec(file)?;
                if spec.sinks.is_empty() && !allow_no_sinks {
                    return Err(Error::InvalidSource(format!(
                        "{}: no sinks: hooks committed to {tenant}/{source} would be stored and go nowhere; add a sink, or pass --allow-no-sinks if that is what you want",
                        file.display()
                    )));
                }
                let s = store(&cfg).await?;
                let v = s.put_source(tenant, source, &spec).await?;
                return if json {
                    json_line(&serde_json::json!({
                        "tenant": tenant, "source": source, "version": v, "sinks": spec.sinks.len()
                    }))
                } else {
                    outln!(
                        "source {tenant}/{source} stored (version {v}, {} sinks)",
                        spec.sinks.len()
                    );
                    Ok(())
                };
            }
            let s = store(&cfg).await?;
            match cmd {
                SourceCmd::Put { .. } => Ok(()),
                SourceCmd::Get { tenant, source } => match s.get_source(tenant, source).await? {
                    Some(spec) if json => json_line(&spec),
                    Some(spec) => {
                        outln!(
                            "{}",
                            serde_json::to_string_pretty(&spec)
                                .map_err(|e| Error::Other(e.to_string()))?
                        );
                        Ok(())
                    }
                    None => Err(Error::NotFound(format!("no source {tenant}/{source}"))),
                },
                SourceCmd::List => {
                    let all = s.list_sources().await?;
                    if json {
                        let list: Vec<_> = all
                            .iter()
                            .map(|(t, so)| serde_json::json!({"tenant": t, "source": so}))
                            .collect();
                        return json_line(&serde_json::json!({ "sources": list }));
                    }
                    for (t, so) in all {
                        outln!("{t}/{so}");
                    }
                    Ok(())
                }
                SourceCmd::Delete { tenant, source } => {
                    if !s.delete_source(tenant, source).await? {
                        return Err(Error::NotFound(format!("no source {tenant}/{source}")));
                    }
                    if json {
                        json_line(
                            &serde_json::json!({"tenant": tenant, "source": source, "deleted": true}),
                        )
                    } else {
                        outln!("source {tenant}/{source} deleted; its pending rows are dead-lettered source_gone({source}) as they come due");
                        Ok(())
                    }
                }
            }
        }
        Cmd::Produce {
            tenant,
            source,
            paths,
            headers,
            repeat,
            glob,
            allow_empty,
            idempotency_key,
        } => {
            let cfg = load_config(&cli)?;
            let mut base = Hook::default();
            for h in headers {
                let (k, v) = h.split_once(':').ok_or_else(|| {
                    Error::BadRequest(format!("--header {h:?}: expected `name: value`"))
                })?;
                base = base.header(k.trim(), v.trim());
            }
            // Read every body and check it before the first commit: a refusal commits nothing.
            let files = collect_files(paths, glob.as_deref())?;
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
                let b =
                    std::fs::read(f).map_err(|e| Error::Other(format!("{}: {e}", f.display())))?;
                bodies.push((f.display().to_string(), b));
            }
            if !allow_empty {
                if let Some((name, _)) = bodies.iter().find(|(_, b)| b.is_empty()) {
                    return Err(Error::BadRequest(format!(
                        "{name}: empty body (0 bytes); nothing committed. Pass --allow-empty to commit empty hooks"
                    )));
                }
            }
            let producer = Producer::new(store(&cfg).await?, cfg.commit.max_hook_bytes)
                .with_idempotency_ms(cfg.commit.idempotency_ms);
            if let Some(key) = idempotency_key {
                if bodies.len() * *repeat != 1 {
                    return Err(Error::BadRequest(
                        "--idempotency-key names one hook: give one file (or stdin) and no --repeat".into(),
                    ));
                }
                let mut hook = base.clone().idempotency_key(key.as_str());
                hook.body = bodies.remove(0).1.into();
                let r = producer.commit(tenant, source, hook).await?;
                return if json {
                    json_line(&serde_json::json!({
                        "committed": 1, "first_hook": r.first_hook, "rows_per_hook": r.rows_per_hook
                    }))
                } else {
                    outln!(
                        "committed 1 hooks to {tenant}/{source} (first hook id {}, {} rows each)",
                        r.first_hook,
                        r.rows_per_hook
                    );
                    Ok(())
                };
            }
            let mut n = 0u64;
            let mut first = None;
            let mut rows = 0u32;
            for _ in 0..*repeat {
                for chunk in bodies.chunks(100) {
                    let hooks: Vec<Hook> = chunk
                        .iter()
                        .map(|(_, b)| Hook {
                            body: b.clone().into(),
                            headers: base.headers.clone(),
                            idempotency_key: None,
                        })
                        .collect();
                    let r = producer.commit_many(tenant, source, &hooks).await?;
                    first.get_or_insert(r.first_hook);
                    rows = r.rows_per_hook;
                    n += hooks.len() as u64;
                }
            }
            let warning = (n > 0 && rows == 0).then(|| {
                format!("{tenant}/{source} has no sinks: the hooks were stored and go nowhere")
            });
            if json {
                let mut v = serde_json::json!({
                    "committed": n, "first_hook": first.unwrap_or(0), "rows_per_hook": rows
                });
                if let Some(w) = &warning {
                    v["warning"] = w.clone().into();
                }
                json_line(&v)
            } else {
                outln!(
                    "committed {n} hooks to {tenant}/{source} (first hook id {}, {rows} rows each)",
                    first.unwrap_or(0)
                );
                if let Some(w) = warning {
                    eprintln!("warning: {w}");
                }
                Ok(())
            }
        }
        Cmd::Hooks { cmd } => {
            let cfg = load_config(&cli)?;
            cli_vis::hooks(&store(&cfg).await?, &cfg, cmd, json).await
        }
        Cmd::Rows { cmd } => {
            let cfg = load_config(&cli)?;
            cli_vis::rows(&store(&cfg).await?, cmd, json).await
        }
        Cmd::Tenants { cmd } => {
            let cfg = load_config(&cli)?;
            cli_vis::tenants(&store(&cfg).await?, cmd, json).await
        }
        Cmd::Tick { timeout_ms } => cli_ops::tick(&load_config(&cli)?, *timeout_ms, json).await,
        Cmd::Pressure => cli_ops::pressure(&load_config(&cli)?, json).await,
        Cmd::DeadLetterSource {
            tenant,
            source,
            timeout_ms,
        } => {
            cli_ops::dead_letter_source(&load_config(&cli)?, tenant, source, *timeout_ms, json)
                .await
        }
        Cmd::Reconfigure { admin, token } => {
            cli_ops::reconfigure(&load_config(&cli)?, admin, token.clone(), json).await
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
            cli_ops::stats(&t, json)
        }
        Cmd::Dlq { cmd } => {
            let cfg = load_config(&cli)?;
            let s = store(&cfg).await?;
            match cmd {
                DlqCmd::List { filter, limit } => cli_ops::dlq_list(&s, filter, *limit, json).await,
                DlqCmd::Show { tenant, id } => cli_ops::dlq_show(&s, tenant, id, json).await,
                DlqCmd::Replay {
                    filter,
                    max_lag_ms,
                    batch,
                    limit,
                    max_pause_ms,
                    no_pace,
                } => {
                    let opts = ankusa::dlq::ReplayOptions {
                        max_lag_ms: *max_lag_ms,
                        batch: *batch,
                        limit: *limit,
                        max_pause_ms: *max_pause_ms,
                        pace: !*no_pace,
                    };
                    cli_ops::dlq_replay(&s, filter, &opts, json).await
                }
                DlqCmd::Purge { filter, all } => {
                    cli_ops::dlq_purge(&s, &cfg, filter, *all, json).await
                }
            }
        }
    }
}

/// Print generated text (a completion script, a man page) as is, or with `--json` as
/// `{"<key>": "<text>"}`.
fn emit_text(json: bool, key: &str, text: &[u8]) -> Result<(), Error> {
    let text = String::from_utf8_lossy(text);
    if json {
        json_line(&serde_json::json!({ key: text }))
    } else {
        cli::out::text(&text);
        Ok(())
    }
}

/// `ankusa worker`: serve until a signal (see [`cli::signals`]).
async fn worker(cli: &Cli, name: Option<&str>, listen: Option<&str>) -> Result<(), Error> {
    let mut cfg = load_config(cli)?;
    if let Some(l) = listen {
        cfg.admin.listen = l.to_string();
        cfg.validate()?;
    }
    // A listener beyond loopback needs admin.token (exit 2 naming it).
    cfg.admin.check_exposure()?;
    let handle = ankusa::metrics::install(&cfg.instance);
    ankusa::metrics::describe();
    ankusa::metrics::init_series();
    let listener = tokio::net::TcpListener::bind(&cfg.admin.listen)
        .await
        .map_err(|e| Error::Other(format!("admin.listen {}: {e}", cfg.admin.listen)))?;
    // Signals are taken from here on, so a Ctrl-C while starting is not lost.
    let mut signals = cli::signals::Signals::install()?;
    let worker = Arc::new(Worker::start(cfg.clone(), name).await?);
    let producer = Producer::new(worker.store().clone(), cfg.commit.max_hook_bytes)
        .with_idempotency_ms(cfg.commit.idempotency_ms);
    let stop = tokio_util::sync::CancellationToken::new();
    let reload: ankusa::admin::Reload = {
        let (path, instance) = (cli.config.clone(), cfg.instance.clone());
        Arc::new(move || {
            let mut c = Config::load(path.as_deref())?;
            c.instance = instance.clone();
            Ok(c)
        })
    };
    let st = ankusa::admin::AdminState {
        worker: worker.clone(),
        producer,
        metrics: handle,
        token: cfg.admin.token.clone(),
        ingest_token: cfg.admin.ingest_token.clone(),
        max_body_bytes: cfg.commit.max_hook_bytes,
        request_timeout: std::time::Duration::from_millis(cfg.admin.request_timeout_ms),
        reload: Some(reload.clone()),
    };
    let bound = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let limits = ankusa::admin::ServeLimits::from(&cfg.admin);
    let admin = tokio::spawn(ankusa::admin::serve(listener, st, limits, stop.clone()));
    tracing::info!(listen = %bound, node = worker.node_id(), "admin server up");
    signals
        .until_stop(|| match reload().and_then(|c| worker.reconfigure(&c)) {
            Ok(()) => tracing::info!("SIGHUP: limits reloaded"),
            Err(e) => tracing::error!(error = %e, "SIGHUP: config refused; limits unchanged"),
        })
        .await;
    tracing::info!(
        grace_ms = cfg.leader.shutdown_grace_ms,
        "shutting down: draining running attempts; a second SIGINT/SIGTERM stops at once"
    );
    tokio::spawn(signals.second_stops_at_once());
    // Drain first (the admin server keeps answering /readyz meanwhile), then stop it.
    worker.shutdown().await;
    stop.cancel();
    let _ = admin.await;
    tracing::info!("stopped");
    Ok(())
}

/// `--fail PATH=FRACTION` of `ankusa receiver`; a bad value is a usage error (exit 2).
fn parse_fail(s: &str) -> Result<(String, f64), String> {
    let (path, fraction) = s.split_once('=').ok_or("expected PATH=FRACTION")?;
    let fraction: f64 = fraction
        .parse()
        .map_err(|e| format!("FRACTION {fraction:?}: {e}"))?;
    if !(0.0..=1.0).contains(&fraction) {
        return Err(format!("FRACTION {fraction} is not in 0.0..=1.0"));
    }
    Ok((path.trim_start_matches('/').to_string(), fraction))
}

/// `ankusa receiver`: serve until SIGTERM/SIGINT, logging what arrived every 10 s and then
/// forgetting it, so a long-running demo receiver holds no growing record.
async fn receiver(listen: std::net::SocketAddr, fail: &[(String, f64)]) -> Result<(), Error> {
    use ankusa::testkit::{Behavior, Receiver, ReceiverOptions};
    let rx = Receiver::bind(
        listen,
        ReceiverOptions {
            record_bodies: false,
            threads: 2,
        },
    )
    .map_err(|e| Error::Other(format!("--listen {listen}: {e}")))?;
    for (i, (path, fraction)) in fail.iter().enumerate() {
        rx.set(
            path,
            Behavior::FailFraction {
                status: 503,
                fraction: *fraction,
                seed: i as u64,
            },
        );
    }
    tracing::info!(listen = %rx.addr(), ?fail, "receiver up");
    let mut signals = cli::signals::Signals::install()?;
    let mut every = tokio::time::interval(std::time::Duration::from_secs(10));
    let report = async {
        loop {
            every.tick().await;
            let mut counts: std::collections::BTreeMap<(String, u16), u64> = Default::default();
            for r in rx.take() {
                *counts.entry((r.path, r.status)).or_default() += 1;
            }
            for ((path, status), n) in counts {
                tracing::info!(%path, status, requests = n, "received in the last 10 s");
            }
        }
    };
    tokio::select! {
        _ = signals.until_stop(|| {}) => Ok(()),
        _ = report => Ok(()),
    }
}

/// Whether the raw arguments ask for JSON (for errors raised before clap has parsed them).
fn wants_json(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

#[tokio::main]
async fn main() {
    cli::out::quiet_broken_pipe();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => cli::usage_error(e, wants_json(&args)),
    };
    // Commands other than the worker talk to a person: warnings only, unless ANKUSA_LOG says otherwise.
    let long_running = matches!(cli.cmd, Cmd::Worker { .. } | Cmd::Receiver { .. });
    let default = if long_running {
        "info,fred=warn"
    } else {
        "warn,fred=error"
    };
    // `--json` on a long-running command: its output is its log, so the log is JSON.
    let format = if cli.json && long_running {
        LogFormat::Json
    } else {
        cli.log_format
    };
    init_logs(format, default);
    let json = cli.json;
    let result = run(cli).await;
    cli::out::flush();
    if let Err(e) = result {
        let e = cli::redis_words::plain(e);
        if json {
            outln!("{}", cli_ops::error_json(&e));
            cli::out::flush();
        } else {
            eprintln!("error: {e}");
        }
        std::process::exit(e.exit_code());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command and argument, recursively.
    fn walk(cmd: &clap::Command, path: &str, f: &mut dyn FnMut(&str, &clap::Command)) {
        f(path, cmd);
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), f);
        }
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_positional_is_described_and_no_help_cites_a_spec_id() {
        let spec_id = |s: &str| {
            s.match_indices('R')
                .any(|(i, _)| s[i + 1..].starts_with(|c: char| c.is_ascii_digit()))
        };
        let mut problems = Vec::new();
        walk(&Cli::command(), "ankusa", &mut |path, cmd| {
            for text in [cmd.get_about(), cmd.get_long_about()]
                .into_iter()
                .flatten()
            {
                if spec_id(&text.to_string()) {
                    problems.push(format!("{path}: about cites a spec id: {text}"));
                }
            }
            for arg in cmd.get_arguments() {
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                if arg.is_positional() && help.is_empty() {
                    problems.push(format!("{path}: positional {} has no help", arg.get_id()));
                }
                if spec_id(&help) {
                    problems.push(format!(
                        "{path} --{}: cites a spec id: {help}",
                        arg.get_id()
                    ));
                }
            }
        });
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
