//! A limiter per key, in a fixed-capacity table.
//!
//! [`KeyedLimiter`] (with the aliases [`KeyedRateLimiter`] and [`KeyedWindowLimiter`]) keeps a
//! limiter per key in a fixed-capacity open-addressing table: no allocation, `N` slots fixed at
//! compile time. It stores each key itself, so two keys never share a limiter, and a 32-bit tag
//! of its hash. When a new key finds the table full, the least recently used *idle* key is
//! evicted: one whose limiter is back to full (GCRA: the TAT has passed; window form: no window
//! open, no cooldown) and that nobody has asked about for the idle period (5 minutes by
//! default). An idle limiter is indistinguishable from a new one, so eviction never changes a
//! decision. When no key is idle, the new key is refused with [`KeyedLimitError::Full`], never by
//! evicting a key in use.

use core::fmt;
use core::hash::{BuildHasher, Hash, Hasher};
use core::num::NonZeroU32;

use super::gcra::RateLimitSettings;
use super::limiter::sealed::Rule;
use super::limiter::{limited, LimitRule, LATE_READING_NS};
use super::probe::{self, ProbeSlots};
use super::sliding::SlidingWindowSettings;
use super::window::WindowLimitSettings;
use crate::cell::sealed::Bits;
use crate::error::Refused;
use crate::name::Name;
use crate::time::{Duration, Instant};

/// Why a [`KeyedLimiter`] refused.
///
/// ```
/// use stormguard_core::{Duration, Instant, limits::KeyedLimitError, limits::KeyedWindowLimiter, RefusalReason, Refused,
///     limits::WindowLimitSettings};
///
/// let mut streams: KeyedWindowLimiter<u32, 1> = KeyedWindowLimiter::new(WindowLimitSettings::defaults("s"));
/// let now = Instant::from_secs(1);
/// streams.check(&7, now)?;
/// let full = streams.check(&8, now).unwrap_err();
/// assert_eq!(full, KeyedLimitError::Full { retry_after: Duration::from_secs(300) });
/// // As a plain refusal, for the call driver and the guarded pause:
/// let refused: Refused = full.into();
/// assert_eq!(refused.reason, RefusalReason::RateLimited);
/// # Ok::<(), KeyedLimitError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum KeyedLimitError {
    /// The key's own limiter refused.
    Limited(Refused),
    /// The key is new, the table is full and no key in it is idle. `retry_after` is when the
    /// first one will be, if nobody asks about it meanwhile.
    Full {
        /// Time until a key in the table turns idle.
        retry_after: Duration,
    },
}

impl KeyedLimitError {
    /// How long until asking again may succeed.
    #[must_use]
    pub const fn retry_after(&self) -> Duration {
        match self {
            KeyedLimitError::Limited(r) => r.retry_after,
            KeyedLimitError::Full { retry_after } => *retry_after,
        }
    }

    /// The refusal as the call driver takes it: reason [`RefusalReason::RateLimited`](crate::RefusalReason::RateLimited) either way.
    #[must_use]
    pub const fn refused(&self) -> Refused {
        match self {
            KeyedLimitError::Limited(r) => *r,
            KeyedLimitError::Full { retry_after } => limited(*retry_after),
        }
    }
}

impl From<KeyedLimitError> for Refused {
    fn from(e: KeyedLimitError) -> Refused {
        e.refused()
    }
}

impl fmt::Display for KeyedLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedLimitError::Limited(r) => fmt::Display::fmt(r, f),
            KeyedLimitError::Full { retry_after } => write!(
                f,
                "rate limiter table full with no idle key, retry after {retry_after}"
            ),
        }
    }
}

impl core::error::Error for KeyedLimitError {}

const P0: u64 = 0x9E37_79B9_7F4A_7C15;
const P1: u64 = 0xD6E8_FEB8_6659_FD93;

/// Multiplies into 128 bits and folds the halves: a fast, well-mixing step.
#[inline]
const fn fold(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ (p.wrapping_shr(64) as u64)
}

/// The default hasher of a [`KeyedLimiter`]: seeded, allocation-free, and fast on integer keys
/// (two 64-bit multiplications for a `u64`). Give each process a secret seed
/// ([`KeyedLimiter::with_seed`]) when keys come from outside; for stronger protection against
/// keys chosen to collide, use a keyed hasher through [`KeyedLimiter::with_hasher`].
///
/// ```
/// use core::hash::BuildHasher;
/// use stormguard_core::limits::LimiterHashState;
/// let a = LimiterHashState::with_seed(1);
/// assert_eq!(a.hash_one(42u64), a.hash_one(42u64));
/// assert_ne!(a.hash_one(42u64), LimiterHashState::with_seed(2).hash_one(42u64));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LimiterHashState {
    seed: u64,
}

