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
//! - Clocks: [`Clock`], [`DefaultClock`] (the TSC through [`QuantaClock`], or, made in a
//!   tokio runtime whose time is paused, [`TokioClock`], which follows it), [`MonotonicClock`],
//!   [`CoarseClock`] (feature `quanta`, implied by `tokio`), [`ManualClock`] for tests. The global clocks share one [`process_epoch`], so every breaker, budget and call
//!   agrees on time. A policy reads its clock through a [`SteadyClock`], so a custom clock that
//!   steps back holds no call past its deadline and no breaker past its break.
//! - Handles: [`Breaker`] and [`Budget`], cloneable `Send + Sync` `Arc`s around the core's
//!   [`SharedBreaker`] and [`SharedBudget`]: no `Mutex`, `RwLock` or spin lock on the call
//!   path. Breakers are seeded from the process's entropy ([`entropy_seed`]).
//! - [`Policy`]: `policy.call(|attempt| async { ... }).await`, [`Policy::call_with`] and
//!   [`CallOptions`] (classifier, [`CancellationToken`](tokio_util::sync::CancellationToken),
//!   deadline), [`Policy::call_or`] (fallback for refusals), [`Policy::call_cached`]
//!   ([`SuccessCache`], [`CacheRule`]), [`Policy::call_blocking`] (no runtime). Errors are a
//!   [`CallError`] saying exactly what happened.
//! - Streams: [`Policy::call_stream`] and [`Policy::call_stream_resumable`] ([`CallStream`]:
//!   retried until the first element, restarted from a checkpoint after a failure mid-stream,
//!   an optional stall bound); `download` (feature `reqwest`: a response body resumed with
//!   `Range` against a strong `ETag`).
//! - Classifiers: [`Classify`], [`EveryErrorTransient`] (default), [`Http`] (feature `http`).
//! - Observability: [`events`] (every core event to `tracing`, with care for levels),
//!   [`Listener`], [`Metrics`] (counters under stable names), [`health`] (a registry of
//!   named breakers and budgets, `serde`-serializable reports).
//! - [`tower`] (feature `tower`): a `Layer`/`Service` applying a policy to any service (with
//!   feature `tonic`, a tonic client's or server's, by gRPC's rules).
//! - [`KeyedPolicy`]: a breaker per key (host, service) from one policy template, fixed capacity,
//!   idle keys evicted by the core's keyed rule; [`Subscription`]: keeps a subscription
//!   established on the core's capped schedule; [`PolicyEngine`]: the core's policy engine,
//!   growable.
//!
//! ## Only this crate
//! The core types this crate's API takes and returns are re-exported here (settings and their
//! builders, [`Outcome`], [`State`], [`Snapshot`], [`RefusalReason`], [`Rejection`],
//! [`SettingsError`], [`Duration`], ...), so `stormguard-std` is the only dependency a host
//! user adds. Every duration this crate's own API takes is an `impl Into<Duration>`, so a
//! `std::time::Duration` goes in as it is. The core's settings builders stay `const fn` (a
//! firmware `static` is built with them), so they take the core's [`Duration`]: convert a
//! `std::time::Duration` with `.into()`, or build one with [`Duration::from_secs`] and its
//! siblings.
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
//! - `tokio` (default): [`TokioClock`], the async calls, cancellation tokens.
//! - `quanta`: [`QuantaClock`] and [`CoarseClock`].
//! - `http`: the [`Http`] classifier.
//! - `tower`: the [`tower`] layer (implies `tokio` and `http`).
//! - `reqwest`: the layer's rules for a `reqwest::Client` (implies `tower`).
//! - `tonic`: gRPC through the layer, `tower::GrpcLayer`, and the gRPC rules in [`Http`]
//!   (implies `tower`).
//! - `serde`: `Serialize` on health reports and metrics snapshots.
//! - `metrics`: [`MetricsFacade`], the metrics through the `metrics` crate's facade, with
//!   histograms of call, attempt, slot-wait and lease durations.
//! - `config`: [`config`], named policies from a TOML or JSON document, environment
//!   variables and reloads (implies `serde`).
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

