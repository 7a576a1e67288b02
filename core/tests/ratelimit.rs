//! Rate limiting: the GCRA limiter, document 004's window-with-cooldown limiter, their shared
//! forms and the keyed table, all on synthetic time (but for the threads of the concurrency
//! tests, which read a real clock).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use stormguard_core::{
    limits::KeyedLimitError, limits::KeyedLimiter, limits::KeyedRateLimiter,
    limits::KeyedWindowLimiter, limits::RateLimitSettings, limits::RateLimiter,
    limits::SharedRateLimiter, limits::SharedWindowLimiter, limits::WindowLimitSettings,
    limits::WindowLimiter, limits::MAX_WINDOW_EVENTS, Bound, Duration, Field, Instant, Name,
    RefusalReason, Refused, SettingsError,
};

mod support;
use support::{ms, secs};

const T0: Instant = Instant::from_secs(1_000);

fn gcra(cells: u32, period: Duration, burst: u32) -> RateLimitSettings {
    RateLimitSettings::builder("test")
        .rate(cells, period)
        .burst(burst)
        .build()
        .unwrap()
}

fn window(events: u32, window: Duration, cooldown: Duration) -> WindowLimitSettings {
    WindowLimitSettings::builder("test")
        .events(events)
        .window(window)
        .cooldown(cooldown)
        .build()
        .unwrap()
}

/// Checks until refused at `now`; returns how many passed.
#[track_caller]
fn drain(l: &mut RateLimiter, now: Instant) -> u32 {
    let mut n = 0;
    while l.check(now).is_ok() {
        n += 1;
        assert!(n <= 1_000_000, "a limiter that never refuses");
    }
    n
}

#[track_caller]
fn refusal(result: Result<(), Refused>) -> Duration {
    match result {
        Ok(()) => panic!("expected a refusal"),
        Err(r) => {
            assert_eq!(r.reason, RefusalReason::RateLimited);
            r.retry_after
        }
    }
}

// ---------------------------------------------------------------------------------------------
// GCRA: rate, burst, retry_after

#[test]
fn a_full_limiter_admits_exactly_its_burst_at_once() {
    for burst in [1, 2, 7, 50] {
        let mut l = RateLimiter::new(gcra(10, secs(1), burst));
        assert_eq!(l.available(T0), burst);
        assert_eq!(drain(&mut l, T0), burst);
        assert_eq!(l.available(T0), 0);
    }
}

#[test]
fn after_the_burst_one_cell_comes_back_every_emission_interval() {
    let mut l = RateLimiter::new(gcra(10, secs(1), 5));
    drain(&mut l, T0);
    for i in 1..=100u64 {
        let due = T0 + ms(100 * i);
        assert!(
            l.check(due - Duration::from_nanos(1)).is_err(),
            "cell {i} early"
        );
        assert_eq!(l.check(due), Ok(()), "cell {i} on time");
        assert!(l.check(due).is_err(), "cell {i} twice");
    }
}

#[test]
fn over_a_long_run_exactly_burst_plus_rate_times_time_is_admitted() {
    // Asked every millisecond for ten minutes at 10 per second: exactly 6000 + the burst of 5.
    let l = RateLimiter::new(gcra(10, secs(1), 5));
    let mut admitted = 0u32;
    for i in 0..=600_000u64 {
        if l.check(T0 + ms(i)).is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 5 + 6000);
}

#[test]
fn an_empty_limiter_refills_to_its_burst_and_no_further() {
    let mut l = RateLimiter::new(gcra(10, secs(1), 5));
    drain(&mut l, T0);
    assert_eq!(l.available(T0 + ms(300)), 3);
    assert_eq!(l.available(T0 + ms(500)), 5);
    assert_eq!(l.available(T0 + secs(3600)), 5);
    assert_eq!(drain(&mut l, T0 + secs(3600)), 5);
}

#[test]
fn retry_after_is_exactly_when_the_next_cell_is_due() {
    let l = RateLimiter::new(gcra(10, secs(1), 1));
    l.check(T0).unwrap();
    let now = T0 + ms(30);
    let wait = refusal(l.check(now));
    assert_eq!(wait, ms(70));
    assert!(l.check(now + wait - Duration::from_nanos(1)).is_err());
    assert_eq!(l.check(now + wait), Ok(()));
    // A refusal takes nothing: asking many times does not push the next cell back.
    for _ in 0..100 {
        assert!(l.check(now + wait).is_err());
    }
    assert_eq!(l.check(now + wait + ms(100)), Ok(()));
}

