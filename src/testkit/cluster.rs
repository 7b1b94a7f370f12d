//! A private Redis Cluster per test: N `redis-server` masters (`cluster-enabled yes`), each a
//! [`RedisServer`] in its own directory, joined by `redis-cli --cluster create`, killed on
//! drop; or TLS-only nodes ([`RedisCluster::start_tls`]).

use std::env;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::redis::{find_tool, RedisOptions, RedisServer, RedisTls};
use super::TestkitError;
use std::path::PathBuf;

/// How long `redis-cli --cluster create` and the nodes' agreement on `cluster_state:ok` may
/// take (a loaded 2-core machine included).
const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two `CLUSTER INFO` probes.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A Redis Cluster of masters without replicas on `127.0.0.1`, every slot assigned.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// TLS-only nodes ([`RedisCluster::start_tls`]): their certificates, and the `redis-cli`
    /// that speaks TLS to them.
    tls: Option<(RedisTls, PathBuf)>,
}

impl RedisCluster {
    /// Starts `masters` (≥ 3, Redis' minimum) cluster-enabled servers, makes them one cluster
    /// with `redis-cli --cluster create … --cluster-yes` (the slots split evenly), and returns
    /// once every node's `CLUSTER INFO` says `cluster_state:ok` with all 16384 slots assigned.
    pub fn start(masters: usize) -> Result<RedisCluster, TestkitError> {
        Self::start_with(masters, RedisOptions::default())
    }

    /// [`RedisCluster::start`] with `options` for every node (the cluster arguments are
    /// added to its `extra_args`).
    pub fn start_with(masters: usize, options: RedisOptions) -> Result<RedisCluster, TestkitError> {
        Self::start_using(masters, options, None)
    }

    /// A cluster of TLS-only nodes (no plaintext port, `tls-cluster yes` so the cluster bus
    /// is TLS and every node announces its TLS port, `tls-replication yes`), with the
    /// certificates of `tls` (its server certificate must name `127.0.0.1`); formed with
    /// `redis-cli --tls`. [`RedisCluster::url`] is then `rediss-cluster://…`; the plaintext
    /// helpers ([`RedisCluster::cmd`]…) cannot reach it.
    pub fn start_tls(masters: usize, tls: RedisTls) -> Result<RedisCluster, TestkitError> {
        Self::start_using(masters, RedisOptions::default(), Some(tls))
    }

