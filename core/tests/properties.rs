//! Property tests over random sequences of calls, outcomes and time steps. Failures found are
//! kept in `properties.proptest-regressions` beside this file and replayed first.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use proptest::prelude::*;
use stormguard_core::{
    Breaker, BreakerSettings, Budget, BudgetSettings, Call, CallSettings, Duration, Event,
    Finished, Instant, Outcome, Parts, Permit, Recovery, RefusalReason, State, Step,
};

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        timeout_ms: Option<u16>,
    },
    Complete {
        which: usize,
        outcome: u8,
        latency_ms: u16,
    },
    Drop {
        which: usize,
    },
    Release {
        which: usize,
    },
    Advance {
        ms: u32,
    },
    Rewind {
        ms: u16,
    },
    Isolate,
    Reset,
    HandleTimeout,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => proptest::option::of(1u16..5000).prop_map(|timeout_ms| Op::Acquire { timeout_ms }),
        6 => (any::<usize>(), 0u8..6, 0u16..3000)
            .prop_map(|(which, outcome, latency_ms)| Op::Complete { which, outcome, latency_ms }),
        1 => any::<usize>().prop_map(|which| Op::Drop { which }),
        1 => any::<usize>().prop_map(|which| Op::Release { which }),
        4 => (0u32..200_000).prop_map(|ms| Op::Advance { ms }),
        1 => (0u16..5000).prop_map(|ms| Op::Rewind { ms }),
        1 => Just(Op::Isolate),
        1 => Just(Op::Reset),
        1 => Just(Op::HandleTimeout),
    ]
}

fn outcome(n: u8) -> Outcome {
    match n {
        0 => Outcome::Success,
        1 => Outcome::Transient,
        2 => Outcome::TimedOut,
        3 => Outcome::Throttled { retry_after: None },
        4 => Outcome::Permanent,
        _ => Outcome::Cancelled,
    }
}

