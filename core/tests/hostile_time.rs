//! Time abuse: `Instant::MAX` and `Instant::ZERO`, zero durations, clocks that step backwards or
//! jump hours forward, and `u64` overflow in every addition the core makes, driven through
//! breakers (both forms), budgets (both forms) and calls. Nothing may panic, and every result
//! must be sane: a clock that steps back means "no time passed" (no state change, nothing
//! accrued or served twice), and a jump forward serves every break, reclaim and ramp it covers.
//!
//! The fuzz targets (`fuzz/`) feed the same abuse at random; these are the named cases.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    time::MAX_BREAK, Backoff, Breaker, BreakerSettings, Budget, BudgetSettings, Call, CallSettings,
    Duration, Event, Finished, Instant, Jitter, Outcome, Parts, Recovery, RefusalReason,
    SharedBreaker, SharedBudget, State, Step, GUARD_PAUSE,
};

mod support;
use support::{ms, secs};

const HOUR: Duration = Duration::from_secs(3600);

/// Instants at and next to the ends of the range, and ordinary ones (the ends and one ordinary
/// instant under miri, where every call costs a thousand times more).
fn hostile_instants() -> Vec<Instant> {
    let all = [
        Instant::ZERO,
        Instant::from_nanos(1),
        Instant::from_nanos(999_999),
        Instant::from_millis(u64::from(u32::MAX)),
        Instant::from_secs(1_000_000),
        Instant::MAX - MAX_BREAK - HOUR,
        Instant::MAX - Duration::from_nanos(1),
        Instant::MAX,
    ];
    if cfg!(miri) {
        vec![all[0], all[4], all[7]]
    } else {
        all.to_vec()
    }
}

/// A consecutive-only breaker that opens on one failure, with an unjittered 15 s break.
fn one_strike() -> BreakerSettings {
    BreakerSettings::builder("hostile")
        .consecutive_failures(1)
        .failure_rate(None)
        .slow_calls(None)
        .jitter(false)
        .build()
        .unwrap()
}

/// Every rule on, with a ramp: the most state to abuse.
fn everything() -> BreakerSettings {
    BreakerSettings::builder("hostile")
        .consecutive_failures(1)
        .jitter(false)
        .probe_successes(1)
        .recovery(Some(Recovery::over(0.25)))
        .build()
        .unwrap()
}

/// One attempt at `at` on both forms, ending at `end` with `outcome`; both must decide alike.
#[track_caller]
fn attempt(
    local: &mut Breaker,
    shared: &SharedBreaker,
    at: Instant,
    end: Instant,
    outcome: Outcome,
) -> bool {
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    let a = local.try_acquire_with(at, None, &mut |e| la.push(format!("{e:?}")));
    let b = shared.try_acquire(at, None, &mut |e| lb.push(format!("{e:?}")));
    assert_eq!(a, b, "the forms disagree at {at}");
    let admitted = match (a, b) {
        (Ok(a), Ok(b)) => {
            local.on_outcome(end, a, outcome, &mut |e| la.push(format!("{e:?}")));
            shared.on_outcome(end, b, outcome, &mut |e| lb.push(format!("{e:?}")));
            true
        }
        _ => false,
    };
    assert_eq!(la, lb, "the forms' events differ at {at}");
    assert_eq!(local.snapshot(end), shared.snapshot(end));
    admitted
}

/// A breaker opened (by one failure) at `at`.
#[track_caller]
fn opened_at(settings: BreakerSettings, at: Instant) -> Breaker {
    let b = Breaker::new(settings);
    let p = b.try_acquire(at).unwrap();
    b.on_outcome(at, p, Outcome::Transient, &mut |_| {});
    assert_eq!(b.state(at), State::Open);
    b
}

