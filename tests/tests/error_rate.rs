//! Error rates: the relative rule trips on a rise against the learned rate, and never on a
//! stationary one (runs of consecutive failures, which the consecutive rule trips on by design,
//! are counted against their expected number).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

use stormguard_core::{BreakerSettings, CallSettings, Duration};
use stormguard_tests::{
    run, scenario::DEPENDENCY, suite, Arrivals, Dependency, Impairment, Layer, Report, Scenario,
    Strategy,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn breaker(consecutive: u32) -> Strategy {
    Strategy::single(
        "breaker",
        Layer {
            call: CallSettings::builder().max_attempts(1).build().unwrap(),
            breaker: Some(
                BreakerSettings::builder_named(DEPENDENCY)
                    .consecutive_failures(consecutive)
                    .build()
                    .unwrap(),
            ),
            budget: None,
        },
    )
}

/// Three clients at 200 calls per second; the rate steps from `base` to `spike` 310 s in, after
/// a full 300 s baseline has been learned.
fn step(base: f64, spike: f64) -> Scenario {
    Scenario {
        name: "step".into(),
        description: String::new(),
        seed: 5,
        duration: secs(360),
        clients: 3,
        arrivals: Arrivals::Poisson { rate: 200.0 },
        dependency: Dependency::healthy(Duration::from_millis(20), Duration::from_millis(60))
            .failing(base)
            .with(Impairment::ErrorSpike {
                at: secs(310),
                lasting: None,
                rate: spike,
            }),
        strategies: Vec::new(),
    }
}

#[test]
fn an_error_rate_stepping_from_5_to_30_percent_trips_within_the_window_arithmetic() {
    let s = step(0.05, 0.30);
    // The relative rule trips when the window's rate passes 5x the learned 5% = 25%. With the
    // window a share s full of the spike: 0.30 s + 0.05 (1 - s) > 0.25 once s > 0.8: 24 s of a
    // 30 s window, plus one 3 s bucket for the window's sliding: 27 s.
    let relative_only = run(&s, &breaker(1000), s.seed);
    let first = relative_only.time_to_trip_ms.expect("tripped");
    let last = relative_only
        .time_to_trip_last_ms
        .expect("every breaker tripped");
    println!("5% -> 30%, relative rule only: first trip {first:.0} ms, last {last:.0} ms (arithmetic: 27 s)");
    // Every client, not just the first. Each client's breaker learns from its own 60,000
    // outcomes (the learned 5% is +-0.09 points, +-0.45 once multiplied by 5 into the threshold)
    // and judges a window of 6,000 (+-0.57 points). Each second of spike in the window raises
    // its rate by 25/30 = 0.83 points, so that noise moves a trip by about a second. Measured:
    // every client trips by 23.0 s, 4 s inside the bound.
    assert!(first <= 27_000.0);
    assert!(last <= 27_000.0);
    assert!(relative_only.opens_by_reason.contains_key("failure_rate"));
    // With the default breaker, 5 consecutive failures (p^5 = 0.24% per outcome at 30%) may
    // come first: any rule, no later than the relative one allows.
    let default = run(&s, &breaker(5), s.seed);
    let last = default.time_to_trip_last_ms.expect("every breaker tripped");
    println!("5% -> 30%, default breaker: last trip {last:.0} ms");
    assert!(last <= 27_000.0);
}

#[test]
fn a_dependency_at_0_02_percent_stepping_to_10_percent_trips() {
    let s = step(0.0002, 0.10);
    // 5x the learned 0.02% is 0.1%, below the 5% floor, so the floor decides: the window's rate
    // reaches 5% once 0.10 s + 0.0002 (1 - s) >= 0.05: s >= 0.499, 15 s of the window, plus a
    // bucket: 18 s.
    let r = run(&s, &breaker(1000), s.seed);
    let last = r.time_to_trip_last_ms.expect("every breaker tripped");
    println!("0.02% -> 10%: last trip {last:.0} ms (arithmetic: 18 s)");
    assert!(last <= 18_000.0);
    assert_eq!(r.false_trips, 0);
}

fn stationary(p: f64) -> Report {
    let s = suite::stationary(
        "stationary",
        "",
        Dependency::healthy(Duration::from_millis(20), Duration::from_millis(60)).failing(p),
    )
    .unwrap();
    run(&s, &s.strategies[0], s.seed)
}

/// Consecutive-failure trips against their expected number: runs of 5 failures among the
/// outcomes counted while closed form a renewal process, E = n (1 - p) p^5 / (1 - p^5), roughly
/// Poisson: within 5 standard deviations (+2 for tiny E).
fn check_consecutive(r: &Report, p: f64) {
    let expected = suite::expected_consecutive_trips(r.closed_outcomes, p, 5);
    let observed = r.false_trips_consecutive as f64;
    println!(
        "an hour at {:.0}%: {} relative trips, {} consecutive-failure trips ({expected:.1} expected from {} closed outcomes)",
        p * 100.0,
        r.false_trips_failure_rate + r.false_trips_slow,
        r.false_trips_consecutive,
        r.closed_outcomes
    );
    assert!((observed - expected).abs() <= 5.0 * expected.sqrt() + 2.0);
}

#[test]
fn an_hour_at_a_stationary_5_percent_makes_no_relative_trips() {
    let r = stationary(0.05);
    // 5x the learned 5% is 25%: a 30 s window of ~1500 outcomes at 5% (sd 0.56 points) never
    // gets there.
    assert_eq!(r.false_trips_failure_rate, 0);
    assert_eq!(r.false_trips_slow, 0);
    check_consecutive(&r, 0.05);
}

#[test]
fn an_hour_at_a_stationary_20_percent_makes_no_relative_trips() {
    let r = stationary(0.20);
    // 5x the learned 20% is 100%: unreachable.
    assert_eq!(r.false_trips_failure_rate, 0);
    assert_eq!(r.false_trips_slow, 0);
    // About 45 runs of 5 failures an hour at 50 calls/s: those trip the consecutive rule.
    assert!(r.false_trips_consecutive > 0);
    check_consecutive(&r, 0.20);
}
