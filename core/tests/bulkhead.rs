//! The bulkhead: a limit on calls in flight, with an optional bounded wait; the `&mut` form, the
//! lock-free shared form under threads, its guard, and its place in front of the call driver.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;

use proptest::prelude::*;
use stormguard_core::{
    limits::Bulkhead, limits::BulkheadEntry, limits::BulkheadPermit, limits::BulkheadSettings,
    limits::BulkheadTicket, limits::SharedBulkhead, part::BulkheadSlots, Bound, Breaker, Call,
    CallSettings, Duration, Event, Field, Finished, Instant, Name, Outcome, Parts, RefusalReason,
    Refused, SettingsError, Step, GUARD_PAUSE,
};

mod support;
use support::ms;

const T0: Instant = Instant::from_secs(100);

#[track_caller]
fn settings(max_in_flight: u32, max_queue: u32, max_wait: Duration) -> BulkheadSettings {
    BulkheadSettings::builder("db")
        .max_in_flight(max_in_flight)
        .bounded_wait(max_queue, max_wait)
        .build()
        .unwrap()
}

#[track_caller]
fn entered(r: Result<BulkheadEntry, Refused>) -> BulkheadPermit {
    match r {
        Ok(BulkheadEntry::Entered(p)) => p,
        other => panic!("expected to enter, got {other:?}"),
    }
}

#[track_caller]
fn queued(r: Result<BulkheadEntry, Refused>) -> BulkheadTicket {
    match r {
        Ok(BulkheadEntry::Queued(t)) => t,
        other => panic!("expected to queue, got {other:?}"),
    }
}

