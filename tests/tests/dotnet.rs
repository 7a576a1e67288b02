//! The .NET original's documented simulation example, run on our core: our report beside
//! theirs, with the differences in setup named. Our figures are asserted against our own
//! arithmetic; theirs are printed, not asserted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

use stormguard_tests::{run, suite};

#[test]
fn dotnet_simulation_example_beside_the_originals_report() {
    let s = suite::dotnet_example().unwrap();
    let reports: Vec<_> = s.strategies.iter().map(|st| run(&s, st, s.seed)).collect();
    println!("the .NET original: load 1.016x, amplification 1.104x, availability 0.9026, p99 434 ms, 0 breaker opens");
    for r in &reports {
        println!(
            "ours, {}: load {:.3}x, amplification {:.3}x, availability {:.4}, p99 {:.0} ms, {} breaker opens",
            r.strategy, r.load_multiplier_run, r.amplification, r.availability, r.latency_p99_ms, r.breaker_opens
        );
    }
    println!("{}", suite::commentary(&s, &reports).join("\n"));
    let configured = &reports[0];
    // No breaker is configured: nothing can open.
    assert_eq!(configured.breaker_opens, 0);
    // With a 10 s attempt timeout, an 8x brownout of a 200 ms p99 (1.6 s) times nothing out and
    // the dependency fails nothing: every call succeeds on its first attempt (a 10x p99 outlier
    // is 2 s): availability 1, load 1.
    assert!(configured.availability > 0.999);
    assert!(configured.load_multiplier_run < 1.001);
    // With the 306 ms ceiling, brownout attempts time out (P(8 x latency > 306 ms) = P(z >
    // 0.655) = 26%), and the budget bounds the retries: 0.1 per success + 3/s + 30 over 5 min
    // at 500 calls/s: load <= 1 + 0.1 + (3 x 330 + 30) / (500 x 300) over the run.
    let ceiling = &reports[1];
    assert!(ceiling.load_multiplier_run <= 1.1 + (3.0 * 330.0 + 30.0) / (500.0 * 300.0));
    assert!(ceiling.availability < configured.availability);
    assert_eq!(ceiling.breaker_opens, 0);
    // With a breaker, its measured ceiling (3x the learned p95, about 306 ms) fails a quarter of
    // the brownout's attempts: at 500 calls/s five in a row (0.26^5 = 0.12% of outcomes) come
    // within a few seconds, and the consecutive rule trips first. Slow or failing probes keep it
    // open through the brownout: the dependency sees almost nothing, the callers are refused.
    let breaker = &reports[2];
    assert!(breaker.opens_by_reason.contains_key("consecutive_failures"));
    assert!(breaker.time_to_trip_ms.expect("tripped") < 5_000.0);
    assert!(breaker.load_multiplier < 0.1);
    assert!(breaker.availability < ceiling.availability);
}
