//! `EmbassyClock` on the host, over embassy's global mock time driver.
//!
//! The mock driver is one global: every test resets it first and the tests run one at a time.
#![allow(clippy::arithmetic_side_effects)]

use embassy_time::{Duration as EmbassyDuration, MockDriver};
use serial_test::serial;
use stormguard_core::{Duration, Instant};
use stormguard_embassy::time::{to_core_instant, to_embassy_duration};
use stormguard_embassy::EmbassyClock;

#[test]
#[serial(embassy_mock_driver)]
fn the_clock_follows_the_mock_driver() {
    let driver = MockDriver::get();
    driver.reset();
    let clock = EmbassyClock::new();
    assert_eq!(clock.now(), Instant::ZERO);
    driver.advance(EmbassyDuration::from_millis(1_500));
    assert_eq!(clock.now(), Instant::from_millis(1_500));
    driver.advance(EmbassyDuration::from_micros(7));
    assert_eq!(
        clock.now() - Instant::from_millis(1_500),
        Duration::from_micros(7)
    );
    assert_eq!(clock.now(), to_core_instant(embassy_time::Instant::now()));
}

#[test]
#[serial(embassy_mock_driver)]
fn the_clock_starts_at_boot_after_a_reset() {
    let driver = MockDriver::get();
    driver.reset();
    driver.advance(EmbassyDuration::from_secs(3));
    assert_eq!(EmbassyClock::new().now(), Instant::from_secs(3));
    driver.reset();
    assert_eq!(EmbassyClock::default().now(), Instant::ZERO);
}

#[test]
#[serial(embassy_mock_driver)]
fn a_core_pause_advanced_on_the_driver_moves_the_clock_by_that_much() {
    let driver = MockDriver::get();
    driver.reset();
    let clock = EmbassyClock::new();
    let before = clock.now();
    let pause = Duration::from_millis(100);
    driver.advance(to_embassy_duration(pause));
    assert_eq!(clock.now() - before, pause);
}
