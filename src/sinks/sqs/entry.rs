//! The `sqs` module in the sink registry ([`crate::sinks::registry`]): an entry's options as
//! a batching [`Target`], resolved per attempt into a queue [`Destination`] served by the
//! process's [`SqsClients`].

use super::{header_pairs, SqsClients, SqsOpts, SqsTarget};
use crate::config::SourceBounds;
use crate::model::SinkEntry;
use crate::secrets::SecretPolicy;
use crate::sinks::batcher::{Limits, Transport};
use crate::sinks::guard::EgressGrant;
use crate::sinks::payload::Payload;
use crate::sinks::registry::{Batching, Destination, Module, Sinks, Target};
use crate::sinks::{AttemptError, BatchMessage, Delivery, EdgePolicy, ProducerHeaders};
use std::sync::Arc;

/// The `sqs` sink module: Amazon SQS, batched.
pub static MODULE: Module = Module {
    name: "sqs",
    batched: true,
    rate_limited: false,
    target,
    validate,
    check_grant,
    warm: None,
};

fn target(entry: &SinkEntry) -> Result<Arc<dyn Target>, String> {
    Ok(Arc::new(SqsEntry {
        opts: SqsOpts::from_opts(&entry.opts)?,
        ordered: entry.ordered,
    }))
}

fn validate(entry: &SinkEntry, edge: &EdgePolicy, _: &SourceBounds) -> Result<(), String> {
    SqsOpts::from_opts_with(&entry.opts, edge).map(drop)
}

fn check_grant(entry: &SinkEntry, tenant: &str, grant: &EgressGrant) -> Result<(), String> {
    SqsOpts::from_opts(&entry.opts)?.check_grant(tenant, grant)
}

/// An `sqs` entry as the dispatch loop holds it; `ordered` entries send their lane id as a
/// FIFO queue's `MessageGroupId`.
#[derive(Debug)]
struct SqsEntry {
    opts: SqsOpts,
    ordered: bool,
}

impl Target for SqsEntry {
    fn module(&self) -> &'static str {
        MODULE.name
    }

    /// 256 KiB (`max_message_bytes`) minus a bound on the attributes: the ankusa attributes,
    /// the pointer's `ExtendedPayloadSize` and the hook's headers.
    fn inline_max_bytes(&self, headers: &ProducerHeaders) -> Option<usize> {
        let pairs = header_pairs(headers).len();
        let overhead = 512 + headers.json().len() + 16 * pairs;
        Some(self.opts.max_message_bytes.saturating_sub(overhead))
    }

    fn batching(&self) -> Option<&dyn Batching> {
        Some(self)
    }
}

impl Batching for SqsEntry {
    fn resolve(
        &self,
        secrets: &SecretPolicy,
    ) -> Result<Arc<dyn Destination>, crate::sinks::ResolveError> {
        let target = self.opts.resolve(secrets)?;
        Ok(Arc::new(Queue {
            needs_lane: self.ordered && target.fifo,
            target,
        }))
    }
}

/// One resolved queue.
#[derive(Debug)]
struct Queue {
    target: SqsTarget,
    needs_lane: bool,
}

impl Destination for Queue {
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
        let clients = sinks.clients(|edge| Ok(SqsClients::new(edge.addresses.clone())))?;
        super::transport(&clients, &self.target)
    }
}
