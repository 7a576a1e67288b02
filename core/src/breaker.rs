//! The circuit breaker: a small control state driven by pure transitions, plus statistics.
//!
//! # Call order
//! 1. [`Breaker::try_acquire`] (or [`Breaker::try_acquire_with`]) before every attempt: a
//!    [`Permit`] or a [`Refused`].
//! 2. Run the attempt.
//! 3. [`Breaker::on_outcome`] with the permit and the caller's classification of what happened.
//!
//! Reading ([`Breaker::state`], [`Breaker::snapshot`]) never changes anything: after the break
//! has elapsed the state reads `HalfOpen` before any call arrives, and no probe slot is used.
//! [`Breaker::poll_timeout`] / [`Breaker::handle_timeout`] let a driver realise timed
//! transitions (break over, lost probe reclaimed, ramp run out) on time, for their events.
//!
//! # Shape
//! The control state ([`Control`]) is a handful of small integers that pack into one 64-bit word,
//! and the rules are functions that take it by `&mut` on a copy: the single-threaded breaker
//! applies them in place, a shared breaker runs the same functions between a load and a
//! compare-exchange. Statistics (trip window, baselines) live apart and only feed the pure trip
//! decision ([`crate::stats`]).

use core::fmt;

use crate::error::{RefusalReason, Refused};
use crate::event::Event;
use crate::ratio::Ratio;
use crate::settings::{BreakerSettings, MAX_COUNT};
use crate::stats::{self, Readings, Sample, Stats};
use crate::time::Tick;
use crate::{Duration, Instant, Name, Outcome, SettingsError};

/// The breaker's state, as read at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum State {
    /// Calls flow; the trip rules watch.
    Closed,
    /// Every call is refused until the break ends.
    Open,
    /// The break is over: a limited number of probes may go through.
    HalfOpen,
    /// The probes succeeded; a growing fraction of calls is admitted (only with a ramp).
    Recovering,
    /// Forced open by an operator until [`Breaker::reset`].
    Isolated,
}

impl State {
    /// A stable, lower-case name for logs and metrics labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::Recovering => "recovering",
            State::Isolated => "isolated",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the breaker opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum TripReason {
    /// The consecutive-failure count reached its threshold.
    ConsecutiveFailures,
    /// The window's failure rate rose above the multiple of the learned normal rate.
    FailureRate,
    /// The window's failure rate reached the absolute ceiling.
    FailureRatio,
    /// The share of slow calls in the window reached the slow-call ratio.
    SlowCalls,
    /// A half-open probe failed.
    ProbeFailed,
    /// A half-open probe succeeded, but slowly, and no ramp is configured.
    SlowProbe,
    /// A call admitted by the recovery ramp failed.
    RampFailure,
}

impl TripReason {
    /// A stable, lower-case name for logs and metrics labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            TripReason::ConsecutiveFailures => "consecutive_failures",
            TripReason::FailureRate => "failure_rate",
            TripReason::FailureRatio => "failure_ratio",
            TripReason::SlowCalls => "slow_calls",
            TripReason::ProbeFailed => "probe_failed",
            TripReason::SlowProbe => "slow_probe",
            TripReason::RampFailure => "ramp_failure",
        }
    }
}

impl fmt::Display for TripReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of admission a permit records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) enum Kind {
    /// Admitted by a closed breaker.
    Normal,
    /// A half-open probe: holds a probe slot until its outcome (or release).
    Probe,
    /// Admitted by the recovery ramp.
    Ramp,
    /// No breaker guards this call.
    Unguarded,
}

/// The right to make one attempt, granted at `started` in one breaker period (epoch).
///
/// Hand it back with [`Breaker::on_outcome`]. An outcome reported after the breaker has changed
/// period (opened, closed, been reset) is recorded for the baselines but decides nothing. A probe
/// permit that is dropped without an outcome keeps its slot until it is reclaimed: after the
/// attempt timeout it was granted for, or without one, after the break just served. (The
/// adapters hand the slot back at once from a drop guard, via [`Breaker::release`].)
#[must_use = "a permit must be handed back with on_outcome (or release)"]
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Permit {
    pub(crate) epoch: u8,
    pub(crate) kind: Kind,
    pub(crate) started: Instant,
}

impl Permit {
    /// When the attempt was admitted: latency is measured from here to the outcome.
    #[must_use]
    pub const fn started(&self) -> Instant {
        self.started
    }

