//! Arbitrary calls through the call driver, over the `&mut` breaker and budget and over the shared
//! ones in lockstep: arbitrary outcomes and latencies, throttling hints of any size, attempts
//! dropped without an outcome, cancellations during waits, early polls, and a clock that jumps,
//! steps back and is set to anything between and within calls.
//!
//! After every step: nothing panicked; both drivers asked for the same step and emitted the same
//! events; a call never waits past its deadline (a wait ends before it, a guarded pause ends by
//! it, an attempt's deadline is within it); the pause is at most `GUARD_PAUSE`; a call makes at
//! most `max_attempts` attempts; every call ends exactly once, as exactly one of succeeded,
//! failed, rejected, deadline exceeded or cancelled, and a rejection is handed out once and then
//! reported as done; a retry wait is at most the backoff cap. On a sane clock (see
//! `stormguard_fuzz::Clock::sane`) also: the retries started never exceed what the budget funded,
//! and at the end no probe slot has leaked.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use stormguard_core::{
    Backoff, Call, CallSettings, Duration, Finished, Instant, Jitter, Multiple, Outcome, Parts,
    Step, GUARD_PAUSE,
};
use stormguard_fuzz::{
    assert_no_leak, period_changed, sink, BreakerKnobs, BudgetKnobs, Clock, Log, Out, Pair,
    Permits, TimeStep,
};

