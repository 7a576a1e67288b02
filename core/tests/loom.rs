//! Model checks of every atomic protocol in the shared forms, over every interleaving loom
//! explores. Run with:
//! `RUSTFLAGS="--cfg loom" cargo test --release -p stormguard-core --test loom`
#![cfg(loom)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use loom::sync::Arc;
use loom::thread;
use stormguard_core::{
    BreakerSettings, BudgetSettings, Duration, Instant, Outcome, RefusalReason, SharedBreaker,
    SharedBudget, State,
};

const T0: Instant = Instant::from_secs(10);
const AFTER: Instant = Instant::from_secs(30);

/// A consecutive-only breaker (no statistics, and so one lane of them: the model stays small),
/// tripped at `T0`, whose unjittered 15 s break is over at `AFTER`.
fn tripped(probes: u32, successes: u32) -> SharedBreaker<1> {
    let settings = BreakerSettings::builder("loom")
        .consecutive_failures(1)
        .failure_rate(None)
        .slow_calls(None)
        .jitter(false)
        .half_open_probes(probes)
        .probe_successes(successes)
        .build()
        .unwrap();
    let b = SharedBreaker::<1>::with_lanes(settings);
    let p = b.try_acquire(T0, None, &mut |_| {}).unwrap();
    b.on_outcome(T0, p, Outcome::Transient, &mut |_| {});
    b
}

#[test]
fn racing_threads_each_win_at_most_one_probe_slot_and_exactly_the_limit_is_granted() {
    loom::model(|| {
        let b = Arc::new(tripped(2, 2));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || b.try_acquire(AFTER, None, &mut |_| {}).ok())
            })
            .collect();
        let granted: Vec<_> = handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(
            granted.len(),
            2,
            "the open -> half-open transition raced: exactly 2 slots"
        );
        assert!(granted.iter().all(|p| p.is_probe()));
        assert_eq!(b.snapshot(AFTER).probes_in_flight, 2);
        for p in granted {
            b.release(p);
        }
        assert_eq!(b.snapshot(AFTER).probes_in_flight, 0);
    });
}

#[test]
fn a_probe_dropped_while_another_thread_acquires_is_never_lost() {
    loom::model(|| {
        let b = Arc::new(tripped(1, 2));
        let first = b.try_acquire_guarded(AFTER, None, &mut |_| {}).unwrap();
        let b2 = b.clone();
        let other = thread::spawn(move || b2.try_acquire(AFTER, None, &mut |_| {}));
        drop(first); // cancelled: the guard hands the slot back
        let result = other.join().unwrap();
        match result {
            Ok(p) => {
                assert!(p.is_probe());
                assert_eq!(b.snapshot(AFTER).probes_in_flight, 1);
                b.release(p);
            }
            Err(r) => assert_eq!(r.reason, RefusalReason::HalfOpenFull),
        }
        assert_eq!(b.snapshot(AFTER).probes_in_flight, 0, "no slot leaked");
        assert!(b.try_acquire(AFTER, None, &mut |_| {}).is_ok());
    });
}

#[test]
fn a_closing_and_a_reopening_probe_race_to_one_consistent_state() {
    loom::model(|| {
        let b = Arc::new(tripped(2, 1));
        let good = b.try_acquire(AFTER, None, &mut |_| {}).unwrap();
        let bad = b.try_acquire(AFTER, None, &mut |_| {}).unwrap();
        let b1 = b.clone();
        let t1 = thread::spawn(move || b1.on_outcome(AFTER, good, Outcome::Success, &mut |_| {}));
        let b2 = b.clone();
        let t2 = thread::spawn(move || b2.on_outcome(AFTER, bad, Outcome::Transient, &mut |_| {}));
        t1.join().unwrap();
        t2.join().unwrap();
        let snap = b.snapshot(AFTER);
        // Whichever lands first decides; the other belongs to a finished period and decides
        // nothing. Either way no probe slot is left taken.
        assert!(
            matches!(snap.state, State::Closed | State::Open),
            "{:?}",
            snap.state
        );
        assert_eq!(snap.probes_in_flight, 0);
        if snap.state == State::Open {
            assert_eq!(snap.break_duration, Some(Duration::from_secs(30)));
        }
    });
}

