//! Shared, cloneable handles on the core's lock-free breaker and budget.

use std::fmt;
use std::sync::Arc;

use stormguard_core::{
    breaker::PermitGuard, limits::BudgetSnapshot, BreakerSettings, BudgetSettings, Instant, Name,
    Outcome, Ratio, Refused, SettingsError, SharedBreaker, SharedBudget, Snapshot, State,
};

use crate::clock::{default_clock, Clock};
use crate::events;

/// A seed from the process's entropy (the OS-seeded keys of `std`'s `RandomState`, mixed with a
/// counter), so that each process, and each breaker in it, jitters its breaks differently and a
/// fleet's breakers do not re-probe in step.
///
/// ```
/// assert_ne!(stormguard_std::handles::entropy_seed(), stormguard_std::handles::entropy_seed());
/// ```
#[must_use]
pub fn entropy_seed() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// The calling thread's lane of a [`SharedBreaker`]'s counters
/// ([`SharedBreaker::with_lane_hint`]): each thread is numbered at its first call, in the order
/// threads first ask, so the worker threads of a runtime write different lanes while there are
/// no more of them than lanes. [`Breaker::new`] sets it on every breaker it builds.
///
/// ```
/// let here = stormguard_std::handles::lane_hint();
/// assert_eq!(here, stormguard_std::handles::lane_hint(), "a thread keeps its lane");
/// let there = std::thread::spawn(stormguard_std::handles::lane_hint).join().unwrap();
/// assert_ne!(here, there);
/// ```
#[must_use]
pub fn lane_hint() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // Const-initialised, so reading it is a plain thread-local load; `usize::MAX` until the
    // thread's first call numbers it.
    thread_local!(static LANE: Cell<usize> = const { Cell::new(usize::MAX) });
    LANE.with(|lane| match lane.get() {
        usize::MAX => {
            let n = NEXT.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
            lane.set(n);
            n
        }
        n => n,
    })
}

/// A circuit breaker shared by every task and thread that holds a clone: an
/// `Arc<`[`SharedBreaker`]`>`, lock-free on the call path (`Send + Sync`, `&self`, atomics only).
///
/// [`Breaker::new`] seeds the break jitter from [`entropy_seed`], so a fleet's breaks do not
/// line up, and gives each thread its own lane of the breaker's counters ([`lane_hint`]), so
/// that the threads of a runtime do not all write the same words on every call. Methods without a `now` read the process-wide clock (`TokioClock::global()`, or
/// [`MonotonicClock::global`](crate::clock::MonotonicClock::global) without the `tokio` feature),
/// which is the clock policies read by default; with a policy on another clock, use the `_at`
/// forms with that clock's readings.
///
/// ```
/// use stormguard_std::{BreakerSettings, State};
/// use stormguard_std::Breaker;
///
/// let payments = Breaker::new(BreakerSettings::defaults("payments"));
/// let same = payments.clone(); // same breaker, for another policy or the health registry
/// assert_eq!(same.name().as_str(), "payments");
/// assert_eq!(payments.state(), State::Closed);
/// payments.isolate();
/// assert_eq!(same.state(), State::Isolated);
/// payments.reset();
/// assert_eq!(same.state(), State::Closed);
/// ```
#[derive(Clone)]
pub struct Breaker {
    inner: Arc<SharedBreaker>,
}

