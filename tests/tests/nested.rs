//! Retries held where they are nested: in a stack of three layers that each make up to 4
//! attempts, an outage multiplies the dependency's load up to 4^3 = 64 times; when the layers
//! below the top make one attempt for a call that is the upper layer's retry, at most
//! 7 + 3 x 4 = 19 (the top's first attempt reaches a middle call that retries, whose retries
//! reach one bottom attempt each; the top's retries reach a middle call of one attempt, whose
//! bottom call is a first attempt and retries).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_tests::{run, suite, Strategy};

#[test]
fn holding_nested_retries_cuts_a_three_layer_stack_from_64x_to_at_most_19x_in_an_outage() {
    let outage = suite::outage().unwrap();
    let load = |name: &str| {
        let strategy = Strategy::builtin(name).unwrap().unwrap();
        run(&outage, &strategy, outage.seed).load_multiplier
    };
    let plain = load("3-layer-x3");
    let nested = load("3-layer-x3+nested");
    assert!(
        plain > 40.0,
        "the plain stack multiplies the load: {plain:.1}x"
    );
    assert!(
        nested <= 19.0,
        "held retries: at most 19x, got {nested:.1}x"
    );
    assert!(nested < plain / 2.0, "{nested:.1}x against {plain:.1}x");
}
