//! The adaptive concurrency limiter on synthetic time: it shrinks when latency rises, grows only
//! while the limit holds calls back, never while idle, and stays within its bounds; the
//! settings refuse what makes no sense.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::limits::LimitChange;
use stormguard_core::limits::{AdaptiveLimitSettings, AdaptiveLimiter, SharedAdaptiveLimiter};
use stormguard_core::{Bound, Duration, Field, Instant, Multiple, Ratio, RefusalReason};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn limiter(min: u32, max: u32, initial: u32) -> AdaptiveLimiter {
    AdaptiveLimiter::new(
        AdaptiveLimitSettings::builder("db")
            .limits(min, max)
            .initial_limit(initial)
            .build()
            .unwrap(),
    )
}

/// One round of `callers` callers arriving at once, each taking `latency`: returns how many
/// were refused and the limit changes the round's completions reported.
fn round(
    l: &mut AdaptiveLimiter,
    now: &mut Instant,
    callers: u32,
    latency: Duration,
) -> (u32, Vec<LimitChange>) {
    let mut permits = Vec::new();
    let mut refused = 0;
    for _ in 0..callers {
        match l.try_acquire(*now) {
            Ok(p) => permits.push(p),
            Err(r) => {
                assert_eq!(r.reason, RefusalReason::ConcurrencyLimited);
                assert_eq!(r.retry_after, Duration::ZERO);
                refused += 1;
            }
        }
    }
    *now += latency;
    let changes = permits
        .into_iter()
        .filter_map(|p| l.complete(p, *now, Some(latency)))
        .collect();
    (refused, changes)
}

#[test]
fn the_defaults_are_those_documented() {
    let s = AdaptiveLimitSettings::builder("db").build().unwrap();
    assert_eq!(
        (s.min_limit(), s.initial_limit(), s.max_limit()),
        (4, 20, 200)
    );
    assert_eq!(s.latency_tolerance(), Multiple::whole(2));
    assert_eq!(s.decrease(), Ratio::from_percent(90).unwrap());
    assert_eq!(s.baseline_window(), Duration::from_secs(300));
    assert_eq!(AdaptiveLimiter::new(s).limit(), 20);
}

#[test]
fn settings_out_of_bounds_name_the_field_and_the_bound() {
    let b = || AdaptiveLimitSettings::builder("db");
    let cases = [
        (b().limits(0, 10), Field::MinLimit, Bound::AtLeast(1)),
        (
            b().limits(10, 9).initial_limit(10),
            Field::MaxLimit,
            Bound::NotBelow(Field::MinLimit),
        ),
        (
            b().limits(1, 10_001),
            Field::MaxLimit,
            Bound::AtMost(10_000),
        ),
        (
            b().limits(5, 10).initial_limit(4),
            Field::InitialLimit,
            Bound::NotBelow(Field::MinLimit),
        ),
        (
            b().limits(5, 10).initial_limit(11),
            Field::InitialLimit,
            Bound::AtMost(10),
        ),
        (
            b().latency_tolerance(Multiple::whole(1)),
            Field::LatencyTolerance,
            Bound::AboveOne,
        ),
        (b().decrease(Ratio::ZERO), Field::Decrease, Bound::ZeroToOne),
        (
            b().baseline_window(ms(999)),
            Field::BaselineWindow,
            Bound::AtLeastDuration(Duration::from_secs(1)),
        ),
        (
            b().name(stormguard_core::Name::new(" ")),
            Field::Name,
            Bound::NotBlank,
        ),
    ];
    for (builder, field, bound) in cases {
        let e = builder.build().unwrap_err();
        assert_eq!((e.field, e.bound), (field, bound), "{e}");
    }
    // The edges are accepted.
    let s = b()
        .limits(1, 10_000)
        .initial_limit(10_000)
        .decrease(Ratio::ONE)
        .build()
        .unwrap();
    assert_eq!(s.max_limit(), 10_000);
}

#[test]
fn the_limit_holds_and_a_refusal_is_a_self_imposed_throttle() {
    let l = limiter(1, 10, 2);
    let t = Instant::from_secs(1);
    let a = l.try_acquire(t).unwrap();
    let b = l.try_acquire(t).unwrap();
    assert_eq!(
        l.check().unwrap_err().reason,
        RefusalReason::ConcurrencyLimited
    );
    assert!(l.try_acquire(t).is_err());
    assert_eq!(l.in_flight(), 2);
    assert!(l.snapshot().held_back);
    l.release(a);
    assert!(l.check().is_ok());
    // A release counts nothing towards the round.
    assert_eq!(l.snapshot().round_calls, 0);
    let _ = l.complete(b, t + ms(5), Some(ms(5)));
    assert_eq!((l.in_flight(), l.snapshot().round_calls), (0, 1));
}