impl LimiterHashState {
    /// The fixed seed [`KeyedLimiter::new`] uses.
    pub const DEFAULT: LimiterHashState = LimiterHashState { seed: 0 };

    /// A hash state with its own seed.
    #[must_use]
    pub const fn with_seed(seed: u64) -> LimiterHashState {
        LimiterHashState { seed }
    }
}

impl Default for LimiterHashState {
    fn default() -> Self {
        LimiterHashState::DEFAULT
    }
}

impl BuildHasher for LimiterHashState {
    type Hasher = LimiterHasher;
    fn build_hasher(&self) -> LimiterHasher {
        LimiterHasher {
            state: self.seed ^ P0,
        }
    }
}

/// The hasher [`LimiterHashState`] builds.
///
/// ```
/// use core::hash::{BuildHasher, Hasher};
/// use stormguard_core::limits::LimiterHashState;
/// let mut h = LimiterHashState::DEFAULT.build_hasher();
/// h.write_u64(7);
/// assert_eq!(h.finish(), LimiterHashState::DEFAULT.hash_one(7u64));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct LimiterHasher {
    state: u64,
}

impl Hasher for LimiterHasher {
    #[inline]
    fn finish(&self) -> u64 {
        fold(self.state, P0)
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.state = fold(self.state ^ v, P1);
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            if let Some(dst) = buf.get_mut(..chunk.len()) {
                dst.copy_from_slice(chunk);
            }
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
}

/// One key's place in the table.
#[derive(Clone, Debug)]
struct Slot<K, T> {
    /// The high 32 bits of the key's hash (never zero): a quick filter while probing, and where
    /// the key's home slot comes from. Its niche makes an empty slot cost nothing extra.
    tag: NonZeroU32,
    /// When the key was last asked about, in nanoseconds since the epoch.
    last: u64,
    /// The key's limiter state.
    state: T,
    key: K,
}

enum Probe {
    Found(usize),
    Vacant(usize),
    Full,
}

/// A limiter per key (stream, tenant, peer) in a fixed-capacity table: `N` slots, no allocation,
/// the rule `R` ([`RateLimitSettings`] or [`WindowLimitSettings`]) applied to each key on its own.
/// Use the aliases [`KeyedRateLimiter`] and [`KeyedWindowLimiter`].
///
/// Keys are stored whole and compared with `Eq`, so two keys never share a limiter. A new key
/// takes a free slot; in a full table it evicts the least recently used idle key (see the module
/// docs), and when none is idle it is refused with [`KeyedLimitError::Full`]. Lookups probe linearly
/// from the key's home slot and stay short while the table is under about three quarters full:
/// give it a quarter more slots than the keys you expect to be active at once, and call
/// [`evict_idle`](KeyedLimiter::evict_idle) now and then (every idle period, say) so that keys
/// long gone do not crowd it. A new key in a full table costs one pass over the table.
///
/// Single-threaded (`&mut self`); share it behind a mutex (the adapters do).
///
/// ```
/// use stormguard_core::{Instant, limits::KeyedRateLimiter, limits::RateLimitSettings, limits::KeyedLimitError};
///
/// let mut per_peer: KeyedRateLimiter<u64, 1024> =
///     KeyedRateLimiter::new(RateLimitSettings::per_second("peers", 2)?);
/// let now = Instant::from_secs(1);
/// per_peer.check(&1, now).unwrap();
/// per_peer.check(&1, now).unwrap();
/// assert!(matches!(per_peer.check(&1, now), Err(KeyedLimitError::Limited(_))));
/// assert!(per_peer.check(&2, now).is_ok()); // every key has its own limiter
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone)]
pub struct KeyedLimiter<K, R: LimitRule, const N: usize, S = LimiterHashState> {
    rule: R,
    hasher: S,
    len: usize,
    slots: [Option<Slot<K, R::State>>; N],
}

/// A GCRA limiter per key: see [`KeyedLimiter`].
pub type KeyedRateLimiter<K, const N: usize, S = LimiterHashState> =
    KeyedLimiter<K, RateLimitSettings, N, S>;

