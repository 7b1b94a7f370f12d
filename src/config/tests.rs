//! Config loading and validation tests.

use super::*;

fn problems(toml: &str) -> Vec<String> {
    match Config::from_toml_str(toml) {
        Err(e) => e.problems().iter().map(ToString::to_string).collect(),
        Ok(_) => vec![],
    }
}

fn parse_message(result: Result<Config, ConfigError>) -> String {
    match result {
        Err(ConfigError::Parse { message }) => message,
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn the_embedded_default_file_parses_to_exactly_the_default_config() {
    let parsed: Config = toml::from_str(DEFAULT_CONFIG_TOML).expect("default file parses");
    assert_eq!(parsed, Config::default());
    assert_eq!(
        Config::from_toml_str("").expect("defaults are valid"),
        Config::default()
    );
}

#[test]
fn the_default_file_lists_every_key() {
    let listed = DEFAULT_CONFIG_TOML
        .replace("# token =", "token =")
        .replace("# ingest_token =", "ingest_token =")
        .replace("# portal_link_key =", "portal_link_key =");
    let keys: toml::Table = toml::from_str(&listed).expect("parses");
    let mut config = Config::default();
    config.admin.token = Some("t".into());
    config.admin.ingest_token = Some("i".into());
    config.admin.portal_link_key = Some("k".into());
    let all: toml::Table = toml::from_str(&config.redacted_toml()).expect("parses");
    for (section, table) in &all {
        match table.as_table() {
            Some(table) => {
                for key in table.keys().filter(|k| *k != "tenants") {
                    assert!(keys[section].get(key).is_some(), "{section}.{key} missing");
                }
            }
            None => assert!(keys.contains_key(section), "{section} missing"),
        }
    }
}

#[test]
fn telemetry_is_off_by_default_and_its_keys_are_checked() {
    let c = Config::default();
    assert_eq!(c.telemetry.traces_url(), None);
    let ok = |url: &str| {
        let toml = format!("[telemetry]\notlp_endpoint = {url:?}\n");
        let c = Config::from_toml_str(&toml).expect("valid");
        c.telemetry.traces_url().expect("on")
    };
    assert_eq!(
        ok("http://collector:4318"),
        "http://collector:4318/v1/traces"
    );
    assert_eq!(
        ok("https://c.example/otlp/"),
        "https://c.example/otlp/v1/traces"
    );
    assert_eq!(ok("http://c:4318/v1/traces"), "http://c:4318/v1/traces");
    for bad in [
        "collector:4318",
        "ftp://c/",
        "http://u:p@c:4318",
        "http://c/?a=1",
    ] {
        let got = problems(&format!("[telemetry]\notlp_endpoint = {bad:?}\n"));
        assert_eq!(got.len(), 1, "{bad}: {got:?}");
        assert!(got[0].starts_with("telemetry.otlp_endpoint: "), "{got:?}");
    }
    let got = problems("[telemetry]\nservice_name = \"\"\nsample_ratio = 1.5\n");
    assert_eq!(
        got,
        vec![
            "telemetry.service_name: must be 1..=255 characters",
            "telemetry.sample_ratio: must be between 0.0 and 1.0"
        ]
    );
}

#[test]
fn a_partial_file_keeps_the_other_defaults() {
    let config = Config::from_toml_str("[dispatch]\nconcurrency = 8\n").expect("valid");
    assert_eq!(config.dispatch.concurrency, 8);
    assert_eq!(config.dispatch.batch, 500);
}

#[test]
fn an_unknown_key_is_rejected_naming_its_path() {
    let message = parse_message(Config::from_toml_str("[dispatch]\nconcurency = 8\n"));
    assert!(
        message.contains("unknown field `concurency` at dispatch.concurency"),
        "{message}"
    );
}

/// every unknown key is named at once, not only the first, each with its path.
#[test]
fn every_unknown_key_is_named_in_one_check() {
    let message = parse_message(Config::from_toml_str(
        "[dispatch]\nconcurency = 8\nbatch = 10\n[retry]\nmax_backof_ms = 5\n[dispatch.tenants.acme]\nmax_infight = 5\n",
    ));
    for key in [
        "dispatch.concurency",
        "retry.max_backof_ms",
        "dispatch.tenants.acme.max_infight",
    ] {
        assert!(
            message.contains(&format!("at {key}")),
            "{key} not named:\n{message}"
        );
    }
    assert_eq!(message.lines().count(), 3, "{message}");
}

#[test]
fn an_unknown_key_inside_a_tenant_is_rejected_naming_its_path() {
    let message = parse_message(Config::from_toml_str(
        "[dispatch.tenants.acme]\nmax_infight = 5\n",
    ));
    assert!(
        message.contains("dispatch.tenants.acme.max_infight"),
        "{message}"
    );
}

#[test]
fn a_value_of_the_wrong_type_is_a_parse_error_naming_the_key() {
    let message = parse_message(Config::from_toml_str(
        "[dispatch]\nconcurrency = \"many\"\n",
    ));
    assert!(message.contains("at dispatch.concurrency"), "{message}");
}

#[test]
fn validation_reports_every_problem_with_its_key_path() {
    let found = problems(
        "instance = \"Bad Name\"\n\
         [redis]\nurl = \"http://x\"\n\
         [leader]\nlease_ms = 9000\nrenew_ms = 4500\n\
         [dispatch]\nconcurrency = 0\nbatch = 20000\nbreaker_max_open_ms = 10\n\
         [retry]\nmultiplier = 0.5\njitter = 1.5\nmax_backoff_ms = 10\n\
         [commit]\nmax_hook_bytes = 0\n\
         [admin]\nlisten = \"nowhere\"\n",
    );
    for expected in [
        "instance: must match [a-z0-9_-]{1,64}",
        format!(
            "redis.url: http://x cannot be served by this build: unknown scheme \"http\"; expected {}",
            super::redis_url::SUPPORTED_FORMS
        )
        .as_str(),
        "leader.renew_ms: must be 0 (lease_ms / 3) or < leader.lease_ms / 2 = 4500",
        "dispatch.concurrency: must be > 0",
        "dispatch.batch: must be <= 10000",
        "dispatch.breaker_max_open_ms: must be >= dispatch.breaker_open_ms",
        "retry.max_backoff_ms: must be >= retry.initial_backoff_ms",
        "retry.min_backoff_ms: must be <= retry.max_backoff_ms",
        "retry.multiplier: must be a finite number >= 1.0",
        "retry.jitter: must be between 0.0 and 1.0",
        "commit.max_hook_bytes: must be > 0",
        "admin.listen: must be a socket address such as 127.0.0.1:9187",
    ] {
        assert!(
            found.iter().any(|p| p == expected),
            "{expected} not in {found:#?}"
        );
    }
    assert_eq!(found.len(), 12, "{found:#?}");
}

#[test]
fn the_invalid_error_displays_one_problem_per_line() {
    let err =
        Config::from_toml_str("[dispatch]\npoll_ms = 0\nsettle_batch = 0\n").expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "dispatch.poll_ms: must be > 0\ndispatch.settle_batch: must be > 0"
    );
}

#[test]
fn a_zero_tenant_limit_names_the_tenant_key() {
    let found = problems("[dispatch.tenants.acme]\nmax_inflight = 0\n");
    assert_eq!(found, ["dispatch.tenants.acme.max_inflight: must be > 0"]);
}

#[test]
fn a_tenants_log_retention_is_bounded_by_the_instances() {
    let found = problems(
        "[log]\nretention_days = 30\n[tenants.acme]\nlog_retention_days = 31\n\
         [tenants.beta]\nlog_retention_days = 0\n[tenants.gamma]\nlog_retention_days = 7\n",
    );
    assert_eq!(
        found,
        [
            "tenants.acme.log_retention_days: must be in 1..=30 (log.retention_days bounds it)",
            "tenants.beta.log_retention_days: must be in 1..=30 (log.retention_days bounds it)"
        ]
    );
}

#[test]
fn a_tenant_id_outside_the_allowed_characters_is_rejected() {
    let found = problems("[dispatch.tenants.\"a b\"]\nconcurrency = 1\n");
    assert_eq!(
        found,
        ["dispatch.tenants.a b: tenant id must match [A-Za-z0-9_.-]{1,128}"]
    );
}

#[test]
fn tenant_limits_fall_back_from_tenant_to_default_to_global_and_never_exceed_global() {
    let config = Config::from_toml_str(
        "[dispatch]\nconcurrency = 100\nmax_inflight = 1000\n\
         [dispatch.tenants.default]\nmax_inflight = 50\nconcurrency = 500\n\
         [dispatch.tenants.acme]\nmax_inflight = 70\n",
    )
    .expect("valid");
    let d = &config.dispatch;
    let acme = d.tenant_limits("acme");
    assert_eq!((acme.max_inflight, acme.concurrency), (70, 100));
    assert_eq!(acme.max_inflight_bytes, 256 << 20);
    let other = d.tenant_limits("other");
    assert_eq!((other.max_inflight, other.concurrency), (50, 100));
    let bare = DispatchConfig::default().tenant_limits("acme");
    assert_eq!((bare.max_inflight, bare.concurrency), (10_000, 256));
}

#[test]
fn the_renew_interval_defaults_to_a_third_of_the_lease() {
    let mut leader = LeaderConfig::default();
    assert_eq!(leader.renew_interval_ms(), 3_333);
    leader.renew_ms = 2_000;
    assert_eq!(leader.renew_interval_ms(), 2_000);
}

#[test]
fn the_selfcheck_needs_two_lease_intervals_and_outlasts_an_attempt() {
    let found = problems("[leader]\nselfcheck_intervals = 1\n");
    assert_eq!(
        found,
        vec!["leader.selfcheck_intervals: must be 0 (off) or >= 2".to_string()]
    );
    let mut leader = LeaderConfig::default();
    assert_eq!(leader.stall_limit_ms(1_000), Some(30_000));
    // a window of hanging attempts finishes only at the attempt timeout: not a stall
    assert_eq!(leader.stall_limit_ms(60_000), Some(70_000));
    leader.selfcheck_intervals = 0;
    assert_eq!(leader.stall_limit_ms(1_000), None);
}

#[test]
fn environment_variables_override_the_file_and_cli_variables_are_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ankusa.toml");
    std::fs::write(
        &file,
        "instance = \"file\"\n[dispatch]\nconcurrency = 16\nbatch = 7\n",
    )
    .expect("write");
    let env = [
        ("ANKUSA_DISPATCH__CONCURRENCY", "8"),
        ("ANKUSA_DISPATCH__TENANTS__ACME__MAX_INFLIGHT", "5"),
        ("ANKUSA_ADMIN__TOKEN", "12345678901234567890123456789012"),
        ("ANKUSA_REDIS__ALLOW_EVICTING", "true"),
        ("ANKUSA_CONFIG", "/elsewhere.toml"),
        ("ANKUSA_LOG", "debug"),
        ("ANKUSA_LOG_FORMAT", "json"),
        ("HOME", "/root"),
    ];
    let config = Config::load_with_env(Some(&file), env).expect("valid");
    assert_eq!(config.instance, "file");
    assert_eq!(config.dispatch.concurrency, 8);
    assert_eq!(config.dispatch.batch, 7);
    assert_eq!(config.dispatch.tenant_limits("acme").max_inflight, 5);
    assert_eq!(
        config.admin.token.as_deref(),
        Some("12345678901234567890123456789012")
    );
    assert!(config.redis.allow_evicting);
}

