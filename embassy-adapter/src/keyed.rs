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
use core::fmt;
use core::future::Future;
use core::pin::Pin;

use embassy_sync::blocking_mutex::raw::RawMutex;
use stormguard_core::breaker::{Keyed, LockedKey, Member};
use stormguard_core::part::{Lock, Locked};
use stormguard_core::{CallSettings, Event, Instant, Name, Parts, Refused, Snapshot, State};

use crate::events::{self as event_log};
use crate::events::{Ears, Listener, NoListener};
use crate::policy::{drive, prepare, Route, Seed};
use crate::shared::Shared;
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
    shared: Shared<M, Keyed<K, B, N>>,
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
            shared: Shared::from_core(Keyed::new(template)),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Keyed<K, B, N>) -> R) -> Option<R> {
        self.shared.with(f)
    }

    fn read<R>(&self, f: impl FnOnce(&Keyed<K, B, N>) -> R) -> Option<R> {
        self.shared.read(f)
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

    /// `key`'s breaker as the core's call driver sees it (the key is added at its first
    /// attempt): the core's [`LockedKey`] view, which locks the table for each step; its
    /// events are named `name`, the table's own, read with [`KeyedBreaker::name`].
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::{part::Admission, Breaker, Instant, Outcome};
    /// use stormguard_embassy::KeyedBreaker;
    ///
    /// let keyed: KeyedBreaker<NoopRawMutex, u8, Breaker, 4> = KeyedBreaker::new(Breaker::of(3, "i2c")?);
    /// let name = keyed.name();
    /// let part = keyed.part(&0x48, &name);
    /// let now = Instant::from_secs(1);
    /// let permit = part.try_acquire(now, None, &mut |_| {}).unwrap();
    /// part.on_outcome(now, permit, Outcome::Success, &mut |_| {});
    /// assert_eq!(keyed.len(), 1);
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    #[must_use]
    pub const fn part<'a>(
        &'a self,
        key: &'a K,
        name: &'a Name,
    ) -> LockedKey<'a, Shared<M, Keyed<K, B, N>>, K> {
        LockedKey::new(&self.shared, key, name, self.full)
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
        let route = KeyRoute { policy: self, key };
        drive(&route, options, op).await
    }
}

/// One key of a keyed policy: what its call runs against.
struct KeyRoute<'p, 'a, M: RawMutex, K, B: CoreBreaker, const N: usize, L> {
    policy: &'p KeyedPolicy<'a, M, K, B, N, L>,
    key: K,
}

impl<'r, 'p, 'a, M, K, B, const N: usize, L> Route for &'r KeyRoute<'p, 'a, M, K, B, N, L>
where
    M: RawMutex,
    K: Eq + Clone,
    B: CoreBreaker + Member,
    L: Listener,
{
    type Name = B::NameRef;
    type Parts<'n>
        = Parts<
        LockedKey<'n, Shared<M, Keyed<K, B, N>>, K, Ears<L>>,
        Locked<'n, Shared<M, stormguard_core::Budget>>,
    >
    where
        Self: 'n;
    const QUEUES: bool = false;

    fn name(self) -> B::NameRef {
        self.policy.keyed.name
    }

    fn parts<'n>(self, name: &'n Name) -> Self::Parts<'n>
    where
        Self: 'n,
    {
        Parts {
            name: None,
            breaker: Some(self.policy.keyed.part(&self.key, name).hearing()),
            budget: self.policy.budget.map(Budget::part),
            limiter: None,
            quota: None,
            bulkhead: None,
            adaptive: None,
            saturation: None,
        }
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

    fn freed(self) {}
}