#[test]
fn check_n_takes_all_the_cells_or_none_and_says_when_all_are_there() {
    let l = RateLimiter::new(gcra(1000, secs(1), 1000));
    assert_eq!(l.check_n(T0, 600), Ok(()));
    assert_eq!(refusal(l.check_n(T0, 600)), ms(200));
    assert_eq!(l.available(T0), 400);
    assert_eq!(l.check_n(T0, 400), Ok(()));
    assert_eq!(l.check_n(T0 + ms(200), 200), Ok(()));
    // Zero cells always pass and take nothing.
    assert_eq!(l.check_n(T0 + ms(200), 0), Ok(()));
    // More than a full limiter holds: no amount of waiting helps.
    assert_eq!(refusal(l.check_n(T0 + secs(60), 1001)), Duration::MAX);
    assert_eq!(l.available(T0 + secs(60)), 1000);
}

#[test]
fn a_fractional_interval_is_rounded_up_so_the_rate_is_never_exceeded() {
    let s = gcra(3, secs(1), 2);
    assert_eq!(s.emission_interval(), Duration::from_nanos(333_333_334));
    let l = RateLimiter::new(s);
    let mut admitted = 0u64;
    let mut now = T0;
    let end = T0 + secs(30);
    while now <= end {
        if l.check(now).is_ok() {
            admitted += 1;
        }
        now += ms(1);
    }
    // The burst of 2 and 3 a second for 30 s is 92 in exact arithmetic; rounded up, the 92nd
    // cell is due 60 ns after the 30th second.
    assert_eq!(admitted, 91);
    assert!(l.check(end + Duration::from_nanos(59)).is_err());
    assert_eq!(l.check(end + Duration::from_nanos(60)), Ok(()));
    // Rates that divide the period are exact.
    assert_eq!(
        gcra(1000, secs(1), 1).emission_interval(),
        Duration::from_millis(1)
    );
    assert_eq!(gcra(50, secs(60), 1).emission_interval(), ms(1200));
}

#[test]
fn the_default_is_document_004s_fifty_a_minute() {
    let s = RateLimitSettings::defaults("streams");
    assert_eq!((s.cells(), s.period(), s.burst()), (50, secs(60), 50));
    assert_eq!(s.idle(), secs(300));
    assert_eq!(s.refill(), secs(60));
    assert_eq!(s.to_string(), "50 per 60s, burst 50");
    let mut l = RateLimiter::new(s);
    assert_eq!(drain(&mut l, T0), 50);
    assert_eq!(refusal(l.check(T0)), ms(1200));
}

// ---------------------------------------------------------------------------------------------
// GCRA: hostile time

#[test]
fn a_late_reading_is_no_time_passed_and_undoes_nothing() {
    let mut l = RateLimiter::new(gcra(10, secs(1), 5));
    drain(&mut l, T0);
    // A reading 300 ms behind (another thread read the clock first): refused, and told to wait
    // until the next cell counting from its own reading.
    let late = T0 - ms(300);
    assert_eq!(refusal(l.check(late)), ms(400));
    assert_eq!(l.available(late), 0);
    // Nothing was undone or granted: the next cell is still due 100 ms after the drain.
    assert!(l.check(T0 + ms(99)).is_err());
    assert_eq!(l.check(T0 + ms(100)), Ok(()));
}

#[test]
fn a_clock_stepping_far_back_neither_locks_the_limiter_out_nor_grants_a_new_burst() {
    let mut l = RateLimiter::new(gcra(10, secs(1), 5));
    drain(&mut l, T0);
    // The clock is reset an hour back: the limiter restarts from the new reading as empty as it
    // may have been, and the next cell comes one interval later, not an hour later.
    let back = T0 - secs(3600);
    assert_eq!(refusal(l.check(back)), ms(100));
    assert!(l.check(back + ms(99)).is_err());
    assert_eq!(l.check(back + ms(100)), Ok(()));
    // Over the next second on the new clock: one cell per interval, never a fresh burst.
    let mut admitted = 0;
    for i in 101..=1100u64 {
        if l.check(back + ms(i)).is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10);
}

#[test]
fn a_full_limiter_stays_within_its_burst_when_the_clock_steps_back() {
    let mut l = RateLimiter::new(gcra(10, secs(1), 5));
    l.check(T0).unwrap();
    // Whatever the step, at most a burst passes at one instant.
    for back in [ms(1), ms(500), secs(2), secs(86_400)] {
        let now = T0 - back;
        assert!(drain(&mut l, now) <= 5, "stepped back {back}");
    }
}

#[test]
fn huge_time_jumps_leave_exactly_a_full_burst() {
    let mut l = RateLimiter::new(gcra(10, secs(1), 5));
    drain(&mut l, T0);
    let far = T0 + secs(100 * 365 * 86_400);
    assert_eq!(l.available(far), 5);
    assert_eq!(drain(&mut l, far), 5);
    assert_eq!(refusal(l.check(far)), ms(100));
    // From the epoch itself, and from the far end.
    let mut l = RateLimiter::new(gcra(10, secs(1), 5));
    assert_eq!(drain(&mut l, Instant::ZERO), 5);
    assert_eq!(drain(&mut l, Instant::MAX - secs(10)), 5);
}