impl Breaker {
    /// A closed breaker with validated `settings`, its jitter seeded from [`entropy_seed`].
    #[must_use]
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker::from_shared(
            SharedBreaker::new(settings)
                .with_seed(entropy_seed())
                .with_lane_hint(lane_hint),
        )
    }

    /// The common case: trips after `consecutive_failures` transient failures in a row, every
    /// other setting at its default.
    ///
    /// ```
    /// let breaker = stormguard_std::Breaker::of(5, "payments")?;
    /// assert_eq!(breaker.settings().consecutive_failures(), 5);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn of(consecutive_failures: u32, name: &'static str) -> Result<Breaker, SettingsError> {
        BreakerSettings::builder(name)
            .consecutive_failures(consecutive_failures)
            .build()
            .map(Breaker::new)
    }

    /// Wraps a breaker built elsewhere (its seed and lane hint are kept as they are: without
    /// `.with_lane_hint(stormguard_std::handles::lane_hint)`, every thread writes the same lane).
    ///
    /// ```
    /// use stormguard_std::BreakerSettings;
    /// use stormguard_std::stormguard_core::SharedBreaker;
    /// let breaker = stormguard_std::Breaker::from_shared(
    ///     SharedBreaker::new(BreakerSettings::defaults("search")).with_seed(7),
    /// );
    /// assert_eq!(breaker.name().as_str(), "search");
    /// ```
    #[must_use]
    pub fn from_shared(shared: SharedBreaker) -> Breaker {
        Breaker {
            inner: Arc::new(shared),
        }
    }

    /// The core's shared breaker, for its full API (`try_acquire_guarded`, `poll_timeout`, ...).
    ///
    /// ```
    /// let breaker = stormguard_std::Breaker::of(3, "db")?;
    /// assert_eq!(breaker.shared().name().as_str(), "db");
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[must_use]
    pub fn shared(&self) -> &SharedBreaker {
        &self.inner
    }

    /// The breaker's name.
    ///
    /// ```
    /// assert_eq!(stormguard_std::Breaker::of(3, "db")?.name().as_str(), "db");
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[must_use]
    pub fn name(&self) -> &Name {
        self.inner.name()
    }

    /// The settings it was built with.
    ///
    /// ```
    /// assert_eq!(stormguard_std::Breaker::of(3, "db")?.settings().half_open_probes(), 1);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[must_use]
    pub fn settings(&self) -> &BreakerSettings {
        self.inner.settings()
    }

    /// The state now (process-wide clock); reading consumes nothing.
    ///
    /// ```
    /// use stormguard_std::State;
    /// assert_eq!(stormguard_std::Breaker::of(3, "db")?.state(), State::Closed);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[must_use]
    pub fn state(&self) -> State {
        self.state_at(default_clock().now())
    }

    /// The state at `now`.
    ///
    /// ```
    /// use stormguard_std::{Instant, State};
    /// let b = stormguard_std::Breaker::of(3, "db")?;
    /// assert_eq!(b.state_at(Instant::from_secs(1)), State::Closed);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[must_use]
    pub fn state_at(&self, now: Instant) -> State {
        self.inner.state(now)
    }

    /// A snapshot now (process-wide clock), for health and metrics; consistent per word (see
    /// [`SharedBreaker`]).
    ///
    /// ```
    /// let b = stormguard_std::Breaker::of(3, "db")?;
    /// assert!(!b.snapshot().is_degraded());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_at(default_clock().now())
    }

    /// A snapshot at `now`.
    ///
    /// ```
    /// use stormguard_std::Instant;
    /// let b = stormguard_std::Breaker::of(3, "db")?;
    /// assert_eq!(b.snapshot_at(Instant::from_secs(1)).window_calls, 0);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[must_use]
    pub fn snapshot_at(&self, now: Instant) -> Snapshot {
        self.inner.snapshot(now)
    }

    /// Forces the breaker open until [`Breaker::reset`] (an operator's switch). The state change
    /// is logged to `tracing`; [`Policy::isolate`](crate::Policy::isolate) also tells the
    /// policy's listener.
    ///
    /// ```
    /// use stormguard_std::State;
    /// let b = stormguard_std::Breaker::of(3, "db")?;
    /// b.isolate();
    /// assert_eq!(b.state(), State::Isolated);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn isolate(&self) {
        self.inner
            .isolate(default_clock().now(), &mut |e| events::trace(&e));
    }

    /// Closes the breaker (the learned baselines stay); logged to `tracing`.
    ///
    /// ```
    /// use stormguard_std::State;
    /// let b = stormguard_std::Breaker::of(3, "db")?;
    /// b.isolate();
    /// b.reset();
    /// assert_eq!(b.state(), State::Closed);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn reset(&self) {
        self.inner
            .reset(default_clock().now(), &mut |e| events::trace(&e));
    }

    /// Asks to make one attempt now, for a caller that drives the breaker itself (a
    /// [`Policy`](crate::Policy) does this for its calls). The process-wide clock is read
    /// only when a rule needs it: an open or half-open breaker reads it, a closed one only
    /// when it keeps statistics (a latency to measure), so a closed consecutive-failure
    /// breaker admits and records a success without reading a clock. State changes are
    /// logged to `tracing`.
    ///
    /// Report how the attempt ended through the permit; dropped without an outcome, it is
    /// handed back (a half-open probe slot is freed).
    ///
    /// ```
    /// use stormguard_std::{Outcome, State};
    /// let b = stormguard_std::Breaker::of(2, "db")?;
    /// for _ in 0..2 {
    ///     let permit = b.try_acquire()?;
    ///     permit.record(Outcome::Transient); // e.g. a connection refused
    /// }
    /// assert_eq!(b.state(), State::Open);
    /// assert!(b.try_acquire().is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire(&self) -> Result<BreakerPermit<'_>, Refused> {
        self.try_acquire_on(&ProcessClock)
    }

    /// [`Breaker::try_acquire`] on `clock` (the clock of the policies sharing this breaker,
    /// when it is not the process-wide one), read only when a rule needs it.
    ///
    /// ```
    /// use stormguard_std::{Clock, Instant, ManualClock, Outcome, State};
    /// let clock = ManualClock::starting_at(Instant::from_secs(1));
    /// let b = stormguard_std::Breaker::of(1, "db")?;
    /// b.try_acquire_on(&clock)?.record_on(&clock, Outcome::Transient);
    /// assert_eq!(b.state_at(clock.now()), State::Open);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire_on(&self, clock: &impl Clock) -> Result<BreakerPermit<'_>, Refused> {
        let permit = self
            .inner
            .try_acquire_lazy(|| clock.now(), None, &mut |e| events::trace(&e))?;
        Ok(BreakerPermit(self.inner.guard(permit)))
    }

    /// `true` when both handles are the same breaker.
    ///
    /// ```
    /// let a = stormguard_std::Breaker::of(3, "db")?;
    /// assert!(a.same_as(&a.clone()));
    /// assert!(!a.same_as(&stormguard_std::Breaker::of(3, "db")?));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[must_use]
    pub fn same_as(&self, other: &Breaker) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// The clock [`Breaker::try_acquire`] reads: the process-wide one, made only when read.
