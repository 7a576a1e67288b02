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
//! The control state (`Control`) is a handful of small integers that pack into one 64-bit word,
//! and the rules are functions that take it by `&mut` on a copy: the single-threaded breaker
//! applies them in place, a shared breaker runs the same functions between a load and a
//! compare-exchange. Statistics (trip window, baselines) live apart and only feed the pure trip
//! decision (`stats`).

pub(crate) mod keyed;
pub(crate) mod lean;
pub(crate) mod settings;
pub(crate) mod shared;
pub(crate) mod stats;

pub use self::keyed::{FullTable, Keyed, KeyedRefusal, Member, STALE_BREAKS};
pub use self::lean::LeanBreaker;
pub use self::settings::{
    BreakerSettings, BreakerSettingsBuilder, FailureRate, Recovery, SlowCalls, MAX_COUNT,
    MAX_PROBES, TRIP_BUCKETS,
};
pub use self::shared::{PermitGuard, SharedBreaker, DEFAULT_LANES};
pub use self::stats::LaneHint;
// Defined with the call driver, which hands them around; named here too, where a breaker user
// meets them.
pub use crate::call::{HedgeSuppressed, Permit};

use core::cell::Cell;
use core::fmt;
use core::marker::PhantomData;

use self::stats::{Fold, HistCounts, Measure, NoStats, Readings, Ring, Sample, Stats, Stripes};
use crate::call::Kind;
use crate::error::SettingsError;
use crate::error::{RefusalReason, Refused};
use crate::event::Event;
use crate::name::Name;
use crate::outcome::Outcome;
use crate::packed::{const_unless_loom, field, pack_instant, put, unpack_instant, word, Word};
use crate::ratio::Ratio;
use crate::rng::JitterRng;
use crate::state::{Health, State, TripReason};
use crate::time::{Duration, Instant};

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
/// 8 of epoch, 10 of count, 5 of probes, 5 of opens, 10 of probe successes), so the shared form
/// installs it with one compare-exchange. Its mark is kept in a word of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) struct Control {
    pub(crate) phase: Phase,
    /// The breaker period; bumped on every phase change (and probe reclaim), wrapping.
    pub(crate) epoch: u8,
    /// Transient failures in a row, with no success in between: counted while closed (where
    /// they trip the breaker), held through the break and half-open (a failed probe adds one),
    /// and zero again at the first success. At most [`MAX_COUNT`].
    pub(crate) count: u16,
    /// HalfOpen: probes in flight (at most the configured limit).
    pub(crate) probes: u8,
    /// HalfOpen: successful probes. At most [`MAX_COUNT`].
    pub(crate) successes: u16,
    /// HalfOpen: failed probes the learned failure rate still explains (see
    /// [`probe_failures_reopen`]). At most [`MAX_COUNT`].
    pub(crate) probe_failures: u16,
    /// Consecutive opens without a close in between: the break's exponent.
    pub(crate) opens: u8,
    /// Open: when the break ends. HalfOpen with probes out: when they are reclaimed.
    /// Recovering: when the ramp started. Kept in its own word, tagged with the epoch (see
    /// [`Mark`]); the packed control word does not hold it.
    pub(crate) mark: Mark,
}

/// The bits of the mark word a [`Mark`] takes.
const MARK_BITS: u32 = 56;

/// The largest value a [`Mark`] holds, reserved for [`Mark::PENDING`] (never an instant's).
const MARK_MAX: u64 = (1 << MARK_BITS) - 1;

/// A point in time, as the breaker's mark word stores it beside its epoch tag: exact for the
/// first 2^55 ns (over a year) of the clock, in whole microseconds after that (see
/// [`pack_instant`]). Ordered like the instants. Not wrapping: a breaker left alone for any
/// length of time reads its break as over and its ramp as run out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) struct Mark(pub(crate) u64);

impl Mark {
    /// A mark whose writer has not stored it yet (the shared form writes the control word
    /// first): never reached, no time elapsed since it. Readers treat it conservatively.
    pub(crate) const PENDING: Mark = Mark(MARK_MAX);

    /// The mark of `now` (past 2^55 ns, the microsecond it falls in).
    pub(crate) const fn of(now: Instant) -> Mark {
        Mark(pack_instant(now, MARK_BITS, false))
    }

    /// The mark of `now + d` (past 2^55 ns, the first whole microsecond at or after it, so a
    /// span is never served short, nor more than 999 ns long).
    pub(crate) const fn deadline(now: Instant, d: Duration) -> Mark {
        Mark(pack_instant(now.saturating_add(d), MARK_BITS, true))
    }

    const fn instant(self) -> Instant {
        unpack_instant(self.0, MARK_BITS)
    }

    /// `true` once `now` has reached this mark (never for a pending one).
    pub(crate) const fn reached(self, now: Instant) -> bool {
        self.0 != MARK_MAX && now.as_nanos() >= self.instant().as_nanos()
    }

    /// Time from `now` until this mark; zero once reached.
    pub(crate) const fn remaining(self, now: Instant) -> Duration {
        self.instant().saturating_duration_since(now)
    }

    /// Time from this mark to `now`; zero if `now` is earlier or the mark is pending.
    pub(crate) const fn elapsed(self, now: Instant) -> Duration {
        if self.0 == MARK_MAX {
            Duration::ZERO
        } else {
            now.saturating_duration_since(self.instant())
        }
    }

    /// The mark word: the epoch tag in the high 8 bits, the time in the low 56.
    const fn pack(self, epoch: u8) -> u64 {
        put(epoch as u64, MARK_BITS, 8) | put(self.0, 0, MARK_BITS)
    }

    /// The mark of period `epoch` from its word: pending if the word belongs to another period.
    const fn read(w: u64, epoch: u8) -> Mark {
        if field(w, MARK_BITS, 8) == epoch as u64 {
            Mark(field(w, 0, MARK_BITS))
        } else {
            Mark::PENDING
        }
    }
}

impl Control {
    pub(crate) const fn new() -> Control {
        Control {
            phase: Phase::Closed,
            epoch: 0,
            count: 0,
            probes: 0,
            successes: 0,
            probe_failures: 0,
            opens: 0,
            mark: Mark(0),
        }
    }

    pub(crate) const fn pack(self) -> u64 {
        put(self.phase as u64, 0, 3)
            | put(self.epoch as u64, 3, 8)
            | put(self.count as u64, 11, 10)
            | put(self.probes as u64, 21, 5)
            | put(self.opens as u64, 26, 5)
            | put(self.successes as u64, 31, 10)
            | put(self.probe_failures as u64, 41, 10)
    }

    pub(crate) const fn unpack(w: u64) -> Control {
        let phase = match field(w, 0, 3) {
            1 => Phase::Open,
            2 => Phase::HalfOpen,
            3 => Phase::Recovering,
            4 => Phase::Isolated,
            _ => Phase::Closed,
        };
        // Each field was masked to its width, so the narrowing casts are exact.
        Control {
            phase,
            epoch: field(w, 3, 8) as u8,
            count: field(w, 11, 10) as u16,
            probes: field(w, 21, 5) as u8,
            opens: field(w, 26, 5) as u8,
            successes: field(w, 31, 10) as u16,
            probe_failures: field(w, 41, 10) as u16,
            mark: Mark::PENDING,
        }
    }

    /// The state as read at `now`, without changing anything.
    pub(crate) fn state<M: Measure>(
        &self,
        r: &Ramp,
        s: &BreakerSettings,
        seed: u64,
        now: Instant,
    ) -> State {
        match self.phase {
            Phase::Open if self.mark.reached(now) => State::HalfOpen,
            Phase::Recovering if ramp_fraction::<M>(self, r, s, seed, now) >= RAMP_ONE => {
                State::Closed
            }
            p => p.state(),
        }
    }
}

/// The recovery ramp's state, tagged with the period (epoch) it belongs to: a word whose tag is
/// not the current epoch reads as a fresh ramp, so entering `Recovering` needs no second write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) struct Ramp {
    pub(crate) tag: u8,
    /// The evidence cap, in thousandths.
    pub(crate) cap: u16,
    /// Deficit-accounting credit, in thousandths (below 2000).
    pub(crate) credit: u16,
    /// Fast admitted calls in a row since the last evidence step.
    pub(crate) streak: u16,
    /// Counted outcomes of the calls the ramp admitted (halved with `failures` and `slow`
    /// when any of the three is full).
    pub(crate) outcomes: u16,
    /// Failures among them.
    pub(crate) failures: u16,
    /// Slow calls among them.
    pub(crate) slow: u16,
}

impl Ramp {
    /// The ramp outside `Recovering`: never read for a decision.
    pub(crate) const IDLE: Ramp = Ramp::fresh(0);

    /// A ramp just begun in period `epoch`: full evidence cap, no credit, nothing counted.
    const fn fresh(epoch: u8) -> Ramp {
        Ramp {
            tag: epoch,
            cap: RAMP_ONE,
            credit: 0,
            streak: 0,
            outcomes: 0,
            failures: 0,
            slow: 0,
        }
    }

    /// The ramp of period `epoch`, read from its stored word.
    pub(crate) const fn current(w: u64, epoch: u8) -> Ramp {
        let r = Ramp::unpack(w);
        if r.tag == epoch {
            r
        } else {
            Ramp::fresh(epoch)
        }
    }

    /// The ramp word: 8 bits of tag, 10 of cap (at most 1000), 11 of credit (below 2000), 10 of
    /// streak (at most [`MAX_COUNT`]), 11 of outcomes, 7 of failures and 7 of slow calls.
    pub(crate) const fn pack(self) -> u64 {
        put(self.tag as u64, 0, 8)
            | put(self.cap as u64, 8, 10)
            | put(self.credit as u64, 18, 11)
            | put(self.streak as u64, 29, 10)
            | put(self.outcomes as u64, 39, 11)
            | put(self.failures as u64, 50, 7)
            | put(self.slow as u64, 57, 7)
    }

    pub(crate) const fn unpack(w: u64) -> Ramp {
        // Each field was masked to its width, so the narrowing casts are exact.
        Ramp {
            tag: field(w, 0, 8) as u8,
            cap: field(w, 8, 10) as u16,
            credit: field(w, 18, 11) as u16,
            streak: field(w, 29, 10) as u16,
            outcomes: field(w, 39, 11) as u16,
            failures: field(w, 50, 7) as u16,
            slow: field(w, 57, 7) as u16,
        }
    }

