//! What the fuzz targets share: settings built from arbitrary numbers, outcomes, a hostile clock
//! that remembers how far it has been dragged, and a pair of breakers and budgets (the `&mut`
//! form and the shared form) driven in lockstep so that every decision, event and snapshot of
//! the two can be compared.
//!
//! # Where invariants hold
//! Nothing can move past [`Instant::MAX`]: a break, a reclaim or a ramp that would end after it
//! cannot be waited out, so a `retry_after` cannot be checked by asking again at its end.
//! [`Clock::sane`] says whether every instant fed so far lies well below `Instant::MAX`; the
//! targets assert the time-dependent invariants (retry-after bounds, funding, no leaked slot)
//! only then, and everything else (no panic, both forms agree, probe and ramp limits) on every
//! input. The breaker's invariants hold however far apart the instants lie.
//!
//! The retry budget keeps the millisecond up to which its floor has accrued as a wrapping 32-bit
//! stamp (documented on the budget's state: a reading up to 2^31 - 1 ms after the stamp counts as
//! time passed). A clock stepped back by 2^31 ms or more can therefore be read as up to 24.8 days
//! passed, and the floor accrues over them: [`Clock::budget_exact`] says no reading has lain that
//! far behind the latest one, and the targets bound the withdrawals by what was funded only then.
//! (A forward jump of that size is read as no time passed: the budget funds less, never more.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use arbitrary::Arbitrary;
use stormguard_core::{
    Breaker, BreakerSettings, Budget, BudgetSettings, Duration, Event, FailureRate, Instant, Name,
    Outcome, Permit, Ratio, Recovery, Refused, SharedBreaker, SharedBudget, SlowCalls, State,
};

/// How far behind the latest reading a reading may lie before the budget's wrapping stamp may
/// take it for time passed (2^31 - 1 ms, less a millisecond for rounding).
pub const BUDGET_STAMP_SPAN: Duration = Duration::from_millis((1 << 31) - 2);

/// How far below [`Instant::MAX`] every instant fed must lie for the time-dependent invariants to
/// be asserted: longer than any break, ramp or reclaim the targets' settings allow.
pub const END_MARGIN: Duration = Duration::from_secs(60 * 24 * 3600);

/// A step of a clock that may jump forward, step back, or be set to anything at all.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum TimeStep {
    Nanos(u16),
    Micros(u16),
    Millis(u16),
    Secs(u16),
    Hours(u8),
    BackMillis(u16),
    BackSecs(u32),
    To(u64),
}

/// The clock the targets feed the core, and what it has seen.
#[derive(Debug, Clone)]
pub struct Clock {
    now: Instant,
    max: Instant,
    /// A reading lay at least [`BUDGET_STAMP_SPAN`] behind the latest one before it.
    budget_wrapped: bool,
    /// Whole milliseconds the clock moved forward, summed over its steps (what the budget's
    /// floor may accrue over).
    forward_ms: u64,
}

impl Clock {
    pub fn new(start: Instant) -> Clock {
        Clock {
            now: start,
            max: start,
            budget_wrapped: false,
            forward_ms: 0,
        }
    }

    pub fn now(&self) -> Instant {
        self.now
    }

    /// The latest instant fed so far.
    pub fn latest(&self) -> Instant {
        self.max
    }

    pub fn forward_ms(&self) -> u64 {
        self.forward_ms
    }

    pub fn set(&mut self, t: Instant) {
        self.forward_ms = self
            .forward_ms
            .saturating_add(t.as_millis().saturating_sub(self.now.as_millis()));
        self.now = t;
        if self.max - t >= BUDGET_STAMP_SPAN {
            self.budget_wrapped = true;
        }
        self.max = self.max.max(t);
    }

    pub fn advance(&mut self, d: Duration) {
        self.set(self.now + d);
    }

    pub fn step(&mut self, s: TimeStep) {
        let now = self.now;
        self.set(match s {
            TimeStep::Nanos(n) => now + Duration::from_nanos(u64::from(n)),
            TimeStep::Micros(n) => now + Duration::from_micros(u64::from(n)),
            TimeStep::Millis(n) => now + Duration::from_millis(u64::from(n)),
            TimeStep::Secs(n) => now + Duration::from_secs(u64::from(n)),
            TimeStep::Hours(n) => now + Duration::from_secs(u64::from(n) * 3600),
            TimeStep::BackMillis(n) => now - Duration::from_millis(u64::from(n)),
            TimeStep::BackSecs(n) => now - Duration::from_secs(u64::from(n)),
            TimeStep::To(n) => Instant::from_nanos(n),
        });
    }

