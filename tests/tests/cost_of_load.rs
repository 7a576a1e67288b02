//! What load costs the dependency and the caller: work for a caller who gave up still occupies
//! the dependency, and a caller's pool of concurrent calls bounds what it can wait on at once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

mod support;

use stormguard_core::{CallSettings, Duration};
use stormguard_tests::{
    run, Arrivals, Dependency, HealthyDependency, Impairment, Layer, Scenario, Strategy,
};
use support::secs;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One client calling a dependency (p50 20 ms, p99 60 ms) at `rate` a second for `seconds`,
/// once per call, each attempt cut at `timeout`.
fn one_client(rate: f64, seconds: u64, timeout: Option<Duration>, dep: Dependency) -> Scenario {
    let call = CallSettings::builder()
        .max_attempts(1)
        .attempt_timeout(timeout)
        .deadline(None)
        .build()
        .unwrap();
    Scenario {
        name: "cost".to_string(),
        description: String::new(),
        seed: 3,
        duration: secs(seconds),
        clients: 1,
        arrivals: Arrivals::Poisson { rate },
        dependency: dep,
        healthy: None,
        pool: None,
        warnings: Vec::new(),
        strategies: vec![Strategy::single("once", Layer::plain(call))],
    }
}

#[test]
fn work_for_a_caller_who_gave_up_still_occupies_the_dependency_and_delays_the_next_callers() {
    // 50 calls a second to a dependency serving 10 at once behind a deep queue. For 5 s, 10 s
    // in, every attempt hangs for 2 s; its caller gives up after 100 ms, the dependency does
    // not know and holds it to the end.
    let dep = Dependency::healthy(ms(20), ms(60))
        .capacity(10.0)
        .shedding_past(f64::INFINITY)
        .with(Impairment::Hang {
            at: secs(10),
            lasting: secs(5),
            after: secs(2),
        });
    let s = one_client(50.0, 30, Some(ms(100)), dep);
    let r = run(&s, &s.strategies[0], s.seed);
    // Every attempt sent into the hang was answered after its caller had gone: work for nobody.
    let hung = r.attempts_between(10, 15);
    assert!(hung > 200, "{hung}");
    assert!(r.wasted_attempts >= hung, "{} of {hung}", r.wasted_attempts);
    // Once the hang is over the dependency answers normally again, but for up to 2 s it still
    // holds the last ~100 hung attempts: 10x its capacity, so a new attempt waits 10x its
    // latency, past the callers' 100 ms. The second after the hang fails almost whole; by the
    // time the hung work is done, calls succeed again.
    let just_after = r.successes_between(15, 16) as f64 / r.calls_between(15, 16) as f64;
    assert!(just_after < 0.2, "{just_after}");
    let later = r.successes_between(18, 30) as f64 / r.calls_between(18, 30) as f64;
    assert!(later > 0.99, "{later}");
    // Without a capacity, the same hang costs the next callers nothing.
    let unbounded = one_client(
        50.0,
        30,
        Some(ms(100)),
        Dependency::healthy(ms(20), ms(60)).with(Impairment::Hang {
            at: secs(10),
            lasting: secs(5),
            after: secs(2),
        }),
    );
    let u = run(&unbounded, &unbounded.strategies[0], unbounded.seed);
    let just_after = u.successes_between(15, 16) as f64 / u.calls_between(15, 16) as f64;
    assert!(just_after > 0.99, "{just_after}");
}

#[test]
fn a_call_that_finds_its_clients_pool_full_fails_at_once_and_the_pool_is_never_exceeded() {
    // Every call hangs for 60 s and nobody times out: the first 5 calls take the pool's 5
    // slots for good, every later one finds it full.
    let dep = Dependency::healthy(ms(20), ms(60)).with(Impairment::Hang {
        at: Duration::ZERO,
        lasting: secs(20),
        after: secs(60),
    });
    let mut s = one_client(20.0, 20, None, dep);
    s.pool = Some(5);
    let r = run(&s, &s.strategies[0], s.seed);
    assert!(r.calls > 300, "{}", r.calls);
    assert_eq!(r.saturated, r.calls - 5, "{r:?}");
    assert_eq!(r.attempts, 5);
    assert_eq!(r.succeeded, 5, "the five hung calls are answered at last");
    assert_eq!(r.failed + r.refused_locally, 0);
    assert_eq!(
        r.calls,
        r.succeeded + r.failed + r.refused_locally + r.saturated
    );
    // A full pool fails a call at once: no waiting, whatever the call's policy.
    assert_eq!(r.latency_p50_ms, 0.0);
    let per_second: u64 = r.saturated_per_second.iter().map(|&n| u64::from(n)).sum();
    assert_eq!(per_second, r.saturated);
}

