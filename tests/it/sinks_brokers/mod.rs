//! The broker sinks against real brokers this binary starts on free loopback
//! ports: `nats-server -js` (NATS JetStream) and `rabbitmq-server` (AMQP 0-9-1), each
//! started once and shared by the tests here, plus a NATS of its own for the restart test.
//! Consumers in the test read what arrived independently of the worker (a JetStream stream
//! read by sequence; a queue bound to the exchange). Times are liveness bounds only.

use crate::common;
use crate::common_bench;
mod nats;
mod rabbitmq;

use ankusa::config::{Config, ConnectionConfig};
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::Hook;
use async_nats::jetstream;
use common::procs::eventually;
use common::*;
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// Poll `probe` until it answers `Some` ([`eventually`], which panics naming `what` after
/// `bound`).
async fn until<T, F, Fut>(what: &str, bound: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually(what, bound, || {
        let f = probe();
        async move { f.await.ok_or_else(|| "not yet".to_string()) }
    })
    .await
}

/// How long a broker may take to accept connections (RabbitMQ boots in ~10 s on an idle
/// machine, more under a parallel build).
const BROKER_START: Duration = Duration::from_secs(120);

/// The process groups of the brokers this binary started, killed when it exits.
static GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

extern "C" fn kill_brokers() {
    if let Ok(groups) = GROUPS.lock() {
        for g in groups.iter() {
            kill_group(*g);
        }
    }
}

/// Spawn `cmd` from a thread that lives as long as the test binary, so the broker outlives
/// the test that happened to start it ([`dies_with_test`] kills a child when its spawning
/// thread ends) and dies with the binary: by that thread's end, and by an exit handler that
/// kills its whole process group (RabbitMQ's script forks the Erlang VM).
fn spawn_shared(mut cmd: Command) -> i32 {
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(kill_brokers);
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let child = dies_with_test(&mut cmd).spawn().map(|c| c.id() as i32);
        let _ = tx.send(child);
        loop {
            std::thread::park();
        }
    });
    let pid = rx.recv().unwrap().expect("broker spawns");
    GROUPS.lock().unwrap().push(pid);
    pid
}

/// A `nats-server -js` on a free loopback port with its store in its own directory.
struct Nats {
    port: u16,
    store: PathBuf,
    pid: i32,
    _dir: tempfile::TempDir,
}

impl Nats {
    async fn start() -> Nats {
        let dir = tempfile::tempdir().unwrap();
        let mut n = Nats {
            port: free_port(),
            store: dir.path().join("js"),
            pid: 0,
            _dir: dir,
        };
        n.launch().await;
        n
    }

    async fn launch(&mut self) {
        let mut cmd = Command::new("nats-server");
        cmd.args([
            "-a",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-js",
            "-sd",
        ])
        .arg(&self.store)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        self.pid = spawn_shared(cmd);
        let url = self.url();
        until("nats-server accepts connections", BROKER_START, || {
            let url = url.clone();
            async move { async_nats::connect(url).await.ok() }
        })
        .await;
    }

    /// Kill -9 and start again on the same port and store.
    async fn restart(&mut self) {
        kill_group(self.pid);
        let port = self.port;
        until(
            "the killed nats-server's port is free",
            BROKER_START,
            || async move {
                std::net::TcpStream::connect(("127.0.0.1", port))
                    .is_err()
                    .then_some(())
            },
        )
        .await;
        self.launch().await;
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

/// This binary's shared NATS.
async fn nats() -> &'static Nats {
    static NATS: tokio::sync::OnceCell<Nats> = tokio::sync::OnceCell::const_new();
    NATS.get_or_init(Nats::start).await
}

/// A `rabbitmq-server` on free loopback ports, its data, logs and config in its own
/// directory, no plugins.
struct Rabbit {
    port: u16,
    /// An `amqps` listener, its certificate signed by `dir/ca.pem`.
    tls_port: u16,
    dist: u16,
    pid: i32,
    dir: tempfile::TempDir,
}

impl Rabbit {
    async fn start() -> Rabbit {
        let dir = tempfile::tempdir().unwrap();
        let (port, tls_port) = (free_port(), free_port());
        let d = dir.path();
        let (ca, cert, key) = tls_files(d);
        std::fs::write(d.join("enabled_plugins"), "[].\n").unwrap();
        std::fs::write(d.join("env.conf"), "").unwrap();
        std::fs::write(
            d.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.default = 127.0.0.1:{port}\n\
                 listeners.ssl.default = 127.0.0.1:{tls_port}\n\
                 ssl_options.cacertfile = {}\n\
                 ssl_options.certfile = {}\n\
                 ssl_options.keyfile = {}\n\
                 ssl_options.verify = verify_none\n\
                 ssl_options.fail_if_no_peer_cert = false\n",
                ca.display(),
                cert.display(),
                key.display()
            ),
        )
        .unwrap();
        let mut r = Rabbit {
            port,
            tls_port,
            dist: free_port(),
            pid: 0,
            dir,
        };
        r.launch().await;
        r
    }

