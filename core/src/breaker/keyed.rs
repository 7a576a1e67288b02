//! Keyed scope: one breaker per key (a host, a service, a peripheral address) in a table of
//! fixed capacity, with idle keys evicted to make room.
//!
//! A key is idle when none of its permits is out and it has been quiet long enough:
//! - a closed breaker, for a trip window;
//! - an open, half-open or recovering breaker, for [`STALE_BREAKS`] times its longest break
//!   (and never less than a trip window): while calls keep arriving, such a breaker remembers a
//!   dependency that is down and is never evicted; once nobody has asked for the key for that
//!   long, what it remembers is stale, and keeping it would let keys that are no longer used
//!   (a peer that failed a few calls and left) fill the table for good;
//! - an isolated breaker never: an operator isolated it, and only the operator's
//!   [`Keyed::remove`] (or reset) frees it.
//!
//! When the table is full and no key is idle, a new key is refused with a typed error rather
//! than evicting a key in use.
//!
//! # A key space chosen by remote input
//! A table of fixed capacity holds at most that many keys in use. When the key comes from
//! outside (a `Host` header, a peer's address), a peer can use many keys at once, and keys it
//! keeps calling are in use: they keep legitimate new keys out for as long as it keeps
//! calling (a healthy key called more often than once a trip window is never idle). Bound such
//! a key space before it reaches the table: an allow-list of the keys the service talks to, or
//! a key function that maps every unknown key to one shared key (one breaker for "everything
//! else"), so that the table's capacity covers every key it can be asked for.

use core::fmt;

use crate::breaker::lean::LeanBreaker;
use crate::breaker::Breaker;
use crate::breaker::{SettingsRef, Snapshot};
use crate::error::{RefusalReason, Refused};
use crate::event::Event;
use crate::name::Name;
use crate::outcome::Outcome;
use core::marker::PhantomData;

use crate::part::{Admission, Heard, Hearing, HedgeSuppressed, Learned, Lock, Locked, Permit};
use crate::state::State;
use crate::time::{Duration, Instant};

/// How many of its longest breaks a key whose breaker is not closed must be quiet before it
/// counts as idle (see [`Member::is_idle`]): long enough that a breaker still consulted
/// every break or so is never evicted, short enough that keys nobody asks for do not hold the
/// table for good.
pub const STALE_BREAKS: u64 = 4;

/// A breaker a keyed table can hold: cloned from a template for each new key.
pub trait Member: Clone {
    /// The breaker's name.
    fn name(&self) -> &Name;
    /// The state at `now` (reading consumes nothing).
    fn state_at(&self, now: Instant) -> State;
    /// How long the key must be quiet before it counts as idle (the trip window).
    fn idle_after(&self) -> Duration;
    /// The longest break the breaker serves (its settings' maximum break).
    fn longest_break(&self) -> Duration;
    /// Gives the copy for a key its own jitter seed.
    fn reseed(&mut self, seed: u64);
    /// A point-in-time view.
    fn snapshot_at(&self, now: Instant) -> Snapshot;

    /// How long a key whose breaker is not closed must be quiet before it counts as idle:
    /// [`STALE_BREAKS`] times the [longest break](Member::longest_break), and never less than
    /// [`idle_after`](Member::idle_after).
    fn stale_after(&self) -> Duration {
        self.longest_break()
            .saturating_mul(STALE_BREAKS)
            .max(self.idle_after())
    }

    /// When a key holding this breaker, with `permits_out` permits out and last used at
    /// `last_used`, becomes idle if no call starts or ends, its breaker's state read at `now`:
    /// `last_used` plus [`idle_after`](Member::idle_after) for a closed breaker, plus
    /// [`stale_after`](Member::stale_after) for an open, half-open or recovering one; `None`
    /// while a permit is out, and for an isolated breaker. (The state may change with time
    /// alone, a recovery ramp ending, so a table that remembers this instant looks again now
    /// and then.)
    ///
    /// ```
    /// use stormguard_core::{Breaker, Instant, breaker::Member};
    /// let b = Breaker::of(3, "hosts")?;
    /// let used = Instant::from_secs(10);
    /// assert_eq!(b.idle_from(0, used, used), Some(used + b.idle_after()));
    /// assert_eq!(b.idle_from(1, used, used), None); // a permit is out
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    fn idle_from(&self, permits_out: u32, last_used: Instant, now: Instant) -> Option<Instant> {
        quiet_needed(self, permits_out, now).map(|quiet| last_used.saturating_add(quiet))
    }

