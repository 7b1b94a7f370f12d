//! The receiver's own tests: behaviours, books and shutdown.

use std::io::{Read, Write};
use std::net::TcpStream;

use super::*;

/// Generous bound for anything that should happen at once.
const PATIENCE: Duration = Duration::from_secs(10);

/// Writes one HTTP/1.1 request by hand (so the body can be any bytes) and returns the
/// open connection without reading the answer.
fn send(port: u16, path: &str, headers: &[(&str, &str)], body: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut head = format!(
        "POST /{path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head += &format!("{name}: {value}\r\n");
    }
    stream.write_all(format!("{head}\r\n").as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    stream
}

/// Sends a request and reads the whole answer: its status and its raw text.
fn call(port: u16, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let mut answer = Vec::new();
    send(port, path, headers, body)
        .read_to_end(&mut answer)
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    (answer[9..12].parse().unwrap(), answer)
}

#[test]
fn records_the_exact_sha256_of_a_non_utf8_body() {
    let receiver = Receiver::start_with(ReceiverOptions {
        record_bodies: true,
        ..ReceiverOptions::default()
    })
    .unwrap();
    let body = [0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28, b'\n'];
    let (status, answer) = call(
        receiver.port(),
        "hooks/a/b?x=1",
        &[("X-Hook-Id", "h1")],
        &body,
    );
    assert_eq!(status, 200);
    assert!(answer.ends_with("ok"), "{answer}");
    let got = receiver.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body_sha256, hex::encode(Sha256::digest(body)));
    assert_eq!(
        (got[0].body_len, got[0].body.as_deref()),
        (body.len(), Some(&body[..]))
    );
    assert_eq!(
        (got[0].path.as_str(), got[0].method.as_str(), got[0].status),
        ("hooks/a/b", "POST", 200)
    );
    assert_eq!(got[0].header("x-hook-id"), Some("h1"));
    assert!(got[0]
        .headers
        .contains(&("x-hook-id".to_owned(), "h1".to_owned())));
    assert_eq!(
        receiver.url("hooks/a/b"),
        format!("http://127.0.0.1:{}/hooks/a/b", receiver.port())
    );
}

#[test]
fn bodies_are_not_kept_unless_asked() {
    let receiver = Receiver::start().unwrap();
    call(receiver.port(), "a", &[], b"{}");
    assert_eq!(receiver.requests()[0].body, None);
}

#[test]
fn a_sequence_answers_500_then_200() {
    let receiver = Receiver::start().unwrap();
    receiver.set(
        "flaky",
        Behavior::Sequence(vec![Reply::status(500)
            .header("Retry-After", "7")
            .body("down")]),
    );
    let (first, text) = call(receiver.port(), "flaky", &[], b"");
    assert_eq!(first, 500);
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 7") && text.ends_with("down"),
        "{text}"
    );
    assert_eq!(call(receiver.port(), "flaky", &[], b"").0, 200);
    let statuses: Vec<u16> = receiver
        .requests_for("/flaky")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [500, 200]);
}

#[test]
fn a_redirect_answers_302_with_its_location() {
    let receiver = Receiver::start().unwrap();
    receiver.set(
        "old",
        Behavior::Redirect {
            status: 302,
            location: "http://example.test/new".into(),
        },
    );
    let (status, text) = call(receiver.port(), "old", &[], b"");
    assert_eq!(status, 302);
    assert!(
        text.to_ascii_lowercase()
            .contains("location: http://example.test/new"),
        "{text}"
    );
}

#[test]
fn status_and_fail_fraction_answer_their_status() {
    let receiver = Receiver::start().unwrap();
    receiver.set("gone", Behavior::Status(410));
    receiver.set(
        "always",
        Behavior::FailFraction {
            status: 503,
            fraction: 1.0,
            seed: 1,
        },
    );
    receiver.set(
        "never",
        Behavior::FailFraction {
            status: 503,
            fraction: 0.0,
            seed: 1,
        },
    );
    assert_eq!(call(receiver.port(), "gone", &[], b"").0, 410);
    assert_eq!(call(receiver.port(), "always", &[], b"x").0, 503);
    assert_eq!(call(receiver.port(), "never", &[], b"x").0, 200);
}

#[test]
fn fail_fraction_is_reproducible_and_close_to_its_fraction() {
    let statuses = || {
        let receiver = Receiver::start().unwrap();
        receiver.set(
            "half",
            Behavior::FailFraction {
                status: 500,
                fraction: 0.5,
                seed: 42,
            },
        );
        (0..200)
            .map(|i| {
                call(
                    receiver.port(),
                    "half",
                    &[],
                    format!("body {}", i % 20).as_bytes(),
                )
                .0
            })
            .collect::<Vec<_>>()
    };
    let first = statuses();
    assert_eq!(first, statuses());
    let failed = first.iter().filter(|&&s| s == 500).count();
    assert!((60..=140).contains(&failed), "{failed} of 200 failed");
}