    /// Every instant so far lies far enough below [`Instant::MAX`] (by [`END_MARGIN`]) for any
    /// break, ramp or reclaim to end before it.
    pub fn sane(&self) -> bool {
        self.max <= Instant::MAX - END_MARGIN
    }

    /// No reading has lain [`BUDGET_STAMP_SPAN`] or more behind the latest one (see the crate
    /// docs): the budget's floor has accrued over forward time only.
    pub fn budget_exact(&self) -> bool {
        !self.budget_wrapped
    }
}

/// An outcome, as a caller would classify it.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Out {
    Success,
    Transient,
    TimedOut,
    Throttled,
    ThrottledMillis(u32),
    ThrottledNanos(u64),
    Permanent,
    Cancelled,
}

impl Out {
    pub fn outcome(self) -> Outcome {
        match self {
            Out::Success => Outcome::Success,
            Out::Transient => Outcome::Transient,
            Out::TimedOut => Outcome::TimedOut,
            Out::Throttled => Outcome::Throttled { retry_after: None },
            Out::ThrottledMillis(ms) => Outcome::Throttled {
                retry_after: Some(Duration::from_millis(u64::from(ms))),
            },
            Out::ThrottledNanos(n) => Outcome::Throttled {
                retry_after: Some(Duration::from_nanos(n)),
            },
            Out::Permanent => Outcome::Permanent,
            Out::Cancelled => Outcome::Cancelled,
        }
    }
}

/// Breaker settings from arbitrary numbers, mapped into their valid ranges most of the time
/// (small counts and short windows, so that trips, probes and ramps happen within an input);
/// the settings target covers the invalid values.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct BreakerKnobs {
    consecutive: u8,
    failure_rate: Option<(u16, u8, u8, u8)>,
    failure_ratio: Option<u8>,
    slow_calls: Option<(u16, u8)>,
    slow_threshold_us: Option<u32>,
    slow_ratio: u8,
    minimum_calls: u8,
    trip_window_ms: u16,
    baseline_window_ms: Option<u32>,
    /// Break in microseconds above 1 ms (so it need not be whole milliseconds).
    break_us: u32,
    max_break_times: u8,
    jitter: bool,
    probes: u8,
    successes: u8,
    recovery: Option<(u8, u16, u16)>,
    pub seed: u64,
}

impl BreakerKnobs {
    /// The same knobs with jitter off: every copy of the settings then breaks alike whatever its
    /// seed (the keyed table reseeds each key's copy).
    pub fn without_jitter(mut self) -> BreakerKnobs {
        self.jitter = false;
        self
    }

    pub fn settings(&self) -> Option<BreakerSettings> {
        let brk =
            Duration::from_millis(1) + Duration::from_micros(u64::from(self.break_us % 60_000_000));
        let mut b = BreakerSettings::builder("fuzz")
            .consecutive_failures(1 + u32::from(self.consecutive % 8))
            .failure_rate(self.failure_rate.map(|(m, f, min, base)| {
                FailureRate::above_milli(1001 + u32::from(m))
                    .floor_ppm(1 + u32::from(f) * 3_900)
                    .minimum_failures(1 + u32::from(min % 5))
                    .baseline_outcomes(1 + u32::from(base))
            }))
            .failure_ratio(
                self.failure_ratio
                    .and_then(|r| Ratio::from_ppm(1 + u32::from(r) * 3_900)),
            )
            .slow_calls(self.slow_calls.map(|(m, base)| {
                SlowCalls::above_milli(1001 + u32::from(m)).baseline_calls(1 + u32::from(base % 40))
            }))
            .slow_threshold(
                self.slow_threshold_us
                    .map(|us| Duration::from_micros(1 + u64::from(us))),
            )
            .slow_ratio(
                Ratio::from_ppm(1 + u32::from(self.slow_ratio) * 3_900).unwrap_or(Ratio::ONE),
            )
            .minimum_calls(1 + u32::from(self.minimum_calls % 30))
            .trip_window(Duration::from_millis(10 + u64::from(self.trip_window_ms)))
            .baseline_window(
                self.baseline_window_ms
                    .map(|ms| Duration::from_millis(u64::from(ms))),
            )
            .break_duration(brk)
            .max_break(brk.saturating_mul(1 + u64::from(self.max_break_times % 16)))
            .jitter(self.jitter)
            .half_open_probes(1 + u32::from(self.probes % 31))
            .probe_successes(1 + u32::from(self.successes % 4));
        if let Some((f, min, max)) = self.recovery {
            let min = Duration::from_millis(1 + u64::from(min % 5_000));
            b = b.recovery(Some(
                Recovery::over_ppm(1 + u32::from(f) * 3_900)
                    .clamped(min, min + Duration::from_millis(u64::from(max))),
            ));
        }
        b.build().ok()
    }
}

