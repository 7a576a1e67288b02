//! On-target test of stormguard-embassy: breakers, a retry budget and call policies in
//! `static`s, guarding a simulated flaky I2C sensor, on an emulated Cortex-M3 (QEMU
//! lm3s6965evb), timed by the chip's SysTick at 1 kHz. The sensor's breakers are lean (the
//! natural choice for a sensor: consecutive failures only, 40 bytes each); the budgeted policy's
//! is a full breaker (every default rule) over settings in a `static`. The optional steps run on
//! the target too: a bulkhead whose waiting task is woken by the executor, a rate limit, and a
//! hedged call against a full breaker that has learned its dependency's p95.
//!
//! Every check prints `ok NAME` or `FAILED NAME: detail` over semihosting; the run closes with
//! `N passed, N failed` and exits non-zero when any check failed (a panic exits 1 too).
#![no_std]
#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use core::future::pending;
use core::mem::size_of;
use core::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use cortex_m_semihosting::{debug, hprintln};
use embassy_executor::Spawner;
use embassy_futures::select::{select, Either};
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use embassy_sync::signal::Signal;
use embassy_time::{Duration, Instant, Timer};
use panic_semihosting as _;
use stormguard_core::{
    limits::BulkheadSettings, limits::RateLimitSettings, limits::RateLimiter, Backoff,
    BreakerSettings, BudgetSettings, CallSettings, Duration as CoreDuration, Event, Jitter,
    LeanBreaker, Outcome, RefusalReason, SettingsError, State, GUARD_PAUSE,
};
use stormguard_embassy::{
    Breaker, Budget, Bulkhead, CallError, CallOptions, NoListener, NoRateLimit, Policy, RateLimit,
    RateLimitedPolicy,
};

/// lm3s6965evb's core clock under QEMU.
const CORE_HZ: u32 = 12_000_000;

// ---------------------------------------------------------------------------------------------
// The simulated flaky peripheral

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum I2cError {
    /// No acknowledge: the sensor is asleep, browned out, or gone.
    Nack,
}

const HEALTHY: u8 = 0;
const NACKS: u8 = 1;
const HANGS: u8 = 2;

/// A temperature sensor on I2C whose behaviour the test scripts: healthy, NACKing, or holding
/// the bus forever. Every read is a 2 ms bus transaction.
struct FlakySensor {
    mode: AtomicU8,
    reads: AtomicU32,
}

impl FlakySensor {
    const fn new() -> Self {
        FlakySensor {
            mode: AtomicU8::new(HEALTHY),
            reads: AtomicU32::new(0),
        }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::Relaxed);
    }

    fn reads(&self) -> u32 {
        self.reads.load(Ordering::Relaxed)
    }

    async fn read_temperature(&self) -> Result<i16, I2cError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Timer::after_millis(2).await;
        match self.mode.load(Ordering::Relaxed) {
            HEALTHY => Ok(215),
            NACKS => Err(I2cError::Nack),
            _ => pending().await,
        }
    }
}

static SENSOR: FlakySensor = FlakySensor::new();

// ---------------------------------------------------------------------------------------------
// Statics: breakers, budgets, policies

const fn ok<T: Copy>(r: Result<T, SettingsError>) -> T {
    match r {
        Ok(v) => v,
        Err(_) => panic!("invalid settings"),
    }
}

/// Three NACKs in a row open the breaker for exactly 500 ms (no jitter, so the test can wait
/// for the break); two successful probes close it. No rule that needs statistics: a lean
/// breaker's settings, in a `static` it refers to.
static SENSOR_BREAKER: BreakerSettings = ok(BreakerSettings::builder("temp-sensor")
    .consecutive_failures(3)
    .failure_rate(None)
    .slow_calls(None)
    .break_duration(CoreDuration::from_millis(500))
    .jitter(false)
    .build());

/// One attempt per call: each call is one input to the trip rule.
const ONE_SHOT: CallSettings = ok(CallSettings::builder().max_attempts(1).build());

/// One attempt, cut after 50 ms.
const SHORT: CallSettings = ok(CallSettings::builder()
    .max_attempts(1)
    .attempt_timeout(Some(CoreDuration::from_millis(50)))
    .build());

