//! Prometheus metrics. Names, types, units and labels are catalogued in
//! `docs/metrics.md`; `tests/observability/` keeps this file, the catalogue, the
//! dashboards in `grafana/` and the alert rules in `prometheus/` in step.
//!
//! Every series carries the pipeline's instance name (the config's `instance`) as the global label
//! `ankusa_instance`. It is not called `instance`: Prometheus attaches `instance` (the
//! scraped `host:port`) to every target and would rename ours to `exported_instance`;
//! with both labels each worker of a pool stays a series of its own.

use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// The global label that names the instance on every series (the config's `instance`).
pub const INSTANCE_LABEL: &str = "ankusa_instance";

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The standard `process_*` metrics of the Prometheus client libraries (CPU seconds, resident
/// and virtual memory, open and maximum file descriptors, threads, start time), read from
/// `/proc` by the `metrics-process` crate; [`collect_process`] refreshes them.
static PROCESS: OnceLock<metrics_process::Collector> = OnceLock::new();

/// Refresh the `process_*` gauges and counter: call before rendering a scrape. A no-op before
/// [`describe`].
pub fn collect_process() {
    if let Some(c) = PROCESS.get() {
        c.collect();
    }
}

/// Install the process-wide recorder once (later calls return the first handle).
/// `None` when another recorder was installed first.
pub fn install(instance: &str) -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let seconds = [
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0, 300.0,
            ];
            PrometheusBuilder::new()
                .add_global_label(INSTANCE_LABEL, instance)
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("ankusa_scan_rows".into()),
                        &[0.0, 1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 5000.0],
                    )
                })
                .ok()?
                .install_recorder()
                .ok()
        })
        .clone()
}

/// What a metric is, for its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (`_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets (`_seconds`, `_bytes`, `_rows`).
    Histogram,
}

/// One metric of the catalogue (`docs/metrics.md` lists the same names, types and labels).
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// The exported name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its unit, when it has one (seconds, bytes).
    pub unit: Option<Unit>,
    /// Whether [`init_series`] creates its unlabelled series at 0 before its first event.
    /// Never for a metric that is always labelled: an unlabelled series beside the labelled
    /// ones would stay at 0 for ever and mislead every `max()` and `sum()` over it.
    pub zero: bool,
    /// The `# HELP` text.
    pub help: &'static str,
}

