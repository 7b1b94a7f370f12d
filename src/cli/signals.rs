//! Signals of the long-running commands (`worker`, `receiver`): the first SIGTERM or SIGINT
//! stops gracefully, a second one stops at once; SIGHUP is handed to the command.

use ankusa::Error;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// SIGTERM, SIGINT and SIGHUP, taken over from their default actions while this lives.
pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// Take the three signals over. Errors: the handlers cannot be installed.
    pub fn install() -> Result<Signals, Error> {
        let install = |k| signal(k).map_err(|e| Error::Other(format!("signal handler: {e}")));
        Ok(Signals {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// Wait for the first SIGTERM or SIGINT, calling `on_hup` for each SIGHUP meanwhile.
    pub async fn until_stop(&mut self, mut on_hup: impl FnMut()) {
        loop {
            tokio::select! {
                _ = self.term.recv() => return,
                _ = self.int.recv() => return,
                _ = self.hup.recv() => on_hup(),
            }
        }
    }

    /// After the first stop signal: a second SIGTERM or SIGINT ends the process at once with
    /// exit 130, without waiting out `leader.shutdown_grace_ms`. Nothing is lost: the rows this
    /// process still has claimed come due again when the next leader takes over, exactly as
    /// after a kill.
    pub async fn second_stops_at_once(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
        tracing::warn!(
            "second stop signal: stopping now; claimed rows come due again at the next takeover"
        );
        std::process::exit(130)
    }
}
