//! Keyed scope for the host: one breaker per key (a host, a service, a tenant) in a table of
//! fixed capacity shared by every thread, with idle keys evicted to make room.
//!
//! The rules are the core's ([`Member::is_idle`], [`Member::to_evict`], DESIGN.md "Keyed
//! scope"): a key is idle when no call of it is in flight and it has been quiet long enough: a
//! trip window if its breaker is closed, [`STALE_BREAKS`] (4)
//! times the breaker's longest break if it is open, half-open or recovering (so an open breaker
//! still asked for is never evicted, and keys nobody asks for do not hold the table for good);
//! an isolated breaker only leaves by [`KeyedPolicy::remove`]. A new key in a full table evicts
//! the least recently used idle key of the slots it reads (a bounded window, see below), and
//! when none of them is idle it is refused ([`KeyedError::Full`]) rather than evicting a key in
//! use. This module only keeps the table concurrently.
//!
//! # A key space chosen by remote input
//! When the key comes from outside (a `Host` header, a client's address, a tenant id in a
//! request), bound the key space before it reaches the table. A peer that sends many keys
//! fills the table, and every key it keeps calling (a healthy key called at least once a trip
//! window) is in use: no new key gets in while it keeps calling, and only keys it stops calling
//! become idle. Either keep an allow-list of the keys the service talks to, or map every key
//! not on it to one shared key (one breaker for "everything else"):
//!
//! ```
//! # use stormguard_std::{KeyedPolicy, Policy};
//! const UPSTREAMS: [&str; 3] = ["api.example", "auth.example", "cdn.example"];
//! /// The table's key for a request's host: a known upstream, or "other".
//! fn upstream(host: &str) -> &'static str {
//!     UPSTREAMS.into_iter().find(|u| *u == host).unwrap_or("other")
//! }
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let hosts = KeyedPolicy::new(Policy::builder("upstreams").build()?, UPSTREAMS.len() + 1)?;
//! assert_eq!(upstream("evil-1.example"), upstream("evil-2.example"));
//! # let _: &KeyedPolicy<&str> = &hosts;
//! # Ok(()) }
//! ```
//!
//! With the capacity covering every key the table can be asked for, it is never full.
//!
//! # Why this table
//! The call path of a key already in the table takes no lock: the table is a fixed array of
//! slots, each an [`arc_swap::ArcSwapOption`] (already a dependency of this crate, and the
//! maintained crate for a lock-free read of a shared `Arc`), probed linearly from the key's
//! hash. A lookup loads slots until it finds the key or an empty slot; a call then counts itself
//! in with one compare-and-swap on the key's use word and out with one `fetch_sub`. Inserting
//! a new key and evicting one take a `Mutex` that only writers hold: a lock-free insert
//! would have to settle two threads adding the same key at once, and a lock-free removal would
//! need tombstones that lengthen every probe; keys are added and evicted rarely (hosts come
//! and go slowly), so writers queue and readers never do. A general concurrent map (`dashmap`
//! locks shards on reads, `papaya` and `scc` bring their own reclamation) would add a
//! dependency for a table this small, and none of them lets eviction and a call's entry agree
//! on "idle" atomically, which the use word does.
//!
//! The table has twice as many slots as keys it may hold (rounded up to a power of two), so
//! probes stay short.
//!
//! Making room takes bounded work under the writers' lock, whatever the capacity: a clock hand
//! reads the keys of the next 128 slots, evicts the least recently used idle key among them
//! and moves on; when none of them is idle the new key is refused. The rule is the core's,
//! applied to a window of the table rather than the whole of it, so the key evicted is the
//! least recently used idle key of that window (approximate LRU). In exchange a new key costs
//! tens of microseconds (a whole refused call, measured under load) where reading every key cost about 4 ms at 10,000 keys and 100 ms at
//! 100,000, on a tokio worker, holding the lock; and while a key is idle, at most
//! `slots / 128` new keys (rounded up; the slots are twice the capacity rounded up to a power
//! of two) are refused before one is evicted. Once the hand has gone round a full table without
//! finding a key to evict, the table remembers until when none can be: the soonest instant a
//! key it read with no call in flight becomes idle, and at most a trip window after its trip
//! began (no call can make a key idle sooner: its key needs a trip window of quiet after it
//! ends). A new key refused before then reads no key (`cargo run --release -p stormguard-std
//! --example keyed_refusal` measures both). A change no call makes (a recovery ramp ending, an
//! operator's reset) is seen at the latest a trip window later.
//!
//! That work stays under the writers' lock, on the calling task's worker, on purpose. Only
//! writers take the lock (a call for a key already in the table takes it only in the rare race
//! below), so a refusal delays other new keys, not calls. What it does there is bounded: at
//! most 128 slot reads, and none while the table knows no key can be evicted yet. A whole
//! refusal, call driver and timer included, measured a mean of about 13 us at 10,000 keys and
//! 21 to 36 us at 100,000 (the first, which reads its window, 29 to 83 us) on a 2-core machine
//! loaded by other builds: within the tens of microseconds a task may run between two
//! `.await`s without starving its worker. Handing the work to another thread would cost a
//! wake-up and a thread hop of the same order, and would make every new key's admission wait
//! on that thread.
//!
//! A lookup that races a writer moving keys may miss its key; it then takes the writers' lock
//! and looks again, so it never adds a key twice.
//!
//! # The use word
//! Each key has one 64-bit word: the calls in flight (low 32 bits), a count of calls started
//! (31 bits, wrapping) and an "evicted" bit. Eviction checks the idle rule on one reading of the
//! word and marks the key evicted with a compare-and-swap from exactly that reading, so a call
//! that started in between (or started and finished: the count moved) makes the eviction fail.
//! A call that finds its key marked evicted looks it up again, so no call runs on the breaker of
//! an evicted key.
//!
//! The slots and this protocol live in `slots.rs`, apart from what a slot holds, so that loom
//! checks them (`RUSTFLAGS="--cfg loom" cargo test --release -p stormguard-std
//! --no-default-features --lib slots`).

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::Arc;

