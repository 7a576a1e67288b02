//! Keyed scope: a breaker per key, fixed capacity, idle eviction, never evicting a key in use.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    breaker::Keyed, breaker::KeyedRefusal, breaker::Member, Breaker, BreakerSettings, Instant,
    LeanBreaker, Outcome, RefusalReason, State,
};

mod support;
use support::secs;

fn table<const N: usize>() -> Keyed<u16, Breaker, N> {
    Keyed::new(Breaker::new(
        BreakerSettings::builder("peripherals")
            .consecutive_failures(2)
            .build()
            .unwrap(),
    ))
}

fn trip<const N: usize>(t: &mut Keyed<u16, Breaker, N>, key: u16, now: Instant) {
    for _ in 0..2 {
        let p = t.try_acquire(key, now, None, &mut |_| {}).unwrap();
        t.on_outcome(&key, now, p, Outcome::Transient, &mut |_| {});
    }
}

#[test]
fn each_key_has_its_own_breaker() {
    let mut t = table::<4>();
    let now = Instant::from_secs(1);
    trip(&mut t, 0x48, now);
    let refused = t.try_acquire(0x48, now, None, &mut |_| {}).unwrap_err();
    assert!(matches!(refused, KeyedRefusal::Refused(r) if r.reason == RefusalReason::BreakerOpen));
    assert!(t.try_acquire(0x49, now, None, &mut |_| {}).is_ok());
    assert_eq!(t.get(&0x48).unwrap().state(now), State::Open);
    assert_eq!(t.get(&0x49).unwrap().state(now), State::Closed);
}

#[test]
fn a_full_table_evicts_its_least_recently_used_idle_key() {
    let mut t = table::<2>();
    let t0 = Instant::from_secs(1);
    let p = t.try_acquire(1, t0, None, &mut |_| {}).unwrap();
    t.on_outcome(&1, t0, p, Outcome::Success, &mut |_| {});
    let p = t.try_acquire(2, t0 + secs(1), None, &mut |_| {}).unwrap();
    t.on_outcome(&2, t0 + secs(1), p, Outcome::Success, &mut |_| {});
    // Both quiet for a trip window (30 s): key 1 is the least recently used.
    let later = t0 + secs(40);
    assert!(t.try_acquire(3, later, None, &mut |_| {}).is_ok());
    assert!(t.get(&1).is_none());
    assert!(t.get(&2).is_some() && t.get(&3).is_some());
}

#[test]
fn an_open_breaker_is_never_evicted() {
    let mut t = table::<2>();
    let t0 = Instant::from_secs(1);
    trip(&mut t, 1, t0);
    let p = t.try_acquire(2, t0 + secs(1), None, &mut |_| {}).unwrap();
    t.on_outcome(&2, t0 + secs(1), p, Outcome::Success, &mut |_| {});
    // Key 1 is older but not closed (open, or half-open after its jittered break, with no
    // probe having closed it); key 2 is the one that goes.
    let later = t0 + secs(35);
    assert_ne!(t.get(&1).unwrap().state(later), State::Closed);
    let _ = t.try_acquire(3, later, None, &mut |_| {});
    assert!(t.get(&1).is_some(), "a breaker that is not closed stays");
    assert!(t.get(&2).is_none());
}

#[test]
fn when_no_key_is_idle_a_new_key_is_refused_with_a_typed_error() {
    let mut t = table::<2>();
    let t0 = Instant::from_secs(1);
    let _held = t.try_acquire(1, t0, None, &mut |_| {}).unwrap(); // a permit out
    let p = t.try_acquire(2, t0, None, &mut |_| {}).unwrap();
    t.on_outcome(&2, t0, p, Outcome::Success, &mut |_| {});
    // Key 2 has not been quiet for a trip window yet; key 1 has a permit out.
    assert_eq!(
        t.try_acquire(3, t0 + secs(5), None, &mut |_| {}),
        Err(KeyedRefusal::Full)
    );
    assert_eq!(t.len(), 2);
}

#[test]
fn evict_idle_removes_only_idle_keys() {
    let mut t = table::<4>();
    let t0 = Instant::from_secs(1);
    for k in 0..3 {
        let p = t.try_acquire(k, t0, None, &mut |_| {}).unwrap();
        t.on_outcome(&k, t0, p, Outcome::Success, &mut |_| {});
    }
    trip(&mut t, 3, t0);
    assert_eq!(t.evict_idle(t0 + secs(10)), 0);
    assert_eq!(t.evict_idle(t0 + secs(31)), 3);
    assert_eq!(t.len(), 1);
    assert_eq!(t.snapshots(t0 + secs(31)).count(), 1);
}