#[test]
fn concurrent_failures_while_closed_open_the_breaker_once() {
    loom::model(|| {
        let settings = BreakerSettings::builder("loom")
            .consecutive_failures(2)
            .failure_rate(None)
            .slow_calls(None)
            .jitter(false)
            .build()
            .unwrap();
        let b = Arc::new(SharedBreaker::<1>::with_lanes(settings));
        let opens = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (b, opens) = (b.clone(), opens.clone());
                thread::spawn(move || {
                    let p = b.try_acquire(T0, None, &mut |_| {}).unwrap();
                    b.on_outcome(T0, p, Outcome::Transient, &mut |e| {
                        if let stormguard_core::Event::StateChanged {
                            to: State::Open, ..
                        } = e
                        {
                            opens.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
                        }
                    });
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(b.state(T0), State::Open);
        assert_eq!(opens.load(loom::sync::atomic::Ordering::SeqCst), 1);
    });
}

#[test]
fn racing_withdrawals_never_spend_more_retries_than_there_are_tokens() {
    loom::model(|| {
        // No floor: the budget holds exactly one retry.
        let settings = BudgetSettings::builder("loom")
            .floor_per_second_milli(0)
            .build()
            .unwrap();
        let budget = Arc::new(SharedBudget::new(settings));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                thread::spawn(move || budget.try_withdraw(T0).is_ok())
            })
            .collect();
        let granted = handles
            .into_iter()
            .filter(|_| true)
            .map(|h| h.join().unwrap())
            .filter(|ok| *ok)
            .count();
        assert_eq!(granted, 1);
        assert_eq!(budget.available(T0), 0);
    });
}

#[test]
fn deposits_racing_a_withdrawal_are_all_counted() {
    loom::model(|| {
        let settings = BudgetSettings::builder("loom")
            .floor_per_second_milli(0)
            .fraction_ppm(500_000)
            .build()
            .unwrap();
        let budget = Arc::new(SharedBudget::new(settings));
        budget.try_withdraw(T0).unwrap(); // empty
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                thread::spawn(move || budget.on_outcome(T0, Outcome::Success))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // Two half-retries make exactly one.
        assert_eq!(budget.available(T0), 1);
    });
}

#[test]
fn a_late_mark_of_an_earlier_period_never_hides_a_later_break() {
    loom::model(|| {
        let b = Arc::new(tripped(2, 2));
        // Half-open: one probe out, taken before the race.
        let first = b.try_acquire(AFTER, None, &mut |_| {}).unwrap();
        let b1 = b.clone();
        // A second probe is granted (and its deadline stored) while ...
        let hold = Some(Duration::from_secs(60)); // a later deadline than the first probe's
        let acquirer = thread::spawn(move || b1.try_acquire(AFTER, hold, &mut |_| {}).ok());
        let b2 = b.clone();
        // ... the first probe fails and re-opens the breaker for a doubled break.
        let reopener =
            thread::spawn(move || b2.on_outcome(AFTER, first, Outcome::Transient, &mut |_| {}));
        reopener.join().unwrap();
        if let Some(p) = acquirer.join().unwrap() {
            b.release(p);
        }
        assert_eq!(b.state(AFTER), State::Open);
        let r = b.check(AFTER).unwrap_err();
        assert!(r.retry_after <= Duration::from_secs(30), "{r:?}");
        // Once the doubled break is over, the breaker reads half-open and admits a probe.
        let later = AFTER + Duration::from_secs(30);
        assert_eq!(b.state(later), State::HalfOpen);
        assert!(b.try_acquire(later, None, &mut |_| {}).is_ok());
    });
}

// ---------------------------------------------------------------------------------------------
// Rate limiters: one word each, installed by load / pure step / compare-exchange.

