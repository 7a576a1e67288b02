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

/// A consecutive-only breaker (no statistics: the model stays small), tripped at `T0`, whose
/// unjittered 15 s break is over at `AFTER`.
fn tripped(probes: u32, successes: u32) -> SharedBreaker {
    let settings = BreakerSettings::builder("loom")
        .consecutive_failures(1)
        .failure_rate(None)
        .slow_calls(None)
        .jitter(false)
        .half_open_probes(probes)
        .probe_successes(successes)
        .build()
        .unwrap();
    let b = SharedBreaker::new(settings);
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
        let b = Arc::new(SharedBreaker::new(settings));
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