    /// Counts one admitted call's outcome. When any count is full all three are halved, which
    /// keeps their ratios: the ramp then weighs its recent calls more.
    const fn tally(&mut self, sample: RampSample) {
        if self.outcomes >= RAMP_MAX_OUTCOMES
            || self.failures >= RAMP_MAX_MARKED
            || self.slow >= RAMP_MAX_MARKED
        {
            self.outcomes /= 2;
            self.failures /= 2;
            self.slow /= 2;
        }
        self.outcomes = self.outcomes.saturating_add(1);
        if sample.failure {
            self.failures = self.failures.saturating_add(1);
        }
        if sample.slow {
            self.slow = self.slow.saturating_add(1);
        }
    }
}

/// The most outcomes the ramp word counts (11 bits) before halving.
const RAMP_MAX_OUTCOMES: u16 = (1 << 11) - 1;
/// The most failures, and the most slow calls, the ramp word counts (7 bits each) before
/// halving.
const RAMP_MAX_MARKED: u16 = (1 << 7) - 1;

/// What one outcome of a call the ramp admitted tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RampSample {
    /// A transient failure (a timeout included).
    pub(crate) failure: bool,
    /// Slow: at or above the slow-call threshold, or timed out.
    pub(crate) slow: bool,
}

/// The phase's bits in the packed control word.
const PHASE_MASK: u64 = 0b111;
/// Phase, epoch and count: the bits a success while closed could change.
const QUIET_MASK: u64 = (1 << 21) - 1;

/// Successful samples the tail estimate needs before the attempt ceiling and hedging trust it.
const TAIL_SAMPLES: u32 = 20;
/// The measured attempt ceiling, in multiples of the recent p95.
const CEILING_MULTIPLE: u64 = 3;
/// A hedge never starts sooner than this after the attempt it doubles: the p95 of an operation
/// that takes microseconds would otherwise double nearly every call on a scheduling hiccup.
const HEDGE_FLOOR: Duration = Duration::from_millis(10);

/// The ramp's floor and step: 5%.
const RAMP_INITIAL: u16 = 50;
/// One whole, in the ramp's thousandths.
const RAMP_ONE: u16 = 1000;
/// Opens are counted up to here (5 bits); the break has long reached its maximum by then.
const MAX_OPENS: u8 = 31;

/// Notes a transition leaves for the events emitted after it is committed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Notes {
    pub(crate) changes: [Option<Change>; 2],
    pub(crate) probe_started: bool,
    pub(crate) reclaimed: u8,
    pub(crate) ramp_step: bool,
    /// The run of failures that tripped the consecutive rule, when it did (0 otherwise).
    pub(crate) trip_run: u16,
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

    /// `true` when there is nothing to emit.
    fn is_empty(&self) -> bool {
        self.changes[0].is_none() && !self.probe_started && self.reclaimed == 0 && !self.ramp_step
    }

    /// `true` when the breaker opened or closed: the trip window's evidence has been used.
    fn decided(&self) -> bool {
        self.changes
            .iter()
            .flatten()
            .any(|ch| ch.to == State::Open || ch.to == State::Closed)
    }

    /// `true` when the breaker opened.
    fn opened(&self) -> bool {
        self.changes.iter().flatten().any(|ch| ch.to == State::Open)
    }
}

fn permille(x: u16) -> Ratio {
    Ratio::from_permille(u32::from(x)).unwrap_or(Ratio::ONE)
}

/// The jittered break for the `opens`-th consecutive open: equal jitter (half the nominal break
/// plus up to half again), drawn from a generator seeded by the owner's seed and the open count,
/// so the same seed always gives the same breaks and different seeds spread across the band.
/// Being a pure function, the break just served need not be stored.
pub(crate) fn break_for(s: &BreakerSettings, opens: u8, seed: u64) -> Duration {
    jittered_break(s, s.nominal_break(opens.max(1)), opens, seed)
}

