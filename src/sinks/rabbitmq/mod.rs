//! The RabbitMQ sink (`"module": "rabbitmq"`): one AMQP 0-9-1 publish per row on
//! a confirm-mode channel of an operator connection ([`super::connections`]); the broker's
//! publisher confirm is the delivery.
//!
//! Options: `connection` (a `[connections.<name>]` with an `amqp://` or `amqps://` URL that
//! lists the tenant), `exchange` (`""` is the default exchange, where the routing key names
//! a queue), `routing_key` (default `""`) and `mandatory` (default `false`: with it, a
//! message no queue is bound for comes back and the attempt retries, instead of being
//! confirmed and dropped by the broker).
//!
//! The message: the body as committed, persistent (`delivery_mode` 2), `message_id` = the
//! row's `webhook-id` (the same on every attempt and unique across instances: consumers
//! deduplicate the retries of a worker killed between publish and settle on it), `app_id`
//! `ankusa`, `timestamp` the commit time (seconds), `content_type` the hook's
//! `content-type` header if any, and the headers of
//! [`super::connections::message_headers`] as AMQP long-string headers.
//!
//! Outcomes: a confirm (`basic.ack`) is `ok`; a `basic.nack`, a message returned as
//! unroutable under `mandatory`, a channel closed by the broker (an exchange that does not
//! exist: 404, access refused: 403) and a lost connection all retry. A missing exchange
//! retries rather than dead-letters for the reason a missing NATS stream does: it is the
//! operator's set-up race, which the retry horizon bounds. Only what retrying cannot
//! change fails for good: headers AMQP cannot carry, a connection the tenant may no longer
//! use.
//!
//! Every entry naming a connection shares its one AMQP connection. Publishes go on
//! confirm-mode channels, one per slot of [`CHANNEL_SLOTS`] chosen by the exchange name's
//! hash: the broker closes a channel on a publish to a missing exchange (404), which fails
//! the publishes in flight on it, so a tenant's missing exchange disturbs only the
//! exchanges sharing its slot, and a tenant naming many exchanges cannot open more than
//! [`CHANNEL_SLOTS`] channels. A closed channel is reopened by the next attempt. A lost connection is
//! reopened by the next attempt after a backoff ([`super::connections::backoff`]), and in
//! the background so its state recovers while idle.

mod entry;

pub use entry::MODULE;

use super::connections::{self, check_use, message_headers};
use super::{AttemptError, Delivery, EdgePolicy, ErrorKind};
use crate::config::ConnectionConfig;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The longest exchange name and routing key, bytes (an AMQP short string).
pub const MAX_NAME_BYTES: usize = 255;

/// The AMQP heartbeat the worker asks for, seconds: a silently dead connection is noticed
/// within about twice this.
pub const HEARTBEAT_SECS: u16 = 10;

/// Channels per connection at most: publishes to an exchange use the channel of its slot.
pub const CHANNEL_SLOTS: u32 = 16;

/// How often a down connection is tried again in the background (besides attempts).
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Options of a `rabbitmq` sink entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RabbitOpts {
    /// The operator's connection to publish through (`[connections.<name>]`).
    pub connection: String,
    /// The exchange: `""` (the default exchange) or 1..=255 bytes of `[A-Za-z0-9-_.:]`.
    pub exchange: String,
    /// The routing key: at most 255 bytes, no control characters. Default `""`.
    #[serde(default)]
    pub routing_key: String,
    /// Publish as mandatory: an unroutable message is returned and the attempt retries.
    /// Default `false` (the broker confirms and drops it).
    #[serde(default)]
    pub mandatory: bool,
}