    /// Start the node on this broker's ports, data and config, and wait until it accepts
    /// AMQP connections.
    async fn launch(&mut self) {
        let d = self.dir.path();
        let p = |name: &str| d.join(name);
        let mut cmd = Command::new("/usr/lib/rabbitmq/bin/rabbitmq-server");
        cmd.env("HOME", d)
            .env("RABBITMQ_CONF_ENV_FILE", p("env.conf"))
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist.to_string())
            .env(
                "RABBITMQ_NODENAME",
                format!("ankusa-test-{}@localhost", self.port),
            )
            .env("RABBITMQ_MNESIA_BASE", p("mnesia"))
            .env("RABBITMQ_LOG_BASE", p("log"))
            .env("RABBITMQ_CONFIG_FILE", p("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", p("enabled_plugins"))
            .env("RABBITMQ_PID_FILE", p("pid"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.pid = spawn_shared(cmd);
        let url = self.url();
        until("rabbitmq-server accepts connections", BROKER_START, || {
            let url = url.clone();
            async move { amqp_connect(&url).await.ok() }
        })
        .await;
    }

    /// Kill -9 the node (its whole process group) and start it again on the same ports
    /// and data.
    async fn restart(&mut self) {
        kill_group(self.pid);
        let (port, dist) = (self.port, self.dist);
        until(
            "the killed broker's ports are free",
            BROKER_START,
            || async move {
                let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
                (free(port) && free(dist)).then_some(())
            },
        )
        .await;
        self.launch().await;
    }

    fn url(&self) -> String {
        format!("amqp://127.0.0.1:{}", self.port)
    }
}

/// This binary's shared RabbitMQ.
async fn rabbit() -> &'static Rabbit {
    static RABBIT: tokio::sync::OnceCell<Rabbit> = tokio::sync::OnceCell::const_new();
    RABBIT.get_or_init(Rabbit::start).await
}

async fn amqp_connect(url: &str) -> Result<lapin::Connection, lapin::Error> {
    let props = lapin::ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio);
    lapin::Connection::connect(url, props).await
}

/// A test config with connection `bus` to `url`, usable by tenant `acme` only.
fn with_bus(url: &str) -> impl FnOnce(&mut Config) {
    with_conn("bus", url)
}

/// A test config with connection `name` to `url`, usable by tenant `acme` only. (The
/// connection states are per process: a test reading one names its connection apart.)
fn with_conn(name: &str, url: &str) -> impl FnOnce(&mut Config) {
    let (name, url) = (name.to_string(), url.to_string());
    move |c: &mut Config| {
        c.connections.insert(
            name,
            ConnectionConfig {
                url,
                tenants: vec!["acme".into()],
                ..ConnectionConfig::default()
            },
        );
    }
}

fn entry(module: &str, opts: serde_json::Value) -> SinkEntry {
    SinkEntry {
        module: module.into(),
        opts: opts.as_object().cloned().unwrap(),
        ..SinkEntry::default()
    }
}

/// Up to `n` real GitHub webhook bodies (their event name from the file name), cycled;
/// synthetic ones when the data set is not there.
fn github_hooks(n: usize) -> Vec<(Vec<u8>, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/github-webhooks");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(".payload.json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.truncate(12);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(match files.get(i % files.len().max(1)) {
            Some(f) => {
                let event = f
                    .file_name()
                    .and_then(|s| s.to_str())
                    .and_then(|s| s.split('.').next())
                    .unwrap_or("push")
                    .to_string();
                // Each body distinct, so a lost or doubled hook cannot hide behind a twin.
                let mut body = std::fs::read(f).unwrap();
                body.extend_from_slice(format!("\n{i}").as_bytes());
                (body, event)
            }
            None => (format!("{{\"n\":{i}}}").into_bytes(), "push".into()),
        });
    }
    out
}

/// Commit `bodies` to `acme/s` with their `X-GitHub-Event` header and event type; the
/// hook ids in order.
async fn commit_github(env: &Env, bodies: &[(Vec<u8>, String)]) -> Vec<u64> {
    let hooks: Vec<Hook> = bodies
        .iter()
        .map(|(b, e)| {
            Hook::new(b.clone())
                .header("X-GitHub-Event", e.clone())
                .event_type(e.clone())
        })
        .collect();
    let r = env.producer.commit_many("acme", "s", &hooks).await.unwrap();
    (0..hooks.len() as u64).map(|i| r.first_hook + i).collect()
}

