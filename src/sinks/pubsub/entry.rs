//! The `pubsub` module in the sink registry ([`crate::sinks::registry`]): an entry's options
//! as a batching [`Target`], resolved per attempt into a topic [`Destination`] served by the
//! process's [`PubSubClients`].

use super::{PubSubClients, PubSubOpts, PubSubTarget, INLINE_MAX_BYTES};
use crate::config::SourceBounds;
use crate::model::SinkEntry;
use crate::secrets::SecretPolicy;
use crate::sinks::batcher::{Limits, Transport};
use crate::sinks::guard::EgressGrant;
use crate::sinks::payload::Payload;
use crate::sinks::registry::{Batching, Destination, Module, Sinks, Target};
use crate::sinks::{AttemptError, BatchMessage, Delivery, EdgePolicy, ProducerHeaders};
use std::sync::Arc;

/// The `pubsub` sink module: Google Pub/Sub, batched.
pub static MODULE: Module = Module {
    name: "pubsub",
    batched: true,
    rate_limited: false,
    target,
    validate,
    check_grant,
    warm: None,
};

fn target(entry: &SinkEntry) -> Result<Arc<dyn Target>, String> {
    Ok(Arc::new(PubSubEntry {
        opts: PubSubOpts::from_opts(&entry.opts)?,
        ordered: entry.ordered,
    }))
}

fn validate(entry: &SinkEntry, edge: &EdgePolicy, _: &SourceBounds) -> Result<(), String> {
    PubSubOpts::from_opts_with(&entry.opts, edge).map(drop)
}

fn check_grant(entry: &SinkEntry, tenant: &str, grant: &EgressGrant) -> Result<(), String> {
    PubSubOpts::from_opts(&entry.opts)?.check_grant(tenant, grant)
}

/// A `pubsub` entry as the dispatch loop holds it; `ordered` entries send their lane id as
/// the message's ordering key.
#[derive(Debug)]
struct PubSubEntry {
    opts: PubSubOpts,
    ordered: bool,
}

impl Target for PubSubEntry {
    fn module(&self) -> &'static str {
        MODULE.name
    }

    /// 7 MB (base64 in JSON) minus a bound on the attributes.
    fn inline_max_bytes(&self, headers: &ProducerHeaders) -> Option<usize> {
        Some(INLINE_MAX_BYTES.saturating_sub(2048 + 2 * headers.json().len()))
    }

    fn batching(&self) -> Option<&dyn Batching> {
        Some(self)
    }
}

impl Batching for PubSubEntry {
    fn resolve(
        &self,
        secrets: &SecretPolicy,
    ) -> Result<Arc<dyn Destination>, crate::sinks::ResolveError> {
        Ok(Arc::new(Topic {
            target: self.opts.resolve(secrets)?,
            needs_lane: self.ordered,
        }))
    }
}

/// One resolved topic.
#[derive(Debug)]
struct Topic {
    target: PubSubTarget,
    needs_lane: bool,
}

impl Destination for Topic {
    fn module(&self) -> &'static str {
        MODULE.name
    }
    fn id(&self) -> &str {
        &self.target.destination
    }
    fn limits(&self) -> Limits {
        self.target.limits()
    }
    fn check_egress(&self, tenant: &str, edge: &EdgePolicy) -> Result<(), String> {
        self.target.check_egress(tenant, edge)
    }
    fn needs_lane(&self) -> bool {
        self.needs_lane
    }
    fn message(
        &self,
        d: &Delivery,
        payload: &Payload,
        lane: Option<&str>,
    ) -> Result<BatchMessage, AttemptError> {
        self.target.message(d, payload, lane)
    }
    fn transport(&self, sinks: &Sinks) -> Result<Arc<dyn Transport>, String> {
        let clients = sinks.clients(|edge| PubSubClients::new(edge.addresses.clone()))?;
        Ok(clients.transport(&self.target))
    }
}
