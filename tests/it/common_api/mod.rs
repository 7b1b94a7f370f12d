//! The world of the admin API tests (`tests/access.rs`, `tests/openapi.rs`): a worker
//! process with an operator and an ingest token, two tenants with a delivered hook, a dead
//! letter and spare sources each, tenant tokens minted into its Redis; and the independent
//! check of answers against the OpenAPI document's schemas (Python's `jsonschema`).
#![allow(dead_code)]

use crate::common::procs::{eventually, wait_ready, write_config};
use crate::common::{Env, WorkerProcess, LIVENESS};
use ankusa::testkit::Behavior;
use ankusa::tokens::{Scope, TokenRequest};
use serde_json::Value;
use std::collections::BTreeMap;

/// The operator token of the world's worker.
pub const OPERATOR: &str = "operator-s3cret-0123456789abcdefghijklmn";
/// The key its portal links are signed with.
pub const LINK_KEY: &str = "portal-link-key-5c1e9a7b3d0f2468ace13579bdf0";
/// Its ingest token.
pub const INGEST: &str = "ingest-s3cret";
/// The tenant whose tokens are tried.
pub const A: &str = "alpha";
/// The other tenant.
pub const B: &str = "beta";

/// What one tenant has in the world.
#[derive(Debug, Clone)]
pub struct Owned {
    /// A delivered hook of `orders` (kept for resend).
    pub hook: u64,
    /// The id of a dead letter (of `broken`).
    pub dead_letter: String,
    /// The dead-lettered hook of `broken`.
    pub broken_hook: u64,
}

/// A worker with two tenants' data.
pub struct World {
    pub env: Env,
    pub dir: tempfile::TempDir,
    pub worker: WorkerProcess,
    pub owned: BTreeMap<&'static str, Owned>,
}

impl World {
    /// Start the world; `tune` adjusts the worker's config (tokens are set before it).
    pub async fn start(tune: impl FnOnce(&mut ankusa::config::Config)) -> World {
        let env = Env::new().await;
        env.receiver.set("bad", Behavior::Status(400));
        let mut owned = BTreeMap::new();
        for t in [A, B] {
            env.http_source(t, "orders", &["ok"]).await;
            env.http_source(t, "broken", &["bad"]).await;
            env.http_source(t, "spare", &["ok"]).await;
            let hook = env
                .commit(t, "orders", format!("{{\"tenant\":\"{t}\"}}"))
                .await;
            let broken_hook = env.commit(t, "broken", "{}").await;
            owned.insert(
                t,
                Owned {
                    hook,
                    dead_letter: String::new(),
                    broken_hook,
                },
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(&env, &dir, "ankusa.toml", |c| {
            c.admin.token = Some(OPERATOR.into());
            c.admin.ingest_token = Some(INGEST.into());
            c.admin.portal_link_key = Some(LINK_KEY.into());
            tune(c);
        });
        let worker = WorkerProcess::spawn(&config, &dir, "w");
        wait_ready(&worker).await;
        // Everything settles: the good hooks delivered (kept), the broken ones dead letters.
        for t in [A, B] {
            let dead = eventually("each tenant has its dead letter", LIVENESS, || async {
                match env.dead_letters(t).await.first() {
                    Some(d) => Ok(d.id.clone()),
                    None => Err(format!("none yet for {t}")),
                }
            })
            .await;
            owned.get_mut(t).unwrap().dead_letter = dead;
        }
        eventually("both good hooks delivered", LIVENESS, || async {
            let n = env.receiver.requests_for("/ok").len();
            if n >= 2 {
                Ok(())
            } else {
                Err(format!("{n} delivered"))
            }
        })
        .await;
        // The leader has published its window: every operation can answer.
        let pressure = format!("http://{}/admin/pressure", worker.admin);
        eventually("the leader answers pressure", LIVENESS, || async {
            match call("GET", &pressure, Some(OPERATOR), &[], None).await {
                (200, _) => Ok(()),
                (s, b) => Err(format!("{s} {b}")),
            }
        })
        .await;
        World {
            env,
            dir,
            worker,
            owned,
        }
    }

    /// `http://<admin>`.
    pub fn base(&self) -> String {
        format!("http://{}", self.worker.admin)
    }

    /// Mint a token of `tenant` with `scopes` and `ttl` straight into the world's Redis.
    pub async fn mint(
        &self,
        tenant: &str,
        scopes: &[Scope],
        ttl: &str,
    ) -> ankusa::tokens::NewToken {
        let req = TokenRequest {
            tenant: tenant.into(),
            scopes: scopes.to_vec(),
            ttl: Some(ttl.into()),
            name: Some("test".into()),
            create: true,
        };
        let now = self.env.store.now_ms().await.unwrap();
        let m = ankusa::tokens::mint(&req, now).unwrap();
        self.env
            .store
            .put_token(&m.token.info, &m.digest)
            .await
            .unwrap();
        m.token
    }
}

/// One HTTP call to the admin API: `(status, JSON body or the text as a JSON string)`.
pub async fn call(
    method: &str,
    url: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<(&str, String)>,
) -> (u16, Value) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut req = client
        .request(method.parse().unwrap(), url)
        .timeout(LIVENESS);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    if let Some((content_type, b)) = body {
        req = req.header("content-type", content_type).body(b);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The document the worker serves at `/openapi.json`.
pub async fn served_doc(base: &str) -> Value {
    let (status, doc) = call("GET", &format!("{base}/openapi.json"), None, &[], None).await;
    assert_eq!(status, 200, "{doc}");
    doc
}

/// Every `(method, path template, operation)` of the document, sorted.
pub fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            out.push((method.to_ascii_uppercase(), path.clone(), op.clone()));
        }
    }
    out.sort_by(|a, b| (&a.1, &a.0).cmp(&(&b.1, &b.0)));
    out
}