#[test]
fn edge_guards_are_validated_and_secret_variables_are_no_config_keys() {
    let env = [
        (
            "ANKUSA_HTTP__ALLOW_CIDRS",
            r#"["172.16.0.0/12", "::1/128"]"#,
        ),
        ("ANKUSA_SECRET_ORDERS_TOKEN", "s3cret"),
    ];
    let config = Config::load_with_env(None, env).expect("valid");
    assert_eq!(config.http.allow_cidrs, ["172.16.0.0/12", "::1/128"]);
    assert!(config.http.deny_private);
    assert_eq!(config.secrets.env_prefix, "ANKUSA_SECRET_");
    let found = problems(
        "[http]\nallow_cidrs = [\"10.0.0.0/8\", \"10.0.0.1/33\", \"nope\"]\n\
         [secrets]\nenv_prefix = \"ANKUSA_\"\nfile_dir = \"relative\"\n",
    );
    for key in [
        "http.allow_cidrs[1]",
        "http.allow_cidrs[2]",
        "secrets.env_prefix",
        "secrets.file_dir",
    ] {
        assert!(found.iter().any(|p| p.starts_with(key)), "{key}: {found:?}");
    }
    assert!(!found.iter().any(|p| p.starts_with("http.allow_cidrs[0]")));
}

