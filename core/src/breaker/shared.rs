//! The shared breaker: many threads use it through `&self`, with no lock on the call path. It
//! runs the very code of the single-threaded forms over atomic words (`portable-atomic`), so no
//! rule is written twice. (The shared budget, built the same way, lives with the budget.)
//!
//! # Consistency
//! The breaker's control state (phase, period, counts, probes, break) is one word installed by
//! compare-exchange, so every transition is atomic and exactly one racing thread wins each probe
//! slot. The ramp's credit is a second word tagged with the period, and the statistics (trip
//! window, baselines, latency histogram) are further words updated one at a time. A snapshot is
//! therefore consistent per word, not across words: a count racing a window rotation may land in
//! the neighbouring bucket, and a snapshot may show a window count a moment older than the state.
//!
//! # Microcontrollers
//! On a chip without 64-bit compare-and-swap (thumbv6m, thumbv7m, riscv32imc),
//! `portable-atomic` needs a backend chosen by the firmware (see the crate docs), and its
//! fallback for 64-bit atomics on thumbv7 is a spinlock an interrupt can deadlock. There, share
//! the single-threaded forms behind a mutex instead (the embassy adapter does).

use core::fmt;

use crate::breaker::settings::BreakerSettings;
use crate::breaker::stats::{LaneHint, StripedStats};
use crate::breaker::{admission_via_core, Core, Snapshot, State};
use crate::cell::const_unless_loom;
use crate::error::Refused;
use crate::event::Event;
use crate::loom::AtomicU64;
use crate::name::Name;
use crate::outcome::Outcome;
use crate::part::{HedgeSuppressed, Permit};
use crate::ratio::Ratio;
use crate::time::{Duration, Instant};

/// A circuit breaker shared by many threads through `&self`, lock-free. Same settings, same
/// rules, same decisions as [`Breaker`](crate::Breaker) for any sequential input.
///
/// A break ends exactly when it has lasted its (jittered) length. Only after 2^55 ns (over a
/// year) of the clock are its ends kept in whole microseconds, rounded up: then half-open and
/// `retry_after` can land up to 1 us after the break.
///
/// ```
/// use stormguard_core::{BreakerSettings, Instant, Outcome, SharedBreaker, State};
///
/// static PAYMENTS: SharedBreaker = SharedBreaker::new(BreakerSettings::defaults("payments"));
///
/// let now = Instant::from_secs(1);
/// let permit = PAYMENTS.try_acquire(now, None, &mut |_| {})?;
/// PAYMENTS.on_outcome(now, permit, Outcome::Success, &mut |_| {});
/// assert_eq!(PAYMENTS.state(now), State::Closed);
/// # Ok::<(), stormguard_core::Refused>(())
/// ```
///
/// # Lanes
/// Every success while closed writes the trip window and the latency histogram. So that threads
/// sharing a breaker do not all write the same words, those counters are kept in `LANES` lanes,
/// each on its own cache line, and every reading sums them. A thread writes the lane its
/// lane hint ([`SharedBreaker::with_lane_hint`]) names (modulo `LANES`); without a hint every
/// thread writes lane 0. Each lane costs some 640 bytes (the host default of
/// [`DEFAULT_LANES`](crate::breaker::DEFAULT_LANES) comes to about 5 KiB a breaker); one thread on one lane decides exactly as
/// the single-threaded [`Breaker`](crate::Breaker) does.
#[derive(Debug)]
pub struct SharedBreaker<const LANES: usize = DEFAULT_LANES> {
    core: Core<AtomicU64, StripedStats<AtomicU64, LANES>>,
}

/// The lanes of a [`SharedBreaker`] unless its type says otherwise: 8 on a 64-bit host, where
/// a breaker is shared by the worker threads of a runtime (threads beyond 8 share lanes, 2 or
/// more to one); 1 elsewhere, where memory counts more and the chip has a core or two.
pub const DEFAULT_LANES: usize = if cfg!(target_pointer_width = "64") {
    8
} else {
    1
};

