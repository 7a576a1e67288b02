//! Breakers whose settings are a type ([`ConstSettings`]): the same decisions as a breaker
//! owning the same settings, with none of them in memory.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::{
    Breaker, BreakerSettings, ConstSettings, Duration, Event, Fixed, Instant, Outcome, Permit,
    Recovery,
};

/// Every default rule.
struct Defaults;
impl ConstSettings for Defaults {
    const SETTINGS: BreakerSettings = BreakerSettings::defaults("fixed");
}

/// The defaults with the recovery ramp on and an absolute slow-call threshold: the rules the
/// defaults leave off.
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
    match n % 5 {
        0 | 4 => Outcome::Success,
        1 => Outcome::Transient,
        2 => Outcome::TimedOut,
        _ => Outcome::Throttled { retry_after: None },
    }
}

/// Drives a breaker with fixed settings and one owning the same settings through `ops`, and
/// checks that they decide alike and say the same.
fn agree<T: ConstSettings>(seed: u64, ops: &[(u8, u8, u32)]) -> Result<(), TestCaseError> {
    let mut fixed: Breaker<Fixed<T>> = Breaker::fixed().with_seed(seed);
    let mut owning = Breaker::new(T::SETTINGS).with_seed(seed);
    let mut now = Instant::from_secs(100);
    let mut permits: Vec<(Permit, Permit)> = Vec::new();
    for &(op, x, dt) in ops {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        match op {
            0 => {
                let f = fixed.try_acquire_with(now, None, &mut |e: Event<'_>| {
                    a.push(format!("{e:?}"));
                });
                let o = owning.try_acquire_with(now, None, &mut |e: Event<'_>| {
                    b.push(format!("{e:?}"));
                });
                match (f, o) {
                    (Ok(f), Ok(o)) => permits.push((f, o)),
                    (Err(f), Err(o)) => prop_assert_eq!(f, o),
                    (f, o) => prop_assert!(false, "diverged: {:?} vs {:?}", f, o),
                }
            }
            1 if !permits.is_empty() => {
                let (f, o) = permits.swap_remove(usize::from(x) % permits.len());
                fixed.on_outcome(now, f, outcome(x), &mut |e| a.push(format!("{e:?}")));
                owning.on_outcome(now, o, outcome(x), &mut |e| b.push(format!("{e:?}")));
            }
            // Time moves by up to 40 s, and attempts in flight gather latency.
            2 => now += Duration::from_millis(u64::from(dt)),
            _ => {
                fixed.handle_timeout(now, &mut |e| a.push(format!("{e:?}")));
                owning.handle_timeout(now, &mut |e| b.push(format!("{e:?}")));
            }
        }
        prop_assert_eq!(a, b);
        prop_assert_eq!(fixed.snapshot(now), owning.snapshot(now));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 4 } else { 256 }, ..ProptestConfig::default() })]

    #[test]
    fn a_fixed_breaker_decides_like_one_owning_the_same_settings(
        seed in any::<u64>(),
        ops in proptest::collection::vec((0u8..4, any::<u8>(), 0u32..40_000), 1..400),
    ) {
        agree::<Defaults>(seed, &ops)?;
        agree::<Ramped>(seed, &ops)?;
    }
}
