//! The progress bar a long command draws on stderr, and the log lines written around it.
//!
//! A log line written to stderr while `indicatif` draws a bar there lands in the middle of
//! the bar's line and leaves a torn bar behind it (the demo's `WARN` lines did). A bar made
//! with [`shown`] is remembered here, and [`Stderr`] — the log's writer — clears it, writes
//! the line and draws it again (`ProgressBar::suspend`).

use std::io::Write;
use std::sync::Mutex;

/// The bar now on stderr, held weakly: once its owner drops it, lines are written plainly.
static SHOWN: Mutex<Option<indicatif::WeakProgressBar>> = Mutex::new(None);

/// Remember `bar` as the one on stderr (the last one shown wins) and return it.
pub fn shown(bar: indicatif::ProgressBar) -> indicatif::ProgressBar {
    if let Ok(mut shown) = SHOWN.lock() {
        *shown = Some(bar.downgrade());
    }
    bar
}

/// The log's writer: stderr, around the bar [`shown`] last, if it is still alive.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The fmt layer writes each event in one `write_all`, so a line is written whole.
        let bar = SHOWN
            .lock()
            .ok()
            .and_then(|s| s.as_ref().and_then(indicatif::WeakProgressBar::upgrade));
        match bar {
            Some(bar) => bar.suspend(|| std::io::stderr().write(buf)),
            None => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Stderr;

    fn make_writer(&'a self) -> Self::Writer {
        Stderr
    }
}
