//! The segmented sliding-window limiter on synthetic time: its window edges and segment
//! boundaries, its retry-after hint, its settings errors, a reference model and the shared form in
//! lockstep with the `&mut` form.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::{
    limits::max_quota, limits::KeyedLimitError, limits::KeyedSlidingWindowLimiter,
    limits::SharedSlidingWindowLimiter, limits::SlidingWindowLimiter,
    limits::SlidingWindowSettings, limits::MAX_SEGMENTS, part::Limit, Bound, Duration, Field,
    Instant, RefusalReason, Refused,
};

mod support;
use support::{ms, secs};

/// A quota over a window of `segments` seconds, one second a segment.
fn per_second_segments(quota: u32, segments: u32) -> SlidingWindowSettings {
    SlidingWindowSettings::builder("test")
        .quota(quota)
        .window(secs(u64::from(segments)))
        .segments(segments)
        .build()
        .unwrap()
}

#[track_caller]
fn refusal(result: Result<(), Refused>) -> Duration {
    let refused = result.expect_err("expected a refusal");
    assert_eq!(refused.reason, RefusalReason::RateLimited);
    refused.retry_after
}

fn at_ns(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

#[test]
fn a_window_admits_its_quota_and_the_next_call_waits_for_the_oldest_segment() {
    let l = SlidingWindowLimiter::new(per_second_segments(3, 8));
    let t = Instant::from_millis(2_300); // segment 2
    for _ in 0..3 {
        l.check(t).unwrap();
    }
    // Segment 2 leaves the window when segment 10 begins: at 10 s.
    assert_eq!(refusal(l.check(t)), ms(7_700));
    assert_eq!(l.available(t), 0);
    assert_eq!(refusal(l.check(Instant::from_millis(9_999))), ms(1));
    l.check(Instant::from_secs(10)).unwrap();
}

#[test]
fn segment_boundaries_are_exact_to_the_nanosecond() {
    const SEC: u64 = 1_000_000_000;
    let l = SlidingWindowLimiter::new(per_second_segments(2, 8));
    l.check(at_ns(SEC - 1)).unwrap(); // the last nanosecond of segment 0
    l.check(at_ns(SEC)).unwrap(); // the first of segment 1
                                  // The last nanosecond of segment 7: both still in the window, segment 0 leaves in 1 ns.
    assert_eq!(
        refusal(l.check(at_ns(8 * SEC - 1))),
        Duration::from_nanos(1)
    );
    // At 8 s segment 0 has left: one call fits, and the next waits for segment 1 to leave.
    l.check(at_ns(8 * SEC)).unwrap();
    assert_eq!(refusal(l.check(at_ns(8 * SEC))), secs(1));
    assert_eq!(l.available(at_ns(9 * SEC - 1)), 0);
    assert_eq!(l.available(at_ns(9 * SEC)), 1);
}

#[test]
fn the_window_slides_a_segment_at_a_time_freeing_only_what_left() {
    let l = SlidingWindowLimiter::new(per_second_segments(4, 4));
    l.check(Instant::from_millis(100)).unwrap(); // segment 0
    l.check_n(Instant::from_millis(1_100), 2).unwrap(); // segment 1
    l.check(Instant::from_millis(3_100)).unwrap(); // segment 3
    assert_eq!(l.available(Instant::from_millis(3_999)), 0);
    assert_eq!(l.available(Instant::from_secs(4)), 1); // segment 0 left
    assert_eq!(l.available(Instant::from_secs(5)), 3); // segment 1 left
    assert_eq!(l.available(Instant::from_secs(7)), 4); // segment 3 left
}

#[test]
fn a_batch_waits_for_as_many_segments_as_it_needs() {
    let l = SlidingWindowLimiter::new(per_second_segments(6, 4));
    l.check_n(Instant::from_millis(100), 2).unwrap(); // segment 0
    l.check_n(Instant::from_millis(1_100), 2).unwrap(); // segment 1
    l.check_n(Instant::from_millis(2_100), 2).unwrap(); // segment 2
    let now = Instant::from_millis(2_500);
    // One call needs segment 0 gone (at 4 s); three need segments 0 and 1 gone (at 5 s).
    assert_eq!(refusal(l.check_n(now, 1)), ms(1_500));
    assert_eq!(refusal(l.check_n(now, 3)), ms(2_500));
    assert_eq!(refusal(l.check_n(now, 7)), Duration::MAX);
    l.check_n(now, 0).unwrap();
    assert_eq!(l.available(now), 0, "a refused batch takes nothing");
    l.check_n(Instant::from_secs(5), 3).unwrap();
}

#[test]
fn a_late_reading_slides_nothing_and_a_reset_clock_moves_the_calls_to_its_reading() {
    let l = SlidingWindowLimiter::new(per_second_segments(2, 8));
    let t = Instant::from_secs(100);
    l.check_n(t, 2).unwrap();
    // Half a second back: the same window; retry_after counts from the late reading.
    let late = t - ms(500);
    assert_eq!(refusal(l.check(late)), ms(8_500));
    // An hour back: the clock was reset; the calls leave one window after the new reading,
    // never an hour later.
    let reset = t - secs(3_600);
    assert_eq!(refusal(l.check(reset)), secs(8));
    l.check(reset + secs(8)).unwrap();
}

#[test]
fn huge_readings_and_the_end_of_time_never_panic() {
    let l = SlidingWindowLimiter::new(per_second_segments(1, 8));
    l.check(Instant::MAX).unwrap();
    assert_eq!(refusal(l.check(Instant::MAX)), Duration::MAX);
    l.check(Instant::ZERO).unwrap_err();
    let l = SlidingWindowLimiter::new(per_second_segments(1, 8));
    l.check(Instant::ZERO).unwrap();
    // 2^32 segments on, the segment number wraps: the old call may still be counted, for at
    // most one window; the limiter never admits more than its quota.
    let far = Instant::from_secs(1 << 32);
    if l.check(far).is_err() {
        l.check(far + secs(8)).unwrap();
    }
}

#[test]
fn counts_of_a_two_segment_window_add_up_past_u32_max_without_a_short_retry() {
    // Found by fuzzing: the held calls plus a large batch overflowed 32 bits, and the refusal
    // named a time at which the batch was refused again.
    let l = SlidingWindowLimiter::new(per_second_segments(u32::MAX, 2));
    l.check_n(Instant::from_millis(100), 1_000_000_000).unwrap(); // segment 0
    l.check_n(Instant::from_millis(1_100), 3_000_000_000)
        .unwrap(); // segment 1
    let now = Instant::from_millis(1_500);
    // 2e9 more need both segments gone: segment 1 leaves at 3 s.
    assert_eq!(refusal(l.check_n(now, 2_000_000_000)), ms(1_500));
    assert!(l
        .clone()
        .check_n(Instant::from_secs(2), 2_000_000_000)
        .is_err());
    l.check_n(Instant::from_secs(3), 2_000_000_000).unwrap();
}

#[test]
fn the_defaults_are_fifty_a_minute_in_eight_segments() {
    let s = SlidingWindowSettings::defaults("d");
    assert_eq!(
        (s.quota(), s.window(), s.segments(), s.segment()),
        (50, secs(60), 8, ms(7_500))
    );
    assert_eq!(s.to_string(), "50 per 60s, sliding in 8 segments");
}

#[test]
fn invalid_settings_are_typed_errors_naming_the_field() {
    let b = || SlidingWindowSettings::builder("s");
    let cases = [
        (b().quota(0), Field::Quota, Bound::AtLeast(1)),
        (b().quota(4_096), Field::Quota, Bound::AtMost(4_095)),
        (
            b().segments(4).quota(1 << 24),
            Field::Quota,
            Bound::AtMost((1 << 24) - 1),
        ),
        (b().segments(1), Field::Segments, Bound::AtLeast(2)),
        (b().segments(9), Field::Segments, Bound::AtMost(9 - 1)),
        (
            b().window(Duration::ZERO),
            Field::Window,
            Bound::AtLeastDuration(ms(8)),
        ),
        (
            b().window(ms(7)),
            Field::Window,
            Bound::AtLeastDuration(ms(8)),
        ),
        (
            b().window(Duration::from_nanos(10_000_001)),
            Field::Window,
            Bound::DivisibleBy(Field::Segments),
        ),
    ];
    for (builder, field, bound) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!((err.field, err.bound), (field, bound));
    }
    assert_eq!(max_quota(MAX_SEGMENTS), 4_095);
    assert!(b().segments(2).quota(u32::MAX).build().is_ok());
    assert!(b().window(ms(8)).build().is_ok());
}