/// [`break_for`], its nominal length already read.
#[inline]
fn jittered_break(s: &BreakerSettings, nominal: Duration, opens: u8, seed: u64) -> Duration {
    // Drawn in whole microseconds: fine enough for any break, and the draw stays small.
    let nominal = nominal.as_micros_ceil().max(1);
    if !s.jitter() {
        return Duration::from_micros(nominal);
    }
    let floor = nominal.div_ceil(2);
    let mut rng = JitterRng::with_seed(seed ^ u64::from(opens).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    Duration::from_micros(floor.saturating_add(rng.up_to(nominal.saturating_sub(floor))))
}

/// The recovery ramp's settings, if this breaker form can run one: a form without statistics
/// cannot (it refuses such settings at construction), and with this its build links no ramp
/// code at all.
#[inline]
fn recovery<M: Measure>(s: &BreakerSettings) -> Option<crate::breaker::settings::Recovery> {
    if M::KEEPS {
        s.recovery()
    } else {
        None
    }
}

/// The ramp's length: its fraction of the break just served, clamped.
fn ramp_length<M: Measure>(s: &BreakerSettings, opens: u8, seed: u64) -> Duration {
    recovery::<M>(s)
        .map_or(Duration::ZERO, |ramp| {
            ramp.length_for(break_for(s, opens, seed))
        })
        .max(Duration::from_nanos(1))
}

/// The admitted fraction while Recovering, in thousandths: the lower of the clock term (5% rising
/// linearly to 1 over the ramp) and the evidence cap.
pub(crate) fn ramp_fraction<M: Measure>(
    c: &Control,
    r: &Ramp,
    s: &BreakerSettings,
    seed: u64,
    now: Instant,
) -> u16 {
    if !M::KEEPS {
        return RAMP_ONE;
    }
    let elapsed = c.mark.elapsed(now).as_nanos();
    let length = ramp_length::<M>(s, c.opens, seed).as_nanos();
    let climb = RAMP_ONE - RAMP_INITIAL;
    let risen = if elapsed >= length {
        climb
    } else {
        // elapsed < length: scale both down to 22 bits (rounding off at most one part in 2
        // million of the ramp, which moves in steps of 1/950 anyway), so the product with the
        // climb and the division stay in 32 bits, which a microcontroller divides in hardware.
        let shift = 64u32
            .saturating_sub(length.leading_zeros())
            .saturating_sub(22);
        let (elapsed, length) = ((elapsed >> shift) as u32, (length >> shift) as u32);
        let part = u32::from(climb)
            .saturating_mul(elapsed)
            .checked_div(length)
            .unwrap_or(0);
        u16::try_from(part).unwrap_or(climb).min(climb)
    };
    RAMP_INITIAL.saturating_add(risen).min(r.cap)
}

/// Opens the breaker (from any phase) with the grown, jittered break.
fn open<M: Measure>(
    c: &mut Control,
    r: &Ramp,
    s: &BreakerSettings,
    seed: u64,
    now: Instant,
    reason: TripReason,
    n: &mut Notes,
) {
    let from = c.state::<M>(r, s, seed, now);
    c.opens = c.opens.saturating_add(1).min(MAX_OPENS);
    c.epoch = c.epoch.wrapping_add(1);
    let d = break_for(s, c.opens, seed);
    c.phase = Phase::Open;
    c.mark = Mark::deadline(now, d);
    c.probes = 0;
    c.successes = 0;
    c.probe_failures = 0;
    n.change(Change {
        from,
        to: State::Open,
        reason: Some(reason),
        break_for: Some(d),
    });
}

/// Closes the breaker: counts and break growth start over.
fn close(c: &mut Control, from: State, n: &mut Notes) {
    c.phase = Phase::Closed;
    c.epoch = c.epoch.wrapping_add(1);
    c.count = 0;
    c.probes = 0;
    c.opens = 0;
    c.successes = 0;
    c.probe_failures = 0;
    n.change(Change {
        from,
        to: State::Closed,
        reason: None,
        break_for: None,
    });
}

/// Probes succeeded: close, or start the ramp when one is configured.
fn recovered<M: Measure>(c: &mut Control, s: &BreakerSettings, now: Instant, n: &mut Notes) {
    if recovery::<M>(s).is_none() {
        return close(c, State::HalfOpen, n);
    }
    c.phase = Phase::Recovering;
    c.epoch = c.epoch.wrapping_add(1);
    c.count = 0;
    c.probes = 0;
    c.successes = 0;
    c.probe_failures = 0;
    c.mark = Mark::of(now);
    n.change(Change {
        from: State::HalfOpen,
        to: State::Recovering,
        reason: None,
        break_for: None,
    });
    n.ramp_step = true;
}

/// Realises the transitions that time alone makes: the break ending (Open becomes HalfOpen),
/// lost probes being reclaimed, the ramp running out.
pub(crate) fn advance<M: Measure>(
    c: &mut Control,
    r: &Ramp,
    s: &BreakerSettings,
    seed: u64,
    now: Instant,
    n: &mut Notes,
) {
    match c.phase {
        Phase::Open if c.mark.reached(now) => {
            c.phase = Phase::HalfOpen;
            // A new period: the break's end is no probe deadline. (In the shared form the
            // first probe's deadline is stored after the control word; until then the mark of
            // this period reads as pending, so no probe is reclaimed on the break's old end.)
            c.epoch = c.epoch.wrapping_add(1);
            c.probes = 0;
            c.successes = 0;
            c.probe_failures = 0;
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
        Phase::Recovering if ramp_fraction::<M>(c, r, s, seed, now) >= RAMP_ONE => {
            close(c, State::Recovering, n);
        }
        _ => {}
    }
}

/// What the control state says to an admission request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Admitted, as this kind of permit.
    Grant(Kind),
    /// Recovering: the ramp's deficit accounting decides ([`admit_ramp`]).
    Ramp,
}

/// The admission rule over the control state. `attempt_timeout` bounds how long a probe slot
/// may stay out before it is reclaimed.
#[allow(clippy::too_many_arguments)] // one pure rule, spelled out: every input is needed
pub(crate) fn admit<M: Measure>(
    c: &mut Control,
    r: &Ramp,
    s: &BreakerSettings,
    seed: u64,
    now: Instant,
    attempt_timeout: Option<Duration>,
    n: &mut Notes,
) -> Result<Admit, Refused> {
    advance::<M>(c, r, s, seed, now, n);
    match c.phase {
        Phase::Closed => Ok(Admit::Grant(Kind::Normal)),
        Phase::Recovering => Ok(Admit::Ramp),
        Phase::Open => Err(Refused {
            reason: RefusalReason::BreakerOpen,
            retry_after: open_remaining(c, s, seed, now),
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
            // A probe that never reports is reclaimed after its attempt timeout, or without
            // one, after the break just served.
            let hold = match attempt_timeout {
                Some(t) => t,
                None => break_for(s, c.opens, seed),
            };
            let reclaim = Mark::deadline(now, hold);
            if c.probes == 0 || c.mark == Mark::PENDING || reclaim > c.mark {
                c.mark = reclaim;
            }
            c.probes = c.probes.saturating_add(1);
            n.probe_started = true;
            Ok(Admit::Grant(Kind::Probe))
        }
    }
}

/// The ramp's admission: each offer adds p to the credit, and a whole credit admits one call,
/// so over any run of offers the admitted count stays within one of the sum of p.
pub(crate) fn admit_ramp<M: Measure>(
    c: &Control,
    r: &mut Ramp,
    s: &BreakerSettings,
    seed: u64,
    now: Instant,
) -> Result<Kind, Refused> {
    let p = ramp_fraction::<M>(c, r, s, seed, now);
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

/// What is left of the break while Open: never more than the break itself, plus the part of a
/// microsecond its end is rounded up by once the clock is past 2^55 ns (see [`Mark`]). A clock
/// that stepped back means no time passed; a mark still pending reads as a break just begun.
pub(crate) fn open_remaining(
    c: &Control,
    s: &BreakerSettings,
    seed: u64,
    now: Instant,
) -> Duration {
    // Where flash counts more than nanoseconds, the break is drawn every time.
    if cfg!(target_pointer_width = "64") {
        return break_remaining(c.mark.remaining(now), c.opens, s, seed);
    }
    let longest = break_for(s, c.opens, seed).saturating_add(Duration::from_nanos(999));
    c.mark.remaining(now).min(longest)
}

/// [`open_remaining`], the time to the mark already read.
#[inline]
fn break_remaining(remaining: Duration, opens: u8, s: &BreakerSettings, seed: u64) -> Duration {
    let nominal = s.nominal_break(opens.max(1));
    // With equal jitter a break lasts at least half its nominal length, so a remainder within
    // that is within the break as it is: the draw that finds the break's exact length is needed
    // only past it (early in the break, or a mark still pending).
    if nominal.checked_div(2).is_some_and(|half| remaining <= half) {
        return remaining;
    }
    let longest = drawn_break(s, nominal, opens, seed).saturating_add(Duration::from_nanos(999));
    remaining.min(longest)
}

/// [`jittered_break`] out of line: the rare case of a refusal's path.
#[inline(never)]
fn drawn_break(s: &BreakerSettings, nominal: Duration, opens: u8, seed: u64) -> Duration {
    jittered_break(s, nominal, opens, seed)
}

/// What one outcome means for the control state. `slow` is the reading of the latency against
/// the slow-call threshold; `readings` are the statistics after recording it. Returns the
/// sample when the outcome is evidence for the recovery ramp ([`ramp_evidence`],
/// [`ramp_failures_reopen`]).
#[allow(clippy::too_many_arguments)] // one pure rule, spelled out: every input is needed
pub(crate) fn complete<M: Measure>(
    c: &mut Control,
    r: &Ramp,
    s: &BreakerSettings,
    seed: u64,
    now: Instant,
    permit: &Permit,
    outcome: Outcome,
    slow: bool,
    readings: Option<&Readings>,
    n: &mut Notes,
) -> Option<RampSample> {
    if permit.kind() == Kind::Unguarded || permit.period() != c.epoch {
        // A permit from an earlier period decides nothing.
        return None;
    }
    match (c.phase, permit.kind()) {
        (Phase::Closed, Kind::Normal) => {
            if outcome.is_success() {
                c.count = 0;
            } else if outcome.is_failure() {
                c.count = c.count.saturating_add(1).min(MAX_COUNT);
                if c.count >= s.consecutive_failures()
                    && c.count >= consecutive_needed::<M>(s, readings, c.count)
                {
                    n.trip_run = c.count;
                    open::<M>(c, r, s, seed, now, TripReason::ConsecutiveFailures, n);
                    return None;
                }
            }
            let by_statistics = if M::KEEPS { readings } else { None };
            if let Some(reason) = by_statistics.and_then(|rd| stats::trip_reason(rd, s)) {
                open::<M>(c, r, s, seed, now, reason, n);
            }
            None
        }
        (Phase::HalfOpen, Kind::Probe) => {
            c.probes = c.probes.saturating_sub(1);
            if outcome.is_failure() {
                c.count = c.count.saturating_add(1).min(MAX_COUNT);
                c.probe_failures = c.probe_failures.saturating_add(1).min(MAX_COUNT);
                if probe_failures_reopen::<M>(c, s, readings) {
                    open::<M>(c, r, s, seed, now, TripReason::ProbeFailed, n);
                }
            } else if outcome.is_success() {
                c.count = 0;
                // One probe is one sample: it says the dependency answers, not that it is still
                // unwell when it answers slowly (a fresh connection, a cold cache, against a
                // microsecond-scale median). With a ramp, a slow probe starts it at once, and
                // the ramp's slow calls halve its evidence cap; without one, a
                // slow probe counts as a success, and once closed the slow-call rule judges a
                // window of calls.
                if slow && recovery::<M>(s).is_some() {
                    recovered::<M>(c, s, now, n);
                    return None;
                }
                c.successes = c.successes.saturating_add(1).min(MAX_COUNT);
                if c.successes >= s.probe_successes() {
                    recovered::<M>(c, s, now, n);
                }
            }
            None
        }
        // Whether a failure withdraws the ramp depends on the ramp's own counts, which live in
        // the ramp word: judged by `ramp_failures_reopen` once the sample is counted there.
        (Phase::Recovering, Kind::Ramp) if M::KEEPS && outcome.is_counted() => Some(RampSample {
            failure: outcome.is_failure(),
            slow,
        }),
        _ => None,
    }
}

/// The ramp's evidence term: a slow admitted call halves the cap on the spot (never below 5%)
/// when the ramp's slow calls are beyond what the dependency's normal share of slow answers
/// explains (`normal_slow`, see [`slow_beyond_noise`]); `probe successes` fast successes in a
/// row raise it by 5% (up to 1); a failure or a slow call ends the streak. Every sample is
/// counted for [`ramp_failures_reopen`]. Returns whether the cap moved.
pub(crate) fn ramp_evidence(
    r: &mut Ramp,
    sample: RampSample,
    s: &BreakerSettings,
    normal_slow: Option<(u32, u32)>,
) -> bool {
    r.tally(sample);
    if sample.slow {
        r.streak = 0;
        if slow_beyond_noise(r, s, normal_slow) {
            r.cap = (r.cap / 2).max(RAMP_INITIAL);
            return true;
        }
        return false;
    }
    if sample.failure {
        r.streak = 0;
        return false;
    }
    r.streak = r.streak.saturating_add(1).min(MAX_COUNT);
    if r.streak >= s.probe_successes() {
        r.cap = r.cap.saturating_add(RAMP_INITIAL).min(RAMP_ONE);
        r.streak = 0;
        return true;
    }
    false
}

/// Whether the slow calls among those a ramp admitted are evidence that the dependency is still
/// slow. `normal_slow` is `(slow, samples)`: how many of the learned healthy latencies lie at or
/// above the slow-call threshold, of how many. Without it (nothing learned, or a breaker that
/// learns nothing), or with none of them slow, every slow call is evidence, as the documents
/// say. Once the dependency is known to answer slowly now and then (a heavy tail: at p50 20 ms
/// and p99 200 ms, one healthy answer in eight is past 3x the median), only slow calls beyond
/// that share within the noise bound are: otherwise the cap would halve on the dependency's
/// normal tail and the ramp would never end on a dependency that is back.
fn slow_beyond_noise(r: &Ramp, s: &BreakerSettings, normal_slow: Option<(u32, u32)>) -> bool {
    match normal_slow {
        None => r.slow > 0,
        Some((slow, samples)) => stats::beyond_noise(
            u32::from(r.outcomes),
            u32::from(r.slow),
            slow,
            samples,
            s.noise_bound(),
        ),
    }
}

/// The run of failures that trips the consecutive rule now: the configured count on a cold
/// breaker, and once the normal failure rate is learned the run whose chance under it is
/// within the noise bound (see [`stats::run_needed`]). The run being judged is left out of the
/// learned rate.
fn consecutive_needed<M: Measure>(
    s: &BreakerSettings,
    readings: Option<&Readings>,
    run: u16,
) -> u16 {
    if !M::KEEPS {
        // Nothing learned: the configured count, and no noise arithmetic linked.
        return s.consecutive_failures();
    }
    let learned = readings
        .and_then(|rd| stats::learned_failure_rate(rd, s, (u32::from(run), u32::from(run))));
    stats::run_needed(s.consecutive_failures(), learned, s.noise_bound())
}

/// Whether the failures among the calls a ramp admitted withdraw it: on a cold breaker (no
/// learned failure rate) one failure does; once the normal rate is learned, only failures beyond
/// what it explains within the noise bound (see [`failures_beyond_noise`]).
pub(crate) fn ramp_failures_reopen(
    r: &Ramp,
    s: &BreakerSettings,
    readings: Option<&Readings>,
) -> bool {
    let judged = (r.failures, r.outcomes);
    failures_beyond_noise(judged, judged, s, readings)
}

/// Whether the probes' failures in this half-open period re-open the breaker: judged like the
/// ramp's, so that a probe failing at the dependency's normal rate does not double the break of
/// a dependency that is back. An outage still re-opens within the run the consecutive rule
/// would need (one failure when the normal rate is near zero); a breaker that learns nothing
/// re-opens on the first failed probe, as the documents say.
fn probe_failures_reopen<M: Measure>(
    c: &Control,
    s: &BreakerSettings,
    readings: Option<&Readings>,
) -> bool {
    if !M::KEEPS {
        // Nothing learned: one failure re-opens, and no noise arithmetic linked.
        return c.probe_failures > 0;
    }
    let outcomes = c.probe_failures.saturating_add(c.successes);
    // The probes' outcomes are not in the learned rate (see `on_outcome_slow`): nothing to
    // leave out of it.
    failures_beyond_noise((c.probe_failures, outcomes), (0, 0), s, readings)
}

/// Whether `(failures, outcomes)` being judged (a ramp's or the probes') are evidence: with no
/// learned failure rate any failure is; once it is learned, only failures beyond what it
/// explains within the noise bound (see [`stats::beyond_noise`]). `leave_out` is the part of
/// them the learned rate holds, taken out of it so that the evidence does not vouch for itself.
fn failures_beyond_noise(
    (failures, outcomes): (u16, u16),
    leave_out: (u16, u16),
    s: &BreakerSettings,
    readings: Option<&Readings>,
) -> bool {
    let leave_out = (u32::from(leave_out.0), u32::from(leave_out.1));
    match readings.and_then(|rd| stats::learned_failure_rate(rd, s, leave_out)) {
        None => failures > 0,
        Some((f, c)) => stats::beyond_noise(
            u32::from(outcomes),
            u32::from(failures),
            f,
            c,
            s.noise_bound(),
        ),
    }
}

/// Gives a probe slot back without an outcome (the caller's attempt was cancelled).
pub(crate) fn release(c: &mut Control, permit: &Permit) {
    if permit.kind() == Kind::Probe && permit.period() == c.epoch && c.phase == Phase::HalfOpen {
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
    /// Transient failures in a row, with no success in between: counted while closed, held
    /// while open and half-open (a failed probe adds one), zero again after a success.
    pub consecutive_failures: u16,
    /// The run of consecutive failures that trips the breaker now: the configured count on a
    /// cold breaker; once the normal failure rate is learned, the run whose chance under it is
    /// within the noise bound (never below the configured count). See
    /// [`BreakerSettingsBuilder::noise_bound`](crate::breaker::BreakerSettingsBuilder::noise_bound).
    pub consecutive_to_trip: u16,
    /// Probes in flight while half-open.
    pub probes_in_flight: u8,
    /// Consecutive opens without a close (the break's exponent).
    pub consecutive_opens: u8,
    /// The (jittered) break last served or being served, if the breaker has opened.
    pub break_duration: Option<Duration>,
    /// Document 004's current cooldown: the break being served or last served, and once the
    /// breaker has closed (or before it ever opens) the first break, which the next open will
    /// serve. Jittered like the break itself.
    pub current_break: Duration,
    /// Time until the break ends (zero unless open).
    pub until_half_open: Duration,
    /// The admitted fraction while recovering.
    pub ramp_fraction: Option<Ratio>,
    /// The learned median latency of successful calls.
    pub normal_latency: Option<Duration>,
    /// The learned normal failure rate the noise rules use (once armed; see
    /// [`Breaker::normal_failure_rate`]).
    pub normal_failure_rate: Option<Ratio>,
    /// Calls counted in the trip window.
    pub window_calls: u32,
    /// Failures counted in the trip window.
    pub window_failures: u32,
    /// Slow calls counted in the trip window.
    pub window_slow: u32,
}

impl Snapshot {
    /// The health the breaker's state maps to ([`State::health`]).
    #[must_use]
    pub const fn health(&self) -> Health {
        self.state.health()
    }

    /// `true` when the dependency is not fully trusted: its [health](Snapshot::health) is
    /// anything but [`Health::Healthy`] (degraded or unavailable). A breaker that is
    /// recovering is not healthy.
    #[must_use]
    pub const fn is_degraded(&self) -> bool {
        !matches!(self.health(), Health::Healthy)
    }
}

/// The breaker over some storage: the single-threaded form keeps its words in `Cell`s, the
/// shared form in atomics, and both run exactly this code. Control transitions are load / pure
/// step / compare-exchange on the control word; the ramp's credit and evidence live in a second
/// word tagged with the period; statistics are updated word by word.
#[derive(Clone, Debug)]
pub(crate) struct Core<W, M: Measure = Stats<W>, S = BreakerSettings> {
    settings: S,
    seed: u64,
    control: W,
    /// The control state's mark, with the epoch it belongs to (see [`Mark`]).
    mark: W,
    ramp: W,
    stats: M,
    /// The break last drawn for a refusal ([`KeptBreak`]), so that a refusal early in a break
    /// reads its bound instead of drawing it again: a word in a form with statistics on a
    /// 64-bit target, nothing where RAM counts more than nanoseconds (there the break is
    /// drawn each time).
    #[cfg(all(target_pointer_width = "64", not(loom)))]
    drawn: M::Kept,
}

/// Where a refusal keeps the break it drew for the `opens`-th open in a row. The draw depends
/// only on the settings, the seed and that count, so any writer's value for a count is that
/// count's (the seed's change empties it: [`Core::set_seed`]).
#[cfg(all(target_pointer_width = "64", not(loom)))]
pub(crate) trait KeptBreak {
    /// Nothing kept.
    const EMPTY: Self;
    /// The break kept for `opens`, if it is that count's.
    fn read(&self, opens: u8) -> Option<Duration>;
    /// Keeps `drawn` for `opens`.
    fn keep(&self, opens: u8, drawn: Duration);
}

/// No room to keep a break: a form without statistics, sized for a microcontroller.
#[cfg(all(target_pointer_width = "64", not(loom)))]
impl KeptBreak for () {
    const EMPTY: () = ();
    fn read(&self, _: u8) -> Option<Duration> {
        None
    }
    fn keep(&self, _: u8, _: Duration) {}
}

/// A break kept in one word: its length in whole microseconds (as [`jittered_break`] draws
/// it) in the low 48 bits, the count of opens above, and a top bit that tells a kept break
/// from the empty word.
#[cfg(all(target_pointer_width = "64", not(loom)))]
#[derive(Clone, Debug)]
pub(crate) struct DrawnBreak<W>(W);

#[cfg(all(target_pointer_width = "64", not(loom)))]
impl<W: Word> DrawnBreak<W> {
    const MICROS_BITS: u32 = 48;
    const KEPT: u64 = 1 << 63;
}

#[cfg(all(target_pointer_width = "64", not(loom)))]
impl<W: Word> KeptBreak for DrawnBreak<W> {
    const EMPTY: Self = DrawnBreak(word!(W));

    #[inline]
    fn read(&self, opens: u8) -> Option<Duration> {
        let w = self.0.get();
        if w & Self::KEPT == 0 || field(w, Self::MICROS_BITS, 8) != u64::from(opens) {
            return None;
        }
        Some(Duration::from_micros(field(w, 0, Self::MICROS_BITS)))
    }

    fn keep(&self, opens: u8, drawn: Duration) {
        // A break of years does not fit; it is drawn each time.
        let micros = drawn.as_micros_ceil();
        if micros < 1 << Self::MICROS_BITS {
            self.0
                .swap(Self::KEPT | put(u64::from(opens), Self::MICROS_BITS, 8) | micros);
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::breaker::settings::BreakerSettings {}
    impl Sealed for &'static crate::breaker::settings::BreakerSettings {}
    impl<T: super::ConstSettings> Sealed for super::Fixed<T> {}
}

/// Where a breaker keeps its settings: by value ([`BreakerSettings`], the default), by
/// reference to a `static` (`&'static BreakerSettings`, which saves their size in RAM on a
/// microcontroller), or nowhere, as a constant named by a type ([`Fixed`], which saves their
/// flash too). Sealed: those are the three.
pub trait SettingsRef: sealed::Sealed {
    /// The settings.
    fn get(&self) -> &BreakerSettings;
}

impl SettingsRef for BreakerSettings {
    #[inline]
    fn get(&self) -> &BreakerSettings {
        self
    }
}

impl SettingsRef for &'static BreakerSettings {
    #[inline]
    fn get(&self) -> &BreakerSettings {
        self
    }
}

/// Breaker settings known at compile time, named by a type: the breaker
/// `Breaker<Fixed<T>>` reads them from a constant instead of from memory, so the compiler can
/// drop what they switch off and fold what they fix. On a microcontroller that saves flash
/// (some 1.2 KB for the default rule set on thumbv7em) and the settings' RAM.
///
/// Invalid settings built in the constant fail the build, not the program:
///
/// ```
/// use stormguard_core::{Breaker, BreakerSettings, breaker::ConstSettings, breaker::Fixed, Instant};
///
/// struct Radio;
/// impl ConstSettings for Radio {
///     const SETTINGS: BreakerSettings =
///         match BreakerSettings::builder("radio").consecutive_failures(3).build() {
///             Ok(s) => s,
///             Err(_) => panic!("invalid breaker settings"),
///         };
/// }
///
/// let mut breaker: Breaker<Fixed<Radio>> = Breaker::fixed();
/// assert_eq!(breaker.name().as_str(), "radio");
/// assert!(breaker.try_acquire(Instant::from_secs(1)).is_ok());
/// ```
pub trait ConstSettings {
    /// The settings.
    const SETTINGS: BreakerSettings;
}

/// Where a breaker whose settings are a [`ConstSettings`] type keeps them: nowhere, it is a
/// name for the constant (zero-sized).
pub struct Fixed<T>(PhantomData<T>);

impl<T> Fixed<T> {
    /// The settings of `T`.
    #[must_use]
    pub const fn new() -> Self {
        Fixed(PhantomData)
    }
}

// By hand: derived, they would ask the same of `T`, a marker that needs none of them.
impl<T> Clone for Fixed<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Fixed<T> {}

impl<T> Default for Fixed<T> {
    fn default() -> Self {
        Fixed::new()
    }
}

impl<T> fmt::Debug for Fixed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Fixed")
    }
}

#[cfg(feature = "defmt")]
impl<T> defmt::Format for Fixed<T> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "Fixed");
    }
}