/// A JetStream stream `name` capturing `subjects` on `url`.
async fn stream(url: &str, name: &str, subjects: &[&str]) -> jetstream::stream::Stream {
    let js = jetstream::new(async_nats::connect(url).await.unwrap());
    js.create_stream(jetstream::stream::Config {
        name: name.into(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Every message of `stream` once it holds `n` (in stream order).
async fn stream_messages(
    stream: &mut jetstream::stream::Stream,
    n: u64,
) -> Vec<jetstream::message::StreamMessage> {
    until("the stream holds every message", LIVENESS, || {
        let mut s = stream.clone();
        async move { (s.info().await.ok()?.state.messages >= n).then_some(()) }
    })
    .await;
    let mut out = Vec::new();
    for seq in 1..=n {
        out.push(stream.get_raw_message(seq).await.unwrap());
    }
    out
}

fn nats_header<'a>(m: &'a jetstream::message::StreamMessage, name: &str) -> &'a str {
    // The client parses a standard header name into its own form, which a lookup by text
    // does not find.
    let found = match name {
        "Nats-Msg-Id" => m.headers.get(async_nats::header::NATS_MESSAGE_ID),
        _ => m.headers.get(name),
    };
    found
        .map(|v| v.as_str())
        .unwrap_or_else(|| panic!("header {name} missing"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_put_refuses_unknown_forbidden_and_mismatched_connections_naming_the_field() {
    let env = Env::tuned(|c| {
        with_bus("nats://127.0.0.1:4")(c);
        c.connections.insert(
            "mq".into(),
            ConnectionConfig {
                url: "amqp://127.0.0.1:5".into(),
                tenants: vec!["*".into()],
                ..ConnectionConfig::default()
            },
        );
    })
    .await;
    let put = |tenant: &'static str, e: SinkEntry| {
        let store = env.store.clone();
        async move {
            store
                .put_source(tenant, "s", &SourceSpec { sinks: vec![e] })
                .await
                .map_err(|e| e.to_string())
        }
    };
    let nats = |conn: &str| {
        entry(
            "nats",
            serde_json::json!({"connection": conn, "subject": "a.b"}),
        )
    };
    let unknown = put("acme", nats("nope")).await.unwrap_err();
    assert!(unknown.contains("sinks[0].opts: connection:"), "{unknown}");
    let forbidden = put("globex", nats("bus")).await.unwrap_err();
    assert!(
        forbidden.contains("sinks[0].opts: connection:"),
        "{forbidden}"
    );
    assert!(forbidden.contains("\"bus\""), "{forbidden}");
    let mismatched = put("acme", nats("mq")).await.unwrap_err();
    assert!(mismatched.contains("not a nats connection"), "{mismatched}");
    let system = put(
        "acme",
        entry(
            "nats",
            serde_json::json!({"connection": "bus", "subject": "$JS.API.STREAM.DELETE.X"}),
        ),
    )
    .await
    .unwrap_err();
    assert!(system.contains("sinks[0].opts: subject:"), "{system}");
    let address = put(
        "acme",
        entry(
            "rabbitmq",
            serde_json::json!({"connection": "mq", "exchange": "x", "url": "amqp://evil"}),
        ),
    )
    .await
    .unwrap_err();
    assert!(address.contains("url"), "{address}");
    put("acme", nats("bus")).await.expect("allowed");
    put(
        "globex",
        entry(
            "rabbitmq",
            serde_json::json!({"connection": "mq", "exchange": ""}),
        ),
    )
    .await
    .expect("\"*\" allows every tenant");

    // What the operator's CLI says.
    let dir = tempfile::tempdir().unwrap();
    let config = env.config_file(&dir, |_| {});
    let spec = dir.path().join("spec.json");
    let spec_json = serde_json::json!({"sinks": [
        {"module": "nats", "opts": {"connection": "bus", "subject": "a.b"}}
    ]});
    std::fs::write(&spec, spec_json.to_string()).unwrap();
    let spec = spec.to_string_lossy().into_owned();
    let (code, _, stderr) = env
        .cli_with(Some(&config), &["source", "put", "globex", "s", &spec])
        .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("sinks[0].opts: connection:"), "{stderr}");
}

#[test]
fn connections_are_checked_at_config_load_naming_the_key() {
    let e = Config::from_toml_str(
        "[connections.bus]\nurl = \"amqp://u:p@h\"\n\
         [connections.b2]\nurl = \"http://h\"\ntenants = [\"a b\"]\n\
         [connections.b3]\nurl = \"amqp://h\"\ntenants = [\"*\"]\ntoken = \"t\"\n",
    )
    .unwrap_err()
    .to_string();
    for want in [
        "connections.bus.url: holds credentials",
        "connections.bus.tenants: must list",
        "connections.b2.url: scheme \"http\"",
        "connections.b2.tenants[0]",
        "connections.b3.token: a token is for NATS",
    ] {
        assert!(e.contains(want), "{want} in:\n{e}");
    }
    let e = Config::from_toml_str("[connections.bus]\nuri = \"nats://h\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("connections.bus.uri"), "{e}");
    let ok = Config::from_toml_str(
        "[connections.bus]\nurl = \"nats://h:4222\"\ntenants = [\"acme\"]\n\
         password = \"${env:BUS_PASSWORD}\"\nusername = \"ankusa\"\n",
    )
    .unwrap();
    assert!(ok.connections["bus"].allows("acme"));
    assert!(!ok.connections["bus"].allows("globex"));
    // A reference is shown as written; a literal secret never.
    let mut literal = ok.clone();
    literal.connections.get_mut("bus").unwrap().password = Some("hunter2".into());
    let shown = literal.redacted_toml();
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(ok.redacted_toml().contains("${env:BUS_PASSWORD}"));
}

/// A topic exchange `exchange` and a queue `queue` bound to it by `pattern`, on `url`.
async fn bound_queue(url: &str, exchange: &str, queue: &str, pattern: &str) -> lapin::Channel {
    let ch = amqp_connect(url)
        .await
        .unwrap()
        .create_channel()
        .await
        .unwrap();
    ch.exchange_declare(
        exchange,
        lapin::ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    if !queue.is_empty() {
        ch.queue_declare(
            queue,
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.queue_bind(
            queue,
            exchange,
            pattern,
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    ch
}

/// The first `n` messages of `queue` (acknowledged as taken), in queue order.
async fn take(ch: &lapin::Channel, queue: &str, n: usize) -> Vec<lapin::message::BasicGetMessage> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + LIVENESS;
    while out.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {n} messages in {queue}",
            out.len()
        );
        match ch
            .basic_get(queue, BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            Some(m) => out.push(m),
            None => tokio::time::sleep(common::procs::POLL).await,
        }
    }
    out
}

fn amqp_header(m: &lapin::message::BasicGetMessage, name: &str) -> String {
    let h = m.delivery.properties.headers().as_ref().expect("headers");
    match h.inner().get(name) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("header {name}: {other:?}"),
    }
}

async fn queue_depth(ch: &lapin::Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue,
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap()
    .message_count()
}

/// A CA and a server certificate for `127.0.0.1` it signed, as PEM files in `dir`:
/// `(ca, cert, key)`.
fn tls_files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let write = |name: &str, pem: String| {
        let p = dir.join(name);
        std::fs::write(&p, pem).unwrap();
        p
    };
    (
        write("ca.pem", ca_pem),
        write("server.pem", cert.pem()),
        write("server.key", key.serialize_pem()),
    )
}

/// Benchmark (not run by default): deliveries/s and worker CPU per delivery of the `nats`
/// and `rabbitmq` sinks against this binary's brokers, beside `http` to an `ankusa receiver`
/// process, one GitHub push body per hook (`BENCHMARKS.md` "Destinations side by side").
/// `ANKUSA_BENCH_ROWS=5000 cargo test --release --features fault-injection --test
/// sinks_brokers -- --ignored --nocapture bench_brokers`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_brokers_deliveries_per_second() {
    use common_bench::{measure, push_body, report, ReceiverProcess};
    let n: usize = std::env::var("ANKUSA_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let (nats, rabbit) = (nats().await, rabbit().await);
    let receiver = ReceiverProcess::start();
    let env = Env::tuned(|c| {
        with_conn("bn", &nats.url())(c);
        with_conn("br", &rabbit.url())(c);
        for conn in c.connections.values_mut() {
            conn.tenants = vec!["*".into()];
        }
        c.dispatch.batch = 1_000;
        c.dispatch.attempt_timeout_ms = 30_000;
    })
    .await;
    stream(&nats.url(), "BENCH", &["bench.>"]).await;
    bound_queue(&rabbit.url(), "bench-x", "bench-q", "#").await;
    let body = push_body();
    let mut all = Vec::new();
    all.push(measure(&env, "http", receiver.entry(), n, &body).await);
    let e = entry(
        "nats",
        serde_json::json!({"connection": "bn", "subject": "bench.x"}),
    );
    all.push(measure(&env, "nats", e, n, &body).await);
    let e = entry(
        "rabbitmq",
        serde_json::json!({"connection": "br", "exchange": "bench-x", "routing_key": "b"}),
    );
    all.push(measure(&env, "rabbitmq", e, n, &body).await);
    report(&all);
}
