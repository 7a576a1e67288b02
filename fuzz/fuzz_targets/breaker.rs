//! Arbitrary sequences of breaker and budget operations, fed to the `&mut` forms and the shared
//! forms in lockstep, over a clock that jumps, steps back and is set to anything.
//!
//! After every step: nothing panicked; both forms gave the same decisions, the same events (as
//! Debug strings) and the same snapshots; probes in flight stay within the limit (the snapshot's
//! count and the harness's own count of probe permits held in the current period); the break
//! lies within [first / 2, max]; the ramp admits, over the offers of one Recovering period, within
//! one call of the sum of p read before each offer; the budget never holds more than its capacity.
//! On a sane clock (see `stormguard_fuzz::Clock::sane`) also: an open breaker's `retry_after` is
//! at most the break and asking again at its end is admitted; a refused withdrawal's `retry_after`
//! is when one succeeds; withdrawals never exceed what was funded (the initial capacity, the
//! fraction of each success, the floor over the time that passed; asserted while no reading lay
//! 2^31 ms or more behind the latest, see `stormguard_fuzz::Clock::budget_exact`); and at the end,
//! with every permit handed back and every break over, an attempt is admitted: no probe slot
//! leaked.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use stormguard_core::{Duration, Instant, RefusalReason, State};
use stormguard_fuzz::{
    assert_no_leak, period_changed, BreakerKnobs, BudgetKnobs, Clock, Log, Out, Pair, Permits,
    TimeStep,
};

#[derive(Arbitrary, Debug)]
struct Input {
    knobs: BreakerKnobs,
    budget: BudgetKnobs,
    start: u64,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Acquire {
        timeout_ms: Option<u16>,
    },
    Complete {
        which: u8,
        outcome: Out,
        latency_us: u32,
    },
    Release {
        which: u8,
    },
    Forget {
        which: u8,
    },
    Time(TimeStep),
    Isolate,
    Reset,
    HandleTimeout,
    /// Jump to the next timed transition the breaker announces, and realise it.
    NextTimeout,
    Withdraw,
    Deposit,
    BudgetOutcome(Out),
}

/// What the ramp admitted over the current Recovering period, in thousandths.
#[derive(Default)]
struct RampLedger {
    sum_p: u64,
    admitted: u64,
}

