//! The NATS JetStream sink (`"module": "nats"`): one JetStream publish per row
//! through an operator connection ([`super::connections`]); the stream's publish ack is the
//! delivery.
//!
//! Options: `connection` (the name of a `[connections.<name>]` with a `nats://` or `tls://`
//! URL that lists the tenant) and `subject` (where to publish; a stream must capture it).
//!
//! The message: the body as committed, the headers of [`super::connections::message_headers`]
//! as NATS headers, and `Nats-Msg-Id` = the row's `webhook-id` (the same on every attempt
//! and unique across instances), so JetStream drops the duplicate a retry makes within the
//! stream's duplicate window (2 minutes by default) — a worker killed between the publish
//! and its settle publishes again, and the stream keeps one copy.
//!
//! Outcomes: an ack is `ok` (a duplicate's ack too: the stream holds the message);
//! every failure retries: no ack within the JetStream timeout, a lost connection, a stream
//! error, and "no stream captures the subject" (NATS answers no responders). That last
//! one retries rather than dead-letters because it is an operator's set-up race (the stream
//! created after the source), which the retry horizon bounds anyway. Only what retrying
//! cannot change fails for good: headers NATS cannot carry, a message over the server's
//! `max_payload`, a connection the tenant may no longer use.

mod entry;

pub use entry::MODULE;

use super::connections::{self, check_use, message_headers};
use super::{AttemptError, Delivery, EdgePolicy, ErrorKind};
use crate::config::ConnectionConfig;
use async_nats::jetstream;
use serde::Deserialize;
use std::collections::HashMap;

/// The longest subject an entry may name, bytes.
pub const MAX_SUBJECT_BYTES: usize = 255;

/// Options of a `nats` sink entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsOpts {
    /// The operator's connection to publish through (`[connections.<name>]`).
    pub connection: String,
    /// The subject to publish to: tokens of visible ASCII separated by `.`, no wildcard
    /// (`*`, `>`), not a system subject (`$…`, `_INBOX…`: a tenant must not reach the
    /// JetStream API through its entry), at most [`MAX_SUBJECT_BYTES`].
    pub subject: String,
}

impl NatsOpts {
    /// Parse and check an entry's options (syntax only); the error names the option.
    pub fn from_opts(opts: &serde_json::Map<String, serde_json::Value>) -> Result<Self, String> {
        let o: NatsOpts = serde_json::from_value(serde_json::Value::Object(opts.clone()))
            .map_err(|e| e.to_string())?;
        connections::check_name(&o.connection)?;
        check_subject(&o.subject).map_err(|e| format!("subject: {e}"))?;
        Ok(o)
    }
}

/// Why `s` cannot be a publish subject, or `Ok`.
pub fn check_subject(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_SUBJECT_BYTES {
        return Err(format!("must be 1..={MAX_SUBJECT_BYTES} bytes"));
    }
    if let Some(b) = s.bytes().find(|b| !b.is_ascii_graphic()) {
        return Err(format!(
            "holds byte 0x{b:02x}; only visible ASCII (no spaces or control characters)"
        ));
    }
    if s.starts_with('$') || s.starts_with("_INBOX") {
        return Err("system subjects ($..., _INBOX...) are refused".into());
    }
    for token in s.split('.') {
        if token.is_empty() {
            return Err("has an empty token (a leading, trailing or doubled '.')".into());
        }
        if token == "*" || token == ">" {
            return Err("a publish subject has no wildcards (* or >)".into());
        }
    }
    Ok(())
}

/// The NATS clients of a worker process, one per connection name, made on first use
/// (or at start, [`MODULE`]'s warm hook) and reconnected by the client itself.
#[derive(Debug, Default)]
pub struct NatsClients {
    /// Held while a client is made, so two first uses make one client (opening returns at
    /// once: the client connects in the background).
    clients: tokio::sync::Mutex<HashMap<String, jetstream::Context>>,
}

impl NatsClients {
    /// The JetStream context over the client of connection `name` (configured as `conn`),
    /// made now if it is not yet: one per connection, since a context runs its own task
    /// awaiting publish acks.
    /// The client connects in the background and reconnects for ever, waiting
    /// [`connections::backoff`] between tries; its events keep the connection's state
    /// ([`connections::set_state`]). The error is a credential that cannot be resolved or
    /// a CA file that cannot be used (tried again on the next use).
    pub async fn client(
        &self,
        name: &str,
        conn: &ConnectionConfig,
    ) -> Result<jetstream::Context, String> {
        let mut clients = self.clients.lock().await;
        if let Some(c) = clients.get(name) {
            return Ok(c.clone());
        }
        let js = jetstream::new(open(name, conn).await?);
        clients.insert(name.to_string(), js.clone());
        Ok(js)
    }
}

