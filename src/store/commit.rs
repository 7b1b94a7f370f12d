//! `commit.lua`: committing a hook and its delivery rows, with producer
//! idempotency keys, event types and scheduled delivery.

use super::*;

/// What a commit stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitReceipt {
    /// Id of the first hook; the call's hooks have consecutive ids.
    pub first_hook: u64,
    /// Rows made per hook: one per sink entry of the source at commit whose event filter the
    /// hook passes and that is not disabled. With event types set, the rows of the
    /// first hook (each hook's are in [`Store::commit_with`]'s answer); without, every hook
    /// of the call gets this many.
    pub rows_per_hook: u32,
    /// Commit time (ms, Redis clock).
    pub committed_at_ms: i64,
    /// Hooks of the call that matched no sink entry: counted (`stats` field `unmatched`,
    /// `ankusa_hooks_unmatched_total`) and not stored, not an error.
    pub unmatched: u32,
}

/// The longest producer idempotency key accepted, bytes.
pub const IDEMPOTENCY_KEY_MAX_BYTES: usize = 256;

/// When a scheduled hook is delivered: its rows are due then instead of at the commit.
/// A time not after the commit (by the Redis clock) is due at once; one further ahead than
/// the leader's `commit.max_delay_ms` is refused ([`CommitError::TooLate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// At this time, ms since the Unix epoch, as the Redis server's clock tells it.
    At(u64),
    /// This long after the commit, ms, by the Redis server's clock.
    Delay(u64),
}

impl Schedule {
    /// When a hook with this schedule committed at `committed_at_ms` (the receipt's time,
    /// Redis clock) is due, ms since the epoch; `None` when that is not after the commit
    /// (due at once).
    pub fn due_at_ms(self, committed_at_ms: i64) -> Option<i64> {
        let at = match self {
            Schedule::At(ms) => i64::try_from(ms).unwrap_or(i64::MAX),
            Schedule::Delay(ms) => {
                committed_at_ms.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
            }
        };
        (at > committed_at_ms).then_some(at)
    }
}

/// Options of [`Store::commit_with`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitOptions {
    /// One producer idempotency key per hook (`None`: that hook has none), or empty.
    pub idempotency_keys: Vec<Option<String>>,
    /// How long a key answers the first hook's id, ms (`commit.idempotency_ms`).
    pub idempotency_ms: u64,
    /// Make the row of this sink entry only (resend), not one per entry.
    pub only_sink: Option<u32>,
    /// One event type per hook (`None`: that hook has none), or empty: what the entries'
    /// event filters match. Each is checked by [`crate::model::check_event_type`].
    pub event_types: Vec<Option<String>>,
    /// One delivery time per hook (`None`: due at once), or empty: scheduled delivery.
    pub schedules: Vec<Option<Schedule>>,
    /// What the tenant's stored hooks may hold with this call's ([`Quota`]); `None`: no
    /// bound (the operator's own producers).
    pub quota: Option<Quota>,
}

/// A tenant's quota as the commit script checks it: the call is refused
/// ([`CommitError::QuotaExceeded`]) when the tenant's stored hooks (pending or dead-lettered)
/// and those it adds would exceed either bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// Most body bytes.
    pub max_bytes: u64,
    /// Most hooks.
    pub max_hooks: u64,
    /// The config keys they come from (`limits.max_pending_bytes` or
    /// `tenants.<id>.max_pending_bytes`, then the hooks' one), named by the refusal.
    pub keys: [String; 2],
}

fn decode_receipt(v: &[Value], hooks: usize) -> Result<CommitReceipt, StoreError> {
    let r = Reply::new("commit", v);
    let rows_per_hook = u32::try_from(r.count(2)?)
        .map_err(|_| StoreError::protocol("commit", "field 2: rows per hook out of range"))?;
    Ok(CommitReceipt {
        first_hook: r.count(1)?,
        rows_per_hook,
        committed_at_ms: r.int(3)?,
        unmatched: if rows_per_hook == 0 { hooks as u32 } else { 0 },
    })
}

impl Store {
    /// `WAIT` until the `replicas` attached when the commit ran acknowledged it (the
    /// connection's last write), for `redis.commit_wait_ms`: a commit a promoted replica
    /// would not have is never acknowledged. Not on a Cluster, where `WAIT` would go to
    /// another node than the commit's (`min-replicas-to-write` is the tool there).
    async fn wait_replicas(&self, client: &Client, replicas: u64) -> Result<(), CommitError> {
        if replicas == 0 || self.commit_wait_ms == 0 || self.topology == Topology::Cluster {
            return Ok(());
        }
        let acked: i64 = client
            .wait(replicas as i64, self.commit_wait_ms as i64)
            .await
            .map_err(StoreError::from)?;
        if (acked as u64) < replicas {
            metrics::counter!("ankusa_commits_not_replicated_total").increment(1);
            return Err(CommitError::NotReplicated {
                replicas: replicas as u32,
                acknowledged: acked.max(0) as u32,
                written: true,
            });
        }
        Ok(())
    }