    /// The keyed scope's idle rule: `true` when a key holding this breaker may be evicted at
    /// `now`: none of its permits is out (`permits_out`) and it has been quiet since
    /// `last_used` long enough, as [`idle_from`](Member::idle_from) says: a trip window for a
    /// closed breaker, [`stale_after`](Member::stale_after) for an open, half-open or
    /// recovering one (so a breaker still asked for is never evicted), never for an isolated
    /// one. Every keyed table decides with this one rule ([`Keyed`], and an adapter's
    /// concurrent table).
    ///
    /// ```
    /// use stormguard_core::{Breaker, Duration, Instant, breaker::Member, Outcome};
    /// let mut b = Breaker::of(1, "hosts")?;
    /// let used = Instant::from_secs(10);
    /// let window = b.idle_after();
    /// assert!(!b.is_idle(0, used, used + window - Duration::from_millis(1)));
    /// assert!(b.is_idle(0, used, used + window));
    /// assert!(!b.is_idle(1, used, used + window)); // a permit is out
    /// // Open: still remembered a trip window later, stale after four longest breaks.
    /// let p = b.try_acquire(used)?;
    /// b.on_outcome(used, p, Outcome::Transient, &mut |_| {});
    /// assert!(!b.is_idle(0, used, used + window));
    /// assert!(b.is_idle(0, used, used + b.stale_after()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn is_idle(&self, permits_out: u32, last_used: Instant, now: Instant) -> bool {
        // Measured as a duration, not against `last_used + quiet`: that sum saturates at the
        // end of time, where it would call a key used a moment ago idle.
        quiet_needed(self, permits_out, now)
            .is_some_and(|quiet| now.saturating_duration_since(last_used) >= quiet)
    }

    /// The refusal a full table gives a new key, for the call driver to guard like any other:
    /// [`RefusalReason::KeyedFull`], to be asked again after a trip window (the soonest a key
    /// that is quiet from now on becomes idle).
    fn full_refusal(&self) -> Refused {
        Refused {
            reason: RefusalReason::KeyedFull,
            retry_after: self.idle_after(),
        }
    }

    /// The keyed scope's rule for a new key in a full table: of `keys` (each a position, its
    /// breaker, its permits out and its last use), the position of the least recently used idle
    /// key (the first of equals), to evict; [`KeyedRefusal::Full`] when no key is idle, so a key
    /// in use is never evicted.
    ///
    /// ```
    /// use stormguard_core::{Breaker, Instant, breaker::KeyedRefusal, breaker::Member};
    /// let b = Breaker::of(3, "hosts")?;
    /// let (t1, t2) = (Instant::from_secs(1), Instant::from_secs(2));
    /// let now = Instant::from_secs(100);
    /// let keys = [(0, &b, 0, t2), (1, &b, 0, t1), (2, &b, 1, Instant::ZERO)];
    /// assert_eq!(Member::to_evict(keys, now), Ok(1)); // idle, and least recently used
    /// assert_eq!(Member::to_evict([(0, &b, 1, t1)], now), Err(KeyedRefusal::Full));
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    fn to_evict<'a, I>(keys: I, now: Instant) -> Result<usize, KeyedRefusal>
    where
        Self: 'a,
        I: IntoIterator<Item = (usize, &'a Self, u32, Instant)>,
    {
        keys.into_iter()
            .filter(|(_, breaker, out, last)| breaker.is_idle(*out, *last, now))
            .min_by_key(|(_, _, _, last)| *last)
            .map(|(i, _, _, _)| i)
            .ok_or(KeyedRefusal::Full)
    }
}

/// How long a key holding `breaker` must have been quiet at `now` to count as idle (see
/// [`Member::idle_from`]); `None` when it cannot be idle (a permit out, an isolated breaker).
fn quiet_needed<B: Member>(breaker: &B, permits_out: u32, now: Instant) -> Option<Duration> {
    if permits_out != 0 {
        return None;
    }
    match breaker.state_at(now) {
        State::Closed => Some(breaker.idle_after()),
        State::Isolated => None,
        _ => Some(breaker.stale_after()),
    }
}