/// Every metric ankusa describes, in the order `/metrics` describes them: one table feeding
/// [`describe`] and [`init_series`]. Some are described before their code emits them (a
/// description alone exports nothing); `docs/metrics.md` gives each one's status.
pub const CATALOGUE: &[Metric] = &[
    Metric {
        name: "ankusa_build_info",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Always 1; the `version` label is this build's crate version.",
    },
    Metric {
        name: "ankusa_hooks_committed_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Hooks committed by this process (ingest endpoint; a library Producer under a recorder).",
    },
    Metric {
        name: "ankusa_rows_delivered_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Rows delivered (a successful attempt), by sink module.",
    },
    Metric {
        name: "ankusa_rows_dead_lettered_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Rows dead-lettered, by reason kind.",
    },
    Metric {
        name: "ankusa_commits_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Deprecated (removed in the next release): ankusa_hooks_committed_total.",
    },
    Metric {
        name: "ankusa_admin_connections_refused_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Admin/ingest connections closed at accept because admin.max_connections were open, or the client address held admin.max_connections_per_client.",
    },
    Metric {
        name: "ankusa_deliveries_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Attempt outcomes by sink module: delivered, retry, dead_lettered, parked.",
    },
    Metric {
        name: "ankusa_attempt_duration_seconds",
        kind: Kind::Histogram,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "Duration of one attempt, by module and result (ok, error, timeout).",
    },
    Metric {
        name: "ankusa_delivery_latency_seconds",
        kind: Kind::Histogram,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "Commit to successful delivery, by module.",
    },
    Metric {
        name: "ankusa_due_lag_seconds",
        kind: Kind::Gauge,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "Lag of the oldest row claimed by the last scan (0 when none).",
    },
    Metric {
        name: "ankusa_claimed_rows",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Rows claimed and not yet settled (the row window).",
    },
    Metric {
        name: "ankusa_claimed_bytes",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        zero: false,
        help: "Hook bytes of claimed rows (the byte window).",
    },
    Metric {
        name: "ankusa_running_attempts",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Attempts running now.",
    },
    Metric {
        name: "ankusa_window_max_rows",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "dispatch.max_inflight.",
    },
    Metric {
        name: "ankusa_window_max_bytes",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        zero: false,
        help: "dispatch.max_inflight_bytes.",
    },
    Metric {
        name: "ankusa_concurrency_max",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "dispatch.concurrency.",
    },
    Metric {
        name: "ankusa_dead_letters_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Deprecated (removed in the next release): ankusa_rows_dead_lettered_total.",
    },
    Metric {
        name: "ankusa_malformed_rows_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Claimed rows whose id or hook could not be read.",
    },
    Metric {
        name: "ankusa_leader",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "1 while this process leads the partition of its `partition` label.",
    },
    Metric {
        name: "ankusa_partitions",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "The instance's partition count (`partitions`) this process runs with.",
    },
    Metric {
        name: "ankusa_workers_live",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Live workers of the instance as this process's last heartbeat saw them.",
    },
    Metric {
        name: "ankusa_clock_offset_seconds",
        kind: Kind::Gauge,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "This process's clock minus Redis' (TIME), as its last heartbeat read them.",
    },
    Metric {
        name: "ankusa_leadership_changes_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Times this process became leader.",
    },
    Metric {
        name: "ankusa_primary_switches_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Times this process saw the sentinels name another Redis primary and moved to it.",
    },
    Metric {
        name: "ankusa_primary_deposed_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Times this process marked a Redis master the sentinels do not name deposed, so it refuses commits.",
    },
    Metric {
        name: "ankusa_commits_not_replicated_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Commits answered with a retryable error because not every replica acknowledged them in time.",
    },
    Metric {
        name: "ankusa_lease_renew_seconds",
        kind: Kind::Histogram,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "Latency of successful lease renewals.",
    },
    Metric {
        name: "ankusa_script_duration_seconds",
        kind: Kind::Histogram,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "Latency of each Lua script call, by script.",
    },
    Metric {
        name: "ankusa_commits_refused_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Commits of this process (ingest; a library Producer under a recorder) that Redis refused, by reason (oom: Redis is full; the kinds of ankusa_redis_errors_total).",
    },
    Metric {
        name: "ankusa_redis_full",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "1 while the partition's Redis refuses commits for memory (maxmemory reached under noeviction), checked by every worker each renew interval; 0 otherwise.",
    },
    Metric {
        name: "ankusa_kept_dropped_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Delivered hooks kept for resend that the leader dropped because Redis refused commits for memory.",
    },
    Metric {
        name: "ankusa_log_records_archived_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Delivery log records this worker wrote to the log store (PostgreSQL).",
    },
    Metric {
        name: "ankusa_log_archive_errors_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Archiving passes that failed (the log store unreachable or refusing); the records wait in the log stream.",
    },
    Metric {
        name: "ankusa_log_stream_entries",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Entries waiting in the partition's log stream, as its leader last saw them.",
    },
    Metric {
        name: "ankusa_log_archive_lag_seconds",
        kind: Kind::Gauge,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "Age of the oldest entry of the partition's log stream not yet archived; 0 when caught up.",
    },
    Metric {
        name: "ankusa_log_records_dropped_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Delivery log records the settle script dropped because the partition's log stream was at log.stream_max_bytes.",
    },
    Metric {
        name: "ankusa_redis_errors_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Redis call failures by kind (connection, timeout, busy, loading, oom, readonly, fenced, protocol, other).",
    },
    Metric {
        name: "ankusa_scan_rows",
        kind: Kind::Histogram,
        unit: None,
        zero: false,
        help: "Rows claimed per scan.",
    },
    Metric {
        name: "ankusa_scan_duration_seconds",
        kind: Kind::Histogram,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "One scan: the claim script plus the pipelined reads that bind its rows.",
    },
    Metric {
        name: "ankusa_rows_claimed_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Rows claimed.",
    },
    Metric {
        name: "ankusa_rows_unmatched_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Rows dropped at binding: their sink entry's filter, edited after the commit, no longer takes their hook.",
    },
    Metric {
        name: "ankusa_claim_page_rows",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Rows the next claim may take: dispatch.batch at most, adapted to dispatch.script_budget_ms.",
    },
    Metric {
        name: "ankusa_settle_page_outcomes",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Outcomes the next settle call may take: dispatch.settle_batch at most, adapted to dispatch.script_budget_ms.",
    },
    Metric {
        name: "ankusa_script_budget_stops_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Claim, settle or hooks calls cut short by their time budget, by script (claim, settle, hooks).",
    },
    Metric {
        name: "ankusa_breakers_open",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Sink keys whose breaker is open or probing (their rows are parked).",
    },
    Metric {
        name: "ankusa_breaker_transitions_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Breaker state changes, by the state entered (open, closed).",
    },
    Metric {
        name: "ankusa_parked_rows_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Rows parked by an open breaker (written back due when it closes) or a rate limit.",
    },
    Metric {
        name: "ankusa_rate_limit_parked_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Rows of a rate-limited sink key parked back in Redis until their token comes.",
    },
    Metric {
        name: "ankusa_hooks_unmatched_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Hooks committed by this process that no sink entry's event filter took: not stored.",
    },
    Metric {
        name: "ankusa_partition_hooks_committed_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Hooks committed to the partition by every producer, as the commit script counts them in Redis; published by the partition's leader.",
    },
    Metric {
        name: "ankusa_partition_hooks_unmatched_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Hooks committed to the partition by every producer that no sink entry took, as counted in Redis; published by the partition's leader.",
    },
    Metric {
        name: "ankusa_sinks_disabled_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Sink entries disabled by the leader after disable_after_ms of continuous failure.",
    },
    Metric {
        name: "ankusa_operator_events_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Operational events POSTed to operator.events_url, by result (ok, failed).",
    },
    Metric {
        name: "ankusa_tenant_events_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Operational events POSTed to a tenant's tenants.<id>.events_url, by result (ok, failed).",
    },
    Metric {
        name: "ankusa_operational_events_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Operational events the leader emitted, by type (breaker_opened, breaker_closed, row_dead_lettered).",
    },
    Metric {
        name: "ankusa_lane_members",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Hooks waiting behind a lane head in the partition.",
    },
    Metric {
        name: "ankusa_lane_releases_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Lanes released by a terminal outcome of their head.",
    },
    Metric {
        name: "ankusa_lane_sweeps_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Lane sweeps run by a claim; none while no lane has members.",
    },
    Metric {
        name: "ankusa_lane_sweep_promotions_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Lane members promoted to head by a sweep.",
    },
    Metric {
        name: "ankusa_requeued_rows_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Rows claimed under an older epoch made due again at takeover.",
    },
    Metric {
        name: "ankusa_settle_rows_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Outcomes sent to settle.lua by result: applied, skipped (not claimed by this epoch), fenced (refused: this node no longer leads).",
    },
    Metric {
        name: "ankusa_selfcheck_failures_total",
        kind: Kind::Counter,
        unit: None,
        zero: true,
        help: "Times the leader self-check gave the lease up because the scheduler made no progress.",
    },
    Metric {
        name: "ankusa_connection_up",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "1 while a broker connection ([connections.<name>]) is connected, 0 while not, by connection.",
    },
    Metric {
        name: "ankusa_batcher_queued",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Attempts waiting in a batcher for a request, by module.",
    },
    Metric {
        name: "ankusa_batch_entries",
        kind: Kind::Histogram,
        unit: None,
        zero: false,
        help: "Entries per batch request, by module.",
    },
    Metric {
        name: "ankusa_batch_bytes",
        kind: Kind::Histogram,
        unit: Some(Unit::Bytes),
        zero: false,
        help: "Bytes per batch request as the module counts them, by module.",
    },
    Metric {
        name: "ankusa_batch_requests_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Batch requests by module and outcome (ok, partial, error, timeout).",
    },
    Metric {
        name: "ankusa_batch_request_duration_seconds",
        kind: Kind::Histogram,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "Duration of one batch request, by module.",
    },
    Metric {
        name: "ankusa_claim_checks_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Bodies checked in to the blob store, by way (pack, attempt) and result (ok, error).",
    },
    Metric {
        name: "ankusa_claim_check_bytes_total",
        kind: Kind::Counter,
        unit: Some(Unit::Bytes),
        zero: true,
        help: "Bytes of bodies stored in the claim-check blob store.",
    },
    Metric {
        name: "ankusa_claim_check_deletes_total",
        kind: Kind::Counter,
        unit: None,
        zero: false,
        help: "Claim-check blobs deleted after their hook finished, by result (ok, error).",
    },
    Metric {
        name: "ankusa_due_rows",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Rows due or waiting out a backoff in the partition (the backlog).",
    },
    Metric {
        name: "ankusa_tenant_claimed_rows",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Rows claimed and not yet settled, per tenant of history.metrics_tenants.",
    },
    Metric {
        name: "ankusa_tenant_due_rows",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Rows in the tenant's due set (due now or later), per tenant of history.metrics_tenants.",
    },
    Metric {
        name: "ankusa_tenant_retrying_rows",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Rows with a failed attempt waiting for the next, per tenant of history.metrics_tenants.",
    },
    Metric {
        name: "ankusa_tenant_oldest_lag_seconds",
        kind: Kind::Gauge,
        unit: Some(Unit::Seconds),
        zero: false,
        help: "How late the tenant's oldest due row is, per tenant of history.metrics_tenants.",
    },
    Metric {
        name: "ankusa_tenant_failing_sinks",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Sink entries with retrying rows, per tenant of history.metrics_tenants.",
    },
    Metric {
        name: "ankusa_lanes_blocked",
        kind: Kind::Gauge,
        unit: None,
        zero: false,
        help: "Lanes whose head is waiting out a retry or a park.",
    },
];

