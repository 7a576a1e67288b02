//! The local limits on calls: the rate limiters (one [`Limiter`] over a rule: GCRA, the window
//! with cooldown, the segmented sliding window, or the quota a dependency publishes; and a
//! [`KeyedLimiter`] of them per key), the retry budget, the bulkhead, the adaptive concurrency
//! limiter, and the caller's own saturation.
//!
//! # Rate limiters
//! One [`Limiter`], generic over its rule and its storage.
//!
//! The rule is what the limiter enforces, named by its settings type: GCRA
//! ([`RateLimitSettings`], the default), document 004's window with cooldown
//! ([`WindowLimitSettings`]), the segmented sliding window ([`SlidingWindowSettings`]), or a quota
//! the dependency published ([`QuotaSettings`]). The storage is where its state lives:
//! [`Local`](crate::cell::Local) (a `Cell`, for one thread or behind the caller's lock) or
//! [`Atomic`](crate::cell::Atomic) (lock-free, shared through `&self`). Every form runs the same
//! pure rule by load / step / compare-exchange, so the forms decide identically for any
//! sequential input. The everyday forms have names:
//!
//! | rule | one thread | shared, lock-free | per key |
//! |---|---|---|---|
//! | GCRA | [`RateLimiter`] | [`SharedRateLimiter`] | [`KeyedRateLimiter`] |
//! | window with cooldown | [`WindowLimiter`] | [`SharedWindowLimiter`] | [`KeyedWindowLimiter`] |
//! | sliding window | [`SlidingWindowLimiter`] | [`SharedSlidingWindowLimiter`] | [`KeyedSlidingWindowLimiter`] |
//! | published quota | [`Quota`] | [`SharedQuota`] | |
//!
//! [`check`](Limiter::check) takes a cell or refuses with [`RefusalReason::RateLimited`](crate::RefusalReason::RateLimited) (a
//! quota: [`RefusalReason::QuotaReserve`](crate::RefusalReason::QuotaReserve)) and the exact time until asking again succeeds.
//! Reading ([`available`](Limiter::available)) changes nothing.
//!
//! ## Memory
//! The state is one word (8 bytes; 16 for the sliding window and the quota); the rest is the
//! rule's settings (the 40-byte [`Name`](crate::Name) among them): a GCRA limiter is 88 bytes on a 64-bit
//! host, a window limiter 80.
//!
//! ## A clock that steps back
//! A reading earlier than the state's own time is taken for a late reading of the same clock
//! (another thread read it first) while it lies within 1 s: no time has passed, nothing is
//! undone, and a refusal's `retry_after` counts from that reading. Further back, the clock was
//! reset: the state is moved to the new reading as the emptiest it could have been, so a limiter
//! is never locked out for as long as the clock jumped back. The rate bounds hold on either
//! clock; across the jump, a limiter may hand out at most one burst early. (A thread of the
//! shared form that stalls for over a second between reading the clock and deciding looks like
//! a reset clock too, with the same bound.)
//!
//! ## Microcontrollers
//! The [`Atomic`](crate::cell::Atomic) forms need compare-and-swap of their word (64 bits; 128
//! for the sliding window and the quota); on chips without it (thumbv6m, thumbv7m, riscv32imc)
//! portable-atomic's fallback is a spinlock an interrupt can deadlock. There, keep a
//! [`Local`](crate::cell::Local) limiter behind a mutex instead (as the embassy adapter does).

pub(crate) mod adaptive;
pub(crate) mod budget;
pub(crate) mod bulkhead;
pub(crate) mod gcra;
pub(crate) mod keyed;
pub(crate) mod limiter;
// The probe table under both keyed tables (the keyed limiter here, the std adapter's keyed
// policy).
pub mod probe;
pub mod quota;
// The caller's own runtime running late, told apart from a slow dependency.
pub mod saturation;
pub(crate) mod sliding;
pub(crate) mod window;

pub use self::adaptive::{
    AdaptiveLimitSettings, AdaptiveLimitSettingsBuilder, AdaptiveLimiter, AdaptivePermit,
    AdaptiveSnapshot, ConcurrencyLimiter, LimitChange, SharedAdaptiveLimiter, MAX_ADAPTIVE_LIMIT,
};
pub use self::budget::{
    Budget, BudgetIn, BudgetSettings, BudgetSettingsBuilder, BudgetSnapshot, SharedBudget,
};
pub use self::bulkhead::{
    Bulkhead, BulkheadEntry, BulkheadGuard, BulkheadIn, BulkheadPermit, BulkheadSettings,
    BulkheadSettingsBuilder, BulkheadSnapshot, BulkheadTicket, SharedBulkhead,
};
pub use self::gcra::{RateLimitSettings, RateLimitSettingsBuilder};
pub use self::keyed::{
    KeyedLimitError, KeyedLimiter, KeyedRateLimiter, KeyedSlidingWindowLimiter, KeyedWindowLimiter,
    LimiterHashState, LimiterHasher,
};
pub use self::limiter::{
    AnyLimiter, AnyRule, LimitRule, Limiter, Quota, RateLimiter, SharedQuota, SharedRateLimiter,
    SharedSlidingWindowLimiter, SharedWindowLimiter, SlidingWindowLimiter, WindowLimiter,
};
pub use self::quota::{QuotaSettings, QuotaState};
pub use self::sliding::{
    max_quota, SlidingWindowSettings, SlidingWindowSettingsBuilder, MAX_SEGMENTS,
};
pub use self::window::{WindowLimitSettings, WindowLimitSettingsBuilder, MAX_WINDOW_EVENTS};
