//! The blocking form: no async runtime, `std::thread` sleeps, a cancellable pause.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::time::{Duration as StdDuration, Instant as StdInstant};

use stormguard_core::{Backoff, Duration, Jitter, Outcome, RefusalReason, State};
use stormguard_std::clock::MonotonicClock;
use stormguard_std::{CallError, CallOptions, Policy};

fn quick_backoff() -> Backoff {
    Backoff::builder()
        .base(Duration::from_millis(1))
        .jitter(Jitter::None)
        .build()
        .unwrap()
}

#[test]
fn a_blocking_call_retries_without_a_runtime() {
    let policy = Policy::builder("blocking")
        .backoff(quick_backoff())
        .build()
        .unwrap();
    let mut seen = Vec::new();
    let r = policy.call_blocking(|attempt| {
        seen.push(attempt);
        if attempt < 3 {
            Err("busy")
        } else {
            Ok(attempt)
        }
    });
    assert_eq!(r, Ok(3));
    assert_eq!(seen, [1, 2, 3]);
    assert_eq!(policy.breaker().unwrap().state(), State::Closed);
}

#[test]
fn a_blocking_call_on_another_clock_works_the_same() {
    let policy = Policy::builder("monotonic")
        .clock(MonotonicClock::global())
        .backoff(quick_backoff())
        .max_attempts(2)
        .build()
        .unwrap();
    let r = policy.call_blocking(|_| Err::<(), _>("down"));
    assert_eq!(r, Err(CallError::Failed("down")));
}

#[test]
fn a_blocking_rejection_serves_the_pause() {
    let policy = Policy::builder("blocking-pause").build().unwrap();
    policy.isolate();
    let start = StdInstant::now();
    let r = policy.call_blocking(|_| Ok::<_, ()>(1));
    let took = start.elapsed();
    assert_eq!(
        r.unwrap_err().rejection().unwrap().reason,
        RefusalReason::Isolated
    );
    assert!(took >= StdDuration::from_millis(100), "{took:?}");
    assert!(took < StdDuration::from_secs(2), "{took:?}");
}

#[cfg(feature = "tokio")]
#[test]
fn a_token_ends_the_blocking_pause_at_once() {
    let policy = Policy::builder("blocking-cancel").build().unwrap();
    policy.isolate();
    let token = tokio_util::sync::CancellationToken::new();
    let canceller = token.clone();
    let start = StdInstant::now();
    let t = std::thread::spawn(move || {
        std::thread::sleep(StdDuration::from_millis(20));
        canceller.cancel();
    });
    let r = policy.call_blocking_with(CallOptions::new().cancel_on(&token), |_| Ok::<_, ()>(1));
    let took = start.elapsed();
    t.join().unwrap();
    assert_eq!(r, Err(CallError::Cancelled));
    assert!(took < StdDuration::from_millis(90), "{took:?}");
}

#[test]
fn a_late_failure_counts_as_timed_out() {
    let policy = Policy::builder("late")
        .attempt_timeout(StdDuration::from_millis(5))
        .max_attempts(1)
        .build()
        .unwrap();
    let r = policy.call_blocking_with(
        CallOptions::new().classify(|r: &Result<(), &str>| {
            if r.is_ok() {
                Outcome::Success
            } else {
                Outcome::Transient
            }
        }),
        |_| {
            std::thread::sleep(StdDuration::from_millis(10));
            Err("slow")
        },
    );
    assert_eq!(r, Err(CallError::TimedOut { last: Some("slow") }));
}

#[cfg(feature = "tokio")]
#[test]
fn a_blocking_call_whose_token_is_already_cancelled_runs_nothing() {
    let policy = Policy::builder("blocking-cancelled").build().unwrap();
    let token = tokio_util::sync::CancellationToken::new();
    token.cancel();
    let mut runs = 0;
    let r = policy.call_blocking_with(CallOptions::new().cancel_on(&token), |_| {
        runs += 1;
        Err::<u32, _>("boom")
    });
    assert_eq!(r, Err(CallError::Cancelled));
    assert_eq!(runs, 0);
    assert_eq!(policy.breaker().unwrap().state(), State::Closed);
}

#[test]
fn a_logged_blocking_call_keeps_each_attempt_and_a_refusal() {
    let policy = Policy::builder("ledger-logged")
        .max_attempts(3)
        .backoff(stormguard_std::Backoff::none())
        .build()
        .unwrap();
    let logged = policy.call_blocking_logged(stormguard_std::CallOptions::new(), |attempt| {
        if attempt < 3 {
            Err("reset")
        } else {
            Ok(attempt)
        }
    });
    assert_eq!(logged.result, Ok(3));
    let outcomes: Vec<_> = logged.attempts.iter().map(|r| r.end.outcome()).collect();
    assert_eq!(
        outcomes,
        [
            Some(stormguard_std::Outcome::Transient),
            Some(stormguard_std::Outcome::Transient),
            Some(stormguard_std::Outcome::Success)
        ]
    );
    policy.isolate();
    let logged =
        policy.call_blocking_logged(stormguard_std::CallOptions::new(), |_| Ok::<_, &str>(0));
    assert!(logged.result.is_err());
    assert!(
        logged.attempts.to_string().contains("isolated"),
        "{}",
        logged.attempts
    );
}
