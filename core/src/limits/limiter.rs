//! The rate limiter, one type over its rule and its storage (see the [`limits`](crate::limits)
//! module docs).

use core::fmt;

use super::gcra::RateLimitSettings;
use super::quota::QuotaSettings;
use super::sliding::SlidingWindowSettings;
use super::window::WindowLimitSettings;
use crate::cell::sealed::Slot;
use crate::cell::{const_unless_loom, slot, Atomic, Local, Storage};
use crate::error::{RefusalReason, Refused};
use crate::name::Name;
use crate::part::Limit;
use crate::time::{Duration, Instant};

/// How far behind the state's time a reading may lie and still be taken for a late reading of
/// the same clock (a racing thread) rather than a clock that stepped back (see the module docs).
pub(super) const LATE_READING_NS: u64 = 1_000_000_000;

/// The default idle period of a keyed limiter's entries (document 004's stale-entry timeout).
pub(super) const DEFAULT_IDLE: Duration = Duration::from_secs(5 * 60);

/// A rate limiter's refusal.
pub(super) const fn limited(retry_after: Duration) -> Refused {
    Refused {
        reason: RefusalReason::RateLimited,
        retry_after,
    }
}

pub(crate) mod sealed {
    use crate::cell::sealed::Bits;
    use crate::error::Refused;
    use crate::name::Name;
    use crate::time::{Duration, Instant};

    /// The rule of a limiter: what its state means and how a request changes it. Every form
    /// (`Local`, `Atomic`, keyed) drives these pure functions; none is written twice.
    pub trait Rule: Copy {
        /// The state's width.
        type State: Bits;
        /// The decision for `n` cells at `now`, and the state after it.
        fn decide(
            &self,
            state: Self::State,
            now: Instant,
            n: u32,
        ) -> (Result<(), Refused>, Self::State);
        /// Cells a request at `now` could take.
        fn available(&self, state: Self::State, now: Instant) -> u32;
        /// Time from `now` until the state is as good as new (zero if it is).
        fn until_full(&self, state: Self::State, now: Instant) -> Duration;
        /// The state once a clock that stepped back is accounted for (what a request would
        /// store).
        fn settle(&self, state: Self::State, now: Instant) -> Self::State;
        /// The quiet time before a keyed entry may be evicted.
        fn idle(&self) -> Duration;
        /// The limiter's name.
        fn name(&self) -> &Name;
        /// The rule, as one of the four.
        fn any(&self) -> super::AnyRule<'_>;
    }
}

