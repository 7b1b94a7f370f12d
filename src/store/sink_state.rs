//! `sink_state.lua`: disabling a sink entry after prolonged failure and enabling it again
//!, with the operational event in the `events` stream.

use super::*;
use crate::model::Disabled;

/// An operational event, as appended to the `events` stream and POSTed to
/// `operator.events_url`.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct SinkEvent {
    /// The stream entry id (`<ms>-<n>`), also the POST's `webhook-id`.
    pub id: String,
    /// `sink_disabled`, `sink_enabled`, `breaker_opened`, `breaker_closed`,
    /// `row_dead_lettered` or `hook_exhausted`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// The entry's index in the source's list.
    pub sink: u32,
    /// The entry's module.
    pub module: String,
    /// Why (`failing for 3012 ms since …: http 500`, `3 consecutive failures; open for
    /// 2000 ms; last error: http 503`, `max_attempts(http): http 500`), empty for an enable.
    pub reason: String,
    /// When, Unix ms.
    pub at_ms: i64,
    /// `row_dead_lettered`, `hook_exhausted`: the hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<u64>,
    /// `row_dead_lettered`: the attempts made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// `row_dead_lettered`, `hook_exhausted`: the hook's event type, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// `row_dead_lettered`, `hook_exhausted`: the first 256 bytes of the hook's body as
    /// text (invalid UTF-8 replaced by U+FFFD). Content the producer sent: escape it where
    /// it is shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_prefix: Option<String>,
    /// `row_dead_lettered`: dead letters of the same sink entry since the previous such
    /// event that had none of their own (one event per entry per minute at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<u64>,
}

/// What [`Store::set_sink_disabled`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkStateChange {
    /// The entry changed state; the event was appended.
    Changed(Box<SinkEvent>),
    /// Nothing to do: the entry is already in that state, or it is no longer the entry asked
    /// for (another module at that index: the source was edited).
    Unchanged,
}

impl Store {
    /// Disable (`disabled: Some`) or enable (`None`) entry `index` of `tenant/source`,
    /// compare-and-set on the source's version (re-read on a concurrent edit), and append
    /// the event to the `events` stream trimmed to about `events_max_len`. `token`: the
    /// leader's lease token (fenced), or `None` for an operator's command. `module`, when
    /// given, must be the entry's module (the leader's disable names the key it saw fail).
    /// Errors: [`SourceError::NotFound`] for an unknown source or index, `Store(Fenced)`.
    #[allow(clippy::too_many_arguments)]
    pub async fn set_sink_disabled(
        &self,
        token: Option<&str>,
        tenant: &str,
        source: &str,
        index: u32,
        module: Option<&str>,
        disabled: Option<Disabled>,
        events_max_len: u64,
    ) -> Result<SinkStateChange, SourceError> {
        // The tenant's partition.
        let this = self.for_tenant(tenant);
        crate::ids::check_id("tenant", tenant)?;
        crate::ids::check_id("source", source)?;
        for _ in 0..8 {
            let key = this.ks.source(tenant, source);
            let (spec, version): (Option<String>, Option<String>) = self
                .client()
                .hmget(&key, vec!["spec", "version"])
                .await
                .map_err(StoreError::from)?;
            let (Some(spec), Some(version)) = (spec, version) else {
                return Err(SourceError::NotFound(format!("source {tenant}/{source}")));
            };
            let mut spec: SourceSpec = serde_json::from_str(&spec).map_err(|e| {
                SourceError::Invalid(format!("stored spec of {tenant}/{source}: {e}"))
            })?;
            let Some(entry) = spec.sinks.get_mut(index as usize) else {
                return Err(SourceError::NotFound(format!(
                    "sink entry {index} of {tenant}/{source}"
                )));
            };
            // The leader disables only an entry that still asks for it (the source may have
            // been edited since the failures began).
            let unasked = token.is_some() && disabled.is_some() && entry.disable_after_ms.is_none();
            if module.is_some_and(|m| m != entry.module)
                || entry.disabled.is_some() == disabled.is_some()
                || unasked
            {
                return Ok(SinkStateChange::Unchanged);
            }
            let at_ms = disabled.as_ref().map_or_else(unix_now_ms, |d| d.at_ms);
            let event = SinkEvent {
                id: String::new(),
                kind: if disabled.is_some() {
                    "sink_disabled"
                } else {
                    "sink_enabled"
                }
                .into(),
                tenant: tenant.into(),
                source: source.into(),
                sink: index,
                module: entry.module.clone(),
                reason: disabled
                    .as_ref()
                    .map(|d| d.reason.clone())
                    .unwrap_or_default(),
                at_ms,
                ..SinkEvent::default()
            };
            entry.disabled = disabled.clone();
            let json =
                serde_json::to_string(&spec).map_err(|e| SourceError::Invalid(e.to_string()))?;
            let mut args: Vec<Value> = vec![
                this.prefix(),
                token.unwrap_or("").into(),
                tenant.into(),
                source.into(),
                version.as_str().into(),
                json.into(),
                spec.gates_json().unwrap_or_default().into(),
                (events_max_len.max(1) as i64).into(),
            ];
            for (k, v) in [
                ("type", event.kind.clone()),
                ("tenant", event.tenant.clone()),
                ("source", event.source.clone()),
                ("sink", index.to_string()),
                ("module", event.module.clone()),
                ("reason", event.reason.clone()),
                ("at", at_ms.to_string()),
            ] {
                args.push(k.into());
                args.push(v.into());
            }
            let v = this.call(&this.scripts.sink_state, args).await?;
            match status(&v) {
                "ok" => {
                    let id = v.get(2).map(Value::text).unwrap_or_default();
                    if id.is_empty() {
                        return Err(StoreError::protocol("sink_state", "no event id").into());
                    }
                    return Ok(SinkStateChange::Changed(Box::new(SinkEvent {
                        id,
                        ..event
                    })));
                }
                "changed" => continue,
                "fenced" => return Err(StoreError::Fenced.into()),
                "unknown_source" => {
                    return Err(SourceError::NotFound(format!("source {tenant}/{source}")))
                }
                other => {
                    return Err(
                        StoreError::protocol("sink_state", format!("status {other:?}")).into(),
                    )
                }
            }
        }
        Err(SourceError::Unavailable(format!(
            "{tenant}/{source} kept changing while entry {index} was being updated"
        )))
    }

