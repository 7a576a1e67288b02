//! # stormguard-embassy
//!
//! The [embassy](https://embassy.dev) adapter for [`stormguard_core`]: circuit breakers, retry
//! budgets and call policies for firmware that talks to a flaky sensor over I2C or a lossy radio
//! link. It contains no rule of its own: every decision is the sans-IO core's. This crate reads
//! embassy's clock, sleeps on embassy's timers, shares the core's state between tasks through an
//! `embassy_sync` raw mutex, and forwards events to `defmt` and a listener. It allocates nothing.
//!
//! ```no_run
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
//! use stormguard_core::{BreakerSettings, BudgetSettings, CallSettings, LeanBreaker};
//! use stormguard_embassy::{Breaker, Budget, CallError, NoListener, Policy};
//!
//! static SENSOR: BreakerSettings = match BreakerSettings::consecutive_only("sensor", 3) {
//!     Ok(s) => s,
//!     Err(_) => panic!("invalid breaker settings"),
//! };
//! // The lean breaker: consecutive failures, a doubling jittered break, probes; 40 bytes.
//! static BREAKER: Breaker<Cs, LeanBreaker> = match Breaker::lean(&SENSOR) {
//!     Ok(b) => b,
//!     Err(_) => panic!("settings that need statistics"),
//! };
//! static RETRIES: Budget<Cs> = Budget::new(BudgetSettings::defaults("i2c"));
//! static POLICY: Policy<'static, Cs, NoListener, LeanBreaker> =
//!     Policy::new(&BREAKER, CallSettings::DEFAULT).with_budget(&RETRIES);
//!
//! # async fn read_sensor() -> Result<u16, ()> { Ok(0) }
//! async fn sample() {
//!     match POLICY.call(|_attempt| read_sensor()).await {
//!         Ok(value) => { /* use it */ }
//!         Err(CallError::Rejected { rejection, .. }) => {
//!             // The sensor is being left alone; ask again after `rejection.retry_after`.
//!         }
//!         Err(_) => { /* failed, timed out, deadline exceeded or cancelled */ }
//!     }
//! }
//! ```
//!
//! ## What is here
//! - [`time`]: conversions between embassy-time and the core's time, and [`EmbassyClock`].
//! - [`sleep`]: cancellable sleeps on [`embassy_time::Timer`], for backoff waits and the guarded
//!   rejection pause; cancellation is any future (a `Signal`'s `wait()`).
//! - [`Breaker`] and [`Budget`]: the core's breaker and budget in a [`Shared`] (an
//!   `embassy_sync` blocking raw mutex), `const`-constructible so they live in `static`s; never
//!   locked across `.await`.
//!   The breaker is any of the core's ([`CoreBreaker`]): [`Breaker::lean`] (consecutive
//!   failures only, a few words), [`Breaker::from_static`] (every rule, settings in a `static`),
//!   [`Breaker::fixed`] (every rule, settings a constant named by a type: the least flash) or
//!   [`Breaker::new`] (every rule, its own copy of the settings).
//!   Their [`part`](Breaker::part)s are the core's [`Locked`](stormguard_core::part::Locked)
//!   view, so the core's [`Call`](stormguard_core::Call) driver runs over them unchanged.
//! - [`Policy`]: `policy.call(|attempt| async { ... }).await`, with [`CallOptions`] for a
//!   classifier, a cancellation and a deadline, and [`CallError`] saying what happened. Seed
//!   each device's jitter at start-up: [`Breaker::set_seed`] and [`Policy::set_seed`].
//! - Optional parts in front of the breaker, which the core's [`Parts`](stormguard_core::Parts)
//!   put in its one order: [`Policy::with_rate_limit`] ([`RateLimit`] over one of the core's
//!   limiters, or a lock-free one) and [`Policy::with_bulkhead`] ([`Bulkhead`], with the core's
//!   bounded wait). Their refusals are guarded rejections like the breaker's.
//! - Hedging: [`Policy::call_hedged`] runs the core's hedge beside a slow attempt (at most two in
//!   flight, the first success wins, the loser dropped and reported as cancelled).
//! - Keyed scope: [`KeyedBreaker`] (the core's fixed-capacity [`Keyed`](stormguard_core::breaker::Keyed)
//!   table) and [`KeyedPolicy`]: `policy.call(key, op)`.
//! - [`keep_subscribed`]: a subscription re-established forever on the core's
//!   [`SubscriptionRetry`](stormguard_core::policy::SubscriptionRetry) schedule.
//! - [`Chaos`]: the core's seeded fault injection in a `static`, failing or slowing a share of
//!   attempts (a test build's faults go through the policy as real ones do).
//! - [`Policy::explain`]: the policy in plain text (the core's [`Explain`](stormguard_core::policy::Explain)).
//! - [`events`]: events to `defmt` and to a [`Listener`].
//!
//! ## Sharing
//! Pick the raw mutex the embassy way: `NoopRawMutex` among the tasks of one executor,
//! `CriticalSectionRawMutex` across executors and interrupts (and for a `static`). thumbv7m/v7em
//! have no 64-bit atomics, so the core's lock-free shared form would run on portable-atomic's
//! spinlock fallback there, which an interrupt can deadlock; the raw mutex around the `&mut` form
//! is the right tool on a microcontroller.
//!
//! ## Time driver
//! Like every embassy library, this crate enables no `tick-hz-*`, driver or queue feature of
//! `embassy-time`: the firmware picks its tick rate and time driver. Conversions use whatever
//! [`embassy_time::TICK_HZ`] the final build has, and round sleeps up, never short.
//!
//! ## Features
//! - `defmt`: every event logged with `defmt`, and `defmt::Format` on this crate's and the core's
//!   public types (forwards to `stormguard-core/defmt`).
#![no_std]
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

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

mod breaker;
mod budget;
mod bulkhead;
mod chaos;
mod drain;
pub mod events;
mod keyed;
mod policy;
mod ratelimit;
mod shared;
pub mod sleep;
mod stream;
pub mod subscription;
pub mod time;

pub use breaker::{Breaker, CoreBreaker};
pub use budget::Budget;
pub use bulkhead::{Bulkhead, BulkheadStep, NoBulkhead};
pub use chaos::Chaos;
pub use drain::Drain;
pub use events::{Listener, NoListener};
pub use keyed::{KeyedBreaker, KeyedPolicy};
pub use policy::{
    BulkheadedPolicy, CallOptions, Explanation, LeanPolicy, NoRateLimit, Policy, RateLimitedPolicy,
};
pub use ratelimit::RateLimit;
pub use shared::Shared;
pub use stormguard_core::valid;
pub use stormguard_core::CallError;
pub use stormguard_core::{Classify, EveryErrorTransient};
pub use stream::{Source, Streaming};
pub use subscription::keep_subscribed;
pub use time::EmbassyClock;
