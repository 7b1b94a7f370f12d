//! The delivery log's stream in Redis (`log`, written by `settle.lua` with a log store): read
//! in order by the partition's archiver, trimmed once archived.

use super::*;
use std::collections::BTreeMap;

/// One entry of the `log` stream as `settle.lua` writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogEntry {
    /// The entry id.
    pub id: String,
    /// Field `r`: the records, one JSON object per line (read lossily if not UTF-8).
    pub records: String,
    /// Fields `b:<hook>` and `h:<hook>`: hook → (producer headers, body bytes) kept.
    pub bodies: BTreeMap<u64, (String, Vec<u8>)>,
    /// Bytes of every field's value: what the entry holds of the stream's budget.
    pub bytes: u64,
}

/// The entries of an `XRANGE` answer; an entry of another shape is skipped.
fn log_entries(v: Value) -> Vec<LogEntry> {
    let mut out = Vec::new();
    let Value::Array(entries) = v else { return out };
    for e in entries {
        let Value::Array(pair) = e else { continue };
        let mut it = pair.into_iter();
        let (Some(id), Some(Value::Array(kv))) = (it.next(), it.next()) else {
            continue;
        };
        let mut entry = LogEntry {
            id: id.as_string().unwrap_or_default(),
            ..LogEntry::default()
        };
        let mut headers: BTreeMap<u64, String> = BTreeMap::new();
        for c in kv.chunks_exact(2) {
            let name = c[0].as_string().unwrap_or_default();
            let value: Vec<u8> = match &c[1] {
                Value::Bytes(b) => b.to_vec(),
                Value::String(s) => s.as_bytes().to_vec(),
                other => other.as_string().unwrap_or_default().into_bytes(),
            };
            entry.bytes += value.len() as u64;
            if name == "r" {
                entry.records = String::from_utf8_lossy(&value).into_owned();
            } else if let Some(h) = name.strip_prefix("b:").and_then(|h| h.parse().ok()) {
                entry.bodies.entry(h).or_default().1 = value;
            } else if let Some(h) = name.strip_prefix("h:").and_then(|h| h.parse().ok()) {
                headers.insert(h, String::from_utf8_lossy(&value).into_owned());
            }
        }
        for (h, hd) in headers {
            if let Some(b) = entry.bodies.get_mut(&h) {
                b.0 = hd;
            }
        }
        out.push(entry);
    }
    out
}

impl Store {
    /// Up to `count` entries of this partition's `log` stream after entry id `after` (`""`:
    /// from the first), oldest first.
    pub async fn log_read(&self, after: &str, count: u64) -> Result<Vec<LogEntry>, StoreError> {
        let start = if after.is_empty() {
            "-".to_string()
        } else {
            format!("({after}")
        };
        let v: Value = self
            .client()
            .xrange(self.ks.log(), start, "+", Some(count))
            .await?;
        Ok(log_entries(v))
    }

    /// Remove the entries up to and including `through` (an entry id) from the `log` stream:
    /// what the archiver has written to the log store. Returns how many went.
    pub async fn log_trim(&self, through: &str) -> Result<u64, StoreError> {
        let Some(next) = next_stream_id(through) else {
            return Err(StoreError::protocol(
                "log trim",
                format!("{through:?} is not a stream entry id"),
            ));
        };
        let n: u64 = self
            .client()
            .xtrim(self.ks.log(), ("MINID", "=", next.as_str()))
            .await?;
        Ok(n)
    }

    /// Release `bytes` of the stream's budget (`stats` field `log_bytes`, which `settle.lua`
    /// raises as it writes): what the archiver wrote to the log store.
    pub async fn log_release(&self, bytes: u64) -> Result<(), StoreError> {
        let left: i64 = self
            .client()
            .hincrby(
                self.ks.stats(),
                "log_bytes",
                -(bytes.min(i64::MAX as u64) as i64),
            )
            .await?;
        if left < 0 {
            let _: () = self
                .client()
                .hset(self.ks.stats(), ("log_bytes", 0))
                .await?;
        }
        Ok(())
    }

    /// Entries in this partition's `log` stream and the bytes of records they hold (as
    /// `settle.lua` counted them, less what the archiver released).
    pub async fn log_usage(&self) -> Result<(u64, u64), StoreError> {
        let len: u64 = self.client().xlen(self.ks.log()).await?;
        let used: Option<String> = self.client().hget(self.ks.stats(), "log_bytes").await?;
        Ok((len, used.and_then(|u| u.parse().ok()).unwrap_or(0)))
    }

    /// Entries in this partition's `log` stream, and the records `settle.lua` dropped since
    /// the stream was at its most entries (`stats` field `log_dropped`).
    pub async fn log_backlog(&self) -> Result<(u64, u64), StoreError> {
        let len: u64 = self.client().xlen(self.ks.log()).await?;
        let dropped: Option<String> = self.client().hget(self.ks.stats(), "log_dropped").await?;
        Ok((len, dropped.and_then(|d| d.parse().ok()).unwrap_or(0)))
    }
}

/// The smallest stream id after `id` (`<ms>-<seq>`): `MINID` keeps it and what follows.
fn next_stream_id(id: &str) -> Option<String> {
    let (ms, seq) = id.split_once('-')?;
    let (ms, seq): (u64, u64) = (ms.parse().ok()?, seq.parse().ok()?);
    Some(match seq.checked_add(1) {
        Some(s) => format!("{ms}-{s}"),
        None => format!("{}-0", ms.checked_add(1)?),
    })
}

#[cfg(test)]
mod tests {
    use super::next_stream_id;

    #[test]
    fn the_id_after_an_entry_keeps_it_out_of_minid() {
        assert_eq!(
            next_stream_id("1700000000000-0").as_deref(),
            Some("1700000000000-1")
        );
        assert_eq!(
            next_stream_id(&format!("5-{}", u64::MAX)).as_deref(),
            Some("6-0")
        );
        assert_eq!(next_stream_id("garbage"), None);
        assert_eq!(next_stream_id("1-x"), None);
    }
}
