//! A hang: one of two dependencies answers only after 30 s for a minute, sharing each caller's
//! pool of concurrent calls with a healthy one. Every figure over seeds 1-10.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

mod support;

use stormguard_tests::{run, suite, Report};
use support::{over_seeds, spread};

#[test]
fn without_a_breaker_the_pool_fills_and_the_healthy_dependency_fails_with_the_default_policy_it_is_served(
) {
    let s = suite::hang().unwrap();
    let arms = ["no-retry", "retry-x3", "retry-x3+budget", "default-policy"];
    let runs: Vec<Vec<Report>> = over_seeds(|seed| {
        arms.iter()
            .map(|name| {
                let st = s.strategies.iter().find(|st| st.name == *name).unwrap();
                run(&s, st, seed)
            })
            .collect()
    });
    for (i, name) in arms.iter().enumerate() {
        let healthy: Vec<f64> = runs
            .iter()
            .map(|r| r[i].healthy_dependency_availability.unwrap())
            .collect();
        println!(
            "{name}: the healthy dependency's calls served through the hang {}",
            spread(&healthy)
        );
    }
    for (seed, r) in (1..).zip(&runs) {
        for without in &r[..3] {
            // Each call to the hung dependency holds its slot until its attempts time out
            // (10 s each): the pool fills, and calls to the healthy one find it full.
            let healthy = without.healthy_dependency_availability.unwrap();
            assert!(
                healthy <= 0.5,
                "seed {seed}: {}: {healthy}",
                without.strategy
            );
            assert!(without.saturated > 0, "seed {seed}");
        }
        // The default policy cuts a hung attempt at 3x the learned p95 and its breaker opens
        // within a few of them: the pool never fills.
        let default = &r[3];
        let healthy = default.healthy_dependency_availability.unwrap();
        assert!(healthy >= 0.99, "seed {seed}: {healthy}");
        assert_eq!(default.saturated, 0, "seed {seed}");
    }
}
