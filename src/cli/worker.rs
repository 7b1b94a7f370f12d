//! `ankusa worker` and `ankusa receiver`: the long-running commands.

use super::args::Cli;
use super::setup::load_config;
use ankusa::config::Config;
use ankusa::{Error, Producer, Worker};
use std::sync::Arc;

/// `ankusa worker`: serve until a signal (see [`crate::cli::signals`]).
pub async fn worker(cli: &Cli, name: Option<&str>, listen: Option<&str>) -> Result<(), Error> {
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
    ankusa::metrics::init_partition_series(cfg.partitions);
    let listener = tokio::net::TcpListener::bind(&cfg.admin.listen)
        .await
        .map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    ": another process (a second worker on this host?) listens there; give each \
                     worker its own address with `ankusa worker --listen 127.0.0.1:<port>` or \
                     ANKUSA_ADMIN__LISTEN"
                }
                _ => "",
            };
            Error::Other(format!("admin.listen {}: {e}{hint}", cfg.admin.listen))
        })?;
    // Signals are taken from here on, so a Ctrl-C while starting is not lost.
    let mut signals = crate::cli::signals::Signals::install()?;
    // Worker::start may wait for Redis (redis.startup_wait_ms): a stop meanwhile ends it.
    let worker = tokio::select! {
        w = Worker::start(cfg.clone(), name) => Arc::new(w?),
        _ = signals.until_stop(|| {}) => {
            tracing::info!("stopped before the worker started");
            return Ok(());
        }
    };
    // Ingest holds each tenant to its quota.
    let producer = Producer::new(worker.store().clone(), cfg.commit.max_hook_bytes)
        .with_idempotency_ms(cfg.commit.idempotency_ms)
        .with_quotas(Arc::new(ankusa::config::SourcePolicy::from_config(&cfg)));
    let stop = tokio_util::sync::CancellationToken::new();
    let reload: ankusa::admin::Reload = {
        let (path, instance) = (cli.config.clone(), cfg.instance.clone());
        Arc::new(move || {
            let mut c =
                Config::load_checked(path.as_deref(), ankusa::sinks::registry::config_problems)?;
            c.instance = instance.clone();
            Ok(c)
        })
    };
    let st = ankusa::admin::AdminState::new(
        worker.clone(),
        producer,
        handle,
        &cfg,
        Some(reload.clone()),
    );
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

/// `ankusa receiver`: serve until SIGTERM/SIGINT, logging what arrived every 10 s and then
/// forgetting it, so a long-running demo receiver holds no growing record.
pub async fn receiver(listen: std::net::SocketAddr, fail: &[(String, f64)]) -> Result<(), Error> {
    use ankusa::testkit::{Behavior, Receiver, ReceiverOptions};
    let behaviors = fail
        .iter()
        .enumerate()
        .map(|(i, (path, fraction))| {
            let behavior = Behavior::FailFraction {
                status: 503,
                fraction: *fraction,
                seed: i as u64,
            };
            (path.clone(), behavior)
        })
        .collect();
    let rx = Receiver::bind_with(
        listen,
        ReceiverOptions {
            record_bodies: false,
            threads: 2,
        },
        behaviors,
    )
    .map_err(|e| Error::Other(format!("--listen {listen}: {e}")))?;
    tracing::info!(listen = %rx.addr(), ?fail, "receiver up");
    let mut signals = crate::cli::signals::Signals::install()?;
    let mut every = tokio::time::interval(std::time::Duration::from_secs(10));
    let report = async {
        loop {
            every.tick().await;
            let mut counts: std::collections::BTreeMap<(String, u16), u64> = Default::default();
            for r in rx.take() {
                *counts.entry((r.path, r.status)).or_default() += 1;
            }
            for ((path, status), n) in counts {
                tracing::info!(target: "ankusa::receiver", %path, status, requests = n, "received in the last 10 s");
            }
        }
    };
    tokio::select! {
        _ = signals.until_stop(|| {}) => Ok(()),
        _ = report => Ok(()),
    }
}
