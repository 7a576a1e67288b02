//! The shared (lock-free) forms: same decisions and events as the single-threaded forms for any
//! sequential input, compile-time thread-safety, and the permit guard.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::{
    Breaker, BreakerSettings, Budget, BudgetSettings, Call, CallSettings, Duration, Event, Instant,
    Outcome, Parts, Permit, Ratio, Recovery, RefusalReason, SharedBreaker, SharedBudget, State,
    Step,
};

#[derive(Clone, Debug)]
enum Op {
    Acquire(Option<u16>),
    Complete(usize, u8, u16),
    Release(usize),
    Advance(u32),
    Rewind(u16),
    Isolate,
    Reset,
    HandleTimeout,
    Withdraw,
    Deposit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => proptest::option::of(1u16..5000).prop_map(Op::Acquire),
        6 => (any::<usize>(), 0u8..6, 0u16..3000).prop_map(|(w, o, l)| Op::Complete(w, o, l)),
        1 => any::<usize>().prop_map(Op::Release),
        4 => (0u32..100_000).prop_map(Op::Advance),
        1 => (0u16..2000).prop_map(Op::Rewind),
        1 => Just(Op::Isolate),
        1 => Just(Op::Reset),
        1 => Just(Op::HandleTimeout),
        2 => Just(Op::Withdraw),
        2 => Just(Op::Deposit),
    ]
}

fn outcome(n: u8) -> Outcome {
    match n {
        0 => Outcome::Success,
        1 => Outcome::Transient,
        2 => Outcome::TimedOut,
        3 => Outcome::Throttled { retry_after: None },
        4 => Outcome::Permanent,
        _ => Outcome::Cancelled,
    }
}