/// Three attempts, 10 ms then 20 ms apart.
const RETRYING: CallSettings = ok(CallSettings::builder()
    .backoff(ok(Backoff::builder()
        .base(CoreDuration::from_millis(10))
        .jitter(Jitter::None)
        .build()))
    .build());

/// A budget holding exactly one retry: no floor, nothing funded by successes.
const ONE_RETRY: BudgetSettings = ok(BudgetSettings::builder("i2c-retries")
    .fraction_ppm(0)
    .floor_per_second_milli(0)
    .build());

static OPENS: AtomicU32 = AtomicU32::new(0);
static CLOSES: AtomicU32 = AtomicU32::new(0);
static PROBES: AtomicU32 = AtomicU32::new(0);
static REJECTIONS: AtomicU32 = AtomicU32::new(0);
/// Events that reached the listener named anything but the lean breaker's name.
static MISNAMED: AtomicU32 = AtomicU32::new(0);

fn count(event: &Event<'_>) {
    if event.name().as_str() != "temp-sensor" {
        MISNAMED.fetch_add(1, Ordering::Relaxed);
    }
    let counter = match event {
        Event::StateChanged {
            to: State::Open, ..
        } => &OPENS,
        Event::StateChanged {
            to: State::Closed, ..
        } => &CLOSES,
        Event::ProbeStarted { .. } => &PROBES,
        Event::Rejected { .. } => &REJECTIONS,
        _ => return,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A lean breaker over `settings`; a compile-time error for settings that need statistics.
const fn lean(settings: &'static BreakerSettings) -> Breaker<Cs, LeanBreaker> {
    match Breaker::lean(settings) {
        Ok(b) => b,
        Err(_) => panic!("settings that need statistics"),
    }
}

static BREAKER: Breaker<Cs, LeanBreaker> = lean(&SENSOR_BREAKER);
static POLICY: Policy<'static, Cs, fn(&Event<'_>), LeanBreaker> =
    Policy::new(&BREAKER, ONE_SHOT).with_listener(count);

static TIMEOUT_BREAKER: Breaker<Cs, LeanBreaker> = lean(&SENSOR_BREAKER);
static TIMEOUT_POLICY: Policy<'static, Cs, NoListener, LeanBreaker> =
    Policy::new(&TIMEOUT_BREAKER, SHORT);

/// Every default rule (relative failure rate, slow calls, latency baseline): a full breaker.
static BUDGETED: BreakerSettings = BreakerSettings::defaults("budgeted");
type Full = stormguard_core::Breaker<&'static BreakerSettings>;
static BUDGET_BREAKER: Breaker<Cs, Full> = Breaker::from_static(&BUDGETED);
static BUDGET: Budget<Cs> = Budget::new(ONE_RETRY);
static BUDGET_POLICY: Policy<'static, Cs, NoListener, Full> =
    Policy::new(&BUDGET_BREAKER, RETRYING).with_budget(&BUDGET);

static STOP: Signal<Cs, ()> = Signal::new();

/// One transaction on the bus at a time; one more task may wait for it, at most 100 ms.
static BUS: Bulkhead<Cs> = Bulkhead::new(ok(BulkheadSettings::builder("spi-bus")
    .max_in_flight(1)
    .bounded_wait(1, CoreDuration::from_millis(100))
    .build()));
static BUS_BREAKER: Breaker<Cs, LeanBreaker> = lean(&SENSOR_BREAKER);
static BUS_POLICY: Policy<'static, Cs, NoListener, LeanBreaker, NoRateLimit, &Bulkhead<Cs>> =
    Policy::new(&BUS_BREAKER, ONE_SHOT).with_bulkhead(&BUS);

/// One uplink message a second.
static UPLINK: RateLimit<Cs, RateLimiter> = RateLimit::new(RateLimiter::new(ok(
    RateLimitSettings::per_second("uplink", 1),
)));
static UPLINK_BREAKER: Breaker<Cs, LeanBreaker> = lean(&SENSOR_BREAKER);
static UPLINK_POLICY: RateLimitedPolicy<Cs> =
    Policy::new(&UPLINK_BREAKER, ONE_SHOT).with_rate_limit(UPLINK.part());

/// Hedging on: a full breaker learns the gateway's p95.
const HEDGED: CallSettings = ok(CallSettings::builder().hedging(true).build());
static GATEWAY: BreakerSettings = BreakerSettings::defaults("gateway");
static GATEWAY_BREAKER: Breaker<Cs, Full> = Breaker::from_static(&GATEWAY);
static HEDGES: AtomicU32 = AtomicU32::new(0);
fn count_hedges(event: &Event<'_>) {
    if let Event::Hedged { .. } = event {
        HEDGES.fetch_add(1, Ordering::Relaxed);
    }
}
static GATEWAY_POLICY: Policy<'static, Cs, fn(&Event<'_>), Full> =
    Policy::new(&GATEWAY_BREAKER, HEDGED).with_listener(count_hedges);