#[derive(Arbitrary, Debug)]
struct Input {
    knobs: BreakerKnobs,
    budget: BudgetKnobs,
    call: CallKnobs,
    start: u64,
    calls: Vec<Script>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct CallKnobs {
    max_attempts: u8,
    deadline_ms: Option<u32>,
    attempt_timeout_ms: Option<u32>,
    base_us: u32,
    throttled_base_us: u32,
    factor_milli: u16,
    cap_ms: u32,
    jitter: u8,
    seed: u64,
}

impl CallKnobs {
    fn settings(&self) -> Option<CallSettings> {
        let backoff = Backoff::builder()
            .base(Duration::from_micros(u64::from(self.base_us)))
            .throttled_base(Duration::from_micros(u64::from(self.throttled_base_us)))
            .factor(Multiple::from_milli(1000 + u32::from(self.factor_milli)))
            .cap(Duration::from_millis(u64::from(self.cap_ms)))
            .jitter(match self.jitter % 3 {
                0 => Jitter::None,
                1 => Jitter::Full,
                _ => Jitter::Equal,
            })
            .build()
            .ok()?;
        CallSettings::builder()
            .max_attempts(1 + u32::from(self.max_attempts % 8))
            .deadline(
                self.deadline_ms
                    .map(|ms| Duration::from_millis(u64::from(ms))),
            )
            .attempt_timeout(
                self.attempt_timeout_ms
                    .map(|ms| Duration::from_millis(u64::from(ms))),
            )
            .backoff(backoff)
            .seed(self.seed)
            .build()
            .ok()
    }
}

/// One call: when it starts, an optional tighter deadline, and what happens to its attempts and
/// waits, in order (a script that runs out answers with successes).
#[derive(Arbitrary, Debug)]
struct Script {
    gap: TimeStep,
    tighten_ms: Option<u32>,
    attempts: Vec<Attempt>,
    waits: Vec<WaitFate>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Attempt {
    /// The attempt ends with this outcome after this latency.
    Ends(Out, u32),
    /// The clock steps (perhaps back) during the attempt, then it ends.
    Stepped(TimeStep, Out),
    /// The caller's future is dropped: the attempt never reports, and the driver is polled.
    Dropped,
    /// The caller gives the permit back (a drop guard) and cancels.
    Released,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum WaitFate {
    Sleep,
    /// Woken early by this fraction (in 256ths) of the wait, then polled.
    Early(u8),
    /// The clock steps during the wait.
    Stepped(TimeStep),
    Cancel,
}

/// How calls ended.
#[derive(Default, Debug)]
struct Tally {
    calls: u64,
    succeeded: u64,
    failed: u64,
    rejected: u64,
    deadline: u64,
    cancelled: u64,
}

fuzz_target!(|input: Input| {
    let Some(settings) = input.knobs.settings() else {
        return;
    };
    let Some(call_settings) = input.call.settings() else {
        return;
    };
    let budget = input.budget.settings();
    let mut pair = Pair::new(settings, input.knobs.seed, budget);
    let mut clock = Clock::new(Instant::from_nanos(input.start));
    let names = [*settings.name(), *budget.name()];
    let mut tally = Tally::default();
    let mut retries: u64 = 0;
    let mut funded: u64 = u64::from(budget.capacity_micro());
    let mut longest_hold = call_settings.attempt_timeout().unwrap_or(Duration::ZERO);
    // Only the period bookkeeping: attempts dropped without an outcome are not handed back, so
    // the leak check at the end proves that time reclaims their probe slots.
    let mut permits = Permits::default();

    for script in input.calls.iter().take(24) {
        clock.step(script.gap);
        let begin = clock.now();
        let mut a = Call::begin(&call_settings, begin);
        let mut b = Call::begin(&call_settings, begin);
        if let Some(ms) = script.tighten_ms {
            let d = begin + Duration::from_millis(u64::from(ms));
            a = a.with_deadline(d);
            b = b.with_deadline(d);
        }
        let deadline = a.deadline();
        assert_eq!(deadline, b.deadline());
        if let (Some(d), Some(set)) = (deadline, call_settings.deadline()) {
            assert!(d <= begin + set);
        }
        let mut attempts = script.attempts.iter();
        let mut waits = script.waits.iter();
        let mut ended: Option<Finished> = None;
        let mut rejection = None;
        tally.calls += 1;

        for _ in 0..64 {
            let now = clock.now();
            let (mut la, mut lb) = (Log::new(), Log::new());
            let sa = {
                let mut parts = Parts {
                    breaker: &mut pair.local,
                    budget: &mut pair.budget,
                };
                a.poll(&mut parts, now, &mut sink(&mut la, &names))
            };
            let sb = {
                let mut parts = Parts {
                    breaker: &pair.shared,
                    budget: &pair.shared_budget,
                };
                b.poll(&mut parts, now, &mut sink(&mut lb, &names))
            };
            assert_eq!(sa, sb, "the drivers disagree");
            assert_eq!(la, lb, "the drivers' events differ");
            if period_changed(&la) {
                permits.new_period();
            }
            assert!(a.attempts() <= call_settings.max_attempts());
            match sa {
                Step::Attempt(pa) => {
                    let Step::Attempt(pb) = sb else {
                        unreachable!()
                    };
                    if a.attempts() > 1 {
                        retries += 1;
                    }
                    let at = a.attempt_deadline();
                    assert_eq!(at, b.attempt_deadline());
                    if let (Some(at), Some(d)) = (at, deadline) {
                        assert!(at <= d, "attempt deadline {at} past the call's {d}");
                    }
                    if let Some(at) = at {
                        assert!(at > now || at == Instant::MAX);
                    }
                    let mut held = Some((pa, pb));
                    let fate = attempts
                        .next()
                        .copied()
                        .unwrap_or(Attempt::Ends(Out::Success, 1000));
                    let out = match fate {
                        Attempt::Ends(o, us) => {
                            clock.advance(Duration::from_micros(u64::from(us)));
                            Some(o.outcome())
                        }
                        Attempt::Stepped(step, o) => {
                            clock.step(step);
                            Some(o.outcome())
                        }
                        Attempt::Dropped => None,
                        Attempt::Released => {
                            pair.release(held.take().expect("held"));
                            a.cancel();
                            b.cancel();
                            None
                        }
                    };
                    if let (Some(o), Some((pa, pb))) = (out, held.take()) {
                        let t = clock.now();
                        let (mut la, mut lb) = (Log::new(), Log::new());
                        {
                            let mut parts = Parts {
                                breaker: &mut pair.local,
                                budget: &mut pair.budget,
                            };
                            a.complete(&mut parts, pa, t, o, &mut sink(&mut la, &names));
                        }
                        {
                            let mut parts = Parts {
                                breaker: &pair.shared,
                                budget: &pair.shared_budget,
                            };
                            b.complete(&mut parts, pb, t, o, &mut sink(&mut lb, &names));
                        }
                        assert_eq!(la, lb, "the drivers' events differ on complete");
                        if period_changed(&la) {
                            permits.new_period();
                        }
                        if o == Outcome::Success {
                            funded += u64::from(budget.fraction().ppm());
                        }
                        for e in &la {
                            if e.starts_with("Retry") {
                                // Each announced retry was funded by one withdrawal.
                                assert!(a.attempts() < call_settings.max_attempts());
                            }
                        }
                    }
                }
                Step::Wait(d) => {
                    assert!(!d.is_zero(), "a zero wait");
                    assert!(d <= call_settings.backoff().cap() || clock.now() != clock.latest());
                    if let Some(deadline) = deadline {
                        assert!(
                            now + d < deadline,
                            "a wait of {d} from {now} ends past {deadline}"
                        );
                    }
                    match waits.next().copied().unwrap_or(WaitFate::Sleep) {
                        WaitFate::Sleep => clock.advance(d),
                        WaitFate::Early(f) => clock.advance(Duration::from_nanos(
                            (u128::from(d.as_nanos()) * u128::from(f) / 256) as u64,
                        )),
                        WaitFate::Stepped(step) => clock.step(step),
                        WaitFate::Cancel => {
                            a.cancel();
                            b.cancel();
                        }
                    }
                }
                Step::Reject(r) => {
                    assert!(r.pause <= GUARD_PAUSE);
                    if let Some(deadline) = deadline {
                        // At most the time left (none once the deadline has passed).
                        assert!(r.pause <= deadline - now, "a pause past the deadline");
                    }
                    assert!(r.attempts <= call_settings.max_attempts());
                    assert_ne!(r.last, Some(Outcome::Success));
                    assert!(rejection.is_none(), "a rejection handed out twice");
                    rejection = Some(r);
                    tally.rejected += 1;
                    clock.advance(r.pause);
                }
                Step::Done(f) => {
                    if let Finished::Rejected(r) = f {
                        assert_eq!(
                            Some(r),
                            rejection,
                            "a rejection reported but not handed out"
                        );
                    } else {
                        assert!(
                            rejection.is_none(),
                            "a rejected call ended otherwise: {f:?}"
                        );
                        match f {
                            Finished::Succeeded => tally.succeeded += 1,
                            Finished::Failed(o) => {
                                assert!(
                                    !o.is_retryable()
                                        || a.attempts() == call_settings.max_attempts(),
                                    "{o:?} after {} attempts",
                                    a.attempts()
                                );
                                tally.failed += 1;
                            }
                            Finished::DeadlineExceeded { .. } => tally.deadline += 1,
                            Finished::Cancelled => tally.cancelled += 1,
                            Finished::Rejected(_) => unreachable!(),
                        }
                    }
                    ended = Some(f);
                    break;
                }
            }
            let now = clock.now();
            pair.assert_agree(now);
            pair.assert_bounds(now);
        }
        // Every poll of a finished call says the same.
        if let Some(f) = ended {
            assert!(a.is_over() && b.is_over());
            let mut parts = Parts {
                breaker: &mut pair.local,
                budget: &mut pair.budget,
            };
            assert_eq!(a.poll(&mut parts, clock.now(), &mut |_| {}), Step::Done(f));
        } else if rejection.is_none() {
            // Bounded by the loop, not by the driver: give up as a caller would.
            a.cancel();
            b.cancel();
            tally.cancelled += 1;
        }
        // (A call whose rejection was handed out on the loop's last poll ended as rejected.)
        longest_hold = longest_hold.max(deadline.map_or(Duration::ZERO, |d| d - begin));
        if clock.sane() {
            let floor = clock
                .forward_ms()
                .saturating_mul(u64::from(budget.floor_per_second_milli()));
            assert!(
                retries * 1_000_000 <= funded.saturating_add(floor),
                "{retries} retries, funded {funded} + floor {floor} millionths"
            );
        }
    }

    assert_eq!(
        tally.succeeded + tally.failed + tally.rejected + tally.deadline + tally.cancelled,
        tally.calls,
        "{tally:?}"
    );
    if clock.sane() && longest_hold < Duration::from_secs(3 * 24 * 3600) {
        assert_no_leak(&mut pair, &mut clock, &mut permits, longest_hold);
    }
});
