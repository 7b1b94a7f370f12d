//! The `ankusa` command line: worker, producer, sources, dead letters, demo, bench.
//!
//! Exit codes: 0 ok, 1 operation failed, 2 usage or config error, 3 unavailable (Redis
//! unreachable, no leader). With `--json` every command prints one JSON document on stdout,
//! errors included (`{"error": {"code", "message"}}`, argument errors too). Output to a pipe
//! closed early (`ankusa dlq list | head -1`) ends the command quietly with exit 0.

#![forbid(unsafe_code)]

/// `println!` that survives a closed stdout: a broken pipe ends the process with exit 0, any
/// other write error with exit 1 (see [`cli::out`]).
macro_rules! outln {
    ($($t:tt)*) => { $crate::cli::out::line(format_args!($($t)*)) };
}

mod cli;

use clap::Parser;
use cli::args::{Cli, Cmd, LogFormat};
use cli::run::{init_logs, run};
use cli::setup::load_config;

/// The allocator of the binary: mimalloc, with per-thread heaps. Under glibc `malloc` the
/// worker spent ~18 % of its CPU in `malloc`/`free` and their bookkeeping
/// (`malloc_consolidate`, `unlink_chunk`) (profile in BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    // The worker's [telemetry] export is part of the log subscriber, so its config is read
    // first (a config that does not load is reported by the command itself).
    let telemetry = match &cli.cmd {
        Cmd::Worker { .. } => load_config(&cli)
            .ok()
            .map(|c| ankusa::telemetry::Telemetry::start(&c.telemetry)),
        _ => None,
    };
    let (telemetry, refused) = match telemetry {
        Some(Ok(t)) => (t, None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    init_logs(format, default, telemetry.as_ref());
    let json = cli.json;
    let result = match refused {
        Some(e) => Err(e),
        None => run(cli).await,
    };
    if let Some(t) = telemetry {
        // Export the attempt spans still queued.
        t.shutdown().await;
    }
    cli::out::flush();
    if let Err(e) = result {
        let e = cli::redis_words::plain(e);
        if json {
            outln!("{}", cli::ops::error_json(&e));
            cli::out::flush();
        } else {
            eprintln!("error: {e}");
        }
        std::process::exit(e.exit_code());
    }
}
