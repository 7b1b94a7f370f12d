//! The metric catalogue, the dashboards and the alert rules, read as files: every
//! described metric catalogued, every panel querying something, promtool passing.

use super::*;

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[test]
fn the_promql_reader_finds_metric_names_and_skips_labels_strings_and_variables() {
    let e = r#"histogram_quantile(0.99, sum by (le, ankusa_instance) (rate(ankusa_x_seconds_bucket{ankusa_instance=~"$ankusa_instance", k="ankusa_not"}[$__rate_interval]))) / on (ankusa_instance) group_left ankusa_y"#;
    let got: Vec<String> = metric_names(e).into_iter().collect();
    assert_eq!(got, ["ankusa_x_seconds_bucket", "ankusa_y"]);
    assert_eq!(
        metric_names("label_values(ankusa_leader, ankusa_instance)")
            .into_iter()
            .collect::<Vec<_>>(),
        ["ankusa_leader"]
    );
    assert!(metric_names("label_values(ankusa_instance)").is_empty());
    assert!(metric_names(r#"absent(up{job="ankusa"} == 1)"#).is_empty());
}

#[test]
fn every_described_metric_is_in_the_catalogue_with_its_type_and_a_status() {
    let described = described();
    let catalogue = catalogue();
    assert!(described.len() >= 20, "{described:?}");
    let only_code: Vec<_> = described
        .keys()
        .filter(|n| !catalogue.contains_key(*n))
        .collect();
    let only_docs: Vec<_> = catalogue
        .keys()
        .filter(|n| !described.contains_key(*n))
        .collect();
    assert!(
        only_code.is_empty(),
        "described in src/metrics.rs but not catalogued in docs/metrics.md: {only_code:?}"
    );
    assert!(
        only_docs.is_empty(),
        "catalogued in docs/metrics.md but not described in src/metrics.rs: {only_docs:?}"
    );
    for (name, (kind, status)) in &catalogue {
        assert_eq!(
            kind, &described[name],
            "docs/metrics.md gives {name} the wrong type"
        );
        assert!(
            status == "exported" || status == "planned",
            "{name}: status {status:?} is neither `exported` nor `planned`"
        );
        let suffix_ok = match kind.as_str() {
            "counter" => name.ends_with("_total"),
            _ => !name.ends_with("_total"),
        };
        assert!(
            suffix_ok,
            "{name}: a counter and only a counter ends in _total"
        );
    }
}

#[test]
fn every_alert_has_a_runbook_url_naming_its_section_of_docs_runbooks() {
    let text = read("prometheus/alerts.yml");
    let runbooks = read("docs/runbooks.md");
    let headings: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    let mut alert: Option<String> = None;
    let mut urls = BTreeMap::new();
    for l in text.lines().map(str::trim_start) {
        if let Some(n) = l.strip_prefix("- alert:") {
            alert = Some(n.trim().to_string());
        } else if let Some(u) = l.strip_prefix("runbook_url:") {
            let name = alert.clone().expect("a runbook_url before any alert");
            urls.insert(name, u.trim().trim_matches('"').to_string());
        }
    }
    for (name, _) in alert_rules() {
        let url = urls
            .get(&name)
            .unwrap_or_else(|| panic!("{name}: no runbook_url annotation"));
        let want = format!("docs/runbooks.md#{}", name.to_lowercase());
        assert_eq!(url, &want, "{name}: runbook_url");
        assert!(
            headings.contains(&name.to_lowercase()),
            "{name}: docs/runbooks.md has no `## {name}` section"
        );
    }
}

#[test]
fn dashboards_are_well_formed_and_every_panel_queries_something() {
    let dashes = dashboards();
    assert!(
        dashes.len() >= 3,
        "overview, tenants and sinks, leader and Redis: {:?}",
        dashes.iter().map(|d| &d.0).collect::<Vec<_>>()
    );
    let mut uids = BTreeSet::new();
    for (file, d) in &dashes {
        let uid = d["uid"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: no uid"));
        assert!(uids.insert(uid.to_string()), "{file}: uid {uid} used twice");
        assert!(
            d["title"].as_str().is_some_and(|t| t.starts_with("ankusa")),
            "{file}: title"
        );
        let vars: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert!(
            vars.contains(&"datasource") && vars.contains(&"ankusa_instance"),
            "{file}: variables {vars:?}"
        );
        let mut ids = BTreeSet::new();
        for p in panels(d) {
            let title = p["title"].as_str().unwrap_or_default();
            assert!(
                ids.insert(
                    p["id"]
                        .as_u64()
                        .unwrap_or_else(|| panic!("{file}: panel {title:?} has no id"))
                ),
                "{file}: panel id {} twice",
                p["id"]
            );
            assert!(
                p["gridPos"]["w"]
                    .as_u64()
                    .is_some_and(|w| (1..=24).contains(&w)),
                "{file}: {title:?} gridPos"
            );
            if p["type"] == "row" || p["type"] == "text" {
                continue;
            }
            assert_eq!(
                p["datasource"]["uid"], "${datasource}",
                "{file}: {title:?} must use the datasource variable"
            );
            let targets = p["targets"]
                .as_array()
                .unwrap_or_else(|| panic!("{file}: {title:?} has no targets"));
            assert!(
                !targets.is_empty()
                    && targets.iter().all(|t| t["expr"]
                        .as_str()
                        .is_some_and(|e| e.contains("ankusa_") || e.contains("up{"))),
                "{file}: {title:?} targets {targets:?}"
            );
            for t in targets {
                let e = t["expr"].as_str().unwrap();
                if e.contains("ankusa_") {
                    assert!(
                        e.contains("$ankusa_instance"),
                        "{file}: {title:?} ignores the instance variable: {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = tool("promtool") else {
        return skip("promtool");
    };
    let check = Command::new(&promtool)
        .args(["check", "rules", "alerts.yml"])
        .current_dir(root("prometheus"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "promtool check rules:\n{out}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", alert_rules().len())),
        "{out}"
    );
    let test = Command::new(&promtool)
        .args(["test", "rules", "alerts_test.yml"])
        .current_dir(root("prometheus"))
        .output()
        .unwrap();
    let out =
        String::from_utf8_lossy(&test.stdout).to_string() + &String::from_utf8_lossy(&test.stderr);
    assert!(
        test.status.success() && out.contains("SUCCESS"),
        "promtool test rules:\n{out}"
    );
    // Every alert has at least one unit test case.
    let tests = read("prometheus/alerts_test.yml");
    for (alert, _) in alert_rules() {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "prometheus/alerts_test.yml has no case for {alert}"
        );
    }
}
