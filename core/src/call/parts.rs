//! What a call passes through: its [`Parts`], composed in one fixed order.

use crate::error::{RefusalReason, Refused};
use crate::event::Event;
use crate::name::Name;
use crate::outcome::Outcome;
use crate::part::{
    AdaptiveSlots, Admission, BulkheadSlots, Funding, HedgeSuppressed, Learned, Limit, Never,
    Permit, Saturation,
};
use crate::time::{Duration, Instant};

/// The parts one call passes through, each an `Option` (a part that is `None`, or whose type
/// is [`Never`], is not there). The call's events carry the breaker's name, or without one
/// the parts' own [`name`](Parts::named).
///
/// Every attempt is admitted through them in one fixed order: the local limits first (they are
/// self-imposed throttles: the published quota, then the rate limiter, then the bulkhead, then
/// the adaptive limiter), then the breaker. A rate limiter or quota asks the parts behind it
/// whether they would admit before it spends a cell, so a call the breaker refuses spends none;
/// a bulkhead or adaptive slot taken for an attempt the breaker then refuses is given back. A
/// refusal by a local limit is retried by the driver as a self-imposed throttle (see
/// [`Call::poll`](crate::Call::poll)). The outcome goes to the breaker (its latency held from
/// learning when the saturation signal says the caller's own runtime was starved meanwhile),
/// then to the adaptive limiter, then frees the bulkhead slot; the budget funds retries and
/// learns from every outcome.
///
/// Parts may be held by value (a firmware's, a test's) or by reference (an adapter's shared
/// parts): a reference to a part is the part. The builder methods add a part that is there; a
/// part known only at run time is an `Option` field set directly (the fields are public).
///
/// ```
/// use stormguard_core::{Breaker, Budget, BudgetSettings, Call, CallSettings, Instant, Outcome};
/// use stormguard_core::{Parts, Step, limits::Bulkhead};
///
/// let breaker = Breaker::of(5, "payments")?;
/// let budget = Budget::new(BudgetSettings::defaults("payments"));
/// let bulkhead = Bulkhead::of(1, "payments")?;
/// let parts = Parts::new().breaker(&breaker).budget(&budget).bulkhead(&bulkhead);
/// let now = Instant::from_secs(1);
/// let mut call = Call::begin(&CallSettings::DEFAULT, now);
/// let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
/// assert_eq!(bulkhead.in_flight(), 1); // the attempt holds its slot...
/// call.complete(&parts, permit, now, Outcome::Success, &mut |_| {});
/// assert_eq!(bulkhead.in_flight(), 0); // ...until its outcome
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Parts<B = Never, F = Never, L = Never, Q = Never, K = Never, D = Never, S = Never> {
    /// The name the call's events carry when there is no breaker (`"call"` when none is
    /// given).
    pub name: Option<Name>,
    /// Asked before every attempt, told every outcome.
    pub breaker: Option<B>,
    /// Asked before every retry, told every outcome.
    pub budget: Option<F>,
    /// A rate limiter: one cell per attempt.
    pub limiter: Option<L>,
    /// The quota the dependency published: one unit per attempt.
    pub quota: Option<Q>,
    /// A limit on attempts in flight.
    pub bulkhead: Option<K>,
    /// An adaptive limit on attempts in flight.
    pub adaptive: Option<D>,
    /// The caller's own saturation (a [`SaturationSignal`](crate::limits::saturation::SaturationSignal)):
    /// an attempt that ran while it held teaches the breaker no latency.
    pub saturation: Option<S>,
}

impl Parts {
    /// No part yet: every attempt is admitted and every retry funded.
    #[must_use]
    pub const fn new() -> Self {
        Parts {
            name: None,
            breaker: None,
            budget: None,
            limiter: None,
            quota: None,
            bulkhead: None,
            adaptive: None,
            saturation: None,
        }
    }
}

impl Default for Parts {
    fn default() -> Self {
        Parts::new()
    }
}

impl<B, F, L, Q, K, D, S> Parts<B, F, L, Q, K, D, S> {
    /// Named `name` for the events of a call without a breaker (with one, they carry the
    /// breaker's).
    #[must_use]
    pub fn named(self, name: impl Into<Name>) -> Self {
        Parts {
            name: Some(name.into()),
            ..self
        }
    }

    /// With `breaker`.
    #[must_use]
    pub fn breaker<B2>(self, breaker: B2) -> Parts<B2, F, L, Q, K, D, S> {
        Parts {
            name: self.name,
            breaker: Some(breaker),
            budget: self.budget,
            limiter: self.limiter,
            quota: self.quota,
            bulkhead: self.bulkhead,
            adaptive: self.adaptive,
            saturation: self.saturation,
        }
    }

    /// With `budget`.
    #[must_use]
    pub fn budget<F2>(self, budget: F2) -> Parts<B, F2, L, Q, K, D, S> {
        Parts {
            name: self.name,
            breaker: self.breaker,
            budget: Some(budget),
            limiter: self.limiter,
            quota: self.quota,
            bulkhead: self.bulkhead,
            adaptive: self.adaptive,
            saturation: self.saturation,
        }
    }

