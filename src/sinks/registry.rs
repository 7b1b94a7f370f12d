//! The sink registry: a sink entry's `module` name maps to the [`Module`] that parses its
//! options into a [`Target`], checks them at `source put`, and delivers its rows — one
//! attempt per row ([`Target::deliver`]) or through a per-destination batcher
//! ([`Target::batching`]).
//!
//! The dispatch loop, the source validation and the config know sinks only through this
//! file: adding a sink is its own folder under `src/sinks/` (options, a `Module` value, its
//! `Target`) plus one line in [`MODULES`]. The clients a module keeps (connection pools,
//! token caches) live in the process's [`Sinks`], made on first use.

use super::batcher::{Limits, Transport};
use super::guard::EgressGrant;
use super::payload::Payload;
use super::{AttemptError, BatchMessage, Delivery, EdgePolicy, ErrorKind, ProducerHeaders};
use crate::config::{Config, ConfigError, ConfigProblem, SourceBounds};
use crate::model::{SinkEntry, SourceSpec};
use crate::secrets::SecretPolicy;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// One attempt of a non-batching target ([`Target::deliver`]): the 2xx status a delivered
/// HTTP attempt answered, if any, or how it failed.
pub type DeliverFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<u16>, AttemptError>> + Send + 'a>>;

/// Every sink module this build delivers to, in the order their names are listed (`known:
/// http, sqs, pubsub, nats, rabbitmq, kinesis, eventbridge` in errors); an unset
/// `limits.modules` allows them all.
pub static MODULES: &[&Module] = &[
    &super::http::MODULE,
    &super::sqs::MODULE,
    &super::pubsub::MODULE,
    &super::nats::MODULE,
    &super::rabbitmq::MODULE,
    &super::kinesis::MODULE,
    &super::eventbridge::MODULE,
];

/// A module's start-up hook ([`Module::warm`]): build its clients in `sinks`.
pub type Warm = fn(&Sinks) -> Result<(), String>;

/// One sink module: its name and what the rest of the worker asks of it. Plain function
/// pointers, so a module is a `static` value and the registry a list of them.
pub struct Module {
    /// The name in a sink entry's `module` field and in the `module` metric label.
    pub name: &'static str,
    /// Whether attempts go through a per-destination batcher: the `module` label of
    /// the batch metrics.
    pub batched: bool,
    /// Whether an entry of this module may set `rate_limit` (a batching sink's requests are
    /// bounded by `dispatch.sink_concurrency` instead).
    pub rate_limited: bool,
    /// Parse an entry's options as the scheduler sees them (syntax only; the guards apply at
    /// attempt time). The error names the field.
    pub target: fn(&SinkEntry) -> Result<Arc<dyn Target>, String>,
    /// Check an entry's options at `source put` under the tenant's `edge` (secret
    /// namespace, literal IP hosts) and the operator's `bounds`. The error names the field.
    pub validate: fn(&SinkEntry, &EdgePolicy, &SourceBounds) -> Result<(), String>,
    /// Check an entry's options against the operator's egress grants to a tenant
    /// (`[tenants.<id>]`); the error names the option and the config key.
    pub check_grant: fn(&SinkEntry, &str, &EgressGrant) -> Result<(), String>,
    /// Make the module's clients when the worker starts, so a client that cannot be built
    /// stops the start rather than every attempt; `None`: made on first use.
    pub warm: Option<Warm>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("name", &self.name)
            .field("batched", &self.batched)
            .field("rate_limited", &self.rate_limited)
            .finish_non_exhaustive()
    }
}

/// The module named `name`; `None` for a module this build does not have.
pub fn find(name: &str) -> Option<&'static Module> {
    MODULES.iter().copied().find(|m| m.name == name)
}

/// The names of every module, in [`MODULES`] order.
pub fn names() -> impl Iterator<Item = &'static str> {
    MODULES.iter().map(|m| m.name)
}

/// A sink entry's parsed options as the dispatch loop uses them: one per entry, shared by
/// the rows bound to it.
pub trait Target: Send + Sync + std::fmt::Debug {
    /// The module's name ([`Module::name`]).
    fn module(&self) -> &'static str;

    /// The largest body sent inline for a hook with these producer `headers`; a larger
    /// body is checked in to the blob store first. `None`: no limit.
    fn inline_max_bytes(&self, _headers: &ProducerHeaders) -> Option<usize> {
        None
    }

