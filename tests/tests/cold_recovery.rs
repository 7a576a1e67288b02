//! A dependency that comes back cold: a cliffed close floods it and re-trips; a ramp sized to
//! its warm-up does not, and serves more calls while it warms.
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
fn a_cliffed_close_re_trips_on_a_cold_dependency_and_a_ramp_sized_to_its_warm_up_does_not() {
    // One gateway's breaker fronts 600 calls/s (13.6 in flight at a 22.7 ms mean latency) to a
    // dependency serving 20 at once. It goes down at 30 s, the breaker trips at once, and it is
    // back at 35 s, cold: capacity 5% (1 call) climbing linearly to 20 over 30 s.
    let s = suite::cold_recovery().unwrap();
    let reports: Vec<Report> = s.strategies.iter().map(|st| run(&s, st, s.seed)).collect();
    let cliff = by_name(&reports, "retry-x3+breaker+budget");
    let quarter = by_name(&reports, "retry-x3+breaker+budget+ramp");
    let sized = by_name(&reports, "retry-x3+breaker+budget+ramp30s");
    let served = |r: &Report| r.successes_between(35, 65);
    for r in [cliff, quarter, sized] {
        println!(
            "{}: {} re-trips, {} calls served over the 30 s climb, {:?}",
            r.strategy,
            r.re_trips,
            served(r),
            r.opens_by_reason
        );
    }
    // The first break ends 7.5 to 15 s after the trip, 2.5 to 10 s into the climb, when the
    // capacity is 0.05 + 0.95 t/30 of 20: 2.6 to 7.3 calls. A cliff sends all 13.6 at once: an
    // offered load above capacity makes the queue grow until it passes 3x capacity, where calls
    // are shed (fail at once): the breaker re-trips.
    assert!(cliff.re_trips >= 1);
    // A ramp over 30 s admits at most 0.05 + 0.95 t/30 of the calls t seconds after it starts
    // (within one call: deficit accounting), so of 13.6 in flight at most 13.6 x (0.05 + 0.95
    // t/30) <= 20 x (0.05 + 0.95 t/30), the capacity: never above it, never shed, never slow.
    assert_eq!(sized.re_trips, 0);
    // The cliff's re-trip costs it the next break (15 to 30 s, jittered) of refusing
    // everything, while the ramp keeps serving its growing share.
    assert!(served(sized) > served(cliff));
    // The default `Recovery::over(0.25)` of a 7.5-15 s break ramps in 1.9-3.75 s: faster than
    // the dependency warms, which is why the ramp must be sized to the warm-up.
    assert!(quarter.re_trips >= 1);
}