    /// With a rate `limiter`.
    #[must_use]
    pub fn limiter<L2>(self, limiter: L2) -> Parts<B, F, L2, Q, K, D, S> {
        Parts {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: Some(limiter),
            quota: self.quota,
            bulkhead: self.bulkhead,
            adaptive: self.adaptive,
            saturation: self.saturation,
        }
    }

    /// With a published `quota`.
    #[must_use]
    pub fn quota<Q2>(self, quota: Q2) -> Parts<B, F, L, Q2, K, D, S> {
        Parts {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            quota: Some(quota),
            bulkhead: self.bulkhead,
            adaptive: self.adaptive,
            saturation: self.saturation,
        }
    }

    /// With a `bulkhead`.
    #[must_use]
    pub fn bulkhead<K2>(self, bulkhead: K2) -> Parts<B, F, L, Q, K2, D, S> {
        Parts {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            quota: self.quota,
            bulkhead: Some(bulkhead),
            adaptive: self.adaptive,
            saturation: self.saturation,
        }
    }

    /// With an `adaptive` concurrency limiter.
    #[must_use]
    pub fn adaptive<D2>(self, adaptive: D2) -> Parts<B, F, L, Q, K, D2, S> {
        Parts {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            quota: self.quota,
            bulkhead: self.bulkhead,
            adaptive: Some(adaptive),
            saturation: self.saturation,
        }
    }

    /// With the caller's `saturation` signal.
    #[must_use]
    pub fn saturation<S2>(self, saturation: S2) -> Parts<B, F, L, Q, K, D, S2> {
        Parts {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            quota: self.quota,
            bulkhead: self.bulkhead,
            adaptive: self.adaptive,
            saturation: Some(saturation),
        }
    }
}

/// What the events of a call with neither a breaker nor a name carry.
const UNNAMED: Name = Name::new("call");

mod sealed {
    pub trait Gate {}
}