fn settings(probes: u32, ramp: bool, consecutive: u32) -> BreakerSettings {
    BreakerSettings::builder("prop")
        .consecutive_failures(consecutive)
        .half_open_probes(probes)
        .minimum_calls(5)
        .recovery(if ramp {
            Some(Recovery::over(0.25))
        } else {
            None
        })
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 8 } else { 256 }, ..ProptestConfig::default() })]

    /// Probes in flight never exceed the limit, the break stays within [first/2, max], the ramp
    /// never admits more than the sum of p plus one, and nothing panics.
    #[test]
    fn breaker_invariants_hold_for_any_sequence(
        probes in 1u32..4,
        ramp in any::<bool>(),
        consecutive in 1u32..6,
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let s = settings(probes, ramp, consecutive);
        let b = Breaker::new(s).with_seed(seed);
        let mut now = Instant::from_secs(1000);
        let mut permits: Vec<Permit> = Vec::new();
        // Probe permits granted in the current half-open period and not yet returned.
        let mut probes_out: usize = 0;
        let mut ramp_sum_p = 0.0f64;
        let mut ramp_admitted = 0u32;
        let mut was_recovering = false;
        for op in ops {
            let mut period_changed = false;
            let mut sink = |e: Event<'_>| {
                if matches!(e, Event::StateChanged { .. } | Event::ProbesReclaimed { .. }) {
                    period_changed = true;
                }
            };
            match op {
                Op::Acquire { timeout_ms } => {
                    let recovering = b.state(now) == State::Recovering;
                    if recovering {
                        if !was_recovering {
                            ramp_sum_p = 0.0;
                            ramp_admitted = 0;
                        }
                        ramp_sum_p += b.ramp_fraction(now).unwrap().as_f64();
                    }
                    let r = b.try_acquire_with(now, timeout_ms.map(|m| Duration::from_millis(u64::from(m))), &mut sink);
                    if period_changed {
                        probes_out = 0;
                    }
                    if let Ok(p) = r {
                        if p.is_probe() {
                            probes_out += 1;
                            prop_assert!(probes_out <= probes as usize, "{probes_out} probes out, limit {probes}");
                        }
                        if recovering && b.state(now) != State::Open {
                            ramp_admitted += 1;
                        }
                        permits.push(p);
                    }
                    if recovering {
                        prop_assert!(f64::from(ramp_admitted) <= ramp_sum_p + 1.0 + 1e-9,
                            "ramp admitted {ramp_admitted} for a sum of p of {ramp_sum_p}");
                    }
                    was_recovering = recovering;
                }
                Op::Complete { which, outcome: o, latency_ms } if !permits.is_empty() => {
                    let p = permits.swap_remove(which % permits.len());
                    let probe = p.is_probe();
                    b.on_outcome(now + Duration::from_millis(u64::from(latency_ms)), p, outcome(o), &mut sink);
                    if probe && probes_out > 0 {
                        probes_out -= 1;
                    }
                    if period_changed {
                        probes_out = 0;
                    }
                }
                Op::Drop { which } if !permits.is_empty() => {
                    drop(permits.swap_remove(which % permits.len()));
                }
                Op::Release { which } if !permits.is_empty() => {
                    let p = permits.swap_remove(which % permits.len());
                    if p.is_probe() && probes_out > 0 {
                        probes_out -= 1;
                    }
                    b.release(p);
                }
                Op::Advance { ms } => now += Duration::from_millis(u64::from(ms)),
                Op::Rewind { ms } => now = now - Duration::from_millis(u64::from(ms)),
                Op::Isolate => { b.isolate(now, &mut sink); probes_out = 0; }
                Op::Reset => { b.reset(now, &mut sink); probes_out = 0; }
                Op::HandleTimeout => {
                    b.handle_timeout(now, &mut sink);
                    if period_changed { probes_out = 0; }
                }
                _ => {}
            }
            let snap = b.snapshot(now);
            prop_assert!(u32::from(snap.probes_in_flight) <= probes);
            if let Some(brk) = snap.break_duration {
                let first = s.break_duration();
                prop_assert!(brk >= Duration::from_nanos(first.as_nanos() / 2) && brk <= s.max_break(),
                    "break {brk} outside [{}, {}]", Duration::from_nanos(first.as_nanos() / 2), s.max_break());
            }
        }
    }
}

