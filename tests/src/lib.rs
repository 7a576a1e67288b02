//! # stormguard-tests: the storm simulator
//!
//! A deterministic discrete-event simulator over the real `stormguard-core`: a fleet of clients,
//! each with its own breaker, budget and seeded randomness, drives its calls through the core's
//! call driver exactly as an adapter does, against a modelled dependency (log-normal latency,
//! a failure rate, a capacity, and a schedule of outages, brownouts, error spikes and cold
//! recoveries). Nothing here re-implements a rule: every admission, retry, backoff, pause and
//! trip is the core's decision. The simulator only supplies time, arrivals and the dependency.
//!
//! The same seed gives the same figures, byte for byte, on any machine: time is synthetic,
//! randomness is seeded, and transcendental maths goes through `libm`.
//!
//! `cargo run --release --bin storm` runs the built-in suite; see [`suite`] and [`config`].
#![warn(missing_docs)]
// A simulator and test crate: indexing into its own tables and plain arithmetic on counters and
// nanoseconds that stay far from overflow are the point, not a risk to a caller.
#![allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

pub mod chart;
pub mod compare;
pub mod config;
pub mod limiters;
pub mod model;
pub mod random;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod suite;

pub use model::{Dependency, Impairment};
pub use report::Report;
pub use scenario::{Arrivals, HealthyDependency, Layer, Scenario, Strategy, DEPENDENCY};
pub use sim::run;
