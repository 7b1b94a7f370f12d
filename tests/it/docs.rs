//! The documentation stands alone: what a user of the repository reads (README, `docs/`,
//! the config file's comments, the Python package's README, the changelog and the OpenAPI
//! document the admin API serves) cites no document the repository does not contain and no
//! private requirement or issue number, and every relative link in the Markdown resolves to
//! a file of the repository (and, with a `#fragment`, to a heading of that file).

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The Markdown files a user reads: README, CHANGELOG, CONTRIBUTING, BENCHMARKS (the README
/// links it), `docs/*.md`, the Python package's README and the peers harness' README.
fn markdown_files() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut files: Vec<PathBuf> = [
        "README.md",
        "CHANGELOG.md",
        "CONTRIBUTING.md",
        "BENCHMARKS.md",
        "clients/python/README.md",
        "bench/peers/README.md",
    ]
    .iter()
    .map(|f| root.join(f))
    .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    for f in &files {
        assert!(f.is_file(), "{} is missing", f.display());
    }
    files
}

/// The config files shipped in `config/` (their comments are the reference of every key).
fn config_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("config"))
        .expect("config/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "config/ holds no TOML file");
    files
}

/// What a user of the repository cannot resolve: the private specification and design
/// documents, requirement ids (`R12`, `(R3)`), design-point ids (`P9`) and issue numbers.
fn citations() -> Vec<(Regex, &'static str)> {
    [
        (
            r"SPEC\.md",
            "cites SPEC.md, which the repository does not contain",
        ),
        (
            r"DESIGN\.md",
            "cites DESIGN.md, which the repository does not contain",
        ),
        (r"\bR[0-9]{1,2}\b", "cites a requirement id (R…)"),
        (r"\bP[0-9]{1,2}\b", "cites a design-point id (P…)"),
        (r"(?i)\bissues? #?[0-9]", "cites an issue number"),
    ]
    .into_iter()
    .map(|(re, why)| (Regex::new(re).expect("regex"), why))
    .collect()
}

