//! Arbitrary calls through the call driver, over the single-threaded breaker and budget and over
//! the shared ones in lockstep, each bare or with a rate limiter (GCRA or window, as a
//! `&dyn AnyLimiter`), a bulkhead or both among its `Parts`: arbitrary outcomes and latencies,
//! throttling hints of any size, hedges (`Call::hedge_delay`, `Call::hedge`) launched early, late
//! or never, attempts dropped without an outcome or released through the parts, cancellations
//! during waits, early polls, and a clock that jumps, steps back and is set to anything between
//! and within calls.
//!
//! After every step: nothing panicked; both drivers asked for the same step, offered the same
//! hedge delay, launched or refused the same hedge and emitted the same events; a call never waits
//! past its deadline (a wait ends before it, a guarded pause ends by it, an attempt's deadline,
//! a hedge's included, is within it and later than its start, and a hedge is offered only to
//! start before the attempt's own deadline); the pause is at most `GUARD_PAUSE`; a call makes at
//! most `max_attempts` attempts and has at most 2 in flight; a hedge is launched only while the
//! breaker is closed; every retry and every hedge of a call was funded by a withdrawal from the
//! budget; every call ends exactly once, as exactly one of succeeded, failed, rejected, deadline
//! exceeded or cancelled, and a rejection is handed out once and then reported as done; a retry
//! wait is at most the backoff cap; a bulkhead holds exactly the attempts not yet reported (and
//! never more than its maximum); a GCRA limiter in front admits attempts within its bound (see
//! `stormguard_fuzz::CellLedger`). On a sane clock (see `stormguard_fuzz::Clock::sane`) also: the
//! withdrawals never exceed what the budget funded (while no reading lay 2^31 ms or more behind
//! the latest: `stormguard_fuzz::Clock::budget_exact`), and at the end no probe slot has leaked.
#![no_main]

use std::cell::Cell;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use stormguard_core::{
    call::Gate, limits::AnyLimiter, limits::AnyRule, limits::Bulkhead, limits::BulkheadSettings,
    limits::RateLimitSettings, limits::RateLimiter, limits::SharedBulkhead,
    limits::SharedRateLimiter, limits::SharedWindowLimiter, limits::WindowLimitSettings,
    limits::WindowLimiter, part::Funding, part::Never, Backoff, Call, CallSettings, Duration, Finished, Instant,
    Jitter, Multiple, Outcome, Parts, Permit, Refused, State, Step, GUARD_PAUSE,
};
use stormguard_fuzz::{
    assert_no_leak, period_changed, sink, BreakerKnobs, BudgetKnobs, CellLedger, Clock, Log, Out,
    Pair, Permits, TimeStep,
};

#[derive(Arbitrary, Debug)]
struct Input {
    knobs: BreakerKnobs,
    budget: BudgetKnobs,
    call: CallKnobs,
    guard: GuardKnobs,
    /// Successful calls (count, latency in µs) fed to the breaker first, so that it has the
    /// baseline a hedge needs.
    warmup: Option<(u8, u16)>,
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
    hedging: bool,
    measured_ceiling: bool,
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
            .hedging(self.hedging)
            .measured_ceiling(self.measured_ceiling)
            .build()
            .ok()
    }
}

/// What stands in front of the breaker.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum GuardKnobs {
    Bare,
    Limited(LimitKnobs),
    Bulkheaded(u8),
    Both(LimitKnobs, u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum LimitKnobs {
    Gcra {
        cells: u8,
        period_ms: u16,
        burst: u8,
    },
    Window {
        events: u8,
        window_ms: u16,
        cooldown_ms: u16,
    },
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
    /// An attempt in flight (the first or the second, if two) ends with this outcome after
    /// this latency.
    Ends(Out, u32, bool),
    /// The clock steps (perhaps back) during the attempt, then it ends.
    Stepped(TimeStep, Out, bool),
    /// A hedge is asked for this long (µs) after the delay the driver offered (or, with no
    /// offer, after this long): early, late, or when the driver would not have offered one.
    Hedge(u32),
    /// The caller's future is dropped: the attempts in flight never report, and the driver is
    /// polled.
    Dropped,
    /// The caller gives the permits back (a drop guard) and cancels.
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

/// Counts the retries (and hedges) a budget funded.
struct Counted<'a, F> {
    inner: F,
    withdrawn: &'a Cell<u64>,
}

impl<F: Funding> Funding for Counted<'_, F> {
    fn try_fund_retry(&self, now: Instant) -> Result<(), Refused> {
        let r = self.inner.try_fund_retry(now);
        if r.is_ok() {
            self.withdrawn.set(self.withdrawn.get() + 1);
        }
        r
    }
    fn refund_retry(&self, now: Instant) {
        self.inner.refund_retry(now);
        self.withdrawn.set(self.withdrawn.get().saturating_sub(1));
    }
    fn on_outcome(&self, now: Instant, outcome: Outcome) {
        self.inner.on_outcome(now, outcome);
    }
    fn check_shed(&self, now: Instant) -> Result<(), Refused> {
        self.inner.check_shed(now)
    }
}

