//! The policy on embassy's mock time driver: deterministic time, futures polled by hand.
//!
//! The mock driver is one global: every test resets it first and the tests run one at a time.
//! A test polls the call's future with a no-op waker and moves mock time itself, so it can say
//! exactly how much time passed before the future finished.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use core::future::Future;
use core::pin::{pin, Pin};
use core::task::Poll;
use std::cell::{Cell, RefCell};
use std::string::{String, ToString};
use std::vec::Vec;

use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex, NoopRawMutex};
use embassy_sync::signal::Signal;
use embassy_time::{Duration as EDuration, Timer};
use serial_test::serial;
use stormguard_core::{
    breaker::ConstSettings, breaker::Fixed, Backoff, Bound, BreakerSettings, BudgetSettings,
    CallSettings, Duration, Event, Field, Jitter, LeanBreaker, Outcome, Recovery, RefusalReason,
    SettingsError, State, GUARD_PAUSE,
};
use stormguard_embassy::sleep::{sleep, Never, Slept};
use stormguard_embassy::{
    Breaker, Budget, CallError, CallOptions, CoreBreaker, NoListener, Policy,
};

// ---------------------------------------------------------------------------------------------
// Harness

mod support;
use support::{advance, fresh, ms, now, poll, run, run_ms};

/// Events as short strings, in order: the breaker's, budget's and call's decisions. Each
/// attempt's end (the attempt log's `Attempt` events) is left out here; `components.rs` reads
/// those.
#[derive(Default)]
struct Log(RefCell<Vec<String>>);

impl Log {
    fn push(&self, e: &Event<'_>) {
        let s = match e {
            Event::Attempt { .. } => return,
            Event::StateChanged { from, to, .. } => format!("{from}->{to}"),
            Event::Rejected { reason, delay, .. } => format!("rejected {reason} {delay}"),
            Event::Retry { attempt, delay, .. } => format!("retry #{attempt} after {delay}"),
            other => other.kind().to_string(),
        };
        self.0.borrow_mut().push(s);
    }
    fn take(&self) -> Vec<String> {
        self.0.take()
    }
}

const fn no_jitter_backoff() -> Backoff {
    match Backoff::builder().jitter(Jitter::None).build() {
        Ok(b) => b,
        Err(_) => panic!(),
    }
}

/// One attempt per call, a long deadline: each call is one trip-rule input.
const ONE_SHOT: CallSettings = match CallSettings::builder()
    .max_attempts(1)
    .deadline(Some(Duration::from_secs(60)))
    .build()
{
    Ok(s) => s,
    Err(_) => panic!(),
};

/// Three attempts, backoff 100 ms doubling with no jitter, 30 s deadline.
const RETRYING: CallSettings = match CallSettings::builder().backoff(no_jitter_backoff()).build() {
    Ok(s) => s,
    Err(_) => panic!(),
};

/// Opens after 3 consecutive failures for exactly 1 s (no jitter); two probe successes close.
const SENSOR: BreakerSettings = match BreakerSettings::builder("sensor")
    .consecutive_failures(3)
    .failure_rate(None)
    .slow_calls(None)
    .break_duration(Duration::from_secs(1))
    .jitter(false)
    .build()
{
    Ok(s) => s,
    Err(_) => panic!(),
};

async fn fails(_: u32) -> Result<u16, &'static str> {
    Err("nack")
}

async fn answers(_: u32) -> Result<u16, &'static str> {
    Ok(215)
}

/// Trips `policy`'s breaker with three failed one-shot calls.
fn trip<L: stormguard_embassy::Listener>(policy: &Policy<'_, NoopRawMutex, L>) {
    for _ in 0..3 {
        let (r, took) = run_ms(policy.call(fails));
        assert_eq!(r, Err(CallError::Failed("nack")));
        assert_eq!(
            took,
            EDuration::from_ticks(0),
            "a failed attempt returns at once"
        );
    }
    assert_eq!(policy.breaker().state(), State::Open);
}

// ---------------------------------------------------------------------------------------------
// Trip, refusal, pause

#[test]
#[serial(embassy_mock_driver)]
fn consecutive_failures_trip_the_breaker_and_the_listener_hears_it() {
    fresh();
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT).with_listener(|e: &Event<'_>| log.push(e));
    trip(&policy);
    assert_eq!(log.take(), ["closed->open"]);
    let snap = breaker.snapshot().unwrap();
    assert_eq!(snap.break_duration, Some(Duration::from_secs(1)));
    assert_eq!(snap.until_half_open, Duration::from_secs(1));
}