/// A limiter's rule, whichever of the four it is: for a caller that holds a limiter with its
/// rule erased ([`AnyLimiter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnyRule<'a> {
    /// GCRA.
    Gcra(&'a RateLimitSettings),
    /// Document 004's window with cooldown.
    Window(&'a WindowLimitSettings),
    /// The segmented sliding window.
    Sliding(&'a SlidingWindowSettings),
    /// A published quota.
    Quota(&'a QuotaSettings),
}

/// The rule a [`Limiter`] (or a [`KeyedLimiter`](super::KeyedLimiter)) applies, named by its
/// settings: [`RateLimitSettings`] (GCRA), [`WindowLimitSettings`] (window with cooldown),
/// [`SlidingWindowSettings`] (sliding window) or [`QuotaSettings`] (a published quota). Sealed:
/// those are the four.
///
/// ```
/// use stormguard_core::limits::{KeyedLimiter, LimitRule, RateLimitSettings, WindowLimitSettings};
/// fn table<R: LimitRule>(rule: R) -> KeyedLimiter<u64, R, 64> {
///     KeyedLimiter::new(rule)
/// }
/// let gcra = table(RateLimitSettings::defaults("api"));
/// let window = table(WindowLimitSettings::defaults("streams"));
/// assert_eq!(gcra.capacity() + window.capacity(), 128);
/// ```
pub trait LimitRule: sealed::Rule + fmt::Debug {}

impl LimitRule for RateLimitSettings {}
impl LimitRule for WindowLimitSettings {}
impl LimitRule for SlidingWindowSettings {}
impl LimitRule for QuotaSettings {}

/// A rate limiter: the rule `R` over a state kept in storage `C` (see the [module docs](crate::limits)
/// for the rules, the storages and the names of the everyday forms).
///
/// ```
/// use stormguard_core::{Duration, Instant, RefusalReason};
/// use stormguard_core::limits::{RateLimiter, RateLimitSettings};
///
/// let limiter = RateLimiter::new(RateLimitSettings::per_second("search", 10)?);
/// let now = Instant::from_secs(1);
/// for _ in 0..10 {
///     limiter.check(now).expect("a full burst passes at once");
/// }
/// let refused = limiter.check(now).unwrap_err();
/// assert_eq!(refused.reason, RefusalReason::RateLimited);
/// assert_eq!(refused.retry_after, Duration::from_millis(100));
/// assert!(limiter.check(now + refused.retry_after).is_ok());
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
///
/// The shared form lives in a `static` as well:
///
/// ```
/// use stormguard_core::{Instant, limits::RateLimitSettings, limits::SharedRateLimiter};
///
/// static UPLOADS: SharedRateLimiter = SharedRateLimiter::new(RateLimitSettings::defaults("uploads"));
///
/// let now = Instant::from_secs(1);
/// assert!(UPLOADS.check(now).is_ok());
/// assert_eq!(UPLOADS.available(now), 49);
/// ```
#[derive(Debug)]
pub struct Limiter<R: LimitRule, C: Storage = Local> {
    rule: R,
    state: <C as crate::cell::sealed::Storage>::Cell<R::State>,
}

/// A GCRA limiter for one thread: see [`Limiter`].
pub type RateLimiter = Limiter<RateLimitSettings, Local>;
/// A GCRA limiter shared by many threads through `&self`, lock-free: see [`Limiter`].
pub type SharedRateLimiter = Limiter<RateLimitSettings, Atomic>;

/// Document 004's per-stream limiter for one stream (up to `events` per window, then a
/// cooldown), for one thread: see [`Limiter`].
///
/// ```
/// use stormguard_core::{Duration, Instant, limits::WindowLimiter, limits::WindowLimitSettings};
///
/// let stream = WindowLimiter::new(WindowLimitSettings::defaults("orders"));
/// let now = Instant::from_secs(1);
/// for _ in 0..50 {
///     stream.check(now).expect("50 events per window");
/// }
/// let refused = stream.check(now).unwrap_err();
/// assert_eq!(refused.retry_after, Duration::from_secs(30)); // the cooldown
/// let later = now + Duration::from_secs(10);
/// assert_eq!(stream.check(later).unwrap_err().retry_after, Duration::from_secs(20));
/// assert!(stream.check(now + Duration::from_secs(30)).is_ok()); // a fresh window
/// ```
pub type WindowLimiter = Limiter<WindowLimitSettings, Local>;
/// Document 004's per-stream limiter shared by many threads, lock-free: see [`Limiter`].
pub type SharedWindowLimiter = Limiter<WindowLimitSettings, Atomic>;

/// A segmented sliding-window limiter for one thread: see [`Limiter`].
///
/// ```
/// use stormguard_core::{Duration, Instant, limits::SlidingWindowLimiter, limits::SlidingWindowSettings};
///
/// let settings = SlidingWindowSettings::builder("search")
///     .quota(4)
///     .window(Duration::from_secs(8)) // 8 segments of 1 s
///     .build()?;
/// let limiter = SlidingWindowLimiter::new(settings);
/// limiter.check(Instant::from_millis(500))?; // segment 0
/// for _ in 0..3 {
///     limiter.check(Instant::from_millis(2_500))?; // segment 2
/// }
/// let refused = limiter.check(Instant::from_secs(3)).unwrap_err();
/// // Segment 0 leaves the window when segment 8 begins.
/// assert_eq!(refused.retry_after, Duration::from_secs(5));
/// assert!(limiter.check(Instant::from_secs(8)).is_ok());
/// assert_eq!(limiter.available(Instant::from_secs(8)), 0);
/// assert_eq!(limiter.available(Instant::from_secs(10)), 3); // segment 2 has left, 8 holds one
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type SlidingWindowLimiter = Limiter<SlidingWindowSettings, Local>;
/// A segmented sliding-window limiter shared by many threads, lock-free: see [`Limiter`].
pub type SharedSlidingWindowLimiter = Limiter<SlidingWindowSettings, Atomic>;

/// A published quota kept by one owner: see the [`quota`](super::quota) module.
pub type Quota = Limiter<QuotaSettings, Local>;
/// A published quota shared by every task calling one host, lock-free: see the
/// [`quota`](super::quota) module.
pub type SharedQuota = Limiter<QuotaSettings, Atomic>;

impl<R: LimitRule, C: Storage> Limiter<R, C> {
    const_unless_loom! {
        /// A limiter as good as new (GCRA: full; the windows: empty; a quota: none known). It
        /// needs no clock reading: time counts from the `now` it is given. Usable in a `static`.
        #[must_use]
        pub fn new(rule: R) -> Self {
            Limiter { rule, state: slot!(<C as crate::cell::sealed::Storage>::Cell<R::State>) }
        }
    }

    /// Takes one cell at `now`, or refuses with the time until one is available. (Unlike
    /// [`Breaker::check`](crate::Breaker::check), which only looks, a limiter's `check`
    /// consumes.)
    #[inline]
    pub fn check(&self, now: Instant) -> Result<(), Refused> {
        self.check_n(now, 1)
    }

    /// Takes `n` cells at once, or none: refused with the time until all `n` are available
    /// ([`Duration::MAX`] when `n` is more than the limiter ever holds at once). Zero cells
    /// always pass. (The window with cooldown: a batch that does not fit in the window starts
    /// the cooldown.)
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant, limits::RateLimiter, limits::RateLimitSettings};
    /// let limiter = RateLimiter::new(RateLimitSettings::per_second("bytes", 1000)?);
    /// let now = Instant::ZERO;
    /// limiter.check_n(now, 600)?;
    /// assert_eq!(limiter.check_n(now, 600).unwrap_err().retry_after, Duration::from_millis(200));
    /// assert_eq!(limiter.check_n(now, 1001).unwrap_err().retry_after, Duration::MAX);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n(&self, now: Instant, n: u32) -> Result<(), Refused> {
        self.state.update(|state| self.rule.decide(state, now, n))
    }

    /// Would one cell be granted at `now`? Changes nothing.
    #[inline]
    pub fn peek(&self, now: Instant) -> Result<(), Refused> {
        self.rule.decide(self.state.load(), now, 1).0
    }

    /// Cells a request at `now` could take. Changes nothing.
    #[must_use]
    pub fn available(&self, now: Instant) -> u32 {
        self.rule.available(self.state.load(), now)
    }

    /// The settings (the rule) the limiter was built with.
    #[must_use]
    pub const fn settings(&self) -> &R {
        &self.rule
    }

    /// The limiter's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        self.rule.name()
    }

    /// The state, for the rule's own readings.
    pub(super) fn load(&self) -> R::State {
        self.state.load()
    }

    /// Replaces the state by `step` of it (load / step / compare-exchange).
    pub(super) fn update(&self, mut step: impl FnMut(R::State) -> R::State) {
        self.state.update(|s| ((), step(s)));
    }
}