impl SharedBreaker {
    const_unless_loom! {
        /// A closed breaker with validated `settings` and the default lanes; usable in a
        /// `static`.
        #[must_use]
        pub fn new(settings: BreakerSettings) -> SharedBreaker {
            SharedBreaker { core: Core::new(settings) }
        }
    }
}

impl<const LANES: usize> SharedBreaker<LANES> {
    const_unless_loom! {
        /// A closed breaker with validated `settings` and `LANES` lanes of counters (see the
        /// type's docs; zero lanes fail the build); usable in a `static`.
        ///
        /// ```
        /// use stormguard_core::{BreakerSettings, SharedBreaker};
        ///
        /// let breaker = SharedBreaker::<16>::with_lanes(BreakerSettings::defaults("search"));
        /// # let _ = breaker;
        /// ```
        #[must_use]
        pub fn with_lanes(settings: BreakerSettings) -> SharedBreaker<LANES> {
            const { assert!(LANES > 0, "a shared breaker needs at least one lane") };
            SharedBreaker { core: Core::new(settings) }
        }
    }

    /// Sets the jitter seed (give each process its own, so a fleet's breaks do not line up).
    #[must_use]
    pub const fn with_seed(mut self, seed: u64) -> Self {
        self.core.set_seed(seed);
        self
    }

    /// Sets the function that names the calling thread's lane (see the type's docs), for
    /// example a thread-local index: each thread then writes its own lane of counters. The
    /// hint picks a lane only; it changes no decision.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use stormguard_core::{BreakerSettings, SharedBreaker};
    ///
    /// fn this_thread() -> usize {
    ///     static NEXT: AtomicUsize = AtomicUsize::new(0);
    ///     thread_local!(static LANE: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    ///     LANE.with(|lane| *lane)
    /// }
    ///
    /// static SEARCH: SharedBreaker =
    ///     SharedBreaker::new(BreakerSettings::defaults("search")).with_lane_hint(this_thread);
    /// ```
    #[must_use]
    pub const fn with_lane_hint(mut self, hint: LaneHint) -> Self {
        self.core.stats.set_lane_hint(hint);
        self
    }

    /// The settings this breaker was built with.
    #[must_use]
    pub const fn settings(&self) -> &BreakerSettings {
        self.core.settings()
    }

