//! Prometheus metrics (R27). Names, types, units and labels are catalogued in
//! `docs/metrics.md`; `tests/observability.rs` keeps this file, the catalogue, the
//! dashboards in `grafana/` and the alert rules in `prometheus/` in step.
//!
//! Every series carries the pipeline's instance name (R29) as the global label
//! `ankusa_instance`. It is not called `instance`: Prometheus attaches `instance` (the
//! scraped `host:port`) to every target and would rename ours to `exported_instance`;
//! with both labels each worker of a pool stays a series of its own.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// The global label that names the instance on every series (R29).
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

/// Describe every metric once so `/metrics` carries HELP and TYPE lines.
///
/// The second block describes metrics that other issues bring; a description alone
/// exports nothing, so they appear on `/metrics` only once their code emits them.
/// `docs/metrics.md` says which issue brings each.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    PROCESS
        .get_or_init(metrics_process::Collector::default)
        .describe();
    describe_gauge!(
        "ankusa_build_info",
        "Always 1; the `version` label is this build's crate version."
    );
    // Emitted today.
    describe_counter!(
        "ankusa_hooks_committed_total",
        "Hooks committed by this process (ingest endpoint; a library Producer under a recorder)."
    );
    describe_counter!(
        "ankusa_rows_delivered_total",
        "Rows delivered (a successful attempt), by sink module."
    );
    describe_counter!(
        "ankusa_rows_dead_lettered_total",
        "Rows dead-lettered, by reason kind."
    );
    describe_counter!(
        "ankusa_commits_total",
        "Deprecated (removed in the next release): ankusa_hooks_committed_total."
    );
    describe_counter!(
        "ankusa_admin_connections_refused_total",
        "Admin/ingest connections closed at accept because admin.max_connections were open."
    );
    describe_counter!(
        "ankusa_deliveries_total",
        "Attempt outcomes by sink module: delivered, retry, dead_lettered, parked."
    );
    describe_histogram!(
        "ankusa_attempt_duration_seconds",
        Unit::Seconds,
        "Duration of one attempt, by module and result (ok, error, timeout)."
    );
    describe_histogram!(
        "ankusa_delivery_latency_seconds",
        Unit::Seconds,
        "Commit to successful delivery, by module."
    );
    describe_gauge!(
        "ankusa_due_lag_seconds",
        Unit::Seconds,
        "Lag of the oldest row claimed by the last scan (0 when none)."
    );
    describe_gauge!(
        "ankusa_claimed_rows",
        "Rows claimed and not yet settled (the row window, R5)."
    );
    describe_gauge!(
        "ankusa_claimed_bytes",
        Unit::Bytes,
        "Hook bytes of claimed rows (the byte window, R5)."
    );
    describe_gauge!("ankusa_running_attempts", "Attempts running now.");
    describe_gauge!("ankusa_window_max_rows", "dispatch.max_inflight.");
    describe_gauge!(
        "ankusa_window_max_bytes",
        Unit::Bytes,
        "dispatch.max_inflight_bytes."
    );
    describe_gauge!("ankusa_concurrency_max", "dispatch.concurrency.");
    describe_counter!(
        "ankusa_dead_letters_total",
        "Deprecated (removed in the next release): ankusa_rows_dead_lettered_total."
    );
    describe_counter!(
        "ankusa_malformed_rows_total",
        "Claimed rows whose id or hook could not be read."
    );
    describe_gauge!(
        "ankusa_leader",
        "1 while this process leads the partition of its `partition` label."
    );
    describe_gauge!(
        "ankusa_workers_live",
        "Live workers of the instance as this process's last heartbeat saw them."
    );
    describe_counter!(
        "ankusa_leadership_changes_total",
        "Times this process became leader."
    );
    describe_histogram!(
        "ankusa_lease_renew_seconds",
        Unit::Seconds,
        "Latency of successful lease renewals."
    );
    describe_histogram!(
        "ankusa_script_duration_seconds",
        Unit::Seconds,
        "Latency of each Lua script call, by script."
    );
    describe_counter!("ankusa_redis_errors_total", "Redis call failures by kind (connection, timeout, busy, loading, oom, readonly, fenced, protocol, other).");
    describe_histogram!("ankusa_scan_rows", "Rows claimed per scan.");
    describe_histogram!(
        "ankusa_scan_duration_seconds",
        Unit::Seconds,
        "One scan: the claim script plus the pipelined reads that bind its rows."
    );
    describe_counter!("ankusa_rows_claimed_total", "Rows claimed.");
    describe_gauge!(
        "ankusa_claim_page_rows",
        "Rows the next claim may take: dispatch.batch at most, adapted to dispatch.script_budget_ms."
    );
    describe_gauge!(
        "ankusa_settle_page_outcomes",
        "Outcomes the next settle call may take: dispatch.settle_batch at most, adapted to dispatch.script_budget_ms."
    );
    describe_counter!(
        "ankusa_script_budget_stops_total",
        "Claim or settle calls cut short by their time budget, by script (claim, settle)."
    );
    describe_gauge!(
        "ankusa_breakers_open",
        "Sink keys whose breaker is open or probing (their rows are parked, R16)."
    );
    describe_counter!(
        "ankusa_breaker_transitions_total",
        "Breaker state changes, by the state entered (open, closed)."
    );
    describe_counter!(
        "ankusa_parked_rows_total",
        "Rows parked by an open breaker (written back due when it closes, R16) or a rate limit (P9)."
    );
    describe_counter!(
        "ankusa_rate_limit_parked_total",
        "Rows of a rate-limited sink key parked back in Redis until their token comes (P9)."
    );
    describe_counter!(
        "ankusa_hooks_unmatched_total",
        "Hooks committed by this process that no sink entry's event filter took: not stored (P9)."
    );
    describe_counter!(
        "ankusa_sinks_disabled_total",
        "Sink entries disabled by the leader after disable_after_ms of continuous failure (P9)."
    );
    describe_counter!(
        "ankusa_operator_events_total",
        "Operational events POSTed to operator.events_url, by result (ok, failed) (P9)."
    );
    describe_gauge!(
        "ankusa_lane_members",
        "Hooks waiting behind a lane head in the partition (R10)."
    );
    describe_counter!(
        "ankusa_lane_releases_total",
        "Lanes released by a terminal outcome of their head (R11)."
    );
    describe_counter!(
        "ankusa_lane_sweeps_total",
        "Lane sweeps run by a claim; none while no lane has members (R12)."
    );
    describe_counter!(
        "ankusa_lane_sweep_promotions_total",
        "Lane members promoted to head by a sweep (R12)."
    );

    describe_counter!(
        "ankusa_requeued_rows_total",
        "Rows claimed under an older epoch made due again at takeover (R3)."
    );
    describe_counter!("ankusa_settle_rows_total", "Outcomes sent to settle.lua by result: applied, skipped (not claimed by this epoch), fenced (refused: this node no longer leads).");
    describe_counter!(
        "ankusa_selfcheck_failures_total",
        "Times the leader self-check gave the lease up because the scheduler made no progress."
    );

    // Batching sinks and the claim check (R17, R18; docs/sinks.md).
    describe_gauge!(
        "ankusa_batcher_queued",
        "Attempts waiting in a batcher for a request, by module."
    );
    describe_histogram!(
        "ankusa_batch_entries",
        "Entries per batch request, by module."
    );
    describe_histogram!(
        "ankusa_batch_bytes",
        Unit::Bytes,
        "Bytes per batch request as the module counts them, by module."
    );
    describe_counter!(
        "ankusa_batch_requests_total",
        "Batch requests by module and outcome (ok, partial, error, timeout)."
    );
    describe_histogram!(
        "ankusa_batch_request_duration_seconds",
        Unit::Seconds,
        "Duration of one batch request, by module."
    );
    describe_counter!(
        "ankusa_claim_checks_total",
        "Bodies checked in to the blob store, by way (pack, attempt) and result (ok, error)."
    );
    describe_counter!(
        "ankusa_claim_check_bytes_total",
        Unit::Bytes,
        "Bytes of bodies stored in the claim-check blob store."
    );
    describe_counter!(
        "ankusa_claim_check_deletes_total",
        "Claim-check blobs deleted after their hook finished, by result (ok, error)."
    );

    // Planned: described now, emitted by the issue named in docs/metrics.md.
    describe_gauge!(
        "ankusa_due_rows",
        "Rows due or waiting out a backoff in the partition (the backlog)."
    );
    describe_gauge!(
        "ankusa_tenant_claimed_rows",
        "Rows claimed and not yet settled, per tenant of history.metrics_tenants."
    );
    describe_gauge!(
        "ankusa_tenant_due_rows",
        "Rows in the tenant's due set (due now or later), per tenant of history.metrics_tenants."
    );
    describe_gauge!(
        "ankusa_tenant_retrying_rows",
        "Rows with a failed attempt waiting for the next, per tenant of history.metrics_tenants."
    );
    describe_gauge!(
        "ankusa_tenant_oldest_lag_seconds",
        Unit::Seconds,
        "How late the tenant's oldest due row is, per tenant of history.metrics_tenants."
    );
    describe_gauge!(
        "ankusa_tenant_failing_sinks",
        "Sink entries with retrying rows, per tenant of history.metrics_tenants."
    );
    describe_gauge!(
        "ankusa_lanes_blocked",
        "Lanes whose head is waiting out a retry or a park."
    );
    describe_counter!("ankusa_rows_claimed_total", "Rows claimed.");
}

