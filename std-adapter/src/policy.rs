//! `policy.call(|attempt| async { ... }).await`: the core's call driver, run on tokio.
//!
//! The loop is the one in the design (DESIGN.md, "The core is sans-IO"): ask the core's
//! [`Call`] what to do next, do it, report back. Every decision (admit, retry, wait how long,
//! refuse, give up) is the core's; this module reads the clock (twice per attempt: before and
//! after), runs the operation against its attempt deadline, sleeps cancellably and forwards
//! events.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use stormguard_core::{
    breaker::HedgeSuppressed, call::Admission, call::CallSettingsBuilder, call::Unguarded,
    limits::BulkheadPermit, limits::BulkheadSettings, limits::BulkheadSlots,
    limits::BulkheadSnapshot, limits::Bulkheaded, limits::Limit, limits::RateLimitSettings,
    limits::RateLimited, limits::SharedBulkhead, limits::SharedRateLimiter,
    limits::SharedWindowLimiter, limits::WindowLimitSettings, policy::Explain, Backoff, Bound,
    BreakerSettings, BudgetSettings, Call, CallError, CallSettings, Duration, Event, Field,
    Finished, Instant, Name, Outcome, Parts, Permit, Refused, SettingsError, SharedBreaker,
    SharedBudget, Step,
};

use crate::classify::{Classify, EveryErrorTransient};
use crate::clock::{default_clock, Clock, DefaultClock, SteadyClock};
use crate::events::{self, Ended, Listener, NoListener};
use crate::{entropy_seed, Breaker, Budget};

#[cfg(feature = "tokio")]
use tokio_util::sync::CancellationToken;

/// What one call may add to its policy: a classifier, a cancellation token, a tighter
/// deadline. Built from [`CallOptions::new`] (every `Err` transient, no token, the policy's
/// deadline) and passed to [`Policy::call_with`] or [`Policy::call_blocking_with`].
///
/// ```
/// use stormguard_std::Outcome;
/// use stormguard_std::CallOptions;
/// use tokio_util::sync::CancellationToken;
///
/// let shutdown = CancellationToken::new();
/// let options = CallOptions::new()
///     .classify(|r: &Result<u16, std::io::Error>| match r {
///         Ok(_) => Outcome::Success,
///         Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Outcome::Permanent,
///         Err(_) => Outcome::Transient,
///     })
///     .cancel_on(&shutdown)
///     .within(std::time::Duration::from_millis(500));
/// # let _ = options;
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
pub struct CallOptions<'a, C = EveryErrorTransient> {
    classify: C,
    #[cfg(feature = "tokio")]
    cancel: Option<&'a CancellationToken>,
    #[cfg(not(feature = "tokio"))]
    cancel: Option<std::marker::PhantomData<&'a ()>>,
    deadline: Option<Instant>,
    within: Option<Duration>,
    single_attempt: bool,
}

impl CallOptions<'_> {
    /// Every `Err` transient, no cancellation token (dropping the call's future still cancels
    /// it), the policy's deadline.
    pub const fn new() -> Self {
        CallOptions {
            classify: EveryErrorTransient,
            cancel: None,
            deadline: None,
            within: None,
            single_attempt: false,
        }
    }
}

/// [`CallOptions::new`], as a constant `policy.call` can lend.
#[cfg(feature = "tokio")]
const DEFAULT_OPTIONS: CallOptions<'static> = CallOptions::new();

impl<C> CallOptions<'_, C> {
    /// Applies these options' deadline to a call begun at `now`, in place (a `Call` is some 170
    /// bytes).
    #[inline]
    pub(crate) fn tighten(&self, call: &mut Call, now: Instant) {
        if let Some(at) = self.deadline {
            call.tighten_deadline(at);
        }
        if let Some(d) = self.within {
            call.tighten_deadline(now.saturating_add(d));
        }
    }
}

impl Default for CallOptions<'_> {
    fn default() -> Self {
        CallOptions::new()
    }
}

impl<'a, C> CallOptions<'a, C> {
    /// Classifies each attempt's result with `classify` (a [`Classify`], e.g. a closure
    /// `|r: &Result<T, E>| -> Outcome`, or [`Http`](crate::Http)).
    ///
    /// ```
    /// use stormguard_std::Outcome;
    /// let o = stormguard_std::CallOptions::new().classify(|_: &Result<(), ()>| Outcome::Success);
    /// # let _ = o;
    /// ```
    pub fn classify<C2>(self, classify: C2) -> CallOptions<'a, C2> {
        CallOptions {
            classify,
            cancel: self.cancel,
            deadline: self.deadline,
            within: self.within,
            single_attempt: self.single_attempt,
        }
    }

    /// Cancels the call when `token` is cancelled: an attempt in flight is dropped and reported
    /// as [`Outcome::Cancelled`] (never counted against the dependency, never retried), and a
    /// backoff wait or the rejection pause ends at once. The token is checked before every
    /// attempt, so a call whose token is already cancelled runs nothing (no attempt, nothing
    /// told to the breaker). The call returns [`CallError::Cancelled`]. (The token's own API
    /// takes its internal mutex; a call without a token takes no lock.)
    ///
    /// ```
    /// let token = tokio_util::sync::CancellationToken::new();
    /// let o = stormguard_std::CallOptions::new().cancel_on(&token);
    /// # let _ = o;
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn cancel_on(mut self, token: &'a CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Ends the call by `at` at the latest (an instant of the policy's clock, e.g. a deadline
    /// propagated from the caller); a later one than the policy's own deadline changes nothing.
    ///
    /// ```
    /// use stormguard_std::{Clock, TokioClock};
    /// let at = TokioClock::global().now() + stormguard_std::Duration::from_secs(2);
    /// let o = stormguard_std::CallOptions::new().deadline(at);
    /// # let _ = o;
    /// ```
    pub fn deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(at);
        self
    }

    /// Ends the call within `d` of its start at the latest (a later end than the policy's own
    /// deadline changes nothing).
    ///
    /// ```
    /// let o = stormguard_std::CallOptions::new().within(std::time::Duration::from_millis(250));
    /// # let _ = o;
    /// ```
    pub fn within(mut self, d: impl Into<Duration>) -> Self {
        self.within = Some(d.into());
        self
    }

    /// Makes at most one attempt (the operation cannot be repeated safely, e.g. a request that
    /// is not idempotent): the policy's deadline, attempt timeout and breaker still apply.
    ///
    /// ```
    /// let o = stormguard_std::CallOptions::new().single_attempt();
    /// # let _ = o;
    /// ```
    pub fn single_attempt(mut self) -> Self {
        self.single_attempt = true;
        self
    }
}

/// The breaker side of a policy's calls: its shared breaker, or none.
pub(crate) enum Admit<'a> {
    Breaker(&'a SharedBreaker),
    Unguarded(Unguarded),
}

impl Admission for Admit<'_> {
    #[inline]
    fn name(&self) -> &Name {
        match self {
            Admit::Breaker(b) => b.name(),
            Admit::Unguarded(u) => Admission::name(u),
        }
    }
    #[inline]
    fn try_acquire(
        &mut self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        match self {
            Admit::Breaker(b) => b.try_acquire(now, attempt_timeout, &mut |e| events(e)),
            Admit::Unguarded(u) => u.try_acquire(now, attempt_timeout, events),
        }
    }
    #[inline]
    fn check(&self, now: Instant) -> Result<(), Refused> {
        match self {
            Admit::Breaker(b) => b.check(now),
            Admit::Unguarded(u) => u.check(now),
        }
    }
    #[inline]
    fn on_outcome(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        match self {
            Admit::Breaker(b) => b.on_outcome(now, permit, outcome, &mut |e| events(e)),
            Admit::Unguarded(u) => Admission::on_outcome(u, now, permit, outcome, events),
        }
    }
    #[inline]
    fn release(&mut self, permit: Permit) {
        match self {
            Admit::Breaker(b) => b.release(permit),
            Admit::Unguarded(u) => u.release(permit),
        }
    }
    #[inline]
    fn normal_latency(&self, now: Instant) -> Option<Duration> {
        match self {
            Admit::Breaker(b) => b.normal_latency(now),
            Admit::Unguarded(u) => u.normal_latency(now),
        }
    }
    #[inline]
    fn attempt_ceiling(&self, now: Instant) -> Option<Duration> {
        match self {
            Admit::Breaker(b) => b.attempt_ceiling(now),
            Admit::Unguarded(u) => u.attempt_ceiling(now),
        }
    }
    #[inline]
    fn slow_threshold(&self, now: Instant) -> Option<Duration> {
        match self {
            Admit::Breaker(b) => b.slow_threshold(now),
            Admit::Unguarded(u) => u.slow_threshold(now),
        }
    }
    #[inline]
    fn hedge_after(&self, now: Instant) -> Result<Duration, HedgeSuppressed> {
        match self {
            Admit::Breaker(b) => b.hedge_after(now),
            Admit::Unguarded(u) => u.hedge_after(now),
        }
    }
}

/// The budget side of a policy's calls: its shared budget, or none (the core's `Option`).
pub(crate) type Funds<'a> = Option<&'a SharedBudget>;

/// A rate limiter a policy puts in front of its breaker (see [`PolicyBuilder::rate_limit`]):
/// the core's lock-free [`SharedRateLimiter`] (GCRA) or [`SharedWindowLimiter`] (a window with
/// a cooldown) in an `Arc`, so clones, and every policy given one, share its cells.
///
/// ```
/// use stormguard_core::{Instant, limits::RateLimitSettings, limits::WindowLimitSettings};
/// use stormguard_std::Limiter;
///
/// let api = Limiter::gcra(RateLimitSettings::per_second("api", 100)?);
/// let stream = Limiter::window(WindowLimitSettings::defaults("stream")); // 50 a minute
/// assert_eq!(api.name().as_str(), "api");
/// assert_eq!(stream.available_at(Instant::from_secs(1)), 50);
/// # Ok::<(), stormguard_std::SettingsError>(())
/// ```
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<LimiterForm>,
}

enum LimiterForm {
    Gcra(SharedRateLimiter),
    Window(SharedWindowLimiter),
}

impl Limiter {
    /// A GCRA limiter with `settings`, full at start.
    pub fn gcra(settings: RateLimitSettings) -> Limiter {
        Limiter::from_gcra(SharedRateLimiter::new(settings))
    }

    /// A window-with-cooldown limiter with `settings`, empty at start.
    pub fn window(settings: WindowLimitSettings) -> Limiter {
        Limiter::from_window(SharedWindowLimiter::new(settings))
    }

    /// Takes ownership of a shared GCRA limiter.
    pub fn from_gcra(limiter: SharedRateLimiter) -> Limiter {
        Limiter {
            inner: Arc::new(LimiterForm::Gcra(limiter)),
        }
    }

    /// Takes ownership of a shared window limiter.
    pub fn from_window(limiter: SharedWindowLimiter) -> Limiter {
        Limiter {
            inner: Arc::new(LimiterForm::Window(limiter)),
        }
    }

