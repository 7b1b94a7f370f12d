//! The `ankusa` command line: worker, producer, sources, dead letters, demo, bench.
//! Exit codes: 0 ok, 1 operation failed, 2 usage or config error, 3 unavailable.

use ankusa::config::Config;
use ankusa::model::SourceSpec;
use ankusa::store::Store;
use ankusa::{Error, Hook, Producer, Worker};
use clap::{Parser, Subcommand};

mod cli_ops;
mod cli_vis;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "ankusa",
    version,
    about = "Redis-backed distributed webhook and event delivery worker"
)]
struct Cli {
    /// Config file (TOML); `ANKUSA_<SECTION>__<KEY>` environment variables override it.
    #[arg(long, short, global = true, env = "ANKUSA_CONFIG")]
    config: Option<PathBuf>,
    /// Instance name (R29); overrides the config's `instance`.
    #[arg(long, global = true)]
    instance: Option<String>,
    /// Redis URL; overrides the config's `redis.url`.
    #[arg(long, global = true)]
    redis_url: Option<String>,
    /// Log format.
    #[arg(
        long,
        global = true,
        default_value = "pretty",
        env = "ANKUSA_LOG_FORMAT"
    )]
    log_format: LogFormat,
    /// Print JSON for scripts (errors too: `{"error": {"code", "message"}}` on stdout).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Pretty,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a worker: elect, lead or stand by, serve /metrics and the admin API.
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
    /// Commit hooks from files, a directory of payloads, or stdin.
    Produce {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source: String,
        /// Files or directories (every regular file inside); none or `-` reads stdin.
        paths: Vec<PathBuf>,
        /// Header `name: value` to send with every hook (repeatable).
        #[arg(long = "header", short = 'H')]
        headers: Vec<String>,
        /// Commit each file this many times.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
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
    /// Block until nothing is claimed, running or due; print the rows settled (R23).
    Tick {
        /// Give up after this long (exit 3), ms; default: wait as long as it takes.
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
    /// Spare capacity for replay jobs: lag of the oldest due row and window state (R21);
    /// exit 3 when no leader is live.
    Pressure,
    /// Dead-letter every pending row of a source as source_gone(SOURCE); print the count (R20).
    DeadLetterSource {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source: String,
        /// Deadline of the whole call, ms (exit 3 past it; calling again finishes the walk).
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Make running workers re-read their config file and take the new dispatch limits (R22).
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
    /// Running totals: committed, delivered, dead-lettered, dropped.
    Stats,
    /// Dead letters.
    Dlq {
        #[command(subcommand)]
        cmd: DlqCmd,
    },
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
    /// Validate FILE (plus environment overrides); exit 2 naming each bad key (R24).
    Check { file: Option<PathBuf> },
    /// Print the commented default config.
    Default,
}

#[derive(Subcommand)]
enum SourceCmd {
    /// Register or replace a source from a JSON or TOML file: `{"sinks": [{"module": "http", "opts": {"url": …}}]}`.
    Put {
        tenant: String,
        source: String,
        file: PathBuf,
    },
    /// Print a source's spec as JSON.
    Get { tenant: String, source: String },
    /// List sources.
    List,
    /// Delete a source; its pending rows are dead-lettered `source_gone` when claimed.
    Delete { tenant: String, source: String },
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
    let filter = tracing_subscriber::EnvFilter::try_from_env("ANKUSA_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
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
    Ok(cfg)
}

async fn store(cfg: &Config) -> Result<Store, Error> {
    Ok(Store::connect(&cfg.redis.url, &cfg.instance, cfg.redis.command_timeout_ms).await?)
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

fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| Error::Other(format!("{}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            entries.sort();
            out.extend(entries);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

async fn run(cli: Cli) -> Result<(), Error> {
    match &cli.cmd {
        Cmd::Config {
            cmd: ConfigCmd::Default,
        } => {
            print!("{}", ankusa::config::DEFAULT_CONFIG_TOML);
            Ok(())
        }
        Cmd::Config {
            cmd: ConfigCmd::Check { file },
        } => {
            let mut cfg = Config::load(file.as_deref().or(cli.config.as_deref()))?;
            if let Some(i) = &cli.instance {
                cfg.instance = i.clone();
            }
            cfg.validate()?;
            if cli.json {
                println!("{}", serde_json::json!({"ok": true}));
            } else {
                print!("{}", cfg.redacted_toml());
                eprintln!("config ok");
            }
            Ok(())
        }
        Cmd::Demo(args) => ankusa::demo::run(args.clone()).await.map(|_| ()),
        Cmd::Bench(args) => ankusa::bench::run(args.clone()).await,
        Cmd::Receiver { listen, fail } => receiver(*listen, fail).await,
        Cmd::Worker { name, listen } => {
            let mut cfg = load_config(&cli)?;
            if let Some(l) = listen {
                cfg.admin.listen = l.clone();
            }
            let handle = ankusa::metrics::install(&cfg.instance);
            ankusa::metrics::describe();
            ankusa::metrics::init_series();
            let listener = tokio::net::TcpListener::bind(&cfg.admin.listen)
                .await
                .map_err(|e| Error::Other(format!("admin.listen {}: {e}", cfg.admin.listen)))?;
            let worker = Arc::new(Worker::start(cfg.clone(), name.as_deref()).await?);
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
                reload: Some(reload.clone()),
            };
            let bound = listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let loopback = listener
                .local_addr()
                .map(|a| a.ip().is_loopback())
                .unwrap_or(true);
            let admin = tokio::spawn(ankusa::admin::serve(listener, st, stop.clone()));
            tracing::info!(listen = %bound, node = worker.node_id(), "admin server up");
            if !loopback && cfg.admin.token.is_none() {
                tracing::warn!(listen = %bound, "the admin API is reachable beyond loopback without a token: set admin.token");
            }
            wait_for_signal(&worker, &reload).await;
            tracing::info!("shutting down");
            // Drain first (the admin server keeps answering /readyz meanwhile), then stop it.
            worker.shutdown().await;
            stop.cancel();
            let _ = admin.await;
            tracing::info!("stopped");
            Ok(())
        }
        Cmd::Source { cmd } => {
            let cfg = load_config(&cli)?;
            let s = store(&cfg).await?;
            match cmd {
                SourceCmd::Put {
                    tenant,
                    source,
                    file,
                } => {
                    let spec = read_spec(file)?;
                    let v = s.put_source(tenant, source, &spec).await?;
                    println!(
                        "source {tenant}/{source} stored (version {v}, {} sinks)",
                        spec.sinks.len()
                    );
                }
                SourceCmd::Get { tenant, source } => match s.get_source(tenant, source).await? {
                    Some(spec) => println!(
                        "{}",
                        serde_json::to_string_pretty(&spec).unwrap_or_default()
                    ),
                    None => return Err(Error::Other(format!("no source {tenant}/{source}"))),
                },
                SourceCmd::List => {
                    for (t, so) in s.list_sources().await? {
                        println!("{t}/{so}");
                    }
                }
                SourceCmd::Delete { tenant, source } => {
                    if s.delete_source(tenant, source).await? {
                        println!("source {tenant}/{source} deleted; its pending rows are dead-lettered source_gone({source}) as they come due");
                    } else {
                        return Err(Error::Other(format!("no source {tenant}/{source}")));
                    }
                }
            }
            Ok(())
        }
        Cmd::Produce {
            tenant,
            source,
            paths,
            headers,
            repeat,
            idempotency_key,
        } => {
            let cfg = load_config(&cli)?;
            let producer = Producer::new(store(&cfg).await?, cfg.commit.max_hook_bytes)
                .with_idempotency_ms(cfg.commit.idempotency_ms);
            let mut base = Hook::default();
            for h in headers {
                let (k, v) = h.split_once(':').ok_or_else(|| {
                    Error::Other(format!("--header {h:?}: expected `name: value`"))
                })?;
                base = base.header(k.trim(), v.trim());
            }
            let files = collect_files(paths)?;
            let mut bodies: Vec<Vec<u8>> = Vec::new();
            if files.is_empty() || files.iter().any(|f| f.as_os_str() == "-") {
                use std::io::Read;
                let mut buf = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut buf)
                    .map_err(|e| Error::Other(format!("stdin: {e}")))?;
                bodies.push(buf);
            }
            for f in files.iter().filter(|f| f.as_os_str() != "-") {
                bodies.push(
                    std::fs::read(f).map_err(|e| Error::Other(format!("{}: {e}", f.display())))?,
                );
            }
            if let Some(key) = idempotency_key {
                if bodies.len() * *repeat != 1 {
                    return Err(Error::BadRequest(
                        "--idempotency-key names one hook: give one file (or stdin) and no --repeat".into(),
                    ));
                }
                let mut hook = base.clone().idempotency_key(key.as_str());
                hook.body = bodies.remove(0).into();
                let r = producer.commit(tenant, source, hook).await?;
                println!(
                    "committed 1 hooks to {tenant}/{source} (first hook id {})",
                    r.first_hook
                );
                return Ok(());
            }
            let mut n = 0u64;
            let mut first = None;
            for _ in 0..*repeat {
                for chunk in bodies.chunks(100) {
                    let hooks: Vec<Hook> = chunk
                        .iter()
                        .map(|b| Hook {
                            body: b.clone().into(),
                            headers: base.headers.clone(),
                            idempotency_key: None,
                        })
                        .collect();
                    let r = producer.commit_many(tenant, source, &hooks).await?;
                    first.get_or_insert(r.first_hook);
                    n += hooks.len() as u64;
                }
            }
            println!(
                "committed {n} hooks to {tenant}/{source} (first hook id {})",
                first.unwrap_or(0)
            );
            Ok(())
        }
        Cmd::Hooks { cmd } => {
            let cfg = load_config(&cli)?;
            cli_vis::hooks(&store(&cfg).await?, &cfg, cmd, cli.json).await
        }
        Cmd::Rows { cmd } => {
            let cfg = load_config(&cli)?;
            cli_vis::rows(&store(&cfg).await?, cmd, cli.json).await
        }
        Cmd::Tenants { cmd } => {
            let cfg = load_config(&cli)?;
            cli_vis::tenants(&store(&cfg).await?, cmd, cli.json).await
        }
        Cmd::Tick { timeout_ms } => cli_ops::tick(&load_config(&cli)?, *timeout_ms, cli.json).await,
        Cmd::Pressure => cli_ops::pressure(&load_config(&cli)?, cli.json).await,
        Cmd::DeadLetterSource {
            tenant,
            source,
            timeout_ms,
        } => {
            cli_ops::dead_letter_source(&load_config(&cli)?, tenant, source, *timeout_ms, cli.json)
                .await
        }
        Cmd::Reconfigure { admin, token } => {
            cli_ops::reconfigure(&load_config(&cli)?, admin, token.clone(), cli.json).await
        }
        Cmd::Openapi => {
            let doc = ankusa::admin::openapi();
            println!(
                "{}",
                serde_json::to_string_pretty(&doc).map_err(|e| Error::Other(e.to_string()))?
            );
            Ok(())
        }
        Cmd::Stats => {
            let cfg = load_config(&cli)?;
            let s = store(&cfg).await?;
            println!(
                "{}",
                serde_json::to_string(&s.totals().await?).unwrap_or_default()
            );
            Ok(())
        }
        Cmd::Dlq { cmd } => {
            let cfg = load_config(&cli)?;
            let s = store(&cfg).await?;
            match cmd {
                DlqCmd::List { filter, limit } => {
                    cli_ops::dlq_list(&s, filter, *limit, cli.json).await
                }
                DlqCmd::Show { tenant, id } => cli_ops::dlq_show(&s, tenant, id).await,
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
                    cli_ops::dlq_replay(&s, filter, &opts, cli.json).await
                }
                DlqCmd::Purge { filter, all } => {
                    cli_ops::dlq_purge(&s, &cfg, filter, *all, cli.json).await
                }
            }
        }
    }
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
    use tokio::signal::unix::{signal, SignalKind};
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
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return Err(Error::Other("cannot install signal handlers".into()));
    };
    let mut every = tokio::time::interval(std::time::Duration::from_secs(10));
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = every.tick() => {
                let mut counts: std::collections::BTreeMap<(String, u16), u64> = Default::default();
                for r in rx.take() {
                    *counts.entry((r.path, r.status)).or_default() += 1;
                }
                for ((path, status), n) in counts {
                    tracing::info!(%path, status, requests = n, "received in the last 10 s");
                }
            }
        }
    }
}

/// SIGTERM/SIGINT end the worker gracefully; SIGHUP re-reads the config file and takes the
/// new limits (R22), like `POST /admin/reconfigure`.
async fn wait_for_signal(worker: &Worker, reload: &ankusa::admin::Reload) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = hup.recv() => {
                match reload().and_then(|c| worker.reconfigure(&c)) {
                    Ok(()) => tracing::info!("SIGHUP: limits reloaded"),
                    Err(e) => tracing::error!(error = %e, "SIGHUP: config refused; limits unchanged"),
                }
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    // Commands other than the worker talk to a person: warnings only, unless ANKUSA_LOG says otherwise.
    let default = if matches!(cli.cmd, Cmd::Worker { .. } | Cmd::Receiver { .. }) {
        "info,fred=warn"
    } else {
        "warn,fred=error"
    };
    init_logs(cli.log_format, default);
    let json = cli.json;
    if let Err(e) = run(cli).await {
        if json {
            println!("{}", cli_ops::error_json(&e));
        } else {
            eprintln!("error: {e}");
        }
        std::process::exit(e.exit_code());
    }
}
