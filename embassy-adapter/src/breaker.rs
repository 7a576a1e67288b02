//! A circuit breaker that firmware can keep in a `static` and share between tasks (and
//! interrupts), over an `embassy_sync` blocking raw mutex around the core's `&mut` breaker.

use core::cell::RefCell;

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;
use stormguard_core::{
    Admission, BreakerSettings, Duration, Event, Instant, Name, Outcome, Permit, RefusalReason,
    Refused, Snapshot, State,
};

use crate::events::{self, Held};
use crate::EmbassyClock;

/// What a locked call reports when the breaker is already borrowed. That needs a call into the
/// breaker from inside its own lock, which this crate never makes (it runs no caller code, and
/// delivers no event, while the lock is held), so this is never seen in practice; it exists so
/// that the impossible case is a refusal, not a panic.
const BUSY: Refused = Refused {
    reason: RefusalReason::BulkheadFull,
    retry_after: Duration::ZERO,
};

/// A circuit breaker shared by several tasks: the core's
/// [`Breaker`](stormguard_core::Breaker) inside an `embassy_sync`
/// [`blocking_mutex::Mutex`](Mutex)`<M, RefCell<_>>`.
///
/// `M` is the embassy idiom for who may share it: [`NoopRawMutex`] among the tasks of one
/// executor (the breaker then is not `Sync`; keep it in a `StaticCell` or a task's frame),
/// [`CriticalSectionRawMutex`] across executors and interrupts (then it can be a `static`). The
/// lock is taken only for the core's synchronous transitions, never across an `.await`, and
/// events are delivered after it is released.
///
/// Every rule lives in the core: this type only locks, reads embassy's clock and forwards events.
/// Drive calls through a [`Policy`](crate::Policy), or through [`Breaker::handle`] and the core's
/// [`Call`](stormguard_core::Call) driver.
///
/// [`NoopRawMutex`]: embassy_sync::blocking_mutex::raw::NoopRawMutex
/// [`CriticalSectionRawMutex`]: embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex
///
/// ```
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
/// use stormguard_core::{BreakerSettings, State};
/// use stormguard_embassy::Breaker;
///
/// const SENSOR: BreakerSettings = match BreakerSettings::consecutive_only("sensor", 3) {
///     Ok(s) => s,
///     Err(_) => panic!("invalid breaker settings"),
/// };
/// static BREAKER: Breaker<CriticalSectionRawMutex> = Breaker::new(SENSOR);
///
/// # use critical_section as _; // the host's critical-section implementation, for this test
/// assert_eq!(BREAKER.name().as_str(), "sensor");
/// ```
pub struct Breaker<M: RawMutex> {
    inner: Mutex<M, RefCell<stormguard_core::Breaker>>,
}

impl<M: RawMutex> Breaker<M> {
    /// A closed breaker with validated `settings`; `const`, so it can be a `static`. Its jitter
    /// seed is derived from its name: give each device its own with [`Breaker::set_seed`].
    #[must_use]
    pub const fn new(settings: BreakerSettings) -> Breaker<M> {
        Breaker::from_core(stormguard_core::Breaker::new(settings))
    }

    /// Shares a core breaker built at run time (settings from a configuration, a seed from the
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
    pub const fn from_core(breaker: stormguard_core::Breaker) -> Breaker<M> {
        Breaker {
            inner: Mutex::new(RefCell::new(breaker)),
        }
    }