#[test]
fn the_egress_proxy_is_validated_naming_the_key() {
    let found = problems("[http]\nproxy = \"https://proxy.internal:3128\"\n");
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("http.proxy") && p.contains("only http://")),
        "{found:?}"
    );
    let found = problems(
        "[http]\nproxy = \"http://proxy.internal:3128\"\nno_proxy = [\"ok.example\", \"a b\"]\n",
    );
    assert!(
        found.iter().any(|p| p.starts_with("http.no_proxy[1]")),
        "{found:?}"
    );
    assert!(problems("[http]\nproxy = \"http://u:p@proxy.internal:3128\"\nno_proxy = [\".corp\", \"10.0.0.0/8\"]\n").is_empty());
}

#[test]
fn an_unknown_environment_key_is_rejected_naming_its_path() {
    let env = [("ANKUSA_DISPATCH__BOGUS", "1")];
    let message = parse_message(Config::load_with_env(None, env));
    assert!(message.contains("at dispatch.bogus"), "{message}");
    assert!(
        message.contains("(from ANKUSA_DISPATCH__BOGUS)"),
        "{message}"
    );
}

#[test]
fn a_value_from_the_environment_that_fails_names_its_variable() {
    // Of the wrong type: found while parsing.
    let env = [("ANKUSA_DISPATCH__CONCURRENCY", "many")];
    let message = parse_message(Config::load_with_env(None, env));
    assert!(message.contains("dispatch.concurrency"), "{message}");
    assert!(
        message.contains("(from ANKUSA_DISPATCH__CONCURRENCY)"),
        "{message}"
    );
    // Of the right type but out of range: found by validation.
    let env = [("ANKUSA_DISPATCH__CONCURRENCY", "0")];
    let err = Config::load_with_env(None, env).expect_err("0 is refused");
    let p = err
        .problems()
        .iter()
        .find(|p| p.key == "dispatch.concurrency")
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        p.message.ends_with("(from ANKUSA_DISPATCH__CONCURRENCY)"),
        "{p}"
    );
}

