//! Google's Pub/Sub emulator, started once per test binary on a free loopback port.

use super::*;

/// Google's Pub/Sub emulator (a Java program) on a free port.
pub struct PubSubEmulator {
    child: Child,
    pub host: String,
    pub url: String,
}

/// Where the emulator's jar is: `ANKUSA_PUBSUB_EMULATOR_JAR`, the Debian package's
/// directory, or what `dpkg -L google-cloud-cli-pubsub-emulator` lists.
pub fn emulator_jar() -> Option<String> {
    if let Ok(j) = std::env::var("ANKUSA_PUBSUB_EMULATOR_JAR") {
        return Some(j);
    }
    let dir = "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/lib";
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path().display().to_string();
            if p.ends_with("-all.jar") {
                return Some(p);
            }
        }
    }
    let out = Command::new("dpkg")
        .args(["-L", "google-cloud-cli-pubsub-emulator"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with("-all.jar"))
        .map(str::to_string)
}

impl PubSubEmulator {
    /// Start the emulator. A missing emulator fails the test (never a skip): install the
    /// Debian package google-cloud-cli-pubsub-emulator (`.ci/run` does) or point
    /// `ANKUSA_PUBSUB_EMULATOR_JAR` at its jar.
    pub async fn start() -> PubSubEmulator {
        let Some(jar) = emulator_jar() else {
            panic!(
                "the Pub/Sub emulator is not installed: install the Debian package \
                 google-cloud-cli-pubsub-emulator (.ci/run does) or set \
                 ANKUSA_PUBSUB_EMULATOR_JAR to its *-all.jar"
            );
        };
        let port = free_port();
        let mut child = Command::new("java")
            .args([
                "-Xmx256m",
                "-jar",
                &jar,
                "--host=127.0.0.1",
                &format!("--port={port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("java starts the Pub/Sub emulator");
        let host = format!("127.0.0.1:{port}");
        let url = format!("http://{host}");
        wait_http(&format!("{url}/"), "the Pub/Sub emulator", &mut child).await;
        PubSubEmulator { child, host, url }
    }

    /// Create a topic and a subscription on it (`ordered`: message ordering enabled).
    pub async fn topic(&self, project: &str, topic: &str, sub: &str, ordered: bool) {
        let c = reqwest::Client::new();
        let r = c
            .put(format!("{}/v1/projects/{project}/topics/{topic}", self.url))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "topic: {}", r.status());
        let r = c
            .put(format!(
                "{}/v1/projects/{project}/subscriptions/{sub}",
                self.url
            ))
            .header("content-type", "application/json")
            .body(
                serde_json::json!({
                    "topic": format!("projects/{project}/topics/{topic}"),
                    "enableMessageOrdering": ordered,
                    "ackDeadlineSeconds": 60,
                })
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "subscription: {}", r.status());
    }

    /// Pull and acknowledge until `n` messages arrived; each is `(data, attributes,
    /// ordering key)`, in the order pulled.
    pub async fn pull_n(
        &self,
        project: &str,
        sub: &str,
        n: usize,
    ) -> Vec<(Vec<u8>, BTreeMap<String, String>, String)> {
        use base64::Engine;
        let c = reqwest::Client::new();
        let base = format!("{}/v1/projects/{project}/subscriptions/{sub}", self.url);
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while out.len() < n && Instant::now() < deadline {
            let raw = c
                .post(format!("{base}:pull"))
                .header("content-type", "application/json")
                .body(r#"{"maxMessages": 1000}"#)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&raw).unwrap_or_default();
            let msgs = v["receivedMessages"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if msgs.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let mut acks = Vec::new();
            for m in msgs {
                acks.push(m["ackId"].clone());
                let msg = &m["message"];
                let data = base64::engine::general_purpose::STANDARD
                    .decode(msg["data"].as_str().unwrap_or(""))
                    .unwrap_or_default();
                let attrs = msg["attributes"]
                    .as_object()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                let key = msg["orderingKey"].as_str().unwrap_or("").to_string();
                out.push((data, attrs, key));
            }
            c.post(format!("{base}:acknowledge"))
                .header("content-type", "application/json")
                .body(serde_json::json!({ "ackIds": acks }).to_string())
                .send()
                .await
                .unwrap();
        }
        out
    }
}

impl Drop for PubSubEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
