//! What `storm` prints beside each built-in table: one line on what the breaker buys there and
//! what it costs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::Duration;
use stormguard_tests::{run, suite, Report};

#[test]
fn every_built_in_table_with_a_breaker_says_in_one_line_what_it_buys_and_costs() {
    for mut s in suite::default_suite().unwrap() {
        // The line's presence does not depend on the figures: a short run of one client has
        // every arm.
        s.duration = s.duration.min(Duration::from_secs(2));
        s.clients = 1;
        let reports: Vec<Report> = s.strategies.iter().map(|st| run(&s, st, 1)).collect();
        let has_breaker = s.strategies.iter().any(|st| st.has_breaker());
        let line = suite::breaker_line(&s, &reports);
        if has_breaker {
            let line = line.unwrap_or_else(|| panic!("{}: no line on the breaker", s.name));
            assert!(line.starts_with("the breaker "), "{}: {line}", s.name);
            assert!(line.contains("cost"), "{}: {line}", s.name);
            assert!(!line.contains('\n'), "{}: {line}", s.name);
            assert_eq!(
                suite::commentary(&s, &reports).first(),
                Some(&line),
                "{}: it comes first",
                s.name
            );
        } else {
            assert_eq!(line, None, "{}", s.name);
        }
    }
}
