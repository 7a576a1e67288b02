//! A circuit breaker that firmware can keep in a `static` and share between tasks (and
//! interrupts), over an `embassy_sync` blocking raw mutex around one of the core's `&mut`
//! breakers.

use core::borrow::Borrow;
use core::cell::RefCell;
use core::fmt;

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;
use stormguard_core::{
    breaker::ConstSettings, breaker::Fixed, breaker::HedgeSuppressed, breaker::SettingsRef,
    call::Admission, BreakerSettings, Duration, Event, Instant, LeanBreaker, Name, Outcome, Permit,
    RefusalReason, Refused, SettingsError, Snapshot, State,
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

mod sealed {
    pub trait Sealed {}
    impl<S: stormguard_core::breaker::SettingsRef> Sealed for stormguard_core::Breaker<S> {}
    impl Sealed for stormguard_core::LeanBreaker {}
}

/// One of the core's single-threaded breakers, as this crate shares it: the core's
/// [`Admission`] (acquire, outcome, release) plus the rest of the `&mut` API that every core
/// breaker has. Each method is one call into the core; no rule is here.
///
/// Implemented by the three kinds a firmware picks from (sealed):
///
/// | core breaker | rules | settings | `size_of` on thumbv7em |
/// |---|---|---|---|
/// | [`LeanBreaker`] | consecutive failures, doubling jittered break, probes | `&'static` | 40 B |
/// | [`Breaker<&'static BreakerSettings>`](stormguard_core::Breaker::from_static) | every rule | `&'static` | about 900 B (the statistics) |
/// | [`Breaker`](stormguard_core::Breaker) (the default) | every rule | its own copy | about 1.1 KB |
///
/// (`firmware/size-report.sh` prints the current figures.)
pub trait CoreBreaker: Admission + sealed::Sealed {
    /// How this crate keeps the breaker's name outside the lock, to name the events it delivers
    /// after unlocking: a `&'static Name` for a [`LeanBreaker`], a copy for the core's
    /// `Breaker` (which does not lend out its `&'static` settings).
    type NameRef: Copy + Borrow<Name> + fmt::Debug;

    /// The name a handle carries in the impossible case that the breaker is found borrowed.
    #[doc(hidden)]
    const BUSY_NAME: Self::NameRef;

    /// Whether the breaker can learn a latency (a [`LeanBreaker`] keeps no statistics): read
    /// outside the lock, so a lean firmware leaves out the code that acts on a learned median
    /// (a measured backoff base, the retry's healthy-call guard).
    #[doc(hidden)]
    const LEARNS: bool;

    /// The name, as kept outside the lock.
    fn name_ref(&self) -> Self::NameRef;
    /// The settings the breaker was built with.
    fn settings(&self) -> &BreakerSettings;
    /// Sets the jitter seed in place.
    fn set_seed(&mut self, seed: u64);
    /// The state at `now`; reading consumes nothing.
    fn state(&self, now: Instant) -> State;
    /// A point-in-time view at `now`.
    fn snapshot(&self, now: Instant) -> Snapshot;
    /// Forces the breaker open until [`CoreBreaker::reset`].
    fn isolate(&mut self, now: Instant, events: &mut dyn FnMut(Event<'_>));
    /// Closes the breaker.
    fn reset(&mut self, now: Instant, events: &mut dyn FnMut(Event<'_>));
    /// When a timed transition is due, if any.
    fn poll_timeout(&self, now: Instant) -> Option<Instant>;
    /// Realises the timed transitions due at `now`.
    fn handle_timeout(&mut self, now: Instant, events: &mut dyn FnMut(Event<'_>));
}

/// The part of [`CoreBreaker`] that is the same call for every core breaker.
macro_rules! core_breaker_api {
    () => {
        fn settings(&self) -> &BreakerSettings {
            Self::settings(self)
        }
        fn set_seed(&mut self, seed: u64) {
            Self::set_seed(self, seed);
        }
        fn state(&self, now: Instant) -> State {
            Self::state(self, now)
        }
        fn snapshot(&self, now: Instant) -> Snapshot {
            Self::snapshot(self, now)
        }
        fn isolate(&mut self, now: Instant, events: &mut dyn FnMut(Event<'_>)) {
            Self::isolate(self, now, &mut |e| events(e));
        }
        fn reset(&mut self, now: Instant, events: &mut dyn FnMut(Event<'_>)) {
            Self::reset(self, now, &mut |e| events(e));
        }
        fn poll_timeout(&self, now: Instant) -> Option<Instant> {
            Self::poll_timeout(self, now)
        }
        fn handle_timeout(&mut self, now: Instant, events: &mut dyn FnMut(Event<'_>)) {
            Self::handle_timeout(self, now, &mut |e| events(e));
        }
    };
}

impl CoreBreaker for LeanBreaker {
    type NameRef = &'static Name;
    const BUSY_NAME: &'static Name = &Name::new("busy");
    const LEARNS: bool = false;
    fn name_ref(&self) -> &'static Name {
        LeanBreaker::name(self)
    }
    core_breaker_api!();
}

impl<S: SettingsRef> CoreBreaker for stormguard_core::Breaker<S> {
    // The core does not hand out its `&'static` settings reference, so a copy even for
    // `Breaker<&'static BreakerSettings>`.
    type NameRef = Name;
    const BUSY_NAME: Name = Name::new("busy");
    const LEARNS: bool = true;
    fn name_ref(&self) -> Name {
        *self.name()
    }
    core_breaker_api!();
}

/// A circuit breaker shared by several tasks: one of the core's breakers (`B`, a
/// [`CoreBreaker`]) inside an `embassy_sync` [`blocking_mutex::Mutex`](Mutex)`<M, RefCell<B>>`.
///
/// `M` is the embassy idiom for who may share it: [`NoopRawMutex`] among the tasks of one
/// executor (the breaker then is not `Sync`; keep it in a `StaticCell` or a task's frame),
/// [`CriticalSectionRawMutex`] across executors and interrupts (then it can be a `static`). The
/// lock is taken only for the core's synchronous transitions, never across an `.await`, and
/// events are delivered after it is released.
///
/// `B` is the core breaker, picked by the constructor:
/// - [`Breaker::lean`]: a [`LeanBreaker`] over settings in a `static`: consecutive failures,
///   the doubling jittered break and probes, in a few words of RAM. The natural choice for a
///   sensor or a radio link.
/// - [`Breaker::from_static`]: the full breaker (every rule, with its statistics) over settings
///   in a `static`.
/// - [`Breaker::new`] (the default `B`): the full breaker holding its own copy of the settings.
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
/// use stormguard_core::{BreakerSettings, LeanBreaker, State};
/// use stormguard_embassy::Breaker;
///
/// static SENSOR: BreakerSettings = match BreakerSettings::consecutive_only("sensor", 3) {
///     Ok(s) => s,
///     Err(_) => panic!("invalid breaker settings"),
/// };
/// static BREAKER: Breaker<CriticalSectionRawMutex, LeanBreaker> = match Breaker::lean(&SENSOR) {
///     Ok(b) => b,
///     Err(_) => panic!("settings that need statistics"),
/// };
///
/// # use critical_section as _; // the host's critical-section implementation, for this test
/// assert_eq!(BREAKER.name().as_str(), "sensor");
/// ```
pub struct Breaker<M: RawMutex, B = stormguard_core::Breaker> {
    inner: Mutex<M, RefCell<B>>,
}

impl<M: RawMutex> Breaker<M> {
    /// A closed full breaker holding its own copy of the validated `settings`; `const`, so it
    /// can be a `static`. Its jitter seed is derived from its name: give each device its own
    /// with [`Breaker::set_seed`]. Keep the settings in a `static` and use [`Breaker::lean`] or
    /// [`Breaker::from_static`] to save their size in RAM.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::BreakerSettings;
    /// use stormguard_embassy::Breaker;
    ///
    /// let breaker: Breaker<NoopRawMutex> = Breaker::new(BreakerSettings::defaults("radio"));
    /// assert_eq!(breaker.name().as_str(), "radio");
    /// ```
    #[must_use]
    pub const fn new(settings: BreakerSettings) -> Breaker<M> {
        Breaker::from_core(stormguard_core::Breaker::new(settings))
    }
}

impl<M: RawMutex> Breaker<M, LeanBreaker> {
    /// A closed [`LeanBreaker`] over `settings` in a `static`, or the first of the settings
    /// that needs statistics (which a lean breaker does not keep: use
    /// [`BreakerSettings::consecutive_only`]). `const`: in a `static`, a refusal is a
    /// compile-time error.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
    /// use stormguard_core::{BreakerSettings, LeanBreaker};
    /// use stormguard_embassy::Breaker;
    ///
    /// static FULL: BreakerSettings = BreakerSettings::defaults("radio");
    /// assert!(Breaker::<CriticalSectionRawMutex, LeanBreaker>::lean(&FULL).is_err());
    /// ```
    pub const fn lean(
        settings: &'static BreakerSettings,
    ) -> Result<Breaker<M, LeanBreaker>, SettingsError> {
        match LeanBreaker::new(settings) {
            Ok(b) => Ok(Breaker::from_core(b)),
            Err(e) => Err(e),
        }
    }
}

impl<M: RawMutex> Breaker<M, stormguard_core::Breaker<&'static BreakerSettings>> {
    /// A closed full breaker (every rule the `settings` enable, with its statistics) over
    /// `settings` in a `static`: the same breaker as [`Breaker::new`]'s without a copy of the
    /// settings in its own memory.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
    /// use stormguard_core::BreakerSettings;
    /// use stormguard_embassy::Breaker;
    ///
    /// static RADIO: BreakerSettings = BreakerSettings::defaults("radio");
    /// static BREAKER: Breaker<
    ///     CriticalSectionRawMutex,
    ///     stormguard_core::Breaker<&'static BreakerSettings>,
    /// > = Breaker::from_static(&RADIO);
    /// ```
    #[must_use]
    pub const fn from_static(
        settings: &'static BreakerSettings,
    ) -> Breaker<M, stormguard_core::Breaker<&'static BreakerSettings>> {
        Breaker::from_core(stormguard_core::Breaker::from_static(settings))
    }
}

impl<M: RawMutex, T: ConstSettings> Breaker<M, stormguard_core::Breaker<Fixed<T>>> {
    /// A closed full breaker over settings known at compile time ([`ConstSettings`]): the
    /// same breaker as [`Breaker::from_static`]'s, with the settings folded into the code, so
    /// that the rules they switch off are left out of the firmware (some 1.2 KB less flash for
    /// the default rule set).
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
    /// use stormguard_core::{BreakerSettings, breaker::ConstSettings, breaker::Fixed};
    /// use stormguard_embassy::Breaker;
    ///
    /// struct Radio;
    /// impl ConstSettings for Radio {
    ///     const SETTINGS: BreakerSettings = BreakerSettings::defaults("radio");
    /// }
    /// static BREAKER: Breaker<CriticalSectionRawMutex, stormguard_core::Breaker<Fixed<Radio>>> =
    ///     Breaker::fixed();
    /// assert_eq!(BREAKER.name().as_str(), "radio");
    /// ```
    #[must_use]
    pub const fn fixed() -> Self {
        Breaker::from_core(stormguard_core::Breaker::fixed())
    }
}

impl<M: RawMutex, B> Breaker<M, B> {
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
    pub const fn from_core(breaker: B) -> Breaker<M, B> {
        Breaker {
            inner: Mutex::new(RefCell::new(breaker)),
        }
    }
}

impl<M: RawMutex, B: CoreBreaker> Breaker<M, B> {
    /// Runs `f` on the core breaker under the lock. `None` only on a re-entrant call (see
    /// [`BUSY`]), which this crate never makes.
    fn with<R>(&self, f: impl FnOnce(&mut B) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow_mut().ok().map(|mut b| f(&mut b)))
    }

    /// Reads the core breaker under the lock; `None` only on a re-entrant call.
    fn read<R>(&self, f: impl FnOnce(&B) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow().ok().map(|b| f(&b)))
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
        self.with(|b| b.set_seed(seed));
    }

    /// The breaker's name (a copy: the breaker itself stays behind its lock).
    #[must_use]
    pub fn name(&self) -> Name {
        self.read(|b| *b.name_ref().borrow())
            .unwrap_or(Name::new("busy"))
    }

    /// The settings the breaker was built with.
    #[must_use]
    pub fn settings(&self) -> BreakerSettings {
        self.read(|b| *b.settings())
            .unwrap_or(BreakerSettings::defaults("busy"))
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
        self.read(|b| b.state(now)).unwrap_or(State::Closed)
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
        self.read(|b| b.snapshot(now))
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
        self.transition(listener, |b, sink| b.isolate(now, sink));
    }

    /// Closes the breaker: clears the trip window and the break growth (the learned baselines
    /// stay); its event goes to `defmt` and to `listener`.
    pub fn reset(&self, listener: &impl crate::Listener) {
        let now = EmbassyClock::new().now();
        self.transition(listener, |b, sink| b.reset(now, sink));
    }

    /// When a timed transition is due (the break ending, a lost probe being reclaimed, the ramp
    /// running out), if any: a supervisor task can sleep until then and call
    /// [`Breaker::handle_timeout`], so the state change is logged when it happens rather than
    /// at the next call.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<embassy_time::Instant> {
        let now = EmbassyClock::new().now();
        self.read(|b| b.poll_timeout(now))
            .flatten()
            .map(crate::time::to_embassy_instant)
    }

    /// Realises the timed transitions due now and delivers their events to `defmt` and
    /// `listener`. Calling it early, or twice, does nothing.
    pub fn handle_timeout(&self, listener: &impl crate::Listener) {
        let now = EmbassyClock::new().now();
        self.transition(listener, |b, sink| b.handle_timeout(now, sink));
    }

    fn transition(
        &self,
        listener: &impl crate::Listener,
        f: impl FnOnce(&mut B, &mut dyn FnMut(Event<'_>)),
    ) {
        let mut deliver = |e: Event<'_>| {
            events::log(&e);
            listener.on_event(&e);
        };
        // The name first (the events are named with it as they are kept), then the transition.
        let Some(name) = self.read(B::name_ref) else {
            return;
        };
        let mut held = Held::new(name.borrow());
        if self
            .with(|b| f(b, &mut |e| held.keep(e, &mut deliver)))
            .is_some()
        {
            held.deliver(&mut deliver);
        }
    }

    /// A handle that implements the core's [`Admission`] trait by locking this breaker for each
    /// transition, so the core's [`Call`](stormguard_core::Call) driver runs unchanged over it.
    /// It carries the name (a `&'static` reference, or a copy for a breaker that owns its
    /// settings), which the events it delivers borrow.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::{call::Admission, BreakerSettings, Instant, Outcome};
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
    pub fn handle(&self) -> BreakerRef<'_, M, B> {
        let name = self.read(B::name_ref).unwrap_or(B::BUSY_NAME);
        BreakerRef {
            breaker: self,
            name,
        }
    }

    /// A handle that does not read the name (its events would be misnamed): only to give a
    /// permit back through the admission the permit came from, without taking the lock twice.
    pub(crate) fn releaser(&self) -> BreakerRef<'_, M, B> {
        BreakerRef {
            breaker: self,
            name: B::BUSY_NAME,
        }
    }

    /// Gives a permit back without an outcome (its attempt was abandoned): a probe slot is
    /// freed at once; nothing is counted. The [`Policy`](crate::Policy) does this from a drop
    /// guard when a call's future is dropped mid-attempt.
    pub fn release(&self, permit: Permit) {
        self.with(|b| b.release(permit));
    }
}

impl<M: RawMutex, B: CoreBreaker> fmt::Debug for Breaker<M, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// A [`Breaker`] seen through the core's [`Admission`] trait: each method locks the breaker for
/// one synchronous transition, and delivers that transition's events after unlocking. Made by
/// [`Breaker::handle`].
pub struct BreakerRef<'a, M: RawMutex, B: CoreBreaker = stormguard_core::Breaker> {
    breaker: &'a Breaker<M, B>,
    name: B::NameRef,
}

impl<M: RawMutex, B: CoreBreaker> Clone for BreakerRef<'_, M, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: RawMutex, B: CoreBreaker> Copy for BreakerRef<'_, M, B> {}

impl<M: RawMutex, B: CoreBreaker> fmt::Debug for BreakerRef<'_, M, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerRef")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<'a, M: RawMutex, B: CoreBreaker> BreakerRef<'a, M, B> {
    /// The breaker this handle locks.
    #[must_use]
    pub const fn breaker(&self) -> &'a Breaker<M, B> {
        self.breaker
    }
}

