//! Unit tests of the slots: fairness, isolation, caps and their bookkeeping.
use super::*;

#[test]
fn sessions_sharing_a_window_count_against_one_concurrency_and_give_room_back() {
    let shared = Arc::new(SharedWindow::default());
    let mut a = Slots::with_shared(&cfg(2, 10), shared.clone());
    let mut b = Slots::with_shared(&cfg(2, 10), shared.clone());
    push(&mut a, job("x", 0, 0));
    push(&mut a, job("x", 1, 1));
    push(&mut b, job("y", 0, 0));
    assert!(a.next_start().is_some() && a.next_start().is_some());
    let freed = shared.freed();
    assert!(b.next_start().is_none(), "the process's 2 slots are taken");
    a.finished("x", &("x".into(), 0));
    assert!(freed.has_changed().unwrap_or(false), "b is told room freed");
    assert!(b.next_start().is_some());
    assert_eq!((shared.running(), shared.rows()), (2, 3));
    drop(a);
    assert_eq!((shared.running(), shared.rows()), (1, 1));
}

#[test]
fn a_session_that_took_every_slot_gives_the_freed_ones_to_a_waiting_session_up_to_half() {
    let shared = Arc::new(SharedWindow::default());
    let mut a = Slots::with_shared(&cfg(4, 10), shared.clone());
    let mut b = Slots::with_shared(&cfg(4, 10), shared.clone());
    for n in 0..10 {
        push(&mut a, job("x", (n % 5) as u32, n));
        push(&mut b, job("y", (n % 5) as u32, n));
    }
    // Uncontended, a takes the whole process cap.
    let started: Vec<J> = std::iter::from_fn(|| a.next_start()).collect();
    assert_eq!(started.len(), 4);
    assert!(b.next_start().is_none(), "the process's 4 slots are taken");
    assert!(b.wants_slots && a.wants_slots, "both wait for more");
    // Each slot a frees goes to b until both hold their fair share, 2.
    for j in &started {
        a.finished(&j.tenant, &j.key);
        while a.next_start().is_some() || b.next_start().is_some() {}
    }
    assert_eq!((a.running(), b.running()), (2, 2));
    assert_eq!(shared.running(), 4, "the cap is used whole");
}

#[test]
fn a_waiting_session_with_nothing_startable_stops_capping_the_others() {
    let shared = Arc::new(SharedWindow::default());
    let mut a = Slots::with_shared(&cfg(2, 10), shared.clone());
    let mut b = Slots::with_shared(&cfg(2, 10), shared.clone());
    for n in 0..4 {
        push(&mut a, job("x", n as u32, n));
    }
    push(&mut b, job("y", 0, 0));
    let (a0, a1) = (a.next_start().unwrap(), a.next_start().unwrap());
    assert!(b.next_start().is_none());
    assert!(b.wants_slots);
    // b's only job is held back by its gate (a rate limit): it stops waiting when it
    // next asks, and a may use the whole cap again.
    a.finished(&a0.tenant, &a0.key);
    let freed = shared.freed();
    assert!(a.next_start().is_none(), "a is at its share while b waits");
    assert!(b.next_start_gated(|_| false).is_none());
    assert!(!b.wants_slots);
    assert!(
        freed.has_changed().unwrap_or(false),
        "a is told to ask again"
    );
    assert!(a.next_start().is_some());
    a.finished(&a1.tenant, &a1.key);
    drop((a, b));
    assert_eq!(
        shared.wanting_slots(),
        0,
        "a session that ends stops waiting"
    );
}

#[test]
fn claim_room_is_shared_fairly_while_another_session_waits_for_rows() {
    let shared = Arc::new(SharedWindow::default());
    let window = DispatchConfig {
        max_inflight: 100,
        batch: 100,
        ..cfg(10, 10)
    };
    let mut a = Slots::<J>::with_shared(&window, shared.clone());
    let mut b = Slots::<J>::with_shared(&window, shared.clone());
    assert_eq!(a.claim_room(), 100, "uncontended: the whole window");
    for _ in 0..100 {
        a.hold("x", 1);
    }
    assert_eq!(b.claim_room(), 0, "the window is full");
    assert_eq!(shared.wanting_rows(), 1);
    for _ in 0..10 {
        a.settled("x", 1);
    }
    assert_eq!(
        a.claim_room(),
        0,
        "a holds 90, over its share of 50, while b waits"
    );
    assert_eq!(b.claim_room(), 10);
    assert_eq!(shared.wanting_rows(), 1, "b was served; a waits now");
    drop(a);
    assert_eq!(shared.wanting_rows(), 0);
    assert_eq!(b.claim_room(), 100);
}