#[test]
fn breakers_never_panic_at_the_ends_of_time() {
    let all = [
        one_strike(),
        everything(),
        BreakerSettings::defaults("hostile"),
    ];
    // Under miri, the breaker with every rule on (the most code per call) alone.
    for &settings in &all[if cfg!(miri) { 1..2 } else { 0..3 }] {
        for start in hostile_instants() {
            let mut local = Breaker::new(settings);
            let shared = SharedBreaker::new(settings);
            for end in hostile_instants() {
                for outcome in [
                    Outcome::Success,
                    Outcome::Transient,
                    Outcome::TimedOut,
                    Outcome::Throttled {
                        retry_after: Some(Duration::MAX),
                    },
                    Outcome::Cancelled,
                ] {
                    attempt(&mut local, &shared, start, end, outcome);
                }
                for now in [start, end] {
                    let snap = local.snapshot(now);
                    assert!(snap.probes_in_flight <= settings.half_open_probes());
                    if let Some(b) = snap.break_duration {
                        assert!(b <= settings.max_break() + ms(1));
                    }
                    let _ = local.poll_timeout(now);
                    local.handle_timeout(now, &mut |_| {});
                    shared.handle_timeout(now, &mut |_| {});
                    let _ = local.normal_latency(now);
                    let _ = local.normal_failure_rate(now);
                    assert_eq!(local.snapshot(now), shared.snapshot(now));
                }
            }
            local.isolate(Instant::MAX, &mut |_| {});
            assert_eq!(local.state(Instant::ZERO), State::Isolated);
            local.reset(Instant::ZERO, &mut |_| {});
            assert_eq!(local.state(Instant::MAX), State::Closed);
        }
    }
}

#[test]
fn budgets_never_panic_at_the_ends_of_time_and_never_exceed_capacity() {
    for settings in [
        BudgetSettings::defaults("hostile"),
        BudgetSettings::builder("max")
            .fraction_ppm(1_000_000)
            .floor_per_second_milli(400_000)
            .build()
            .unwrap(),
        BudgetSettings::builder("none")
            .fraction_ppm(0)
            .floor_per_second_milli(0)
            .build()
            .unwrap(),
    ] {
        let local = Budget::new(settings);
        let shared = SharedBudget::new(settings);
        for now in hostile_instants()
            .into_iter()
            .chain(hostile_instants().into_iter().rev())
        {
            for _ in 0..3 {
                assert_eq!(local.try_withdraw(now), shared.try_withdraw(now));
                local.on_outcome(now, Outcome::Success);
                shared.on_outcome(now, Outcome::Success);
                local.deposit(now);
                shared.deposit(now);
            }
            let snap = local.snapshot(now);
            assert_eq!(snap, shared.snapshot(now));
            assert!(snap.tokens_micro <= snap.capacity_micro);
            assert!(local.utilization(now).ppm() <= 1_000_000);
            if let Err(r) = local.clone().try_withdraw(now) {
                assert_eq!(r.reason, RefusalReason::BudgetExhausted);
                if settings.floor_per_second_milli() == 0 {
                    assert_eq!(r.retry_after, Duration::MAX);
                } else {
                    // A third of a second at most at the defaults, plus up to a second of a late
                    // reading's lead: never an overflowed or absurd wait.
                    assert!(r.retry_after <= secs(2), "retry_after {}", r.retry_after);
                }
            }
        }
    }
}