#[track_caller]
fn refused(r: Result<BulkheadEntry, Refused>) -> Refused {
    match r {
        Err(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const FULL: Refused = Refused {
    reason: RefusalReason::BulkheadFull,
    retry_after: Duration::ZERO,
};

#[test]
fn the_defaults_admit_25_and_never_queue() {
    let s = BulkheadSettings::builder("db").build().unwrap();
    assert_eq!(s.max_in_flight(), 25);
    assert_eq!(s.max_queue(), 0);
    assert_eq!(s.max_wait(), Duration::ZERO);
    assert_eq!(s.name(), &"db");
    assert_eq!(s.to_string(), "25 in flight, no waiting");
    let b = Bulkhead::new(s);
    let permits: Vec<_> = (0..25).map(|_| b.try_enter(T0).unwrap()).collect();
    assert_eq!(refused(b.try_enter_or_queue(T0, Duration::MAX)), FULL);
    assert_eq!(b.queued(), 0);
    for p in permits {
        b.leave(p);
    }
}

#[test]
fn the_limit_is_never_exceeded() {
    let b = Bulkhead::of(3, "db").unwrap();
    let mut held = Vec::new();
    for i in 0..10 {
        match b.try_enter(T0 + ms(i)) {
            Ok(p) => held.push(p),
            Err(r) => assert_eq!(r, FULL),
        }
        assert!(b.in_flight() <= 3);
    }
    assert_eq!(held.len(), 3);
    assert_eq!(b.in_flight(), 3);
    for p in held {
        b.leave(p);
    }
    assert_eq!(b.in_flight(), 0);
}

#[test]
fn a_full_bulkhead_refuses_with_bulkhead_full_and_no_retry_estimate() {
    let b = Bulkhead::of(1, "db").unwrap();
    let p = b.try_enter(T0).unwrap();
    let r = b.try_enter(T0).unwrap_err();
    assert_eq!(r.reason, RefusalReason::BulkheadFull);
    assert_eq!(r.retry_after, Duration::ZERO);
    assert_eq!(b.check(), Err(FULL));
    b.leave(p);
    assert_eq!(b.check(), Ok(()));
}

#[test]
fn leave_frees_a_slot() {
    let b = Bulkhead::of(2, "db").unwrap();
    let p1 = b.try_enter(T0).unwrap();
    let p2 = b.try_enter(T0).unwrap();
    assert!(b.try_enter(T0).is_err());
    assert!(!b.leave(p1));
    assert_eq!(b.in_flight(), 1);
    let p3 = b.try_enter(T0 + ms(5)).unwrap();
    assert_eq!(p3.entered(), T0 + ms(5));
    assert_eq!(p3.held_for(T0 + ms(25)), ms(20));
    b.leave(p2);
    b.leave(p3);
    assert_eq!(b.in_flight(), 0);
}

#[test]
fn checking_changes_nothing() {
    let b = Bulkhead::of(1, "db").unwrap();
    for _ in 0..5 {
        assert_eq!(b.check(), Ok(()));
    }
    assert_eq!(b.in_flight(), 0);
}

#[test]
fn a_queued_caller_is_admitted_when_a_slot_frees() {
    let b = Bulkhead::new(settings(1, 2, ms(200)));
    let p = entered(b.try_enter_or_queue(T0, Duration::MAX));
    let t = queued(b.try_enter_or_queue(T0 + ms(10), Duration::MAX));
    assert_eq!(t.queued_at(), T0 + ms(10));
    assert_eq!(t.wait_until(), T0 + ms(210));
    assert_eq!(b.queued(), 1);
    // Woken early (no slot yet): still waiting, ticket handed back.
    let t = queued(b.on_slot_free(T0 + ms(20), t));
    assert!(b.leave(p), "leave says a caller is waiting");
    let p = entered(b.on_slot_free(T0 + ms(30), t));
    assert_eq!(p.entered(), T0 + ms(30));
    assert_eq!((b.in_flight(), b.queued()), (1, 0));
    assert!(!b.leave(p));
}

#[test]
fn the_queue_is_bounded() {
    let b = Bulkhead::new(settings(1, 2, ms(200)));
    let p = entered(b.try_enter_or_queue(T0, Duration::MAX));
    let t1 = queued(b.try_enter_or_queue(T0, Duration::MAX));
    let t2 = queued(b.try_enter_or_queue(T0, Duration::MAX));
    assert_eq!(refused(b.try_enter_or_queue(T0, Duration::MAX)), FULL);
    assert_eq!(b.queued(), 2);
    // Never queued by plain `try_enter`.
    assert_eq!(b.try_enter(T0), Err(FULL));
    assert_eq!(b.queued(), 2);
    b.abandon(t1);
    let t3 = queued(b.try_enter_or_queue(T0, Duration::MAX));
    b.abandon(t2);
    b.abandon(t3);
    b.leave(p);
    assert_eq!(b.snapshot().queued, 0);
}

#[test]
fn a_queued_caller_is_refused_when_its_wait_is_over_and_leaves_the_queue() {
    let b = Bulkhead::new(settings(1, 1, ms(100)));
    let p = entered(b.try_enter_or_queue(T0, Duration::MAX));
    let t = queued(b.try_enter_or_queue(T0, Duration::MAX));
    let t = queued(b.on_slot_free(T0 + ms(99), t));
    assert_eq!(refused(b.on_slot_free(T0 + ms(100), t)), FULL);
    assert_eq!(b.queued(), 0);
    // Its place is free for the next caller.
    let t = queued(b.try_enter_or_queue(T0 + ms(100), Duration::MAX));
    b.abandon(t);
    b.leave(p);
}

#[test]
fn a_waiter_whose_wait_is_over_still_enters_if_a_slot_is_free() {
    let b = Bulkhead::new(settings(1, 1, ms(100)));
    let p = entered(b.try_enter_or_queue(T0, Duration::MAX));
    let t = queued(b.try_enter_or_queue(T0, Duration::MAX));
    b.leave(p);
    // The wake-up was missed; at its deadline the waiter checks once more and gets the slot.
    let p = entered(b.on_slot_free(T0 + ms(500), t));
    assert_eq!((b.in_flight(), b.queued()), (1, 0));
    b.leave(p);
}

#[test]
fn a_newcomer_may_take_a_freed_slot_and_the_waiter_keeps_waiting() {
    let b = Bulkhead::new(settings(1, 1, ms(100)));
    let p = entered(b.try_enter_or_queue(T0, Duration::MAX));
    let t = queued(b.try_enter_or_queue(T0, Duration::MAX));
    assert!(b.leave(p));
    let barger = b.try_enter(T0 + ms(1)).unwrap();
    let t = queued(b.on_slot_free(T0 + ms(2), t));
    assert!(b.leave(barger), "the waiter is still there: wake it again");
    let p = entered(b.on_slot_free(T0 + ms(3), t));
    b.leave(p);
}

#[test]
fn the_wait_is_capped_by_the_callers_own_deadline() {
    let b = Bulkhead::new(settings(1, 4, ms(500)));
    let p = b.try_enter(T0).unwrap();
    let t = queued(b.try_enter_or_queue(T0, ms(40)));
    assert_eq!(t.wait_until(), T0 + ms(40));
    let t2 = queued(b.try_enter_or_queue(T0, Duration::MAX));
    assert_eq!(t2.wait_until(), T0 + ms(500));
    // No time left: refused at once, and nothing queued.
    assert_eq!(refused(b.try_enter_or_queue(T0, Duration::ZERO)), FULL);
    assert_eq!(b.queued(), 2);
    b.abandon(t);
    b.abandon(t2);
    b.leave(p);
}

#[test]
fn a_caller_that_gives_up_leaves_the_queue() {
    let b = Bulkhead::new(settings(1, 1, ms(100)));
    let p = b.try_enter(T0).unwrap();
    let t = queued(b.try_enter_or_queue(T0, Duration::MAX));
    b.abandon(t);
    assert_eq!(b.queued(), 0);
    assert!(!b.leave(p), "nobody waits any more");
}

#[test]
fn every_invalid_bulkhead_setting_is_a_typed_error() {
    let b = || BulkheadSettings::builder("db");
    assert_eq!(
        b().max_in_flight(0).build(),
        Err(SettingsError {
            field: Field::MaxInFlight,
            bound: Bound::AtLeast(1)
        })
    );
    assert_eq!(
        b().bounded_wait(3, Duration::ZERO).build(),
        Err(SettingsError {
            field: Field::MaxWait,
            bound: Bound::AtLeastDuration(Duration::from_nanos(1))
        })
    );
    assert_eq!(
        Bulkhead::of(0, "db").map(|_| ()).unwrap_err().bound,
        Bound::AtLeast(1)
    );
    // A wait without a queue is no wait.
    let s = b().bounded_wait(0, ms(100)).build().unwrap();
    assert_eq!((s.max_queue(), s.max_wait()), (0, Duration::ZERO));
    let s = b().bounded_wait(2, ms(100)).no_wait().build().unwrap();
    assert_eq!((s.max_queue(), s.max_wait()), (0, Duration::ZERO));
    assert!(b()
        .max_in_flight(u32::MAX)
        .bounded_wait(u32::MAX, Duration::MAX)
        .build()
        .is_ok());
}

#[test]
fn names_can_come_from_configuration() {
    let s = BulkheadSettings::builder("x")
        .name(Name::try_from_str("orders-eu").unwrap())
        .build()
        .unwrap();
    assert_eq!(Bulkhead::new(s).name(), &"orders-eu");
    let s = BulkheadSettings::builder_named(Name::try_from_str("radio").unwrap())
        .build()
        .unwrap();
    assert_eq!(SharedBulkhead::new(s).to_string(), "bulkhead `radio`");
}

#[test]
fn a_snapshot_reports_counts_and_limits() {
    let b = Bulkhead::new(settings(2, 3, ms(10)));
    let p = b.try_enter(T0).unwrap();
    let snap = b.snapshot();
    assert_eq!(snap.name, "db");
    assert_eq!((snap.in_flight, snap.queued), (1, 0));
    assert_eq!((snap.max_in_flight, snap.max_queue), (2, 3));
    b.leave(p);
}

// ---- the shared form ----

#[test]
fn dropping_a_guard_frees_its_slot() {
    let b = SharedBulkhead::new(settings(1, 0, Duration::ZERO));
    {
        let g = b.try_enter_guarded(T0).unwrap();
        assert_eq!(g.entered(), Some(T0));
        assert_eq!(b.in_flight(), 1);
        assert_eq!(b.try_enter_guarded(T0).unwrap_err(), FULL);
    }
    assert_eq!(b.in_flight(), 0);
    // Leaving explicitly says whether to wake a waiter; taking the permit out keeps the slot.
    let g = b.try_enter_guarded(T0).unwrap();
    assert!(!g.leave());
    let p = b.try_enter_guarded(T0).unwrap().into_permit().unwrap();
    assert_eq!(b.in_flight(), 1);
    drop(b.guard(p));
    assert_eq!(b.in_flight(), 0);
}

#[test]
fn a_guard_that_leaves_says_when_a_caller_waits() {
    let b = SharedBulkhead::new(settings(1, 1, ms(100)));
    let g = b.try_enter_guarded(T0).unwrap();
    let t = queued(b.try_enter_or_queue(T0, Duration::MAX));
    assert!(g.leave());
    let p = entered(b.on_slot_free(T0, t));
    assert!(!b.leave(p));
}

#[test]
fn a_shared_bulkhead_can_live_in_a_static() {
    static DB: SharedBulkhead = SharedBulkhead::new(
        match BulkheadSettings::builder("static").max_in_flight(2).build() {
            Ok(s) => s,
            Err(_) => panic!("invalid"),
        },
    );
    let g = DB.try_enter_guarded(T0).unwrap();
    assert_eq!(DB.in_flight(), 1);
    drop(g);
    assert_eq!(DB.snapshot().in_flight, 0);
    assert_eq!(DB.settings().max_in_flight(), 2);
}

#[test]
fn the_shared_form_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<SharedBulkhead>();
    send_sync::<stormguard_core::limits::BulkheadGuard<'static>>();
    send_sync::<BulkheadPermit>();
    send_sync::<BulkheadTicket>();
}

/// Threads hammer one bulkhead; each counts itself in and out of the critical section with its
/// own atomic, and the highest count ever seen must not pass the limit.
#[test]
fn under_threads_the_shared_form_never_exceeds_its_limit() {
    const LIMIT: u32 = 3;
    const THREADS: usize = 8;
    const ROUNDS: usize = 20_000;
    let b = SharedBulkhead::new(settings(LIMIT, 0, Duration::ZERO));
    let inside = AtomicU32::new(0);
    let highest = AtomicU32::new(0);
    let admitted = AtomicU32::new(0);
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                start.wait();
                for i in 0..ROUNDS {
                    let Ok(guard) = b.try_enter_guarded(T0) else {
                        std::hint::spin_loop();
                        continue;
                    };
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    highest.fetch_max(now, Ordering::SeqCst);
                    admitted.fetch_add(1, Ordering::Relaxed);
                    if i % 7 == 0 {
                        std::thread::yield_now();
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(guard);
                }
            });
        }
    });
    assert!(highest.load(Ordering::SeqCst) <= LIMIT);
    assert!(highest.load(Ordering::SeqCst) >= 1);
    assert!(admitted.load(Ordering::Relaxed) > 0);
    assert_eq!((b.in_flight(), b.queued()), (0, 0));
}

