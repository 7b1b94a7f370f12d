//! The operator's broker connections (`[connections.<name>]`): what the `nats` and
//! `rabbitmq` sinks share.
//!
//! A tenant's broker entry names a connection, never an address, so a tenant reaches only
//! the brokers the operator wrote down, with the operator's credentials, and only the
//! connections that list it in `tenants` ([`check_use`], at `source put` and again at every
//! attempt). Each connection is opened once per worker process (at start when the worker
//! runs in a tokio runtime, else on first use) and shared by every entry naming it; the
//! broker modules reconnect it with backoff. Its state is the `ankusa_connection_up`
//! gauge (1 up, 0 down, label `connection`) and a `/readyz` detail ([`states`]): a broker
//! being down is never a liveness failure, since restarting the worker would not bring it
//! back, and not a readiness failure either, since the worker still ingests and delivers to
//! every other sink.
//!
//! Also here: the headers a broker message carries ([`message_headers`]), the same for
//! NATS and AMQP, mirroring the attributes of the SQS and Pub/Sub sinks.

use super::{header_pairs, is_reserved_header, AttemptError, Delivery, EdgePolicy, ErrorKind};
use crate::config::ConnectionConfig;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// The gauge of a connection's state: 1 while connected, 0 while not.
pub const UP_GAUGE: &str = "ankusa_connection_up";

/// The first wait before reconnecting a lost connection; it doubles after each failure
/// up to [`RECONNECT_MAX`].
pub const RECONNECT_MIN: Duration = Duration::from_millis(250);

/// The longest wait between two reconnection attempts.
pub const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// The longest a connection attempt (TCP, TLS, the broker's handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The state of every connection this process opened, by name: `"up"` or `"down: <why>"`.
static STATES: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// The connection `name` of `edge` that `tenant` may use from a `module` entry (`nats`
/// or `rabbitmq`); the error names the `connection` option. An unknown connection and one
/// the tenant may not use get the same answer, so a tenant cannot probe for the names of
/// other tenants' connections; the operator sees which in the config.
pub fn check_use<'a>(
    edge: &'a EdgePolicy,
    tenant: Option<&str>,
    name: &str,
    module: &str,
) -> Result<&'a ConnectionConfig, String> {
    let refused = || {
        format!(
            "connection: no connection {name:?} this tenant may use (the operator's \
             [connections.<name>] listing the tenant in its tenants)"
        )
    };
    let conn = edge.connections.get(name).ok_or_else(refused)?;
    match tenant {
        Some(t) if conn.allows(t) => {}
        _ => return Err(refused()),
    }
    if conn.broker() != Some(module) {
        return Err(format!(
            "connection: {name:?} is not a {module} connection (its url's scheme is for \
             another broker)"
        ));
    }
    Ok(conn)
}

/// The `connection` name written in an entry: 1..=64 characters of `[a-z0-9_-]`, like the
/// config's section names; the error names the option.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    match ok {
        true => Ok(()),
        false => Err("connection: must match [a-z0-9_-]{1,64}".into()),
    }
}

/// Record connection `name`'s state: `Ok` connected, `Err(why)` not (gauge and `/readyz`).
pub fn set_state(name: &str, state: Result<(), &str>) {
    let up = state.is_ok();
    metrics::gauge!(UP_GAUGE, "connection" => name.to_string()).set(if up { 1.0 } else { 0.0 });
    let text = match state {
        Ok(()) => "up".to_string(),
        Err(why) => super::truncate(format!("down: {why}"), 300),
    };
    STATES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(name.to_string(), text);
}

