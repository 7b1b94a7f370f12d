//! Claiming: one `claim.lua` call per scan, then the reads that bind each claimed row to
//! its hook, its source and a sink entry.

use super::*;

impl Session {
    pub(super) fn maybe_claim(&mut self) {
        if self.claiming || !self.claim_wanted || !self.lease_ok() {
            return;
        }
        if crate::fault::wedged_claim_loop() {
            return; // an injected fault (tests only): a wedged claim loop, for the self-check
        }
        let max_page = self.cfg.dispatch.batch;
        let page_size = self
            .claim_page
            .load(std::sync::atomic::Ordering::Relaxed)
            .clamp(1, max_page.max(1));
        let page = self.slots.claim_room().min(page_size);
        if page == 0 {
            return; // an outcome settling frees room and asks again
        }
        // The room is taken before the claim is sent, so the other partitions this worker
        // leads cannot claim it too; `claimed` gives back what was not used.
        let Some((page, bytes)) = self.slots.reserve_claim(page) else {
            return; // another session's claim holds the room: its answer frees it
        };
        self.claim_wanted = false;
        self.claiming = true;
        let rooms = self.slots.tenant_rooms(page);
        let skip: Vec<String> = rooms
            .iter()
            .filter(|(_, r)| *r == 0)
            .map(|(t, _)| t.to_string())
            .collect();
        let tight: Vec<(String, usize)> = rooms
            .iter()
            .filter(|(_, r)| *r > 0)
            .map(|(t, r)| (t.to_string(), *r))
            .collect();
        let default_room = self.slots.default_room();
        let store = self.ctx.store.clone();
        let (token, epoch) = (self.ctx.token.clone(), self.ctx.epoch);
        let tx = self.tx.clone();
        let health = self.ctx.health.clone();
        let claim_page = self.claim_page.clone();
        let budget = Duration::from_millis(self.cfg.dispatch.script_budget_ms);
        let weights = crate::store::ClaimWeights::from_config(&self.cfg.dispatch);
        let space = self.ctx.message_space.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = claim_and_prepare(
                &store,
                &token,
                epoch,
                page,
                default_room,
                &skip,
                &tight,
                &bytes,
                budget,
                &weights,
                space,
            )
            .await;
            health.record_write("claim", &r);
            if let Ok(p) = &r {
                // the page follows the script's own time (Redis' clock), not
                // the round trip, which a busy network or client would inflate.
                let got = p.claim.rows.len();
                let took = Duration::from_micros(p.claim.script_us);
                let next = slots::adapt_page(page_size, got, took, max_page, budget);
                claim_page.store(next, std::sync::atomic::Ordering::Relaxed);
                metrics::gauge!("ankusa_claim_page_rows").set(next as f64);
                if p.claim.budget_stopped {
                    metrics::counter!("ankusa_script_budget_stops_total", "script" => "claim")
                        .increment(1);
                }
            }
            metrics::histogram!("ankusa_scan_duration_seconds")
                .record(started.elapsed().as_secs_f64());
            if matches!(r, Err(StoreError::Fenced)) {
                metrics::counter!("ankusa_redis_errors_total", "kind" => "fenced").increment(1);
            }
            let _ = tx.send(Event::Claimed(r));
        });
    }
}

/// One claim call plus the reads that bind its rows (hooks and sources, pipelined).
#[allow(clippy::too_many_arguments)]
pub(super) async fn claim_and_prepare(
    store: &Store,
    token: &str,
    epoch: u64,
    page: usize,
    default_room: usize,
    skip: &[String],
    rooms: &[(String, usize)],
    bytes: &crate::store::ByteRooms,
    budget: Duration,
    weights: &crate::store::ClaimWeights,
    space: Arc<str>,
) -> Result<Prepared, StoreError> {
    let skip_refs: Vec<&str> = skip.iter().map(String::as_str).collect();
    let room_refs: Vec<(&str, usize)> = rooms.iter().map(|(t, r)| (t.as_str(), *r)).collect();
    let request = crate::store::ClaimRequest {
        page,
        default_room,
        skip: &skip_refs,
        rooms: &room_refs,
        bytes: Some(bytes),
        budget: Some(budget),
        weights: Some(weights),
        read_hooks: true,
    };
    let mut claim = store.claim(token, epoch, request).await?;
    let ids: Vec<Option<RowId>> = claim.rows.iter().map(|r| RowId::parse(&r.row)).collect();
    let read = std::mem::take(&mut claim.hooks);
    let mut binder = Binder::fetch(store, &ids, read, claim.now_ms, space, budget).await?;
    let mut jobs = Vec::with_capacity(claim.rows.len());
    let mut immediate = Vec::new();
    for (r, id) in claim.rows.iter().zip(ids) {
        match binder.bind(r, id) {
            Ok(job) => jobs.push(job),
            Err(op) => immediate.push(Immediate {
                tenant: r.tenant.clone(),
                row: r.row.clone(),
                claim: r.claim,
                attempts: r.attempts,
                first_attempt_ms: r.first_attempt_ms,
                op,
                now_ms: claim.now_ms,
            }),
        }
    }
    Ok(Prepared {
        claim,
        jobs,
        immediate,
        page,
    })
}