    /// The breaker's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        self.core.settings().name()
    }

    /// The state at `now`; reading consumes nothing.
    #[must_use]
    pub fn state(&self, now: Instant) -> State {
        self.core.state(now)
    }

    /// Asks to make one attempt at `now`; `attempt_timeout` bounds how long a probe slot may
    /// stay out without an outcome (without one, the break just served).
    #[inline]
    pub fn try_acquire(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut impl FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        self.core.try_acquire(now, attempt_timeout, events)
    }

    /// Like [`SharedBreaker::try_acquire`], reading the time from `clock` only when a rule
    /// needs it: an open or half-open breaker always reads it, a closed one only when it
    /// keeps statistics (a latency to measure). So a closed consecutive-failure breaker,
    /// with [`SharedBreaker::on_outcome_lazy`], admits and records a success without reading
    /// a clock at all.
    ///
    /// A permit granted without a reading carries no start: report it with
    /// [`SharedBreaker::on_outcome_lazy`] or [`SharedBreaker::on_outcome`] on this breaker,
    /// not to a call driver (which times attempts by their permits).
    ///
    /// ```
    /// use core::cell::Cell;
    /// use stormguard_core::{BreakerSettings, Instant, Outcome, SharedBreaker};
    ///
    /// let breaker = SharedBreaker::new(BreakerSettings::consecutive_only("db", 1)?);
    /// let reads = Cell::new(0);
    /// let clock = || {
    ///     reads.set(reads.get() + 1);
    ///     Instant::from_secs(1)
    /// };
    /// let permit = breaker.try_acquire_lazy(clock, None, &mut |_| {})?;
    /// breaker.on_outcome_lazy(clock, permit, Outcome::Success, &mut |_| {});
    /// assert_eq!(reads.get(), 0); // closed, and nothing to time
    /// let permit = breaker.try_acquire_lazy(clock, None, &mut |_| {})?;
    /// breaker.on_outcome_lazy(clock, permit, Outcome::Transient, &mut |_| {});
    /// assert_eq!(reads.get(), 1); // the failure that opens it is settled at its time
    /// assert!(breaker.try_acquire_lazy(clock, None, &mut |_| {}).is_err());
    /// assert_eq!(reads.get(), 2);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_lazy(
        &self,
        clock: impl FnOnce() -> Instant,
        attempt_timeout: Option<Duration>,
        events: &mut impl FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        self.core
            .try_acquire_lazy(clock, false, attempt_timeout, events)
    }

    /// Like [`SharedBreaker::on_outcome`], reading the time from `clock` only when a rule
    /// needs it: not for a success of a closed breaker that keeps no statistics. See
    /// [`SharedBreaker::try_acquire_lazy`].
    #[inline]
    pub fn on_outcome_lazy(
        &self,
        clock: impl FnOnce() -> Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut impl FnMut(Event<'_>),
    ) {
        self.core.on_outcome_lazy(clock, permit, outcome, events);
    }

    /// Like [`SharedBreaker::try_acquire`], returning a guard that hands the permit back (and
    /// with it any probe slot) if it is dropped without an outcome.
    pub fn try_acquire_guarded(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut impl FnMut(Event<'_>),
    ) -> Result<PermitGuard<'_, LANES>, Refused> {
        self.try_acquire(now, attempt_timeout, events)
            .map(|permit| self.guard(permit))
    }

    /// Wraps `permit`, granted by this breaker, in a guard that hands it back if it is
    /// dropped without an outcome: for a permit from [`SharedBreaker::try_acquire_lazy`].
    ///
    /// ```
    /// use stormguard_core::{BreakerSettings, Instant, Outcome, SharedBreaker};
    /// let b: SharedBreaker = SharedBreaker::new(BreakerSettings::consecutive_only("db", 1)?);
    /// let permit = b.try_acquire_lazy(|| Instant::from_secs(1), None, &mut |_| {})?;
    /// b.guard(permit).complete_lazy(|| Instant::from_secs(2), Outcome::Transient, &mut |_| {});
    /// assert!(b.try_acquire(Instant::from_secs(2), None, &mut |_| {}).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn guard(&self, permit: Permit) -> PermitGuard<'_, LANES> {
        PermitGuard {
            breaker: self,
            permit: Some(permit),
        }
    }

    /// Would a call be admitted at `now`? Changes nothing.
    pub fn check(&self, now: Instant) -> Result<(), Refused> {
        self.core.check(now)
    }

    /// Reports how the attempt behind `permit` ended, at `now`.
    pub fn on_outcome(
        &self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut impl FnMut(Event<'_>),
    ) {
        self.core.on_outcome(now, permit, outcome, events);
    }

    /// Gives back a permit whose attempt never reached an outcome; a probe slot is freed.
    pub fn release(&self, permit: Permit) {
        self.core.release(&permit);
    }

    /// Forces the breaker open until [`SharedBreaker::reset`].
    pub fn isolate(&self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
        self.core.isolate(now, events);
    }

    /// Closes the breaker; the learned baselines stay.
    pub fn reset(&self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
        self.core.reset(now, events);
    }

    /// When a timed transition is due, if any.
    #[must_use]
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        self.core.poll_timeout(now)
    }

    /// Realises the transitions due at `now` and emits their events.
    pub fn handle_timeout(&self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
        self.core.handle_timeout(now, events);
    }

    /// The learned median latency of successful calls.
    #[must_use]
    pub fn normal_latency(&self, now: Instant) -> Option<Duration> {
        self.core.normal_latency(now)
    }

    /// The measured attempt ceiling (3x the recent p95, once there are 20 successes), which the
    /// call driver raises to its floor ([`CallSettings::ceiling_floor`](crate::CallSettings::ceiling_floor)).
    #[must_use]
    pub fn attempt_ceiling(&self, now: Instant) -> Option<Duration> {
        self.core.attempt_ceiling(now)
    }

    /// The slow-call threshold in force (see [`Breaker::slow_threshold`](crate::Breaker::slow_threshold)).
    #[must_use]
    pub fn slow_threshold(&self, now: Instant) -> Option<Duration> {
        self.core.slow_threshold(now)
    }

    /// When to launch a hedged attempt, or why not now (see [`Breaker::hedge_after`](crate::Breaker::hedge_after)).
    pub fn hedge_after(&self, now: Instant) -> Result<Duration, HedgeSuppressed> {
        self.core.hedge_after(now)
    }

    /// The learned normal failure rate, once armed.
    #[must_use]
    pub fn normal_failure_rate(&self, now: Instant) -> Option<Ratio> {
        self.core.normal_failure_rate(now)
    }

    /// The admitted fraction while recovering.
    #[must_use]
    pub fn ramp_fraction(&self, now: Instant) -> Option<Ratio> {
        self.core.ramp_fraction(now)
    }

    /// A point-in-time view (consistent per word, see the module docs).
    #[must_use]
    pub fn snapshot(&self, now: Instant) -> Snapshot {
        self.core.snapshot(now)
    }
}