/// Budget settings from arbitrary numbers (any fraction, any floor up to the maximum).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct BudgetKnobs {
    fraction_ppm: u32,
    floor_milli: u32,
}

impl BudgetKnobs {
    pub fn settings(&self) -> BudgetSettings {
        BudgetSettings::builder("fuzz-budget")
            .fraction_ppm(self.fraction_ppm % 1_000_001)
            .floor_per_second_milli(self.floor_milli % 400_001)
            .build()
            .expect("in range by construction")
    }
}

/// Events, as the Debug strings the two forms are compared by.
pub type Log = Vec<String>;

/// A sink that records events and checks that each carries one of the expected names (the
/// breaker's, or for a budget refusal the budget's).
pub fn sink<'a>(log: &'a mut Log, names: &'a [Name]) -> impl FnMut(Event<'_>) + 'a {
    move |e| {
        assert!(
            names.contains(e.name()),
            "an event carries another name: {e:?}"
        );
        log.push(format!("{e:?}"));
    }
}

/// `true` when the events say the breaker's period moved on (probe slots and ramp credit of the
/// old period are gone).
pub fn period_changed(log: &Log) -> bool {
    log.iter()
        .any(|e| e.starts_with("StateChanged") || e.starts_with("ProbesReclaimed"))
}

/// The `&mut` and the shared breaker and budget, driven by the same calls.
pub struct Pair {
    pub settings: BreakerSettings,
    pub local: Breaker,
    pub shared: SharedBreaker,
    pub budget: Budget,
    pub shared_budget: SharedBudget,
}

impl Pair {
    pub fn new(settings: BreakerSettings, seed: u64, budget: BudgetSettings) -> Pair {
        Pair {
            settings,
            local: Breaker::new(settings).with_seed(seed),
            shared: SharedBreaker::new(settings).with_seed(seed),
            budget: Budget::new(budget),
            shared_budget: SharedBudget::new(budget),
        }
    }

    /// Everything readable agrees between the two forms at `now`.
    pub fn assert_agree(&self, now: Instant) {
        let (l, s) = (&self.local, &self.shared);
        assert_eq!(l.snapshot(now), s.snapshot(now));
        assert_eq!(l.state(now), s.state(now));
        assert_eq!(l.check(now), s.check(now));
        assert_eq!(l.poll_timeout(now), s.poll_timeout(now));
        assert_eq!(l.ramp_fraction(now), s.ramp_fraction(now));
        assert_eq!(self.budget.snapshot(now), self.shared_budget.snapshot(now));
        assert_eq!(
            self.budget.available(now),
            self.shared_budget.available(now)
        );
        assert_eq!(
            self.budget.utilization(now),
            self.shared_budget.utilization(now)
        );
    }

