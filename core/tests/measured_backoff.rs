//! The measured backoff base: the first retry after a transient failure waits a multiple of the
//! breaker's learned median latency, within 10x of the configured base either way, on synthetic
//! time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    Backoff, Breaker, BreakerSettings, Call, CallSettings, Duration, Field, Instant, Jitter,
    LeanBreaker, Multiple, Outcome, Parts, Step,
};

mod support;
use support::ms;

static LEAN: BreakerSettings = match BreakerSettings::consecutive_only("lean", 5) {
    Ok(s) => s,
    Err(_) => panic!("invalid"),
};

/// A breaker that has learned `n` successful calls of `latency` each, and the time after.
fn learned(latency: Duration, n: u32) -> (Breaker, Instant) {
    let b = Breaker::new(
        BreakerSettings::builder("db")
            .jitter(false)
            .build()
            .unwrap(),
    );
    let mut now = Instant::from_secs(1);
    for _ in 0..n {
        let permit = b.try_acquire(now).unwrap();
        now += latency;
        b.on_outcome(now, permit, Outcome::Success, &mut |_| {});
    }
    (b, now)
}

/// No jitter, a 100 ms base, x2, the base measured as `multiple` times the median.
fn measured(multiple: Multiple) -> CallSettings {
    CallSettings::builder()
        .backoff(
            Backoff::builder()
                .jitter(Jitter::None)
                .measured_base(multiple)
                .build()
                .unwrap(),
        )
        .deadline(None)
        .build()
        .unwrap()
}

/// The waits of a call whose every attempt fails transiently after 1 ms.
fn waits(
    settings: &CallSettings,
    parts: &impl stormguard_core::call::Gate,
    mut now: Instant,
) -> Vec<Duration> {
    let mut call = Call::begin(settings, now);
    let mut waits = Vec::new();
    loop {
        match call.poll(parts, now, &mut |_| {}) {
            Step::Attempt(permit) => {
                now += ms(1);
                call.complete(parts, permit, now, Outcome::Transient, &mut |_| {});
            }
            Step::Wait(d) => {
                waits.push(d);
                now += d;
            }
            Step::Done(_) => return waits,
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn the_first_retry_waits_the_multiple_of_the_learned_median_and_the_curve_grows_from_it() {
    let (breaker, now) = learned(ms(20), 40);
    let median = breaker
        .normal_latency(now)
        .expect("40 successes teach a median");
    // The histogram reads the median within 12.5% above it, never below.
    assert!(median >= ms(20) && median <= ms(23), "{median}");
    let parts = Parts::new().breaker(breaker);
    let base = Multiple::whole(4).apply(median);
    assert_eq!(
        waits(&measured(Multiple::whole(4)), &parts, now),
        [base, base.saturating_mul(2)]
    );
}

#[test]
fn the_measured_base_stays_within_10x_of_the_configured_base_either_way() {
    // A 1 ms dependency: 4x its median is under a tenth of 100 ms, so the tenth stands.
    let (fast, now) = learned(ms(1), 40);
    let parts = Parts::new().breaker(fast);
    assert_eq!(
        waits(&measured(Multiple::whole(4)), &parts, now),
        [ms(10), ms(20)]
    );
    // A 2 s dependency: 4x its median is over 10x the base, so 1 s stands.
    let (slow, now) = learned(Duration::from_secs(2), 40);
    let parts = Parts::new().breaker(slow);
    assert_eq!(
        waits(&measured(Multiple::whole(4)), &parts, now),
        [ms(1_000), ms(2_000)]
    );
}

#[test]
fn without_a_learned_median_the_configured_base_stands() {
    // 19 successes: no median yet.
    let (cold, now) = learned(ms(20), 19);
    assert_eq!(cold.normal_latency(now), None);
    let parts = Parts::new().breaker(cold);
    assert_eq!(
        waits(&measured(Multiple::whole(4)), &parts, now),
        [ms(100), ms(200)]
    );
    // A breaker that keeps no statistics never learns one.
    let parts = Parts::new().breaker(LeanBreaker::new(&LEAN).unwrap());
    assert_eq!(
        waits(&measured(Multiple::whole(4)), &parts, Instant::from_secs(1)),
        [ms(100), ms(200)]
    );
}

#[test]
fn the_throttled_base_is_never_measured() {
    let b = Backoff::builder()
        .measured_base(Multiple::whole(4))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let mut rng = stormguard_core::rng::JitterRng::with_seed(1);
    let throttled = Outcome::Throttled { retry_after: None };
    assert_eq!(
        b.delay_measured(1, throttled, Some(ms(50)), &mut rng),
        Duration::from_secs(1)
    );
    assert_eq!(
        b.delay_measured(1, Outcome::Transient, Some(ms(50)), &mut rng),
        ms(200)
    );
    assert_eq!(b.delay(1, Outcome::Transient, &mut rng), ms(100));
}

#[test]
fn a_measured_base_below_1x_is_a_typed_error_and_off_by_default() {
    assert_eq!(Backoff::DEFAULT.measured_base(), None);
    let err = Backoff::builder()
        .measured_base(Multiple::from_milli(500))
        .build()
        .unwrap_err();
    assert_eq!(err.field, Field::MeasuredBase);
    assert_eq!(err.to_string(), "`measured_base` must be at least 1");
    let b = Backoff::builder()
        .measured_base(Multiple::from_milli(2_500))
        .build()
        .unwrap();
    assert!(b
        .to_string()
        .contains("the base 2.5x the learned median (within 10x of 100ms)"));
}
