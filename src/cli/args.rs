//! The clap definition of the `ankusa` command line: global options and every command.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

use super::{ops, vis};

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
pub struct Cli {
    /// Config file (TOML); `ANKUSA_<SECTION>__<KEY>` environment variables override it.
    #[arg(long, short, global = true, env = "ANKUSA_CONFIG", help_heading = GLOBAL)]
    pub config: Option<PathBuf>,
    /// Instance name (the namespace of keys and metrics); overrides the config's `instance`.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub instance: Option<String>,
    /// Redis URL; overrides the config's `redis.url`.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub redis_url: Option<String>,
    /// Log format (logs go to stderr; colours only on a terminal and without NO_COLOR).
    #[arg(
        long,
        global = true,
        default_value = "pretty",
        env = "ANKUSA_LOG_FORMAT",
        help_heading = GLOBAL
    )]
    pub log_format: LogFormat,
    /// Print one JSON document on stdout for scripts (errors too: `{"error": {"code", "message"}}`).
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Subcommand)]
pub enum Cmd {
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
    /// Tenant tokens: mint, list, revoke bearer tokens that reach one tenant by scope.
    Token {
        #[command(subcommand)]
        cmd: TokenCmd,
    },
    /// Mint a short-lived signed link that opens one tenant's portal (/portal/) without a
    /// token; print its URL on the worker's admin address (what `admin.listen` names).
    ///
    /// Signed with a key derived from `admin.token` (required): nothing is stored, any
    /// worker of the pool opens it, changing the token voids every link. With --json:
    /// {"url", "path", "expires_at_ms"}.
    PortalLink {
        /// The tenant whose portal it opens.
        #[arg(long)]
        tenant: String,
        /// How long it opens it: 15m, 1h (at most 24h).
        #[arg(long, default_value = "1h")]
        ttl: String,
        /// The address people reach the worker at, e.g. https://ankusa.example.com
        /// (default: http:// and `admin.listen`).
        #[arg(long)]
        base_url: Option<String>,
        /// Mint it for a tenant that is not set up yet (no source, nothing in the config);
        /// without it such a tenant is refused, so a typo mints nothing.
        #[arg(long)]
        create: bool,
    },
    /// Commit hooks from files, directories of payloads, or stdin.
    Produce(ProduceArgs),
    /// Hooks: show one with its rows and attempts, search the delivery log, resend, erase.
    Hooks {
        #[command(subcommand)]
        cmd: vis::HooksCmd,
    },
    /// The delivery log's store (PostgreSQL, `[log] url`): apply its schema, see each
    /// partition's archiving.
    Log {
        #[command(subcommand)]
        cmd: super::log::LogCmd,
    },
    /// Delivery rows: list a tenant's due, retrying, parked and claimed rows.
    Rows {
        #[command(subcommand)]
        cmd: vis::RowsCmd,
    },
    /// Tenants: the busiest by due rows, with lag and failing sinks.
    Tenants {
        #[command(subcommand)]
        cmd: vis::TenantsCmd,
    },
    /// Block until nothing is claimed, running or due; print the rows settled and what is
    /// still pending.
    ///
    /// Rows waiting out a backoff (a retry, a breaker's or a rate limit's park) are not due,
    /// so tick returns while they wait, and says how many and when the next comes due;
    /// `--all` waits for them too. Needs a live leader: exits 3 at once when no worker holds
    /// the lease.
    Tick {
        /// Give up after this long (exit 3), ms; default: wait as long as it takes.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Wait until nothing is pending at all: rows waiting out a backoff or parked are
        /// delivered or dead-lettered (use with --timeout-ms: a dead sink keeps its rows
        /// until their retry horizon).
        #[arg(long)]
        all: bool,
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
    /// Running totals: hooks committed, scheduled, cancelled; rows delivered, dead-lettered,
    /// dropped.
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
    /// Print a manual page (roff): `ankusa man | man -l -`, `ankusa man dlq replay`; or
    /// write one page per command with `--dir`.
    Man {
        /// The command whose page to print (`dlq replay`); default: the page of ankusa.
        command: Vec<String>,
        /// Write every page (ankusa.1, ankusa-worker.1, ankusa-dlq-replay.1…) into this
        /// directory, e.g. /usr/local/share/man/man1.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
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
pub enum ConfigCmd {
    /// Validate a config file (plus environment overrides); exit 2 naming each bad key.
    Check {
        /// The TOML file to check; default: --config.
        file: Option<PathBuf>,
    },
    /// Print the commented default config (with --json: the defaults as a JSON object).
    Default,
}

#[derive(Subcommand)]
pub enum SourceCmd {
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
    /// Enable a sink entry the leader disabled after `disable_after_ms` of failure: new
    /// hooks make rows for it again (replay its `sink_disabled` dead letters with `ankusa
    /// dlq replay --reason sink_disabled`). Needs no leader.
    Enable {
        /// Tenant id.
        tenant: String,
        /// Source id.
        source: String,
        /// The entry's index in the source's sink list (0-based).
        index: u32,
    },
}

#[derive(Subcommand)]
pub enum DlqCmd {
    /// List dead letters, oldest first per tenant.
    List {
        #[command(flatten)]
        filter: ops::FilterArgs,
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
        filter: ops::FilterArgs,
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
        /// Replay nothing: print how many dead letters the filter selects and the first few.
        #[arg(long)]
        dry_run: bool,
    },
    /// Delete dead letters and the hook bodies only they keep. With no filter and no
    /// --all: apply the retention of [dlq] (max_age_ms, max_per_tenant).
    Purge {
        #[command(flatten)]
        filter: ops::FilterArgs,
        /// Delete every dead letter (of --tenant, if given). Asks for confirmation on a
        /// terminal; elsewhere (a script, CI) it needs --yes.
        #[arg(long)]
        all: bool,
        /// Do not ask for confirmation of --all.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

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

/// The arguments of `ankusa produce`.
#[derive(clap::Args, Debug, Clone)]
pub struct ProduceArgs {
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// Payload files or directories (every regular file inside, or those matching
    /// --glob); none or `-` reads stdin.
    pub paths: Vec<PathBuf>,
    /// Header `name: value` to send with every hook (repeatable).
    #[arg(long = "header", short = 'H')]
    pub headers: Vec<String>,
    /// Commit each file this many times.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// In directories, commit only the files matching this pattern (`*.json`,
    /// `**/*.json` to descend).
    #[arg(long)]
    pub glob: Option<String>,
    /// Commit empty bodies too (refused by default: an empty stdin is usually a mistake).
    #[arg(long)]
    pub allow_empty: bool,
    /// Producer idempotency key of the one hook committed: a repeat within
    /// `commit.idempotency_ms` prints the first hook's id and writes nothing.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Event type of every hook committed (`push`, `pull_request.opened`): what the
    /// source's event filters match (docs/sinks.md "Per-entry policy").
    #[arg(long)]
    pub event_type: Option<String>,
    /// Deliver every hook this long after the commit, not before: milliseconds or a
    /// duration (`4s`, `15m`, `2h`); at most `commit.max_delay_ms`. `ankusa hooks cancel`
    /// cancels a hook until then.
    #[arg(long, conflicts_with = "deliver_at")]
    pub delay: Option<String>,
    /// Deliver every hook at this time, not before: RFC 3339 (`2026-12-24T18:00:00Z`,
    /// `…+01:00`) or milliseconds since the Unix epoch; a time past is delivered now.
    #[arg(long)]
    pub deliver_at: Option<String>,
}

/// `ankusa token …`.
#[derive(clap::Subcommand)]
pub enum TokenCmd {
    /// Mint a token that reaches one tenant's resources by scope; print it once (only its
    /// SHA-256 is stored).
    ///
    /// The token alone goes to stdout (`TOKEN=$(ankusa token create --tenant acme)`), what
    /// it is to stderr; with --json: {"token", "id", "tenant", "scopes", "name",
    /// "created_at_ms", "expires_at_ms"}.
    Create {
        /// The tenant it reaches.
        #[arg(long)]
        tenant: String,
        /// What it may do there, comma-separated: ingest (commit hooks), read (hooks, rows,
        /// dead letters), sources (the tenant's sources), replay (resend, replay).
        #[arg(long, default_value = "ingest")]
        scopes: String,
        /// How long it lives: 30d, 12h, 90m (at most 3650d).
        #[arg(long, default_value = "90d")]
        ttl: String,
        /// A label for people (at most 100 characters).
        #[arg(long)]
        name: Option<String>,
        /// Mint it for a tenant that is not set up yet (no source, nothing in the config);
        /// without it such a tenant is refused, so a typo mints nothing.
        #[arg(long)]
        create: bool,
    },
    /// List live tokens: id, tenant, scopes, name, expiry (never a token).
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a token by id: every worker refuses it within 5 s.
    Revoke {
        /// The token's id (16 hex digits, from `token list` or `token create`).
        id: String,
    },
}

/// `--fail PATH=FRACTION` of `ankusa receiver`; a bad value is a usage error (exit 2).
pub fn parse_fail(s: &str) -> Result<(String, f64), String> {
    let (path, fraction) = s.split_once('=').ok_or("expected PATH=FRACTION")?;
    let fraction: f64 = fraction
        .parse()
        .map_err(|e| format!("FRACTION {fraction:?}: {e}"))?;
    if !(0.0..=1.0).contains(&fraction) {
        return Err(format!("FRACTION {fraction} is not in 0.0..=1.0"));
    }
    Ok((path.trim_start_matches('/').to_string(), fraction))
}
