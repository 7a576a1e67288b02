use std::fmt;
use std::sync::Arc;

use stormguard_core::cell::Atomic;
use stormguard_core::limits::saturation::SaturationSignal;
use stormguard_core::limits::BulkheadPermit;
use stormguard_core::limits::{
    AdaptiveLimitSettings, AdaptiveSnapshot, AnyLimiter, AnyRule, BulkheadSettings,
    BulkheadSnapshot, LimitRule, SharedAdaptiveLimiter, SharedBulkhead, SharedQuota,
};
use stormguard_core::{Instant, Name, Parts, SettingsError, SharedBreaker, SharedBudget};

/// A rate limiter a policy puts in front of its breaker (see [`PolicyBuilder::rate_limit`]):
/// one of the core's lock-free limiters, of any rule (GCRA, a window with a cooldown, or a
/// quota per window sliding in segments), in an `Arc`, so clones, and every policy given one,
/// share its cells.
///
/// ```
/// use stormguard_core::{Instant, limits::AnyRule, limits::RateLimitSettings, limits::WindowLimitSettings};
/// use stormguard_core::limits::SlidingWindowSettings;
/// use stormguard_std::Limiter;
///
/// let api = Limiter::new(RateLimitSettings::per_second("api", 100)?);
/// let stream = Limiter::new(WindowLimitSettings::defaults("stream")); // 50 a minute
/// let search = Limiter::new(SlidingWindowSettings::defaults("search")); // 50 a minute
/// assert_eq!(api.name().as_str(), "api");
/// assert_eq!(stream.available_at(Instant::from_secs(1)), 50);
/// assert!(matches!(search.rule(), AnyRule::Sliding(_)));
/// # Ok::<(), stormguard_std::SettingsError>(())
/// ```
///
/// [`PolicyBuilder::rate_limit`]: crate::PolicyBuilder::rate_limit
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<dyn AnyLimiter + Send + Sync>,
}

impl Limiter {
    /// A shared limiter following `rule` (its validated settings), as good as new.
    pub fn new<R: LimitRule + Send + Sync + 'static>(rule: R) -> Limiter {
        Limiter::from_core(stormguard_core::limits::Limiter::<R, Atomic>::new(rule))
    }

    /// Takes ownership of one of the core's shared limiters.
    pub fn from_core<R: LimitRule + Send + Sync + 'static>(
        limiter: stormguard_core::limits::Limiter<R, Atomic>,
    ) -> Limiter {
        Limiter {
            inner: Arc::new(limiter),
        }
    }

    /// The limiter's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        self.inner.name()
    }

    /// Cells that could be taken at `now` (an instant of the policy's clock). Changes nothing.
    #[must_use]
    pub fn available_at(&self, now: Instant) -> u32 {
        self.inner.available(now)
    }

    /// The limiter's rule (its settings).
    #[must_use]
    pub fn rule(&self) -> AnyRule<'_> {
        self.inner.rule()
    }

    /// `true` when both handles share one limiter.
    #[must_use]
    pub fn same_as(&self, other: &Limiter) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The limiter, as a call's parts take it.
    #[inline]
    pub(crate) fn shared(&self) -> &(dyn AnyLimiter + Send + Sync) {
        &*self.inner
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("name", &self.name().as_str())
            .field("rule", &self.rule())
            .finish()
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

    /// Wakes one waiter if callers wait for a slot: after a call reported an attempt (which
    /// freed its slot), or a dropped call gave one back. A wake-up with no slot free is
    /// harmless: the waiter looks, and waits again.
    #[inline]
    pub(crate) fn wake_if_waiting(&self) {
        #[cfg(feature = "tokio")]
        if self.slots.queued() > 0 {
            self.freed.notify_one();
        }
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

/// The parts of one call of a policy with every optional part.
pub(crate) type CallParts<'a> = Parts<
    &'a SharedBreaker,
    &'a SharedBudget,
    &'a (dyn AnyLimiter + Send + Sync),
    &'a SharedQuota,
    &'a SharedBulkhead,
    &'a SharedAdaptiveLimiter,
    &'a SaturationSignal,
>;

/// The parts of one call of a policy with no optional part: the breaker (or none) and the
/// budget (or none), the others known absent, so a call built from them carries no code for
/// them.
pub(crate) type BreakerParts<'a> = Parts<&'a SharedBreaker, &'a SharedBudget>;