    /// The limiter's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        match &*self.inner {
            LimiterForm::Gcra(l) => l.name(),
            LimiterForm::Window(l) => l.name(),
        }
    }

    /// Cells that could be taken at `now` (an instant of the policy's clock). Changes nothing.
    #[must_use]
    pub fn available_at(&self, now: Instant) -> u32 {
        match &*self.inner {
            LimiterForm::Gcra(l) => l.available(now),
            LimiterForm::Window(l) => l.available(now),
        }
    }

    /// The shared GCRA limiter, if this is one.
    #[must_use]
    pub fn as_gcra(&self) -> Option<&SharedRateLimiter> {
        match &*self.inner {
            LimiterForm::Gcra(l) => Some(l),
            LimiterForm::Window(_) => None,
        }
    }

    /// The shared window limiter, if this is one.
    #[must_use]
    pub fn as_window(&self) -> Option<&SharedWindowLimiter> {
        match &*self.inner {
            LimiterForm::Window(l) => Some(l),
            LimiterForm::Gcra(_) => None,
        }
    }

    /// `true` when both handles share one limiter.
    #[must_use]
    pub fn same_as(&self, other: &Limiter) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn cells(&self) -> Cells<'_> {
        match &*self.inner {
            LimiterForm::Gcra(l) => Cells::Gcra(l),
            LimiterForm::Window(l) => Cells::Window(l),
        }
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let form = match &*self.inner {
            LimiterForm::Gcra(_) => "gcra",
            LimiterForm::Window(_) => "window",
        };
        f.debug_struct("Limiter")
            .field("name", &self.name().as_str())
            .field("form", &form)
            .finish()
    }
}

/// A limiter's cells, as the core's [`RateLimited`] takes them: one per attempt.
#[derive(Clone, Copy)]
pub(crate) enum Cells<'a> {
    Gcra(&'a SharedRateLimiter),
    Window(&'a SharedWindowLimiter),
}

impl Limit for Cells<'_> {
    #[inline]
    fn take(&mut self, now: Instant) -> Result<(), Refused> {
        match self {
            Cells::Gcra(l) => Limit::take(l, now),
            Cells::Window(l) => Limit::take(l, now),
        }
    }
    #[inline]
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        match self {
            Cells::Gcra(l) => Limit::peek(l, now),
            Cells::Window(l) => Limit::peek(l, now),
        }
    }
}

/// A bulkhead a policy puts in front of its breaker (see [`PolicyBuilder::bulkhead`]): the
/// core's lock-free [`SharedBulkhead`] in an `Arc`, so clones, and every policy given one,
/// share its slots; with the wake-up that callers waiting for a slot sleep on.
///
/// Every attempt (a retry, a hedge) holds a slot while it runs, none during backoff waits. With
/// a bounded wait in the settings, an async call that finds the bulkhead full waits for a slot
/// before its first attempt (see [`PolicyBuilder::bulkhead`]).
///
/// ```
/// use stormguard_core::{limits::BulkheadSettings, Duration};
/// use stormguard_std::Bulkhead;
///
/// let db = Bulkhead::new(
///     BulkheadSettings::builder("db")
///         .max_in_flight(8)
///         .bounded_wait(16, Duration::from_millis(250))
///         .build()?,
/// );
/// assert_eq!((db.in_flight(), db.queued()), (0, 0));
/// assert_eq!(db.settings().max_queue(), 16);
/// # Ok::<(), stormguard_std::SettingsError>(())
/// ```
#[derive(Clone)]
pub struct Bulkhead {
    inner: Arc<BulkheadShared>,
}

pub(crate) struct BulkheadShared {
    slots: SharedBulkhead,
    /// Woken (one waiter) whenever a slot is freed while callers wait. Touched only when the
    /// core says someone waits, so a bulkhead nobody waits on never takes its lock.
    #[cfg(feature = "tokio")]
    freed: tokio::sync::Notify,
}

impl BulkheadShared {
    /// The core's bulkhead.
    #[cfg(feature = "tokio")]
    #[inline]
    pub(crate) fn slots(&self) -> &SharedBulkhead {
        &self.slots
    }

    /// The wake-up waiting callers sleep on.
    #[cfg(feature = "tokio")]
    pub(crate) fn freed(&self) -> &tokio::sync::Notify {
        &self.freed
    }

    /// Whether callers may wait for a slot (a bounded wait is configured).
    #[cfg(feature = "tokio")]
    #[inline]
    pub(crate) fn waits(&self) -> bool {
        self.slots.settings().max_queue() > 0
    }

    /// Frees a slot and wakes one waiter if the core says callers wait.
    #[inline]
    fn leave(&self, permit: BulkheadPermit) -> bool {
        let waiting = self.slots.leave(permit);
        #[cfg(feature = "tokio")]
        if waiting {
            self.freed.notify_one();
        }
        waiting
    }
}

impl Bulkhead {
    /// An empty bulkhead with validated `settings`.
    pub fn new(settings: BulkheadSettings) -> Bulkhead {
        Bulkhead {
            inner: Arc::new(BulkheadShared {
                slots: SharedBulkhead::new(settings),
                #[cfg(feature = "tokio")]
                freed: tokio::sync::Notify::new(),
            }),
        }
    }

    /// A bulkhead called `name` admitting `max_in_flight` calls at once, with no waiting.
    ///
    /// ```
    /// let b = stormguard_std::Bulkhead::of(4, "db")?;
    /// assert_eq!(b.settings().max_in_flight(), 4);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn of(max_in_flight: u32, name: &'static str) -> Result<Bulkhead, SettingsError> {
        BulkheadSettings::builder(name)
            .max_in_flight(max_in_flight)
            .build()
            .map(Bulkhead::new)
    }

    /// The core's shared bulkhead (to read it, or enter it outside a policy: a slot taken here
    /// must be handed back with [`Bulkhead::leave`], which wakes a waiting caller).
    #[must_use]
    pub fn shared(&self) -> &SharedBulkhead {
        &self.inner.slots
    }

    /// Hands back a slot taken through [`Bulkhead::shared`], waking one waiting caller if any.
    pub fn leave(&self, permit: BulkheadPermit) {
        let _ = self.inner.leave(permit);
    }

    /// The bulkhead's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        self.inner.slots.name()
    }

    /// The settings it was built with.
    #[must_use]
    pub fn settings(&self) -> &BulkheadSettings {
        self.inner.slots.settings()
    }

    /// Calls (attempts) in flight now.
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        self.inner.slots.in_flight()
    }

    /// Callers waiting for a slot now.
    #[must_use]
    pub fn queued(&self) -> u32 {
        self.inner.slots.queued()
    }

    /// Counts and limits, read from one word.
    #[must_use]
    pub fn snapshot(&self) -> BulkheadSnapshot {
        self.inner.slots.snapshot()
    }

    /// `true` when both handles share one bulkhead.
    #[must_use]
    pub fn same_as(&self, other: &Bulkhead) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for Bulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bulkhead")
            .field("name", &self.name().as_str())
            .field("in_flight", &self.in_flight())
            .field("queued", &self.queued())
            .finish()
    }
}

/// A bulkhead's slots as the core's [`Bulkheaded`] takes them, holding the slot a caller won
/// by waiting until its first attempt takes it, and waking a waiter whenever a slot is freed.
pub(crate) struct Slots<'a> {
    bulkhead: &'a BulkheadShared,
    held: Option<BulkheadPermit>,
}

impl BulkheadSlots for Slots<'_> {
    #[inline]
    fn try_enter(&mut self, now: Instant) -> Result<BulkheadPermit, Refused> {
        match self.held.take() {
            Some(permit) => Ok(permit),
            None => self.bulkhead.slots.try_enter(now),
        }
    }
    #[inline]
    fn leave(&mut self, permit: BulkheadPermit) -> bool {
        self.bulkhead.leave(permit)
    }
    #[inline]
    fn check(&self) -> Result<(), Refused> {
        match self.held {
            Some(_) => Ok(()),
            None => self.bulkhead.slots.check(),
        }
    }
}

impl Drop for Slots<'_> {
    fn drop(&mut self) {
        // A slot won by waiting that no attempt took (the call was refused or cancelled first).
        if let Some(permit) = self.held.take() {
            let _ = self.bulkhead.leave(permit);
        }
    }
}

/// A policy's optional steps, borrowed for one call: what its admission is built from.
#[derive(Clone, Copy)]
pub(crate) struct Steps<'a> {
    name: &'a Name,
    breaker: Option<&'a SharedBreaker>,
    limiter: Option<Cells<'a>>,
    bulkhead: Option<&'a BulkheadShared>,
}

impl<'a> Steps<'a> {
    /// The breaker alone (or none).
    #[inline]
    pub(crate) fn admit(self) -> Admit<'a> {
        match self.breaker {
            Some(b) => Admit::Breaker(b),
            None => Admit::Unguarded(Unguarded(*self.name)),
        }
    }

    /// The admission of one call: the breaker (or none), behind the bulkhead, behind the rate
    /// limiter, as the core composes them. `held` is a slot the call already won by waiting.
    #[inline]
    fn front(self, held: Option<BulkheadPermit>) -> Front<'a> {
        let admit = self.admit();
        match (self.limiter, self.bulkhead) {
            (None, None) => Front::Plain(admit),
            (Some(cells), None) => Front::Limited(RateLimited::new(admit, cells)),
            (None, Some(bulkhead)) => {
                Front::Bulkheaded(Bulkheaded::new(admit, Slots { bulkhead, held }))
            }
            (Some(cells), Some(bulkhead)) => Front::Both(RateLimited::new(
                Bulkheaded::new(admit, Slots { bulkhead, held }),
                cells,
            )),
        }
    }
}

/// The admission side of a call: the breaker with the optional steps in front of it. Each form
/// is the core's own composition ([`RateLimited`], [`Bulkheaded`]); this only picks one.
pub(crate) enum Front<'a> {
    Plain(Admit<'a>),
    Limited(RateLimited<Admit<'a>, Cells<'a>>),
    Bulkheaded(Bulkheaded<Admit<'a>, Slots<'a>>),
    Both(RateLimited<Bulkheaded<Admit<'a>, Slots<'a>>, Cells<'a>>),
}

macro_rules! each_front {
    ($self:expr, $a:ident => $body:expr) => {
        match $self {
            Front::Plain($a) => $body,
            Front::Limited($a) => $body,
            Front::Bulkheaded($a) => $body,
            Front::Both($a) => $body,
        }
    };
}

impl Admission for Front<'_> {
    #[inline]
    fn name(&self) -> &Name {
        each_front!(self, a => a.name())
    }
    #[inline]
    fn try_acquire(
        &mut self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        each_front!(self, a => a.try_acquire(now, attempt_timeout, events))
    }
    #[inline]
    fn check(&self, now: Instant) -> Result<(), Refused> {
        each_front!(self, a => a.check(now))
    }
    #[inline]
    fn on_outcome(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        each_front!(self, a => a.on_outcome(now, permit, outcome, events));
    }
    #[inline]
    fn release(&mut self, permit: Permit) {
        each_front!(self, a => a.release(permit));
    }
    #[inline]
    fn normal_latency(&self, now: Instant) -> Option<Duration> {
        each_front!(self, a => a.normal_latency(now))
    }
    #[inline]
    fn attempt_ceiling(&self, now: Instant) -> Option<Duration> {
        each_front!(self, a => a.attempt_ceiling(now))
    }
    #[inline]
    fn slow_threshold(&self, now: Instant) -> Option<Duration> {
        each_front!(self, a => a.slow_threshold(now))
    }
    #[inline]
    fn hedge_after(&self, now: Instant) -> Result<Duration, HedgeSuppressed> {
        each_front!(self, a => a.hedge_after(now))
    }
}