#[test]
fn kubernetes_service_variables_are_ignored_but_a_misspelt_section_key_is_refused() {
    let env = [
        ("ANKUSA_PORT", "tcp://10.0.0.7:9187"),
        ("ANKUSA_PORT_9187_TCP_ADDR", "10.0.0.7"),
        ("ANKUSA_SERVICE_HOST", "10.0.0.7"),
        ("ANKUSA_SERVICE_PORT", "9187"),
        ("ANKUSA_REDIS_SERVICE_HOST", "10.0.0.8"),
        ("ANKUSA_DISPATCH__CONCURRENCY", "8"),
    ];
    let config = Config::load_with_env(None, env).expect("k8s variables are not config");
    assert_eq!(config.dispatch.concurrency, 8);
    let env = [("ANKUSA_DISPATCH__CONCURENCY", "8")];
    let message = parse_message(Config::load_with_env(None, env));
    assert!(message.contains("dispatch.concurency"), "{message}");
}

#[test]
fn a_missing_config_file_is_an_error_naming_the_path() {
    let path = Path::new("/nonexistent/ankusa.toml");
    let err = Config::load_with_env(Some(path), [("HOME", "/root")]).expect_err("missing");
    assert!(matches!(err, ConfigError::Io { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/ankusa.toml"),
        "{err}"
    );
}

#[test]
fn a_type_error_in_a_file_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[retry]\njitter = \"lots\"\n").expect("write");
    let message = parse_message(Config::load_with_env(Some(&file), [("HOME", "/root")]));
    assert!(message.contains("at retry.jitter"), "{message}");
    assert!(message.contains("bad.toml"), "{message}");
}

