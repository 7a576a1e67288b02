//! A throttle hint of zero repeated many times is a failure in disguise: a dependency that
//! answers `503, Retry-After: 0` trips the breaker; one that asks for a real wait never does.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    outcome::MIN_THROTTLE_HINT, Breaker, BreakerSettings, Budget, BudgetSettings, Call,
    CallSettings, Duration, Event, Finished, Instant, Outcome, Parts, Rejection, State, Step,
};

fn parts() -> Parts<Breaker, Budget> {
    Parts::new()
        .breaker(Breaker::new(BreakerSettings::defaults("upstream")))
        .budget(Budget::new(BudgetSettings::defaults("upstream")))
}

/// Runs one call whose every attempt takes 20 ms and ends with `outcome`; returns how it
/// ended and how many attempts the dependency saw.
fn call(
    p: &Parts<Breaker, Budget>,
    now: &mut Instant,
    outcome: Outcome,
) -> (Result<Finished, Rejection>, u32) {
    let settings = CallSettings::builder().build().unwrap();
    let mut call = Call::begin(&settings, *now);
    let mut sink = |_: Event<'_>| {};
    let mut sent = 0;
    let result = loop {
        match call.poll(p, *now, &mut sink) {
            Step::Attempt(permit) => {
                sent += 1;
                *now += Duration::from_millis(20);
                call.complete(p, permit, *now, outcome, &mut sink);
            }
            Step::Wait(d) => *now += d,
            Step::Reject(r) => {
                *now += r.pause;
                break Err(r);
            }
            Step::Done(f) => break Ok(f),
        }
    };
    (result, sent)
}

#[test]
fn a_stream_of_zero_hint_throttles_trips_the_breaker_within_a_few_calls() {
    let p = parts();
    let mut now = Instant::from_secs(1);
    let zero = Outcome::Throttled {
        retry_after: Some(Duration::ZERO),
    };
    let mut sent = 0;
    let mut calls = 0;
    while p.breaker.as_ref().unwrap().state(now) == State::Closed {
        calls += 1;
        assert!(
            calls <= 5,
            "still closed after {calls} calls ({sent} requests)"
        );
        sent += call(&p, &mut now, zero).1;
    }
    // The default breaker opens on its fifth consecutive failure: two calls of three attempts.
    assert_eq!(p.breaker.as_ref().unwrap().state(now), State::Open);
    assert_eq!((calls, sent), (2, 5));
    // Once open, calls send nothing.
    let (r, n) = call(&p, &mut now, zero);
    assert!(r.is_err());
    assert_eq!(n, 0);
}

#[test]
fn a_real_retry_after_never_trips_the_breaker() {
    let p = parts();
    let mut now = Instant::from_secs(1);
    let paced = Outcome::Throttled {
        retry_after: Some(Duration::from_secs(30)),
    };
    for _ in 0..1_000 {
        let (r, sent) = call(&p, &mut now, paced);
        // A 30 s wait does not fit the 30 s deadline: one attempt, ended as throttled.
        assert_eq!(r, Ok(Finished::DeadlineExceeded { last: Some(paced) }));
        assert_eq!(sent, 1);
        now += Duration::from_secs(1);
    }
    assert_eq!(p.breaker.as_ref().unwrap().state(now), State::Closed);
}

#[test]
fn the_throttle_hint_floor_is_a_millisecond() {
    let just_below = Outcome::Throttled {
        retry_after: Some(Duration::from_nanos(MIN_THROTTLE_HINT.as_nanos() - 1)),
    };
    let at = Outcome::Throttled {
        retry_after: Some(MIN_THROTTLE_HINT),
    };
    let none = Outcome::Throttled { retry_after: None };
    assert_eq!(just_below.effective(), Outcome::Transient);
    assert_eq!(at.effective(), at);
    assert_eq!(none.effective(), none);
    assert_eq!(Outcome::Success.effective(), Outcome::Success);
}
