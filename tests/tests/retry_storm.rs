//! A retry storm: a 10 s glitch at a dependency kept at 75% of its capacity. Naive retries
//! fill its queue with work for callers who gave up, and keep it down after the glitch; no
//! retry, a retry budget, and the default policy let it come back. Every figure over seeds
//! 1-10.
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

/// Each named arm of the retry storm, run on every seed: `[seed][arm]`.
fn storm(arms: &[&str]) -> Vec<Vec<Report>> {
    let s = suite::retry_storm().unwrap();
    over_seeds(|seed| {
        arms.iter()
            .map(|name| {
                let st = s.strategies.iter().find(|st| st.name == *name).unwrap();
                run(&s, st, seed)
            })
            .collect()
    })
}

/// Seconds from a figure in ms (`None`: it never happened).
fn secs(ms: Option<f64>) -> f64 {
    ms.map_or(f64::INFINITY, |ms| ms / 1000.0)
}

#[test]
fn naive_retries_hold_the_dependency_down_after_the_glitch_and_a_budget_or_the_default_policy_do_not(
) {
    let arms = ["no-retry", "retry-x3", "retry-x3+budget", "default-policy"];
    let runs = storm(&arms);
    for (i, name) in arms.iter().enumerate() {
        let after: Vec<f64> = runs
            .iter()
            .map(|r| r[i].availability_after_trigger.unwrap())
            .collect();
        let recover: Vec<f64> = runs.iter().map(|r| secs(r[i].time_to_recover_ms)).collect();
        let back: Vec<f64> = runs
            .iter()
            .map(|r| secs(r[i].dependency_recovered_ms))
            .collect();
        println!(
            "{name}: availability over the minute after {}; every call served again after {} s; the dependency serving again after {} s",
            spread(&after),
            spread(&recover),
            spread(&back)
        );
    }
    for (seed, r) in (1..).zip(&runs) {
        let [none, naive, budget, default] = [&r[0], &r[1], &r[2], &r[3]];
        // No retry: the glitch's own failures, and back when it ends.
        assert!(
            secs(none.time_to_recover_ms) <= 2.0,
            "seed {seed}: {none:?}"
        );
        assert!(
            none.availability_after_trigger.unwrap() >= 0.99,
            "seed {seed}"
        );
        // Naive retries: the queue they built outlasts the callers' 2 s timeout, so every
        // attempt is work for a caller who gave up, each of whom retries: the dependency never
        // serves again in the run, and the minute after the glitch is lost.
        assert!(
            naive.availability_after_trigger.unwrap() <= 0.2,
            "seed {seed}: {naive:?}"
        );
        assert_eq!(naive.dependency_recovered_ms, None, "seed {seed}");
        assert_eq!(naive.time_to_recover_ms, None, "seed {seed}");
        assert!(
            naive.wasted_attempts * 2 > naive.attempts_between(40, 100),
            "seed {seed}: most of its work after the glitch is for nobody"
        );
        // Over the glitch, naive retries send every call again on every failure; a budget
        // holds the load to its bound over a 10 s fault at 25 calls/s per client: 1 + 0.1 +
        // 3/25 + 30/(25 x 10) = 1.34x (its floor and banked tokens; no success funds a retry).
        assert!(naive.load_multiplier > 2.5, "seed {seed}: {naive:?}");
        assert!(budget.load_multiplier <= 1.34, "seed {seed}: {budget:?}");
        // A budget: the dependency and every caller back within 10 s of the glitch's end.
        assert!(
            secs(budget.dependency_recovered_ms) <= 10.0,
            "seed {seed}: {budget:?}"
        );
        assert!(
            secs(budget.time_to_recover_ms) <= 10.0,
            "seed {seed}: {budget:?}"
        );
        assert!(
            budget.availability_after_trigger.unwrap() >= 0.99,
            "seed {seed}"
        );
        // The default policy: the breaker keeps the dependency idle through the glitch, so it
        // serves again within 10 s of the glitch's end; its callers get everything back only
        // once each breaker's break is over (the price the table shows).
        assert!(
            secs(default.dependency_recovered_ms) <= 10.0,
            "seed {seed}: {default:?}"
        );
        assert!(
            default.availability_after_trigger.unwrap() >= 0.75,
            "seed {seed}"
        );
        assert!(
            secs(default.time_to_recover_ms) > secs(default.dependency_recovered_ms),
            "seed {seed}"
        );
    }
}