#[test]
fn a_script_page_shrinks_over_the_budget_and_grows_back_under_it() {
    use std::time::Duration;
    let ms = Duration::from_millis;
    const B: Duration = Duration::from_millis(5);
    // 500 rows took 10 ms: aim at 4 ms -> 200 rows.
    assert_eq!(adapt_page(500, 500, ms(10), 500, B), 200);
    // Within the budget: unchanged; fast with the whole page used: doubled, capped.
    assert_eq!(adapt_page(200, 200, ms(3), 500, B), 200);
    assert_eq!(adapt_page(200, 200, ms(1), 500, B), 400);
    assert_eq!(adapt_page(400, 400, ms(1), 500, B), 500);
    // Fast but the page was not used up: no reason to grow.
    assert_eq!(adapt_page(200, 10, ms(1), 500, B), 200);
    // Never below 16 (nor above max when max is smaller).
    assert_eq!(adapt_page(20, 20, ms(100), 500, B), 16);
    assert_eq!(adapt_page(5, 5, ms(100), 5, B), 5);
    // A smaller budget: the same 10 ms call aims at 0.8 ms -> 40 rows.
    assert_eq!(adapt_page(500, 500, ms(10), 500, ms(1)), 40);
}
use proptest::prelude::*;

#[derive(Debug, Clone, PartialEq)]
struct J {
    tenant: String,
    key: (String, u32),
    n: usize,
}
impl Slotted for J {
    type Key = (String, u32);
    fn tenant(&self) -> &str {
        &self.tenant
    }
    fn key(&self) -> &Self::Key {
        &self.key
    }
}
fn job(t: &str, k: u32, n: usize) -> J {
    J {
        tenant: t.into(),
        key: (t.into(), k),
        n,
    }
}
fn cfg(concurrency: usize, sink: usize) -> DispatchConfig {
    DispatchConfig {
        concurrency,
        sink_concurrency: sink,
        ..DispatchConfig::default()
    }
}
fn push(s: &mut Slots<J>, j: J) {
    s.hold(&j.tenant.clone(), 10);
    s.push(j);
}

/// the claims of two sessions of one process in flight together never take
/// more than the window between them: the first reserves the byte room left, the
/// second finds none until the first's answer is handled and its unused room is back.
#[test]
fn concurrent_claims_of_two_sessions_share_one_byte_window() {
    let shared = Arc::new(SharedWindow::default());
    let window = DispatchConfig {
        max_inflight: 100,
        max_inflight_bytes: 1_000,
        batch: 60,
        ..DispatchConfig::default()
    };
    let mut a: Slots<J> = Slots::with_shared(&window, shared.clone());
    let mut b: Slots<J> = Slots::with_shared(&window, shared.clone());
    let (rows, rooms) = a.reserve_claim(60).expect("room");
    assert_eq!((rows, rooms.global, rooms.alone), (60, 1_000, true));
    let freed = shared.freed();
    assert_eq!(b.claim_room(), 0, "a's claim in flight holds the byte room");
    assert!(b.reserve_claim(60).is_none());
    assert_eq!(
        (shared.rows(), shared.bytes()),
        (0, 0),
        "reserved is not held"
    );
    // a's claim took 3 rows of 300 bytes: the rest goes back, b is told.
    for _ in 0..3 {
        a.hold("t", 300);
    }
    a.end_claim();
    assert!(freed.has_changed().unwrap_or(false));
    assert_eq!((shared.rows(), shared.bytes()), (3, 900));
    let (rows, rooms) = b.reserve_claim(60).expect("room again");
    assert_eq!((rows, rooms.global, rooms.alone), (60, 100, false));
    // A hook over the room b reserved still counts in full: the window is what is held.
    b.hold("u", 250);
    b.end_claim();
    assert_eq!((shared.rows(), shared.bytes()), (4, 1_150));
    assert!(a.reserve_claim(60).is_none(), "no byte room left");
    drop(a);
    drop(b);
    assert_eq!((shared.rows(), shared.bytes()), (0, 0));
    assert_eq!(shared.taken_rows(), 0);
}

#[test]
fn a_gated_key_keeps_its_queue_and_takes_no_slot_while_others_run() {
    let mut s = Slots::new(&cfg(100, 100));
    for n in 0..3 {
        push(&mut s, job("t", 0, n));
        push(&mut s, job("t", 1, n));
    }
    let started: Vec<u32> = std::iter::from_fn(|| s.next_start_gated(|k| k.1 != 0))
        .map(|j| j.key.1)
        .collect();
    assert_eq!(started, [1, 1, 1]);
    assert_eq!(s.running(), 3);
    assert_eq!(s.queued("t", &("t".into(), 0)), 3);
    assert_eq!(s.next_start().map(|j| (j.key.1, j.n)), Some((0, 0)));
}