/// The same with waiting: callers queue when full and poll `on_slot_free` until admitted or
/// their (synthetic, far-off) wait ends; both bounds hold throughout and every count returns
/// to zero.
#[test]
fn under_threads_waiting_callers_respect_both_bounds() {
    const LIMIT: u32 = 2;
    const QUEUE: u32 = 3;
    const THREADS: usize = 8;
    const ROUNDS: usize = 5_000;
    let b = SharedBulkhead::new(settings(LIMIT, QUEUE, Duration::from_secs(3600)));
    let inside = AtomicU32::new(0);
    let highest = AtomicU32::new(0);
    let highest_queue = AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    let mut entry = b.try_enter_or_queue(T0, Duration::MAX);
                    let permit = loop {
                        match entry {
                            Ok(BulkheadEntry::Entered(p)) => break Some(p),
                            Ok(BulkheadEntry::Queued(t)) => {
                                highest_queue.fetch_max(b.queued(), Ordering::SeqCst);
                                std::thread::yield_now();
                                entry = b.on_slot_free(T0, t);
                            }
                            Err(_) => break None,
                        }
                    };
                    let Some(permit) = permit else { continue };
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    highest.fetch_max(now, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let _ = b.leave(permit);
                }
            });
        }
    });
    assert!(highest.load(Ordering::SeqCst) <= LIMIT);
    assert!(highest_queue.load(Ordering::SeqCst) <= QUEUE);
    assert_eq!((b.in_flight(), b.queued()), (0, 0));
}

