//! The log store's schema: embedded migrations, applied in order under an advisory lock
//! (`ankusa log migrate`, or the worker at start), and the tables' day partitions.

/// The migrations, in order: version `i + 1` is `MIGRATIONS[i]`. Never edit one that has
/// shipped; add the next.
pub(super) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE ankusa_attempts (
    tenant          text        NOT NULL,
    partition       integer     NOT NULL,
    hook            bigint      NOT NULL,
    sink            integer     NOT NULL,
    attempt         integer     NOT NULL,
    started_at      timestamptz NOT NULL,
    duration_ms     bigint      NOT NULL,
    outcome         text        NOT NULL,
    status          integer,
    error_kind      text,
    error           text,
    next_attempt_at timestamptz,
    reason          text,
    PRIMARY KEY (partition, hook, sink, attempt, started_at)
) PARTITION BY RANGE (started_at);
CREATE INDEX ankusa_attempts_by_hook ON ankusa_attempts (tenant, hook);
CREATE TABLE ankusa_hooks (
    tenant       text        NOT NULL,
    partition    integer     NOT NULL,
    hook         bigint      NOT NULL,
    source       text        NOT NULL,
    event_type   text,
    state        text        NOT NULL,
    committed_at timestamptz,
    ended_at     timestamptz NOT NULL,
    dead_rows    integer     NOT NULL,
    PRIMARY KEY (partition, hook, ended_at)
) PARTITION BY RANGE (ended_at);
CREATE INDEX ankusa_hooks_by_time ON ankusa_hooks (tenant, ended_at DESC, partition DESC, hook DESC);
CREATE INDEX ankusa_hooks_by_id ON ankusa_hooks (tenant, hook);
CREATE TABLE ankusa_log_cursor (
    instance   text        NOT NULL,
    partition  integer     NOT NULL,
    last_id    text        NOT NULL,
    records    bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (instance, partition)
);
CREATE TABLE ankusa_audit (
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL,
    action text        NOT NULL,
    tenant text,
    detail text        NOT NULL
);
"#,
    r#"
CREATE TABLE ankusa_bodies (
    tenant    text        NOT NULL,
    partition integer     NOT NULL,
    hook      bigint      NOT NULL,
    ended_at  timestamptz NOT NULL,
    headers   text        NOT NULL,
    body      bytea       NOT NULL,
    PRIMARY KEY (partition, hook, ended_at)
) PARTITION BY RANGE (ended_at);
CREATE INDEX ankusa_bodies_by_id ON ankusa_bodies (tenant, hook);
"#,
    r#"
CREATE TABLE ankusa_log_owner (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    instance text    NOT NULL
);
"#,
];

/// The advisory lock key every migration run holds (any constant; ours).
pub(super) const MIGRATION_LOCK: i64 = 0x616e_6b75_7361_0001;
/// The advisory lock key held while day partitions are created or dropped.
pub(super) const PARTITION_LOCK: i64 = 0x616e_6b75_7361_0002;

/// The tables partitioned by day, and the column each is partitioned on.
pub(super) const DAILY: [&str; 3] = ["ankusa_attempts", "ankusa_hooks", "ankusa_bodies"];

/// Milliseconds in a day.
pub(super) const DAY_MS: i64 = 86_400_000;

/// The day (days since the Unix epoch) of `ms`.
pub(super) fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// The name of `table`'s partition for `day`: `<table>_d<YYYYMMDD>`.
pub(super) fn partition_name(table: &str, day: i64) -> String {
    let (y, m, d) = civil(day);
    format!("{table}_d{y:04}{m:02}{d:02}")
}

/// The day a partition named by [`partition_name`] holds, if `name` is one of `table`'s.
pub(super) fn partition_day(table: &str, name: &str) -> Option<i64> {
    let rest = name.strip_prefix(table)?.strip_prefix("_d")?;
    if rest.len() != 8 || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (y, m, d) = (
        rest[..4].parse().ok()?,
        rest[4..6].parse().ok()?,
        rest[6..].parse().ok()?,
    );
    let day = days_from_civil(y, m, d);
    (civil(day) == (y, m, d)).then_some(day)
}

/// `CREATE TABLE` of `table`'s partition for `day`.
pub(super) fn create_partition(table: &str, day: i64) -> String {
    let (from, to) = (day * DAY_MS, (day + 1) * DAY_MS);
    format!(
        "CREATE TABLE IF NOT EXISTS {} PARTITION OF {table} FOR VALUES FROM \
         (to_timestamp({from}::double precision / 1000)) TO (to_timestamp({to}::double precision / 1000))",
        partition_name(table, day)
    )
}

/// (year, month, day) of a day since the epoch (the proleptic Gregorian calendar; Howard
/// Hinnant's `civil_from_days`).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days since the epoch of (year, month, day) (`days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_partitions_are_named_by_their_utc_date_and_read_back() {
        // 2026-12-07T13:57:18Z
        let day = day_of(1_796_651_838_000);
        assert_eq!(
            partition_name("ankusa_hooks", day),
            "ankusa_hooks_d20261207"
        );
        assert_eq!(
            partition_day("ankusa_hooks", "ankusa_hooks_d20261207"),
            Some(day)
        );
        assert_eq!(partition_name("t", 0), "t_d19700101");
        assert_eq!(partition_name("t", -1), "t_d19691231");
        assert_eq!(
            partition_day("ankusa_hooks", "ankusa_hooks_d20261332"),
            None
        );
        assert_eq!(
            partition_day("ankusa_hooks", "ankusa_attempts_d20261207"),
            None
        );
        for d in [-1, 0, 59, 60, 11_016, 20_794, 2_000_000] {
            let name = partition_name("x", d);
            assert_eq!(partition_day("x", &name), Some(d), "{name}");
        }
    }
}