    fn start_using(
        masters: usize,
        options: RedisOptions,
        tls: Option<RedisTls>,
    ) -> Result<RedisCluster, TestkitError> {
        let what = format!("redis cluster of {masters} masters");
        if masters < 3 {
            return Err(TestkitError::NotReady {
                what,
                reason: "Redis Cluster needs at least 3 masters".into(),
            });
        }
        let cli = find_tool(env::var_os("PATH").as_deref(), "redis-cli").ok_or(
            TestkitError::ToolNotFound {
                tool: "redis-cli",
                package: "redis-tools",
            },
        )?;
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            let mut o = options.clone();
            o.extra_args.splice(
                0..0,
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ]
                .map(String::from),
            );
            nodes.push(match &tls {
                None => RedisServer::start_with(o)?,
                Some(t) => {
                    o.extra_args.extend(
                        ["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from),
                    );
                    RedisServer::start_tls(o, t.clone())?
                }
            });
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new(&cli)
            .args(tls.as_ref().map(tls_args).unwrap_or_default())
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(TestkitError::io("run redis-cli --cluster create"))?;
        if !out.status.success() {
            return Err(TestkitError::NotReady {
                what,
                reason: format!(
                    "redis-cli --cluster create failed ({}):\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        let cluster = RedisCluster {
            nodes,
            tls: tls.map(|t| (t, cli)),
        };
        cluster.wait_ok(&what)?;
        Ok(cluster)
    }

    /// One command on node `n`: plaintext ([`RedisServer::cmd`]), or through `redis-cli
    /// --tls` on a TLS-only cluster (its output as text; an error reply is an error).
    fn node_cmd(&self, n: &RedisServer, args: &[&str]) -> Result<String, TestkitError> {
        let Some((tls, cli)) = &self.tls else {
            return n.cmd(args);
        };
        let out = Command::new(cli)
            .args(tls_args(tls))
            .args(["-h", "127.0.0.1", "-p", &n.port().to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(TestkitError::io("run redis-cli --tls"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() || text.starts_with("ERR") || text.contains("Could not connect") {
            return Err(TestkitError::Redis(format!(
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(text)
    }

    /// Polls every node's `CLUSTER INFO` until all say `cluster_state:ok`, all slots are
    /// assigned and each knows every node, and every node's `CLUSTER NODES` shows each bus
    /// link `connected` with no node in handshake: a classic `PUBLISH` travels the cluster
    /// bus, so a link not up yet would drop messages (a wake) on the floor.
    fn wait_ok(&self, what: &str) -> Result<(), TestkitError> {
        let deadline = Instant::now() + FORM_TIMEOUT;
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        loop {
            let mut last = String::new();
            let all_ok = self.nodes.iter().all(|n| {
                let info = match self.node_cmd(n, &["CLUSTER", "INFO"]) {
                    Ok(info) => info,
                    Err(e) => {
                        last = format!("node {}: {e}", n.port());
                        return false;
                    }
                };
                let has = |w: &str| info.lines().any(|l| l.trim() == w);
                if !(has("cluster_state:ok") && has("cluster_slots_assigned:16384") && has(&known))
                {
                    last = format!("node {}: {}", n.port(), info.replace("\r\n", " "));
                    return false;
                }
                let nodes = match self.node_cmd(n, &["CLUSTER", "NODES"]) {
                    Ok(nodes) => nodes,
                    Err(e) => {
                        last = format!("node {}: {e}", n.port());
                        return false;
                    }
                };
                let linked = nodes.lines().filter(|l| !l.trim().is_empty()).all(|l| {
                    let fields: Vec<&str> = l.split_whitespace().collect();
                    fields.get(7) == Some(&"connected")
                        && fields
                            .get(2)
                            .is_some_and(|f| !f.contains("handshake") && !f.contains("fail"))
                });
                if !linked {
                    last = format!("node {}: {nodes}", n.port());
                }
                linked
            });
            if all_ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::NotReady {
                    what: what.to_string(),
                    reason: format!("not cluster_state:ok in {FORM_TIMEOUT:?}; last: {last}"),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// `redis-cluster://127.0.0.1:P1?node=127.0.0.1:P2&node=…`: every node as a seed
    /// (`rediss-cluster://…` for a TLS-only cluster).
    pub fn url(&self) -> String {
        let mut url = String::from(match self.tls {
            Some(_) => "rediss-cluster://",
            None => "redis-cluster://",
        });
        for (i, n) in self.nodes.iter().enumerate() {
            url.push_str(match i {
                0 => "",
                1 => "?node=",
                _ => "&node=",
            });
            url.push_str(&format!("127.0.0.1:{}", n.port()));
        }
        url
    }

    /// The nodes, in the order they were started.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Runs one command on every node ([`RedisServer::cmd`]); the replies in node order.
    pub fn cmd_all(&self, args: &[&str]) -> Result<Vec<String>, TestkitError> {
        self.nodes.iter().map(|n| n.cmd(args)).collect()
    }

    /// Runs a command about one key (or keys of one slot) on the node serving its slot: the
    /// nodes are tried in turn and a `MOVED` answer passes to the next.
    pub fn cmd(&self, args: &[&str]) -> Result<String, TestkitError> {
        let mut last = None;
        for n in &self.nodes {
            match n.cmd(args) {
                Err(TestkitError::Redis(m)) if m.starts_with("MOVED") => {
                    last = Some(TestkitError::Redis(m))
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::Redis("no node".into())))
    }

    /// The index (in [`RedisCluster::nodes`]) of the node serving `key`'s slot.
    pub fn node_of(&self, key: &str) -> Result<usize, TestkitError> {
        for (i, n) in self.nodes.iter().enumerate() {
            match n.cmd(&["TYPE", key]) {
                Err(TestkitError::Redis(m)) if m.starts_with("MOVED") => continue,
                Err(e) => return Err(e),
                Ok(_) => return Ok(i),
            }
        }
        Err(TestkitError::Redis(format!("no node serves {key}")))
    }

    /// Every key on every node, sorted.
    pub fn keys(&self) -> Result<Vec<String>, TestkitError> {
        let mut keys: Vec<String> = self
            .cmd_all(&["KEYS", "*"])?
            .iter()
            .flat_map(|k| k.lines().map(str::to_string).collect::<Vec<_>>())
            .filter(|k| !k.is_empty())
            .collect();
        keys.sort();
        Ok(keys)
    }
}

/// `redis-cli`'s TLS arguments for a server with `tls`'s certificates: its CA, and the
/// client certificate (the server's own) when clients must present one.
fn tls_args(tls: &RedisTls) -> Vec<String> {
    let mut a = vec![
        "--tls".to_string(),
        "--cacert".into(),
        tls.ca_file.display().to_string(),
    ];
    if tls.auth_clients {
        a.extend([
            "--cert".into(),
            tls.cert_file.display().to_string(),
            "--key".into(),
            tls.key_file.display().to_string(),
        ]);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_masters_form_one_cluster_with_every_slot_assigned() {
        let cluster = RedisCluster::start(3).unwrap();
        let url = cluster.url();
        assert!(url.starts_with("redis-cluster://127.0.0.1:"), "{url}");
        assert_eq!(url.matches("node=").count(), 2, "{url}");
        for info in cluster.cmd_all(&["CLUSTER", "INFO"]).unwrap() {
            assert!(info.contains("cluster_size:3"), "{info}");
        }
        // keys of different slots land on different nodes; `cmd` finds each one's node
        let mut owners = std::collections::HashSet::new();
        for k in ["a", "b", "c", "d", "e", "f", "g", "h"] {
            cluster.cmd(&["SET", k, "1"]).unwrap();
            assert_eq!(cluster.cmd(&["GET", k]).unwrap(), "1");
            owners.insert(cluster.node_of(k).unwrap());
        }
        assert!(owners.len() > 1, "{owners:?}");
        assert_eq!(cluster.keys().unwrap().len(), 8);
    }

    #[test]
    fn fewer_than_three_masters_are_refused() {
        assert!(matches!(
            RedisCluster::start(2),
            Err(TestkitError::NotReady { .. })
        ));
    }
}