impl<T: ConstSettings> SettingsRef for Fixed<T> {
    #[inline]
    fn get(&self) -> &BreakerSettings {
        &const { T::SETTINGS }
    }
}

/// A seed derived from the name, so breakers with different names jitter differently even when
/// nobody sets a seed (FNV-1a). Fleets should still seed each process differently.
const fn seed_from(name: &Name) -> u64 {
    let mut bytes = name.as_bytes();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    while let [first, rest @ ..] = bytes {
        h ^= *first as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        bytes = rest;
    }
    h
}

impl<W: Word, M: Measure, S> Core<W, M, S> {
    const_unless_loom! {
        /// A closed breaker: every form starts here, from its settings (however it keeps them),
        /// the seed derived from their name, and its statistics.
        fn closed(seed: u64, settings: S, stats: M) -> Self {
            Core {
                settings,
                seed,
                control: word!(W),
                mark: word!(W),
                ramp: word!(W),
                stats,
                #[cfg(all(target_pointer_width = "64", not(loom)))]
                drawn: <M::Kept as KeptBreak>::EMPTY,
            }
        }
    }
}

impl<W: Word, T: Stripes<Item = Ring<W>>, C: Stripes<Item = HistCounts<W>>>
    Core<W, Stats<W, T, C>>
{
    const_unless_loom! {
        pub(crate) fn new(settings: BreakerSettings) -> Self {
            Core::closed(seed_from(settings.name()), settings, Stats::new())
        }
    }

    pub(crate) const fn settings(&self) -> &BreakerSettings {
        &self.settings
    }
}