#[test]
fn settings_are_built_in_a_const_and_the_shared_form_lives_in_a_static() {
    const S: SlidingWindowSettings = match SlidingWindowSettings::builder("s")
        .quota(2)
        .window(Duration::from_secs(8))
        .build()
    {
        Ok(s) => s,
        Err(_) => panic!(),
    };
    static SHARED: SharedSlidingWindowLimiter = SharedSlidingWindowLimiter::new(S);
    let now = Instant::from_secs(1);
    SHARED.check(now).unwrap();
    SHARED.check(now).unwrap();
    assert_eq!(refusal(SHARED.check(now)), secs(8));
    assert_eq!(SHARED.name().as_str(), "s");
}

#[test]
fn the_limit_trait_peeks_without_taking() {
    let shared = SharedSlidingWindowLimiter::new(per_second_segments(1, 2));
    let now = Instant::from_secs(1);
    assert!(Limit::peek(&&shared, now).is_ok());
    assert!(Limit::take(&&shared, now).is_ok());
    assert_eq!(refusal(Limit::peek(&&shared, now)), secs(2));
    let own = SlidingWindowLimiter::new(per_second_segments(1, 2));
    assert!(Limit::take(&own, now).is_ok());
    assert!(Limit::take(&own, now).is_err());
}

#[test]
fn racing_threads_at_one_instant_get_exactly_the_quota() {
    let limiter = SharedSlidingWindowLimiter::new(per_second_segments(1_000, 8));
    let now = Instant::from_secs(3);
    let admitted: u32 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| (0..600).filter(|_| limiter.check(now).is_ok()).count() as u32))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(admitted, 1_000);
    assert_eq!(limiter.available(now), 0);
}

