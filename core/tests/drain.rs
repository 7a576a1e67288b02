//! Drain-aware shutdown in the call driver, on synthetic time: once a drain begins no attempt
//! or retry starts, deadlines are clamped to the grace, the attempt in flight finishes, and a
//! call the drain stopped ends with its own reason and the last outcome it had.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    call::{NoHedge, DRAIN_GRACE},
    Breaker, BreakerSettings, Budget, BudgetSettings, Call, CallError, CallSettings, Duration,
    Event, Finished, Instant, Outcome, Parts, Step,
};

mod support;
use support::{ms, no_jitter, secs};

fn unguarded() -> Parts {
    Parts::new().named("db")
}

/// Records each event's kind (and a drain's attempts and last outcome).
fn recorder(log: &mut Vec<String>) -> impl FnMut(Event<'_>) + '_ {
    |e| {
        log.push(match e {
            Event::Drained { attempts, last, .. } => format!("drained {attempts} {last:?}"),
            Event::Attempt { attempt, end, .. } => format!("attempt {attempt}: {end}"),
            other => other.kind().to_string(),
        })
    }
}

const T0: Instant = Instant::from_secs(1);

#[test]
fn a_drain_during_an_attempt_lets_it_finish_but_starts_no_retry() {
    let p = unguarded();
    let mut log = Vec::new();
    let mut call = Call::begin(&no_jitter(), T0);
    let Step::Attempt(permit) = call.poll(&p, T0, &mut recorder(&mut log)) else {
        panic!("the first attempt runs")
    };
    call.on_drain(T0 + ms(10), DRAIN_GRACE);
    assert!(call.is_draining());
    // The attempt in flight runs on to its own outcome, a failure that would be retried.
    let end = T0 + ms(40);
    call.complete(&p, permit, end, Outcome::Transient, &mut recorder(&mut log));
    let last = Some(Outcome::Transient);
    assert_eq!(
        call.poll(&p, end, &mut recorder(&mut log)),
        Step::Done(Finished::Drained { last })
    );
    assert_eq!(call.attempts(), 1);
    // Announced once, with what the call had; no `retry` was scheduled.
    assert_eq!(
        log,
        [
            "attempt 1: transient failure after 40ms",
            "drained 1 Some(Transient)"
        ]
    );
    // The caller gets the drain's own reason and the last error.
    let result: Result<u32, _> = Finished::Drained { last }.into_result(Some(Err("reset")));
    assert_eq!(
        result,
        Err(CallError::Drained {
            last: Some("reset")
        })
    );
    assert_eq!(result.unwrap_err().last_error(), Some(&"reset"));
}

#[test]
fn an_attempt_that_succeeds_after_the_drain_began_is_the_calls_success() {
    let p = unguarded();
    let mut call = Call::begin(&no_jitter(), T0);
    let Step::Attempt(permit) = call.poll(&p, T0, &mut |_| {}) else {
        panic!()
    };
    call.on_drain(T0 + ms(1), DRAIN_GRACE);
    call.complete(&p, permit, T0 + ms(5), Outcome::Success, &mut |_| {});
    assert_eq!(
        call.poll(&p, T0 + ms(5), &mut |_| {}),
        Step::Done(Finished::Succeeded)
    );
}

#[test]
fn a_drain_during_a_backoff_wait_ends_the_call_at_the_next_poll_without_an_attempt() {
    let p = unguarded();
    let mut log = Vec::new();
    let mut call = Call::begin(&no_jitter(), T0);
    let Step::Attempt(permit) = call.poll(&p, T0, &mut recorder(&mut log)) else {
        panic!()
    };
    call.complete(
        &p,
        permit,
        T0 + ms(5),
        Outcome::TimedOut,
        &mut recorder(&mut log),
    );
    // Waiting 100 ms for the retry; the drain begins 30 ms into the wait.
    assert_eq!(call.poll(&p, T0 + ms(5), &mut |_| {}), Step::Wait(ms(100)));
    call.on_drain(T0 + ms(35), DRAIN_GRACE);
    let last = Some(Outcome::TimedOut);
    assert_eq!(
        call.poll(&p, T0 + ms(35), &mut recorder(&mut log)),
        Step::Done(Finished::Drained { last })
    );
    assert_eq!(call.attempts(), 1);
    assert_eq!(
        log,
        [
            "attempt 1: timed out after 5ms",
            "retry",
            "drained 1 Some(TimedOut)"
        ]
    );
    // A timeout returned no error: the drain's reason, with no last error.
    let result: Result<u32, CallError<&str>> = Finished::Drained { last }.into_result(None);
    assert_eq!(result, Err(CallError::Drained { last: None }));
}

#[test]
fn a_drain_before_a_call_starts_refuses_it_at_once_with_the_drain_reason() {
    let p = Parts::new()
        .breaker(Breaker::of(5, "payments").unwrap())
        .budget(Budget::new(BudgetSettings::defaults("payments")));
    let mut log = Vec::new();
    let mut call = Call::begin(&CallSettings::DEFAULT, T0);
    call.on_drain(T0, DRAIN_GRACE);
    assert_eq!(
        call.poll(&p, T0, &mut recorder(&mut log)),
        Step::Done(Finished::Drained { last: None })
    );
    assert_eq!(call.attempts(), 0);
    assert_eq!(log, ["drained 0 None"]);
    // Nothing reached the breaker or the budget.
    assert_eq!(p.breaker.as_ref().unwrap().snapshot(T0).window_calls, 0);
    assert_eq!(p.budget.as_ref().unwrap().available(T0), 30);
    // Done stays done.
    assert_eq!(
        call.poll(&p, T0 + secs(1), &mut |_| {}),
        Step::Done(Finished::Drained { last: None })
    );
}

#[test]
fn a_drain_clamps_the_call_and_attempt_deadlines_to_the_grace() {
    let p = unguarded();
    // No deadline and no attempt timeout: only the grace bounds the call.
    let settings = CallSettings::builder()
        .deadline(None)
        .attempt_timeout(None)
        .build()
        .unwrap();
    let mut call = Call::begin(&settings, T0);
    let Step::Attempt(permit) = call.poll(&p, T0, &mut |_| {}) else {
        panic!()
    };
    assert_eq!((call.deadline(), call.attempt_deadline()), (None, None));
    let drain = T0 + secs(2);
    call.on_drain(drain, secs(5));
    assert_eq!(call.deadline(), Some(drain + secs(5)));
    assert_eq!(call.attempt_deadline(), Some(drain + secs(5)));
    // A second drain signal moves nothing, later or sooner.
    call.on_drain(drain + secs(1), secs(1));
    assert_eq!(call.deadline(), Some(drain + secs(5)));
    // The attempt hits the clamped deadline: the drain still has the last word.
    call.complete(&p, permit, drain + secs(5), Outcome::TimedOut, &mut |_| {});
    assert_eq!(
        call.poll(&p, drain + secs(5), &mut |_| {}),
        Step::Done(Finished::Drained {
            last: Some(Outcome::TimedOut)
        })
    );
}

#[test]
fn the_default_grace_is_30_seconds_and_never_extends_a_tighter_deadline() {
    assert_eq!(DRAIN_GRACE, secs(30));
    let p = unguarded();
    // A 2 s deadline and a 1 s attempt timeout stay as they are under a 30 s grace.
    let settings = CallSettings::builder()
        .deadline(Some(secs(2)))
        .attempt_timeout(Some(secs(1)))
        .build()
        .unwrap();
    let mut call = Call::begin(&settings, T0);
    let Step::Attempt(_permit) = call.poll(&p, T0, &mut |_| {}) else {
        panic!()
    };
    call.on_drain(T0 + ms(100), DRAIN_GRACE);
    assert_eq!(call.deadline(), Some(T0 + secs(2)));
    assert_eq!(call.attempt_deadline(), Some(T0 + secs(1)));
}

#[test]
fn no_hedge_is_launched_once_draining() {
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
    let settings = no_jitter().to_builder().hedging(true).build().unwrap();
    let mut call = Call::begin(&settings, now);
    let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    let after = call.hedge_delay(&p, now).expect("a warm breaker hedges");
    call.on_drain(now + ms(1), DRAIN_GRACE);
    assert_eq!(call.hedge_delay(&p, now + ms(1)), None);
    let budget = p.budget.as_ref().unwrap().available(now + after);
    assert_eq!(
        call.hedge(&p, now + after, &mut |_| {}),
        Err(NoHedge::Draining)
    );
    // Nothing spent on the hedge that did not run.
    assert_eq!(
        (
            call.attempts(),
            p.budget.as_ref().unwrap().available(now + after)
        ),
        (1, budget)
    );
    call.complete(&p, first, now + ms(30), Outcome::Success, &mut |_| {});
    assert_eq!(
        call.poll(&p, now + ms(30), &mut |_| {}),
        Step::Done(Finished::Succeeded)
    );
}

#[test]
fn an_answer_the_classifier_called_a_failure_comes_back_as_the_value() {
    // An HTTP 503 returned as `Ok`: the last word the dependency said, as with a deadline.
    let last = Some(Outcome::Transient);
    let r: Result<u16, CallError<()>> = Finished::Drained { last }.into_result(Some(Ok(503)));
    assert_eq!(r, Ok(503));
}

#[test]
fn the_drain_grace_saturates_at_the_end_of_time() {
    let p = unguarded();
    let late = Instant::from_nanos(u64::MAX - 5);
    let mut call = Call::begin(&CallSettings::DEFAULT, late);
    call.on_drain(late, Duration::MAX);
    assert_eq!(
        call.poll(&p, late, &mut |_| {}),
        Step::Done(Finished::Drained { last: None })
    );
}
