//! # stormguard-core
//!
//! The rules of a resilience library — circuit breaker, retry budget, backoff, deadlines and
//! guarded rejection — as pure functions of injected time and outcomes.
//!
//! This crate contains no I/O and does not get any timestamps from the operating system: it never
//! reads a clock, sleeps, spawns, allocates or logs. Every transition takes `now: Instant` and an
//! outcome, and returns what happened (a permit, a refusal, events handed to a sink you supply).
//! The adapters (`stormguard-std` for std/tokio, `stormguard-embassy` for embedded async) read
//! clocks and sleep; deterministic simulations feed synthetic time and get the same answers every
//! run.
//!
//! ```
//! use stormguard_core::{Breaker, Instant, Duration, Outcome, RefusalReason};
//!
//! let mut breaker = Breaker::of(5, "payments")?;
//! let mut now = Instant::ZERO;
//! for _ in 0..5 {
//!     let permit = breaker.try_acquire(now).expect("closed breakers admit");
//!     now += Duration::from_millis(20);
//!     breaker.on_outcome(now, permit, Outcome::Transient, &mut |_event| {});
//! }
//! let refused = breaker.try_acquire(now).unwrap_err();
//! assert_eq!(refused.reason, RefusalReason::BreakerOpen);
//! assert!(refused.retry_after <= Duration::from_secs(15));
//! # Ok::<(), stormguard_core::SettingsError>(())
//! ```
//!
//! ## Features
//! - `defmt`: `defmt::Format` on every public type.
//! - `serde`: `Serialize` on snapshots and settings.
//!
//! ## Atomics on microcontrollers
//! The shared forms use `portable-atomic`; this library never chooses its backend. Firmware for a
//! chip without compare-and-swap (thumbv6m, riscv32imc) picks one: build with
//! `--cfg portable_atomic_unsafe_assume_single_core` on a single-core chip, or enable
//! `portable-atomic`'s `critical-section` feature in the firmware's own `Cargo.toml`.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects,
        clippy::panic
    )
)]

/// The [`Admission`] methods a wrapper in front of a breaker (a rate limiter, a bulkhead, an
/// adapter's handle) does not change: the breaker's name and its latency readings, read from the
/// field (or field path) named. Exported for the adapters' own wrappers, not part of the API.
/// The `Ok` value of a `const` expression returning a `Result`, evaluated while the program is
/// built: settings for a `static` or `const` (a breaker, a budget, a policy on a microcontroller)
/// that are invalid stop the build, and nothing can fail at run time. The expression must be
/// one the compiler can evaluate: the settings types' `const fn` builders and constructors.
///
/// ```
/// use stormguard_core::{valid, BreakerSettings, CallSettings};
///
/// static SENSOR: BreakerSettings = valid!(BreakerSettings::consecutive_only("tmp117", 3));
/// const ONE_RETRY: CallSettings = valid!(CallSettings::builder().max_attempts(2).build());
/// assert_eq!(SENSOR.consecutive_failures(), 3);
/// assert_eq!(ONE_RETRY.max_attempts(), 2);
/// ```
///
/// A run of zero failures is no rule: the build stops.
///
/// ```compile_fail
/// use stormguard_core::{valid, BreakerSettings};
/// static SENSOR: BreakerSettings = valid!(BreakerSettings::consecutive_only("tmp117", 0));
/// ```
#[macro_export]
macro_rules! valid {
    ($result:expr $(,)?) => {
        const {
            match $result {
                ::core::result::Result::Ok(value) => value,
                ::core::result::Result::Err(_) => {
                    ::core::panic!(
                        "invalid stormguard settings (the constructor's SettingsError says which)"
                    )
                }
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! forward_breaker_readings {
    ($($field:tt)+) => {
        fn name(&self) -> &$crate::Name {
            self.$($field)+.name()
        }

        fn normal_latency(&self, now: $crate::Instant) -> Option<$crate::Duration> {
            self.$($field)+.normal_latency(now)
        }

        fn attempt_ceiling(&self, now: $crate::Instant) -> Option<$crate::Duration> {
            self.$($field)+.attempt_ceiling(now)
        }

        fn slow_threshold(&self, now: $crate::Instant) -> Option<$crate::Duration> {
            self.$($field)+.slow_threshold(now)
        }

        fn hedge_after(
            &self,
            now: $crate::Instant,
        ) -> Result<$crate::Duration, $crate::HedgeSuppressed> {
            self.$($field)+.hedge_after(now)
        }
    };
}

// The parts, each a folder: the breaker and its forms, the call driver, the local limits, and
// what is built on them; then the vocabulary they share, which depends on none of them.
mod breaker;
mod call;
mod limits;
mod policy;

mod error;
mod event;
mod loom;
mod name;
mod outcome;
mod packed;
mod ratio;
mod rng;
mod state;
mod time;

pub use breaker::keyed::{FullTable, Keyed, KeyedRefusal, Member, STALE_BREAKS};
pub use breaker::lean::LeanBreaker;
pub use breaker::settings::{
    BreakerSettings, BreakerSettingsBuilder, FailureRate, Recovery, SlowCalls, MAX_COUNT,
    MAX_PROBES, TRIP_BUCKETS,
};
pub use breaker::shared::{PermitGuard, SharedBreaker, SharedBudget};
pub use breaker::{Breaker, ConstSettings, Fixed, HedgeSuppressed, Permit, SettingsRef, Snapshot};
pub use call::backoff::{Backoff, BackoffBuilder, Jitter};
pub use call::classify::{Classify, EveryErrorTransient};
pub use call::error::CallError;
pub use call::{
    guarded_pause, Admission, Call, CallSettings, CallSettingsBuilder, Finished, Funding, NoHedge,
    Parts, Rejection, Step, Unguarded, Unlimited, CEILING_FLOOR, GUARD_PAUSE,
};
pub use error::{Bound, Field, RefusalReason, Refused, SettingsError};
pub use event::Event;
pub use limits::budget::{Budget, BudgetSettings, BudgetSettingsBuilder, BudgetSnapshot};
pub use limits::bulkhead::{
    Bulkhead, BulkheadEntry, BulkheadGuard, BulkheadPermit, BulkheadSettings,
    BulkheadSettingsBuilder, BulkheadSlots, BulkheadSnapshot, BulkheadTicket, Bulkheaded,
    SharedBulkhead,
};
pub use limits::ratelimit::{
    KeyedLimitError, KeyedLimiter, KeyedRateLimiter, KeyedWindowLimiter, Limit, LimitRule,
    LimiterHashState, LimiterHasher, RateLimitSettings, RateLimitSettingsBuilder, RateLimited,
    RateLimiter, SharedRateLimiter, SharedWindowLimiter, WindowLimitSettings,
    WindowLimitSettingsBuilder, WindowLimiter, MAX_WINDOW_EVENTS,
};
pub use name::{Name, NameError, NAME_CAPACITY};
pub use outcome::{Outcome, MIN_THROTTLE_HINT};
pub use policy::cache::{CacheRule, ZeroTtl};
pub use policy::engine::{
    AddPolicyError, DecisionTrail, PolicyDecision, PolicyEngine, PolicyEvaluation, PolicyMatch,
    PolicyPredicate, PolicyRule, PolicyVerdict,
};
pub use policy::explain::Explain;
pub use policy::subscription::{SubscriptionRetry, SubscriptionStatus};
pub use ratio::{Multiple, Ratio};
pub use rng::JitterRng;
pub use state::{Health, State, TripReason};
pub use time::{div_rem_u32, Duration, Instant, MAX_BREAK};
