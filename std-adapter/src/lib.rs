//! # stormguard-std
//!
//! The std and tokio adapter for [`stormguard_core`]: the core's lock-free shared breaker and
//! retry budget, driven by a real clock and tokio's timers, plugged into tower, observable
//! through `tracing`, metrics counters and a health registry.
//!
//! The adapter stays thin. The core never reads a clock, sleeps or logs; this crate reads the
//! clock (twice per attempt), sleeps (backoff waits and the guarded rejection pause), runs the
//! operation against its attempt deadline and forwards events. Every decision — admit, refuse,
//! retry, wait how long, give up — comes from the core's call driver
//! ([`Call`](stormguard_core::Call)).
//!
//! ```
//! use std::time::Duration;
//! use stormguard_std::{CallError, Policy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), stormguard_std::SettingsError> {
//! // A breaker (5 consecutive failures, relative error rate, slow calls), a retry budget,
//! // 3 attempts with jittered exponential backoff, a 30 s deadline and a 10 s attempt
//! // timeout: the design's defaults, with a tighter deadline.
//! let payments = Policy::builder("payments")
//!     .deadline(Duration::from_secs(2))
//!     .build()?;
//!
//! let receipt = payments
//!     .call(|attempt| async move {
//!         // ... the request; `attempt` is 1 for the first try
//!         Ok::<_, std::io::Error>(format!("paid on attempt {attempt}"))
//!     })
//!     .await;
//! match receipt {
//!     Ok(r) => assert_eq!(r, "paid on attempt 1"),
//!     Err(CallError::Rejected { rejection, .. }) => {
//!         // Refused locally after the 100 ms guarded pause; the dependency is being left
//!         // alone. Ask again after `rejection.retry_after`.
//!         # let _ = rejection;
//!     }
//!     Err(other) => panic!("{other}"),
//! }
//! # Ok(()) }
//! ```
//!
//! ## What is here
//! The root holds what an ordinary program names; each module holds the rest of its subject.
//! - [`Policy`] (built by [`PolicyBuilder`]): `policy.call(|attempt| async { ... }).await`,
//!   [`Policy::call_with`] and [`CallOptions`] (classifier,
//!   [`CancellationToken`](tokio_util::sync::CancellationToken), deadline),
//!   [`Policy::call_or`] (fallback for refusals), [`Policy::call_cached`] ([`SuccessCache`]),
//!   [`Policy::call_blocking`] (no runtime), [`Policy::call_stream`] ([`CallStream`]: retried
//!   until the first element, resumed from a checkpoint). Errors are a [`CallError`] saying
//!   exactly what happened.
//! - The parts a policy composes: [`Breaker`] and [`Budget`] (cloneable `Send + Sync` handles
//!   on the core's lock-free breaker and budget: no `Mutex` on the call path), [`Bulkhead`],
//!   [`Limiter`], [`AdaptiveLimit`]; their settings ([`BreakerSettings`], [`BudgetSettings`],
//!   ...).
//! - [`clock`]: [`Clock`], [`DefaultClock`] (the TSC, or tokio's paused time in a test),
//!   [`ManualClock`] for tests, and the others.
//! - [`classify`]: how a result counts ([`Classify`]; the HTTP and gRPC rules with features
//!   `http` and `tonic`).
//! - Observability: [`events`] (every core event to `tracing`), [`Listener`], [`metrics`]
//!   ([`Metrics`], counters under stable names), [`health`] (a registry, one report).
//! - `tower` (feature `tower`): a `Layer`/`Service` applying a policy to any service, per host
//!   by default (with feature `tonic`, a tonic client's or server's, by gRPC's rules);
//!   `server` and [`nested`] for the receiving side.
//! - [`keyed`] ([`KeyedPolicy`]: a breaker per key from one template, fixed capacity),
//!   [`subscription`] (kept established on a capped schedule), [`engine`] ([`PolicyEngine`]),
//!   [`chaos`] (fault injection), [`cache`], `download` (feature `reqwest`), [`testing`].
//!
//! ## Only this crate
//! The core types this crate's API takes and returns are re-exported here ([`Outcome`],
//! [`State`], [`RefusalReason`], [`Rejection`], [`SettingsError`], [`Duration`], the settings,
//! ...), and the core itself as [`stormguard_core`] for the rest, so `stormguard-std` is the
//! only dependency a host user adds. Every duration this crate's own API takes is an
//! `impl Into<Duration>`, so a `std::time::Duration` goes in as it is. The core's settings
//! builders stay `const fn` (a firmware `static` is built with them), so they take the core's
//! [`Duration`]: convert a `std::time::Duration` with `.into()`, or build one with
//! [`Duration::from_secs`] and its siblings.
//!
//! ```
//! use std::time::Duration as StdDuration;
//! use stormguard_std::{BreakerSettings, Duration, Policy, SettingsError};
//!
//! # fn main() -> Result<(), SettingsError> {
//! let breaker = BreakerSettings::builder("payments")
//!     .break_duration(StdDuration::from_secs(5).into())
//!     .build()?;
//! assert_eq!(breaker.break_duration(), Duration::from_secs(5));
//! let payments = Policy::builder("payments")
//!     .breaker_settings(breaker)
//!     .deadline(StdDuration::from_secs(2))
//!     .build()?;
//! assert_eq!(payments.settings().deadline(), Some(Duration::from_secs(2)));
//! # Ok(()) }
//! ```
//!
//! ## Features
//! - `tokio` (default): the async calls, cancellation tokens, `clock::TokioClock`.
//! - `quanta`: `clock::QuantaClock` and `clock::CoarseClock`.
//! - `http`: the `Http` classifier.
//! - `tower`: the `tower` layer (implies `tokio` and `http`).
//! - `reqwest`: the layer's rules for a `reqwest::Client`, and `download` (implies `tower`).
//! - `tonic`: gRPC through the layer, `tower::GrpcLayer`, and the gRPC rules in `Http`
//!   (implies `tower`).
//! - `serde`: `Serialize` on health reports and metrics snapshots.
//! - `metrics`: `MetricsFacade`, the metrics through the `metrics` crate's facade, with
//!   histograms of call, attempt, slot-wait and lease durations.
//! - `config`: `config`, named policies from a TOML or JSON document, environment variables
//!   and reloads (implies `serde`).
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

