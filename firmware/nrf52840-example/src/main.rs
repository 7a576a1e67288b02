//! A TMP117 temperature sensor read over I2C (TWIM0, SDA P0.26 / SCL P0.27 on the nRF52840-DK's
//! Arduino header), guarded by a stormguard breaker and retry budget, logged with defmt.
//!
//! A sensor on a long cable browns out, NACKs, or holds the bus. The policy retries a failed read
//! twice within its 1 s deadline (if the retry budget allows), cuts a read that takes longer than
//! 100 ms, and after three failed calls in a row leaves the sensor alone for a growing break,
//! answering every read meanwhile with a refusal after a 100 ms pause, never a busy loop.
//!
//! The breaker is the lean one: a sensor read needs no failure-rate statistics, only "three
//! failures in a row", and the lean breaker keeps that in 40 bytes of RAM with its settings in
//! flash.
#![no_std]
#![no_main]

use defmt::{info, warn};
use embassy_executor::Spawner;
use embassy_nrf::rng::Rng;
use embassy_nrf::twim::{self, Twim};
use embassy_nrf::{bind_interrupts, peripherals};
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
use embassy_time::{Duration, Timer};
use stormguard_core::{
    BreakerSettings, BudgetSettings, CallSettings, Duration as CoreDuration, LeanBreaker, Outcome,
};
use stormguard_embassy::{valid, Breaker, Budget, CallError, CallOptions, LeanPolicy, Policy};
use {defmt_rtt as _, panic_probe as _};

bind_interrupts!(struct Irqs {
    TWISPI0 => twim::InterruptHandler<peripherals::TWISPI0>;
});

/// Three failed calls in a row open the breaker for 2 s (jittered, doubling up to 2 min).
static SENSOR_BREAKER: BreakerSettings = valid!(BreakerSettings::builder("tmp117")
    .consecutive_failures(3)
    .failure_rate(None)
    .slow_calls(None)
    .break_duration(CoreDuration::from_secs(2))
    .build(),);

/// Up to 3 attempts within 1 s, each cut at 100 ms.
const READ: CallSettings = valid!(CallSettings::builder()
    .deadline(Some(CoreDuration::from_secs(1)))
    .attempt_timeout(Some(CoreDuration::from_millis(100)))
    .build(),);

type Cs = CriticalSectionRawMutex;

static BREAKER: Breaker<Cs, LeanBreaker> = valid!(Breaker::lean(&SENSOR_BREAKER));
static RETRIES: Budget<Cs> = Budget::new(BudgetSettings::defaults("i2c"));
static SENSOR: LeanPolicy<Cs> = Policy::new(&BREAKER, READ).with_budget(&RETRIES);

const TMP117: u8 = 0x48;
const TEMP_RESULT: u8 = 0x00;

/// One temperature reading, in milli-degrees Celsius (7.8125 m°C per LSB).
async fn read_temperature(i2c: &mut Twim<'_>) -> Result<i32, twim::Error> {
    let mut raw = [0u8; 2];
    i2c.write_read(TMP117, &[TEMP_RESULT], &mut raw).await?;
    Ok(i32::from(i16::from_be_bytes(raw)) * 125 / 16)
}

/// A missing acknowledge or a bus fault counts against the sensor; a buffer the driver rejects
/// is a bug in this firmware: never retried, never counted.
fn classify(result: &Result<i32, twim::Error>) -> Outcome {
    match result {
        Ok(_) => Outcome::Success,
        Err(
            twim::Error::TxBufferTooLong
            | twim::Error::RxBufferTooLong
            | twim::Error::RAMBufferTooSmall,
        ) => Outcome::Permanent,
        Err(_) => Outcome::Transient,
    }
}

#[embassy_executor::main]
async fn main(_spawner: Spawner) {
    let p = embassy_nrf::init(Default::default());

    // Each device jitters its breaks and its retries differently, so a fleet does not retry in
    // step after a shared outage.
    let mut rng = Rng::new_blocking(p.RNG);
    let mut seed = [0u8; 8];
    rng.blocking_fill_bytes(&mut seed);
    BREAKER.set_seed(u64::from_le_bytes(seed));
    rng.blocking_fill_bytes(&mut seed);
    SENSOR.set_seed(u64::from_le_bytes(seed));

    let mut tx_ram = [0u8; 4];
    let mut i2c = Twim::new(
        p.TWISPI0,
        Irqs,
        p.P0_26,
        p.P0_27,
        twim::Config::default(),
        &mut tx_ram,
    );

    loop {
        let options = CallOptions::new().classify(classify);
        match SENSOR
            .call_with(options, async |_attempt| read_temperature(&mut i2c).await)
            .await
        {
            Ok(milli_c) => info!("temperature: {} m°C", milli_c),
            Err(CallError::Rejected { rejection, last }) => {
                // Already paused 100 ms; the sensor is being left alone.
                warn!(
                    "tmp117 not asked ({}); last error {}; next try in {}",
                    rejection.reason, last, rejection.retry_after
                );
            }
            Err(e) => warn!("tmp117 read failed: {}", e),
        }
        if let Some(health) = BREAKER.snapshot() {
            info!(
                "breaker {}: {}, retry budget {} left",
                health.name,
                health.state,
                RETRIES.available()
            );
        }
        Timer::after(Duration::from_secs(1)).await;
    }
}