#[test]
fn cells_due_after_the_end_of_time_are_never_granted() {
    let mut l = RateLimiter::new(gcra(10, secs(1), 5));
    // At the last representable instant, a cell would be due past it.
    assert_eq!(refusal(l.check(Instant::MAX)), Duration::MAX);
    let near = Instant::MAX - ms(250);
    assert_eq!(drain(&mut l, near), 2);
    assert_eq!(refusal(l.check(near)), Duration::MAX);
    // Stepping back from there is a reset clock like any other.
    assert_eq!(drain(&mut l, T0), 0);
    assert_eq!(l.check(T0 + ms(100)), Ok(()));
}

// ---------------------------------------------------------------------------------------------
// Window with cooldown (document 004)

#[test]
fn a_window_admits_its_limit_and_the_next_event_starts_the_cooldown() {
    let l = WindowLimiter::new(WindowLimitSettings::defaults("stream"));
    for i in 0..50 {
        assert_eq!(l.check(T0 + ms(i * 100)), Ok(()), "event {i}");
    }
    assert_eq!(l.available(T0 + secs(5)), 0);
    let at = T0 + secs(5);
    assert_eq!(refusal(l.check(at)), secs(30));
}

#[test]
fn refusals_during_the_cooldown_carry_what_is_left_of_it() {
    let l = WindowLimiter::new(window(5, secs(2), secs(1)));
    for _ in 0..5 {
        l.check(T0).unwrap();
    }
    assert_eq!(refusal(l.check(T0)), secs(1));
    assert_eq!(refusal(l.check(T0 + ms(250))), ms(750));
    assert_eq!(
        refusal(l.check(T0 + ms(999) + Duration::from_micros(500))),
        Duration::from_micros(500)
    );
    // Refusals during the cooldown neither extend it nor count.
    assert_eq!(l.check(T0 + secs(1)), Ok(()));
}

#[test]
fn after_the_cooldown_a_fresh_window_opens_fifty_then_thirty_seconds_then_fifty() {
    let l = WindowLimiter::new(WindowLimitSettings::defaults("runaway"));
    let mut now = T0;
    for cycle in 0..3 {
        for i in 0..50 {
            assert_eq!(l.check(now), Ok(()), "cycle {cycle} event {i}");
        }
        assert_eq!(refusal(l.check(now)), secs(30), "cycle {cycle}");
        now += secs(30);
    }
}

#[test]
fn a_cooldown_ends_exactly_when_it_has_lasted_its_length_at_any_nanosecond() {
    // Instants between milliseconds, as a real clock or tokio's paused clock gives them.
    for offset in [1, 123, 999_999, 1_000_001] {
        let l = WindowLimiter::new(WindowLimitSettings::defaults("stream"));
        let t = T0 + Duration::from_nanos(offset);
        for _ in 0..50 {
            l.check(t).unwrap();
        }
        assert_eq!(refusal(l.check(t)), secs(30), "offset {offset} ns");
        let end = t + secs(30);
        let just_before = end - Duration::from_nanos(1);
        assert_eq!(refusal(l.check(just_before)), Duration::from_nanos(1));
        assert_eq!(l.check(end), Ok(()), "offset {offset} ns");
    }
}

#[test]
fn a_window_that_ends_without_being_exceeded_starts_no_cooldown() {
    let l = WindowLimiter::new(window(5, secs(2), secs(1)));
    for _ in 0..4 {
        l.check(T0).unwrap();
    }
    // The window still holds at its last instant, as the original's does...
    assert_eq!(l.available(T0 + secs(2)), 1);
    l.check(T0 + secs(2)).unwrap();
    // ...and is over just after it: a full window again, no cooldown.
    let after = T0 + secs(2) + Duration::from_nanos(1);
    assert_eq!(l.available(after), 5);
    for _ in 0..5 {
        assert_eq!(l.check(after), Ok(()));
    }
    let wait = refusal(l.check(after));
    assert!(wait >= secs(1) && wait < secs(1) + ms(1), "{wait}");
}

#[test]
fn a_window_opens_at_its_first_event_not_at_a_fixed_boundary() {
    let l = WindowLimiter::new(window(2, secs(10), secs(1)));
    l.check(T0 + secs(7)).unwrap();
    l.check(T0 + secs(12)).unwrap();
    // Still the window opened at 7 s: the third event exceeds it.
    assert!(l.check(T0 + secs(17)).is_err());
}

#[test]
fn times_are_whole_milliseconds_never_served_short() {
    let l = WindowLimiter::new(window(1, secs(1), secs(1)));
    let now = T0 + Duration::from_micros(250);
    l.check(now).unwrap();
    // The cooldown started a quarter of a millisecond in ends on the next whole millisecond.
    let wait = refusal(l.check(now));
    assert!(wait >= secs(1) && wait < secs(1) + ms(1), "{wait}");
    assert!(l.check(now + wait - Duration::from_nanos(1)).is_err());
    assert_eq!(l.check(now + wait), Ok(()));
}

