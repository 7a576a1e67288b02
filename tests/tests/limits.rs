//! The local limits in the simulator: a rate limiter and a sliding window hold the load they
//! let through to their rate, and a bulkhead sized for the dependency keeps a loss of capacity
//! from becoming an outage.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

use stormguard_core::{
    limits::RateLimitSettings, limits::SlidingWindowSettings, CallSettings, Duration,
};
use stormguard_tests::{
    config, run, suite, Arrivals, Dependency, Layer, Report, Scenario, Strategy, DEPENDENCY,
};

fn by_name<'a>(reports: &'a [Report], name: &str) -> &'a Report {
    reports.iter().find(|r| r.strategy == name).unwrap()
}

/// One client offering 100 calls a second for `seconds` to a healthy dependency, through
/// `layer`.
fn one_client_at_100_a_second(seconds: u64, layer: Layer) -> Report {
    let s = Scenario {
        name: "limited".to_string(),
        description: String::new(),
        seed: 3,
        duration: Duration::from_secs(seconds),
        clients: 1,
        arrivals: Arrivals::Poisson { rate: 100.0 },
        dependency: Dependency::healthy(Duration::from_millis(20), Duration::from_millis(60)),
        strategies: vec![Strategy::single("limited", layer)],
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    };
    run(&s, &s.strategies[0], s.seed)
}

#[test]
fn a_rate_limiter_holds_the_attempts_it_lets_through_to_its_rate_and_burst() {
    // One client offering 100 calls a second through a limiter of 20 a second (burst 20).
    let limited = Layer {
        limiter: Some(
            RateLimitSettings::builder_named(DEPENDENCY)
                .rate(20, Duration::from_secs(1))
                .build()
                .unwrap(),
        ),
        ..Layer::plain(CallSettings::builder().max_attempts(3).build().unwrap())
    };
    let seconds = 60;
    let r = one_client_at_100_a_second(seconds, limited);
    // The offered load is 5x the rate: most calls are refused by the limiter, as a throttle the
    // call waited out on its backoff until its attempts ran out.
    assert!(r.refused_by_limits > r.calls / 2, "{r:?}");
    assert_eq!(r.refused_locally, r.refused_by_limits);
    // GCRA: at most burst + rate x time, in any stretch of the run.
    for from in 0..seconds as usize {
        for to in (from + 1)..=(seconds as usize) {
            let allowed = 20 + 20 * (to - from) as u64;
            assert!(
                r.attempts_between(from, to) <= allowed,
                "{} attempts in [{from}, {to}) s",
                r.attempts_between(from, to)
            );
        }
    }
    // And it lets its rate through: the dependency serves close to 20 a second.
    assert!(r.attempts >= 19 * seconds, "{} attempts", r.attempts);
}

#[test]
fn a_sliding_window_holds_the_attempts_of_every_window_to_its_quota() {
    // One client offering 100 calls a second through a quota of 20 per second, counted in 8
    // segments of 125 ms.
    let windowed = Layer {
        sliding: Some(
            SlidingWindowSettings::builder_named(DEPENDENCY)
                .quota(20)
                .window(Duration::from_secs(1))
                .segments(8)
                .build()
                .unwrap(),
        ),
        ..Layer::plain(CallSettings::builder().max_attempts(3).build().unwrap())
    };
    let seconds = 60;
    let r = one_client_at_100_a_second(seconds, windowed);
    assert!(r.refused_by_limits > r.calls / 2, "{r:?}");
    assert_eq!(r.refused_locally, r.refused_by_limits);
    // Every whole second of the run is a window of 8 whole segments: at most the quota.
    for from in 0..seconds as usize {
        assert!(r.attempts_between(from, from + 1) <= 20, "second {from}");
    }
    // And it lets its quota through.
    assert!(r.attempts >= 19 * seconds, "{} attempts", r.attempts);
}

