//! A custom clock that steps back: the policy reads it through a `SteadyClock`, so a call still
//! ends by its deadline and an open breaker still half-opens after its break.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use stormguard_core::{Backoff, BreakerSettings, Duration, Instant, Jitter};
use stormguard_std::clock::TokioClock;
use stormguard_std::{Breaker, CallError, Clock, ManualClock, Policy};

const HOUR: Duration = Duration::from_secs(3_600);

/// Tokio's (paused) clock, minus however far it has been stepped back.
#[derive(Clone)]
struct SteppedBack {
    back: Arc<AtomicU64>,
}

impl SteppedBack {
    fn new() -> Self {
        SteppedBack {
            back: Arc::new(AtomicU64::new(0)),
        }
    }

    fn step_back(&self, by: Duration) {
        self.back.fetch_add(by.as_nanos(), Ordering::SeqCst);
    }
}

impl Clock for SteppedBack {
    fn now(&self) -> Instant {
        let at = TokioClock::global().now().as_nanos();
        Instant::from_nanos(at.saturating_sub(self.back.load(Ordering::SeqCst)))
    }
}

fn no_jitter(d: Duration) -> Backoff {
    Backoff::builder()
        .base(d)
        .jitter(Jitter::None)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_clock_stepped_back_during_a_backoff_wait_does_not_stretch_the_deadline() {
    let clock = SteppedBack::new();
    // Still a whole hour ahead of the clock's zero after the step.
    tokio::time::advance(std::time::Duration::from_secs(7_200)).await;
    let policy = Policy::builder("stepped")
        .clock(clock.clone())
        .deadline(Duration::from_secs(1))
        .max_attempts(5)
        .backoff(no_jitter(Duration::from_millis(100)))
        .no_budget()
        .build()
        .unwrap();
    let stepper = clock.clone();
    let started = tokio::time::Instant::now();
    let r: Result<(), CallError<&str>> = policy
        .call(move |attempt| {
            let stepper = stepper.clone();
            async move {
                if attempt == 1 {
                    // The step lands in the middle of the backoff wait that follows.
                    tokio::spawn(async move {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        stepper.step_back(HOUR);
                    });
                    Err("down")
                } else {
                    std::future::pending().await
                }
            }
        })
        .await;
    let took = started.elapsed();
    assert!(r.is_err(), "{r:?}");
    // The wait that held the step reads as no time passed (when in it the clock stepped is
    // unknown), so the call may end that wait's 100 ms late, never an attempt timeout late.
    assert!(
        took <= std::time::Duration::from_millis(1_100),
        "a 1 s deadline took {took:?} of (paused) time"
    );
}

/// A manual clock that moves on a millisecond at every reading, so the blocking form's backoff
/// waits (real sleeps) end.
struct Ticking(ManualClock);

impl Clock for Ticking {
    fn now(&self) -> Instant {
        self.0.advance(Duration::from_millis(1))
    }
}

#[test]
fn a_blocking_call_ends_by_its_deadline_after_its_clock_steps_back() {
    let clock = ManualClock::starting_at(Instant::from_secs(7_200));
    let policy = Policy::builder("stepped")
        .clock(Ticking(clock.clone()))
        .deadline(Duration::from_secs(1))
        .max_attempts(10)
        .backoff(no_jitter(Duration::from_millis(1)))
        .no_budget()
        .build()
        .unwrap();
    let attempts = AtomicU32::new(0);
    let r: Result<(), CallError<&str>> = policy.call_blocking(|attempt| {
        attempts.fetch_add(1, Ordering::SeqCst);
        // Each attempt takes 600 ms; the clock steps back an hour during the first.
        clock.advance(Duration::from_millis(600));
        if attempt == 1 {
            clock.set(Instant::from_nanos(
                clock.now().as_nanos() - HOUR.as_nanos(),
            ));
        }
        Err("down")
    });
    assert!(r.is_err(), "{r:?}");
    // The attempt that held the step reads as no time passed; the next two end 600 ms and
    // 1,200 ms into the 1 s deadline, and the call ends there.
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
}

#[test]
fn a_breaker_opened_before_its_clock_steps_back_half_opens_after_its_break() {
    let clock = ManualClock::starting_at(Instant::from_secs(3 * 3_600));
    let settings = BreakerSettings::builder("stepped")
        .consecutive_failures(1)
        .failure_rate(None)
        .slow_calls(None)
        .jitter(false)
        .break_duration(Duration::from_secs(15))
        .build()
        .unwrap();
    let policy = Policy::builder("stepped")
        .breaker(Breaker::new(settings))
        .clock(clock.clone())
        .max_attempts(1)
        .no_budget()
        .build()
        .unwrap();
    let r: Result<(), _> = policy.call_blocking(|_| Err("down"));
    assert_eq!(r, Err(CallError::Failed("down")));
    clock.set(Instant::from_secs(3_600)); // two hours back
    let r: Result<(), CallError<&str>> = policy.call_blocking(|_| Ok(()));
    assert!(
        matches!(r, Err(CallError::Rejected { .. })),
        "no time passed: still open, {r:?}"
    );
    clock.advance(Duration::from_secs(15)); // the break, as the clamped clock measures it
    let ran = AtomicU32::new(0);
    let r: Result<u32, CallError<&str>> = policy.call_blocking(|_| {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(1)
    });
    assert_eq!(r, Ok(1), "the probe was not let through");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}
