//! The `eventbridge` module in the sink registry ([`crate::sinks::registry`]): an entry's
//! options as a batching [`Target`], resolved per attempt into a bus [`Destination`] served
//! by the process's [`EventBridgeClients`].

use super::{client, EventBridgeClients, EventBridgeOpts, EventBridgeTarget, EventBridgeTransport};
use super::{FIELDS_RESERVE, MAX_REQUEST_BYTES};
use crate::config::SourceBounds;
use crate::model::SinkEntry;
use crate::secrets::SecretPolicy;
use crate::sinks::batcher::{Limits, Transport};
use crate::sinks::guard::EgressGrant;
use crate::sinks::payload::Payload;
use crate::sinks::registry::{Batching, Destination, Module, Sinks, Target};
use crate::sinks::{AttemptError, BatchMessage, Delivery, EdgePolicy, ProducerHeaders};
use std::sync::Arc;

/// The `eventbridge` sink module: Amazon EventBridge, batched.
pub static MODULE: Module = Module {
    name: "eventbridge",
    batched: true,
    rate_limited: false,
    target,
    validate,
    check_grant,
    warm: None,
};

fn target(entry: &SinkEntry) -> Result<Arc<dyn Target>, String> {
    Ok(Arc::new(EventBridgeEntry {
        opts: EventBridgeOpts::from_opts(&entry.opts)?,
    }))
}

fn validate(entry: &SinkEntry, edge: &EdgePolicy, _: &SourceBounds) -> Result<(), String> {
    EventBridgeOpts::from_opts_with(&entry.opts, edge).map(drop)
}

fn check_grant(entry: &SinkEntry, tenant: &str, grant: &EgressGrant) -> Result<(), String> {
    EventBridgeOpts::from_opts(&entry.opts)?.check_grant(tenant, grant)
}

/// An `eventbridge` entry as the dispatch loop holds it. Ordering is the lanes' (one hook
/// of a lane at a time); EventBridge has no key of its own to carry it.
#[derive(Debug)]
struct EventBridgeEntry {
    opts: EventBridgeOpts,
}

impl Target for EventBridgeEntry {
    fn module(&self) -> &'static str {
        MODULE.name
    }

    /// 256 KiB less room for the event's other fields: headers are not sent.
    fn inline_max_bytes(&self, _headers: &ProducerHeaders) -> Option<usize> {
        Some(MAX_REQUEST_BYTES - FIELDS_RESERVE)
    }

    fn batching(&self) -> Option<&dyn Batching> {
        Some(self)
    }
}

impl Batching for EventBridgeEntry {
    fn resolve(
        &self,
        secrets: &SecretPolicy,
    ) -> Result<Arc<dyn Destination>, crate::sinks::ResolveError> {
        Ok(Arc::new(Bus {
            target: self.opts.resolve(secrets)?,
        }))
    }
}

/// One resolved bus.
#[derive(Debug)]
struct Bus {
    target: EventBridgeTarget,
}

impl Destination for Bus {
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
        false
    }
    fn message(
        &self,
        d: &Delivery,
        payload: &Payload,
        _lane: Option<&str>,
    ) -> Result<BatchMessage, AttemptError> {
        self.target.message(d, payload)
    }
    fn transport(&self, sinks: &Sinks) -> Result<Arc<dyn Transport>, String> {
        let clients = sinks.clients(|edge| Ok(EventBridgeClients::new(edge.addresses.clone())))?;
        Ok(Arc::new(EventBridgeTransport {
            client: client(&clients, &self.target)?,
            event_bus: self.target.event_bus.clone(),
            source: self.target.source.clone(),
        }))
    }
}
