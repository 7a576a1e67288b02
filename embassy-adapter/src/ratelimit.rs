//! Rate limiting as an optional step of a [`Policy`](crate::Policy): the core's limiters in front
//! of the breaker, through the core's [`RateLimited`] admission, so every attempt (retries
//! included) takes a cell and a refusal is the guarded rejection `RateLimited` with the time
//! until the next cell as its `retry_after`.
//!
//! On a microcontroller, share a single-threaded limiter ([`RateLimiter`], GCRA,
//! [`WindowLimiter`], window with cooldown, or [`SlidingWindowLimiter`], a quota per window
//! sliding in segments) behind the embassy raw mutex: [`RateLimit`]. The
//! core's lock-free [`SharedRateLimiter`] and [`SharedWindowLimiter`] work too, but need 64-bit
//! compare-and-swap, which thumbv6m/v7m/v7em and riscv32imc do not have (portable-atomic's
//! fallback is a spinlock an interrupt can deadlock); they suit a host build.

use core::cell::RefCell;
use core::fmt;

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;
use stormguard_core::{
    call::Admission, limits::Limit, limits::RateLimited, limits::RateLimiter,
    limits::SharedRateLimiter, limits::SharedWindowLimiter, limits::SlidingWindowLimiter,
    limits::WindowLimiter, Duration, Instant, RefusalReason, Refused,
};

use crate::EmbassyClock;

/// What a locked limiter answers in the impossible case that it is found borrowed (this crate
/// runs no caller code under its lock): a refusal, never a panic, with no time promised.
const BUSY: Refused = Refused {
    reason: RefusalReason::RateLimited,
    retry_after: Duration::ZERO,
};

/// One of the core's single-threaded limiters ([`RateLimiter`] or [`WindowLimiter`]) behind an
/// `embassy_sync` blocking raw mutex, `const`-constructible so it can be a `static`; locked only
/// for one decision at a time, never across an `.await`. Give it to
/// [`Policy::with_rate_limit`](crate::Policy::with_rate_limit).
///
/// ```
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
/// use stormguard_core::{limits::RateLimitSettings, limits::RateLimiter};
/// use stormguard_embassy::RateLimit;
///
/// // 10 uplink messages a second, in bursts of up to 10.
/// static UPLINK: RateLimit<Cs, RateLimiter> = RateLimit::new(RateLimiter::new(
///     match RateLimitSettings::per_second("uplink", 10) {
///         Ok(s) => s,
///         Err(_) => panic!("invalid rate"),
///     },
/// ));
/// # use critical_section as _; // the host's critical-section implementation, for this test
/// # embassy_time::MockDriver::get().reset();
/// assert_eq!(UPLINK.available(), 10);
/// ```
pub struct RateLimit<M: RawMutex, L> {
    inner: Mutex<M, RefCell<L>>,
}

impl<M: RawMutex, L> RateLimit<M, L> {
    /// Shares `limiter` (a [`RateLimiter`], a [`WindowLimiter`] or a [`SlidingWindowLimiter`]).
    #[must_use]
    pub const fn new(limiter: L) -> Self {
        RateLimit {
            inner: Mutex::new(RefCell::new(limiter)),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut L) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow_mut().ok().map(|mut l| f(&mut l)))
    }

    fn read<R>(&self, f: impl FnOnce(&L) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow().ok().map(|l| f(&l)))
    }
}

macro_rules! limiter_api {
    ($ty:ty) => {
        impl<M: RawMutex> RateLimit<M, $ty> {
            /// Takes one cell now (embassy's clock), or refuses with the time until one is
            /// available. A [`Policy`](crate::Policy) with this step does this before every
            /// attempt.
            pub fn check(&self) -> Result<(), Refused> {
                let now = EmbassyClock::new().now();
                self.with(|l| l.check(now)).unwrap_or(Err(BUSY))
            }

            /// Cells available now.
            #[must_use]
            pub fn available(&self) -> u32 {
                let now = EmbassyClock::new().now();
                self.read(|l| l.available(now)).unwrap_or(0)
            }
        }
    };
}
limiter_api!(RateLimiter);
limiter_api!(WindowLimiter);
limiter_api!(SlidingWindowLimiter);

impl<M: RawMutex, L> fmt::Debug for RateLimit<M, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit").finish_non_exhaustive()
    }
}

/// A [`RateLimit`] seen through the core's [`Limit`] trait: each method locks the limiter for
/// one decision.
pub struct RateLimitRef<'a, M: RawMutex, L> {
    limit: &'a RateLimit<M, L>,
}