impl RabbitOpts {
    /// Parse and check an entry's options (syntax only); the error names the option.
    pub fn from_opts(opts: &serde_json::Map<String, serde_json::Value>) -> Result<Self, String> {
        let o: RabbitOpts = serde_json::from_value(serde_json::Value::Object(opts.clone()))
            .map_err(|e| e.to_string())?;
        connections::check_name(&o.connection)?;
        let exchange_ok = o.exchange.len() <= MAX_NAME_BYTES
            && o.exchange
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
        if !exchange_ok {
            return Err(format!(
                "exchange: must be \"\" or at most {MAX_NAME_BYTES} bytes of [A-Za-z0-9-_.:]"
            ));
        }
        if o.routing_key.len() > MAX_NAME_BYTES || o.routing_key.chars().any(char::is_control) {
            return Err(format!(
                "routing_key: must be at most {MAX_NAME_BYTES} bytes without control characters"
            ));
        }
        Ok(o)
    }
}

/// The AMQP connections of a worker process, one [`Link`] per connection name.
#[derive(Debug, Default)]
pub struct RabbitClients {
    links: Mutex<HashMap<String, Arc<Link>>>,
}

impl RabbitClients {
    /// The link of connection `name` (configured as `conn`), made (not yet connected) if it
    /// is not yet; a new link's background watch starts when a tokio runtime runs.
    pub fn link(&self, name: &str, conn: &ConnectionConfig) -> Arc<Link> {
        let mut links = self
            .links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l) = links.get(name) {
            return l.clone();
        }
        let link = Arc::new(Link {
            name: name.to_string(),
            conn: conn.clone(),
            state: tokio::sync::Mutex::new(LinkState::default()),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(watch(Arc::downgrade(&link)));
        }
        links.insert(name.to_string(), link.clone());
        link
    }
}

/// One named AMQP connection and its confirm-mode channel, opened and reopened on demand.
#[derive(Debug)]
pub struct Link {
    name: String,
    conn: ConnectionConfig,
    state: tokio::sync::Mutex<LinkState>,
}

#[derive(Default)]
struct LinkState {
    connection: Option<Connection>,
    /// The open channels by slot ([`CHANNEL_SLOTS`]).
    channels: HashMap<u32, Channel>,
    /// Failed connection attempts in a row (the backoff's exponent).
    failures: u32,
    /// No new connection attempt before this instant.
    not_before: Option<Instant>,
    /// Why the last attempt failed.
    last_error: String,
}

impl std::fmt::Debug for LinkState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkState")
            .field("failures", &self.failures)
            .field("last_error", &self.last_error)
            .finish_non_exhaustive()
    }
}

/// Keep a link's state known while nothing is delivered: every [`WATCH_EVERY`], reconnect
/// a link that is down (within its backoff). Ends when the link is dropped.
async fn watch(link: Weak<Link>) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(link) = link.upgrade() else { return };
        // The error is recorded in the link's state; an attempt reports it.
        let _ = link.channel("").await;
    }
}

impl Link {
    /// A connected confirm-mode channel for publishing to `exchange`: its slot's open one,
    /// or a new channel on the open connection, or a new connection when the backoff
    /// allows; otherwise a retryable error naming the connection and why it is down.
    pub async fn channel(&self, exchange: &str) -> Result<Channel, AttemptError> {
        let slot = crc32fast::hash(exchange.as_bytes()) % CHANNEL_SLOTS;
        let mut s = self.state.lock().await;
        if let Some(ch) = s.channels.get(&slot).filter(|c| c.status().connected()) {
            return Ok(ch.clone());
        }
        s.channels.remove(&slot);
        let connected = s
            .connection
            .as_ref()
            .is_some_and(|c| c.status().connected());
        if !connected {
            if let Some(t) = s.not_before.filter(|t| *t > Instant::now()) {
                let wait = t.saturating_duration_since(Instant::now());
                return Err(AttemptError::retry(
                    ErrorKind::Connect,
                    format!(
                        "connect: rabbitmq connection {} is down ({}); next try in {} ms",
                        self.name,
                        s.last_error,
                        wait.as_millis()
                    ),
                ));
            }
            s.connection = None;
            s.channels.clear();
            match tokio::time::timeout(connections::CONNECT_TIMEOUT, self.connect()).await {
                Ok(Ok(c)) => {
                    s.connection = Some(c);
                    s.failures = 0;
                    s.not_before = None;
                    connections::set_state(&self.name, Ok(()));
                }
                Ok(Err(e)) => return Err(self.failed(&mut s, e)),
                Err(_) => return Err(self.failed(&mut s, "connect timed out".into())),
            }
        }
        let Some(conn) = s.connection.as_ref() else {
            return Err(self.failed(&mut s, "no connection".into()));
        };
        let made = async {
            let ch = conn.create_channel().await?;
            ch.confirm_select(ConfirmSelectOptions::default()).await?;
            Ok::<Channel, lapin::Error>(ch)
        };
        match made.await {
            Ok(ch) => {
                s.channels.insert(slot, ch.clone());
                Ok(ch)
            }
            Err(e) => Err(AttemptError::retry(
                ErrorKind::Connect,
                format!("connect: rabbitmq channel on {}: {e}", self.name),
            )),
        }
    }

