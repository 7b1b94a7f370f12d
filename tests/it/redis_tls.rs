//! Redis over TLS for real: a TLS-only `redis-server` (no plaintext port) with a
//! CA and certificates generated here; the whole pipeline runs over `rediss://` with mutual
//! TLS; a `rediss://` that cannot do TLS (a plaintext server, a CA that does not match, no
//! client certificate where one is required) fails loudly and never falls back to plaintext.

use crate::common;

use ankusa::config::{Config, RedisConfig};
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::store::{CommitError, Store, StoreError};
use ankusa::testkit::{Receiver, RedisOptions, RedisServer, RedisTls};
use ankusa::{Hook, Producer};
use common::procs::{http, wait_exit, wait_ready};
use common::{test_config, WorkerProcess, LIVENESS};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A CA and the certificates it signed, as PEM files in their own directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

impl Pki {
    /// A fresh CA named `name`, a server certificate for `127.0.0.1` and `localhost`, and a
    /// client certificate.
    fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |file: &str, pem: String| -> PathBuf {
            let path = dir.path().join(file);
            std::fs::write(&path, pem).expect("pem written");
            path
        };
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, name);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).expect("CA signs itself");
        let ca_file = write("ca.pem", ca_cert.pem());
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |sans: Vec<String>, cn: &str, usage: Vec<ExtendedKeyUsagePurpose>| {
            let key = KeyPair::generate().expect("key");
            let mut p = CertificateParams::new(sans).expect("params");
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = usage;
            let cert = p.signed_by(&key, &issuer).expect("signed");
            (cert.pem(), key.serialize_pem())
        };
        // The server's certificate is a client's too: the nodes of a TLS cluster present it
        // to each other on the cluster bus, which always verifies the peer.
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "redis",
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        );
        let (client_cert, client_key) =
            leaf(vec![], "ankusa", vec![ExtendedKeyUsagePurpose::ClientAuth]);
        Pki {
            ca: ca_file,
            server_cert: write("server.pem", server_cert),
            server_key: write("server.key", server_key),
            client_cert: write("client.pem", client_cert),
            client_key: write("client.key", client_key),
            dir,
        }
    }

    /// A TLS-only Redis with this PKI's server certificate; `mutual`: clients need one too.
    fn redis(&self, mutual: bool) -> RedisServer {
        RedisServer::start_tls(
            RedisOptions::default(),
            RedisTls {
                cert_file: self.server_cert.clone(),
                key_file: self.server_key.clone(),
                ca_file: self.ca.clone(),
                auth_clients: mutual,
            },
        )
        .expect("TLS redis-server starts")
    }

    /// `[redis]` for `url` verified by this CA, with the client certificate when `client`.
    fn redis_config(&self, url: &str, client: bool) -> RedisConfig {
        let path = |p: &Path| p.display().to_string();
        RedisConfig {
            url: url.into(),
            tls_ca_file: path(&self.ca),
            tls_cert_file: if client {
                path(&self.client_cert)
            } else {
                String::new()
            },
            tls_key_file: if client {
                path(&self.client_key)
            } else {
                String::new()
            },
            ..test_config(url).redis
        }
    }
}

/// Write `config` for a worker process into `dir`; returns the path.
fn config_file(dir: &Path, config: &Config) -> PathBuf {
    config.validate().expect("test config is valid");
    let path = dir.join("ankusa.toml");
    std::fs::write(&path, toml::to_string(config).expect("serialises")).expect("written");
    path
}