#[test]
fn a_window_counts_batches_and_a_batch_that_does_not_fit_starts_the_cooldown() {
    let l = WindowLimiter::new(window(10, secs(60), secs(30)));
    assert_eq!(l.check_n(T0, 6), Ok(()));
    assert_eq!(l.check_n(T0, 0), Ok(()));
    assert_eq!(l.available(T0), 4);
    assert_eq!(refusal(l.check_n(T0, 5)), secs(30));
    // More than a window holds: refused for good, and no cooldown started by it.
    let l = WindowLimiter::new(window(10, secs(60), secs(30)));
    assert_eq!(refusal(l.check_n(T0, 11)), Duration::MAX);
    assert_eq!(l.check(T0), Ok(()));
}

#[test]
fn the_window_limiter_reads_a_clock_stepping_back_as_no_time_passed() {
    let l = WindowLimiter::new(window(5, secs(60), secs(30)));
    for _ in 0..3 {
        l.check(T0).unwrap();
    }
    // A late reading counts in the same window.
    l.check(T0 - ms(500)).unwrap();
    assert_eq!(l.available(T0), 1);
    // A clock reset an hour back keeps the count and restarts the window from its reading.
    let back = T0 - secs(3600);
    l.check(back).unwrap();
    assert_eq!(refusal(l.check(back)), secs(30));
    // The cooldown runs on the new clock, not until the old one is reached again.
    assert_eq!(refusal(l.check(back + secs(10))), secs(20));
    // And a further reset during the cooldown restarts the cooldown, never extends it by the jump.
    let further = back - secs(7200);
    assert_eq!(refusal(l.check(further)), secs(30));
    assert_eq!(l.check(further + secs(30)), Ok(()));
}

#[test]
fn the_window_limiter_survives_huge_time_jumps_and_the_end_of_time() {
    let l = WindowLimiter::new(window(2, secs(60), secs(30)));
    l.check(T0).unwrap();
    l.check(T0).unwrap();
    assert!(l.check(T0).is_err());
    let far = T0 + secs(200 * 365 * 86_400);
    assert_eq!(l.check(far), Ok(()));
    // At the end of time a window never ends and a cooldown never ends either: refused for good
    // rather than admitting without limit.
    let end = Instant::MAX;
    let l = WindowLimiter::new(window(2, secs(60), secs(30)));
    assert_eq!(l.check(end), Ok(()));
    assert_eq!(l.check(end), Ok(()));
    assert_eq!(refusal(l.check(end)), Duration::MAX);
    assert_eq!(refusal(l.check(end)), Duration::MAX);
}

// ---------------------------------------------------------------------------------------------
// Settings

#[test]
fn invalid_rate_limit_settings_are_typed_errors() {
    let b = || RateLimitSettings::builder("x");
    let cases = [
        (b().rate(0, secs(1)), Field::Rate, Bound::AtLeast(1)),
        (
            b().rate(1, Duration::ZERO),
            Field::Period,
            Bound::AtLeastDuration(Duration::from_nanos(1)),
        ),
        (
            b().rate(1001, Duration::from_micros(1)),
            Field::Rate,
            Bound::AtMost(1000),
        ),
        (b().burst(0), Field::Burst, Bound::AtLeast(1)),
        (
            b().rate(1, secs(1_000_000_000)).burst(u32::MAX),
            Field::Burst,
            Bound::AtMost(u64::MAX / 1_000_000_000_000_000_000),
        ),
    ];
    for (builder, field, bound) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!(err, SettingsError { field, bound }, "{err}");
    }
    // One cell per nanosecond is the finest rate.
    assert_eq!(
        b().rate(1000, Duration::from_micros(1))
            .build()
            .unwrap()
            .emission_interval(),
        Duration::from_nanos(1)
    );
    assert!(RateLimitSettings::per_second("x", 0).is_err());
    assert!(RateLimitSettings::per_minute("x", u32::MAX).is_ok());
}

#[test]
fn invalid_window_settings_are_typed_errors() {
    let b = || WindowLimitSettings::builder("x");
    let cases = [
        (b().events(0), Field::WindowEvents, Bound::AtLeast(1)),
        (
            b().events(MAX_WINDOW_EVENTS + 1),
            Field::WindowEvents,
            Bound::AtMost(u64::from(MAX_WINDOW_EVENTS)),
        ),
        (
            b().window(Duration::from_micros(999)),
            Field::Window,
            Bound::AtLeastDuration(ms(1)),
        ),
        (
            b().cooldown(Duration::ZERO),
            Field::Cooldown,
            Bound::AtLeastDuration(ms(1)),
        ),
    ];
    for (builder, field, bound) in cases {
        assert_eq!(builder.build(), Err(SettingsError { field, bound }));
    }
    assert!(b().events(MAX_WINDOW_EVENTS).build().is_ok());
    let s = WindowLimitSettings::defaults("x");
    assert_eq!(s.to_string(), "50 per 60s, then a 30s cooldown");
    assert_eq!(
        (s.events(), s.window(), s.cooldown(), s.idle()),
        (50, secs(60), secs(30), secs(300))
    );
}