    /// `true` for a half-open probe.
    #[must_use]
    pub const fn is_probe(&self) -> bool {
        matches!(self.kind, Kind::Probe)
    }

    /// A permit for a call no breaker guards.
    pub(crate) const fn unguarded(started: Instant) -> Permit {
        Permit {
            epoch: 0,
            kind: Kind::Unguarded,
            started,
        }
    }
}

/// The phase of the control state (the stored form of [`State`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) enum Phase {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
    Recovering = 3,
    Isolated = 4,
}

impl Phase {
    const fn state(self) -> State {
        match self {
            Phase::Closed => State::Closed,
            Phase::Open => State::Open,
            Phase::HalfOpen => State::HalfOpen,
            Phase::Recovering => State::Recovering,
            Phase::Isolated => State::Isolated,
        }
    }
}

/// The breaker's control state: small enough to pack into one 64-bit word (3 bits of phase,
/// 8 of epoch, 10 of count, 5 of probes, 5 of opens, 32 of mark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) struct Control {
    pub(crate) phase: Phase,
    /// The breaker period; bumped on every phase change, wrapping.
    pub(crate) epoch: u8,
    /// Closed: consecutive failures. HalfOpen: successful probes. Recovering: fast calls in a
    /// row since the last evidence step. At most [`MAX_COUNT`].
    pub(crate) count: u16,
    /// HalfOpen: probes in flight (at most the configured limit).
    pub(crate) probes: u8,
    /// Consecutive opens without a close in between: the break's exponent.
    pub(crate) opens: u8,
    /// Open: when the break ends. HalfOpen with probes out: when they are reclaimed.
    /// Recovering: when the ramp started.
    pub(crate) mark: Tick,
}

/// The recovery ramp's state (meaningful while Recovering) and the break last served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) struct Ramp {
    /// The break last served, in ms (it sets the ramp's length).
    pub(crate) served_ms: u32,
    /// The ramp's length, in ms.
    pub(crate) length_ms: u32,
    /// The evidence cap, in thousandths.
    pub(crate) cap: u16,
    /// Deficit-accounting credit, in thousandths (below 2000).
    pub(crate) credit: u16,
}

/// The ramp's floor and step: 5%.
const RAMP_INITIAL: u16 = 50;
/// One whole, in the ramp's thousandths.
const RAMP_ONE: u16 = 1000;
/// Opens are counted up to here; the break has long reached its maximum by then.
const MAX_OPENS: u8 = 31;

/// Notes a transition leaves for the events emitted after it is committed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Notes {
    pub(crate) changes: [Option<Change>; 2],
    pub(crate) probe_started: bool,
    pub(crate) reclaimed: u8,
    pub(crate) ramp_step: bool,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Change {
    pub(crate) from: State,
    pub(crate) to: State,
    pub(crate) reason: Option<TripReason>,
    pub(crate) break_for: Option<Duration>,
}

impl Notes {
    fn change(&mut self, c: Change) {
        for slot in &mut self.changes {
            if slot.is_none() {
                *slot = Some(c);
                return;
            }
        }
    }

    /// Hands the notes to `events` as events carrying `name`.
    pub(crate) fn emit(
        &self,
        name: &Name,
        c: &Control,
        r: &Ramp,
        now: Instant,
        events: &mut impl FnMut(Event<'_>),
    ) {
        if self.reclaimed > 0 {
            events(Event::ProbesReclaimed {
                name,
                count: self.reclaimed,
            });
        }
        for ch in self.changes.iter().flatten() {
            events(Event::StateChanged {
                name,
                from: ch.from,
                to: ch.to,
                reason: ch.reason,
                break_for: ch.break_for,
            });
        }
        if self.probe_started {
            events(Event::ProbeStarted { name });
        }
        if self.ramp_step && c.phase == Phase::Recovering {
            events(Event::RampStep {
                name,
                fraction: permille(ramp_fraction(c, r, now)),
                cap: permille(r.cap),
            });
        }
    }
}

fn permille(x: u16) -> Ratio {
    Ratio::from_permille(u32::from(x)).unwrap_or(Ratio::ONE)
}

impl Control {
    pub(crate) const fn new() -> Control {
        Control {
            phase: Phase::Closed,
            epoch: 0,
            count: 0,
            probes: 0,
            opens: 0,
            mark: Tick(0),
        }
    }

