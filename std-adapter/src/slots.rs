//! The keyed table's slots and their atomic protocol, apart from what a slot holds (the keyed
//! policy's key, policy and breaker; a stand-in in the loom model of the protocol), so that
//! the protocol is checked by loom without tokio. See `keyed.rs` for why the table is built so.
//!
//! - A lookup probes linearly from the key's home slot, without a lock, until it finds the key
//!   or an empty slot; a miss may be a race with a writer moving keys, so the writers' path
//!   looks again under the lock before adding.
//! - Inserting a key and evicting one take the writers' `Mutex`; a call on a key in the table
//!   never does.
//! - Each key has a use word: the calls in flight (low 32 bits), a count of calls started (31
//!   bits, wrapping) and an "evicted" bit. A call counts itself in with a compare-and-swap that
//!   fails once the bit is set; eviction reads the word once, applies the idle rule to that
//!   reading and sets the bit with a compare-and-swap from exactly that reading, so a call that
//!   started in between (or started and ended: the count moved) makes the eviction fail.
//! - A new key in a full table makes room with a clock hand: it reads the keys of the next
//!   [`HAND_SLOTS`] slots from where the hand stands (held with the writers' lock), evicts the
//!   least recently used idle one among them, and moves the hand past them; when none of them
//!   is idle the key is refused. So making room or refusing reads a bounded number of keys,
//!   whatever the capacity, and the rule is approximately LRU: the least recently used idle
//!   key of a window, not of the table. While a key is idle and no key leaves the table, the
//!   hand reaches it within `slots / HAND_SLOTS` (rounded up) new keys that look for room, so
//!   at most that many are refused before a key is evicted.
//! - A sweep is the hand's trip over every slot without finding a key to evict. A full table
//!   whose sweep ended remembers until when no key can be idle: the soonest instant a key it
//!   read with no call in flight becomes idle, and at most the quiet time every key needs after
//!   its last call (a trip window) after the sweep began. A new key refused before then reads
//!   no key. No call can make a key idle sooner: a call that is in flight when the hand reads
//!   its key, or starts after, ends after the sweep began, and its key needs that quiet time
//!   from then on, so the call path takes no part. A change no call makes (a recovery ramp
//!   ending, an operator's reset) is seen at the latest a trip window later. A key leaving the
//!   table (an eviction, a removal) starts a new sweep and forgets the instant.

use std::sync::{Arc, PoisonError};

use stormguard_core::limits::probe::{self, close_gap, next_slot, ProbeSlots};
use stormguard_core::Instant;

use crate::loom::{ArcCell, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};

const EVICTED: u64 = 1 << 63;
const OUT_MASK: u64 = 0xFFFF_FFFF;
const STARTED_ONE: u64 = 1 << 32;
const STARTED_MASK: u64 = !(EVICTED | OUT_MASK);

/// Slots the clock hand reads for one new key in a full table (see the module docs): enough
/// that a table of idle keys almost always finds one at once, few enough that a refusal costs
/// tens of microseconds whatever the table's size.
pub(crate) const HAND_SLOTS: usize = 128;

/// What a slot holds, as the eviction rule sees it (the keyed policy's: the core's
/// `Member::is_idle` and `Member::to_evict` on the key's breaker).
pub(crate) trait Occupant: Sized {
    /// Whether a key whose use reads `in_flight` calls and `last_used` may be evicted at `now`.
    fn is_idle(&self, in_flight: u32, last_used: Instant, now: Instant) -> bool;

    /// Of `keys` (each with one reading of its use), the position of the key to evict to make
    /// room at `now`; `None` when none may be.
    fn to_evict(keys: &[(&Self, u32, Instant)], now: Instant) -> Option<usize>;

    /// When a key whose use reads `in_flight` calls and `last_used` becomes idle if no call
    /// starts or ends, its state read at `now`; `None` while it cannot (a call in flight).
    fn idle_from(&self, in_flight: u32, last_used: Instant, now: Instant) -> Option<Instant>;

    /// How far ahead a full table may remember that no key can be evicted: at most the quiet
    /// time any key needs after its last call before it is idle (so no call that ends can make
    /// a key idle sooner), and the longest a change no call makes may go unseen.
    fn recheck_after(&self) -> stormguard_core::Duration;
}

