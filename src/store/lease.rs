//! `lease.lua`: acquiring, renewing and releasing the partition's lease with its fencing
//! epoch.

use super::*;

/// The answer of a lease acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAcquire {
    /// This node leads with this token and epoch.
    Acquired {
        /// `<node>:<epoch>`, passed to every row-moving script.
        token: String,
        /// The fencing epoch.
        epoch: u64,
    },
    /// Someone holds it.
    Held {
        /// The holder's token.
        holder: String,
        /// Time left on it (ms).
        pttl_ms: i64,
    },
}

/// The answer of a lease renewal ([`Store::lease_renew_term`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseRenewal {
    /// Extended, on the Redis process the term started on.
    Renewed,
    /// Extended, but Redis is another process than when the term started (it restarted):
    /// writes acknowledged shortly before may be lost (an append-only file that had not
    /// synced them), so rows this term settled may be back in `claimed`.
    Restarted {
        /// The run id of the process the term started on.
        was: String,
        /// The run id now.
        now: String,
    },
    /// Not extended: the lease is another's or gone, or the server may not be written
    /// (a replica lost, deposed by the sentinels). The term ends.
    Lost,
}

impl Store {
    async fn lease(
        &self,
        op: &str,
        node: &str,
        token: &str,
        ttl_ms: u64,
    ) -> Result<Vec<Value>, StoreError> {
        // The replicas commits must find attached (`expected`): '' leaves it as it is.
        let expected = self
            .known_replicas()
            .map_or(Value::from(""), |n| Value::from(n as i64));
        let args = vec![
            self.prefix(),
            op.into(),
            node.into(),
            token.into(),
            (ttl_ms as i64).into(),
            expected,
        ];
        self.call(&self.scripts.lease, args).await
    }

    /// Try to take the lease for `ttl_ms`; increments the epoch when it succeeds.
    pub async fn lease_acquire(&self, node: &str, ttl_ms: u64) -> Result<LeaseAcquire, StoreError> {
        let v = self.lease("acquire", node, "", ttl_ms).await?;
        let r = Reply::new("lease", &v);
        match status(&v) {
            "ok" => Ok(LeaseAcquire::Acquired {
                token: r.text(1)?,
                epoch: r.count(2)?,
            }),
            "held" => Ok(LeaseAcquire::Held {
                holder: r.text(1)?,
                pttl_ms: r.int(2)?,
            }),
            other => Err(StoreError::protocol("lease", format!("status {other:?}"))),
        }
    }

    /// Extend the lease by `ttl_ms` if `token` still holds it. `Ok(false)`: lost, or the
    /// server has fewer replicas attached than the term counted (most likely a failover
    /// promoted one: this server's writes will be thrown away), or a worker marked it
    /// deposed (the sentinels name another primary), so the term ends. A renewal on a Redis
    /// that restarted since the term began extends the lease too (`Ok(true)`); see
    /// [`Store::lease_renew_term`].
    pub async fn lease_renew(
        &self,
        node: &str,
        token: &str,
        ttl_ms: u64,
    ) -> Result<bool, StoreError> {
        Ok(self.lease_renew_term(node, token, ttl_ms).await? != LeaseRenewal::Lost)
    }

    /// [`Store::lease_renew`], telling also whether Redis restarted since the term's lease
    /// was acquired (its run id changed).
    pub async fn lease_renew_term(
        &self,
        node: &str,
        token: &str,
        ttl_ms: u64,
    ) -> Result<LeaseRenewal, StoreError> {
        let v = self.lease("renew", node, token, ttl_ms).await?;
        let r = Reply::new("lease", &v);
        match status(&v) {
            "replica_lost" => tracing::warn!(
                attached = r.count(1)?,
                counted = r.count(2)?,
                "the Redis primary lost a replica this term counted (a failover?): stepping down"
            ),
            "deposed" => tracing::warn!(
                named = %r.text(1)?,
                "this Redis server is a master the sentinels no longer name: stepping down"
            ),
            "ok" => return Ok(LeaseRenewal::Renewed),
            "restarted" => {
                return Ok(LeaseRenewal::Restarted {
                    was: r.text(2)?,
                    now: r.text(3)?,
                })
            }
            _ => {}
        }
        Ok(LeaseRenewal::Lost)
    }

    /// The partition's message space: the random part of every `webhook-id`, made by the
    /// first lease acquisition of the partition (again after its data was wiped), so ids
    /// differ between instances and across a FLUSHALL while each row keeps its own.
    pub async fn message_space(&self) -> Result<Option<String>, StoreError> {
        Ok(self.client().hget(self.ks.replication(), "space").await?)
    }

    /// Give the lease up so a standby takes over at once (graceful shutdown).
    pub async fn lease_release(&self, node: &str, token: &str) -> Result<bool, StoreError> {
        let v = self.lease("release", node, token, 0).await?;
        Ok(status(&v) == "ok")
    }

    /// The current lease holder's token (see [`token_node`]) and its time left (ms), if any.
    pub async fn lease_holder(&self) -> Result<Option<(String, i64)>, StoreError> {
        let c = self.client();
        let holder: Option<String> = c.get(self.ks.lease()).await?;
        match holder {
            None => Ok(None),
            Some(h) => {
                let pttl: i64 = c.pttl(self.ks.lease()).await?;
                Ok(Some((h, pttl)))
            }
        }
    }
}

/// The node id in a lease token: `lease.lua` makes tokens `<node id>:<epoch>`, and a node
/// id may itself hold `:`, so the epoch is what follows the last one. A token without `:`
/// (not made by `lease.lua`) is its own node id.
pub fn token_node(token: &str) -> &str {
    token.rsplit_once(':').map_or(token, |(node, _)| node)
}