    /// The state as read at `now`, without changing anything.
    pub(crate) fn state(&self, r: &Ramp, now: Instant) -> State {
        match self.phase {
            Phase::Open if self.mark.reached(now) => State::HalfOpen,
            Phase::Recovering if ramp_fraction(self, r, now) >= RAMP_ONE => State::Closed,
            p => p.state(),
        }
    }
}

/// The jittered break for the `opens`-th consecutive open: equal jitter (half the nominal break
/// plus up to half again), drawn from a generator seeded by the owner's seed and the period, so
/// the same seed always gives the same breaks and different seeds spread across the band.
pub(crate) fn break_for(s: &BreakerSettings, opens: u8, seed: u64, epoch: u8) -> Duration {
    let nominal = s.nominal_break(opens).as_millis_ceil().max(1);
    if !s.jitter() {
        return Duration::from_millis(nominal);
    }
    let floor = nominal.div_ceil(2);
    let mix =
        u64::from(epoch).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(opens).rotate_left(32);
    let mut rng = fastrand::Rng::with_seed(seed ^ mix);
    Duration::from_millis(rng.u64(floor..=nominal))
}

/// The admitted fraction while Recovering, in thousandths: the lower of the clock term (5% rising
/// linearly to 1 over the ramp) and the evidence cap.
pub(crate) fn ramp_fraction(c: &Control, r: &Ramp, now: Instant) -> u16 {
    let elapsed = c.mark.elapsed(now).as_millis();
    let length = u64::from(r.length_ms.max(1));
    let climb = u64::from(RAMP_ONE - RAMP_INITIAL);
    let clock = u64::from(RAMP_INITIAL)
        .saturating_add(
            climb
                .saturating_mul(elapsed)
                .checked_div(length)
                .unwrap_or(climb),
        )
        .min(u64::from(RAMP_ONE));
    u16::try_from(clock).unwrap_or(RAMP_ONE).min(r.cap)
}

/// Opens the breaker (from any phase) with the grown, jittered break.
fn open(
    c: &mut Control,
    r: &mut Ramp,
    s: &BreakerSettings,
    now: Instant,
    seed: u64,
    reason: TripReason,
    n: &mut Notes,
) {
    let from = c.state(r, now);
    c.opens = c.opens.saturating_add(1).min(MAX_OPENS);
    c.epoch = c.epoch.wrapping_add(1);
    let d = break_for(s, c.opens, seed, c.epoch);
    c.phase = Phase::Open;
    c.mark = Tick::deadline(now, d);
    c.count = 0;
    c.probes = 0;
    r.served_ms = u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
    n.change(Change {
        from,
        to: State::Open,
        reason: Some(reason),
        break_for: Some(d),
    });
}

/// Closes the breaker: counts and break growth start over.
fn close(c: &mut Control, now: Instant, r: &Ramp, n: &mut Notes) {
    let from = c.state(r, now);
    c.phase = Phase::Closed;
    c.epoch = c.epoch.wrapping_add(1);
    c.count = 0;
    c.probes = 0;
    c.opens = 0;
    n.change(Change {
        from: if from == State::Closed {
            State::Recovering
        } else {
            from
        },
        to: State::Closed,
        reason: None,
        break_for: None,
    });
}

/// Probes succeeded: close, or start the ramp when one is configured.
fn recovered(c: &mut Control, r: &mut Ramp, s: &BreakerSettings, now: Instant, n: &mut Notes) {
    match s.recovery() {
        None => close(c, now, r, n),
        Some(ramp) => {
            c.phase = Phase::Recovering;
            c.epoch = c.epoch.wrapping_add(1);
            c.count = 0;
            c.probes = 0;
            c.mark = Tick::of(now);
            let length = ramp.length_for(Duration::from_millis(u64::from(r.served_ms)));
            r.length_ms = u32::try_from(length.as_millis()).unwrap_or(u32::MAX).max(1);
            r.cap = RAMP_ONE;
            r.credit = 0;
            n.change(Change {
                from: State::HalfOpen,
                to: State::Recovering,
                reason: None,
                break_for: None,
            });
            n.ramp_step = true;
        }
    }
}

/// Realises the transitions that time alone makes: the break ending (Open reads HalfOpen), lost
/// probes being reclaimed, the ramp running out.
pub(crate) fn advance(c: &mut Control, r: &Ramp, now: Instant, n: &mut Notes) {
    match c.phase {
        Phase::Open if c.mark.reached(now) => {
            c.phase = Phase::HalfOpen;
            c.count = 0;
            c.probes = 0;
            n.change(Change {
                from: State::Open,
                to: State::HalfOpen,
                reason: None,
                break_for: None,
            });
        }
        Phase::HalfOpen if c.probes > 0 && c.mark.reached(now) => {
            // The probes out never reported: give their slots back, and move to a new period so
            // that a late report cannot be counted twice.
            n.reclaimed = c.probes;
            c.probes = 0;
            c.epoch = c.epoch.wrapping_add(1);
        }
        Phase::Recovering if ramp_fraction(c, r, now) >= RAMP_ONE => close(c, now, r, n),
        _ => {}
    }
}

/// The admission rule: a permit kind, or a refusal. `hold` is how long a probe slot may stay
/// out before it is reclaimed.
pub(crate) fn acquire(
    c: &mut Control,
    r: &mut Ramp,
    s: &BreakerSettings,
    now: Instant,
    hold: Duration,
    n: &mut Notes,
) -> Result<Kind, Refused> {
    advance(c, r, now, n);
    match c.phase {
        Phase::Closed => Ok(Kind::Normal),
        Phase::Open => Err(Refused {
            reason: RefusalReason::BreakerOpen,
            retry_after: c.mark.remaining(now),
        }),
        Phase::Isolated => Err(Refused {
            reason: RefusalReason::Isolated,
            retry_after: Duration::MAX,
        }),
        Phase::HalfOpen => {
            if c.probes >= s.half_open_probes() {
                return Err(Refused {
                    reason: RefusalReason::HalfOpenFull,
                    retry_after: Duration::ZERO,
                });
            }
            let reclaim = Tick::deadline(now, hold);
            if c.probes == 0 || later(reclaim, c.mark) {
                c.mark = reclaim;
            }
            c.probes = c.probes.saturating_add(1);
            n.probe_started = true;
            Ok(Kind::Probe)
        }
        Phase::Recovering => {
            let p = ramp_fraction(c, r, now);
            let credit = r.credit.saturating_add(p);
            if credit >= RAMP_ONE {
                r.credit = credit.saturating_sub(RAMP_ONE);
                Ok(Kind::Ramp)
            } else {
                r.credit = credit;
                Err(Refused {
                    reason: RefusalReason::RampShedding,
                    retry_after: Duration::ZERO,
                })
            }
        }
    }
}

/// `true` when tick `a` lies after tick `b` (wrapping comparison).
fn later(a: Tick, b: Tick) -> bool {
    let ahead = a.0.wrapping_sub(b.0);
    ahead != 0 && ahead < (1 << 31)
}

/// What one outcome means for the control state. `slow` is the caller's reading of the
/// latency against the slow-call threshold; `readings` are the statistics after recording it.
#[allow(clippy::too_many_arguments)] // one pure rule, spelled out: every input is needed
pub(crate) fn complete(
    c: &mut Control,
    r: &mut Ramp,
    s: &BreakerSettings,
    now: Instant,
    seed: u64,
    permit: &Permit,
    outcome: Outcome,
    slow: bool,
    readings: Option<&Readings>,
    n: &mut Notes,
) {
    if permit.kind == Kind::Unguarded || permit.epoch != c.epoch {
        // A permit from an earlier period decides nothing.
        return;
    }
    match (c.phase, permit.kind) {
        (Phase::Closed, Kind::Normal) => {
            if outcome == Outcome::Success {
                c.count = 0;
            } else if outcome.is_failure() {
                c.count = c.count.saturating_add(1).min(MAX_COUNT);
                if c.count >= s.consecutive_failures() {
                    open(c, r, s, now, seed, TripReason::ConsecutiveFailures, n);
                    return;
                }
            }
            if outcome.is_counted() {
                if let Some(reason) = readings.and_then(|rd| stats::trip_reason(rd, s)) {
                    open(c, r, s, now, seed, reason, n);
                }
            }
        }
        (Phase::HalfOpen, Kind::Probe) => {
            c.probes = c.probes.saturating_sub(1);
            if outcome.is_failure() {
                open(c, r, s, now, seed, TripReason::ProbeFailed, n);
            } else if outcome == Outcome::Success {
                if slow {
                    if s.recovery().is_some() {
                        recovered(c, r, s, now, n);
                    } else {
                        open(c, r, s, now, seed, TripReason::SlowProbe, n);
                    }
                    return;
                }
                c.count = c.count.saturating_add(1).min(MAX_COUNT);
                if c.count >= s.probe_successes() {
                    recovered(c, r, s, now, n);
                }
            }
        }
        (Phase::Recovering, Kind::Ramp) => {
            if outcome.is_failure() {
                open(c, r, s, now, seed, TripReason::RampFailure, n);
            } else if outcome == Outcome::Success {
                if slow {
                    // A slow call halves the admitted fraction on the spot, never below 5%.
                    r.cap = (r.cap / 2).max(RAMP_INITIAL);
                    c.count = 0;
                    n.ramp_step = true;
                } else {
                    c.count = c.count.saturating_add(1).min(MAX_COUNT);
                    if c.count >= s.probe_successes() {
                        r.cap = r.cap.saturating_add(RAMP_INITIAL).min(RAMP_ONE);
                        c.count = 0;
                        n.ramp_step = true;
                    }
                }
                advance(c, r, now, n);
            }
        }
        _ => {}
    }
}

/// Gives a probe slot back without an outcome (the caller's attempt was cancelled).
pub(crate) fn release(c: &mut Control, permit: &Permit) {
    if permit.kind == Kind::Probe && permit.epoch == c.epoch && c.phase == Phase::HalfOpen {
        c.probes = c.probes.saturating_sub(1);
    }
}

/// A point-in-time view of a breaker, for health endpoints and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Snapshot {
    /// The breaker's name.
    pub name: Name,
    /// The state as read now.
    pub state: State,
    /// Consecutive transient failures counted while closed.
    pub consecutive_failures: u16,
    /// Probes in flight while half-open.
    pub probes_in_flight: u8,
    /// Consecutive opens without a close (the break's exponent).
    pub consecutive_opens: u8,
    /// The (jittered) break last served or being served, if the breaker has opened.
    pub break_duration: Option<Duration>,
    /// Time until the break ends (zero unless open).
    pub until_half_open: Duration,
    /// The admitted fraction while recovering.
    pub ramp_fraction: Option<Ratio>,
    /// The learned median latency of successful calls.
    pub normal_latency: Option<Duration>,
    /// The learned normal failure rate (once armed).
    pub normal_failure_rate: Option<Ratio>,
    /// Calls counted in the trip window.
    pub window_calls: u32,
    /// Failures counted in the trip window.
    pub window_failures: u32,
    /// Slow calls counted in the trip window.
    pub window_slow: u32,
}