/// One key in the table: its hash, what it holds, and its use.
pub(crate) struct Entry<V> {
    pub(crate) hash: u64,
    pub(crate) value: V,
    /// Calls in flight, calls started and the evicted bit (see the module docs).
    word: AtomicU64,
    /// The last call's start or end, in nanoseconds of the caller's clock.
    last_used: AtomicU64,
}

impl<V> Entry<V> {
    /// Counts a call in; `false` once the key has been evicted. (The call's end sets the last
    /// use; while it is in flight the key is not idle whatever its last use.)
    pub(crate) fn enter(&self) -> bool {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & EVICTED != 0 {
                return false;
            }
            let started = (word & STARTED_MASK).wrapping_add(STARTED_ONE) & STARTED_MASK;
            let out = (word & OUT_MASK).wrapping_add(1) & OUT_MASK;
            match self.word.compare_exchange_weak(
                word,
                started | out,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => word = seen,
            }
        }
    }

    /// Counts a call out at `now`: the last use first, then the count, so that whoever reads
    /// the count afterwards sees the use.
    pub(crate) fn exit(&self, now: Instant) {
        self.last_used.fetch_max(now.as_nanos(), Ordering::AcqRel);
        self.word.fetch_sub(1, Ordering::AcqRel);
    }

    /// One reading of the use: the word, the calls in flight, the last use.
    fn reading(&self) -> (u64, u32, Instant) {
        let word = self.word.load(Ordering::Acquire);
        let out = u32::try_from(word & OUT_MASK).unwrap_or(u32::MAX);
        let last = Instant::from_nanos(self.last_used.load(Ordering::Acquire));
        (word, out, last)
    }

    /// Marks the key evicted if its use is still exactly `word` (nothing started since).
    fn mark_evicted(&self, word: u64) -> bool {
        word & EVICTED == 0
            && self
                .word
                .compare_exchange(word, word | EVICTED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Marks the key evicted whatever its use (a removal): a call in flight finishes on it, a
    /// call that starts now looks the key up again.
    fn mark_removed(&self) {
        self.word.fetch_or(EVICTED, Ordering::AcqRel);
    }

    /// Whether the key has been evicted (the tests' check that no call runs on such a key).
    #[cfg(test)]
    pub(crate) fn is_evicted(&self) -> bool {
        self.word.load(Ordering::Acquire) & EVICTED != 0
    }

    /// Calls in flight (the model's check of the count).
    #[cfg(all(test, loom))]
    pub(crate) fn in_flight(&self) -> u32 {
        self.reading().1
    }
}

/// Why a key was not entered.
pub(crate) enum Refusal<R> {
    /// The key is new, the table is full and no key in it may be evicted.
    Full,
    /// What the key holds could not be made.
    Make(R),
}

/// A fixed array of slots, twice as many as keys it may hold (rounded up to a power of two),
/// so that probes stay short.
pub(crate) struct Slots<V> {
    slots: Box<[ArcCell<Entry<V>>]>,
    capacity: usize,
    len: AtomicUsize,
    /// Held by whoever adds or evicts keys, with the eviction hand; never on the call path of a
    /// key in the table.
    writer: Mutex<Hand>,
}

/// The clock hand that picks the key to evict (see the module docs), kept under the writers'
/// lock.
#[derive(Default)]
struct Hand {
    /// The next slot it reads.
    at: usize,
    /// Slots read in the current sweep (since a key last left the table).
    swept: usize,
    /// When the current sweep began.
    since: Option<Instant>,
    /// The soonest instant a key the current sweep read may be idle: the earliest idle instant
    /// of a key read with no call in flight, and at most a quiet time after `since`.
    soonest: Option<Instant>,
    /// The last sweep ended without a key to evict: none can be before this instant.
    full_until: Option<Instant>,
}

impl Hand {
    /// A key left the table: what the sweep learnt no longer holds.
    fn restart(&mut self) {
        self.swept = 0;
        self.since = None;
        self.soonest = None;
        self.full_until = None;
    }

    /// Folds an instant a key read may be idle into the sweep's soonest.
    fn may_be_idle_at(&mut self, at: Instant) {
        self.soonest = Some(self.soonest.map_or(at, |s| s.min(at)));
    }
}

/// The home slot of `hash` in a table of `n` slots: the probe table's, from the hash's high
/// 32 bits (`RandomState` mixes every bit).
fn home(hash: u64, n: usize) -> usize {
    probe::home(u32::try_from(hash.wrapping_shr(32)).unwrap_or(0), n)
}

/// The slots as the probe table's removal sees them; used with the writers' lock held.
struct Locked<'a, V>(&'a [ArcCell<Entry<V>>]);