    /// Commit hooks to `(tenant, source)` atomically: each body stored once, one row per
    /// sink entry due now, the scheduler woken. `hooks` are `(body, headers JSON or "")`.
    /// Errors: unknown source, a body over `max_hook_bytes`, bad ids; nothing written then.
    pub async fn commit(
        &self,
        tenant: &str,
        source: &str,
        hooks: &[(Bytes, String)],
        max_hook_bytes: usize,
    ) -> Result<CommitReceipt, CommitError> {
        let v = self
            .commit_call(tenant, source, hooks, max_hook_bytes, Vec::new(), 4)
            .await?;
        Ok(decode_receipt(&v, hooks.len())?)
    }

    /// The commit script call behind [`Store::commit`] and [`Store::commit_with`]: checks,
    /// then the script with `extra` options after the hooks; the `ok` reply as it came.
    async fn commit_call(
        &self,
        tenant: &str,
        source: &str,
        hooks: &[(Bytes, String)],
        max_hook_bytes: usize,
        extra: Vec<Value>,
        reply_len: usize,
    ) -> Result<Vec<Value>, CommitError> {
        crate::model::check_id("tenant", tenant)
            .map_err(|e| CommitError::BadRequest(e.to_string()))?;
        crate::model::check_id("source", source)
            .map_err(|e| CommitError::BadRequest(e.to_string()))?;
        if hooks.is_empty() {
            return Err(CommitError::BadRequest("no hooks".into()));
        }
        for (index, (body, _)) in hooks.iter().enumerate() {
            if body.len() > max_hook_bytes {
                return Err(CommitError::TooLarge {
                    index,
                    size: body.len(),
                    max: max_hook_bytes,
                });
            }
        }
        // The tenant's partition: this store itself with one partition.
        let this = self.for_tenant(tenant);
        let mut args = Vec::with_capacity(5 + 2 * hooks.len() + extra.len());
        args.extend([
            this.prefix(),
            tenant.into(),
            source.into(),
            (max_hook_bytes as i64).into(),
            (hooks.len() as i64).into(),
        ]);
        for (body, headers) in hooks {
            args.push(Value::Bytes(body.clone()));
            args.push(Value::from(headers.as_str()));
        }
        args.extend(extra);
        let client = this.pool.next();
        let keys = vec![this.ks.lease()];
        let mut v = this
            .call_on(client, &this.scripts.commit, keys, args)
            .await?;
        let r = Reply::new("commit", &v);
        match status(&v) {
            "ok" => {
                // The replicas attached to the primary follow the reply (none when nothing
                // was written: a source without sinks).
                if v.len() == reply_len + 1 {
                    let replicas = r.count(reply_len)?;
                    v.pop();
                    this.wait_replicas(client, replicas).await?;
                }
                Ok(v)
            }
            "replica_lost" => Err(CommitError::NotReplicated {
                replicas: r.count(2)? as u32,
                acknowledged: r.count(1)? as u32,
                written: false,
            }),
            "not_primary" => {
                let named = r.text(1)?;
                // Behind sentinels fred asks them again on reconnect; a store given this
                // server's own address has nowhere else to go.
                if this.sentinels.is_some() {
                    this.follow_primary(&format!(
                        "a commit reached a deposed master; the sentinels name {named}"
                    ))
                    .await;
                }
                Err(CommitError::NotPrimary { named })
            }
            "unknown_source" => Err(CommitError::UnknownSource {
                tenant: tenant.into(),
                source_id: source.into(),
            }),
            "too_large" => Err(CommitError::TooLarge {
                index: r.count(1)?.saturating_sub(1) as usize,
                size: r.count(2)? as usize,
                // The limit the script enforced (kept server side).
                max: r.count(3)? as usize,
            }),
            "bad_request" => Err(CommitError::BadRequest(r.text(1)?)),
            "too_late" => Err(CommitError::TooLate {
                index: r.count(1)?.saturating_sub(1) as usize,
                ahead_ms: r.count(2)?,
                max_ms: r.count(3)?,
            }),
            "quota" => Err(CommitError::QuotaExceeded {
                tenant: tenant.into(),
                what: match r.text(1)?.as_str() {
                    "bytes" => QuotaKind::Bytes,
                    _ => QuotaKind::Hooks,
                },
                held: r.count(2)?,
                adding: r.count(3)?,
                max: r.count(4)?,
                key: String::new(),
            }),
            "reserved_header" => Err(CommitError::ReservedHeader {
                index: r.count(1)?.saturating_sub(1) as usize,
                name: r.text(2)?,
            }),
            other => Err(StoreError::protocol("commit", format!("status {other:?}")).into()),
        }
    }