impl<S: SettingsRef + Clone> Member for Breaker<S> {
    fn name(&self) -> &Name {
        Breaker::name(self)
    }
    fn state_at(&self, now: Instant) -> State {
        self.state(now)
    }
    fn idle_after(&self) -> Duration {
        self.settings().trip_window()
    }
    fn longest_break(&self) -> Duration {
        self.settings().max_break()
    }
    fn reseed(&mut self, seed: u64) {
        self.set_seed(seed);
    }
    fn snapshot_at(&self, now: Instant) -> Snapshot {
        self.snapshot(now)
    }
}

impl Member for LeanBreaker {
    fn name(&self) -> &Name {
        LeanBreaker::name(self)
    }
    fn state_at(&self, now: Instant) -> State {
        self.state(now)
    }
    fn idle_after(&self) -> Duration {
        self.settings().trip_window()
    }
    fn longest_break(&self) -> Duration {
        self.settings().max_break()
    }
    fn reseed(&mut self, seed: u64) {
        self.set_seed(seed);
    }
    fn snapshot_at(&self, now: Instant) -> Snapshot {
        self.snapshot(now)
    }
}

/// A full table's answer to a new key, as the call driver sees it: an [`Admission`] that
/// refuses every attempt with the table's refusal ([`Member::full_refusal`]), so that an
/// adapter drives that refusal as it drives any other ([`Call::poll`](crate::Call::poll) gives
/// [`Step::Reject`](crate::Step::Reject): the `Rejected` event with its pause, the pause capped
/// by the call's deadline and ended by cancellation, the `retry_after`).
///
/// ```
/// use stormguard_core::{Breaker, Call, CallSettings, breaker::FullTable, Instant, Parts, RefusalReason, Step};
/// let full = FullTable::of(&Breaker::of(3, "hosts")?);
/// let now = Instant::from_secs(1);
/// let mut call = Call::begin(&CallSettings::DEFAULT, now);
/// let parts = Parts::new().breaker(full);
/// let Step::Reject(rejection) = call.poll(&parts, now, &mut |_| {}) else { panic!() };
/// assert_eq!(rejection.reason, RefusalReason::KeyedFull);
/// assert_eq!(rejection.attempts, 0);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FullTable {
    name: Name,
    refused: Refused,
}

impl FullTable {
    /// The refusal of a table whose breakers are copies of `template`, named after it.
    #[must_use]
    pub fn of<B: Member>(template: &B) -> FullTable {
        FullTable {
            name: *Member::name(template),
            refused: template.full_refusal(),
        }
    }

    /// The refusal every attempt gets.
    #[must_use]
    pub const fn refused(&self) -> Refused {
        self.refused
    }
}

impl Admission for FullTable {
    fn name(&self) -> &Name {
        &self.name
    }
    fn try_acquire(
        &self,
        _now: Instant,
        _attempt_timeout: Option<Duration>,
        _events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        Err(self.refused)
    }
    fn check(&self, _now: Instant) -> Result<(), Refused> {
        Err(self.refused)
    }
    fn on_outcome(
        &self,
        _now: Instant,
        _permit: Permit,
        _outcome: Outcome,
        _events: &mut dyn FnMut(Event<'_>),
    ) {
    }
    fn release(&self, _permit: Permit) {}
    fn learned(&self, _now: Instant, ask: Learned) -> Result<Duration, HedgeSuppressed> {
        match ask {
            Learned::Censored { ran_past, .. } => Ok(ran_past),
            _ => Err(HedgeSuppressed::NoBaseline),
        }
    }
}

/// Why a keyed table did not admit a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum KeyedRefusal {
    /// The key's breaker refused.
    Refused(Refused),
    /// The table is full and no key is idle: the new key was not added.
    Full,
}

impl fmt::Display for KeyedRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedRefusal::Refused(r) => fmt::Display::fmt(r, f),
            KeyedRefusal::Full => f.write_str("keyed table full, and no key idle"),
        }
    }
}

impl core::error::Error for KeyedRefusal {}

#[derive(Clone, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
struct Entry<K, B> {
    key: K,
    breaker: B,
    last_used: Instant,
    out: u32,
}

/// One breaker per key, at most `N` keys, single-threaded (`&mut self`); lookups scan the
/// table, which suits the tens of hosts or peripherals a client talks to.
///
/// ```
/// use stormguard_core::{Breaker, Instant, breaker::Keyed, Outcome};
///
/// let template = Breaker::of(3, "hosts")?;
/// let mut hosts: Keyed<&str, Breaker, 8> = Keyed::new(template);
/// let now = Instant::from_secs(1);
/// for _ in 0..3 {
///     let p = hosts.try_acquire("a.example", now, None, &mut |_| {}).unwrap();
///     hosts.on_outcome(&"a.example", now, p, Outcome::Transient, &mut |_| {});
/// }
/// assert!(hosts.try_acquire("a.example", now, None, &mut |_| {}).is_err()); // open
/// assert!(hosts.try_acquire("b.example", now, None, &mut |_| {}).is_ok()); // its own breaker
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Keyed<K, B, const N: usize> {
    template: B,
    entries: heapless::Vec<Entry<K, B>, N>,
}

