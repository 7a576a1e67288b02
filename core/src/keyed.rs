//! Keyed scope: one breaker per key (a host, a service, a peripheral address) in a table of
//! fixed capacity, with idle keys evicted to make room.
//!
//! A key is idle when its breaker is closed, none of its permits is out, and it has been quiet
//! for a trip window. An open (or half-open, recovering, isolated) breaker is never evicted: it
//! remembers a dependency that is down. When the table is full and no key is idle, a new key is
//! refused with a typed error rather than evicting a key in use.

use core::fmt;

use crate::breaker::{Permit, SettingsRef, Snapshot};
use crate::call::Admission;
use crate::event::Event;
use crate::{Breaker, Duration, Instant, LeanBreaker, Outcome, Refused, State};

/// A breaker a keyed table can hold: cloned from a template for each new key.
pub trait Member: Admission + Clone {
    /// The state at `now` (reading consumes nothing).
    fn state_at(&self, now: Instant) -> State;
    /// How long the key must be quiet before it counts as idle (the trip window).
    fn idle_after(&self) -> Duration;
    /// Gives the copy for a key its own jitter seed.
    fn reseed(&mut self, seed: u64);
    /// A point-in-time view.
    fn snapshot_at(&self, now: Instant) -> Snapshot;

    /// The keyed scope's idle rule: `true` when a key holding this breaker may be evicted at
    /// `now`: its breaker is closed, none of its permits is out (`permits_out`), and it has been
    /// quiet since `last_used` for [`idle_after`](Member::idle_after). An open, half-open,
    /// recovering or isolated breaker is never idle. Every keyed table decides with this one
    /// rule ([`Keyed`], and an adapter's concurrent table).
    ///
    /// ```
    /// use stormguard_core::{Breaker, Duration, Instant, Member};
    /// let b = Breaker::of(3, "hosts")?;
    /// let used = Instant::from_secs(10);
    /// let window = b.idle_after();
    /// assert!(!b.is_idle(0, used, used + window - Duration::from_millis(1)));
    /// assert!(b.is_idle(0, used, used + window));
    /// assert!(!b.is_idle(1, used, used + window)); // a permit is out
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    fn is_idle(&self, permits_out: u32, last_used: Instant, now: Instant) -> bool {
        permits_out == 0
            && self.state_at(now) == State::Closed
            && now.saturating_duration_since(last_used) >= self.idle_after()
    }

    /// The keyed scope's rule for a new key in a full table: of `keys` (each a position, its
    /// breaker, its permits out and its last use), the position of the least recently used idle
    /// key (the first of equals), to evict; [`KeyedRefusal::Full`] when no key is idle, so a key
    /// in use is never evicted.
    ///
    /// ```
    /// use stormguard_core::{Breaker, Instant, KeyedRefusal, Member};
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

impl<S: SettingsRef + Clone> Member for Breaker<S> {
    fn state_at(&self, now: Instant) -> State {
        self.state(now)
    }
    fn idle_after(&self) -> Duration {
        self.settings().trip_window()
    }
    fn reseed(&mut self, seed: u64) {
        self.set_seed(seed);
    }
    fn snapshot_at(&self, now: Instant) -> Snapshot {
        self.snapshot(now)
    }
}

impl Member for LeanBreaker {
    fn state_at(&self, now: Instant) -> State {
        self.state(now)
    }
    fn idle_after(&self) -> Duration {
        self.settings().trip_window()
    }
    fn reseed(&mut self, seed: u64) {
        self.set_seed(seed);
    }
    fn snapshot_at(&self, now: Instant) -> Snapshot {
        self.snapshot(now)
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
/// use stormguard_core::{Breaker, Instant, Keyed, Outcome};
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

impl<K: Eq + Clone, B: Member, const N: usize> Keyed<K, B, N> {
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