#[test]
fn redaction_hides_the_admin_token_and_the_redis_password() {
    let mut config = Config::default();
    config.redis.url = "redis://user:secret@host:6379/0".into();
    config.admin.token = Some("hunter2".into());
    config.claim_check.access_key_id = "AKIA".into();
    config.claim_check.secret_access_key = "s3kr1t".into();
    config.http.proxy = Some("http://egress:proxy-pw@proxy.internal:3128".into());
    let dump = config.redacted_toml();
    assert!(!dump.contains("proxy-pw"), "{dump}");
    assert!(
        dump.contains("http://egress:***@proxy.internal:3128"),
        "{dump}"
    );
    assert!(
        !dump.contains(":secret@") && !dump.contains("hunter2") && !dump.contains("s3kr1t"),
        "{dump}"
    );
    assert!(
        dump.contains("url = \"redis://user:***@host:6379/0\""),
        "{dump}"
    );
    assert!(dump.contains("token = \"***\""), "{dump}");
    let back: Config = toml::from_str(&dump).expect("the dump parses back");
    assert_eq!(back.dispatch, config.dispatch);
}

#[test]
fn a_listen_address_beyond_loopback_needs_the_admin_token() {
    let exposed = "[admin]\nlisten = \"0.0.0.0:9187\"\ningest_token = \"i\"\n";
    let config = Config::from_toml_str(exposed).expect("valid for the other commands");
    let err = config.admin.check_exposure().expect_err("not for a worker");
    let found: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("admin.token: required: admin.listen = 0.0.0.0:9187"),
        "{found:#?}"
    );
    for fine in [
        "[admin]\nlisten = \"0.0.0.0:9187\"\ntoken = \"t\"\nallow_weak_token = true\n",
        "[admin]\nlisten = \"127.0.0.1:9187\"\n",
        "[admin]\nlisten = \"[::1]:9187\"\n",
    ] {
        let config = Config::from_toml_str(fine).expect("valid");
        assert!(config.admin.check_exposure().is_ok(), "{fine}");
    }
    let found = problems(
        "[admin]\ningest_token = \"\"\nheader_timeout_ms = 0\nrequest_timeout_ms = 0\nmax_connections = 0\n",
    );
    assert_eq!(
        found,
        [
            "admin.ingest_token: must not be empty when set",
            "admin.header_timeout_ms: must be > 0",
            "admin.request_timeout_ms: must be > 0",
            "admin.max_connections: must be > 0",
        ]
    );
}