/// Describe every metric of [`CATALOGUE`] once, so `/metrics` carries HELP and TYPE lines,
/// and the `process_*` family of the `metrics-process` collector.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    PROCESS
        .get_or_init(metrics_process::Collector::default)
        .describe();
    for m in CATALOGUE {
        match (m.kind, m.unit) {
            (Kind::Counter, Some(u)) => describe_counter!(m.name, u, m.help),
            (Kind::Counter, None) => describe_counter!(m.name, m.help),
            (Kind::Gauge, Some(u)) => describe_gauge!(m.name, u, m.help),
            (Kind::Gauge, None) => describe_gauge!(m.name, m.help),
            (Kind::Histogram, Some(u)) => describe_histogram!(m.name, u, m.help),
            (Kind::Histogram, None) => describe_histogram!(m.name, m.help),
        }
    }
}

/// Reasons a row is dead-lettered: the `reason` label of `ankusa_dead_letters_total`
/// (the kinds of [`crate::model::DeadReason`]).
pub const DEAD_LETTER_REASONS: &[&str] = &crate::model::DeadReason::KINDS;

/// Kinds of Redis failure: the `kind` label of `ankusa_redis_errors_total`
/// (the values of [`crate::store::StoreError::kind`]).
pub const REDIS_ERROR_KINDS: &[&str] = &[
    "connection",
    "timeout",
    "busy",
    "loading",
    "oom",
    "readonly",
    "fenced",
    "protocol",
    "other",
];