#[test]
fn settings_are_built_in_a_const_and_names_come_from_configuration() {
    const S: RateLimitSettings = match RateLimitSettings::per_second("const", 5) {
        Ok(s) => s,
        Err(_) => panic!(),
    };
    static SHARED: SharedRateLimiter = SharedRateLimiter::new(S);
    static WINDOW: SharedWindowLimiter =
        SharedWindowLimiter::new(WindowLimitSettings::defaults("w"));
    const TABLE: KeyedRateLimiter<u32, 4> = KeyedRateLimiter::new(S);
    assert_eq!(SHARED.name(), &"const");
    assert_eq!(WINDOW.settings().events(), 50);
    assert!(TABLE.is_empty());
    let name = Name::try_from_str("tenant-eu").unwrap();
    let s = RateLimitSettings::builder_named(name).build().unwrap();
    assert_eq!(RateLimiter::new(s).name(), &"tenant-eu");
    let w = WindowLimitSettings::builder_named(name).build().unwrap();
    assert_eq!(WindowLimiter::new(w).name(), &"tenant-eu");
}

// ---------------------------------------------------------------------------------------------
// Keyed

#[test]
fn every_stream_has_its_own_limiter() {
    let mut t: KeyedWindowLimiter<u64, 64> = KeyedWindowLimiter::new(window(5, secs(2), secs(1)));
    for _ in 0..5 {
        t.check(&1, T0).unwrap();
    }
    assert!(matches!(t.check(&1, T0), Err(KeyedLimitError::Limited(_))));
    // Stream 2 is unaffected by stream 1's cooldown.
    for _ in 0..5 {
        assert_eq!(t.check(&2, T0), Ok(()));
    }
    assert_eq!(t.available(&1, T0), 0);
    assert_eq!(t.available(&3, T0), 5);
    let mut g: KeyedRateLimiter<u64, 64> = KeyedRateLimiter::new(gcra(10, secs(1), 2));
    for key in 0..40u64 {
        assert_eq!(g.check_n(&key, T0, 2), Ok(()), "key {key}");
    }
    for key in 0..40u64 {
        let Err(KeyedLimitError::Limited(r)) = g.check(&key, T0) else {
            panic!("key {key} shares a limiter")
        };
        assert_eq!(r.retry_after, ms(100));
    }
    assert_eq!(g.len(), 40);
}

#[test]
fn keys_that_hash_alike_never_share_a_limiter() {
    use std::hash::{BuildHasher, Hasher};
    /// Every key hashes to the same value: the table must fall back on comparing keys.
    #[derive(Clone, Copy, Default)]
    struct Same;
    struct SameHasher;
    impl Hasher for SameHasher {
        fn finish(&self) -> u64 {
            42
        }
        fn write(&mut self, _: &[u8]) {}
    }
    impl BuildHasher for Same {
        type Hasher = SameHasher;
        fn build_hasher(&self) -> SameHasher {
            SameHasher
        }
    }
    let mut t: KeyedLimiter<String, RateLimitSettings, 8, Same> =
        KeyedLimiter::with_hasher(gcra(1, secs(1), 1), Same);
    let keys: Vec<String> = (0..8).map(|i| format!("stream-{i}")).collect();
    for k in &keys {
        assert_eq!(t.check(k, T0), Ok(()), "{k}");
    }
    for k in &keys {
        assert!(t.check(k, T0).is_err(), "{k}");
        assert!(t.contains_key(k));
    }
    assert!(t.remove(&keys[3]));
    assert!(!t.contains_key(&keys[3]));
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(t.contains_key(k), i != 3, "{k}");
    }
}

#[test]
fn an_idle_stream_is_evicted_after_five_minutes() {
    let mut t: KeyedWindowLimiter<u64, 1> =
        KeyedWindowLimiter::new(WindowLimitSettings::defaults("streams"));
    t.check(&1, T0).unwrap();
    let almost = T0 + secs(300) - Duration::from_nanos(1);
    assert_eq!(
        t.check(&2, almost),
        Err(KeyedLimitError::Full {
            retry_after: Duration::from_nanos(1)
        })
    );
    assert!(t.contains_key(&1));
    assert_eq!(t.check(&2, T0 + secs(300)), Ok(()));
    assert!(!t.contains_key(&1));
    assert!(t.contains_key(&2));
}