#[test]
fn a_bulkhead_sized_for_the_dependency_keeps_half_its_capacity_from_becoming_an_outage() {
    let s = suite::capacity_halves().unwrap();
    let reports: Vec<Report> = s.strategies.iter().map(|st| run(&s, st, s.seed)).collect();
    let plain = by_name(&reports, "retry-x3+breaker+budget");
    let full = by_name(&reports, "retry-x3+breaker+budget+bulkhead20");
    let half = by_name(&reports, "retry-x3+breaker+budget+bulkhead10");
    for r in [plain, full, half] {
        println!(
            "{}: availability {:.3}, opens {}, refused by limits {}, served in the drop {}",
            r.strategy,
            r.availability,
            r.breaker_opens,
            r.refused_by_limits,
            r.successes_between(30, 90)
        );
    }
    // Unbounded, the queue past the lost capacity stretches every latency until the breaker
    // trips on slow calls, again and again: it sheds far more than the lost half.
    assert!(plain.breaker_opens >= 3, "{plain:?}");
    // Sized for the full capacity, the bulkhead stops the queue at 20 in flight (twice the 10
    // served): latencies stay near the slow-call threshold and the breaker stays closed.
    assert_eq!(full.breaker_opens, 0);
    assert!(full.successes_between(30, 90) > plain.successes_between(30, 90));
    assert!(full.availability > plain.availability);
    // Sized for the half, it also refuses when nothing is wrong (13 are in flight normally).
    assert!(half.refused_by_limits > 0);
    assert!(half.successes_between(0, 30) < full.successes_between(0, 30));
    assert_eq!(plain.refused_by_limits, 0);
}

#[test]
fn an_adaptive_limiter_refuses_nothing_while_healthy_and_beats_a_half_sized_bulkhead_once_capacity_is_back(
) {
    let s = suite::capacity_halves().unwrap();
    let reports: Vec<Report> = s.strategies.iter().map(|st| run(&s, st, s.seed)).collect();
    let plain = by_name(&reports, "retry-x3+breaker+budget");
    let half = by_name(&reports, "retry-x3+breaker+budget+bulkhead10");
    let adaptive = by_name(&reports, "retry-x3+breaker+budget+adaptive");
    for r in [plain, half, adaptive] {
        println!(
            "{}: availability {:.3}, opens {}, refused by limits {}, served before {}, in the drop {}, after {}",
            r.strategy,
            r.availability,
            r.breaker_opens,
            r.refused_by_limits,
            r.successes_between(0, 30),
            r.successes_between(30, 90),
            r.successes_between(90, 150)
        );
    }
    // Started at 20 and grown only when it held calls back, it refuses nothing a healthy
    // dependency could serve: before the drop it serves what the unbounded arm serves.
    assert_eq!(
        adaptive.successes_between(0, 30),
        plain.successes_between(0, 30)
    );
    // In the drop it refuses calls itself (a self-imposed throttle). It does not match a
    // bulkhead sized for the full capacity: the rule shrinks the limit only when a round's
    // fastest call took over twice the baseline's 10th percentile, which a proportional queue
    // reaches at about 2.7 times its capacity, where the breaker's measured ceiling already
    // cuts attempts.
    assert!(adaptive.refused_by_limits > 0);
    // Once capacity is back, it serves more than a bulkhead sized for the half.
    assert!(adaptive.successes_between(90, 150) > half.successes_between(90, 150));
}