    /// Acquires on both; both must decide alike, with the same events.
    pub fn acquire(
        &mut self,
        now: Instant,
        timeout: Option<Duration>,
        log: &mut Log,
    ) -> Result<(Permit, Permit), Refused> {
        let name = [*self.settings.name()];
        let mut other = Log::new();
        let a = self
            .local
            .try_acquire_with(now, timeout, &mut sink(log, &name));
        let b = self
            .shared
            .try_acquire(now, timeout, &mut sink(&mut other, &name));
        assert_eq!(*log, other, "events differ on acquire");
        match (a, b) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b);
                Ok((a, b))
            }
            (Err(a), Err(b)) => {
                assert_eq!(a, b);
                Err(a)
            }
            (a, b) => panic!("the forms disagree on acquire: {a:?} vs {b:?}"),
        }
    }

    pub fn outcome(&mut self, now: Instant, permits: (Permit, Permit), o: Outcome, log: &mut Log) {
        let name = [*self.settings.name()];
        let mut other = Log::new();
        self.local
            .on_outcome(now, permits.0, o, &mut sink(log, &name));
        self.shared
            .on_outcome(now, permits.1, o, &mut sink(&mut other, &name));
        assert_eq!(*log, other, "events differ on outcome");
    }

    pub fn release(&mut self, permits: (Permit, Permit)) {
        self.local.release(permits.0);
        self.shared.release(permits.1);
    }

    pub fn isolate(&mut self, now: Instant, log: &mut Log) {
        let name = [*self.settings.name()];
        let mut other = Log::new();
        self.local.isolate(now, &mut sink(log, &name));
        self.shared.isolate(now, &mut sink(&mut other, &name));
        assert_eq!(*log, other, "events differ on isolate");
    }

    pub fn reset(&mut self, now: Instant, log: &mut Log) {
        let name = [*self.settings.name()];
        let mut other = Log::new();
        self.local.reset(now, &mut sink(log, &name));
        self.shared.reset(now, &mut sink(&mut other, &name));
        assert_eq!(*log, other, "events differ on reset");
    }

    pub fn handle_timeout(&mut self, now: Instant, log: &mut Log) {
        let name = [*self.settings.name()];
        let mut other = Log::new();
        self.local.handle_timeout(now, &mut sink(log, &name));
        self.shared
            .handle_timeout(now, &mut sink(&mut other, &name));
        assert_eq!(*log, other, "events differ on handle_timeout");
    }

    pub fn withdraw(&mut self, now: Instant) -> Result<(), Refused> {
        let a = self.budget.try_withdraw(now);
        assert_eq!(a, self.shared_budget.try_withdraw(now));
        a
    }

    pub fn deposit(&mut self, now: Instant) {
        self.budget.deposit(now);
        self.shared_budget.deposit(now);
    }

    pub fn budget_outcome(&mut self, now: Instant, o: Outcome) {
        self.budget.on_outcome(now, o);
        self.shared_budget.on_outcome(now, o);
    }

    /// The invariants of a snapshot: probes within the limit, the break within
    /// [first / 2, max] (plus the millisecond the break is rounded up to: see the report on
    /// sub-millisecond breaks), and the budget within its capacity.
    pub fn assert_bounds(&self, now: Instant) {
        let s = &self.settings;
        let snap = self.local.snapshot(now);
        assert!(
            snap.probes_in_flight <= s.half_open_probes(),
            "{} probes in flight, limit {}",
            snap.probes_in_flight,
            s.half_open_probes()
        );
        if snap.state != State::HalfOpen {
            assert_eq!(snap.probes_in_flight, 0);
        }
        if let Some(brk) = snap.break_duration {
            let low = Duration::from_nanos(s.break_duration().as_nanos() / 2);
            let high = s.max_break() + Duration::from_millis(1);
            assert!(
                brk >= low && brk <= high,
                "break {brk} outside [{low}, {high}]"
            );
        }
        assert_eq!(
            snap.ramp_fraction.is_some(),
            snap.state == State::Recovering
        );
        if let Some(p) = snap.ramp_fraction {
            assert!(
                p.ppm() >= 50_000 && p.ppm() < 1_000_000,
                "ramp fraction {p}"
            );
        }
        let b = self.budget.snapshot(now);
        assert!(b.tokens_micro <= b.capacity_micro);
        assert!(b.capacity_micro >= 1_000_000);
        assert_eq!(b.available, b.tokens_micro / 1_000_000);
        assert!(b.utilization.ppm() <= 1_000_000);
    }
}

/// Outstanding permits, by the pair's two forms, with the harness's own count of probe slots held
/// in the current period.
#[derive(Default)]
pub struct Permits {
    pub held: Vec<(Permit, Permit)>,
    probe_period: Option<u8>,
    probes: usize,
}

impl Permits {
    pub const MAX: usize = 64;

    /// Records a granted permit; returns the probes now held in its period.
    pub fn granted(&mut self, p: (Permit, Permit)) -> usize {
        if p.0.is_probe() {
            if self.probe_period != Some(p.0.period()) {
                self.probe_period = Some(p.0.period());
                self.probes = 0;
            }
            self.probes += 1;
        }
        self.held.push(p);
        self.probes
    }