impl<V> ProbeSlots for Locked<'_, V> {
    fn slot_count(&self) -> usize {
        self.0.len()
    }

    fn home_of(&self, i: usize) -> Option<usize> {
        let n = self.0.len();
        self.0.get(i)?.read(|e| e.map(|e| home(e.hash, n)))
    }

    fn shift(&mut self, from: usize, to: usize) {
        // Stored at the hole before it leaves `from`: a lookup sees it at least once, or
        // misses and looks again under the lock.
        let moved = self.0.get(from).and_then(ArcCell::load_full);
        if let Some(hole) = self.0.get(to) {
            hole.store(moved);
        }
        if let Some(left) = self.0.get(from) {
            left.store(None);
        }
    }
}

impl<V> Slots<V> {
    /// A table for at most `capacity` keys; `None` for no key at all (or a capacity whose
    /// slots would not fit in memory).
    pub(crate) fn new(capacity: usize) -> Option<Self> {
        if capacity == 0 {
            return None;
        }
        let n = capacity
            .checked_mul(2)
            .and_then(usize::checked_next_power_of_two)?;
        Some(Slots {
            slots: (0..n).map(|_| ArcCell::empty()).collect(),
            capacity,
            len: AtomicUsize::new(0),
            writer: Mutex::new(Hand::default()),
        })
    }

    /// Keys in the table.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// The most keys the table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Every key in the table, with its slot.
    pub(crate) fn live(&self) -> impl Iterator<Item = (usize, Arc<Entry<V>>)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| slot.load_full().map(|e| (i, e)))
    }

    fn lock(&self) -> MutexGuard<'_, Hand> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry of the key with `hash` that `is` recognises, without a lock (`None` may be a
    /// miss racing a writer: look again under the lock before adding).
    pub(crate) fn find(&self, hash: u64, is: impl Fn(&V) -> bool) -> Option<Arc<Entry<V>>> {
        let n = self.slots.len();
        let mut i = home(hash, n);
        for _ in 0..n {
            let found = self.slots.get(i)?.read(|slot| match slot {
                None => Some(None),
                Some(e) if e.hash == hash && is(&e.value) => Some(Some(Arc::clone(e))),
                Some(_) => None,
            });
            if let Some(found) = found {
                return found;
            }
            i = next_slot(i, n);
        }
        None
    }

    /// [`Slots::find`], looking again under the lock after a miss.
    pub(crate) fn get(&self, hash: u64, is: impl Fn(&V) -> bool) -> Option<Arc<Entry<V>>> {
        self.find(hash, &is).or_else(|| {
            let _writer = self.lock();
            self.find(hash, &is)
        })
    }
}

impl<V: Occupant> Slots<V> {
    /// The entry of the key with `hash` that `is` recognises, with a call counted in:
    /// lock-free, and without reading the clock, for a key in the table. A new key is added
    /// with what `make` gives it (evicting a key to make room if the table is full), its last
    /// use and the eviction rule's now read from `now` under the writers' lock.
    pub(crate) fn enter<R>(
        &self,
        hash: u64,
        is: impl Fn(&V) -> bool,
        now: impl FnOnce() -> Instant,
        make: impl FnOnce() -> Result<V, R>,
    ) -> Result<Arc<Entry<V>>, Refusal<R>> {
        if let Some(e) = self.find(hash, &is) {
            if e.enter() {
                return Ok(e);
            }
        }
        self.enter_locked(hash, is, now, make)
    }