    /// Record a failed connection attempt: state down, the next one after the backoff.
    fn failed(&self, s: &mut LinkState, why: String) -> AttemptError {
        s.connection = None;
        s.channels.clear();
        s.not_before = Some(Instant::now() + connections::backoff(s.failures));
        s.failures = s.failures.saturating_add(1);
        s.last_error = super::truncate(why, 300);
        connections::set_state(&self.name, Err(&s.last_error));
        AttemptError::retry(
            ErrorKind::Connect,
            format!(
                "connect: rabbitmq connection {}: {}",
                self.name, s.last_error
            ),
        )
    }

    /// Open the AMQP connection: the URL's host, port and vhost, the credentials resolved
    /// from the operator's references (never written into a URL), the heartbeat, a private
    /// CA when configured; lapin driven by tokio.
    async fn connect(&self) -> Result<Connection, String> {
        let name = &self.name;
        let mut uri: lapin::uri::AMQPUri = self.conn.url.parse()?;
        // lapin takes only a domain as the host; an IP literal would become "localhost".
        let parsed = url::Url::parse(&self.conn.url).map_err(|e| e.to_string())?;
        if let Some(host) = parsed.host_str() {
            uri.authority.host = host.trim_start_matches('[').trim_end_matches(']').into();
        }
        let user =
            connections::resolve_credential(name, "username", self.conn.username.as_deref())?;
        let pass =
            connections::resolve_credential(name, "password", self.conn.password.as_deref())?;
        if let Some(user) = user {
            uri.authority.userinfo.username = user;
            uri.authority.userinfo.password = pass.unwrap_or_default();
        }
        uri.query.heartbeat = Some(HEARTBEAT_SECS);
        let props = ConnectionProperties::default()
            .with_connection_name("ankusa".into())
            .with_executor(tokio_executor_trait::Tokio::current())
            .with_reactor(tokio_reactor_trait::Tokio);
        let tls = lapin::tcp::OwnedTLSConfig {
            identity: None,
            cert_chain: match &self.conn.tls_ca_file {
                Some(f) => Some(
                    std::fs::read_to_string(f)
                        .map_err(|e| format!("tls_ca_file {f}: {}", e.kind()))?,
                ),
                None => None,
            },
        };
        let c = Connection::connect_uri_with_config(uri, props, tls)
            .await
            .map_err(|e| e.to_string())?;
        let label = name.clone();
        c.on_error(move |e| connections::set_state(&label, Err(&e.to_string())));
        Ok(c)
    }
}