impl Snapshot {
    /// `true` when the dependency is not fully trusted: anything but closed. A breaker that
    /// is recovering reads as degraded, not healthy.
    #[must_use]
    pub const fn is_degraded(&self) -> bool {
        !matches!(self.state, State::Closed)
    }
}

/// A circuit breaker, single-threaded form (`&mut self`). Deterministic: the same settings,
/// seed, instants and outcomes always give the same decisions.
///
/// ```
/// use stormguard_core::{Breaker, BreakerSettings, Duration, Instant, Outcome, State};
///
/// let mut b = Breaker::new(BreakerSettings::defaults("payments")).with_seed(7);
/// let t0 = Instant::from_secs(100);
/// for _ in 0..5 {
///     let p = b.try_acquire(t0)?;
///     b.on_outcome(t0, p, Outcome::Transient, &mut |_| {});
/// }
/// assert_eq!(b.state(t0), State::Open);
/// // The first break is 15 s with equal jitter: between 7.5 s and 15 s.
/// let brk = b.snapshot(t0).break_duration.unwrap();
/// assert!(brk >= Duration::from_millis(7500) && brk <= Duration::from_secs(15));
/// assert_eq!(b.state(t0 + brk), State::HalfOpen); // reading uses no probe slot
/// # Ok::<(), stormguard_core::Refused>(())
/// ```
#[derive(Clone, Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    control: Control,
    ramp: Ramp,
    stats: Stats,
    seed: u64,
}

