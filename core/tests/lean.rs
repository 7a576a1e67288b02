//! The lean breaker: the same decisions as the full breaker for rules that need no statistics,
//! in a few words of memory.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::{
    Bound, Breaker, BreakerSettings, Duration, Event, Field, Instant, LeanBreaker, Outcome, Permit,
    SettingsError,
};

static RADIO: BreakerSettings = match BreakerSettings::consecutive_only("radio", 3) {
    Ok(s) => s,
    Err(_) => panic!("invalid"),
};

static DEFAULTS: BreakerSettings = BreakerSettings::defaults("full");

#[test]
fn a_lean_breaker_is_a_few_words() {
    // Settings by reference, a seed, the control, mark and ramp words; no statistics. Under
    // the embedded goal of 64 bytes on any target.
    assert!(core::mem::size_of::<LeanBreaker>() <= 5 * core::mem::size_of::<u64>());
}

#[test]
fn settings_that_need_statistics_are_refused_naming_the_rule() {
    assert_eq!(
        LeanBreaker::new(&DEFAULTS).err(),
        Some(SettingsError {
            field: Field::FailureMultiple,
            bound: Bound::UnsetWithoutStatistics
        })
    );
    assert!(LeanBreaker::new(&RADIO).is_ok());
}

fn outcome(n: u8) -> Outcome {
    match n % 5 {
        0 => Outcome::Success,
        1 => Outcome::Transient,
        2 => Outcome::TimedOut,
        3 => Outcome::Permanent,
        _ => Outcome::Cancelled,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 4 } else { 256 }, ..ProptestConfig::default() })]

    /// For any sequence, the lean breaker and the full one (on the same consecutive-only
    /// settings) decide alike and emit the same events.
    #[test]
    fn the_lean_and_full_breakers_agree(
        seed in any::<u64>(),
        ops in proptest::collection::vec((0u8..4, any::<u8>(), 0u32..40_000), 1..300),
    ) {
        let mut lean = LeanBreaker::new(&RADIO).unwrap().with_seed(seed);
        let mut full = Breaker::new(RADIO).with_seed(seed);
        let mut now = Instant::from_secs(100);
        let mut permits: Vec<(Permit, Permit)> = Vec::new();
        for (op, x, dt) in ops {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            match op {
                0 => {
                    let l = lean.try_acquire_with(now, None, &mut |e: Event<'_>| a.push(format!("{e:?}")));
                    let f = full.try_acquire_with(now, None, &mut |e: Event<'_>| b.push(format!("{e:?}")));
                    match (l, f) {
                        (Ok(l), Ok(f)) => permits.push((l, f)),
                        (Err(l), Err(f)) => prop_assert_eq!(l, f),
                        (l, f) => prop_assert!(false, "diverged: {:?} vs {:?}", l, f),
                    }
                }
                1 if !permits.is_empty() => {
                    let (l, f) = permits.swap_remove(usize::from(x) % permits.len());
                    lean.on_outcome(now, l, outcome(x), &mut |e| a.push(format!("{e:?}")));
                    full.on_outcome(now, f, outcome(x), &mut |e| b.push(format!("{e:?}")));
                }
                2 => now += Duration::from_millis(u64::from(dt)),
                _ => {
                    lean.handle_timeout(now, &mut |e| a.push(format!("{e:?}")));
                    full.handle_timeout(now, &mut |e| b.push(format!("{e:?}")));
                }
            }
            prop_assert_eq!(a, b);
            prop_assert_eq!(lean.snapshot(now), full.snapshot(now));
        }
    }
}

#[test]
fn a_full_breaker_over_static_settings_stays_under_a_kibibyte() {
    // Trip window, error baseline and latency histogram included.
    let size = core::mem::size_of::<Breaker<&'static BreakerSettings>>();
    assert!(size < 1024, "{size} bytes");
    let b = Breaker::from_static(&DEFAULTS);
    assert_eq!(b.name(), &"full");
}