#[test]
fn an_adaptive_limiter_shrinking_at_1_4x_serves_more_than_a_full_sized_bulkhead_at_under_2x_the_healthy_p99(
) {
    let s = suite::capacity_halves().unwrap();
    let reports: Vec<Report> = s.strategies.iter().map(|st| run(&s, st, s.seed)).collect();
    let plain = by_name(&reports, "retry-x3+breaker+budget");
    let full = by_name(&reports, "retry-x3+breaker+budget+bulkhead20");
    let half = by_name(&reports, "retry-x3+breaker+budget+bulkhead10");
    let adaptive = by_name(&reports, "retry-x3+breaker+budget+adaptive1.4");
    let rated = by_name(&reports, "retry-x3+breaker+budget+rate450");
    for r in [plain, full, half, adaptive, rated] {
        println!(
            "{}: served {}, opens {}, the dependency's p99 {:.1} ms healthy, {:.1} ms in the drop",
            r.strategy,
            r.succeeded,
            r.breaker_opens,
            r.served_p99_before_ms.unwrap(),
            r.served_p99_in_window_ms.unwrap()
        );
    }
    // Nothing refused while healthy, and no trip in the drop: the limiter sheds the excess
    // before the queue it would build stretches latencies into the slow-call rule.
    assert_eq!(
        adaptive.successes_between(0, 30),
        plain.successes_between(0, 30)
    );
    assert_eq!(adaptive.breaker_opens, 0);
    // It serves more than the bulkhead sized for the full capacity, and holds the dependency's
    // own p99 under twice its healthy p99 and under what that bulkhead lets the queue reach.
    assert!(adaptive.succeeded > full.succeeded);
    let healthy = adaptive.served_p99_before_ms.unwrap();
    let in_drop = adaptive.served_p99_in_window_ms.unwrap();
    assert!(
        in_drop <= 2.0 * healthy,
        "{in_drop} ms against {healthy} ms"
    );
    assert!(in_drop < full.served_p99_in_window_ms.unwrap());
    // Once capacity is back it serves more than a bulkhead sized for the half.
    assert!(adaptive.successes_between(90, 150) > half.successes_between(90, 150));
    // A rate sized for the half is no bound on what is in flight: it refuses calls while
    // nothing is wrong, and in the drop its attempts still queue past twice the healthy p99.
    assert!(rated.successes_between(0, 30) < plain.successes_between(0, 30));
    assert!(rated.served_p99_in_window_ms.unwrap() > 2.0 * rated.served_p99_before_ms.unwrap());
}

#[test]
fn a_scenario_file_takes_a_rate_limit_a_bulkhead_and_a_capacity_drop() {
    let text = r#"
name = "limits"
duration = "60s"
[load]
clients = 2
rate = 50
[dependency]
p50 = "20ms"
p99 = "60ms"
capacity = 10
[[impairment]]
kind = "capacity_drop"
at = "10s"
lasting = "20s"
to = 0.25
[[strategy]]
name = "guarded"

[strategy.policy]
rate_limit = { rate = 40, period = "1s", burst = 5 }
bulkhead = { max_in_flight = 4 }
adaptive_limit = { min_limit = 2, max_limit = 8, initial_limit = 4 }
"#;
    let s = config::parse(text).unwrap();
    let layer = &s.strategies[0].layers[0];
    let limiter = layer.limiter.unwrap();
    assert_eq!(limiter.burst(), 5);
    assert_eq!(limiter.emission_interval(), Duration::from_millis(25));
    assert_eq!(layer.bulkhead.unwrap().max_in_flight(), 4);
    let adaptive = layer.adaptive.unwrap();
    assert_eq!(
        (
            adaptive.min_limit(),
            adaptive.max_limit(),
            adaptive.initial_limit()
        ),
        (2, 8, 4)
    );
    assert_eq!(s.dependency.capacity_at(Duration::from_secs(5)), Some(10.0));
    assert_eq!(s.dependency.capacity_at(Duration::from_secs(15)), Some(2.5));
    assert_eq!(
        s.dependency.capacity_at(Duration::from_secs(30)),
        Some(10.0)
    );
    let explained = s.strategies[0].explain();
    assert!(
        explained.contains("rate") && explained.contains("bulkhead"),
        "{explained}"
    );

    let error = |from: &str, to: &str| {
        assert!(text.contains(from), "{from}");
        config::parse(&text.replacen(from, to, 1))
            .unwrap_err()
            .to_string()
    };
    let e = error("rate = 40", "rate = 0");
    assert!(
        e.contains("strategy[0].policy.rate_limit.rate: must be at least 1"),
        "{e}"
    );
    let e = error("max_in_flight = 4 }", "max_in_flight = 4, max_queue = 8 }");
    assert!(
        e.contains("strategy[0].policy.bulkhead: the simulator models no queue"),
        "{e}"
    );
    let e = error("min_limit = 2", "min_limit = 0");
    assert!(e.contains("strategy[0].policy.adaptive_limit"), "{e}");
    let e = error("to = 0.25", "to = 1.5");
    assert!(e.contains("impairment[0].to: 1.5 is not a fraction"), "{e}");
    let e = error("capacity = 10\n", "");
    assert!(
        e.contains("a capacity_drop needs dependency.capacity"),
        "{e}"
    );
}
