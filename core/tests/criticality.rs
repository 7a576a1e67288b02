//! Criticality in the call driver, on synthetic time: sheddable work is never hedged and gets
//! no retry once the retry budget is more than half spent, while default and critical work
//! retry as the budget allows.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::part::Never;
use stormguard_core::{
    call::{Criticality, NoHedge},
    Breaker, BreakerSettings, Budget, BudgetSettings, Call, Duration, Finished, Instant, Outcome,
    Parts, RefusalReason, Step,
};

mod support;
use support::{ms, no_jitter};

const T0: Instant = Instant::from_secs(1);

/// A default budget (30 retries, 3 per second of floor) with `spent` retries withdrawn at `T0`.
fn spent(spent: u32) -> Parts<Never, Budget> {
    let budget = Budget::new(BudgetSettings::defaults("feed"));
    for _ in 0..spent {
        budget.try_withdraw(T0).unwrap();
    }
    Parts::new().named("feed").budget(budget)
}

/// One failed attempt at `T0`, then what the call does next.
fn after_a_failure(parts: &Parts<Never, Budget>, criticality: Criticality) -> Step {
    let mut call = Call::begin(&no_jitter(), T0);
    call.set_criticality(criticality);
    assert_eq!(call.criticality(), criticality);
    let Step::Attempt(permit) = call.poll(parts, T0, &mut |_| {}) else {
        panic!("the first attempt always runs")
    };
    call.complete(parts, permit, T0, Outcome::Transient, &mut |_| {});
    call.poll(parts, T0, &mut |_| {})
}

#[test]
fn sheddable_work_retries_while_no_more_than_half_the_budget_is_spent() {
    let p = spent(15); // exactly half of 30
    assert_eq!(
        after_a_failure(&p, Criticality::Sheddable),
        Step::Wait(ms(100))
    );
    assert_eq!(p.budget.as_ref().unwrap().available(T0), 14); // the retry was funded as any other
}

#[test]
fn sheddable_work_gets_no_retry_once_the_budget_is_more_than_half_spent() {
    let p = spent(16);
    let Step::Reject(r) = after_a_failure(&p, Criticality::Sheddable) else {
        panic!("a refused retry is the guarded rejection")
    };
    assert_eq!(r.reason, RefusalReason::Shed);
    assert_eq!(r.last, Some(Outcome::Transient));
    assert_eq!(r.attempts, 1);
    // Nothing was withdrawn for it; after the pause, back to half takes the floor 1/3 s (one
    // retry at 3 per second), counted from the end of the pause.
    assert_eq!(p.budget.as_ref().unwrap().available(T0), 14);
    assert_eq!(r.retry_after, Duration::from_millis(334) - r.pause);
}

#[test]
fn default_and_critical_work_still_retry_past_half_the_budget() {
    for c in [Criticality::Default, Criticality::Critical] {
        let p = spent(16);
        assert_eq!(after_a_failure(&p, c), Step::Wait(ms(100)), "{c}");
        assert_eq!(p.budget.as_ref().unwrap().available(T0), 13, "{c}");
    }
}

#[test]
fn a_sheddable_call_whose_dependency_answered_gets_the_answer_back() {
    let p = spent(20);
    let mut call = Call::begin(&no_jitter(), T0);
    call.set_criticality(Criticality::Sheddable);
    let Step::Attempt(permit) = call.poll(&p, T0, &mut |_| {}) else {
        panic!()
    };
    // An HTTP 503: answered; the refused retry hands it back at once.
    call.complete_attempt(&p, permit, T0, Outcome::Transient, true, &mut |_| {});
    assert_eq!(
        call.poll(&p, T0, &mut |_| {}),
        Step::Done(Finished::Failed(Outcome::Transient))
    );
}

#[test]
fn the_floor_refills_the_budget_and_sheddable_work_retries_again() {
    let p = spent(16);
    // One retry's worth of floor (334 ms at 3 per second) brings the budget back to half.
    let later = T0 + ms(334);
    assert!(p.budget.as_ref().unwrap().check_shed(later).is_ok());
    assert!(p.budget.as_ref().unwrap().check_shed(T0 + ms(300)).is_err());
}

#[test]
fn sheddable_work_is_never_hedged() {
    let p = Parts::new()
        .breaker(Breaker::new(
            BreakerSettings::builder("search")
                .jitter(false)
                .build()
                .unwrap(),
        ))
        .budget(Budget::new(BudgetSettings::defaults("search")));
    let mut now = T0;
    for _ in 0..40 {
        let permit = p.breaker.as_ref().unwrap().try_acquire(now).unwrap();
        now += ms(20);
        p.breaker
            .as_ref()
            .unwrap()
            .on_outcome(now, permit, Outcome::Success, &mut |_| {});
    }
    let hedging = no_jitter().to_builder().hedging(true).build().unwrap();
    for (c, hedged) in [
        (Criticality::Sheddable, false),
        (Criticality::Default, true),
        (Criticality::Critical, true),
    ] {
        let mut call = Call::begin(&hedging, now);
        call.set_criticality(c);
        let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
            panic!()
        };
        assert_eq!(call.hedge_delay(&p, now).is_some(), hedged, "{c}");
        let at = now + ms(30);
        let hedge = call.hedge(&p, at, &mut |_| {});
        if hedged {
            let second = hedge.unwrap();
            call.complete(&p, second, at + ms(20), Outcome::Success, &mut |_| {});
            call.complete(&p, first, at + ms(20), Outcome::Cancelled, &mut |_| {});
        } else {
            assert_eq!(hedge, Err(NoHedge::Sheddable));
            assert_eq!(call.attempts(), 1);
            call.complete(&p, first, at, Outcome::Success, &mut |_| {});
        }
        now = at + ms(20);
    }
}

#[test]
fn a_label_parses_from_hostile_bytes_without_panicking() {
    assert_eq!(Criticality::parse(b"critical"), Some(Criticality::Critical));
    assert_eq!(Criticality::parse(b" DEFAULT "), Some(Criticality::Default));
    for bad in [
        &b""[..],
        b" ",
        b"critical2",
        b"crit",
        b"critical\0",
        b"critical,sheddable",
        &[0xc3, 0xa9],
        &[b' '; 40],
    ] {
        assert_eq!(Criticality::parse(bad), None, "{bad:?}");
    }
    // A valid word padded beyond 32 bytes is refused: the length is bounded before trimming.
    let mut long = [b' '; 40];
    long[..8].copy_from_slice(b"critical");
    assert_eq!(Criticality::parse(&long), None);
    // Every one of the labels round-trips.
    for c in [
        Criticality::Sheddable,
        Criticality::Default,
        Criticality::Critical,
    ] {
        assert_eq!(Criticality::parse(c.as_str().as_bytes()), Some(c));
    }
}

#[test]
fn a_label_is_capped_at_the_level_a_server_allows() {
    use Criticality::{Critical, Default, Sheddable};
    assert_eq!(Critical.capped(Default), Default);
    assert_eq!(Critical.capped(Critical), Critical);
    assert_eq!(Sheddable.capped(Critical), Sheddable);
    assert_eq!(Default.capped(Sheddable), Sheddable);
}