#[test]
#[serial(embassy_mock_driver)]
fn an_open_breaker_refuses_after_exactly_100ms_of_mock_time() {
    fresh();
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT).with_listener(|e: &Event<'_>| log.push(e));
    trip(&policy);
    log.take();

    let ran = Cell::new(0);
    let mut call = pin!(policy.call(|_| {
        ran.set(ran.get() + 1);
        answers(1)
    }));
    assert!(poll(call.as_mut()).is_pending());
    // Announced before it is served.
    assert_eq!(log.take(), ["rejected breaker_open 100ms"]);
    advance(EDuration::from_ticks(99_999)); // 1 µs short of 100 ms
    assert!(poll(call.as_mut()).is_pending());
    advance(EDuration::from_ticks(1));
    let Poll::Ready(Err(CallError::Rejected { rejection, last })) = poll(call.as_mut()) else {
        panic!("the refusal is reported once the pause is served")
    };
    assert_eq!(rejection.reason, RefusalReason::BreakerOpen);
    assert_eq!(rejection.pause, GUARD_PAUSE);
    // retry_after counts from the end of the pause: the 1 s break less the 100 ms served.
    assert_eq!(rejection.retry_after, Duration::from_millis(900));
    assert_eq!(last, None);
    assert_eq!(ran.get(), 0, "a refused call never reaches the sensor");
}

#[test]
#[serial(embassy_mock_driver)]
fn the_pause_is_capped_by_the_deadlines_remainder() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT);
    trip(&policy);
    let options = CallOptions::new().deadline(now() + ms(40));
    let (r, took) = run(
        policy.call_with(options, answers),
        EDuration::from_ticks(100),
    );
    assert_eq!(took, ms(40));
    let Err(CallError::Rejected { rejection, .. }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rejection.pause, Duration::from_millis(40));
}

#[test]
#[serial(embassy_mock_driver)]
fn with_no_time_left_the_refusal_is_reported_without_a_pause() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT);
    trip(&policy);
    let options = CallOptions::new().deadline(now());
    let mut call = pin!(policy.call_with(options, answers));
    let Poll::Ready(Err(CallError::Rejected { rejection, .. })) = poll(call.as_mut()) else {
        panic!("reported at once")
    };
    assert_eq!(rejection.reason, RefusalReason::BreakerOpen);
    assert_eq!(rejection.pause, Duration::ZERO);
}

#[test]
#[serial(embassy_mock_driver)]
fn cancelling_ends_the_pause_at_once() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT);
    trip(&policy);
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    let options = CallOptions::new().cancel_on(stop.wait());
    let mut call = pin!(policy.call_with(options, answers));
    assert!(poll(call.as_mut()).is_pending());
    advance(ms(30));
    assert!(poll(call.as_mut()).is_pending());
    let before = now();
    stop.signal(());
    assert_eq!(poll(call.as_mut()), Poll::Ready(Err(CallError::Cancelled)));
    assert_eq!(
        now(),
        before,
        "no time passes between the signal and the end of the pause"
    );
}

#[test]
#[serial(embassy_mock_driver)]
fn cancelling_ends_a_backoff_wait_at_once() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("radio"));
    let policy = Policy::new(&breaker, RETRYING);
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    let mut call = pin!(policy.call_with(CallOptions::new().cancel_on(stop.wait()), fails));
    assert!(poll(call.as_mut()).is_pending(), "waiting 100 ms to retry");
    advance(ms(50));
    stop.signal(());
    assert_eq!(poll(call.as_mut()), Poll::Ready(Err(CallError::Cancelled)));
}

#[test]
#[serial(embassy_mock_driver)]
fn a_cancelled_sleep_ends_at_once_and_an_uncancelled_one_elapses() {
    fresh();
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    let mut s = pin!(sleep(Duration::from_millis(100), stop.wait()));
    assert!(poll(s.as_mut()).is_pending());
    stop.signal(());
    assert_eq!(poll(s.as_mut()), Poll::Ready(Slept::Cancelled));
    let (slept, took) = run(
        sleep(Duration::from_millis(100), Never),
        EDuration::from_ticks(1),
    );
    assert_eq!(slept, Slept::Elapsed);
    assert_eq!(took, ms(100));
}

// ---------------------------------------------------------------------------------------------
// Half-open, probes, recovery

