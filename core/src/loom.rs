//! The atomics the shared forms use: `portable-atomic`'s, or loom's when model-checking
//! (`RUSTFLAGS="--cfg loom"`), chosen by `cfg(loom)` alone so that an integration test built with
//! that flag models the library's own atomics.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use portable_atomic::{AtomicU64, Ordering};