// ---- in front of the call driver ----

#[test]
fn a_full_bulkhead_with_no_retry_left_becomes_a_guarded_rejection_in_the_call_driver() {
    let parts = Parts::new()
        .breaker(Breaker::of(5, "db").unwrap())
        .bulkhead(Bulkhead::of(1, "db").unwrap());
    let mut first = Call::begin(&CallSettings::DEFAULT, T0);
    let Step::Attempt(permit) = first.poll(&parts, T0, &mut |_| {}) else {
        panic!("the first call is admitted")
    };
    let mut events = Vec::new();
    // One attempt: no retry fits the self-imposed throttle, so the refusal is the rejection.
    let once = CallSettings::builder().max_attempts(1).build().unwrap();
    let mut second = Call::begin(&once, T0);
    let step = second.poll(&parts, T0, &mut |e: Event<'_>| {
        events.push(format!("{e:?}"))
    });
    let Step::Reject(r) = step else {
        panic!("expected a rejection, got {step:?}")
    };
    assert_eq!(r.reason, RefusalReason::BulkheadFull);
    assert_eq!(r.pause, GUARD_PAUSE);
    assert_eq!(r.retry_after, Duration::ZERO);
    // The refused attempt (for the attempt log), then the rejection, both naming the bulkhead.
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events[0].starts_with("Attempt"), "{events:?}");
    assert!(events[1].starts_with("Rejected"), "{events:?}");
    assert!(
        events.iter().all(|e| e.contains("BulkheadFull")),
        "{events:?}"
    );
    assert_eq!(
        second.poll(&parts, T0, &mut |_| {}),
        Step::Done(Finished::Rejected(r))
    );
    first.complete(&parts, permit, T0 + ms(20), Outcome::Success, &mut |_| {});
    assert_eq!(parts.bulkhead.as_ref().unwrap().in_flight(), 0);
    assert_eq!(
        first.poll(&parts, T0, &mut |_| {}),
        Step::Done(Finished::Succeeded)
    );
}

