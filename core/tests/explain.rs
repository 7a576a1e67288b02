//! A policy explains itself: golden texts for several policies.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    policy::Explain, Backoff, Breaker, BreakerSettings, Budget, BudgetSettings, CallSettings,
    Duration, Instant, Jitter, Outcome, Ratio,
};

#[test]
fn the_default_policy_with_breaker_and_budget_explains_itself() {
    let breaker = BreakerSettings::defaults("payments");
    let budget = BudgetSettings::defaults("payments");
    let text = Explain::new(&CallSettings::DEFAULT)
        .breaker(&breaker)
        .budget(&budget)
        .to_string();
    let want = "\
policy `payments`
- the deadline bounds a call first: 30s, before 3 attempts could run to their timeouts (30.300s)
- worst-case timeline:
    0s: attempt 1, cut at 10s if it hangs
    10s: wait up to 100ms (exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter)
    10.100s: attempt 2, cut at 20.100s if it hangs
    20.100s: wait up to 200ms (exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter)
    20.300s: attempt 3, cut at 30s by the deadline if it hangs
    a refusal is reported after a 100ms pause (less if the deadline is nearer)
    attempts are also cut at 3x the learned p95 once the breaker knows it
- load: up to 2 retries per call (3x) only while the retry budget lasts; it holds retries to 10% of a retry per success, at least 3 per second, up to 30 banked, so in an outage the sustained load is about 1x plus the floor
- measured now: not given (pass the breaker's snapshot)
- missing: nothing
";
    assert_eq!(text, want);
}

#[test]
fn a_bare_retry_policy_says_what_is_missing() {
    let text = Explain::new(&CallSettings::DEFAULT).to_string();
    let want = "\
policy
- the deadline bounds a call first: 30s, before 3 attempts could run to their timeouts (30.300s)
- worst-case timeline:
    0s: attempt 1, cut at 10s if it hangs
    10s: wait up to 100ms (exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter)
    10.100s: attempt 2, cut at 20.100s if it hangs
    20.100s: wait up to 200ms (exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter)
    20.300s: attempt 3, cut at 30s by the deadline if it hangs
- load: up to 2 retries per call: 3x the load on a dependency that is failing every call
- missing:
    no breaker: nothing stops a call reaching a dependency that is already down
    no retry budget: in an outage every call makes all its attempts, and a fleet multiplies its load
";
    assert_eq!(text, want);
}

#[test]
fn a_short_policy_is_bounded_by_its_attempts_and_reports_what_it_measures() {
    let call = CallSettings::builder()
        .max_attempts(2)
        .attempt_timeout(Some(Duration::from_millis(200)))
        .deadline(Some(Duration::from_secs(2)))
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .unwrap();
    let settings = BreakerSettings::defaults("radio");
    let breaker = Breaker::new(settings);
    let mut now = Instant::from_secs(1);
    for _ in 0..30 {
        let p = breaker.try_acquire(now).unwrap();
        now += Duration::from_millis(8);
        breaker.on_outcome(now, p, Outcome::Success, &mut |_| {});
    }
    let text = Explain::new(&call)
        .breaker(&settings)
        .breaker_now(breaker.snapshot(now))
        .to_string();
    let want = "\
policy `radio`
- the attempt limit bounds a call first: 2 attempts take at most 500ms, inside the 2s deadline
- worst-case timeline:
    0s: attempt 1, cut at 200ms if it hangs
    200ms: wait 100ms (exponential from 100ms (1s after throttling), x2, capped at 30s, no jitter)
    300ms: attempt 2, cut at 500ms if it hangs
    a refusal is reported after a 100ms pause (less if the deadline is nearer)
    attempts are also cut at 3x the learned p95 once the breaker knows it
- load: up to 1 retry per call: 2x the load on a dependency that is failing every call
- measured now: breaker closed, normal latency 8.388ms, no failure-rate baseline yet (cold), trips after 5 consecutive failures
- missing:
    no retry budget: in an outage every call makes all its attempts, and a fleet multiplies its load
";
    assert_eq!(text, want);
}

#[test]
fn a_budget_reports_what_it_has_spent() {
    let budget = BudgetSettings::defaults("b");
    let b = Budget::new(budget);
    let now = Instant::from_secs(1);
    for _ in 0..15 {
        b.try_withdraw(now).unwrap();
    }
    let text = Explain::new(&CallSettings::DEFAULT)
        .budget(&budget)
        .budget_now(b.snapshot(now))
        .to_string();
    assert!(
        text.contains("    budget spent now: 50% (15 retries available)\n"),
        "{text}"
    );
    assert!(text.contains("no breaker: nothing stops"), "{text}");
}

#[test]
fn a_hedging_policy_says_when_it_hedges_and_without_a_breaker_that_it_never_does() {
    let settings = CallSettings::builder()
        .max_attempts(2)
        .deadline(Some(Duration::from_secs(2)))
        .attempt_timeout(Some(Duration::from_millis(500)))
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .hedging(true)
        .build()
        .unwrap();
    let breaker = BreakerSettings::defaults("search");
    let budget = BudgetSettings::defaults("search");
    let text = Explain::new(&settings)
        .breaker(&breaker)
        .budget(&budget)
        .to_string();
    let want = "\
policy `search`
- the attempt limit bounds a call first: 2 attempts take at most 1.100s, inside the 2s deadline
- worst-case timeline:
    0s: attempt 1, cut at 500ms if it hangs
    500ms: wait 100ms (exponential from 100ms (1s after throttling), x2, capped at 30s, no jitter)
    600ms: attempt 2, cut at 1.100s if it hangs
    a refusal is reported after a 100ms pause (less if the deadline is nearer)
    attempts are also cut at 3x the learned p95 once the breaker knows it
    an attempt still running at the learned p95 gets a hedge beside it (at most 2 in flight, the first success wins, each hedge an attempt and a retry), never while the breaker is not closed or is near its trip point
- load: up to 1 retry per call (2x) only while the retry budget lasts; it holds retries to 10% of a retry per success, at least 3 per second, up to 30 banked, so in an outage the sustained load is about 1x plus the floor
- measured now: not given (pass the breaker's snapshot)
- missing: nothing
";
    assert_eq!(text, want);
    let bare = Explain::new(&settings).to_string();
    assert!(!bare.contains("gets a hedge"), "{bare}");
    assert!(
        bare.contains("hedging is on but no breaker learns the p95 it waits for"),
        "{bare}"
    );
}

#[test]
fn a_policy_names_itself_and_its_rate_limit_and_bulkhead() {
    let settings = CallSettings::builder()
        .max_attempts(1)
        .deadline(Some(Duration::from_secs(1)))
        .attempt_timeout(Some(Duration::from_millis(300)))
        .build()
        .unwrap();
    let name = stormguard_core::Name::new("search");
    let limit = stormguard_core::limits::RateLimitSettings::per_second("search", 50).unwrap();
    let window = stormguard_core::limits::WindowLimitSettings::defaults("events");
    let bulkhead = stormguard_core::limits::BulkheadSettings::builder("search")
        .max_in_flight(8)
        .bounded_wait(16, Duration::from_millis(250))
        .build()
        .unwrap();
    let text = Explain::new(&settings)
        .name(&name)
        .limit(&limit)
        .bulkhead(&bulkhead)
        .to_string();
    let want = "\
policy `search`
- the attempt limit bounds a call first: 1 attempt takes at most 300ms, inside the 1s deadline
- worst-case timeline:
    0s: attempt 1, cut at 300ms if it hangs
    a refusal is reported after a 100ms pause (less if the deadline is nearer)
- rate limit: 50 per 1s, burst 50; every attempt (retries and hedges too) takes a cell
- bulkhead: 8 in flight, up to 16 waiting at most 250ms; every attempt holds a slot while it runs
- load: no retries: one attempt per call
- missing:
    no breaker: nothing stops a call reaching a dependency that is already down
";
    assert_eq!(text, want);
    let text = Explain::new(&settings).limit(&window).to_string();
    assert!(
        text.contains("- rate limit: 50 per 60s, then a 30s cooldown; every attempt"),
        "{text}"
    );
}

#[test]
fn a_breaker_that_learned_a_20_percent_failure_rate_explains_the_raised_consecutive_count() {
    // 600 outcomes at 10 a second, every fifth one a failure (never two in a row, so the cold
    // rule of 5 never trips), ending with a success: a minute, so that the outcomes older than
    // the 30 s trip window fill the error baseline the snapshot reports. The breaker learns a
    // normal rate of 20%, and a run of failures must then be as unlikely as the default bound
    // of 1e-8 to trip: 0.2^12 <= 1e-8 < 0.2^11, a run of 12.
    let settings = BreakerSettings::defaults("flaky");
    let breaker = Breaker::new(settings);
    let mut now = Instant::from_secs(1);
    for i in 0..600 {
        let p = breaker.try_acquire(now).unwrap();
        let outcome = if i % 5 == 1 {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        breaker.on_outcome(now + Duration::from_millis(10), p, outcome, &mut |_| {});
        now += Duration::from_millis(100);
    }
    let snapshot = breaker.snapshot(now);
    assert!(snapshot.normal_failure_rate.is_some(), "{snapshot:?}");
    let run = snapshot.consecutive_to_trip;
    assert_eq!(run, 12, "{snapshot:?}");
    let text = Explain::new(&CallSettings::DEFAULT)
        .breaker(&settings)
        .breaker_now(snapshot)
        .to_string();
    assert!(
        text.contains(&format!(
            ", trips after {run} consecutive failures (raised from 5 by the failures seen so far)\n"
        )),
        "{text}"
    );
    assert!(text.contains(", normal failure rate "), "{text}");
    assert!(!text.contains("trips after 5 consecutive"), "{text}");
}

#[test]
fn a_raised_run_says_why_before_the_error_rate_baseline_is_armed() {
    // 200 outcomes in 20 s, every fifth a failure: all inside the 30 s trip window, so the
    // error-rate baseline is not armed yet, while the consecutive rule has learned 20% from the
    // window. The text reports that rate and says the run was raised by it.
    let settings = BreakerSettings::defaults("young");
    let breaker = Breaker::new(settings);
    let mut now = Instant::from_secs(1);
    for i in 0..200 {
        let p = breaker.try_acquire(now).unwrap();
        let outcome = if i % 5 == 1 {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        breaker.on_outcome(now + Duration::from_millis(10), p, outcome, &mut |_| {});
        now += Duration::from_millis(100);
    }
    let snapshot = breaker.snapshot(now);
    assert_eq!(
        snapshot.normal_failure_rate,
        Ratio::from_percent(20),
        "{snapshot:?}"
    );
    assert_eq!(snapshot.consecutive_to_trip, 12, "{snapshot:?}");
    let text = Explain::new(&CallSettings::DEFAULT)
        .breaker(&settings)
        .breaker_now(snapshot)
        .to_string();
    assert!(
        text.contains(&format!(
            ", normal failure rate {}, trips after 12 consecutive failures (raised from 5 by the failures seen so far)\n",
            Ratio::from_percent(20).unwrap()
        )),
        "{text}"
    );
}

#[test]
fn a_hedged_policy_over_a_breaker_that_learns_nothing_is_told_it_never_hedges() {
    let settings = CallSettings::builder()
        .max_attempts(2)
        .deadline(Some(Duration::from_secs(2)))
        .attempt_timeout(Some(Duration::from_millis(500)))
        .hedging(true)
        .build()
        .unwrap();
    let silent = BreakerSettings::consecutive_only("search", 3).unwrap();
    let learning = silent.learning();
    // What the explanation must match: after the same 40 healthy calls, the consecutive-only
    // breaker has no p95 to hedge or cut attempts at, and the learning one has both.
    let healthy = |settings: BreakerSettings| {
        let breaker = Breaker::new(settings);
        let mut now = Instant::from_secs(1);
        for _ in 0..40 {
            let p = breaker.try_acquire(now).unwrap();
            now += Duration::from_millis(20);
            breaker.on_outcome(now, p, Outcome::Success, &mut |_| {});
        }
        (breaker.hedge_after(now), breaker.attempt_ceiling(now))
    };
    let (hedge, ceiling) = healthy(silent);
    assert!(hedge.is_err() && ceiling.is_none(), "{hedge:?} {ceiling:?}");
    let (hedge, ceiling) = healthy(learning);
    assert!(hedge.is_ok() && ceiling.is_some(), "{hedge:?} {ceiling:?}");

    let text = Explain::new(&settings).breaker(&silent).to_string();
    assert!(!text.contains("gets a hedge"), "{text}");
    assert!(!text.contains("cut at 3x the learned p95"), "{text}");
    assert!(
        text.contains(
            "hedging is on but the breaker learns no p95 (consecutive-only, not learning): no \
             hedge is ever launched"
        ),
        "{text}"
    );
    let text = Explain::new(&settings).breaker(&learning).to_string();
    assert!(text.contains("gets a hedge"), "{text}");
    assert!(text.contains("cut at 3x the learned p95"), "{text}");
    assert!(!text.contains("hedging is on but"), "{text}");
}
