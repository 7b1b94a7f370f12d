//! The key layout is written twice — `src/keyspace.rs` for Rust and `lua/prelude.lua` for
//! the scripts. This test builds every key both ways, the Lua side evaluated by a
//! real redis-server, and requires them to be equal, so the two can never drift apart.
use crate::common;

use ankusa::keyspace::Keyspace;
use common::*;

/// The prelude's key builders, called with the same arguments as the Rust side below, in
/// the same order.
const PROBE: &str = r#"
return {
  k_source('acme', 'orders'),
  k_hook('42'),
  k_row('42.1'),
  k_due('acme'),
  k_dlq('acme'),
  k_lane('acme:orders:0:abc'),
  k_lanehead('acme:orders:0:abc'),
  k_lanes('acme'),
  k_idem('acme', 'orders', 'order-7 {x}:ü'),
  k_attempts('42'),
  k_kept('42'),
  k_body('42'),
  k_keptbody('42'),
  k_history('acme'),
  K_LANE_MEMBERS,
  K_LANE_TENANTS,
  K_TENANTS,
  K_CLAIMED,
  K_SEQ,
  K_STATS,
  K_DLQ_TENANTS,
  K_WAKE,
  K_BLOB_GC,
  K_CLAIM_SEQ,
  K_CLAIM_FLOOR,
  k_srcvt('acme'),
  K_BLOB_RETAIN,
  K_SETTINGS,
  K_HEAD_LANE,
  K_BREAKERS,
  K_WINDOW,
  K_LEASE,
  K_EPOCH,
  K_EVENTS,
  K_LOG,
  K_REPLICATION,
  K_TENANT_BYTES,
  K_TENANT_HOOKS,
  K_KEPT_BYTES,
  K_KEPT_INDEX,
}
"#;

fn rust_keys(ks: &Keyspace) -> Vec<String> {
    vec![
        ks.source("acme", "orders"),
        ks.hook(42),
        ks.row("42.1"),
        ks.due("acme"),
        ks.dlq("acme"),
        ks.lane("acme:orders:0:abc"),
        ks.lanehead("acme:orders:0:abc"),
        ks.lanes("acme"),
        ks.idem("acme", "orders", "order-7 {x}:ü"),
        ks.attempts(42),
        ks.kept(42),
        ks.body(42),
        ks.kept_body(42),
        ks.history("acme"),
        ks.lane_members(),
        ks.lane_tenants(),
        ks.tenants(),
        ks.claimed(),
        ks.seq(),
        ks.stats(),
        ks.dlq_tenants(),
        ks.wake(),
        ks.blob_gc(),
        ks.claim_seq(),
        ks.claim_floor(),
        ks.source_vtime("acme"),
        ks.blob_retain(),
        ks.settings(),
        ks.head_lane(),
        ks.breakers(),
        ks.window(),
        ks.lease(),
        ks.epoch(),
        ks.events(),
        ks.log(),
        ks.replication(),
        ks.tenant_bytes(),
        ks.tenant_hooks(),
        ks.kept_bytes(),
        ks.kept_index(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_the_scripts_build_is_the_key_rust_builds() {
    let env = Env::new().await;
    let ks = env.store.keyspace().clone();
    let script = format!("{}\n{PROBE}", include_str!("../../lua/prelude.lua"));
    let lease = ks.lease();
    let reply = env.redis_cmd(&["EVAL", &script, "1", &lease, ks.prefix()]);
    let lua: Vec<&str> = reply.lines().filter(|l| !l.is_empty()).collect();
    let rust = rust_keys(&ks);
    assert_eq!(lua.len(), rust.len(), "prelude reply: {reply}");
    for (l, r) in lua.iter().zip(&rust) {
        assert_eq!(*l, r.as_str(), "prelude and src/keyspace.rs disagree");
    }
    // Every key is inside the partition's hash tag: one cluster slot per script call.
    for k in &rust {
        assert!(k.starts_with(ks.prefix()), "{k} outside {}", ks.prefix());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_id_split_of_the_prelude_matches_rust_row_ids() {
    let env = Env::new().await;
    let ks = env.store.keyspace().clone();
    let script = format!(
        "{}\nlocal out = {{}}\nfor _, r in ipairs({{'42.1', '7.0', '42', 'x.1', '1.2.3', ''}}) do\n  local h, i = split_row(r)\n  out[#out + 1] = (h or '-') .. '|' .. (i or '-')\nend\nreturn out",
        include_str!("../../lua/prelude.lua")
    );
    let lease = ks.lease();
    let reply = env.redis_cmd(&["EVAL", &script, "1", &lease, ks.prefix()]);
    let got: Vec<&str> = reply.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(got, ["42|1", "7|0", "-|-", "-|-", "-|-", "-|-"]);
}
