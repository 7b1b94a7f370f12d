//! The destinations benchmark shared by the broker and AWS stream sink tests (`#[ignore]`d,
//! run by hand; `BENCHMARKS.md` "Destinations side by side"): each module is measured in the
//! same process and run as an `http` entry to an out-of-process receiver, so the figures are
//! ratios taken on one machine at one time.
#![allow(dead_code)]

use crate::common::Env;
use ankusa::model::SinkEntry;
use ankusa::Hook;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long one module may take to drain before the benchmark gives up.
pub const BENCH_BOUND: Duration = Duration::from_secs(600);

/// CPU seconds (user + system) of this test process so far: the in-process worker, the
/// producer and the test's clients; the receiver, Redis and the brokers run apart.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given and reads nothing else.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// `ankusa receiver` (200 on every path) as its own process on a free loopback port, so
/// its CPU is not the worker's; killed on drop.
pub struct ReceiverProcess {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl ReceiverProcess {
    /// Start it and wait until it accepts connections.
    pub fn start() -> ReceiverProcess {
        let port = ankusa::testkit::free_port().expect("a free port");
        let child = Command::new(env!("CARGO_BIN_EXE_ankusa"))
            .env_remove("ANKUSA_ADMIN__TOKEN")
            .args(["receiver", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ankusa receiver starts");
        let until = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "ankusa receiver listens");
            std::thread::sleep(Duration::from_millis(20));
        }
        ReceiverProcess { child, port }
    }

    /// An `http` entry to it.
    pub fn entry(&self) -> SinkEntry {
        SinkEntry::http(&format!("http://127.0.0.1:{}/bench", self.port))
    }
}

impl Drop for ReceiverProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One module's figures.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The sink module.
    pub module: String,
    /// Hooks delivered.
    pub rows: usize,
    /// Body bytes of each hook.
    pub body_bytes: usize,
    /// Wall time from the worker's start to the last row settled.
    pub secs: f64,
    /// CPU of this process per delivery, µs.
    pub cpu_us: f64,
}

impl Measured {
    /// Deliveries per second.
    pub fn rate(&self) -> f64 {
        self.rows as f64 / self.secs
    }

    /// The CSV header of [`Measured::csv`].
    pub const CSV_HEADER: &'static str =
        "module,rows,body_bytes,seconds,deliveries_per_s,cpu_us_per_delivery";

    /// One CSV line.
    pub fn csv(&self) -> String {
        format!(
            "{},{},{},{:.3},{:.0},{:.0}",
            self.module,
            self.rows,
            self.body_bytes,
            self.secs,
            self.rate(),
            self.cpu_us
        )
    }
}

/// Commit `rows` hooks of `body` to `tenant/<module>` with `entry` as its only sink, then
/// start a worker and time it until every row is settled (none dead-lettered).
pub async fn measure(
    env: &Env,
    module: &str,
    entry: SinkEntry,
    rows: usize,
    body: &[u8],
) -> Measured {
    env.put_source("bench", module, vec![entry]).await;
    let hooks: Vec<Hook> = (0..100)
        .map(|_| Hook::new(body.to_vec()).header("X-GitHub-Event", "push"))
        .collect();
    for _ in 0..rows.div_ceil(100) {
        env.producer
            .commit_many("bench", module, &hooks)
            .await
            .expect("committed");
    }
    let rows = rows.div_ceil(100) * 100;
    let before = env.store.totals().await.expect("totals");
    let worker = env.worker().await;
    let (t, c0) = (Instant::now(), cpu_seconds());
    loop {
        tokio::time::timeout(BENCH_BOUND, worker.tick())
            .await
            .expect("tick returns")
            .expect("tick");
        let now = env.store.totals().await.expect("totals");
        if now.delivered + now.dead_lettered
            >= before.delivered + before.dead_lettered + rows as u64
        {
            assert_eq!(
                now.dead_lettered, before.dead_lettered,
                "{module}: nothing dead-lettered"
            );
            break;
        }
        assert!(
            t.elapsed() < BENCH_BOUND,
            "{module}: drained within {BENCH_BOUND:?}"
        );
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu_us = (cpu_seconds() - c0) * 1e6 / rows as f64;
    worker.shutdown().await;
    let m = Measured {
        module: module.to_string(),
        rows,
        body_bytes: body.len(),
        secs,
        cpu_us,
    };
    println!(
        "{module} bench: {rows} deliveries of {} B in {secs:.2} s = {:.0} deliveries/s; \
         CPU of the test process {cpu_us:.0} µs/delivery",
        body.len(),
        m.rate()
    );
    m
}

/// Print the CSV of a run (the lines `BENCHMARKS.md` quotes), with the ratio to `http`.
pub fn report(all: &[Measured]) {
    let http = all.iter().find(|m| m.module == "http").map(Measured::rate);
    println!("bench csv:\n{},vs_http", Measured::CSV_HEADER);
    for m in all {
        let ratio = http.map_or(String::new(), |h| format!("{:.2}", m.rate() / h));
        println!("{},{ratio}", m.csv());
    }
}

/// A real GitHub `push` payload when the data set sits beside the repository, else a
/// 7 KiB JSON object of the same shape.
pub fn push_body() -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/github-webhooks/push.payload.json"),
    )
    .unwrap_or_else(|_| {
        format!(
            "{{\"ref\":\"refs/heads/main\",\"pad\":\"{}\"}}",
            "x".repeat(7_300)
        )
        .into_bytes()
    })
}