/// Retries never exceed what the budget funds: its initial tokens (a full bucket, ten seconds of
/// the floor, at least one), the fraction of each success, and the floor over the time that
/// passed. The budgets are small and the outcomes mostly failures, so the bound is reached: the
/// run checks that budgets did refuse retries, or the property would hold for no budget at all.
#[test]
fn retries_never_exceed_what_the_budget_funds() {
    use proptest::test_runner::{Config, TestRunner};
    use std::sync::atomic::{AtomicU64, Ordering};

    let refusals = AtomicU64::new(0);
    let cases = if cfg!(miri) { 8 } else { 256 };
    // `source_file` keeps failures in this file's regressions file, as `proptest!` does.
    let mut runner = TestRunner::new(Config {
        cases,
        source_file: Some(file!()),
        ..Config::default()
    });
    let inputs = (
        // Outcome (success, transient or timed out, twice as likely as the rest: throttled,
        // permanent, cancelled), latency (ms), gap before the next call (ms).
        proptest::collection::vec((0u8..9, 0u16..200, 0u32..300), 1..300),
        0u32..=500_000,                                               // fraction, ppm
        prop_oneof![Just(0u32), Just(100), Just(1_000), Just(3_000)], // floor, milli per second
        any::<u64>(),
    );
    let outcome_of = |n: u8| match n {
        0 | 6 => Outcome::Success,
        1 | 7 => Outcome::Transient,
        2 | 8 => Outcome::TimedOut,
        n => outcome(n),
    };
    runner
        .run(&inputs, |(calls, fraction_ppm, floor_milli, seed)| {
            let budget = BudgetSettings::builder("prop")
                .fraction_ppm(fraction_ppm)
                .floor_per_second_milli(floor_milli)
                .build()
                .unwrap();
            let parts = Parts::new()
                .named(stormguard_core::Name::new("prop"))
                .budget(Budget::new(budget));
            let settings = CallSettings::builder()
                .seed(seed)
                .max_attempts(4)
                .build()
                .unwrap();
            let start = Instant::from_secs(10);
            let mut now = start;
            let mut successes = 0u64;
            let mut retries = 0u64;
            let mut next = calls.iter().cycle();
            for &(_, _, gap) in &calls {
                now += Duration::from_millis(u64::from(gap));
                let mut call = Call::begin(&settings, now);
                let deadline = call.deadline().unwrap();
                loop {
                    match call.poll(&parts, now, &mut |_| {}) {
                        Step::Attempt(p) => {
                            if call.attempts() > 1 {
                                retries += 1;
                            }
                            let &(o, latency, _) = next.next().unwrap();
                            now += Duration::from_millis(u64::from(latency));
                            let o = outcome_of(o);
                            if o == Outcome::Success {
                                successes += 1;
                            }
                            call.complete(&parts, p, now, o, &mut |_| {});
                        }
                        Step::Wait(d) => {
                            prop_assert!(
                                now + d < deadline,
                                "a wait past the deadline was started"
                            );
                            now += d;
                        }
                        Step::Reject(r) => {
                            if r.reason == RefusalReason::BudgetExhausted {
                                refusals.fetch_add(1, Ordering::Relaxed);
                            }
                            now += r.pause;
                            break;
                        }
                        Step::Done(f) => {
                            if let Finished::DeadlineExceeded { .. } = f {
                                prop_assert!(now <= deadline + Duration::from_secs(3));
                            }
                            break;
                        }
                    }
                }
            }
            // In millionths of a retry, as the budget counts (elapsed time rounded up to whole
            // milliseconds, the floor's unit): no other slack.
            let elapsed_ms = u128::from((now - start).as_nanos().div_ceil(1_000_000));
            let initial = u128::from(budget.capacity_micro());
            let earned = u128::from(fraction_ppm) * u128::from(successes);
            let accrued = u128::from(floor_milli) * elapsed_ms;
            let funded = initial + earned + accrued;
            prop_assert!(
                u128::from(retries) * 1_000_000 <= funded,
                "{retries} retries, {funded} millionths funded"
            );
            Ok(())
        })
        .unwrap();
    assert!(
        refusals.load(Ordering::Relaxed) > 0,
        "no budget ever refused a retry: the property was never put to the test"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 8 } else { 256 }, ..ProptestConfig::default() })]

    /// Once recovering, over any run of offers, outcomes and time steps, the ramp admits no
    /// more than the sum of p plus one.
    #[test]
    fn ramp_admissions_never_exceed_the_sum_of_p_plus_one(
        seed in any::<u64>(),
        steps in proptest::collection::vec((0u32..400, 0u8..6, 0u16..300), 1..400),
    ) {
        let s = BreakerSettings::builder("ramp")
            .recovery(Some(Recovery::over(0.25)))
            .build()
            .unwrap();
        let b = Breaker::new(s).with_seed(seed);
        let mut now = Instant::from_secs(100);
        // A baseline at 10 ms, so slow calls can halve the ramp.
        for _ in 0..30 {
            let p = b.try_acquire(now).unwrap();
            b.on_outcome(now + Duration::from_millis(10), p, Outcome::Success, &mut |_| {});
        }
        for _ in 0..5 {
            let p = b.try_acquire(now).unwrap();
            b.on_outcome(now, p, Outcome::Transient, &mut |_| {});
        }
        now += Duration::from_secs(16);
        for _ in 0..2 {
            let p = b.try_acquire(now).unwrap();
            b.on_outcome(now + Duration::from_millis(10), p, Outcome::Success, &mut |_| {});
        }
        now += Duration::from_millis(10);
        prop_assert_eq!(b.state(now), State::Recovering);
        let mut sum_p = 0.0f64;
        let mut admitted = 0u32;
        for (gap_ms, o, latency_ms) in steps {
            now += Duration::from_micros(u64::from(gap_ms) * 100);
            if b.state(now) != State::Recovering {
                break;
            }
            sum_p += b.ramp_fraction(now).unwrap().as_f64();
            if let Ok(p) = b.try_acquire(now) {
                admitted += 1;
                b.on_outcome(now + Duration::from_millis(u64::from(latency_ms)), p, outcome(o), &mut |_| {});
            }
            prop_assert!(f64::from(admitted) <= sum_p + 1.0 + 1e-9, "admitted {} for a sum of p of {}", admitted, sum_p);
            prop_assert!(f64::from(admitted) + 1.0 + 1e-9 >= sum_p, "admitted {} for a sum of p of {}", admitted, sum_p);
        }
    }
}