#[test]
fn calls_never_panic_at_the_ends_of_time_and_always_end() {
    let extreme = CallSettings::builder()
        .max_attempts(u32::MAX)
        .deadline(Some(Duration::MAX))
        .attempt_timeout(Some(Duration::MAX))
        .backoff(
            Backoff::builder()
                .base(Duration::MAX)
                .throttled_base(Duration::MAX)
                .cap(Duration::MAX)
                .jitter(Jitter::Equal)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let tiny = CallSettings::builder()
        .deadline(Some(Duration::from_nanos(1)))
        .attempt_timeout(Some(Duration::from_nanos(1)))
        .build()
        .unwrap();
    let unbounded = CallSettings::builder()
        .deadline(None)
        .attempt_timeout(None)
        .max_attempts(4)
        .build()
        .unwrap();
    for settings in [
        CallSettings::DEFAULT,
        CallSettings::worker(),
        extreme,
        tiny,
        unbounded,
    ] {
        for start in hostile_instants() {
            for outcome in [
                Outcome::Transient,
                Outcome::Throttled {
                    retry_after: Some(Duration::MAX),
                },
                Outcome::Throttled {
                    retry_after: Some(Duration::ZERO),
                },
            ] {
                let parts = Parts::new()
                    .breaker(Breaker::new(BreakerSettings::defaults("hostile")))
                    .budget(Budget::new(BudgetSettings::defaults("hostile")));
                let mut now = start;
                let mut call = Call::begin(&settings, now);
                let deadline = call.deadline();
                let mut ended = false;
                for _ in 0..64 {
                    match call.poll(&parts, now, &mut |_| {}) {
                        Step::Attempt(p) => {
                            if let (Some(at), Some(d)) = (call.attempt_deadline(), deadline) {
                                assert!(at <= d);
                            }
                            call.complete(&parts, p, now, outcome, &mut |_| {});
                        }
                        Step::Wait(d) => {
                            assert!(!d.is_zero());
                            if let Some(deadline) = deadline {
                                assert!(now + d < deadline, "a wait past the deadline");
                            }
                            now += d;
                        }
                        Step::Reject(r) => {
                            assert!(r.pause <= GUARD_PAUSE);
                            now += r.pause;
                        }
                        Step::Done(_) => {
                            ended = true;
                            break;
                        }
                    }
                }
                // With a billion attempts and no cap on the waits, a call at the end of time
                // still ends: its waits saturate at `Instant::MAX`, and so does the clock.
                assert!(
                    ended || settings.max_attempts() == u32::MAX,
                    "{settings:?} from {start}"
                );
            }
        }
    }
}

#[test]
fn a_clock_stepping_back_while_closed_changes_nothing() {
    let settings = BreakerSettings::builder("hostile")
        .consecutive_failures(3)
        .failure_rate(None)
        .slow_calls(None)
        .build()
        .unwrap();
    let mut local = Breaker::new(settings);
    let shared = SharedBreaker::new(settings);
    let t = Instant::from_secs(10_000);
    assert!(attempt(&mut local, &shared, t, t, Outcome::Transient));
    assert!(attempt(&mut local, &shared, t, t, Outcome::Transient));
    for back in [ms(1), secs(1), HOUR, secs(86_400)] {
        let earlier = t - back;
        let snap = local.snapshot(earlier);
        assert_eq!(snap.state, State::Closed);
        assert_eq!(
            snap.consecutive_failures, 2,
            "stepping back {back} forgot failures"
        );
        assert_eq!(local.poll_timeout(earlier), None);
        let mut events = Vec::new();
        local.handle_timeout(earlier, &mut |e| events.push(e.kind()));
        assert!(events.is_empty(), "stepping back {back} did {events:?}");
    }
    // The third failure, reported with a clock that stepped back, still counts.
    assert!(attempt(
        &mut local,
        &shared,
        t - HOUR,
        t - HOUR,
        Outcome::Transient
    ));
    assert_eq!(local.state(t - HOUR), State::Open);
}

#[test]
fn a_clock_stepping_back_while_open_neither_ends_the_break_nor_changes_state() {
    let t = Instant::from_secs(10_000);
    let b = opened_at(one_strike(), t);
    let before = b.check(t).unwrap_err();
    assert_eq!(before.retry_after, secs(15));
    for back in [ms(1), ms(999), secs(1), secs(14), HOUR, secs(86_400)] {
        let earlier = t - back;
        assert_eq!(b.state(earlier), State::Open, "{back} back");
        let r = b.check(earlier).unwrap_err();
        assert_eq!(r.reason, RefusalReason::BreakerOpen);
        // Never cut short, never served twice over: at most the break plus the step back (the
        // break's end is an instant; see the report on `retry_after` and backward steps).
        assert!(
            r.retry_after >= before.retry_after,
            "{back} back: {}",
            r.retry_after
        );
        assert!(
            r.retry_after <= before.retry_after + back,
            "{back} back: {}",
            r.retry_after
        );
        let snap = b.snapshot(earlier);
        assert_eq!(snap.consecutive_opens, 1);
        assert_eq!(snap.break_duration, Some(secs(15)));
    }
    // The clock comes back: the break ends when it was due, not later.
    assert_eq!(b.state(t + secs(15)), State::HalfOpen);
}

#[test]
fn a_clock_stepping_back_while_half_open_keeps_the_probe_slot_taken() {
    let t = Instant::from_secs(10_000);
    let b = opened_at(one_strike(), t);
    let after = t + secs(15);
    let probe = b.try_acquire(after).unwrap();
    assert!(probe.is_probe());
    for back in [ms(1), secs(1), HOUR] {
        let r = b.try_acquire(after - back);
        // Either still open by the stepped-back clock or half-open and full: never a second
        // probe, never a reclaim of the one that is out.
        assert!(r.is_err(), "{back} back admitted a second probe");
        assert!(matches!(
            r.unwrap_err().reason,
            RefusalReason::HalfOpenFull | RefusalReason::BreakerOpen
        ));
    }
    // The probe's outcome, reported by a clock that stepped back, still closes (2 successes).
    b.on_outcome(after - HOUR, probe, Outcome::Success, &mut |_| {});
    let p = b.try_acquire(after).unwrap();
    b.on_outcome(after, p, Outcome::Success, &mut |_| {});
    assert_eq!(b.state(after), State::Closed);
}

#[test]
fn a_clock_stepping_back_while_recovering_never_raises_the_ramp() {
    let t = Instant::from_secs(10_000);
    let b = opened_at(everything(), t);
    let after = t + secs(15);
    let p = b.try_acquire(after).unwrap();
    b.on_outcome(after, p, Outcome::Success, &mut |_| {});
    assert_eq!(b.state(after), State::Recovering);
    let into = after + secs(2);
    let p_then = b.ramp_fraction(into).unwrap();
    for back in [ms(1), secs(1), secs(3), HOUR] {
        let earlier = into - back;
        assert_eq!(b.state(earlier), State::Recovering, "{back} back");
        let p = b.ramp_fraction(earlier).unwrap();
        assert!(p <= p_then, "{back} back raised the ramp to {p}");
        assert!(p.ppm() >= 50_000);
    }
}

#[test]
fn a_budget_read_by_a_clock_stepping_back_accrues_nothing_and_counts_nothing_twice() {
    let settings = BudgetSettings::defaults("hostile");
    let t = Instant::from_secs(10_000);
    for back in [ms(1), ms(400), ms(999), secs(1), HOUR, secs(86_400)] {
        let local = Budget::new(settings);
        let shared = SharedBudget::new(settings);
        while local.try_withdraw(t).is_ok() {
            assert!(shared.try_withdraw(t).is_ok());
        }
        assert!(shared.try_withdraw(t).is_err());
        let earlier = t - back;
        assert_eq!(local.available(earlier), 0, "{back} back");
        let r = local.try_withdraw(earlier).unwrap_err();
        assert_eq!(Err(r), shared.try_withdraw(earlier));
        // A third of a second of the floor, plus the lead of a late reading (at most a second).
        assert!(
            r.retry_after <= ms(334) + secs(1),
            "{back} back: {}",
            r.retry_after
        );
        // Asking again when told succeeds (the refusal was not a lie).
        let again = local.clone();
        assert_eq!(again.try_withdraw(earlier + r.retry_after), Ok(()));
        // Readings that go back and forth within a late reading's reach (a second) accrue
        // the time between them once, however often they alternate.
        if back <= secs(1) {
            let b = local.clone();
            let top = t + secs(1);
            let mut taken = 0;
            for _ in 0..10 {
                taken += u32::from(b.try_withdraw(top).is_ok());
                taken += u32::from(b.try_withdraw(top - back).is_ok());
            }
            assert_eq!(taken, 3, "one second at 3 per second, read ten times over");
        }
    }
}

#[test]
fn a_jump_of_hours_serves_every_break_reclaim_and_ramp_it_covers() {
    let t = Instant::from_secs(10_000);
    for hours in [1u64, 6, 24, 24 * 7] {
        let jump = HOUR.saturating_mul(hours);
        // Open: the break is over; a probe is admitted.
        let b = opened_at(one_strike(), t);
        assert_eq!(b.state(t + jump), State::HalfOpen, "{hours} h");
        let probe = b.try_acquire(t + jump).unwrap();
        assert!(probe.is_probe());
        // A lost probe (no outcome, no release): reclaimed once its hold is over.
        drop(probe);
        let later = t + jump + jump;
        let mut events = Vec::new();
        let p = b
            .try_acquire_with(later, None, &mut |e| events.push(e.kind()))
            .unwrap();
        assert!(p.is_probe());
        assert!(
            events.contains(&"probes_reclaimed"),
            "{hours} h: {events:?}"
        );
        // Recovering: the ramp has run out; the breaker reads and acts closed.
        let b = opened_at(everything(), t);
        let p = b.try_acquire(t + secs(15)).unwrap();
        b.on_outcome(t + secs(15), p, Outcome::Success, &mut |_| {});
        assert_eq!(b.state(t + secs(15)), State::Recovering);
        assert_eq!(b.state(t + jump), State::Closed, "{hours} h");
        assert_eq!(b.ramp_fraction(t + jump), None);
        assert!(b.try_acquire(t + jump).is_ok());
        // A budget left alone refills to its capacity and no further.
        let budget = Budget::new(BudgetSettings::defaults("hostile"));
        while budget.try_withdraw(t).is_ok() {}
        assert_eq!(budget.available(t + jump), 30, "{hours} h");
    }
}

#[test]
fn an_attempt_that_outlasts_the_deadline_by_hours_ends_the_call_without_a_retry() {
    let parts = Parts::new()
        .breaker(Breaker::new(BreakerSettings::defaults("hostile")))
        .budget(Budget::new(BudgetSettings::defaults("hostile")));
    let t = Instant::from_secs(10_000);
    let mut call = Call::begin(&CallSettings::DEFAULT, t);
    let Step::Attempt(p) = call.poll(&parts, t, &mut |_| {}) else {
        panic!("the first attempt always runs");
    };
    let late = t + HOUR.saturating_mul(5);
    call.complete(&parts, p, late, Outcome::Transient, &mut |_| {});
    assert_eq!(
        call.poll(&parts, late, &mut |_| {}),
        Step::Done(Finished::DeadlineExceeded {
            last: Some(Outcome::Transient)
        })
    );
    assert_eq!(
        parts.budget.as_ref().unwrap().available(late),
        30,
        "no retry was charged"
    );
}

#[test]
fn a_clock_stepping_back_during_a_wait_never_moves_the_wait_past_the_deadline() {
    let settings = CallSettings::builder()
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .unwrap();
    let parts = Parts::new().named(stormguard_core::Name::new("hostile"));
    let t = Instant::from_secs(10_000);
    let mut call = Call::begin(&settings, t);
    let deadline = call.deadline().unwrap();
    let Step::Attempt(p) = call.poll(&parts, t, &mut |_| {}) else {
        panic!("the first attempt always runs");
    };
    call.complete(&parts, p, t, Outcome::Transient, &mut |_| {});
    assert_eq!(call.poll(&parts, t, &mut |_| {}), Step::Wait(ms(100)));
    // The clock steps back an hour: the wait still ends at the same instant, before the deadline.
    let back = t - HOUR;
    match call.poll(&parts, back, &mut |_| {}) {
        Step::Wait(d) => {
            assert_eq!(back + d, t + ms(100));
            assert!(back + d < deadline);
        }
        other => panic!("{other:?}"),
    }
    // And the retry runs when the wait is over.
    assert!(matches!(
        call.poll(&parts, t + ms(100), &mut |_| {}),
        Step::Attempt(_)
    ));
}

#[test]
fn zero_durations_are_neither_waits_nor_errors() {
    // A dependency that says "retry after zero" is failing in disguise (see
    // `Outcome::effective`): the retry backs off on the transient curve, never in a zero-wait
    // loop, and the wait is a real one.
    let parts = Parts::new()
        .breaker(Breaker::new(BreakerSettings::defaults("hostile")))
        .budget(Budget::new(BudgetSettings::defaults("hostile")));
    let t = Instant::from_secs(10_000);
    let settings = CallSettings::builder()
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .unwrap();
    let mut call = Call::begin(&settings, t);
    let Step::Attempt(p) = call.poll(&parts, t, &mut |_| {}) else {
        panic!("the first attempt always runs");
    };
    let zero = Outcome::Throttled {
        retry_after: Some(Duration::ZERO),
    };
    call.complete(&parts, p, t, zero, &mut |_| {});
    assert_eq!(call.poll(&parts, t, &mut |_| {}), Step::Wait(ms(100)));
    assert!(matches!(
        call.poll(&parts, t + ms(100), &mut |_| {}),
        Step::Attempt(_)
    ));
    // A zero attempt timeout handed to the breaker: the probe's slot is reclaimable at once,
    // and the limit still holds.
    let b = opened_at(one_strike(), t);
    let after = t + secs(15);
    let mut events = Vec::new();
    let first = b
        .try_acquire_with(after, Some(Duration::ZERO), &mut |e: Event<'_>| {
            events.push(e.kind())
        })
        .unwrap();
    assert!(first.is_probe());
    assert!(b.snapshot(after).probes_in_flight <= 1);
    // A zero-latency outcome is a fast one.
    b.on_outcome(after, first, Outcome::Success, &mut |_| {});
    assert_eq!(b.snapshot(after).probes_in_flight, 0);
}