/// Document 004's per-stream limiter, a window with cooldown per key: see [`KeyedLimiter`].
///
/// ```
/// use stormguard_core::{Instant, limits::KeyedWindowLimiter, limits::WindowLimitSettings};
/// let mut streams: KeyedWindowLimiter<[u8; 16], 256> =
///     KeyedWindowLimiter::new(WindowLimitSettings::defaults("streams"));
/// let stream_id = [7u8; 16];
/// assert!(streams.check(&stream_id, Instant::from_secs(1)).is_ok());
/// assert_eq!(streams.available(&stream_id, Instant::from_secs(1)), 49);
/// ```
pub type KeyedWindowLimiter<K, const N: usize, S = LimiterHashState> =
    KeyedLimiter<K, WindowLimitSettings, N, S>;

/// A segmented sliding-window limiter per key: see [`KeyedLimiter`].
///
/// ```
/// use stormguard_core::{Duration, Instant, limits::KeyedSlidingWindowLimiter, limits::SlidingWindowSettings};
/// let settings = SlidingWindowSettings::builder("tenants").quota(2).window(Duration::from_secs(8)).build()?;
/// let mut tenants: KeyedSlidingWindowLimiter<u32, 64> = KeyedSlidingWindowLimiter::new(settings);
/// let now = Instant::from_secs(1);
/// assert!(tenants.check(&7, now).is_ok());
/// assert!(tenants.check(&7, now).is_ok());
/// assert!(tenants.check(&7, now).is_err()); // tenant 7 has used its window
/// assert!(tenants.check(&8, now).is_ok()); // tenant 8 has its own
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
pub type KeyedSlidingWindowLimiter<K, const N: usize, S = LimiterHashState> =
    KeyedLimiter<K, SlidingWindowSettings, N, S>;

impl<K, R: LimitRule, const N: usize> KeyedLimiter<K, R, N> {
    /// An empty table applying `rule` to every key, hashing with the fixed default seed; usable
    /// in a `const` or `static`.
    #[must_use]
    pub const fn new(rule: R) -> Self {
        KeyedLimiter::with_hasher(rule, LimiterHashState::DEFAULT)
    }

    /// An empty table whose hash is seeded with `seed` (give each process its own, secret one
    /// when keys come from outside).
    #[must_use]
    pub const fn with_seed(rule: R, seed: u64) -> Self {
        KeyedLimiter::with_hasher(rule, LimiterHashState::with_seed(seed))
    }
}

impl<K, R: LimitRule, const N: usize, S> KeyedLimiter<K, R, N, S> {
    /// An empty table hashing keys with `hasher` (any [`BuildHasher`]).
    #[must_use]
    pub const fn with_hasher(rule: R, hasher: S) -> Self {
        KeyedLimiter {
            rule,
            hasher,
            len: 0,
            slots: [const { None }; N],
        }
    }

    /// Keys in the table.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// `true` when no key is in the table.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys the table can hold (`N`).
    #[must_use]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// The rule applied to every key (its settings).
    #[must_use]
    pub const fn settings(&self) -> &R {
        &self.rule
    }

    /// The limiter's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        Rule::name(&self.rule)
    }
}

/// The last-use time after a request at `now`: a late reading changes nothing, a clock that
/// stepped back further restarts the quiet time from it.
#[inline]
const fn touched(last: u64, now: u64) -> u64 {
    if last > now.saturating_add(LATE_READING_NS) {
        now
    } else if last > now {
        last
    } else {
        now
    }
}

impl<K: Eq + Hash, R: LimitRule, const N: usize, S: BuildHasher> KeyedLimiter<K, R, N, S> {
    #[inline]
    fn tag(&self, key: &K) -> NonZeroU32 {
        let h = self.hasher.hash_one(key);
        NonZeroU32::new(h.wrapping_shr(32) as u32).unwrap_or(NonZeroU32::MIN)
    }

    #[inline]
    fn probe(&self, tag: NonZeroU32, key: &K) -> Probe {
        let mut i = probe::home(tag.get(), N);
        for _ in 0..N {
            match self.slots.get(i) {
                Some(Some(slot)) => {
                    if slot.tag == tag && slot.key == *key {
                        return Probe::Found(i);
                    }
                }
                Some(None) => return Probe::Vacant(i),
                None => return Probe::Full,
            }
            i = probe::next_slot(i, N);
        }
        Probe::Full
    }