#[test]
fn a_saturated_limiter_grows_by_one_a_round_up_to_its_maximum() {
    let mut l = limiter(4, 30, 20);
    let mut now = Instant::from_secs(1);
    for expected in 21..=30 {
        let before = l.limit();
        let (refused, changes) = round(&mut l, &mut now, before + 5, ms(10));
        assert_eq!(refused, 5);
        assert_eq!(
            changes,
            vec![LimitChange {
                before,
                after: expected
            }]
        );
        assert_eq!(l.limit(), expected);
    }
    // At the maximum it stays, however saturated.
    for _ in 0..5 {
        let (refused, changes) = round(&mut l, &mut now, 100, ms(10));
        assert_eq!(refused, 70);
        assert!(changes.is_empty());
        assert_eq!(l.limit(), 30);
    }
}

#[test]
fn a_limiter_that_holds_no_call_back_does_not_grow() {
    let mut l = limiter(4, 200, 20);
    let mut now = Instant::from_secs(1);
    // Exactly the limit's worth of callers each round: never refused.
    for _ in 0..50 {
        let (refused, changes) = round(&mut l, &mut now, 20, ms(10));
        assert_eq!(refused, 0);
        assert!(changes.is_empty());
    }
    assert_eq!(l.limit(), 20);
}

#[test]
fn an_idle_limiter_never_grows() {
    let mut l = limiter(4, 200, 20);
    let mut now = Instant::from_secs(1);
    // One call at a time, far apart, for hours: many rounds, none held back.
    for _ in 0..2_000 {
        let (refused, _) = round(&mut l, &mut now, 1, ms(10));
        assert_eq!(refused, 0);
        now += Duration::from_secs(7);
    }
    assert_eq!(l.limit(), 20);
    // Time passing with no call at all changes nothing either.
    now += Duration::from_secs(100_000);
    assert!(l.check().is_ok());
    assert_eq!(l.limit(), 20);
}

#[test]
fn a_latency_rise_shrinks_the_limit_by_a_tenth_a_round_down_to_the_minimum() {
    let mut l = limiter(4, 200, 20);
    let mut now = Instant::from_secs(1);
    // A healthy baseline of 10 ms, saturated: the limit grows.
    for _ in 0..10 {
        round(&mut l, &mut now, 100, ms(10));
    }
    assert_eq!(l.limit(), 30);
    let base = l.baseline().unwrap();
    assert!(
        base >= ms(10) && base <= Duration::from_micros(11_250),
        "{base}"
    );
    // The dependency queues: every call takes 30 ms, more than 2x the baseline. Even though the
    // limit holds calls back, it shrinks by a tenth (rounded down) each round.
    let mut expected = 30;
    while expected > 4 {
        let before = l.limit();
        let (refused, changes) = round(&mut l, &mut now, 100, ms(30));
        assert!(refused > 0);
        expected = (expected * 9 / 10).max(4);
        assert_eq!(
            changes,
            vec![LimitChange {
                before,
                after: expected
            }]
        );
    }
    // At the minimum it stays.
    for _ in 0..5 {
        round(&mut l, &mut now, 100, ms(30));
        assert_eq!(l.limit(), 4);
    }
}

#[test]
fn a_rise_within_the_tolerance_is_not_slow() {
    let mut l = limiter(4, 200, 20);
    let mut now = Instant::from_secs(1);
    for _ in 0..10 {
        round(&mut l, &mut now, 100, ms(10));
    }
    let grown = l.limit();
    // 18 ms is under 2x the baseline's 10 ms bucket: still healthy, still saturated, grows.
    round(&mut l, &mut now, 100, ms(18));
    assert_eq!(l.limit(), grown + 1);
}

#[test]
fn the_round_is_judged_by_its_fastest_call() {
    let mut l = limiter(4, 200, 20);
    let mut now = Instant::from_secs(1);
    for _ in 0..10 {
        round(&mut l, &mut now, 100, ms(10));
    }
    let before = l.limit();
    // One call of the round still answers at the baseline: the dependency is not queueing
    // every call, so the round is not slow (and, held back, it grows).
    let permits: Vec<_> = (0..before).map(|_| l.try_acquire(now).unwrap()).collect();
    assert!(l.try_acquire(now).is_err());
    let mut it = permits.into_iter();
    let _ = l.complete(it.next().unwrap(), now + ms(10), Some(ms(10)));
    now += ms(50);
    for p in it {
        let _ = l.complete(p, now, Some(ms(50)));
    }
    assert_eq!(l.limit(), before + 1);
}

#[test]
fn failures_count_towards_the_round_without_a_latency() {
    let mut l = limiter(4, 200, 4);
    let mut now = Instant::from_secs(1);
    for _ in 0..20 {
        round(&mut l, &mut now, 100, ms(10));
    }
    let before = l.limit();
    // A round of slow failures: no successful call, so nothing says the dependency queues.
    let permits: Vec<_> = (0..before).map(|_| l.try_acquire(now).unwrap()).collect();
    assert!(l.try_acquire(now).is_err());
    now += ms(500);
    let changes: Vec<_> = permits
        .into_iter()
        .filter_map(|p| l.complete(p, now, None))
        .collect();
    assert_eq!(
        changes,
        vec![LimitChange {
            before,
            after: before + 1
        }]
    );
}