/// The state of every connection this process opened, by name: `"up"` or `"down: <why>"`
/// (the `/readyz` detail). Empty when no connection was opened.
pub fn states() -> BTreeMap<String, String> {
    STATES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// A connection's credential (`username`, `password`, `token`) with its secret references
/// resolved in the worker's own environment and files (the config is the operator's).
pub fn resolve_credential(
    name: &str,
    field: &str,
    v: Option<&str>,
) -> Result<Option<String>, String> {
    v.map(|v| {
        crate::secrets::resolve_operator(v).map_err(|e| format!("connections.{name}.{field}: {e}"))
    })
    .transpose()
}

/// The wait before the reconnection attempt after `failures` failed ones in a row:
/// [`RECONNECT_MIN`] doubled per failure, at most [`RECONNECT_MAX`].
pub fn backoff(failures: u32) -> Duration {
    RECONNECT_MIN
        .saturating_mul(1u32 << failures.min(16))
        .min(RECONNECT_MAX)
}

/// The headers of one broker message, as `(name, value)` pairs in the order sent: the
/// producer's headers (string values, framing and `webhook-*`/`ankusa-*` names left out),
/// then the delivery's own ([`super::delivery_headers`]), which replace a producer header
/// of the same name. A header name must be 1..=255 bytes of visible
/// ASCII without `:`, a value must hold no CR, LF or NUL: anything else fails the attempt
/// for good (retrying cannot change the hook's headers).
pub fn message_headers(d: &Delivery) -> Result<Vec<(String, String)>, AttemptError> {
    let own = super::delivery_headers(d);
    let mut out: Vec<(String, String)> = header_pairs(&d.headers)
        .into_iter()
        .filter(|(k, _)| {
            !is_reserved_header(k) && !own.iter().any(|(o, _)| o.eq_ignore_ascii_case(k))
        })
        .collect();
    out.extend(own.into_iter().map(|(k, v)| (k.to_string(), v)));
    for (k, v) in &out {
        let name_ok =
            (1..=255).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic() && b != b':');
        if !name_ok {
            return Err(AttemptError::permanent(
                ErrorKind::InvalidHeaders,
                format!(
                    "invalid hook headers: name {:?} cannot be a broker header",
                    super::truncate(k.clone(), 64)
                ),
            ));
        }
        if v.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(AttemptError::permanent(
                ErrorKind::InvalidHeaders,
                format!("invalid hook headers: the value of {k:?} holds CR, LF or NUL"),
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn edge(tenants: &[&str], url: &str) -> EdgePolicy {
        let conn = ConnectionConfig {
            url: url.into(),
            tenants: tenants.iter().map(|t| t.to_string()).collect(),
            ..ConnectionConfig::default()
        };
        EdgePolicy {
            connections: Arc::new(BTreeMap::from([("bus".to_string(), conn)])),
            ..EdgePolicy::default()
        }
    }

    #[test]
    fn only_listed_tenants_use_a_connection_and_unknown_reads_like_forbidden() {
        let e = edge(&["acme"], "nats://127.0.0.1:4222");
        assert!(check_use(&e, Some("acme"), "bus", "nats").is_ok());
        let forbidden = check_use(&e, Some("globex"), "bus", "nats").unwrap_err();
        let unknown = check_use(&e, Some("acme"), "other", "nats")
            .unwrap_err()
            .replace("\"other\"", "\"bus\"");
        assert_eq!(forbidden, unknown);
        assert!(forbidden.starts_with("connection: "));
        assert!(check_use(&e, None, "bus", "nats").is_err());
        let wrong = check_use(&e, Some("acme"), "bus", "rabbitmq").unwrap_err();
        assert!(wrong.contains("not a rabbitmq connection"), "{wrong}");
        let all = edge(&["*"], "amqp://127.0.0.1");
        assert!(check_use(&all, Some("anyone"), "bus", "rabbitmq").is_ok());
    }

    #[test]
    fn backoff_doubles_to_its_cap() {
        assert_eq!(backoff(0), RECONNECT_MIN);
        assert_eq!(backoff(1), RECONNECT_MIN * 2);
        assert_eq!(backoff(40), RECONNECT_MAX);
    }

    #[test]
    fn delivery_headers_replace_the_producers_and_refuse_bad_ones() {
        let mut d = Delivery {
            tenant: "acme".into(),
            source: "gh".into(),
            row: "7.0".into(),
            message_id: "msg_x_7.0".into(),
            hook: 7,
            attempt: 2,
            body: bytes::Bytes::from_static(b"{}"),
            headers: r#"{"x-github-event":"push","webhook-id":"forged","Ankusa-Tenant":"evil"}"#
                .into(),
            committed_at_ms: 0,
            event_type: Some("push".into()),
            traceparent: None,
            at_ms: None,
        };
        let h = message_headers(&d).unwrap();
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("x-github-event"), Some("push"));
        assert_eq!(get("webhook-id"), Some("msg_x_7.0"));
        assert_eq!(get("ankusa-tenant"), Some("acme"));
        assert!(!h.iter().any(|(_, v)| v == "forged" || v == "evil"));
        d.headers = r#"{"x-bad":"a\r\nb"}"#.into();
        assert_eq!(
            message_headers(&d).unwrap_err().kind(),
            ErrorKind::InvalidHeaders
        );
    }
}