    /// The writers' path: look again, then add the key (evicting one if full).
    fn enter_locked<R>(
        &self,
        hash: u64,
        is: impl Fn(&V) -> bool,
        now: impl FnOnce() -> Instant,
        make: impl FnOnce() -> Result<V, R>,
    ) -> Result<Arc<Entry<V>>, Refusal<R>> {
        let mut hand = self.lock();
        if let Some(e) = self.find(hash, is) {
            // Evictions hold this lock too, so a key found now is not marked evicted.
            if e.enter() {
                return Ok(e);
            }
        }
        let now = now();
        if self.len() >= self.capacity {
            self.make_room(&mut hand, now)?;
        }
        let value = make().map_err(Refusal::Make)?;
        let entry = Arc::new(Entry {
            hash,
            value,
            // This call is in: one started, one in flight.
            word: AtomicU64::new(STARTED_ONE | 1),
            last_used: AtomicU64::new(now.as_nanos()),
        });
        let n = self.slots.len();
        let mut i = home(hash, n);
        for _ in 0..n {
            if let Some(slot) = self.slots.get(i) {
                if slot.read(|s| s.is_none()) {
                    slot.store(Some(Arc::clone(&entry)));
                    self.len.fetch_add(1, Ordering::AcqRel);
                    return Ok(entry);
                }
            }
            i = next_slot(i, n);
        }
        // Not reached: there are twice as many slots as keys.
        Err(Refusal::Full)
    }

    /// Evicts the key the rule picks among the next [`HAND_SLOTS`] slots of the hand; `Full`
    /// when none may be. Holds the writers' lock (`hand`).
    ///
    /// A table whose last sweep found no key to evict refuses at once until the soonest of them
    /// may be idle: such a refusal reads no key.
    fn make_room<R>(&self, hand: &mut Hand, now: Instant) -> Result<(), Refusal<R>> {
        if hand.full_until.is_some_and(|until| now < until) {
            return Err(Refusal::Full);
        }
        let n = self.slots.len();
        let window = HAND_SLOTS.min(n);
        let mut read = Vec::with_capacity(window);
        let mut i = hand.at;
        for _ in 0..window {
            // Most slots are empty (twice as many slots as keys): those cost no reference.
            let slot = self.slots.get(i);
            if let Some(e) = slot.and_then(|s| s.read(|e| e.map(Arc::clone))) {
                read.push((i, e));
            }
            i = next_slot(i, n);
        }
        hand.at = i;
        if hand.swept == 0 {
            hand.since = Some(now);
            hand.soonest = None;
        }
        let mut readings: Vec<_> = read.iter().map(|(_, e)| e.reading()).collect();
        // Each failed mark means a key was used since it was read: it is no longer idle, and
        // leaves the candidates.
        while !read.is_empty() {
            let keys: Vec<_> = read
                .iter()
                .zip(&readings)
                .map(|((_, e), &(_, out, last))| (&e.value, out, last))
                .collect();
            let Some(victim) = V::to_evict(&keys, now) else {
                self.note_sweep(hand, &keys, n, window, now);
                return Err(Refusal::Full);
            };
            if victim >= read.len() {
                break;
            }
            let (slot, entry) = read.swap_remove(victim);
            let (word, _, _) = readings.swap_remove(victim);
            if entry.mark_evicted(word) {
                self.remove_at(slot);
                hand.restart();
                return Ok(());
            }
        }
        self.note_sweep(hand, &[], n, window, now);
        Err(Refusal::Full)
    }

    /// Counts `window` more slots read by the current sweep, whose `keys` (none idle at `now`)
    /// may be idle from their idle instants, and a quiet time after the sweep began at the
    /// latest; a sweep that read every one of the `n` slots makes the table refuse without
    /// reading until the soonest of those. Holds the writers' lock (`hand`).
    fn note_sweep(
        &self,
        hand: &mut Hand,
        keys: &[(&V, u32, Instant)],
        n: usize,
        window: usize,
        now: Instant,
    ) {
        let since = hand.since.unwrap_or(now);
        for &(v, out, last) in keys {
            hand.may_be_idle_at(since.saturating_add(v.recheck_after()));
            if let Some(at) = v.idle_from(out, last, now) {
                hand.may_be_idle_at(at);
            }
        }
        hand.swept = hand.swept.saturating_add(window);
        if hand.swept >= n {
            let soonest = hand.soonest;
            hand.restart();
            hand.full_until = soonest;
        }
    }

    /// Empties slot `hole` and shifts back the keys after it that may move closer to home, so
    /// that no probe sequence is broken. Holds the writers' lock.
    fn remove_at(&self, hole: usize) {
        if let Some(slot) = self.slots.get(hole) {
            if slot.swap(None).is_some() {
                self.len.fetch_sub(1, Ordering::AcqRel);
            }
        }
        close_gap(&mut Locked(&self.slots), hole);
    }