pub use stormguard_core::breaker::{KeyedRefusal, STALE_BREAKS};
use stormguard_core::{
    breaker::FullTable, breaker::Member, call::AttemptLog, BreakerSettings, Duration, Instant,
    Name, RefusalReason, Rejection, SettingsError, Snapshot, State,
};

use crate::classify::Classify;
use crate::clock::{Clock, DefaultClock};
use crate::events::{Listener, NoListener};
use crate::policy::{Attempt, CallEnd};
use crate::slots::{Entry, Occupant, Refusal, Slots};
use crate::{Breaker, CallError, CallOptions, Logged, Policy};

/// A key's breaker as the core's keyed rule sees it. (Each key's breaker is built with its own
/// entropy seed by [`Breaker::new`], so there is nothing to reseed.)
#[derive(Clone)]
struct KeyBreaker(Breaker);

/// The table's view of a key's breaker (eviction reads it; calls go through the key's policy).
impl Member for KeyBreaker {
    fn name(&self) -> &Name {
        self.0.name()
    }
    fn state_at(&self, now: Instant) -> State {
        self.0.state_at(now)
    }
    fn idle_after(&self) -> Duration {
        self.0.settings().trip_window()
    }
    fn longest_break(&self) -> Duration {
        self.0.settings().max_break()
    }
    fn reseed(&mut self, _seed: u64) {}
    fn snapshot_at(&self, now: Instant) -> Snapshot {
        self.0.snapshot_at(now)
    }
}

/// A key's slot in the table: the key with its use (see `slots.rs`).
type KeyEntry<K, C, L> = Arc<Entry<Key<K, C, L>>>;

/// One key: the key, its policy (its own breaker, the template's budget) and its breaker.
struct Key<K, C, L> {
    key: K,
    policy: Policy<C, L>,
    breaker: KeyBreaker,
}