/// A source's key: (tenant, source).
type SourceId = (String, String);
/// A sink entry's key: (tenant, source, index).
type EntryId = (String, String, u32);

/// What binds one claim's rows: their hooks and sources, read once for the page, and each
/// entry's parsed options and policy, built once per entry.
struct Binder {
    hooks: HashMap<u64, Option<Result<Arc<StoredHook>, String>>>,
    specs: HashMap<SourceId, Option<Result<crate::model::SourceSpec, String>>>,
    targets: HashMap<EntryId, Result<Arc<dyn Target>, String>>,
    entries: HashMap<EntryId, Arc<SinkEntry>>,
    /// Redis time of the claim (ms) and the local instant it was read.
    now: i64,
    claimed_at: Instant,
    /// The partition's message space (the random part of `webhook-id`).
    space: Arc<str>,
}

impl Binder {
    /// Bind with the hooks the claim `read` back; read the other hooks of `ids` (in calls
    /// under `budget`, `dispatch.script_budget_ms`) and the hooks' sources (pipelined; one
    /// round trip).
    async fn fetch(
        store: &Store,
        ids: &[Option<RowId>],
        read: Vec<(u64, Option<Result<StoredHook, String>>)>,
        now: i64,
        space: Arc<str>,
        budget: Duration,
    ) -> Result<Binder, StoreError> {
        let claimed_at = Instant::now();
        let mut hooks: HashMap<u64, Option<Result<Arc<StoredHook>, String>>> = read
            .into_iter()
            .map(|(id, h)| (id, h.map(|h| h.map(Arc::new))))
            .collect();
        let mut hook_ids: Vec<u64> = ids
            .iter()
            .flatten()
            .map(|r| r.hook)
            .filter(|h| !hooks.contains_key(h))
            .collect();
        hook_ids.sort_unstable();
        hook_ids.dedup();
        if !hook_ids.is_empty() {
            let rest = store.fetch_hooks(&hook_ids, Some(budget)).await?;
            hooks.extend(
                hook_ids
                    .iter()
                    .copied()
                    .zip(rest.into_iter().map(|h| h.map(|h| h.map(Arc::new)))),
            );
        }
        let mut source_keys: Vec<SourceId> = hooks
            .values()
            .flatten()
            .flatten()
            .map(|h| (h.tenant.clone(), h.source.clone()))
            .collect();
        source_keys.sort();
        source_keys.dedup();
        let specs = store.fetch_sources(&source_keys).await?;
        Ok(Binder {
            hooks,
            specs: source_keys.into_iter().zip(specs).collect(),
            targets: HashMap::new(),
            entries: HashMap::new(),
            now,
            claimed_at,
            space,
        })
    }

