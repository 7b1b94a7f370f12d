//! Deployment: the compose stack, its Prometheus and Grafana provisioning, the
//! Dockerfile and the demo receiver. No container engine runs here, so the stack is proven
//! piece by piece: `docker-compose config` accepts the file, every file a service mounts or
//! names exists, the services point at each other by the right names and ports, and the
//! commands they run exist in the binary. (`tests/observability/` runs the stack's
//! Prometheus configuration against a real worker.)
//!
//! `docker-compose` (Debian package, installed by `.ci/run`) and a Python with PyYAML (the
//! package depends on `python3-yaml`) read the YAML; tests that need them skip with a loud
//! message only when they are missing.

use crate::common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn root(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn skip(what: &str) {
    eprintln!("\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    eprintln!("!!! SKIPPED: {what} is not available (Debian package `docker-compose`; .ci/run installs it)");
    eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n");
}

/// A Python that imports `yaml`: Debian's (docker-compose depends on python3-yaml), or the
/// first `python3` on PATH.
fn python_with_yaml() -> Option<PathBuf> {
    ["/usr/bin/python3", "python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| {
            Command::new(p)
                .args(["-c", "import yaml"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// Parse YAML files (paths relative to the repository) into JSON values with PyYAML's
/// `safe_load` (anchors and `<<` merge keys resolved, as Compose does).
fn yaml(files: &[&str]) -> Option<Vec<Value>> {
    let py = python_with_yaml()?;
    let out = Command::new(py)
        .args(["-c", "import sys, json, yaml\nprint(json.dumps([yaml.safe_load(open(p)) for p in sys.argv[1:]]))"])
        .args(files.iter().map(|f| root(f)))
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "YAML does not parse: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(v.as_array().unwrap().clone())
}

/// The host path of `container_path` under `service`'s bind mounts (`./host:/container[:ro]`).
fn host_path(service: &Value, container_path: &str) -> Option<PathBuf> {
    service["volumes"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find_map(|v| {
            let mut parts = v.splitn(3, ':');
            let (host, target) = (parts.next()?, parts.next()?);
            if !host.starts_with("./") {
                return None;
            }
            let rest = container_path.strip_prefix(target)?;
            (rest.is_empty() || rest.starts_with('/'))
                .then(|| root(host).join(rest.trim_start_matches('/')))
        })
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

fn env_of<'a>(service: &'a Value, key: &str) -> Option<&'a str> {
    service["environment"][key].as_str()
}

#[test]
fn docker_compose_accepts_the_compose_file() {
    let Ok(out) = Command::new("docker-compose")
        .args(["-f", "docker-compose.yml", "config", "-q"])
        .current_dir(ROOT)
        .output()
    else {
        return skip("docker-compose");
    };
    assert!(
        out.status.success(),
        "docker-compose config -q:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_compose_stack_wires_redis_three_workers_a_producer_a_receiver_prometheus_and_grafana() {
    let Some(docs) = yaml(&["docker-compose.yml", "prometheus/prometheus.yml"]) else {
        return skip("python3 with PyYAML");
    };
    let (compose, prom) = (&docs[0], &docs[1]);
    let services = compose["services"].as_object().expect("services");
    let names: BTreeSet<&str> = services.keys().map(String::as_str).collect();
    for s in [
        "redis",
        "worker-1",
        "worker-2",
        "worker-3",
        "producer",
        "receiver",
        "prometheus",
        "grafana",
    ] {
        assert!(names.contains(s), "service {s} missing: {names:?}");
    }

    // Redis: AOF on, never evicting (the worker refuses an evicting Redis).
    let redis = strs(&services["redis"]["command"]).join(" ");
    assert!(redis.contains("--appendonly yes"), "{redis}");
    assert!(redis.contains("--maxmemory-policy noeviction"), "{redis}");
    assert!(
        services["redis"]["healthcheck"].is_object(),
        "workers wait for a healthy Redis"
    );

    // Workers: one pipeline on the stack's Redis, admin on 0.0.0.0:<port>.
    let mut admin_port = None;
    for w in ["worker-1", "worker-2", "worker-3"] {
        let s = &services[w];
        assert_eq!(
            strs(&s["command"]).first().map(String::as_str),
            Some("worker"),
            "{w} runs `ankusa worker`"
        );
        assert_eq!(
            env_of(s, "ANKUSA_REDIS__URL"),
            Some("redis://redis:6379"),
            "{w}"
        );
        assert_eq!(env_of(s, "ANKUSA_INSTANCE"), Some("demo"), "{w}");
        let listen = env_of(s, "ANKUSA_ADMIN__LISTEN")
            .unwrap_or_else(|| panic!("{w}: ANKUSA_ADMIN__LISTEN"));
        let port = listen
            .strip_prefix("0.0.0.0:")
            .unwrap_or_else(|| panic!("{w} listens on {listen}: not reachable from Prometheus"));
        assert!(
            admin_port.get_or_insert(port.to_string()) == port,
            "workers listen on one port"
        );
        assert_eq!(
            s["depends_on"]["redis"]["condition"], "service_healthy",
            "{w}"
        );
    }
    let admin_port = admin_port.unwrap();

    // Prometheus scrapes exactly the three workers on their admin port, loads the alert rules,
    // and both files are mounted where its command line and rule_files say.
    let job = prom["scrape_configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job_name"] == "ankusa")
        .expect("job ankusa");
    let targets: BTreeSet<String> = job["static_configs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| strs(&c["targets"]))
        .collect();
    let want: BTreeSet<String> = (1..=3)
        .map(|i| format!("worker-{i}:{admin_port}"))
        .collect();
    assert_eq!(targets, want);
    // Each worker answers the Host names it is reached by (Prometheus's targets, the demo
    // producer's workers): any other name is refused, as DNS rebinding would use one.
    for w in ["worker-1", "worker-2", "worker-3"] {
        let public: Vec<String> = serde_json::from_str(
            env_of(&services[w], "ANKUSA_ADMIN__PUBLIC_HOSTS")
                .unwrap_or_else(|| panic!("{w}: ANKUSA_ADMIN__PUBLIC_HOSTS")),
        )
        .expect("ANKUSA_ADMIN__PUBLIC_HOSTS is a JSON list");
        let config = ankusa::config::Config {
            admin: ankusa::config::AdminConfig {
                public_hosts: public.clone(),
                ..Default::default()
            },
            ..Default::default()
        };
        config.validate().expect("public hosts are valid");
        let hosts = ankusa::admin::browser::Hosts::new(&public);
        let producer_hosts = env_of(&services["producer"], "DEMO_WORKERS")
            .expect("DEMO_WORKERS")
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>();
        for target in targets.iter().chain(&producer_hosts) {
            assert!(
                hosts.allows(target),
                "{w} refuses Host {target}: {public:?}"
            );
        }
        assert!(!hosts.allows(&format!("evil.example:{admin_port}")));
    }
    assert_eq!(
        job["metrics_path"].as_str().unwrap_or("/metrics"),
        "/metrics"
    );
    let p = &services["prometheus"];
    let config = strs(&p["command"])
        .iter()
        .find_map(|a| a.strip_prefix("--config.file=").map(str::to_string))
        .expect("--config.file");
    let host = host_path(p, &config).unwrap_or_else(|| panic!("{config} is not mounted"));
    assert_eq!(
        std::fs::canonicalize(&host).unwrap(),
        std::fs::canonicalize(root("prometheus/prometheus.yml")).unwrap()
    );
    let rules = strs(&prom["rule_files"]);
    assert!(!rules.is_empty());
    for r in rules {
        let host = host_path(p, &r).unwrap_or_else(|| panic!("rule file {r} is not mounted"));
        assert!(host.is_file(), "rule file {r} → {}", host.display());
    }

    // The producer runs the demo script, against a source file that exists and is valid,
    // whose sinks point at the receiver service's listen port.
    let producer = &services["producer"];
    let script = strs(&producer["entrypoint"])
        .into_iter()
        .find(|a| a.ends_with(".sh"))
        .expect("producer script");
    assert!(
        host_path(producer, &script).is_some_and(|p| p.is_file()),
        "{script} is mounted from the repository"
    );
    let script_text = std::fs::read_to_string(host_path(producer, &script).unwrap()).unwrap();
    let source_file = script_text
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| matches!(c, ';' | ':' | ',' | '"' | '\'')))
        .find(|w| w.starts_with('/') && w.ends_with(".json"))
        .expect("the script names a source file by its container path");
    let source_host =
        host_path(producer, source_file).unwrap_or_else(|| panic!("{source_file} is not mounted"));
    let spec: ankusa::model::SourceSpec =
        serde_json::from_str(&std::fs::read_to_string(&source_host).unwrap())
            .expect("source spec parses");
    ankusa::sinks::registry::validate_source(&spec).expect("source spec is valid");
    let receiver = strs(&services["receiver"]["command"]);
    assert_eq!(receiver.first().map(String::as_str), Some("receiver"));
    let listen = receiver
        .iter()
        .skip_while(|a| *a != "--listen")
        .nth(1)
        .expect("--listen");
    let port = listen
        .strip_prefix("0.0.0.0:")
        .expect("receiver listens on all interfaces");
    for s in &spec.sinks {
        let url = s.opts["url"].as_str().unwrap();
        assert!(
            url.starts_with(&format!("http://receiver:{port}/")),
            "{url}"
        );
    }
    // The workers the script posts to are the worker services, on their admin port.
    for w in env_of(producer, "DEMO_WORKERS")
        .expect("DEMO_WORKERS")
        .split_whitespace()
    {
        let (host, p) = w.split_once(':').unwrap();
        assert!(names.contains(host) && p == admin_port, "{w}");
    }

    // Every bind mount of every service exists in the repository.
    for (name, s) in services {
        for v in strs(&s["volumes"]) {
            if let Some(host) = v.split(':').next().filter(|h| h.starts_with("./")) {
                assert!(
                    root(host).exists(),
                    "{name} mounts {host}, which does not exist"
                );
            }
        }
    }
}

#[test]
fn grafana_provisioning_parses_and_points_at_the_dashboards_and_the_stacks_prometheus() {
    let files = [
        "docker-compose.yml",
        "grafana/provisioning/datasources/prometheus.yml",
        "grafana/provisioning/dashboards/ankusa.yml",
    ];
    let Some(docs) = yaml(&files) else {
        return skip("python3 with PyYAML");
    };
    let grafana = &docs[0]["services"]["grafana"];
    let provisioning =
        host_path(grafana, "/etc/grafana/provisioning").expect("provisioning is mounted");
    assert_eq!(
        std::fs::canonicalize(provisioning).unwrap(),
        std::fs::canonicalize(root("grafana/provisioning")).unwrap()
    );

    // The datasource is the stack's Prometheus service, on the port it listens on.
    let ds = &docs[1]["datasources"].as_array().unwrap()[0];
    assert_eq!(ds["type"], "prometheus");
    assert_eq!(ds["url"], "http://prometheus:9090");
    assert!(docs[0]["services"]["prometheus"].is_object());
    let uid = ds["uid"].as_str().expect("datasource uid");

    // The dashboard provider's folder is where compose mounts grafana/dashboards.
    let provider = &docs[2]["providers"].as_array().unwrap()[0];
    assert_eq!(provider["type"], "file");
    let path = provider["options"]["path"].as_str().unwrap();
    let host =
        host_path(grafana, path).unwrap_or_else(|| panic!("{path} is not mounted in grafana"));
    let mut jsons: Vec<String> = std::fs::read_dir(&host)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    jsons.sort();
    assert_eq!(
        jsons,
        ["leader-redis.json", "overview.json", "tenants-sinks.json"]
    );
    let home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
        .as_str()
        .expect("home dashboard");
    assert!(
        host_path(grafana, home).is_some_and(|p| p.is_file()),
        "home dashboard {home}"
    );

    // Each dashboard's datasource variable selects a Prometheus, which the provisioned one is.
    for f in &jsons {
        let d: Value =
            serde_json::from_str(&std::fs::read_to_string(host.join(f)).unwrap()).unwrap();
        let var = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "datasource")
            .expect("datasource variable");
        assert_eq!(var["type"], "datasource");
        assert_eq!(var["query"], "prometheus", "{f}");
        assert!(!uid.is_empty());
    }
}

#[test]
fn the_dockerfile_builds_in_a_rust_stage_and_runs_the_binary_from_a_slim_debian_stage() {
    let text = read("Dockerfile");
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    assert!(
        froms[0].starts_with("FROM rust:") && froms[0].ends_with(" AS build"),
        "{}",
        froms[0]
    );
    assert!(
        froms[1].starts_with("FROM debian:") && froms[1].contains("slim"),
        "{}",
        froms[1]
    );
    assert!(
        text.contains("cargo build --release --locked"),
        "the lock file pins every crate"
    );
    assert!(text.contains("COPY --from=build /usr/local/bin/ankusa /usr/local/bin/ankusa"));
    assert!(text.contains("ENTRYPOINT [\"ankusa\"]"));
    assert!(text.contains("USER ankusa"), "runs as a non-root user");
    // Every COPY from the build context names something that exists, and .dockerignore
    // keeps none of it out.
    let ignored: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    assert!(
        ignored.iter().any(|l| l == "target"),
        "the build context leaves target/ out"
    );
    for l in text
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from="))
    {
        let words: Vec<&str> = l.split_whitespace().collect();
        for src in &words[1..words.len() - 1] {
            assert!(root(src).exists(), "{l}: {src} does not exist");
            let top = src.split('/').next().unwrap();
            assert!(
                !ignored.iter().any(|i| i == top),
                "{l}: {src} is excluded by .dockerignore"
            );
        }
    }
    // The image's admin port is the one the compose stack scrapes.
    assert!(text.contains("ANKUSA_ADMIN__LISTEN=0.0.0.0:9187") && text.contains("EXPOSE 9187"));
}

/// A running `ankusa receiver`, killed on drop.
struct ReceiverProcess(std::process::Child);

impl Drop for ReceiverProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_receiver_answers_ok_and_fails_the_paths_it_is_told_to() {
    let addr = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args([
            "receiver",
            "--listen",
            &addr,
            "--fail",
            "flaky=1.0",
            "--fail",
            "/half=0.5",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ankusa receiver starts");
    let mut rx = ReceiverProcess(child);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let deadline = Instant::now() + LIVENESS;
    let status = |path: &'static str| {
        let (http, url) = (http.clone(), format!("http://{addr}/{path}"));
        async move {
            http.post(url)
                .body("{}")
                .send()
                .await
                .map(|r| r.status().as_u16())
        }
    };
    let first = loop {
        match status("hooks").await {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => panic!("receiver never answered: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert_eq!(first, 200);
    for _ in 0..5 {
        assert_eq!(status("flaky").await.unwrap(), 503);
    }
    let mut half = Vec::new();
    for _ in 0..40 {
        half.push(status("half").await.unwrap());
    }
    let failed = half.iter().filter(|s| **s == 503).count();
    assert!(
        (5..=35).contains(&failed) && half.iter().all(|s| *s == 200 || *s == 503),
        "{half:?}"
    );

    // SIGTERM ends it cleanly.
    unsafe { libc::kill(rx.0.id() as i32, libc::SIGTERM) };
    let code = loop {
        if let Some(s) = rx.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline + LIVENESS,
            "receiver ignored SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(code.success(), "{code:?}");
}

#[test]
fn the_demo_receiver_refuses_a_bad_fail_fraction_as_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_ankusa"))
        .env_remove("ANKUSA_ADMIN__TOKEN")
        .args(["receiver", "--fail", "flaky=2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--fail") && err.contains("0.0..=1.0"), "{err}");
}