impl<K, C, L> Occupant for Key<K, C, L> {
    fn is_idle(&self, in_flight: u32, last_used: Instant, now: Instant) -> bool {
        self.breaker.is_idle(in_flight, last_used, now)
    }

    fn to_evict(keys: &[(&Self, u32, Instant)], now: Instant) -> Option<usize> {
        let keys = keys
            .iter()
            .enumerate()
            .map(|(i, &(key, out, last))| (i, &key.breaker, out, last));
        Member::to_evict(keys, now).ok()
    }

    fn idle_from(&self, in_flight: u32, last_used: Instant, now: Instant) -> Option<Instant> {
        self.breaker.idle_from(in_flight, last_used, now)
    }

    fn recheck_after(&self) -> Duration {
        self.breaker.idle_after()
    }
}

/// Why a keyed call did not return the operation's value.
///
/// ```
/// use stormguard_std::{CallError, KeyedError};
/// fn describe(e: &KeyedError<std::io::Error>) -> String {
///     match e {
///         KeyedError::Call(CallError::Rejected { rejection, .. }) => format!("host refused: {rejection}"),
///         KeyedError::Call(other) => other.to_string(),
///         KeyedError::Full(rejection) => format!("too many hosts in use, {rejection}"),
///         _ => "something else".into(),
///     }
/// }
/// # let rejection = stormguard_std::Rejection {
/// #     reason: stormguard_std::RefusalReason::KeyedFull,
/// #     retry_after: stormguard_std::Duration::from_secs(30),
/// #     pause: stormguard_std::Duration::from_millis(100),
/// #     last: None,
/// #     attempts: 0,
/// # };
/// assert_eq!(
///     describe(&KeyedError::Full(rejection)),
///     "too many hosts in use, call rejected (keyed_full), retry after 30s"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedError<E> {
    /// The key's policy ran the call and it ended so (its breaker's refusals are
    /// [`CallError::Rejected`]).
    Call(CallError<E>),
    /// The key is new, the table is full and no key in it is idle: the key was not added
    /// (the core's [`KeyedRefusal::Full`]). A guarded rejection like any other, driven by the
    /// core's call driver: announced by the `Rejected` event, reported after the pause (capped
    /// by the call's deadline, ended at once by cancellation, which then reports
    /// [`CallError::Cancelled`]), with [`RefusalReason::KeyedFull`] and a `retry_after` of a
    /// trip window from the refusal (the soonest a key quiet from now on becomes idle),
    /// counted from the end of the pause.
    Full(Rejection),
}

impl<E> KeyedError<E> {
    /// The call's error, if the key's policy ran the call.
    #[must_use]
    pub fn call_error(&self) -> Option<&CallError<E>> {
        match self {
            KeyedError::Call(e) => Some(e),
            _ => None,
        }
    }

    /// The core's keyed refusal, when the table refused the key.
    ///
    /// ```
    /// use stormguard_std::{Duration, RefusalReason, Rejection};
    /// use stormguard_std::keyed::KeyedRefusal;
    /// let rejection = Rejection {
    ///     reason: RefusalReason::KeyedFull,
    ///     retry_after: Duration::from_secs(30),
    ///     pause: Duration::from_millis(100),
    ///     last: None,
    ///     attempts: 0,
    /// };
    /// let e: stormguard_std::KeyedError<()> = stormguard_std::KeyedError::Full(rejection);
    /// assert_eq!(e.keyed_refusal(), Some(KeyedRefusal::Full));
    /// assert_eq!(e.retry_after(), Some(Duration::from_secs(30)));
    /// ```
    #[must_use]
    pub fn keyed_refusal(&self) -> Option<KeyedRefusal> {
        match self {
            KeyedError::Full(_) => Some(KeyedRefusal::Full),
            _ => None,
        }
    }

