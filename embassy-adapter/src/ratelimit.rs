//! Rate limiting as an optional part of a [`Policy`](crate::Policy): one of the core's
//! limiters in front of the breaker, so every attempt (retries included) takes a cell and a
//! refusal is the guarded rejection `RateLimited` with the time until the next cell as its
//! `retry_after`.
//!
//! On a microcontroller, share a single-threaded limiter ([`RateLimiter`], GCRA,
//! [`WindowLimiter`], window with cooldown, or [`SlidingWindowLimiter`], a quota per window
//! sliding in segments) behind the embassy raw mutex: [`RateLimit`]. The core's lock-free
//! [`SharedRateLimiter`](stormguard_core::limits::SharedRateLimiter) and its siblings work too,
//! but need 64-bit compare-and-swap, which thumbv6m/v7m/v7em and riscv32imc do not have
//! (portable-atomic's fallback is a spinlock an interrupt can deadlock); they suit a host build.

use core::fmt;

use embassy_sync::blocking_mutex::raw::RawMutex;
use stormguard_core::limits::{LimitRule, Limiter};
use stormguard_core::part::{Limit, Locked};
use stormguard_core::Refused;

#[cfg(doc)]
use stormguard_core::limits::{RateLimiter, SlidingWindowLimiter, WindowLimiter};

use crate::shared::Shared;
use crate::EmbassyClock;

/// One of the core's single-threaded limiters ([`RateLimiter`], [`WindowLimiter`] or
/// [`SlidingWindowLimiter`]) in a [`Shared`], `const`-constructible so it can be a `static`;
/// locked only for one decision at a time, never across an `.await`. Give its
/// [`part`](RateLimit::part) to [`Policy::with_rate_limit`](crate::Policy::with_rate_limit).
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
    shared: Shared<M, L>,
}

impl<M: RawMutex, L> RateLimit<M, L> {
    /// Shares `limiter` (a [`RateLimiter`], a [`WindowLimiter`] or a [`SlidingWindowLimiter`]).
    #[must_use]
    pub const fn new(limiter: L) -> Self {
        RateLimit {
            shared: Shared::from_core(limiter),
        }
    }

    /// The limiter as the core's call driver sees it, for
    /// [`Policy::with_rate_limit`](crate::Policy::with_rate_limit): the core's [`Locked`]
    /// view, which takes the lock for each decision.
    #[must_use]
    pub const fn part(&self) -> Locked<'_, Shared<M, L>> {
        self.shared.part()
    }
}

impl<M: RawMutex, R: LimitRule> RateLimit<M, Limiter<R>> {
    /// Takes one cell now (embassy's clock), or refuses with the time until one is available.
    /// A [`Policy`](crate::Policy) with this limiter does this before every attempt.
    pub fn check(&self) -> Result<(), Refused> {
        self.part().take(EmbassyClock::new().now())
    }

    /// Cells available now.
    #[must_use]
    pub fn available(&self) -> u32 {
        let now = EmbassyClock::new().now();
        self.shared.read(|l| l.available(now)).unwrap_or(0)
    }
}

impl<M: RawMutex, L> fmt::Debug for RateLimit<M, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit").finish_non_exhaustive()
    }
}
