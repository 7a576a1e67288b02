//! The local limits on calls: the retry budget, the rate limiters (GCRA, the window with
//! cooldown and the segmented sliding window), the bulkhead, the adaptive concurrency limiter,
//! and the quota a dependency publishes.

pub(crate) mod adaptive;
pub(crate) mod budget;
pub(crate) mod bulkhead;
// The probe table under both keyed tables (the keyed limiter here, the std adapter's keyed
// policy).
pub mod probe;
pub mod quota;
pub(crate) mod ratelimit;
// The caller's own runtime running late, told apart from a slow dependency.
pub mod saturation;
pub(crate) mod sliding;

pub use self::adaptive::{
    AdaptiveLimitSettings, AdaptiveLimitSettingsBuilder, AdaptiveLimiter, AdaptivePermit,
    AdaptiveSlots, AdaptiveSnapshot, AdaptivelyLimited, LimitChange, SharedAdaptiveLimiter,
    MAX_ADAPTIVE_LIMIT,
};
pub use self::budget::{
    Budget, BudgetSettings, BudgetSettingsBuilder, BudgetSnapshot, SharedBudget,
};
pub use self::bulkhead::{
    Bulkhead, BulkheadEntry, BulkheadGuard, BulkheadPermit, BulkheadSettings,
    BulkheadSettingsBuilder, BulkheadSlots, BulkheadSnapshot, BulkheadTicket, Bulkheaded,
    SharedBulkhead,
};
pub use self::quota::{Quota, QuotaSettings, QuotaState, SharedQuota};
pub use self::ratelimit::{
    KeyedLimitError, KeyedLimiter, KeyedRateLimiter, KeyedWindowLimiter, Limit, LimitRule,
    LimiterHashState, LimiterHasher, RateLimitSettings, RateLimitSettingsBuilder, RateLimited,
    RateLimiter, SharedRateLimiter, SharedWindowLimiter, WindowLimitSettings,
    WindowLimitSettingsBuilder, WindowLimiter, MAX_WINDOW_EVENTS,
};
pub use self::sliding::{
    max_quota, SharedSlidingWindowLimiter, SlidingWindowLimiter, SlidingWindowSettings,
    SlidingWindowSettingsBuilder, MAX_SEGMENTS,
};