use stormguard_core::{
    limits::BulkheadEntry, limits::BulkheadSettings, limits::RateLimitSettings,
    limits::RateLimiter, limits::SharedBulkhead, limits::SharedRateLimiter,
    limits::SharedWindowLimiter, limits::WindowLimitSettings, limits::WindowLimiter, Refused,
};

/// Two requests: `(at, cells)`.
type Request = (Instant, u32);

/// What a limiter answered to the two requests, and how it reads afterwards at `probes`.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    answers: [Result<(), Refused>; 2],
    after: Vec<u32>,
}

/// The runs of the two sequential orders, by a `&mut` limiter driven with `check_n`.
fn sequential<L: Clone>(
    fresh: &L,
    check_n: impl Fn(&L, Instant, u32) -> Result<(), Refused>,
    available: impl Fn(&L, Instant) -> u32,
    requests: [Request; 2],
    probes: &[Instant],
) -> [Run; 2] {
    let order = |first: usize| {
        let l = fresh.clone();
        let mut answers = [Ok(()), Ok(())];
        for i in [first, 1 - first] {
            let (at, n) = requests[i];
            answers[i] = check_n(&l, at, n);
        }
        let after = probes.iter().map(|&t| available(&l, t)).collect();
        Run { answers, after }
    };
    [order(0), order(1)]
}

/// Inside a loom model: the two requests raced on two threads against a shared limiter, and how
/// it reads afterwards at `probes`.
fn raced<S: Send + Sync + 'static>(
    limiter: S,
    check_n: fn(&S, Instant, u32) -> Result<(), Refused>,
    available: fn(&S, Instant) -> u32,
    requests: [Request; 2],
    probes: &[Instant],
) -> Run {
    let limiter = Arc::new(limiter);
    let handles: Vec<_> = requests
        .into_iter()
        .map(|(at, n)| {
            let limiter = limiter.clone();
            thread::spawn(move || check_n(&limiter, at, n))
        })
        .collect();
    let answers: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    Run {
        answers: [answers[0], answers[1]],
        after: probes.iter().map(|&t| available(&limiter, t)).collect(),
    }
}

#[test]
fn racing_gcra_checks_admit_no_more_than_the_rule_in_one_sequential_order() {
    // 2 cells a second, burst 2: the requests together ask for more than the burst holds.
    let settings = RateLimitSettings::builder("loom")
        .rate(2, Duration::from_secs(1))
        .burst(2)
        .build()
        .unwrap();
    let requests = [(T0, 2), (T0 + Duration::from_millis(200), 1)];
    let probes = [
        T0,
        T0 + Duration::from_millis(500),
        T0 + Duration::from_secs(1),
    ];
    let expected = sequential(
        &RateLimiter::new(settings),
        RateLimiter::check_n,
        RateLimiter::available,
        requests,
        &probes,
    );
    assert_ne!(
        expected[0], expected[1],
        "the order matters: the race is real"
    );
    loom::model(move || {
        let run = raced(
            SharedRateLimiter::new(settings),
            SharedRateLimiter::check_n,
            SharedRateLimiter::available,
            requests,
            &probes,
        );
        assert!(
            expected.contains(&run),
            "no sequential order gives {run:?}; orders: {expected:?}"
        );
        let admitted: u32 = requests
            .iter()
            .zip(&run.answers)
            .filter(|(_, a)| a.is_ok())
            .map(|((_, n), _)| n)
            .sum();
        assert!(admitted <= 2, "{admitted} cells admitted, burst 2");
    });
}

