//! Every Redis key and channel name ankusa uses, built in one place.
//!
//! All keys of one partition share the hash tag `{<instance>.p<N>}`, so every
//! key a script touches sits in one Redis Cluster slot. User data (tenant ids,
//! source ids) is never inside the braces. The Lua side mirrors this layout in
//! `lua/prelude.lua`; `tests/keyspace.rs` builds every key both ways and compares.
//!
//! A tenant lives in one partition, [`partition_of`] its id; the few keys of the
//! whole instance (the partition count, the workers' heartbeats) sit under the hash tag
//! `{<instance>}`, outside every partition's slot, and no script touches them together
//! with a partition's keys.

/// The partition of `tenant` among `partitions`: CRC-32 (IEEE 802.3, the
/// checksum of zlib's `crc32`, Go's `hash/crc32.ChecksumIEEE`, Java's `CRC32`) of the
/// tenant id's UTF-8 bytes, modulo `partitions`. With one partition every tenant is in
/// partition 0. Stable across versions and languages: producers compute it to find the
/// tenant's keys (`docs/commit-protocol.md`), e.g. in Python
/// `zlib.crc32(tenant.encode()) % partitions`.
pub fn partition_of(tenant: &str, partitions: u32) -> u32 {
    if partitions <= 1 {
        return 0;
    }
    crc32(tenant.as_bytes()) % partitions
}

/// SHA-1 of `s` in lower-case hex: fixed-size ids for user keys (lanes, idempotency keys),
/// the same digest Lua's `redis.sha1hex` gives.
fn sha1_hex(s: &str) -> String {
    use sha1::Digest;
    hex::encode(sha1::Sha1::digest(s.as_bytes()))
}

/// CRC-32/ISO-HDLC (reflected polynomial `0xEDB88320`, initial and final XOR `0xFFFFFFFF`),
/// by the `crc32fast` crate.
fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// The key builder of one partition of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyspace {
    prefix: String,
    instance: String,
    partition: u32,
}

impl Keyspace {
    /// Keys of `instance` (validated `[a-z0-9_-]{1,64}` by the config), partition `partition`.
    pub fn new(instance: &str, partition: u32) -> Self {
        Keyspace {
            prefix: format!("ankusa:{{{instance}.p{partition}}}:"),
            instance: instance.to_string(),
            partition,
        }
    }

    /// The instance these keys belong to.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The partition these keys belong to.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The keys of another partition of the same instance.
    pub fn with_partition(&self, partition: u32) -> Keyspace {
        Keyspace::new(&self.instance, partition)
    }

    /// String: the instance's partition count, written once (`SET NX`) by the first worker.
    /// Outside every partition's slot: `ankusa:{<instance>}:partitions`.
    pub fn partition_count(&self) -> String {
        format!("ankusa:{{{}}}:partitions", self.instance)
    }

    /// Sorted set: the instance's live workers, node id → when its heartbeat expires (ms,
    /// Redis clock), refreshed every renew interval. `ankusa:{<instance>}:workers`.
    pub fn workers(&self) -> String {
        format!("ankusa:{{{}}}:workers", self.instance)
    }

    /// Hash: node id → how many partitions it leads, written with its heartbeat, so every
    /// worker sees how leadership is spread. `ankusa:{<instance>}:leads`.
    pub fn leads(&self) -> String {
        format!("ankusa:{{{}}}:leads", self.instance)
    }

    /// Hash: one tenant token's record (`h` SHA-256 of the token, lowercase hex; `tenant`;
    /// `scopes` csv; `name`; `created` and `expires`, ms since the epoch), expiring a week
    /// after the token (`PEXPIREAT`), so its holder is told it expired. The token itself is never stored. Outside every partition's
    /// slot: `ankusa:{<instance>}:token:<id>`; `id` is 16 lowercase hex digits.
    pub fn token(&self, id: &str) -> String {
        format!("ankusa:{{{}}}:token:{id}", self.instance)
    }

    /// Set of the ids of the instance's tenant tokens, for `token list`; an id whose record
    /// expired is dropped from it when listed. `ankusa:{<instance>}:tokens`.
    pub fn tokens(&self) -> String {
        format!("ankusa:{{{}}}:tokens", self.instance)
    }

