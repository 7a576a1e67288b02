//! A local limiter's or bulkhead's refusal of an attempt is a self-imposed throttle: retried on
//! the throttled curve, uncharged, unseen by the breaker; a guarded rejection only when no retry
//! fits. On synthetic time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    limits::Bulkhead, limits::RateLimitSettings, limits::SharedRateLimiter, Backoff, Breaker,
    Budget, BudgetSettings, Call, CallSettings, Event, Instant, Outcome, Parts, RefusalReason,
    Step, GUARD_PAUSE,
};

mod support;
use support::{ms, no_jitter};

fn kinds(events: &mut Vec<String>) -> impl FnMut(Event<'_>) + '_ {
    |e| {
        events.push(match e {
            Event::Retry { attempt, delay, .. } => format!("retry #{attempt} after {delay}"),
            Event::Attempt { attempt, end, .. } => format!("attempt {attempt}: {end}"),
            other => other.kind().to_string(),
        })
    }
}

#[test]
fn a_rate_limited_attempt_waits_the_limiters_hint_uncharged_and_unseen_by_the_breaker() {
    let limiter = SharedRateLimiter::new(RateLimitSettings::per_second("api", 1).unwrap());
    let p = Parts::new()
        .breaker(Breaker::of(5, "api").unwrap())
        .limiter(&limiter)
        .budget(Budget::new(BudgetSettings::defaults("api")));
    let now = Instant::from_secs(1);
    // Another caller took the only cell: the next is due in 1 s.
    limiter.check(now).unwrap();
    let budget_before = p.budget.as_ref().unwrap().available(now);
    let mut events = Vec::new();
    let mut call = Call::begin(&no_jitter(), now);
    let step = call.poll(&p, now, &mut kinds(&mut events));
    assert_eq!(step, Step::Wait(ms(1000)));
    assert_eq!(
        events,
        [
            "attempt 1: refused locally (rate_limited), self-imposed",
            "retry #2 after 1s"
        ]
    );
    assert_eq!(call.attempts(), 1, "the refused attempt took a slot");
    assert_eq!(
        p.budget.as_ref().unwrap().available(now),
        budget_before,
        "nothing charged"
    );
    let snap = p.breaker.as_ref().unwrap().snapshot(now);
    assert_eq!(snap.consecutive_failures, 0, "nothing told to the breaker");
    // The cell is there after the hint: the attempt runs.
    let now = now + ms(1000);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempts(), 2);
    call.complete(&p, permit, now + ms(5), Outcome::Success, &mut |_| {});
    assert!(call.is_over());
}

#[test]
fn a_full_bulkhead_is_retried_on_the_throttled_curve_then_guarded_when_no_attempt_is_left() {
    let p = Parts::new()
        .breaker(Breaker::of(5, "db").unwrap())
        .bulkhead(Bulkhead::of(1, "db").unwrap())
        .budget(Budget::new(BudgetSettings::defaults("db")));
    let now = Instant::from_secs(1);
    let mut holder = Call::begin(&no_jitter(), now);
    let Step::Attempt(held) = holder.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    let budget_before = p.budget.as_ref().unwrap().available(now);
    let mut call = Call::begin(&no_jitter(), now);
    // No hint from a bulkhead: the throttled curve, 1 s then 2 s.
    assert_eq!(call.poll(&p, now, &mut |_| {}), Step::Wait(ms(1000)));
    let now = now + ms(1000);
    assert_eq!(call.poll(&p, now, &mut |_| {}), Step::Wait(ms(2000)));
    let now = now + ms(2000);
    // The third of three attempts is refused too: no retry fits, the guarded rejection.
    let Step::Reject(r) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(r.reason, RefusalReason::BulkheadFull);
    assert_eq!(r.pause, GUARD_PAUSE);
    assert_eq!(r.last, None);
    assert_eq!(p.budget.as_ref().unwrap().available(now), budget_before);
    holder.complete(&p, held, now, Outcome::Success, &mut |_| {});
}

#[test]
fn a_self_imposed_wait_past_the_deadline_ends_as_the_guarded_rejection_not_a_timeout() {
    let limiter = SharedRateLimiter::new(RateLimitSettings::per_second("api", 1).unwrap());
    let p = Parts::new()
        .breaker(Breaker::of(5, "api").unwrap())
        .limiter(&limiter)
        .budget(Budget::new(BudgetSettings::defaults("api")));
    let now = Instant::from_secs(1);
    limiter.check(now).unwrap();
    let short = no_jitter()
        .to_builder()
        .deadline(Some(ms(500)))
        .build()
        .unwrap();
    let mut call = Call::begin(&short, now);
    let Step::Reject(r) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(r.reason, RefusalReason::RateLimited);
}

#[test]
fn a_breaker_refusal_behind_a_limiter_is_still_rejected_at_once() {
    let limiter = SharedRateLimiter::new(RateLimitSettings::per_second("api", 1).unwrap());
    let p = Parts::new()
        .breaker(Breaker::of(5, "api").unwrap())
        .limiter(&limiter)
        .budget(Budget::new(BudgetSettings::defaults("api")));
    let now = Instant::from_secs(1);
    p.breaker.as_ref().unwrap().isolate(now, &mut |_| {});
    let mut call = Call::begin(&no_jitter(), now);
    let Step::Reject(r) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(r.reason, RefusalReason::Isolated);
}

#[test]
fn with_no_backoff_a_full_bulkhead_is_retried_at_once_never_with_a_zero_wait() {
    let p = Parts::new()
        .breaker(Breaker::of(5, "db").unwrap())
        .bulkhead(Bulkhead::of(1, "db").unwrap())
        .budget(Budget::new(BudgetSettings::defaults("db")));
    let now = Instant::from_secs(1);
    let mut holder = Call::begin(&no_jitter(), now);
    let Step::Attempt(held) = holder.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    let none = CallSettings::builder()
        .backoff(Backoff::none())
        .build()
        .unwrap();
    let mut events = Vec::new();
    let mut call = Call::begin(&none, now);
    // Each refusal is retried at once (announced, with no wait) until the attempts are spent,
    // all within the one poll: the adapter is never asked to sleep for nothing.
    let Step::Reject(r) = call.poll(&p, now, &mut kinds(&mut events)) else {
        panic!("a zero wait must not be handed to the adapter")
    };
    assert_eq!(r.reason, RefusalReason::BulkheadFull);
    assert_eq!(
        call.attempts(),
        2,
        "two refusals retried, the third guarded"
    );
    assert_eq!(
        events,
        [
            "attempt 1: refused locally (bulkhead_full), self-imposed",
            "retry #2 after 0s",
            "attempt 2: refused locally (bulkhead_full), self-imposed",
            "retry #3 after 0s",
            "attempt 3: refused locally (bulkhead_full), self-imposed",
            "rejected"
        ],
        "each refused attempt logged and each retry announced"
    );
    holder.complete(&p, held, now, Outcome::Success, &mut |_| {});
}
