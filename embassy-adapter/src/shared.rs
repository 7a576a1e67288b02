//! One of the core's parts shared between tasks (and interrupts) behind an `embassy_sync`
//! blocking raw mutex: the one holder every shared part of this crate is.

use core::cell::RefCell;
use core::fmt;

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;
use stormguard_core::part::{Lock, Locked};

/// A core part (a breaker, a budget, a rate limiter, a bulkhead) shared by several tasks: the
/// part inside an `embassy_sync` [`blocking_mutex::Mutex`](Mutex)`<M, RefCell<T>>`,
/// `const`-constructible so that it lives in a `static`. [`Breaker`](crate::Breaker),
/// [`Budget`](crate::Budget) and [`RateLimit`](crate::RateLimit) are this type over the
/// core's part, with the part's readings on embassy's clock.
///
/// `M` is the embassy idiom for who may share it: [`NoopRawMutex`] among the tasks of one
/// executor (the part then is not `Sync`; keep it in a `StaticCell` or a task's frame),
/// [`CriticalSectionRawMutex`] across executors and interrupts (then it can be a `static`).
/// The lock is taken only for one of the core's synchronous transitions, never across an
/// `.await`, and no caller code (no listener) runs under it.
///
/// The call driver reaches the part through [`Shared::part`]: the core's [`Locked`] view,
/// which takes the lock once per operation. This crate's implementation of the core's [`Lock`]
/// is the only trait of the call driver it implements: the core cannot name embassy's mutex.
///
/// [`NoopRawMutex`]: embassy_sync::blocking_mutex::raw::NoopRawMutex
/// [`CriticalSectionRawMutex`]: embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex
pub struct Shared<M: RawMutex, T> {
    inner: Mutex<M, RefCell<T>>,
}

impl<M: RawMutex, T> Shared<M, T> {
    /// Shares a core part built at run time (settings from a configuration, a seed from the
    /// chip's RNG).
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_embassy::Breaker;
    ///
    /// let core = stormguard_core::Breaker::of(3, "radio")?.with_seed(0x5eed);
    /// let breaker: Breaker<NoopRawMutex> = Breaker::from_core(core);
    /// assert_eq!(breaker.name().as_str(), "radio");
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    #[must_use]
    pub const fn from_core(part: T) -> Self {
        Shared {
            inner: Mutex::new(RefCell::new(part)),
        }
    }

    /// Reads the part under the lock; `None` only on a call from inside the lock, which this
    /// crate never makes.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow().ok().map(|part| f(&part)))
    }

    /// The part as the core's call driver sees it (a budget, a rate limiter, a bulkhead): the
    /// lock is taken for each of its operations. A breaker's view is named:
    /// [`Breaker::part`](crate::Breaker::part).
    #[must_use]
    pub const fn part(&self) -> Locked<'_, Self> {
        Locked::new(self)
    }
}

impl<M: RawMutex, T> Lock for Shared<M, T> {
    type Part = T;

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow_mut().ok().map(|mut part| f(&mut part)))
    }
}

// The part stays behind its lock: formatting it there would run a writer under the lock.
impl<M: RawMutex, T> fmt::Debug for Shared<M, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}