#[test]
fn a_key_asked_about_recently_is_not_idle_even_when_refused() {
    let mut t: KeyedWindowLimiter<u64, 1> = KeyedWindowLimiter::new(window(1, secs(1), secs(1)));
    t.check(&1, T0).unwrap();
    // Refusals are use too: the quiet time restarts at each.
    assert!(t.check(&1, T0 + secs(200)).is_ok());
    assert!(t.check(&1, T0 + secs(200)).is_err());
    assert_eq!(
        t.check(&2, T0 + secs(400)),
        Err(KeyedLimitError::Full {
            retry_after: secs(100)
        })
    );
}

#[test]
fn a_quiet_key_whose_limiter_is_not_yet_full_is_not_idle() {
    // GCRA with no idle period: a key may go as soon as its limiter is full again.
    let s = RateLimitSettings::builder("x")
        .rate(1, secs(10))
        .burst(3)
        .idle(Duration::ZERO)
        .build()
        .unwrap();
    let mut t: KeyedRateLimiter<u64, 1> = KeyedRateLimiter::new(s);
    t.check_n(&1, T0, 3).unwrap();
    assert_eq!(
        t.check(&2, T0 + secs(5)),
        Err(KeyedLimitError::Full {
            retry_after: secs(25)
        })
    );
    assert_eq!(t.check(&2, T0 + secs(30)), Ok(()));
    // Had it been evicted early, key 1 would have come back with a fresh burst it had not earned.
}

#[test]
fn a_full_table_evicts_its_least_recently_used_idle_key() {
    let mut t: KeyedWindowLimiter<&str, 3> =
        KeyedWindowLimiter::new(WindowLimitSettings::defaults("streams"));
    t.check(&"a", T0).unwrap();
    t.check(&"b", T0 + secs(1)).unwrap();
    t.check(&"c", T0 + secs(2)).unwrap();
    let later = T0 + secs(600);
    t.check(&"b", later).unwrap(); // b is in use again
    t.check(&"d", later).unwrap(); // evicts a, the least recently used idle key
    assert!(!t.contains_key(&"a"));
    assert!(t.contains_key(&"c"));
    t.check(&"e", later).unwrap(); // then c
    assert!(!t.contains_key(&"c"));
    assert_eq!(t.len(), 3);
    for k in ["b", "d", "e"] {
        assert!(t.contains_key(&k), "{k}");
    }
}

#[test]
fn a_full_table_with_no_idle_key_refuses_the_new_key_with_a_typed_error() {
    let mut t: KeyedWindowLimiter<u64, 2> =
        KeyedWindowLimiter::new(WindowLimitSettings::defaults("streams"));
    t.check(&1, T0).unwrap();
    t.check(&2, T0 + secs(30)).unwrap();
    let err = t.check(&3, T0 + secs(60)).unwrap_err();
    // The first key turns idle five minutes after its last use.
    assert_eq!(
        err,
        KeyedLimitError::Full {
            retry_after: secs(240)
        }
    );
    assert_eq!(err.retry_after(), secs(240));
    assert_eq!(
        Refused::from(err),
        Refused {
            reason: RefusalReason::RateLimited,
            retry_after: secs(240)
        }
    );
    assert_eq!(
        err.to_string(),
        "rate limiter table full with no idle key, retry after 240s"
    );
    // Keys in use keep their limiters: nothing was evicted.
    assert_eq!(t.len(), 2);
    assert_eq!(t.available(&1, T0 + secs(60)), 49);
    // A refusal of a known key is not a table problem.
    let mut g: KeyedRateLimiter<u64, 1> = KeyedRateLimiter::new(gcra(1, secs(1), 1));
    g.check(&1, T0).unwrap();
    assert!(matches!(g.check(&1, T0), Err(KeyedLimitError::Limited(_))));
    // A new key that its own limiter would refuse is refused as such, full table or not.
    assert!(matches!(
        g.check_n(&2, T0, 2),
        Err(KeyedLimitError::Limited(Refused {
            retry_after: Duration::MAX,
            ..
        }))
    ));
}

#[test]
fn a_table_of_no_slots_refuses_every_key_without_panicking() {
    let mut t: KeyedRateLimiter<u64, 0> = KeyedRateLimiter::new(gcra(1, secs(1), 1));
    assert_eq!(
        t.check(&1, T0),
        Err(KeyedLimitError::Full {
            retry_after: Duration::MAX
        })
    );
    assert_eq!(t.evict_idle(T0), 0);
    assert!(!t.remove(&1));
    assert_eq!(t.available(&1, T0), 1);
}

#[test]
fn a_sweep_evicts_only_idle_keys_and_keeps_every_other_key_reachable() {
    let mut t: KeyedRateLimiter<u64, 64> = KeyedRateLimiter::with_seed(gcra(1, secs(1), 1), 7);
    for key in 0..60u64 {
        t.check(&key, T0 + secs(key)).unwrap();
    }
    let now = T0 + secs(300 + 29);
    // Keys 0..=29 have been quiet for five minutes.
    assert_eq!(t.evict_idle(now), 30);
    assert_eq!(t.len(), 30);
    for key in 0..60u64 {
        assert_eq!(t.contains_key(&key), key >= 30, "key {key}");
    }
    for key in 30..60u64 {
        assert!(t.check(&key, now).is_ok(), "key {key}");
    }
}

