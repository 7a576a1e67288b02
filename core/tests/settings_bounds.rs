//! The breaker settings' upper bounds and the recovery ramp's bounds, each a typed error that
//! names the field and the bound (the lower bounds are tested beside the settings).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    breaker::BreakerSettingsBuilder, breaker::MAX_COUNT, time::MAX_BREAK, Bound, BreakerSettings,
    Duration, Field, Recovery, SettingsError,
};

mod support;
use support::{ms, secs};

fn b() -> BreakerSettingsBuilder {
    BreakerSettings::builder("x")
}

#[track_caller]
fn rejects(builder: BreakerSettingsBuilder, field: Field, bound: Bound) {
    assert_eq!(builder.build(), Err(SettingsError { field, bound }));
}

#[track_caller]
fn accepts(builder: BreakerSettingsBuilder) {
    if let Err(e) = builder.build() {
        panic!("rejected: {e}");
    }
}

/// Just past the longest break: a week and a nanosecond.
fn past_max() -> Duration {
    MAX_BREAK + Duration::from_nanos(1)
}

#[test]
fn probe_successes_above_the_largest_count_is_a_typed_error() {
    assert_eq!(MAX_COUNT, 1000);
    rejects(
        b().probe_successes(1001),
        Field::ProbeSuccesses,
        Bound::AtMost(1000),
    );
    rejects(
        b().probe_successes(u32::MAX),
        Field::ProbeSuccesses,
        Bound::AtMost(1000),
    );
    accepts(b().probe_successes(1000));
    assert_eq!(
        b().probe_successes(1001).build().unwrap_err().to_string(),
        "`probe_successes` must be at most 1000"
    );
}

#[test]
fn windows_and_breaks_longer_than_the_longest_break_are_typed_errors() {
    assert_eq!(MAX_BREAK, secs(7 * 24 * 3600));
    let at_most = Bound::AtMostDuration(MAX_BREAK);
    rejects(b().trip_window(past_max()), Field::TripWindow, at_most);
    rejects(b().trip_window(Duration::MAX), Field::TripWindow, at_most);
    accepts(b().trip_window(MAX_BREAK));

    rejects(
        b().baseline_window(Some(past_max())),
        Field::BaselineWindow,
        at_most,
    );
    rejects(
        b().baseline_window(Some(Duration::MAX)),
        Field::BaselineWindow,
        at_most,
    );
    accepts(b().baseline_window(Some(MAX_BREAK)));

    // The first break past the maximum is named as such (not as the maximum below it).
    rejects(
        b().break_duration(past_max()).max_break(past_max()),
        Field::BreakDuration,
        at_most,
    );
    rejects(
        b().break_duration(past_max()),
        Field::BreakDuration,
        at_most,
    );
    accepts(b().break_duration(MAX_BREAK).max_break(MAX_BREAK));
    assert_eq!(
        b().trip_window(past_max())
            .build()
            .unwrap_err()
            .field
            .as_str(),
        "trip_window"
    );
}

#[test]
fn a_first_break_under_a_millisecond_is_a_typed_error() {
    rejects(
        b().break_duration(Duration::from_micros(999)),
        Field::BreakDuration,
        Bound::AtLeastDuration(ms(1)),
    );
    accepts(b().break_duration(ms(1)).max_break(ms(1)));
}

#[test]
fn a_recovery_ramp_shorter_than_its_floor_or_longer_than_the_longest_break_is_a_typed_error() {
    let ramp = |min, max| b().recovery(Some(Recovery::over(0.25).clamped(min, max)));
    let floor = Bound::AtLeastDuration(ms(1));
    rejects(ramp(Duration::ZERO, secs(30)), Field::RecoveryMin, floor);
    rejects(
        ramp(Duration::from_micros(999), secs(30)),
        Field::RecoveryMin,
        floor,
    );
    accepts(ramp(ms(1), secs(30)));

    let ceiling = Bound::AtMostDuration(MAX_BREAK);
    rejects(ramp(secs(1), past_max()), Field::RecoveryMax, ceiling);
    rejects(ramp(secs(1), Duration::MAX), Field::RecoveryMax, ceiling);
    accepts(ramp(secs(1), MAX_BREAK));
}

#[test]
fn a_recovery_fraction_of_zero_or_not_a_number_is_a_typed_error() {
    let with = |r: Recovery| b().recovery(Some(r));
    for fraction in [0.0, -0.25, f64::NAN, f64::INFINITY, 1.000_01] {
        rejects(
            with(Recovery::over(fraction)),
            Field::RecoveryFraction,
            Bound::ZeroToOne,
        );
    }
    for ppm in [0, 1_000_001, u32::MAX] {
        rejects(
            with(Recovery::over_ppm(ppm)),
            Field::RecoveryFraction,
            Bound::ZeroToOne,
        );
    }
    // The edges of (0, 1] are valid.
    accepts(with(Recovery::over_ppm(1)));
    accepts(with(Recovery::over(1.0)));
    assert_eq!(
        with(Recovery::over(f64::NAN))
            .build()
            .unwrap_err()
            .to_string(),
        "`recovery_fraction` must be above 0 and at most 1"
    );
}
