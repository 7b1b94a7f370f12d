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
    (refused_when_full $file:literal) => {
        concat!(
            "#!lua\n",
            include_str!("../../lua/prelude.lua"),
            include_str!(concat!("../../lua/", $file))
        )
    };
    (allow_oom $file:literal) => {
        concat!(
            "#!lua flags=allow-oom\n",
            include_str!("../../lua/prelude.lua"),
            include_str!(concat!("../../lua/", $file))
        )
    };
}

/// Scripts declared `#!lua flags=allow-oom` (Redis 7): they free memory (deliver, dead-letter,
/// purge), move rows without growing the data set, or are tiny (the lease), so a full Redis
/// (`maxmemory` reached under `noeviction`) can still be drained by them and a leader still
/// elected. Every other script (commit above all) is refused on a full Redis
/// before its first write.
pub const ALLOW_OOM: [&str; 9] = [
    "claim",
    "cancel",
    "kept",
    "settle",
    "requeue_claimed",
    "lease",
    "dlq_purge",
    "window",
    "heartbeat",
];

/// Scripts declared `#!lua` without flags: a full Redis refuses them before they run, as
/// it refuses a commit's first write (a script without the declaration is refused only at
/// its first write). `admit` asks exactly that.
pub const REFUSED_WHEN_FULL: [&str; 1] = ["admit"];

/// The source of `commit.lua`.
pub const COMMIT: &str = lua!("commit.lua");
/// The SHA-1 `EVALSHA` names [`COMMIT`] by (hex), for producers in other languages that
/// load the script themselves (`ankusa commit-script --sha`).
pub fn commit_sha1() -> String {
    fred::util::sha1_hash(COMMIT)
}

/// The source of `claim.lua`.
pub const CLAIM: &str = lua!(allow_oom "claim.lua");
/// The source of `settle.lua`.
pub const SETTLE: &str = lua!(allow_oom "settle.lua");
/// The source of `requeue_claimed.lua`.
pub const REQUEUE_CLAIMED: &str = lua!(allow_oom "requeue_claimed.lua");
/// The source of `idle.lua`.
pub const IDLE: &str = lua!("idle.lua");
/// The source of `lease.lua`.
pub const LEASE: &str = lua!(allow_oom "lease.lua");
/// The source of `dead_letter_source.lua`.
pub const DEAD_LETTER_SOURCE: &str = lua!("dead_letter_source.lua");
/// The source of `pressure.lua`.
pub const PRESSURE: &str = lua!("pressure.lua");
/// The source of `dlq_replay.lua` (dead-letter replay).
pub const DLQ_REPLAY: &str = lua!("dlq_replay.lua");
/// The source of `window.lua` (the leader's window state).
pub const WINDOW: &str = lua!(allow_oom "window.lua");
/// The source of `breakers.lua` (breaker snapshots for the next term).
pub const BREAKERS: &str = lua!("breakers.lua");
/// The source of `claim_refs.lua` (claim-check references).
pub const CLAIM_REFS: &str = lua!("claim_refs.lua");
/// The source of `sink_state.lua` (disable / enable a sink entry).
pub const SINK_STATE: &str = lua!("sink_state.lua");
/// The source of `dlq_purge.lua` (dead-letter purge and retention).
pub const DLQ_PURGE: &str = lua!(allow_oom "dlq_purge.lua");
/// The source of `hooks.lua` (a claimed page's hooks and bodies in one call).
pub const HOOKS: &str = lua!("hooks.lua");
/// The source of `admit.lua` (whether a full Redis refuses commits).
pub const ADMIT: &str = lua!(refused_when_full "admit.lua");
/// The source of `kept.lua` (delivered hooks kept for resend giving way).
pub const KEPT: &str = lua!(allow_oom "kept.lua");
/// The source of `cancel.lua` (cancelling a scheduled hook before it is claimed).
pub const CANCEL: &str = lua!(allow_oom "cancel.lua");
/// The source of `heartbeat.lua` (workers announcing themselves).
pub const HEARTBEAT: &str = lua!(allow_oom "heartbeat.lua");

/// A script with its name (the metric label) and SHA.
#[derive(Debug, Clone)]
pub struct LuaScript {
    /// The file name without `.lua`.
    pub name: &'static str,
    /// Source and SHA-1.
    pub script: Script,
}

impl LuaScript {
    /// The SHA-1 (hex) `EVALSHA` names it by.
    pub fn sha1(&self) -> String {
        self.script.sha1().to_string()
    }

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
    /// `window.lua`.
    pub window: LuaScript,
    /// `claim_refs.lua`.
    pub claim_refs: LuaScript,
    /// `breakers.lua`.
    pub breakers: LuaScript,
    /// `sink_state.lua`.
    pub sink_state: LuaScript,
    /// `heartbeat.lua`.
    pub heartbeat: LuaScript,
    /// `hooks.lua`.
    pub hooks: LuaScript,
    /// `admit.lua`.
    pub admit: LuaScript,
    /// `kept.lua`.
    pub kept: LuaScript,
    /// `cancel.lua`.
    pub cancel: LuaScript,
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
            window: LuaScript::new("window", WINDOW),
            claim_refs: LuaScript::new("claim_refs", CLAIM_REFS),
            breakers: LuaScript::new("breakers", BREAKERS),
            sink_state: LuaScript::new("sink_state", SINK_STATE),
            heartbeat: LuaScript::new("heartbeat", HEARTBEAT),
            hooks: LuaScript::new("hooks", HOOKS),
            admit: LuaScript::new("admit", ADMIT),
            kept: LuaScript::new("kept", KEPT),
            cancel: LuaScript::new("cancel", CANCEL),
        }
    }
}

impl Scripts {
    /// All scripts, for loading at start.
    pub fn all(&self) -> [&LuaScript; 19] {
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
            &self.window,
            &self.claim_refs,
            &self.breakers,
            &self.sink_state,
            &self.heartbeat,
            &self.hooks,
            &self.admit,
            &self.kept,
            &self.cancel,
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
            let flags = if ALLOW_OOM.contains(&s.name) {
                "#!lua flags=allow-oom\n"
            } else if REFUSED_WHEN_FULL.contains(&s.name) {
                "#!lua\n"
            } else {
                ""
            };
            let want = fred::util::sha1_hash(&format!("{flags}{prelude}{file}"));
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