/// A call's admission, built from the policy's steps and a bulkhead slot the call already won
/// by waiting: the breaker alone ([`Admit`], for a policy with no step; it never holds a slot),
/// or with the steps in front ([`Front`]).
#[cfg(feature = "tokio")]
pub(crate) trait FromSteps<'a>: Admission {
    fn from_steps(steps: Steps<'a>, held: Option<BulkheadPermit>) -> Self;
}

#[cfg(feature = "tokio")]
impl<'a> FromSteps<'a> for Admit<'a> {
    #[inline]
    fn from_steps(steps: Steps<'a>, held: Option<BulkheadPermit>) -> Self {
        // Only a policy with a bulkhead waits for a slot, and it takes the other form.
        let _ = held;
        steps.admit()
    }
}

#[cfg(feature = "tokio")]
impl<'a> FromSteps<'a> for Front<'a> {
    #[inline]
    fn from_steps(steps: Steps<'a>, held: Option<BulkheadPermit>) -> Self {
        steps.front(held)
    }
}

/// Gives an attempt's permit back if the call is dropped before the attempt's outcome is
/// reported, so a half-open probe slot (and a bulkhead slot) never leaks. Small on purpose: it
/// lives in the call's future across every attempt.
pub(crate) struct PermitGuard<'a> {
    breaker: Option<&'a SharedBreaker>,
    bulkhead: Option<&'a BulkheadShared>,
    permit: Option<Permit>,
}

impl<'a> PermitGuard<'a> {
    #[inline]
    pub(crate) fn new(steps: Steps<'a>, permit: Permit) -> Self {
        PermitGuard {
            breaker: steps.breaker,
            bulkhead: steps.bulkhead,
            permit: Some(permit),
        }
    }

    /// The permit, to report its outcome with: the guard no longer releases it.
    #[inline]
    pub(crate) fn disarm(mut self) -> Option<Permit> {
        self.permit.take()
    }
}

impl Drop for PermitGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        // Released through the core's composition that admitted it (the rate limiter only
        // forwards a release): the breaker's probe slot and the bulkhead's slot go back.
        let mut admit = match self.breaker {
            Some(b) => Admit::Breaker(b),
            None => Admit::Unguarded(Unguarded(Name::new(""))),
        };
        match self.bulkhead {
            Some(bulkhead) => Bulkheaded::new(
                admit,
                Slots {
                    bulkhead,
                    held: None,
                },
            )
            .release(permit),
            None => admit.release(permit),
        }
    }
}

/// Reports the call to the listener when it ends, however it ends (a dropped call's future
/// reports [`Ended::Cancelled`]).
pub(crate) struct Report<'a, L: Listener> {
    listener: &'a L,
    name: &'a Name,
    pub(crate) attempts: u32,
    pub(crate) ended: Ended,
}

impl<'a, L: Listener> Report<'a, L> {
    #[inline]
    pub(crate) fn new(listener: &'a L, name: &'a Name) -> Self {
        Report {
            listener,
            name,
            attempts: 0,
            ended: Ended::Cancelled,
        }
    }

    #[inline]
    pub(crate) fn attempt(&mut self, attempt: u32) {
        self.attempts = attempt;
        self.listener.on_attempt(self.name, attempt);
    }

    /// Records how the call `finished` (the core's word: a 500 handed back as the response
    /// is a failed call, whatever the caller's `Result` holds) and hands `result` on.
    #[inline]
    pub(crate) fn end<T, E>(
        mut self,
        finished: Finished,
        result: Result<T, CallError<E>>,
    ) -> Result<T, CallError<E>> {
        self.ended = Ended::from(finished);
        result
    }
}

impl<L: Listener> Drop for Report<'_, L> {
    #[inline]
    fn drop(&mut self) {
        self.listener.on_call(self.name, self.attempts, self.ended);
    }
}

/// How a call ended, for the success cache: how the core finished it, and, when its value
/// came back from a successful attempt, the instant that attempt ended.
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CallEnd {
    pub(crate) finished: Option<Finished>,
    pub(crate) succeeded_at: Option<Instant>,
}

/// What an attempt knows when it starts.
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt {
    /// 1 for the first attempt.
    pub(crate) number: u32,
    /// The time left until the call's deadline, at the attempt's start.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) call_left: Option<Duration>,
}

enum Choice<T> {
    Default,
    Given(T),
    /// Built from settings handed to this policy's builder: they must carry the policy's name.
    Built(T),
    Off,
}

/// Builds a [`Policy`]: its name, breaker, budget, retries, deadline, attempt timeout,
/// backoff, clock and listener. Every value is validated by [`PolicyBuilder::build`].
///
/// By default a policy gets a breaker and a retry budget of its own with the defaults of the
/// design (5 consecutive failures, relative error rate and slow calls; a tenth of a retry per
/// success with a floor of 3 per second), 3 attempts, a 30 s deadline, a 10 s attempt timeout
/// and exponential backoff from 100 ms with full jitter seeded from the process's entropy.
///
/// ```
/// use std::time::Duration;
/// use stormguard_std::BreakerSettings;
/// use stormguard_std::{Breaker, Budget, Policy};
///
/// let breaker = Breaker::new(BreakerSettings::defaults("payments"));
/// let budget = Budget::defaults("payments-and-refunds"); // shared with another policy
/// let policy = Policy::builder("payments")
///     .breaker(breaker)
///     .budget(budget.clone())
///     .max_attempts(4)
///     .deadline(Duration::from_secs(2))
///     .attempt_timeout(Duration::from_millis(500))
///     .build()?;
/// assert_eq!(policy.settings().max_attempts(), 4);
/// # Ok::<(), stormguard_std::SettingsError>(())
/// ```
#[must_use]
pub struct PolicyBuilder<K = DefaultClock, L = NoListener> {
    name: Name,
    breaker: Choice<Breaker>,
    budget: Choice<Budget>,
    limiter: Option<Limiter>,
    bulkhead: Option<Bulkhead>,
    call: CallSettingsBuilder,
    clock: K,
    listener: L,
}

