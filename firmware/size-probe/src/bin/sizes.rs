//! Prints `size_of` of every object stormguard puts in RAM, as laid out for this target, over
//! semihosting (run under QEMU mps2-an386: a Cortex-M4, thumbv7em-none-eabihf), then exits.
#![no_std]
#![no_main]

use core::mem::size_of;

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};
use panic_halt as _;
use stormguard_core::{BreakerSettings, CallSettings, Event};
use stormguard_embassy::{Breaker, Budget, Policy};

// `cortex-m` provides the critical-section implementation the mutexes need.
use cortex_m as _;

static BREAKER: Breaker<Cs> = Breaker::new(BreakerSettings::defaults("sensor"));
static POLICY: Policy<'static, Cs> = Policy::new(&BREAKER, CallSettings::DEFAULT);

async fn read_sensor() -> Result<u16, ()> {
    Ok(0)
}

fn row(what: &str, bytes: usize) {
    hprintln!("size_of {:<52} {:>5} B", what, bytes);
}

#[entry]
fn main() -> ! {
    row(
        "stormguard_core::Breaker",
        size_of::<stormguard_core::Breaker>(),
    );
    row(
        "stormguard_core::Budget",
        size_of::<stormguard_core::Budget>(),
    );
    row(
        "stormguard_core::BreakerSettings",
        size_of::<BreakerSettings>(),
    );
    row("stormguard_core::CallSettings", size_of::<CallSettings>());
    row("stormguard_core::Call", size_of::<stormguard_core::Call>());
    row("stormguard_core::Name", size_of::<stormguard_core::Name>());
    row(
        "stormguard_embassy::Breaker<CriticalSectionRawMutex>",
        size_of::<Breaker<Cs>>(),
    );
    row(
        "stormguard_embassy::Breaker<NoopRawMutex>",
        size_of::<Breaker<NoopRawMutex>>(),
    );
    row(
        "stormguard_embassy::Budget<CriticalSectionRawMutex>",
        size_of::<Budget<Cs>>(),
    );
    row(
        "stormguard_embassy::Policy<'static, CriticalSectionRawMutex>",
        size_of::<Policy<'static, Cs>>(),
    );
    row(
        "stormguard_embassy::Policy<.., fn(&Event)> (with a listener)",
        size_of::<Policy<'static, Cs, fn(&Event<'_>)>>(),
    );
    let call = POLICY.call(|_| read_sensor());
    row(
        "the future of policy.call(..) (lives in the task)",
        core::mem::size_of_val(&call),
    );
    drop(call);
    debug::exit(debug::EXIT_SUCCESS);
    loop {
        cortex_m::asm::wfi();
    }
}