#[test]
fn lean_breakers_work_in_a_keyed_table() {
    static RADIO: BreakerSettings = match BreakerSettings::consecutive_only("radio", 2) {
        Ok(s) => s,
        Err(_) => panic!(),
    };
    let mut t: Keyed<u8, LeanBreaker, 8> = Keyed::new(LeanBreaker::new(&RADIO).unwrap());
    let now = Instant::from_secs(1);
    for _ in 0..2 {
        let p = t.try_acquire(7, now, None, &mut |_| {}).unwrap();
        t.on_outcome(&7, now, p, Outcome::TimedOut, &mut |_| {});
    }
    assert!(t.try_acquire(7, now, None, &mut |_| {}).is_err());
    assert!(t.try_acquire(8, now, None, &mut |_| {}).is_ok());
}

#[test]
fn keys_that_failed_and_went_quiet_are_idle_after_four_longest_breaks() {
    // A peer uses every key of the table, fails twice on each and leaves: every breaker is
    // open (then half-open), and nobody asks for any of them again.
    let mut t = table::<64>();
    let t0 = Instant::from_secs(1);
    for key in 0..64 {
        trip(&mut t, key, t0);
    }
    let stale = t.get(&0).unwrap().stale_after();
    assert_eq!(stale, secs(4 * 120)); // four of the default longest break (2 min)
    assert_eq!(t.evict_idle(t0 + stale - secs(1)), 0, "not stale yet");
    assert_eq!(
        t.try_acquire(1000, t0 + stale - secs(1), None, &mut |_| {}),
        Err(KeyedRefusal::Full)
    );
    // An hour later a legitimate new key gets in, and sweeping frees the rest.
    let hour = t0 + secs(3600);
    assert!(t.try_acquire(1000, hour, None, &mut |_| {}).is_ok());
    assert_eq!(t.evict_idle(hour), 63);
    assert_eq!(t.len(), 1);
}

#[test]
fn an_open_breaker_still_asked_for_is_never_evicted() {
    let mut t = table::<1>();
    let t0 = Instant::from_secs(1);
    trip(&mut t, 1, t0);
    // The dependency stays down and its callers keep asking, once a minute, for a day: each
    // ask is refused (or probes and fails), and the key is used each time.
    for minute in 1..=24 * 60 {
        let now = t0 + secs(60 * minute);
        if let Ok(p) = t.try_acquire(1, now, None, &mut |_| {}) {
            t.on_outcome(&1, now, p, Outcome::Transient, &mut |_| {});
        }
        assert_eq!(
            t.try_acquire(2, now, None, &mut |_| {}),
            Err(KeyedRefusal::Full)
        );
    }
    assert_ne!(t.get(&1).unwrap().state(t0 + secs(86_400)), State::Closed);
}

#[test]
fn an_isolated_breaker_is_never_idle_but_can_be_removed() {
    let mut t = table::<1>();
    let t0 = Instant::from_secs(1);
    let p = t.try_acquire(1, t0, None, &mut |_| {}).unwrap();
    t.on_outcome(&1, t0, p, Outcome::Success, &mut |_| {});
    let isolated = t.remove(&1).unwrap();
    isolated.isolate(t0, &mut |_| {});
    let year = t0 + secs(365 * 86_400);
    assert!(!isolated.is_idle(0, t0, year));
    assert_eq!(isolated.idle_from(0, t0, year), None);
    // Removing frees the place of any key, whatever its state.
    trip(&mut t, 2, t0);
    assert_eq!(
        t.try_acquire(3, t0, None, &mut |_| {}),
        Err(KeyedRefusal::Full)
    );
    assert_eq!(t.remove(&2).map(|b| b.state(t0)), Some(State::Open));
    assert!(t.try_acquire(3, t0, None, &mut |_| {}).is_ok());
    assert!(t.remove(&2).is_none());
}

#[test]
fn a_full_table_refuses_as_keyed_full_to_be_asked_again_after_a_trip_window() {
    let template = Breaker::new(BreakerSettings::defaults("peripherals"));
    let refused = template.full_refusal();
    assert_eq!(refused.reason, RefusalReason::KeyedFull);
    assert_eq!(refused.retry_after, secs(30));
}

#[test]
fn a_key_used_at_the_end_of_time_is_not_idle_at_once() {
    // `last_used + trip window` saturates at the end of time; the key has been quiet for
    // nothing, so it is not idle, and a full table refuses a new key rather than evict it.
    let mut t = table::<1>();
    let end = Instant::MAX;
    let p = t.try_acquire(1, end, None, &mut |_| {}).unwrap();
    t.on_outcome(&1, end, p, Outcome::Success, &mut |_| {});
    let b = t.get(&1).unwrap();
    assert!(!b.is_idle(0, end, end));
    assert_eq!(t.evict_idle(end), 0);
    assert_eq!(
        t.try_acquire(2, end, None, &mut |_| {}),
        Err(KeyedRefusal::Full)
    );
}
