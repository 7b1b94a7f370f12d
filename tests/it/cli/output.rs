//! What the command line prints: one JSON document per command, quiet ends into a
//! closed pipe, plain logs, help, completions and the man page.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_into_a_closed_pipe_ends_quietly_with_exit_0() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["ok"]).await;
    for args in [
        &["dlq", "list"][..],
        &["openapi"],
        &["source", "get", "acme", "orders"],
        &["source", "list"],
        &["config", "default"],
        &["completions", "bash"],
        &["man"],
        &["--json", "stats"],
    ] {
        let out = run_with_closed_stdout(Some(&env), args);
        assert_eq!(code(&out), 0, "ankusa {args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked") && !stderr(&out).contains("Broken pipe"),
            "ankusa {args:?}: {}",
            stderr(&out)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_prints_one_json_document_with_json_errors_and_usage_errors_included() {
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = file(dir.path(), "orders.json", &spec(&env, "ok"));
    let payload = file(dir.path(), "p.json", "{\"id\": 1}");
    let config = file(dir.path(), "ankusa.toml", "[dispatch]\nconcurrency = 4\n");

    let ok = |args: &[&str]| {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = run(&env, &full);
        assert_eq!(code(&out), 0, "ankusa {full:?}: {}", stderr(&out));
        json(&out)
    };
    assert_eq!(ok(&["source", "put", "acme", "orders", &spec])["sinks"], 1);
    assert_eq!(
        ok(&["source", "get", "acme", "orders"])["sinks"][0]["module"],
        "http"
    );
    assert_eq!(ok(&["source", "list"])["sources"][0]["source"], "orders");
    let produced = ok(&["produce", "acme", "orders", &payload]);
    assert_eq!(
        (
            produced["committed"].clone(),
            produced["rows_per_hook"].clone()
        ),
        (1.into(), 1.into())
    );
    assert_eq!(ok(&["stats"])["hooks_committed"], 1);
    assert_eq!(ok(&["config", "default"])["dispatch"]["concurrency"], 256);
    assert_eq!(ok(&["config", "check", &config])["ok"], true);
    assert!(ok(&["openapi"])["paths"].is_object());
    assert!(ok(&["dlq", "list"])["dead_letters"].is_array());
    assert!(ok(&["completions", "bash"])["script"]
        .as_str()
        .unwrap()
        .contains("ankusa"));
    assert!(ok(&["man"])["man"].as_str().unwrap().contains(".TH"));
    assert_eq!(ok(&["source", "delete", "acme", "orders"])["deleted"], true);

    // Failures: the error object on stdout, the documented exit code.
    let err = |args: &[&str], exit: i32, code_: &str| {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = run(&env, &full);
        assert_eq!(code(&out), exit, "ankusa {full:?}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["error"]["code"], code_, "{v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{v}");
        v
    };
    err(&["pressure"], 3, "unavailable");
    err(&["source", "get", "acme", "nope"], 1, "not_found");
    // Argument errors from the parser, wherever --json stands.
    let v = err(&["source", "put", "acme"], 2, "usage");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("<SOURCE>"),
        "{v}"
    );
    err(&["no-such-command"], 2, "usage");
    let out = run(&env, &["tick", "--timeout-ms", "soon", "--json"]);
    assert_eq!(code(&out), 2);
    assert_eq!(json(&out)["error"]["code"], "usage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_written_to_a_file_or_pipe_carry_no_colour_codes() {
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    // stderr is a file here: no terminal, so no ANSI escapes, with or without NO_COLOR.
    let w = leading_worker(&env, &dir, "plain", &[], |_| {}).await;
    let log = w.log_text();
    assert!(log.contains("admin server up"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape in a log file: {log:?}"
    );
    // A command's warnings on a pipe: none either.
    let out = run_in(
        &env,
        &["produce", "acme", "nowhere"],
        b"x",
        &[("ANKUSA_LOG", "debug")],
    );
    assert!(!stderr(&out).contains('\u{1b}'), "{:?}", stderr(&out));
}

#[test]
fn help_describes_positionals_apart_from_global_options_without_spec_ids() {
    let out = run_bare(&["source", "put", "--help"], &[]);
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    for want in [
        "<TENANT>",
        "Tenant id",
        "<FILE>",
        "Global options:",
        "--allow-no-sinks",
    ] {
        assert!(help.contains(want), "{want} missing:\n{help}");
    }
    for cmd in [
        &["--help"][..],
        &["tick", "--help"],
        &["pressure", "--help"],
        &["dead-letter-source", "--help"],
    ] {
        let text = stdout(&run_bare(cmd, &[]));
        assert!(
            !text
                .split(|c: char| !c.is_ascii_alphanumeric())
                .any(|w| w.len() > 1
                    && w.starts_with('R')
                    && w[1..].chars().all(|c| c.is_ascii_digit())),
            "spec id in {cmd:?}:\n{text}"
        );
    }
}

#[test]
fn completions_for_bash_zsh_and_fish_and_a_man_page_are_printed() {
    for (shell, marker) in [
        ("bash", "_ankusa()"),
        ("zsh", "#compdef ankusa"),
        ("fish", "complete -c ankusa"),
    ] {
        let out = run_bare(&["completions", shell], &[]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker), "{shell}: {marker} missing");
        assert!(
            script.contains("dead-letter-source"),
            "{shell}: subcommands missing"
        );
    }
    let out = run_bare(&["man"], &[]);
    assert_eq!(code(&out), 0);
    let page = stdout(&out);
    assert!(
        page.starts_with(".ie") || page.contains(".TH ankusa"),
        "{page}"
    );
    assert!(page.contains("worker"), "{page}");
}
