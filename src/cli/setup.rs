//! What commands start from: the config as the command line amends it, a store on its
//! Redis, and the files named on the command line (a source spec, payload files).

use super::args::Cli;
use super::ops;
use ankusa::config::Config;
use ankusa::model::SourceSpec;
use ankusa::sinks::registry::config_problems;
use ankusa::store::Store;
use ankusa::Error;
use std::path::{Path, PathBuf};

/// The config of `--config`, with `--instance` and `--redis-url` over it, validated; the
/// Redis URL is remembered so its errors can be told in plain words.
pub fn load_config(cli: &Cli) -> Result<Config, Error> {
    let mut cfg = Config::load_checked(cli.config.as_deref(), config_problems)?;
    if let Some(i) = &cli.instance {
        cfg.instance = i.clone();
    }
    if let Some(u) = &cli.redis_url {
        cfg.redis.url = u.clone();
    }
    cfg.validate_with(config_problems)?;
    crate::cli::redis_words::remember(&cfg.redis.url);
    Ok(cfg)
}

/// A store on the config's Redis ([`super::ops::connect`]).
pub async fn store(cfg: &Config) -> Result<Store, Error> {
    ops::connect(cfg).await
}

/// A source spec from a file: JSON, or TOML when its name ends in `.toml`.
pub fn read_spec(path: &Path) -> Result<SourceSpec, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::InvalidSource(format!("{}: {e}", path.display())))?;
    let spec: SourceSpec = if path.extension().is_some_and(|e| e == "toml") {
        toml::from_str(&text)
            .map_err(|e| Error::InvalidSource(format!("{}: {e}", path.display())))?
    } else {
        serde_json::from_str(&text).map_err(|e| {
            Error::InvalidSource(format!(
                "{}: {e} (a source file is JSON, or TOML when its name ends in .toml)",
                path.display()
            ))
        })?
    };
    Ok(spec)
}

/// The payload files of `produce`: files as given, directories expanded to their regular
/// files (sorted), or to those matching `pattern` (a glob relative to the directory).
pub fn collect_files(paths: &[PathBuf], pattern: Option<&str>) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for p in paths {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let mut entries: Vec<PathBuf> = match pattern {
            Some(g) => {
                let full = p.join(g);
                glob::glob(&full.to_string_lossy())
                    .map_err(|e| Error::BadRequest(format!("--glob {g:?}: {e}")))?
                    .filter_map(Result::ok)
                    .filter(|p| p.is_file())
                    .collect()
            }
            None => std::fs::read_dir(p)
                .map_err(|e| Error::BadRequest(format!("{}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect(),
        };
        if entries.is_empty() {
            return Err(Error::BadRequest(format!(
                "{}: no files to commit{}",
                p.display(),
                pattern.map_or(String::new(), |g| format!(" match --glob {g:?}"))
            )));
        }
        entries.sort();
        out.extend(entries);
    }
    Ok(out)
}