#[test]
fn a_clock_stepping_back_does_not_pin_keys_in_the_table() {
    let mut t: KeyedWindowLimiter<u64, 1> =
        KeyedWindowLimiter::new(WindowLimitSettings::defaults("s"));
    t.check(&1, T0 + secs(86_400)).unwrap();
    // The clock is reset a day back: key 1 is idle five minutes after the new reading, not a
    // day and five minutes after.
    assert!(matches!(t.check(&2, T0), Err(KeyedLimitError::Full { .. })));
    assert_eq!(t.check(&2, T0 + secs(300)), Ok(()));
}

#[test]
fn memory_per_limiter_and_per_keyed_entry() {
    use std::mem::size_of;
    // The state is one word; the rest is the settings (the name among them).
    assert!(
        size_of::<RateLimiter>() <= 96,
        "{}",
        size_of::<RateLimiter>()
    );
    assert!(
        size_of::<WindowLimiter>() <= 96,
        "{}",
        size_of::<WindowLimiter>()
    );
    let per_entry = |table: usize, slots: usize| (table - size_of::<RateLimitSettings>()) / slots;
    // A u64 key: tag, last use, state and key, 32 bytes on a 64-bit host.
    let n = size_of::<KeyedRateLimiter<u64, 1024>>();
    assert!(per_entry(n, 1024) <= 32, "{n}");
    let n = size_of::<KeyedRateLimiter<u32, 1024>>();
    assert!(per_entry(n, 1024) <= 24, "{n}");
}

#[test]
fn the_shared_forms_are_send_and_sync_and_the_tables_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<SharedRateLimiter>();
    send_sync::<SharedWindowLimiter>();
    send::<RateLimiter>();
    send::<WindowLimiter>();
    send_sync::<KeyedRateLimiter<u64, 8>>();
    send_sync::<KeyedLimitError>();
}

// ---------------------------------------------------------------------------------------------
// Concurrency

