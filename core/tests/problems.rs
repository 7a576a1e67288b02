//! Every problem at once: a builder's `problems()` lists every setting at fault with its bound,
//! in the order `build()` checks them (so `build()`'s single error is the list's first), and a
//! full list counts what it could not hold. Durations written for people parse exactly.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::{
    call::Backoff, call::CallSettings, limits::BudgetSettings, Bound, BreakerSettings, Duration,
    DurationParseError, FailureRate, Field, Multiple, Problems, Recovery, SettingsError,
    PROBLEMS_CAPACITY,
};

fn fields(p: &Problems) -> Vec<(Field, Bound)> {
    p.iter().map(|e| (e.field, e.bound)).collect()
}

#[test]
fn a_breaker_with_several_bad_fields_reports_each_with_its_bound() {
    let b = BreakerSettings::builder("payments")
        .consecutive_failures(0)
        .failure_rate(Some(FailureRate::above(5).minimum_failures(0)))
        .minimum_calls(0)
        .half_open_probes(40)
        .noise_bound(1);
    let p = b.problems();
    assert_eq!(
        fields(&p),
        [
            (Field::ConsecutiveFailures, Bound::AtLeast(1)),
            (Field::MinimumFailures, Bound::AtLeast(1)),
            (Field::MinimumCalls, Bound::AtLeast(1)),
            (Field::HalfOpenProbes, Bound::AtMost(31)),
            (Field::NoiseBound, Bound::AtLeast(2)),
        ]
    );
    assert_eq!(p.more(), 0);
    assert_eq!(b.build(), Err(p.first().unwrap()));
    assert_eq!(b.build_all(), Err(p));
}

#[test]
fn valid_settings_have_no_problem_and_build_alike_both_ways() {
    let b = BreakerSettings::builder("db").consecutive_failures(3);
    assert!(b.problems().is_empty());
    assert_eq!(b.build_all().ok(), b.build().ok());
    assert!(BudgetSettings::builder("db").problems().is_empty());
    assert!(CallSettings::builder().problems().is_empty());
    assert!(Backoff::builder().problems().is_empty());
}

#[test]
fn a_field_out_of_two_bounds_is_reported_once() {
    // A max break above the longest break and below the first break: only the first bound
    // the break itself breaks is named, once.
    let p = BreakerSettings::builder("x")
        .break_duration(Duration::ZERO)
        .max_break(Duration::ZERO)
        .problems();
    assert_eq!(
        fields(&p),
        [(
            Field::BreakDuration,
            Bound::AtLeastDuration(Duration::from_millis(1))
        )]
    );
}

#[test]
fn a_full_list_counts_the_problems_it_could_not_hold() {
    let mut p = Problems::new();
    for _ in 0..PROBLEMS_CAPACITY + 3 {
        p.push(SettingsError {
            field: Field::Rate,
            bound: Bound::AtLeast(1),
        });
    }
    assert_eq!(p.len(), PROBLEMS_CAPACITY);
    assert_eq!(p.more(), 3);
    assert!(p.to_string().ends_with("; and 3 more"));
    // A breaker with more faults than the list holds says so.
    let p = BreakerSettings::builder(" ")
        .consecutive_failures(0)
        .failure_rate(Some(
            FailureRate::above(0)
                .floor_ppm(0)
                .minimum_failures(0)
                .baseline_outcomes(0),
        ))
        .failure_ratio(stormguard_core::Ratio::from_ppm(0))
        .slow_ratio(stormguard_core::Ratio::ZERO)
        .minimum_calls(0)
        .half_open_probes(0)
        .probe_successes(0)
        .recovery(Some(Recovery::over_ppm(0)))
        .problems();
    assert_eq!(p.len(), PROBLEMS_CAPACITY);
    assert_eq!(p.more(), 4, "{p}");
}

