//! Open-loop arrivals: Poisson, and Poisson in bursts. Bursts keep the mean rate, make the
//! per-second counts far more variable than Poisson's, and loosen none of the budget's bounds.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

use stormguard_core::Duration;
use stormguard_tests::{run, suite, Arrivals, Report, Scenario, Strategy};

const CLIENTS: u32 = 20;
const RATE: f64 = 50.0;
const SECONDS: u64 = 1200;

fn bursty() -> Arrivals {
    Arrivals::Bursty {
        rate: RATE,
        peak: 4.0,
        share: 0.1,
        burst: Duration::from_secs(1),
    }
}

fn healthy(arrivals: Arrivals) -> Report {
    let s = Scenario {
        name: "arrivals".to_string(),
        description: String::new(),
        seed: 3,
        duration: Duration::from_secs(SECONDS),
        clients: CLIENTS,
        arrivals,
        dependency: suite::healthy(),
        strategies: Vec::new(),
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    };
    run(&s, &Strategy::builtin("no-retry").unwrap().unwrap(), s.seed)
}

/// Variance over mean of the fleet's calls per second: 1 for a Poisson process.
fn dispersion(r: &Report) -> f64 {
    let counts: Vec<f64> = r.calls_per_second[..SECONDS as usize]
        .iter()
        .map(|&c| f64::from(c))
        .collect();
    let n = counts.len() as f64;
    let mean = counts.iter().sum::<f64>() / n;
    let var = counts.iter().map(|c| (c - mean) * (c - mean)).sum::<f64>() / (n - 1.0);
    var / mean
}

#[test]
fn bursty_arrivals_keep_the_mean_rate_and_come_in_bursts() {
    let poisson = healthy(Arrivals::Poisson { rate: RATE });
    let bursts = healthy(bursty());
    let expected = f64::from(CLIENTS) * RATE * SECONDS as f64;
    let (dp, db) = (dispersion(&poisson), dispersion(&bursts));
    let peak = |r: &Report| *r.calls_per_second.iter().max().unwrap();
    println!(
        "calls: Poisson {}, bursty {} (expected {expected:.0}); dispersion {dp:.2} / {db:.2}; \
         busiest second {} / {}",
        poisson.calls,
        bursts.calls,
        peak(&poisson),
        peak(&bursts)
    );
    // The mean: the calm level, rate (1 - 0.1 x 4) / 0.9 = 2/3 of it, fills the rest of the
    // time. A cycle is a 1 s burst and 9 s of calm on average: 120 cycles per client, over
    // which its burst share varies around 0.1 by about 0.0117 (both lengths exponential); over
    // 20 clients, 0.0026. The calls move by (4 - 2/3) x 0.0026 = 0.87% per unit of that: within
    // 4 of those, 3.5%.
    assert!((bursts.calls as f64 / expected - 1.0).abs() < 0.035);
    // Poisson counts: dispersion 1, estimated from 1200 seconds (standard error 0.04).
    assert!((dp - 1.0).abs() < 0.2, "{dp}");
    // Bursts: each client's rate is 4 x 50 = 200 for 10% of the time and 33.3 otherwise, a
    // variance of 0.09 x 166.7^2 = 2500 per s^2 which a one-second count keeps most of (phases
    // last 1 s and 9 s on average): the dispersion is in the tens, not near 1.
    assert!(db > 10.0, "{db}");
    // The busiest second: a few clients in a burst at once, far above Poisson's busiest.
    assert!(peak(&bursts) > peak(&poisson) + 100);
}

#[test]
fn bursts_loosen_none_of_the_budgets_bound_in_an_outage() {
    let mut s = suite::outage().unwrap();
    s.clients = 10;
    s.duration = Duration::from_secs(120);
    s.arrivals = Arrivals::Bursty {
        rate: suite::RATE,
        peak: 4.0,
        share: 0.1,
        burst: Duration::from_secs(1),
    };
    let st = Strategy::builtin("retry-x3+budget").unwrap().unwrap();
    let r = run(&s, &st, s.seed);
    // As in the Poisson outage: each client's budget holds at most 30 tokens and accrues 3 per
    // second (nothing succeeds, so the fraction adds nothing), whenever its calls come.
    let calls = r.calls_between(30, 90) as f64;
    let bound = 1.0 + (f64::from(s.clients) * (30.0 + 3.0 * 60.0)) / calls;
    println!(
        "retry-x3+budget, bursty arrivals, 60 s outage: load {:.3}x <= {bound:.3}x",
        r.load_multiplier
    );
    assert!(r.load_multiplier <= bound);
    assert!(r.load_multiplier > 1.0);
}
