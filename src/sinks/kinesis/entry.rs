//! The `kinesis` module in the sink registry ([`crate::sinks::registry`]): an entry's
//! options as a batching [`Target`], resolved per attempt into a stream [`Destination`]
//! served by the process's [`KinesisClients`].

use super::{client, KinesisClients, KinesisOpts, KinesisTarget, KinesisTransport};
use super::{MAX_RECORD_BYTES, PARTITION_KEY_RESERVE};
use crate::config::SourceBounds;
use crate::model::SinkEntry;
use crate::secrets::SecretPolicy;
use crate::sinks::batcher::{Limits, Transport};
use crate::sinks::guard::EgressGrant;
use crate::sinks::payload::Payload;
use crate::sinks::registry::{Batching, Destination, Module, Sinks, Target};
use crate::sinks::{AttemptError, BatchMessage, Delivery, EdgePolicy, ProducerHeaders};
use std::sync::Arc;

/// The `kinesis` sink module: Amazon Kinesis Data Streams, batched.
pub static MODULE: Module = Module {
    name: "kinesis",
    batched: true,
    rate_limited: false,
    target,
    validate,
    check_grant,
    warm: None,
};

fn target(entry: &SinkEntry) -> Result<Arc<dyn Target>, String> {
    Ok(Arc::new(KinesisEntry {
        opts: KinesisOpts::from_opts(&entry.opts)?,
        ordered: entry.ordered,
    }))
}

fn validate(entry: &SinkEntry, edge: &EdgePolicy, _: &SourceBounds) -> Result<(), String> {
    KinesisOpts::from_opts_with(&entry.opts, edge).map(drop)
}

fn check_grant(entry: &SinkEntry, tenant: &str, grant: &EgressGrant) -> Result<(), String> {
    KinesisOpts::from_opts(&entry.opts)?.check_grant(tenant, grant)
}

/// A `kinesis` entry as the dispatch loop holds it; `ordered` entries key records by their
/// lane id.
#[derive(Debug)]
struct KinesisEntry {
    opts: KinesisOpts,
    ordered: bool,
}

impl Target for KinesisEntry {
    fn module(&self) -> &'static str {
        MODULE.name
    }

    /// 1 MiB less room for the partition key: headers are not sent.
    fn inline_max_bytes(&self, _headers: &ProducerHeaders) -> Option<usize> {
        Some(MAX_RECORD_BYTES - PARTITION_KEY_RESERVE)
    }

    fn batching(&self) -> Option<&dyn Batching> {
        Some(self)
    }
}

impl Batching for KinesisEntry {
    fn resolve(
        &self,
        secrets: &SecretPolicy,
    ) -> Result<Arc<dyn Destination>, crate::sinks::ResolveError> {
        Ok(Arc::new(Stream {
            target: self.opts.resolve(secrets)?,
            needs_lane: self.ordered,
        }))
    }
}

/// One resolved stream.
#[derive(Debug)]
struct Stream {
    target: KinesisTarget,
    needs_lane: bool,
}

impl Destination for Stream {
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
        let clients = sinks.clients(|edge| Ok(KinesisClients::new(edge.addresses.clone())))?;
        Ok(Arc::new(KinesisTransport {
            client: client(&clients, &self.target)?,
            stream: self.target.stream.clone(),
            by_arn: self.target.arn.is_some(),
        }))
    }
}
