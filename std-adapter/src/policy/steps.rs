use std::fmt;
use std::sync::Arc;

use stormguard_core::{
    call::OptionalBreaker, limits::saturation::SaturationAware,
    limits::saturation::SaturationSignal, limits::AdaptiveLimitSettings, limits::AdaptiveSnapshot,
    limits::AdaptivelyLimited, limits::BulkheadPermit, limits::BulkheadSettings,
    limits::BulkheadSlots, limits::BulkheadSnapshot, limits::Bulkheaded, limits::Limit,
    limits::RateLimitSettings, limits::RateLimited, limits::SharedAdaptiveLimiter,
    limits::SharedBulkhead, limits::SharedQuota, limits::SharedRateLimiter,
    limits::SharedSlidingWindowLimiter, limits::SharedWindowLimiter, limits::SlidingWindowSettings,
    limits::WindowLimitSettings, Instant, Name, Refused, SettingsError, SharedBreaker,
    SharedBudget,
};

/// The budget side of a policy's calls: its shared budget, or none (the core's `Option`).
pub(crate) type Funds<'a> = Option<&'a SharedBudget>;

/// A rate limiter a policy puts in front of its breaker (see [`PolicyBuilder::rate_limit`]):
/// the core's lock-free [`SharedRateLimiter`] (GCRA), [`SharedWindowLimiter`] (a window with
/// a cooldown) or [`SharedSlidingWindowLimiter`] (a quota per window sliding in segments) in an
/// `Arc`, so clones, and every policy given one, share its cells.
///
/// ```
/// use stormguard_core::{Instant, limits::RateLimitSettings, limits::WindowLimitSettings};
/// use stormguard_core::limits::SlidingWindowSettings;
/// use stormguard_std::Limiter;
///
/// let api = Limiter::gcra(RateLimitSettings::per_second("api", 100)?);
/// let stream = Limiter::window(WindowLimitSettings::defaults("stream")); // 50 a minute
/// let search = Limiter::sliding(SlidingWindowSettings::defaults("search")); // 50 a minute
/// assert_eq!(api.name().as_str(), "api");
/// assert_eq!(stream.available_at(Instant::from_secs(1)), 50);
/// assert!(search.as_sliding().is_some());
/// # Ok::<(), stormguard_std::SettingsError>(())
/// ```
///
/// [`PolicyBuilder::rate_limit`]: crate::PolicyBuilder::rate_limit
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<LimiterForm>,
}

enum LimiterForm {
    Gcra(SharedRateLimiter),
    Window(SharedWindowLimiter),
    Sliding(SharedSlidingWindowLimiter),
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

    /// A segmented sliding-window limiter with `settings`, empty at start.
    pub fn sliding(settings: SlidingWindowSettings) -> Limiter {
        Limiter::from_sliding(SharedSlidingWindowLimiter::new(settings))
    }

