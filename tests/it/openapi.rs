//! The OpenAPI document of the admin API is valid for an independent validator
//! (`openapi-spec-validator`), names each schema once and uses every one it defines, and
//! every GET route's live answer has the shape its schema declares (`jsonschema`), in the
//! states that fill the optional parts (attempts, dead letters, retrying rows).

use crate::common;
use crate::common_api;

use ankusa::testkit::Behavior;
use common::procs::eventually;
use common::LIVENESS;
use common_api::*;
use serde_json::Value;
use std::collections::BTreeSet;

/// Every `$ref` target in `v`.
fn refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.insert(r.clone());
            }
            m.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[test]
fn the_document_passes_openapi_spec_validator_with_no_dangling_or_unused_schema() {
    let doc = serde_json::to_value(ankusa::admin::openapi()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import json, sys\n\
             from openapi_spec_validator import validate\n\
             validate(json.load(open(sys.argv[1])))\n\
             print('valid')",
        ])
        .arg(&file)
        .output()
        .expect("python3 runs (openapi-spec-validator is installed by .ci/run)");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "valid",
        "openapi-spec-validator: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    // Every reference resolves, and every schema is reached from an operation.
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let mut reached = BTreeSet::new();
    refs(&doc["paths"], &mut reached);
    loop {
        let mut more = BTreeSet::new();
        for r in &reached {
            let name = r.trim_start_matches("#/components/schemas/");
            refs(&schemas[name], &mut more);
        }
        let before = reached.len();
        reached.extend(more);
        if reached.len() == before {
            break;
        }
    }
    for r in &reached {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{r}"));
        assert!(schemas.contains_key(name), "dangling $ref {r}");
    }
    let unused: Vec<&String> = schemas
        .keys()
        .filter(|n| !reached.contains(&format!("#/components/schemas/{n}")))
        .collect();
    assert!(unused.is_empty(), "schemas no operation uses: {unused:?}");
    // The hook of `hooks show` and the hook of a dead letter are two schemas, and the former
    // carries its attempts.
    assert!(schemas["HookView"]["properties"]["attempts"].is_object());
    assert!(schemas["DeadLetterHook"]["properties"]["body"].is_object());
    assert_eq!(
        doc["paths"]["/admin/hooks/{tenant}/{hook}"]["get"]["responses"]["200"]["content"]
            ["application/json"]["schema"]["$ref"],
        "#/components/schemas/HookView"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_get_route_answers_the_shape_its_schema_declares() {
    // With the delivery log, so its routes answer and a hook's attempts come from it.
    let db = crate::common::pg::TestDb::create().await;
    let w = World::start(|c| {
        c.retry.max_attempts = 1_000;
        c.retry.max_elapsed_ms = 3_600_000;
        // One failure, then a wait well past the test: the row stays `retrying` (a short
        // backoff let five failures open its breaker and park it before the reads).
        c.retry.initial_backoff_ms = 60_000;
        c.retry.max_backoff_ms = 60_000;
        c.retry.min_backoff_ms = 0;
        c.log.url = Some(db.url.clone());
    })
    .await;
    // A row that keeps failing, so rows list shows retrying rows with their last error.
    w.env.receiver.set("down", Behavior::Status(503));
    w.env.http_source(A, "flaky", &["down"]).await;
    let flaky = w.env.commit(A, "flaky", "{}").await;
    eventually("the flaky row failed once", LIVENESS, || async {
        match w.env.row_field(&format!("{flaky}.0"), "a") {
            Some(_) => Ok(()),
            None => Err("no attempt yet".to_string()),
        }
    })
    .await;
    // The archiver has moved the failed attempt into the log.
    let attempts = format!("{}/admin/log/{A}/hooks/{flaky}/attempts", w.base());
    eventually(
        "the flaky row's attempt is in the log",
        LIVENESS,
        || async {
            let (_, answer) = call("GET", &attempts, Some(OPERATOR), &[], None).await;
            match answer.as_array().map(Vec::len) {
                Some(n) if n > 0 => Ok(()),
                _ => Err(format!("{answer}")),
            }
        },
    )
    .await;
    let doc = served_doc(&w.base()).await;
    let a = &w.owned[A];
    let mut urls: Vec<(String, String)> = Vec::new();
    for (method, path, _) in operations(&doc) {
        if method != "GET" {
            continue;
        }
        let filled = path
            .replace("{tenant}", A)
            .replace("{source}", "orders")
            .replace("{hook}", &a.hook.to_string())
            .replace("{id}", &a.dead_letter);
        let query = match path.as_str() {
            "/admin/rows" => format!("?tenant={A}"),
            "/admin/log/{tenant}/hooks" => "?since=0".into(),
            _ => String::new(),
        };
        urls.push((path.clone(), format!("{filled}{query}")));
    }
    // The states that fill the optional parts.
    urls.push((
        "/admin/hooks/{tenant}/{hook}".into(),
        format!("/admin/hooks/{A}/{}", a.broken_hook),
    ));
    urls.push((
        "/admin/hooks/{tenant}/{hook}".into(),
        format!("/admin/hooks/{A}/{flaky}"),
    ));
    urls.push((
        "/admin/rows".into(),
        format!("/admin/rows?tenant={A}&state=retrying"),
    ));
    let ops = operations(&doc);
    let mut cases = Vec::new();
    let mut seen = BTreeSet::new();
    for (path, url) in &urls {
        let op = &ops
            .iter()
            .find(|(m, p, _)| m == "GET" && p == path)
            .unwrap()
            .2;
        let (status, answer) = call(
            "GET",
            &format!("{}{url}", w.base()),
            Some(OPERATOR),
            &[],
            None,
        )
        .await;
        assert_eq!(status, 200, "GET {url}: {answer}");
        seen.insert(path.clone());
        match answer_schema(op, status) {
            Some(schema) => cases.push(Case {
                name: format!("GET {url}"),
                schema,
                instance: answer,
            }),
            None => assert!(
                op["responses"]["200"]["content"]["text/plain"].is_object(),
                "GET {path}: neither JSON nor text"
            ),
        }
    }
    let gets: BTreeSet<String> = ops
        .iter()
        .filter(|(m, ..)| m == "GET")
        .map(|(_, p, _)| p.clone())
        .collect();
    assert_eq!(seen, gets, "one live call per GET route");
    // The retrying row, its error and the dead-lettered row are really in what was checked.
    let text =
        serde_json::to_string(&cases.iter().map(|c| &c.instance).collect::<Vec<_>>()).unwrap();
    for needle in ["\"retrying\"", "\"dead_lettered\"", "\"attempts\":[{"] {
        assert!(
            text.contains(needle),
            "no {needle} among the answers: {text}"
        );
    }
    check_against_schemas(&doc, &cases);
    // The check itself catches a wrong shape: a field missing, one undeclared, a bad type.
    let hook = cases
        .iter()
        .find(|c| c.name.starts_with("GET /admin/hooks/"))
        .unwrap();
    let mut wrong = hook.instance.clone();
    wrong.as_object_mut().unwrap().remove("rows");
    wrong["undeclared"] = Value::Bool(true);
    wrong["attempts"][0]["sink"] = Value::String("zero".into());
    let found = schema_failures(
        &doc,
        &[Case {
            name: "wrong".into(),
            schema: hook.schema.clone(),
            instance: wrong,
        }],
    )
    .join("\n");
    for part in [
        "'rows' is a required property",
        "undeclared",
        "'zero' is not of type",
    ] {
        assert!(found.contains(part), "{part} not found in: {found}");
    }
}
