//! `claim.lua` and `requeue.lua`: claiming due rows under the term's token and
//! requeueing an older term's claims.

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
    /// The claim token it was claimed under (the claim call's); its outcome carries it.
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
    /// Lane members in the partition after the sweep; `None` when no sweep ran.
    pub lane_members: Option<u64>,
    /// Lanes whose next member the sweep promoted to head.
    pub lanes_promoted: u64,
    /// This call's claim token: above every token issued before it in the partition.
    pub claim_token: u64,
    /// The byte window stopped the claim short: a due row's hook did not fit, so the
    /// next claim waits for an outcome to free room rather than for the next due time.
    pub bytes_full: bool,
    /// How long the script ran, by Redis' clock (µs): what the page adapts to.
    pub script_us: u64,
    /// The time budget stopped the lane sweep or the page before it was full:
    /// more rows may be due right away.
    pub budget_stopped: bool,
    /// The claimed rows.
    pub rows: Vec<ClaimedRow>,
    /// The rows' hooks read back in the same call (`read_hooks` of [`ClaimRequest`]), each once, by
    /// id, as [`Store::fetch_hooks`] answers them: the first distinct hooks of the rows in
    /// order, as many as the time budget allowed; empty from the other claim calls. The
    /// caller reads the rest with [`Store::fetch_hooks`].
    pub hooks: Vec<(u64, Option<Result<StoredHook, String>>)>,
}

/// The byte window a claim respects row by row, in bytes of hook bodies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ByteRooms {
    /// Room left in the global window (`dispatch.max_inflight_bytes` less what is claimed).
    pub global: u64,
    /// Nothing is claimed: one hook larger than the whole window may be claimed alone.
    pub alone: bool,
    /// The room of a tenant not in `tenants` (its `max_inflight_bytes`, nothing claimed).
    pub default_tenant: u64,
    /// `(tenant, room, nothing claimed)` of the tenants in flight or with their own limits.
    pub tenants: Vec<(String, u64, bool)>,
}

/// The tenants' weights a claim splits its page by (`dispatch.tenants.<id>.weight`): a
/// tenant's share of the rows and of the byte room is its weight over the sum of the
/// weights of the tenants in the pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimWeights {
    /// The weight of a tenant not listed (>= 1).
    pub default: u32,
    /// `(tenant, weight)` of the tenants whose weight differs.
    pub tenants: Vec<(String, u32)>,
}

impl Default for ClaimWeights {
    fn default() -> Self {
        ClaimWeights {
            default: 1,
            tenants: Vec::new(),
        }
    }
}

impl ClaimWeights {
    /// The weights `dispatch` configures ([`crate::config::DispatchConfig::tenant_weights`]).
    pub fn from_config(dispatch: &crate::config::DispatchConfig) -> ClaimWeights {
        let (default, listed) = dispatch.tenant_weights();
        ClaimWeights {
            default,
            tenants: listed
                .into_iter()
                .map(|(t, w)| (t.to_string(), w))
                .collect(),
        }
    }

    fn is_uniform(&self) -> bool {
        self.tenants.is_empty()
    }
}

/// What one claim asks for: up to `page` rows, split across due tenants by deficit
/// round-robin. [`ClaimRequest::new`] asks for a plain page; the other fields narrow it.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// Most rows claimed.
    pub page: usize,
    /// Window room (rows) of a tenant not in `rooms`.
    pub default_room: usize,
    /// Tenants at their window: none of their rows is claimed.
    pub skip: &'a [&'a str],
    /// `(tenant, room)` of the tenants whose window room (rows) is below the page.
    pub rooms: &'a [(&'a str, usize)],
    /// The byte window: no row is claimed whose hook would pass its tenant's or the
    /// global byte room, except one hook alone where nothing is claimed. `None`: none.
    pub bytes: Option<&'a ByteRooms>,
    /// A time budget: once 3/5 of it has passed by Redis' clock, the lane sweep stops and
    /// the page stops after the tenant (or the 32nd row of one) being claimed, so one call
    /// stays within the budget whatever the number of tenants due; a tenant the page did
    /// not reach keeps its place in line and goes first next scan. At least one tenant is
    /// always visited. `None`: no budget.
    pub budget: Option<Duration>,
    /// The tenants' weights: each pass gives a tenant `weight / sum of the weights` of the
    /// page left and of the byte room left (one row a pass at least). `None`: uniform.
    pub weights: Option<&'a ClaimWeights>,
    /// Read the claimed rows' hooks back in the same call ([`ClaimResult::hooks`]): the
    /// scheduler's claim, one round trip per page instead of two, and the byte window's
    /// size of a row taken from the same read.
    pub read_hooks: bool,
}

impl ClaimRequest<'_> {
    /// A plain page: up to `page` rows, `default_room` rows of room for every tenant, no
    /// byte window, no budget, uniform weights, hooks not read.
    pub fn new(page: usize, default_room: usize) -> ClaimRequest<'static> {
        ClaimRequest {
            page,
            default_room,
            skip: &[],
            rooms: &[],
            bytes: None,
            budget: None,
            weights: None,
            read_hooks: false,
        }
    }
}