    /// A claimed row as a job ready to run, or the settle operation it gets at once: a row
    /// that cannot be read is dead-lettered `malformed` (and counted), a row whose hook is
    /// gone dropped, a row whose source or sink entry is gone dead-lettered
    /// `source_gone` / `sink_gone`, a disabled entry's `sink_disabled`.
    fn bind(&mut self, r: &crate::store::ClaimedRow, id: Option<RowId>) -> Result<Job, SettleOp> {
        let dead = |reason: DeadReason| SettleOp::DeadLetter {
            reason,
            error: String::new(),
        };
        let malformed = |detail: String| {
            metrics::counter!("ankusa_malformed_rows_total").increment(1);
            dead(DeadReason::Malformed(detail))
        };
        let Some(id) = id else {
            return Err(malformed(format!(
                "row id {:?}",
                truncate(r.row.clone(), 64)
            )));
        };
        let hook = match self.hooks.get(&id.hook).cloned().flatten() {
            Some(Ok(hook)) => hook,
            Some(Err(e)) => return Err(malformed(format!("hook {}: {e}", id.hook))),
            None => {
                // The hook is gone: nothing to deliver (dropped, not dead-lettered).
                metrics::counter!("ankusa_malformed_rows_total").increment(1);
                return Err(SettleOp::Drop);
            }
        };
        if hook.tenant != r.tenant {
            return Err(malformed(format!(
                "hook {} belongs to another tenant",
                id.hook
            )));
        }
        let Some(module) = hook.modules.get(id.sink as usize).cloned() else {
            return Err(malformed(format!(
                "sink index {} not in hook {}",
                id.sink, id.hook
            )));
        };
        let source_id = (hook.tenant.clone(), hook.source.clone());
        let spec = match self.specs.get(&source_id) {
            Some(Some(Ok(spec))) => spec,
            Some(Some(Err(e))) => return Err(malformed(format!("source spec: {e}"))),
            _ => return Err(dead(DeadReason::SourceGone(hook.source.clone()))),
        };
        let Some(index) = bind(&spec.sinks, id.sink, &module) else {
            return Err(dead(DeadReason::SinkGone(id.sink, module)));
        };
        let spec_entry = &spec.sinks[index as usize];
        if spec_entry.disabled.is_some() {
            // Disabled after prolonged failure: replayable once enabled again.
            return Err(dead(DeadReason::SinkDisabled(index)));
        }
        if let Some(filter) = &spec_entry.filter {
            // The filter as it is now, as every per-entry option: one edited
            // after the commit, or the one of the entry a reordered row falls back to,
            // refuses a hook its row was made for. Dropped, never dead-lettered.
            if !filter.matches_hook(hook.event_type.as_deref(), &hook.body, hook.headers.json()) {
                metrics::counter!("ankusa_rows_unmatched_total").increment(1);
                return Err(SettleOp::Unmatched);
            }
        }
        let entry_id = (source_id.0, source_id.1, index);
        let target = self
            .targets
            .entry(entry_id.clone())
            .or_insert_with(|| crate::sinks::registry::target_of(spec_entry))
            .clone();
        let entry = self
            .entries
            .entry(entry_id)
            .or_insert_with(|| Arc::new(spec_entry.clone()))
            .clone();
        let target = target.map_err(|e| SettleOp::DeadLetter {
            reason: DeadReason::Permanent(format!("invalid sink options: {e}")),
            error: e,
        })?;
        Ok(Job {
            tenant: r.tenant.clone(),
            row: id,
            claim: r.claim,
            hook_id: id.hook,
            key: SinkKey {
                tenant: r.tenant.as_str().into(),
                source: hook.source.as_str().into(),
                index,
                module: module.as_str().into(),
            },
            attempts: r.attempts,
            first_attempt_ms: r.first_attempt_ms,
            bytes: hook.body.len() as u64,
            hook,
            target,
            entry,
            claim_ms: self.now,
            claimed_at: self.claimed_at,
            probe: false,
            status: None,
            space: self.space.clone(),
            span: tracing::Span::none(),
            traceparent: None,
        })
    }
}

/// Bind a row to a sink entry: its own index when the module still matches, else the
/// one entry with its module; `None` when neither holds (`sink_gone`).
pub(crate) fn bind(sinks: &[SinkEntry], index: u32, module: &str) -> Option<u32> {
    if sinks
        .get(index as usize)
        .is_some_and(|s| s.module == module)
    {
        return Some(index);
    }
    let mut same = sinks.iter().enumerate().filter(|(_, s)| s.module == module);
    match (same.next(), same.next()) {
        (Some((i, _)), None) => Some(i as u32),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(m: &str) -> SinkEntry {
        SinkEntry {
            module: m.into(),
            opts: Default::default(),
            ordered: false,
            key: None,
            ..Default::default()
        }
    }

    #[test]
    fn a_row_binds_to_its_index_or_the_one_entry_with_its_module() {
        let s = [entry("http"), entry("sqs")];
        assert_eq!(bind(&s, 0, "http"), Some(0));
        assert_eq!(bind(&s, 1, "http"), Some(0)); // reordered
        assert_eq!(bind(&s, 5, "sqs"), Some(1));
        assert_eq!(bind(&s, 0, "pubsub"), None); // sink_gone
        let two = [entry("http"), entry("http")];
        assert_eq!(bind(&two, 2, "http"), None); // ambiguous: sink_gone
    }
}