    /// The batching side of a target whose rows go through a batcher; `None`: one
    /// attempt per row under the slots ([`Target::deliver`]).
    fn batching(&self) -> Option<&dyn Batching> {
        None
    }

    /// One attempt of a row of a non-batching target: `Ok` with the status a delivered
    /// HTTP attempt answered (for the attempt history), or how it failed.
    fn deliver<'a>(&'a self, _sinks: &'a Sinks, _d: &'a Delivery) -> DeliverFuture<'a> {
        Box::pin(async {
            Err(AttemptError::permanent(
                ErrorKind::Other,
                "batching sink in a slot",
            ))
        })
    }
}

/// The batching side of a [`Target`]: its options resolved per attempt into a destination.
pub trait Batching: Send + Sync {
    /// Resolve secret references (under the tenant's `secrets`) and defaults into the
    /// destination one attempt sends to. The error is a plain text (its kind is read from it).
    fn resolve(
        &self,
        secrets: &SecretPolicy,
    ) -> Result<Arc<dyn Destination>, crate::sinks::ResolveError>;
}

/// Where one batched attempt goes: a queue or topic with its client and limits.
pub trait Destination: Send + Sync + std::fmt::Debug {
    /// The module's name ([`Module::name`]).
    fn module(&self) -> &'static str;
    /// Which batcher serves it: equal ids share one batcher (and its requests).
    fn id(&self) -> &str;
    /// The request limits of this destination.
    fn limits(&self) -> Limits;
    /// The egress checks of one attempt on the resolved options (address guard, grants);
    /// a refusal is permanent.
    fn check_egress(&self, tenant: &str, edge: &EdgePolicy) -> Result<(), String>;
    /// Whether a message needs the row's lane id (an ordered entry to a FIFO queue or an
    /// ordering topic).
    fn needs_lane(&self) -> bool;
    /// Build one attempt's message; `lane` is the row's lane id when [`Self::needs_lane`].
    fn message(
        &self,
        d: &Delivery,
        payload: &Payload,
        lane: Option<&str>,
    ) -> Result<BatchMessage, AttemptError>;
    /// The transport of this destination, over the module's clients in `sinks`.
    fn transport(&self, sinks: &Sinks) -> Result<Arc<dyn Transport>, String>;
}

/// The sink side of a worker process: the edge policy every sink applies and the clients each
/// module keeps (connection pools, credential caches), one of each per process, made on
/// first use (or at start, [`Module::warm`]). Cheap to clone.
#[derive(Clone)]
pub struct Sinks {
    inner: Arc<Inner>,
}

struct Inner {
    edge: EdgePolicy,
    clients: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sinks")
            .field("edge", &self.inner.edge)
            .finish_non_exhaustive()
    }
}

impl Sinks {
    /// The sinks of a process under `edge`, with every module's [`Module::warm`] run; the
    /// error names the client that could not be built.
    pub fn new(edge: EdgePolicy) -> Result<Sinks, String> {
        let sinks = Sinks {
            inner: Arc::new(Inner {
                edge,
                clients: Mutex::default(),
            }),
        };
        for m in MODULES {
            if let Some(warm) = m.warm {
                warm(&sinks)?;
            }
        }
        Ok(sinks)
    }

    /// The edge policy: addresses, secret references, tenants' grants.
    pub fn edge(&self) -> &EdgePolicy {
        &self.inner.edge
    }

    /// The secret references sinks may resolve (bound to a tenant with
    /// [`SecretPolicy::for_tenant`]).
    pub fn secrets(&self) -> &SecretPolicy {
        &self.inner.edge.secrets
    }

    /// The clients of type `T` (one value per type and process), made by `make` on first
    /// use; a failure is not kept, so the next use tries again.
    pub fn clients<T: Any + Send + Sync>(
        &self,
        make: impl FnOnce(&EdgePolicy) -> Result<T, String>,
    ) -> Result<Arc<T>, String> {
        let mut clients = self
            .inner
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = clients.get(&TypeId::of::<T>()) {
            if let Ok(c) = c.clone().downcast::<T>() {
                return Ok(c);
            }
        }
        let made = Arc::new(make(&self.inner.edge)?);
        clients.insert(TypeId::of::<T>(), made.clone());
        Ok(made)
    }
}

