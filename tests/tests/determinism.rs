//! The same seed gives the same figures, byte for byte.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::Duration;
use stormguard_tests::{chart, run, suite, Report, Scenario};

fn json(s: &Scenario, seed: u64) -> String {
    let reports: Vec<Report> = s.strategies.iter().map(|st| run(s, st, seed)).collect();
    serde_json::to_string(&reports).unwrap()
}

#[test]
fn the_same_seed_gives_byte_identical_json() {
    let mut s = suite::outage().unwrap();
    s.clients = 4;
    s.duration = Duration::from_secs(100);
    let a = json(&s, 7);
    let b = json(&s, 7);
    assert_eq!(a, b);
    assert_ne!(a, json(&s, 8), "another seed is another run");
}

#[test]
fn the_same_seed_gives_the_same_per_second_series() {
    let mut s = suite::cold_recovery().unwrap();
    s.duration = Duration::from_secs(80);
    for st in &s.strategies {
        let a = run(&s, st, 11);
        let b = run(&s, st, 11);
        assert_eq!(a, b);
    }
}

/// The chart in the README is the default suite's, drawn from today's figures: a change to the
/// core or the simulator that moves any second of any line shows up here. It also pins the
/// figures across machines (the chart's coordinates are the per-second load of every run).
/// Regenerate it with `cargo run --release --bin storm -- --svg tests/docs/storm-load.svg`.
#[test]
fn the_readme_chart_is_the_default_suite_drawn_from_todays_figures() {
    let scenarios: Vec<Scenario> = suite::default_suite()
        .unwrap()
        .into_iter()
        .filter(|s| s.duration.as_secs() <= 600)
        .collect();
    let reports: Vec<Vec<Report>> = scenarios
        .iter()
        .map(|s| s.strategies.iter().map(|st| run(s, st, s.seed)).collect())
        .collect();
    let drawn = chart::svg(&chart::charted(&scenarios, &reports)).unwrap();
    let committed = include_str!("../docs/storm-load.svg");
    assert!(
        drawn == committed,
        "tests/docs/storm-load.svg is stale: regenerate it with \
         `cargo run --release --bin storm -- --svg tests/docs/storm-load.svg`"
    );
}
