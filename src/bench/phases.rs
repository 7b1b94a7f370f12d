//! The phases of the main `ankusa bench` run, in order: Redis memory per pending row,
//! throughput draining the backlog, latency at half that rate, worker RSS behind a dead sink,
//! then the optional fairness, isolation and lanes runs; and the targets.

use super::*;

/// The bench's world: a private Redis, the receiver, a store, a producer, the tenants (one
/// `s` source each) and the bodies.
pub(super) struct World {
    redis: RedisServer,
    receiver: Receiver,
    store: Store,
    producer: Producer,
    tenants: Vec<String>,
    bodies: Vec<Vec<u8>>,
}

impl World {
    pub(super) async fn start(args: &BenchArgs) -> Result<World, Error> {
        let redis = RedisServer::start().map_err(|e| Error::Other(e.to_string()))?;
        let receiver = Receiver::start_with(ReceiverOptions {
            record_bodies: false,
            threads: 1,
        })
        .map_err(|e| Error::Other(e.to_string()))?;
        let store = Store::connect(&redis.url(), "bench", 30_000)
            .await?
            .with_edge(crate::testkit::loopback_edge());
        let producer = Producer::new(store.clone(), 16 << 20);
        let tenants: Vec<String> = (0..args.tenants.max(1)).map(|i| format!("t{i}")).collect();
        for t in &tenants {
            let mut sink = SinkEntry::http(&receiver.url(&format!("{t}/hook")));
            if args.policy {
                sink.filter = Some(crate::model::EventFilter::types(vec!["bench.*".into()]));
                sink.rate_limit = Some(crate::model::RateLimit {
                    per_second: 1e6,
                    burst: Some(100_000),
                });
            }
            store
                .put_source(t, "s", &SourceSpec { sinks: vec![sink] })
                .await?;
        }
        let bodies = bodies(args)?;
        eprintln!(
            "bench: redis {}, receiver {}, {} tenants, {} bodies",
            redis.url(),
            receiver.url(""),
            tenants.len(),
            bodies.len()
        );
        Ok(World {
            redis,
            receiver,
            store,
            producer,
            tenants,
            bodies,
        })
    }

    /// Phase 1, memory per pending row: commit the backlog with no worker running. Answers
    /// Redis' `used_memory` before the backlog (bytes).
    pub(super) async fn memory_per_pending_row(
        &self,
        args: &BenchArgs,
        report: &mut BenchReport,
    ) -> Result<f64, Error> {
        let mem0 = info_field(&self.redis, "memory", "used_memory");
        let body_bytes =
            commit_backlog(&self.producer, &self.tenants, &self.bodies, args.rows).await?;
        let mem1 = info_field(&self.redis, "memory", "used_memory");
        report.mean_body_bytes = (body_bytes / args.rows.max(1) as u64) as usize;
        report.redis_bytes_per_pending_row =
            ((mem1 - mem0 - body_bytes as f64) / args.rows as f64).round();
        eprintln!(
            "bench: {} rows pending, {:.0} bytes of Redis memory per row beyond the body",
            args.rows, report.redis_bytes_per_pending_row
        );
        Ok(mem0)
    }

