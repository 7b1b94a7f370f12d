//! What is still pending once nothing is due: rows waiting out a backoff, rows parked by an
//! open breaker or a rate limit, rows of scheduled hooks, members waiting behind their ordered lane's head, and when
//! the next of them comes due. `ankusa tick` reports it, so "idle" never reads as "done".

use super::*;

/// Tenants of a partition's line whose rows [`pending`] reads, at most.
pub const PENDING_TENANTS: i64 = 1_000;

/// The rows of an instance that are neither delivered nor dead-lettered yet ([`pending`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Pending {
    /// Rows in the due sets, due now or later (of the tenants read).
    pub rows: u64,
    /// Of the rows read, those with a failed attempt waiting out their backoff.
    pub retrying: u64,
    /// Of the rows read, those parked by their sink's open breaker or its rate limit (their
    /// attempts unchanged).
    pub parked: u64,
    /// Of the rows read, those due now.
    pub due_now: u64,
    /// Of the rows read, those of scheduled hooks not due yet (`deliver_at`, a delay).
    #[serde(default)]
    pub scheduled: u64,
    /// Hooks waiting behind their ordered lane's head (not in a due set yet).
    pub in_lane: u64,
    /// Rows claimed: an attempt queued or running.
    pub claimed: u64,
    /// When the earliest row comes due, ms since the epoch (Redis clock); absent when no
    /// row is in a due set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_due_ms: Option<i64>,
    /// Redis time of the reading, ms since the epoch.
    pub now_ms: i64,
    /// True when not every row was read: more than [`PENDING_TENANTS`] tenants in a
    /// partition's line, or more than [`SCAN_ROWS`] rows in a tenant's due set. `rows` then
    /// counts the tenants read, and the split covers the rows read.
    pub partial: bool,
}

impl Pending {
    /// Nothing left to deliver: no row due (now or later), claimed or waiting in a lane.
    pub fn is_empty(&self) -> bool {
        self.rows == 0 && self.in_lane == 0 && self.claimed == 0
    }
}

/// What is pending in every partition of the instance, read from Redis (see [`Pending`]):
/// for each partition the first [`PENDING_TENANTS`] tenants in line and the first
/// [`SCAN_ROWS`] rows of each, their states read in one pipelined round trip per tenant.
/// Errors: the store failing.
pub async fn pending(store: &Store) -> Result<Pending, Error> {
    let mut out = Pending::default();
    for p in store.all_partitions() {
        let now = p.now_ms().await?;
        out.now_ms = out.now_ms.max(now);
        let line = p.line(Some(PENDING_TENANTS)).await?;
        let in_line = p.line_len().await?;
        out.partial |= in_line > line.len() as u64;
        out.claimed += p.claimed_len().await?;
        out.in_lane += p.lane_members().await?;
        for tenant in line {
            let n = p.due_len(&tenant).await?;
            out.rows += n;
            out.partial |= n > SCAN_ROWS as u64;
            let first = p.due_page(&tenant, SCAN_ROWS).await?;
            if let Some((_, at)) = first.first() {
                out.next_due_ms = Some(out.next_due_ms.map_or(*at, |n| n.min(*at)));
            }
            let ids: Vec<String> = first.into_iter().map(|(r, _)| r).collect();
            for r in read_rows(&p, &tenant, &ids).await? {
                match r.state(now) {
                    Some(RowState::Parked) => out.parked += 1,
                    Some(RowState::Retrying) => out.retrying += 1,
                    Some(RowState::Due) => out.due_now += 1,
                    Some(RowState::Scheduled) => out.scheduled += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(out)
}
