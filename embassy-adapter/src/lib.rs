//! # stormguard-embassy
//!
//! The [embassy](https://embassy.dev) adapter for [`stormguard_core`]: it reads embassy's clock and
//! converts between embassy-time and the core's time types, so firmware can drive the sans-IO core
//! from async tasks.
//!
//! The core never reads a clock; this crate does, through [`EmbassyClock`], and maps
//! [`embassy_time::Instant`] (ticks since boot) onto [`stormguard_core::Instant`] (nanoseconds since
//! an arbitrary epoch — here, boot). Every conversion saturates instead of overflowing.
//!
//! ```
//! use stormguard_embassy::time::{to_core_duration, to_embassy_duration};
//!
//! let backoff = stormguard_core::Duration::from_millis(250);
//! let sleep_for: embassy_time::Duration = to_embassy_duration(backoff);
//! assert_eq!(to_core_duration(sleep_for), backoff);
//! ```
//!
//! ## Time driver
//! Like every embassy library, this crate enables no `tick-hz-*`, driver or queue feature of
//! `embassy-time`: the firmware picks its tick rate and time driver. Conversions use whatever
//! [`embassy_time::TICK_HZ`] the final build has.
//!
//! ## Features
//! - `defmt`: `defmt::Format` on the core's public types (forwards to `stormguard-core/defmt`).
#![no_std]
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

pub mod time;

pub use time::EmbassyClock;