/// A breaker over the default rules that has learned a normal failure rate of exactly
/// `per_mille / 1000` from 1000 outcomes at 10 a second, its failures spread evenly (never two
/// in a row below 50%, so the cold rule never trips while it learns). Returns the time after.
fn learned_at(per_mille: u64) -> (Breaker, Instant) {
    let b = Breaker::new(
        BreakerSettings::builder("noisy")
            .jitter(false)
            .build()
            .unwrap(),
    );
    let mut t = Instant::from_secs(1);
    for i in 0..1000u64 {
        let fail = (i * per_mille) % 1000 < per_mille && i < 999;
        let p = b.try_acquire(t).unwrap();
        let outcome = if fail {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        b.on_outcome(t + Duration::from_millis(10), p, outcome, &mut |_| {});
        t += Duration::from_millis(100);
    }
    (b, t)
}

/// Whether `b` opened on the outcome just reported: counts the opens into `trips`.
fn report(b: &mut Breaker, t: Instant, p: Permit, outcome: Outcome, trips: &mut u32) {
    b.on_outcome(t + Duration::from_millis(10), p, outcome, &mut |e| {
        if let Event::StateChanged {
            to: State::Open, ..
        } = e
        {
            *trips += 1;
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A dependency that is flaky but stable, at any rate up to 30%: once its rate is learned,
    /// the breaker trips on chance alone at most at the noise bound's rate (1e-8 per closed
    /// outcome): over 6000 outcomes, at most the one trip that ceil(6000 x 1e-8) allows.
    #[test]
    fn a_stationary_bernoulli_stream_trips_at_most_at_the_bounds_rate(
        per_mille in 0u64..=300,
        seed in any::<u64>(),
    ) {
        let (mut b, mut t) = learned_at(per_mille);
        let mut rng = stormguard_core::rng::JitterRng::with_seed(seed);
        let outcomes = 6000u64;
        let mut trips = 0;
        for _ in 0..outcomes {
            if let Ok(p) = b.try_acquire(t) {
                let outcome = if rng.up_to(999) < per_mille {
                    Outcome::Transient
                } else {
                    Outcome::Success
                };
                report(&mut b, t, p, outcome, &mut trips);
            }
            t += Duration::from_millis(33);
        }
        let allowed = outcomes.div_ceil(BreakerSettings::defaults("x").noise_bound());
        prop_assert!(u64::from(trips) <= allowed, "{trips} trips at {per_mille} per mille");
    }

    /// An outage after any learned rate up to 30%: every call fails, and the breaker opens
    /// within the run the snapshot said was needed, which is the shortest run whose chance
    /// under the learned rate is within the bound (at most 16, the one for 30%).
    #[test]
    fn an_all_failure_stream_trips_within_the_effective_count(per_mille in 0u64..=300) {
        let (mut b, mut t) = learned_at(per_mille);
        let needed = b.snapshot(t).consecutive_to_trip;
        prop_assert!((5..=16).contains(&needed), "{needed} at {per_mille} per mille");
        let mut trips = 0;
        let mut failures = 0;
        while trips == 0 && failures < 1000 {
            let p = b.try_acquire(t).unwrap();
            report(&mut b, t, p, Outcome::Transient, &mut trips);
            failures += 1;
            t += Duration::from_millis(33);
        }
        prop_assert_eq!(trips, 1);
        prop_assert!(failures <= needed, "{failures} failures, {needed} needed at {per_mille} per mille");
    }
}