#[test]
fn calls_to_a_healthy_dependency_fail_once_the_pool_is_full_of_calls_to_a_hung_one() {
    // Half the calls go to a dependency that hangs for 20 s, 10 s in, half to a healthy one,
    // through a pool of 8; calls are cut at 5 s.
    let hung = Dependency::healthy(ms(20), ms(60)).with(Impairment::Hang {
        at: secs(10),
        lasting: secs(20),
        after: secs(30),
    });
    let mut s = one_client(20.0, 60, Some(secs(5)), hung);
    s.pool = Some(8);
    s.healthy = Some(HealthyDependency {
        dependency: Dependency::healthy(ms(20), ms(60)),
        share: 0.5,
    });
    let r = run(&s, &s.strategies[0], s.seed);
    // 10 calls a second to the hung one, each holding a slot 5 s: the pool fills in under a
    // second, and slots free at 8 per 5 s, for whichever call comes next.
    let healthy = r.healthy_dependency_availability.unwrap();
    assert!(healthy < 0.2, "{healthy}");
    assert!(r.saturated > 0);
    // Before the hang, and once it is over, nothing is refused or fails.
    assert_eq!(r.successes_between(0, 10), r.calls_between(0, 10));
    assert_eq!(r.successes_between(40, 60), r.calls_between(40, 60));
    // Without the hung dependency's calls, the healthy one serves everything.
    let mut alone = s.clone();
    alone.dependency.impairments.clear();
    let a = run(&alone, &alone.strategies[0], alone.seed);
    assert_eq!(a.healthy_dependency_availability, Some(1.0));
    assert_eq!(a.saturated, 0);
}

#[test]
fn the_availability_after_the_trigger_is_the_minute_after_the_last_impairment_ends() {
    let dep = Dependency::healthy(ms(20), ms(60))
        .failing(0.01)
        .with(Impairment::Outage {
            at: secs(10),
            lasting: secs(10),
        });
    let s = one_client(100.0, 100, None, dep);
    let r = run(&s, &s.strategies[0], s.seed);
    let want = r.successes_between(20, 80) as f64 / r.calls_between(20, 80) as f64;
    assert!((r.availability_after_trigger.unwrap() - want).abs() < 1e-12);
    // The minute runs to the end of the run when that comes first.
    let short = Scenario {
        duration: secs(50),
        ..s.clone()
    };
    let r = run(&short, &short.strategies[0], short.seed);
    let want = r.successes_between(20, 50) as f64 / r.calls_between(20, 50) as f64;
    assert!((r.availability_after_trigger.unwrap() - want).abs() < 1e-12);
    // An impairment that lasts the run has no "after".
    let step = Scenario {
        dependency: Dependency::healthy(ms(20), ms(60)).with(Impairment::ErrorSpike {
            at: secs(10),
            lasting: None,
            rate: 0.5,
        }),
        ..s
    };
    assert_eq!(
        run(&step, &step.strategies[0], 1).availability_after_trigger,
        None
    );
}

#[test]
fn the_load_figures_say_attempts_per_second_over_the_fault_window() {
    let dep = Dependency::healthy(ms(20), ms(60)).with(Impairment::Outage {
        at: secs(10),
        lasting: secs(20),
    });
    let s = one_client(100.0, 40, None, dep);
    let r = run(&s, &s.strategies[0], s.seed);
    let attempts = r.attempts_between(10, 30) as f64 / 20.0;
    let calls = r.calls_between(10, 30) as f64 / 20.0;
    assert!((r.attempts_per_s_in_window - attempts).abs() < 1e-9);
    assert!((r.calls_per_s_in_window - calls).abs() < 1e-9);
    assert!((r.load_multiplier - attempts / calls).abs() < 1e-9);
}
