//! A tight polling loop against an open breaker cannot spin: every refusal takes the guarded
//! pause.
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
fn a_tight_polling_loop_against_an_open_breaker_makes_at_most_about_ten_calls_per_second() {
    // One client calls again the moment each call returns, through a 60 s outage (10 s to 70 s).
    let s = suite::polling().unwrap();
    for st in &s.strategies {
        let r = run(&s, st, s.seed);
        // Once open (within the outage's first second), every call is refused after the 100 ms
        // guarded pause, so consecutive starts are at least 100 ms apart: at most 10 starts in
        // any second. The exceptions are the half-open probes, one per break (7.5 s or more),
        // each failing in 1 ms: at most one more in a second.
        let seconds = r.calls_per_second.iter().skip(11).take(59);
        let most = seconds.clone().copied().max().unwrap();
        let total: u32 = seconds.copied().sum();
        println!(
            "{}: at most {most} calls in a second of the outage, {:.2} per second on average",
            st.name,
            f64::from(total) / 59.0
        );
        assert!(most <= 11, "{most} calls in one second");
        assert!(f64::from(total) / 59.0 <= 10.0 + 0.1);
        assert_eq!(r.unprobed_attempts_while_open, 0);
    }
}