    /// Phase 1b, memory per pending row with 2 and 4 sinks per hook: the same bodies
    /// committed to an instance of their own (no worker serves it), measured, then deleted.
    /// At most 40 000 rows each (the figure is per row; more adds nothing).
    pub(super) async fn memory_by_sinks(
        &self,
        args: &BenchArgs,
        report: &mut BenchReport,
    ) -> Result<(), Error> {
        let rows = args.rows.clamp(1, 40_000);
        for sinks in [2usize, 4] {
            let instance = format!("bench-mem{sinks}");
            let (store, producer) = connect_instance(&self.redis, &instance).await?;
            let entries = (0..sinks)
                .map(|i| SinkEntry::http(&self.receiver.url(&format!("mem/{i}"))))
                .collect();
            store
                .put_source("m", "s", &SourceSpec { sinks: entries })
                .await?;
            let hooks = (rows / sinks).max(1);
            let mem0 = info_field(&self.redis, "memory", "used_memory");
            let body_bytes =
                commit_backlog(&producer, &["m".to_string()], &self.bodies, hooks).await?;
            let mem1 = info_field(&self.redis, "memory", "used_memory");
            let per_row = ((mem1 - mem0 - body_bytes as f64) / (hooks * sinks) as f64).round();
            eprintln!(
                "bench: {} rows pending ({sinks} sinks per hook), {per_row:.0} bytes of Redis \
                 memory per row beyond the body",
                hooks * sinks
            );
            match sinks {
                2 => report.redis_bytes_per_pending_row_2_sinks = per_row,
                _ => report.redis_bytes_per_pending_row_4_sinks = per_row,
            }
            // Gone before the other phases, which measure against a quiet Redis.
            let wipe = "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
                        redis.call('DEL', k) n = n + 1 end return n";
            self.redis
                .cmd(&["EVAL", wipe, "0", &format!("ankusa:{{{instance}*")])
                .map_err(|e| Error::Other(e.to_string()))?;
        }
        Ok(())
    }

    /// Phase 2, throughput: a worker drains the backlog; answers the worker, still running.
    pub(super) async fn throughput(
        &self,
        args: &BenchArgs,
        dir: &tempfile::TempDir,
        mem0: f64,
        report: &mut BenchReport,
    ) -> Result<WorkerChild, Error> {
        let redis = &self.redis;
        let cpu0 = redis_cpu(redis);
        let cmds0 = info_field(redis, "stats", "total_commands_processed");
        let started = Instant::now();
        let worker = spawn_worker(&redis.url(), dir, "bench")?;
        let bar = indicatif::ProgressBar::new(args.rows as u64);
        let deadline = Instant::now() + Duration::from_secs(600);
        while self.receiver.count() < args.rows && Instant::now() < deadline {
            self.receiver
                .wait_until_async(Duration::from_millis(250), |_| false)
                .await;
            bar.set_position(self.receiver.count() as u64);
        }
        bar.finish_and_clear();
        let elapsed = started.elapsed().as_secs_f64();
        let delivered = self.receiver.count();
        // Let the last settle land before reading Redis' counters.
        crate::ops::tick(&self.store, None).await?;
        let cpu1 = redis_cpu(redis);
        let cmds1 = info_field(redis, "stats", "total_commands_processed");
        report.deliveries_per_sec = (delivered as f64 / elapsed).round();
        report.redis_cpu_us_per_row =
            ((cpu1 - cpu0) * 1e6 / delivered as f64 * 10.0).round() / 10.0;
        report.redis_commands_per_row =
            ((cmds1 - cmds0) / delivered as f64 * 100.0).round() / 100.0;
        let mem2 = info_field(redis, "memory", "used_memory");
        report.redis_bytes_per_delivered_row = ((mem2 - mem0) / delivered.max(1) as f64).round();
        eprintln!(
            "bench: {:.0} bytes of Redis memory per delivered row kept (history {})",
            report.redis_bytes_per_delivered_row,
            if args.no_history { "off" } else { "on" }
        );
        eprintln!(
            "bench: {delivered} rows in {elapsed:.2} s = {:.0} deliveries/s; Redis {:.1} µs CPU and {:.2} commands per row",
            report.deliveries_per_sec, report.redis_cpu_us_per_row, report.redis_commands_per_row
        );
        Ok(worker)
    }

