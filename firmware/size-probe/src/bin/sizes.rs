//! Prints `size_of` of every object stormguard puts in RAM, as laid out for this target, over
//! semihosting (run under QEMU mps2-an386: a Cortex-M4, thumbv7em-none-eabihf), then exits.
#![no_std]
#![no_main]

use core::mem::size_of;

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};
use panic_halt as _;
use stormguard_core::{BreakerSettings, CallSettings, Event, LeanBreaker};
use stormguard_embassy::{Breaker, Budget, NoListener, Policy};

// `cortex-m` provides the critical-section implementation the mutexes need.
use cortex_m as _;

type Full = stormguard_core::Breaker<&'static BreakerSettings>;

/// The default settings as a type.
struct Sensor;
impl stormguard_core::breaker::ConstSettings for Sensor {
    const SETTINGS: BreakerSettings = BreakerSettings::defaults("sensor");
}
type Fixed = stormguard_core::Breaker<stormguard_core::breaker::Fixed<Sensor>>;

static LEAN_SETTINGS: BreakerSettings = match BreakerSettings::consecutive_only("sensor", 3) {
    Ok(s) => s,
    Err(_) => panic!("invalid breaker settings"),
};
static FULL_SETTINGS: BreakerSettings = BreakerSettings::defaults("sensor");

static LEAN: Breaker<Cs, LeanBreaker> = match Breaker::lean(&LEAN_SETTINGS) {
    Ok(b) => b,
    Err(_) => panic!("settings that need statistics"),
};
static FULL: Breaker<Cs, Full> = Breaker::from_static(&FULL_SETTINGS);
static OWNED: Breaker<Cs> = Breaker::new(BreakerSettings::defaults("sensor"));

static LEAN_POLICY: Policy<'static, Cs, NoListener, LeanBreaker> =
    Policy::new(&LEAN, CallSettings::DEFAULT);
static FULL_POLICY: Policy<'static, Cs, NoListener, Full> =
    Policy::new(&FULL, CallSettings::DEFAULT);
static OWNED_POLICY: Policy<'static, Cs> = Policy::new(&OWNED, CallSettings::DEFAULT);

async fn read_sensor() -> Result<u16, ()> {
    Ok(0)
}

fn row(what: &str, bytes: usize) {
    hprintln!("size_of {:<62} {:>5} B", what, bytes);
}

#[entry]
fn main() -> ! {
    row("stormguard_core::LeanBreaker", size_of::<LeanBreaker>());
    row(
        "stormguard_core::Breaker<&'static BreakerSettings>",
        size_of::<Full>(),
    );
    row(
        "stormguard_core::Breaker (owns its settings)",
        size_of::<stormguard_core::Breaker>(),
    );
    row(
        "stormguard_core::Breaker<Fixed<_>> (settings a constant)",
        size_of::<Fixed>(),
    );
    row(
        "stormguard_core::BreakerSettings",
        size_of::<BreakerSettings>(),
    );
    row(
        "stormguard_core::Budget",
        size_of::<stormguard_core::Budget>(),
    );
    row("stormguard_core::CallSettings", size_of::<CallSettings>());
    row("stormguard_core::Call", size_of::<stormguard_core::Call>());
    row("stormguard_core::Name", size_of::<stormguard_core::Name>());
    row(
        "stormguard_embassy::Breaker<CriticalSectionRawMutex, LeanBreaker>",
        size_of::<Breaker<Cs, LeanBreaker>>(),
    );
    row(
        "stormguard_embassy::Breaker<NoopRawMutex, LeanBreaker>",
        size_of::<Breaker<NoopRawMutex, LeanBreaker>>(),
    );
    row(
        "stormguard_embassy::Breaker<Cs, core::Breaker<&'static ..>>",
        size_of::<Breaker<Cs, Full>>(),
    );
    row(
        "stormguard_embassy::Breaker<Cs> (owns its settings)",
        size_of::<Breaker<Cs>>(),
    );
    row(
        "stormguard_embassy::Breaker<Cs, core::Breaker<Fixed<_>>>",
        size_of::<Breaker<Cs, Fixed>>(),
    );
    row(
        "stormguard_embassy::Budget<CriticalSectionRawMutex>",
        size_of::<Budget<Cs>>(),
    );
    row(
        "stormguard_embassy::Policy<'static, Cs, NoListener, LeanBreaker>",
        size_of::<Policy<'static, Cs, NoListener, LeanBreaker>>(),
    );
    row(
        "stormguard_embassy::Policy<'static, Cs, fn(&Event), LeanBreaker>",
        size_of::<Policy<'static, Cs, fn(&Event<'_>), LeanBreaker>>(),
    );
    let call = LEAN_POLICY.call(|_| read_sensor());
    row(
        "the future of policy.call(..), lean (lives in the task)",
        core::mem::size_of_val(&call),
    );
    drop(call);
    let call = FULL_POLICY.call(|_| read_sensor());
    row(
        "the future of policy.call(..), full over static settings",
        core::mem::size_of_val(&call),
    );
    drop(call);
    let call = OWNED_POLICY.call(|_| read_sensor());
    row(
        "the future of policy.call(..), full owning its settings",
        core::mem::size_of_val(&call),
    );
    drop(call);
    debug::exit(debug::EXIT_SUCCESS);
    loop {
        cortex_m::asm::wfi();
    }
}