#[test]
fn tls_files_need_a_rediss_url_and_a_certificate_needs_its_key() {
    let found = problems("[redis]\ntls_ca_file = \"/ca.pem\"\ntls_cert_file = \"/c.pem\"\n");
    assert_eq!(
        found,
        [
            "redis.tls_ca_file: needs a rediss:// redis.url (TLS)",
            "redis.tls_cert_file: needs a rediss:// redis.url (TLS)",
            "redis.tls_key_file: must be set together with redis.tls_cert_file",
        ]
    );
    let ok = "[redis]\nurl = \"rediss://h:6380\"\ntls_ca_file = \"/ca.pem\"\n\
              tls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\n";
    assert_eq!(problems(ok), Vec::<String>::new());
}

#[test]
fn redaction_hides_the_ingest_token() {
    let mut config = Config::default();
    config.admin.ingest_token = Some("pr0ducer".into());
    let dump = config.redacted_toml();
    assert!(!dump.contains("pr0ducer"), "{dump}");
    assert!(dump.contains("ingest_token = \"***\""), "{dump}");
}

#[test]
fn url_redaction_covers_every_user_info_shape() {
    assert_eq!(redact_url("redis://:pw@h"), "redis://:***@h");
    assert_eq!(redact_url("rediss://pw@h:1"), "rediss://***@h:1");
    assert_eq!(redact_url("redis://u:p/w@h"), "redis://u:***@h");
    assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
    assert_eq!(
        redact_url("unix:///tmp/redis.sock"),
        "unix:///tmp/redis.sock"
    );
}

#[test]
fn the_script_budget_is_between_one_millisecond_and_one_second() {
    assert_eq!(Config::default().dispatch.script_budget_ms, 5);
    for bad in ["0", "1001"] {
        assert_eq!(
            problems(&format!("[dispatch]\nscript_budget_ms = {bad}\n")),
            vec!["dispatch.script_budget_ms: must be 1..=1000".to_string()]
        );
    }
    assert!(problems("[dispatch]\nscript_budget_ms = 1\n").is_empty());
}

#[test]
fn every_ms_key_takes_a_duration_in_words_in_the_file_and_in_the_environment() {
    // Every `*_ms` key of the default config, found in its serialised form, so a key added
    // later is covered without being listed here.
    let defaults = serde_json::to_value(Config::default()).expect("serialises");
    let mut keys = Vec::new();
    let mut stack = vec![(String::new(), &defaults)];
    while let Some((path, v)) = stack.pop() {
        if let serde_json::Value::Object(m) = v {
            for (k, v) in m {
                let key = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if k.ends_with("_ms") && v.is_u64() {
                    keys.push(key);
                } else if v.is_object() && !key.starts_with("dispatch.tenants") {
                    stack.push((key, v));
                }
            }
        }
    }
    assert!(keys.len() >= 20, "{keys:?}");
    let value_of = |c: &Config, key: &str| {
        let v = serde_json::to_value(c).expect("serialises");
        key.split('.').fold(v, |v, k| v[k].clone())
    };
    for key in &keys {
        let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
        let toml = if section.is_empty() {
            format!("{name} = \"2h\"\n")
        } else {
            format!("[{section}]\n{name} = \"2h\"\n")
        };
        // Validation may refuse 2 h for some keys: parse through figment alone.
        let parsed: Config =
            figment::Figment::from(figment::providers::Toml::string(DEFAULT_CONFIG_TOML))
                .merge(figment::providers::Toml::string(&toml))
                .extract()
                .unwrap_or_else(|e| panic!("{key} = \"2h\": {e}"));
        assert_eq!(value_of(&parsed, key), 7_200_000, "{key} = \"2h\"");
        let var = format!("ANKUSA_{}", key.replace('.', "__").to_ascii_uppercase());
        let env = EnvOverrides::from_vars([(var.as_str(), "90s")]);
        let parsed: Config =
            figment::Figment::from(figment::providers::Toml::string(DEFAULT_CONFIG_TOML))
                .merge(env)
                .extract()
                .unwrap_or_else(|e| panic!("{var}=90s: {e}"));
        assert_eq!(value_of(&parsed, key), 90_000, "{var}=90s");
    }
    // Integers keep their meaning, and a word that is no duration names its key.
    let c = Config::from_toml_str("[leader]\nlease_ms = 15000\n").expect("valid");
    assert_eq!(c.leader.lease_ms, 15_000);
    let c = Config::from_toml_str("[leader]\nlease_ms = \"15s\"\n").expect("valid");
    assert_eq!(c.leader.lease_ms, 15_000);
    let message = parse_message(Config::from_toml_str("[leader]\nlease_ms = \"soon\"\n"));
    assert!(
        message.contains("leader.lease_ms") && message.contains("30s"),
        "{message}"
    );
}