impl<M: RawMutex, B: CoreBreaker> BreakerRef<'_, M, B> {
    /// [`Admission::try_acquire`] for a caller that hears no event: the core's events are
    /// dropped where they are made, and none is held.
    pub(crate) fn try_acquire_unheard(
        &mut self,
        now: Instant,
        attempt_timeout: Option<Duration>,
    ) -> Result<Permit, Refused> {
        self.breaker
            .with(|b| b.try_acquire(now, attempt_timeout, &mut |_| {}))
            .unwrap_or(Err(BUSY))
    }

    /// [`Admission::on_outcome`] for a caller that hears no event.
    pub(crate) fn on_outcome_unheard(&mut self, now: Instant, permit: Permit, outcome: Outcome) {
        self.breaker
            .with(|b| b.on_outcome(now, permit, outcome, &mut |_| {}));
    }
}

impl<M: RawMutex, B: CoreBreaker> Admission for BreakerRef<'_, M, B> {
    fn name(&self) -> &Name {
        self.name.borrow()
    }

    fn try_acquire(
        &mut self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        let mut held = Held::new(self.name.borrow());
        let result = self
            .breaker
            .with(|b| b.try_acquire(now, attempt_timeout, &mut |e| held.keep(e, &mut *events)));
        held.deliver(events);
        result.unwrap_or(Err(BUSY))
    }

    fn check(&self, now: Instant) -> Result<(), Refused> {
        self.breaker.read(|b| b.check(now)).unwrap_or(Err(BUSY))
    }

    fn on_outcome(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        let mut held = Held::new(self.name.borrow());
        self.breaker.with(|b| {
            b.on_outcome(now, permit, outcome, &mut |e| held.keep(e, &mut *events));
        });
        held.deliver(events);
    }

    fn release(&mut self, permit: Permit) {
        self.breaker.release(permit);
    }

    fn normal_latency(&self, now: Instant) -> Option<Duration> {
        if !B::LEARNS {
            return None;
        }
        self.breaker.read(|b| b.normal_latency(now)).flatten()
    }

    fn attempt_ceiling(&self, now: Instant) -> Option<Duration> {
        self.breaker.read(|b| b.attempt_ceiling(now)).flatten()
    }

    fn slow_threshold(&self, now: Instant) -> Option<Duration> {
        self.breaker.read(|b| b.slow_threshold(now)).flatten()
    }

    fn hedge_after(&self, now: Instant) -> Result<Duration, HedgeSuppressed> {
        // Found borrowed (never, see `BUSY`): no hedge, which is always safe.
        self.breaker
            .read(|b| b.hedge_after(now))
            .unwrap_or(Err(HedgeSuppressed::NotClosed))
    }

    fn censored_latency(&self, now: Instant, ran_past: Duration, draw: u64) -> Duration {
        self.breaker
            .read(|b| b.censored_latency(now, ran_past, draw))
            .unwrap_or(ran_past)
    }

    fn self_limits(&self) -> bool {
        false
    }
}
