//! Pub/Sub for the worker's wake and lease channels: one subscriber connection
//! for every partition, re-subscribed by fred after a reconnect. A message is only a hint
//! (the scheduler's poll and the lease's expiry are the fallbacks), so what a caller sees is
//! the channel a message came on, or that some were dropped.

use super::{Store, StoreError};
use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::Message;
use tokio::sync::broadcast::{self, error::RecvError};

/// What a [`Subscription`] heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A message arrived on this channel (its payload is not needed: the channel is the hint).
    Channel(String),
    /// The reader fell behind and messages were dropped: every channel may have had one.
    Lagged,
}

/// A live subscription to a set of channels; [`Subscription::close`] ends it.
pub struct Subscription {
    client: SubscriberClient,
    messages: broadcast::Receiver<Message>,
}

impl Store {
    /// Subscribe to `channels` on a fresh connection to the same server. On a cluster it
    /// subscribes on one node: classic `PUBLISH` (the scripts' wake, the lease's release)
    /// reaches every node's subscribers. Behind sentinels it follows the master. fred
    /// subscribes again after a reconnect.
    ///
    /// Errors: the connection or the `SUBSCRIBE` failed.
    pub async fn subscribe(&self, channels: Vec<String>) -> Result<Subscription, StoreError> {
        let client = self.subscriber()?;
        client.init().await?;
        client.subscribe(channels).await?;
        // A detached task holding its own handle of the client: it subscribes again after
        // each reconnect until the client quits.
        let _resubscribe = client.manage_subscriptions();
        let messages = client.message_rx();
        Ok(Subscription { client, messages })
    }
}

impl Subscription {
    /// The next thing heard; `None` once the connection is closed for good.
    pub async fn next(&mut self) -> Option<Heard> {
        match self.messages.recv().await {
            Ok(m) => Some(Heard::Channel(m.channel.to_string())),
            Err(RecvError::Lagged(_)) => Some(Heard::Lagged),
            Err(RecvError::Closed) => None,
        }
    }

    /// Unsubscribe and close the connection (best effort: it is going away either way).
    pub async fn close(self) {
        let _ = self.client.quit().await;
    }
}