#[test]
fn slots_go_round_robin_across_tenants_before_keys() {
    let mut s = Slots::new(&cfg(100, 100));
    for n in 0..3 {
        push(&mut s, job("big", 0, n));
    }
    push(&mut s, job("small", 0, 0));
    let order: Vec<String> = std::iter::from_fn(|| s.next_start())
        .map(|j| j.tenant)
        .collect();
    assert_eq!(order, ["big", "small", "big", "big"]);
}

#[test]
fn a_tenant_of_weight_three_takes_three_slots_in_a_row_for_one_of_weight_one() {
    let mut c = cfg(100, 100);
    c.tenants.insert(
        "heavy".into(),
        crate::config::TenantLimits {
            weight: Some(3),
            ..Default::default()
        },
    );
    let mut s = Slots::new(&c);
    for n in 0..8 {
        push(&mut s, job("heavy", 0, n));
        push(&mut s, job("light", 0, n));
    }
    let order: Vec<String> = std::iter::from_fn(|| s.next_start())
        .take(8)
        .map(|j| j.tenant)
        .collect();
    assert_eq!(
        order,
        ["heavy", "heavy", "heavy", "light", "heavy", "heavy", "heavy", "light"]
    );
}

#[test]
fn one_sources_backlog_does_not_queue_ahead_of_anothers() {
    let mut s = Slots::new(&cfg(100, 100));
    for n in 0..5 {
        push(&mut s, job("t", 0, n));
    }
    push(&mut s, job("t", 1, 0));
    let keys: Vec<u32> = std::iter::from_fn(|| s.next_start())
        .map(|j| j.key.1)
        .collect();
    assert_eq!(&keys[..2], &[0, 1]);
}

#[test]
fn sink_concurrency_caps_one_key_and_a_finished_attempt_frees_it() {
    let mut s = Slots::new(&cfg(100, 2));
    for n in 0..5 {
        push(&mut s, job("t", 0, n));
    }
    assert!(s.next_start().is_some() && s.next_start().is_some());
    assert!(s.next_start().is_none());
    s.finished("t", &("t".into(), 0));
    assert!(s.next_start().is_some());
}

#[test]
fn settled_rows_free_the_window() {
    let mut s = Slots::new(&DispatchConfig {
        max_inflight: 2,
        ..DispatchConfig::default()
    });
    push(&mut s, job("t", 0, 0));
    push(&mut s, job("t", 0, 1));
    assert!(s.window_full());
    assert_eq!(s.claim_room(), 0);
    s.settled("t", 10);
    assert_eq!(s.claim_room(), 1);
}

proptest! {
    #[test]
    fn caps_are_never_exceeded(ops in proptest::collection::vec((0u8..3, 0usize..4, 0u32..3), 1..300), conc in 1usize..6, sink in 1usize..4) {
        let mut s = Slots::new(&cfg(conc, sink));
        let mut running: Vec<J> = Vec::new();
        let tenants = ["a", "b", "c", "d"];
        for (op, t, k) in ops {
            match op {
                0 => push(&mut s, job(tenants[t], k, 0)),
                1 => if let Some(j) = s.next_start() { running.push(j) },
                _ => if !running.is_empty() {
                    let j = running.remove(0);
                    s.finished(&j.tenant, &j.key);
                    s.settled(&j.tenant, 10);
                },
            }
            prop_assert!(running.len() <= conc);
            prop_assert_eq!(running.len(), s.running());
            for j in &running {
                let same = running.iter().filter(|x| x.key == j.key).count();
                prop_assert!(same <= sink);
            }
        }
    }

    #[test]
    fn every_queued_job_eventually_starts(jobs in proptest::collection::vec((0usize..4, 0u32..3), 1..100)) {
        let mut s = Slots::new(&cfg(3, 2));
        let tenants = ["a", "b", "c", "d"];
        for (n, (t, k)) in jobs.iter().enumerate() {
            push(&mut s, job(tenants[*t], *k, n));
        }
        let mut started = 0;
        while started < jobs.len() {
            let j = s.next_start();
            prop_assert!(j.is_some(), "stuck after {} of {}", started, jobs.len());
            let j = j.unwrap();
            s.finished(&j.tenant, &j.key);
            started += 1;
        }
    }
}