    /// [`Store::commit`] with options (`docs/commit-protocol.md`): producer idempotency keys
    /// (one per hook, `None` for none) honoured for `opts.idempotency_ms`, and/or rows for one
    /// sink entry only. Returns the receipt and each hook's id: a hook whose key was
    /// committed within the window answers the first hook's id and is not written again.
    pub async fn commit_with(
        &self,
        tenant: &str,
        source: &str,
        hooks: &[(Bytes, String)],
        max_hook_bytes: usize,
        opts: &CommitOptions,
    ) -> Result<(CommitReceipt, Vec<u64>), CommitError> {
        if !opts.idempotency_keys.is_empty() && opts.idempotency_keys.len() != hooks.len() {
            return Err(CommitError::BadRequest(
                "one idempotency key (or none) per hook".into(),
            ));
        }
        let mut extra: Vec<Value> = Vec::new();
        if opts.idempotency_keys.iter().any(Option::is_some) {
            extra.push("idem".into());
            extra.push((opts.idempotency_ms.max(1) as i64).into());
            for k in &opts.idempotency_keys {
                let k = k.as_deref().unwrap_or("");
                if k.len() > IDEMPOTENCY_KEY_MAX_BYTES {
                    return Err(CommitError::BadRequest(format!(
                        "idempotency key over {IDEMPOTENCY_KEY_MAX_BYTES} bytes"
                    )));
                }
                extra.push(k.into());
            }
        }
        if let Some(q) = &opts.quota {
            extra.push("quota".into());
            extra.push((q.max_bytes.min(1 << 53) as i64).into());
            extra.push((q.max_hooks.min(1 << 53) as i64).into());
        }
        if let Some(i) = opts.only_sink {
            extra.push("sink".into());
            extra.push((i as i64).into());
        }
        if !opts.event_types.is_empty() && opts.event_types.len() != hooks.len() {
            return Err(CommitError::BadRequest(
                "one event type (or none) per hook".into(),
            ));
        }
        let events = opts.event_types.iter().any(Option::is_some);
        if events {
            extra.push("events".into());
            for e in &opts.event_types {
                let e = e.as_deref().unwrap_or("");
                if !e.is_empty() {
                    crate::model::check_event_type(e).map_err(CommitError::BadRequest)?;
                }
                extra.push(e.into());
            }
        }
        if !opts.schedules.is_empty() && opts.schedules.len() != hooks.len() {
            return Err(CommitError::BadRequest(
                "one delivery time (or none) per hook".into(),
            ));
        }
        // `deliver_at` and `delay` each list every hook ('' for a hook without one).
        let at = opts.schedules.iter().map(|s| match s {
            Some(Schedule::At(ms)) => Some(*ms),
            _ => None,
        });
        let delay = opts.schedules.iter().map(|s| match s {
            Some(Schedule::Delay(ms)) => Some(*ms),
            _ => None,
        });
        for (word, values) in [
            ("deliver_at", at.collect::<Vec<_>>()),
            ("delay", delay.collect()),
        ] {
            if values.iter().any(Option::is_some) {
                extra.push(word.into());
                for v in values {
                    if v.is_some_and(|ms| ms >= 1 << 53) {
                        return Err(CommitError::BadRequest(format!(
                            "{word} must be below 2^53 ms"
                        )));
                    }
                    extra.push(v.map_or_else(String::new, |ms| ms.to_string()).into());
                }
            }
        }
        let n = hooks.len();
        let keyed = opts.idempotency_keys.iter().any(Option::is_some);
        let reply_len = match (keyed, events) {
            (_, true) => 4 + 2 * n,
            (true, false) => 4 + n,
            (false, false) => 4,
        };
        let v = self
            .commit_call(tenant, source, hooks, max_hook_bytes, extra, reply_len)
            .await
            .map_err(|e| match (e, &opts.quota) {
                (
                    CommitError::QuotaExceeded {
                        what,
                        held,
                        adding,
                        max,
                        ..
                    },
                    Some(q),
                ) => {
                    let key = q.keys[usize::from(what == QuotaKind::Hooks)].clone();
                    CommitError::QuotaExceeded {
                        tenant: tenant.into(),
                        what,
                        held,
                        adding,
                        max,
                        key,
                    }
                }
                (e, _) => e,
            })?;
        let mut receipt = decode_receipt(&v, hooks.len())?;
        if events {
            // ['ok', first, rows of hook 1, now, n ids, n row counts]
            let n = hooks.len();
            if v.len() != 4 + 2 * n {
                return Err(StoreError::protocol(
                    "commit",
                    format!("{} reply items for {n} hooks with event types", v.len()),
                )
                .into());
            }
            let r = Reply::new("commit", &v);
            let ids = (4..4 + n).map(|i| r.count(i)).collect::<Result<_, _>>()?;
            let mut unmatched = 0;
            for i in 4 + n..4 + 2 * n {
                if r.count(i)? == 0 {
                    unmatched += 1;
                }
            }
            receipt.unmatched = unmatched;
            return Ok((receipt, ids));
        }
        let ids = if v.len() > 4 {
            let r = Reply::new("commit", &v);
            (4..v.len()).map(|i| r.count(i)).collect::<Result<_, _>>()?
        } else {
            (0..hooks.len() as u64)
                .map(|i| receipt.first_hook + i)
                .collect()
        };
        Ok((receipt, ids))
    }
}
