//! Keyed scope: one breaker per key (a peripheral's bus address, a host) in the core's
//! fixed-capacity [`Keyed`] table, shared behind an `embassy_sync` blocking raw mutex, and
//! [`KeyedPolicy`]: `policy.call(key, |attempt| async { ... })`.
//!
//! The table's rules are the core's ([`Member::is_idle`], [`Member::full_refusal`]): a new key
//! gets a copy of the template breaker (reseeded); when the table is full, the least recently
//! used idle key is evicted (no permit out, and quiet for a trip window if its breaker is
//! closed, for [`STALE_BREAKS`](stormguard_core::breaker::STALE_BREAKS) longest breaks if it is open,
//! half-open or recovering); an open breaker still asked for is never evicted, an isolated one
//! only by [`KeyedBreaker::remove`]; when no key is idle, the new key is refused. That refusal
//! reaches the caller as a guarded rejection with
//! [`RefusalReason::KeyedFull`](stormguard_core::RefusalReason::KeyedFull), its
//! `retry_after` the trip window (the soonest a quiet key becomes idle).

use core::borrow::Borrow;
use core::cell::RefCell;
use core::fmt;
use core::future::Future;
use core::pin::Pin;

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;
use stormguard_core::{
    breaker::HedgeSuppressed, breaker::Keyed, breaker::KeyedRefusal, breaker::Member,
    call::Admission, CallSettings, Duration, Event, Instant, Name, Outcome, Permit, Refused,
    Snapshot, State,
};

use crate::events::{self as event_log};
use crate::events::{Held, Listener, NoListener};
use crate::policy::{drive, funds, prepare, Funds, Gate, Seed};
use crate::sleep::{sleep_until, Slept};
use crate::{Budget, CallError, CallOptions, Classify, CoreBreaker, EmbassyClock};

/// One breaker per key, at most `N` keys: the core's [`Keyed`] table behind an `embassy_sync`
/// blocking raw mutex, locked only for one synchronous step, never across an `.await`; events
/// are delivered after it is released, named after the template breaker.
///
/// ```
/// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
/// use stormguard_core::{BreakerSettings, LeanBreaker, State};
/// use stormguard_embassy::KeyedBreaker;
///
/// static SENSORS: BreakerSettings = match BreakerSettings::consecutive_only("i2c", 3) {
///     Ok(s) => s,
///     Err(_) => panic!(),
/// };
/// # embassy_time::MockDriver::get().reset();
/// // One lean breaker per 7-bit I2C address, up to 8 devices.
/// let per_device: KeyedBreaker<NoopRawMutex, u8, LeanBreaker, 8> =
///     KeyedBreaker::new(LeanBreaker::new(&SENSORS)?);
/// assert_eq!(per_device.state(&0x48), None); // not seen yet
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
pub struct KeyedBreaker<M: RawMutex, K, B: CoreBreaker, const N: usize> {
    inner: Mutex<M, RefCell<Keyed<K, B, N>>>,
    name: B::NameRef,
    /// The refusal a new key gets when the table is full (the core's, from the template).
    full: Refused,
}

impl<M: RawMutex, K: Eq + Clone, B: CoreBreaker + Member, const N: usize> KeyedBreaker<M, K, B, N> {
    /// An empty table whose breakers are copies of `template`.
    #[must_use]
    pub fn new(template: B) -> Self {
        KeyedBreaker {
            name: template.name_ref(),
            full: template.full_refusal(),
            inner: Mutex::new(RefCell::new(Keyed::new(template))),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Keyed<K, B, N>) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow_mut().ok().map(|mut k| f(&mut k)))
    }

    fn read<R>(&self, f: impl FnOnce(&Keyed<K, B, N>) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow().ok().map(|k| f(&k)))
    }

    /// The name every key's breaker carries (the template's).
    #[must_use]
    pub fn name(&self) -> Name {
        *self.name.borrow()
    }

    /// Keys in the table.
    #[must_use]
    pub fn len(&self) -> usize {
        self.read(Keyed::len).unwrap_or(0)
    }

    /// `true` when no key is in the table.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The state of `key`'s breaker now, if the table holds the key.
    #[must_use]
    pub fn state(&self, key: &K) -> Option<State> {
        let now = EmbassyClock::new().now();
        self.read(|k| k.get(key).map(|b| b.state(now))).flatten()
    }

    /// A point-in-time view of `key`'s breaker now, if the table holds the key.
    #[must_use]
    pub fn snapshot(&self, key: &K) -> Option<Snapshot> {
        let now = EmbassyClock::new().now();
        self.read(|k| k.get(key).map(|b| b.snapshot(now))).flatten()
    }

    /// Removes every idle key now; returns how many.
    pub fn evict_idle(&self) -> usize {
        let now = EmbassyClock::new().now();
        self.with(|k| k.evict_idle(now)).unwrap_or(0)
    }

    /// Removes `key` now, whatever its breaker's state (an isolated one included); `true` when
    /// the table held it. A call of the key in flight reports its outcome to nothing.
    pub fn remove(&self, key: &K) -> bool {
        self.with(|k| k.remove(key).is_some()).unwrap_or(false)
    }

    /// A handle implementing the core's [`Admission`] for `key`'s breaker (the key is added at
    /// its first attempt).
    #[must_use]
    pub fn handle(&self, key: K) -> KeyedRef<'_, M, K, B, N> {
        KeyedRef { keyed: self, key }
    }
}

