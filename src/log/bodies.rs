//! The bodies of ended hooks kept in the log store (`log.keep_bodies`): written by the
//! archiver with their hooks' ended records, read back for `hooks show` and resend. They live
//! in `ankusa_bodies`, partitioned by day like the rest, so retention and erasure take them
//! with the hook.

use super::pg::{pg_text, timed, LogStore};
use super::record::Parsed;
use super::LogError;

/// What the log keeps of an ended hook to resend it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedBody {
    /// Source id.
    pub source: String,
    /// The producer's event type, if any.
    pub event_type: Option<String>,
    /// The producer headers, in the commit's encoding.
    pub headers: String,
    /// The body's bytes.
    pub body: Vec<u8>,
    /// `delivered` or `dead_lettered`.
    pub state: String,
}

/// Write the bodies of `entries` (already filtered to what the cursor has not seen) in the
/// archiving transaction `tx`, idempotent on (partition, hook, ended at). Returns the rows
/// written.
pub(super) async fn insert(
    tx: &tokio_postgres::Transaction<'_>,
    partition: i32,
    entries: &[&(String, Parsed)],
) -> Result<u64, tokio_postgres::Error> {
    let (mut tenant, mut hook, mut ended, mut headers, mut body) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (_, p) in entries {
        for b in &p.bodies {
            tenant.push(pg_text(&b.tenant));
            hook.push(b.hook as i64);
            ended.push(super::pg::clamp_ms(b.ended_ms));
            headers.push(pg_text(&b.headers));
            body.push(b.body.as_slice());
        }
    }
    if tenant.is_empty() {
        return Ok(0);
    }
    tx.execute(
        "INSERT INTO ankusa_bodies (tenant, partition, hook, ended_at, headers, body)
         SELECT t, $2, h, to_timestamp(e::double precision / 1000), hd, b
         FROM unnest($1::text[], $3::int8[], $4::int8[], $5::text[], $6::bytea[])
             AS x(t, h, e, hd, b)
         ON CONFLICT DO NOTHING",
        &[&tenant, &partition, &hook, &ended, &headers, &body],
    )
    .await
}

impl LogStore {
    /// The kept body of `tenant`'s hook `hook` with what resend needs (source, event type,
    /// headers), if the log holds it (the most recent, were the id logged twice).
    pub async fn body(&self, tenant: &str, hook: u64) -> Result<Option<LoggedBody>, LogError> {
        let c = self.client().await?;
        let row = timed(
            "body",
            c.query_opt(
                "SELECT h.source, h.event_type, b.headers, b.body, h.state
                 FROM ankusa_bodies b JOIN ankusa_hooks h
                   ON h.partition = b.partition AND h.hook = b.hook AND h.ended_at = b.ended_at
                 WHERE b.tenant = $1 AND b.hook = $2 AND h.tenant = $1
                 ORDER BY b.ended_at DESC LIMIT 1",
                &[&tenant, &(hook as i64)],
            ),
        )
        .await?;
        Ok(row.map(|r| LoggedBody {
            source: r.get(0),
            event_type: r.get(1),
            headers: r.get(2),
            body: r.get(3),
            state: r.get(4),
        }))
    }
}