impl<K, L> PolicyBuilder<K, L> {
    /// Guards calls with `breaker` (shared with whoever else holds a clone).
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = Choice::Given(breaker);
        self
    }

    /// Guards calls with a new breaker built from `settings`, which must carry the policy's
    /// name: [`build`](PolicyBuilder::build) refuses other names ([`Field::BreakerName`],
    /// [`Bound::PolicyName`]) rather than report one dependency under two names. A shared
    /// [`Breaker`] handle given with [`breaker`](PolicyBuilder::breaker) keeps its own name.
    ///
    /// ```
    /// use stormguard_std::{Bound, BreakerSettings, Field};
    /// let p = stormguard_std::Policy::builder("db")
    ///     .breaker_settings(BreakerSettings::consecutive_only("db", 3)?)
    ///     .build()?;
    /// assert_eq!(p.breaker().unwrap().settings().consecutive_failures(), 3);
    /// let e = stormguard_std::Policy::builder("db")
    ///     .breaker_settings(BreakerSettings::consecutive_only("cache", 3)?)
    ///     .build()
    ///     .err()
    ///     .unwrap();
    /// assert_eq!((e.field, e.bound), (Field::BreakerName, Bound::PolicyName));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn breaker_settings(mut self, settings: BreakerSettings) -> Self {
        self.breaker = Choice::Built(Breaker::new(settings));
        self
    }

    /// No breaker: every attempt is admitted (the retry budget, attempts and deadline still
    /// bound the calls).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_breaker().build()?;
    /// assert!(p.breaker().is_none());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn no_breaker(mut self) -> Self {
        self.breaker = Choice::Off;
        self
    }

    /// Bounds retries with `budget` (asked before every retry, never before a first attempt).
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = Choice::Given(budget);
        self
    }

    /// Bounds retries with a new budget built from `settings`, which must carry the policy's
    /// name: [`build`](PolicyBuilder::build) refuses other names ([`Field::BudgetName`],
    /// [`Bound::PolicyName`]). A shared [`Budget`] handle given with
    /// [`budget`](PolicyBuilder::budget) keeps its own name.
    ///
    /// ```
    /// use stormguard_std::BudgetSettings;
    /// let p = stormguard_std::Policy::builder("db")
    ///     .budget_settings(BudgetSettings::builder("db").floor_per_second(1.0).build()?)
    ///     .build()?;
    /// assert_eq!(p.budget().unwrap().settings().capacity(), 10);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn budget_settings(mut self, settings: BudgetSettings) -> Self {
        self.budget = Choice::Built(Budget::new(settings));
        self
    }

    /// No retry budget: retries are bounded by the attempts and the deadline only.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_budget().build()?;
    /// assert!(p.budget().is_none());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn no_budget(mut self) -> Self {
        self.budget = Choice::Off;
        self
    }

    /// Puts a rate limiter in front of the breaker (default: none): every attempt, retries and
    /// hedges included, takes a cell. A refusal is a self-imposed throttle: with attempts left
    /// the call waits until the next cell and tries again (using one of its attempts, charging
    /// nothing to the budget); when no retry fits it is a guarded rejection like any other:
    /// [`CallError::Rejected`] with [`RefusalReason::RateLimited`](stormguard_core::RefusalReason)
    /// and, as `retry_after`, the time until the next cell (counted from the end of the pause).
    /// The breaker is asked first, so an open breaker spends no cells. Composed by the core's
    /// [`RateLimited`].
    ///
    /// ```
    /// use stormguard_core::{limits::RateLimitSettings, RefusalReason};
    /// use stormguard_std::{CallError, Limiter, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = Policy::builder("search")
    ///     .max_attempts(1)
    ///     .rate_limit(Limiter::gcra(RateLimitSettings::per_second("search", 1)?))
    ///     .build()?;
    /// assert_eq!(policy.call(|_| async { Ok::<_, ()>(1) }).await, Ok(1));
    /// let Err(CallError::Rejected { rejection, .. }) =
    ///     policy.call(|_| async { Ok::<_, ()>(2) }).await else { panic!() };
    /// assert_eq!(rejection.reason, RefusalReason::RateLimited);
    /// assert_eq!(rejection.retry_after, stormguard_std::Duration::from_millis(900));
    /// # Ok(()) }
    /// ```
    pub fn rate_limit(mut self, limiter: Limiter) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// Puts a bulkhead in front of the breaker (default: none): each attempt holds a slot while
    /// it runs (a hedge takes one too), none during backoff waits. A full bulkhead refuses the
    /// attempt; with attempts left the call retries it on the throttled curve, and when no
    /// retry fits it is a guarded rejection ([`RefusalReason::BulkheadFull`](stormguard_core::RefusalReason),
    /// `retry_after` zero: a slot frees whenever a call ends). Composed by the core's
    /// [`Bulkheaded`], itself behind the rate limiter if there is one (a full bulkhead spends
    /// no cell).
    ///
    /// With a bounded wait in the bulkhead's settings, an async call ([`Policy::call`] and its
    /// forms) that finds the bulkhead full waits for a slot before its first attempt, as the
    /// core means the wait (around the call, not inside an attempt's admission): in the queue
    /// of at most `max_queue` callers, for at most the shorter of `max_wait` and the time left
    /// to the deadline, woken when a slot is freed; cancelling (a token, or dropping the future)
    /// leaves the queue at once. A wait that ends without a slot ends as the guarded
    /// rejection. Retries and hedges never wait: a full bulkhead refuses them at once. The
    /// blocking form ([`Policy::call_blocking`]) does not wait either.
    ///
    /// ```
    /// use stormguard_core::{limits::BulkheadSettings, Duration};
    /// use stormguard_std::{Bulkhead, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let db = Bulkhead::new(
    ///     BulkheadSettings::builder("db")
    ///         .max_in_flight(4)
    ///         .bounded_wait(8, Duration::from_millis(250))
    ///         .build()?,
    /// );
    /// let policy = Policy::builder("db").bulkhead(db.clone()).build()?;
    /// let rows = policy
    ///     .call(|_| async { Ok::<_, ()>(db.in_flight()) })
    ///     .await;
    /// assert_eq!(rows, Ok(1)); // the attempt held one slot
    /// assert_eq!(db.in_flight(), 0);
    /// # Ok(()) }
    /// ```
    pub fn bulkhead(mut self, bulkhead: Bulkhead) -> Self {
        self.bulkhead = Some(bulkhead);
        self
    }

    /// Hedging (default off): when an attempt runs longer than the breaker's learned p95 of
    /// healthy calls, the async call launches a second attempt beside it (the core decides
    /// when, and whether: never without a breaker, a learned baseline, a closed breaker, a
    /// funding retry budget or an attempt left). At most 2 attempts are in flight; the first
    /// success wins and the other attempt's future is dropped (reported to the breaker as
    /// cancelled, never as a failure); a failure of one waits for the other. A hedge is an
    /// attempt (it counts toward the maximum) and a retry (the budget funds it). One hedge per
    /// attempt. Only for operations that are safe to run twice.
    ///
    /// The blocking form ([`Policy::call_blocking`]) never hedges: it cannot run two attempts
    /// of a borrowed closure at once, nor stop the loser.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("search").hedging(true).build()?;
    /// assert!(p.settings().hedging());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn hedging(mut self, on: bool) -> Self {
        self.call = self.call.hedging(on);
        self
    }

    /// Takes the retry settings from `settings` (attempts, deadline, attempt timeout,
    /// measured ceiling, hedging, backoff); the jitter seed stays the builder's.
    ///
    /// ```
    /// use stormguard_core::CallSettings;
    /// let p = stormguard_std::Policy::builder("worker").settings(CallSettings::worker()).build()?;
    /// assert_eq!(p.settings().max_attempts(), 10);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn settings(mut self, settings: CallSettings) -> Self {
        self.call = self
            .call
            .max_attempts(settings.max_attempts())
            .deadline(settings.deadline())
            .attempt_timeout(settings.attempt_timeout())
            .measured_ceiling(settings.measured_ceiling())
            .ceiling_floor(settings.ceiling_floor())
            .hedging(settings.hedging())
            .backoff(*settings.backoff());
        self
    }

    /// Whether the breaker's measured attempt ceiling, 3x the recent p95 of successful calls
    /// (once 20 are known), tightens the attempt timeout (default on). It only ever tightens:
    /// a configured timeout shorter than the ceiling stands.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").measured_ceiling(false).build()?;
    /// assert!(!p.settings().measured_ceiling());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn measured_ceiling(mut self, on: bool) -> Self {
        self.call = self.call.measured_ceiling(on);
        self
    }

    /// Attempts per call, the first included (default 3; at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.call = self.call.max_attempts(n);
        self
    }

    /// The deadline per call (default 30 s).
    pub fn deadline(mut self, d: impl Into<Duration>) -> Self {
        self.call = self.call.deadline(Some(d.into()));
        self
    }

    /// No deadline per call (the attempts and attempt timeout still bound it).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_deadline().build()?;
    /// assert_eq!(p.settings().deadline(), None);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn no_deadline(mut self) -> Self {
        self.call = self.call.deadline(None);
        self
    }

    /// The timeout per attempt (default 10 s).
    pub fn attempt_timeout(mut self, d: impl Into<Duration>) -> Self {
        self.call = self.call.attempt_timeout(Some(d.into()));
        self
    }

    /// No timeout per attempt (the deadline still bounds it).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_attempt_timeout().build()?;
    /// assert_eq!(p.settings().attempt_timeout(), None);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn no_attempt_timeout(mut self) -> Self {
        self.call = self.call.attempt_timeout(None);
        self
    }

    /// The backoff between attempts (default [`Backoff::DEFAULT`]).
    ///
    /// ```
    /// use stormguard_std::Backoff;
    /// let p = stormguard_std::Policy::builder("worker").backoff(Backoff::worker()).build()?;
    /// assert_eq!(p.settings().backoff(), &Backoff::worker());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.call = self.call.backoff(backoff);
        self
    }

    /// The jitter seed (default: from the process's entropy, see
    /// [`entropy_seed`](crate::entropy_seed)). Fix it for reproducible tests.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").seed(42).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.call = self.call.seed(seed);
        self
    }

    /// Reads `clock` instead of the process-wide [`DefaultClock`]. The breaker and budget must
    /// see one time base: give a policy on another clock breakers and budgets of its own (or
    /// read them with the handles' `_at` methods and that clock).
    ///
    /// ```
    /// use stormguard_std::{ManualClock, Policy};
    /// let clock = ManualClock::new();
    /// let p = Policy::builder("db").clock(clock.clone()).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn clock<K2>(self, clock: K2) -> PolicyBuilder<K2, L> {
        PolicyBuilder {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            bulkhead: self.bulkhead,
            call: self.call,
            clock,
            listener: self.listener,
        }
    }

    /// Sends every event and call report to `listener` as well as events to `tracing`.
    ///
    /// ```
    /// use stormguard_std::{Metrics, Policy};
    /// let metrics = Metrics::new("db");
    /// let p = Policy::builder("db").listener(metrics.clone()).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn listener<L2>(self, listener: L2) -> PolicyBuilder<K, L2> {
        PolicyBuilder {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            bulkhead: self.bulkhead,
            call: self.call,
            clock: self.clock,
            listener,
        }
    }

    /// Validates every setting and builds the policy.
    ///
    /// ```
    /// use stormguard_std::Field;
    /// let e = stormguard_std::Policy::builder("db").max_attempts(0).build().err().unwrap();
    /// assert_eq!(e.field, Field::MaxAttempts);
    /// ```
    pub fn build(self) -> Result<Policy<K, L>, SettingsError> {
        self.name.check().map_err(SettingsError::name)?;
        let breaker = match self.breaker {
            Choice::Default => Some(Breaker::new(
                BreakerSettings::builder_named(self.name).build()?,
            )),
            Choice::Given(b) => Some(b),
            Choice::Built(b) if b.settings().name() == &self.name => Some(b),
            Choice::Built(_) => {
                return Err(SettingsError {
                    field: Field::BreakerName,
                    bound: Bound::PolicyName,
                })
            }
            Choice::Off => None,
        };
        let budget = match self.budget {
            Choice::Default => Some(Budget::new(
                BudgetSettings::builder_named(self.name).build()?,
            )),
            Choice::Given(b) => Some(b),
            Choice::Built(b) if b.settings().name() == &self.name => Some(b),
            Choice::Built(_) => {
                return Err(SettingsError {
                    field: Field::BudgetName,
                    bound: Bound::PolicyName,
                })
            }
            Choice::Off => None,
        };
        Ok(Policy {
            name: self.name,
            breaker,
            budget,
            limiter: self.limiter,
            bulkhead: self.bulkhead,
            settings: self.call.build()?,
            // One attempt cannot hedge: the single-attempt form runs without it.
            single: self.call.max_attempts(1).hedging(false).build()?,
            clock: SteadyClock::new(self.clock),
            listener: self.listener,
        })
    }
}

/// Retries, deadline, attempt timeout, backoff, breaker and retry budget for one dependency:
/// `policy.call(|attempt| async { ... }).await`.
///
/// A policy holds shared handles ([`Breaker`], [`Budget`]): clones of a policy, and other
/// policies given the same handles, share their state. Everything on the call path is
/// lock-free and allocation-free: the core's atomics, two clock readings per attempt, tokio's
/// timers.
///
/// ```
/// use std::time::Duration;
/// use stormguard_std::{CallError, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), stormguard_std::SettingsError> {
/// let policy = Policy::builder("inventory")
///     .deadline(Duration::from_secs(2))
///     .build()?;
///
/// async fn fetch_stock(item: u32) -> Result<u32, std::io::Error> {
///     Ok(item * 2) // the dependency
/// }
///
/// match policy.call(|_attempt| fetch_stock(21)).await {
///     Ok(stock) => assert_eq!(stock, 42),
///     Err(CallError::Rejected { rejection, .. }) => {
///         println!("inventory is being left alone; ask again in {}", rejection.retry_after);
///     }
///     Err(other) => println!("{other}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Policy<K = DefaultClock, L = NoListener> {
    name: Name,
    breaker: Option<Breaker>,
    budget: Option<Budget>,
    limiter: Option<Limiter>,
    bulkhead: Option<Bulkhead>,
    settings: CallSettings,
    /// The same settings with one attempt, for calls that cannot be repeated.
    single: CallSettings,
    clock: SteadyClock<K>,
    listener: L,
}

impl Policy {
    /// A builder for a policy named `name`: the name its breaker, budget and events carry.
    /// Breaker and budget settings handed to the builder must carry the same name; shared
    /// [`Breaker`] and [`Budget`] handles keep their own.
    pub fn builder(name: &'static str) -> PolicyBuilder {
        Policy::builder_named(Name::new(name))
    }

