//! The breaker over some storage, the one code every form runs.

use super::hold::{seed_from, ConstSettings, Fixed, SettingsRef};
use super::rules::*;
use super::settings::BreakerSettings;
use super::snapshot::Snapshot;
use super::stats::{self, Fold, HistCounts, Measure, NoStats, Ring, Sample, Stats, Stripes};
use crate::cell::{const_unless_loom, word, Word};
#[cfg(all(target_pointer_width = "64", not(loom)))]
use crate::cell::{field, put};
use crate::error::{RefusalReason, Refused};
use crate::event::Event;
use crate::outcome::Outcome;
use crate::part::HedgeSuppressed;
use crate::part::{Kind, Learned, Permit};
use crate::ratio::Ratio;
use crate::state::{State, TripReason};
use crate::time::{Duration, Instant};

/// The breaker over some storage: the single-threaded form keeps its words in `Cell`s, the
/// shared form in atomics, and both run exactly this code. Control transitions are load / pure
/// step / compare-exchange on the control word; the ramp's credit and evidence live in a second
/// word tagged with the period; statistics are updated word by word.
#[derive(Clone, Debug)]
pub(crate) struct Core<W, M: Measure = Stats<W>, S = BreakerSettings> {
    pub(super) settings: S,
    pub(super) seed: u64,
    pub(super) control: W,
    /// The control state's mark, with the epoch it belongs to (see [`Mark`]).
    pub(super) mark: W,
    pub(super) ramp: W,
    pub(super) stats: M,
    /// The break last drawn for a refusal ([`KeptBreak`]), so that a refusal early in a break
    /// reads its bound instead of drawing it again: a word in a form with statistics on a
    /// 64-bit target, nothing where RAM counts more than nanoseconds (there the break is
    /// drawn each time).
    #[cfg(all(target_pointer_width = "64", not(loom)))]
    pub(super) drawn: M::Kept,
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
    ///
    /// `before` is the mark and epoch read with the control word (not the whole `Control`: a
    /// copy of it is, on a Cortex-M, a call to `memcpy`, which then costs every image ~730 B).
    fn commit_mark(&self, before: (Mark, u8), after: &Control) {
        let unchanged = after.mark == before.0 && after.epoch == before.1;
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
            let (raw, mut c, r) = self.load();
            let before = (c.mark, c.epoch);
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
            self.commit_mark(before, &c);
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
            let (raw, mut c, r) = self.load();
            let before = (c.mark, c.epoch);
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
            self.commit_mark(before, &c);
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
            let (raw, mut c, r) = self.load();
            if c.phase != Phase::Recovering || c.epoch != epoch {
                return;
            }
            let before = (c.mark, c.epoch);
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
                self.commit_mark(before, &c);
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
            let (raw, mut c, r) = self.load();
            let mark = c.mark;
            let mut step = Notes::default();
            advance::<M>(&mut c, &r, self.s(), self.seed, now, &mut step);
            if c.pack() == raw && c.mark == mark {
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

    /// What the breaker has learned, as the call driver asks it ([`Learned`]); inlined where it
    /// is asked, so only the reading asked for is compiled in.
    #[inline(always)]
    pub(crate) fn learned(&self, now: Instant, ask: Learned) -> Result<Duration, HedgeSuppressed> {
        let armed = |d: Option<Duration>| d.ok_or(HedgeSuppressed::NoBaseline);
        match ask {
            Learned::NormalLatency => armed(self.normal_latency(now)),
            Learned::AttemptCeiling => armed(self.attempt_ceiling(now)),
            Learned::SlowThreshold => armed(self.slow_threshold(now)),
            Learned::HedgeAfter => self.hedge_after(now),
            Learned::Censored { ran_past, draw } => Ok(self.censored_latency(now, ran_past, draw)),
        }
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
    /// [`Learned::Censored`]).
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
