//! Plumbing of the `ankusa` command line shared by every command: stdout that survives a
//! closed pipe ([`out`]), Redis errors in plain words ([`redis_words`]), signals
//! ([`signals`]) and argument errors as JSON ([`usage_error`]).

pub mod args;
pub mod human;
pub mod log;
pub mod man;
pub mod ops;
pub mod out;
pub mod produce;
pub mod redis_words;
pub mod run;
pub mod setup;
pub mod signals;
pub mod sources;
pub mod token;
pub mod vis;
pub mod worker;

/// End the process on a clap error: help and version as clap prints them (exit 0); an
/// argument error as clap prints it on stderr, or with `--json` as
/// `{"error": {"code": "usage", "message"}}` on stdout; exit 2 either way.
pub fn usage_error(e: clap::Error, json: bool) -> ! {
    use clap::error::ErrorKind;
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if !json || informational {
        e.exit();
    }
    let message = e.render().to_string();
    let message = message
        .trim()
        .trim_start_matches("error: ")
        .trim()
        .to_string();
    outln!(
        "{}",
        serde_json::json!({"error": {"code": "usage", "message": message}})
    );
    out::flush();
    std::process::exit(2)
}