    /// Takes one cell for `key` at `now` (see [`check_n`](KeyedLimiter::check_n)).
    #[inline]
    pub fn check(&mut self, key: &K, now: Instant) -> Result<(), KeyedLimitError>
    where
        K: Clone,
    {
        self.check_n(key, now, 1)
    }

    /// Takes `n` cells for `key` at `now`, or refuses: [`KeyedLimitError::Limited`] when the key's
    /// limiter says no, [`KeyedLimitError::Full`] when the key is new, the table is full and no key
    /// in it is idle. A new key is admitted as by a new limiter; a refused new key is not stored.
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant, limits::KeyedLimitError, limits::KeyedRateLimiter, limits::RateLimitSettings};
    /// let mut t: KeyedRateLimiter<&str, 8> = KeyedRateLimiter::new(RateLimitSettings::per_second("t", 4)?);
    /// let now = Instant::ZERO;
    /// t.check_n(&"bulk", now, 4).unwrap();
    /// let Err(KeyedLimitError::Limited(r)) = t.check_n(&"bulk", now, 2) else { panic!() };
    /// assert_eq!(r.retry_after, Duration::from_millis(500));
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn check_n(&mut self, key: &K, now: Instant, n: u32) -> Result<(), KeyedLimitError>
    where
        K: Clone,
    {
        let tag = self.tag(key);
        let at = match self.probe(tag, key) {
            Probe::Found(i) => {
                let Some(Some(slot)) = self.slots.get_mut(i) else {
                    return Err(KeyedLimitError::Full {
                        retry_after: Duration::MAX,
                    });
                };
                slot.last = touched(slot.last, now.as_nanos());
                let (result, state) = Rule::decide(&self.rule, slot.state, now, n);
                slot.state = state;
                return result.map_err(KeyedLimitError::Limited);
            }
            Probe::Vacant(i) => Some(i),
            Probe::Full => None,
        };
        // A new key: decided as by a new limiter, and stored only if admitted.
        let (result, state) = Rule::decide(&self.rule, R::State::ZERO, now, n);
        result.map_err(KeyedLimitError::Limited)?;
        let at = match at {
            Some(i) => i,
            None => self.make_room(tag, now)?,
        };
        if let Some(place) = self.slots.get_mut(at) {
            *place = Some(Slot {
                tag,
                last: now.as_nanos(),
                state,
                key: key.clone(),
            });
            self.len = self.len.saturating_add(1);
        }
        Ok(())
    }

    /// Cells a request for `key` at `now` could take (a full limiter's for a key not in the
    /// table).
    #[must_use]
    pub fn available(&self, key: &K, now: Instant) -> u32 {
        let state = match self.probe(self.tag(key), key) {
            Probe::Found(i) => match self.slots.get(i) {
                Some(Some(slot)) => slot.state,
                _ => R::State::ZERO,
            },
            _ => R::State::ZERO,
        };
        Rule::available(&self.rule, state, now)
    }

    /// `true` when `key` has an entry in the table.
    #[must_use]
    pub fn contains_key(&self, key: &K) -> bool {
        matches!(self.probe(self.tag(key), key), Probe::Found(_))
    }

    /// Forgets `key`, as if it had never been seen; `true` if it was in the table.
    pub fn remove(&mut self, key: &K) -> bool {
        match self.probe(self.tag(key), key) {
            Probe::Found(i) => {
                self.remove_at(i);
                true
            }
            _ => false,
        }
    }

    /// Evicts every idle key (limiter as good as new, quiet for the idle period) at `now`;
    /// returns how many. Evicting an idle key never changes a decision: it only makes room.
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant, limits::KeyedWindowLimiter, limits::WindowLimitSettings};
    /// let mut t: KeyedWindowLimiter<u64, 16> = KeyedWindowLimiter::new(WindowLimitSettings::defaults("s"));
    /// for key in 0..10 {
    ///     t.check(&key, Instant::ZERO).unwrap();
    /// }
    /// assert_eq!(t.evict_idle(Instant::ZERO + Duration::from_secs(299)), 0);
    /// assert_eq!(t.evict_idle(Instant::ZERO + Duration::from_secs(300)), 10);
    /// assert!(t.is_empty());
    /// ```
    pub fn evict_idle(&mut self, now: Instant) -> usize {
        let mut evicted = 0usize;
        let mut i = 0;
        while i < N {
            // Backward-shift deletion may move another key into `i`: look again before moving on.
            while self.until_idle_at(i, now) == Some(Duration::ZERO) {
                self.remove_at(i);
                evicted = evicted.saturating_add(1);
            }
            i = i.saturating_add(1);
        }
        evicted
    }

    /// Time from `now` until the key in slot `i` is idle; `None` for an empty slot. Settles its
    /// last-use time for a clock that stepped back.
    fn until_idle_at(&mut self, i: usize, now: Instant) -> Option<Duration> {
        let rule = &self.rule;
        let slot = self.slots.get_mut(i)?.as_mut()?;
        let now_ns = now.as_nanos();
        // A clock that stepped back: settle the key as a request would, so that it turns idle
        // on the new clock rather than once the old one is reached again. (The price: after a
        // step back of more than a late reading, a key's next decision is taken from the state
        // this scan settled, so it can differ by when another key's arrival ran the scan. A
        // table pinned full for as long as the clock stepped back would be worse.)
        if slot.last > now_ns.saturating_add(LATE_READING_NS) {
            slot.last = now_ns;
        }
        slot.state = Rule::settle(rule, slot.state, now);
        // Idle once quiet for the idle period (at `last + idle`).
        let quiet_left = match slot.last.checked_add(Rule::idle(rule).as_nanos()) {
            Some(at) => Duration::from_nanos(at.saturating_sub(now_ns)),
            None => Duration::MAX,
        };
        Some(quiet_left.max(Rule::until_full(rule, slot.state, now)))
    }

    /// Evicts the least recently used idle key to make room for a new key with `tag`, and
    /// returns the slot the new key goes in; `Full` when no key is idle.
    fn make_room(&mut self, tag: NonZeroU32, now: Instant) -> Result<usize, KeyedLimitError> {
        let mut victim: Option<(usize, u64)> = None;
        let mut soonest = Duration::MAX;
        for i in 0..N {
            let Some(wait) = self.until_idle_at(i, now) else {
                continue;
            };
            if wait.is_zero() {
                let last = match self.slots.get(i) {
                    Some(Some(slot)) => slot.last,
                    _ => continue,
                };
                if victim.is_none_or(|(_, oldest)| last < oldest) {
                    victim = Some((i, last));
                }
            } else {
                soonest = soonest.min(wait);
            }
        }
        let Some((i, _)) = victim else {
            return Err(KeyedLimitError::Full {
                retry_after: soonest,
            });
        };
        self.remove_at(i);
        // Exactly one slot is free now; the new key's probe sequence reaches it.
        let mut j = probe::home(tag.get(), N);
        for _ in 0..N {
            if matches!(self.slots.get(j), Some(None)) {
                return Ok(j);
            }
            j = probe::next_slot(j, N);
        }
        Err(KeyedLimitError::Full {
            retry_after: soonest,
        })
    }

    /// Empties slot `hole` and shifts back the keys after it that may move closer to home, so
    /// that no probe sequence is broken (no tombstones).
    fn remove_at(&mut self, hole: usize) {
        if let Some(place) = self.slots.get_mut(hole) {
            if place.take().is_some() {
                self.len = self.len.saturating_sub(1);
            }
        }
        probe::close_gap(self.slots.as_mut_slice(), hole);
    }
}

/// The limiter's slots, as the probe table's removal sees them.
impl<K, T> ProbeSlots for [Option<Slot<K, T>>] {
    fn slot_count(&self) -> usize {
        self.len()
    }

    fn home_of(&self, i: usize) -> Option<usize> {
        let slot = self.get(i)?.as_ref()?;
        Some(probe::home(slot.tag.get(), self.len()))
    }

    fn shift(&mut self, from: usize, to: usize) {
        let moved = self.get_mut(from).and_then(Option::take);
        if let Some(place) = self.get_mut(to) {
            *place = moved;
        }
    }
}

impl<K, R: LimitRule, const N: usize, S> fmt::Debug for KeyedLimiter<K, R, N, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("name", Rule::name(&self.rule))
            .field("len", &self.len)
            .field("capacity", &N)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "defmt")]
impl<K, R: LimitRule, const N: usize, S> defmt::Format for KeyedLimiter<K, R, N, S> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "KeyedLimiter({}, {}/{})",
            Rule::name(&self.rule),
            self.len,
            N
        );
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for LimiterHasher {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "LimiterHasher");
    }
}