/// Reasons a row is dead-lettered: the `reason` label of `ankusa_dead_letters_total`
/// (the kinds of [`crate::model::DeadReason`]).
pub const DEAD_LETTER_REASONS: &[&str] = &[
    "permanent",
    "retry_horizon",
    "max_attempts",
    "sink_gone",
    "source_gone",
    "malformed",
    "sink_disabled",
];

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
    for name in [
        "ankusa_hooks_committed_total",
        "ankusa_commits_total",
        "ankusa_admin_connections_refused_total",
        "ankusa_malformed_rows_total",
        "ankusa_leadership_changes_total",
        "ankusa_requeued_rows_total",
        "ankusa_selfcheck_failures_total",
        "ankusa_rows_claimed_total",
        "ankusa_parked_rows_total",
        "ankusa_rate_limit_parked_total",
        "ankusa_hooks_unmatched_total",
        "ankusa_sinks_disabled_total",
        "ankusa_lane_releases_total",
        "ankusa_lane_sweeps_total",
        "ankusa_lane_sweep_promotions_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    for script in ["claim", "settle"] {
        metrics::counter!("ankusa_script_budget_stops_total", "script" => script).increment(0);
    }
    for name in [
        "ankusa_breakers_open",
        "ankusa_lane_members",
        "ankusa_due_lag_seconds",
    ] {
        metrics::gauge!(name).increment(0.0);
    }
    for module in crate::model::MODULES {
        for outcome in DELIVERY_OUTCOMES {
            metrics::counter!("ankusa_deliveries_total", "module" => *module, "outcome" => *outcome).increment(0);
        }
        metrics::counter!("ankusa_rows_delivered_total", "module" => *module).increment(0);
    }
    for to in ["open", "closed"] {
        metrics::counter!("ankusa_breaker_transitions_total", "to" => to).increment(0);
    }
    for reason in DEAD_LETTER_REASONS {
        metrics::counter!("ankusa_dead_letters_total", "reason" => *reason).increment(0);
        metrics::counter!("ankusa_rows_dead_lettered_total", "reason" => *reason).increment(0);
    }
    for kind in REDIS_ERROR_KINDS {
        metrics::counter!("ankusa_redis_errors_total", "kind" => *kind).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeadReason;

    #[test]
    fn the_pre_created_dead_letter_reasons_are_exactly_the_kinds_of_dead_reason() {
        let all = [
            DeadReason::Permanent("x".into()),
            DeadReason::RetryHorizon("http".into()),
            DeadReason::MaxAttempts("http".into()),
            DeadReason::SinkGone(0, "http".into()),
            DeadReason::SourceGone("s".into()),
            DeadReason::Malformed("m".into()),
            DeadReason::SinkDisabled(0),
        ];
        let kinds: Vec<&str> = all.iter().map(DeadReason::kind).collect();
        assert_eq!(kinds, DEAD_LETTER_REASONS);
        // The scheduler labels a dead letter by the text before `(` of its reason.
        for r in &all {
            assert_eq!(r.to_string().split('(').next(), Some(r.kind()));
        }
    }
}