#[test]
#[serial(embassy_mock_driver)]
fn after_the_break_a_probe_goes_through_and_two_successes_close_the_breaker() {
    fresh();
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT).with_listener(|e: &Event<'_>| log.push(e));
    trip(&policy);
    advance(ms(999));
    assert_eq!(breaker.state(), State::Open);
    advance(ms(1));
    assert_eq!(
        breaker.state(),
        State::HalfOpen,
        "reading uses no probe slot"
    );
    log.take();

    let (r, _) = run_ms(policy.call(answers));
    assert_eq!(r, Ok(215));
    assert_eq!(log.take(), ["open->half_open", "probe_started"]);
    assert_eq!(breaker.state(), State::HalfOpen, "one probe success of two");
    let (r, _) = run_ms(policy.call(answers));
    assert_eq!(r, Ok(215));
    assert_eq!(log.take(), ["probe_started", "half_open->closed"]);
    assert_eq!(breaker.state(), State::Closed);

    // Recovered: calls flow again, and the break growth started over.
    for _ in 0..5 {
        assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
    }
    trip(&policy);
    assert_eq!(
        breaker.snapshot().unwrap().break_duration,
        Some(Duration::from_secs(1))
    );
}

#[test]
#[serial(embassy_mock_driver)]
fn a_failed_probe_reopens_with_a_doubled_break() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT);
    trip(&policy);
    advance(ms(1_000));
    assert_eq!(run_ms(policy.call(fails)).0, Err(CallError::Failed("nack")));
    assert_eq!(breaker.state(), State::Open);
    assert_eq!(
        breaker.snapshot().unwrap().break_duration,
        Some(Duration::from_secs(2))
    );
}

#[test]
#[serial(embassy_mock_driver)]
fn while_the_probe_is_out_other_calls_are_refused_as_half_open_full() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT);
    trip(&policy);
    advance(ms(1_000));
    // The probe: a slow read, 50 ms.
    let mut probe = pin!(policy.call(|_| async {
        Timer::after(ms(50)).await;
        Ok::<u16, &str>(7)
    }));
    assert!(poll(probe.as_mut()).is_pending());
    let (r, took) = run_ms(policy.call(answers));
    let Err(CallError::Rejected { rejection, .. }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::HalfOpenFull);
    assert_eq!(took, ms(100));
    assert_eq!(poll(probe.as_mut()), Poll::Ready(Ok(7)));
}

#[test]
#[serial(embassy_mock_driver)]
fn dropping_a_call_mid_probe_gives_the_probe_slot_back() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT);
    trip(&policy);
    advance(ms(1_000));
    {
        let mut hung = pin!(policy.call(|_| core::future::pending::<Result<u16, &str>>()));
        assert!(poll(hung.as_mut()).is_pending());
        assert_eq!(breaker.snapshot().unwrap().probes_in_flight, 1);
    } // the caller gave up: the future is dropped mid-attempt
    assert_eq!(breaker.snapshot().unwrap().probes_in_flight, 0);
    assert_eq!(breaker.state(), State::HalfOpen);
    // The slot is free at once: the next call probes rather than being refused.
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
}

#[test]
#[serial(embassy_mock_driver)]
fn cancelling_a_probe_mid_attempt_counts_nothing_and_frees_the_slot() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT);
    trip(&policy);
    advance(ms(1_000));
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    let options = CallOptions::new().cancel_on(stop.wait());
    let mut call =
        pin!(policy.call_with(options, |_| core::future::pending::<Result<u16, &str>>()));
    assert!(poll(call.as_mut()).is_pending());
    stop.signal(());
    assert_eq!(poll(call.as_mut()), Poll::Ready(Err(CallError::Cancelled)));
    assert_eq!(
        breaker.state(),
        State::HalfOpen,
        "a cancelled probe is not a failure"
    );
    assert_eq!(breaker.snapshot().unwrap().probes_in_flight, 0);
}

#[test]
#[serial(embassy_mock_driver)]
fn a_recovery_ramp_lets_traffic_back_gradually_then_closes() {
    fresh();
    const RAMPED: BreakerSettings = match BreakerSettings::builder("radio")
        .consecutive_failures(3)
        .failure_rate(None)
        .slow_calls(None)
        .break_duration(Duration::from_secs(4))
        .jitter(false)
        .recovery(Some(Recovery::over_ppm(250_000)))
        .build()
    {
        Ok(s) => s,
        Err(_) => panic!(),
    };
    let breaker = Breaker::<NoopRawMutex>::new(RAMPED);
    let policy = Policy::new(&breaker, ONE_SHOT);
    trip(&policy);
    advance(ms(4_000));
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
    assert_eq!(breaker.state(), State::Recovering);
    // At the ramp's 5% floor most calls are shed, each after the guarded pause.
    let (r, took) = run_ms(policy.call(answers));
    let Err(CallError::Rejected { rejection, .. }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::RampShedding);
    assert_eq!(took, ms(100));
    // The ramp is a quarter of the 4 s break, clamped to at least 1 s: over after 1 s.
    advance(ms(1_000));
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
}

