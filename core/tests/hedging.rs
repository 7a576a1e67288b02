//! Hedging's bounds: its earliest start, its suppression near the trip point, and its
//! configuration, on synthetic time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    Backoff, Bound, Breaker, BreakerSettings, CallSettings, Duration, FailureRate, Field, Instant,
    Jitter, Outcome, Ratio,
};

mod support;
use support::ms;

fn run(b: &mut Breaker, mut now: Instant, latency: Duration, outcome: Outcome, n: u32) -> Instant {
    for _ in 0..n {
        let p = b.try_acquire(now).unwrap();
        now += latency;
        b.on_outcome(now, p, outcome, &mut |_| {});
    }
    now
}

fn breaker() -> Breaker {
    Breaker::new(
        BreakerSettings::builder("search")
            .jitter(false)
            .build()
            .unwrap(),
    )
}

#[test]
fn a_hedge_never_starts_sooner_than_10_ms_after_the_first_attempt() {
    let mut b = breaker();
    // A dependency answering in 200 microseconds: its p95 is far under 10 ms.
    let now = run(
        &mut b,
        Instant::from_secs(1),
        Duration::from_micros(200),
        Outcome::Success,
        40,
    );
    assert_eq!(b.hedge_after(now), Ok(ms(10)));
}

#[test]
fn hedging_is_suppressed_near_the_trip_point_only_once_the_window_holds_its_minimum_calls() {
    let mut b = Breaker::new(
        BreakerSettings::builder("search")
            .jitter(false)
            .minimum_calls(6)
            .failure_ratio(Ratio::from_percent(50))
            .build()
            .unwrap(),
    );
    // A baseline of healthy calls, then a fresh trip window (the baseline outlives it).
    let now = run(&mut b, Instant::from_secs(1), ms(20), Outcome::Success, 40);
    let now = now + Duration::from_secs(31);
    // One failure in three calls: half the 50% point is reached, but on too few calls to say
    // anything about the dependency.
    let now = run(&mut b, now, ms(20), Outcome::Success, 2);
    let now = run(&mut b, now, ms(20), Outcome::Transient, 1);
    assert!(b.hedge_after(now).is_ok(), "{:?}", b.hedge_after(now));
    // With the window's minimum calls, the same rate suppresses the hedge.
    let now = run(&mut b, now, ms(20), Outcome::Success, 2);
    let now = run(&mut b, now, ms(20), Outcome::Transient, 1);
    assert_eq!(
        b.hedge_after(now),
        Err(stormguard_core::part::HedgeSuppressed::NearTrip)
    );
}

#[test]
fn hedging_near_the_consecutive_trip_point_is_judged_against_the_run_the_learned_rate_needs() {
    // Only the consecutive rule trips (the relative one's floor is 100%), over a dependency
    // failing 20% of the time: the run that trips is 12, not the configured 5.
    let mut b = Breaker::new(
        BreakerSettings::builder("flaky")
            .jitter(false)
            .failure_rate(Some(FailureRate::above(5).floor_ppm(1_000_000)))
            .slow_calls(None)
            .build()
            .unwrap(),
    );
    let mut now = Instant::from_secs(1);
    for i in 0..500 {
        let outcome = if i % 5 == 2 {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        now = run(&mut b, now, ms(20), outcome, 1) + ms(80);
    }
    assert_eq!(b.snapshot(now).consecutive_to_trip, 12);
    // Three failures in a row: over half the configured 5, a quarter of the 12 in force. At
    // 20% such runs are ordinary; the hedge is still useful.
    let now = run(&mut b, now, ms(20), Outcome::Transient, 3);
    assert!(b.hedge_after(now).is_ok(), "{:?}", b.hedge_after(now));
    // Six in a row: half the run in force, suppressed.
    let now = run(&mut b, now, ms(20), Outcome::Transient, 3);
    assert_eq!(
        b.hedge_after(now),
        Err(stormguard_core::part::HedgeSuppressed::NearTrip)
    );
}

#[test]
fn hedging_over_a_breaker_that_learns_nothing_is_a_settings_error_naming_learn() {
    let hedged = CallSettings::builder().hedging(true);
    let consecutive = BreakerSettings::consecutive_only("db", 3).unwrap();
    for err in [
        hedged.build_for(&consecutive).unwrap_err(),
        hedged
            .build()
            .unwrap()
            .check_breaker(&consecutive)
            .unwrap_err(),
    ] {
        assert_eq!((err.field, err.bound), (Field::Learn, Bound::OnForHedging));
    }
    // A breaker that learns, or a call that does not hedge, is fine.
    assert!(hedged.build_for(&consecutive.learning()).is_ok());
    assert!(hedged.build_for(&BreakerSettings::defaults("db")).is_ok());
    assert!(CallSettings::builder().build_for(&consecutive).is_ok());
    // The call's own bounds still come first.
    let err = hedged.max_attempts(1).build_for(&consecutive).unwrap_err();
    assert_eq!(
        (err.field, err.bound),
        (Field::MaxAttempts, Bound::AtLeast(2))
    );
}

#[test]
fn hedging_with_a_single_attempt_is_a_settings_error_naming_max_attempts() {
    let err = CallSettings::builder()
        .max_attempts(1)
        .hedging(true)
        .build()
        .unwrap_err();
    assert_eq!(err.field, Field::MaxAttempts);
    assert_eq!(err.bound, Bound::AtLeast(2));
    // Either alone is fine.
    assert!(CallSettings::builder().max_attempts(1).build().is_ok());
    assert!(CallSettings::builder()
        .max_attempts(2)
        .hedging(true)
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .is_ok());
}

#[test]
fn a_consecutive_only_breaker_that_learns_hedges_like_any_other() {
    // No rule of a consecutive-only breaker needs statistics, so by itself it learns no p95
    // and cannot hedge; asked to learn, it hedges after the p95 it learns, whatever its rules.
    let quiet = BreakerSettings::consecutive_only("search", 5).unwrap();
    let learning = BreakerSettings::builder("search")
        .failure_rate(None)
        .slow_calls(None)
        .learn(true)
        .build()
        .unwrap();
    for (settings, hedges) in [(quiet, false), (learning, true)] {
        let mut b = Breaker::new(settings);
        let now = run(&mut b, Instant::from_secs(1), ms(20), Outcome::Success, 40);
        match b.hedge_after(now) {
            Ok(after) => {
                assert!(hedges, "a breaker that learns nothing hedged");
                // The p95 of 20 ms calls, read within the histogram's 12.5% above.
                assert!(after >= ms(20) && after <= ms(23), "{after}");
            }
            Err(e) => assert!(!hedges, "a learning breaker did not hedge: {e:?}"),
        }
    }
}

#[test]
fn a_lean_breaker_refuses_settings_that_ask_it_to_learn() {
    static LEARNING: BreakerSettings = match BreakerSettings::builder("sensor")
        .failure_rate(None)
        .slow_calls(None)
        .learn(true)
        .build()
    {
        Ok(s) => s,
        Err(_) => panic!("valid settings"),
    };
    let e = stormguard_core::LeanBreaker::new(&LEARNING).unwrap_err();
    assert_eq!(e.field, Field::Learn);
}