#[test]
fn with_no_time_left_a_full_bulkhead_is_still_reported_as_the_refusal() {
    let parts = Parts::new()
        .named(Name::new("db"))
        .bulkhead(Bulkhead::of(1, "db").unwrap());
    let held = parts.bulkhead.as_ref().unwrap().try_enter(T0).unwrap();
    let settings = CallSettings::builder()
        .deadline(Some(ms(10)))
        .build()
        .unwrap();
    let mut call = Call::begin(&settings, T0);
    let Step::Reject(r) = call.poll(&parts, T0 + ms(10), &mut |_| {}) else {
        panic!("expected a rejection")
    };
    assert_eq!(
        (r.reason, r.pause),
        (RefusalReason::BulkheadFull, Duration::ZERO)
    );
    parts.bulkhead.as_ref().unwrap().leave(held);
}

#[test]
fn a_breaker_refusal_gives_the_bulkhead_slot_back() {
    let breaker = Breaker::of(1, "db").unwrap();
    let p = breaker.try_acquire(T0).unwrap();
    breaker.on_outcome(T0, p, Outcome::Transient, &mut |_| {});
    let parts = Parts::new()
        .breaker(breaker)
        .bulkhead(Bulkhead::of(1, "db").unwrap());
    let mut call = Call::begin(&CallSettings::DEFAULT, T0);
    let Step::Reject(r) = call.poll(&parts, T0, &mut |_| {}) else {
        panic!("the open breaker refuses")
    };
    assert_eq!(r.reason, RefusalReason::BreakerOpen);
    assert_eq!(parts.bulkhead.as_ref().unwrap().in_flight(), 0);
}