// ---------------------------------------------------------------------------------------------
// Retries, budget, deadline, timeout, classification

#[test]
#[serial(embassy_mock_driver)]
fn failures_are_retried_after_the_cores_backoff() {
    fresh();
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("radio"));
    let policy = Policy::new(&breaker, RETRYING).with_listener(|e: &Event<'_>| log.push(e));
    let started = RefCell::new(Vec::new());
    let t0 = now();
    let (r, took) = run(
        policy.call(|attempt| {
            started.borrow_mut().push((attempt, now() - t0));
            async move {
                if attempt < 3 {
                    Err("nack")
                } else {
                    Ok(attempt)
                }
            }
        }),
        EDuration::from_ticks(100),
    );
    assert_eq!(r, Ok(3));
    assert_eq!(
        started.take(),
        [(1, ms(0)), (2, ms(100)), (3, ms(300))],
        "waits of 100 ms, then 200 ms"
    );
    assert_eq!(took, ms(300));
    assert_eq!(log.take(), ["retry #2 after 100ms", "retry #3 after 200ms"]);
}

#[test]
#[serial(embassy_mock_driver)]
fn an_empty_budget_stops_retries_with_a_rejection_carrying_the_last_error() {
    fresh();
    // No floor and no funding from successes: the budget holds exactly one retry.
    const ONE_RETRY: BudgetSettings = match BudgetSettings::builder("i2c")
        .fraction_ppm(0)
        .floor_per_second_milli(0)
        .build()
    {
        Ok(s) => s,
        Err(_) => panic!(),
    };
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("sensor"));
    let budget = Budget::<NoopRawMutex>::new(ONE_RETRY);
    let policy = Policy::new(&breaker, RETRYING)
        .with_budget(&budget)
        .with_listener(|e: &Event<'_>| log.push(e));
    assert_eq!(budget.available(), 1);
    let (r, took) = run(policy.call(fails), EDuration::from_ticks(100));
    let Err(CallError::Rejected { rejection, last }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::BudgetExhausted);
    assert_eq!(
        rejection.retry_after,
        Duration::MAX,
        "no floor: only successes refill it"
    );
    assert_eq!(rejection.attempts, 2);
    assert_eq!(rejection.last, Some(Outcome::Transient));
    assert_eq!(last, Some("nack"));
    // 100 ms backoff, then the guarded 100 ms pause.
    assert_eq!(took, ms(200));
    assert_eq!(budget.available(), 0);
    assert_eq!(
        log.take(),
        ["retry #2 after 100ms", "rejected budget_exhausted 100ms"]
    );
    // The first attempt of a call never asks the budget.
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
}

#[test]
#[serial(embassy_mock_driver)]
fn a_budget_shared_by_two_policies_is_spent_by_both() {
    fresh();
    const ONE_RETRY: BudgetSettings = match BudgetSettings::builder("bus")
        .fraction_ppm(0)
        .floor_per_second_milli(0)
        .build()
    {
        Ok(s) => s,
        Err(_) => panic!(),
    };
    let a = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("a"));
    let b = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("b"));
    let budget = Budget::<NoopRawMutex>::new(ONE_RETRY);
    let pa = Policy::new(&a, RETRYING).with_budget(&budget);
    let pb = Policy::new(&b, RETRYING).with_budget(&budget);
    let (ra, _) = run_ms(pa.call(fails));
    assert!(matches!(ra, Err(CallError::Rejected { .. })));
    let (rb, _) = run_ms(pb.call(fails));
    let Err(CallError::Rejected { rejection, .. }) = rb else {
        panic!("{rb:?}")
    };
    assert_eq!(
        rejection.attempts, 1,
        "b's first retry finds the budget empty"
    );
}

#[test]
#[serial(embassy_mock_driver)]
fn an_attempt_still_running_at_its_timeout_is_dropped_and_counts_as_timed_out() {
    fresh();
    const SHORT: CallSettings = match CallSettings::builder()
        .max_attempts(1)
        .attempt_timeout(Some(Duration::from_millis(50)))
        .build()
    {
        Ok(s) => s,
        Err(_) => panic!(),
    };
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, SHORT);
    let (r, took) = run(
        policy.call(|_| core::future::pending::<Result<u16, &str>>()),
        EDuration::from_ticks(10),
    );
    assert_eq!(r, Err(CallError::TimedOut { last: None }));
    assert_eq!(took, ms(50));
    assert_eq!(breaker.snapshot().unwrap().consecutive_failures, 1);
}