/// Check a source's sink list: a known module and the options it needs, under the secure
/// default guards and bounds ([`EdgePolicy::default`]) and no tenant (so a secret reference
/// is refused). Errors: the first refusal, naming the entry and the field.
pub fn validate_source(spec: &SourceSpec) -> Result<(), String> {
    let edge = EdgePolicy::default();
    check_entries(&spec.sinks, &edge, &edge.sources.bounds(""), "")
}

/// [`validate_source`] for a source of `tenant` under `edge`, then the tenant's egress
/// grants ([`check_grants`]): the SSRF guard for literal IP hosts (`http.allow_cidrs`), the
/// tenant's secret namespace (`secrets.*`, `tenants.<id>.shared_secrets`), the operator's
/// bounds (`[limits]`, `[tenants.<id>]`, the `[retry]` caps) and grants
/// (`tenants.<id>.custom_endpoints`, `ambient_credentials`; checked again at attempt time).
/// Errors: the first refusal, naming the limit and its config key.
pub fn check_source(spec: &SourceSpec, tenant: &str, edge: &EdgePolicy) -> Result<(), String> {
    let bounds = edge.sources.bounds(tenant);
    // Before any entry is parsed: a 20 000-entry spec costs one comparison.
    let max = &bounds.max_sinks_per_source;
    if spec.sinks.len() > max.value {
        return Err(format!(
            "sinks: {} entries, more than the {} a source may have ({} = {})",
            spec.sinks.len(),
            max.value,
            max.key,
            max.value
        ));
    }
    check_entries(&spec.sinks, &edge.for_tenant(tenant), &bounds, tenant)?;
    check_grants(&spec.sinks, tenant, edge)
}

/// Check every entry of a source's sink list (its length is checked before): a known module
/// allowed for the tenant, the generic policy fields (lane key, filter, retry, rate limit,
/// disable), then the module's own options. Every refusal names the entry and the field.
pub fn check_entries(
    sinks: &[SinkEntry],
    edge: &EdgePolicy,
    bounds: &SourceBounds,
    tenant: &str,
) -> Result<(), String> {
    for (i, s) in sinks.iter().enumerate() {
        let Some(module) = find(&s.module) else {
            return Err(format!(
                "sinks[{i}].module: unknown module {:?} (known: {})",
                s.module,
                names().collect::<Vec<_>>().join(", ")
            ));
        };
        if !bounds.allows_module(module.name) {
            return Err(format!(
                "sinks[{i}].module: {} is not allowed for tenant {tenant:?} ({} = {:?})",
                module.name,
                bounds.modules.key,
                bounds.modules.value.as_deref().unwrap_or_default()
            ));
        }
        s.check_policy(bounds)
            .map_err(|e| format!("sinks[{i}].{e}"))?;
        if s.rate_limit.is_some() && !module.rate_limited {
            return Err(format!("sinks[{i}].rate_limit: only http entries have a rate limit (a batching sink's requests are bounded by dispatch.sink_concurrency)"));
        }
        if s.disable_after_ms == Some(0) {
            return Err(format!(
                "sinks[{i}].disable_after_ms: must be > 0 (omit it to never disable)"
            ));
        }
        (module.validate)(s, edge, bounds).map_err(|e| format!("sinks[{i}].opts: {e}"))?;
    }
    Ok(())
}

/// Checks that every module `limits.modules` and `[tenants.<id>].modules` name is one of
/// [`MODULES`]: the part of the config's validation only the registry can do, so the config
/// need not know the sinks and a new sink is known by its registry line alone. Errors:
/// [`ConfigError::Invalid`] with [`config_problems`].
pub fn check_config(config: &Config) -> Result<(), ConfigError> {
    let problems = config_problems(config);
    match problems.is_empty() {
        true => Ok(()),
        false => Err(ConfigError::Invalid(problems)),
    }
}

