//! The options of `ankusa bench`: what each run measures and how big it is.

use std::path::PathBuf;

/// Options of `ankusa bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Rows for the throughput run (one sink per hook).
    #[arg(long, default_value_t = 100_000)]
    pub rows: usize,
    /// Tenants the rows are spread over (each one source, one sink).
    #[arg(long, default_value_t = 8)]
    pub tenants: usize,
    /// Payload files (e.g. ../shared/data/github-webhooks); default: generated ~1 KiB JSON.
    #[arg(long)]
    pub payloads: Option<PathBuf>,
    /// Seconds of the latency run at half the measured rate.
    #[arg(long, default_value_t = 5)]
    pub latency_secs: u64,
    /// Rows behind a dead sink for the memory run (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub dead_backlog: usize,
    /// Rows of the big tenant's backlog in the fairness run (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub fairness_backlog: usize,
    /// Rows per tenant in the isolation run (0 skips it).
    #[arg(long, default_value_t = 5_000)]
    pub isolation_rows: usize,
    /// Lanes in the ordered-vs-unordered run (0 skips it).
    #[arg(long, default_value_t = 1_000)]
    pub lanes: usize,
    /// Print the results as one JSON object on the last line (the global `--json`).
    #[arg(skip)]
    pub json: bool,
    /// Run the workers with `history.enabled = false` (no attempt records, no kept bodies),
    /// to compare throughput and Redis memory with the history on.
    #[arg(long)]
    pub no_history: bool,
    /// Run only the bounded-scripts scenario: `--scripts-backlog` rows in one
    /// tenant plus `--scripts-tenants` tenants with one row (twice), drained by a worker with
    /// the default pages, reporting `SLOWLOG` entries per script.
    #[arg(long)]
    pub scripts: bool,
    /// Rows of the big tenant in the `--scripts` scenario.
    #[arg(long, default_value_t = 1_000_000)]
    pub scripts_backlog: usize,
    /// Tenants with one row in the `--scripts` scenario.
    #[arg(long, default_value_t = 10_000)]
    pub scripts_tenants: usize,
    /// Hooks per commit call for the big backlog in the `--scripts` and `--console` scenarios.
    #[arg(long, default_value_t = 1_000)]
    pub commit_batch: usize,
    /// `slowlog-log-slower-than` (µs) in the `--scripts` and `--console` scenarios.
    #[arg(long, default_value_t = 5_000)]
    pub slowlog_us: u64,
    /// Longest drain in the `--scripts` scenario before it gives up (s).
    #[arg(long, default_value_t = 900)]
    pub scripts_max_secs: u64,
    /// Nice value of the `--scripts` (and `--console`) redis-server (e.g. -10), so that other
    /// processes of a loaded machine preempt it less: `SLOWLOG` measures wall time, so a
    /// preempted Redis logs even a one-key `DEL` as slow. 0 leaves it as started.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub redis_nice: i32,
    /// Run the `--scripts` (and `--console`) redis-server under `SCHED_FIFO` (needs root or
    /// CAP_SYS_NICE): on a loaded machine, `SLOWLOG` then measures the scripts rather than
    /// the scheduler.
    #[arg(long)]
    pub redis_fifo: bool,
    /// `dispatch.script_budget_ms` of the `--scripts` scenario's worker (default: the
    /// worker's default, 5).
    #[arg(long)]
    pub script_budget_ms: Option<u64>,
    /// Give each tenant's entry an event filter (`bench.*`; every hook is `bench.push`) and a
    /// rate limit far above the measured rate, to compare the cost per delivered row of
    /// per-entry policy with plain entries.
    #[arg(long)]
    pub policy: bool,
    /// Run only the page-latency scenario of the console and portal:
    /// `--console-hooks` hooks over `--console-tenants` tenants committed through a worker
    /// child with an admin listener, then every `/ui/` and `/portal/` page (and the admin
    /// API calls behind them) timed as an HTTP client on loopback sees it.
    #[arg(long)]
    pub console: bool,
    /// Hooks in the `--console` scenario (most in one tenant, one per other tenant).
    #[arg(long, default_value_t = 1_000_000)]
    pub console_hooks: usize,
    /// Tenants in the `--console` scenario (one big, the others with one hook each).
    #[arg(long, default_value_t = 10_000)]
    pub console_tenants: usize,
    /// Timed requests per page in the `--console` scenario (after the warm-up).
    #[arg(long, default_value_t = 200)]
    pub console_requests: usize,
    /// Warm-up requests per page in the `--console` scenario (not timed).
    #[arg(long, default_value_t = 5)]
    pub console_warmup: usize,
    /// Seconds of timed requests per page at most in the `--console` scenario: a page slower
    /// than this allows gets fewer than `--console-requests` (at least 3).
    #[arg(long, default_value_t = 20)]
    pub console_page_secs: u64,
}
