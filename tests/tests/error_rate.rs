//! Error rates: the relative rule trips on a rise against the learned rate, and nothing trips on
//! a stationary one: once the normal rate is learned, a run of failures trips only when its
//! chance under that rate is negligible, and a recovery ramp rides out the failures it explains.
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

mod support;
use support::secs;

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
            limiter: None,
            sliding: None,
            bulkhead: None,
            adaptive: None,
            limit_rule: None,
            retries_when_nested: true,
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
        healthy: None,
        pool: None,
        warnings: Vec::new(),
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

/// An hour of a dependency failing at a stationary rate `p` trips nothing: once the breaker has
/// learned `p` (from its first 100 outcomes, two seconds at 50 calls/s), a run of failures trips
/// only when its chance under `p` is at most 1e-8 (12 in a row at 20%, 7 at 5%), and the
/// relative rule's trip point is 5 x `p`, capped at 100%. Without the learned count, 5 in a row
/// would trip the breaker at 20% about 45 times an hour.
fn check_no_trips(r: &Report, p: f64) {
    let run = suite::noise_run(p);
    let expected = suite::expected_consecutive_trips(r.closed_outcomes, p, run);
    let cold = suite::expected_consecutive_trips(r.closed_outcomes, p, 5);
    println!(
        "an hour at {:.0}%: {} relative trips, {} consecutive-failure trips (a run of {run}: {expected:.4} expected; 5 in a row: {cold:.1}), availability {:.4}",
        p * 100.0,
        r.false_trips_failure_rate + r.false_trips_slow,
        r.false_trips_consecutive,
        r.availability,
    );
    assert_eq!(
        r.breaker_opens, 0,
        "no rule trips on a stationary dependency"
    );
    assert_eq!(r.false_trips, 0);
    // No breaker refuses a call, so availability is the dependency's own, less its noise:
    // 1 - p within three standard deviations of a Bernoulli mean over the run's calls.
    let sd = (p * (1.0 - p) / r.calls as f64).sqrt();
    assert!(r.availability >= 1.0 - p - 3.0 * sd, "{}", r.availability);
}

#[test]
fn an_hour_at_a_stationary_5_percent_trips_nothing() {
    let r = stationary(0.05);
    assert_eq!(suite::noise_run(0.05), 7);
    check_no_trips(&r, 0.05);
}

#[test]
fn an_hour_at_a_stationary_20_percent_trips_nothing_and_serves_what_the_dependency_does() {
    let r = stationary(0.20);
    assert_eq!(suite::noise_run(0.20), 12);
    check_no_trips(&r, 0.20);
    // The figure the breaker is held to: a breaker must not cost a flaky caller availability.
    assert!(r.availability >= 0.795, "{}", r.availability);
}

#[test]
fn a_ramp_recovers_from_an_error_spike_over_a_5_percent_baseline() {
    // The default suite's error spike (5% -> 30% for 60 s) with and without the ramp, over six
    // seeds. Before the ramp judged its failures against the learned 5%, one failure re-opened
    // it: availability 0.17 against 0.78, and 23 trips after the spike.
    let mut ratios = Vec::new();
    let mut recovered = 0;
    for seed in 1..=6 {
        let s = suite::error_spike().unwrap();
        let arm = |name: &str| {
            let strategy = s.strategies.iter().find(|st| st.name == name).unwrap();
            run(&s, strategy, seed)
        };
        let cliff = arm("retry-x3+breaker+budget");
        let ramp = arm("retry-x3+breaker+budget+ramp");
        let ratio = ramp.availability / cliff.availability;
        println!(
            "seed {seed}: availability {:.4} with the ramp, {:.4} without ({ratio:.3}); {} trips outside the spike; recovered in {:?} ms",
            ramp.availability, cliff.availability, ramp.false_trips, ramp.time_to_recover_ms
        );
        assert_eq!(
            ramp.false_trips, 0,
            "seed {seed}: no trip outside the spike"
        );
        assert!(
            ramp.opens_by_reason.contains_key("failure_rate"),
            "seed {seed}"
        );
        // The ramp's price is its shedding while it climbs, and the longer breaks of a breaker
        // that re-opened during the spike instead of closing: a few percent, not a collapse.
        assert!(ratio >= 0.9, "seed {seed}: {ratio:.3}");
        ratios.push(ratio);
        recovered += usize::from(ramp.time_to_recover_ms.is_some());
    }
    ratios.sort_by(f64::total_cmp);
    let median = (ratios[2] + ratios[3]) / 2.0;
    println!(
        "median ratio over six seeds: {median:.3}; recovered within the run: {recovered} of 6"
    );
    // Recovered: a whole second in which every call succeeded, before the run ends, on every
    // seed. (While a probe failing at the normal 5% still re-opened the breaker, seed 1 ended
    // the run with a client serving a doubled break.)
    assert_eq!(recovered, 6, "recovered on {recovered} of 6 seeds");
}