thread_local! {
    /// The lane [`test_lane`] names for this thread (each test thread sets its own).
    static LANE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A lane hint the test controls: whatever this thread last stored in [`LANE`].
fn test_lane() -> usize {
    LANE.with(std::cell::Cell::get)
}

fn record(log: &mut Vec<String>) -> impl FnMut(Event<'_>) + '_ {
    move |e| log.push(format!("{e:?}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 4 } else { 256 }, ..ProptestConfig::default() })]

    /// For any sequential input, the shared forms and the `&mut` forms give the same decisions,
    /// the same events and the same snapshots, whichever lane of counters the thread writes,
    /// and whether the shared form reads its time lazily or is handed it.
    #[test]
    fn the_shared_and_single_threaded_forms_agree_on_any_sequence(
        lane in 0usize..20,
        probes in 1u32..3,
        ramp in any::<bool>(),
        stats in any::<bool>(),
        lazy in any::<bool>(),
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let mut b = BreakerSettings::builder("eq")
            .consecutive_failures(3)
            .half_open_probes(probes)
            .minimum_calls(5)
            .recovery(if ramp { Some(Recovery::over(0.25)) } else { None });
        if !stats {
            b = b.failure_rate(None).slow_calls(None);
        }
        let settings = b.build().unwrap();
        let local = Breaker::new(settings).with_seed(seed);
        LANE.with(|l| l.set(lane));
        let shared = SharedBreaker::new(settings).with_seed(seed).with_lane_hint(test_lane);
        let budget = Budget::new(BudgetSettings::defaults("eq"));
        let shared_budget = SharedBudget::new(BudgetSettings::defaults("eq"));
        let mut now = Instant::from_secs(500);
        let mut permits: Vec<(Permit, Permit)> = Vec::new();
        for op in ops {
            let (mut la, mut lb) = (Vec::new(), Vec::new());
            match op {
                Op::Acquire(t) => {
                    let t = t.map(|ms| Duration::from_millis(u64::from(ms)));
                    let a = local.try_acquire_with(now, t, &mut record(&mut la));
                    let b = if lazy {
                        shared.try_acquire_lazy(|| now, t, &mut record(&mut lb))
                    } else {
                        shared.try_acquire(now, t, &mut record(&mut lb))
                    };
                    match (a, b) {
                        (Ok(a), Ok(b)) => {
                            // A lazy permit of a breaker without statistics carries no start.
                            if lazy && !stats {
                                prop_assert_eq!((a.period(), a.is_probe()), (b.period(), b.is_probe()));
                            } else {
                                prop_assert_eq!(&a, &b);
                            }
                            permits.push((a, b));
                        }
                        (Err(a), Err(b)) => prop_assert_eq!(a, b),
                        (a, b) => prop_assert!(false, "diverged: {:?} vs {:?}", a, b),
                    }
                }
                Op::Complete(w, o, l) if !permits.is_empty() => {
                    let (a, b) = permits.swap_remove(w % permits.len());
                    let at = now + Duration::from_millis(u64::from(l));
                    local.on_outcome(at, a, outcome(o), &mut record(&mut la));
                    if lazy {
                        shared.on_outcome_lazy(|| at, b, outcome(o), &mut record(&mut lb));
                    } else {
                        shared.on_outcome(at, b, outcome(o), &mut record(&mut lb));
                    }
                    budget.on_outcome(at, outcome(o));
                    shared_budget.on_outcome(at, outcome(o));
                }
                Op::Release(w) if !permits.is_empty() => {
                    let (a, b) = permits.swap_remove(w % permits.len());
                    local.release(a);
                    shared.release(b);
                }
                Op::Advance(ms) => now += Duration::from_millis(u64::from(ms)),
                Op::Rewind(ms) => now = now - Duration::from_millis(u64::from(ms)),
                Op::Isolate => {
                    local.isolate(now, &mut record(&mut la));
                    shared.isolate(now, &mut record(&mut lb));
                }
                Op::Reset => {
                    local.reset(now, &mut record(&mut la));
                    shared.reset(now, &mut record(&mut lb));
                }
                Op::HandleTimeout => {
                    prop_assert_eq!(local.poll_timeout(now), shared.poll_timeout(now));
                    local.handle_timeout(now, &mut record(&mut la));
                    shared.handle_timeout(now, &mut record(&mut lb));
                }
                Op::Withdraw => prop_assert_eq!(budget.try_withdraw(now), shared_budget.try_withdraw(now)),
                Op::Deposit => {
                    budget.deposit(now);
                    shared_budget.deposit(now);
                }
                _ => {}
            }
            prop_assert_eq!(la, lb);
            prop_assert_eq!(local.snapshot(now), shared.snapshot(now));
            prop_assert_eq!(budget.snapshot(now), shared_budget.snapshot(now));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 4 } else { 256 }, ..ProptestConfig::default() })]

    /// An open breaker's refusal (read from the control word and the mark alone) is the one the
    /// full admission rule gives, at any instant: during the break, after it, and on a clock
    /// that stepped back before the open, whatever the break's jitter and doubling; in both
    /// forms.
    #[test]
    fn a_refusal_while_open_is_the_full_rules_answer(
        seed in any::<u64>(),
        jitter in any::<bool>(),
        reopens in 0u32..5,
        reseed in any::<bool>(),
        offsets in proptest::collection::vec(-20_000i64..150_000, 1..40),
    ) {
        let settings = BreakerSettings::builder("open")
            .consecutive_failures(1)
            .failure_rate(None)
            .slow_calls(None)
            .jitter(jitter)
            .build()
            .unwrap();
        let mut local = Breaker::new(settings).with_seed(seed);
        let shared = SharedBreaker::new(settings).with_seed(seed);
        let mut now = Instant::from_secs(1000);
        // Open, then fail the probe `reopens` times: each break doubles.
        for _ in 0..=reopens {
            if let Some(due) = local.poll_timeout(now) {
                now = now.max(due);
            }
            let a = local.try_acquire(now).unwrap();
            local.on_outcome(now, a, Outcome::Transient, &mut |_| {});
            let b = shared.try_acquire(now, None, &mut |_| {}).unwrap();
            shared.on_outcome(now, b, Outcome::Transient, &mut |_| {});
            // A refusal during every break: what one keeps of a break is not the next's.
            let refused = shared.try_acquire(now, None, &mut |_| {}).is_err();
            prop_assert!(local.try_acquire(now).is_err() && refused);
        }
        // A new seed in place: the rule and the refusal both bound the break by the new
        // seed's draw from here on, whatever a refusal kept of the old one.
        let shared = if reseed {
            local.set_seed(seed.wrapping_add(1));
            shared.with_seed(seed.wrapping_add(1))
        } else {
            shared
        };
        prop_assert_eq!(local.state(now), State::Open);
        for ms in offsets {
            let at = if ms < 0 {
                now - Duration::from_millis(ms.unsigned_abs())
            } else {
                now + Duration::from_millis(ms.unsigned_abs())
            };
            let rule = local.check(at).err();
            prop_assert_eq!(local.clone().try_acquire(at).err(), rule, "&mut at {:?}", at);
            prop_assert_eq!(shared.check(at).err(), rule, "shared check at {:?}", at);
            if rule.is_some() {
                prop_assert_eq!(shared.try_acquire(at, None, &mut |_| {}).err(), rule, "shared at {:?}", at);
            }
        }
    }
}

/// Outcomes written to different lanes are read as one trip window: spread over four lanes,
/// the same outcomes trip the shared breaker exactly when they trip the `&mut` one, for the
/// same reason, and leave the same counts.
#[test]
fn outcomes_spread_over_lanes_trip_as_the_same_outcomes_in_one() {
    let settings = BreakerSettings::builder("lanes")
        .consecutive_failures(50)
        .failure_rate(None)
        .failure_ratio(Ratio::from_percent(50))
        .minimum_calls(20)
        .jitter(false)
        .build()
        .unwrap();
    let local = Breaker::new(settings);
    let shared = SharedBreaker::<4>::with_lanes(settings).with_lane_hint(test_lane);
    let now = Instant::from_secs(100);
    let mut tripped_at = None;
    // Two successes, then a failure, over and over: the window reaches half failures once
    // enough of them have come.
    for i in 0..60u32 {
        let o = if i % 3 == 2 || i >= 30 {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        LANE.with(|l| l.set(i as usize));
        let (mut la, mut lb) = (Vec::new(), Vec::new());
        match (
            local.try_acquire(now),
            shared.try_acquire(now, None, &mut |_| {}),
        ) {
            (Ok(a), Ok(b)) => {
                local.on_outcome(now, a, o, &mut record(&mut la));
                shared.on_outcome(now, b, o, &mut record(&mut lb));
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("outcome {i}: diverged: {a:?} vs {b:?}"),
        }
        assert_eq!(la, lb, "outcome {i}");
        assert_eq!(local.snapshot(now), shared.snapshot(now), "outcome {i}");
        if tripped_at.is_none() && shared.state(now) != State::Closed {
            tripped_at = Some(i);
        }
    }
    // 20 successes and 10 failures by outcome 29, then failures: the window reaches half
    // failures at outcome 39 (20 of 40).
    assert_eq!(tripped_at, Some(39));
}

#[test]
fn shared_types_are_send_and_sync_and_single_threaded_ones_are_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<SharedBreaker>();
    send_sync::<SharedBudget>();
    send_sync::<stormguard_core::breaker::PermitGuard<'static>>();
    send::<Breaker>();
    send::<Budget>();
    send_sync::<Call>();
}

#[test]
fn a_dropped_permit_guard_gives_the_probe_slot_back() {
    let shared = SharedBreaker::new(BreakerSettings::builder("g").jitter(false).build().unwrap());
    let t = Instant::from_secs(1);
    for _ in 0..5 {
        let p = shared.try_acquire(t, None, &mut |_| {}).unwrap();
        shared.on_outcome(t, p, Outcome::Transient, &mut |_| {});
    }
    let after = t + Duration::from_secs(15);
    let guard = shared
        .try_acquire_guarded(after, None, &mut |_| {})
        .unwrap();
    assert_eq!(
        shared
            .try_acquire(after, None, &mut |_| {})
            .unwrap_err()
            .reason,
        RefusalReason::HalfOpenFull
    );
    drop(guard); // the caller's future was cancelled mid-attempt
    let guard = shared
        .try_acquire_guarded(after, None, &mut |_| {})
        .unwrap();
    guard.complete(after, Outcome::Success, &mut |_| {});
    assert_eq!(shared.snapshot(after).probes_in_flight, 0);
}

#[test]
fn one_driver_serves_the_shared_forms() {
    static BREAKER: SharedBreaker = SharedBreaker::new(BreakerSettings::defaults("static"));
    static BUDGET: SharedBudget = SharedBudget::new(BudgetSettings::defaults("static"));
    let parts = Parts::new().breaker(&BREAKER).budget(&BUDGET);
    let mut now = Instant::from_secs(1);
    let mut call = Call::begin(&CallSettings::DEFAULT, now);
    let mut attempts = 0;
    loop {
        match call.poll(&parts, now, &mut |_| {}) {
            Step::Attempt(p) => {
                attempts += 1;
                now += Duration::from_millis(5);
                let o = if attempts == 1 {
                    Outcome::Transient
                } else {
                    Outcome::Success
                };
                call.complete(&parts, p, now, o, &mut |_| {});
            }
            Step::Wait(d) => now += d,
            Step::Reject(r) => panic!("rejected: {r}"),
            Step::Done(f) => {
                assert_eq!(f, stormguard_core::Finished::Succeeded);
                break;
            }
        }
    }
    assert_eq!(attempts, 2);
    assert_eq!(BUDGET.available(now), 29);
    assert_eq!(BREAKER.state(now), State::Closed);
}

#[test]
fn many_threads_never_exceed_the_probe_limit() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let settings = BreakerSettings::builder("threads")
        .half_open_probes(2)
        .jitter(false)
        .break_duration(Duration::from_millis(10))
        .max_break(Duration::from_millis(10))
        .build()
        .unwrap();
    let shared = SharedBreaker::new(settings);
    // Probes in flight per breaker period: slots belong to a period (see `Permit::period`).
    let in_flight: [AtomicUsize; 256] = std::array::from_fn(|_| AtomicUsize::new(0));
    let worst = AtomicUsize::new(0);
    let clock = std::sync::atomic::AtomicU64::new(1_000_000_000);
    std::thread::scope(|s| {
        for id in 0..4u64 {
            let (shared, in_flight, worst, clock) = (&shared, &in_flight, &worst, &clock);
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(id);
                for _ in 0..20_000 {
                    let now = Instant::from_nanos(clock.fetch_add(1_000, Ordering::Relaxed));
                    // A long attempt timeout: no probe is reclaimed while its thread is descheduled.
                    let hold = Some(Duration::from_secs(3600));
                    if let Ok(p) = shared.try_acquire(now, hold, &mut |_| {}) {
                        let probe = p.is_probe();
                        let period = &in_flight[usize::from(p.period())];
                        if probe {
                            let n = period.fetch_add(1, Ordering::SeqCst) + 1;
                            worst.fetch_max(n, Ordering::SeqCst);
                        }
                        let o = if rng.u8(..) < 100 {
                            Outcome::Transient
                        } else {
                            Outcome::Success
                        };
                        std::thread::yield_now(); // the attempt runs while the slot is held
                        if probe {
                            period.fetch_sub(1, Ordering::SeqCst);
                        }
                        let now = Instant::from_nanos(clock.load(Ordering::Relaxed));
                        shared.on_outcome(now, p, o, &mut |_| {});
                    }
                }
            });
        }
    });
    assert!(
        worst.load(Ordering::SeqCst) <= 2,
        "probes in flight: {}",
        worst.load(Ordering::SeqCst)
    );
    let end = Instant::from_nanos(clock.load(Ordering::Relaxed)) + Duration::from_secs(1);
    assert_eq!(
        shared.snapshot(end).probes_in_flight,
        0,
        "no probe slot lost"
    );
}
