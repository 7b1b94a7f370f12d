//! Prometheus metrics (R27). Names and labels are catalogued in `docs/metrics.md`;
//! every series carries the `instance` label (R29) as a global label.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

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
                .add_global_label("instance", instance)
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
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        "ankusa_commits_total",
        "Hooks committed through this process (producer API, ingest endpoint, CLI)."
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
        "Rows dead-lettered, by reason kind."
    );
    describe_counter!(
        "ankusa_malformed_rows_total",
        "Claimed rows whose id or hook could not be read."
    );
    describe_gauge!("ankusa_leader", "1 while this process leads its partition.");
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
    describe_counter!(
        "ankusa_redis_errors_total",
        "Redis call failures by kind (connection, timeout, busy, loading, oom, fenced…)."
    );
    describe_histogram!("ankusa_scan_rows", "Rows claimed per scan.");
    describe_histogram!(
        "ankusa_scan_duration_seconds",
        Unit::Seconds,
        "One scan: the claim script plus the pipelined reads that bind its rows."
    );
    describe_counter!(
        "ankusa_breaker_transitions_total",
        "Breaker transitions by target state (open, closed)."
    );
    describe_gauge!(
        "ankusa_breakers_open",
        "Sink keys whose breaker is open or probing."
    );
    describe_counter!(
        "ankusa_parked_rows_total",
        "Rows parked by an open breaker (attempt count unchanged)."
    );
    describe_gauge!(
        "ankusa_lane_members",
        "Lane members waiting behind their heads (partition-wide)."
    );
    describe_counter!(
        "ankusa_lane_sweeps_total",
        "Scans that ran the lane sweep (only while lane members exist)."
    );
    describe_counter!(
        "ankusa_lane_sweep_promotions_total",
        "Lane members the sweep promoted to head."
    );
    describe_counter!(
        "ankusa_lane_releases_total",
        "Lanes released by a terminal outcome of their head in settle."
    );
    describe_counter!("ankusa_rows_claimed_total", "Rows claimed.");
}