mod cache;
mod chaos;
mod classify;
mod clock;
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod config;
#[cfg(feature = "reqwest")]
mod download;
mod engine;
pub mod events;
mod handles;
pub mod health;
#[cfg(feature = "tokio")]
mod keyed;
#[cfg(any(feature = "tokio", loom))]
mod loom;
mod metrics;
#[cfg(feature = "tokio")]
mod nested;
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
mod subscription;
pub mod testing;
#[cfg(feature = "tokio")]
mod tokio;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

#[cfg(feature = "quanta")]
#[cfg_attr(docsrs, doc(cfg(feature = "quanta")))]
pub use self::quanta::{CoarseClock, QuantaClock};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use self::tokio::TokioClock;
pub use cache::{CacheRule, SuccessCache, ZeroTtl};
pub use chaos::Chaos;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use chaos::{ChaosLayer, ChaosService, INJECTED_HEADER};
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub use classify::{grpc_outcome, is_grpc, GrpcBodyEnd};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use classify::{http_outcome, published_quota, retry_after, Http};
pub use classify::{Classify, EveryErrorTransient};
pub use clock::{process_epoch, Clock, DefaultClock, ManualClock, MonotonicClock, SteadyClock};
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub use download::{download, download_outcome, Chunks, Download, DownloadError, Opening};
pub use engine::{AddError, Decision, EnginePolicy, PolicyEngine, Predicate, Trail};
pub use events::{Both, Ended, Listener, NoListener};
pub use handles::{entropy_seed, lane_hint, Breaker, BreakerPermit, Budget};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use keyed::{KeyedError, KeyedPolicy, KeyedSetupError, MAX_KEYS};
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use metrics::MetricsFacade;
pub use metrics::{Metrics, MetricsSnapshot};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use nested::{inbound_criticality, inbound_retry};
pub use policy::{AdaptiveLimit, Bulkhead, CallOptions, Limiter, Logged, Policy, PolicyBuilder};
#[cfg(feature = "tokio")]
pub use policy::{CallStream, Drain};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use saturation::SaturationProbe;
pub use stormguard_core::CallError;
// The core vocabulary this crate's API takes and returns, so a host user needs only this crate.
pub use stormguard_core::{
    breaker::BreakerSettingsBuilder, breaker::KeyedRefusal, breaker::STALE_BREAKS,
    call::AttemptLog, call::AttemptRecord, call::BackoffBuilder, call::CallSettingsBuilder,
    call::Criticality, call::StreamSettings, event::AttemptEnd, limits::AdaptiveLimitSettings,
    limits::AdaptiveLimitSettingsBuilder, limits::AdaptiveSnapshot, limits::BudgetSettingsBuilder,
    limits::BudgetSnapshot, limits::BulkheadSettings, limits::BulkheadSettingsBuilder,
    limits::BulkheadSnapshot, limits::RateLimitSettings, limits::RateLimitSettingsBuilder,
    limits::WindowLimitSettings, limits::WindowLimitSettingsBuilder, name::NameError,
    policy::ChaosSettings, policy::PolicyVerdict, policy::SubscriptionRetry,
    policy::SubscriptionStatus, Backoff, Bound, BreakerSettings, BudgetSettings, CallSettings,
    Duration, Event, FailureRate, Field, Finished, Health, Instant, Jitter, Multiple, Name,
    Outcome, Ratio, Recovery, RefusalReason, Refused, Rejection, SettingsError, SharedBreaker,
    SharedBudget, SlowCalls, Snapshot, State, TripReason, GUARD_PAUSE,
};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use subscription::{subscribe, Subscription, SubscriptionCancelled, SubscriptionEvent};
