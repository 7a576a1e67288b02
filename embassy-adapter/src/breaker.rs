//! A circuit breaker that firmware can keep in a `static` and share between tasks (and
//! interrupts), over an `embassy_sync` blocking raw mutex around one of the core's `&mut`
//! breakers.

use core::borrow::Borrow;
use core::fmt;

use embassy_sync::blocking_mutex::raw::RawMutex;
use stormguard_core::part::{Admission, Lock, Locked};
use stormguard_core::{
    breaker::ConstSettings, breaker::Fixed, breaker::SettingsRef, BreakerSettings, Event, Instant,
    LeanBreaker, Name, SettingsError, Snapshot, State,
};

use crate::events;
use crate::shared::Shared;
use crate::EmbassyClock;

mod sealed {
    pub trait Sealed {}
    impl<S: stormguard_core::breaker::SettingsRef> Sealed for stormguard_core::Breaker<S> {}
    impl Sealed for stormguard_core::LeanBreaker {}
}

/// One of the core's single-threaded breakers, as this crate shares it: the core's
/// [`Admission`] (what the call driver asks) plus the rest of the API every core breaker has.
/// Each method is one call into the core; no rule is here.
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
    /// `Breaker` (which does not lend out its `&'static` settings). Read once per call.
    type NameRef: Copy + Borrow<Name> + fmt::Debug;

    /// The name a call carries in the impossible case that the breaker is found busy.
    #[doc(hidden)]
    const BUSY_NAME: Self::NameRef;

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
    fn name_ref(&self) -> Name {
        *self.name()
    }
    core_breaker_api!();
}

/// A circuit breaker shared by several tasks: one of the core's breakers (`B`, a
/// [`CoreBreaker`]) in a [`Shared`] (an `embassy_sync` blocking mutex; see there for the
/// choice of `M`). The lock is taken only for the core's synchronous transitions, never across
/// an `.await`, and events are delivered after it is released.
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
/// Drive calls through a [`Policy`](crate::Policy), or through [`Breaker::part`] and the core's
/// [`Call`](stormguard_core::Call) driver.
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
    shared: Shared<M, B>,
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
            shared: Shared::from_core(breaker),
        }
    }
}

impl<M: RawMutex, B: CoreBreaker> Breaker<M, B> {
    /// Runs `f` on the core breaker under the lock; `None` only on a call from inside the
    /// lock, which this crate never makes.
    fn with<R>(&self, f: impl FnOnce(&mut B) -> R) -> Option<R> {
        self.shared.with(f)
    }

    fn read<R>(&self, f: impl FnOnce(&B) -> R) -> Option<R> {
        self.shared.read(f)
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
        // The name first (the events are named with it as they are kept), then the transition.
        let Some(name) = self.read(B::name_ref) else {
            return;
        };
        let mut deliver = |e: Event<'_>| {
            events::log(&e);
            listener.on_event(&e);
        };
        self.part(name.borrow()).transition(&mut deliver, f);
    }

    /// The name as kept outside the lock, read once per call to name its events.
    pub(crate) fn name_ref(&self) -> B::NameRef {
        self.read(B::name_ref).unwrap_or(B::BUSY_NAME)
    }

    /// The breaker as the core's [`Call`](stormguard_core::Call) driver sees it: the core's
    /// [`Locked`] view, which takes the lock for each transition and delivers that transition's
    /// events after unlocking, named `name`: the breaker's own, read once with
    /// [`Breaker::name`] (the name inside the breaker stays behind the lock).
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::{part::Admission, BreakerSettings, Instant, Outcome};
    /// use stormguard_embassy::Breaker;
    ///
    /// let breaker: Breaker<NoopRawMutex> = Breaker::new(BreakerSettings::defaults("radio"));
    /// let name = breaker.name();
    /// let part = breaker.part(&name);
    /// let now = Instant::from_secs(1);
    /// let permit = part.try_acquire(now, None, &mut |_| {})?;
    /// part.on_outcome(now, permit, Outcome::Success, &mut |_| {});
    /// # Ok::<(), stormguard_core::Refused>(())
    /// ```
    #[must_use]
    pub const fn part<'a>(&'a self, name: &'a Name) -> Locked<'a, Shared<M, B>> {
        Locked::named(&self.shared, name)
    }

    /// Gives a permit back without an outcome (its attempt was abandoned): a probe slot is
    /// freed at once; nothing is counted. The [`Policy`](crate::Policy) does this from a drop
    /// guard when a call's future is dropped mid-attempt.
    pub fn release(&self, permit: stormguard_core::Permit) {
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