#[test]
fn racing_window_checks_count_every_event_once_in_one_sequential_order() {
    // 2 events a window: the second request does not fit after the first and starts the
    // cooldown, whichever comes first.
    let settings = WindowLimitSettings::builder("loom")
        .events(2)
        .window(Duration::from_secs(1))
        .cooldown(Duration::from_secs(5))
        .build()
        .unwrap();
    let requests = [(T0, 2), (T0 + Duration::from_millis(10), 1)];
    let probes = [
        T0 + Duration::from_millis(10),
        T0 + Duration::from_secs(2),
        T0 + Duration::from_secs(6),
    ];
    let expected = sequential(
        &WindowLimiter::new(settings),
        WindowLimiter::check_n,
        WindowLimiter::available,
        requests,
        &probes,
    );
    assert_ne!(
        expected[0], expected[1],
        "the order matters: the race is real"
    );
    loom::model(move || {
        let run = raced(
            SharedWindowLimiter::new(settings),
            SharedWindowLimiter::check_n,
            SharedWindowLimiter::available,
            requests,
            &probes,
        );
        assert!(
            expected.contains(&run),
            "no sequential order gives {run:?}; orders: {expected:?}"
        );
        assert_eq!(
            run.answers.iter().filter(|a| a.is_ok()).count(),
            1,
            "exactly one request fits in the window"
        );
    });
}

#[test]
fn three_racing_single_cell_checks_on_a_burst_of_two_admit_exactly_two() {
    let settings = RateLimitSettings::builder("loom")
        .rate(1, Duration::from_secs(1))
        .burst(2)
        .build()
        .unwrap();
    loom::model(move || {
        let limiter = Arc::new(SharedRateLimiter::new(settings));
        let others: Vec<_> = (0..2)
            .map(|_| {
                let limiter = limiter.clone();
                thread::spawn(move || limiter.check(T0))
            })
            .collect();
        let mine = limiter.check(T0);
        let mut answers: Vec<_> = others.into_iter().map(|h| h.join().unwrap()).collect();
        answers.push(mine);
        let refused: Vec<_> = answers.iter().filter_map(|a| a.err()).collect();
        assert_eq!(refused.len(), 1, "{answers:?}");
        // As in every sequential order: the third waits exactly one interval.
        assert_eq!(refused[0].retry_after, Duration::from_secs(1));
        assert_eq!(limiter.available(T0), 0);
    });
}

// ---------------------------------------------------------------------------------------------
// Bulkhead: one word (in flight, queued), every rule a compare-exchange step.

fn bulkhead(max: u32, queue: u32) -> BulkheadSettings {
    BulkheadSettings::builder("loom")
        .max_in_flight(max)
        .bounded_wait(queue, Duration::from_secs(1))
        .build()
        .unwrap()
}

#[test]
fn racing_enters_never_hold_more_slots_than_the_maximum_and_all_come_back() {
    use loom::sync::atomic::{AtomicU32, Ordering};
    loom::model(|| {
        let b = Arc::new(SharedBulkhead::new(bulkhead(1, 0)));
        let holding = Arc::new(AtomicU32::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (b, holding) = (b.clone(), holding.clone());
                thread::spawn(move || match b.try_enter(T0) {
                    Ok(permit) => {
                        let now_held = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now_held <= 1, "{now_held} calls in flight, maximum 1");
                        assert!(b.in_flight() <= 1);
                        holding.fetch_sub(1, Ordering::SeqCst);
                        assert!(!b.leave(permit), "nobody queues here");
                        true
                    }
                    Err(_) => false,
                })
            })
            .collect();
        let admitted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|ok| *ok)
            .count();
        assert!(admitted >= 1, "a free slot was refused to both");
        assert_eq!((b.in_flight(), b.queued()), (0, 0));
    });
}