#[test]
#[serial(embassy_mock_driver)]
fn the_deadline_ends_a_call_whose_next_wait_would_pass_it() {
    fresh();
    const TIGHT: CallSettings = match CallSettings::builder()
        .backoff(no_jitter_backoff())
        .deadline(Some(Duration::from_millis(150)))
        .build()
    {
        Ok(s) => s,
        Err(_) => panic!(),
    };
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("radio"));
    let policy = Policy::new(&breaker, TIGHT);
    // Attempt at 0, wait 100 ms, attempt at 100 ms; the 200 ms wait would pass the deadline.
    let (r, took) = run_ms(policy.call(fails));
    assert_eq!(r, Err(CallError::DeadlineExceeded { last: Some("nack") }));
    assert_eq!(took, ms(100));
}

#[test]
#[serial(embassy_mock_driver)]
fn the_classifier_decides_what_counts_against_the_sensor() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, RETRYING);
    let attempts = Cell::new(0);
    // A bad register address is our bug: permanent, never retried, never counted.
    let options = CallOptions::new().classify(|r: &Result<u16, &str>| match r {
        Ok(_) => Outcome::Success,
        Err("bad register") => Outcome::Permanent,
        Err(_) => Outcome::Transient,
    });
    let (r, _) = run_ms(policy.call_with(options, |_| {
        attempts.set(attempts.get() + 1);
        async { Err::<u16, _>("bad register") }
    }));
    assert_eq!(r, Err(CallError::Failed("bad register")));
    assert_eq!(attempts.get(), 1);
    assert_eq!(breaker.snapshot().unwrap().consecutive_failures, 0);
}

// ---------------------------------------------------------------------------------------------
// Statics, sharing, listeners

const STATIC_SETTINGS: BreakerSettings = match BreakerSettings::consecutive_only("static", 2) {
    Ok(s) => s,
    Err(_) => panic!(),
};
static STATIC_BREAKER: Breaker<CriticalSectionRawMutex> = Breaker::new(STATIC_SETTINGS);
static STATIC_BUDGET: Budget<CriticalSectionRawMutex> =
    Budget::new(BudgetSettings::defaults("static"));
static STATE_SEEN: std::sync::Mutex<Vec<State>> = std::sync::Mutex::new(Vec::new());

/// A listener that reads the breaker that produced the event: events are delivered after the
/// lock is released, so this neither deadlocks nor finds the breaker borrowed.
fn read_back(e: &Event<'_>) {
    if let Event::StateChanged { .. } = e {
        STATE_SEEN.lock().unwrap().push(STATIC_BREAKER.state());
    }
}

static STATIC_POLICY: Policy<'static, CriticalSectionRawMutex, fn(&Event<'_>)> =
    Policy::new(&STATIC_BREAKER, ONE_SHOT)
        .with_budget(&STATIC_BUDGET)
        .with_listener(read_back);

#[test]
#[serial(embassy_mock_driver)]
fn a_static_policy_runs_and_its_listener_may_read_the_breaker() {
    fresh();
    STATIC_POLICY.reset();
    STATE_SEEN.lock().unwrap().clear();
    for _ in 0..2 {
        let (r, _) = run_ms(STATIC_POLICY.call(fails));
        assert_eq!(r, Err(CallError::Failed("nack")));
    }
    assert_eq!(*STATE_SEEN.lock().unwrap(), [State::Open]);
    STATIC_POLICY.isolate();
    assert_eq!(STATIC_BREAKER.state(), State::Isolated);
    STATIC_POLICY.reset();
    assert_eq!(STATIC_BREAKER.state(), State::Closed);
    assert_eq!(
        *STATE_SEEN.lock().unwrap(),
        [State::Open, State::Isolated, State::Closed]
    );
}

#[test]
fn shared_objects_and_the_call_future_can_cross_tasks_with_a_critical_section_mutex() {
    fn is_sync<T: Sync + Send>(_: &T) {}
    fn is_send<T: Send>(_: &T) {}
    is_sync(&STATIC_BREAKER);
    is_sync(&STATIC_BUDGET);
    is_sync(&STATIC_POLICY);
    let call = STATIC_POLICY.call(fails);
    is_send(&call);
}

#[test]
fn a_budget_keeps_its_name_in_its_settings_only() {
    assert_eq!(STATIC_BUDGET.name().as_str(), "static");
    // The core budget behind the mutex and nothing more: no copy of the name beside it.
    let core = core::mem::size_of::<stormguard_core::Budget>();
    let shared = core::mem::size_of::<Budget<CriticalSectionRawMutex>>();
    assert!(
        shared < core + core::mem::size_of::<stormguard_core::Name>(),
        "{shared} B"
    );
}