/// The breakers, budgets and guards of both forms, and the withdrawals each budget made.
struct World {
    pair: Pair,
    /// The rate limiter in front of each form (its rule erased: GCRA or window).
    limit: Option<(Box<dyn AnyLimiter>, Box<dyn AnyLimiter>)>,
    bulkhead: Option<(Bulkhead, SharedBulkhead)>,
    withdrawn: [Cell<u64>; 2],
}

impl World {
    /// The single-threaded form's parts: the breaker, the counted budget, and whichever guards
    /// stand in front of the breaker (every combination is one type: a guard that is not there
    /// is `None`).
    fn local(&self) -> impl Gate + '_ {
        Parts::<_, _, &dyn AnyLimiter, Never, &Bulkhead, Never, Never> {
            name: None,
            breaker: Some(&self.pair.local),
            budget: Some(Counted {
                inner: &self.pair.budget,
                withdrawn: &self.withdrawn[0],
            }),
            limiter: self.limit.as_ref().map(|l| &*l.0),
            quota: None,
            bulkhead: self.bulkhead.as_ref().map(|b| &b.0),
            adaptive: None,
            saturation: None,
        }
    }

    /// The shared form's parts, likewise.
    fn shared(&self) -> impl Gate + '_ {
        Parts::<_, _, &dyn AnyLimiter, Never, &SharedBulkhead, Never, Never> {
            name: None,
            breaker: Some(&self.pair.shared),
            budget: Some(Counted {
                inner: &self.pair.shared_budget,
                withdrawn: &self.withdrawn[1],
            }),
            limiter: self.limit.as_ref().map(|l| &*l.1),
            quota: None,
            bulkhead: self.bulkhead.as_ref().map(|b| &b.1),
            adaptive: None,
            saturation: None,
        }
    }

    /// The withdrawals the single-threaded form's budget made; the shared form's agree.
    fn withdrawn(&self) -> u64 {
        let (a, b) = (self.withdrawn[0].get(), self.withdrawn[1].get());
        assert_eq!(a, b, "the budgets funded different retries");
        a
    }

    /// The GCRA limiter's settings, if one stands in front.
    fn gcra(&self) -> Option<RateLimitSettings> {
        match self.limit.as_ref()?.0.rule() {
            AnyRule::Gcra(s) => Some(*s),
            _ => None,
        }
    }

    /// Both bulkheads' counts agree; the calls in flight, if there is a bulkhead.
    fn bulkhead_in_flight(&self) -> Option<u32> {
        let (a, b) = self.bulkhead.as_ref()?;
        assert_eq!(a.snapshot(), b.snapshot());
        assert!(a.in_flight() <= a.settings().max_in_flight());
        assert_eq!(a.queued(), 0, "the call driver never queues");
        Some(a.in_flight())
    }
}