/// Every citation in `text`, as `name:line: why: the line`.
fn cited(name: &str, text: &str) -> Vec<String> {
    let rules = citations();
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (re, why) in &rules {
            if re.is_match(line) {
                found.push(format!("{name}:{}: {why}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

fn relative(p: &Path) -> String {
    p.strip_prefix(ROOT).unwrap_or(p).display().to_string()
}

/// What ships beside the docs and is read as they are: the deployment files, the alert
/// rules, the Lua scripts' comments, the dependency policy and the CI script.
fn shipped_files() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut files: Vec<PathBuf> = [
        "Dockerfile",
        "docker-compose.yml",
        "deny.toml",
        "Cargo.toml",
        ".ci/run",
        "prometheus/alerts.yml",
        "prometheus/prometheus.yml",
        "deploy/demo-producer.sh",
    ]
    .iter()
    .map(|f| root.join(f))
    .collect();
    let mut lua: Vec<PathBuf> = std::fs::read_dir(root.join("lua"))
        .expect("lua/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "lua"))
        .collect();
    lua.sort();
    files.extend(lua);
    for f in &files {
        assert!(f.is_file(), "{} is missing", f.display());
    }
    files
}

#[test]
fn no_doc_config_comment_or_readme_cites_a_document_or_id_outside_the_repository() {
    let mut found = Vec::new();
    for f in markdown_files()
        .into_iter()
        .chain(config_files())
        .chain(shipped_files())
    {
        let text = std::fs::read_to_string(&f).expect("readable");
        found.extend(cited(&relative(&f), &text));
    }
    assert!(
        found.is_empty(),
        "{} citations a user cannot resolve; explain in plain words or point at a file of \
         the repository:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_served_openapi_document_cites_nothing_outside_the_repository() {
    let doc = serde_json::to_string_pretty(&ankusa::admin::openapi()).expect("serialises");
    let found = cited("openapi.json", &doc);
    assert!(
        found.is_empty(),
        "{} citations in the OpenAPI text (doc comments of the handlers and schemas):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_citation_check_finds_what_it_is_meant_to_find() {
    // A check that cannot fail proves nothing: each rule catches its case and lets plain
    // prose through.
    for bad in [
        "see SPEC.md",
        "the design (DESIGN.md)",
        "at least once (R3)",
        "R22: reconfigure",
        "event filters (P9)",
        "since issue 13",
        "Issue #4 brings it",
    ] {
        assert!(!cited("x", bad).is_empty(), "{bad:?} not caught");
    }
    for good in [
        "RFC 9110 §7.6.1",
        "p99 latency",
        "partition (0..P)",
        "a Redis 7 server",
        "the issues a user hits",
    ] {
        assert!(
            cited("x", good).is_empty(),
            "{good:?} caught: {:?}",
            cited("x", good)
        );
    }
}

/// Markdown without its fenced code blocks and inline code spans (links there are examples).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if !fenced {
            out.push_str(line);
        }
        out.push('\n');
    }
    Regex::new(r"`[^`\n]*`")
        .expect("regex")
        .replace_all(&out, "``")
        .into_owned()
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`…).
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let base = slug(line.trim_start_matches('#'));
        let mut s = base.clone();
        let mut n = 0;
        while !seen.insert(s.clone()) {
            n += 1;
            s = format!("{base}-{n}");
        }
    }
    seen
}

#[test]
fn every_relative_link_in_the_markdown_resolves_to_a_file_and_heading_of_the_repository() {
    let inline = Regex::new(r"\]\(([^)\s]+)(?:\s+[^)]*)?\)").expect("regex");
    let reference = Regex::new(r"(?m)^\s*\[[^\]]+\]:\s*(\S+)").expect("regex");
    let mut broken = Vec::new();
    let mut checked = 0;
    for f in markdown_files() {
        let text = std::fs::read_to_string(&f).expect("readable");
        let body = prose(&text);
        let targets = inline
            .captures_iter(&body)
            .chain(reference.captures_iter(&body))
            .map(|c| c[1].to_string());
        for target in targets {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((p, frag)) => (p, Some(frag)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                f.clone()
            } else {
                f.parent().expect("in a directory").join(path)
            };
            if !file.exists() {
                broken.push(format!("{}: {target}: no such file", relative(&f)));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if file.extension().is_some_and(|e| e == "md") {
                let there = std::fs::read_to_string(&file).expect("readable");
                if !anchors(&there).contains(fragment) {
                    broken.push(format!(
                        "{}: {target}: no heading with anchor #{fragment} in {}",
                        relative(&f),
                        relative(&file)
                    ));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} relative links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let a = anchors(
        "# Title\n## Redis deployments (`redis.url`)\n## Title\n```\n# not a heading\n```\n",
    );
    for want in ["title", "redis-deployments-redisurl", "title-1"] {
        assert!(a.contains(want), "{want} missing from {a:?}");
    }
    assert!(!a.contains("not-a-heading"), "{a:?}");
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    ankusa::testkit::free_port().expect("a free port")
}

/// The README's "Running it for real" walk, run as a user would type it, with its ports
/// (Redis 6390, the receiver 8080, the admin API 9187) moved to free ones so that it never
/// meets another process, and one pause a person makes without noticing: after starting the
/// worker, until it leads. Its own Redis, receiver and worker are stopped by the walk itself.
#[test]
fn the_readme_walk_delivers_every_hook_when_run_as_written() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README");
    let at = readme.find("## Running it for real").expect("the section");
    let start = at + readme[at..].find("```sh\n").expect("its shell block") + 6;
    let end = start + readme[start..].find("```").expect("the block ends");
    let (redis, receiver, admin) = (free_port(), free_port(), free_port());
    let mut script = String::from("set -e\n");
    for line in readme[start..end].lines() {
        let line = line
            .replace("6390", &redis.to_string())
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{receiver}"))
            .replace("localhost:9187", &format!("localhost:{admin}"));
        script.push_str(&line);
        script.push('\n');
        if line.starts_with("ankusa worker") {
            script.push_str(
                "for _ in $(seq 150); do ankusa pressure >/dev/null 2>&1 && break; sleep 0.2; done\n",
            );
        }
    }
    assert!(
        script.contains("ankusa receiver") && script.contains("kill %2; wait %2"),
        "{script}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_ankusa")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("timeout")
        .args(["120", "bash", "-c", &script])
        .current_dir(dir.path())
        .env("PATH", path)
        .env("ANKUSA_ADMIN__LISTEN", format!("127.0.0.1:{admin}"))
        .env_remove("ANKUSA_CONFIG")
        .output()
        .expect("bash runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // The walk's own Redis, whatever happened (a failed step skips its shutdown).
    let _ = std::process::Command::new("redis-cli")
        .args(["-p", &redis.to_string(), "shutdown", "nosave"])
        .output();
    assert!(out.status.success(), "the walk failed:\n{stdout}\n{stderr}");
    for want in [
        "committed 1 hook to acme/orders (hook id 1, 2 rows)",
        r#"{"hook_id":2,"rows":2}"#,
        "nothing is pending",
        "rows_delivered      6",
        "hook 1 resent as hook 3 (2 rows)",
    ] {
        assert!(
            stdout.contains(want),
            "{want:?} missing from the walk's output:\n{stdout}\n{stderr}"
        );
    }
    assert!(stdout.contains("rows_dead_lettered  0"), "{stdout}");
}

/// The scripts named in the first column of `docs/architecture.md`'s script table.
fn documented_scripts(architecture: &str) -> Vec<String> {
    let start = architecture
        .find("| script | does | fenced |")
        .expect("docs/architecture.md has its script table");
    architecture[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let name = l.split('|').nth(1)?.trim();
            Some(name.trim_matches('`').to_string())
        })
        .collect()
}

#[test]
fn the_architecture_script_table_lists_every_script_of_lua_and_no_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut documented = documented_scripts(&architecture);
    documented.sort();
    let mut scripts: Vec<String> = std::fs::read_dir(root.join("lua"))
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let script = name.strip_suffix(".lua")?;
            (script != "prelude").then(|| script.to_string())
        })
        .collect();
    scripts.sort();
    assert_eq!(
        documented, scripts,
        "docs/architecture.md's script table and lua/ disagree"
    );
}