#[test]
fn racing_threads_at_one_instant_get_exactly_the_burst_or_the_window() {
    let gcra_limiter = SharedRateLimiter::new(gcra(10, secs(1), 37));
    let window_limiter = SharedWindowLimiter::new(window(41, secs(60), secs(30)));
    let (g, w) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..1000 {
                    if gcra_limiter.check(T0).is_ok() {
                        g.fetch_add(1, Ordering::Relaxed);
                    }
                    if window_limiter.check(T0).is_ok() {
                        w.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(g.into_inner(), 37);
    assert_eq!(w.into_inner(), 41);
}

#[test]
fn threads_sharing_a_limiter_never_exceed_burst_plus_rate_times_elapsed() {
    let (cells, burst) = (2000u64, 10u64);
    let limiter = SharedRateLimiter::new(gcra(cells as u32, secs(1), burst as u32));
    let start = std::time::Instant::now();
    let now = || Instant::from_nanos(start.elapsed().as_nanos() as u64);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while start.elapsed() < std::time::Duration::from_millis(150) {
                    if limiter.check(now()).is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let elapsed = start.elapsed().as_nanos() as u64;
    let admitted = admitted.into_inner();
    let bound = burst + cells * elapsed / 1_000_000_000;
    assert!(admitted <= bound, "{admitted} admitted, bound {bound}");
    assert!(admitted >= burst, "{admitted} admitted");
}

// ---------------------------------------------------------------------------------------------
// Properties

/// A reading: forward by up to `step` ms, or back by up to 999 ms (a late reading).
fn readings(len: usize, step: u64) -> impl Strategy<Value = Vec<(bool, u64, u32)>> {
    proptest::collection::vec((proptest::bool::weighted(0.1), 0..=step, 1u32..=3), 1..len)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 8 } else { 256 },
        ..ProptestConfig::default()
    })]

    /// Over any span of readings [x, y], at most `burst + rate·(y − x)` cells are admitted, late
    /// readings (up to a second behind) included.
    #[test]
    fn admitted_cells_never_exceed_burst_plus_rate_times_the_window(
        cells in 1u32..50,
        period_ms in 1u64..5000,
        burst in 1u32..20,
        steps in readings(300, 400),
    ) {
        let settings = RateLimitSettings::builder("p")
            .rate(cells, ms(period_ms))
            .burst(burst)
            .build()
            .unwrap();
        let l = RateLimiter::new(settings);
        let mut clock = T0;
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (late, ms_step, n) in steps {
            let now = if late {
                clock - Duration::from_millis(ms_step.min(999))
            } else {
                clock += Duration::from_millis(ms_step);
                clock
            };
            if l.check_n(now, n).is_ok() {
                admitted.push((now.as_nanos(), u64::from(n)));
            }
        }
        admitted.sort_unstable();
        let period = u128::from(period_ms) * 1_000_000;
        for i in 0..admitted.len() {
            let mut count = 0u128;
            for j in i..admitted.len() {
                count += u128::from(admitted[j].1);
                let span = u128::from(admitted[j].0 - admitted[i].0);
                // count <= burst + span * cells / period, in integers.
                prop_assert!(
                    count.saturating_sub(u128::from(burst)) * period <= span * u128::from(cells),
                    "{count} cells in {span} ns"
                );
            }
        }
    }

    /// The shared forms decide exactly as the `&mut` forms for any sequential input, clock
    /// resets and the end of time included.
    #[test]
    fn shared_and_exclusive_forms_decide_identically(
        cells in 1u32..100,
        burst in 1u32..10,
        events in 1u32..10,
        ops in proptest::collection::vec((0u8..10, 0u64..200_000, 0u32..4), 1..300),
    ) {
        let g = RateLimitSettings::builder("p").rate(cells, secs(1)).burst(burst).build().unwrap();
        let w = window(events, secs(2), ms(700));
        let (a, b) = (RateLimiter::new(g), SharedRateLimiter::new(g));
        let (c, d) = (WindowLimiter::new(w), SharedWindowLimiter::new(w));
        let mut now = T0;
        for (kind, step, n) in ops {
            now = match kind {
                0 => now - Duration::from_micros(step),          // a late reading or reset
                1 => now - Duration::from_micros(step * 100_000), // a reset of hours
                2 if step < 1000 => Instant::MAX - Duration::from_micros(step),
                _ => now + Duration::from_micros(step),
            };
            prop_assert_eq!(a.check_n(now, n), b.check_n(now, n));
            prop_assert_eq!(c.check_n(now, n), d.check_n(now, n));
            prop_assert_eq!(a.available(now), b.available(now));
            prop_assert_eq!(c.available(now), d.available(now));
        }
    }

    /// A keyed table with room for every key decides for each key exactly as a limiter of its
    /// own would; in a small table, a key disappears only when its limiter was as good as new and
    /// quiet for the idle period, and a new key is refused only when no key was.
    #[test]
    fn a_keyed_table_is_a_limiter_per_key(
        ops in proptest::collection::vec((0u8..12, 0u64..90_000, 1u32..3), 1..400),
    ) {
        let w = WindowLimitSettings::builder("p")
            .events(3)
            .window(secs(20))
            .cooldown(secs(10))
            .idle(secs(60))
            .build()
            .unwrap();
        let mut roomy: KeyedWindowLimiter<u8, 16> = KeyedWindowLimiter::new(w);
        let mut small: KeyedWindowLimiter<u8, 4> = KeyedWindowLimiter::with_seed(w, 99);
        // The model: a limiter per key and its last use, for each table.
        let mut model: HashMap<u8, WindowLimiter> = HashMap::new();
        let mut small_model: HashMap<u8, (WindowLimiter, Instant)> = HashMap::new();
        let mut now = T0;
        for (key, step, n) in ops {
            now += Duration::from_millis(step);
            let expected = model.entry(key).or_insert_with(|| WindowLimiter::new(w)).check_n(now, n);
            prop_assert_eq!(roomy.check_n(&key, now, n).map_err(|e| e.refused()), expected);

            let before: Vec<u8> = small_model.keys().copied().collect();
            let result = small.check_n(&key, now, n);
            for k in before {
                if !small.contains_key(&k) {
                    let (limiter, last) = &small_model[&k];
                    prop_assert!(now - *last >= secs(60), "key {} evicted while in use", k);
                    prop_assert_eq!(limiter.available(now), 3, "key {} evicted while limited", k);
                    small_model.remove(&k);
                }
            }
            match result {
                Err(KeyedLimitError::Full { retry_after }) => {
                    prop_assert!(!small_model.contains_key(&key));
                    prop_assert_eq!(small_model.len(), 4);
                    prop_assert!(!retry_after.is_zero());
                    for (limiter, last) in small_model.values() {
                        prop_assert!(now - *last < secs(60) || limiter.available(now) < 3);
                    }
                }
                other => {
                    let entry = small_model.entry(key).or_insert_with(|| (WindowLimiter::new(w), now));
                    prop_assert_eq!(other.map_err(|e| e.refused()), entry.0.check_n(now, n));
                    entry.1 = now;
                    if other.is_err() && !small.contains_key(&key) {
                        // A refused new key is not stored.
                        small_model.remove(&key);
                    }
                }
            }
            prop_assert_eq!(small.len(), small_model.len());
            for (k, (limiter, _)) in &small_model {
                prop_assert!(small.contains_key(k));
                prop_assert_eq!(small.available(k, now), limiter.available(now));
            }
        }
    }
}