fuzz_target!(|input: Input| {
    let Some(settings) = input.knobs.settings() else {
        return;
    };
    let Some(call_settings) = input.call.settings() else {
        return;
    };
    let budget = input.budget.settings();
    let mut clock = Clock::new(Instant::from_nanos(input.start));
    let limit = |k: LimitKnobs| -> Option<(Box<dyn AnyLimiter>, Box<dyn AnyLimiter>)> {
        match k {
            LimitKnobs::Gcra {
                cells,
                period_ms,
                burst,
            } => {
                let s = RateLimitSettings::builder("fuzz-limit")
                    .rate(
                        1 + u32::from(cells % 32),
                        Duration::from_millis(1 + u64::from(period_ms)),
                    )
                    .burst(1 + u32::from(burst % 32))
                    .build()
                    .ok()?;
                Some((
                    Box::new(RateLimiter::new(s)),
                    Box::new(SharedRateLimiter::new(s)),
                ))
            }
            LimitKnobs::Window {
                events,
                window_ms,
                cooldown_ms,
            } => {
                let s = WindowLimitSettings::builder("fuzz-limit")
                    .events(1 + u32::from(events % 32))
                    .window(Duration::from_millis(1 + u64::from(window_ms)))
                    .cooldown(Duration::from_millis(1 + u64::from(cooldown_ms)))
                    .build()
                    .ok()?;
                Some((
                    Box::new(WindowLimiter::new(s)),
                    Box::new(SharedWindowLimiter::new(s)),
                ))
            }
        }
    };
    let bulkhead = |max: u8| -> Option<(Bulkhead, SharedBulkhead)> {
        let s = BulkheadSettings::builder("fuzz-bulkhead")
            .max_in_flight(1 + u32::from(max % 4))
            .build()
            .ok()?;
        Some((Bulkhead::new(s), SharedBulkhead::new(s)))
    };
    let (limit, bulkhead) = match input.guard {
        GuardKnobs::Bare => (None, None),
        GuardKnobs::Limited(l) => (limit(l), None),
        GuardKnobs::Bulkheaded(b) => (None, bulkhead(b)),
        GuardKnobs::Both(l, b) => (limit(l), bulkhead(b)),
    };
    let mut world = World {
        pair: Pair::new(settings, input.knobs.seed, budget),
        limit,
        bulkhead,
        withdrawn: [Cell::new(0), Cell::new(0)],
    };
    let names = [*settings.name(), *budget.name()];
    let mut tally = Tally::default();
    let mut funded: u64 = u64::from(budget.capacity_micro());
    let mut longest_hold = call_settings.attempt_timeout().unwrap_or(Duration::ZERO);
    // Only the period bookkeeping: attempts dropped without an outcome are not handed back, so
    // the leak check at the end proves that time reclaims their probe slots.
    let mut permits = Permits::default();
    // Bulkhead slots held by attempts that were dropped without being reported (they stay
    // taken: the adapter must report every attempt).
    let mut leaked_slots: u32 = 0;
    let mut cells = CellLedger::default();

    if let Some((n, latency_us)) = input.warmup {
        // A baseline for the hedge: healthy calls straight through the breakers.
        for _ in 0..n % 48 {
            let now = clock.now();
            match world.pair.acquire(now, None, &mut Log::new()) {
                Ok(p) => {
                    clock.advance(Duration::from_micros(u64::from(latency_us)));
                    let mut log = Log::new();
                    world
                        .pair
                        .outcome(clock.now(), p, Outcome::Success, &mut log);
                    if period_changed(&log) {
                        permits.new_period();
                    }
                }
                Err(_) => break,
            }
        }
    }

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
        let withdrawn_before = world.withdrawn();
        // Attempts the breaker granted (a limiter's or bulkhead's refusal takes one of the
        // call's attempts but is never funded: it is a self-imposed throttle).
        let mut granted: u64 = 0;
        tally.calls += 1;

        for _ in 0..64 {
            let now = clock.now();
            cells.read(now);
            let (mut la, mut lb) = (Log::new(), Log::new());
            let sa = a.poll(&world.local(), now, &mut sink(&mut la, &names));
            let sb = b.poll(&world.shared(), now, &mut sink(&mut lb, &names));
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
                    granted += 1;
                    if let Some(s) = world.gcra() {
                        cells.admit(now, 1, s.emission_interval(), s.burst());
                    }
                    let at = a.attempt_deadline();
                    assert_eq!(at, b.attempt_deadline());
                    if let (Some(at), Some(d)) = (at, deadline) {
                        assert!(at <= d, "attempt deadline {at} past the call's {d}");
                    }
                    if let Some(at) = at {
                        assert!(at > now || at == Instant::MAX);
                    }
                    let offer = a.hedge_delay(&world.local(), now);
                    assert_eq!(offer, b.hedge_delay(&world.shared(), now));
                    if let Some(d) = offer {
                        assert!(call_settings.hedging());
                        assert_eq!(world.pair.local.state(now), State::Closed);
                        if let Some(at) = at {
                            assert!(now + d < at, "a hedge offered at {d}, past {at}");
                        }
                    }
                    // The attempts of this call in flight, by both forms, and when they began.
                    let mut flying: Vec<(Permit, Permit)> = vec![(pa, pb)];
                    let mut dropped = false;
                    for _ in 0..8 {
                        if flying.is_empty() {
                            break;
                        }
                        let fate = attempts.next().copied().unwrap_or(Attempt::Ends(
                            Out::Success,
                            1000,
                            false,
                        ));
                        let (out, second) = match fate {
                            Attempt::Ends(o, us, second) => {
                                clock.advance(Duration::from_micros(u64::from(us)));
                                (o.outcome(), second)
                            }
                            Attempt::Stepped(step, o, second) => {
                                clock.step(step);
                                (o.outcome(), second)
                            }
                            Attempt::Hedge(us) => {
                                clock.advance(
                                    offer.unwrap_or(Duration::ZERO)
                                        + Duration::from_micros(u64::from(us)),
                                );
                                let t = clock.now();
                                cells.read(t);
                                let attempts_before = a.attempts();
                                let running_until = a.attempt_deadline();
                                let (mut la, mut lb) = (Log::new(), Log::new());
                                let ha = a.hedge(&world.local(), t, &mut sink(&mut la, &names));
                                let hb = b.hedge(&world.shared(), t, &mut sink(&mut lb, &names));
                                assert_eq!(ha, hb, "the drivers disagree on a hedge");
                                assert_eq!(la, lb, "the drivers' events differ on a hedge");
                                if period_changed(&la) {
                                    permits.new_period();
                                }
                                match (ha, hb) {
                                    (Ok(ha), Ok(hb)) => {
                                        granted += 1;
                                        assert!(call_settings.hedging());
                                        assert_eq!(flying.len(), 1, "a third attempt in flight");
                                        assert_eq!(a.attempts(), attempts_before + 1);
                                        assert!(a.attempts() <= call_settings.max_attempts());
                                        assert_eq!(world.pair.local.state(t), State::Closed);
                                        // As `hedge_delay` offers: only before the attempt in
                                        // flight is over its own deadline.
                                        if let Some(until) = running_until {
                                            assert!(
                                                t < until,
                                                "a hedge launched at {t}, past the running \
                                                 attempt's deadline {until}"
                                            );
                                        }
                                        let hat = a.attempt_deadline();
                                        assert_eq!(hat, b.attempt_deadline());
                                        if let (Some(hat), Some(d)) = (hat, deadline) {
                                            assert!(hat <= d, "hedge deadline {hat} past {d}");
                                        }
                                        if let Some(hat) = hat {
                                            assert!(
                                                hat > t || hat == Instant::MAX,
                                                "a hedge launched at {t} with no time left \
                                                 (its deadline {hat}, the call's {deadline:?})"
                                            );
                                        }
                                        if let Some(s) = world.gcra() {
                                            cells.admit(t, 1, s.emission_interval(), s.burst());
                                        }
                                        flying.push((ha, hb));
                                    }
                                    (Err(_), Err(_)) => {
                                        assert_eq!(a.attempts(), attempts_before);
                                    }
                                    _ => unreachable!(),
                                }
                                continue;
                            }
                            Attempt::Dropped => {
                                leaked_slots += u32::try_from(flying.len()).unwrap();
                                flying.clear();
                                dropped = true;
                                break;
                            }
                            Attempt::Released => {
                                // Through the whole of the parts, as a drop guard does: the
                                // bulkhead's slot goes back with the breaker's permit.
                                for (pa, pb) in flying.drain(..) {
                                    world.local().release(pa);
                                    world.shared().release(pb);
                                }
                                a.cancel();
                                b.cancel();
                                break;
                            }
                        };
                        let which = if second && flying.len() > 1 { 1 } else { 0 };
                        let (pa, pb) = flying.remove(which);
                        let t = clock.now();
                        let (mut la, mut lb) = (Log::new(), Log::new());
                        a.complete(&world.local(), pa, t, out, &mut sink(&mut la, &names));
                        b.complete(&world.shared(), pb, t, out, &mut sink(&mut lb, &names));
                        assert_eq!(la, lb, "the drivers' events differ on complete");
                        assert_eq!(a.is_over(), b.is_over());
                        if period_changed(&la) {
                            permits.new_period();
                        }
                        if out == Outcome::Success {
                            funded += u64::from(budget.fraction().ppm());
                        }
                        for e in &la {
                            if e.starts_with("Retry") {
                                assert!(a.attempts() < call_settings.max_attempts());
                            }
                        }
                        if a.is_over() {
                            // The adapter cancels the other attempt of a pair and reports it.
                            for (pa, pb) in flying.drain(..) {
                                let (mut la, mut lb) = (Log::new(), Log::new());
                                let o = Outcome::Cancelled;
                                a.complete(&world.local(), pa, t, o, &mut sink(&mut la, &names));
                                b.complete(&world.shared(), pb, t, o, &mut sink(&mut lb, &names));
                                assert_eq!(la, lb);
                                if period_changed(&la) {
                                    permits.new_period();
                                }
                            }
                        }
                        if let Some(held) = world.bulkhead_in_flight() {
                            let flying = u32::try_from(flying.len()).unwrap();
                            assert_eq!(held, flying + leaked_slots, "bulkhead slots");
                        }
                    }
                    if !flying.is_empty() && !dropped {
                        // The script ran out with attempts in flight: they time out.
                        let t = clock.now();
                        for (pa, pb) in flying.drain(..) {
                            let o = Outcome::TimedOut;
                            let (mut la, mut lb) = (Log::new(), Log::new());
                            a.complete(&world.local(), pa, t, o, &mut sink(&mut la, &names));
                            b.complete(&world.shared(), pb, t, o, &mut sink(&mut lb, &names));
                            assert_eq!(la, lb);
                            if period_changed(&la) {
                                permits.new_period();
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
                            Finished::Rejected(_) | Finished::Drained { .. } => unreachable!(),
                        }
                    }
                    ended = Some(f);
                    break;
                }
            }
            let now = clock.now();
            world.pair.assert_agree(now);
            world.pair.assert_bounds(now);
            let withdrawn = world.withdrawn();
            // Every retry and every hedge of this call was funded by one withdrawal.
            let extra = granted.saturating_sub(1);
            assert!(
                extra <= withdrawn - withdrawn_before,
                "{granted} granted attempts on {} withdrawals",
                withdrawn - withdrawn_before
            );
            if let Some(held) = world.bulkhead_in_flight() {
                assert_eq!(held, leaked_slots, "bulkhead slots between attempts");
            }
        }
        // Every poll of a finished call says the same.
        if let Some(f) = ended {
            assert!(a.is_over() && b.is_over());
            let t = clock.now();
            assert_eq!(a.poll(&world.local(), t, &mut |_| {}), Step::Done(f));
        } else if rejection.is_none() {
            // Bounded by the loop, not by the driver: give up as a caller would.
            a.cancel();
            b.cancel();
            tally.cancelled += 1;
        }
        // (A call whose rejection was handed out on the loop's last poll ended as rejected.)
        longest_hold = longest_hold.max(deadline.map_or(Duration::ZERO, |d| d - begin));
        if clock.sane() && clock.budget_exact() {
            let floor = clock
                .forward_ms()
                .saturating_mul(u64::from(budget.floor_per_second_milli()));
            let withdrawn = world.withdrawn();
            assert!(
                withdrawn * 1_000_000 <= funded.saturating_add(floor),
                "{withdrawn} withdrawals, funded {funded} + floor {floor} millionths"
            );
        }
    }

    assert_eq!(
        tally.succeeded + tally.failed + tally.rejected + tally.deadline + tally.cancelled,
        tally.calls,
        "{tally:?}"
    );
    if clock.sane() && longest_hold < Duration::from_secs(3 * 24 * 3600) {
        assert_no_leak(&mut world.pair, &mut clock, &mut permits, longest_hold);
    }
});