/// Outcomes of an attempt: the `outcome` label of `ankusa_deliveries_total`.
pub const DELIVERY_OUTCOMES: &[&str] = &["delivered", "retry", "dead_lettered", "parked"];

/// Create the series of bounded label sets at 0, so that they are exported before their
/// first event: `rate()` then sees the first increment, and an alert on a rare event (a
/// dead letter, a Redis error, an open breaker) has a series to evaluate instead of none.
/// Call after [`install`]; a no-op without a recorder.
pub fn init_series() {
    metrics::gauge!("ankusa_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    collect_process();
    for m in CATALOGUE.iter().filter(|m| m.zero) {
        match m.kind {
            Kind::Counter => metrics::counter!(m.name).increment(0),
            Kind::Gauge => metrics::gauge!(m.name).increment(0.0),
            Kind::Histogram => {}
        }
    }
    for script in ["claim", "settle", "hooks"] {
        metrics::counter!("ankusa_script_budget_stops_total", "script" => script).increment(0);
    }
    for module in crate::sinks::registry::names() {
        for outcome in DELIVERY_OUTCOMES {
            metrics::counter!("ankusa_deliveries_total", "module" => module, "outcome" => *outcome)
                .increment(0);
        }
        metrics::counter!("ankusa_rows_delivered_total", "module" => module).increment(0);
    }
    for to in ["open", "closed"] {
        metrics::counter!("ankusa_breaker_transitions_total", "to" => to).increment(0);
    }
    for module in crate::sinks::registry::MODULES.iter().filter(|m| m.batched) {
        let module = module.name;
        metrics::gauge!("ankusa_batcher_queued", "module" => module).increment(0.0);
        for outcome in BATCH_OUTCOMES {
            metrics::counter!("ankusa_batch_requests_total", "module" => module, "outcome" => *outcome)
                .increment(0);
        }
    }
    for via in ["pack", "attempt"] {
        for result in ["ok", "error"] {
            metrics::counter!("ankusa_claim_checks_total", "via" => via, "result" => result)
                .increment(0);
        }
    }
    for result in ["ok", "error"] {
        metrics::counter!("ankusa_claim_check_deletes_total", "result" => result).increment(0);
    }
    for reason in DEAD_LETTER_REASONS {
        metrics::counter!("ankusa_dead_letters_total", "reason" => *reason).increment(0);
        metrics::counter!("ankusa_rows_dead_lettered_total", "reason" => *reason).increment(0);
    }
    for kind in REDIS_ERROR_KINDS {
        metrics::counter!("ankusa_redis_errors_total", "kind" => *kind).increment(0);
        metrics::counter!("ankusa_commits_refused_total", "reason" => *kind).increment(0);
    }
    metrics::counter!("ankusa_commits_refused_total", "reason" => "quota").increment(0);
    // Present from the start, so a rate over them reads 0 rather than nothing before the
    // first event is posted.
    for result in ["ok", "failed"] {
        metrics::counter!("ankusa_operator_events_total", "result" => result).increment(0);
        metrics::counter!("ankusa_tenant_events_total", "result" => result).increment(0);
    }
}

/// The metrics labelled by `partition` alone: [`init_partition_series`] creates one series
/// per partition at 0, and none unlabelled.
pub const PARTITIONED: &[&str] = &[
    "ankusa_due_lag_seconds",
    "ankusa_breakers_open",
    "ankusa_lane_members",
    "ankusa_redis_full",
];

/// Outcomes of a batch request: the `outcome` label of `ankusa_batch_requests_total`.
pub const BATCH_OUTCOMES: &[&str] = &["ok", "partial", "error", "timeout"];

/// Create the [`PARTITIONED`] series of partitions `0..partitions` at 0, so that a
/// dashboard and an alert see every partition from the start (the partition's leader sets
/// them). Call after [`init_series`] with the instance's `partitions`.
pub fn init_partition_series(partitions: u32) {
    for p in 0..partitions {
        for name in PARTITIONED {
            metrics::gauge!(*name, "partition" => p.to_string()).increment(0.0);
        }
    }
}

/// Publish the partition's hook counts kept in Redis by the commit script (every producer's
/// commits, not only this process's) as `ankusa_partition_hooks_committed_total` and
/// `ankusa_partition_hooks_unmatched_total`: absolute values of counters that only grow.
pub fn publish_partition_totals(partition: u32, committed: u64, unmatched: u64) {
    let p = partition.to_string();
    metrics::counter!("ankusa_partition_hooks_committed_total", "partition" => p.clone())
        .absolute(committed);
    metrics::counter!("ankusa_partition_hooks_unmatched_total", "partition" => p)
        .absolute(unmatched);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_partitioned_metric_gets_an_unlabelled_zero_series() {
        for m in CATALOGUE {
            assert!(
                !(m.zero && PARTITIONED.contains(&m.name)),
                "{}: its unlabelled series would stay at 0 beside the partitions' own",
                m.name
            );
        }
        for name in PARTITIONED {
            assert!(
                CATALOGUE.iter().any(|m| m.name == *name),
                "{name} not catalogued"
            );
        }
    }
}
