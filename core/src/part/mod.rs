//! The parts of a call and what the call driver asks of each.
//!
//! A call may pass through up to seven parts: a breaker, a retry budget, a rate limiter, a
//! published quota, a bulkhead, an adaptive concurrency limiter and a saturation signal. Each is
//! optional; [`Parts`](crate::Parts) holds them as `Option`s and applies them in one fixed order (the local
//! limits first, as self-imposed throttles, then the breaker), and the call driver
//! ([`Call`](crate::Call)) admits every attempt through it.
//!
//! Each kind of part answers the driver through one small trait, implemented here for every
//! form the core offers, for a reference to one, and for [`Never`] (a part that is statically
//! absent):
//!
//! | part | trait | forms |
//! |---|---|---|
//! | breaker | [`Admission`] | [`Breaker`](crate::Breaker), [`SharedBreaker`](crate::SharedBreaker), [`LeanBreaker`](crate::LeanBreaker), [`FullTable`](crate::breaker::FullTable) |
//! | retry budget | [`Funding`] | [`Budget`](crate::Budget), [`SharedBudget`](crate::SharedBudget) |
//! | rate limiter, quota | [`Limit`] | [`Limiter`](crate::limits::Limiter) (every rule and storage) |
//! | bulkhead | [`BulkheadSlots`] | [`Bulkhead`](crate::limits::Bulkhead), [`SharedBulkhead`](crate::limits::SharedBulkhead) |
//! | adaptive limiter | [`AdaptiveSlots`] | [`ConcurrencyLimiter`](crate::limits::ConcurrencyLimiter) (both storages) |
//!
//! A part kept behind a lock the core does not know (an embassy mutex) is reached through
//! [`Lock`] and [`Locked`].

mod locked;
mod permit;

pub use self::locked::{Heard, Hearing, Lock, Locked, Unheard};
pub(crate) use self::permit::Kind;
pub use self::permit::Permit;

use crate::error::Refused;
use crate::event::Event;
use crate::name::Name;
use crate::outcome::Outcome;
use crate::time::{Duration, Instant};

/// Why a hedged attempt is not to be launched now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum HedgeSuppressed {
    /// The breaker is not closed: no hedging while half-open, recovering or open.
    NotClosed,
    /// There is no learned latency yet to hedge against (fewer than 20 successes), or nothing
    /// learns it (no breaker, or one that keeps no statistics).
    NoBaseline,
    /// The dependency is near the breaker's trip point: a hedge would add load to a
    /// dependency that is already failing.
    NearTrip,
}

/// What the call driver asks a breaker it has learned ([`Admission::learned`]). Each is
/// reported only once armed (20 successful samples); before that, or from a breaker that keeps
/// no statistics, the answer is `Err(HedgeSuppressed::NoBaseline)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Learned {
    /// How long a healthy call takes (the learned median): a retry is not started with less
    /// time left than this.
    NormalLatency,
    /// The measured attempt ceiling (3x the recent p95): the driver raises it to its settings'
    /// floor and lets it only tighten the configured attempt timeout.
    AttemptCeiling,
    /// The slow-call threshold in force: an attempt the call's own deadline cut short before
    /// it ran this long is the caller's cancellation, not evidence against the dependency.
    SlowThreshold,
    /// When to launch a hedged second attempt after the first (the learned p95, never under
    /// 10 ms), or why not: never while half-open or recovering, without a baseline, or near
    /// the trip point.
    HedgeAfter,
    /// Where to learn a first attempt that a winning hedge left running, known only to have run
    /// past `ran_past` (just under the hedge delay): a latency drawn, with `draw` uniform over
    /// `u64`, from those learned above `ran_past`, in proportion to how often each came, or
    /// `ran_past` itself when none lies above or nothing is learned (always `Ok`). So the learned
    /// percentiles stay the dependency's (see
    /// [`HedgedPair::finished`](crate::call::HedgedPair::finished)).
    Censored {
        /// What the attempt is known to have run past.
        ran_past: Duration,
        /// A draw uniform over `u64`.
        draw: u64,
    },
}

