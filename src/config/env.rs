//! The environment layer (`ANKUSA_<SECTION>__<KEY>`) and figment errors turned into
//! problems naming their key.

use super::*;

/// The `ANKUSA_*` environment variables as a figment layer of `(dotted key, value)` pairs.
pub(super) struct EnvOverrides(Vec<(String, String)>);

impl EnvOverrides {
    pub(super) fn from_vars(
        vars: impl IntoIterator<Item = (impl AsRef<std::ffi::OsStr>, impl AsRef<std::ffi::OsStr>)>,
    ) -> Self {
        // The top-level keys the config defines (`instance`, `redis`, `dispatch`, …): a variable
        // whose first segment is none of them is not ours (Kubernetes' `ANKUSA_PORT`, …).
        let top: Vec<String> = match serde_json::to_value(Config::default()) {
            Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            _ => Vec::new(),
        };
        let pairs = vars.into_iter().filter_map(|(name, value)| {
            let name = name.as_ref().to_string_lossy();
            // Secrets for `${env:…}` references share the `ANKUSA_` prefix but are no config key.
            if CLI_VARS.contains(&name.as_ref())
                || name.starts_with(crate::secrets::DEFAULT_ENV_PREFIX)
            {
                return None;
            }
            let key = name
                .strip_prefix(ENV_PREFIX)?
                .to_ascii_lowercase()
                .replace("__", ".");
            let head = key.split('.').next().unwrap_or_default();
            if !top.iter().any(|t| t == head) {
                return None;
            }
            Some((key, value.as_ref().to_string_lossy().into_owned()))
        });
        EnvOverrides(pairs.collect())
    }
}

impl Provider for EnvOverrides {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENV_SOURCE)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut dict = Dict::new();
        for (key, raw) in &self.0 {
            // Like figment's `Env`: "8" becomes a number, "true" a bool; string keys stay verbatim.
            let value = match STRING_KEYS.contains(&key.as_str()) {
                true => Value::from(raw.clone()),
                false => raw.parse::<Value>().unwrap_or_else(|never| match never {}),
            };
            insert(&mut dict, key, value);
        }
        // Untagged values: figment tags them with this provider, so errors name the environment.
        Ok(Profile::Default.collect(dict))
    }
}

/// Puts `value` at the dotted `key` path of `dict`, creating tables on the way.
fn insert(dict: &mut Dict, key: &str, value: Value) {
    let Some((head, rest)) = key.split_once('.') else {
        dict.insert(key.to_string(), value);
        return;
    };
    match dict
        .entry(head.to_string())
        .or_insert_with(|| Dict::new().into())
    {
        Value::Dict(_, table) => insert(table, rest, value),
        scalar => *scalar = figment::util::nest(rest, value),
    }
}

/// The most unknown keys one config check names.
const UNKNOWN_KEYS_MAX: usize = 32;

/// `first` and, when it names an unknown key, the errors found after taking that key out
/// of the merged config, again and again: serde stops at the first unknown key, and a user
/// who fixes one typo at a time would run the check once per typo. Up to
/// [`UNKNOWN_KEYS_MAX`] unknown keys, then the first other error if any; each error keeps
/// the source (file or environment) of its key.
pub(super) fn every_unknown_key(figment: &Figment, first: figment::Error) -> figment::Error {
    use figment::error::Kind;
    let mut found = vec![first.clone()];
    let mut last = first;
    let Ok(mut merged) = figment.extract::<Dict>() else {
        return last;
    };
    for _ in 0..UNKNOWN_KEYS_MAX {
        let Kind::UnknownField(field, _) = &last.kind else {
            break;
        };
        let mut path = last.path.clone();
        if path.last() != Some(field) {
            path.push(field.clone());
        }
        if !remove(&mut merged, &path) {
            break;
        }
        let again = Figment::from(figment::providers::Serialized::defaults(merged.clone()));
        match again.extract::<Config>() {
            Ok(_) => break,
            Err(e) => {
                let mut e = e;
                // The key's own source, not the re-built layer.
                let mut key = e.path.clone();
                if let Kind::UnknownField(f, _) = &e.kind {
                    if key.last() != Some(f) {
                        key.push(f.clone());
                    }
                }
                e.metadata = figment.find_metadata(&key.join(".")).cloned();
                found.push(e.clone());
                last = e;
            }
        }
    }
    // A chain iterates from the error chained last: chain the last found first.
    let mut errors = found.into_iter().rev();
    let head = errors.next().unwrap_or(last);
    errors.fold(head, |chain, e| chain.chain(e))
}

/// Remove the key at `path` from `dict`; whether it was there.
fn remove(dict: &mut Dict, path: &[String]) -> bool {
    match path {
        [] => false,
        [key] => dict.remove(key).is_some(),
        [head, rest @ ..] => match dict.get_mut(head) {
            Some(Value::Dict(_, inner)) => remove(inner, rest),
            _ => false,
        },
    }
}

/// Renders figment errors one per line, each naming its dotted key path and, if it came from
/// one, the file or the environment.
pub(super) fn parse_error(err: figment::Error) -> ConfigError {
    use figment::error::{Kind, OneOf};
    let lines: Vec<String> = err
        .into_iter()
        .map(|e| {
            let mut path = e.path.clone();
            let what = match &e.kind {
                Kind::UnknownField(field, expected) => {
                    if path.last() != Some(field) {
                        path.push(field.clone());
                    }
                    format!(
                        "unknown field `{field}` at {}, expected {}",
                        path.join("."),
                        OneOf(expected)
                    )
                }
                kind if path.is_empty() => kind.to_string().trim_end().to_string(),
                kind => format!("{kind} at {}", path.join(".")),
            };
            match &e.metadata {
                Some(md) if md.name == ENV_SOURCE => format!("{what} (from {})", env_var(&path)),
                Some(md) => match md.source.as_ref().and_then(|s| s.file_path()) {
                    Some(file) => format!("{what} (in {})", file.display()),
                    None => what,
                },
                None => what,
            }
        })
        .collect();
    ConfigError::Parse {
        message: lines.join("\n"),
    }
}

/// The environment variable that sets the key at `path` (`["redis", "url"]` →
/// `ANKUSA_REDIS__URL`).
pub(super) fn env_var<S: AsRef<str>>(path: &[S]) -> String {
    let joined: Vec<&str> = path.iter().map(AsRef::as_ref).collect();
    format!("{ENV_PREFIX}{}", joined.join("__").to_ascii_uppercase())
}

/// `problems` with each one whose value came from the environment naming its variable, so
/// a person knows where to fix it (the key alone sends them to a file that has not got it).
pub(super) fn name_env_sources(figment: &Figment, err: ConfigError) -> ConfigError {
    let ConfigError::Invalid(problems) = err else {
        return err;
    };
    ConfigError::Invalid(
        problems
            .into_iter()
            .map(|mut p| {
                if figment
                    .find_metadata(&p.key)
                    .is_some_and(|md| md.name == ENV_SOURCE)
                {
                    let path: Vec<&str> = p.key.split('.').collect();
                    p.message = format!("{} (from {})", p.message, env_var(&path));
                }
                p
            })
            .collect(),
    )
}