fuzz_target!(|input: Input| {
    let Some(settings) = input.knobs.settings() else {
        return;
    };
    let budget = input.budget.settings();
    let mut pair = Pair::new(settings, input.knobs.seed, budget);
    let mut clock = Clock::new(Instant::from_nanos(input.start));
    let mut permits = Permits::default();
    let mut ramp = RampLedger::default();
    let mut longest_hold = Duration::ZERO;
    let mut withdrawn: u64 = 0;
    let mut funded: u64 = u64::from(budget.capacity_micro());
    let mut isolated = false;

    for op in input.ops.iter().take(256) {
        let mut log = Log::new();
        let now = clock.now();
        match *op {
            Op::Acquire { timeout_ms } => {
                let timeout = timeout_ms.map(|ms| Duration::from_millis(u64::from(ms)));
                longest_hold = longest_hold.max(timeout.unwrap_or(Duration::ZERO));
                let before = pair.local.state(now);
                let p = pair.local.ramp_fraction(now);
                assert_eq!(p.is_some(), before == State::Recovering);
                let result = pair.acquire(now, timeout, &mut log);
                if period_changed(&log) {
                    permits.new_period();
                    ramp = RampLedger::default();
                }
                if let Some(p) = p {
                    // A Recovering read means p < 1, so the offer is the ramp's to decide.
                    assert!(
                        !period_changed(&log),
                        "a recovering offer changed period: {log:?}"
                    );
                    ramp.sum_p += u64::from(p.ppm() / 1000);
                    if result.is_ok() {
                        ramp.admitted += 1;
                    }
                    let admitted = ramp.admitted * 1000;
                    assert!(
                        admitted <= ramp.sum_p + 1000 && admitted + 1000 > ramp.sum_p,
                        "ramp admitted {} for a sum of p of {}",
                        ramp.admitted,
                        ramp.sum_p as f64 / 1000.0
                    );
                }
                match result {
                    Ok(granted) => {
                        if isolated {
                            panic!("an isolated breaker admitted a call");
                        }
                        let held = permits.granted(granted);
                        assert!(
                            held <= usize::from(settings.half_open_probes()),
                            "{held} probes held, limit {}",
                            settings.half_open_probes()
                        );
                        if permits.held.len() > Permits::MAX {
                            let p = permits.take(0).expect("not empty");
                            pair.release(p);
                        }
                    }
                    Err(r) => match r.reason {
                        RefusalReason::Isolated => {
                            assert!(isolated);
                            assert_eq!(r.retry_after, Duration::MAX);
                        }
                        RefusalReason::HalfOpenFull => {
                            assert_eq!(
                                pair.local.snapshot(now).probes_in_flight,
                                settings.half_open_probes()
                            );
                        }
                        RefusalReason::BreakerOpen => {
                            assert!(!r.retry_after.is_zero());
                            if clock.sane() && clock.now() == clock.latest() {
                                // Not a lie: the wait is no longer than the break served (plus
                                // the part of a millisecond the break's end is rounded up by:
                                // marks are whole milliseconds, never served short), and asking
                                // again at its end is admitted, not a moment before.
                                let served = pair.local.snapshot(now).break_duration;
                                let ms = Duration::from_millis(1);
                                assert!(
                                    served.is_some_and(|b| r.retry_after < b + ms),
                                    "retry_after {} for a break of {served:?}",
                                    r.retry_after
                                );
                                assert_eq!(pair.local.check(now + r.retry_after), Ok(()));
                                let early = now + r.retry_after - Duration::from_nanos(1);
                                assert!(pair.local.check(early).is_err());
                            }
                        }
                        RefusalReason::RampShedding => {
                            assert_eq!(before, State::Recovering);
                        }
                        other => panic!("a breaker refused for {other:?}"),
                    },
                }
            }
            Op::Complete {
                which,
                outcome,
                latency_us,
            } => {
                if let Some(p) = permits.take(which) {
                    clock.advance(Duration::from_micros(u64::from(latency_us)));
                    let o = outcome.outcome();
                    pair.outcome(clock.now(), p, o, &mut log);
                    pair.budget_outcome(clock.now(), o);
                    if o == stormguard_core::Outcome::Success {
                        funded += u64::from(budget.fraction().ppm());
                    }
                    if period_changed(&log) {
                        permits.new_period();
                        ramp = RampLedger::default();
                    }
                }
            }
            Op::Release { which } => {
                if let Some(p) = permits.take(which) {
                    pair.release(p);
                }
            }
            Op::Forget { which } => {
                // Dropped without an outcome or a release: only time gives a probe slot back.
                let _ = permits.take(which);
            }
            Op::Time(step) => clock.step(step),
            Op::Isolate => {
                pair.isolate(now, &mut log);
                permits.new_period();
                ramp = RampLedger::default();
                isolated = true;
                assert_eq!(pair.local.state(now), State::Isolated);
            }
            Op::Reset => {
                pair.reset(now, &mut log);
                permits.new_period();
                ramp = RampLedger::default();
                isolated = false;
                assert_eq!(pair.local.state(now), State::Closed);
            }
            Op::HandleTimeout => {
                pair.handle_timeout(now, &mut log);
                if period_changed(&log) {
                    permits.new_period();
                    ramp = RampLedger::default();
                }
            }
            Op::NextTimeout => {
                if let Some(at) = pair.local.poll_timeout(now) {
                    assert!(at >= now);
                    clock.set(at);
                    pair.handle_timeout(at, &mut log);
                    if period_changed(&log) {
                        permits.new_period();
                        ramp = RampLedger::default();
                    }
                    // Handled twice, nothing more happens.
                    let mut again = Log::new();
                    pair.handle_timeout(at, &mut again);
                    assert!(again.is_empty(), "a second handle_timeout did {again:?}");
                }
            }
            Op::Withdraw => match pair.withdraw(now) {
                Ok(()) => withdrawn += 1_000_000,
                Err(r) => {
                    assert_eq!(r.reason, RefusalReason::BudgetExhausted);
                    if budget.floor_per_second_milli() == 0 {
                        assert_eq!(r.retry_after, Duration::MAX);
                    } else if clock.sane() {
                        // Not a lie: asking again after `retry_after` is funded.
                        let later = pair.budget.clone();
                        assert_eq!(later.try_withdraw(now + r.retry_after), Ok(()));
                    }
                }
            },
            Op::Deposit => {
                pair.deposit(now);
                funded += u64::from(budget.fraction().ppm());
            }
            Op::BudgetOutcome(o) => {
                let o = o.outcome();
                pair.budget_outcome(now, o);
                if o == stormguard_core::Outcome::Success {
                    funded += u64::from(budget.fraction().ppm());
                }
            }
        }
        let now = clock.now();
        pair.assert_agree(now);
        pair.assert_bounds(now);
        if isolated {
            assert_eq!(pair.local.state(now), State::Isolated);
        }
        if clock.sane() && clock.budget_exact() {
            let floor = clock
                .forward_ms()
                .saturating_mul(u64::from(budget.floor_per_second_milli()));
            assert!(
                withdrawn <= funded.saturating_add(floor),
                "withdrew {withdrawn} millionths, funded {funded} + floor {floor}"
            );
        }
    }

    if clock.sane() {
        assert_no_leak(&mut pair, &mut clock, &mut permits, longest_hold);
    }
});