// ---------------------------------------------------------------------------------------------
// Checks

struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    fn check(&mut self, name: &str, pass: bool, detail: core::fmt::Arguments<'_>) {
        if pass {
            self.passed += 1;
            hprintln!("ok {}", name);
        } else {
            self.failed += 1;
            hprintln!("FAILED {}: {}", name, detail);
        }
    }
}

/// Ticks (ms at 1 kHz) since `t0`.
fn ticks_since(t0: Instant) -> u64 {
    (Instant::now() - t0).as_ticks()
}

#[embassy_executor::task]
async fn stop_after(delay: Duration) {
    Timer::after(delay).await;
    STOP.signal(());
}

/// Holds the bus for 30 ms through the bulkheaded policy.
#[embassy_executor::task]
async fn hold_bus() {
    let _ = BUS_POLICY
        .call(async |_| {
            Timer::after_millis(30).await;
            Ok::<i16, I2cError>(0)
        })
        .await;
}

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let p = cortex_m::Peripherals::take().unwrap();
    systick_time_driver::init(p.SYST, CORE_HZ);
    hprintln!(
        "stormguard-embassy on QEMU lm3s6965evb (Cortex-M3), SysTick at {} Hz",
        embassy_time::TICK_HZ
    );
    let mut t = Tally {
        passed: 0,
        failed: 0,
    };

    // 0. Each device seeds its jitter (the chip's unique ID or RNG on a real board); the RAM
    //    goals hold on the target: under 64 B per lean breaker, under 1 KiB per full one.
    BREAKER.set_seed(0x5eed_0001);
    POLICY.set_seed(0x5eed_0002);
    BUDGET_BREAKER.set_seed(0x5eed_0003);
    BUDGET_POLICY.set_seed(0x5eed_0004);
    let lean_size = size_of::<Breaker<Cs, LeanBreaker>>();
    let full_size = size_of::<Breaker<Cs, Full>>();
    t.check(
        "a lean breaker takes under 64 B of RAM, a full one under 1 KiB",
        lean_size < 64 && full_size < 1024,
        format_args!("lean {lean_size} B, full {full_size} B"),
    );
    hprintln!(
        "   (size_of: lean breaker {} B, full breaker {} B)",
        lean_size,
        full_size
    );

    // 1. The breaker opens after three NACKs.
    SENSOR.set(NACKS);
    let mut errors = 0;
    for _ in 0..3 {
        if POLICY.call(|_| SENSOR.read_temperature()).await
            == Err(CallError::Failed(I2cError::Nack))
        {
            errors += 1;
        }
    }
    let opened_at = Instant::now();
    let state = BREAKER.state();
    t.check(
        "three NACKs open the breaker",
        errors == 3 && state == State::Open && OPENS.load(Ordering::Relaxed) == 1,
        format_args!("{errors} errors, state {state}"),
    );

    // 2. An open breaker refuses, after the guarded pause, on the target's own timer.
    let reads = SENSOR.reads();
    let t0 = Instant::now();
    let r = POLICY.call(|_| SENSOR.read_temperature()).await;
    let took = ticks_since(t0);
    let refused = match r {
        Err(CallError::Rejected { rejection, .. }) => Some(rejection),
        _ => None,
    };
    t.check(
        "an open breaker refuses after a 100 ms pause measured in SysTick ticks",
        refused.is_some_and(|r| r.reason == RefusalReason::BreakerOpen && r.pause == GUARD_PAUSE)
            && (100..=101).contains(&took)
            && SENSOR.reads() == reads
            && REJECTIONS.load(Ordering::Relaxed) == 1,
        format_args!(
            "{took} ticks, {refused:?}, {} reads",
            SENSOR.reads() - reads
        ),
    );
    let retry_after_ms = refused.map_or(0, |r| r.retry_after.as_millis());
    t.check(
        "the refusal says when to retry: the break's remainder after the pause",
        (395..=400).contains(&retry_after_ms),
        format_args!("retry_after {retry_after_ms} ms"),
    );
    hprintln!(
        "   (pause served in {} ticks; retry_after {} ms)",
        took,
        retry_after_ms
    );

    // 3. The pause is capped by the deadline's remainder.
    let t0 = Instant::now();
    let options = CallOptions::new().deadline(t0 + Duration::from_millis(40));
    let r = POLICY
        .call_with(options, |_| SENSOR.read_temperature())
        .await;
    let took = ticks_since(t0);
    t.check(
        "the pause is capped by the deadline's remainder (40 ms)",
        matches!(r, Err(CallError::Rejected { .. })) && (40..=41).contains(&took),
        format_args!("{took} ticks, {r:?}"),
    );

    // 4. Cancellation (a Signal from another task) ends the pause at once.
    STOP.reset();
    spawner.spawn(stop_after(Duration::from_millis(30)).unwrap());
    let t0 = Instant::now();
    let options = CallOptions::new().cancel_on(STOP.wait());
    let r = POLICY
        .call_with(options, |_| SENSOR.read_temperature())
        .await;
    let took = ticks_since(t0);
    t.check(
        "a signal from another task ends the pause at once",
        r == Err(CallError::Cancelled) && (30..=31).contains(&took),
        format_args!("{took} ticks, {r:?}"),
    );

    // 5. After the break, probes go through and close the breaker.
    Timer::at(opened_at + Duration::from_millis(500)).await;
    let half_open = BREAKER.state();
    SENSOR.set(HEALTHY);
    let first = POLICY.call(|_| SENSOR.read_temperature()).await;
    let after_one = BREAKER.state();
    let second = POLICY.call(|_| SENSOR.read_temperature()).await;
    let closed = BREAKER.state();
    t.check(
        "after the break two probes close the breaker",
        half_open == State::HalfOpen
            && first == Ok(215)
            && after_one == State::HalfOpen
            && second == Ok(215)
            && closed == State::Closed
            && PROBES.load(Ordering::Relaxed) == 2
            && CLOSES.load(Ordering::Relaxed) == 1,
        format_args!("{half_open} -> {after_one} -> {closed}"),
    );

    // 6. A read that holds the bus is cut at its attempt timeout.
    SENSOR.set(HANGS);
    let t0 = Instant::now();
    let r = TIMEOUT_POLICY.call(|_| SENSOR.read_temperature()).await;
    let took = ticks_since(t0);
    t.check(
        "a hung read is cut at its 50 ms attempt timeout",
        r == Err(CallError::TimedOut { last: None })
            && (50..=51).contains(&took)
            && TIMEOUT_BREAKER
                .snapshot()
                .is_some_and(|s| s.consecutive_failures == 1),
        format_args!("{took} ticks, {r:?}"),
    );

    // 7. Retries stop when the budget is empty, carrying the last error.
    SENSOR.set(NACKS);
    let reads = SENSOR.reads();
    let r = BUDGET_POLICY.call(|_| SENSOR.read_temperature()).await;
    let stopped = match r {
        Err(CallError::Rejected { rejection, last }) => {
            rejection.reason == RefusalReason::BudgetExhausted
                && rejection.last == Some(Outcome::Transient)
                && last == Some(I2cError::Nack)
        }
        _ => false,
    };
    t.check(
        "an empty budget stops retries with the last error",
        stopped && SENSOR.reads() - reads == 2 && BUDGET.available() == 0,
        format_args!("{r:?}, {} reads", SENSOR.reads() - reads),
    );

    // 8. A call dropped mid-probe gives its probe slot back.
    for _ in 0..3 {
        let _ = POLICY.call(|_| SENSOR.read_temperature()).await;
    }
    let reopened = BREAKER.state() == State::Open;
    Timer::after_millis(1_000).await; // the second break is 1 s (doubled)
    SENSOR.set(HANGS);
    let dropped = matches!(
        select(
            POLICY.call(|_| SENSOR.read_temperature()),
            Timer::after_millis(5)
        )
        .await,
        Either::Second(())
    );
    let probes_out = BREAKER.snapshot().map(|s| s.probes_in_flight);
    SENSOR.set(HEALTHY);
    let next = POLICY.call(|_| SENSOR.read_temperature()).await;
    t.check(
        "a call dropped mid-probe gives its probe slot back",
        reopened && dropped && probes_out == Some(0) && next == Ok(215),
        format_args!("reopened {reopened}, probes out {probes_out:?}, next {next:?}"),
    );

    // 9. Events held under the lean breaker's lock are delivered named after it.
    let misnamed = MISNAMED.load(Ordering::Relaxed);
    t.check(
        "every event reaches the listener named after its lean breaker",
        misnamed == 0 && OPENS.load(Ordering::Relaxed) == 2,
        format_args!("{misnamed} misnamed"),
    );

    // 10. A full bulkhead with a bounded wait: the waiting task is woken when the slot frees.
    SENSOR.set(HEALTHY);
    spawner.spawn(hold_bus().unwrap());
    Timer::after_millis(1).await; // the holder takes the slot
    let t0 = Instant::now();
    let r = BUS_POLICY.call(|_| SENSOR.read_temperature()).await;
    let took = ticks_since(t0);
    let queued = BUS.snapshot().map(|s| (s.in_flight, s.queued));
    t.check(
        "a task waiting on a full bulkhead is woken when the slot frees",
        r == Ok(215) && (30..=33).contains(&took) && queued == Some((0, 0)),
        format_args!("{took} ticks, {r:?}, in flight and queued {queued:?}"),
    );

    // 11. A rate limit's refusal is guarded, with the time until the next cell.
    let first = UPLINK_POLICY.call(|_| SENSOR.read_temperature()).await;
    let t0 = Instant::now();
    let r = UPLINK_POLICY.call(|_| SENSOR.read_temperature()).await;
    let took = ticks_since(t0);
    let limited = match r {
        Err(CallError::Rejected { rejection, .. }) => {
            rejection.reason == RefusalReason::RateLimited
                && (895..=900).contains(&rejection.retry_after.as_millis())
        }
        _ => false,
    };
    t.check(
        "a rate-limited call is refused after the pause, with the time to the next cell",
        first == Ok(215) && limited && (100..=101).contains(&took),
        format_args!("{took} ticks, {r:?}"),
    );

    // 12. Hedging: once the breaker knows the p95 (4 ms reads), a hung first attempt is hedged
    //     and the hedge's answer wins; the hung attempt is dropped. A hedge never starts sooner
    //     than 10 ms after its attempt, so the hedge starts at 10 ms and answers 2 ms later.
    for _ in 0..25 {
        let _ = GATEWAY_POLICY
            .call(async |_| {
                Timer::after_millis(4).await;
                Ok::<u32, ()>(0)
            })
            .await;
    }
    let t0 = Instant::now();
    let r = GATEWAY_POLICY
        .call_hedged(|attempt| async move {
            if attempt == 1 {
                pending::<()>().await;
            }
            Timer::after_millis(2).await;
            Ok::<u32, ()>(attempt)
        })
        .await;
    let took = ticks_since(t0);
    let failures = GATEWAY_BREAKER.snapshot().map(|s| s.consecutive_failures);
    t.check(
        "a hung attempt is hedged after the learned p95 and the hedge wins",
        r == Ok(2)
            && (12..=13).contains(&took)
            && HEDGES.load(Ordering::Relaxed) == 1
            && failures == Some(0),
        format_args!("{took} ticks, {r:?}, failures {failures:?}"),
    );

    hprintln!("{} passed, {} failed", t.passed, t.failed);
    debug::exit(if t.failed == 0 {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    loop {
        cortex_m::asm::wfi();
    }
}
