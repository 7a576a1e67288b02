//! The std adapter's integration tests that run on the host only (real sockets, the real clock,
//! tokio's paused clock, the tower layer over axum, hyper, reqwest and tonic), in one test
//! binary: each of them as its own test file was a binary of its own, linking the same
//! dependencies again, and building and linking those binaries was most of the test step's time.
//! Each module is what was one file; its tests are named `module::test`, so
//! `cargo test -p stormguard-std --test host network::` runs one file's tests.
//!
//! Kept out, as binaries of their own: the files CI runs under miri by name (`policy`,
//! `policy_steps`, `blocking`, `subscription`, `keyed`, `engine`, `alloc` and `tower`), `alloc`
//! also for its process-wide counting allocator, and `metrics_facade`, which installs the
//! global `metrics` recorder for the whole process.

#[path = "../support/mod.rs"]
mod support;

mod adaptive;
mod body_stall;
mod capacities;
mod chaos;
mod concurrency;
#[cfg(feature = "config")]
mod config;
mod criticality;
mod deadline_evidence;
mod download;
mod drain;
#[cfg(feature = "tonic")]
mod grpc;
#[cfg(feature = "tower")]
mod hostile_load;
mod loopback_probes;
mod nested;
mod network;
mod new_user;
mod parsers;
mod per_host;
mod quotas;
mod rejection_log;
mod saturation;
mod server;
mod spans;
mod sse;
mod stepped_clock;
mod stream;
mod zero_retry_after;