    /// The rejection, when the table or the key's policy refused the call.
    #[must_use]
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            KeyedError::Full(rejection) => Some(rejection),
            KeyedError::Call(e) => e.rejection(),
        }
    }

    /// When asking again may succeed, for a rejection (the table's or the key's), counted from
    /// the moment the error was handed over (after the pause).
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.rejection().map(|r| r.retry_after)
    }
}

impl<E> From<CallError<E>> for KeyedError<E> {
    fn from(e: CallError<E>) -> Self {
        KeyedError::Call(e)
    }
}

impl<E: fmt::Display> fmt::Display for KeyedError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedError::Call(e) => fmt::Display::fmt(e, f),
            KeyedError::Full(rejection) => write!(
                f,
                "{}, retry after {}",
                KeyedRefusal::Full,
                rejection.retry_after
            ),
        }
    }
}

/// A full table's refusal is a guarded rejection like any other: [`CallError::Rejected`] with
/// [`RefusalReason::KeyedFull`] and no last error (no attempt ran), so a caller that handles
/// [`CallError`] (the tower layer's callers, [`server::error_response`](crate::server)) needs
/// nothing more.
///
/// ```
/// # let rejection = stormguard_std::Rejection {
/// #     reason: stormguard_std::RefusalReason::KeyedFull,
/// #     retry_after: stormguard_std::Duration::from_secs(30),
/// #     pause: stormguard_std::Duration::from_millis(100),
/// #     last: None,
/// #     attempts: 0,
/// # };
/// use stormguard_std::{CallError, KeyedError, RefusalReason};
/// let e: CallError<std::io::Error> = KeyedError::Full(rejection).into();
/// assert_eq!(e.rejection().map(|r| r.reason), Some(RefusalReason::KeyedFull));
/// ```
impl<E> From<KeyedError<E>> for CallError<E> {
    fn from(e: KeyedError<E>) -> Self {
        match e {
            KeyedError::Call(e) => e,
            KeyedError::Full(rejection) => CallError::Rejected {
                rejection,
                last: None,
            },
        }
    }
}

impl<E: fmt::Debug + fmt::Display + 'static> std::error::Error for KeyedError<E> {}

/// The most keys a [`KeyedPolicy`] holds: 2^20, a little over a million.
///
/// Chosen so that the table a capacity asks for is always one a host can allocate: its slots
/// (two per key, one pointer each) are allocated up front, 32 MiB at this bound on a 64-bit
/// host, and each key in use holds a policy with its own breaker. A table for a breaker per
/// host, service or tenant stays far below it; a larger number is a mistake, refused as
/// [`KeyedSetupError::CapacityTooLarge`] rather than an allocation that aborts the process.
pub const MAX_KEYS: usize = 1 << 20;

/// Why [`KeyedPolicy::new`] refused a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedSetupError {
    /// The template has no breaker to give each key a copy of.
    NoBreaker,
    /// A table for no key at all.
    ZeroCapacity,
    /// A table for more keys than [`MAX_KEYS`]: its slots are allocated up front.
    CapacityTooLarge {
        /// The largest capacity a table takes ([`MAX_KEYS`]).
        max: usize,
    },
    /// The template's settings were refused (the error of a builder, converted by `?`).
    Settings(SettingsError),
}

impl fmt::Display for KeyedSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedSetupError::NoBreaker => f.write_str("a keyed policy's template needs a breaker"),
            KeyedSetupError::ZeroCapacity => f.write_str("a keyed policy needs room for a key"),
            KeyedSetupError::CapacityTooLarge { max } => {
                write!(f, "a keyed policy holds at most {max} keys")
            }
            KeyedSetupError::Settings(e) => write!(f, "keyed policy not built: {e}"),
        }
    }
}

impl std::error::Error for KeyedSetupError {}

impl From<SettingsError> for KeyedSetupError {
    fn from(e: SettingsError) -> Self {
        KeyedSetupError::Settings(e)
    }
}

struct Table<K, C, L> {
    template: Policy<C, L>,
    breaker_settings: BreakerSettings,
    hasher: RandomState,
    slots: Slots<Key<K, C, L>>,
    /// What a new key's call meets when the table is full (the core's refusal).
    full: FullTable,
}