fn send_sync<T: Send + Sync>() {}

#[test]
fn the_shared_form_is_send_and_sync() {
    send_sync::<SharedSlidingWindowLimiter>();
}

/// A reference model: every admitted call's segment, the window counted by brute force.
struct Model {
    quota: u32,
    segments: u64,
    segment_ns: u64,
    calls: Vec<(u64, u32)>,
}

impl Model {
    fn held(&self, seg: u64) -> u32 {
        self.calls
            .iter()
            .filter(|(s, _)| *s <= seg && seg < s + self.segments)
            .map(|(_, n)| n)
            .sum()
    }

    fn check_n(&mut self, now: Instant, n: u32) -> Result<(), Duration> {
        if n == 0 {
            return Ok(());
        }
        if n > self.quota {
            return Err(Duration::MAX);
        }
        let seg = now.as_nanos() / self.segment_ns;
        if self.held(seg) + n <= self.quota {
            self.calls.push((seg, n));
            return Ok(());
        }
        // The first later segment at which the batch fits.
        let mut later = seg + 1;
        while self.held(later) + n > self.quota {
            later += 1;
        }
        Err(Duration::from_nanos(
            later * self.segment_ns - now.as_nanos(),
        ))
    }
}

/// Readings: (step back as a late reading?, ms to move on, calls asked).
fn readings(min: usize, max: usize) -> impl Strategy<Value = Vec<(bool, u64, u32)>> {
    prop::collection::vec((prop::bool::weighted(0.2), 0u64..3_000, 0u32..4), min..max)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 8 } else { 256 },
        ..ProptestConfig::default()
    })]

    /// On a clock that only moves on, the limiter decides exactly as counting every admitted
    /// call by brute force does, refusal hints included.
    #[test]
    fn decides_as_a_brute_force_count_of_the_window(
        quota in 1u32..12,
        segments in 2u32..=MAX_SEGMENTS,
        segment_ms in 1u64..1_500,
        steps in readings(100, 300),
    ) {
        let settings = SlidingWindowSettings::builder("p")
            .quota(quota)
            .window(ms(segment_ms * u64::from(segments)))
            .segments(segments)
            .build()
            .unwrap();
        let l = SlidingWindowLimiter::new(settings);
        let mut model = Model {
            quota,
            segments: u64::from(segments),
            segment_ns: segment_ms * 1_000_000,
            calls: Vec::new(),
        };
        let mut clock = Instant::from_secs(1_000);
        for (_, step, n) in steps {
            clock += Duration::from_micros(step * 317);
            let got = l.check_n(clock, n).map_err(|r| r.retry_after);
            prop_assert_eq!(got, model.check_n(clock, n));
            prop_assert_eq!(l.available(clock), quota - model.held(clock.as_nanos() / model.segment_ns));
        }
    }

    /// The shared form and the `&mut` form, fed the same readings on one thread (late readings
    /// and clock resets included), give the same decisions and the same counts.
    #[test]
    fn the_shared_form_agrees_with_the_mut_form_in_lockstep(
        quota in 1u32..40,
        segments in 2u32..=MAX_SEGMENTS,
        segment_ms in 1u64..2_000,
        steps in readings(100, 400),
    ) {
        let settings = SlidingWindowSettings::builder("p")
            .quota(quota)
            .window(ms(segment_ms * u64::from(segments)))
            .segments(segments)
            .build()
            .unwrap();
        let own = SlidingWindowLimiter::new(settings);
        let shared = SharedSlidingWindowLimiter::new(settings);
        let mut clock = Instant::from_secs(5_000);
        for (back, step, n) in steps {
            let now = if back {
                // Up to 3 s back: a late reading or, past 1 s, a reset clock.
                clock - ms(step)
            } else {
                clock += ms(step);
                clock
            };
            prop_assert_eq!(own.check_n(now, n), shared.check_n(now, n));
            prop_assert_eq!(own.available(now), shared.available(now));
            prop_assert!(own.available(now) <= quota);
        }
    }
}