    /// Takes ownership of a shared sliding-window limiter.
    pub fn from_sliding(limiter: SharedSlidingWindowLimiter) -> Limiter {
        Limiter {
            inner: Arc::new(LimiterForm::Sliding(limiter)),
        }
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
            LimiterForm::Sliding(l) => l.name(),
        }
    }

    /// Cells that could be taken at `now` (an instant of the policy's clock). Changes nothing.
    #[must_use]
    pub fn available_at(&self, now: Instant) -> u32 {
        match &*self.inner {
            LimiterForm::Gcra(l) => l.available(now),
            LimiterForm::Window(l) => l.available(now),
            LimiterForm::Sliding(l) => l.available(now),
        }
    }

    /// The shared GCRA limiter, if this is one.
    #[must_use]
    pub fn as_gcra(&self) -> Option<&SharedRateLimiter> {
        match &*self.inner {
            LimiterForm::Gcra(l) => Some(l),
            LimiterForm::Window(_) | LimiterForm::Sliding(_) => None,
        }
    }

    /// The shared window limiter, if this is one.
    #[must_use]
    pub fn as_window(&self) -> Option<&SharedWindowLimiter> {
        match &*self.inner {
            LimiterForm::Window(l) => Some(l),
            LimiterForm::Gcra(_) | LimiterForm::Sliding(_) => None,
        }
    }

    /// The shared sliding-window limiter, if this is one.
    #[must_use]
    pub fn as_sliding(&self) -> Option<&SharedSlidingWindowLimiter> {
        match &*self.inner {
            LimiterForm::Sliding(l) => Some(l),
            LimiterForm::Gcra(_) | LimiterForm::Window(_) => None,
        }
    }

    /// `true` when both handles share one limiter.
    #[must_use]
    pub fn same_as(&self, other: &Limiter) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(super) fn cells(&self) -> Cells<'_> {
        match &*self.inner {
            LimiterForm::Gcra(l) => Cells::Gcra(l),
            LimiterForm::Window(l) => Cells::Window(l),
            LimiterForm::Sliding(l) => Cells::Sliding(l),
        }
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let form = match &*self.inner {
            LimiterForm::Gcra(_) => "gcra",
            LimiterForm::Window(_) => "window",
            LimiterForm::Sliding(_) => "sliding",
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
    Sliding(&'a SharedSlidingWindowLimiter),
}

impl Limit for Cells<'_> {
    #[inline]
    fn take(&mut self, now: Instant) -> Result<(), Refused> {
        match self {
            Cells::Gcra(l) => Limit::take(l, now),
            Cells::Window(l) => Limit::take(l, now),
            Cells::Sliding(l) => Limit::take(l, now),
        }
    }
    #[inline]
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        match self {
            Cells::Gcra(l) => Limit::peek(l, now),
            Cells::Window(l) => Limit::peek(l, now),
            Cells::Sliding(l) => Limit::peek(l, now),
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
///
/// [`PolicyBuilder::bulkhead`]: crate::PolicyBuilder::bulkhead
#[derive(Clone)]
pub struct Bulkhead {
    pub(super) inner: Arc<BulkheadShared>,
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

/// An adaptive concurrency limiter a policy puts in front of its breaker (see
/// [`PolicyBuilder::adaptive_limit`]): the core's lock-free [`SharedAdaptiveLimiter`] in an
/// `Arc`, so clones, and every policy given one, share its limit and what it learns.
///
/// Every attempt (a retry, a hedge) holds a slot while it runs, none during backoff waits; a
/// successful attempt's latency teaches it. Its limit and latency baseline are readable here,
/// in the policy's [`Explain`](stormguard_core::policy::Explain), in the health registry and in
/// the metrics.
///
/// ```
/// use stormguard_core::limits::AdaptiveLimitSettings;
/// use stormguard_std::AdaptiveLimit;
///
/// let db = AdaptiveLimit::new(AdaptiveLimitSettings::builder("db").limits(2, 50).build()?);
/// assert_eq!((db.limit(), db.in_flight(), db.baseline()), (20, 0, None));
/// # Ok::<(), stormguard_std::SettingsError>(())
/// ```
///
/// [`PolicyBuilder::adaptive_limit`]: crate::PolicyBuilder::adaptive_limit
#[derive(Clone)]
pub struct AdaptiveLimit {
    pub(super) inner: Arc<SharedAdaptiveLimiter>,
}

impl AdaptiveLimit {
    /// A limiter at its initial limit, with validated `settings`.
    pub fn new(settings: AdaptiveLimitSettings) -> AdaptiveLimit {
        AdaptiveLimit {
            inner: Arc::new(SharedAdaptiveLimiter::new(settings)),
        }
    }

    /// The core's shared limiter (to read it, or use it outside a policy).
    #[must_use]
    pub fn shared(&self) -> &SharedAdaptiveLimiter {
        &self.inner
    }

    /// The limiter's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        self.inner.name()
    }

    /// The settings it was built with.
    #[must_use]
    pub fn settings(&self) -> &AdaptiveLimitSettings {
        self.inner.settings()
    }

    /// The current limit on attempts in flight.
    #[must_use]
    pub fn limit(&self) -> u32 {
        self.inner.limit()
    }

    /// Attempts in flight now.
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        self.inner.in_flight()
    }

    /// The latency baseline (the learned p10) as read at the last round's end, if any.
    #[must_use]
    pub fn baseline(&self) -> Option<stormguard_core::Duration> {
        self.inner.baseline()
    }

    /// The limit, counts and baseline.
    #[must_use]
    pub fn snapshot(&self) -> AdaptiveSnapshot {
        self.inner.snapshot()
    }

    /// `true` when both handles share one limiter.
    #[must_use]
    pub fn same_as(&self, other: &AdaptiveLimit) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for AdaptiveLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveLimit")
            .field("name", &self.name().as_str())
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// A bulkhead's slots as the core's [`Bulkheaded`] takes them, holding the slot a caller won
/// by waiting until its first attempt takes it, and waking a waiter whenever a slot is freed.
pub(crate) struct Slots<'a> {
    pub(super) bulkhead: &'a BulkheadShared,
    pub(super) held: Option<BulkheadPermit>,
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
    pub(super) name: &'a Name,
    pub(super) breaker: Option<&'a SharedBreaker>,
    pub(super) limiter: Option<Cells<'a>>,
    pub(super) bulkhead: Option<&'a BulkheadShared>,
    pub(super) adaptive: Option<&'a SharedAdaptiveLimiter>,
    /// The quota the dependency published, kept per policy (per host in a keyed table).
    pub(super) quota: Option<&'a SharedQuota>,
    /// The signal of the runtime's saturation, when latencies learned are held during it.
    pub(super) saturation: Option<&'a SaturationSignal>,
}

impl<'a> Steps<'a> {
    /// The admission of one call: the breaker (or none), its outcomes judged against the
    /// runtime's saturation (when the policy watches it), behind the adaptive limiter, behind
    /// the bulkhead, behind the rate limiter, behind the published quota, as the core composes
    /// them. `held` is a slot the call already won by waiting.
    #[inline]
    pub(super) fn admission(self, held: Option<BulkheadPermit>) -> CallAdmission<'a> {
        RateLimited::new(
            RateLimited::new(
                Bulkheaded::new(
                    AdaptivelyLimited::new(
                        SaturationAware::new(
                            OptionalBreaker::new(self.breaker, *self.name),
                            self.saturation,
                        ),
                        self.adaptive,
                    ),
                    self.bulkhead.map(|bulkhead| Slots { bulkhead, held }),
                ),
                self.limiter,
            ),
            self.quota,
        )
    }
}

/// The admission side of a call: the breaker with the optional steps in front of it, each one
/// the core's part that may be absent.
pub(crate) type CallAdmission<'a> = RateLimited<
    RateLimited<
        Bulkheaded<
            AdaptivelyLimited<
                SaturationAware<'a, OptionalBreaker<&'a SharedBreaker>>,
                Option<&'a SharedAdaptiveLimiter>,
            >,
            Option<Slots<'a>>,
        >,
        Option<Cells<'a>>,
    >,
    Option<&'a SharedQuota>,
>;