/// A call policy per key, from one template: each key (a host, a service, a tenant) gets its
/// own breaker, a copy of the template's, while every key shares the template's retry budget,
/// rate limiter and bulkhead (if it has them), retry settings, clock and listener. At most `capacity` keys; a new key in a full table
/// takes the place of the least recently used idle key, and is refused with
/// [`KeyedError::Full`] when none is idle. The rule is the core's ([`Member::is_idle`],
/// [`Member::to_evict`]): idle means no call in flight (waits between its attempts included)
/// and quiet for the breaker's trip window if it is closed, for four of its longest breaks if
/// it is open, half-open or recovering; an open breaker still asked for is never evicted, an
/// isolated one only by [`KeyedPolicy::remove`]. Bound a key space chosen by remote input
/// (an allow-list, or one shared key for every key not on it).
///
/// A cloneable `Send + Sync` handle: clones share the table. A call for a key already in the
/// table takes no lock: the table is a fixed array of `arc_swap` slots probed from the key's
/// hash (std's `RandomState`), and a call counts itself in and out of its key with atomics.
/// Adding or evicting a key takes a `Mutex` that only those writers hold (as does a lookup
/// that raced a writer and missed). Memory: two slots (8 bytes each) per key of capacity, plus
/// per key in use its policy, breaker and key.
///
/// ```
/// use stormguard_std::{KeyedError, KeyedPolicy, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let template = Policy::builder("upstreams")
///     .breaker(stormguard_std::Breaker::of(5, "upstreams")?)
///     .build()?;
/// let hosts: KeyedPolicy<String> = KeyedPolicy::new(template, 64)?;
///
/// let body = hosts
///     .call(&"a.example".to_string(), |attempt| async move {
///         Ok::<_, std::io::Error>(format!("fetched on attempt {attempt}"))
///     })
///     .await?;
/// assert_eq!(body, "fetched on attempt 1");
/// assert_eq!(hosts.len(), 1);
/// # Ok(()) }
/// ```
pub struct KeyedPolicy<K, C = DefaultClock, L = NoListener> {
    table: Arc<Table<K, C, L>>,
}

impl<K, C, L> Clone for KeyedPolicy<K, C, L> {
    fn clone(&self) -> Self {
        KeyedPolicy {
            table: Arc::clone(&self.table),
        }
    }
}

impl<K, C, L> fmt::Debug for KeyedPolicy<K, C, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedPolicy")
            .field("name", self.table.template.name())
            .field("len", &self.table.slots.len())
            .field("capacity", &self.table.slots.capacity())
            .finish_non_exhaustive()
    }
}

impl<K, C, L> KeyedPolicy<K, C, L>
where
    K: Eq + Hash + Clone,
    C: Clock + Clone,
    L: Listener + Clone,
{
    /// A table for at most `capacity` keys (1 to [`MAX_KEYS`]), each with a policy copied from `template`: a new
    /// breaker with the template breaker's settings (and its own jitter seed), the template's
    /// budget, rate limiter and bulkhead (shared), retry settings, clock and listener. Every key's events carry the
    /// template's name.
    ///
    /// ```
    /// use stormguard_std::{KeyedPolicy, Policy};
    /// use stormguard_std::keyed::KeyedSetupError;
    /// let no_breaker = Policy::builder("hosts").no_breaker().build()?;
    /// let e = KeyedPolicy::<u32>::new(no_breaker, 8).unwrap_err();
    /// assert_eq!(e, KeyedSetupError::NoBreaker);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn new(template: Policy<C, L>, capacity: usize) -> Result<Self, KeyedSetupError> {
        if capacity > MAX_KEYS {
            return Err(KeyedSetupError::CapacityTooLarge { max: MAX_KEYS });
        }
        let breaker_settings = *template
            .breaker()
            .ok_or(KeyedSetupError::NoBreaker)?
            .settings();
        let slots = Slots::new(capacity).ok_or(KeyedSetupError::ZeroCapacity)?;
        // What a new key meets in a full table, named as every key's breaker is.
        let full = FullTable::of(&KeyBreaker(Breaker::new(breaker_settings)));
        Ok(KeyedPolicy {
            table: Arc::new(Table {
                template,
                breaker_settings,
                hasher: RandomState::new(),
                slots,
                full,
            }),
        })
    }
}

