//! Inputs the fuzz targets (fuzz/) found to break an invariant, reduced to the few steps that
//! matter, so that each stays fixed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    call::NoHedge, Breaker, Budget, BudgetSettings, Call, CallSettings, Duration, Instant, Outcome,
    Parts, SharedBudget, Step,
};

mod support;
use support::ms;

/// A breaker that has learned that healthy calls take 10 ms (a baseline, so it offers hedges),
/// and a full budget; returns them and the instant the warm-up ended.
fn warm(start: Instant) -> (Parts<Breaker, Budget>, Instant) {
    let breaker = Breaker::of(5, "regressions").unwrap();
    let mut now = start;
    for _ in 0..40 {
        let p = breaker.try_acquire(now).unwrap();
        now += ms(10);
        breaker.on_outcome(now, p, Outcome::Success, &mut |_| {});
    }
    let budget = Budget::new(BudgetSettings::defaults("regressions"));
    (Parts::new().breaker(breaker).budget(budget), now)
}

fn hedging(deadline: Duration, attempt_timeout: Option<Duration>) -> CallSettings {
    CallSettings::builder()
        .deadline(Some(deadline))
        .attempt_timeout(attempt_timeout)
        .measured_ceiling(false)
        .hedging(true)
        .build()
        .unwrap()
}

/// fuzz target `call`: a hedge asked for after the call's deadline (the adapter's timer fired
/// late, or the clock jumped while the attempt ran) was launched with no time left: its attempt
/// deadline lay past the call's, and it took a retry from the budget and an attempt from the
/// call for nothing.
#[test]
fn no_hedge_is_launched_once_the_call_deadline_has_passed() {
    let (p, now) = warm(Instant::from_secs(100));
    let mut call = Call::begin(&hedging(ms(500), None), now);
    let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
        panic!("a closed breaker admits");
    };
    assert!(
        call.hedge_delay(&p, now).is_some(),
        "a warm breaker offers a hedge"
    );
    let deadline = call.deadline().unwrap();

    let late = deadline + ms(1);
    let budget_before = p.budget.as_ref().unwrap().available(late);
    assert_eq!(call.hedge(&p, late, &mut |_| {}), Err(NoHedge::NotNow));
    assert_eq!(call.attempts(), 1, "no attempt spent");
    assert_eq!(
        p.budget.as_ref().unwrap().available(late),
        budget_before,
        "no retry spent"
    );
    assert!(call.attempt_deadline().is_none_or(|d| d <= deadline));

    call.complete(&p, first, late, Outcome::TimedOut, &mut |_| {});
    assert!(call.is_over());
}

/// fuzz target `call`: the same, past the running attempt's own deadline (but within the
/// call's): `hedge_delay` offers no hedge that would start then, and `hedge` must not launch one.
#[test]
fn no_hedge_is_launched_once_the_running_attempt_is_over_its_own_deadline() {
    let (p, now) = warm(Instant::from_secs(100));
    let mut call = Call::begin(&hedging(ms(10_000), Some(ms(200))), now);
    let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
        panic!("a closed breaker admits");
    };
    let until = call.attempt_deadline().unwrap();
    assert_eq!(until, now + ms(200));

    let late = until + ms(1);
    assert!(late < call.deadline().unwrap());
    let budget_before = p.budget.as_ref().unwrap().available(late);
    assert_eq!(call.hedge(&p, late, &mut |_| {}), Err(NoHedge::NotNow));
    assert_eq!(call.attempts(), 1);
    assert_eq!(p.budget.as_ref().unwrap().available(late), budget_before);
    assert_eq!(call.attempt_deadline(), Some(until));

    call.complete(&p, first, late, Outcome::TimedOut, &mut |_| {});
    assert!(!call.is_over(), "the timed-out attempt is retried");
}

/// fuzz target `breaker`, once its clock was no longer kept within 2^30 ms: the budget keeps the
/// millisecond up to which its floor has accrued as a wrapping 32-bit stamp (so that tokens and
/// stamp fit one word, installed with one compare-exchange). A clock stepped back by less than
/// 2^31 ms (24.8 days) is no time passed; one stepped back further is indistinguishable from
/// that much idle time, and reads as time passed (documented on `BudgetState`): the floor may
/// refill the budget, never beyond its capacity.
#[test]
fn a_clock_stepped_back_accrues_nothing_within_24_days_and_never_more_than_capacity() {
    let settings = BudgetSettings::builder("regressions")
        .fraction_ppm(0)
        .floor_per_second_milli(1_000)
        .build()
        .unwrap();
    let now = Instant::from_secs(100 * 24 * 3600);
    let budget = Budget::new(settings);
    let shared = SharedBudget::new(settings);
    let capacity = budget.available(now);
    assert_eq!(capacity, 10, "10 s of a 1 per second floor");
    for _ in 0..capacity {
        budget.try_withdraw(now).unwrap();
        shared.try_withdraw(now).unwrap();
    }
    let back = now - Duration::from_secs(24 * 24 * 3600);
    assert!(budget.try_withdraw(back).is_err(), "no time passed");
    assert!(shared.try_withdraw(back).is_err(), "no time passed");
    // From the new reading on, the floor accrues as usual.
    assert!(budget.try_withdraw(back + Duration::from_secs(1)).is_ok());

    // 40 days back reads as 9.7 days of idle time: a refill, to capacity and no further.
    let far_back = back - Duration::from_secs(40 * 24 * 3600);
    assert_eq!(budget.available(far_back), capacity);
    assert_eq!(shared.available(far_back), capacity);
}