    /// Append an operational event the leader observed (a breaker's transition, a dead
    /// letter) to the `events` stream, trimmed to about `max_len`; returns its id.
    /// Not fenced: it records what happened, it moves no row.
    pub async fn append_event(&self, e: &SinkEvent, max_len: u64) -> Result<String, StoreError> {
        let mut fields: Vec<(&str, String)> = vec![
            ("type", e.kind.clone()),
            ("tenant", e.tenant.clone()),
            ("source", e.source.clone()),
            ("sink", e.sink.to_string()),
            ("module", e.module.clone()),
            ("reason", e.reason.clone()),
            ("at", e.at_ms.to_string()),
        ];
        let optional = [
            ("hook", e.hook.map(|h| h.to_string())),
            ("attempts", e.attempts.map(|a| a.to_string())),
            ("et", e.event_type.clone()),
            ("body", e.body_prefix.clone()),
            ("suppressed", e.suppressed.map(|s| s.to_string())),
        ];
        fields.extend(optional.into_iter().filter_map(|(k, v)| Some((k, v?))));
        let cap = ("MAXLEN", "~", max_len.max(1) as i64);
        let id: String = self
            .client()
            .xadd(self.ks.events(), false, cap, "*", fields)
            .await?;
        Ok(id)
    }

    /// The last `count` operational events, oldest first.
    pub async fn sink_events(&self, count: u64) -> Result<Vec<SinkEvent>, StoreError> {
        let v: Value = self
            .client()
            .xrevrange(self.ks.events(), "+", "-", Some(count))
            .await?;
        let mut out = Vec::new();
        if let Value::Array(entries) = v {
            for e in entries {
                let Value::Array(pair) = e else { continue };
                let (Some(id), Some(Value::Array(kv))) = (pair.first(), pair.get(1)) else {
                    continue;
                };
                let mut f = std::collections::HashMap::new();
                for c in kv.chunks(2) {
                    if let [k, v] = c {
                        f.insert(k.text(), v.text());
                    }
                }
                let g = |k: &str| f.get(k).cloned().unwrap_or_default();
                out.push(SinkEvent {
                    id: id.text(),
                    kind: g("type"),
                    tenant: g("tenant"),
                    source: g("source"),
                    sink: g("sink").parse().unwrap_or(0),
                    module: g("module"),
                    reason: g("reason"),
                    at_ms: g("at").parse().unwrap_or(0),
                    hook: f.get("hook").and_then(|h| h.parse().ok()),
                    attempts: f.get("attempts").and_then(|a| a.parse().ok()),
                    event_type: f.get("et").cloned(),
                    body_prefix: f.get("body").cloned(),
                    suppressed: f.get("suppressed").and_then(|s| s.parse().ok()),
                });
            }
        }
        out.reverse();
        Ok(out)
    }
}

/// This machine's clock, ms since the Unix epoch: an operator's enable is stamped with the
/// time it was asked for (a leader's disable carries its own).
fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