/// A seed derived from the name, so breakers with different names jitter differently even when
/// nobody sets a seed (FNV-1a). Fleets should still seed each process differently.
fn seed_from(name: &Name) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Breaker {
    /// A breaker with validated `settings`, closed, with a seed derived from its name.
    #[must_use]
    pub fn new(settings: BreakerSettings) -> Breaker {
        let seed = seed_from(settings.name());
        Breaker {
            settings,
            control: Control::new(),
            ramp: Ramp::default(),
            stats: Stats::new(),
            seed,
        }
    }

    /// The common case: every default, opening after `consecutive_failures` in a row.
    pub fn of(consecutive_failures: u32, name: &'static str) -> Result<Breaker, SettingsError> {
        BreakerSettings::builder(name)
            .consecutive_failures(consecutive_failures)
            .build()
            .map(Breaker::new)
    }

    /// Sets the jitter seed. Give each process its own (the adapters seed from entropy), so a
    /// fleet's breaks do not line up.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Breaker {
        self.seed = seed;
        self
    }

    /// The settings this breaker was built with.
    #[must_use]
    pub const fn settings(&self) -> &BreakerSettings {
        &self.settings
    }

    /// The breaker's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        self.settings.name()
    }

    /// The state at `now`. Reading consumes nothing: after the break it reads `HalfOpen` before
    /// any call arrives.
    #[must_use]
    pub fn state(&self, now: Instant) -> State {
        self.control.state(&self.ramp, now)
    }

    /// Asks to make one attempt at `now`. Probe slots taken this way are reclaimed after the
    /// break just served if their outcome never arrives; see [`Breaker::try_acquire_with`].
    pub fn try_acquire(&mut self, now: Instant) -> Result<Permit, Refused> {
        self.try_acquire_with(now, None, &mut |_| {})
    }

    /// Asks to make one attempt at `now`, with the attempt timeout (which bounds how long a probe
    /// slot may stay out without an outcome) and a sink for the events the admission produces.
    pub fn try_acquire_with(
        &mut self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut impl FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        let hold =
            attempt_timeout.unwrap_or(Duration::from_millis(u64::from(self.ramp.served_ms.max(1))));
        let mut notes = Notes::default();
        let result = acquire(
            &mut self.control,
            &mut self.ramp,
            &self.settings,
            now,
            hold,
            &mut notes,
        );
        notes.emit(self.settings.name(), &self.control, &self.ramp, now, events);
        result.map(|kind| Permit {
            epoch: self.control.epoch,
            kind,
            started: now,
        })
    }

    /// Would a call be admitted at `now`? Changes nothing (not even the ramp's credit).
    pub fn check(&self, now: Instant) -> Result<(), Refused> {
        let mut c = self.control;
        let mut r = self.ramp;
        acquire(
            &mut c,
            &mut r,
            &self.settings,
            now,
            Duration::ZERO,
            &mut Notes::default(),
        )
        .map(|_| ())
    }

    /// Reports how the attempt behind `permit` ended, at `now`. Latency is `now - permit.started()`.
    pub fn on_outcome(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut impl FnMut(Event<'_>),
    ) {
        let latency = now.saturating_duration_since(permit.started);
        let current = permit.epoch == self.control.epoch && permit.kind != Kind::Unguarded;
        let threshold = stats::slow_threshold(
            &self.settings,
            self.stats.normal_latency(now, &self.settings),
            self.stats.latency_samples(now, &self.settings),
        );
        let slow = outcome == Outcome::TimedOut || threshold.is_some_and(|t| latency > t);
        let keeps = self.settings.keeps_statistics();
        if keeps {
            let sample = Sample {
                to_window: current && self.control.phase == Phase::Closed,
                counted: outcome.is_counted(),
                failure: outcome.is_failure(),
                slow,
                baseline_latency: (outcome == Outcome::Success).then_some(latency),
            };
            self.stats.record(now, &self.settings, sample);
        }
        let readings = keeps.then(|| self.stats.readings(now, &self.settings));
        let mut notes = Notes::default();
        complete(
            &mut self.control,
            &mut self.ramp,
            &self.settings,
            now,
            self.seed,
            &permit,
            outcome,
            slow,
            readings.as_ref(),
            &mut notes,
        );
        if notes
            .changes
            .iter()
            .flatten()
            .any(|ch| ch.to == State::Open || ch.to == State::Closed)
        {
            self.stats.clear_window(now, &self.settings);
        }
        notes.emit(self.settings.name(), &self.control, &self.ramp, now, events);
    }

    /// Gives back a permit whose attempt never ran to an outcome (the caller was cancelled): a
    /// probe slot is freed at once; nothing is counted.
    pub fn release(&mut self, permit: Permit) {
        release(&mut self.control, &permit);
    }

    /// Forces the breaker open until [`Breaker::reset`]: every call is refused with
    /// [`RefusalReason::Isolated`].
    pub fn isolate(&mut self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
        let from = self.state(now);
        self.control.phase = Phase::Isolated;
        self.control.epoch = self.control.epoch.wrapping_add(1);
        self.control.probes = 0;
        let mut notes = Notes::default();
        notes.change(Change {
            from,
            to: State::Isolated,
            reason: None,
            break_for: None,
        });
        notes.emit(self.settings.name(), &self.control, &self.ramp, now, events);
    }

    /// Closes the breaker: clears the trip window and the break growth. The learned baselines
    /// stay (they measure the dependency, not a verdict on it).
    pub fn reset(&mut self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
        let from = self.state(now);
        self.control = Control {
            epoch: self.control.epoch.wrapping_add(1),
            ..Control::new()
        };
        self.stats.clear_window(now, &self.settings);
        let mut notes = Notes::default();
        notes.change(Change {
            from,
            to: State::Closed,
            reason: None,
            break_for: None,
        });
        notes.emit(self.settings.name(), &self.control, &self.ramp, now, events);
    }

    /// When a timed transition is due (break end, probe reclaim, ramp end), if any.
    #[must_use]
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        match self.control.phase {
            Phase::Open => Some(now.saturating_add(self.control.mark.remaining(now))),
            Phase::HalfOpen if self.control.probes > 0 => {
                Some(now.saturating_add(self.control.mark.remaining(now)))
            }
            Phase::Recovering => {
                let length = Duration::from_millis(u64::from(self.ramp.length_ms));
                Some(now.saturating_add(length.saturating_sub(self.control.mark.elapsed(now))))
            }
            _ => None,
        }
    }

    /// Realises the transitions due at `now` and emits their events. Calling it early, or
    /// twice, does nothing.
    pub fn handle_timeout(&mut self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
        let mut notes = Notes::default();
        advance(&mut self.control, &self.ramp, now, &mut notes);
        if notes
            .changes
            .iter()
            .flatten()
            .any(|ch| ch.to == State::Closed)
        {
            self.stats.clear_window(now, &self.settings);
        }
        notes.emit(self.settings.name(), &self.control, &self.ramp, now, events);
    }

    /// The learned median latency of successful calls, once there is one.
    #[must_use]
    pub fn normal_latency(&self, now: Instant) -> Option<Duration> {
        self.stats.normal_latency(now, &self.settings)
    }

    /// The learned normal failure rate, once the baseline holds enough outcomes to arm the
    /// relative rule (or 100 without one).
    #[must_use]
    pub fn normal_failure_rate(&self, now: Instant) -> Option<Ratio> {
        let r = self.stats.readings(now, &self.settings);
        let arming = self
            .settings
            .failure_rate()
            .map_or(100, |f| f.arming_outcomes());
        if r.baseline_calls < arming {
            return None;
        }
        Ratio::of(u64::from(r.baseline_failures), u64::from(r.baseline_calls))
    }

    /// The admitted fraction at `now` while recovering.
    #[must_use]
    pub fn ramp_fraction(&self, now: Instant) -> Option<Ratio> {
        (self.state(now) == State::Recovering)
            .then(|| permille(ramp_fraction(&self.control, &self.ramp, now)))
    }

    /// A point-in-time view for health endpoints and metrics.
    #[must_use]
    pub fn snapshot(&self, now: Instant) -> Snapshot {
        let state = self.state(now);
        let readings = self.stats.readings(now, &self.settings);
        Snapshot {
            name: *self.settings.name(),
            state,
            consecutive_failures: if self.control.phase == Phase::Closed {
                self.control.count
            } else {
                0
            },
            probes_in_flight: if state == State::HalfOpen {
                self.control.probes
            } else {
                0
            },
            consecutive_opens: self.control.opens,
            break_duration: (self.ramp.served_ms > 0)
                .then(|| Duration::from_millis(u64::from(self.ramp.served_ms))),
            until_half_open: if state == State::Open {
                self.control.mark.remaining(now)
            } else {
                Duration::ZERO
            },
            ramp_fraction: self.ramp_fraction(now),
            normal_latency: self.normal_latency(now),
            normal_failure_rate: self.normal_failure_rate(now),
            window_calls: readings.window.calls,
            window_failures: readings.window.failures,
            window_slow: readings.window.slow,
        }
    }
}