/// A worker process on `config` that must exit on its own: its exit code and log.
async fn failed_worker(config: &Config, dir: &tempfile::TempDir) -> (Option<i32>, String) {
    let file = config_file(dir.path(), config);
    let mut w = WorkerProcess::spawn(&file, dir, "w");
    let status = wait_exit(&mut w, LIVENESS)
        .await
        .unwrap_or_else(|| panic!("the worker keeps running:\n{}", w.log_text()));
    (status.code(), w.log_text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_pipeline_runs_over_mutual_tls_to_a_tls_only_redis() {
    let pki = Pki::new("ankusa test CA");
    let redis = pki.redis(true);
    let url = redis.url();
    assert!(url.starts_with("rediss://127.0.0.1:"), "{url}");
    let receiver = Receiver::start().expect("receiver");
    let mut config = test_config(&url);
    config.redis = pki.redis_config(&url, true);

    // This process: register a source and commit 20 hooks over TLS.
    let store = Store::connect_config(&config.redis, &config.instance)
        .await
        .expect("store connects over mutual TLS")
        .with_edge(ankusa::testkit::loopback_edge());
    let sink = SinkEntry::http(&receiver.url("/tls"));
    store
        .put_source("acme", "orders", &SourceSpec { sinks: vec![sink] })
        .await
        .expect("source stored");
    let producer = Producer::new(store.clone(), config.commit.max_hook_bytes);
    let hooks: Vec<Hook> = (0..20)
        .map(|i| Hook::new(format!("{{\"n\":{i}}}")))
        .collect();
    producer
        .commit_many("acme", "orders", &hooks)
        .await
        .expect("committed");

    // A worker process over rediss:// delivers them; tick through its admin API.
    let dir = tempfile::tempdir().unwrap();
    let w = WorkerProcess::spawn(&config_file(dir.path(), &config), &dir, "w");
    wait_ready(&w).await;
    let deadline = Instant::now() + LIVENESS;
    loop {
        let r = http()
            .post(format!("http://{}/admin/tick", w.admin))
            .timeout(LIVENESS)
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == 200) && receiver.count_for("/tls") >= 20 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not delivered over TLS: {} of 20\n{}",
            receiver.count_for("/tls"),
            w.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let totals = store.totals().await.expect("totals");
    assert_eq!((totals.committed, totals.delivered), (20, 20), "{totals:?}");
    assert_eq!(totals.dead_lettered, 0, "{totals:?}");

    // The server requires a client certificate: without one the handshake is refused.
    let no_client = pki.redis_config(&url, false);
    match Store::connect_config(&no_client, "test").await {
        Err(e @ StoreError::Tls(_)) => assert!(e.to_string().contains("TLS"), "{e}"),
        Err(e) => panic!("not reported as TLS: {e}"),
        Ok(_) => panic!("connected without a client certificate"),
    }
    // And no plaintext port is open at all.
    assert!(redis.cmd(&["PING"]).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_against_a_plaintext_server_exits_non_zero_naming_tls() {
    let pki = Pki::new("ankusa test CA");
    let plain = RedisServer::start().expect("redis-server starts");
    let url = format!("rediss://127.0.0.1:{}", plain.port());
    let mut config = test_config(&url);
    config.redis = pki.redis_config(&url, false);
    let dir = tempfile::tempdir().unwrap();
    let (code, log) = failed_worker(&config, &dir).await;
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("redis TLS"), "{log}");
    assert!(
        log.contains(&format!("127.0.0.1:{}", plain.port())),
        "{log}"
    );
    // Nothing was written in plaintext: the server holds no key of ours.
    assert_eq!(plain.cmd(&["DBSIZE"]).unwrap(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rediss_server_whose_certificate_does_not_verify_is_refused() {
    let pki = Pki::new("ankusa test CA");
    let other = Pki::new("some other CA");
    let redis = pki.redis(false);
    let url = redis.url();
    let dir = tempfile::tempdir().unwrap();
    // Verified by another CA, and by the system's trust store (which does not know ours).
    let mut wrong_ca = test_config(&url);
    wrong_ca.redis = other.redis_config(&url, false);
    let system_roots = test_config(&url);
    for config in [wrong_ca, system_roots] {
        let (code, log) = failed_worker(&config, &dir).await;
        assert_eq!(code, Some(2), "{log}");
        assert!(log.contains("redis TLS"), "{log}");
        assert!(log.to_lowercase().contains("certificate"), "{log}");
    }
    // With the right CA and no client certificate (not required here) it connects.
    let store = Store::connect_config(&pki.redis_config(&url, false), "test")
        .await
        .expect("connects with the right CA");
    assert_eq!(store.totals().await.expect("totals").committed, 0);
    drop(pki.dir);
    drop(other.dir);
}

/// Managed Redis in cluster mode with in-transit encryption: a TLS-only 3-master cluster
/// (`tls-cluster yes`, no plaintext port on any node) served as `rediss-cluster://`, three
/// partitions spread over its nodes: every hook committed over TLS is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_only_cluster_delivers_every_hook_over_rediss_cluster() {
    let pki = Pki::new("ankusa cluster CA");
    let cluster = ankusa::testkit::RedisCluster::start_tls(
        3,
        RedisTls {
            cert_file: pki.server_cert.clone(),
            key_file: pki.server_key.clone(),
            ca_file: pki.ca.clone(),
            auth_clients: false,
        },
    )
    .expect("TLS cluster forms");
    let url = cluster.url();
    assert!(url.starts_with("rediss-cluster://127.0.0.1:"), "{url}");
    let receiver = Receiver::start().expect("receiver");
    let mut config = test_config(&url);
    config.redis = pki.redis_config(&url, false);
    config.partitions = 3;
    let store = Store::connect_config(&config.redis, &config.instance)
        .await
        .expect("store connects to the TLS cluster")
        .with_edge(ankusa::testkit::loopback_edge())
        .with_partitions(3);
    assert_eq!(store.topology(), ankusa::store::Topology::Cluster);
    let producer = Producer::new(store.clone(), config.commit.max_hook_bytes);
    let tenants = ["acme", "globex", "initech", "umbrella"];
    for t in tenants {
        let sink = SinkEntry::http(&receiver.url(&format!("/{t}")));
        store
            .put_source(t, "orders", &SourceSpec { sinks: vec![sink] })
            .await
            .expect("source stored");
        let hooks: Vec<Hook> = (0..10)
            .map(|i| Hook::new(format!("{{\"n\":{i}}}")))
            .collect();
        producer
            .commit_many(t, "orders", &hooks)
            .await
            .expect("committed over TLS");
    }
    let worker = ankusa::Worker::start(config, Some("tls-cluster"))
        .await
        .expect("worker starts over rediss-cluster://");
    assert!(
        receiver.wait_until_async(LIVENESS, |r| r.len() >= 40).await,
        "every hook delivered: {}",
        receiver.count()
    );
    for t in tenants {
        assert_eq!(receiver.count_for(&format!("/{t}")), 10, "{t}");
    }
    worker.shutdown().await;
}

/// `redis-cli` over TLS verified by `pki`'s CA, to a server or sentinel on `port`.
fn tls_cli(pki: &Pki, port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(&pki.ca)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A TLS-only sentinel (no plaintext port) monitoring `master` as `mymaster`, quorum 1,
/// reaching the servers over TLS (`tls-replication yes`). Killed on drop.
struct TlsSentinel {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl TlsSentinel {
    fn start(pki: &Pki, master: u16) -> TlsSentinel {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = ankusa::testkit::free_port().expect("a free port");
        let conf = dir.path().join("sentinel.conf");
        let p = |f: &Path| f.display().to_string();
        std::fs::write(
            &conf,
            format!(
                "port 0\ntls-port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
                 tls-auth-clients no\ntls-replication yes\n\
                 sentinel monitor mymaster 127.0.0.1 {master} 1\n\
                 sentinel down-after-milliseconds mymaster 2000\n",
                dir = dir.path().display(),
                cert = p(&pki.server_cert),
                key = p(&pki.server_key),
                ca = p(&pki.ca),
            ),
        )
        .expect("sentinel.conf written");
        let child = std::process::Command::new("redis-sentinel")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-sentinel starts");
        TlsSentinel {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for TlsSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Commit hooks `{"n":i}` for each `i` of `n` to `acme/orders` one by one, retrying an
/// error `retry` accepts (as a producer does) for at most `within` per hook.
async fn commit_retrying(
    producer: &Producer,
    n: std::ops::Range<u32>,
    within: Duration,
    retry: impl Fn(&CommitError) -> bool,
    w: &WorkerProcess,
) {
    for i in n {
        let hook = Hook::new(format!("{{\"n\":{i}}}"));
        let deadline = Instant::now() + within;
        while let Err(e) = producer.commit("acme", "orders", hook.clone()).await {
            assert!(
                retry(&e) && Instant::now() < deadline,
                "commit {i} over the TLS sentinel set: {e}\n{}",
                w.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Sentinel over TLS (`rediss-sentinel://`): a TLS-only primary and replica (replicating
/// over TLS) and a TLS-only sentinel; the worker asks the sentinel for the primary over TLS,
/// reaches it over TLS, and delivers every hook; the store reports the Sentinel topology.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_only_sentinel_set_delivers_every_hook_over_rediss_sentinel() {
    let pki = Pki::new("ankusa sentinel CA");
    let primary = pki.redis(false);
    let replica = pki.redis(false);
    tls_cli(
        &pki,
        primary.port(),
        &["CONFIG", "SET", "tls-replication", "yes"],
    );
    tls_cli(
        &pki,
        replica.port(),
        &["CONFIG", "SET", "tls-replication", "yes"],
    );
    tls_cli(
        &pki,
        replica.port(),
        &["REPLICAOF", "127.0.0.1", &primary.port().to_string()],
    );
    let sentinel = TlsSentinel::start(&pki, primary.port());
    // Until the sentinel has found the replica (through the primary's INFO, over TLS) and
    // the replica is synced, commits are refused on purpose: wait for both.
    let deadline = Instant::now() + LIVENESS;
    loop {
        let listed = std::process::Command::new("redis-cli")
            .args(["--tls", "--cacert"])
            .arg(&pki.ca)
            .args(["-h", "127.0.0.1", "-p", &sentinel.port.to_string()])
            .args(["SENTINEL", "REPLICAS", "mymaster"])
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout).contains(&replica.port().to_string())
            });
        let synced =
            tls_cli(&pki, primary.port(), &["INFO", "replication"]).contains("state=online");
        if listed && synced {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sentinel never listed the synced replica"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = format!(
        "rediss-sentinel://127.0.0.1:{}?sentinelServiceName=mymaster",
        sentinel.port
    );
    let receiver = Receiver::start().expect("receiver");
    let mut config = test_config(&url);
    config.redis = pki.redis_config(&url, false);
    let store = Store::connect_config(&config.redis, &config.instance)
        .await
        .expect("store connects through the TLS sentinel")
        .with_edge(ankusa::testkit::loopback_edge());
    assert_eq!(store.topology(), ankusa::store::Topology::Sentinel);
    store
        .put_source(
            "acme",
            "orders",
            &SourceSpec {
                sinks: vec![SinkEntry::http(&receiver.url("/sentinel"))],
            },
        )
        .await
        .expect("source stored");
    let dir = tempfile::tempdir().unwrap();
    let w = WorkerProcess::spawn(&config_file(dir.path(), &config), &dir, "w");
    wait_ready(&w).await;
    // Commits wait for the replica (`WAIT`) and are refused until the leader's first term
    // wrote how many the sentinel knows: retry the refused ones, as a producer does.
    let producer = Producer::new(store.clone(), config.commit.max_hook_bytes);
    let only_refusals = |e: &CommitError| matches!(e, CommitError::NotReplicated { .. });
    commit_retrying(&producer, 0..20, LIVENESS, only_refusals, &w).await;
    assert!(
        receiver.wait_until_async(LIVENESS, |r| r.len() >= 20).await,
        "delivered over TLS sentinel: {} of 20\n{}",
        receiver.count_for("/sentinel"),
        w.log_text()
    );
    assert_eq!(receiver.count_for("/sentinel"), 20);
    // The replica holds them too: replicated over TLS.
    assert!(
        tls_cli(&pki, replica.port(), &["INFO", "replication"]).contains("master_link_status:up")
    );

    // A graceful failover over TLS: the worker learns it from the sentinel (over TLS),
    // moves to the promoted replica, and the hooks committed after it are delivered too.
    tls_cli(&pki, sentinel.port, &["SENTINEL", "FAILOVER", "mymaster"]);
    let promoted = replica.port().to_string();
    assert!(
        common::procs::poll_until(LIVENESS, || async {
            tls_cli(
                &pki,
                sentinel.port,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"],
            )
            .contains(&promoted)
        })
        .await,
        "the sentinel never promoted the replica"
    );
    // Refused until the old primary is converted and synced (~15 s with Redis' defaults).
    commit_retrying(&producer, 20..30, LIVENESS * 2, |_| true, &w).await;
    assert!(
        receiver.wait_until_async(LIVENESS, |r| r.len() >= 30).await,
        "delivered after the TLS failover: {} of 30\n{}",
        receiver.count_for("/sentinel"),
        w.log_text()
    );
}