#[test]
fn retries_take_and_give_back_one_slot_per_attempt() {
    let shared = SharedBulkhead::new(settings(1, 0, Duration::ZERO));
    let parts = Parts::new().named(Name::new("db")).bulkhead(&shared);
    let mut now = T0;
    let mut call = Call::begin(&CallSettings::DEFAULT, now);
    let mut attempts = 0;
    let finished = loop {
        match call.poll(&parts, now, &mut |_| {}) {
            Step::Attempt(permit) => {
                attempts += 1;
                assert_eq!(shared.in_flight(), 1);
                now += ms(5);
                let out = if attempts < 3 {
                    Outcome::Transient
                } else {
                    Outcome::Success
                };
                call.complete(&parts, permit, now, out, &mut |_| {});
                assert_eq!(
                    shared.in_flight(),
                    0,
                    "no slot held during the backoff wait"
                );
            }
            Step::Wait(d) => now += d,
            other => break other,
        }
    };
    assert_eq!(finished, Step::Done(Finished::Succeeded));
    assert_eq!(attempts, 3);
}

#[test]
fn a_released_attempt_gives_its_slot_back() {
    use stormguard_core::call::Gate;
    let b = Bulkhead::of(1, "db").unwrap();
    let front = Parts::new().named("db").bulkhead(&b);
    let p = front.try_acquire(T0, None, &mut |_| {}).unwrap();
    assert_eq!(front.check(T0), Err(FULL));
    front.release(p);
    assert_eq!(front.check(T0), Ok(()));
    assert_eq!(front.name(), &"db");
    assert_eq!(BulkheadSlots::check(&b), Ok(()));
}

// ---- the invariant, over random sequences ----

#[derive(Clone, Debug)]
enum Op {
    Enter,
    EnterOrQueue { max_wait_ms: u16 },
    Leave(usize),
    SlotFree(usize),
    Abandon(usize),
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Enter),
        3 => (0u16..400).prop_map(|max_wait_ms| Op::EnterOrQueue { max_wait_ms }),
        3 => any::<usize>().prop_map(Op::Leave),
        2 => any::<usize>().prop_map(Op::SlotFree),
        1 => any::<usize>().prop_map(Op::Abandon),
        2 => (0u16..300).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Whatever the sequence, in both forms: calls in flight never pass the limit nor the
    /// queue its bound, the counts are exactly the permits and tickets outstanding, and the two
    /// forms give the same answers.
    #[test]
    fn the_limits_hold_and_the_counts_match_what_is_outstanding(
        limit in 1u32..5,
        queue in 0u32..4,
        wait_ms in 1u64..300,
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        let s = settings(limit, queue, ms(wait_ms));
        let single = Bulkhead::new(s);
        let shared = SharedBulkhead::new(s);
        let mut now = T0;
        let mut permits: Vec<(BulkheadPermit, BulkheadPermit)> = Vec::new();
        let mut tickets: Vec<(BulkheadTicket, BulkheadTicket)> = Vec::new();
        for op in ops {
            match op {
                Op::Enter => match (single.try_enter(now), shared.try_enter(now)) {
                    (Ok(a), Ok(b)) => permits.push((a, b)),
                    (Err(a), Err(b)) => {
                        prop_assert_eq!(a, FULL);
                        prop_assert_eq!(b, FULL);
                        prop_assert_eq!(single.in_flight(), limit);
                    }
                    (a, b) => prop_assert!(false, "forms disagree: {:?} / {:?}", a, b),
                },
                Op::EnterOrQueue { max_wait_ms } => {
                    let w = ms(u64::from(max_wait_ms));
                    match (single.try_enter_or_queue(now, w), shared.try_enter_or_queue(now, w)) {
                        (Ok(BulkheadEntry::Entered(a)), Ok(BulkheadEntry::Entered(b))) => {
                            permits.push((a, b));
                        }
                        (Ok(BulkheadEntry::Queued(a)), Ok(BulkheadEntry::Queued(b))) => {
                            prop_assert!(a.wait_until() <= now + ms(wait_ms));
                            prop_assert!(a.wait_until() > now);
                            tickets.push((a, b));
                        }
                        (Err(a), Err(b)) => {
                            prop_assert_eq!(a, FULL);
                            prop_assert_eq!(b, FULL);
                        }
                        (a, b) => prop_assert!(false, "forms disagree: {:?} / {:?}", a, b),
                    }
                }
                Op::Leave(i) if !permits.is_empty() => {
                    let (a, b) = permits.swap_remove(i % permits.len());
                    let waiting = !tickets.is_empty();
                    prop_assert_eq!(single.leave(a), waiting);
                    prop_assert_eq!(shared.leave(b), waiting);
                }
                Op::SlotFree(i) if !tickets.is_empty() => {
                    let (a, b) = tickets.swap_remove(i % tickets.len());
                    let until = a.wait_until();
                    match (single.on_slot_free(now, a), shared.on_slot_free(now, b)) {
                        (Ok(BulkheadEntry::Entered(a)), Ok(BulkheadEntry::Entered(b))) => {
                            permits.push((a, b));
                        }
                        (Ok(BulkheadEntry::Queued(a)), Ok(BulkheadEntry::Queued(b))) => {
                            prop_assert!(now < until);
                            tickets.push((a, b));
                        }
                        (Err(a), Err(b)) => {
                            prop_assert!(now >= until);
                            prop_assert_eq!(a, FULL);
                            prop_assert_eq!(b, FULL);
                        }
                        (a, b) => prop_assert!(false, "forms disagree: {:?} / {:?}", a, b),
                    }
                }
                Op::Abandon(i) if !tickets.is_empty() => {
                    let (a, b) = tickets.swap_remove(i % tickets.len());
                    single.abandon(a);
                    shared.abandon(b);
                }
                Op::Advance(d) => now += ms(u64::from(d)),
                Op::Leave(_) | Op::SlotFree(_) | Op::Abandon(_) => {}
            }
            prop_assert!(single.in_flight() <= limit);
            prop_assert!(single.queued() <= queue);
            prop_assert_eq!(single.in_flight() as usize, permits.len());
            prop_assert_eq!(single.queued() as usize, tickets.len());
            prop_assert_eq!(single.snapshot(), shared.snapshot());
        }
        for (a, b) in permits {
            single.leave(a);
            shared.leave(b);
        }
        for (a, b) in tickets {
            single.abandon(a);
            shared.abandon(b);
        }
        prop_assert_eq!((single.in_flight(), single.queued()), (0, 0));
        prop_assert_eq!((shared.in_flight(), shared.queued()), (0, 0));
    }
}

