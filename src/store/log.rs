//! The delivery log's stream in Redis (`log`, written by `settle.lua` with a log store): read
//! in order by the partition's archiver, trimmed once archived.

use super::*;

impl Store {
    /// Up to `count` entries of this partition's `log` stream after entry id `after` (`""`:
    /// from the first), oldest first.
    pub async fn log_read(&self, after: &str, count: u64) -> Result<Vec<StreamEntry>, StoreError> {
        let start = if after.is_empty() {
            "-".to_string()
        } else {
            format!("({after}")
        };
        let v: Value = self
            .client()
            .xrange(self.ks.log(), start, "+", Some(count))
            .await?;
        Ok(views::stream_entries(v))
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
