//! `ankusa man`: the manual pages, one per command (`ankusa(1)`, `ankusa-worker(1)`,
//! `ankusa-dlq-replay(1)`…), generated from the clap definition by `clap_mangen`, each with
//! the EXIT STATUS and ENVIRONMENT every command shares.

use super::args::Cli;
use ankusa::Error;
use clap::CommandFactory;
use std::path::Path;

/// The exit statuses of every command: `(status, meaning)`.
const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Success."),
    (
        "1",
        "The operation failed: no such dead letter, a refused commit, a hook not resent.",
    ),
    (
        "2",
        "Usage or config error: a bad flag or argument, an invalid config (each bad key named), \
         a bad filter, a wrong admin token.",
    ),
    (
        "3",
        "Unavailable: Redis does not answer, no live leader, a deadline passed, a worker's \
         admin API unreachable.",
    ),
    (
        "130",
        "worker: a second SIGINT or SIGTERM stopped the drain at once.",
    ),
];

/// The environment every command reads: `(variable, meaning)`.
const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "ANKUSA_CONFIG",
        "The config file (TOML), as --config gives it.",
    ),
    (
        "ANKUSA_<SECTION>__<KEY>",
        "Overrides one key of the config, a double underscore nesting: \
         ANKUSA_REDIS__URL=redis://host:6379, ANKUSA_DISPATCH__CONCURRENCY=64. A misspelt \
         key of a real section is refused naming it; other ANKUSA_* variables are ignored.",
    ),
    (
        "ANKUSA_INSTANCE",
        "The instance name, as the config's instance.",
    ),
    (
        "ANKUSA_LOG",
        "The log filter in RUST_LOG syntax (RUST_LOG is read when it is unset): \
         info,fred=warn for the worker, warn for other commands.",
    ),
    (
        "ANKUSA_LOG_FORMAT",
        "pretty (default) or json, as --log-format.",
    ),
    (
        "ANKUSA_SECRET_*",
        "Secrets that sink options name as ${env:ANKUSA_SECRET_<TENANT>__...}, each tenant \
         only its own (the prefix is secrets.env_prefix); read by the worker at attempt time.",
    ),
    (
        "NO_COLOR",
        "Any value but empty turns colours off in logs (they are on only on a terminal).",
    ),
];

/// Escape text for roff: backslashes, and a leading dot or quote that would read as a request.
fn roff_text(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// The sections clap_mangen does not make: EXIT STATUS, ENVIRONMENT, and SEE ALSO on a
/// subcommand's page.
fn shared_sections(name: &str) -> String {
    let mut out = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in EXIT_STATUS {
        out.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", roff_text(meaning)));
    }
    out.push_str(".SH ENVIRONMENT\n");
    for (var, meaning) in ENVIRONMENT {
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            roff_text(var),
            roff_text(meaning)
        ));
    }
    if name != "ankusa" {
        out.push_str(".SH \"SEE ALSO\"\n\\fBankusa\\fR(1)\n");
    }
    out
}

/// One page: clap_mangen's sections of `cmd` (built, so its name is `ankusa-dlq-replay`),
/// then the shared ones.
fn page(cmd: &clap::Command) -> Result<(String, Vec<u8>), Error> {
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut buf = Vec::new();
    let io = |e: std::io::Error| Error::Other(format!("man page {name}: {e}"));
    man.render_title(&mut buf).map_err(io)?;
    man.render_name_section(&mut buf).map_err(io)?;
    man.render_synopsis_section(&mut buf).map_err(io)?;
    man.render_description_section(&mut buf).map_err(io)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut buf).map_err(io)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut buf).map_err(io)?;
    }
    buf.extend_from_slice(shared_sections(&name).as_bytes());
    if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
        man.render_extra_section(&mut buf).map_err(io)?;
    }
    if cmd.get_version().is_some() {
        man.render_version_section(&mut buf).map_err(io)?;
    }
    Ok((format!("{name}.1"), buf))
}

/// Every page: `ankusa.1` and one per command and subcommand, by file name.
pub fn pages() -> Result<Vec<(String, Vec<u8>)>, Error> {
    fn walk(cmd: &clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> Result<(), Error> {
        out.push(page(cmd)?);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, out)?;
        }
        Ok(())
    }
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    walk(&cmd, &mut out)?;
    Ok(out)
}

/// `ankusa man [COMMAND…] [--dir DIR]`: print the page of `ankusa` or of the command named
/// (`ankusa man dlq replay`), or write every page into `dir`.
pub fn man(words: &[String], dir: Option<&Path>, json: bool) -> Result<(), Error> {
    let pages = pages()?;
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::BadRequest(format!("--dir {}: {e}", dir.display())))?;
        let mut written = Vec::new();
        for (file, roff) in &pages {
            let path = dir.join(file);
            std::fs::write(&path, roff)
                .map_err(|e| Error::BadRequest(format!("{}: {e}", path.display())))?;
            written.push(path.display().to_string());
        }
        if json {
            return super::out::json_line(&serde_json::json!({ "written": written }));
        }
        outln!(
            "wrote {} into {} (read one with `man {}/ankusa.1`)",
            super::human::count(written.len() as u64, "page", "pages"),
            dir.display(),
            dir.display()
        );
        return Ok(());
    }
    let want = std::iter::once("ankusa")
        .chain(words.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("-");
    let Some((_, roff)) = pages.iter().find(|(f, _)| *f == format!("{want}.1")) else {
        return Err(Error::BadRequest(format!(
            "no manual page for `{}`: `ankusa --help` lists the commands",
            want.replace('-', " ")
        )));
    };
    super::out::emit_text(json, "man", roff)
}