/// Open connection `name`: credentials resolved, TLS roots added, connecting in the
/// background (`retry_on_initial_connect`), so a broker down at start delays deliveries,
/// not the worker.
async fn open(name: &str, conn: &ConnectionConfig) -> Result<async_nats::Client, String> {
    let mut o = async_nats::ConnectOptions::new()
        .name("ankusa")
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(connections::CONNECT_TIMEOUT)
        .reconnect_delay_callback(|failures| {
            connections::backoff(u32::try_from(failures).unwrap_or(u32::MAX))
        });
    let user = connections::resolve_credential(name, "username", conn.username.as_deref())?;
    let pass = connections::resolve_credential(name, "password", conn.password.as_deref())?;
    if let Some(user) = user {
        o = o.user_and_password(user, pass.unwrap_or_default());
    }
    if let Some(token) = connections::resolve_credential(name, "token", conn.token.as_deref())? {
        o = o.token(token);
    }
    if conn.url.starts_with("tls://") {
        o = o.require_tls(true);
    }
    if let Some(ca) = &conn.tls_ca_file {
        o = o.add_root_certificates(ca.into());
    }
    let label = name.to_string();
    o = o.event_callback(move |event| {
        let label = label.clone();
        async move {
            match event {
                async_nats::Event::Connected => connections::set_state(&label, Ok(())),
                async_nats::Event::Disconnected => {
                    connections::set_state(&label, Err("disconnected, reconnecting"))
                }
                async_nats::Event::Closed => connections::set_state(&label, Err("closed")),
                _ => {}
            }
        }
    });
    connections::set_state(name, Err("connecting"));
    o.connect(conn.url.as_str())
        .await
        .map_err(|e| format!("connections.{name}: {e}"))
}

/// One attempt: check the tenant may use the connection, build the headers, publish and
/// wait for the stream's ack.
async fn publish(
    clients: &NatsClients,
    edge: &EdgePolicy,
    opts: &NatsOpts,
    d: &Delivery,
) -> Result<(), AttemptError> {
    let conn = check_use(edge, Some(&d.tenant), &opts.connection, MODULE.name)
        .map_err(|e| AttemptError::permanent(ErrorKind::Other, format!("nats: {e}")))?;
    let mut headers = async_nats::HeaderMap::new();
    for (k, v) in message_headers(d)? {
        headers.insert(k.as_str(), v.as_str());
    }
    headers.insert(async_nats::header::NATS_MESSAGE_ID, d.message_id.as_str());
    let js = clients
        .client(&opts.connection, conn)
        .await
        .map_err(|e| AttemptError::retry(ErrorKind::Connect, format!("connect: nats {e}")))?;
    let max = js.client().server_info().max_payload;
    if max > 0 && d.body.len() > max {
        return Err(AttemptError::permanent(
            ErrorKind::Other,
            format!(
                "nats: the body is {} bytes, over the server's max_payload of {max}",
                d.body.len()
            ),
        ));
    }
    let ack = js
        .publish_with_headers(opts.subject.clone(), headers, d.body.clone())
        .await
        .map_err(|e| classify(&opts.subject, e.kind(), &e.to_string()))?;
    ack.await
        .map(drop)
        .map_err(|e| classify(&opts.subject, e.kind(), &e.to_string()))
}

/// What a failed publish means: every kind retries; the error says what happened.
pub fn classify(
    subject: &str,
    kind: jetstream::context::PublishErrorKind,
    text: &str,
) -> AttemptError {
    use jetstream::context::PublishErrorKind as K;
    let text = super::truncate(text.to_string(), 300);
    match kind {
        K::StreamNotFound => AttemptError::retry(
            ErrorKind::Other,
            format!("nats: no stream captures subject {subject:?} (no responders)"),
        ),
        K::TimedOut => AttemptError::retry(
            ErrorKind::Timeout,
            "timeout: nats: no publish ack from the stream",
        ),
        K::BrokenPipe => AttemptError::retry(
            ErrorKind::Connect,
            format!("connect: nats: connection lost before the ack ({text})"),
        ),
        _ => AttemptError::retry(ErrorKind::Transport, format!("transport: nats: {text}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_plain_publish_subjects() {
        for ok in ["orders", "acme.orders.created", "a-b_c.D9"] {
            assert!(check_subject(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "a..b",
            ".a",
            "a.",
            "a.*",
            "a.>",
            "$JS.API.STREAM.DELETE.x",
            "_INBOX.x",
            "a\r\nPUB x",
        ] {
            assert!(check_subject(bad).is_err(), "{bad:?}");
        }
        assert!(check_subject(&"a".repeat(256)).is_err());
    }

    #[test]
    fn options_name_the_bad_field() {
        let parse = |v: serde_json::Value| {
            NatsOpts::from_opts(v.as_object().expect("object")).map_err(|e| e.to_string())
        };
        let e = parse(serde_json::json!({"connection": "bus", "subject": "a.*"})).unwrap_err();
        assert!(e.starts_with("subject: "), "{e}");
        let e = parse(serde_json::json!({"connection": "Bus!", "subject": "a"})).unwrap_err();
        assert!(e.starts_with("connection: "), "{e}");
        let e = parse(serde_json::json!({"connection": "bus", "subject": "a", "url": "x"}))
            .unwrap_err();
        assert!(e.contains("url"), "{e}");
    }

    #[test]
    fn every_publish_failure_retries() {
        use jetstream::context::PublishErrorKind as K;
        for k in [K::StreamNotFound, K::TimedOut, K::BrokenPipe, K::Other] {
            assert_eq!(classify("s", k, "x").outcome(), "retry");
        }
        let e = classify("acme.orders", K::StreamNotFound, "");
        assert!(format!("{e:?}").contains("no stream captures"));
    }
}