    /// Takes permit `which` (modulo the count) out, giving back its slot in the count.
    pub fn take(&mut self, which: u8) -> Option<(Permit, Permit)> {
        if self.held.is_empty() {
            return None;
        }
        let p = self.held.swap_remove(usize::from(which) % self.held.len());
        if p.0.is_probe() && self.probe_period == Some(p.0.period()) {
            self.probes = self.probes.saturating_sub(1);
        }
        Some(p)
    }

    /// The breaker moved to a new period: no slot of the old one is held any more.
    pub fn new_period(&mut self) {
        self.probe_period = None;
        self.probes = 0;
    }
}

/// After the invariant checks of an input: with every permit handed back, once every break,
/// reclaim and ramp can have ended, an attempt is admitted (within a few offers while the ramp
/// sheds): no probe slot leaked. Only meaningful on a sane clock.
pub fn assert_no_leak(
    pair: &mut Pair,
    clock: &mut Clock,
    permits: &mut Permits,
    longest_hold: Duration,
) {
    for p in permits.held.drain(..) {
        pair.release(p);
    }
    let mut log = Log::new();
    if pair.local.state(clock.now()) == State::Isolated {
        pair.reset(clock.now(), &mut log);
    }
    let s = pair.settings;
    let end =
        clock.latest() + s.max_break() + longest_hold.max(s.max_break()) + Duration::from_millis(2);
    clock.set(end);
    for _ in 0..40 {
        log.clear();
        match pair.acquire(clock.now(), None, &mut log) {
            Ok(p) => {
                pair.release(p);
                return;
            }
            // Keep offering: at p >= 5% the ramp's credit admits one within 20 offers.
            Err(r) if r.reason == stormguard_core::RefusalReason::RampShedding => {}
            Err(r) => panic!(
                "a slot leaked: refused {r:?} at {} in state {:?}, snapshot {:?}",
                clock.now(),
                pair.local.state(clock.now()),
                pair.local.snapshot(clock.now())
            ),
        }
    }
    panic!(
        "the ramp shed 40 offers in a row: {:?}",
        pair.local.snapshot(clock.now())
    );
}

/// Admissions of cells over a stretch of readings, to check GCRA's bound: for any two admissions
/// `i` before `j` (in the order they happened), the cells admitted from `i` to `j` times the
/// emission interval `T` are at most `r_j - r_i + burst * T` (readings signed: a late reading may
/// lie before an earlier one). It holds while no reading lies more than the late-reading allowance
/// (1 s) below the latest one since the ledger started: further back, the limiter takes the clock
/// for reset and may hand out one burst early, so the ledger starts over.
#[derive(Debug, Default)]
pub struct CellLedger {
    /// (reading in ns, cells admitted, cells admitted before this one since the ledger started)
    admitted: Vec<(u64, u64, u128)>,
    total: u128,
    latest: u64,
}

/// How far back a reading may lie and still be a late reading (the limiters' allowance).
pub const LATE_READING: Duration = Duration::from_secs(1);

impl CellLedger {
    /// Notes a reading; starts over when the clock stepped back past the late-reading allowance.
    pub fn read(&mut self, now: Instant) {
        let now = now.as_nanos();
        if self.admitted.is_empty() {
            self.latest = now;
        }
        if now.saturating_add(LATE_READING.as_nanos()) < self.latest {
            self.admitted.clear();
            self.total = 0;
            self.latest = now;
        }
        self.latest = self.latest.max(now);
    }

    /// Records `n` cells admitted at `now` and checks the bound against every earlier admission.
    pub fn admit(&mut self, now: Instant, n: u32, interval: Duration, burst: u32) {
        self.read(now);
        if n == 0 {
            return;
        }
        let t = u128::from(interval.as_nanos());
        let r = now.as_nanos();
        self.admitted.push((r, u64::from(n), self.total));
        self.total += u128::from(n);
        for &(ri, _, before) in &self.admitted {
            let cells = self.total - before;
            // cells * T <= r_j - r_i + burst * T, in signed 128-bit arithmetic.
            let lhs = (cells * t) as i128;
            let rhs = i128::from(r) - i128::from(ri) + (u128::from(burst) * t) as i128;
            assert!(
                lhs <= rhs,
                "{cells} cells admitted between readings {ri} and {r}: more than burst {burst} \
                 + span / {interval}"
            );
        }
        if self.admitted.len() > 512 {
            self.admitted.drain(..256);
        }
    }
}
