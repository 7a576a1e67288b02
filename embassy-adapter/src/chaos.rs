//! Fault injection on the device: the core's seeded [`Chaos`](stormguard_core::policy::Chaos)
//! behind an `embassy_sync` blocking raw mutex, so a `static` can fail or slow a share of a
//! policy's attempts in a test build, and the faults go through the classifier, retries,
//! breaker and budget as real ones do.

use core::cell::RefCell;
use core::future::Future;

use embassy_sync::blocking_mutex::{raw::RawMutex, Mutex};
use embassy_time::Timer;
use stormguard_core::policy::{Chaos as CoreChaos, ChaosCounts, ChaosSettings, Roll};

use crate::time::to_embassy_duration;

/// A share of attempts failed or held back, decided by the core from a seed: the same seed
/// gives the same rolls in the same order, on the device as on the host. Off unless its
/// settings inject something.
///
/// ```
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
/// use stormguard_core::{policy::ChaosSettings, valid, Ratio};
/// use stormguard_embassy::Chaos;
///
/// const ONE_IN_TEN: Ratio = match Ratio::from_percent(10) {
///     Some(r) => r,
///     None => Ratio::ZERO,
/// };
/// static CHAOS: Chaos<Cs> =
///     Chaos::new(valid!(ChaosSettings::builder().faults(ONE_IN_TEN).seed(7).build()));
///
/// async fn read_sensor() -> Result<u16, &'static str> { Ok(21) }
///
/// async fn attempt() -> Result<u16, &'static str> {
///     CHAOS.run(read_sensor(), || "injected").await
/// }
/// ```
pub struct Chaos<M: RawMutex> {
    inner: Mutex<M, RefCell<CoreChaos>>,
}

impl<M: RawMutex> Chaos<M> {
    /// A source with validated `settings`; `const`, so it can be a `static`.
    #[must_use]
    pub const fn new(settings: ChaosSettings) -> Chaos<M> {
        Chaos {
            inner: Mutex::new(RefCell::new(CoreChaos::new(settings))),
        }
    }

    /// What has been injected so far.
    #[must_use]
    pub fn counts(&self) -> ChaosCounts {
        self.inner.lock(|c| c.borrow().counts())
    }

    /// What to do to the attempt about to start; `gate` says whether it is one to inject into
    /// (a closed gate takes no roll).
    pub fn roll(&self, gate: bool) -> Roll {
        self.inner.lock(|c| c.borrow_mut().roll(gate))
    }

    /// Runs one attempt: holds it back on embassy's timer if the roll says so, then fails it
    /// with `fault()` or awaits `attempt`. The roll is taken when this is called (when the
    /// policy starts the attempt), not when it is first polled.
    pub fn run<T, E, Fut>(
        &self,
        attempt: Fut,
        fault: impl FnOnce() -> E,
    ) -> impl Future<Output = Result<T, E>>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_if(true, attempt, fault)
    }

    /// [`Chaos::run`] when `gate` is open; with it closed, `attempt` runs untouched and no
    /// roll is taken.
    pub fn run_if<T, E, Fut>(
        &self,
        gate: bool,
        attempt: Fut,
        fault: impl FnOnce() -> E,
    ) -> impl Future<Output = Result<T, E>>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let roll = self.roll(gate);
        async move {
            if !roll.delay.is_zero() {
                Timer::after(to_embassy_duration(roll.delay)).await;
            }
            if roll.fault {
                return Err(fault());
            }
            attempt.await
        }
    }
}