    /// Removes the key with `hash` that `is` recognises, whatever its use; `true` when the
    /// table held it.
    pub(crate) fn remove(&self, hash: u64, is: impl Fn(&V) -> bool) -> bool {
        let mut hand = self.lock();
        let n = self.slots.len();
        let mut i = home(hash, n);
        for _ in 0..n {
            let Some(entry) = self.slots.get(i).and_then(ArcCell::load_full) else {
                return false;
            };
            if entry.hash == hash && is(&entry.value) {
                entry.mark_removed();
                self.remove_at(i);
                hand.restart();
                return true;
            }
            i = next_slot(i, n);
        }
        false
    }

    /// Evicts every idle key at `now`; returns how many.
    pub(crate) fn evict_idle_at(&self, now: Instant) -> usize {
        let mut hand = self.lock();
        let n = self.slots.len();
        let mut evicted = 0usize;
        for i in 0..n {
            // A removal may shift another key into `i`: look at it again.
            for _ in 0..n {
                let Some(entry) = self.slots.get(i).and_then(ArcCell::load_full) else {
                    break;
                };
                let (word, out, last) = entry.reading();
                if entry.value.is_idle(out, last, now) && entry.mark_evicted(word) {
                    self.remove_at(i);
                    hand.restart();
                    evicted = evicted.saturating_add(1);
                } else {
                    break;
                }
            }
        }
        evicted
    }
}

#[cfg(all(test, loom))]
mod loom_model;

