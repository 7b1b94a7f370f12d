//! The `nats` module in the sink registry ([`crate::sinks::registry`]): its options as a
//! [`Target`] publishing one row per attempt, and the `source put` checks.

use super::{publish, NatsClients, NatsOpts};
use crate::config::SourceBounds;
use crate::model::SinkEntry;
use crate::sinks::connections::check_use;
use crate::sinks::registry::{self, DeliverFuture, Module, Sinks, Target};
use crate::sinks::{Delivery, EdgePolicy};
use std::sync::Arc;

/// The `nats` sink module: NATS JetStream, one publish per row under the slots.
pub static MODULE: Module = Module {
    name: "nats",
    batched: false,
    rate_limited: false,
    target,
    validate,
    check_grant: registry::no_grant_needed,
    warm: Some(warm as registry::Warm),
};

fn target(entry: &SinkEntry) -> Result<Arc<dyn Target>, String> {
    Ok(Arc::new(NatsOpts::from_opts(&entry.opts)?))
}

/// At `source put`: the options, and a connection of the operator's for NATS that lists
/// the tenant.
fn validate(entry: &SinkEntry, edge: &EdgePolicy, _: &SourceBounds) -> Result<(), String> {
    let o = NatsOpts::from_opts(&entry.opts)?;
    check_use(
        edge,
        edge.secrets.tenant.as_deref(),
        &o.connection,
        MODULE.name,
    )
    .map(drop)
}

/// Open every NATS connection of the config when the worker starts (in the background:
/// a broker that is down does not stop the start), so its state is known before the first
/// delivery. Outside a tokio runtime (a tool, a unit test) they open on first use.
fn warm(sinks: &Sinks) -> Result<(), String> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Ok(());
    };
    let clients = sinks.clients(|_| Ok(NatsClients::default()))?;
    for (name, conn) in sinks.edge().connections.iter() {
        if conn.broker() != Some(MODULE.name) {
            continue;
        }
        let (clients, name, conn) = (clients.clone(), name.clone(), conn.clone());
        rt.spawn(async move {
            if let Err(e) = clients.client(&name, &conn).await {
                crate::sinks::connections::set_state(&name, Err(&e));
                tracing::warn!(connection = %name, error = %e, "nats connection not opened");
            }
        });
    }
    Ok(())
}

impl Target for NatsOpts {
    fn module(&self) -> &'static str {
        MODULE.name
    }

    fn deliver<'a>(&'a self, sinks: &'a Sinks, d: &'a Delivery) -> DeliverFuture<'a> {
        Box::pin(async move {
            let clients = sinks.clients(|_| Ok(NatsClients::default())).map_err(|e| {
                crate::sinks::AttemptError::retry(crate::sinks::ErrorKind::Other, e)
            })?;
            publish(&clients, sinks.edge(), self, d)
                .await
                .map(|()| None)
        })
    }
}