/// A permit that hands itself back when dropped without an outcome, so a cancelled attempt
/// never leaks a half-open probe slot.
#[must_use = "dropping the guard releases the permit"]
#[derive(Debug)]
pub struct PermitGuard<'a, const LANES: usize = DEFAULT_LANES> {
    breaker: &'a SharedBreaker<LANES>,
    permit: Option<Permit>,
}

impl<const LANES: usize> PermitGuard<'_, LANES> {
    /// Time since the attempt was admitted, at `now`.
    #[must_use]
    pub fn latency(&self, now: Instant) -> Option<Duration> {
        self.permit.as_ref().map(|p| p.latency(now))
    }

    /// Reports the outcome, consuming the guard.
    pub fn complete(self, now: Instant, outcome: Outcome, events: &mut impl FnMut(Event<'_>)) {
        self.complete_lazy(|| now, outcome, events);
    }

    /// Like [`PermitGuard::complete`], reading the time from `clock` only when a rule needs
    /// it (see [`SharedBreaker::on_outcome_lazy`]).
    pub fn complete_lazy(
        self,
        clock: impl FnOnce() -> Instant,
        outcome: Outcome,
        events: &mut impl FnMut(Event<'_>),
    ) {
        let breaker = self.breaker;
        if let Some(p) = self.into_permit() {
            breaker.on_outcome_lazy(clock, p, outcome, events);
        }
    }

    /// Takes the permit out; the caller then owes the breaker an outcome or a release.
    pub fn into_permit(mut self) -> Option<Permit> {
        let permit = self.permit.take();
        // Nothing is left to hand back: skipping the drop spares every outcome a reload and a
        // test of the emptied permit.
        core::mem::forget(self);
        permit
    }
}

impl<const LANES: usize> Drop for PermitGuard<'_, LANES> {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            self.breaker.release(p);
        }
    }
}

admission_via_core!(impl [const LANES: usize] for &SharedBreaker<LANES>);

impl<const LANES: usize> fmt::Display for SharedBreaker<LANES> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shared breaker `{}`", self.name())
    }
}

#[cfg(feature = "defmt")]
impl<const LANES: usize> defmt::Format for SharedBreaker<LANES> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "SharedBreaker({})", self.name());
    }
}

#[cfg(feature = "defmt")]
impl<'a, const LANES: usize> defmt::Format for PermitGuard<'a, LANES> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "PermitGuard({})", self.permit);
    }
}