#[test]
fn budget_backoff_and_call_settings_report_every_field() {
    let p = BudgetSettings::builder("b")
        .fraction(2.0)
        .floor_per_second(-1.0)
        .problems();
    assert_eq!(
        fields(&p),
        [
            (Field::RetryFraction, Bound::AtMost(1)),
            (Field::FloorRate, Bound::AtLeast(0)),
        ]
    );
    let p = Backoff::builder()
        .factor(Multiple::from_milli(500))
        .base(Duration::from_secs(60))
        .problems();
    assert_eq!(
        fields(&p),
        [
            (Field::BackoffFactor, Bound::AtLeastOne),
            (Field::BackoffCap, Bound::NotBelow(Field::BackoffBase)),
        ]
    );
    let p = CallSettings::builder()
        .max_attempts(0)
        .deadline(Some(Duration::ZERO))
        .attempt_timeout(Some(Duration::ZERO))
        .ceiling_floor(Duration::ZERO)
        .problems();
    let got: Vec<Field> = p.iter().map(|e| e.field).collect();
    assert_eq!(
        got,
        [
            Field::MaxAttempts,
            Field::Deadline,
            Field::AttemptTimeout,
            Field::CeilingFloor
        ]
    );
}

#[test]
fn the_first_problem_is_what_const_construction_reports() {
    const ERR: Result<BreakerSettings, SettingsError> = BreakerSettings::builder("x")
        .probe_successes(0)
        .half_open_probes(0)
        .build();
    assert_eq!(
        ERR.map(|_| ()),
        Err(SettingsError {
            field: Field::HalfOpenProbes,
            bound: Bound::AtLeast(1)
        })
    );
}

#[test]
fn durations_written_for_people_parse_exactly() {
    let ok = [
        ("250ms", Duration::from_millis(250)),
        ("30s", Duration::from_secs(30)),
        ("1m", Duration::from_secs(60)),
        ("1.5s", Duration::from_millis(1500)),
        ("0.25s", Duration::from_millis(250)),
        ("2h", Duration::from_secs(7200)),
        ("1d", Duration::from_secs(86_400)),
        ("1m30s", Duration::from_secs(90)),
        ("15us", Duration::from_micros(15)),
        ("15µs", Duration::from_micros(15)),
        ("7ns", Duration::from_nanos(7)),
        (" 3s ", Duration::from_secs(3)),
        ("0s", Duration::ZERO),
        ("1.0000000009s", Duration::from_nanos(1_000_000_000)),
        ("18446744073709551615ns", Duration::MAX),
    ];
    for (text, want) in ok {
        assert_eq!(Duration::parse(text), Ok(want), "{text}");
    }
    let bad = [
        ("", DurationParseError::Empty),
        ("250", DurationParseError::MissingUnit),
        ("1.5", DurationParseError::MissingUnit),
        ("3 s", DurationParseError::UnknownUnit),
        ("3sec", DurationParseError::UnknownUnit),
        ("-3s", DurationParseError::BadNumber),
        ("s", DurationParseError::BadNumber),
        ("1.2.3s", DurationParseError::BadNumber),
        (".s", DurationParseError::BadNumber),
        ("18446744073709551616ns", DurationParseError::TooLong),
        ("600000d", DurationParseError::TooLong),
        (
            "99999999999999999999999999999999999999999h",
            DurationParseError::TooLong,
        ),
    ];
    for (text, want) in bad {
        assert_eq!(Duration::parse(text), Err(want), "{text}");
    }
}

proptest! {
    #[test]
    fn parsing_any_text_never_panics(text in any::<String>()) {
        let _ = Duration::parse(&text);
    }

    #[test]
    fn whole_milliseconds_round_trip(ms in 0u64..=u64::MAX / 1_000_000) {
        prop_assert_eq!(Duration::parse(&format!("{ms}ms")), Ok(Duration::from_millis(ms)));
    }

    #[test]
    fn unit_runs_add_up(m in 0u64..10_000, s in 0u64..10_000, ms in 0u64..10_000) {
        let want = Duration::from_millis(m * 60_000 + s * 1000 + ms);
        prop_assert_eq!(Duration::parse(&format!("{m}m{s}s{ms}ms")), Ok(want));
    }
}