impl<M: RawMutex, K, B: CoreBreaker, const N: usize> fmt::Debug for KeyedBreaker<M, K, B, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBreaker")
            .field("name", &self.name)
            .field("capacity", &N)
            .finish_non_exhaustive()
    }
}

/// One key's breaker in a [`KeyedBreaker`], seen through the core's [`Admission`] trait: each
/// method locks the table for one step.
pub struct KeyedRef<'a, M: RawMutex, K, B: CoreBreaker, const N: usize> {
    keyed: &'a KeyedBreaker<M, K, B, N>,
    key: K,
}

impl<M: RawMutex, K: fmt::Debug, B: CoreBreaker, const N: usize> fmt::Debug
    for KeyedRef<'_, M, K, B, N>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRef")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<M: RawMutex, K: Eq + Clone, B: CoreBreaker + Member, const N: usize> Admission
    for KeyedRef<'_, M, K, B, N>
{
    fn name(&self) -> &Name {
        self.keyed.name.borrow()
    }

    fn try_acquire(
        &mut self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        let mut held = Held::new(self.keyed.name.borrow());
        let key = self.key.clone();
        let result = self.keyed.with(|k| {
            k.try_acquire(key, now, attempt_timeout, &mut |e| {
                held.keep(e, &mut *events);
            })
        });
        held.deliver(events);
        match result {
            Some(Ok(permit)) => Ok(permit),
            Some(Err(KeyedRefusal::Refused(refused))) => Err(refused),
            // The table is full and no key is idle (or, never, found borrowed).
            Some(Err(_)) | None => Err(self.keyed.full),
        }
    }

    fn check(&self, now: Instant) -> Result<(), Refused> {
        self.keyed
            .read(|k| k.get(&self.key).map_or(Ok(()), |b| b.check(now)))
            .unwrap_or(Ok(()))
    }

    fn on_outcome(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        let mut held = Held::new(self.keyed.name.borrow());
        self.keyed.with(|k| {
            k.on_outcome(&self.key, now, permit, outcome, &mut |e| {
                held.keep(e, &mut *events);
            });
        });
        held.deliver(events);
    }

    fn release(&mut self, permit: Permit) {
        self.keyed.with(|k| k.release(&self.key, permit));
    }

    fn normal_latency(&self, now: Instant) -> Option<Duration> {
        self.keyed
            .read(|k| k.get(&self.key).and_then(|b| b.normal_latency(now)))
            .flatten()
    }

    fn attempt_ceiling(&self, now: Instant) -> Option<Duration> {
        self.keyed
            .read(|k| k.get(&self.key).and_then(|b| b.attempt_ceiling(now)))
            .flatten()
    }

    fn slow_threshold(&self, now: Instant) -> Option<Duration> {
        self.keyed
            .read(|k| k.get(&self.key).and_then(|b| b.slow_threshold(now)))
            .flatten()
    }

    fn hedge_after(&self, now: Instant) -> Result<Duration, HedgeSuppressed> {
        self.keyed
            .read(|k| {
                k.get(&self.key)
                    .map_or(Err(HedgeSuppressed::NoBaseline), |b| b.hedge_after(now))
            })
            .unwrap_or(Err(HedgeSuppressed::NotClosed))
    }

    fn censored_latency(&self, now: Instant, ran_past: Duration, draw: u64) -> Duration {
        self.keyed
            .read(|k| {
                k.get(&self.key)
                    .map(|b| b.censored_latency(now, ran_past, draw))
            })
            .flatten()
            .unwrap_or(ran_past)
    }
}

/// `policy.call(key, |attempt| async { ... })`: a [`Policy`](crate::Policy) whose breaker is
/// the key's own in a [`KeyedBreaker`] (retries, deadline, attempt timeout, backoff and the
/// optional retry budget shared by every key).
///
/// ```
/// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
/// use stormguard_core::{BreakerSettings, CallSettings, LeanBreaker};
/// use stormguard_embassy::{CallError, KeyedBreaker, KeyedPolicy};
///
/// static SENSORS: BreakerSettings = match BreakerSettings::consecutive_only("i2c", 3) {
///     Ok(s) => s,
///     Err(_) => panic!(),
/// };
///
/// async fn read_register(address: u8) -> Result<u8, ()> { Ok(address) }
///
/// async fn poll_all(
///     policy: &KeyedPolicy<'_, NoopRawMutex, u8, LeanBreaker, 8>,
/// ) -> Result<(), CallError<()>> {
///     for address in [0x48, 0x49, 0x76] {
///         // A NACKing 0x49 opens 0x49's breaker only.
///         policy.call(address, |_| read_register(address)).await?;
///     }
///     Ok(())
/// }
///
/// # fn build() -> Result<(), stormguard_core::SettingsError> {
/// let per_device: KeyedBreaker<NoopRawMutex, u8, LeanBreaker, 8> =
///     KeyedBreaker::new(LeanBreaker::new(&SENSORS)?);
/// let policy = KeyedPolicy::new(&per_device, CallSettings::DEFAULT);
/// # let _ = policy;
/// # Ok(())
/// # }
/// ```
pub struct KeyedPolicy<'a, M: RawMutex, K, B: CoreBreaker, const N: usize, L = NoListener> {
    keyed: &'a KeyedBreaker<M, K, B, N>,
    budget: Option<&'a Budget<M>>,
    settings: CallSettings,
    seed: Seed,
    listener: L,
}

