//! Model checks of the slot protocol over every interleaving loom explores (up to the
//! preemption bound CI sets). Run with:
//! `LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" cargo test --release -p stormguard-std
//! --no-default-features --lib slots`
//!
//! A slot holds a stand-in for the keyed policy's key: a number, and whether the test's
//! eviction rule may evict it when no call is in flight (the keyed policy's rule is the core's,
//! tested there; what is modelled here is the protocol around it).

use std::sync::Arc;

use loom::thread;
use stormguard_core::{Duration, Instant};

use super::{Entry, Occupant, Refusal, Slots};

const T0: Instant = Instant::from_secs(1);
const T1: Instant = Instant::from_secs(2);
/// A quiet time for the stand-ins that need one.
const QUIET: Duration = Duration::from_secs(1);

struct Key {
    id: u32,
    evictable: bool,
    /// How long it must be quiet to be idle (zero: at once).
    quiet: Duration,
}

impl Occupant for Key {
    fn is_idle(&self, in_flight: u32, last: Instant, now: Instant) -> bool {
        self.idle_from(in_flight, last, now)
            .is_some_and(|at| now >= at)
    }

    fn to_evict(keys: &[(&Self, u32, Instant)], now: Instant) -> Option<usize> {
        keys.iter()
            .position(|&(key, out, last)| key.is_idle(out, last, now))
    }

    fn idle_from(&self, in_flight: u32, last: Instant, _: Instant) -> Option<Instant> {
        (self.evictable && in_flight == 0).then(|| last.saturating_add(self.quiet))
    }

    fn recheck_after(&self) -> Duration {
        self.quiet
    }
}

/// Key `id`'s hash in table `t`: home slot `home` (the probe table's home is the hash's top
/// bits, as many as the slot count's), told apart from other keys by its low bits.
fn hash(t: &Table, id: u32, home: u64) -> u64 {
    let bits = t.slots.len().trailing_zeros();
    home.wrapping_shl(64u32.wrapping_sub(bits)) | u64::from(id)
}

type Table = Slots<Key>;

fn enter(t: &Table, id: u32, home: u64) -> Result<Arc<Entry<Key>>, Refusal<()>> {
    enter_at(t, id, home, T0, Duration::ZERO)
}

/// [`enter`] at `now`, a new key needing `quiet` to be idle.
fn enter_at(
    t: &Table,
    id: u32,
    home: u64,
    now: Instant,
    quiet: Duration,
) -> Result<Arc<Entry<Key>>, Refusal<()>> {
    t.enter(
        hash(t, id, home),
        |k| k.id == id,
        || now,
        || {
            Ok(Key {
                id,
                evictable: true,
                quiet,
            })
        },
    )
}

/// A call on `id`: counted in, checked to be on a live key of the table while in flight,
/// counted out. `None` when the table refused the key.
fn call(t: &Table, id: u32, home: u64) -> Option<Arc<Entry<Key>>> {
    let e = match enter(t, id, home) {
        Ok(e) => e,
        Err(Refusal::Full) => return None,
        Err(Refusal::Make(())) => unreachable!("the stand-in is always made"),
    };
    assert!(!e.is_evicted(), "a call entered an evicted key");
    // `get`: a lock-free lookup may miss a key a removal is moving, and look again locked.
    let found = t.get(hash(t, id, home), |k| k.id == id);
    assert!(
        found.is_some_and(|f| Arc::ptr_eq(&f, &e)),
        "a key in use left the table"
    );
    assert!(!e.is_evicted(), "a key was evicted under a call");
    e.exit(T1);
    Some(e)
}

/// The table agrees with itself: its count is its live keys, none of them evicted, no key
/// twice, no call left in flight.
fn settled(t: &Table) -> Vec<u32> {
    let live: Vec<_> = t.live().map(|(_, e)| e).collect();
    assert_eq!(t.len(), live.len(), "len and the slots disagree");
    assert!(live.len() <= t.capacity());
    let mut ids: Vec<_> = live.iter().map(|e| e.value.id).collect();
    for e in &live {
        assert!(!e.is_evicted(), "an evicted key is still in a slot");
        assert_eq!(e.in_flight(), 0);
    }
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "a key is in the table twice");
    ids
}