    /// A builder for a policy named `name`, e.g. from a configuration file.
    ///
    /// ```
    /// use stormguard_core::Name;
    /// let name = Name::try_from_str(&String::from("orders")).unwrap();
    /// let p = stormguard_std::Policy::builder_named(name).build()?;
    /// assert_eq!(p.name().as_str(), "orders");
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn builder_named(name: Name) -> PolicyBuilder {
        PolicyBuilder {
            name,
            breaker: Choice::Default,
            budget: Choice::Default,
            limiter: None,
            bulkhead: None,
            call: CallSettings::builder().seed(entropy_seed()),
            clock: default_clock(),
            listener: NoListener,
        }
    }
}

impl<K, L> Policy<K, L> {
    /// The policy's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The breaker guarding the calls, if any.
    #[must_use]
    pub fn breaker(&self) -> Option<&Breaker> {
        self.breaker.as_ref()
    }

    /// The retry budget, if any.
    #[must_use]
    pub fn budget(&self) -> Option<&Budget> {
        self.budget.as_ref()
    }

    /// The rate limiter in front of the breaker, if any.
    #[must_use]
    pub fn limiter(&self) -> Option<&Limiter> {
        self.limiter.as_ref()
    }

    /// The bulkhead in front of the breaker, if any.
    #[must_use]
    pub fn bulkhead(&self) -> Option<&Bulkhead> {
        self.bulkhead.as_ref()
    }

    /// How calls retry and how long they may take.
    #[must_use]
    pub fn settings(&self) -> &CallSettings {
        &self.settings
    }

    /// The clock the policy reads. The policy reads it through a [`SteadyClock`], so a
    /// reading that steps back never holds a call past its deadline or a breaker open past its
    /// break; reading this clock directly gives its own readings.
    #[must_use]
    pub fn clock(&self) -> &K {
        self.clock.inner()
    }

    /// The listener events go to.
    #[must_use]
    pub fn listener(&self) -> &L {
        &self.listener
    }

    /// The same policy (same breaker and budget) with another listener.
    ///
    /// ```
    /// use stormguard_std::{Metrics, Policy};
    /// let p = Policy::builder("db").build()?;
    /// let counted = p.clone().with_listener(Metrics::for_policy(&p));
    /// # let _ = counted;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn with_listener<L2>(self, listener: L2) -> Policy<K, L2> {
        Policy {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            bulkhead: self.bulkhead,
            settings: self.settings,
            single: self.single,
            clock: self.clock,
            listener,
        }
    }

    /// What one call's admission is built from.
    #[inline]
    pub(crate) fn steps(&self) -> Steps<'_> {
        Steps {
            name: &self.name,
            breaker: self.breaker.as_ref().map(Breaker::shared),
            limiter: self.limiter.as_ref().map(Limiter::cells),
            bulkhead: self.bulkhead.as_ref().map(|b| &*b.inner),
        }
    }

    /// The breaker and budget of one call, with the optional steps in front of the breaker;
    /// `held` is a bulkhead slot the call already won by waiting.
    #[inline]
    pub(crate) fn parts<'a>(
        &'a self,
        steps: Steps<'a>,
        held: Option<BulkheadPermit>,
    ) -> Parts<Front<'a>, Funds<'a>> {
        Parts {
            breaker: steps.front(held),
            budget: self.funds(),
        }
    }

    /// The budget side of a call.
    #[inline]
    pub(crate) fn funds(&self) -> Funds<'_> {
        self.budget.as_ref().map(|b| b.shared())
    }

    /// The call driver for a call starting at `now` with `options`' deadline, salted with the
    /// thread's count of calls begun so that calls beginning at the same instant (paused time,
    /// a coarse clock) do not back off in step.
    pub(crate) fn begin<C>(&self, options: &CallOptions<'_, C>, now: Instant) -> Call {
        let mut call = Call::begin_salted(self.call_settings(options), now, next_salt());
        options.tighten(&mut call, now);
        call
    }

    /// The settings a call made with `options` runs under.
    #[inline]
    pub(crate) fn call_settings<C>(&self, options: &CallOptions<'_, C>) -> &CallSettings {
        if options.single_attempt {
            &self.single
        } else {
            &self.settings
        }
    }
}

/// The salt of the next call begun on this thread: a count, so the same program draws the same
/// jitter run after run (with a fixed seed), and no shared write is added to the call path.
fn next_salt() -> u64 {
    thread_local! {
        static BEGUN: Cell<u64> = const { Cell::new(0) };
    }
    BEGUN.with(|begun| {
        let n = begun.get().wrapping_add(1);
        begun.set(n);
        n
    })
}

impl<K: Clock, L: Listener> Policy<K, L> {
    /// Forces the breaker open until [`Policy::reset`]; the event goes to `tracing` and the
    /// listener. Does nothing without a breaker.
    ///
    /// ```
    /// use stormguard_core::State;
    /// let p = stormguard_std::Policy::builder("db").build()?;
    /// p.isolate();
    /// assert_eq!(p.breaker().unwrap().state(), State::Isolated);
    /// p.reset();
    /// assert_eq!(p.breaker().unwrap().state(), State::Closed);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn isolate(&self) {
        if let Some(b) = &self.breaker {
            b.shared().isolate(self.clock.now(), &mut |e| self.emit(&e));
        }
    }

    /// Closes the breaker (the learned baselines stay); the event goes to `tracing` and the
    /// listener.
    pub fn reset(&self) {
        if let Some(b) = &self.breaker {
            b.shared().reset(self.clock.now(), &mut |e| self.emit(&e));
        }
    }

    /// The policy describes itself in plain text (the core's [`Explain`]): what bounds a call
    /// first, the worst-case timeline of its attempts, the load it can add, what its breaker
    /// and budget measure now (read at the policy's clock), and what is missing.
    ///
    /// ```
    /// let policy = stormguard_std::Policy::builder("payments").build()?;
    /// let text = policy.explain().to_string();
    /// assert!(text.starts_with("policy `payments`"));
    /// assert!(text.contains("no latency baseline yet (cold)"));
    /// println!("{}", policy.explain());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn explain(&self) -> Explain<'_> {
        let now = self.clock.now();
        let mut explain = Explain::new(&self.settings).name(&self.name);
        if let Some(l) = self.limiter() {
            if let Some(gcra) = l.as_gcra() {
                explain = explain.rate_limit(gcra.settings());
            } else if let Some(window) = l.as_window() {
                explain = explain.window_limit(window.settings());
            }
        }
        if let Some(b) = self.bulkhead() {
            explain = explain.bulkhead(b.settings());
        }
        if let Some(b) = &self.breaker {
            explain = explain
                .breaker(b.settings())
                .breaker_now(b.snapshot_at(now));
        }
        if let Some(b) = &self.budget {
            explain = explain.budget(b.settings()).budget_now(b.snapshot_at(now));
        }
        explain
    }

    #[inline]
    pub(crate) fn emit(&self, event: &Event<'_>) {
        events::emit(&self.listener, event);
    }

    /// Runs `op` under the policy, blocking the thread, with no async runtime: `op(attempt)`
    /// (1 for the first attempt) makes one attempt; `Ok` is a success, every `Err` a transient
    /// failure. Waits and the guarded pause are `std::thread` sleeps.
    ///
    /// An attempt cannot be interrupted: one that returns after its attempt timeout counts as
    /// [`Outcome::TimedOut`] unless it succeeded (the value is in hand; the breaker sees a slow
    /// call). Set the operation's own I/O timeout to the policy's attempt timeout.
    ///
    /// The rate limiter and the bulkhead apply as in the async form, except that a full
    /// bulkhead refuses at once (no bounded wait), and the blocking form never hedges: one
    /// attempt at a time, always (see [`PolicyBuilder::hedging`]).
    ///
    /// ```
    /// use stormguard_std::Policy;
    ///
    /// let policy = Policy::builder("config-file").build()?;
    /// let mut tries = 0;
    /// let text = policy.call_blocking(|_attempt| {
    ///     tries += 1;
    ///     if tries < 2 { Err("busy") } else { Ok("port = 8080") }
    /// });
    /// assert_eq!(text, Ok("port = 8080"));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn call_blocking<T, E, F>(&self, op: F) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Result<T, E>,
    {
        self.call_blocking_with(CallOptions::new(), op)
    }

    /// [`Policy::call_blocking`] with per-call [`CallOptions`]: a classifier, a cancellation
    /// token (it ends a wait or the pause at once; it is checked before every attempt), a
    /// deadline.
    ///
    /// ```
    /// use stormguard_std::{CallError, CallOptions, Policy};
    /// use tokio_util::sync::CancellationToken;
    ///
    /// let policy = Policy::builder("disk").build()?;
    /// let stop = CancellationToken::new();
    /// stop.cancel();
    /// let r = policy.call_blocking_with(CallOptions::new().cancel_on(&stop), |_| Ok::<_, ()>(1));
    /// assert_eq!(r, Err(CallError::Cancelled));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn call_blocking_with<T, E, F, C>(
        &self,
        options: CallOptions<'_, C>,
        mut op: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Result<T, E>,
        C: Classify<T, E>,
    {
        let steps = self.steps();
        let mut parts = self.parts(steps, None);
        let mut sink = |e: Event<'_>| self.emit(&e);
        let mut report = Report::new(&self.listener, &self.name);
        let mut now = self.clock.now();
        let mut call = self.begin(&options, now);
        let mut last: Option<Result<T, E>> = None;
        let finished = loop {
            match call.poll(&mut parts, now, &mut sink) {
                Step::Attempt(permit) => {
                    let guard = PermitGuard::new(steps, permit);
                    if blocking::is_cancelled(&options) {
                        drop(guard);
                        call.cancel();
                        break Finished::Cancelled;
                    }
                    report.attempt(call.attempts());
                    let result = op(call.attempts());
                    now = self.clock.now();
                    let mut outcome = options.classify.classify(&result);
                    let late = call.attempt_deadline().is_some_and(|at| now >= at);
                    if late && outcome != Outcome::Success {
                        outcome = Outcome::TimedOut;
                    }
                    let answered = result.is_ok() && outcome != Outcome::TimedOut;
                    last = Some(result);
                    if let Some(permit) = guard.disarm() {
                        call.complete_attempt(
                            &mut parts, permit, now, outcome, answered, &mut sink,
                        );
                    }
                }
                Step::Wait(wait) => {
                    if blocking::sleep(wait, &options) == Slept::Cancelled {
                        call.cancel();
                        break Finished::Cancelled;
                    }
                    now = self.clock.now();
                }
                Step::Reject(rejection) => {
                    // Announced (the core emitted `Rejected` with this pause), then served; the
                    // next poll hands the rejection out as `Finished::Rejected`.
                    if blocking::sleep(rejection.pause, &options) == Slept::Cancelled {
                        break Finished::Cancelled;
                    }
                }
                Step::Done(finished) => break finished,
            }
        };
        report.end(finished, finished.into_result(last))
    }
}

/// How a cancellable sleep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slept {
    Elapsed,
    Cancelled,
}

mod blocking {
    //! Sleeps for the blocking form: `std::thread` sleeps, cancellable by a token through a
    //! waker that unparks the sleeping thread.