impl<'a, M: RawMutex, K, B: CoreBreaker, const N: usize> KeyedPolicy<'a, M, K, B, N> {
    /// A policy over `keyed`'s breakers, retrying as `settings` say, with no retry budget and no
    /// listener.
    #[must_use]
    pub const fn new(keyed: &'a KeyedBreaker<M, K, B, N>, settings: CallSettings) -> Self {
        KeyedPolicy {
            keyed,
            budget: None,
            settings,
            seed: Seed::unset(),
            listener: NoListener,
        }
    }

    /// Sends every event to `listener` as well as to `defmt`.
    #[must_use]
    pub const fn with_listener<L: Listener>(self, listener: L) -> KeyedPolicy<'a, M, K, B, N, L> {
        KeyedPolicy {
            keyed: self.keyed,
            budget: self.budget,
            settings: self.settings,
            seed: self.seed,
            listener,
        }
    }
}

impl<'a, M: RawMutex, K, B: CoreBreaker, const N: usize, L> KeyedPolicy<'a, M, K, B, N, L> {
    /// Bounds the retries of every key's calls with `budget`.
    #[must_use]
    pub const fn with_budget(mut self, budget: &'a Budget<M>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Seeds the backoff jitter of the calls that start from now on.
    pub fn set_seed(&self, seed: u64) {
        self.seed.set(seed);
    }

    /// The table of breakers.
    #[must_use]
    pub const fn keyed(&self) -> &'a KeyedBreaker<M, K, B, N> {
        self.keyed
    }
}

impl<M: RawMutex, K: Eq + Clone, B: CoreBreaker + Member, const N: usize, L: Listener>
    KeyedPolicy<'_, M, K, B, N, L>
{
    /// [`Policy::call`](crate::Policy::call) against `key`'s breaker.
    pub async fn call<T, E, F>(&self, key: K, op: F) -> Result<T, CallError<E>>
    where
        F: AsyncFnMut(u32) -> Result<T, E>,
    {
        self.call_with(key, CallOptions::new(), op).await
    }

    /// [`Policy::call_with`](crate::Policy::call_with) against `key`'s breaker.
    pub async fn call_with<T, E, F, C, X>(
        &self,
        key: K,
        options: CallOptions<C, X>,
        op: F,
    ) -> Result<T, CallError<E>>
    where
        F: AsyncFnMut(u32) -> Result<T, E>,
        C: Classify<T, E>,
        X: Future,
    {
        let gate = KeyGate { policy: self, key };
        drive(&gate, options, op).await
    }
}

/// One key of a keyed policy, as a call's gate.
struct KeyGate<'p, 'a, M: RawMutex, K, B: CoreBreaker, const N: usize, L> {
    policy: &'p KeyedPolicy<'a, M, K, B, N, L>,
    key: K,
}

impl<'a, M: RawMutex, K: Eq + Clone, B: CoreBreaker + Member, const N: usize, L: Listener> Gate
    for &KeyGate<'_, 'a, M, K, B, N, L>
{
    type Admission = KeyedRef<'a, M, K, B, N>;
    type Funding = Funds<'a, M>;
    const QUEUES: bool = false;

    fn admission(self) -> Self::Admission {
        self.policy.keyed.handle(self.key.clone())
    }

    fn release(self, permit: Permit) {
        self.policy.keyed.with(|k| k.release(&self.key, permit));
    }

    fn begin(self, now: Instant) -> stormguard_core::Call {
        stormguard_core::Call::begin_salted(
            &self.policy.settings,
            now,
            self.policy.seed.next_salt(),
        )
    }

    fn prepare(self, call: &mut stormguard_core::Call, deadline: Option<embassy_time::Instant>) {
        prepare(call, &self.policy.seed, deadline);
    }

    fn parts(self) -> stormguard_core::Parts<Self::Admission, Self::Funding> {
        stormguard_core::Parts {
            breaker: self.admission(),
            budget: funds(self.policy.budget),
        }
    }

    fn emit(self, event: &Event<'_>) {
        event_log::log(event);
        self.policy.listener.on_event(event);
    }

    fn pause<X: Future>(
        self,
        at: Instant,
        _: bool,
        _: Option<Instant>,
        cancel: Pin<&mut X>,
    ) -> impl Future<Output = Slept> {
        sleep_until(at, cancel)
    }
}