struct ProcessClock;

impl Clock for ProcessClock {
    #[inline]
    fn now(&self) -> Instant {
        default_clock().now()
    }
}

/// One admitted attempt of a [`Breaker`] (from [`Breaker::try_acquire`]): report how it
/// ended with [`BreakerPermit::record`]. Dropped without an outcome, it is handed back, so a
/// cancelled attempt never holds a half-open probe slot.
#[must_use = "dropping the permit hands it back without an outcome"]
#[derive(Debug)]
pub struct BreakerPermit<'a>(PermitGuard<'a>);

impl BreakerPermit<'_> {
    /// Reports how the attempt ended; the process-wide clock is read only when a rule needs
    /// it (not for a success of a closed breaker that keeps no statistics).
    pub fn record(self, outcome: Outcome) {
        self.record_on(&ProcessClock, outcome);
    }

    /// [`BreakerPermit::record`] on `clock`: the clock the permit was asked on.
    pub fn record_on(self, clock: &impl Clock, outcome: Outcome) {
        self.0
            .complete_lazy(|| clock.now(), outcome, &mut |e| events::trace(&e));
    }
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("name", &self.name().as_str())
            .finish_non_exhaustive()
    }
}

/// A retry budget shared by every clone: an `Arc<`[`SharedBudget`]`>`, one atomic word, no lock.
/// Share one deliberately (several policies calling the same dependency); a budget is otherwise
/// private to its policy.
///
/// ```
/// use stormguard_std::BudgetSettings;
/// use stormguard_std::Budget;
///
/// let retries = Budget::new(BudgetSettings::defaults("payments"));
/// assert_eq!(retries.available(), 30);
/// assert_eq!(retries.utilization().ppm(), 0);
/// ```
#[derive(Clone)]
pub struct Budget {
    inner: Arc<SharedBudget>,
}

impl Budget {
    /// A full budget with validated `settings`.
    #[must_use]
    pub fn new(settings: BudgetSettings) -> Budget {
        Budget::from_shared(SharedBudget::new(settings))
    }