    /// Runs `f` on the core breaker under the lock. `None` only on a re-entrant call (see
    /// [`BUSY`]), which this crate never makes.
    fn with<R>(&self, f: impl FnOnce(&mut stormguard_core::Breaker) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow_mut().ok().map(|mut b| f(&mut b)))
    }

    /// Sets the jitter seed (at start-up, from the chip's unique ID or RNG), so that a fleet of
    /// devices does not retry in step after a shared outage.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::BreakerSettings;
    /// use stormguard_embassy::Breaker;
    ///
    /// let breaker: Breaker<NoopRawMutex> = Breaker::new(BreakerSettings::defaults("radio"));
    /// breaker.set_seed(0x0123_4567_89ab_cdef);
    /// ```
    pub fn set_seed(&self, seed: u64) {
        self.with(|b| *b = b.clone().with_seed(seed));
    }

    /// The breaker's name (a copy: the breaker itself stays behind its lock).
    #[must_use]
    pub fn name(&self) -> Name {
        *self.settings().name()
    }

    /// The settings the breaker was built with.
    #[must_use]
    pub fn settings(&self) -> BreakerSettings {
        self.inner.lock(|cell| match cell.try_borrow() {
            Ok(b) => *b.settings(),
            Err(_) => BreakerSettings::defaults("busy"),
        })
    }

    /// The state now (embassy's clock). Reading consumes nothing: after the break it reads
    /// `HalfOpen` before any call arrives.
    ///
    /// ```
    /// # use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// # use stormguard_core::{BreakerSettings, State};
    /// # use stormguard_embassy::Breaker;
    /// # fn f(breaker: &Breaker<NoopRawMutex>) {
    /// if breaker.state() == State::Open {
    ///     // skip the optional sensor this round
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn state(&self) -> State {
        self.state_at(EmbassyClock::new().now())
    }

    /// The state at `now` (a core instant: time since boot).
    #[must_use]
    pub fn state_at(&self, now: Instant) -> State {
        self.inner.lock(|cell| match cell.try_borrow() {
            Ok(b) => b.state(now),
            Err(_) => State::Closed,
        })
    }

    /// A point-in-time view now, for a health report or telemetry frame; `None` only on a
    /// re-entrant call, which this crate never makes.
    #[must_use]
    pub fn snapshot(&self) -> Option<Snapshot> {
        self.snapshot_at(EmbassyClock::new().now())
    }

    /// A point-in-time view at `now`.
    #[must_use]
    pub fn snapshot_at(&self, now: Instant) -> Option<Snapshot> {
        self.inner
            .lock(|cell| cell.try_borrow().ok().map(|b| b.snapshot(now)))
    }

    /// Forces the breaker open until [`Breaker::reset`] (an operator's or a supervisor's
    /// decision); its event goes to `defmt` and to `listener`.
    ///
    /// ```
    /// # use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// # use stormguard_core::{BreakerSettings, State};
    /// # use stormguard_embassy::{Breaker, NoListener};
    /// let breaker: Breaker<NoopRawMutex> = Breaker::new(BreakerSettings::defaults("radio"));
    /// # embassy_time::MockDriver::get().reset();
    /// breaker.isolate(&NoListener);
    /// assert_eq!(breaker.state(), State::Isolated);
    /// breaker.reset(&NoListener);
    /// assert_eq!(breaker.state(), State::Closed);
    /// ```
    pub fn isolate(&self, listener: &impl crate::Listener) {
        let now = EmbassyClock::new().now();
        self.transition(listener, |b, sink| b.isolate(now, &mut |e| sink(e)));
    }

    /// Closes the breaker: clears the trip window and the break growth (the learned baselines
    /// stay); its event goes to `defmt` and to `listener`.
    pub fn reset(&self, listener: &impl crate::Listener) {
        let now = EmbassyClock::new().now();
        self.transition(listener, |b, sink| b.reset(now, &mut |e| sink(e)));
    }

    /// When a timed transition is due (the break ending, a lost probe being reclaimed, the ramp
    /// running out), if any: a supervisor task can sleep until then and call
    /// [`Breaker::handle_timeout`], so the state change is logged when it happens rather than
    /// at the next call.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<embassy_time::Instant> {
        let now = EmbassyClock::new().now();
        self.inner
            .lock(|cell| cell.try_borrow().ok().and_then(|b| b.poll_timeout(now)))
            .map(crate::time::to_embassy_instant)
    }

    /// Realises the timed transitions due now and delivers their events to `defmt` and
    /// `listener`. Calling it early, or twice, does nothing.
    pub fn handle_timeout(&self, listener: &impl crate::Listener) {
        let now = EmbassyClock::new().now();
        self.transition(listener, |b, sink| b.handle_timeout(now, &mut |e| sink(e)));
    }

    fn transition(
        &self,
        listener: &impl crate::Listener,
        f: impl FnOnce(&mut stormguard_core::Breaker, &mut dyn FnMut(Event<'_>)),
    ) {
        let mut deliver = |e: Event<'_>| {
            events::log(&e);
            listener.on_event(&e);
        };
        let mut held = Held::new();
        let name = self.with(|b| {
            f(b, &mut |e| held.keep(e, &mut deliver));
            *b.name()
        });
        if let Some(name) = name {
            held.deliver(&name, &mut deliver);
        }
    }

    /// A handle that implements the core's [`Admission`] trait by locking this breaker for each
    /// transition, so the core's [`Call`](stormguard_core::Call) driver runs unchanged over it.
    /// It carries a copy of the name, which the events it delivers borrow.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::{Admission, BreakerSettings, Instant, Outcome};
    /// use stormguard_embassy::Breaker;
    ///
    /// let breaker: Breaker<NoopRawMutex> = Breaker::new(BreakerSettings::defaults("radio"));
    /// let mut handle = breaker.handle();
    /// let now = Instant::from_secs(1);
    /// let permit = handle.try_acquire(now, None, &mut |_| {})?;
    /// handle.on_outcome(now, permit, Outcome::Success, &mut |_| {});
    /// # Ok::<(), stormguard_core::Refused>(())
    /// ```
    #[must_use]
    pub fn handle(&self) -> BreakerRef<'_, M> {
        BreakerRef {
            breaker: self,
            name: self.name(),
        }
    }

    /// Gives a permit back without an outcome (its attempt was abandoned): a probe slot is
    /// freed at once; nothing is counted. The [`Policy`](crate::Policy) does this from a drop
    /// guard when a call's future is dropped mid-attempt.
    pub fn release(&self, permit: Permit) {
        self.with(|b| b.release(permit));
    }
}

