//! `claim.lua` and `requeue.lua`: claiming due rows under the term's token (R2, R3, R13,
//! R14) and requeueing an older term's claims.

use super::*;

/// One row returned by a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRow {
    /// Tenant id (the due set it came from).
    pub tenant: String,
    /// The raw row id (may be malformed if written by hand).
    pub row: String,
    /// Attempts already made.
    pub attempts: u32,
    /// First attempt time (ms, Redis clock), if any attempt was made.
    pub first_attempt_ms: Option<i64>,
    /// The claim token it was claimed under (the claim call's, P6); its outcome carries it.
    pub claim: u64,
}

/// The result of one scan's claim.
#[derive(Debug, Clone, Default)]
pub struct ClaimResult {
    /// Redis time of the claim (ms).
    pub now_ms: i64,
    /// When the next tenant not at its window has a due row (ms, Redis clock).
    pub next_due_ms: Option<i64>,
    /// The oldest due time among the claimed rows (ms), for the lag gauge.
    pub oldest_due_ms: Option<i64>,
    /// Lane members in the partition after the sweep; `None` when no sweep ran (R12).
    pub lane_members: Option<u64>,
    /// Lanes whose next member the sweep promoted to head.
    pub lanes_promoted: u64,
    /// This call's claim token (P6): above every token issued before it in the partition.
    pub claim_token: u64,
    /// The claimed rows.
    pub rows: Vec<ClaimedRow>,
}

impl Store {
    /// One scan's claim (R13, R14): up to `page` rows, split across due tenants by deficit
    /// round-robin; `skip` are tenants at their window; `rooms` are tenants whose window room
    /// (rows) is below the page, others get `default_room`. Errors: [`StoreError::Fenced`].
    pub async fn claim(
        &self,
        token: &str,
        epoch: u64,
        page: usize,
        default_room: usize,
        skip: &[&str],
        rooms: &[(&str, usize)],
    ) -> Result<ClaimResult, StoreError> {
        let mut args = Vec::with_capacity(8 + skip.len() + 2 * rooms.len());
        args.extend([
            self.prefix(),
            token.into(),
            (epoch as i64).into(),
            (page as i64).into(),
            (default_room as i64).into(),
        ]);
        args.push((skip.len() as i64).into());
        args.extend(skip.iter().map(|t| Value::from(*t)));
        args.push((rooms.len() as i64).into());
        for (t, r) in rooms {
            args.push(Value::from(*t));
            args.push((*r as i64).into());
        }
        let v = self.call(&self.scripts.claim, args).await?;
        match status(&v) {
            "ok" => {}
            "fenced" => return Err(StoreError::Fenced),
            other => return Err(StoreError::protocol("claim", format!("status {other:?}"))),
        }
        let opt = |x: Option<&Value>| x.and_then(Value::int).filter(|&n| n >= 0);
        let mut res = ClaimResult {
            now_ms: opt(v.get(1)).unwrap_or(0),
            next_due_ms: opt(v.get(2)),
            oldest_due_ms: opt(v.get(3)),
            lane_members: opt(v.get(4)).map(|n| n as u64),
            lanes_promoted: opt(v.get(5)).unwrap_or(0) as u64,
            claim_token: opt(v.get(6)).unwrap_or(0) as u64,
            rows: Vec::with_capacity((v.len().saturating_sub(7)) / 4),
        };
        for c in v[7.min(v.len())..].chunks_exact(4) {
            res.rows.push(ClaimedRow {
                tenant: c[0].text(),
                row: c[1].text(),
                attempts: c[2].int().unwrap_or(0).max(0) as u32,
                first_attempt_ms: c[3].int(),
                claim: res.claim_token,
            });
        }
        Ok(res)
    }

    /// Make every row claimed in an earlier term than `epoch`'s due now (R3): those whose
    /// claim token is at or below the floor this term's lease acquisition recorded; repeats
    /// the bounded script until none is left. Returns the rows moved.
    pub async fn requeue_claimed(&self, token: &str, epoch: u64) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let args = vec![
                self.prefix(),
                token.into(),
                (epoch as i64).into(),
                1000i64.into(),
            ];
            let v = self.call(&self.scripts.requeue_claimed, args).await?;
            match status(&v) {
                "ok" => {}
                "fenced" => return Err(StoreError::Fenced),
                other => {
                    return Err(StoreError::protocol(
                        "requeue_claimed",
                        format!("status {other:?}"),
                    ))
                }
            }
            total += v.get(1).and_then(Value::int).unwrap_or(0) as u64;
            if v.get(2).and_then(Value::int).unwrap_or(0) <= 0 {
                return Ok(total);
            }
        }
    }
}