/// The breaker side of a call: asked before every attempt, told every attempt's outcome.
pub trait Admission {
    /// Whether this breaker learns latencies at all (a [`LeanBreaker`](crate::LeanBreaker)
    /// keeps no statistics): `false` lets the driver skip asking [`Admission::learned`], and a
    /// firmware leave out the code that acts on a learned median.
    const LEARNS: bool = true;
    /// The name the call's events carry.
    fn name(&self) -> &Name;
    /// Asks to make one attempt; `attempt_timeout` bounds how long a probe slot may stay out.
    fn try_acquire(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused>;
    /// Would an attempt be admitted? Changes nothing.
    fn check(&self, now: Instant) -> Result<(), Refused>;
    /// Reports the attempt's outcome.
    fn on_outcome(
        &self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    );
    /// Gives back a permit whose attempt never reached an outcome.
    fn release(&self, permit: Permit);
    /// What the breaker has learned, as `ask` asks it (see [`Learned`]).
    fn learned(&self, now: Instant, ask: Learned) -> Result<Duration, HedgeSuppressed>;
}

/// The budget side of a call: asked before every retry, told every attempt's outcome.
pub trait Funding {
    /// Takes one retry's worth, or refuses.
    fn try_fund_retry(&self, now: Instant) -> Result<(), Refused>;
    /// Gives back the retry [`try_fund_retry`](Funding::try_fund_retry) took at `now` for an
    /// attempt that never started (a hedge the breaker refused, or one the operation could not
    /// make). What no longer fits the budget is lost, as with any deposit.
    fn refund_retry(&self, now: Instant);
    /// Learns from an attempt's outcome (successes fund future retries).
    fn on_outcome(&self, now: Instant, outcome: Outcome);
    /// Whether a [sheddable](crate::call::Criticality::Sheddable) call may retry: refused with
    /// [`RefusalReason::Shed`](crate::RefusalReason::Shed) once more than half of the budget
    /// is spent. Changes nothing.
    fn check_shed(&self, now: Instant) -> Result<(), Refused>;
}

/// A rate limiter (or a published quota) as the call driver sees it: one cell per attempt.
///
/// ```
/// use stormguard_core::{Instant, part::Limit, limits::RateLimitSettings, limits::SharedRateLimiter};
///
/// fn one_attempt(limit: &impl Limit) -> bool {
///     limit.take(Instant::ZERO).is_ok()
/// }
/// let shared = SharedRateLimiter::new(RateLimitSettings::per_second("api", 1)?);
/// assert!(one_attempt(&shared));
/// assert!(!one_attempt(&shared));
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
pub trait Limit {
    /// Takes one cell at `now`, or refuses with the time until one is available.
    fn take(&self, now: Instant) -> Result<(), Refused>;
    /// Would a cell be granted at `now`? Changes nothing.
    fn peek(&self, now: Instant) -> Result<(), Refused>;
}

/// A bulkhead as the call driver sees it: a slot per attempt, held until its outcome (a slot
/// is a count: the driver keeps no permit for it).
pub trait BulkheadSlots {
    /// Takes a slot for one attempt at `now`, or refuses at once.
    fn try_enter(&self, now: Instant) -> Result<(), Refused>;
    /// Frees an attempt's slot; `true` when callers are waiting for one (wake one).
    fn leave(&self) -> bool;
    /// Would an attempt be admitted? Changes nothing.
    fn check(&self) -> Result<(), Refused>;
}

/// An adaptive concurrency limiter as the call driver sees it: a slot per attempt, and the
/// attempt's latency to learn from (a slot is a count: the driver keeps no permit for it).
pub trait AdaptiveSlots {
    /// Takes a slot for one attempt at `now`, or refuses at once.
    fn try_acquire(&self, now: Instant) -> Result<(), Refused>;
    /// The attempt ended at `now`: `latency` for a success (learned), `None` for a failure.
    fn complete(&self, now: Instant, latency: Option<Duration>);
    /// Gives back a slot whose attempt has no outcome (cancelled).
    fn release(&self);
    /// Would an attempt be admitted? Changes nothing.
    fn check(&self) -> Result<(), Refused>;
}

/// The caller's own saturation, as the call driver asks it: an attempt that ran while the
/// caller's runtime was starved teaches the breaker no latency (it measured the caller, not the
/// dependency).
pub trait Saturation {
    /// Whether an attempt that began at `started` and ended at `now` ran while saturated.
    fn holds(&self, started: Instant, now: Instant) -> bool;
}

/// A part that is statically absent: the default type of every part of [`Parts`](crate::Parts),
/// so that a call without a rate limiter (say) carries no code for one. It has no value, so a
/// `Parts`' `Option` of it is always `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Never {}

impl Admission for Never {
    fn name(&self) -> &Name {
        match *self {}
    }
    fn try_acquire(
        &self,
        _: Instant,
        _: Option<Duration>,
        _: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        match *self {}
    }
    fn check(&self, _: Instant) -> Result<(), Refused> {
        match *self {}
    }
    fn on_outcome(&self, _: Instant, _: Permit, _: Outcome, _: &mut dyn FnMut(Event<'_>)) {
        match *self {}
    }
    fn release(&self, _: Permit) {
        match *self {}
    }
    fn learned(&self, _: Instant, _: Learned) -> Result<Duration, HedgeSuppressed> {
        match *self {}
    }
}

impl Funding for Never {
    fn try_fund_retry(&self, _: Instant) -> Result<(), Refused> {
        match *self {}
    }
    fn refund_retry(&self, _: Instant) {
        match *self {}
    }
    fn on_outcome(&self, _: Instant, _: Outcome) {
        match *self {}
    }
    fn check_shed(&self, _: Instant) -> Result<(), Refused> {
        match *self {}
    }
}

impl Limit for Never {
    fn take(&self, _: Instant) -> Result<(), Refused> {
        match *self {}
    }
    fn peek(&self, _: Instant) -> Result<(), Refused> {
        match *self {}
    }
}

impl BulkheadSlots for Never {
    fn try_enter(&self, _: Instant) -> Result<(), Refused> {
        match *self {}
    }
    fn leave(&self) -> bool {
        match *self {}
    }
    fn check(&self) -> Result<(), Refused> {
        match *self {}
    }
}

impl AdaptiveSlots for Never {
    fn try_acquire(&self, _: Instant) -> Result<(), Refused> {
        match *self {}
    }
    fn complete(&self, _: Instant, _: Option<Duration>) {
        match *self {}
    }
    fn release(&self) {
        match *self {}
    }
    fn check(&self) -> Result<(), Refused> {
        match *self {}
    }
}

// A reference to a part is the part: the adapters hand the driver their shared parts by
// reference, a firmware or a test may hand them over by value.

impl Saturation for Never {
    fn holds(&self, _: Instant, _: Instant) -> bool {
        match *self {}
    }
}

impl<T: Saturation + ?Sized> Saturation for &T {
    #[inline]
    fn holds(&self, started: Instant, now: Instant) -> bool {
        (**self).holds(started, now)
    }
}

impl<T: Admission + ?Sized> Admission for &T {
    const LEARNS: bool = T::LEARNS;
    #[inline]
    fn name(&self) -> &Name {
        (**self).name()
    }
    #[inline]
    fn try_acquire(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        (**self).try_acquire(now, attempt_timeout, events)
    }
    #[inline]
    fn check(&self, now: Instant) -> Result<(), Refused> {
        (**self).check(now)
    }
    #[inline]
    fn on_outcome(
        &self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        (**self).on_outcome(now, permit, outcome, events);
    }
    #[inline]
    fn release(&self, permit: Permit) {
        (**self).release(permit);
    }
    #[inline(always)]
    fn learned(&self, now: Instant, ask: Learned) -> Result<Duration, HedgeSuppressed> {
        (**self).learned(now, ask)
    }
}

impl<T: Funding + ?Sized> Funding for &T {
    #[inline]
    fn try_fund_retry(&self, now: Instant) -> Result<(), Refused> {
        (**self).try_fund_retry(now)
    }
    #[inline]
    fn refund_retry(&self, now: Instant) {
        (**self).refund_retry(now);
    }
    #[inline]
    fn on_outcome(&self, now: Instant, outcome: Outcome) {
        (**self).on_outcome(now, outcome);
    }
    #[inline]
    fn check_shed(&self, now: Instant) -> Result<(), Refused> {
        (**self).check_shed(now)
    }
}

impl<T: Limit + ?Sized> Limit for &T {
    #[inline]
    fn take(&self, now: Instant) -> Result<(), Refused> {
        (**self).take(now)
    }
    #[inline]
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        (**self).peek(now)
    }
}

impl<T: BulkheadSlots + ?Sized> BulkheadSlots for &T {
    #[inline]
    fn try_enter(&self, now: Instant) -> Result<(), Refused> {
        (**self).try_enter(now)
    }
    #[inline]
    fn leave(&self) -> bool {
        (**self).leave()
    }
    #[inline]
    fn check(&self) -> Result<(), Refused> {
        (**self).check()
    }
}

impl<T: AdaptiveSlots + ?Sized> AdaptiveSlots for &T {
    #[inline]
    fn try_acquire(&self, now: Instant) -> Result<(), Refused> {
        (**self).try_acquire(now)
    }
    #[inline]
    fn complete(&self, now: Instant, latency: Option<Duration>) {
        (**self).complete(now, latency);
    }
    #[inline]
    fn release(&self) {
        (**self).release();
    }
    #[inline]
    fn check(&self) -> Result<(), Refused> {
        (**self).check()
    }
}