#[test]
fn an_absent_rate_limiter_in_front_admits_as_the_bulkhead_and_breaker_alone() {
    use stormguard_core::call::Gate;
    use stormguard_core::limits::RateLimiter;
    use stormguard_core::part::Never;
    // An open breaker behind a full bulkhead: alone, the bulkhead refuses first.
    let breaker = Breaker::of(1, "db").unwrap();
    let p = breaker.try_acquire(T0).unwrap();
    breaker.on_outcome(T0, p, Outcome::Transient, &mut |_| {});
    let alone = Parts::new()
        .breaker(breaker.clone())
        .bulkhead(Bulkhead::of(1, "db").unwrap());
    // A rate limiter's place, typed but empty.
    let fronted = Parts {
        name: None,
        breaker: Some(breaker),
        budget: None::<Never>,
        limiter: None::<RateLimiter>,
        quota: None::<Never>,
        bulkhead: Some(Bulkhead::of(1, "db").unwrap()),
        adaptive: None::<Never>,
        saturation: None::<Never>,
    };
    let held = alone.bulkhead.as_ref().unwrap().try_enter(T0).unwrap();
    let held_too = fronted.bulkhead.as_ref().unwrap().try_enter(T0).unwrap();
    let expected = alone.try_acquire(T0, None, &mut |_| {}).unwrap_err();
    assert_eq!(expected.reason, RefusalReason::BulkheadFull);
    assert_eq!(fronted.try_acquire(T0, None, &mut |_| {}), Err(expected));
    alone.bulkhead.as_ref().unwrap().leave(held);
    fronted.bulkhead.as_ref().unwrap().leave(held_too);
    // With a slot free, both ask the open breaker and give the slot back.
    assert_eq!(
        fronted
            .try_acquire(T0, None, &mut |_| {})
            .unwrap_err()
            .reason,
        RefusalReason::BreakerOpen
    );
    assert_eq!(fronted.bulkhead.as_ref().unwrap().in_flight(), 0);
}