#[test]
#[serial(embassy_mock_driver)]
fn tasks_interleaving_on_one_breaker_see_one_state() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT);
    // Three tasks each read a slow, failing sensor; their attempts overlap in time.
    let slow_fail = |_| async {
        Timer::after(ms(10)).await;
        Err::<u16, &str>("nack")
    };
    let mut a = pin!(policy.call(slow_fail));
    let mut b = pin!(policy.call(slow_fail));
    let mut c = pin!(policy.call(slow_fail));
    for f in [
        a.as_mut().poll_pending(),
        b.as_mut().poll_pending(),
        c.as_mut().poll_pending(),
    ] {
        assert!(f);
    }
    advance(ms(10));
    assert_eq!(
        poll(a.as_mut()),
        Poll::Ready(Err(CallError::Failed("nack")))
    );
    assert_eq!(
        poll(b.as_mut()),
        Poll::Ready(Err(CallError::Failed("nack")))
    );
    assert_eq!(
        poll(c.as_mut()),
        Poll::Ready(Err(CallError::Failed("nack")))
    );
    assert_eq!(breaker.state(), State::Open);
}

trait PollPending {
    fn poll_pending(self) -> bool;
}

impl<F: Future> PollPending for Pin<&mut F> {
    fn poll_pending(self) -> bool {
        poll(self).is_pending()
    }
}

/// A driver that needs `&mut self` for a transaction, like an I2C bus.
struct Bus {
    transactions: u32,
}

impl Bus {
    async fn read(&mut self, attempt: u32) -> Result<u32, &'static str> {
        self.transactions += 1;
        Timer::after(ms(1)).await;
        if attempt < 2 {
            Err("nack")
        } else {
            Ok(self.transactions)
        }
    }
}

#[test]
#[serial(embassy_mock_driver)]
fn an_async_closure_may_borrow_a_driver_mutably_across_attempts() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("bus"));
    let policy = Policy::new(&breaker, RETRYING);
    let mut bus = Bus { transactions: 0 };
    let (r, _) = run_ms(policy.call(async |attempt| bus.read(attempt).await));
    assert_eq!(r, Ok(2));
    assert_eq!(bus.transactions, 2);
}

// ---------------------------------------------------------------------------------------------
// The three core breakers, and seeds

static SENSOR_STATIC: BreakerSettings = SENSOR;
static DEFAULTS_STATIC: BreakerSettings = BreakerSettings::defaults("radio");

/// A breaker's whole life through a policy: three failures open it, a call is refused, after
/// the break two probes close it. Returns the events, each with the name it carried.
fn lifecycle<B: CoreBreaker>(breaker: &Breaker<NoopRawMutex, B>) -> Vec<String> {
    let log = RefCell::new(Vec::new());
    let policy = Policy::new(breaker, ONE_SHOT).with_listener(|e: &Event<'_>| {
        if !matches!(e, Event::Attempt { .. }) {
            log.borrow_mut()
                .push(format!("{}: {}", e.name().as_str(), e.kind()));
        }
    });
    for _ in 0..3 {
        assert_eq!(run_ms(policy.call(fails)).0, Err(CallError::Failed("nack")));
    }
    assert_eq!(breaker.state(), State::Open);
    assert!(matches!(
        run_ms(policy.call(answers)).0,
        Err(CallError::Rejected { .. })
    ));
    advance(ms(1_000));
    assert_eq!(breaker.state(), State::HalfOpen);
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
    assert_eq!(breaker.state(), State::Closed);
    log.take()
}

/// [`SENSOR`] as a type.
struct SensorSettings;
impl ConstSettings for SensorSettings {
    const SETTINGS: BreakerSettings = SENSOR;
}

#[test]
#[serial(embassy_mock_driver)]
fn the_lean_the_static_the_fixed_and_the_owning_breakers_run_the_same_rules() {
    fresh();
    let lean = Breaker::<NoopRawMutex, LeanBreaker>::lean(&SENSOR_STATIC).unwrap();
    let lean_events = lifecycle(&lean);
    fresh();
    let from_static = Breaker::<NoopRawMutex, _>::from_static(&SENSOR_STATIC);
    let static_events = lifecycle(&from_static);
    fresh();
    let owning = Breaker::<NoopRawMutex>::new(SENSOR);
    let owning_events = lifecycle(&owning);
    fresh();
    let fixed = Breaker::<NoopRawMutex, stormguard_core::Breaker<Fixed<SensorSettings>>>::fixed();
    let fixed_events = lifecycle(&fixed);
    assert_eq!(
        lean_events,
        [
            "sensor: state_changed",
            "sensor: rejected",
            "sensor: state_changed",
            "sensor: probe_started",
            "sensor: probe_started",
            "sensor: state_changed"
        ]
    );
    assert_eq!(static_events, lean_events);
    assert_eq!(owning_events, lean_events);
    assert_eq!(fixed_events, lean_events);
    assert_eq!(fixed.settings(), SENSOR);
    assert_eq!(lean.name().as_str(), "sensor");
    assert_eq!(lean.settings(), SENSOR);
    assert_eq!(from_static.settings(), SENSOR);
}

