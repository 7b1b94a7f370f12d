//! Claiming: one `claim.lua` call per scan, then the reads that bind each claimed row to
//! its hook, its source and a sink entry (R2, R3, R19, R20).

use super::*;

impl Session {
    pub(super) fn maybe_claim(&mut self) {
        if self.claiming || !self.claim_wanted || !self.lease_ok() {
            return;
        }
        if self.cfg.leader.test_wedge_claim_loop {
            return; // TEST ONLY: a wedged claim loop, for the leader's self-check
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
        let bytes = self.slots.byte_rooms();
        let store = self.ctx.store.clone();
        let (token, epoch) = (self.ctx.token.clone(), self.ctx.epoch);
        let tx = self.tx.clone();
        let health = self.ctx.health.clone();
        let claim_page = self.claim_page.clone();
        let budget = Duration::from_millis(self.cfg.dispatch.script_budget_ms);
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
            )
            .await;
            health.record_write("claim", &r);
            if let Ok(p) = &r {
                // Issue 17.11: the page follows the script's own time (Redis' clock), not
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
) -> Result<Prepared, StoreError> {
    let skip_refs: Vec<&str> = skip.iter().map(String::as_str).collect();
    let room_refs: Vec<(&str, usize)> = rooms.iter().map(|(t, r)| (t.as_str(), *r)).collect();
    let claim = store
        .claim_budgeted(
            token,
            epoch,
            page,
            default_room,
            &skip_refs,
            &room_refs,
            Some(bytes),
            Some(budget),
        )
        .await?;
    let claimed_at = Instant::now();
    let now = claim.now_ms;

    let ids: Vec<Option<RowId>> = claim.rows.iter().map(|r| RowId::parse(&r.row)).collect();
    let mut hook_ids: Vec<u64> = ids.iter().flatten().map(|r| r.hook).collect();
    hook_ids.sort_unstable();
    hook_ids.dedup();
    let hooks = store.fetch_hooks(&hook_ids).await?;
    let hooks: HashMap<u64, Option<Result<Arc<StoredHook>, String>>> = hook_ids
        .iter()
        .copied()
        .zip(hooks.into_iter().map(|h| h.map(|h| h.map(Arc::new))))
        .collect();

    let mut source_keys: Vec<(String, String)> = hooks
        .values()
        .flatten()
        .flatten()
        .map(|h| (h.tenant.clone(), h.source.clone()))
        .collect();
    source_keys.sort();
    source_keys.dedup();
    let specs = store.fetch_sources(&source_keys).await?;
    let specs: HashMap<(String, String), Option<Result<crate::model::SourceSpec, String>>> =
        source_keys.into_iter().zip(specs).collect();
    let mut targets: HashMap<(String, String, u32), Result<Arc<Target>, String>> = HashMap::new();
    let mut entries: HashMap<(String, String, u32), Arc<SinkEntry>> = HashMap::new();

    let mut jobs = Vec::with_capacity(claim.rows.len());
    let mut immediate = Vec::new();
    for (r, id) in claim.rows.iter().zip(ids) {
        let imm = |op: SettleOp| Immediate {
            tenant: r.tenant.clone(),
            row: r.row.clone(),
            claim: r.claim,
            attempts: r.attempts,
            first_attempt_ms: r.first_attempt_ms,
            op,
            now_ms: now,
        };
        let dead = |reason: DeadReason| SettleOp::DeadLetter {
            reason,
            error: String::new(),
        };
        // Every row that cannot be read is counted, whatever its fate.
        let malformed = |detail: String| {
            metrics::counter!("ankusa_malformed_rows_total").increment(1);
            dead(DeadReason::Malformed(detail))
        };
        let Some(id) = id else {
            immediate.push(imm(malformed(format!(
                "row id {:?}",
                truncate(r.row.clone(), 64)
            ))));
            continue;
        };
        let hook = match hooks.get(&id.hook).cloned().flatten() {
            Some(Ok(hook)) => hook,
            Some(Err(e)) => {
                immediate.push(imm(malformed(format!("hook {}: {e}", id.hook))));
                continue;
            }
            None => {
                // The hook is gone: nothing to deliver (R20: dropped, not dead-lettered).
                metrics::counter!("ankusa_malformed_rows_total").increment(1);
                immediate.push(imm(SettleOp::Drop));
                continue;
            }
        };
        if hook.tenant != r.tenant {
            immediate.push(imm(malformed(format!(
                "hook {} belongs to another tenant",
                id.hook
            ))));
            continue;
        }
        let Some(module) = hook.modules.get(id.sink as usize).cloned() else {
            immediate.push(imm(malformed(format!(
                "sink index {} not in hook {}",
                id.sink, id.hook
            ))));
            continue;
        };
        let spec = match specs.get(&(hook.tenant.clone(), hook.source.clone())) {
            Some(Some(Ok(spec))) => spec,
            Some(Some(Err(e))) => {
                immediate.push(imm(malformed(format!("source spec: {e}"))));
                continue;
            }
            _ => {
                immediate.push(imm(dead(DeadReason::SourceGone(hook.source.clone()))));
                continue;
            }
        };
        let Some(index) = bind(&spec.sinks, id.sink, &module) else {
            immediate.push(imm(dead(DeadReason::SinkGone(id.sink, module))));
            continue;
        };
        if spec.sinks[index as usize].disabled.is_some() {
            // Disabled after prolonged failure (P9): replayable once enabled again.
            immediate.push(imm(dead(DeadReason::SinkDisabled(index))));
            continue;
        }
        let target = targets
            .entry((hook.tenant.clone(), hook.source.clone(), index))
            .or_insert_with(|| {
                let entry = &spec.sinks[index as usize];
                let ordered = entry.ordered;
                match Module::parse(&entry.module) {
                    Some(Module::Http) => {
                        HttpOpts::from_opts(&entry.opts).map(|o| Arc::new(Target::Http(o)))
                    }
                    Some(Module::Sqs) => SqsOpts::from_opts(&entry.opts)
                        .map(|opts| Arc::new(Target::Sqs { opts, ordered })),
                    Some(Module::PubSub) => PubSubOpts::from_opts(&entry.opts)
                        .map(|opts| Arc::new(Target::PubSub { opts, ordered })),
                    None => Err(format!(
                        "module {} is not supported by this worker",
                        entry.module
                    )),
                }
            })
            .clone();
        let entry = entries
            .entry((hook.tenant.clone(), hook.source.clone(), index))
            .or_insert_with(|| Arc::new(spec.sinks[index as usize].clone()))
            .clone();
        let target = match target {
            Ok(t) => t,
            Err(e) => {
                immediate.push(imm(SettleOp::DeadLetter {
                    reason: DeadReason::Permanent(format!("invalid sink options: {e}")),
                    error: e,
                }));
                continue;
            }
        };
        jobs.push(Job {
            tenant: r.tenant.clone(),
            row: r.row.clone(),
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
            claim_ms: now,
            claimed_at,
            probe: false,
            status: None,
        });
    }
    Ok(Prepared {
        claim,
        jobs,
        immediate,
        page,
    })
}

/// Bind a row to a sink entry (R19): its own index when the module still matches, else the
/// one entry with its module; `None` when neither holds (`sink_gone`).
pub fn bind(sinks: &[SinkEntry], index: u32, module: &str) -> Option<u32> {
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