/// The key names of the first column of `docs/architecture.md`'s key table: the leading
/// name of every backticked key (`source:<tenant>:<source>` → `source`).
fn documented_keys(architecture: &str) -> BTreeSet<String> {
    let start = architecture
        .find("| key | type | holds |")
        .expect("docs/architecture.md has its key table");
    let name = Regex::new(r"`([a-z_]+)").unwrap();
    architecture[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(|cell| {
            name.captures_iter(cell)
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every capture of `pattern`'s first group in `text`.
fn names(pattern: &str, text: &str) -> BTreeSet<String> {
    Regex::new(pattern)
        .unwrap()
        .captures_iter(text)
        .map(|c| c[1].to_string())
        .collect()
}

/// Every Redis key is built in `src/keyspace.rs` (the scripts' copies in `lua/` name no key
/// it does not), and `docs/architecture.md` documents each: a partition's keys in its key
/// table, the instance's keys (`ankusa:{I}:…`) in the text above it.
#[test]
fn the_architecture_key_table_lists_every_key_of_the_keyspace_and_no_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let keyspace = std::fs::read_to_string(root.join("src/keyspace.rs")).unwrap();
    let mut built = names(r#"self\.key\("([a-z_]+)"\)"#, &keyspace);
    built.extend(names(r#"self\.key\(&format!\("([a-z_]+):"#, &keyspace));
    assert!(built.len() > 30, "keyspace.rs read: {built:?}");
    assert_eq!(
        documented_keys(&architecture),
        built,
        "docs/architecture.md's key table and src/keyspace.rs disagree"
    );
    let instance = names(r#"ankusa:\{\{\{\}\}\}:([a-z_]+)"#, &keyspace);
    assert!(instance.len() >= 5, "{instance:?}");
    for key in &instance {
        assert!(
            architecture.contains(&format!("`ankusa:{{I}}:{key}")),
            "docs/architecture.md does not document the instance key {key}"
        );
    }
    let mut in_lua = BTreeSet::new();
    for e in std::fs::read_dir(root.join("lua")).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        in_lua.extend(names(r"\.\. '([a-z_]+)[:']", &text));
    }
    assert!(in_lua.len() > 30, "lua/ read: {in_lua:?}");
    let unknown: Vec<_> = in_lua.difference(&built).collect();
    assert!(
        unknown.is_empty(),
        "lua/ builds keys src/keyspace.rs does not: {unknown:?}"
    );
}

/// Redis only through `src/store/`: no other module of the crate names the client library,
/// so every command the worker sends has its one wrapper there.
#[test]
fn no_module_outside_the_store_talks_to_redis() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let store = root.join("store");
    let mut offenders = Vec::new();
    for path in rust_files(&root, |p| p == store) {
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("fred::") {
                offenders.push(format!("{}:{}: {}", relative(&path), i + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "Redis client used outside src/store/:\n{}",
        offenders.join("\n")
    );
}

/// The `.rs` files under `dir` (none when it is no folder), leaving out the folders `skip`
/// names.
fn rust_files(dir: &Path, skip: impl Fn(&Path) -> bool) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_dir() {
                if !skip(&path) {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|x| x == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The crate's modules that `module` (a file `src/<module>.rs` or a folder `src/<module>/`)
/// names outside its tests and comments: `crate::x`, `crate::{x, …}` and the crate root's
/// re-exports (`crate::Error` is `error`).
fn modules_used_by(module: &str) -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let single = src.join(format!("{module}.rs"));
    if single.exists() {
        files.push(single);
    }
    files.extend(
        rust_files(&src.join(module), |p| {
            p.file_name().is_some_and(|n| n == "tests")
        })
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "tests.rs")),
    );
    assert!(!files.is_empty(), "no source for module {module}");
    let path = Regex::new(r"crate::([A-Za-z_]+)").unwrap();
    let group = Regex::new(r"crate::\{([^}]*)\}").unwrap();
    let word = Regex::new(r"(?:^|[,{\s])([a-z_]+)").unwrap();
    let root = |name: &str| match name {
        "Config" => "config".to_string(),
        "Error" => "error".to_string(),
        "Hook" | "Producer" => "producer".to_string(),
        "Schedule" => "store".to_string(),
        "Worker" => "worker".to_string(),
        other => other.to_string(),
    };
    let mut used = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // A module's unit tests may reach anything; only its code counts.
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        let code: String = code
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        used.extend(path.captures_iter(&code).map(|c| root(&c[1])));
        for g in group.captures_iter(&code) {
            used.extend(word.captures_iter(&g[1]).map(|c| root(&c[1])));
        }
    }
    used.remove(module);
    used
}

/// The lower layers use only what is below them: a use of a module above (the store reading
/// the scheduler, the config reading the sinks) would close an import circle again. From
/// the bottom: ids, text, keyspace, secrets, filter, tokens; config; model; sinks; claim_check;
/// store; error; then the scheduler and the rest. Each list is what the module may use
/// today; shortening one is progress.
#[test]
fn the_lower_layers_use_only_the_modules_below_them() {
    let allowed: &[(&str, &[&str])] = &[
        ("ids", &[]),
        ("text", &[]),
        ("keyspace", &[]),
        ("secrets", &[]),
        ("filter", &[]),
        ("tokens", &["ids"]),
        ("config", &["ids", "secrets"]),
        ("model", &["config", "filter", "ids"]),
        ("sinks", &["config", "model", "secrets"]),
        ("claim_check", &["config", "secrets", "sinks"]),
        (
            "store",
            &["config", "ids", "keyspace", "model", "sinks", "tokens"],
        ),
        ("error", &["config", "model", "store", "tokens"]),
        ("scheduler", &["config", "model", "store"]),
        ("health", &["store"]),
        ("spread", &["store"]),
    ];
    for (module, allowed) in allowed {
        let allowed: BTreeSet<String> = allowed.iter().map(|m| m.to_string()).collect();
        let extra: Vec<_> = modules_used_by(module)
            .difference(&allowed)
            .cloned()
            .collect();
        assert!(
            extra.is_empty(),
            "src/{module} uses modules above it: {extra:?}"
        );
    }
    // The check reads what it is meant to read.
    assert!(modules_used_by("worker").contains("store"));
    assert!(modules_used_by("store").contains("keyspace"));
}

/// No import circle among the crate's modules: walking the uses from any module never
/// comes back to it (issue 30). The message names one circle, module by module.
#[test]
fn no_module_imports_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_stem()?.to_str()?.to_string();
            let module = p.is_dir() || p.extension().is_some_and(|x| x == "rs");
            (module && !matches!(name.as_str(), "lib" | "main" | "cli")).then_some(name)
        })
        .collect();
    modules.sort();
    modules.dedup();
    assert!(modules.len() > 20, "read the modules of src/: {modules:?}");
    let uses: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| {
            let used = modules_used_by(m)
                .into_iter()
                .filter(|u| modules.contains(u))
                .collect();
            (m.clone(), used)
        })
        .collect();
    if let Some(circle) = find_circle(&uses) {
        panic!("an import circle: {}", circle.join(" -> "));
    }
}

/// One import circle of `uses` (module → the modules it uses), module by module; `None`
/// when there is none. Depth-first from each module: one met again on the current path
/// closes a circle.
fn find_circle(uses: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk(
        m: &str,
        uses: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m.to_string());
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for u in uses.get(m).into_iter().flatten() {
            if let Some(c) = walk(u, uses, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    uses.keys()
        .find_map(|m| walk(m, uses, &mut Vec::new(), &mut done))
}

/// No import circle among the command line's files either (`src/cli/`: `super::x` and
/// `crate::cli::x` uses): the commands use the plumbing (args, setup, out), never the
/// dispatcher that calls them.
#[test]
fn no_command_line_file_imports_itself_through_others() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_stem()?.to_str()?.to_string();
            (p.extension().is_some_and(|x| x == "rs") && name != "mod").then_some(name)
        })
        .collect();
    assert!(files.len() > 10, "read src/cli: {files:?}");
    let path = Regex::new(r"(?:super|crate::cli)::([a-z_]+)").unwrap();
    let group = Regex::new(r"super::\{([^}]*)\}").unwrap();
    let word = Regex::new(r"(?:^|[,{\s])([a-z_]+)").unwrap();
    let uses: BTreeMap<String, BTreeSet<String>> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(format!("{f}.rs"))).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
            let code: String = code
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let mut used: BTreeSet<String> = path
                .captures_iter(&code)
                .map(|c| c[1].to_string())
                .collect();
            for g in group.captures_iter(&code) {
                used.extend(word.captures_iter(&g[1]).map(|c| c[1].to_string()));
            }
            used.retain(|u| u != f && files.contains(u));
            (f.clone(), used)
        })
        .collect();
    assert!(uses["run"].contains("produce"), "read the uses: {uses:?}");
    if let Some(circle) = find_circle(&uses) {
        panic!("an import circle in src/cli: {}", circle.join(" -> "));
    }
}

/// No Rust file of the crate or its tests is over 800 lines: a longer one is split by topic
/// (a test binary into `tests/<name>/main.rs` and a module per topic, still one binary).
#[test]
fn no_source_or_test_file_is_over_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = rust_files(&root.join("src"), |_| false);
    files.extend(rust_files(&root.join("tests"), |_| false));
    assert!(files.len() > 100, "read the files: {}", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > 800).then(|| format!("{} ({n} lines)", f.strip_prefix(root).unwrap().display()))
        })
        .collect();
    assert!(long.is_empty(), "split these by topic: {long:?}");
}
