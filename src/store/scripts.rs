//! The Lua scripts of `lua/`, embedded at build time, each called by SHA with a
//! reload on `NOSCRIPT` (Redis restarted, `SCRIPT FLUSH`, a failover).
//!
//! One name per script everywhere: `lua/claim.lua` ↔ [`Store::claim`](super::Store::claim)
//! ↔ metric label `script="claim"`. Every script is `lua/prelude.lua` followed by its file.

use fred::types::scripts::Script;

macro_rules! lua {
    ($file:literal) => {
        concat!(
            include_str!("../../lua/prelude.lua"),
            include_str!(concat!("../../lua/", $file))
        )
    };
}

/// The source of `commit.lua` (R1, R2).
pub const COMMIT: &str = lua!("commit.lua");
/// The source of `claim.lua` (R13, R14).
pub const CLAIM: &str = lua!("claim.lua");
/// The source of `settle.lua` (R3, R4).
pub const SETTLE: &str = lua!("settle.lua");
/// The source of `requeue_claimed.lua` (R3).
pub const REQUEUE_CLAIMED: &str = lua!("requeue_claimed.lua");
/// The source of `idle.lua` (R23).
pub const IDLE: &str = lua!("idle.lua");
/// The source of `lease.lua` (R25).
pub const LEASE: &str = lua!("lease.lua");
/// The source of `dead_letter_source.lua` (R20).
pub const DEAD_LETTER_SOURCE: &str = lua!("dead_letter_source.lua");
/// The source of `pressure.lua` (R21).
pub const PRESSURE: &str = lua!("pressure.lua");
/// The source of `dlq_replay.lua` (dead-letter replay).
pub const DLQ_REPLAY: &str = lua!("dlq_replay.lua");
/// The source of `dlq_purge.lua` (dead-letter purge and retention).
pub const DLQ_PURGE: &str = lua!("dlq_purge.lua");

/// A script with its name (the metric label) and SHA.
#[derive(Debug, Clone)]
pub struct LuaScript {
    /// The file name without `.lua`.
    pub name: &'static str,
    /// Source and SHA-1.
    pub script: Script,
}

impl LuaScript {
    fn new(name: &'static str, src: &'static str) -> Self {
        LuaScript {
            name,
            script: Script::from_lua(src),
        }
    }
}

/// Every script ankusa calls.
#[derive(Debug, Clone)]
pub struct Scripts {
    /// `commit.lua`.
    pub commit: LuaScript,
    /// `claim.lua`.
    pub claim: LuaScript,
    /// `settle.lua`.
    pub settle: LuaScript,
    /// `requeue_claimed.lua`.
    pub requeue_claimed: LuaScript,
    /// `lease.lua`.
    pub lease: LuaScript,
    /// `idle.lua`.
    pub idle: LuaScript,
    /// `dead_letter_source.lua`.
    pub dead_letter_source: LuaScript,
    /// `pressure.lua`.
    pub pressure: LuaScript,
    /// `dlq_replay.lua`.
    pub dlq_replay: LuaScript,
    /// `dlq_purge.lua`.
    pub dlq_purge: LuaScript,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            commit: LuaScript::new("commit", COMMIT),
            claim: LuaScript::new("claim", CLAIM),
            settle: LuaScript::new("settle", SETTLE),
            requeue_claimed: LuaScript::new("requeue_claimed", REQUEUE_CLAIMED),
            lease: LuaScript::new("lease", LEASE),
            idle: LuaScript::new("idle", IDLE),
            dead_letter_source: LuaScript::new("dead_letter_source", DEAD_LETTER_SOURCE),
            pressure: LuaScript::new("pressure", PRESSURE),
            dlq_replay: LuaScript::new("dlq_replay", DLQ_REPLAY),
            dlq_purge: LuaScript::new("dlq_purge", DLQ_PURGE),
        }
    }
}

impl Scripts {
    /// All scripts, for loading at start.
    pub fn all(&self) -> [&LuaScript; 10] {
        [
            &self.commit,
            &self.claim,
            &self.settle,
            &self.requeue_claimed,
            &self.lease,
            &self.idle,
            &self.dead_letter_source,
            &self.pressure,
            &self.dlq_replay,
            &self.dlq_purge,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_embedded_sha_is_the_sha1_of_prelude_plus_its_file() {
        let prelude =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/prelude.lua"))
                .unwrap();
        for s in Scripts::default().all() {
            let file = std::fs::read_to_string(format!(
                "{}/lua/{}.lua",
                env!("CARGO_MANIFEST_DIR"),
                s.name
            ))
            .unwrap();
            let want = fred::util::sha1_hash(&format!("{prelude}{file}"));
            assert_eq!(s.script.sha1().to_string(), want, "{}", s.name);
            // and the file opens with its KEYS/ARGV/Returns header
            assert!(
                file.starts_with(&format!("-- {}.lua", s.name)),
                "{}",
                s.name
            );
            assert!(
                file.contains("KEYS[1]") && file.contains("Returns"),
                "{}",
                s.name
            );
        }
    }
}