#[test]
fn public_hosts_and_forwarded_headers_are_checked_naming_the_entry() {
    let found = problems(
        "[admin]\n\
         public_hosts = [\"worker-1\", \"ankusa.example.com:443\", \"http://x\", \"a/b\", \".evil\", \"\"]\n\
         forward_headers = [\"content-type\", \"x-acme-*\", \"*\", \"Cookie\", \"cookie\", \"webhook-id\", \"host\"]\n",
    );
    for bad in [
        "admin.public_hosts[2]",
        "admin.public_hosts[3]",
        "admin.public_hosts[4]",
        "admin.public_hosts[5]",
        "admin.forward_headers[2]",
        "admin.forward_headers[3]",
        "admin.forward_headers[4]",
        "admin.forward_headers[5]",
        "admin.forward_headers[6]",
    ] {
        assert!(found.iter().any(|p| p.starts_with(bad)), "{bad}: {found:?}");
    }
    for good in [
        "admin.public_hosts[0]",
        "admin.public_hosts[1]",
        "admin.forward_headers[0]",
        "admin.forward_headers[1]",
    ] {
        assert!(
            !found.iter().any(|p| p.starts_with(good)),
            "{good}: {found:?}"
        );
    }
}

#[test]
fn limits_tenant_sections_and_secret_namespaces_are_checked_naming_the_key() {
    let found = problems(
        "[limits]\nmax_sinks_per_source = 0\nmodules = [\"http\", \"FTP\"]\n\
         max_pending_hooks = 0\nmax_source_bytes = 100\n\
         [tenants.acme]\nmax_sinks_per_source = 5000\nmax_header_bytes = 99999999\n\
         max_pending_bytes = 0\nmax_sources_per_tenant = 0\n\
         shared_secrets = [\"AWS_SECRET_ACCESS_KEY\", \"ANKUSA_SECRET_SHARED_OK\"]\n\
         [tenants.\"a b\"]\nmodules = [\"sqs\"]\n\
         [secrets]\nfile_dir = \"/var/run/secrets/kubernetes.io\"\n",
    );
    for key in [
        "limits.max_sinks_per_source: must be 1..=1000",
        "limits.modules[1]: \"FTP\" is no sink module name",
        "tenants.acme.max_sinks_per_source: must be 1..=1000",
        "tenants.acme.max_header_bytes: must be <= 1048576",
        "limits.max_pending_hooks: must be 1 or more",
        "limits.max_source_bytes: must be 1024..=10485760",
        "tenants.acme.max_pending_bytes: must be 1 or more",
        "tenants.acme.max_sources_per_tenant: must be 1..=1000000",
        "tenants.acme.shared_secrets[0]: \"AWS_SECRET_ACCESS_KEY\"",
        "tenants.a b: tenant id must match",
        "secrets.file_dir: \"/var/run/secrets/kubernetes.io\" holds or lies in a platform credential mount",
    ] {
        assert!(found.iter().any(|p| p.starts_with(key)), "{key}: {found:?}");
    }
    assert!(
        !found.iter().any(|p| p.contains("shared_secrets[1]")),
        "{found:?}"
    );
    for prefix in [
        "ANKUSA",
        "A",
        "ANKUSA_",
        "GOOGLE_",
        "AZURE",
        "ankusa_secret_",
    ] {
        let found = problems(&format!("[secrets]\nenv_prefix = {prefix:?}\n"));
        assert_eq!(found.len(), 1, "{prefix}: {found:?}");
        assert!(found[0].starts_with("secrets.env_prefix: "), "{found:?}");
    }
    assert!(problems("[secrets]\nenv_prefix = \"ACME_HOOKS_\"\n").is_empty());
    // The file_dir default is off, and the old default is refused.
    assert_eq!(Config::default().secrets.file_dir, "");
    let found = problems("[secrets]\nfile_dir = \"/run/secrets\"\n");
    assert!(found[0].starts_with("secrets.file_dir: "), "{found:?}");

    let c = Config::from_toml_str(
        "[limits]\nmax_sinks_per_source = 10\n[tenants.acme]\nmax_sinks_per_source = 50\n\
         modules = [\"http\"]\n[retry]\nmax_attempts = 3\n",
    )
    .expect("valid");
    let policy = SourcePolicy::from_config(&c);
    let acme = policy.bounds("acme");
    assert_eq!(
        (
            acme.max_sinks_per_source.value,
            acme.max_sinks_per_source.key.as_str()
        ),
        (50, "tenants.acme.max_sinks_per_source")
    );
    assert_eq!(acme.modules.value, Some(vec!["http".to_string()]));
    assert_eq!(
        acme.max_headers_per_entry.key,
        "limits.max_headers_per_entry"
    );
    assert_eq!(acme.max_attempts, 3);
    let beta = policy.bounds("beta");
    assert_eq!(
        (
            beta.max_sinks_per_source.value,
            beta.max_sinks_per_source.key.as_str()
        ),
        (10, "limits.max_sinks_per_source")
    );
    // Unset: every module the sink registry has (which names those are is the registry's).
    assert_eq!(
        (beta.modules.value, beta.modules.key.as_str()),
        (None, "limits.modules")
    );
}