#[test]
fn a_leave_racing_a_queued_caller_hands_over_the_slot_and_the_counts_return_to_zero() {
    use loom::sync::atomic::{AtomicU32, Ordering};
    loom::model(|| {
        let b = Arc::new(SharedBulkhead::new(bulkhead(1, 1)));
        let holding = Arc::new(AtomicU32::new(1));
        let first = b.try_enter(T0).unwrap();

        let (b1, h1) = (b.clone(), holding.clone());
        let leaver = thread::spawn(move || {
            h1.fetch_sub(1, Ordering::SeqCst);
            b1.leave(first)
        });
        let (b2, h2) = (b.clone(), holding.clone());
        let waiter = thread::spawn(move || {
            let (permit, queued) = match b2.try_enter_or_queue(T0, Duration::MAX).unwrap() {
                BulkheadEntry::Entered(p) => (Some(p), false),
                // Woken (or not yet): its turn once; still full, it gives up.
                BulkheadEntry::Queued(ticket) => match b2.on_slot_free(T0, ticket) {
                    Ok(BulkheadEntry::Entered(p)) => (Some(p), true),
                    Ok(BulkheadEntry::Queued(ticket)) => {
                        b2.abandon(ticket);
                        (None, true)
                    }
                    Err(r) => panic!("refused before its wait was over: {r}"),
                },
            };
            if let Some(p) = permit {
                let now_held = h2.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now_held <= 1, "{now_held} calls in flight, maximum 1");
                assert!(b2.snapshot().in_flight <= 1 && b2.snapshot().queued <= 1);
                h2.fetch_sub(1, Ordering::SeqCst);
                b2.leave(p);
            }
            queued
        });
        let woke = leaver.join().unwrap();
        let queued = waiter.join().unwrap();
        // The leave says someone waits only if the waiter had queued (it never queues once the
        // slot is free: a free slot is taken at once).
        assert!(!woke || queued, "a wake-up with nobody queued");
        assert_eq!(
            (b.in_flight(), b.queued()),
            (0, 0),
            "the counts return to zero"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Adaptive limiter: one word (in flight, limit, the round's count, its fastest call, held back),
// every admission and completion a compare-exchange step; the latency histogram beside it.

use stormguard_core::limits::{AdaptiveLimitSettings, LimitChange, SharedAdaptiveLimiter};

fn adaptive(min: u32, max: u32, initial: u32) -> SharedAdaptiveLimiter {
    SharedAdaptiveLimiter::new(
        AdaptiveLimitSettings::builder("loom")
            .limits(min, max)
            .initial_limit(initial)
            .build()
            .unwrap(),
    )
}

#[test]
fn racing_completions_end_a_round_exactly_once_and_it_grows_the_limit_once() {
    loom::model(|| {
        let l = Arc::new(adaptive(1, 4, 2));
        let a = l.try_acquire(T0).unwrap();
        let b = l.try_acquire(T0).unwrap();
        // The limit holds a third call back: the round will grow the limit.
        assert!(l.try_acquire(T0).is_err());
        let handles: Vec<_> = [a, b]
            .into_iter()
            .map(|p| {
                let l = l.clone();
                thread::spawn(move || l.complete(p, AFTER, None))
            })
            .collect();
        let changes: Vec<LimitChange> = handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(
            changes,
            vec![LimitChange {
                before: 2,
                after: 3
            }]
        );
        let snap = l.snapshot();
        assert_eq!((snap.limit, snap.in_flight, snap.round_calls), (3, 0, 0));
        assert!(!snap.held_back, "a new round starts clean");
    });
}

#[test]
fn an_acquire_racing_the_round_end_is_held_back_in_the_round_that_grows_or_admitted_after_it() {
    loom::model(|| {
        let l = Arc::new(adaptive(1, 2, 1));
        let first = l.try_acquire(T0).unwrap();
        let l1 = l.clone();
        // The completion ends the round (a limit of one), with a latency for the histogram and
        // the baseline read.
        let ender =
            thread::spawn(move || l1.complete(first, AFTER, Some(Duration::from_millis(5))));
        let l2 = l.clone();
        let caller = thread::spawn(move || match l2.try_acquire(AFTER) {
            Ok(p) => {
                assert!(l2.in_flight() <= l2.limit());
                l2.release(p);
                true
            }
            Err(_) => false,
        });
        let change = ender.join().unwrap();
        let admitted = caller.join().unwrap();
        // Refused only while the first call was in flight, so in the round that then ended:
        // it grew; admitted only once that round was over without holding anyone back.
        if admitted {
            assert_eq!(change, None);
            assert_eq!(l.limit(), 1);
        } else {
            assert_eq!(
                change,
                Some(LimitChange {
                    before: 1,
                    after: 2
                })
            );
            assert_eq!(l.limit(), 2);
        }
        assert_eq!(l.in_flight(), 0);
        assert!(l.baseline().is_some(), "the round's end read the baseline");
    });
}