    use super::{CallOptions, Slept};
    use stormguard_core::Duration;

    #[cfg(feature = "tokio")]
    pub(super) fn is_cancelled<C>(options: &CallOptions<'_, C>) -> bool {
        options.cancel.is_some_and(|t| t.is_cancelled())
    }

    #[cfg(not(feature = "tokio"))]
    pub(super) fn is_cancelled<C>(_: &CallOptions<'_, C>) -> bool {
        false
    }

    #[cfg(feature = "tokio")]
    pub(super) fn sleep<C>(d: Duration, options: &CallOptions<'_, C>) -> Slept {
        use std::future::Future;
        use std::sync::Arc;
        use std::task::{Context, Wake, Waker};

        struct Unpark(std::thread::Thread);

        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
            fn wake_by_ref(self: &Arc<Self>) {
                self.0.unpark();
            }
        }

        thread_local! {
            static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        }

        let Some(token) = options.cancel else {
            std::thread::sleep(d.into());
            return Slept::Elapsed;
        };
        let start = std::time::Instant::now();
        let d: std::time::Duration = d.into();
        let mut cancelled = std::pin::pin!(token.cancelled());
        WAKER.with(|waker| {
            let mut cx = Context::from_waker(waker);
            loop {
                if cancelled.as_mut().poll(&mut cx).is_ready() {
                    return Slept::Cancelled;
                }
                let Some(left) = d.checked_sub(start.elapsed()).filter(|l| !l.is_zero()) else {
                    return Slept::Elapsed;
                };
                std::thread::park_timeout(left);
            }
        })
    }

    #[cfg(not(feature = "tokio"))]
    pub(super) fn sleep<C>(d: Duration, _: &CallOptions<'_, C>) -> Slept {
        std::thread::sleep(d.into());
        Slept::Elapsed
    }
}

#[cfg(feature = "tokio")]
mod run {
    //! The async form, on tokio's timers.

    use std::future::{poll_fn, Future};
    use std::pin::{pin, Pin};
    use std::task::{Context, Poll};

    use stormguard_core::{
        call::Admission, limits::BulkheadEntry, limits::BulkheadPermit, limits::BulkheadTicket,
        Call, Duration, Event, Finished, Instant, Outcome, Parts, Rejection, State, Step,
    };
    use tokio_util::either::Either;
    use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

    use super::{
        Admit, Attempt, BulkheadShared, CallEnd, CallError, CallOptions, FromSteps, Front, Funds,
        PermitGuard, Policy, Report, Slept, Steps,
    };
    use crate::cache::SuccessCache;
    use crate::classify::Classify;
    use crate::clock::Clock;
    use crate::events::{Ended, Listener};

    /// How an attempt's race ended.
    enum Ran<R> {
        Returned(R),
        Cancelled,
        TimedOut,
    }