#[test]
fn the_largest_settings_overflow_nothing() {
    let settings = BreakerSettings::builder("hostile")
        .consecutive_failures(1)
        .trip_window(MAX_BREAK)
        .break_duration(MAX_BREAK)
        .max_break(MAX_BREAK)
        .slow_threshold(Some(Duration::MAX))
        .recovery(Some(Recovery::over(1.0).clamped(MAX_BREAK, MAX_BREAK)))
        .build()
        .unwrap();
    let t = Instant::from_secs(10_000);
    let mut local = Breaker::new(settings);
    let shared = SharedBreaker::new(settings);
    assert!(attempt(&mut local, &shared, t, t, Outcome::Transient));
    let snap = local.snapshot(t);
    assert_eq!(snap.state, State::Open);
    assert!(snap.break_duration.unwrap() <= MAX_BREAK);
    assert!(snap.until_half_open <= MAX_BREAK);
    // Through half-open, recovery and a second open at the largest break, both forms alike.
    let mut now = t;
    for _ in 0..6 {
        now += MAX_BREAK + secs(1);
        attempt(&mut local, &shared, now, now, Outcome::Success);
        attempt(&mut local, &shared, now, now, Outcome::Success);
        let snap = local.snapshot(now);
        assert!(snap.probes_in_flight <= 1);
        if let Some(b) = snap.break_duration {
            assert!(b <= MAX_BREAK);
        }
    }
    // A permit held across the largest latencies.
    let p = local.try_acquire(now).unwrap();
    local.on_outcome(Instant::MAX, p, Outcome::Success, &mut |_| {});
    assert!(local.snapshot(Instant::MAX).probes_in_flight <= 1);
}
