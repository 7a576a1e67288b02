//! The synchronization the keyed table's slots use: std's and `arc_swap`'s, or loom's when
//! model-checking (`RUSTFLAGS="--cfg loom"`), chosen by `cfg(loom)` alone so that the model
//! tests check the table's own code.
//!
//! Under loom a slot is a loom `Mutex` around an `Option<Arc<T>>`: each load, store and swap is
//! one step the model may interleave with the others, as each of `arc_swap`'s operations is
//! one linearizable step (what `arc_swap` does inside that step is its own, and not modelled).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

use std::sync::Arc;

/// A shared `Option<Arc<T>>` read without a lock: `arc_swap`'s `ArcSwapOption`.
#[cfg(not(loom))]
pub(crate) struct ArcCell<T>(arc_swap::ArcSwapOption<T>);

#[cfg(not(loom))]
impl<T> ArcCell<T> {
    pub(crate) fn empty() -> Self {
        ArcCell(arc_swap::ArcSwapOption::empty())
    }

    /// Runs `f` on the value without touching its reference count.
    pub(crate) fn read<R>(&self, f: impl FnOnce(Option<&Arc<T>>) -> R) -> R {
        f(self.0.load().as_ref())
    }

    pub(crate) fn load_full(&self) -> Option<Arc<T>> {
        self.0.load_full()
    }

    pub(crate) fn store(&self, value: Option<Arc<T>>) {
        self.0.store(value);
    }

    pub(crate) fn swap(&self, value: Option<Arc<T>>) -> Option<Arc<T>> {
        self.0.swap(value)
    }
}

/// The model of `ArcSwapOption`: one loom step per operation.
#[cfg(loom)]
pub(crate) struct ArcCell<T>(Mutex<Option<Arc<T>>>);

#[cfg(loom)]
impl<T> ArcCell<T> {
    pub(crate) fn empty() -> Self {
        ArcCell(Mutex::new(None))
    }

    fn cell(&self) -> MutexGuard<'_, Option<Arc<T>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn read<R>(&self, f: impl FnOnce(Option<&Arc<T>>) -> R) -> R {
        let value = self.cell().clone();
        f(value.as_ref())
    }

    pub(crate) fn load_full(&self) -> Option<Arc<T>> {
        self.cell().clone()
    }

    pub(crate) fn store(&self, value: Option<Arc<T>>) {
        *self.cell() = value;
    }

    pub(crate) fn swap(&self, value: Option<Arc<T>>) -> Option<Arc<T>> {
        std::mem::replace(&mut *self.cell(), value)
    }
}
