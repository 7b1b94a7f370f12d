//! Helpers of the partition tests, on one Redis (`tests/partitions.rs`, in-process workers)
//! and on a Redis Cluster (`tests/cluster.rs`, worker processes): tenants covering every
//! partition, who leads which partition by Redis' own leases, the spread of leadership, and
//! which partitions got a new fencing epoch.
#![allow(dead_code)]

use super::procs::eventually;
use super::LIVENESS;
use ankusa::keyspace::partition_of;
use ankusa::store::Store;

/// `n` tenants `tenant-<i>` (smallest `i` first), `n / p` in each of `p` partitions, so a
/// run's tenants cover every partition evenly.
pub fn tenants_covering(p: u32, n: usize) -> Vec<String> {
    let per = n.div_ceil(p as usize);
    let mut count = vec![0usize; p as usize];
    let mut out = Vec::with_capacity(n);
    for i in 0.. {
        if out.len() == n {
            break;
        }
        let t = format!("tenant-{i}");
        let part = partition_of(&t, p) as usize;
        if count[part] < per {
            count[part] += 1;
            out.push(t);
        }
    }
    out
}

/// One partition's lease as Redis holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The holder's node id.
    pub node: String,
    /// The fencing epoch of its term.
    pub epoch: u64,
}

/// Each of the store's partitions' lease now, read from Redis (`None`: not held). The
/// token is `<node id>:<epoch>` (`lua/lease.lua`).
pub async fn leases(store: &Store) -> Result<Vec<Option<Lease>>, String> {
    let mut out = Vec::new();
    for part in store.all_partitions() {
        let held = part.lease_holder().await.map_err(|e| e.to_string())?;
        out.push(match held {
            None => None,
            Some((token, _)) => {
                let (node, epoch) = token
                    .rsplit_once(':')
                    .ok_or_else(|| format!("lease token without an epoch: {token:?}"))?;
                let epoch = epoch
                    .parse()
                    .map_err(|e| format!("lease token {token:?}: {e}"))?;
                Some(Lease {
                    node: node.to_string(),
                    epoch,
                })
            }
        });
    }
    Ok(out)
}

/// Each partition's epoch in `leases`; panics naming the partition when one is not held (a
/// test reads epochs once every partition is led).
pub fn epochs(leases: &[Option<Lease>]) -> Vec<u64> {
    leases
        .iter()
        .enumerate()
        .map(|(n, l)| match l {
            Some(l) => l.epoch,
            None => panic!("partition {n} has no leader: {leases:?}"),
        })
        .collect()
}

/// The partitions each of `nodes` holds the lease of in `leases`, in order.
pub fn led_by(leases: &[Option<Lease>], nodes: &[impl AsRef<str>]) -> Vec<Vec<u32>> {
    nodes
        .iter()
        .map(|node| {
            (0u32..)
                .zip(leases)
                .filter(|(_, l)| l.as_ref().is_some_and(|l| l.node == node.as_ref()))
                .map(|(n, _)| n)
                .collect()
        })
        .collect()
}

/// Every one of `p` partitions led exactly once among `led` (one list per worker), each
/// worker leading `lo..=hi` of them.
pub fn spread_is(led: &[Vec<u32>], p: u32, lo: usize, hi: usize) -> bool {
    let mut all: Vec<u32> = led.iter().flatten().copied().collect();
    all.sort();
    all == (0..p).collect::<Vec<_>>() && led.iter().all(|l| (lo..=hi).contains(&l.len()))
}

/// Between `before` and `after` (epochs per partition), exactly the partitions of `moved`
/// got a new epoch; every other kept its own.
pub fn assert_only_moved(before: &[u64], after: &[u64], moved: &[u32]) {
    assert_eq!(before.len(), after.len());
    for (n, (b, a)) in (0u32..).zip(before.iter().zip(after)) {
        if moved.contains(&n) {
            assert!(a > b, "partition {n} moved: epoch {b} -> {a}");
        } else {
            assert_eq!(a, b, "partition {n} kept its epoch");
        }
    }
}

/// Wait (up to [`LIVENESS`]) until, by Redis' leases, every partition of `store` is led by
/// one of `nodes`, each leading `lo..=hi`; the leases then. For workers a test cannot ask
/// (processes), or to read the epochs of a settled spread.
pub async fn settled(
    store: &Store,
    nodes: &[impl AsRef<str>],
    lo: usize,
    hi: usize,
) -> Vec<Option<Lease>> {
    let names: Vec<&str> = nodes.iter().map(AsRef::as_ref).collect();
    let what = format!(
        "{names:?} lead {lo}..={hi} of the {} partitions each",
        store.partitions()
    );
    eventually(&what, LIVENESS, || async {
        let leases = leases(store).await?;
        let led = led_by(&leases, nodes);
        if spread_is(&led, store.partitions(), lo, hi) {
            Ok(leases)
        } else {
            Err(format!("led: {led:?}"))
        }
    })
    .await
}