#[test]
fn a_weak_operator_token_or_link_key_is_refused_naming_the_key_unless_a_demo_opts_out() {
    for weak in ["hunter2", "change-me", &"ab".repeat(20)] {
        let toml = format!("[admin]\ntoken = {weak:?}\n");
        let err = Config::from_toml_str(&toml).expect_err(weak);
        let found: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].starts_with("admin.token: too weak")
                && found[0].contains("openssl rand -hex 32")
                && found[0].contains("admin.allow_weak_token"),
            "{found:#?}"
        );
        let opted = format!("{toml}allow_weak_token = true\n");
        Config::from_toml_str(&opted).expect("a demo opts out explicitly");
    }
    let strong = "[admin]\ntoken = \"9f86d081884c7d659a2feaa0c55ad015\"\n";
    Config::from_toml_str(strong).expect("32 random characters");
    let err = Config::from_toml_str(&format!("{strong}portal_link_key = \"short\"\n"))
        .expect_err("a weak link key");
    assert!(err
        .problems()
        .iter()
        .any(|p| p.to_string().starts_with("admin.portal_link_key: too weak")));
}

#[test]
fn redaction_hides_a_literal_secret_written_after_a_reference() {
    let mut config = Config::default();
    config.operator.signing_secret = Some("${env:X}whsec_c2VjcmV0LXRhaWw=".into());
    config.admin.portal_link_key = Some("0123456789abcdef0123456789abcdef".into());
    let dump = config.redacted_toml();
    assert!(!dump.contains("whsec_c2VjcmV0LXRhaWw="), "{dump}");
    assert!(!dump.contains("0123456789abcdef0123456789abcdef"), "{dump}");
    config.operator.signing_secret = Some("${env:ANKUSA_OPERATOR_SECRET}".into());
    let dump = config.redacted_toml();
    assert!(
        dump.contains("signing_secret = \"${env:ANKUSA_OPERATOR_SECRET}\""),
        "a whole reference is shown as written: {dump}"
    );
}
