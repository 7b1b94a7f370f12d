//! Standard output for commands whose output is often piped into `head`, `grep -m1` or `jq`:
//! when the reader goes away, the command ends quietly with exit 0 instead of panicking
//! (`failed printing to stdout: Broken pipe`, exit 101) as `println!` does.

use ankusa::Error;
use std::io::Write;

/// Write one line (`args` and a newline) to stdout; see [`gone`] for write errors.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.write_all(b"\n")) {
        gone(e)
    }
}

/// Write `text` to stdout as is (no newline added).
pub fn text(text: &str) {
    if let Err(e) = std::io::stdout().lock().write_all(text.as_bytes()) {
        gone(e)
    }
}

/// Flush stdout (before exiting with `std::process::exit`, which does not).
pub fn flush() {
    if let Err(e) = std::io::stdout().lock().flush() {
        gone(e)
    }
}

/// A write to stdout failed: a closed pipe is a reader that has seen enough (exit 0); any
/// other error (a full disk) is reported on stderr with exit 1.
fn gone(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0)
    }
    eprintln!("error: writing to stdout: {e}");
    std::process::exit(1)
}

/// Library code that prints with `println!` (the demo's summary) panics on a closed pipe;
/// this panic hook turns exactly that panic into a quiet exit 0 and leaves every other panic
/// to the default hook.
pub fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0)
        }
        default(info)
    }));
}

/// Print `value` as one JSON line.
pub fn json_line<T: serde::Serialize>(value: &T) -> Result<(), Error> {
    outln!(
        "{}",
        serde_json::to_string(value).map_err(|e| Error::Other(e.to_string()))?
    );
    Ok(())
}

/// Print generated text (a completion script, a man page) as is, or with `--json` as
/// `{"<key>": "<text>"}`.
pub fn emit_text(json: bool, key: &str, text: &[u8]) -> Result<(), Error> {
    let text = String::from_utf8_lossy(text);
    if json {
        json_line(&serde_json::json!({ key: text }))
    } else {
        self::text(&text);
        Ok(())
    }
}