impl<K: Eq + Clone, B: Member + Admission, const N: usize> Keyed<K, B, N> {
    /// An empty table whose breakers are copies of `template` (each reseeded per key).
    pub const fn new(template: B) -> Keyed<K, B, N> {
        Keyed {
            template,
            entries: heapless::Vec::new(),
        }
    }

    /// Keys in the table.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when no key is in the table.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The breaker for `key`, if the table holds it.
    #[must_use]
    pub fn get(&self, key: &K) -> Option<&B> {
        self.entries
            .iter()
            .find(|e| e.key == *key)
            .map(|e| &e.breaker)
    }

    fn idle(e: &Entry<K, B>, now: Instant) -> bool {
        e.breaker.is_idle(e.out, e.last_used, now)
    }

    /// Removes `key` whatever its breaker's state (an operator's way to free a key, an isolated
    /// one included); returns its breaker, or `None` when the table does not hold the key. A
    /// permit of the key still out is then reported to nothing.
    ///
    /// ```
    /// use stormguard_core::{Breaker, Instant, breaker::Keyed};
    /// let mut hosts: Keyed<&str, Breaker, 8> = Keyed::new(Breaker::of(3, "hosts")?);
    /// let now = Instant::from_secs(1);
    /// hosts.try_acquire("a.example", now, None, &mut |_| {}).unwrap();
    /// assert!(hosts.remove(&"a.example").is_some());
    /// assert!(hosts.get(&"a.example").is_none());
    /// assert!(hosts.remove(&"a.example").is_none());
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn remove(&mut self, key: &K) -> Option<B> {
        let i = self.entries.iter().position(|e| e.key == *key)?;
        Some(self.entries.swap_remove(i).breaker)
    }

    /// Removes every idle key; returns how many.
    pub fn evict_idle(&mut self, now: Instant) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| !Self::idle(e, now));
        before.saturating_sub(self.entries.len())
    }

    /// The index of `key`, adding it (evicting the least recently used idle key if the table is
    /// full) when it is new.
    fn slot(&mut self, key: K, now: Instant) -> Result<usize, KeyedRefusal> {
        if let Some(i) = self.entries.iter().position(|e| e.key == key) {
            return Ok(i);
        }
        if self.entries.is_full() {
            let lru = B::to_evict(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i, &e.breaker, e.out, e.last_used)),
                now,
            )?;
            self.entries.swap_remove(lru);
        }
        let mut breaker = self.template.clone();
        // Each key jitters on its own, so one host's breaks do not line up with another's.
        let salt = u64::try_from(self.entries.len()).unwrap_or(0);
        breaker.reseed(now.as_nanos().rotate_left(17) ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let entry = Entry {
            key,
            breaker,
            last_used: now,
            out: 0,
        };
        self.entries.push(entry).map_err(|_| KeyedRefusal::Full)?;
        Ok(self.entries.len().saturating_sub(1))
    }

    /// Asks `key`'s breaker for a permit (adding the key if it is new).
    pub fn try_acquire(
        &mut self,
        key: K,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, KeyedRefusal> {
        let i = self.slot(key, now)?;
        let e = self.entries.get_mut(i).ok_or(KeyedRefusal::Full)?;
        e.last_used = now;
        let permit = e
            .breaker
            .try_acquire(now, attempt_timeout, events)
            .map_err(KeyedRefusal::Refused)?;
        e.out = e.out.saturating_add(1);
        Ok(permit)
    }

    /// Reports the outcome of a permit `key`'s breaker granted.
    pub fn on_outcome(
        &mut self,
        key: &K,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == *key) {
            e.out = e.out.saturating_sub(1);
            e.last_used = e.last_used.max(now);
            e.breaker.on_outcome(now, permit, outcome, events);
        }
    }

    /// Gives back a permit `key`'s breaker granted whose attempt never reached an outcome.
    pub fn release(&mut self, key: &K, permit: Permit) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == *key) {
            e.out = e.out.saturating_sub(1);
            e.breaker.release(permit);
        }
    }

    /// Snapshots of every key's breaker at `now`, for health endpoints.
    pub fn snapshots(&self, now: Instant) -> impl Iterator<Item = (&K, Snapshot)> + '_ {
        self.entries
            .iter()
            .map(move |e| (&e.key, e.breaker.snapshot_at(now)))
    }
}