pub mod cache;
pub mod chaos;
pub mod classify;
pub mod clock;
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod config;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod download;
pub mod engine;
pub mod events;
pub mod handles;
pub mod health;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod keyed;
#[cfg(any(feature = "tokio", loom))]
mod loom;
pub mod metrics;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod nested;
mod policy;
#[cfg(feature = "quanta")]
mod quanta;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod saturation;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod server;
#[cfg(feature = "tokio")]
mod stall;
// The keyed table's slots: used by `keyed` (feature `tokio`), model-checked under `cfg(loom)`
// without it.
#[cfg(any(feature = "tokio", loom))]
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
mod slots;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod subscription;
pub mod testing;
#[cfg(feature = "tokio")]
mod tokio;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

// The root holds what an ordinary host program names; the rest is in the modules that own it
// (`clock`, `classify`, `keyed`, `engine`, ...) or, for the core's less common types, in
// `stormguard_core`, re-exported whole.
pub use cache::SuccessCache;
pub use chaos::Chaos;
pub use classify::Classify;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use classify::Http;
pub use clock::{Clock, DefaultClock, ManualClock};
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub use download::{download, Download, DownloadError};
pub use engine::PolicyEngine;
pub use events::{Both, Listener, NoListener};
pub use handles::{Breaker, BreakerPermit, Budget};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use keyed::{KeyedError, KeyedPolicy};
pub use metrics::Metrics;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use metrics::MetricsFacade;
pub use policy::{AdaptiveLimit, Bulkhead, CallOptions, Limiter, Logged, Policy, PolicyBuilder};
#[cfg(feature = "tokio")]
pub use policy::{CallStream, Drain};
/// The core crate, whole: its less common types (settings builders, snapshots, attempt logs,
/// the shared breaker and budget) are reached through it, so `stormguard-std` stays the only
/// dependency a host program needs.
pub use stormguard_core;
// The core vocabulary this crate's API takes and returns.
pub use stormguard_core::{
    call::Criticality, limits::AdaptiveLimitSettings, limits::BulkheadSettings,
    limits::RateLimitSettings, limits::WindowLimitSettings, Backoff, BreakerSettings,
    BudgetSettings, CallError, CallSettings, Duration, Event, FailureRate, Finished, Instant,
    Jitter, Multiple, Name, Outcome, Recovery, RefusalReason, Refused, Rejection, SettingsError,
    SlowCalls, State, TripReason,
};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use subscription::{subscribe, Subscription};