#[test]
fn a_keyed_sliding_window_keeps_each_keys_window_and_evicts_a_key_once_its_window_is_empty_and_quiet(
) {
    // 2 calls per 8 s window sliding in 1 s segments; keys idle after 10 s of quiet.
    let settings = SlidingWindowSettings::builder("tenants")
        .quota(2)
        .window(secs(8))
        .idle(secs(10))
        .build()
        .unwrap();
    let mut table: KeyedSlidingWindowLimiter<u32, 1> = KeyedSlidingWindowLimiter::new(settings);
    table.check(&1, at(500)).unwrap();
    table.check(&1, at(2_500)).unwrap();
    // The key's own window is full: refused until segment 0 leaves (segment 8 begins).
    let Err(KeyedLimitError::Limited(r)) = table.check(&1, at(3_000)) else {
        panic!("the key's window is full")
    };
    assert_eq!(r.retry_after, secs(5));
    // The table holds one key: a second is refused while the first is not idle. Its window empties
    // at 10 s (segment 2's call leaves); the refused request at 3 s asked about it, so its quiet
    // time ends at 13 s: idle then, not before.
    assert_eq!(
        table.check(&2, at(3_000)),
        Err(KeyedLimitError::Full {
            retry_after: secs(10)
        })
    );
    assert!(table.check(&2, at(12_999)).is_err());
    assert!(table.check(&2, at(13_000)).is_ok());
    assert!(!table.contains_key(&1) && table.contains_key(&2));
    assert_eq!(table.available(&2, at(13_000)), 1);
}

#[test]
fn a_keyed_sliding_window_decides_as_a_single_limiter_per_key() {
    let settings = per_second_segments(3, 4);
    let mut table: KeyedSlidingWindowLimiter<u8, 8> = KeyedSlidingWindowLimiter::new(settings);
    let single = SlidingWindowLimiter::new(settings);
    for (i, t) in [
        0u64, 100, 900, 1_200, 1_300, 2_000, 3_999, 4_000, 5_500, 9_000,
    ]
    .into_iter()
    .enumerate()
    {
        let now = at(t);
        assert_eq!(
            table.check(&7, now).map_err(Refused::from),
            single.check(now),
            "request {i} at {t} ms"
        );
        assert_eq!(table.available(&7, now), single.available(now));
    }
}

fn at(millis: u64) -> Instant {
    Instant::from_millis(millis)
}