    /// One poll of an attempt's race: `fut` until it returns, `cancel` is cancelled, or
    /// `timeout` passes. The operation is polled first: a ready future costs no timer and no
    /// token check. A plain function polled from the loop's own `poll_fn`, so the attempt needs
    /// no future of its own.
    #[inline]
    fn race<'t, F: Future>(
        fut: Pin<&mut F>,
        cancelled: Pin<&mut Option<WaitForCancellationFuture<'t>>>,
        timer: Pin<&mut Option<tokio::time::Sleep>>,
        cancel: Option<&'t CancellationToken>,
        timeout: Option<Duration>,
        cx: &mut Context<'_>,
    ) -> Poll<Ran<F::Output>> {
        let (mut cancelled, mut timer) = (cancelled, timer);
        if let Poll::Ready(r) = fut.poll(cx) {
            return Poll::Ready(Ran::Returned(r));
        }
        if let Some(token) = cancel {
            if cancelled.is_none() {
                cancelled.set(Some(token.cancelled()));
            }
            if let Some(c) = cancelled.as_mut().as_pin_mut() {
                if c.poll(cx).is_ready() {
                    return Poll::Ready(Ran::Cancelled);
                }
            }
        }
        if let Some(t) = timeout {
            if timer.is_none() {
                timer.set(Some(tokio::time::sleep(t.into())));
            }
            if let Some(s) = timer.as_mut().as_pin_mut() {
                if s.poll(cx).is_ready() {
                    return Poll::Ready(Ran::TimedOut);
                }
            }
        }
        Poll::Pending
    }

    /// Sleeps `d` on tokio's timer, or until `cancel` is cancelled (checked first). A zero
    /// sleep does not yield.
    async fn sleep(d: Duration, cancel: Option<&CancellationToken>) -> Slept {
        match cancel {
            Some(token) if token.is_cancelled() => Slept::Cancelled,
            _ if d.is_zero() => Slept::Elapsed,
            None => {
                tokio::time::sleep(d.into()).await;
                Slept::Elapsed
            }
            Some(token) => {
                let mut cancelled = pin!(token.cancelled());
                let mut timer = pin!(tokio::time::sleep(d.into()));
                poll_fn(|cx| {
                    if cancelled.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Slept::Cancelled);
                    }
                    timer.as_mut().poll(cx).map(|()| Slept::Elapsed)
                })
                .await
            }
        }
    }

    impl<C> CallOptions<'_, C> {
        /// Serves a refusal's guarded pause for a call made with these options, ended at once
        /// by their cancellation token: for a refusal the call loop does not reach (a full
        /// keyed table's, driven by the keyed policy over the same core driver).
        pub(crate) async fn serve_pause(&self, pause: Duration) -> Slept {
            sleep(pause, self.cancel).await
        }
    }

    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    impl<K: Clock, L: Listener> Policy<K, L> {
        /// Runs `op` under the policy: `op(attempt)` (1 for the first attempt) makes one
        /// attempt; `Ok` is a success and every `Err` a transient failure (see
        /// [`Policy::call_with`] for another classification, a cancellation token or a tighter
        /// deadline).
        ///
        /// Each attempt races its attempt deadline (the attempt timeout, capped by the call's
        /// deadline): an attempt still running then is dropped and counts as
        /// [`Outcome::TimedOut`]. Failures are retried after the core's backoff as long as
        /// the attempts, the deadline, the breaker and the budget allow. A refusal is reported
        /// only after the guarded pause ([`GUARD_PAUSE`](stormguard_core::GUARD_PAUSE),
        /// 100 ms, capped by the deadline's remainder), announced before it is served by the
        /// `Rejected` event, so a task that polls in a loop cannot spin on an open breaker.
        ///
        /// Nothing happens until the returned future is first polled: the call starts then
        /// (its first clock reading, its deadline). Dropping the future cancels the call at
        /// once, wherever it is: an attempt in flight gives its half-open probe slot back (a
        /// drop guard releases its permit), a wait or pause simply ends. Cancellation never
        /// counts as a failure.
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
        /// let policy = stormguard_std::Policy::builder("search").build()?;
        /// let hits = policy
        ///     .call(|attempt| async move { Ok::<_, std::io::Error>(attempt * 10) })
        ///     .await;
        /// assert_eq!(hits.unwrap(), 10);
        /// # Ok(()) }
        /// ```
        // Not an `async fn`: the loop's future is handed out as it is, so its result is not
        // moved through one more future on the way out.
        pub fn call<T, E, F, Fut>(
            &self,
            mut op: F,
        ) -> impl Future<Output = Result<T, CallError<E>>> + use<'_, T, E, F, Fut, K, L>
        where
            F: FnMut(u32) -> Fut,
            Fut: Future<Output = Result<T, E>>,
        {
            self.run(
                None,
                &super::DEFAULT_OPTIONS,
                move |a: Attempt| Some(op(a.number)),
                None,
            )
        }

        /// [`Policy::call`] with per-call [`CallOptions`]: a classifier, a cancellation token,
        /// a deadline.
        ///
        /// ```
        /// use stormguard_std::Outcome;
        /// use stormguard_std::{CallError, CallOptions, Policy};
        /// use tokio_util::sync::CancellationToken;
        ///
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
        /// let policy = Policy::builder("ledger").build()?;
        /// let shutdown = CancellationToken::new();
        /// let options = CallOptions::new()
        ///     // 409 is "not yet": the ledger is fine, ask again later.
        ///     .classify(|r: &Result<u64, u16>| match r {
        ///         Ok(_) => Outcome::Success,
        ///         Err(409) => Outcome::Throttled { retry_after: None },
        ///         Err(400..=499) => Outcome::Permanent,
        ///         Err(_) => Outcome::Transient,
        ///     })
        ///     .cancel_on(&shutdown);
        /// let r = policy.call_with(options, |_| async { Err::<u64, u16>(404) }).await;
        /// assert_eq!(r, Err(CallError::Failed(404))); // permanent: not retried
        /// # Ok(()) }
        /// ```
        pub async fn call_with<T, E, F, Fut, C>(
            &self,
            options: CallOptions<'_, C>,
            mut op: F,
        ) -> Result<T, CallError<E>>
        where
            F: FnMut(u32) -> Fut,
            Fut: Future<Output = Result<T, E>>,
            C: Classify<T, E>,
        {
            self.run(None, &options, |a: Attempt| Some(op(a.number)), None)
                .await
        }

        /// [`Policy::call`] with a fallback for refusals: when the call is refused (breaker
        /// open, half-open full, ramp shedding, isolated, budget empty), `fallback` gives the
        /// value instead, after the same guarded pause, so a polling loop with a fallback
        /// cannot spin either. A failure of the dependency is not a refusal: it reaches the
        /// caller as the failure it is (DESIGN.md, "Decisions").
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
        /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
        /// let policy = stormguard_std::Policy::builder("prices").build()?;
        /// policy.isolate();
        /// let price = policy
        ///     .call_or(|_rejection| 0, |_| async { Ok::<u32, ()>(1_999) })
        ///     .await;
        /// assert_eq!(price, Ok(0));
        /// # Ok(()) }
        /// ```
        pub async fn call_or<T, E, F, Fut, D>(&self, fallback: D, op: F) -> Result<T, CallError<E>>
        where
            F: FnMut(u32) -> Fut,
            Fut: Future<Output = Result<T, E>>,
            D: FnOnce(&Rejection) -> T,
        {
            self.call_or_with(CallOptions::new(), fallback, op).await
        }

        /// [`Policy::call_or`] with per-call [`CallOptions`].
        ///
        /// ```
        /// use stormguard_std::CallOptions;
        /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
        /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
        /// let policy = stormguard_std::Policy::builder("prices").build()?;
        /// let price = policy
        ///     .call_or_with(CallOptions::new(), |_| 0, |_| async { Ok::<u32, ()>(1_999) })
        ///     .await;
        /// assert_eq!(price, Ok(1_999));
        /// # Ok(()) }
        /// ```
        pub async fn call_or_with<T, E, F, Fut, C, D>(
            &self,
            options: CallOptions<'_, C>,
            fallback: D,
            op: F,
        ) -> Result<T, CallError<E>>
        where
            F: FnMut(u32) -> Fut,
            Fut: Future<Output = Result<T, E>>,
            C: Classify<T, E>,
            D: FnOnce(&Rejection) -> T,
        {
            match self.call_with(options, op).await {
                Err(CallError::Rejected { rejection, .. }) => Ok(fallback(&rejection)),
                other => other,
            }
        }

        /// [`Policy::call`] behind a success cache (opt-in, DESIGN.md "Decisions"): while
        /// `cache` holds a fresh success and the breaker is closed, it is returned without
        /// calling (no attempt, no budget); otherwise the call runs, and a value the classifier
        /// called a success is stored at the instant the call ended. A failure of the
        /// dependency clears the cache. Errors, rejections and fallback values are never cached.
        /// Concurrent callers of an empty entry share one call: one runs the operation, the
        /// others wait and are served its value (if it failed, the next waiter calls). The rule
        /// is [`CacheRule`](crate::CacheRule).
        ///
        /// ```
        /// use std::sync::atomic::{AtomicU32, Ordering};
        /// use stormguard_std::Duration;
        /// use stormguard_std::{Policy, SuccessCache};
        ///
        /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
        /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
        /// let policy = Policy::builder("rates").build()?;
        /// let cache = SuccessCache::new(Duration::from_secs(5)).unwrap();
        /// let calls = AtomicU32::new(0);
        /// let fetch = || policy.call_cached(&cache, |_| async {
        ///     Ok::<_, ()>(calls.fetch_add(1, Ordering::Relaxed))
        /// });
        /// assert_eq!(fetch().await, Ok(0));
        /// assert_eq!(fetch().await, Ok(0)); // served from the cache
        /// tokio::time::advance(std::time::Duration::from_secs(5)).await;
        /// assert_eq!(fetch().await, Ok(1)); // expired: called again
        /// # Ok(()) }
        /// ```
        pub async fn call_cached<T, E, F, Fut>(
            &self,
            cache: &SuccessCache<T>,
            op: F,
        ) -> Result<T, CallError<E>>
        where
            T: Clone,
            F: FnMut(u32) -> Fut,
            Fut: Future<Output = Result<T, E>>,
        {
            self.call_cached_with(CallOptions::new(), cache, op).await
        }

        /// [`Policy::call_cached`] with per-call [`CallOptions`].
        ///
        /// ```
        /// use stormguard_std::Duration;
        /// use stormguard_std::{CallOptions, SuccessCache};
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
        /// let policy = stormguard_std::Policy::builder("rates").build()?;
        /// let cache = SuccessCache::new(Duration::from_secs(5)).unwrap();
        /// let r = policy
        ///     .call_cached_with(CallOptions::new(), &cache, |_| async { Ok::<_, ()>(3) })
        ///     .await;
        /// assert_eq!(r, Ok(3));
        /// # Ok(()) }
        /// ```
        pub async fn call_cached_with<T, E, F, Fut, C>(
            &self,
            options: CallOptions<'_, C>,
            cache: &SuccessCache<T>,
            mut op: F,
        ) -> Result<T, CallError<E>>
        where
            T: Clone,
            F: FnMut(u32) -> Fut,
            Fut: Future<Output = Result<T, E>>,
            C: Classify<T, E>,
        {
            let state = |now| self.breaker().map_or(State::Closed, |b| b.state_at(now));
            let mut now = self.clock.now();
            if let Some(value) = cache.serve(now, state(now)) {
                self.listener.on_call(&self.name, 0, Ended::Cached);
                return Ok(value);
            }
            // An empty (or expired) entry while the breaker is closed: one caller calls, the
            // others wait for its result. Not while the breaker is not closed: nothing would
            // be served then anyway, and a refusal's pause must not be served in turn.
            let _flight = if cache.rule().serves_in(state(now)) {
                let flight = cache.flight().await;
                now = self.clock.now();
                let s = state(now);
                if let Some(value) = cache.serve(now, s) {
                    self.listener.on_call(&self.name, 0, Ended::Cached);
                    return Ok(value);
                }
                cache.rule().serves_in(s).then_some(flight)
            } else {
                None
            };
            let mut end = CallEnd::default();
            let result = self
                .run(
                    Some(now),
                    &options,
                    |a: Attempt| Some(op(a.number)),
                    Some(&mut end),
                )
                .await;
            match (&result, end.succeeded_at) {
                (Ok(value), Some(at)) => cache.store(at, value.clone()),
                _ if end.finished.is_some_and(|f| cache.rule().clears(f)) => cache.clear(),
                _ => {}
            }
            // The waiters go on (`_flight` is released) once the value is stored.
            result
        }

        /// The call loop: poll the core, do what it says. The call starts at `start`, or at
        /// the first poll when that is `None`. `op` returns `None` when it cannot make the
        /// attempt (a permanent outcome). How the call ended goes to `end` (for the cache).
        pub(crate) fn run<'s, 'o, T, E, F, Fut, C>(
            &'s self,
            start: Option<Instant>,
            options: &'o CallOptions<'o, C>,
            op: F,
            end: Option<&'o mut CallEnd>,
        ) -> impl Future<Output = Result<T, CallError<E>>> + use<'s, 'o, T, E, F, Fut, C, K, L>
        where
            F: FnMut(Attempt) -> Option<Fut>,
            Fut: Future<Output = Result<T, E>>,
            C: Classify<T, E>,
        {
            if self.limiter.is_none() && self.bulkhead.is_none() {
                // No optional step: the loop over the breaker alone, so a policy without the
                // steps pays no dispatch for them.
                Either::Left(self.drive::<_, _, _, _, _, Admit<'s>>(start, options, op, end))
            } else {
                Either::Right(self.drive::<_, _, _, _, _, Front<'s>>(start, options, op, end))
            }
        }

        /// The loop proper, over the call's admission `A` (the breaker alone, or with the
        /// optional steps in front), for a call that began at `start`.
        // Few, narrow arguments (the options by reference, the steps and the report made
        // here): an async fn moves its arguments into place when first polled, just after the
        // caller wrote them, and wide moves of narrow writes stall the processor.
        async fn drive<'p, 'o, T, E, F, Fut, C, A>(
            &'p self,
            start: Option<Instant>,
            options: &'o CallOptions<'o, C>,
            mut op: F,
            end: Option<&'o mut CallEnd>,
        ) -> Result<T, CallError<E>>
        where
            F: FnMut(Attempt) -> Option<Fut>,
            Fut: Future<Output = Result<T, E>>,
            C: Classify<T, E>,
            A: FromSteps<'p>,
        {
            // A start read elsewhere (from the inner clock) never lies before a reading the
            // policy already handed out.
            let start = match start {
                Some(at) => self.clock.at_least_latest(at),
                None => self.clock.now(),
            };
            let steps = self.steps();
            let mut report = Report::new(&self.listener, &self.name);
            let cancel = options.cancel;
            let mut now = start;
            // Built where the loop's future keeps it: through a helper that returns it, the
            // call would be built aside and copied in.
            let mut call =
                Call::begin_salted(self.call_settings(options), start, super::next_salt());
            options.tighten(&mut call, start);
            // A bulkhead with a bounded wait: the call waits for a slot before its first
            // attempt (the core's `Bulkheaded` never queues; the wait is the adapter's).
            let mut held = None;
            if let Some(bulkhead) = steps.bulkhead.filter(|b| b.waits()) {
                let deadline = call.deadline();
                let wait = pin!(wait_for_slot(bulkhead, &self.clock, now, deadline, cancel));
                match Cold(wait).await {
                    Waited::Entered(permit, at) => {
                        held = Some(permit);
                        now = at;
                    }
                    // The driver decides: a slot freed since is taken, else the guarded
                    // rejection (with no pause if the wait used up the deadline).
                    Waited::Refused(at) => now = at,
                    Waited::Cancelled => {
                        return report.end(Finished::Cancelled, Err(CallError::Cancelled))
                    }
                }
            }
            let mut parts = Parts {
                breaker: A::from_steps(steps, held),
                budget: self.funds(),
            };
            let mut sink = |e: Event<'_>| self.emit(&e);
            let mut last: Option<Result<T, E>> = None;
            let mut succeeded_at = None;
            let finished = loop {
                match call.poll(&mut parts, now, &mut sink) {
                    Step::Attempt(permit) => {
                        let guard = PermitGuard::new(steps, permit);
                        if cancel.is_some_and(CancellationToken::is_cancelled) {
                            // Cancelled already (before the call, or during an attempt whose
                            // result won the race): nothing more runs. The guard gives the
                            // permit back.
                            drop(guard);
                            call.cancel();
                            break Finished::Cancelled;
                        }
                        let number = call.attempts();
                        report.attempt(number);
                        let attempt = Attempt {
                            number,
                            call_left: call.deadline().map(|d| d.saturating_duration_since(now)),
                        };
                        let hedge = if self.settings.hedging() {
                            call.hedge_delay(&parts, now)
                        } else {
                            None
                        };
                        let (outcome, answered) = match (op(attempt), hedge) {
                            (Some(fut), Some(after)) => {
                                let pair = Pair {
                                    call: &mut call,
                                    parts: &mut parts,
                                    steps,
                                    report: &mut report,
                                    last: &mut last,
                                };
                                let hedged = pin!(
                                    self.hedged(pair, &mut op, fut, guard, after, now, options)
                                );
                                let (at, success) = Cold(hedged).await;
                                now = at;
                                succeeded_at = success;
                                continue;
                            }
                            (Some(fut), None) => {
                                let timeout = call
                                    .attempt_deadline()
                                    .map(|d| d.saturating_duration_since(now));
                                let mut fut = pin!(fut);
                                let mut cancelled = pin!(None);
                                let mut timer = pin!(None);
                                let ran = poll_fn(|cx| {
                                    let (c, t) = (cancelled.as_mut(), timer.as_mut());
                                    race(fut.as_mut(), c, t, cancel, timeout, cx)
                                })
                                .await;
                                now = self.clock.now();
                                classify(ran, &options.classify, &mut last)
                            }
                            // The operation cannot be attempted again (a request that cannot
                            // be replayed): a permanent outcome, so the call ends here.
                            (None, _) => (Outcome::Permanent, false),
                        };
                        succeeded_at = (outcome == Outcome::Success).then_some(now);
                        if let Some(permit) = guard.disarm() {
                            call.complete_attempt(
                                &mut parts, permit, now, outcome, answered, &mut sink,
                            );
                        }
                    }
                    Step::Wait(wait) => {
                        if sleep(wait, cancel).await == Slept::Cancelled {
                            call.cancel();
                            break Finished::Cancelled;
                        }
                        now = self.clock.now();
                    }
                    Step::Reject(rejection) => {
                        // Announced (the core emitted `Rejected` with this pause), then served;
                        // the next poll hands the rejection out as `Finished::Rejected`.
                        if sleep(rejection.pause, cancel).await == Slept::Cancelled {
                            break Finished::Cancelled;
                        }
                    }
                    Step::Done(finished) => break finished,
                }
            };
            let result = finished.into_result(last);
            if let Some(end) = end {
                end.finished = Some(finished);
                if result.is_ok() {
                    end.succeeded_at = succeeded_at;
                }
            }
            report.end(finished, result)
        }

        /// Runs the attempt just started (`first`, its permit in `guard`) and, if it is still
        /// running `after` its start, a hedge beside it, as the core's hedging protocol says:
        /// the core launches the hedge (or declines), the first success ends the call and the
        /// other attempt is dropped and reported cancelled, a failure waits for the other.
        /// Returns the time the pair ended and, if one succeeded, that time again.
        #[allow(clippy::too_many_arguments)]
        async fn hedged<'p, 'g, T, E, F, Fut, C, A>(
            &'p self,
            pair: Pair<'_, 'p, 'g, T, E, L, A>,
            op: &mut F,
            first: Fut,
            guard: PermitGuard<'p>,
            after: Duration,
            mut now: Instant,
            options: &CallOptions<'_, C>,
        ) -> (Instant, Option<Instant>)
        where
            F: FnMut(Attempt) -> Option<Fut>,
            Fut: Future<Output = Result<T, E>>,
            C: Classify<T, E>,
            A: Admission,
        {
            let Pair {
                call,
                parts,
                steps,
                report,
                last,
            } = pair;
            let mut sink = |e: Event<'_>| self.emit(&e);
            // Lane A is the attempt the driver started, lane B the hedge. One timer, armed for
            // the earliest of: lane A's attempt deadline, lane B's, and the hedge's launch.
            let mut fut_a = pin!(Some(first));
            let mut fut_b = pin!(None::<Fut>);
            let mut guard_a = Some(guard);
            let mut guard_b: Option<PermitGuard<'p>> = None;
            let mut due_a = call.attempt_deadline();
            let mut due_b = None;
            let mut hedge_at = Some(now.saturating_add(after));
            let mut timer = pin!(None::<tokio::time::Sleep>);
            let mut cancelled = pin!(options.cancel.map(CancellationToken::cancelled));
            let mut succeeded_at = None;
            loop {
                let armed = [
                    (PairEvent::Hedge, hedge_at),
                    (PairEvent::Ran(Lane::A, Ran::TimedOut), due_a),
                    (PairEvent::Ran(Lane::B, Ran::TimedOut), due_b),
                ]
                .into_iter()
                .filter_map(|(event, at)| at.map(|at| (event, at)))
                .min_by_key(|(_, at)| *at)
                .map(|(event, at)| {
                    let d = at.saturating_duration_since(now);
                    timer.set(Some(tokio::time::sleep(d.into())));
                    event
                });
                let mut armed = armed;
                let event = poll_fn(|cx| {
                    if let Some(Poll::Ready(r)) = fut_a.as_mut().as_pin_mut().map(|f| f.poll(cx)) {
                        return Poll::Ready(PairEvent::Ran(Lane::A, Ran::Returned(r)));
                    }
                    if let Some(Poll::Ready(r)) = fut_b.as_mut().as_pin_mut().map(|f| f.poll(cx)) {
                        return Poll::Ready(PairEvent::Ran(Lane::B, Ran::Returned(r)));
                    }
                    if let Some(Poll::Ready(())) =
                        cancelled.as_mut().as_pin_mut().map(|c| c.poll(cx))
                    {
                        return Poll::Ready(PairEvent::Cancelled);
                    }
                    if let Some(Poll::Ready(())) = timer.as_mut().as_pin_mut().map(|t| t.poll(cx)) {
                        if let Some(event) = armed.take() {
                            return Poll::Ready(event);
                        }
                    }
                    Poll::Pending
                })
                .await;
                timer.set(None);
                now = self.clock.now();
                let (lane, ran) = match event {
                    PairEvent::Hedge => {
                        hedge_at = None;
                        let call_left = call.deadline().map(|d| d.saturating_duration_since(now));
                        // The core grants the hedge first and only then has the future made:
                        // the operation is never invoked for a hedge that does not run, and
                        // one that cannot be repeated gives back what the hedge took.
                        let launch = |number| op(Attempt { number, call_left });
                        if let Ok((permit, fut)) = call.hedge_with(parts, now, &mut sink, launch) {
                            guard_b = Some(PermitGuard::new(steps, permit));
                            report.attempt(call.attempts());
                            fut_b.set(Some(fut));
                            due_b = call.attempt_deadline();
                        }
                        continue;
                    }
                    PairEvent::Cancelled => {
                        fut_a.set(None);
                        fut_b.set(None);
                        for guard in [guard_a.take(), guard_b.take()].into_iter().flatten() {
                            if let Some(permit) = guard.disarm() {
                                call.complete(parts, permit, now, Outcome::Cancelled, &mut sink);
                            }
                        }
                        return (now, None);
                    }
                    PairEvent::Ran(lane, ran) => (lane, ran),
                };
                hedge_at = None;
                let (mut mine, mine_guard, mut other, other_guard) = match lane {
                    Lane::A => {
                        due_a = None;
                        (fut_a.as_mut(), &mut guard_a, fut_b.as_mut(), &mut guard_b)
                    }
                    Lane::B => {
                        due_b = None;
                        (fut_b.as_mut(), &mut guard_b, fut_a.as_mut(), &mut guard_a)
                    }
                };
                mine.set(None);
                let (outcome, answered) = classify(ran, &options.classify, last);
                if outcome == Outcome::Success {
                    succeeded_at = Some(now);
                }
                if let Some(permit) = mine_guard.take().and_then(PermitGuard::disarm) {
                    call.complete_attempt(parts, permit, now, outcome, answered, &mut sink);
                }
                if other.is_none() {
                    return (now, succeeded_at);
                }
                if call.is_over() {
                    // The winner (or a permanent failure) ends the call: the other attempt is
                    // dropped, which cancels it, and reported so.
                    other.set(None);
                    if let Some(permit) = other_guard.take().and_then(PermitGuard::disarm) {
                        call.complete(parts, permit, now, Outcome::Cancelled, &mut sink);
                    }
                    return (now, succeeded_at);
                }
                // A failure: the other attempt goes on and decides.
            }
        }
    }

    /// What a hedged pair of attempts works on, borrowed from the call loop.
    struct Pair<'r, 'p, 'g, T, E, L: Listener, A> {
        call: &'r mut Call,
        parts: &'r mut Parts<A, Funds<'p>>,
        steps: Steps<'p>,
        report: &'r mut Report<'g, L>,
        last: &'r mut Option<Result<T, E>>,
    }

    /// Polls a future the common path does not take (the hedged pair, the bulkhead's wait)
    /// out of line, so its code does not weigh on the inlining of the call's own loop.
    struct Cold<'a, F>(Pin<&'a mut F>);

    impl<F: Future> Future for Cold<'_, F> {
        type Output = F::Output;

        #[inline(never)]
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            self.0.as_mut().poll(cx)
        }
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Lane {
        A,
        B,
    }

    enum PairEvent<R> {
        Ran(Lane, Ran<R>),
        Hedge,
        Cancelled,
    }

    /// The outcome of an attempt's race, and whether the dependency answered (the operation
    /// returned `Ok`); a returned result becomes the call's last result.
    #[inline]
    fn classify<T, E, C: Classify<T, E>>(
        ran: Ran<Result<T, E>>,
        classifier: &C,
        last: &mut Option<Result<T, E>>,
    ) -> (Outcome, bool) {
        match ran {
            Ran::Returned(result) => {
                let outcome = classifier.classify(&result);
                let answered = result.is_ok();
                *last = Some(result);
                (outcome, answered)
            }
            Ran::Cancelled => (Outcome::Cancelled, false),
            Ran::TimedOut => (Outcome::TimedOut, false),
        }
    }

    /// How a wait for a bulkhead slot ended.
    enum Waited {
        /// A slot, won at this instant.
        Entered(BulkheadPermit, Instant),
        /// No slot (queue full, or the wait is over), at this instant.
        Refused(Instant),
        Cancelled,
    }

    /// A place in a bulkhead's queue, given up if the wait is abandoned (the call's future
    /// dropped, or cancelled).
    struct Queued<'a> {
        bulkhead: &'a BulkheadShared,
        ticket: Option<BulkheadTicket>,
    }

    impl Drop for Queued<'_> {
        fn drop(&mut self) {
            if let Some(ticket) = self.ticket.take() {
                self.bulkhead.slots().abandon(ticket);
            }
        }
    }

    /// Enters `bulkhead` at `now`, or waits in its queue for a slot, as the core decides
    /// (`try_enter_or_queue`, then `on_slot_free` at every wake-up and when the wait is over),
    /// for at most the bulkhead's `max_wait` and the time left to `deadline`. Woken by a freed
    /// slot; cancelled at once by `cancel` or by dropping the future.
    async fn wait_for_slot<K: Clock>(
        bulkhead: &BulkheadShared,
        clock: &K,
        mut now: Instant,
        deadline: Option<Instant>,
        cancel: Option<&CancellationToken>,
    ) -> Waited {
        let max_wait = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
        // Registered before joining the queue, so a slot freed in between wakes this caller.
        let mut woken = pin!(bulkhead.freed().notified());
        woken.as_mut().enable();
        let ticket = match bulkhead.slots().try_enter_or_queue(now, max_wait) {
            Ok(BulkheadEntry::Entered(permit)) => return Waited::Entered(permit, now),
            Ok(BulkheadEntry::Queued(ticket)) => ticket,
            Err(_) => return Waited::Refused(now),
        };
        let mut queued = Queued {
            bulkhead,
            ticket: Some(ticket),
        };
        let mut cancelled = pin!(cancel.map(CancellationToken::cancelled));
        loop {
            let Some(until) = queued.ticket.as_ref().map(BulkheadTicket::wait_until) else {
                return Waited::Refused(now);
            };
            let mut timer = pin!(tokio::time::sleep(
                until.saturating_duration_since(now).into()
            ));
            let woke = poll_fn(|cx| {
                if let Some(Poll::Ready(())) = cancelled.as_mut().as_pin_mut().map(|c| c.poll(cx)) {
                    return Poll::Ready(Slept::Cancelled);
                }
                if woken.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Slept::Elapsed);
                }
                timer.as_mut().poll(cx).map(|()| Slept::Elapsed)
            })
            .await;
            if woke == Slept::Cancelled {
                return Waited::Cancelled; // `queued` leaves the queue
            }
            now = clock.now();
            woken.set(bulkhead.freed().notified());
            woken.as_mut().enable();
            let Some(ticket) = queued.ticket.take() else {
                return Waited::Refused(now);
            };
            match bulkhead.slots().on_slot_free(now, ticket) {
                Ok(BulkheadEntry::Entered(permit)) => return Waited::Entered(permit, now),
                Ok(BulkheadEntry::Queued(ticket)) => queued.ticket = Some(ticket),
                Err(_) => return Waited::Refused(now),
            }
        }
    }
}
