//! The breaker's compact forms decide exactly like the default one: the lean breaker (no
//! statistics, a few words of memory) for rules that need none, and the breaker whose settings
//! are a type ([`ConstSettings`]: none of them in memory, folded into the code) for every rule.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::{
    breaker::ConstSettings, breaker::Fixed, Bound, Breaker, BreakerSettings, Duration, Event,
    Field, Instant, LeanBreaker, Outcome, Permit, Recovery, SettingsError,
};

static RADIO: BreakerSettings = match BreakerSettings::consecutive_only("radio", 3) {
    Ok(s) => s,
    Err(_) => panic!("invalid"),
};

static DEFAULTS: BreakerSettings = BreakerSettings::defaults("full");

/// Every default rule, as a type.
struct Defaults;
impl ConstSettings for Defaults {
    const SETTINGS: BreakerSettings = BreakerSettings::defaults("fixed");
}

/// The defaults with the rules they leave off turned on: the recovery ramp and an absolute
/// slow-call threshold.
struct Ramped;
impl ConstSettings for Ramped {
    const SETTINGS: BreakerSettings = match BreakerSettings::builder("ramped")
        .recovery(Some(Recovery::over(0.25)))
        .slow_threshold(Some(Duration::from_millis(300)))
        .build()
    {
        Ok(s) => s,
        Err(_) => panic!("invalid breaker settings"),
    };
}

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

#[test]
fn a_full_breaker_over_static_settings_stays_under_a_kibibyte() {
    // Trip window, error baseline and latency histogram included.
    let size = core::mem::size_of::<Breaker<&'static BreakerSettings>>();
    assert!(size < 1024, "{size} bytes");
    let b = Breaker::from_static(&DEFAULTS);
    assert_eq!(b.name(), &"full");
}

#[test]
fn a_fixed_breaker_keeps_no_settings_in_memory() {
    let fixed = core::mem::size_of::<Breaker<Fixed<Defaults>>>();
    let by_reference = core::mem::size_of::<Breaker<&'static BreakerSettings>>();
    let owning = core::mem::size_of::<Breaker>();
    assert!(fixed < by_reference, "{fixed} vs {by_reference}");
    assert_eq!(
        owning - fixed,
        core::mem::size_of::<BreakerSettings>(),
        "the settings are all the difference"
    );
    assert_eq!(core::mem::size_of::<Fixed<Defaults>>(), 0);
    let b: Breaker<Fixed<Defaults>> = Breaker::fixed();
    assert_eq!(b.settings(), &Defaults::SETTINGS);
}

fn outcome(n: u8) -> Outcome {
    match n % 6 {
        0 => Outcome::Success,
        1 => Outcome::Transient,
        2 => Outcome::TimedOut,
        3 => Outcome::Permanent,
        4 => Outcome::Cancelled,
        _ => Outcome::Throttled { retry_after: None },
    }
}

/// Drives two breakers in lockstep through `ops` (acquire, an outcome for a permit in flight,
/// time moving by up to 40 s, a timeout check) and fails the case as soon as they decide
/// differently, say different things or read differently.
macro_rules! lockstep {
    ($one:expr, $other:expr, $ops:expr) => {{
        let (one, other) = ($one, $other);
        let mut now = Instant::from_secs(100);
        let mut permits: Vec<(Permit, Permit)> = Vec::new();
        for &(op, x, dt) in $ops {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            match op {
                0 => {
                    let p = one.try_acquire_with(now, None, &mut |e: Event<'_>| {
                        a.push(format!("{e:?}"));
                    });
                    let q = other.try_acquire_with(now, None, &mut |e: Event<'_>| {
                        b.push(format!("{e:?}"));
                    });
                    match (p, q) {
                        (Ok(p), Ok(q)) => permits.push((p, q)),
                        (Err(p), Err(q)) => prop_assert_eq!(p, q),
                        (p, q) => prop_assert!(false, "diverged: {:?} vs {:?}", p, q),
                    }
                }
                1 if !permits.is_empty() => {
                    let (p, q) = permits.swap_remove(usize::from(x) % permits.len());
                    one.on_outcome(now, p, outcome(x), &mut |e| a.push(format!("{e:?}")));
                    other.on_outcome(now, q, outcome(x), &mut |e| b.push(format!("{e:?}")));
                }
                2 => now += Duration::from_millis(u64::from(dt)),
                _ => {
                    one.handle_timeout(now, &mut |e| a.push(format!("{e:?}")));
                    other.handle_timeout(now, &mut |e| b.push(format!("{e:?}")));
                }
            }
            prop_assert_eq!(a, b);
            prop_assert_eq!(one.snapshot(now), other.snapshot(now));
        }
    }};
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
        lockstep!(
            LeanBreaker::new(&RADIO).unwrap().with_seed(seed),
            Breaker::new(RADIO).with_seed(seed),
            &ops
        );
    }

    /// For any sequence, a breaker whose settings are a type and one owning the same settings
    /// decide alike and emit the same events: every default rule, and the ramp and an absolute
    /// slow-call threshold on top.
    #[test]
    fn a_fixed_breaker_decides_like_one_owning_the_same_settings(
        seed in any::<u64>(),
        ops in proptest::collection::vec((0u8..4, any::<u8>(), 0u32..40_000), 1..400),
    ) {
        lockstep!(
            Breaker::<Fixed<Defaults>>::fixed().with_seed(seed),
            Breaker::new(Defaults::SETTINGS).with_seed(seed),
            &ops
        );
        lockstep!(
            Breaker::<Fixed<Ramped>>::fixed().with_seed(seed),
            Breaker::new(Ramped::SETTINGS).with_seed(seed),
            &ops
        );
    }
}