#[test]
fn a_hanging_endpoint_does_not_block_requests_on_another_path() {
    let receiver = Receiver::start().unwrap(); // one worker thread
    receiver.set("stuck", Behavior::Hang);
    let _hanging: Vec<TcpStream> = (0..20)
        .map(|_| send(receiver.port(), "stuck", &[], b""))
        .collect();
    assert!(receiver.wait_until(PATIENCE, |r| r.len() == 20));
    assert_eq!(call(receiver.port(), "fine", &[], b"").0, 200);
    assert_eq!(receiver.max_concurrency("stuck"), 20);
    assert!(receiver.requests_for("stuck").iter().all(|r| r.status == 0));
}

#[test]
fn dropping_the_receiver_closes_hanging_and_trickling_connections() {
    let receiver = Receiver::start().unwrap();
    receiver.set("stuck", Behavior::Hang);
    receiver.set("slow", Behavior::Trickle { interval_ms: 1 });
    let mut stuck = send(receiver.port(), "stuck", &[], b"");
    let mut slow = send(receiver.port(), "slow", &[], b"");
    assert!(receiver.wait_until(PATIENCE, |r| r.len() == 2));
    drop(receiver);
    let mut sink = Vec::new();
    assert!(stuck.read_to_end(&mut sink).is_ok_and(|n| n == 0));
    // The trickle ends mid-body: the connection closes rather than timing out.
    let closed = slow.read_to_end(&mut sink);
    assert!(
        closed
            .as_ref()
            .map_or_else(|e| e.kind() != io::ErrorKind::WouldBlock, |_| true),
        "{closed:?}"
    );
}

#[test]
fn a_trickle_sends_headers_then_one_byte_at_a_time() {
    let receiver = Receiver::start().unwrap();
    receiver.set("slow", Behavior::Trickle { interval_ms: 1 });
    let mut stream = send(receiver.port(), "slow", &[], b"");
    let mut seen = Vec::new();
    let mut chunk = [0; 64];
    while seen.iter().filter(|&&b| b == b'.').count() < 3 {
        let n = stream.read(&mut chunk).unwrap();
        assert_ne!(n, 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&seen);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.contains("\r\n1\r\n.\r\n"),
        "{text}"
    );
    assert_eq!(receiver.requests_for("slow")[0].status, 200);
}

#[test]
fn max_concurrency_counts_overlapping_delay_requests() {
    let receiver = Receiver::start().unwrap();
    call(receiver.port(), "quick", &[], b"");
    call(receiver.port(), "quick", &[], b"");
    // A minute-long delay keeps all three in progress until the receiver is dropped.
    receiver.set("slow", Behavior::Delay { ms: 60_000 });
    let _slow: Vec<TcpStream> = (0..3)
        .map(|_| send(receiver.port(), "slow", &[], b""))
        .collect();
    assert!(receiver.wait_until(PATIENCE, |r| r.len() == 5));
    assert_eq!(
        (
            receiver.max_concurrency("slow"),
            receiver.max_concurrency("quick")
        ),
        (3, 1)
    );
    assert_eq!(receiver.max_concurrency("never-called"), 0);
}

#[test]
fn header_counts_reveal_duplicates_and_clear_forgets_them() {
    let receiver = Receiver::start().unwrap();
    for id in ["a", "a", "b"] {
        call(receiver.port(), "h", &[("Idempotency-Key", id)], b"");
    }
    let counts = receiver.header_counts("idempotency-key");
    assert_eq!(
        counts,
        HashMap::from([("a".to_owned(), 2), ("b".to_owned(), 1)])
    );
    receiver.clear();
    assert_eq!((receiver.count(), receiver.count_for("h")), (0, 0));
}

#[test]
fn wait_until_returns_true_once_n_requests_arrived_and_false_on_timeout() {
    let receiver = Receiver::start().unwrap();
    let port = receiver.port();
    let sender = std::thread::spawn(move || (0..3).for_each(|_| drop(call(port, "x", &[], b""))));
    assert!(receiver.wait_until(PATIENCE, |r| r.len() >= 3));
    assert!(!receiver.wait_until(Duration::from_millis(50), |r| r.len() >= 4));
    sender.join().unwrap();
    assert_eq!(receiver.count_for("x"), 3);
}

#[tokio::test]
async fn wait_until_async_wakes_a_current_thread_runtime() {
    let receiver = Receiver::start().unwrap();
    let port = receiver.port();
    let sender = std::thread::spawn(move || (0..2).for_each(|_| drop(call(port, "x", &[], b""))));
    assert!(receiver.wait_until_async(PATIENCE, |r| r.len() >= 2).await);
    assert!(
        !receiver
            .wait_until_async(Duration::from_millis(50), |r| r.len() >= 3)
            .await
    );
    sender.join().unwrap();
}