#[test]
fn a_lean_breaker_refuses_settings_that_need_statistics() {
    let refused = Breaker::<NoopRawMutex, LeanBreaker>::lean(&DEFAULTS_STATIC).err();
    assert_eq!(
        refused,
        Some(SettingsError {
            field: Field::FailureMultiple,
            bound: Bound::UnsetWithoutStatistics
        })
    );
}

static LEAN_STATIC: Breaker<CriticalSectionRawMutex, LeanBreaker> =
    match Breaker::lean(&SENSOR_STATIC) {
        Ok(b) => b,
        Err(_) => panic!(),
    };
static LEAN_SEEN: std::sync::Mutex<Vec<State>> = std::sync::Mutex::new(Vec::new());

fn read_back_lean(e: &Event<'_>) {
    if let Event::StateChanged { .. } = e {
        LEAN_SEEN.lock().unwrap().push(LEAN_STATIC.state());
    }
}

static LEAN_POLICY: Policy<'static, CriticalSectionRawMutex, fn(&Event<'_>), LeanBreaker> =
    Policy::new(&LEAN_STATIC, ONE_SHOT)
        .with_budget(&STATIC_BUDGET)
        .with_listener(read_back_lean);

#[test]
#[serial(embassy_mock_driver)]
fn a_static_lean_policy_is_shared_and_its_listener_may_read_the_breaker() {
    fn is_sync<T: Sync + Send>(_: &T) {}
    fn is_send<T: Send>(_: &T) {}
    fresh();
    LEAN_POLICY.reset();
    LEAN_SEEN.lock().unwrap().clear();
    for _ in 0..3 {
        assert_eq!(
            run_ms(LEAN_POLICY.call(fails)).0,
            Err(CallError::Failed("nack"))
        );
    }
    LEAN_POLICY.isolate();
    LEAN_POLICY.reset();
    assert_eq!(
        *LEAN_SEEN.lock().unwrap(),
        [State::Open, State::Isolated, State::Closed]
    );
    is_sync(&LEAN_STATIC);
    is_sync(&LEAN_POLICY);
    let call = LEAN_POLICY.call(fails);
    is_send(&call);
}

/// The wait before the first retry of a failing call through `policy` (full jitter).
fn first_wait<B: CoreBreaker>(policy: &Policy<'_, NoopRawMutex, NoListener, B>) -> EDuration {
    let starts = RefCell::new(Vec::new());
    let t0 = now();
    let _ = run(
        policy.call(|attempt| {
            starts.borrow_mut().push(now() - t0);
            async move {
                if attempt < 2 {
                    Err("nack")
                } else {
                    Ok(attempt)
                }
            }
        }),
        EDuration::from_ticks(1),
    );
    starts.take()[1]
}

#[test]
#[serial(embassy_mock_driver)]
fn a_policy_seed_reseeds_every_calls_backoff_jitter() {
    // CallSettings::DEFAULT: full jitter over a 100 ms first wait.
    let waits = |seed: Option<u64>, set_later: bool| {
        fresh();
        let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("radio"));
        let mut policy = Policy::new(&breaker, CallSettings::DEFAULT);
        if let Some(seed) = seed {
            if set_later {
                policy.set_seed(seed);
            } else {
                policy = policy.with_seed(seed);
            }
        }
        [first_wait(&policy), first_wait(&policy)]
    };
    let unseeded = waits(None, false);
    let a = waits(Some(1), false);
    let b = waits(Some(2), false);
    assert_eq!(waits(Some(1), true), a, "set_seed seeds like with_seed");
    assert_eq!(
        waits(Some(1), false),
        a,
        "a seed gives the same waits again"
    );
    assert_ne!(a, b, "two devices' seeds give different waits");
    assert_ne!(a, unseeded);
    for w in a.into_iter().chain(b) {
        assert!(w <= ms(100), "{w:?} is within the full-jitter range");
    }
}