/// The JSON schema of `op`'s answer with `status`, if it declares one.
pub fn answer_schema(op: &Value, status: u16) -> Option<Value> {
    let s = op["responses"][status.to_string()]["content"]["application/json"]["schema"].clone();
    (!s.is_null()).then_some(s)
}

/// One answer to check against its declared schema.
#[derive(Debug, serde::Serialize)]
pub struct Case {
    /// `METHOD path → status`, for the failure message.
    pub name: String,
    /// The declared schema.
    pub schema: Value,
    /// The answer.
    pub instance: Value,
}

/// Check every case against its schema with Python's `jsonschema` (Draft 2020-12, the
/// dialect of OpenAPI 3.1), the document's components resolving `$ref`s, and no property
/// the schema does not declare (`unevaluatedProperties: false` on every object schema with
/// properties, outside `allOf` branches). Panics listing every failure.
pub fn check_against_schemas(doc: &Value, cases: &[Case]) {
    let failures = schema_failures(doc, cases);
    assert!(
        failures.is_empty(),
        "{} answers do not match their declared schema:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// What [`check_against_schemas`] finds wrong, one line per error.
pub fn schema_failures(doc: &Value, cases: &[Case]) -> Vec<String> {
    assert!(!cases.is_empty(), "no answer to check");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("cases.json");
    let data = serde_json::json!({"components": doc["components"], "cases": cases});
    std::fs::write(&input, serde_json::to_vec(&data).unwrap()).unwrap();
    let script = r##"
import json, sys
from jsonschema import Draft202012Validator

def strict(node, in_all_of=False):
    if isinstance(node, dict):
        if ("properties" in node or "allOf" in node) and not in_all_of \
                and "unevaluatedProperties" not in node and "additionalProperties" not in node:
            node["unevaluatedProperties"] = False
        for k, v in node.items():
            strict(v, k == "allOf")
    elif isinstance(node, list):
        for v in node:
            strict(v, in_all_of)

def all_of_refs(node, out):
    if isinstance(node, dict):
        for branch in node.get("allOf", []):
            ref = branch.get("$ref", "") if isinstance(branch, dict) else ""
            if ref.startswith("#/components/schemas/"):
                out.add(ref.rsplit("/", 1)[1])
        for v in node.values():
            all_of_refs(v, out)
    elif isinstance(node, list):
        for v in node:
            all_of_refs(v, out)

data = json.load(open(sys.argv[1]))
components = data["components"]
# A schema that is a branch of an allOf is checked as part of its whole, not on its own.
branches = set()
all_of_refs(components, branches)
for name, schema in components.get("schemas", {}).items():
    strict(schema, name in branches)
failures = []
for case in data["cases"]:
    schema = dict(case["schema"])
    strict(schema)
    schema["components"] = components
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    for e in Draft202012Validator(schema).iter_errors(case["instance"]):
        failures.append("%s: %s at %s" % (case["name"], e.message[:300], list(e.absolute_path)))
print(json.dumps({"checked": len(data["cases"]), "failures": failures}))
"##;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&input)
        .output()
        .expect("python3 runs (jsonschema is installed by .ci/run)");
    assert!(
        out.status.success(),
        "jsonschema failed to run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_eq!(report["checked"], cases.len(), "{report}");
    report["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap_or_default().to_string())
        .collect()
}
