//! How the receiver answers one request: the plan drawn from its behaviour, and the\ntrickled body of a slow reply.

use super::*;

/// The answer decided on arrival, so that it can be recorded before it is carried out.
pub(super) enum Plan {
    Answer {
        status: StatusCode,
        headers: Vec<(String, String)>,
        body: Bytes,
        delay: Duration,
    },
    Hang,
    Trickle {
        interval: Duration,
    },
}

impl Plan {
    /// The answer of `behavior` to the path's request number `n` (from 0) with body `sha`.
    pub(super) fn new(behavior: &Behavior, n: u64, sha: &[u8; 32]) -> Plan {
        let ok = |delay| Plan::Answer {
            status: StatusCode::OK,
            headers: Vec::new(),
            body: Bytes::from_static(b"ok"),
            delay,
        };
        let bare = |status| Plan::Answer {
            status: status_code(status),
            headers: Vec::new(),
            body: Bytes::new(),
            delay: Duration::ZERO,
        };
        match behavior {
            Behavior::Ok => ok(Duration::ZERO),
            Behavior::Status(status) => bare(*status),
            Behavior::Sequence(replies) => {
                match usize::try_from(n).ok().and_then(|n| replies.get(n)) {
                    Some(reply) => Plan::Answer {
                        status: status_code(reply.status),
                        headers: reply.headers.clone(),
                        body: Bytes::from(reply.body.clone()),
                        delay: Duration::from_millis(reply.delay_ms),
                    },
                    None => ok(Duration::ZERO),
                }
            }
            Behavior::FailFraction {
                status,
                fraction,
                seed,
            } if draw(*seed, sha, n) < *fraction => bare(*status),
            Behavior::FailFraction { .. } => ok(Duration::ZERO),
            Behavior::FailBodies { status, sha256 }
                if sha256.iter().any(|h| *h == hex::encode(sha)) =>
            {
                bare(*status)
            }
            Behavior::FailBodies { .. } => ok(Duration::ZERO),
            Behavior::Hang => Plan::Hang,
            Behavior::Delay { ms } => ok(Duration::from_millis(*ms)),
            Behavior::Trickle { interval_ms } => Plan::Trickle {
                interval: Duration::from_millis((*interval_ms).max(1)),
            },
            Behavior::Redirect { status, location } => Plan::Answer {
                status: status_code(*status),
                headers: vec![("location".to_owned(), location.clone())],
                body: Bytes::new(),
                delay: Duration::ZERO,
            },
        }
    }

    /// The status recorded for this plan (0: never answered).
    pub(super) fn status(&self) -> u16 {
        match self {
            Plan::Answer { status, .. } => status.as_u16(),
            Plan::Hang => 0,
            Plan::Trickle { .. } => 200,
        }
    }

    /// Carries the plan out; the request counts as in progress while `in_flight` lives.
    pub(super) async fn run(self, in_flight: InFlight) -> Response {
        match self {
            Plan::Answer {
                status,
                headers,
                body,
                delay,
            } => {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let response = answer(status, headers, body);
                drop(in_flight);
                response
            }
            Plan::Hang => {
                let _in_flight = in_flight;
                std::future::pending().await
            }
            Plan::Trickle { interval } => {
                let mut ticks = tokio::time::interval(interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let trickle = Trickle {
                    ticks,
                    _in_flight: in_flight,
                };
                Response::new(Body::from_stream(FramedRead::new(
                    trickle,
                    BytesCodec::new(),
                )))
            }
        }
    }
}

/// A response with `status`, the valid ones of `headers` and `body`.
pub(super) fn answer(status: StatusCode, headers: Vec<(String, String)>, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// An endless body yielding one `.` per tick of its interval.
pub(super) struct Trickle {
    pub(super) ticks: tokio::time::Interval,
    pub(super) _in_flight: InFlight,
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.ticks.poll_tick(cx));
        buf.put_slice(b".");
        Poll::Ready(Ok(()))
    }
}

/// `status` as a [`StatusCode`], or 500 if HTTP cannot carry it.
pub(super) fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A path as records and endpoints are keyed: without its leading `/`.
pub(super) fn key(path: &str) -> &str {
    path.strip_prefix('/').unwrap_or(path)
}

/// A uniform draw in [0, 1) from the seed, the body's hash and the request number.
pub(super) fn draw(seed: u64, sha: &[u8; 32], n: u64) -> f64 {
    let [a, b, c, d, e, f, g, h, ..] = *sha;
    let x =
        splitmix64(seed ^ splitmix64(u64::from_le_bytes([a, b, c, d, e, f, g, h]) ^ splitmix64(n)));
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// SplitMix64's finaliser: a cheap, well-mixed 64-bit hash.
pub(super) fn splitmix64(x: u64) -> u64 {
    let x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
