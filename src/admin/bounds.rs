//! What one client may hold of the admin listener: a deadline on every request's body, and
//! connection slots per client address.
//!
//! hyper's header timeout ends once a request's head is in; a client that then sends its body
//! slowly, or never, would hold its connection (one of `admin.max_connections`) for as long
//! as it likes, on any route, before any check — login forms included. [`body_deadline`]
//! gives every body `admin.request_timeout_ms` from the head: past it the body reads as an
//! error, the handler answers, and the connection closes. [`ClientSlots`] caps the slots one
//! address holds (`admin.max_connections_per_client`), so one client cannot take them all and
//! `/healthz`, `/readyz`, `/metrics` and ingest keep answering everyone else.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::HashMap;
use std::future::Future as _;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use super::AdminState;

/// The error a body reads as once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within admin.request_timeout_ms = {ms} ms")]
pub struct BodyTimeout {
    /// The deadline, in ms.
    pub ms: u128,
}

/// A request body that fails with [`BodyTimeout`] once `deadline` passes.
struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    ms: u128,
    done: bool,
}

impl http_body::Body for DeadlineBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame),
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.done = true;
                    let ms = self.ms;
                    Poll::Ready(Some(Err(axum::Error::new(BodyTimeout { ms }))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware of every route: the body must arrive within `admin.request_timeout_ms` of the
/// head. A body already complete (no body, or a GET) costs nothing.
pub(crate) async fn body_deadline(
    State(st): State<AdminState>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let body = if http_body::Body::is_end_stream(&body) {
        body
    } else {
        Body::new(DeadlineBody {
            inner: body,
            sleep: Box::pin(tokio::time::sleep(st.request_timeout)),
            ms: st.request_timeout.as_millis(),
            done: false,
        })
    };
    next.run(Request::from_parts(parts, body)).await
}

/// Whether `e` (or an error it wraps) is a [`BodyTimeout`].
pub fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<BodyTimeout>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Connection slots held per client address, at most `per_client` each.
#[derive(Debug, Clone)]
pub struct ClientSlots {
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
    per_client: usize,
}

/// One slot of one address; given back on drop.
#[derive(Debug)]
pub struct ClientSlot {
    slots: ClientSlots,
    ip: IpAddr,
}

impl ClientSlots {
    /// Slots of at most `per_client` connections per address (0: no per-address bound).
    pub fn new(per_client: usize) -> ClientSlots {
        ClientSlots {
            held: Arc::new(Mutex::new(HashMap::new())),
            per_client,
        }
    }

    /// A slot for `ip`, or `None` while it holds `per_client` already.
    pub fn take(&self, ip: IpAddr) -> Option<ClientSlot> {
        let ip = canonical(ip);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(ip).or_insert(0);
        if self.per_client > 0 && *n >= self.per_client {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            slots: self.clone(),
            ip,
        })
    }

    /// Addresses holding a slot now.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// An IPv4 address mapped into IPv6 counts as itself.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_share_and_gets_it_back() {
        let slots = ClientSlots::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "::ffff:10.0.0.2".parse().unwrap();
        let one = slots.take(a).expect("first");
        let two = slots.take(a).expect("second");
        assert!(slots.take(a).is_none(), "a third slot for one address");
        assert!(slots.take(b).is_some(), "another address is not held back");
        drop(one);
        let _three = slots.take(a).expect("a slot given back is taken again");
        drop(two);
        assert_eq!(slots.clients(), 1);
        assert!(ClientSlots::new(0).take(a).is_some());
    }
}