#[test]
fn the_baseline_is_forgotten_after_a_whole_window_without_a_sample() {
    let mut l = limiter(4, 200, 4);
    let mut now = Instant::from_secs(1);
    for _ in 0..20 {
        round(&mut l, &mut now, 100, ms(10));
    }
    let grown = l.limit();
    // Six idle minutes: the 10 ms baseline is gone. A round at 40 ms then learns it as the
    // new normal instead of shrinking against the old one.
    now += Duration::from_secs(360);
    round(&mut l, &mut now, 100, ms(40));
    assert_eq!(l.limit(), grown + 1);
    let base = l.baseline().unwrap();
    assert!(base >= ms(40), "{base}");
}

proptest! {
    /// Whatever the calls do, the limit stays within its bounds, the limiter never holds more
    /// calls than the limit it had when it admitted them, and the counts come back to zero.
    #[test]
    fn the_limit_stays_within_its_bounds(
        min in 1u32..10,
        span in 0u32..40,
        ops in proptest::collection::vec((0u8..4, 0u64..200_000, 0usize..64), 1..400),
    ) {
        let max = min + span;
        let l = limiter(min, max, min + span / 2);
        let mut now = Instant::from_secs(1);
        let mut held = Vec::new();
        for (kind, micros, pick) in ops {
            match kind {
                0 | 1 => {
                    let limit = l.limit();
                    if let Ok(p) = l.try_acquire(now) {
                        held.push(p);
                        prop_assert!(l.in_flight() <= limit);
                    }
                }
                2 if !held.is_empty() => {
                    let p = held.swap_remove(pick % held.len());
                    let latency = Duration::from_micros(micros);
                    let _ = l.complete(p, now, (micros % 3 != 0).then_some(latency));
                }
                3 if !held.is_empty() => l.release(held.swap_remove(pick % held.len())),
                _ => now += Duration::from_micros(micros),
            }
            let snap = l.snapshot();
            prop_assert!(snap.limit >= min && snap.limit <= max, "{snap:?}");
            prop_assert_eq!(snap.in_flight as usize, held.len());
        }
        for p in held {
            l.release(p);
        }
        prop_assert_eq!(l.in_flight(), 0);
    }

    /// The shared form is the same rules on atomic words: driven through the same sequence, it
    /// admits, refuses, ends rounds and moves the limit in lockstep with the `&mut` form.
    #[test]
    fn the_shared_and_single_threaded_forms_agree_in_lockstep(
        min in 1u32..8,
        span in 0u32..30,
        tolerance in 1_001u32..4_000,
        decrease in 1u32..=1000,
        ops in proptest::collection::vec((0u8..7, 0u64..100_000, 0usize..64), 1..600),
    ) {
        let max = min + span;
        // Phases of a dependency 50x slower, so rounds shrink the limit as well as grow it.
        let mut slow = false;
        let settings = AdaptiveLimitSettings::builder("db")
            .limits(min, max)
            .initial_limit(min + span / 3)
            .latency_tolerance(Multiple::from_milli(tolerance))
            .decrease(Ratio::from_permille(decrease).unwrap())
            .baseline_window(Duration::from_secs(2))
            .build()
            .unwrap();
        let single = AdaptiveLimiter::new(settings);
        let shared = SharedAdaptiveLimiter::new(settings);
        let mut now = Instant::from_secs(1);
        let mut held = Vec::new();
        for (kind, micros, pick) in ops {
            match kind {
                0 | 1 => {
                    let a = single.try_acquire(now);
                    let b = shared.try_acquire(now);
                    prop_assert_eq!(a.is_ok(), b.is_ok());
                    if let (Ok(a), Ok(b)) = (a, b) {
                        held.push((a, b));
                    }
                }
                2 if !held.is_empty() => {
                    let (a, b) = held.swap_remove(pick % held.len());
                    // Latencies from 1 us to 100 ms (or 50x that), a third of them failures.
                    let micros = if slow { micros * 50 } else { micros };
                    let latency = (micros % 3 != 0).then(|| Duration::from_micros(micros));
                    let x = single.complete(a, now, latency);
                    let y = shared.complete(b, now, latency);
                    prop_assert_eq!(x, y);
                }
                3 if !held.is_empty() => {
                    let (a, b) = held.swap_remove(pick % held.len());
                    single.release(a);
                    shared.release(b);
                }
                4 => prop_assert_eq!(single.check(), shared.check()),
                5 if micros % 8 == 0 => slow = !slow,
                // Up to 2 s: past the whole (2 s) baseline window now and then.
                _ => now += Duration::from_micros(micros * 20),
            }
            prop_assert_eq!(single.snapshot(), shared.snapshot());
        }
    }
}
