//! # stormguard-std
//!
//! The std and tokio adapter for [`stormguard_core`]. The core never reads a clock: every
//! transition takes `now`. This crate supplies that `now`, mapping a host clock onto the core's
//! [`Instant`](stormguard_core::Instant) (nanoseconds since an epoch captured when the clock is
//! built).
//!
//! - [`Clock`] has the one method an adapter needs, `now()`.
//! - [`MonotonicClock`] reads `std::time::Instant`.
//! - [`TokioClock`] (feature `tokio`) reads `tokio::time::Instant`, so tests with paused time
//!   (`#[tokio::test(start_paused = true)]`, `tokio::time::advance`) drive the core too.
//! - [`ManualClock`] is a shared clock that moves only when told to, for tests.
//!
//! ```
//! use stormguard_core::{Duration, Instant};
//! use stormguard_std::{Clock, ManualClock};
//!
//! let clock = ManualClock::new();
//! let start = clock.now();
//! clock.advance(Duration::from_millis(250));
//! assert_eq!(clock.now() - start, Duration::from_millis(250));
//! ```
//!
//! ## Features
//! - `tokio` (default): [`TokioClock`].
#![warn(missing_docs)]
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

mod clock;
#[cfg(feature = "tokio")]
mod tokio;

#[cfg(feature = "tokio")]
pub use self::tokio::TokioClock;
pub use clock::{Clock, ManualClock, MonotonicClock};