impl<M: RawMutex> core::fmt::Debug for Breaker<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Breaker")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// A [`Breaker`] seen through the core's [`Admission`] trait: each method locks the breaker for
/// one synchronous transition, and delivers that transition's events after unlocking. Made by
/// [`Breaker::handle`].
#[derive(Clone, Copy, Debug)]
pub struct BreakerRef<'a, M: RawMutex> {
    breaker: &'a Breaker<M>,
    name: Name,
}

impl<'a, M: RawMutex> BreakerRef<'a, M> {
    /// The breaker this handle locks.
    #[must_use]
    pub const fn breaker(&self) -> &'a Breaker<M> {
        self.breaker
    }
}

impl<M: RawMutex> Admission for BreakerRef<'_, M> {
    fn name(&self) -> &Name {
        &self.name
    }

    fn try_acquire(
        &mut self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        let mut held = Held::new();
        let result = self.breaker.with(|b| {
            b.try_acquire_with(now, attempt_timeout, &mut |e| held.keep(e, &mut *events))
        });
        held.deliver(&self.name, events);
        result.unwrap_or(Err(BUSY))
    }

    fn check(&self, now: Instant) -> Result<(), Refused> {
        self.breaker
            .inner
            .lock(|cell| cell.try_borrow().map_or(Err(BUSY), |b| b.check(now)))
    }

    fn on_outcome(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        let mut held = Held::new();
        self.breaker.with(|b| {
            b.on_outcome(now, permit, outcome, &mut |e| held.keep(e, &mut *events));
        });
        held.deliver(&self.name, events);
    }

    fn release(&mut self, permit: Permit) {
        self.breaker.release(permit);
    }

    fn normal_latency(&self, now: Instant) -> Option<Duration> {
        self.breaker
            .inner
            .lock(|cell| cell.try_borrow().ok().and_then(|b| b.normal_latency(now)))
    }
}