impl<M: RawMutex, L> Clone for RateLimitRef<'_, M, L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: RawMutex, L> Copy for RateLimitRef<'_, M, L> {}

impl<M: RawMutex, L> fmt::Debug for RateLimitRef<'_, M, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitRef").finish_non_exhaustive()
    }
}

impl<M: RawMutex, L: Limit> Limit for RateLimitRef<'_, M, L> {
    fn take(&mut self, now: Instant) -> Result<(), Refused> {
        self.limit.with(|l| l.take(now)).unwrap_or(Err(BUSY))
    }

    fn peek(&self, now: Instant) -> Result<(), Refused> {
        self.limit.read(|l| l.peek(now)).unwrap_or(Err(BUSY))
    }
}

mod sealed {
    pub trait Source {}
    impl<M: embassy_sync::blocking_mutex::raw::RawMutex> Source
        for super::RateLimit<M, stormguard_core::limits::RateLimiter>
    {
    }
    impl<M: embassy_sync::blocking_mutex::raw::RawMutex> Source
        for super::RateLimit<M, stormguard_core::limits::WindowLimiter>
    {
    }
    impl<M: embassy_sync::blocking_mutex::raw::RawMutex> Source
        for super::RateLimit<M, stormguard_core::limits::SlidingWindowLimiter>
    {
    }
    impl Source for stormguard_core::limits::SharedRateLimiter {}
    impl Source for stormguard_core::limits::SharedWindowLimiter {}

    pub trait Step {}
    impl Step for super::NoRateLimit {}
    impl<X: super::LimitSource + ?Sized> Step for &X {}
}

/// A limiter a [`Policy`](crate::Policy) can put in front of its breaker (sealed):
/// [`RateLimit`] over a [`RateLimiter`], a [`WindowLimiter`] or a [`SlidingWindowLimiter`], a
/// [`SharedRateLimiter`], a [`SharedWindowLimiter`].
pub trait LimitSource: sealed::Source {
    /// The handle an attempt takes its cell through.
    type Handle<'a>: Limit + Copy
    where
        Self: 'a;
    /// The handle.
    fn limit(&self) -> Self::Handle<'_>;
}

impl<M: RawMutex> LimitSource for RateLimit<M, RateLimiter> {
    type Handle<'a>
        = RateLimitRef<'a, M, RateLimiter>
    where
        Self: 'a;
    fn limit(&self) -> Self::Handle<'_> {
        RateLimitRef { limit: self }
    }
}

impl<M: RawMutex> LimitSource for RateLimit<M, WindowLimiter> {
    type Handle<'a>
        = RateLimitRef<'a, M, WindowLimiter>
    where
        Self: 'a;
    fn limit(&self) -> Self::Handle<'_> {
        RateLimitRef { limit: self }
    }
}

impl<M: RawMutex> LimitSource for RateLimit<M, SlidingWindowLimiter> {
    type Handle<'a>
        = RateLimitRef<'a, M, SlidingWindowLimiter>
    where
        Self: 'a;
    fn limit(&self) -> Self::Handle<'_> {
        RateLimitRef { limit: self }
    }
}

impl LimitSource for SharedRateLimiter {
    type Handle<'a> = &'a SharedRateLimiter;
    fn limit(&self) -> &SharedRateLimiter {
        self
    }
}

impl LimitSource for SharedWindowLimiter {
    type Handle<'a> = &'a SharedWindowLimiter;
    fn limit(&self) -> &SharedWindowLimiter {
        self
    }
}

/// A policy without a rate limit (the default): its breaker is its admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NoRateLimit;

/// The rate-limit step of a [`Policy`](crate::Policy) (sealed): [`NoRateLimit`], or a
/// `&`[`LimitSource`] set by [`Policy::with_rate_limit`](crate::Policy::with_rate_limit).
pub trait LimitStep: sealed::Step {
    /// The admission with this step in front of `A`.
    #[doc(hidden)]
    type Wrap<A: Admission>: Admission;
    /// Puts this step in front of `admission`.
    #[doc(hidden)]
    fn wrap<A: Admission>(&self, admission: A) -> Self::Wrap<A>;
}

impl LimitStep for NoRateLimit {
    type Wrap<A: Admission> = A;
    #[inline]
    fn wrap<A: Admission>(&self, admission: A) -> A {
        admission
    }
}

impl<'r, X: LimitSource + ?Sized> LimitStep for &'r X {
    type Wrap<A: Admission> = RateLimited<A, X::Handle<'r>>;
    fn wrap<A: Admission>(&self, admission: A) -> Self::Wrap<A> {
        RateLimited::new(admission, (**self).limit())
    }
}