#[test]
fn two_calls_on_a_key_racing_its_eviction_never_run_on_an_evicted_key() {
    loom::model(|| {
        let t = Arc::new(Slots::new(1).unwrap());
        enter(&t, 1, 0).ok().unwrap().exit(T0);
        let users: Vec<_> = (0..2)
            .map(|_| {
                let t = Arc::clone(&t);
                thread::spawn(move || call(&t, 1, 0).is_some())
            })
            .collect();
        let evicted = t.evict_idle_at(T1);
        for u in users {
            assert!(u.join().unwrap(), "the table holds key 1 alone: never full");
        }
        assert!(evicted <= 1);
        settled(&t);
    });
}

#[test]
fn two_threads_adding_the_same_new_key_share_one_slot() {
    loom::model(|| {
        let t = Arc::new(Slots::new(2).unwrap());
        let adders: Vec<_> = (0..2)
            .map(|_| {
                let t = Arc::clone(&t);
                thread::spawn(move || enter(&t, 7, 1).ok().unwrap())
            })
            .collect();
        let entries: Vec<_> = adders.into_iter().map(|a| a.join().unwrap()).collect();
        assert!(Arc::ptr_eq(&entries[0], &entries[1]), "key 7 added twice");
        assert_eq!(entries[0].in_flight(), 2);
        assert_eq!(t.len(), 1);
        for e in &entries {
            e.exit(T1);
        }
        assert_eq!(settled(&t), [7]);
    });
}

#[test]
fn a_new_key_in_a_full_table_racing_a_call_on_the_only_key() {
    loom::model(|| {
        let t = Arc::new(Slots::new(1).unwrap());
        enter(&t, 1, 0).ok().unwrap().exit(T0);
        let newcomer = {
            let t = Arc::clone(&t);
            thread::spawn(move || call(&t, 2, 1).is_some())
        };
        let old = call(&t, 1, 0).is_some();
        let new = newcomer.join().unwrap();
        // A refusal means the other key was in use at that moment: its call went through.
        assert!(old || new, "both refused");
        let ids = settled(&t);
        assert_eq!(ids.len(), 1, "a full table stays full: {ids:?}");
    });
}

#[test]
fn a_lookup_racing_the_removal_that_shifts_its_key_finds_the_key() {
    loom::model(|| {
        // Keys 1 and 2 share home slot 0: 2 sits in slot 1 until 1 is evicted and 2 moves back.
        let t = Arc::new(Slots::new(2).unwrap());
        enter(&t, 1, 0).ok().unwrap().exit(T0);
        let two = t
            .enter(
                hash(&t, 2, 0),
                |k| k.id == 2,
                || T0,
                || {
                    Ok::<_, ()>(Key {
                        id: 2,
                        evictable: false,
                        quiet: Duration::ZERO,
                    })
                },
            )
            .ok()
            .unwrap();
        two.exit(T0);
        let caller = {
            let t = Arc::clone(&t);
            thread::spawn(move || call(&t, 2, 0).unwrap())
        };
        assert_eq!(t.evict_idle_at(T1), 1);
        let used = caller.join().unwrap();
        assert!(Arc::ptr_eq(&used, &two), "key 2 was added again");
        assert_eq!(settled(&t), [2]);
    });
}

#[test]
fn a_call_ending_while_a_full_table_refuses_a_new_key_lets_the_next_one_in() {
    loom::model(|| {
        let t = Arc::new(Slots::new(1).unwrap());
        // A call in flight on the only key, which is idle a quiet time after its last call.
        let one = enter_at(&t, 1, 0, T0, QUIET).ok().unwrap();
        let ender = thread::spawn(move || one.exit(T0));
        // Refused while key 1's call is in flight (the refusal remembered), or let in.
        let first = enter_at(&t, 2, 1, T0, QUIET);
        ender.join().unwrap();
        if let Err(Refusal::Full) = first {
            // Key 1 is idle a quiet time after its call ended: the remembered refusal must not
            // keep the next new key out then.
            assert!(
                enter_at(&t, 2, 1, T0 + QUIET, QUIET).is_ok(),
                "a call that ended was missed by the remembered refusal"
            );
        }
    });
}
