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

pub(crate) mod hold;
pub(crate) mod keyed;
pub(crate) mod lean;
pub(crate) mod machine;
pub(crate) mod rules;
pub(crate) mod settings;
pub(crate) mod shared;
pub(crate) mod snapshot;
pub(crate) mod stats;

pub use self::hold::{ConstSettings, Fixed, SettingsRef};
pub use self::keyed::{FullTable, Keyed, KeyedRefusal, LockedKey, Member, STALE_BREAKS};
pub use self::lean::LeanBreaker;
pub use self::settings::{
    BreakerSettings, BreakerSettingsBuilder, FailureRate, Recovery, SlowCalls, MAX_COUNT,
    MAX_PROBES, TRIP_BUCKETS,
};
pub use self::shared::{PermitGuard, SharedBreaker, DEFAULT_LANES};
pub use self::snapshot::Snapshot;
pub use self::stats::LaneHint;

use core::cell::Cell;

use self::machine::Core;
use self::stats::Stats;
use crate::cell::const_unless_loom;
#[cfg(test)]
use crate::cell::Word;
use crate::error::{Refused, SettingsError};
use crate::event::Event;
use crate::name::Name;
use crate::outcome::Outcome;
use crate::part::{HedgeSuppressed, Permit};
use crate::ratio::Ratio;
use crate::state::State;
use crate::time::{Duration, Instant};

/// A circuit breaker, single-threaded form (state in `Cell`s: `Send`, not `Sync`). Deterministic: the same settings,
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
        admission_via_core!(impl [$($generics)*] for $ty, learns: true);
    };
    (impl [$($generics:tt)*] for $ty:ty, learns: $learns:expr) => {
        impl<$($generics)*> $crate::part::Admission for $ty {
            const LEARNS: bool = $learns;
            fn name(&self) -> &$crate::name::Name {
                self.core.s().name()
            }
            #[inline]
            fn try_acquire(
                &self,
                now: $crate::time::Instant,
                attempt_timeout: Option<$crate::time::Duration>,
                events: &mut dyn FnMut($crate::event::Event<'_>),
            ) -> Result<$crate::part::Permit, $crate::error::Refused> {
                self.core.try_acquire(now, attempt_timeout, events)
            }
            fn check(&self, now: $crate::time::Instant) -> Result<(), $crate::error::Refused> {
                self.core.check(now)
            }
            #[inline]
            fn on_outcome(
                &self,
                now: $crate::time::Instant,
                permit: $crate::part::Permit,
                outcome: $crate::outcome::Outcome,
                events: &mut dyn FnMut($crate::event::Event<'_>),
            ) {
                self.core.on_outcome(now, permit, outcome, events);
            }
            fn release(&self, permit: $crate::part::Permit) {
                self.core.release(&permit);
            }
            #[inline(always)]
            fn learned(
                &self,
                now: $crate::time::Instant,
                ask: $crate::part::Learned,
            ) -> Result<$crate::time::Duration, $crate::part::HedgeSuppressed> {
                self.core.learned(now, ask)
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
        pub fn try_acquire(&self, now: Instant) -> Result<Permit, Refused> {
            self.core.try_acquire(now, None, &mut |_| {})
        }

        /// Asks to make one attempt at `now`, with the attempt timeout (which bounds how long a probe
        /// slot may stay out without an outcome) and a sink for the events the admission produces.
        #[inline]
        pub fn try_acquire_with(
            &self,
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
            &self,
            now: Instant,
            permit: Permit,
            outcome: Outcome,
            events: &mut impl FnMut(Event<'_>),
        ) {
            self.core.on_outcome(now, permit, outcome, events);
        }

        /// Gives back a permit whose attempt never ran to an outcome (the caller was cancelled): a
        /// probe slot is freed at once; nothing is counted.
        pub fn release(&self, permit: Permit) {
            self.core.release(&permit);
        }

        /// Forces the breaker open until [`Self::reset`]: every call is refused with
        /// [`RefusalReason::Isolated`](crate::RefusalReason::Isolated).
        pub fn isolate(&self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
            self.core.isolate(now, events);
        }

        /// Closes the breaker: clears the trip window and the break growth. The learned baselines
        /// stay (they measure the dependency, not a verdict on it).
        pub fn reset(&self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
            self.core.reset(now, events);
        }

        /// When a timed transition is due (break end, probe reclaim, ramp end), if any.
        #[must_use]
        pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
            self.core.poll_timeout(now)
        }

        /// Realises the transitions due at `now` and emits their events. Calling it early, or
        /// twice, does nothing.
        pub fn handle_timeout(&self, now: Instant, events: &mut impl FnMut(Event<'_>)) {
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
    fn a_fresh_breaker_is_closed_in_period_zero() {
        let b = Breaker::new(BreakerSettings::defaults("x"));
        assert_eq!(b.control_word(), rules::Control::new().pack());
    }
}