/// One key of a [`Keyed`] table kept behind a [`Lock`] (an embassy mutex), as the call driver
/// sees it: each operation takes the lock once, finds (or adds) the key's breaker, and hands
/// the breaker's events out after the lock is released, named `name`, as
/// [`Locked`] does for a single breaker. A full table with no idle key
/// (or, never, one found busy) refuses the attempt with the refusal given at construction: the
/// template's [`Member::full_refusal`], reason `KeyedFull`.
#[derive(Debug)]
pub struct LockedKey<'a, P: ?Sized, K, H = Heard> {
    lock: &'a P,
    key: &'a K,
    name: &'a Name,
    full: Refused,
    hearing: PhantomData<fn() -> H>,
}

impl<'a, P: ?Sized, K> LockedKey<'a, P, K> {
    /// The breaker of `key` in the table behind `lock`; its events are named `name`, and a
    /// full table refuses with `full` ([`Member::full_refusal`] of the table's template).
    #[must_use]
    pub const fn new(lock: &'a P, key: &'a K, name: &'a Name, full: Refused) -> Self {
        LockedKey {
            lock,
            key,
            name,
            full,
            hearing: PhantomData,
        }
    }
}

impl<'a, P: ?Sized, K, H> LockedKey<'a, P, K, H> {
    /// The same key, its breaker's events heard as `H2` says ([`Hearing`]).
    #[must_use]
    pub const fn hearing<H2: Hearing>(self) -> LockedKey<'a, P, K, H2> {
        LockedKey {
            lock: self.lock,
            key: self.key,
            name: self.name,
            full: self.full,
            hearing: PhantomData,
        }
    }

    /// The key.
    #[must_use]
    pub const fn key(&self) -> &'a K {
        self.key
    }
}

impl<P: ?Sized, K, H> Clone for LockedKey<'_, P, K, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: ?Sized, K, H> Copy for LockedKey<'_, P, K, H> {}

impl<P: Lock + ?Sized, K, H: Hearing> LockedKey<'_, P, K, H> {
    /// The table as a locked part, for its transitions.
    fn locked(&self) -> Locked<'_, P, H> {
        Locked::named(self.lock, self.name).hearing()
    }
}

impl<P, K, H, B, const N: usize> Admission for LockedKey<'_, P, K, H>
where
    P: Lock<Part = Keyed<K, B, N>> + ?Sized,
    K: Eq + Clone,
    H: Hearing,
    B: Member + Admission,
{
    const LEARNS: bool = B::LEARNS;

    fn name(&self) -> &Name {
        self.name
    }

    fn try_acquire(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        let key = self.key.clone();
        match self.locked().transition(events, |table, sink| {
            table.try_acquire(key, now, attempt_timeout, sink)
        }) {
            Some(Ok(permit)) => Ok(permit),
            Some(Err(KeyedRefusal::Refused(refused))) => Err(refused),
            // The table is full and no key is idle (or, never, found busy).
            Some(Err(KeyedRefusal::Full)) | None => Err(self.full),
        }
    }

    fn check(&self, now: Instant) -> Result<(), Refused> {
        self.lock
            .with(|table| table.get(self.key).map_or(Ok(()), |b| b.check(now)))
            .unwrap_or(Ok(()))
    }

    fn on_outcome(
        &self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        self.locked().transition(events, |table, sink| {
            table.on_outcome(self.key, now, permit, outcome, sink);
        });
    }

    fn release(&self, permit: Permit) {
        self.lock.with(|table| table.release(self.key, permit));
    }

    #[inline(always)]
    fn learned(&self, now: Instant, ask: Learned) -> Result<Duration, HedgeSuppressed> {
        let learned = if B::LEARNS {
            self.lock
                .with(|table| table.get(self.key).map(|b| b.learned(now, ask)))
                .flatten()
        } else {
            None
        };
        learned.unwrap_or(match ask {
            Learned::Censored { ran_past, .. } => Ok(ran_past),
            _ => Err(HedgeSuppressed::NoBaseline),
        })
    }
}