impl<W: Word> Core<W, Stats<W>, &'static BreakerSettings> {
    const_unless_loom! {
        pub(crate) fn new_static(settings: &'static BreakerSettings) -> Self {
            Core::closed(seed_from(settings.name()), settings, Stats::new())
        }
    }
}

impl<W: Word, T: ConstSettings> Core<W, Stats<W>, Fixed<T>> {
    const_unless_loom! {
        pub(crate) fn new_fixed() -> Self {
            Core::closed(seed_from(T::SETTINGS.name()), Fixed::new(), Stats::new())
        }
    }
}

impl<W: Word> Core<W, NoStats, &'static BreakerSettings> {
    const_unless_loom! {
        pub(crate) fn lean(settings: &'static BreakerSettings) -> Self {
            Core::closed(seed_from(settings.name()), settings, NoStats)
        }
    }

    pub(crate) const fn lean_settings(&self) -> &'static BreakerSettings {
        self.settings
    }
}

impl<W: Word, M: Measure, S: SettingsRef> Core<W, M, S> {
    #[inline]
    pub(crate) fn s(&self) -> &BreakerSettings {
        self.settings.get()
    }

    pub(crate) const fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
        // A break kept for the old seed is not the new seed's. (A word has no destructor.)
        #[cfg(all(target_pointer_width = "64", not(loom)))]
        core::mem::forget(core::mem::replace(
            &mut self.drawn,
            <M::Kept as KeptBreak>::EMPTY,
        ));
    }

    /// The control state and, while recovering, the current period's ramp (the ramp word is
    /// not read in any other phase).
    #[inline]
    fn load(&self) -> (u64, Control, Ramp) {
        let mut raw = self.control.get();
        let mut c = Control::unpack(raw);
        if c.phase != Phase::Closed {
            // Read the mark, then check the control word has not moved on meanwhile: a mark
            // of a later period beside a control word of an earlier one would read as pending
            // and refuse a call on a stale view.
            loop {
                let w = self.mark.get();
                let again = self.control.get();
                if again == raw {
                    c.mark = Mark::read(w, c.epoch);
                    break;
                }
                raw = again;
                c = Control::unpack(raw);
                if c.phase == Phase::Closed {
                    break;
                }
            }
        }
        let r = if c.phase == Phase::Recovering {
            Ramp::current(self.ramp.get(), c.epoch)
        } else {
            Ramp::IDLE
        };
        (raw, c, r)
    }

    /// Stores the mark a committed transition set: after the control word, tagged with its
    /// epoch; a later probe deadline in the same period only ever moves it later.
    fn commit_mark(&self, before: &Control, after: &Control) {
        let unchanged = after.mark == before.mark && after.epoch == before.epoch;
        if unchanged || after.mark == Mark::PENDING || after.phase == Phase::Closed {
            return;
        }
        let (epoch, mark) = (after.epoch, after.mark);
        self.mark.update(|w| {
            // Only a writer whose period is still the breaker's may write: one that comes late
            // (its period already over) would clobber a later period's mark, and its tag could
            // match a period 256 on. The word's own tag says nothing about age: any number of
            // periods may pass without storing a mark (an operator's isolate and reset, say).
            // A later period's writer changes the word, so this check is re-read if it races.
            if Control::unpack(self.control.get()).epoch != epoch {
                return w;
            }
            let current = Mark::read(w, epoch);
            if current == Mark::PENDING || mark > current {
                mark.pack(epoch)
            } else {
                w
            }
        });
    }

    fn emit(&self, n: &Notes, now: Instant, events: &mut dyn FnMut(Event<'_>)) {
        if n.is_empty() {
            return;
        }
        let name = self.s().name();
        if n.reclaimed > 0 {
            events(Event::ProbesReclaimed {
                name,
                count: n.reclaimed,
            });
        }
        for ch in n.changes.iter().flatten() {
            events(Event::StateChanged {
                name,
                from: ch.from,
                to: ch.to,
                reason: ch.reason,
                break_for: ch.break_for,
            });
        }
        if n.probe_started {
            events(Event::ProbeStarted { name });
        }
        if n.ramp_step {
            let (_, c, r) = self.load();
            if c.phase == Phase::Recovering {
                let fraction = permille(ramp_fraction::<M>(&c, &r, self.s(), self.seed, now));
                events(Event::RampStep {
                    name,
                    fraction,
                    cap: permille(r.cap),
                });
            }
        }
    }

    pub(crate) fn state(&self, now: Instant) -> State {
        let (_, c, r) = self.load();
        c.state::<M>(&r, self.s(), self.seed, now)
    }

    #[inline]
    pub(crate) fn try_acquire(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        self.try_acquire_lazy(|| now, true, attempt_timeout, events)
    }

    /// [`Self::try_acquire`] with the time read from `clock` only when needed: always
    /// outside the closed phase, and while closed when the permit must carry its start
    /// (`timed`, or a breaker that measures latency). An untimed permit of a breaker that
    /// keeps no statistics starts at [`Instant::ZERO`]: its latency is never read.
    #[inline]
    pub(crate) fn try_acquire_lazy(
        &self,
        clock: impl FnOnce() -> Instant,
        timed: bool,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        let raw = self.control.get();
        if raw & PHASE_MASK == Phase::Closed as u64 {
            // Nothing in a closed breaker changes on admission.
            let epoch = Control::unpack(raw).epoch;
            let start = if timed || (M::KEEPS && self.s().keeps_statistics()) {
                clock()
            } else {
                Instant::ZERO
            };
            return Ok(Permit::new(epoch, Kind::Normal, start));
        }
        let now = clock();
        // Where flash counts more than nanoseconds, the full rule serves this case too.
        if cfg!(target_pointer_width = "64") {
            if let Some(refused) = self.refuse_while_open(now) {
                return Err(refused);
            }
        }
        self.try_acquire_slow(now, attempt_timeout, events)
    }

    #[inline(never)]
    fn try_acquire_slow(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        loop {
            let (raw, c0, r) = self.load();
            let mut c = c0;
            let mut n = Notes::default();
            let decision = admit::<M>(
                &mut c,
                &r,
                self.s(),
                self.seed,
                now,
                attempt_timeout,
                &mut n,
            );
            // The mark lives in its own word; every transition that moves it also changes the
            // control word (a probe count, a new period), so comparing packed words suffices.
            let new = c.pack();
            if new != raw && !self.control.cas(raw, new) {
                continue;
            }
            self.commit_mark(&c0, &c);
            let result = match decision {
                Ok(Admit::Grant(kind)) => Ok(kind),
                Ok(Admit::Ramp) => {
                    let mut result = Err(Refused {
                        reason: RefusalReason::RampShedding,
                        retry_after: Duration::ZERO,
                    });
                    self.ramp.update(|w| {
                        let mut r = Ramp::current(w, c.epoch);
                        result = admit_ramp::<M>(&c, &mut r, self.s(), self.seed, now);
                        r.pack()
                    });
                    result
                }
                Err(refused) => Err(refused),
            };
            self.clear_decided_window(now, &n);
            self.emit(&n, now, events);
            return result.map(|kind| Permit::new(c.epoch, kind, now));
        }
    }

    /// The refusal of an open breaker whose break has not ended at `now`, read from the control
    /// word and the mark alone; `None` for every other case (the full rule decides those). It is
    /// the answer [`admit`] gives there, and like it changes nothing, reports nothing. It lives
    /// out of line, so that the closed breaker's inlined path gains one call, and in a function
    /// of its own rather than as the full rule's first step, which first saves every register
    /// the full rule uses. It took a refusal from 38-49 ns to 19-20 ns (`hot_path`, `refused
    /// while open`, both forms, two runs against the full rule's path in the same session).
    #[inline(never)]
    fn refuse_while_open(&self, now: Instant) -> Option<Refused> {
        let raw = self.control.get();
        if raw & PHASE_MASK != Phase::Open as u64 {
            return None;
        }
        // As `load` reads them: the mark, then the control word again, so that a mark of a
        // later period is never read beside an earlier control word.
        let w = self.mark.get();
        if self.control.get() != raw {
            return None;
        }
        let c = Control::unpack(raw);
        let mark = Mark::read(w, c.epoch);
        let remaining = mark.remaining(now);
        // Reached: nothing remains of a mark that is not pending.
        if remaining.is_zero() && mark != Mark::PENDING {
            return None;
        }
        Some(Refused {
            reason: RefusalReason::BreakerOpen,
            retry_after: self.kept_break_remaining(remaining, c.opens),
        })
    }

    /// [`break_remaining`], its bound read from the break kept for `opens` when there is
    /// one, else drawn and kept. The same answer: a drawn break is at least half its nominal
    /// length, so the bound never cuts a remainder within that.
    #[cfg(all(target_pointer_width = "64", not(loom)))]
    #[inline]
    fn kept_break_remaining(&self, remaining: Duration, opens: u8) -> Duration {
        let drawn = match self.drawn.read(opens) {
            Some(drawn) => drawn,
            None => self.keep_break(opens),
        };
        remaining.min(drawn.saturating_add(Duration::from_nanos(999)))
    }

    /// Draws the break for `opens` and keeps it for the refusals after this one.
    #[cfg(all(target_pointer_width = "64", not(loom)))]
    #[inline(never)]
    fn keep_break(&self, opens: u8) -> Duration {
        let drawn = break_for(self.s(), opens, self.seed);
        self.drawn.keep(opens, drawn);
        drawn
    }

    /// [`break_remaining`], where nothing is kept: under loom (whose words cannot be built in
    /// a `const`), and on 32-bit targets (which refuse through the full rule).
    #[cfg(not(all(target_pointer_width = "64", not(loom))))]
    #[inline]
    fn kept_break_remaining(&self, remaining: Duration, opens: u8) -> Duration {
        break_remaining(remaining, opens, self.s(), self.seed)
    }

    pub(crate) fn check(&self, now: Instant) -> Result<(), Refused> {
        let (_, mut c, mut r) = self.load();
        let decision = admit::<M>(
            &mut c,
            &r,
            self.s(),
            self.seed,
            now,
            Some(Duration::ZERO),
            &mut Notes::default(),
        )?;
        match decision {
            Admit::Grant(_) => Ok(()),
            Admit::Ramp => admit_ramp::<M>(&c, &mut r, self.s(), self.seed, now).map(|_| ()),
        }
    }

    #[inline]
    pub(crate) fn on_outcome(
        &self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        self.on_outcome_lazy(|| now, permit, outcome, events);
    }

    /// [`Self::on_outcome`] with the time read from `clock` only when needed: not for a
    /// quiet success of a breaker that keeps no statistics.
    #[inline]
    pub(crate) fn on_outcome_lazy(
        &self,
        clock: impl FnOnce() -> Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        let s = self.s();
        // The common case: a success while closed and quiet changes no state. Without
        // statistics there is nothing to record either; with them, a fast success is one
        // sample in the trip window and the latency baseline (a slow one is evidence, and
        // takes the full path).
        let quiet = self.quiet_success(&permit, outcome);
        if quiet && !(M::KEEPS && s.keeps_statistics()) {
            return;
        }
        let now = clock();
        if quiet {
            let latency = permit.latency(now);
            // Where flash counts more than nanoseconds, the full path serves this case too;
            // and a latency not to be learned takes it.
            if cfg!(target_pointer_width = "64")
                && !permit.learning_held()
                && self
                    .stats
                    .slow_threshold(now, s)
                    .is_none_or(|t| latency < t)
            {
                self.stats.record_fast_success(now, s, latency);
                return;
            }
        }
        self.on_outcome_slow(now, permit, outcome, events);
    }

    /// A success of a normal permit while the breaker is closed, in the permit's period, with
    /// no failure counted: the control word would not change. Phase, period and count are its
    /// low 21 bits.
    #[inline]
    fn quiet_success(&self, permit: &Permit, outcome: Outcome) -> bool {
        outcome.is_success()
            && permit.kind() == Kind::Normal
            && self.control.get() & QUIET_MASK == u64::from(permit.period()) << 3
    }

    #[inline(never)]
    fn on_outcome_slow(
        &self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        let s = self.s();
        let keeps = M::KEEPS && s.keeps_statistics();
        let latency = permit.latency(now);
        // An attempt timed out while the caller's own side was saturated: its timer fired late
        // or the answer waited for a thread, so the timeout is the caller's, as one its own
        // deadline cut short is (the call still retries it). Only where a probe can mark it:
        // the lean form, on firmware, keeps its flash.
        let outcome = match outcome {
            Outcome::TimedOut if M::KEEPS && permit.learning_held() => Outcome::Cancelled,
            other => other,
        };
        let (_, at_outcome, _) = self.load();
        let current = permit.kind() != Kind::Unguarded && permit.period() == at_outcome.epoch;
        let threshold = self.slow_threshold(now);
        // Slow at or above the threshold; a latency the caller's own saturation stretched says
        // nothing about the dependency (`Permit::hold_learning`).
        let slow = matches!(outcome, Outcome::TimedOut)
            || (!permit.learning_held() && threshold.is_some_and(|t| latency >= t));
        let mut readings = None;
        if keeps {
            let closed = current && at_outcome.phase == Phase::Closed;
            // While the breaker distrusts the dependency (half-open, recovering), a slow answer
            // is not taught to the latency baseline: a brownout would otherwise become the
            // normal it is judged against, and end a ramp that should stay at its floor.
            let teaches = outcome.is_success()
                && !permit.learning_held()
                && (!slow || at_outcome.phase == Phase::Closed);
            // A probe's outcome is evidence about a dependency that was failing, not a sample
            // of its normal: taught to the error baseline, the failed probes of a long outage
            // would raise the rate they are judged against at every half-open.
            let sample = Sample {
                to_window: closed,
                counted: outcome.is_counted() && permit.kind() != Kind::Probe,
                failure: outcome.is_failure(),
                slow,
                baseline_latency: teaches.then_some(latency),
            };
            self.stats.record(now, s, sample);
            // The ratios are judged when evidence against the dependency arrives: a failure or
            // a slow call (a fast success can only lower them).
            // A ramp's or a probe's failure is judged against the learned failure rate too.
            let ramp_failure = current
                && at_outcome.phase == Phase::Recovering
                && permit.kind() == Kind::Ramp
                && outcome.is_failure();
            let probe_failure = current
                && at_outcome.phase == Phase::HalfOpen
                && permit.kind() == Kind::Probe
                && outcome.is_failure();
            if (closed && (outcome.is_failure() || (slow && outcome.is_counted())))
                || ramp_failure
                || probe_failure
            {
                readings = Some(self.stats.readings(now, s));
            }
        }
        // A fast success while closed and quiet changes nothing either (no count to reset, no
        // evidence for a statistical rule).
        if !slow && self.quiet_success(&permit, outcome) {
            return;
        }
        // A slow call the ramp admitted is judged against the dependency's normal share of
        // slow answers (read only here: a scan of the latency histogram).
        let normal_slow = match threshold {
            Some(t)
                if keeps
                    && slow
                    && current
                    && at_outcome.phase == Phase::Recovering
                    && permit.kind() == Kind::Ramp =>
            {
                self.stats.slow_share(now, s, t, TAIL_SAMPLES)
            }
            _ => None,
        };
        let n = loop {
            let (raw, c0, r) = self.load();
            let mut c = c0;
            let mut n = Notes::default();
            let evidence = complete::<M>(
                &mut c,
                &r,
                s,
                self.seed,
                now,
                &permit,
                outcome,
                slow,
                readings.as_ref(),
                &mut n,
            );
            // The mark lives in its own word; every transition that moves it also changes the
            // control word (a probe count, a new period), so comparing packed words suffices.
            let new = c.pack();
            if new != raw && !self.control.cas(raw, new) {
                continue;
            }
            self.commit_mark(&c0, &c);
            if let Some(sample) = evidence {
                let (old, new) = self.ramp.update(|w| {
                    let mut r = Ramp::current(w, c.epoch);
                    ramp_evidence(&mut r, sample, s, normal_slow);
                    r.pack()
                });
                let counted = Ramp::unpack(new);
                n.ramp_step = Ramp::current(old, c.epoch).cap != counted.cap;
                if sample.failure && ramp_failures_reopen(&counted, s, readings.as_ref()) {
                    self.withdraw_ramp(now, c.epoch, &mut n);
                }
                self.realise(now, &mut n);
            }
            break n;
        };
        self.clear_decided_window(now, &n);
        self.emit(&n, now, events);
    }

    /// Re-opens a ramp whose failures are beyond the dependency's noise, with the grown break,
    /// if the breaker is still recovering in period `epoch` (another outcome may have settled
    /// it meanwhile).
    fn withdraw_ramp(&self, now: Instant, epoch: u8, n: &mut Notes) {
        loop {
            let (raw, c0, r) = self.load();
            if c0.phase != Phase::Recovering || c0.epoch != epoch {
                return;
            }
            let mut c = c0;
            let mut step = Notes::default();
            c.count = 1;
            open::<M>(
                &mut c,
                &r,
                self.s(),
                self.seed,
                now,
                TripReason::RampFailure,
                &mut step,
            );
            if self.control.cas(raw, c.pack()) {
                self.commit_mark(&c0, &c);
                for ch in step.changes.iter().flatten() {
                    n.change(*ch);
                }
                return;
            }
        }
    }

    /// Applies the transitions time alone makes, until one sticks.
    fn realise(&self, now: Instant, n: &mut Notes) {
        loop {
            let (raw, c0, r) = self.load();
            let mut c = c0;
            let mut step = Notes::default();
            advance::<M>(&mut c, &r, self.s(), self.seed, now, &mut step);
            if c == c0 {
                return;
            }
            if self.control.cas(raw, c.pack()) {
                for ch in step.changes.iter().flatten() {
                    n.change(*ch);
                }
                n.reclaimed = n.reclaimed.saturating_add(step.reclaimed);
                return;
            }
        }
    }

    pub(crate) fn release(&self, permit: &Permit) {
        self.control.update(|w| {
            let mut c = Control::unpack(w);
            release(&mut c, permit);
            c.pack()
        });
    }

    pub(crate) fn isolate(&self, now: Instant, events: &mut dyn FnMut(Event<'_>)) {
        let mut from = State::Closed;
        self.control.update(|w| {
            let mut c = Control::unpack(w);
            from = c.state::<M>(
                &Ramp::current(self.ramp.get(), c.epoch),
                self.s(),
                self.seed,
                now,
            );
            c.phase = Phase::Isolated;
            c.epoch = c.epoch.wrapping_add(1);
            c.probes = 0;
            c.successes = 0;
            c.probe_failures = 0;
            c.pack()
        });
        let mut n = Notes::default();
        n.change(Change {
            from,
            to: State::Isolated,
            reason: None,
            break_for: None,
        });
        self.emit(&n, now, events);
    }

    pub(crate) fn reset(&self, now: Instant, events: &mut dyn FnMut(Event<'_>)) {
        let mut from = State::Closed;
        self.control.update(|w| {
            let c = Control::unpack(w);
            from = c.state::<M>(
                &Ramp::current(self.ramp.get(), c.epoch),
                self.s(),
                self.seed,
                now,
            );
            Control {
                epoch: c.epoch.wrapping_add(1),
                ..Control::new()
            }
            .pack()
        });
        self.stats.clear_window(now, self.s(), Fold::All);
        let mut n = Notes::default();
        n.change(Change {
            from,
            to: State::Closed,
            reason: None,
            break_for: None,
        });
        self.emit(&n, now, events);
    }

    pub(crate) fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let (_, c, _) = self.load();
        match c.phase {
            Phase::Open => Some(now.saturating_add(open_remaining(&c, self.s(), self.seed, now))),
            Phase::HalfOpen if c.probes > 0 => Some(now.saturating_add(c.mark.remaining(now))),
            Phase::Recovering => {
                let length = ramp_length::<M>(self.s(), c.opens, self.seed);
                Some(now.saturating_add(length.saturating_sub(c.mark.elapsed(now))))
            }
            _ => None,
        }
    }

    /// Clears the trip window once a decision has used its evidence (see [`Notes::decided`]):
    /// after a close folded into the error baseline; after a trip by a run of failures, all
    /// but the run; after a trip by the window's rates, dropped.
    fn clear_decided_window(&self, now: Instant, n: &Notes) {
        if n.decided() {
            let fold = match (n.opened(), n.trip_run) {
                (false, _) => Fold::All,
                (true, 0) => Fold::Nothing,
                (true, run) => Fold::AllBut(run),
            };
            self.stats.clear_window(now, self.s(), fold);
        }
    }

    pub(crate) fn handle_timeout(&self, now: Instant, events: &mut dyn FnMut(Event<'_>)) {
        let mut n = Notes::default();
        self.realise(now, &mut n);
        self.clear_decided_window(now, &n);
        self.emit(&n, now, events);
    }

    /// The measured attempt ceiling: 3x the recent p95 of successful calls, once 20 of them
    /// are in the baseline. The call driver puts its floor under it, and lets it only tighten
    /// a configured attempt timeout.
    pub(crate) fn attempt_ceiling(&self, now: Instant) -> Option<Duration> {
        if !M::KEEPS {
            return None;
        }
        let (p95, samples) = self.stats.tail(now, self.s());
        if samples < TAIL_SAMPLES {
            return None;
        }
        p95.map(|p| p.saturating_mul(CEILING_MULTIPLE))
    }

    /// Where to learn an attempt known only to have run past `ran_past` (see
    /// [`Admission::censored_latency`](crate::call::Admission::censored_latency)).
    pub(crate) fn censored_latency(&self, now: Instant, ran_past: Duration, draw: u64) -> Duration {
        self.stats.censored(now, self.s(), ran_past, draw)
    }

    /// When a hedged second attempt should start after the first (the learned p95 of normal
    /// latency, never a fixed delay, and never under 10 ms), or why hedging is suppressed now.
    pub(crate) fn hedge_after(&self, now: Instant) -> Result<Duration, HedgeSuppressed> {
        if !M::KEEPS {
            return Err(HedgeSuppressed::NoBaseline);
        }
        let s = self.s();
        let (_, c, r) = self.load();
        if c.state::<M>(&r, s, self.seed, now) != State::Closed {
            return Err(HedgeSuppressed::NotClosed);
        }
        let (p95, samples) = self.stats.tail(now, s);
        let p95 = match p95 {
            Some(p) if samples >= TAIL_SAMPLES => p,
            _ => return Err(HedgeSuppressed::NoBaseline),
        };
        let readings = self.stats.readings(now, s);
        // Half the run that trips now: on a noisy dependency the learned rate raised it, and
        // half the configured count is then ordinary noise, not a breaker about to open.
        let to_trip = consecutive_needed::<M>(s, Some(&readings), c.count);
        let consecutive_near = c.count.saturating_mul(2) >= to_trip;
        if consecutive_near || stats::near_trip(&readings, s) {
            return Err(HedgeSuppressed::NearTrip);
        }
        Ok(p95.max(HEDGE_FLOOR))
    }

    /// The slow-call threshold in force (see [`Breaker::slow_threshold`]).
    pub(crate) fn slow_threshold(&self, now: Instant) -> Option<Duration> {
        let s = self.s();
        if !(M::KEEPS && s.keeps_statistics()) {
            return None;
        }
        self.stats.slow_threshold(now, s)
    }

    /// The learned median latency, once armed (20 successful samples): a median of fewer is
    /// an anecdote, and the retry guard must not act on it.
    pub(crate) fn normal_latency(&self, now: Instant) -> Option<Duration> {
        if !M::KEEPS {
            return None;
        }
        match self.stats.latency(now, self.s()) {
            (Some(median), samples) if samples >= TAIL_SAMPLES => Some(median),
            _ => None,
        }
    }

    /// The normal failure rate the noise rules use (see [`stats::learned_failure_rate`]), so
    /// that what is reported is what is in force: never none while a rule uses a rate.
    pub(crate) fn normal_failure_rate(&self, now: Instant) -> Option<Ratio> {
        let r = self.stats.readings(now, self.s());
        let (failures, calls) = stats::learned_failure_rate(&r, self.s(), (0, 0))?;
        Ratio::of(u64::from(failures), u64::from(calls))
    }

    pub(crate) fn ramp_fraction(&self, now: Instant) -> Option<Ratio> {
        let (_, c, r) = self.load();
        (c.state::<M>(&r, self.s(), self.seed, now) == State::Recovering)
            .then(|| permille(ramp_fraction::<M>(&c, &r, self.s(), self.seed, now)))
    }

    pub(crate) fn snapshot(&self, now: Instant) -> Snapshot {
        let (_, c, r) = self.load();
        let s = self.s();
        let state = c.state::<M>(&r, s, self.seed, now);
        let readings = self.stats.readings(now, s);
        // The break of the current (or, once closed, the next) open.
        let current_break = break_for(s, c.opens.max(1), self.seed);
        Snapshot {
            name: *s.name(),
            state,
            consecutive_failures: c.count,
            consecutive_to_trip: consecutive_needed::<M>(s, Some(&readings), c.count),
            probes_in_flight: if state == State::HalfOpen {
                c.probes
            } else {
                0
            },
            consecutive_opens: c.opens,
            break_duration: (c.opens > 0).then_some(current_break),
            current_break,
            until_half_open: if state == State::Open {
                open_remaining(&c, s, self.seed, now)
            } else {
                Duration::ZERO
            },
            ramp_fraction: (state == State::Recovering)
                .then(|| permille(ramp_fraction::<M>(&c, &r, s, self.seed, now))),
            normal_latency: self.normal_latency(now),
            normal_failure_rate: self.normal_failure_rate(now),
            window_calls: readings.window.calls,
            window_failures: readings.window.failures,
            window_slow: readings.window.slow,
        }
    }
}

/// A circuit breaker, single-threaded form (`&mut self`). Deterministic: the same settings,
/// seed, instants and outcomes always give the same decisions. For one breaker shared by many
/// threads, see [`SharedBreaker`]: the same rules over atomics.
///
/// # Rules under noise
/// A breaker must not open on a dependency that is flaky but stable, and must still open on an
/// outage within a few calls. A cold breaker follows the configured rules exactly; what it has
/// learned only makes it harder to fool:
/// - **Consecutive failures**: once 100 outcomes have taught the normal failure rate `p`, a run
///   of `n` failures trips only when `p^n` is at most the
///   [noise bound](crate::breaker::BreakerSettingsBuilder::noise_bound) (1e-8), and `n` is never below
///   the configured count: 12 in a row at 20%, 7 at 5%, the configured 5 at 1% or less.
///   [`Snapshot::consecutive_to_trip`] reads the run in force.
/// - **Relative error rate**: the trip point is the multiple of the normal rate capped at 100%,
///   never below the floor, and reached inclusively.
/// - **Recovery ramp**: a failure among the calls the ramp admitted re-opens only when their
///   failures are beyond what `p` explains at the same bound (with `p` unknown or zero, one
///   failure does). Its slow calls are judged the same way against the share of the learned
///   healthy latencies at or above the slow-call threshold: a slow call halves the cap once the
///   ramp's slow calls are beyond that share (with the share unknown or zero, every slow call
///   does). A heavy-tailed dependency that is back (one answer in eight past 3x its median)
///   finishes the ramp; one that is still slow keeps it at its floor.
/// - **Slow probes**: one probe is one sample. A probe that answers, however slowly, is a
///   successful probe (with a ramp, a slow one starts it at once, and the ramp's slow calls
///   then halve its cap); whether the dependency is still slow is the slow-call rule's to
///   judge, over a window of calls, once closed. A microsecond-scale dependency whose probes pay
///   for a fresh connection is not locked out; a brownout that outlasts the break trips the
///   slow-call rule again after the window's minimum calls.
/// - **Deadlines**: an attempt the call's own deadline cut short is the caller's cancellation
///   unless it had already run as long as a slow call, or, before a slow call is known, as long
///   as the call's ceiling floor (50 ms by default), so a dependency that hangs still trips a
///   cold or consecutive-only breaker (see [`Call`](crate::Call)).
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
pub struct Breaker<S: SettingsRef = BreakerSettings> {
    core: Core<Cell<u64>, Stats<Cell<u64>>, S>,
}

/// The call driver's `Admission` for a breaker type that holds a `core: Core<..>`: every form
/// answers through the same core.
macro_rules! admission_via_core {
    (impl [$($generics:tt)*] for $ty:ty) => {
        impl<$($generics)*> $crate::call::Admission for $ty {
            fn name(&self) -> &$crate::name::Name {
                self.core.s().name()
            }
            fn try_acquire(
                &mut self,
                now: $crate::time::Instant,
                attempt_timeout: Option<$crate::time::Duration>,
                events: &mut dyn FnMut($crate::event::Event<'_>),
            ) -> Result<$crate::call::permit::Permit, $crate::error::Refused> {
                self.core.try_acquire(now, attempt_timeout, events)
            }
            fn check(&self, now: $crate::time::Instant) -> Result<(), $crate::error::Refused> {
                self.core.check(now)
            }
            fn on_outcome(
                &mut self,
                now: $crate::time::Instant,
                permit: $crate::call::permit::Permit,
                outcome: $crate::outcome::Outcome,
                events: &mut dyn FnMut($crate::event::Event<'_>),
            ) {
                self.core.on_outcome(now, permit, outcome, events);
            }
            fn release(&mut self, permit: $crate::call::permit::Permit) {
                self.core.release(&permit);
            }
            fn normal_latency(&self, now: $crate::time::Instant) -> Option<$crate::time::Duration> {
                self.core.normal_latency(now)
            }
            fn attempt_ceiling(&self, now: $crate::time::Instant) -> Option<$crate::time::Duration> {
                self.core.attempt_ceiling(now)
            }
            fn slow_threshold(&self, now: $crate::time::Instant) -> Option<$crate::time::Duration> {
                self.core.slow_threshold(now)
            }
            fn hedge_after(
                &self,
                now: $crate::time::Instant,
            ) -> Result<$crate::time::Duration, $crate::breaker::HedgeSuppressed> {
                self.core.hedge_after(now)
            }
            fn censored_latency(
                &self,
                now: $crate::time::Instant,
                ran_past: $crate::time::Duration,
                draw: u64,
            ) -> $crate::time::Duration {
                self.core.censored_latency(now, ran_past, draw)
            }
            fn self_limits(&self) -> bool {
                false
            }
        }
    };
}
pub(crate) use admission_via_core;

admission_via_core!(impl [S: SettingsRef] for Breaker<S>);

/// The `&mut` API both single-threaded breakers share, delegating to their core.
macro_rules! single_threaded_api {
    () => {
        /// Sets the jitter seed. Give each process its own (the adapters seed from entropy), so a
        /// fleet's breaks do not line up.
        #[must_use]
        pub const fn with_seed(mut self, seed: u64) -> Self {
            self.core.set_seed(seed);
            self
        }

        /// Sets the jitter seed in place (for a breaker already living in a `static`).
        pub const fn set_seed(&mut self, seed: u64) {
            self.core.set_seed(seed);
        }

        /// The state at `now`. Reading consumes nothing: after the break it reads `HalfOpen` before
        /// any call arrives, and a recovering breaker whose ramp has run out reads `Closed`.
        #[must_use]
        pub fn state(&self, now: Instant) -> State {
            self.core.state(now)
        }

        /// Asks to make one attempt at `now`. A probe slot taken this way is reclaimed after the
        /// break just served if its outcome never arrives; see [`Self::try_acquire_with`].
        #[inline]
        pub fn try_acquire(&mut self, now: Instant) -> Result<Permit, Refused> {
            self.core.try_acquire(now, None, &mut |_| {})
        }

        /// Asks to make one attempt at `now`, with the attempt timeout (which bounds how long a probe
        /// slot may stay out without an outcome) and a sink for the events the admission produces.
        #[inline]
        pub fn try_acquire_with(
            &mut self,
            now: Instant,
            attempt_timeout: Option<Duration>,
            events: &mut impl FnMut(Event<'_>),
        ) -> Result<Permit, Refused> {
            self.core.try_acquire(now, attempt_timeout, events)
        }

        /// Would a call be admitted at `now`? Changes nothing (not even the ramp's credit).
        pub fn check(&self, now: Instant) -> Result<(), Refused> {
            self.core.check(now)
        }

        /// Reports how the attempt behind `permit` ended, at `now`. Latency is
        /// [`Permit::latency`] at `now`.
        #[inline]
        pub fn on_outcome(
            &mut self,
            now: Instant,
            permit: Permit,
            outcome: Outcome,
            events: &mut impl FnMut(Event<'_>),
        ) {
            self.core.on_outcome(now, permit, outcome, events);
        }

        /// Gives back a permit whose attempt never ran to an outcome (the caller was cancelled): a
        /// probe slot is freed at once; nothing is counted.
        pub fn release(&mut self, permit: Permit) {
            self.core.release(&permit);
        }

        /// Forces the breaker open until [`Self::reset`]: every call is refused with
        /// [`RefusalReason::Isolated`](crate::RefusalReason::Isolated).
        pub fn isolate(&mut self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
            self.core.isolate(now, events);
        }

        /// Closes the breaker: clears the trip window and the break growth. The learned baselines
        /// stay (they measure the dependency, not a verdict on it).
        pub fn reset(&mut self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
            self.core.reset(now, events);
        }

        /// When a timed transition is due (break end, probe reclaim, ramp end), if any.
        #[must_use]
        pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
            self.core.poll_timeout(now)
        }

        /// Realises the transitions due at `now` and emits their events. Calling it early, or
        /// twice, does nothing.
        pub fn handle_timeout(&mut self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
            self.core.handle_timeout(now, events);
        }

        /// The measured attempt ceiling (3x the recent p95 of successful calls, once there are 20),
        /// which the call driver raises to its floor ([`CallSettings::ceiling_floor`](crate::CallSettings::ceiling_floor), 50 ms by
        /// default) and uses to tighten the configured attempt timeout.
        #[must_use]
        pub fn attempt_ceiling(&self, now: Instant) -> Option<Duration> {
            self.core.attempt_ceiling(now)
        }

        /// When to launch a hedged second attempt after the first (the learned p95 of normal
        /// latency, never under 10 ms), or why not now: never while half-open or recovering,
        /// never without a baseline, never near the trip point (once the trip window holds its
        /// minimum calls). A hedge is a retry: fund it from the budget.
        pub fn hedge_after(&self, now: Instant) -> Result<Duration, HedgeSuppressed> {
            self.core.hedge_after(now)
        }

        /// The slow-call threshold in force: a call taking this long or longer is slow. The
        /// lower of the absolute threshold and the multiple of the learned median (once armed);
        /// `None` when neither applies. The call driver reads it to tell an attempt its own
        /// deadline cut short (the caller's cancellation) from one that was already slow.
        #[must_use]
        pub fn slow_threshold(&self, now: Instant) -> Option<Duration> {
            self.core.slow_threshold(now)
        }

        /// The learned median latency of successful calls, once there is one: within 12.5%
        /// above the true median and never below it, for medians from 1 us to 18 minutes (the
        /// histogram's range; a faster median reads as 1.152 us, a slower one as 2^40 ns,
        /// about 18.3 minutes).
        #[must_use]
        pub fn normal_latency(&self, now: Instant) -> Option<Duration> {
            self.core.normal_latency(now)
        }

        /// The learned normal failure rate, as the noise rules read it: over every outcome the
        /// breaker remembers (its trip window and its error baseline), once they are as many as
        /// the relative rule's arming count (or 100 without that rule); none before.
        #[must_use]
        pub fn normal_failure_rate(&self, now: Instant) -> Option<Ratio> {
            self.core.normal_failure_rate(now)
        }

        /// The admitted fraction at `now` while recovering.
        #[must_use]
        pub fn ramp_fraction(&self, now: Instant) -> Option<Ratio> {
            self.core.ramp_fraction(now)
        }

        /// A point-in-time view for health endpoints and metrics.
        #[must_use]
        pub fn snapshot(&self, now: Instant) -> Snapshot {
            self.core.snapshot(now)
        }
    };
}
pub(crate) use single_threaded_api;

impl Breaker {
    const_unless_loom! {
        /// A breaker with validated `settings`, closed, with a seed derived from its name.
        #[must_use]
        pub fn new(settings: BreakerSettings) -> Breaker {
            Breaker { core: Core::new(settings) }
        }
    }

    /// The common case: every default, opening after `consecutive_failures` in a row.
    pub fn of(consecutive_failures: u32, name: &'static str) -> Result<Breaker, SettingsError> {
        BreakerSettings::builder(name)
            .consecutive_failures(consecutive_failures)
            .build()
            .map(Breaker::new)
    }

    /// The core, for the forms that share its code.
    #[cfg(test)]
    pub(crate) fn control_word(&self) -> u64 {
        Word::get(&self.core.control)
    }
}

impl Breaker<&'static BreakerSettings> {
    const_unless_loom! {
        /// A breaker whose settings live in a `static`: the same breaker, without a copy of the
        /// settings in its own memory.
        #[must_use]
        pub fn from_static(settings: &'static BreakerSettings) -> Self {
            Breaker { core: Core::new_static(settings) }
        }
    }
}

impl<T: ConstSettings> Breaker<Fixed<T>> {
    const_unless_loom! {
        /// A breaker whose settings are `T`'s constant ([`ConstSettings`]): the same breaker,
        /// with the settings folded into its code instead of kept in memory.
        #[must_use]
        pub fn fixed() -> Self {
            Breaker { core: Core::new_fixed() }
        }
    }
}

impl<S: SettingsRef> Breaker<S> {
    /// The settings this breaker was built with.
    #[must_use]
    pub fn settings(&self) -> &BreakerSettings {
        self.core.settings.get()
    }

    /// The breaker's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        self.core.settings.get().name()
    }

    single_threaded_api!();
}

#[cfg(feature = "defmt")]
impl<S: SettingsRef> defmt::Format for Breaker<S> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "Breaker({})", self.name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_state_packs_into_one_word_and_back() {
        let c = Control {
            phase: Phase::Recovering,
            epoch: 0xAB,
            count: 1000,
            probes: 31,
            successes: 999,
            probe_failures: 1000,
            opens: 31,
            mark: Mark::PENDING,
        };
        assert_eq!(Control::unpack(c.pack()), c);
        let r = Ramp {
            tag: 7,
            cap: 1000,
            credit: 1999,
            streak: 1000,
            outcomes: RAMP_MAX_OUTCOMES,
            failures: RAMP_MAX_MARKED,
            slow: RAMP_MAX_MARKED,
        };
        assert_eq!(Ramp::unpack(r.pack()), r);
        assert_eq!(Ramp::current(r.pack(), 8), Ramp::fresh(8));
        // A full count halves all three before counting on, keeping their ratios.
        let mut full = r;
        full.tally(RampSample {
            failure: true,
            slow: false,
        });
        assert_eq!(
            (full.outcomes, full.failures, full.slow),
            (
                RAMP_MAX_OUTCOMES / 2 + 1,
                RAMP_MAX_MARKED / 2 + 1,
                RAMP_MAX_MARKED / 2
            )
        );
        let mut slow_full = Ramp {
            slow: RAMP_MAX_MARKED,
            failures: 3,
            outcomes: 400,
            ..Ramp::fresh(1)
        };
        slow_full.tally(RampSample {
            failure: false,
            slow: true,
        });
        assert_eq!(
            (slow_full.outcomes, slow_full.failures, slow_full.slow),
            (201, 1, RAMP_MAX_MARKED / 2 + 1)
        );
    }

    #[test]
    fn a_fresh_breaker_is_closed_in_period_zero() {
        let b = Breaker::new(BreakerSettings::defaults("x"));
        assert_eq!(b.control_word(), Control::new().pack());
    }
}
