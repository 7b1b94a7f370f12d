//! The `rabbitmq` module in the sink registry ([`crate::sinks::registry`]): its options as
//! a [`Target`] publishing one row per attempt, and the `source put` checks.

use super::{publish, RabbitClients, RabbitOpts};
use crate::config::SourceBounds;
use crate::model::SinkEntry;
use crate::sinks::connections::check_use;
use crate::sinks::registry::{self, DeliverFuture, Module, Sinks, Target};
use crate::sinks::{AttemptError, Delivery, EdgePolicy, ErrorKind};
use std::sync::Arc;

/// The `rabbitmq` sink module: AMQP 0-9-1 with publisher confirms, one publish per row
/// under the slots (so an ordered lane has at most one unconfirmed message).
pub static MODULE: Module = Module {
    name: "rabbitmq",
    batched: false,
    rate_limited: false,
    target,
    validate,
    check_grant: registry::no_grant_needed,
    warm: Some(warm as registry::Warm),
};

fn target(entry: &SinkEntry) -> Result<Arc<dyn Target>, String> {
    Ok(Arc::new(RabbitOpts::from_opts(&entry.opts)?))
}

/// At `source put`: the options, and a connection of the operator's for RabbitMQ that
/// lists the tenant.
fn validate(entry: &SinkEntry, edge: &EdgePolicy, _: &SourceBounds) -> Result<(), String> {
    let o = RabbitOpts::from_opts(&entry.opts)?;
    check_use(
        edge,
        edge.secrets.tenant.as_deref(),
        &o.connection,
        MODULE.name,
    )
    .map(drop)
}

/// Make the link of every RabbitMQ connection of the config when the worker starts: its
/// background watch connects it (a broker that is down does not stop the start). Outside
/// a tokio runtime (a tool, a unit test) they are made on first use.
fn warm(sinks: &Sinks) -> Result<(), String> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(());
    }
    let clients = sinks.clients(|_| Ok(RabbitClients::default()))?;
    for (name, conn) in sinks.edge().connections.iter() {
        if conn.broker() == Some(MODULE.name) {
            crate::sinks::connections::set_state(name, Err("connecting"));
            clients.link(name, conn);
        }
    }
    Ok(())
}

impl Target for RabbitOpts {
    fn module(&self) -> &'static str {
        MODULE.name
    }

    fn deliver<'a>(&'a self, sinks: &'a Sinks, d: &'a Delivery) -> DeliverFuture<'a> {
        Box::pin(async move {
            let clients = sinks
                .clients(|_| Ok(RabbitClients::default()))
                .map_err(|e| AttemptError::retry(ErrorKind::Other, e))?;
            publish(&clients, sinks.edge(), self, d)
                .await
                .map(|()| None)
        })
    }
}
