//! The pure transitions: the control state (`Control`, one packed word), the ramp's word, and
//! the functions that take them from one state to the next given the settings, the time and an
//! outcome. Every form of the breaker runs these on a copy, in place or between a load and a
//! compare-exchange.

use super::settings::{BreakerSettings, MAX_COUNT};
use super::stats::{self, Measure, Readings};
use crate::cell::{field, pack_instant, put, unpack_instant};
use crate::error::{RefusalReason, Refused};
use crate::outcome::Outcome;
use crate::part::{Kind, Permit};
use crate::ratio::Ratio;
use crate::rng::JitterRng;
use crate::state::{State, TripReason};
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
    pub(super) const fn state(self) -> State {
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
pub(super) const MARK_BITS: u32 = 56;

/// The largest value a [`Mark`] holds, reserved for [`Mark::PENDING`] (never an instant's).
pub(super) const MARK_MAX: u64 = (1 << MARK_BITS) - 1;

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

    pub(super) const fn instant(self) -> Instant {
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
    pub(super) const fn pack(self, epoch: u8) -> u64 {
        put(epoch as u64, MARK_BITS, 8) | put(self.0, 0, MARK_BITS)
    }

    /// The mark of period `epoch` from its word: pending if the word belongs to another period.
    pub(super) const fn read(w: u64, epoch: u8) -> Mark {
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
    pub(super) const fn fresh(epoch: u8) -> Ramp {
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
    pub(super) const fn tally(&mut self, sample: RampSample) {
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
pub(super) const RAMP_MAX_OUTCOMES: u16 = (1 << 11) - 1;
/// The most failures, and the most slow calls, the ramp word counts (7 bits each) before
/// halving.
pub(super) const RAMP_MAX_MARKED: u16 = (1 << 7) - 1;

/// What one outcome of a call the ramp admitted tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RampSample {
    /// A transient failure (a timeout included).
    pub(crate) failure: bool,
    /// Slow: at or above the slow-call threshold, or timed out.
    pub(crate) slow: bool,
}

/// The phase's bits in the packed control word.
pub(super) const PHASE_MASK: u64 = 0b111;
/// Phase, epoch and count: the bits a success while closed could change.
pub(super) const QUIET_MASK: u64 = (1 << 21) - 1;

/// Successful samples the tail estimate needs before the attempt ceiling and hedging trust it.
pub(super) const TAIL_SAMPLES: u32 = 20;
/// The measured attempt ceiling, in multiples of the recent p95.
pub(super) const CEILING_MULTIPLE: u64 = 3;
/// A hedge never starts sooner than this after the attempt it doubles: the p95 of an operation
/// that takes microseconds would otherwise double nearly every call on a scheduling hiccup.
pub(super) const HEDGE_FLOOR: Duration = Duration::from_millis(10);

/// The ramp's floor and step: 5%.
pub(super) const RAMP_INITIAL: u16 = 50;
/// One whole, in the ramp's thousandths.
pub(super) const RAMP_ONE: u16 = 1000;
/// Opens are counted up to here (5 bits); the break has long reached its maximum by then.
pub(super) const MAX_OPENS: u8 = 31;

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
    pub(super) fn change(&mut self, c: Change) {
        for slot in &mut self.changes {
            if slot.is_none() {
                *slot = Some(c);
                return;
            }
        }
    }

    /// `true` when there is nothing to emit.
    pub(super) fn is_empty(&self) -> bool {
        self.changes[0].is_none() && !self.probe_started && self.reclaimed == 0 && !self.ramp_step
    }

    /// `true` when the breaker opened or closed: the trip window's evidence has been used.
    pub(super) fn decided(&self) -> bool {
        self.changes
            .iter()
            .flatten()
            .any(|ch| ch.to == State::Open || ch.to == State::Closed)
    }

    /// `true` when the breaker opened.
    pub(super) fn opened(&self) -> bool {
        self.changes.iter().flatten().any(|ch| ch.to == State::Open)
    }
}

pub(super) fn permille(x: u16) -> Ratio {
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
pub(super) fn jittered_break(
    s: &BreakerSettings,
    nominal: Duration,
    opens: u8,
    seed: u64,
) -> Duration {
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
pub(super) fn recovery<M: Measure>(
    s: &BreakerSettings,
) -> Option<crate::breaker::settings::Recovery> {
    if M::KEEPS {
        s.recovery()
    } else {
        None
    }
}

/// The ramp's length: its fraction of the break just served, clamped.
pub(super) fn ramp_length<M: Measure>(s: &BreakerSettings, opens: u8, seed: u64) -> Duration {
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
pub(super) fn open<M: Measure>(
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
pub(super) fn close(c: &mut Control, from: State, n: &mut Notes) {
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
pub(super) fn recovered<M: Measure>(
    c: &mut Control,
    s: &BreakerSettings,
    now: Instant,
    n: &mut Notes,
) {
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
pub(super) fn break_remaining(
    remaining: Duration,
    opens: u8,
    s: &BreakerSettings,
    seed: u64,
) -> Duration {
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
pub(super) fn drawn_break(
    s: &BreakerSettings,
    nominal: Duration,
    opens: u8,
    seed: u64,
) -> Duration {
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
pub(super) fn slow_beyond_noise(
    r: &Ramp,
    s: &BreakerSettings,
    normal_slow: Option<(u32, u32)>,
) -> bool {
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
pub(super) fn consecutive_needed<M: Measure>(
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
pub(super) fn probe_failures_reopen<M: Measure>(
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
pub(super) fn failures_beyond_noise(
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
}
