//! Hedging in the simulator: the bottom layer launches a hedge beside a slow attempt as the
//! core's hedged pair says, and the dependency serves both.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

use stormguard_tests::{run, suite, Report};

fn by_name<'a>(reports: &'a [Report], name: &str) -> &'a Report {
    reports.iter().find(|r| r.strategy == name).unwrap()
}

#[test]
fn hedging_at_the_learned_p95_cuts_a_long_tail_for_a_few_more_attempts() {
    let s = suite::long_tail().unwrap();
    let reports: Vec<Report> = s.strategies.iter().map(|st| run(&s, st, s.seed)).collect();
    let plain = by_name(&reports, "retry-x3+breaker+budget");
    let hedged = by_name(&reports, "retry-x3+breaker+budget+hedging");
    for r in [plain, hedged] {
        println!(
            "{}: p99 {:.0} ms, load {:.3}x, hedges {}, availability {:.4}",
            r.strategy, r.latency_p99_ms, r.load_multiplier, r.hedges, r.availability
        );
    }
    assert_eq!(plain.hedges, 0);
    // Each hedge is an attempt at the dependency: the load rises by about the hedged share,
    // which the learned p95 keeps near one call in 20 (a little more: the calls the ceiling
    // cut are not in the latencies learned).
    let share = hedged.hedges as f64 / hedged.calls as f64;
    assert!((0.03..=0.07).contains(&share), "hedged share {share:.4}");
    assert!(hedged.load_multiplier > plain.load_multiplier);
    assert!(hedged.load_multiplier <= 1.1, "{}", hedged.load_multiplier);
    // The slowest calls no longer wait out the tail alone: p99 cut by at least a third.
    assert!(hedged.latency_p99_ms <= plain.latency_p99_ms * 2.0 / 3.0);
    // And the hedges do not spend what the retries after a timeout need.
    assert!(hedged.availability >= 0.999, "{}", hedged.availability);
}