    /// Phase 3, latency at half the measured rate, committed in 10 ms ticks; and the
    /// worker's peak RSS.
    pub(super) async fn latency(
        &self,
        args: &BenchArgs,
        pid: u32,
        report: &mut BenchReport,
    ) -> Result<(), Error> {
        let rate = (report.deliveries_per_sec / 2.0).max(100.0);
        report.latency_rate = rate.round();
        self.receiver.clear();
        let tenants = &self.tenants;
        let mut committed_at: HashMap<u64, Instant> = HashMap::new();
        let tick = Duration::from_millis(10);
        let per_tick = ((rate * tick.as_secs_f64()).round() as usize).max(1);
        let run_until = Instant::now() + Duration::from_secs(args.latency_secs);
        let mut next = Instant::now();
        let mut k = 0usize;
        while Instant::now() < run_until {
            for chunk_t in 0..tenants.len() {
                let n = per_tick / tenants.len() + usize::from(chunk_t < per_tick % tenants.len());
                if n == 0 {
                    continue;
                }
                let hooks: Vec<Hook> = (0..n)
                    .map(|j| hook(&self.bodies[(k + j) % self.bodies.len()]))
                    .collect();
                k += n;
                let r = self
                    .producer
                    .commit_many(&tenants[chunk_t], "s", &hooks)
                    .await?;
                let now = Instant::now();
                for j in 0..n as u64 {
                    committed_at.insert(r.first_hook + j, now);
                }
            }
            next += tick;
            tokio::time::sleep_until(next.into()).await;
        }
        let expected = committed_at.len();
        self.receiver
            .wait_until_async(Duration::from_secs(30), |r| r.len() >= expected)
            .await;
        let mut lat: Vec<f64> = self
            .receiver
            .requests()
            .iter()
            .filter_map(|r| {
                let id: u64 = r.header("ankusa-hook-id")?.parse().ok()?;
                Some(
                    r.at.saturating_duration_since(*committed_at.get(&id)?)
                        .as_secs_f64()
                        * 1000.0,
                )
            })
            .collect();
        lat.sort_by(|a, b| a.total_cmp(b));
        report.p50_ms = (percentile(&lat, 0.5) * 100.0).round() / 100.0;
        report.p99_ms = (percentile(&lat, 0.99) * 100.0).round() / 100.0;
        report.worker_peak_rss_mib =
            (status_kib(pid, "VmHWM:").unwrap_or(0.0) / 1024.0 * 10.0).round() / 10.0;
        eprintln!("bench: {expected} hooks at {rate:.0}/s: p50 {:.2} ms, p99 {:.2} ms; worker peak RSS {:.1} MiB", report.p50_ms, report.p99_ms, report.worker_peak_rss_mib);
        Ok(())
    }