/// How the call driver reaches a call's [`Parts`]: implemented by every `Parts` whose parts
/// implement their traits ([`crate::part`]). Sealed, and with no method a caller uses: it only
/// lets [`Call`](crate::Call) take any `Parts` through one bound.
pub trait Gate: sealed::Gate {
    #[doc(hidden)]
    fn name(&self) -> &Name;
    #[doc(hidden)]
    fn try_acquire(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused>;
    #[doc(hidden)]
    fn check(&self, now: Instant) -> Result<(), Refused>;
    #[doc(hidden)]
    fn on_outcome(
        &self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    );
    /// Gives back a permit whose attempt never reached an outcome (an adapter's drop guard:
    /// the call's future was dropped mid-attempt): the breaker's probe slot and the local
    /// limits' slots go back, so none leaks.
    fn release(&self, permit: Permit);
    #[doc(hidden)]
    fn learned(&self, now: Instant, ask: Learned) -> Result<Duration, HedgeSuppressed>;
    #[doc(hidden)]
    fn self_limits(&self) -> bool;
    #[doc(hidden)]
    fn try_fund_retry(&self, now: Instant) -> Result<(), Refused>;
    #[doc(hidden)]
    fn refund_retry(&self, now: Instant);
    #[doc(hidden)]
    fn budget_outcome(&self, now: Instant, outcome: Outcome);
    #[doc(hidden)]
    fn check_shed(&self, now: Instant) -> Result<(), Refused>;
}

impl<B, F, L, Q, K, D, S> sealed::Gate for Parts<B, F, L, Q, K, D, S> {}

/// A local limit's place in the order: `limit` is asked for a cell only once the parts behind
/// it (`inner`) would admit, so a call they refuse spends none.
#[inline(always)]
fn limited<X: Limit>(
    limit: &Option<X>,
    now: Instant,
    check_inner: impl FnOnce() -> Result<(), Refused>,
    admit_inner: impl FnOnce() -> Result<Permit, Refused>,
    release_inner: impl FnOnce(Permit),
) -> Result<Permit, Refused> {
    let Some(limit) = limit else {
        // No limit: the parts behind alone. (Asking them first would put their refusal
        // before that of a bulkhead behind this limit.)
        return admit_inner();
    };
    if let Err(refused) = check_inner() {
        if refused.reason != RefusalReason::RampShedding {
            return Err(refused);
        }
        // A recovery ramp sheds on a running credit that only asking moves on: a check alone
        // would shed every call until the ramp's end. The shed call spends no cell.
        let permit = admit_inner()?;
        return match limit.take(now) {
            Ok(()) => Ok(permit),
            Err(limited) => {
                release_inner(permit);
                Err(limited)
            }
        };
    }
    limit.take(now)?;
    admit_inner()
}

impl<B, F, L, Q, K, D, S> Parts<B, F, L, Q, K, D, S>
where
    B: Admission,
    K: BulkheadSlots,
    D: AdaptiveSlots,
    L: Limit,
{
    /// The bulkhead, the adaptive limiter and the breaker, in that order.
    #[inline(always)]
    fn admit_inner(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        if let Some(b) = &self.bulkhead {
            b.try_enter(now)?;
        }
        if let Some(a) = &self.adaptive {
            if let Err(refused) = a.try_acquire(now) {
                self.leave();
                return Err(refused);
            }
        }
        let admitted = match &self.breaker {
            Some(b) => b.try_acquire(now, attempt_timeout, events),
            None => Ok(Permit::unguarded(now)),
        };
        if admitted.is_err() {
            if let Some(a) = &self.adaptive {
                a.release();
            }
            self.leave();
        }
        admitted
    }

    #[inline(always)]
    fn check_inner(&self, now: Instant) -> Result<(), Refused> {
        if let Some(b) = &self.bulkhead {
            b.check()?;
        }
        if let Some(a) = &self.adaptive {
            a.check()?;
        }
        match &self.breaker {
            Some(b) => b.check(now),
            None => Ok(()),
        }
    }

    #[inline(always)]
    fn release_inner(&self, permit: Permit) {
        if let Some(b) = &self.breaker {
            b.release(permit);
        }
        if let Some(a) = &self.adaptive {
            a.release();
        }
        self.leave();
    }

    /// Frees the attempt's bulkhead slot, if the call has a bulkhead.
    #[inline(always)]
    fn leave(&self) {
        if let Some(b) = &self.bulkhead {
            let _ = b.leave();
        }
    }

    /// The rate limiter and the parts behind it.
    #[inline(always)]
    fn admit_limited(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        limited(
            &self.limiter,
            now,
            || self.check_inner(now),
            || self.admit_inner(now, attempt_timeout, events),
            |p| self.release_inner(p),
        )
    }

    #[inline(always)]
    fn check_limited(&self, now: Instant) -> Result<(), Refused> {
        self.check_inner(now)?;
        match &self.limiter {
            Some(l) => l.peek(now),
            None => Ok(()),
        }
    }
}

impl<B, F, L, Q, K, D, S> Gate for Parts<B, F, L, Q, K, D, S>
where
    B: Admission,
    F: Funding,
    L: Limit,
    Q: Limit,
    K: BulkheadSlots,
    D: AdaptiveSlots,
    S: Saturation,
{
    #[inline(always)]
    fn name(&self) -> &Name {
        match (&self.breaker, &self.name) {
            (Some(b), _) => b.name(),
            (None, Some(name)) => name,
            (None, None) => &UNNAMED,
        }
    }

    #[inline(always)]
    fn try_acquire(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        limited(
            &self.quota,
            now,
            || self.check_limited(now),
            || self.admit_limited(now, attempt_timeout, events),
            |p| self.release_inner(p),
        )
    }

    #[inline(always)]
    fn check(&self, now: Instant) -> Result<(), Refused> {
        self.check_limited(now)?;
        match &self.quota {
            Some(q) => q.peek(now),
            None => Ok(()),
        }
    }

    #[inline(always)]
    fn on_outcome(
        &self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        let adaptive_latency = self.adaptive.as_ref().map(|_| permit.latency(now));
        if let Some(b) = &self.breaker {
            // A breaker that learns no latency has nothing to hold back.
            let starved = B::LEARNS
                && self
                    .saturation
                    .as_ref()
                    .is_some_and(|s| s.holds(now.saturating_sub(permit.latency(now)), now));
            let permit = if starved {
                permit.hold_learning()
            } else {
                permit
            };
            b.on_outcome(now, permit, outcome, events);
        }
        if let Some(a) = &self.adaptive {
            match outcome {
                Outcome::Cancelled => a.release(),
                Outcome::Success => a.complete(now, adaptive_latency),
                _ => a.complete(now, None),
            }
        }
        self.leave();
    }

    #[inline(always)]
    fn release(&self, permit: Permit) {
        self.release_inner(permit);
    }

    #[inline(always)]
    fn learned(&self, now: Instant, ask: Learned) -> Result<Duration, HedgeSuppressed> {
        match &self.breaker {
            Some(b) if B::LEARNS => b.learned(now, ask),
            _ => match ask {
                Learned::Censored { ran_past, .. } => Ok(ran_past),
                _ => Err(HedgeSuppressed::NoBaseline),
            },
        }
    }

    #[inline(always)]
    fn self_limits(&self) -> bool {
        // A part whose type is `Never` is never there: the compiler leaves out the
        // self-throttle code of a call that has none of these.
        self.limiter.is_some()
            || self.quota.is_some()
            || self.bulkhead.is_some()
            || self.adaptive.is_some()
    }

    #[inline(always)]
    fn try_fund_retry(&self, now: Instant) -> Result<(), Refused> {
        match &self.budget {
            Some(f) => f.try_fund_retry(now),
            None => Ok(()),
        }
    }

    #[inline(always)]
    fn refund_retry(&self, now: Instant) {
        if let Some(f) = &self.budget {
            f.refund_retry(now);
        }
    }

    #[inline(always)]
    fn budget_outcome(&self, now: Instant, outcome: Outcome) {
        if let Some(f) = &self.budget {
            f.on_outcome(now, outcome);
        }
    }

    #[inline(always)]
    fn check_shed(&self, now: Instant) -> Result<(), Refused> {
        match &self.budget {
            Some(f) => f.check_shed(now),
            None => Ok(()),
        }
    }
}