#[cfg(all(test, not(loom)))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]

    use std::cell::Cell;
    use std::sync::Arc;

    use stormguard_core::{Duration, Instant};

    use super::{Entry, Occupant, Refusal, Slots, HAND_SLOTS};

    thread_local! {
        /// This test's reads of its table's keys (calls of the eviction rule).
        static SCANS: Cell<usize> = const { Cell::new(0) };
        /// The most keys one call of the eviction rule was given.
        static MOST_READ: Cell<usize> = const { Cell::new(0) };
    }

    fn scans() -> usize {
        SCANS.with(Cell::get)
    }

    fn most_read() -> usize {
        MOST_READ.with(Cell::get)
    }

    /// A stand-in key: idle once no call is in flight and it has been quiet for `quiet`.
    struct Key {
        id: u32,
        quiet: Duration,
    }

    impl Occupant for Key {
        fn is_idle(&self, in_flight: u32, last: Instant, now: Instant) -> bool {
            self.idle_from(in_flight, last, now)
                .is_some_and(|at| now >= at)
        }
        fn to_evict(keys: &[(&Self, u32, Instant)], now: Instant) -> Option<usize> {
            SCANS.with(|n| n.set(n.get() + 1));
            MOST_READ.with(|m| m.set(m.get().max(keys.len())));
            keys.iter()
                .position(|&(key, out, last)| key.is_idle(out, last, now))
        }
        fn idle_from(&self, in_flight: u32, last: Instant, _: Instant) -> Option<Instant> {
            (in_flight == 0).then(|| last.saturating_add(self.quiet))
        }
        fn recheck_after(&self) -> Duration {
            self.quiet
        }
    }

    fn hash(id: u32) -> u64 {
        u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    fn enter(t: &Slots<Key>, id: u32, now: Instant) -> Result<Arc<Entry<Key>>, Refusal<()>> {
        t.enter(
            hash(id),
            |k| k.id == id,
            || now,
            || {
                Ok(Key {
                    id,
                    quiet: Duration::from_secs(10),
                })
            },
        )
    }

    #[test]
    fn a_refused_new_key_does_not_scan_the_table_again_until_a_key_can_be_idle() {
        let t0 = Instant::from_secs(1);
        let t = Slots::new(4).unwrap();
        let held: Vec<_> = (0..4).map(|id| enter(&t, id, t0).ok().unwrap()).collect();
        let before = scans();
        // Every key has a call in flight: a thousand new keys are refused, after one scan.
        for id in 100..1100 {
            assert!(matches!(enter(&t, id, t0), Err(Refusal::Full)));
        }
        assert_eq!(scans() - before, 1);
        // Key 0's call ends: it becomes idle 10 s later, and is evicted then, not before.
        held[0].exit(t0);
        let idle = t0 + Duration::from_secs(10);
        assert!(matches!(
            enter(&t, 100, idle - Duration::from_millis(1)),
            Err(Refusal::Full)
        ));
        assert_eq!(scans() - before, 1);
        assert!(enter(&t, 100, idle).is_ok());
        assert_eq!(scans() - before, 2);
        assert!(t.get(hash(0), |k| k.id == 0).is_none());
    }

    #[test]
    fn a_full_table_looks_again_a_quiet_time_after_its_last_scan() {
        let t0 = Instant::from_secs(1);
        let t = Slots::new(1).unwrap();
        let _held = enter(&t, 1, t0).ok().unwrap();
        assert!(matches!(enter(&t, 2, t0), Err(Refusal::Full)));
        let before = scans();
        assert!(matches!(
            enter(&t, 2, t0 + Duration::from_millis(9_999)),
            Err(Refusal::Full)
        ));
        assert_eq!(scans(), before, "remembered");
        assert!(matches!(
            enter(&t, 2, t0 + Duration::from_secs(10)),
            Err(Refusal::Full)
        ));
        assert_eq!(scans(), before + 1, "looked again");
    }

    #[test]
    fn a_new_key_in_a_large_full_table_reads_a_bounded_number_of_keys() {
        let t0 = Instant::from_secs(1);
        // Smaller under miri, which interprets every atomic step of every slot read.
        let capacity = if cfg!(miri) { 300 } else { 4_000 };
        let t = Slots::new(capacity).unwrap();
        let held: Vec<_> = (0..capacity)
            .map(|id| enter(&t, u32::try_from(id).unwrap(), t0).ok().unwrap())
            .collect();
        let slots = t.slots.len();
        let sweep = slots.div_ceil(HAND_SLOTS);
        let before = scans();
        // Every key has a call in flight: each refusal reads at most a window of the table,
        // and once the hand has gone round, a refusal reads nothing.
        for id in 10_000..10_000 + 2 * sweep {
            let id = u32::try_from(id).unwrap();
            assert!(matches!(enter(&t, id, t0), Err(Refusal::Full)));
        }
        assert!(
            most_read() <= HAND_SLOTS,
            "read {} keys at once",
            most_read()
        );
        assert!(
            scans() - before <= sweep,
            "{} reads for a sweep of {sweep}",
            scans() - before
        );
        assert_eq!(t.len(), capacity);
        drop(held);
    }

    #[test]
    fn an_idle_key_in_a_full_table_is_evicted_within_a_sweep_of_new_keys() {
        let t0 = Instant::from_secs(1);
        let idle_at = t0 + Duration::from_secs(10);
        let capacity: u32 = if cfg!(miri) { 200 } else { 1_000 };
        let positions = [0, 1, 137, capacity / 2, capacity - 2, capacity - 1];
        for idle_id in positions {
            let t = Slots::new(capacity as usize).unwrap();
            let held: Vec<_> = (0..capacity)
                .map(|id| enter(&t, id, t0).ok().unwrap())
                .collect();
            // One key's call ends: it is idle 10 s later, every other key stays in use.
            held[idle_id as usize].exit(t0);
            let bound = t.slots.len().div_ceil(HAND_SLOTS);
            let mut refused = 0;
            let mut newcomer = 10_000;
            while enter(&t, newcomer, idle_at).is_err() {
                refused += 1;
                newcomer += 1;
                assert!(refused <= bound, "key {idle_id}: {refused} refusals");
            }
            assert!(t.get(hash(idle_id), |k| k.id == idle_id).is_none());
            assert_eq!(t.len(), capacity as usize);
            for (id, e) in held.iter().enumerate() {
                if id != idle_id as usize {
                    assert!(t.get(hash(e.value.id), |k| k.id == e.value.id).is_some());
                }
            }
        }
    }

    #[test]
    fn a_key_with_a_call_in_flight_is_never_evicted_by_the_hand() {
        let t0 = Instant::from_secs(1);
        let (keys, passes) = if cfg!(miri) { (40, 2) } else { (300, 5) };
        let t = Slots::new(keys).unwrap();
        let held: Vec<_> = (0..u32::try_from(keys).unwrap())
            .map(|id| enter(&t, id, t0).ok().unwrap())
            .collect();
        // Long after: the hand goes round many times, and every new key is refused.
        let late = t0 + Duration::from_secs(3_600);
        for id in 1_000..1_000 + passes * t.slots.len() {
            let id = u32::try_from(id).unwrap();
            assert!(matches!(
                enter(&t, id, late + Duration::from_secs(u64::from(id))),
                Err(Refusal::Full)
            ));
        }
        for e in &held {
            assert!(!e.is_evicted());
        }
    }
}