impl<K, C, L> KeyedPolicy<K, C, L> {
    /// The template every key's policy is copied from.
    #[must_use]
    pub fn template(&self) -> &Policy<C, L> {
        &self.table.template
    }

    /// Keys in the table.
    #[must_use]
    pub fn len(&self) -> usize {
        self.table.slots.len()
    }

    /// `true` when no key is in the table.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys the table holds.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.table.slots.capacity()
    }

    fn live(&self) -> impl Iterator<Item = KeyEntry<K, C, L>> + '_ {
        self.table.slots.live().map(|(_, e)| e)
    }
}

impl<K, C, L> KeyedPolicy<K, C, L>
where
    K: Eq + Hash + Clone,
    C: Clock + Clone,
    L: Listener + Clone,
{
    fn hash(&self, key: &K) -> u64 {
        self.table.hasher.hash_one(key)
    }

    /// The key's entry with a call counted in (see [`Slots::enter`]).
    fn enter(&self, key: &K) -> Result<KeyEntry<K, C, L>, Refusal<Infallible>> {
        let table = &*self.table;
        table.slots.enter(
            self.hash(key),
            |e| e.key == *key,
            || table.template.clock().now(),
            || {
                let breaker = Breaker::new(table.breaker_settings);
                let policy = table.template.with_breaker(breaker.clone());
                Ok::<_, Infallible>(Key {
                    key: key.clone(),
                    policy,
                    breaker: KeyBreaker(breaker),
                })
            },
        )
    }

    /// Evicts every idle key (the core's rule) at the policy clock's now; returns how many.
    /// Call it now and then (every trip window, say) so that keys long gone do not hold slots;
    /// a full table also evicts on demand.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let hosts = stormguard_std::KeyedPolicy::new(stormguard_std::Policy::builder("hosts").build()?, 8)?;
    /// hosts.call(&1u32, |_| async { Ok::<_, std::io::Error>(()) }).await?;
    /// assert_eq!(hosts.evict_idle(), 0); // used just now
    /// tokio::time::advance(std::time::Duration::from_secs(30)).await; // a trip window
    /// assert_eq!(hosts.evict_idle(), 1);
    /// assert!(hosts.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn evict_idle(&self) -> usize {
        self.evict_idle_at(self.table.template.clock().now())
    }

    /// [`KeyedPolicy::evict_idle`] at `now` (a reading of the template's clock).
    pub fn evict_idle_at(&self, now: Instant) -> usize {
        self.table.slots.evict_idle_at(now)
    }

    /// Removes `key` from the table whatever its breaker's state (an isolated one included);
    /// `true` when the table held it. A call of the key in flight ends on the removed key's
    /// policy; the next call of the key starts with a new breaker.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let hosts = stormguard_std::KeyedPolicy::new(stormguard_std::Policy::builder("hosts").build()?, 8)?;
    /// hosts.call(&"a", |_| async { Ok::<_, std::io::Error>(()) }).await?;
    /// hosts.breaker(&"a").unwrap().isolate();
    /// assert!(hosts.remove(&"a"));
    /// assert!(!hosts.contains_key(&"a"));
    /// # Ok(()) }
    /// ```
    pub fn remove(&self, key: &K) -> bool {
        self.table.slots.remove(self.hash(key), |e| e.key == *key)
    }

    /// `true` when `key` is in the table.
    #[must_use]
    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    fn get(&self, key: &K) -> Option<KeyEntry<K, C, L>> {
        self.table.slots.get(self.hash(key), |e| e.key == *key)
    }

    /// `key`'s breaker, if the key is in the table (for its state, or to isolate it).
    ///
    /// ```
    /// use stormguard_std::State;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let hosts = stormguard_std::KeyedPolicy::new(stormguard_std::Policy::builder("hosts").build()?, 8)?;
    /// assert!(hosts.breaker(&"a").is_none());
    /// hosts.call(&"a", |_| async { Ok::<_, std::io::Error>(()) }).await?;
    /// assert_eq!(hosts.breaker(&"a").unwrap().state(), State::Closed);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn breaker(&self, key: &K) -> Option<Breaker> {
        self.get(key).map(|e| e.value.breaker.0.clone())
    }

    /// `key`'s policy, if the key is in the table (a clone: the same breaker and budget). A
    /// call made through it directly does not count as the key's use, so an idle key may be
    /// evicted under it; use [`KeyedPolicy::call`].
    #[must_use]
    pub fn policy(&self, key: &K) -> Option<Policy<C, L>> {
        self.get(key).map(|e| e.value.policy.clone())
    }

    /// Every key with a snapshot of its breaker at the template clock's now, for a health
    /// endpoint.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let hosts = stormguard_std::KeyedPolicy::new(stormguard_std::Policy::builder("hosts").build()?, 8)?;
    /// hosts.call(&7u16, |_| async { Ok::<_, std::io::Error>(()) }).await?;
    /// let report = hosts.snapshots();
    /// assert_eq!(report.len(), 1);
    /// assert_eq!(report[0].0, 7);
    /// assert_eq!(report[0].1.state, stormguard_std::State::Closed);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn snapshots(&self) -> Vec<(K, Snapshot)> {
        self.snapshots_at(self.table.template.clock().now())
    }

    /// [`KeyedPolicy::snapshots`] at `now`.
    #[must_use]
    pub fn snapshots_at(&self, now: Instant) -> Vec<(K, Snapshot)> {
        self.live()
            .map(|e| (e.value.key.clone(), e.value.breaker.snapshot_at(now)))
            .collect()
    }

    /// Every key in the table.
    #[must_use]
    pub fn keys(&self) -> Vec<K> {
        self.live().map(|e| e.value.key.clone()).collect()
    }

    /// Runs `op` under `key`'s policy, as [`Policy::call`] does: the key's breaker, the shared
    /// budget, the template's retries, deadline and attempt timeout. A new key is added first;
    /// when the table is full and no key is idle, the call is refused with
    /// [`KeyedError::Full`] without running `op`, through the core's call driver like any
    /// refusal: the `Rejected` event, the guarded pause (100 ms, or the deadline if nearer),
    /// counted by a [`Metrics`](crate::Metrics) listener. The key counts as in use until the call ends (also between its attempts),
    /// so it is never evicted under a call.
    ///
    /// ```
    /// use stormguard_std::{CallError, KeyedPolicy, Policy};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let template = Policy::builder("hosts")
    ///     .breaker(stormguard_std::Breaker::of(2, "hosts")?)
    ///     .max_attempts(1)
    ///     .build()?;
    /// let hosts = KeyedPolicy::new(template, 16)?;
    /// for _ in 0..2 {
    ///     let _ = hosts.call(&"down.example", |_| async { Err::<(), _>("reset") }).await;
    /// }
    /// let r = hosts.call(&"down.example", |_| async { Ok::<_, &str>(()) }).await;
    /// assert!(matches!(r, Err(stormguard_std::KeyedError::Call(CallError::Rejected { .. }))));
    /// // Another host has its own breaker.
    /// assert_eq!(hosts.call(&"up.example", |_| async { Ok::<_, &str>(1) }).await, Ok(1));
    /// # Ok(()) }
    /// ```
    pub async fn call<T, E, F, Fut>(&self, key: &K, op: F) -> Result<T, KeyedError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_with(key, CallOptions::new(), op).await
    }

    /// [`KeyedPolicy::call`] with per-call [`CallOptions`] (a classifier, a cancellation token,
    /// a deadline), as [`Policy::call_with`]. The pause before [`KeyedError::Full`] is capped
    /// by the call's deadline and ended at once by its cancellation token (the call then ends
    /// [`CallError::Cancelled`]) or by dropping the call's future.
    pub async fn call_with<T, E, F, Fut, Cl>(
        &self,
        key: &K,
        options: CallOptions<'_, Cl>,
        mut op: F,
    ) -> Result<T, KeyedError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        Cl: Classify<T, E>,
    {
        self.run(key, None, &options, |a: Attempt| Some(op(a.number)), None)
            .await
    }

    /// [`KeyedPolicy::call_with`], keeping how each attempt ended, as
    /// [`Policy::call_logged`] does: a new key refused by a full table reads "refused locally
    /// (keyed_full)", a refusal by the key's own open breaker "refused locally (breaker_open)".
    ///
    /// ```
    /// use stormguard_std::{CallOptions, KeyedPolicy, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let template = Policy::builder("hosts").backoff(stormguard_std::Backoff::none()).build()?;
    /// let hosts = KeyedPolicy::new(template, 16)?;
    /// let logged = hosts
    ///     .call_logged(&"a.example", CallOptions::new(), |attempt| async move {
    ///         if attempt == 1 { Err("reset") } else { Ok(attempt) }
    ///     })
    ///     .await;
    /// assert_eq!(logged.result, Ok(2));
    /// assert_eq!(logged.attempts.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn call_logged<T, E, F, Fut, Cl>(
        &self,
        key: &K,
        options: CallOptions<'_, Cl>,
        mut op: F,
    ) -> Logged<T, KeyedError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        Cl: Classify<T, E>,
    {
        let mut attempts = AttemptLog::new();
        let mut end = CallEnd::logging_into(Some(&mut attempts));
        let op = |a: Attempt| Some(op(a.number));
        let result = self.run(key, None, &options, op, Some(&mut end)).await;
        Logged { result, attempts }
    }

    /// The call proper, for [`KeyedPolicy::call_with`] and the tower layer's per-host scope:
    /// `op` gets each attempt's number and time left, `start` is when the call began (now if
    /// `None`); how the call ended, and its attempt log if one is asked for, go to `end`.
    pub(crate) async fn run<T, E, F, Fut, Cl>(
        &self,
        key: &K,
        start: Option<Instant>,
        options: &CallOptions<'_, Cl>,
        op: F,
        end: Option<&mut CallEnd<'_>>,
    ) -> Result<T, KeyedError<E>>
    where
        F: FnMut(Attempt) -> Option<Fut>,
        Fut: Future<Output = Result<T, E>>,
        Cl: Classify<T, E>,
    {
        let clock = self.table.template.clock();
        let entry = match self.enter(key) {
            Ok(entry) => entry,
            Err(Refusal::Make(never)) => match never {},
            Err(Refusal::Full) => {
                let refused = self
                    .table
                    .template
                    .run_refused(self.table.full, options, op, end);
                return match refused.await {
                    Err(CallError::Rejected { rejection, .. })
                        if rejection.reason == RefusalReason::KeyedFull =>
                    {
                        Err(KeyedError::Full(rejection))
                    }
                    other => other.map_err(KeyedError::Call),
                };
            }
        };
        let in_flight = InFlight {
            entry: &entry,
            clock,
        };
        let result = entry.value.policy.run(start, options, op, end).await;
        drop(in_flight);
        result.map_err(KeyedError::Call)
    }
}

/// Counts a call out when it ends, however it ends (a dropped future included).
struct InFlight<'a, K, C: Clock, L> {
    entry: &'a Entry<Key<K, C, L>>,
    clock: &'a C,
}

impl<K, C: Clock, L> Drop for InFlight<'_, K, C, L> {
    fn drop(&mut self) {
        self.entry.exit(self.clock.now());
    }
}