    /// Phase 4, RSS behind a dead sink: every endpoint answers 503, a large backlog waits
    /// in Redis; RSS sampled every second while committing and for 5 s after.
    pub(super) async fn dead_backlog(
        &self,
        args: &BenchArgs,
        pid: u32,
        report: &mut BenchReport,
    ) -> Result<(), Error> {
        let rss_mib = || (status_kib(pid, "VmRSS:").unwrap_or(0.0) / 1024.0 * 10.0).round() / 10.0;
        for t in &self.tenants {
            self.receiver
                .set(&format!("{t}/hook"), Behavior::Status(503));
        }
        let small = b"{\"dead\":true}".to_vec();
        let bar = indicatif::ProgressBar::new(args.dead_backlog as u64);
        let mut i = 0;
        let mut samples = Vec::new();
        let mut last_sample = Instant::now();
        while i < args.dead_backlog {
            let n = 1000.min(args.dead_backlog - i);
            let hooks: Vec<Hook> = (0..n).map(|_| Hook::new(small.clone())).collect();
            let tenant = &self.tenants[(i / 1000) % self.tenants.len()];
            self.producer.commit_many(tenant, "s", &hooks).await?;
            i += n;
            bar.set_position(i as u64);
            if last_sample.elapsed() >= Duration::from_secs(1) {
                samples.push(rss_mib());
                last_sample = Instant::now();
            }
        }
        bar.finish_and_clear();
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            samples.push(rss_mib());
        }
        report.dead_backlog = args.dead_backlog;
        report.dead_backlog_rss_mib = samples;
        report.dead_backlog_claimed = self.store.claimed_count().await?;
        eprintln!(
            "bench: {} rows behind a dead sink: worker RSS {:?} MiB, {} rows claimed",
            args.dead_backlog, report.dead_backlog_rss_mib, report.dead_backlog_claimed
        );
        Ok(())
    }

    /// The optional runs: fairness (`--fairness-backlog`), isolation (`--isolation-rows`),
    /// ordered lanes (`--lanes`).
    pub(super) async fn extras(
        &self,
        args: &BenchArgs,
        dir: &tempfile::TempDir,
        report: &mut BenchReport,
    ) -> Result<(), Error> {
        let (redis, receiver, bodies) = (&self.redis, &self.receiver, &self.bodies);
        if args.fairness_backlog > 0 {
            let (without, with) =
                fairness(redis, receiver, dir, bodies, args.fairness_backlog).await?;
            report.fairness_p99_ms_without_backlog = without;
            report.fairness_p99_ms_with_backlog = with;
            report.fairness_ratio = if without > 0.0 {
                (with / without * 100.0).round() / 100.0
            } else {
                0.0
            };
            eprintln!("bench: small tenants' p99 lag {without:.1} ms alone, {with:.1} ms beside a {}-row backlog: ratio {:.2}", args.fairness_backlog, report.fairness_ratio);
        }
        if args.isolation_rows > 0 {
            let (healthy, one_down) =
                isolation(redis, receiver, dir, bodies, args.isolation_rows).await?;
            report.isolation_healthy_per_sec = healthy;
            report.isolation_one_down_per_sec = one_down;
            report.isolation_ratio = (one_down / healthy * 100.0).round() / 100.0;
            eprintln!("bench: 7 healthy tenants: {healthy:.0}/s all healthy, {one_down:.0}/s with an 8th tenant's endpoint hanging: ratio {:.2}", report.isolation_ratio);
        }
        if args.lanes > 0 {
            let rows = args.rows.min(50_000);
            let (unordered, ordered) =
                lanes(redis, receiver, dir, bodies, rows, args.lanes).await?;
            report.unordered_per_sec = unordered;
            report.ordered_per_sec = ordered;
            report.ordered_ratio = (ordered / unordered * 100.0).round() / 100.0;
            eprintln!(
                "bench: {} lanes: {ordered:.0}/s ordered vs {unordered:.0}/s unordered: ratio {:.2}",
                args.lanes, report.ordered_ratio
            );
        }
        Ok(())
    }
}

/// The targets: say on stderr which are met and by how much the others are missed.
pub(super) fn check_targets(args: &BenchArgs, report: &BenchReport) {
    let check = |name: &str, got: f64, target: f64, higher_is_better: bool| {
        let met = if higher_is_better {
            got >= target
        } else {
            got <= target
        };
        let factor = if higher_is_better {
            target / got.max(f64::MIN_POSITIVE)
        } else {
            got / target
        };
        if met {
            eprintln!("target {name}: met ({got} vs {target})");
        } else {
            eprintln!("target {name}: MISSED ({got} vs {target}, {factor:.2}× off)");
        }
    };
    let r = report;
    check("deliveries/s ≥ 30000", r.deliveries_per_sec, 30_000.0, true);
    check("Redis CPU µs/row ≤ 15", r.redis_cpu_us_per_row, 15.0, false);
    check("p50 ms ≤ 2 at half rate", r.p50_ms, 2.0, false);
    check("p99 ms ≤ 20 at half rate", r.p99_ms, 20.0, false);
    let mem = r.redis_bytes_per_pending_row;
    check("Redis bytes/pending row ≤ 250", mem, 250.0, false);
    eprintln!(
        "Redis bytes/pending row with 2 sinks per hook: {}, with 4: {}",
        r.redis_bytes_per_pending_row_2_sinks, r.redis_bytes_per_pending_row_4_sinks
    );
    if args.fairness_backlog > 0 {
        check("fairness ratio ≤ 1.5", r.fairness_ratio, 1.5, false);
    }
    if args.isolation_rows > 0 {
        check("isolation ratio ≥ 0.9", r.isolation_ratio, 0.9, true);
    }
}