/// One problem per module name of `limits.modules` and `[tenants.<id>].modules` that is none
/// of [`MODULES`], keyed `limits.modules[i]` or `tenants.<id>.modules[i]` as the config's own
/// checks are: the [`crate::config::Check`] wherever a config is loaded (the command line's
/// `load_config` and `config check`, a worker's reload, [`crate::ops::validate_config`]), so
/// they are reported with the config's own problems, at once.
pub fn config_problems(config: &Config) -> Vec<ConfigProblem> {
    let known = names().collect::<Vec<_>>();
    let lists = std::iter::once(("limits".to_string(), config.limits.modules.as_deref())).chain(
        config
            .tenants
            .iter()
            .map(|(id, t)| (format!("tenants.{id}"), t.modules.as_deref())),
    );
    let mut problems = Vec::new();
    for (section, list) in lists {
        for (i, m) in list.unwrap_or_default().iter().enumerate() {
            if !known.contains(&m.as_str()) {
                problems.push(ConfigProblem {
                    key: format!("{section}.modules[{i}]"),
                    message: format!("{m:?} is no sink module (known: {})", known.join(", ")),
                });
            }
        }
    }
    problems
}

/// The operator's egress grants to `tenant` over every entry ([`Module::check_grant`]);
/// entries of an unknown module are left to [`check_entries`].
pub fn check_grants(sinks: &[SinkEntry], tenant: &str, edge: &EdgePolicy) -> Result<(), String> {
    let grant = edge.grant(tenant);
    for (i, s) in sinks.iter().enumerate() {
        if let Some(m) = find(&s.module) {
            (m.check_grant)(s, tenant, grant).map_err(|e| format!("sinks[{i}].opts: {e}"))?;
        }
    }
    Ok(())
}

/// A sink entry's [`Target`]; an entry naming a module this build does not have is refused.
pub fn target_of(entry: &SinkEntry) -> Result<Arc<dyn Target>, String> {
    match find(&entry.module) {
        Some(m) => (m.target)(entry),
        None => Err(format!(
            "module {} is not supported by this worker",
            entry.module
        )),
    }
}

/// A [`Module::check_grant`] for modules that need no grant.
pub fn no_grant_needed(_: &SinkEntry, _: &str, _: &EgressGrant) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_may_name_only_registered_modules() {
        let c = Config::from_toml_str(
            "[limits]\nmodules = [\"http\", \"ftp\"]\n[tenants.acme]\nmodules = [\"sns\", \"sqs\"]\n",
        )
        .expect("the config checks only the names' form");
        let problems: Vec<String> = check_config(&c)
            .unwrap_err()
            .problems()
            .iter()
            .map(|p| format!("{}: {}", p.key, p.message))
            .collect();
        let known = "known: http, sqs, pubsub, nats, rabbitmq, kinesis, eventbridge";
        assert_eq!(
            problems,
            [
                format!("limits.modules[1]: \"ftp\" is no sink module ({known})"),
                format!("tenants.acme.modules[0]: \"sns\" is no sink module ({known})"),
            ]
        );
        assert!(check_config(&Config::default()).is_ok());
        // Loaded with the registry's check, its problems come in one list with the config's.
        let err = Config::from_toml_str_checked(
            "[retry]\njitter = 1.5\n[limits]\nmodules = [\"ftp\"]\n",
            config_problems,
        )
        .unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["retry.jitter", "limits.modules[0]"]);
        let every = crate::config::SourcePolicy::from_config(&Config::default()).bounds("beta");
        assert!(names().all(|m| every.allows_module(m)));
    }

    #[test]
    fn every_module_name_finds_its_module_and_no_other_does() {
        let names: Vec<&str> = names().collect();
        assert_eq!(
            names,
            [
                "http",
                "sqs",
                "pubsub",
                "nats",
                "rabbitmq",
                "kinesis",
                "eventbridge"
            ]
        );
        for m in MODULES {
            assert_eq!(find(m.name).map(|f| f.name), Some(m.name));
        }
        assert!(find("HTTP").is_none());
        assert!(find("kafka").is_none());
    }

    #[test]
    fn only_batching_modules_are_batched_and_only_http_is_rate_limited() {
        let batched: Vec<&str> = MODULES
            .iter()
            .filter(|m| m.batched)
            .map(|m| m.name)
            .collect();
        assert_eq!(batched, ["sqs", "pubsub", "kinesis", "eventbridge"]);
        let limited: Vec<&str> = MODULES
            .iter()
            .filter(|m| m.rate_limited)
            .map(|m| m.name)
            .collect();
        assert_eq!(limited, ["http"]);
    }
}
