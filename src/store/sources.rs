//! The source registry: `(tenant, source)` → sink entries.

use super::*;

impl Store {
    /// Read source specs with one pipelined round trip; `None` where a source is gone;
    /// `Some(Err)` where its stored spec is not valid JSON or its key is of another type.
    pub async fn fetch_sources(
        &self,
        keys: &[(String, String)],
    ) -> Result<Vec<Option<Result<SourceSpec, String>>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let pipe = self.client().pipeline();
        for (t, s) in keys {
            let _: () = pipe.hget(self.ks.source(t, s), "spec").await?;
        }
        let replies = per_key_replies(pipe.try_all::<Option<Bytes>>().await, keys.len())?;
        Ok(replies
            .into_iter()
            .map(|r| match r {
                Ok(spec) => spec
                    .map(|b| serde_json::from_slice::<SourceSpec>(&b).map_err(|e| e.to_string())),
                Err(e) => Some(Err(e)),
            })
            .collect())
    }

    /// Register or replace a source. The spec is validated first, under this store's
    /// [`Store::with_edge`] guards and bounds for `tenant` (a literal blocked IP, a reference
    /// outside the tenant's secret namespace, an entry over `[limits]`, an egress grant the
    /// tenant lacks is a [`SourceError::Invalid`] naming it and its config key).
    pub async fn put_source(
        &self,
        tenant: &str,
        source: &str,
        spec: &SourceSpec,
    ) -> Result<u64, SourceError> {
        crate::ids::check_id("tenant", tenant)?;
        crate::ids::check_id("source", source)?;
        crate::sinks::registry::check_source(spec, tenant, &self.edge)
            .map_err(SourceError::Invalid)?;
        let json = serde_json::to_string(spec).map_err(|e| SourceError::Invalid(e.to_string()))?;
        let bounds = self.edge.sources.bounds(tenant);
        let max = &bounds.max_source_bytes;
        if json.len() > max.value {
            return Err(SourceError::Invalid(format!(
                "the spec is {} bytes as stored, more than the {} a source may have ({} = {})",
                json.len(),
                max.value,
                max.key,
                max.value
            )));
        }
        // A source lives in its tenant's partition.
        let this = self.for_tenant(tenant);
        let key = this.ks.source(tenant, source);
        let c = this.client();
        // A new source counts against the tenant's sources (checked before the write, so
        // puts racing each other may pass it by as many as race).
        let exists: bool = c
            .sismember(this.ks.sources(), format!("{tenant}/{source}"))
            .await
            .map_err(StoreError::from)?;
        if !exists {
            let max = &bounds.max_sources_per_tenant;
            let have = this.count_tenant_sources(tenant, max.value).await?;
            if have >= max.value {
                return Err(SourceError::Quota(format!(
                    "tenant {tenant} has {have} sources, the most it may have ({} = {}): \
                     delete one, or ask the operator to raise it",
                    max.key, max.value
                )));
            }
        }
        let pipe = c.pipeline();
        let _: () = pipe
            .hset(&key, vec![("spec", json), ("modules", spec.modules_csv())])
            .await
            .map_err(StoreError::from)?;
        let _: () = pipe
            .hincrby(&key, "version", 1)
            .await
            .map_err(StoreError::from)?;
        match spec.lanes_json() {
            Some(l) => {
                let _: () = pipe
                    .hset(&key, ("lanes", l))
                    .await
                    .map_err(StoreError::from)?;
            }
            None => {
                let _: () = pipe.hdel(&key, "lanes").await.map_err(StoreError::from)?;
            }
        }
        // Which entries take which hooks (event filters, disabled entries), read by commit.
        match spec.gates_json() {
            Some(g) => {
                let _: () = pipe
                    .hset(&key, ("gates", g))
                    .await
                    .map_err(StoreError::from)?;
            }
            None => {
                let _: () = pipe.hdel(&key, "gates").await.map_err(StoreError::from)?;
            }
        }
        let _: () = pipe
            .sadd(this.ks.sources(), format!("{tenant}/{source}"))
            .await
            .map_err(StoreError::from)?;
        let replies: Vec<Value> = pipe.all().await.map_err(StoreError::from)?;
        // replies: hset, hincrby (the new version), hset/hdel lanes, hset/hdel gates, sadd
        Ok(Reply::new("put_source", &replies).count(1)?)
    }

    /// A source's spec, if registered.
    pub async fn get_source(
        &self,
        tenant: &str,
        source: &str,
    ) -> Result<Option<SourceSpec>, SourceError> {
        let this = self.for_tenant(tenant);
        let spec: Option<String> = this
            .client()
            .hget(this.ks.source(tenant, source), "spec")
            .await
            .map_err(StoreError::from)?;
        match spec {
            None => Ok(None),
            Some(s) => serde_json::from_str(&s).map(Some).map_err(|e| {
                SourceError::Invalid(format!("stored spec of {tenant}/{source}: {e}"))
            }),
        }
    }

    /// Every registered `(tenant, source)` of every partition, sorted.
    pub async fn list_sources(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut out: Vec<(String, String)> = Vec::new();
        for p in self.all_partitions() {
            let members: Vec<String> = p.client().smembers(p.ks.sources()).await?;
            out.extend(members.into_iter().filter_map(|m| {
                m.split_once('/')
                    .map(|(t, s)| (t.to_string(), s.to_string()))
            }));
        }
        out.sort();
        Ok(out)
    }

    /// Whether `tenant` has at least one registered source: a walk of its partition's source
    /// index (`SSCAN … MATCH <tenant>/*`) that stops at the first.
    pub async fn tenant_has_sources(&self, tenant: &str) -> Result<bool, StoreError> {
        Ok(self.count_tenant_sources(tenant, 1).await? > 0)
    }

    /// How many sources `tenant` has, counted up to `enough` (the walk of its partition's
    /// source index, `SSCAN … MATCH <tenant>/*`, stops there).
    pub async fn count_tenant_sources(
        &self,
        tenant: &str,
        enough: usize,
    ) -> Result<usize, StoreError> {
        let this = self.for_tenant(tenant);
        let key = this.ks.sources();
        let pattern = format!("{}/*", glob_escape(tenant));
        let mut cursor = "0".to_string();
        // SSCAN may return a member twice (a rehash between calls): counted once.
        let mut seen = std::collections::HashSet::new();
        loop {
            let cmd = fred::types::CustomCommand::new_static(
                "SSCAN",
                fred::types::ClusterHash::FirstKey,
                false,
            );
            let args = vec![
                key.clone(),
                cursor.clone(),
                "MATCH".into(),
                pattern.clone(),
                "COUNT".into(),
                "1000".into(),
            ];
            let (next, members): (String, Vec<String>) = this.client().custom(cmd, args).await?;
            seen.extend(members);
            if seen.len() >= enough || next == "0" {
                return Ok(seen.len());
            }
            cursor = next;
        }
    }

    /// Delete a source; its pending rows are dead-lettered `source_gone` when claimed.
    /// Returns whether it existed.
    pub async fn delete_source(&self, tenant: &str, source: &str) -> Result<bool, StoreError> {
        let this = self.for_tenant(tenant);
        let c = this.client();
        let n: i64 = c.del(this.ks.source(tenant, source)).await?;
        let _: i64 = c
            .srem(this.ks.sources(), format!("{tenant}/{source}"))
            .await?;
        Ok(n > 0)
    }
}

/// `s` with the glob characters of a `MATCH` pattern escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
