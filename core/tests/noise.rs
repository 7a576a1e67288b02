//! The breaker's rules under noise, each driven by synthetic time: a breaker must not open on a
//! dependency that is flaky but stable, and must still open on an outage within a few calls.
//! What the documents fix is the cold behaviour; what a breaker has learned only makes it harder
//! to fool.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    rng::JitterRng, Bound, Breaker, BreakerSettings, Call, CallSettings, Duration, Event,
    FailureRate, Field, Instant, Outcome, Parts, Ratio, Recovery, RefusalReason, SharedBreaker,
    SlowCalls, State, Step, TripReason,
};

mod support;
use support::{ms, secs};

/// Whether call `i` of a stream failing at exactly `per_mille / 1000` fails: spread evenly (the
/// first of every thousand calls' share), so that no two failures are adjacent below 50% and
/// the stream never trips a cold breaker.
fn evenly(i: u64, per_mille: u64) -> bool {
    (i * per_mille) % 1000 < per_mille
}

/// A breaker that has learned a normal failure rate of `per_mille / 1000` from `calls` calls at
/// 10 a second, ending with a success. Returns the time after them.
fn learned(b: &mut Breaker, per_mille: u64, calls: u64) -> Instant {
    let mut t = Instant::from_secs(1);
    for i in 0..calls {
        let fail = evenly(i, per_mille) && i + 1 < calls;
        let p = b
            .try_acquire(t)
            .expect("an evenly failing stream never trips");
        let outcome = if fail {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        b.on_outcome(t + ms(10), p, outcome, &mut |_| {});
        t += ms(100);
    }
    t
}

/// Feeds failures one at a time; returns how many it took to open the breaker, and why.
fn failures_to_trip(b: &mut Breaker, mut t: Instant) -> (u32, Option<TripReason>) {
    for n in 1..=2000 {
        let p = b.try_acquire(t).unwrap();
        let mut reason = None;
        b.on_outcome(t + ms(10), p, Outcome::Transient, &mut |e| {
            if let Event::StateChanged {
                to: State::Open,
                reason: r,
                ..
            } = e
            {
                reason = r;
            }
        });
        if b.state(t + ms(10)) == State::Open {
            return (n, reason);
        }
        t += ms(100);
    }
    (u32::MAX, None)
}

fn defaults() -> BreakerSettings {
    BreakerSettings::builder("noisy")
        .jitter(false)
        .build()
        .unwrap()
}

/// Only the consecutive rule trips (statistics kept for the learned rate): the other rules
/// stay out of the way of what is measured.
fn consecutive_only_with_statistics() -> BreakerSettings {
    BreakerSettings::builder("noisy")
        .jitter(false)
        .failure_rate(Some(FailureRate::above(5).floor_ppm(1_000_000)))
        .slow_calls(None)
        .build()
        .unwrap()
}

#[test]
fn a_cold_breaker_trips_on_the_configured_run() {
    let mut b = Breaker::new(defaults());
    assert_eq!(b.snapshot(Instant::ZERO).consecutive_to_trip, 5);
    assert_eq!(
        failures_to_trip(&mut b, Instant::from_secs(1)),
        (5, Some(TripReason::ConsecutiveFailures))
    );
}

#[test]
fn a_learned_failure_rate_lengthens_the_run_that_trips() {
    // p^n <= 1e-8: at 30% a run of 16 (0.3^15 = 1.4e-8 is not enough), at 20% 12 (0.2^11 =
    // 2e-8 is not), at 5% 7, at 1% the configured 5 (0.01^4 = 1e-8 already is).
    for (per_mille, run) in [(300, 16), (200, 12), (100, 8), (50, 7), (10, 5), (0, 5)] {
        let mut b = Breaker::new(consecutive_only_with_statistics());
        let t = learned(&mut b, per_mille, 1000);
        assert_eq!(
            b.snapshot(t).consecutive_to_trip,
            run,
            "learned {per_mille} per mille"
        );
        assert_eq!(
            failures_to_trip(&mut b, t),
            (run.into(), Some(TripReason::ConsecutiveFailures)),
            "learned {per_mille} per mille: an outage trips within the learned run"
        );
    }
}

#[test]
fn the_learned_rate_is_used_only_once_armed() {
    // 99 outcomes at 20% say nothing yet about what is normal: the cold count holds.
    let mut b = Breaker::new(consecutive_only_with_statistics());
    let t = learned(&mut b, 200, 99);
    assert_eq!(b.snapshot(t).consecutive_to_trip, 5);
    assert_eq!(b.snapshot(t).normal_failure_rate, None);
    assert_eq!(failures_to_trip(&mut b, t).0, 5);
}

#[test]
fn the_snapshot_reports_the_failure_rate_as_soon_as_the_noise_rules_use_it() {
    // 150 outcomes at 20% over 15 s, all still in the 30 s trip window: the error baseline
    // holds none of them, yet the consecutive rule uses the rate they show. The snapshot reads
    // that rate, the one in force, at every step on the way.
    let b = Breaker::new(consecutive_only_with_statistics());
    let mut t = Instant::from_secs(1);
    for i in 0..150u64 {
        let p = b.try_acquire(t).unwrap();
        let outcome = if evenly(i, 200) {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        b.on_outcome(t + ms(10), p, outcome, &mut |_| {});
        t += ms(100);
        let snap = b.snapshot(t);
        let raised = snap.consecutive_to_trip > 5;
        assert_eq!(
            snap.normal_failure_rate.is_some(),
            i + 1 >= 100,
            "after {} outcomes: {snap:?}",
            i + 1
        );
        assert!(!raised || snap.normal_failure_rate.is_some(), "{snap:?}");
    }
    assert_eq!(b.snapshot(t).consecutive_to_trip, 12);
    assert_eq!(b.normal_failure_rate(t), Ratio::from_percent(20));
}

#[test]
fn a_larger_noise_bound_asks_for_a_longer_run() {
    let settings = BreakerSettings::builder("noisy")
        .jitter(false)
        .slow_calls(None)
        .noise_bound(1_000_000_000_000)
        .build()
        .unwrap();
    let mut b = Breaker::new(settings);
    let t = learned(&mut b, 200, 1000);
    // 0.2^17 = 1.3e-12 > 1e-12; 0.2^18 = 2.6e-13.
    assert_eq!(b.snapshot(t).consecutive_to_trip, 18);
}

#[test]
fn the_noise_bound_is_validated() {
    for (one_in, bound) in [
        (0, Bound::AtLeast(2)),
        (1, Bound::AtLeast(2)),
        (1_000_000_000_000_001, Bound::AtMost(1_000_000_000_000_000)),
    ] {
        let err = BreakerSettings::builder("x")
            .noise_bound(one_in)
            .build()
            .unwrap_err();
        assert_eq!(
            (err.field, err.bound),
            (Field::NoiseBound, bound),
            "{one_in}"
        );
    }
    assert!(BreakerSettings::builder("x").noise_bound(2).build().is_ok());
    assert_eq!(
        BreakerSettings::defaults("x").noise_bound(),
        100_000_000,
        "1e-8 per outcome by default"
    );
}

/// An hour at a stationary failure rate, Bernoulli outcomes from a seeded generator at 30 calls
/// a second, after a warm-up at exactly that rate: counts the trips. The bound's rate is 1e-8
/// per outcome, so over 108,000 outcomes a trip from chance alone is a one-in-a-thousand event;
/// with these seeds none happens.
fn trips_in_an_hour(per_mille: u64, seed: u64) -> usize {
    let mut b = Breaker::new(defaults());
    let t = learned(&mut b, per_mille, 200);
    trips_over_an_hour(&mut b, t, per_mille, seed)
}

/// Feeds `b` an hour of Bernoulli outcomes failing at `per_mille / 1000`, 30 calls a second
/// from `t`, drawn from a generator seeded with `seed`; counts the opens.
fn trips_over_an_hour(b: &mut Breaker, mut t: Instant, per_mille: u64, seed: u64) -> usize {
    let mut rng = JitterRng::with_seed(seed);
    let mut trips = 0;
    for _ in 0..108_000 {
        if let Ok(p) = b.try_acquire(t) {
            let fail = rng.up_to(999) < per_mille;
            let outcome = if fail {
                Outcome::Transient
            } else {
                Outcome::Success
            };
            b.on_outcome(t + ms(20), p, outcome, &mut |e| {
                if let Event::StateChanged {
                    to: State::Open, ..
                } = e
                {
                    trips += 1;
                }
            });
        }
        t += Duration::from_micros(33_333);
    }
    trips
}

#[test]
fn a_stationary_failure_rate_up_to_30_percent_trips_nothing_in_an_hour() {
    for per_mille in [0, 10, 50, 100, 150, 200, 250, 300] {
        for seed in 1..=3 {
            assert_eq!(
                trips_in_an_hour(per_mille, seed),
                0,
                "{per_mille} per mille, seed {seed}"
            );
        }
    }
}

#[test]
fn without_the_learned_rate_the_same_hour_at_20_percent_would_trip_dozens_of_times() {
    // The cold rule, five in a row, on the same stream: what the learned rate saves.
    let mut b = Breaker::new(BreakerSettings::consecutive_only("cold", 5).unwrap());
    let trips = trips_over_an_hour(&mut b, Instant::from_secs(1), 200, 1);
    assert!(trips > 10, "{trips}");
}

/// Only the relative error-rate rule trips.
fn relative_only() -> BreakerSettings {
    BreakerSettings::builder("noisy")
        .jitter(false)
        .consecutive_failures(1000)
        .slow_calls(None)
        .build()
        .unwrap()
}

/// Learns `per_mille` over five minutes at 10 calls a second, then lets the trip window empty.
fn learned_then_quiet(b: &mut Breaker, per_mille: u64) -> Instant {
    let t = learned(b, per_mille, 3000);
    t + secs(31)
}

#[test]
fn a_dependency_normally_failing_30_percent_trips_when_the_window_reaches_100_percent() {
    // 5 x 30% is 150%: the trip point is capped at 100%, and a window at it trips.
    let mut b = Breaker::new(relative_only());
    let t = learned_then_quiet(&mut b, 300);
    assert_eq!(
        failures_to_trip(&mut b, t),
        (20, Some(TripReason::FailureRate)),
        "the 20th failure fills the minimum window"
    );
}

#[test]
fn a_window_exactly_at_the_relative_trip_point_trips() {
    // Normal 10%, 5x: 50%. A window alternating success and failure is at 50% on every
    // failure; the 20th call (the 10th failure) is the first with enough calls.
    let mut b = Breaker::new(relative_only());
    let mut t = learned_then_quiet(&mut b, 100);
    for i in 0..20 {
        let p = b.try_acquire(t).unwrap();
        let outcome = if i % 2 == 1 {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        b.on_outcome(t + ms(10), p, outcome, &mut |_| {});
        let open = b.state(t + ms(10)) == State::Open;
        assert_eq!(open, i == 19, "call {i}");
        t += ms(100);
    }
}

#[test]
fn a_call_at_the_slow_threshold_is_slow() {
    let settings = BreakerSettings::builder("slow")
        .jitter(false)
        .failure_rate(None)
        .slow_calls(None)
        .slow_threshold(Some(ms(100)))
        .build()
        .unwrap();
    let b = Breaker::new(settings);
    let t = Instant::from_secs(1);
    for (latency, slow) in [(ms(99), 0), (ms(100), 1), (ms(101), 2)] {
        let p = b.try_acquire(t).unwrap();
        b.on_outcome(t + latency, p, Outcome::Success, &mut |_| {});
        assert_eq!(b.snapshot(t + latency).window_slow, slow, "{latency}");
    }
}

#[test]
fn the_learned_median_is_none_until_twenty_samples() {
    let b = Breaker::new(defaults());
    let mut t = Instant::from_secs(1);
    for n in 1..=20 {
        let p = b.try_acquire(t).unwrap();
        b.on_outcome(t + ms(10), p, Outcome::Success, &mut |_| {});
        t += ms(100);
        let median = b.snapshot(t).normal_latency;
        assert_eq!(median.is_some(), n >= 20, "{n} samples: {median:?}");
    }
}

fn ramped() -> BreakerSettings {
    BreakerSettings::builder("ramp")
        .jitter(false)
        .slow_calls(Some(SlowCalls::above(3)))
        .recovery(Some(Recovery::over(1.0).clamped(secs(10), secs(10))))
        .build()
        .unwrap()
}

/// Learns `per_mille`, trips with an outage, and passes the two probes: the 10 s ramp starts.
fn into_ramp(b: &mut Breaker, per_mille: u64) -> Instant {
    let t = learned(b, per_mille, 3000);
    let (n, _) = failures_to_trip(b, t);
    let after = t + ms(100 * u64::from(n)) + secs(16);
    for i in 0..2 {
        let p = b.try_acquire(after + ms(20 * i)).unwrap();
        b.on_outcome(after + ms(20 * i + 10), p, Outcome::Success, &mut |_| {});
    }
    let start = after + ms(50);
    assert_eq!(b.state(start), State::Recovering);
    start
}

/// Offers a call every 5 ms for the ramp's length; admitted calls fail as `fails` says (by
/// admitted index). Returns the state at the end, the admitted count and the trip reasons.
fn ride(
    b: &mut Breaker,
    start: Instant,
    mut fails: impl FnMut(u64) -> bool,
) -> (State, u64, Vec<TripReason>) {
    let mut t = start;
    let mut admitted = 0;
    let mut trips = Vec::new();
    while t < start + secs(11) && b.state(t) == State::Recovering {
        match b.try_acquire(t) {
            Ok(p) => {
                let outcome = if fails(admitted) {
                    Outcome::Transient
                } else {
                    Outcome::Success
                };
                admitted += 1;
                b.on_outcome(t + ms(10), p, outcome, &mut |e| {
                    if let Event::StateChanged {
                        to: State::Open,
                        reason: Some(r),
                        ..
                    } = e
                    {
                        trips.push(r);
                    }
                });
            }
            Err(r) => assert_eq!(r.reason, RefusalReason::RampShedding),
        }
        t += ms(5);
    }
    (b.state(t), admitted, trips)
}

#[test]
fn the_ramp_rides_out_failures_the_learned_rate_explains() {
    // Normal 5%: the ramp's admitted calls fail at 5% too (one in twenty), and it closes.
    let mut b = Breaker::new(ramped());
    let start = into_ramp(&mut b, 50);
    let (state, admitted, trips) = ride(&mut b, start, |i| i % 20 == 7);
    assert!(admitted > 100, "{admitted}");
    assert_eq!((state, trips), (State::Closed, vec![]));
}

#[test]
fn the_ramp_withdraws_on_failures_beyond_the_learned_rate() {
    // Normal 5%; the ramp's calls fail at 50%. Eleven failures in the first 22 admitted calls
    // have a chance of about 1e-9 under 5%: the ramp re-opens there, with the grown break.
    let mut b = Breaker::new(ramped());
    let start = into_ramp(&mut b, 50);
    let (state, admitted, trips) = ride(&mut b, start, |i| i % 2 == 1);
    assert_eq!(state, State::Open);
    assert_eq!(trips, vec![TripReason::RampFailure]);
    assert!((15..=30).contains(&admitted), "{admitted} admitted");
}

#[test]
fn with_a_normal_failure_rate_of_zero_one_ramp_failure_reopens() {
    let mut b = Breaker::new(ramped());
    let start = into_ramp(&mut b, 0);
    let (state, admitted, trips) = ride(&mut b, start, |i| i == 3);
    assert_eq!((state, admitted), (State::Open, 4));
    assert_eq!(trips, vec![TripReason::RampFailure]);
}

/// Learns `per_mille` from 3000 calls, trips with an outage and waits out the first break:
/// the breaker is half-open at the returned time.
fn into_half_open(b: &mut Breaker, per_mille: u64) -> Instant {
    let t = learned(b, per_mille, 3000);
    let (n, _) = failures_to_trip(b, t);
    let after = t + ms(100 * u64::from(n)) + secs(16);
    assert_eq!(b.state(after), State::HalfOpen);
    after
}

/// Runs one probe at `t` with `outcome`; returns the state after it and why it opened, if it did.
fn probe(b: &mut Breaker, t: Instant, outcome: Outcome) -> (State, Option<TripReason>) {
    let p = b.try_acquire(t).expect("half-open admits a probe");
    let mut reason = None;
    b.on_outcome(t + ms(10), p, outcome, &mut |e| {
        if let Event::StateChanged {
            to: State::Open,
            reason: r,
            ..
        } = e
        {
            reason = r;
        }
    });
    (b.state(t + ms(10)), reason)
}

#[test]
fn a_probe_failing_at_the_learned_rate_does_not_reopen() {
    // Normal 5%: one failed probe is what the dependency does one call in twenty; the next two
    // probes succeed and close the breaker, with no doubled break in between.
    let mut b = Breaker::new(defaults());
    let t = into_half_open(&mut b, 50);
    assert_eq!(
        probe(&mut b, t, Outcome::Transient),
        (State::HalfOpen, None)
    );
    assert_eq!(
        probe(&mut b, t + ms(20), Outcome::Success),
        (State::HalfOpen, None)
    );
    assert_eq!(
        probe(&mut b, t + ms(40), Outcome::Success),
        (State::Closed, None)
    );
}

#[test]
fn a_dependency_still_down_reopens_within_the_learned_run() {
    // Normal 5%: seven failures in a row have a chance under 1e-8 (0.05^7 = 8e-10, 0.05^6 =
    // 1.6e-8 is not enough), so the seventh failed probe re-opens, as the consecutive rule
    // would trip on the seventh failure while closed.
    let mut b = Breaker::new(defaults());
    let t = into_half_open(&mut b, 50);
    for i in 1..=6u64 {
        assert_eq!(
            probe(&mut b, t + ms(20 * i), Outcome::Transient),
            (State::HalfOpen, None),
            "failed probe {i}"
        );
    }
    assert_eq!(
        probe(&mut b, t + ms(140), Outcome::Transient),
        (State::Open, Some(TripReason::ProbeFailed))
    );
}

#[test]
fn the_failed_probes_of_a_long_outage_are_not_learned_as_normal() {
    // Normal 5%, then an outage through three half-open periods: each re-opens on its seventh
    // failed probe, and the rate they are judged against stays the one learned before the
    // outage (a baseline of an hour, so that nothing ages out meanwhile).
    let settings = BreakerSettings::builder("noisy")
        .jitter(false)
        .baseline_window(Some(secs(3600)))
        .build()
        .unwrap();
    let mut b = Breaker::new(settings);
    let mut t = into_half_open(&mut b, 50);
    let normal = b.normal_failure_rate(t);
    assert!(normal.is_some());
    for round in 0..3 {
        let mut failed = 0;
        loop {
            failed += 1;
            let (state, reason) = probe(&mut b, t, Outcome::Transient);
            t += ms(20);
            if state == State::Open {
                assert_eq!(reason, Some(TripReason::ProbeFailed));
                break;
            }
        }
        assert_eq!(failed, 7, "half-open period {round}");
        assert_eq!(b.normal_failure_rate(t), normal, "after period {round}");
        while b.state(t) != State::HalfOpen {
            t += secs(1);
        }
    }
}

#[test]
fn probe_failures_beyond_the_learned_rate_reopen_between_successes() {
    // Normal 5%, probes failing half the time, twenty successful probes to close: the failures
    // count across the successes between them, and re-open before the twentieth success.
    let settings = BreakerSettings::builder("noisy")
        .jitter(false)
        .probe_successes(20)
        .build()
        .unwrap();
    let mut b = Breaker::new(settings);
    let t = into_half_open(&mut b, 50);
    let mut opened = None;
    for i in 0..40u64 {
        let outcome = if i % 2 == 0 {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        let (state, reason) = probe(&mut b, t + ms(20 * i), outcome);
        if state != State::HalfOpen {
            assert_eq!(
                (state, reason),
                (State::Open, Some(TripReason::ProbeFailed))
            );
            opened = Some(i + 1);
            break;
        }
    }
    let probes = opened.expect("half the probes failing re-opens");
    assert!(
        (10..=30).contains(&probes),
        "re-opened after {probes} probes"
    );
}

#[test]
fn with_a_normal_failure_rate_of_zero_one_failed_probe_reopens() {
    let mut b = Breaker::new(defaults());
    let t = into_half_open(&mut b, 0);
    assert_eq!(
        probe(&mut b, t, Outcome::Transient),
        (State::Open, Some(TripReason::ProbeFailed))
    );
}

#[test]
fn a_breaker_that_learns_nothing_reopens_on_one_failed_probe() {
    // No statistics: the documents' rule, whatever the dependency did before.
    let settings = BreakerSettings::builder("cold")
        .jitter(false)
        .failure_rate(None)
        .slow_calls(None)
        .build()
        .unwrap();
    let mut b = Breaker::new(settings);
    let t = into_half_open(&mut b, 50);
    assert_eq!(
        probe(&mut b, t, Outcome::Transient),
        (State::Open, Some(TripReason::ProbeFailed))
    );
}

#[test]
fn the_shared_breaker_judges_noise_exactly_as_the_single_threaded_one() {
    // The same outcome sequence through both forms: the same decisions, call by call.
    let settings = ramped();
    let local = Breaker::new(settings).with_seed(5);
    let shared = SharedBreaker::new(settings).with_seed(5);
    let mut rng = JitterRng::with_seed(11);
    let mut t = Instant::from_secs(1);
    let mut opens = 0;
    for i in 0..60_000u64 {
        // 5% failures, an outage from call 20,000 to 20,050, 50% failures from 40,000 to 41,000.
        let per_mille = match i {
            20_000..20_050 => 1000,
            40_000..41_000 => 500,
            _ => 50,
        };
        let fail = rng.up_to(999) < per_mille;
        let outcome = if fail {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        let a = local.try_acquire(t);
        let b = shared.try_acquire(t, None, &mut |_| {});
        assert_eq!(a.is_ok(), b.is_ok(), "call {i}");
        if let (Ok(a), Ok(b)) = (a, b) {
            local.on_outcome(t + ms(10), a, outcome, &mut |e| {
                if let Event::StateChanged {
                    to: State::Open, ..
                } = e
                {
                    opens += 1;
                }
            });
            shared.on_outcome(t + ms(10), b, outcome, &mut |_| {});
        }
        assert_eq!(local.state(t), shared.state(t), "call {i}");
        t += ms(20);
    }
    assert!(opens >= 2, "the outage and the spike open it: {opens}");
}

/// Runs one call whose only attempt takes `latency` with the call's `deadline`; an attempt
/// that outlives its attempt deadline is reported as timed out at that deadline, as an adapter
/// does. Returns the time the call ended.
fn call_with_deadline(
    parts: &Parts<Breaker>,
    settings: &CallSettings,
    now: Instant,
    deadline: Duration,
    latency: Duration,
) -> Instant {
    let mut call = Call::begin(settings, now).with_deadline(now + deadline);
    let mut t = now;
    loop {
        match call.poll(parts, t, &mut |_| {}) {
            Step::Attempt(permit) => {
                let cut = call.attempt_deadline();
                let (end, outcome) = match cut {
                    Some(cut) if cut < t + latency => (cut, Outcome::TimedOut),
                    _ => (t + latency, Outcome::Success),
                };
                t = end;
                call.complete(parts, permit, t, outcome, &mut |_| {});
            }
            Step::Wait(d) => t += d,
            Step::Reject(r) => {
                t += r.pause;
            }
            Step::Done(_) => return t,
        }
    }
}

fn one_attempt(timeout: Duration) -> CallSettings {
    CallSettings::builder()
        .max_attempts(1)
        .attempt_timeout(Some(timeout))
        .build()
        .unwrap()
}

/// A default breaker that has seen 30 calls answered in 20 ms, and calls of one attempt with a
/// 10 s attempt timeout: the deadline, not the attempt timeout, is what can cut them.
fn warm_at_20ms() -> (Parts<Breaker>, CallSettings, Instant) {
    let parts = Parts::new().breaker(Breaker::new(defaults()));
    let settings = one_attempt(secs(10));
    let mut t = Instant::from_secs(1);
    for _ in 0..30 {
        t = call_with_deadline(&parts, &settings, t, secs(1), ms(20));
    }
    (parts, settings, t)
}

#[test]
fn a_callers_short_deadline_cannot_open_the_breaker() {
    // A healthy 20 ms dependency, and callers asking for answers within 5 ms: their attempts
    // are cut by their own deadlines, which says nothing about the dependency.
    let (parts, settings, mut t) = warm_at_20ms();
    for _ in 0..50 {
        t = call_with_deadline(&parts, &settings, t, ms(5), ms(20));
    }
    assert_eq!(parts.breaker.as_ref().unwrap().state(t), State::Closed);
    assert_eq!(
        parts
            .breaker
            .as_ref()
            .unwrap()
            .snapshot(t)
            .consecutive_failures,
        0
    );
    assert_eq!(
        parts.breaker.as_ref().unwrap().snapshot(t).window_failures,
        0
    );
}

#[test]
fn an_attempt_the_deadline_cut_after_it_was_already_slow_still_counts() {
    // Learned median 20 ms, slow from 3x (at most 67.5 ms as the histogram reads it): an
    // attempt still running at a 500 ms deadline was slow before the deadline cut it.
    let (parts, settings, mut t) = warm_at_20ms();
    for _ in 0..5 {
        t = call_with_deadline(&parts, &settings, t, ms(500), secs(2));
    }
    assert_eq!(parts.breaker.as_ref().unwrap().state(t), State::Open);
}

#[test]
fn an_attempt_cut_by_its_own_timeout_is_a_failure_whatever_the_deadline() {
    // The attempt timeout (5 ms) cuts first, well inside the 1 s deadline: a timeout.
    let parts = Parts::new().breaker(Breaker::new(defaults()));
    let settings = one_attempt(ms(5));
    let mut t = Instant::from_secs(1);
    for _ in 0..5 {
        t = call_with_deadline(&parts, &settings, t, secs(1), ms(20));
    }
    assert_eq!(parts.breaker.as_ref().unwrap().state(t), State::Open);
}

#[test]
fn a_microsecond_dependency_whose_probes_pay_for_a_fresh_connection_closes_after_one_break() {
    // 200 calls at 20 us teach a 20 us median (slow from 3x: about 60 us); an outage trips the
    // breaker; after the break every probe answers in 250 us, as a fresh connection does. One
    // probe is one sample: the probes succeed, so the breaker closes after the first break
    // (it used to read each slow probe as a failed recovery: 411 s of doubled breaks).
    let mut b = Breaker::new(BreakerSettings::defaults("loopback"));
    let mut t = Instant::from_secs(1);
    for _ in 0..200 {
        let p = b.try_acquire(t).unwrap();
        b.on_outcome(
            t + Duration::from_micros(20),
            p,
            Outcome::Success,
            &mut |_| {},
        );
        t += ms(1);
    }
    let (_, reason) = failures_to_trip(&mut b, t);
    assert_eq!(reason, Some(TripReason::ConsecutiveFailures));
    let mut opens = 0;
    let start = t;
    while b.state(t) != State::Closed && t < start + secs(600) {
        if let Ok(p) = b.try_acquire(t) {
            b.on_outcome(
                t + Duration::from_micros(250),
                p,
                Outcome::Success,
                &mut |e| {
                    if let Event::StateChanged {
                        to: State::Open, ..
                    } = e
                    {
                        opens += 1;
                    }
                },
            );
        }
        t += ms(100);
    }
    assert_eq!(b.state(t), State::Closed);
    assert_eq!(opens, 0, "no slow probe re-opened it");
    assert!(t - start <= secs(16), "closed {} after the trip", t - start);
    // Once closed, calls at the learned 20 us keep it closed.
    for _ in 0..100 {
        let p = b.try_acquire(t).unwrap();
        b.on_outcome(
            t + Duration::from_micros(20),
            p,
            Outcome::Success,
            &mut |_| {},
        );
        t += ms(1);
    }
    assert_eq!(b.state(t), State::Closed);
}

#[test]
fn a_dependency_still_slow_after_its_probes_trips_the_slow_call_rule_again() {
    // The other side: a brownout (10x) that outlasts the break. The probes answer, slowly, and
    // close the breaker; the slow-call rule then judges a window of calls and opens it again.
    let settings = BreakerSettings::builder("brownout")
        .jitter(false)
        .trip_window(secs(5))
        .build()
        .unwrap();
    let b = Breaker::new(settings);
    let mut t = Instant::from_secs(1);
    for _ in 0..600 {
        let p = b.try_acquire(t).unwrap();
        b.on_outcome(t + ms(20), p, Outcome::Success, &mut |_| {});
        t += ms(100);
    }
    let mut reasons = Vec::new();
    for _ in 0..3000 {
        if let Ok(p) = b.try_acquire(t) {
            b.on_outcome(t + ms(200), p, Outcome::Success, &mut |e| {
                if let Event::StateChanged {
                    to: State::Open,
                    reason: Some(r),
                    ..
                } = e
                {
                    reasons.push(r);
                }
            });
        }
        t += ms(100);
    }
    assert!(reasons.len() >= 2, "{reasons:?}");
    assert!(
        reasons.iter().all(|r| *r == TripReason::SlowCalls),
        "{reasons:?}"
    );
}

#[test]
fn a_dependency_that_hangs_trips_a_breaker_that_knows_no_slow_call_when_deadlines_cut_every_attempt(
) {
    // Every caller's deadline (1 s) is shorter than the attempt timeout (10 s), so the deadline
    // cuts each attempt to a hanging dependency. With nothing learned (a cold default breaker,
    // a consecutive-only one that keeps no statistics) a slow call is the ceiling floor (50 ms):
    // a second without an answer is evidence, and five of them trip the breaker.
    let settings = one_attempt(secs(10));
    for breaker in [
        Breaker::new(defaults()),
        Breaker::new(BreakerSettings::consecutive_only("hangs", 5).unwrap()),
    ] {
        let parts = Parts::new().breaker(breaker);
        let mut t = Instant::from_secs(1);
        for _ in 0..5 {
            t = call_with_deadline(&parts, &settings, t, secs(1), secs(3600));
        }
        assert_eq!(parts.breaker.as_ref().unwrap().state(t), State::Open);
    }
}

#[test]
fn with_nothing_learned_a_deadline_cut_shorter_than_the_ceiling_floor_is_the_callers_cancellation()
{
    // A cold breaker and callers asking for answers within 5 ms (or 49 ms, just under the 50 ms
    // floor) of a dependency that answers in 200 ms: their own deadlines cut every attempt,
    // which says nothing about the dependency. At the floor the cut is evidence.
    let settings = one_attempt(secs(10));
    for (deadline, opens) in [(ms(5), false), (ms(49), false), (ms(50), true)] {
        let parts = Parts::new().breaker(Breaker::new(defaults()));
        let mut t = Instant::from_secs(1);
        for _ in 0..20 {
            t = call_with_deadline(&parts, &settings, t, deadline, ms(200));
        }
        assert_eq!(
            parts.breaker.as_ref().unwrap().state(t) == State::Open,
            opens,
            "deadline {deadline}"
        );
    }
}