/// One attempt: check the tenant may use the connection, build the message, publish and
/// wait for the confirm.
async fn publish(
    clients: &RabbitClients,
    edge: &EdgePolicy,
    opts: &RabbitOpts,
    d: &Delivery,
) -> Result<(), AttemptError> {
    let conn = check_use(edge, Some(&d.tenant), &opts.connection, MODULE.name)
        .map_err(|e| AttemptError::permanent(ErrorKind::Other, format!("rabbitmq: {e}")))?;
    let headers = message_headers(d)?;
    let content_type = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.clone());
    let mut table = FieldTable::default();
    for (k, v) in headers {
        table.insert(
            ShortString::from(k),
            AMQPValue::LongString(LongString::from(v)),
        );
    }
    let mut props = BasicProperties::default()
        .with_message_id(ShortString::from(d.message_id.clone()))
        .with_app_id(ShortString::from("ankusa"))
        .with_delivery_mode(2)
        .with_timestamp(u64::try_from(d.committed_at_ms / 1000).unwrap_or(0))
        .with_headers(table);
    if let Some(ct) = content_type.filter(|c| c.len() <= MAX_NAME_BYTES) {
        props = props.with_content_type(ShortString::from(ct));
    }
    let link = clients.link(&opts.connection, conn);
    let channel = link.channel(&opts.exchange).await?;
    let options = BasicPublishOptions {
        mandatory: opts.mandatory,
        ..BasicPublishOptions::default()
    };
    let confirm = channel
        .basic_publish(&opts.exchange, &opts.routing_key, options, &d.body, props)
        .await
        .map_err(|e| lost(&opts.connection, &e))?;
    let confirmation = confirm.await.map_err(|e| lost(&opts.connection, &e))?;
    outcome(&opts.exchange, &opts.routing_key, confirmation)
}

/// A publish or its confirm failed on the channel or the connection: retry.
fn lost(connection: &str, e: &lapin::Error) -> AttemptError {
    AttemptError::retry(
        ErrorKind::Transport,
        super::truncate(format!("transport: rabbitmq ({connection}): {e}"), 400),
    )
}

/// What the broker's answer to a publish means: an ack without a returned message is
/// `ok`; a returned (unroutable) message, a nack, or no confirm at all retry.
pub fn outcome(exchange: &str, routing_key: &str, c: Confirmation) -> Result<(), AttemptError> {
    match c {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(ret)) | Confirmation::Nack(Some(ret)) => Err(AttemptError::retry(
            ErrorKind::Other,
            format!(
                "rabbitmq: unroutable: exchange {exchange:?} routing key {routing_key:?} \
                 returned it ({} {})",
                ret.reply_code, ret.reply_text
            ),
        )),
        Confirmation::Nack(None) => Err(AttemptError::retry(
            ErrorKind::Other,
            "rabbitmq: the broker nacked the message",
        )),
        Confirmation::NotRequested => Err(AttemptError::retry(
            ErrorKind::Other,
            "rabbitmq: the channel is not in confirm mode",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> Result<RabbitOpts, String> {
        RabbitOpts::from_opts(v.as_object().expect("object"))
    }

    #[test]
    fn options_are_checked_and_name_the_bad_field() {
        let o = parse(serde_json::json!({"connection": "bus", "exchange": "events"})).unwrap();
        assert_eq!(o.routing_key, "");
        assert!(!o.mandatory);
        assert!(parse(serde_json::json!({"connection": "bus", "exchange": ""})).is_ok());
        let e = parse(serde_json::json!({"connection": "bus", "exchange": "a b"})).unwrap_err();
        assert!(e.starts_with("exchange: "), "{e}");
        let e =
            parse(serde_json::json!({"connection": "bus", "exchange": "x", "routing_key": "a\nb"}))
                .unwrap_err();
        assert!(e.starts_with("routing_key: "), "{e}");
        let e = parse(serde_json::json!({"connection": "bus"})).unwrap_err();
        assert!(e.contains("exchange"), "{e}");
        let e = parse(serde_json::json!({"connection": "bus", "exchange": "x", "url": "amqp://x"}))
            .unwrap_err();
        assert!(e.contains("url"), "{e}");
    }

    #[test]
    fn only_a_plain_ack_delivers() {
        assert!(outcome("x", "k", Confirmation::Ack(None)).is_ok());
        for c in [Confirmation::Nack(None), Confirmation::NotRequested] {
            assert_eq!(outcome("x", "k", c).unwrap_err().outcome(), "retry");
        }
    }
}
