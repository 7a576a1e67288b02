//! The budget experiment of the .NET original's stress report, against our own arithmetic, with
//! their figures printed beside ours (compared, not asserted).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

use stormguard_core::Duration;
use stormguard_tests::{run, suite};

/// Theirs: (retries per call unbudgeted, budgeted; availability budgeted).
fn theirs(percent: u32) -> (f64, f64, f64) {
    if percent == 25 {
        (0.333, 0.081, 0.81)
    } else {
        (0.996, 0.053, 0.53)
    }
}

fn experiment(percent: u32) {
    let mut s = suite::budget_experiment(percent).unwrap();
    s.duration = Duration::from_secs(30);
    let p = f64::from(percent) / 100.0;
    let rate = s.arrivals.mean_rate().unwrap();
    let r: Vec<_> = s.strategies.iter().map(|st| run(&s, st, s.seed)).collect();
    let (three, until, budget) = (&r[0], &r[1], &r[2]);
    let (their_plain, their_budget, their_avail) = theirs(percent);
    println!("dependency failing {percent}%:");
    println!(
        "  no budget, 3 attempts:      retries/call {:.3} (expected p + p^2 = {:.3})",
        three.retries_per_call,
        p + p * p
    );
    println!(
        "  no budget, until success:   retries/call {:.3} (expected p/(1-p) = {:.3}); .NET (no budget, Polly) {their_plain}",
        until.retries_per_call,
        p / (1.0 - p)
    );
    println!(
        "  budget, 3 attempts:         retries/call {:.3}, availability {:.3}; .NET (budget, 3 attempts) {their_budget}, {their_avail}",
        budget.retries_per_call, budget.availability
    );
    // Independent failures: a call that may make 3 attempts retries p + p^2 times on average,
    // and one retrying until success p / (1 - p) (geometric). With ~60,000 calls the standard
    // error is well under 1% of either: assert within 3%.
    assert!((three.retries_per_call / (p + p * p) - 1.0).abs() < 0.03);
    assert!((until.retries_per_call / (p / (1.0 - p)) - 1.0).abs() < 0.03);
    // The budget funds 0.1 of a retry per successful attempt (each succeeded call had exactly
    // one), plus 3 per second of the run and its drain (at most a 30 s deadline), plus the 30
    // it starts with: retries <= 0.1 x succeeded + 3 x (T + 30) + 30.
    let t = s.duration.as_secs_f64_lossy();
    let funded = 0.1 * budget.succeeded as f64 + 3.0 * (t + 30.0) + 30.0;
    let retries = budget.retries_per_call * budget.calls as f64;
    assert!(
        retries <= funded + 0.5,
        "{retries} retries > {funded} funded"
    );
    // And they are the only second chance: availability = (1 - p)(1 + retries per call),
    // within sampling noise; so with r = 0.1 (1 - p)(1 + r) + floor share, at most:
    let floor_share = (3.0 * (t + 30.0) + 30.0) / (rate * t);
    let r_max = (0.1 * (1.0 - p) + floor_share) / (1.0 - 0.1 * (1.0 - p));
    assert!(
        budget.retries_per_call <= r_max + 0.005,
        "{} > {r_max}",
        budget.retries_per_call
    );
    let expected_avail = (1.0 - p) * (1.0 + budget.retries_per_call);
    assert!((budget.availability - expected_avail).abs() < 0.01);
}

#[test]
fn budget_experiment_at_one_in_four_matches_the_arithmetic_beside_the_dotnet_figures() {
    experiment(25);
}

#[test]
fn budget_experiment_at_one_in_two_matches_the_arithmetic_beside_the_dotnet_figures() {
    experiment(50);
}

trait Secs {
    fn as_secs_f64_lossy(&self) -> f64;
}

impl Secs for Duration {
    fn as_secs_f64_lossy(&self) -> f64 {
        self.as_nanos() as f64 / 1e9
    }
}
