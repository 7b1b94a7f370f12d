//! Which instance a database's log belongs to, and retention shorter than `log.retention_days` for one tenant (`tenants.<id>.log_retention_days`):
//! whole days past the instance's retention go as partitions ([`LogStore::drop_expired`]);
//! a tenant kept fewer days loses its older rows by `DELETE`, bounded by its own index.

use super::pg::{timed, LogStore};
use super::schema::{self, DAY_MS};
use super::LogError;

impl LogStore {
    /// Claim this database for this store's instance, or refuse when another instance
    /// writes to it: hook ids are per instance, so two instances' logs in one database
    /// would mix. Errors: [`LogError::Config`] naming both.
    pub async fn claim_owner(&self) -> Result<(), LogError> {
        let instance = self.instance();
        let c = self.client().await?;
        let owner: String = timed("owner", async {
            c.execute(
                "INSERT INTO ankusa_log_owner (instance) VALUES ($1) ON CONFLICT DO NOTHING",
                &[&instance],
            )
            .await?;
            Ok::<_, tokio_postgres::Error>(
                c.query_one("SELECT instance FROM ankusa_log_owner", &[])
                    .await?
                    .get(0),
            )
        })
        .await?;
        if owner != instance {
            return Err(LogError::Config(format!(
                "this database holds the delivery log of instance {owner:?}; give instance \
                 {instance:?} a database of its own (log.url)"
            )));
        }
        Ok(())
    }

    /// Delete `tenant`'s records (attempts, ended hooks, kept bodies) of the days wholly older
    /// than `days` before `now_ms`. Returns the rows deleted.
    pub async fn expire_tenant(
        &self,
        tenant: &str,
        days: u32,
        now_ms: i64,
    ) -> Result<u64, LogError> {
        let cutoff = (schema::day_of(now_ms) - i64::from(days)) * DAY_MS;
        let mut c = self.client().await?;
        let tenant = tenant.to_string();
        timed("tenant retention", async move {
            let tx = c.transaction().await?;
            let mut n = 0;
            for (table, column) in [
                ("ankusa_attempts", "started_at"),
                ("ankusa_hooks", "ended_at"),
                ("ankusa_bodies", "ended_at"),
            ] {
                n += tx
                    .execute(
                        &format!(
                            "DELETE FROM {table} WHERE tenant = $1 \
                             AND {column} < to_timestamp($2::int8::double precision / 1000)"
                        ),
                        &[&tenant, &cutoff],
                    )
                    .await?;
            }
            tx.commit().await?;
            Ok::<_, tokio_postgres::Error>(n)
        })
        .await
    }
}
