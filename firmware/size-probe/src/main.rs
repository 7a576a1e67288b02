//! The size probe: a firmware that reads a sensor once a second, built in variants that differ
//! only in how the read is made:
//!
//! - no feature: the read, unguarded (the baseline);
//! - `guard-lean`: through a policy with a lean breaker (`LeanBreaker`: consecutive failures,
//!   doubling jittered break, probes; settings in a `static`) and a retry budget;
//! - `guard-lean-heard`: as `guard-lean`, with a listener that counts the events (without a
//!   listener, and without `defmt`, the breaker makes no event at all);
//! - `guard-full`: through a policy with a full breaker over the default settings (every default
//!   rule: relative failure rate, slow calls, latency baseline) in a `static`, and a budget;
//! - `guard-owned`: as `guard-full`, with a breaker holding its own copy of the settings.
//! - `guard-fixed`: as `guard-full`, with the settings a constant named by a type
//!   (`ConstSettings`), which lets the compiler leave out what they switch off.
//!
//! `firmware/size-report.sh` builds them all and subtracts the baseline's sections from the
//! others': what is left is what stormguard adds. With several features, the first in the list
//! above wins (so `--all-features` builds, for the lints).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, Ordering};

use embassy_executor::Spawner;
use embassy_time::Timer;
use panic_halt as _;

/// Stands for the sensor's data register.
static REGISTER: AtomicU32 = AtomicU32::new(0);
/// Where the firmware puts each reading (so that nothing is optimised away).
static LAST: AtomicU32 = AtomicU32::new(0);

#[derive(Debug)]
struct Nack;

/// One I2C transaction with the sensor: 2 ms on the bus, then its answer.
async fn read_sensor() -> Result<u16, Nack> {
    Timer::after_millis(2).await;
    let raw = REGISTER.load(Ordering::Relaxed);
    if raw & 0x8000_0000 == 0 {
        Ok(raw as u16)
    } else {
        Err(Nack)
    }
}

#[cfg(any(
    feature = "guard-lean",
    feature = "guard-full",
    feature = "guard-owned",
    feature = "guard-fixed"
))]
mod guard {
    #[cfg(feature = "guard-lean-heard")]
    use core::sync::atomic::{AtomicU32, Ordering};
    use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
    #[cfg(feature = "guard-lean-heard")]
    use stormguard_core::Event;
    use stormguard_core::{BreakerSettings, BudgetSettings, CallSettings};
    #[cfg(not(feature = "guard-lean-heard"))]
    use stormguard_embassy::NoListener;
    use stormguard_embassy::{Breaker, Budget, Policy};

    #[cfg(feature = "guard-lean")]
    type Core = stormguard_core::LeanBreaker;
    #[cfg(all(feature = "guard-full", not(feature = "guard-lean")))]
    type Core = stormguard_core::Breaker<&'static BreakerSettings>;
    #[cfg(all(
        feature = "guard-owned",
        not(any(feature = "guard-lean", feature = "guard-full"))
    ))]
    type Core = stormguard_core::Breaker;
    #[cfg(all(
        feature = "guard-fixed",
        not(any(
            feature = "guard-lean",
            feature = "guard-full",
            feature = "guard-owned"
        ))
    ))]
    mod fixed {
        use super::BreakerSettings;
        use stormguard_core::{breaker::ConstSettings, breaker::Fixed};

        /// The default settings as a type.
        pub struct Sensor;
        impl ConstSettings for Sensor {
            const SETTINGS: BreakerSettings = BreakerSettings::defaults("sensor");
        }
        pub type Core = stormguard_core::Breaker<Fixed<Sensor>>;
        pub static BREAKER: super::Breaker<super::Cs, Core> = super::Breaker::fixed();
    }
    #[cfg(all(
        feature = "guard-fixed",
        not(any(
            feature = "guard-lean",
            feature = "guard-full",
            feature = "guard-owned"
        ))
    ))]
    pub use fixed::{Core, BREAKER};

    #[cfg(feature = "guard-lean")]
    static SETTINGS: BreakerSettings = match BreakerSettings::consecutive_only("sensor", 5) {
        Ok(s) => s,
        Err(_) => panic!("invalid breaker settings"),
    };
    #[cfg(all(
        any(feature = "guard-full", feature = "guard-owned"),
        not(feature = "guard-lean")
    ))]
    static SETTINGS: BreakerSettings = BreakerSettings::defaults("sensor");

    #[cfg(feature = "guard-lean")]
    pub static BREAKER: Breaker<Cs, Core> = match Breaker::lean(&SETTINGS) {
        Ok(b) => b,
        Err(_) => panic!("settings that need statistics"),
    };
    #[cfg(all(feature = "guard-full", not(feature = "guard-lean")))]
    pub static BREAKER: Breaker<Cs, Core> = Breaker::from_static(&SETTINGS);
    #[cfg(all(
        feature = "guard-owned",
        not(any(feature = "guard-lean", feature = "guard-full"))
    ))]
    pub static BREAKER: Breaker<Cs, Core> = Breaker::new(SETTINGS);

    pub static BUDGET: Budget<Cs> = Budget::new(BudgetSettings::defaults("sensor"));
    #[cfg(not(feature = "guard-lean-heard"))]
    pub static POLICY: Policy<'static, Cs, NoListener, Core> =
        Policy::new(&BREAKER, CallSettings::DEFAULT).with_budget(&BUDGET);

    /// Events heard, by the listener of `guard-lean-heard`.
    #[cfg(feature = "guard-lean-heard")]
    pub static HEARD: AtomicU32 = AtomicU32::new(0);

    #[cfg(feature = "guard-lean-heard")]
    fn count(_: &Event<'_>) {
        HEARD.fetch_add(1, Ordering::Relaxed);
    }

    #[cfg(feature = "guard-lean-heard")]
    pub static POLICY: Policy<'static, Cs, fn(&Event<'_>), Core> =
        Policy::new(&BREAKER, CallSettings::DEFAULT)
            .with_budget(&BUDGET)
            .with_listener(count);
}

#[embassy_executor::main]
async fn main(_spawner: Spawner) {
    if let Some(p) = cortex_m::Peripherals::take() {
        systick_time_driver::init(p.SYST, 25_000_000);
    }
    loop {
        #[cfg(not(any(
            feature = "guard-lean",
            feature = "guard-full",
            feature = "guard-owned",
            feature = "guard-fixed"
        )))]
        let reading = read_sensor().await.map_err(|_| 1u32);
        #[cfg(any(
            feature = "guard-lean",
            feature = "guard-full",
            feature = "guard-owned",
            feature = "guard-fixed"
        ))]
        let reading = guard::POLICY
            .call(|_| read_sensor())
            .await
            .map_err(|e| match e {
                stormguard_embassy::CallError::Rejected { .. } => 2u32,
                _ => 1u32,
            });
        LAST.store(
            match reading {
                Ok(v) => u32::from(v),
                Err(code) => 0x1_0000 | code,
            },
            Ordering::Relaxed,
        );
        Timer::after_secs(1).await;
    }
}