    /// The prefix every key of the partition starts with, e.g. `ankusa:{default.p0}:`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, rest: &str) -> String {
        let mut k = String::with_capacity(self.prefix.len() + rest.len());
        k.push_str(&self.prefix);
        k.push_str(rest);
        k
    }

    /// Hash: a source's sink entries (`spec` JSON, `modules` csv, `version`, `lanes` JSON
    /// with ordered entries, `gates` JSON with event filters or disabled entries).
    pub fn source(&self, tenant: &str, source: &str) -> String {
        self.key(&format!("source:{tenant}:{source}"))
    }
    /// Set of `<tenant>/<source>`: the source registry's index.
    pub fn sources(&self) -> String {
        self.key("sources")
    }
    /// Hash: one hook (headers `h`, commit ms `t`, tenant `tn`, source `s`, modules `k`,
    /// rows left `n`, dead letters `d`, body size `z` (bytes), event type `et`, lane id of
    /// ordered sink `i` `L<i>`, claim-check reference `cc` once the body is checked in). The body is apart, in [`Keyspace::body`], so these small fields stay a
    /// listpack (~330 B less per hook); a hook committed before that holds its
    /// body in field `b`, which readers still take first.
    pub fn hook(&self, hook_id: u64) -> String {
        self.key(&format!("hook:{hook_id}"))
    }
    /// String: a hook's body bytes, exactly as committed; written and deleted with
    /// [`Keyspace::hook`] by the same scripts.
    pub fn body(&self, hook_id: u64) -> String {
        self.key(&format!("body:{hook_id}"))
    }
    /// Hash: a row's retry state (attempts `a`, first attempt ms `f`, last error `e`);
    /// absent until the row's first failed attempt.
    pub fn row(&self, row_id: &str) -> String {
        self.key(&format!("row:{row_id}"))
    }
    /// Sorted set: a tenant's due rows, row id → due time (ms, Redis clock).
    pub fn due(&self, tenant: &str) -> String {
        self.key(&format!("due:{tenant}"))
    }
    /// Sorted set: the active-tenant index the scan walks, tenant → place in line (ms).
    pub fn tenants(&self) -> String {
        self.key("tenants")
    }
    /// Sorted set: `<tenant>/<row id>` → epoch of the claim.
    pub fn claimed(&self) -> String {
        self.key("claimed")
    }
    /// Stream: a tenant's dead letters.
    pub fn dlq(&self, tenant: &str) -> String {
        self.key(&format!("dlq:{tenant}"))
    }
    /// Set: tenants that have dead letters.
    pub fn dlq_tenants(&self) -> String {
        self.key("dlq_tenants")
    }
    /// List: a lane's members (row ids) behind its head, in commit order.
    /// `lane_id` is [`Keyspace::lane_id`].
    pub fn lane(&self, lane_id: &str) -> String {
        self.key(&format!("lane:{lane_id}"))
    }
    /// String: a lane's head row id; absent while the lane is idle.
    pub fn lanehead(&self, lane_id: &str) -> String {
        self.key(&format!("lanehead:{lane_id}"))
    }
    /// Set: a tenant's lanes that have members (what the sweep samples).
    pub fn lanes(&self, tenant: &str) -> String {
        self.key(&format!("lanes:{tenant}"))
    }
    /// Set: tenants with lanes that have members.
    pub fn lane_tenants(&self) -> String {
        self.key("lane_tenants")
    }
    /// Counter: lane members in the partition; the sweep runs only while it is > 0.
    pub fn lane_members(&self) -> String {
        self.key("lane_members")
    }
    /// The id of lane `(tenant, source, sink index, key)`: the user's key is hashed (SHA-1 hex),
    /// so any string — `:`, braces, unicode, empty, 1 KiB — maps to a fixed-size id that cannot
    /// collide with another lane's structure or move the key to another cluster slot.
    pub fn lane_id(tenant: &str, source: &str, index: u32, key: &str) -> String {
        format!("{tenant}:{source}:{index}:{}", sha1_hex(key))
    }
    /// String (PX `commit.idempotency_ms`): the hook id first committed with a producer
    /// idempotency key to `(tenant, source)`; the key is hashed (SHA-1 hex) like a lane key.
    pub fn idem(&self, tenant: &str, source: &str, key: &str) -> String {
        self.key(&format!("idem:{tenant}:{source}:{}", sha1_hex(key)))
    }
    /// List (PEXPIRE `history.max_age_ms`): a hook's attempt records, JSON texts, oldest
    /// first, at most [`crate::visibility::ATTEMPTS_PER_HOOK`].
    pub fn attempts(&self, hook_id: u64) -> String {
        self.key(&format!("attempts:{hook_id}"))
    }
    /// Hash (PEXPIRE `history.max_age_ms`): a delivered hook kept for resend, the fields of
    /// [`Keyspace::hook`] as they were at its last row's delivery (`cc` names a blob already
    /// deleted; resend reads only the body and `h`).
    pub fn kept(&self, hook_id: u64) -> String {
        self.key(&format!("kept:{hook_id}"))
    }
    /// String (PEXPIRE `history.max_age_ms`): the body of a kept hook ([`Keyspace::body`]
    /// renamed with it).
    pub fn kept_body(&self, hook_id: u64) -> String {
        self.key(&format!("keptbody:{hook_id}"))
    }
    /// Sorted set: a tenant's hooks with history, hook id → time of its last record (ms);
    /// trimmed to `history.max_per_tenant` and `history.max_age_ms`.
    pub fn history(&self, tenant: &str) -> String {
        self.key(&format!("history:{tenant}"))
    }
    /// String: the leader lease, `<node id>:<epoch>` with a PX ttl.
    pub fn lease(&self) -> String {
        self.key("lease")
    }
    /// Counter: the fencing epoch, incremented by every acquisition.
    pub fn epoch(&self) -> String {
        self.key("epoch")
    }
    /// Counter: the claim token sequence; each claim call takes the next value and scores
    /// its rows in `claimed` with it.
    pub fn claim_seq(&self) -> String {
        self.key("claim_seq")
    }
    /// String: the last claim token issued before the current term, recorded by the lease
    /// acquisition; rows claimed at or below it belong to earlier terms.
    pub fn claim_floor(&self) -> String {
        self.key("claim_floor")
    }
    /// Counter: the hook sequence (hook ids are its values).
    pub fn seq(&self) -> String {
        self.key("seq")
    }
    /// Hash: what keeps a failover from losing or repeating anything: `replicas` (the
    /// replicas attached to the primary when the term started, raised by renewals; the fenced
    /// scripts refuse on a primary with fewer), `replid` (the replication history hook ids
    /// were last issued under: a new one makes them jump) and `space` (the random part of
    /// every `webhook-id`, made by the partition's first lease acquisition) and `expected`
    /// (the replicas the sentinels know alive, written by every lease acquisition and
    /// renewal: a commit finding fewer attached is refused) and `deposed` (the primary the
    /// sentinels name instead of this server, written by a worker that found this server a
    /// master they do not name: commits, renewals and fenced scripts refuse; a lease
    /// acquisition clears it) and `server` (the run id of the Redis process the term's lease
    /// was acquired on: a renewal finding another says Redis restarted).
    pub fn replication(&self) -> String {
        self.key("replication")
    }
    /// Hash: running totals (`committed`, `delivered`, `dead_lettered`, `dropped`).
    pub fn stats(&self) -> String {
        self.key("stats")
    }
    /// String (JSON, short TTL): the leader's window state for `pressure()`.
    pub fn window(&self) -> String {
        self.key("window")
    }
    /// List: claim-check references of hooks deleted outside `settle` (a dead-letter purge),
    /// handed to the leader by the next `settle` call, which deletes the blobs.
    pub fn blob_gc(&self) -> String {
        self.key("blob_gc")
    }
    /// Sorted set: claim-check references of finished hooks, scored by the time (ms) their
    /// retention (`claim_check.retention_ms`) ends; `settle` hands the due ones over.
    pub fn blob_retain(&self) -> String {
        self.key("blob_retain")
    }
    /// Hash: tenant → body bytes of its stored hooks (rows to deliver, dead letters), kept
    /// by the scripts that store and delete hooks; `ankusa tenants top --by bytes` reads it.
    pub fn tenant_bytes(&self) -> String {
        self.key("tenant_bytes")
    }
    /// Hash: tenant → how many stored hooks it has (as [`Keyspace::tenant_bytes`] counts
    /// their bytes): what the commit's quota (`limits.max_pending_hooks`) is checked against.
    pub fn tenant_hooks(&self) -> String {
        self.key("tenant_hooks")
    }
    /// Hash: tenant → body bytes of its delivered hooks kept for resend ([`Keyspace::kept`]).
    pub fn kept_bytes(&self) -> String {
        self.key("kept_bytes")
    }
    /// Sorted set: the kept hooks ([`Keyspace::kept`]), `<hook>:<body bytes>:<tenant>` → when
    /// kept (ms), so the oldest give way first (past their age, past
    /// `history.kept_max_bytes`, or while Redis refuses commits for memory).
    pub fn kept_index(&self) -> String {
        self.key("kept_index")
    }
    /// Hash: settings the scripts keep server side, written by the leader (`max_hook_bytes`,
    /// `cc_retention_ms`).
    pub fn settings(&self) -> String {
        self.key("settings")
    }
    /// Hash: row id of each lane head → its lane id, so a head releases its lane without
    /// its hook.
    pub fn head_lane(&self) -> String {
        self.key("head_lane")
    }
    /// Hash: a tenant's sources → the virtual time (ms) of their last committed row, for
    /// fairness across the tenant's sources.
    pub fn source_vtime(&self, tenant: &str) -> String {
        self.key(&format!("srcvt:{tenant}"))
    }
    /// Hash: sink key (`tenant\nsource\nindex\nmodule`) → snapshot of its open breaker
    /// (`<until unix ms>:<opens>`), for the next term.
    pub fn breakers(&self) -> String {
        self.key("breakers")
    }
    /// Stream: operational events (an entry disabled after prolonged failure, or enabled
    /// again), trimmed to `operator.events_max_len`.
    pub fn events(&self) -> String {
        self.key("events")
    }
    /// Stream: the delivery log's records, one entry per settle call (field `r`, one JSON
    /// record per line), written only with a log store (`[log] url`); the partition's leader
    /// moves them to the log store and trims what it archived.
    pub fn log(&self) -> String {
        self.key("log")
    }
    /// Pub/sub channel: a commit publishes the tenant id here.
    pub fn wake(&self) -> String {
        self.key("wake")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_keys_are_hashed_with_sha1_in_lower_case_hex() {
        // FIPS 180-1's test vector; redis.sha1hex("abc") answers the same.
        assert_eq!(sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            Keyspace::lane_id("t", "s", 2, ""),
            "t:s:2:da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
    }

    #[test]
    fn every_key_carries_the_partition_hash_tag_and_no_user_data_inside_it() {
        let ks = Keyspace::new("prod", 0);
        for k in [ks.due("a{b}c"), ks.source("t", "s"), ks.hook(7), ks.lease()] {
            assert!(k.starts_with("ankusa:{prod.p0}:"), "{k}");
            assert_eq!(k.find('}'), Some("ankusa:{prod.p0".len()));
        }
    }

    #[test]
    fn partition_of_is_crc32_ieee_of_the_tenant_id_modulo_the_partition_count() {
        // Fixed vectors, checked against Python's zlib.crc32.
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b"acme"), 0x05C4_BA3E);
        assert_eq!(crc32("ü".as_bytes()), 0x63D9_69D5);
        assert_eq!(partition_of("acme", 4), 0x05C4_BA3E % 4);
        assert_eq!(partition_of("123456789", 7), 0xCBF4_3926 % 7);
        for t in ["", "acme", "t-1", "ü"] {
            assert_eq!(partition_of(t, 1), 0);
        }
    }

    /// The bit-by-bit CRC-32 the partition hash used before `crc32fast`: tenants must stay in
    /// the partitions their rows were written to.
    fn crc32_bitwise(bytes: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                let mask = (crc & 1).wrapping_neg();
                crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
            }
        }
        !crc
    }

    proptest::proptest! {
        #[test]
        fn crc32fast_hashes_every_id_bit_for_bit_as_the_partition_hash_always_did(
            id in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            partitions in 1u32..=1024,
        ) {
            proptest::prop_assert_eq!(crc32(&id), crc32_bitwise(&id));
            let text = String::from_utf8_lossy(&id);
            let old = if partitions <= 1 { 0 } else { crc32_bitwise(text.as_bytes()) % partitions };
            proptest::prop_assert_eq!(partition_of(&text, partitions), old);
        }
    }

    #[test]
    fn one_partition_keeps_the_layout_of_before_partitions() {
        let ks = Keyspace::new("default", 0);
        assert_eq!(ks.lease(), "ankusa:{default.p0}:lease");
        assert_eq!(ks.with_partition(3).lease(), "ankusa:{default.p3}:lease");
        assert_eq!(ks.partition_count(), "ankusa:{default}:partitions");
        assert_eq!(ks.workers(), "ankusa:{default}:workers");
        assert_eq!(ks.tokens(), "ankusa:{default}:tokens");
        assert_eq!(
            ks.with_partition(2).token("00ff"),
            "ankusa:{default}:token:00ff"
        );
    }
}