impl Store {
    /// One claim ([`ClaimRequest`]): rows moved to `claimed` under `token`, and with
    /// `read_hooks` their hooks. Errors: [`StoreError::Fenced`] when `epoch` is no longer
    /// the partition's; [`StoreError::Protocol`] for a reply of another shape.
    pub async fn claim(
        &self,
        token: &str,
        epoch: u64,
        request: ClaimRequest<'_>,
    ) -> Result<ClaimResult, StoreError> {
        let ClaimRequest {
            page,
            default_room,
            skip,
            rooms,
            bytes,
            budget,
            weights,
            read_hooks,
        } = request;
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
        if let Some(b) = bytes {
            let n = |x: u64| Value::from(x.min(i64::MAX as u64) as i64);
            args.extend([
                "bytes".into(),
                n(b.global),
                (if b.alone { "1" } else { "0" }).into(),
                n(b.default_tenant),
                (b.tenants.len() as i64).into(),
            ]);
            for (t, room, empty) in &b.tenants {
                args.push(t.as_str().into());
                args.push(n(*room));
                args.push((if *empty { "1" } else { "0" }).into());
            }
        }
        if let Some(weights) = weights.filter(|w| !w.is_uniform() || w.default != 1) {
            args.push("weights".into());
            args.push(i64::from(weights.default.max(1)).into());
            args.push((weights.tenants.len() as i64).into());
            for (t, w) in &weights.tenants {
                args.push(t.as_str().into());
                args.push(i64::from((*w).max(1)).into());
            }
        }
        if read_hooks {
            args.push("hooks".into());
            args.push((HOOK_FIELDS.len() as i64).into());
            args.extend(HOOK_FIELDS.iter().map(|f| Value::from(*f)));
        }
        if let Some(b) = budget {
            args.push("budget".into());
            args.push((b.as_micros().clamp(1, i64::MAX as u128) as i64).into());
        }
        let v = self.call(&self.scripts.claim, args).await?;
        match status(&v) {
            "ok" => {}
            "fenced" => return Err(StoreError::Fenced),
            other => return Err(StoreError::protocol("claim", format!("status {other:?}"))),
        }
        let r = Reply::new("claim", &v);
        let hook_count = r.count(10)? as usize;
        let rest = r.rest(11);
        let Some(row_fields) = hook_count
            .checked_mul(2)
            .and_then(|n| rest.len().checked_sub(n))
        else {
            return Err(StoreError::protocol(
                "claim",
                format!("{hook_count} hooks in {} values", rest.len()),
            ));
        };
        if row_fields % 4 != 0 {
            return Err(StoreError::protocol(
                "claim",
                format!("{row_fields} row fields, not groups of 4"),
            ));
        }
        let (rest, hook_pairs) = rest.split_at(row_fields);
        let mut res = ClaimResult {
            now_ms: r.int(1)?,
            next_due_ms: r.opt(2)?,
            oldest_due_ms: r.opt(3)?,
            lane_members: r.opt(4)?.map(|n| n as u64),
            lanes_promoted: r.count(5)?,
            claim_token: r.count(6)?,
            bytes_full: r.int(7)? == 1,
            script_us: r.int(8)?.max(0) as u64,
            budget_stopped: r.int(9)? == 1,
            rows: Vec::with_capacity(rest.len() / 4),
            hooks: Vec::with_capacity(hook_count),
        };
        for (n, c) in rest.chunks_exact(4).enumerate() {
            let f = Reply::new("claim", c);
            let row = |e: StoreError| match e {
                StoreError::Protocol { script, detail } => StoreError::Protocol {
                    script,
                    detail: format!("row {n}: {detail}"),
                },
                e => e,
            };
            res.rows.push(ClaimedRow {
                tenant: f.text(0).map_err(row)?,
                row: f.text(1).map_err(row)?,
                attempts: u32::try_from(f.count(2).map_err(row)?).unwrap_or(u32::MAX),
                // '' when the row was never attempted.
                first_attempt_ms: c[3].int(),
                claim: res.claim_token,
            });
        }
        for pair in hook_pairs.chunks_exact(2) {
            // Only an id in its own decimal form is taken: a row id written by hand as
            // `007.0` names `hook:007` to the script but hook 7 to `RowId`, and its "gone"
            // answer must not stand for hook 7. Such ids are left to `fetch_hooks`.
            let Some(id) = pair[0]
                .as_str_ref()
                .and_then(|t| t.parse::<u64>().ok().filter(|id| id.to_string() == t))
            else {
                continue;
            };
            res.hooks.push((id, decode_hook_reply(pair[1].clone())?));
        }
        Ok(res)
    }

    /// Make every row claimed in an earlier term than `epoch`'s due now: those whose
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
            let r = Reply::new("requeue_claimed", &v);
            total += r.count(1)?;
            if r.int(2)? <= 0 {
                return Ok(total);
            }
        }
    }
}
