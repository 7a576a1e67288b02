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
//! - `serde`: `Serialize` on snapshots and settings; `Deserialize` on settings, with the
//!   builders' method names as keys and durations written for people (`"250ms"`), through
//!   the same checks as the builders (see the `config` module).
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

// The parts, each a folder: the breaker and its forms, the call driver, the local limits, and
// what is built on them; then the vocabulary they share, which depends on none of them. Each is
// public, with every item of its concept; the root re-exports the everyday vocabulary below.
pub mod breaker;
pub mod call;
pub mod limits;
pub mod policy;

pub mod cell;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod config;
pub mod error;
pub mod event;
mod loom;
pub mod name;
pub mod outcome;
pub mod part;
pub mod ratio;
pub mod rng;
pub mod state;
pub mod time;
pub mod wire;

// The everyday vocabulary: what a user of the breaker, the budget and the call driver names
// most. Everything else is reached through its module (`breaker`, `call`, `limits`, `policy`,
// and the vocabulary modules).
pub use breaker::{
    Breaker, BreakerSettings, FailureRate, LeanBreaker, Recovery, SharedBreaker, SlowCalls,
    Snapshot,
};
pub use call::{
    Backoff, Call, CallError, CallSettings, Classify, EveryErrorTransient, Finished, Jitter, Parts,
    Rejection, Step, GUARD_PAUSE,
};
pub use error::{Bound, Field, Problems, RefusalReason, Refused, SettingsError, PROBLEMS_CAPACITY};
pub use event::Event;
pub use limits::{Budget, BudgetSettings, SharedBudget};
pub use name::Name;
pub use outcome::Outcome;
pub use part::Permit;
pub use ratio::{Multiple, Ratio};
pub use state::{Health, State, TripReason};
pub use time::{Duration, DurationParseError, Instant};