#[test]
#[serial(embassy_mock_driver)]
fn a_breaker_seed_set_in_place_reseeds_its_break_jitter() {
    // The defaults jitter the break; only the failure count matters here.
    let opened_for = |seed: u64| {
        fresh();
        let breaker = Breaker::<NoopRawMutex, LeanBreaker>::lean(&JITTERED).unwrap();
        breaker.set_seed(seed);
        let policy = Policy::new(&breaker, ONE_SHOT);
        for _ in 0..3 {
            assert_eq!(run_ms(policy.call(fails)).0, Err(CallError::Failed("nack")));
        }
        breaker.snapshot().unwrap().break_duration.unwrap()
    };
    assert_eq!(opened_for(7), opened_for(7));
    assert_ne!(opened_for(7), opened_for(8));
}

static JITTERED: BreakerSettings = match BreakerSettings::consecutive_only("jittered", 3) {
    Ok(s) => s,
    Err(_) => panic!(),
};

/// An operation that fails its first attempt and then answers `value`.
fn fails_once(
    tries: &Cell<u32>,
    value: u16,
) -> impl AsyncFnMut(u32) -> Result<u16, &'static str> + '_ {
    async move |_| {
        tries.set(tries.get() + 1);
        if tries.get() > 1 {
            Ok(value)
        } else {
            Err("nack")
        }
    }
}

#[test]
#[serial(embassy_mock_driver)]
fn calls_begun_on_the_same_tick_draw_different_jitter() {
    fresh();
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    // Full jitter (the default backoff), a fixed device seed: only the salt tells them apart.
    let policy = Policy::new(&breaker, CallSettings::DEFAULT)
        .with_seed(7)
        .with_listener(|e: &Event<'_>| log.push(e));
    let (a, b) = (Cell::new(0), Cell::new(0));
    let mut call_a = pin!(policy.call(fails_once(&a, 1)));
    let mut call_b = pin!(policy.call(fails_once(&b, 2)));
    // Both begin, fail and schedule their retry on the same tick.
    assert!(poll(call_a.as_mut()).is_pending());
    assert!(poll(call_b.as_mut()).is_pending());
    let retries = log.take();
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(
        retries.iter().all(|r| r.starts_with("retry #2 after")),
        "{retries:?}"
    );
    assert_ne!(retries[0], retries[1], "the two calls would retry in step");
    assert_eq!(run_ms(call_a).0, Ok(1));
    assert_eq!(run_ms(call_b).0, Ok(2));
}

#[test]
#[serial(embassy_mock_driver)]
fn a_call_whose_cancellation_already_happened_runs_nothing() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(SENSOR);
    let policy = Policy::new(&breaker, ONE_SHOT);
    let runs = Cell::new(0);
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    stop.signal(());
    let options = CallOptions::new().cancel_on(stop.wait());
    let mut call = pin!(policy.call_with(options, async |_| {
        runs.set(runs.get() + 1);
        Err::<u32, _>("boom")
    }));
    assert_eq!(poll(call.as_mut()), Poll::Ready(Err(CallError::Cancelled)));
    assert_eq!(runs.get(), 0, "the operation never ran");
    assert_eq!(breaker.state(), State::Closed);
}

// ---------------------------------------------------------------------------------------------
// Drain

#[test]
#[serial(embassy_mock_driver)]
fn a_drain_begun_during_an_attempt_lets_it_finish_and_starts_no_retry() {
    static DRAIN: stormguard_embassy::Drain = stormguard_embassy::Drain::new();
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("radio"));
    let policy = Policy::new(&breaker, RETRYING);
    let attempts = Cell::new(0);
    let (r, took) = run(
        policy.call_with(CallOptions::new().drain_on(&DRAIN), |_| {
            attempts.set(attempts.get() + 1);
            async {
                Timer::after(ms(40)).await;
                DRAIN.begin(); // the device is told to power down while the attempt runs
                Err::<u32, _>("nack")
            }
        }),
        EDuration::from_ticks(100),
    );
    assert_eq!(r, Err(CallError::Drained { last: Some("nack") }));
    assert_eq!(attempts.get(), 1);
    assert_eq!(took, ms(40), "no backoff wait is served");
}

#[test]
#[serial(embassy_mock_driver)]
fn a_call_begun_after_the_drain_runs_nothing() {
    static DRAIN: stormguard_embassy::Drain =
        stormguard_embassy::Drain::with_grace(Duration::from_secs(5));
    fresh();
    DRAIN.begin();
    assert_eq!(DRAIN.grace(), Duration::from_secs(5));
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("radio"));
    let policy = Policy::new(&breaker, RETRYING);
    let attempts = Cell::new(0);
    let (r, took) = run_ms(policy.call_with(CallOptions::new().drain_on(&DRAIN), |_| {
        attempts.set(attempts.get() + 1);
        async { Ok::<u32, ()>(1) }
    }));
    assert_eq!(r, Err(CallError::Drained { last: None }));
    assert_eq!((attempts.get(), took), (0, ms(0)));
}