    /// The defaults (a tenth of a retry per success, a floor of 3 per second, 30 tokens).
    /// A name that a settings builder refuses (blank, or holding a control character) is
    /// replaced by `"unnamed"`, as in [`BudgetSettings::defaults`]; build the settings with
    /// [`BudgetSettings::builder`] to have it reported.
    ///
    /// ```
    /// assert_eq!(stormguard_std::Budget::defaults("db").settings().capacity(), 30);
    /// ```
    #[must_use]
    pub fn defaults(name: &'static str) -> Budget {
        Budget::new(BudgetSettings::defaults(name))
    }

    /// Wraps a budget built elsewhere.
    ///
    /// ```
    /// use stormguard_std::BudgetSettings;
    /// use stormguard_std::stormguard_core::SharedBudget;
    /// let b = stormguard_std::Budget::from_shared(SharedBudget::new(BudgetSettings::defaults("db")));
    /// assert_eq!(b.name().as_str(), "db");
    /// ```
    #[must_use]
    pub fn from_shared(shared: SharedBudget) -> Budget {
        Budget {
            inner: Arc::new(shared),
        }
    }

    /// The core's shared budget.
    ///
    /// ```
    /// use stormguard_std::Instant;
    /// let b = stormguard_std::Budget::defaults("db");
    /// assert!(b.shared().try_withdraw(Instant::from_secs(1)).is_ok());
    /// ```
    #[must_use]
    pub fn shared(&self) -> &SharedBudget {
        &self.inner
    }

    /// The budget's name.
    ///
    /// ```
    /// assert_eq!(stormguard_std::Budget::defaults("db").name().as_str(), "db");
    /// ```
    #[must_use]
    pub fn name(&self) -> &Name {
        self.inner.settings().name()
    }

    /// The settings it was built with.
    ///
    /// ```
    /// assert_eq!(stormguard_std::Budget::defaults("db").settings().capacity(), 30);
    /// ```
    #[must_use]
    pub fn settings(&self) -> &BudgetSettings {
        self.inner.settings()
    }

    /// Whole retries available now (process-wide clock).
    ///
    /// ```
    /// assert_eq!(stormguard_std::Budget::defaults("db").available(), 30);
    /// ```
    #[must_use]
    pub fn available(&self) -> u32 {
        self.inner.available(default_clock().now())
    }

    /// How much of the budget is spent now: 0 full, 1 empty.
    ///
    /// ```
    /// assert!(stormguard_std::Budget::defaults("db").utilization().is_zero());
    /// ```
    #[must_use]
    pub fn utilization(&self) -> Ratio {
        self.inner.utilization(default_clock().now())
    }

    /// A snapshot now (process-wide clock).
    ///
    /// ```
    /// assert_eq!(stormguard_std::Budget::defaults("db").snapshot().available, 30);
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> BudgetSnapshot {
        self.snapshot_at(default_clock().now())
    }

    /// A snapshot at `now`.
    ///
    /// ```
    /// use stormguard_std::Instant;
    /// let b = stormguard_std::Budget::defaults("db");
    /// assert_eq!(b.snapshot_at(Instant::from_secs(1)).available, 30);
    /// ```
    #[must_use]
    pub fn snapshot_at(&self, now: Instant) -> BudgetSnapshot {
        self.inner.snapshot(now)
    }

    /// `true` when both handles are the same budget.
    ///
    /// ```
    /// let a = stormguard_std::Budget::defaults("db");
    /// assert!(a.same_as(&a.clone()));
    /// ```
    #[must_use]
    pub fn same_as(&self, other: &Budget) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("name", &self.name().as_str())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}

    #[test]
    fn handles_are_send_sync_and_cloneable() {
        assert_send_sync::<Breaker>();
        assert_send_sync::<Budget>();
    }

    #[test]
    fn breakers_get_different_seeds() {
        // Two breakers with the same settings open with different jittered breaks (with
        // overwhelming probability: the jitter spans half the break in nanoseconds).
        let settings = BreakerSettings::consecutive_only("seeded", 1).unwrap();
        let open = |b: &Breaker| {
            let now = Instant::from_secs(1);
            let p = b.shared().try_acquire(now, None, &mut |_| {}).unwrap();
            b.shared()
                .on_outcome(now, p, stormguard_core::Outcome::Transient, &mut |_| {});
            b.snapshot_at(now).until_half_open
        };
        let a = open(&Breaker::new(settings));
        let b = open(&Breaker::new(settings));
        assert_ne!(a, b);
    }
}
