//! Capacities a caller gives: past the documented maximum they are a typed error naming the
//! bound, never an allocation that aborts the process or a panic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use stormguard_core::{Bound, Field, SettingsError};
use stormguard_std::keyed::{KeyedSetupError, MAX_KEYS};
use stormguard_std::{KeyedPolicy, ManualClock, Policy, PolicyEngine};

fn template() -> Policy<ManualClock> {
    Policy::builder("hosts")
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[test]
fn a_keyed_table_larger_than_its_maximum_is_a_typed_error_not_an_abort() {
    for capacity in [MAX_KEYS + 1, 1 << 40, 1 << 62, usize::MAX] {
        let e = KeyedPolicy::<u32, _>::new(template(), capacity).unwrap_err();
        assert_eq!(
            e,
            KeyedSetupError::CapacityTooLarge { max: MAX_KEYS },
            "{capacity}"
        );
        assert_eq!(e.to_string(), "a keyed policy holds at most 1048576 keys");
    }
    let at_max = KeyedPolicy::<u32, _>::new(template(), MAX_KEYS).unwrap();
    assert_eq!(at_max.capacity(), MAX_KEYS);
    assert_eq!(
        KeyedPolicy::<u32, _>::new(template(), 0).unwrap_err(),
        KeyedSetupError::ZeroCapacity
    );
}

#[test]
fn an_engine_reservation_larger_than_its_maximum_is_a_typed_error_not_an_abort() {
    type Engine = PolicyEngine<(), u8, ()>;
    for n in [Engine::MAX_RESERVED + 1, 1 << 40, 1 << 62, usize::MAX] {
        assert_eq!(
            Engine::with_capacity(n).unwrap_err(),
            SettingsError {
                field: Field::Capacity,
                bound: Bound::AtMost(1 << 16)
            },
            "{n}"
        );
    }
    let mut e = Engine::with_capacity(Engine::MAX_RESERVED).unwrap();
    e.add("any", |_: &()| Ok(true), 1).unwrap();
    assert_eq!(e.len(), 1);
}