/// Clones the limiter and its state (the `Local` form: its state is plain data).
impl<R: LimitRule> Clone for Limiter<R, Local> {
    fn clone(&self) -> Self {
        Limiter {
            rule: self.rule,
            state: core::cell::Cell::new(self.state.get()),
        }
    }
}

#[cfg(feature = "defmt")]
impl<R: LimitRule, C: Storage> defmt::Format for Limiter<R, C> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "Limiter({})", self.name());
    }
}

impl<R: LimitRule, C: Storage> fmt::Display for Limiter<R, C> {
    /// E.g. `limiter `search``.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "limiter `{}`", self.name())
    }
}

/// A [`Limiter`] whose rule is erased (`&dyn AnyLimiter`): what an adapter keeps when its
/// policy may take a limiter of any rule. Still a [`Limit`], so a call's
/// [`Parts`](crate::Parts) take one by reference as they take any limiter.
///
/// ```
/// use stormguard_core::limits::{AnyLimiter, AnyRule, RateLimitSettings, SharedRateLimiter};
/// use stormguard_core::limits::{SharedWindowLimiter, WindowLimitSettings};
/// use stormguard_core::Instant;
///
/// let gcra = SharedRateLimiter::new(RateLimitSettings::per_second("api", 10)?);
/// let window = SharedWindowLimiter::new(WindowLimitSettings::defaults("stream"));
/// let limiters: [&dyn AnyLimiter; 2] = [&gcra, &window];
/// assert_eq!(limiters[1].available(Instant::ZERO), 50);
/// assert!(matches!(limiters[0].rule(), AnyRule::Gcra(_)));
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
pub trait AnyLimiter: Limit + fmt::Debug {
    /// The limiter's name.
    fn name(&self) -> &Name;
    /// Cells a request at `now` could take. Changes nothing.
    fn available(&self, now: Instant) -> u32;
    /// The limiter's rule.
    fn rule(&self) -> AnyRule<'_>;
}

impl<R: LimitRule, C: Storage> AnyLimiter for Limiter<R, C> {
    fn name(&self) -> &Name {
        Limiter::name(self)
    }
    fn available(&self, now: Instant) -> u32 {
        Limiter::available(self, now)
    }
    fn rule(&self) -> AnyRule<'_> {
        self.rule.any()
    }
}

/// The call driver's rate limiter (and quota): one cell per attempt.
impl<R: LimitRule, C: Storage> Limit for Limiter<R, C> {
    #[inline]
    fn take(&self, now: Instant) -> Result<(), Refused> {
        self.check(now)
    }
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        Limiter::peek(self, now)
    }
}
