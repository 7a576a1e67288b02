//! The adaptive concurrency-limit rule recommended as the default (the Vegas-style prototype
//! of `limiters`, with its defaults), held to what a default that needs no tuning must do, on
//! every seed 1-10 (`storm --compare-limiters` prints the whole comparison).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

mod support;

use stormguard_tests::limiters::Rule;
use stormguard_tests::{compare, run, suite, Report};
use support::over_seeds;

#[test]
fn on_a_capacity_that_halves_the_vegas_rule_opens_no_breaker_keeps_the_p99_under_2x_and_serves_what_a_bulkhead_does(
) {
    let s = suite::capacity_halves().unwrap();
    let base = s
        .strategies
        .iter()
        .find(|st| st.name == "retry-x3+breaker+budget")
        .unwrap();
    let vegas = compare::limited(base, "vegas", Rule::vegas());
    // The bulkhead sized for the full capacity: the best fixed one within the latency goal on
    // most seeds (where it is not, its p99 just past 2x, the best within is a smaller one,
    // which serves less).
    let full = compare::bulkheaded(base, 20).unwrap();
    let runs: Vec<(Report, Report)> =
        over_seeds(|seed| (run(&s, &vegas, seed), run(&s, &full, seed)));
    for (seed, (r, best)) in (1..).zip(&runs) {
        let p99 = compare::p99_ratio(r).unwrap();
        println!(
            "seed {seed}: served {} ({} {}), p99 {p99:.2}x healthy, {} opens",
            r.succeeded, best.strategy, best.succeeded, r.breaker_opens
        );
        // The queue past the lost half never reaches the breaker's rules ...
        assert_eq!(r.breaker_opens, 0, "seed {seed}");
        // ... nor doubles the dependency's latency ...
        assert!(p99 <= 2.0, "seed {seed}: {p99}");
        // ... and it serves within a thousandth of what the bulkhead of 20 serves (more on
        // some seeds: not on all, so "at least as many as the best fixed bulkhead" is not met;
        // that bulkhead holds a queue of exactly 20, at the latency goal's edge, where a rule
        // reading a noisy latency must hold a shorter one).
        let gap = best.succeeded as f64 - r.succeeded as f64;
        assert!(
            gap <= 0.001 * best.succeeded as f64,
            "seed {seed}: {gap} short"
        );
    }
}

#[test]
fn on_a_capacity_that_doubles_the_vegas_rule_grows_to_serve_at_least_1_8x_a_half_sized_bulkhead() {
    let s = compare::capacity_doubles().unwrap();
    let base = &s.strategies[0];
    let vegas = compare::limited(base, "vegas", Rule::vegas());
    let half = compare::bulkheaded(base, 10).unwrap();
    let runs: Vec<(Report, Report)> =
        over_seeds(|seed| (run(&s, &vegas, seed), run(&s, &half, seed)));
    for (seed, (r, h)) in (1..).zip(&runs) {
        let times = compare::served_doubled(r) as f64 / compare::served_doubled(h) as f64;
        println!("seed {seed}: {times:.2}x the half-sized bulkhead once the capacity doubled");
        assert!(times >= 1.8, "seed {seed}: {times}");
        assert_eq!(r.breaker_opens, 0, "seed {seed}");
    }
}
