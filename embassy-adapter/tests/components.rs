//! The components of the second library on embassy's mock time driver: the measured ceiling and
//! hedging through the breaker handle, the rate-limit and bulkhead steps, the keyed policy, the
//! subscription helper and explain. Deterministic time, futures polled by hand with a no-op
//! waker; every test resets the one global mock driver first, and they run one at a time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use core::future::{pending, Future};
use core::pin::pin;
use core::task::Poll;
use std::cell::{Cell, RefCell};
use std::string::{String, ToString};
use std::vec::Vec;

use embassy_sync::blocking_mutex::raw::NoopRawMutex;
use embassy_sync::signal::Signal;
use embassy_time::{Duration as EDuration, Timer};
use serial_test::serial;
use stormguard_core::{
    call::SharedHedgeShare, limits::BulkheadSettings, limits::RateLimitSettings,
    limits::RateLimiter, limits::SharedRateLimiter, limits::SlidingWindowLimiter,
    limits::SlidingWindowSettings, limits::WindowLimitSettings, limits::WindowLimiter,
    part::Admission, part::HedgeSuppressed, part::Learned, policy::ChaosSettings, policy::Explain,
    policy::SubscriptionRetry, policy::SubscriptionStatus, Backoff, BreakerSettings,
    BudgetSettings, CallSettings, Duration, Event, Jitter, LeanBreaker, Ratio, RefusalReason,
    State, GUARD_PAUSE,
};
use stormguard_embassy::time::to_embassy_duration;
use stormguard_embassy::{
    keep_subscribed, Breaker, Budget, Bulkhead, CallError, CallOptions, Chaos, EmbassyClock,
    KeyedBreaker, KeyedPolicy, Policy, RateLimit,
};

// ---------------------------------------------------------------------------------------------
// Harness

mod support;
use support::{advance, fresh, ms, now, poll, run_both, run_ms};

/// Events as short strings, in order.
#[derive(Default)]
struct Log(RefCell<Vec<String>>);

impl Log {
    fn push(&self, e: &Event<'_>) {
        let s = match e {
            Event::StateChanged { from, to, .. } => format!("{from}->{to}"),
            Event::Rejected { reason, delay, .. } => format!("rejected {reason} {delay}"),
            Event::Retry { attempt, .. } => format!("retry #{attempt}"),
            Event::Hedged { name, attempt } => format!("hedged {name} #{attempt}"),
            Event::Attempt { attempt, end, .. } => format!("attempt #{attempt}: {end}"),
            other => other.kind().to_string(),
        };
        self.0.borrow_mut().push(s);
    }
    fn take(&self) -> Vec<String> {
        self.0.take()
    }
}

const fn no_jitter() -> Backoff {
    match Backoff::builder().jitter(Jitter::None).build() {
        Ok(b) => b,
        Err(_) => panic!(),
    }
}

/// One attempt per call, a long deadline.
const ONE_SHOT: CallSettings = match CallSettings::builder()
    .max_attempts(1)
    .deadline(Some(Duration::from_secs(600)))
    .build()
{
    Ok(s) => s,
    Err(_) => panic!(),
};

/// Hedging on, 3 attempts, no jitter, the ceiling off (so a hung attempt runs to its timeout).
const HEDGED: CallSettings = match CallSettings::builder()
    .hedging(true)
    .measured_ceiling(false)
    .backoff(no_jitter())
    .build()
{
    Ok(s) => s,
    Err(_) => panic!(),
};

/// Teaches `policy`'s breaker that healthy calls take `latency`, with `n` calls.
/// What `breaker` has learned, as the call driver asks it.
fn learned(
    breaker: &Breaker<NoopRawMutex>,
    at: stormguard_core::Instant,
    ask: Learned,
) -> Result<Duration, HedgeSuppressed> {
    let name = breaker.name();
    breaker.part(&name).learned(at, ask)
}

fn warm<P: Fn() -> F, F: Future>(n: u32, call: P) {
    for _ in 0..n {
        let _ = run_ms(call());
    }
}

async fn takes(latency: EDuration) -> Result<u16, &'static str> {
    Timer::after(latency).await;
    Ok(215)
}

async fn fails(_: u32) -> Result<u16, &'static str> {
    Err("nack")
}

async fn answers(_: u32) -> Result<u16, &'static str> {
    Ok(215)
}

/// Counts the futures dropped before they finished.
struct DropCount<'a>(&'a Cell<u32>);

impl Drop for DropCount<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

// ---------------------------------------------------------------------------------------------
// The breaker's part forwards the measured ceiling and the hedge delay

#[test]
#[serial(embassy_mock_driver)]
fn the_breaker_part_forwards_the_measured_ceiling_and_a_hung_attempt_is_cut_there() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("gateway"));
    let policy = Policy::new(&breaker, ONE_SHOT);
    let at = EmbassyClock::new().now();
    assert_eq!(
        learned(&breaker, at, Learned::AttemptCeiling).ok(),
        None,
        "cold"
    );
    assert_eq!(
        learned(&breaker, at, Learned::HedgeAfter),
        Err(HedgeSuppressed::NoBaseline)
    );
    warm(30, || policy.call(async |_| takes(ms(20)).await));
    let at = EmbassyClock::new().now();
    let ceiling = learned(&breaker, at, Learned::AttemptCeiling).expect("warm");
    // 3x the p95 of 20 ms calls (which reads at most 12.5% above).
    assert!(
        ceiling >= Duration::from_millis(60) && ceiling <= Duration::from_micros(67_500),
        "{ceiling}"
    );
    let p95 = learned(&breaker, at, Learned::HedgeAfter).expect("closed and warm");
    assert!(p95 >= Duration::from_millis(20) && p95 <= Duration::from_micros(22_500));

    // A hung attempt is cut at the ceiling, not at the configured 10 s.
    let (r, took) = run_ms(policy.call(async |_| pending::<Result<u16, &str>>().await));
    assert_eq!(r, Err(CallError::TimedOut { last: None }));
    assert!(took >= ms(60) && took <= ms(68), "{took:?}");
}

// ---------------------------------------------------------------------------------------------
// Hedging

#[test]
#[serial(embassy_mock_driver)]
fn a_slow_attempt_is_hedged_after_the_p95_and_the_loser_is_dropped_and_not_counted() {
    fresh();
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("gateway"));
    let budget = Budget::<NoopRawMutex>::new(BudgetSettings::defaults("gateway"));
    let policy = Policy::new(&breaker, HEDGED)
        .with_budget(&budget)
        .with_listener(|e: &Event<'_>| log.push(e));
    warm(40, || policy.call(async |_| takes(ms(20)).await));
    log.take();
    let p95 = learned(&breaker, EmbassyClock::new().now(), Learned::HedgeAfter).unwrap();
    let before = budget.available();

    let dropped = Cell::new(0);
    let calls = Cell::new(0);
    let (r, took) = run_ms(policy.call_hedged(|attempt| {
        calls.set(calls.get() + 1);
        let dropped = &dropped;
        async move {
            let _count = DropCount(dropped);
            if attempt == 1 {
                // The first attempt hangs (a lost frame).
                pending::<()>().await;
            }
            Timer::after(ms(5)).await;
            Ok::<u16, &str>(attempt as u16)
        }
    }));
    assert_eq!(r, Ok(2), "the hedge won");
    assert_eq!(calls.get(), 2);
    // The hedge went out at the p95 (rounded up to the next 1 ms step) and answered 5 ms later.
    let p95 = EDuration::from_micros(p95.as_micros());
    assert!(took >= p95 + ms(5) && took <= p95 + ms(7), "{took:?}");
    assert_eq!(
        log.take(),
        [
            "hedged gateway #2",
            "attempt #2: success after 5ms, a hedge",
            "attempt #1: cancelled after 26ms"
        ]
    );
    // Both futures are gone: the winner finished, the loser was dropped.
    assert_eq!(dropped.get(), 2);
    // The hedge was funded by the budget; the cancelled loser counted as no failure.
    assert_eq!(budget.available(), before - 1);
    let snap = breaker.snapshot().unwrap();
    assert_eq!(snap.consecutive_failures, 0);
    assert_eq!(snap.state, State::Closed);
}

#[test]
#[serial(embassy_mock_driver)]
fn the_win_rate_loop_halves_the_hedged_share_after_losing_hedges_and_a_win_restores_it() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("gateway"));
    static SHARE: SharedHedgeShare = SharedHedgeShare::new();
    let attempts = Cell::new(0u32);
    let policy = Policy::new(&breaker, HEDGED).with_listener(|e: &Event<'_>| {
        if matches!(e, Event::Attempt { .. }) {
            attempts.set(attempts.get() + 1);
        }
    });
    // 200 calls of 20 ms: the handful of slower ones below leave the p95 where it is.
    warm(200, || policy.call(async |_| takes(ms(20)).await));
    assert_eq!(SHARE.share_per_1024(), 1024);
    // `first` is how long the first attempt takes, `hedge` how long a hedge does; the attempts
    // the call made.
    let call = |first: u64, hedge: u64| {
        let before = attempts.get();
        let options = CallOptions::new().hedge_win_rate(&SHARE);
        let (r, _) = run_ms(policy.call_hedged_with(options, |attempt| async move {
            Timer::after(ms(if attempt == 1 { first } else { hedge })).await;
            Ok::<u32, &str>(attempt)
        }));
        (r, attempts.get() - before)
    };
    // The hedge launches at the p95 (about 21 ms) and the first attempt answers at 26 ms: four
    // losing hedges halve the share.
    for _ in 0..4 {
        assert_eq!(call(26, 100), (Ok(1), 2));
    }
    assert_eq!(SHARE.share_per_1024(), 512);
    // Every other call now: this one runs alone, though it is slow enough to hedge.
    assert_eq!(call(40, 5), (Ok(1), 1));
    // The next is hedged, and its hedge wins: the share doubles back.
    assert_eq!(call(40, 5), (Ok(2), 2));
    assert_eq!(SHARE.share_per_1024(), 1024);
}

#[test]
#[serial(embassy_mock_driver)]
fn a_drain_begun_before_the_hedge_is_due_launches_none_and_cuts_the_attempt_at_the_grace() {
    static DRAIN: stormguard_embassy::Drain =
        stormguard_embassy::Drain::with_grace(Duration::from_millis(5));
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("gateway"));
    let policy = Policy::new(&breaker, HEDGED);
    warm(40, || policy.call(async |_| takes(ms(20)).await));
    let p95 = learned(&breaker, EmbassyClock::new().now(), Learned::HedgeAfter).unwrap();
    let calls = Cell::new(0);
    let (r, took) = run_ms(
        policy.call_hedged_with(CallOptions::new().drain_on(&DRAIN), |_| {
            calls.set(calls.get() + 1);
            async {
                Timer::after(ms(2)).await;
                DRAIN.begin(); // the device is told to power down while the attempt runs
                Timer::after(ms(100)).await;
                Ok::<u16, &str>(1)
            }
        }),
    );
    // The drain is read when the hedge falls due: no hedge, and the attempt runs on for the
    // grace from then, is cut, and nothing follows it.
    assert_eq!(r, Err(CallError::Drained { last: None }));
    assert_eq!(calls.get(), 1);
    let p95 = EDuration::from_micros(p95.as_micros());
    assert!(took >= p95 + ms(5) && took <= p95 + ms(7), "{took:?}");
}

#[test]
#[serial(embassy_mock_driver)]
fn an_attempt_faster_than_the_p95_is_never_hedged() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("gateway"));
    let policy = Policy::new(&breaker, HEDGED);
    warm(40, || policy.call(async |_| takes(ms(20)).await));
    let calls = Cell::new(0);
    let (r, took) = run_ms(policy.call_hedged(|_| {
        calls.set(calls.get() + 1);
        takes(ms(10))
    }));
    assert_eq!((r, took), (Ok(215), ms(10)));
    assert_eq!(calls.get(), 1);
}

#[test]
#[serial(embassy_mock_driver)]
fn hedging_is_suppressed_while_the_breaker_is_cold_and_off_through_call() {
    fresh();
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("gateway"));
    let policy = Policy::new(&breaker, HEDGED).with_listener(|e: &Event<'_>| log.push(e));
    // Cold: no baseline, no hedge however slow the attempt.
    let calls = Cell::new(0);
    let (r, took) = run_ms(policy.call_hedged(|_| {
        calls.set(calls.get() + 1);
        takes(ms(500))
    }));
    assert_eq!((r, took, calls.get()), (Ok(215), ms(500), 1));
    assert_eq!(log.take(), ["attempt #1: success after 500ms"], "no hedge");

    // Warm, but through `call` (one attempt at a time): no hedge either.
    warm(40, || policy.call(async |_| takes(ms(20)).await));
    log.take();
    let calls = Cell::new(0);
    let (r, took) = run_ms(policy.call(async |_| {
        calls.set(calls.get() + 1);
        takes(ms(200)).await
    }));
    assert_eq!((r, took, calls.get()), (Ok(215), ms(200), 1));
    assert_eq!(log.take(), ["attempt #1: success after 200ms"], "no hedge");
}

#[test]
#[serial(embassy_mock_driver)]
fn a_failure_of_one_hedged_attempt_waits_for_the_other() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("gateway"));
    let policy = Policy::new(&breaker, HEDGED);
    warm(40, || policy.call(async |_| takes(ms(20)).await));
    let (r, took) = run_ms(policy.call_hedged(|attempt| async move {
        if attempt == 1 {
            // Fails after the hedge is out.
            Timer::after(ms(30)).await;
            Err("nack")
        } else {
            Timer::after(ms(40)).await;
            Ok(attempt as u16)
        }
    }));
    assert_eq!(r, Ok(2));
    // The hedge started at the p95 (20-23 ms) and took 40 ms.
    assert!(took >= ms(60) && took <= ms(63), "{took:?}");
    assert_eq!(breaker.snapshot().unwrap().consecutive_failures, 0);
}

#[test]
#[serial(embassy_mock_driver)]
fn cancelling_a_hedged_call_drops_both_attempts_at_once() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("gateway"));
    let policy = Policy::new(&breaker, HEDGED);
    warm(40, || policy.call(async |_| takes(ms(20)).await));
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    let dropped = Cell::new(0);
    let calls = Cell::new(0);
    let options = CallOptions::new().cancel_on(stop.wait());
    let mut call = pin!(policy.call_hedged_with(options, |_| {
        calls.set(calls.get() + 1);
        let dropped = &dropped;
        async move {
            let _count = DropCount(dropped);
            pending::<Result<u16, &str>>().await
        }
    }));
    for _ in 0..50 {
        assert!(poll(call.as_mut()).is_pending());
        advance(ms(1));
    }
    assert_eq!(calls.get(), 2, "hedged by now");
    stop.signal(());
    assert_eq!(poll(call.as_mut()), Poll::Ready(Err(CallError::Cancelled)));
    assert_eq!(dropped.get(), 2);
    let snap = breaker.snapshot().unwrap();
    assert_eq!(snap.consecutive_failures, 0, "cancellation never counts");
}

// ---------------------------------------------------------------------------------------------
// Rate limit

const ONE_PER_SECOND: RateLimitSettings = match RateLimitSettings::per_second("uplink", 1) {
    Ok(s) => s,
    Err(_) => panic!(),
};

#[test]
#[serial(embassy_mock_driver)]
fn a_rate_limited_call_is_a_guarded_rejection_with_the_time_until_the_next_cell() {
    fresh();
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("uplink"));
    let limit = RateLimit::<NoopRawMutex, _>::new(RateLimiter::new(ONE_PER_SECOND));
    let policy = Policy::new(&breaker, ONE_SHOT)
        .with_rate_limit(limit.part())
        .with_listener(|e: &Event<'_>| log.push(e));
    assert_eq!(run_ms(policy.call(answers)), (Ok(215), ms(0)));
    let ran = Cell::new(0);
    let (r, took) = run_ms(policy.call(async |_| {
        ran.set(ran.get() + 1);
        Ok::<u16, &str>(1)
    }));
    let Err(CallError::Rejected { rejection, last }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::RateLimited);
    assert_eq!(rejection.pause, GUARD_PAUSE);
    assert_eq!(took, ms(100), "served the guarded pause");
    // The next cell is due 1 s after the first; counted from the end of the pause.
    assert_eq!(rejection.retry_after, Duration::from_millis(900));
    assert_eq!(last, None);
    assert_eq!(ran.get(), 0);
    assert_eq!(
        log.take(),
        [
            "attempt #1: success after 0s",
            "attempt #1: refused locally (rate_limited), self-imposed",
            "rejected rate_limited 100ms"
        ]
    );
    // Once the cell is back, calls pass again.
    advance(ms(900));
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
}

#[test]
#[serial(embassy_mock_driver)]
fn every_attempt_takes_a_cell_and_an_open_breaker_spends_none() {
    fresh();
    let breaker =
        Breaker::<NoopRawMutex>::new(BreakerSettings::consecutive_only("uplink", 1).unwrap());
    // The core's shared limiter works the same (a host build: it needs 64-bit CAS).
    let limit = SharedRateLimiter::new(
        RateLimitSettings::builder("uplink")
            .rate(1, Duration::from_secs(10))
            .burst(10)
            .build()
            .unwrap(),
    );
    let retrying = CallSettings::builder()
        .backoff(no_jitter())
        .build()
        .unwrap();
    let policy = Policy::new(&breaker, retrying).with_rate_limit(&limit);
    let at = || EmbassyClock::new().now();
    // One failure opens the breaker: the retry is refused by the breaker, not the limiter.
    let (r, _) = run_ms(policy.call(fails));
    let Err(CallError::Rejected { rejection, last }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::BreakerOpen);
    assert_eq!(last, Some("nack"));
    assert_eq!(limit.available(at()), 9, "one attempt, one cell");
    for _ in 0..3 {
        let (r, _) = run_ms(policy.call(answers));
        assert!(matches!(r, Err(CallError::Rejected { .. })));
    }
    assert_eq!(limit.available(at()), 9, "refused calls took no cell");
}

#[test]
#[serial(embassy_mock_driver)]
fn a_window_limiter_refuses_for_its_cooldown() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("stream"));
    let window = WindowLimitSettings::builder("stream")
        .events(2)
        .window(Duration::from_secs(60))
        .cooldown(Duration::from_secs(30))
        .build()
        .unwrap();
    let limit = RateLimit::<NoopRawMutex, _>::new(WindowLimiter::new(window));
    let policy = Policy::new(&breaker, ONE_SHOT).with_rate_limit(limit.part());
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
    let (r, took) = run_ms(policy.call(answers));
    assert_eq!(took, ms(100));
    assert_eq!(
        r.unwrap_err().retry_after().map(to_embassy_duration),
        Some(EDuration::from_secs(30) - ms(100))
    );
    assert_eq!(limit.available(), 0);
}

#[test]
#[serial(embassy_mock_driver)]
fn a_sliding_window_limiter_refuses_until_its_oldest_segment_leaves() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("uplink"));
    let sliding = SlidingWindowSettings::builder("uplink")
        .quota(2)
        .window(Duration::from_secs(8)) // 8 segments of 1 s
        .build()
        .unwrap();
    let limit = RateLimit::<NoopRawMutex, _>::new(SlidingWindowLimiter::new(sliding));
    let policy = Policy::new(&breaker, ONE_SHOT).with_rate_limit(limit.part());
    let first = EmbassyClock::new().now();
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
    let third = EmbassyClock::new().now();
    let (r, took) = run_ms(policy.call(answers));
    assert_eq!(took, ms(100));
    // The first call's segment leaves when the segment 8 s after it begins.
    let leaves = Duration::from_secs(first.as_nanos() / 1_000_000_000 + 8);
    let expected = leaves - third.since_epoch() - Duration::from_millis(100);
    assert_eq!(r.unwrap_err().retry_after(), Some(expected));
    assert_eq!(limit.available(), 0);
}

// ---------------------------------------------------------------------------------------------
// Bulkhead

fn bulkhead(max_in_flight: u32, wait: Option<(u32, Duration)>) -> BulkheadSettings {
    let b = BulkheadSettings::builder("flash").max_in_flight(max_in_flight);
    match wait {
        Some((queue, max)) => b.bounded_wait(queue, max),
        None => b,
    }
    .build()
    .unwrap()
}

#[test]
#[serial(embassy_mock_driver)]
fn a_full_bulkhead_refuses_guarded_and_frees_its_slot_when_a_call_ends() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("flash"));
    let slots = Bulkhead::<NoopRawMutex>::new(bulkhead(1, None));
    let policy = Policy::new(&breaker, ONE_SHOT).with_bulkhead(&slots);
    let ((a, a_took), (b, b_took)) = run_both(
        policy.call(async |_| takes(ms(50)).await),
        policy.call(answers),
    );
    assert_eq!((a, a_took), (Ok(215), ms(50)));
    let Err(CallError::Rejected { rejection, .. }) = b else {
        panic!("{b:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::BulkheadFull);
    assert_eq!((rejection.pause, b_took), (GUARD_PAUSE, ms(100)));
    let snap = slots.snapshot().unwrap();
    assert_eq!((snap.in_flight, snap.queued), (0, 0));
    assert_eq!(run_ms(policy.call(answers)).0, Ok(215));
}

#[test]
#[serial(embassy_mock_driver)]
fn with_a_bounded_wait_a_call_waits_for_the_slot_and_runs_when_it_frees() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("flash"));
    let slots = Bulkhead::<NoopRawMutex>::new(bulkhead(1, Some((2, Duration::from_millis(50)))));
    let policy = Policy::new(&breaker, ONE_SHOT).with_bulkhead(&slots);
    let started = Cell::new(None);
    let ((a, a_took), (b, b_took)) = run_both(
        policy.call(async |_| takes(ms(30)).await),
        policy.call(async |_| {
            started.set(Some(now()));
            takes(ms(10)).await
        }),
    );
    assert_eq!((a, a_took), (Ok(215), ms(30)));
    assert_eq!(
        (b, b_took),
        (Ok(215), ms(40)),
        "waited 30 ms, then ran 10 ms"
    );
    assert!(started.get().is_some());
    let snap = slots.snapshot().unwrap();
    assert_eq!((snap.in_flight, snap.queued), (0, 0));
}

#[test]
#[serial(embassy_mock_driver)]
fn the_wait_is_capped_by_the_max_wait_and_by_the_deadline() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("flash"));
    let slots = Bulkhead::<NoopRawMutex>::new(bulkhead(1, Some((2, Duration::from_millis(50)))));
    let policy = Policy::new(&breaker, ONE_SHOT).with_bulkhead(&slots);
    // The max wait: 50 ms, then the refusal's guarded pause.
    let ((_, _), (b, b_took)) = run_both(
        policy.call(async |_| takes(ms(500)).await),
        policy.call(answers),
    );
    let Err(CallError::Rejected { rejection, .. }) = b else {
        panic!("{b:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::BulkheadFull);
    assert_eq!(b_took, ms(150));

    // The deadline: 20 ms left, so 20 ms of waiting and no pause after it.
    let deadline = now() + ms(20);
    let ((_, _), (b, b_took)) = run_both(
        policy.call(async |_| takes(ms(500)).await),
        policy.call_with(CallOptions::new().deadline(deadline), answers),
    );
    let Err(CallError::Rejected { rejection, .. }) = b else {
        panic!("{b:?}")
    };
    assert_eq!(
        (rejection.reason, rejection.pause),
        (RefusalReason::BulkheadFull, Duration::ZERO)
    );
    assert_eq!(b_took, ms(20));
    let snap = slots.snapshot().unwrap();
    assert_eq!((snap.in_flight, snap.queued), (0, 0));
}

#[test]
#[serial(embassy_mock_driver)]
fn cancelling_a_waiting_call_ends_the_wait_at_once_and_gives_up_its_place() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("flash"));
    let slots = Bulkhead::<NoopRawMutex>::new(bulkhead(1, Some((1, Duration::from_secs(5)))));
    let policy = Policy::new(&breaker, ONE_SHOT).with_bulkhead(&slots);
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    let mut holder = pin!(policy.call(async |_| takes(ms(1000)).await));
    assert!(poll(holder.as_mut()).is_pending());
    let mut waiter = pin!(policy.call_with(CallOptions::new().cancel_on(stop.wait()), answers));
    assert!(poll(waiter.as_mut()).is_pending());
    assert_eq!(slots.snapshot().unwrap().queued, 1);
    advance(ms(10));
    assert!(poll(waiter.as_mut()).is_pending());
    stop.signal(());
    assert_eq!(
        poll(waiter.as_mut()),
        Poll::Ready(Err(CallError::Cancelled))
    );
    assert_eq!(slots.snapshot().unwrap().queued, 0, "its place given up");
    // The queue has room again.
    let mut second = pin!(policy.call(answers));
    assert!(poll(second.as_mut()).is_pending());
    assert_eq!(slots.snapshot().unwrap().queued, 1);
}

#[test]
#[serial(embassy_mock_driver)]
fn no_more_tasks_wait_than_the_bulkhead_keeps_wakers_for() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("flash"));
    let settings = bulkhead(1, Some((8, Duration::from_secs(5))));
    assert!(Bulkhead::<NoopRawMutex, 2>::fits(&settings).is_err());
    let slots = Bulkhead::<NoopRawMutex, 2>::new(settings);
    let policy = Policy::new(&breaker, ONE_SHOT).with_bulkhead(&slots);
    let mut holder = pin!(policy.call(async |_| takes(ms(1000)).await));
    assert!(poll(holder.as_mut()).is_pending());
    let mut w1 = pin!(policy.call(answers));
    let mut w2 = pin!(policy.call(answers));
    let mut w3 = pin!(policy.call(answers));
    for w in [w1.as_mut(), w2.as_mut(), w3.as_mut()] {
        assert!(poll(w).is_pending());
    }
    // Two wait; the third was refused as by a full queue and serves its guarded pause.
    assert_eq!(slots.snapshot().unwrap().queued, 2);
    advance(ms(100));
    let Poll::Ready(Err(CallError::Rejected { rejection, .. })) = poll(w3.as_mut()) else {
        panic!()
    };
    assert_eq!(rejection.reason, RefusalReason::BulkheadFull);
}

/// Three attempts with no jitter, and a budget that holds one retry and never refills (no floor,
/// nothing from successes): a retry charged to it would show.
const THREE_ATTEMPTS: CallSettings = match CallSettings::builder().backoff(no_jitter()).build() {
    Ok(s) => s,
    Err(_) => panic!(),
};
const ONE_RETRY: BudgetSettings = match BudgetSettings::builder("uplink")
    .fraction_ppm(0)
    .floor_per_second_milli(0)
    .build()
{
    Ok(s) => s,
    Err(_) => panic!(),
};

#[test]
#[serial(embassy_mock_driver)]
fn a_limiter_or_bulkhead_refusal_is_retried_uncharged_and_unseen_then_guarded_when_no_attempt_is_left(
) {
    fresh();
    // The limiter: the call waits its hint (the next cell, 1 s away), then the attempt runs.
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("uplink"));
    let budget = Budget::<NoopRawMutex>::new(ONE_RETRY);
    let limit = RateLimit::<NoopRawMutex, _>::new(RateLimiter::new(ONE_PER_SECOND));
    let policy = Policy::new(&breaker, THREE_ATTEMPTS)
        .with_rate_limit(limit.part())
        .with_budget(&budget)
        .with_listener(|e: &Event<'_>| log.push(e));
    assert_eq!(
        run_ms(policy.call(answers)),
        (Ok(215), ms(0)),
        "takes the cell"
    );
    let seen = breaker.snapshot().unwrap().window_calls;
    let ran = Cell::new(0);
    let (r, took) = run_ms(policy.call(async |attempt| {
        ran.set(ran.get() + 1);
        Ok::<u32, &str>(attempt)
    }));
    assert_eq!(
        r,
        Ok(2),
        "the refused first attempt took one of the call's three"
    );
    assert_eq!(took, ms(1000));
    assert_eq!(ran.get(), 1);
    assert_eq!(
        log.take(),
        [
            "attempt #1: success after 0s",
            "attempt #1: refused locally (rate_limited), self-imposed",
            "retry #2",
            "attempt #2: success after 0s"
        ]
    );
    assert_eq!(budget.available(), 1, "nothing charged to the budget");
    let snap = breaker.snapshot().unwrap();
    assert_eq!(
        (snap.window_calls, snap.window_failures),
        (seen + 1, 0),
        "the breaker saw the attempt that ran, not the refusal"
    );

    // The bulkhead: no hint, so the throttled curve (1 s, then 2 s); the third attempt is
    // refused too, and with no attempt left the call ends as the guarded rejection.
    let log = Log::default();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("flash"));
    let budget = Budget::<NoopRawMutex>::new(ONE_RETRY);
    let slots = Bulkhead::<NoopRawMutex>::new(bulkhead(1, None));
    let policy = Policy::new(&breaker, THREE_ATTEMPTS)
        .with_bulkhead(&slots)
        .with_budget(&budget)
        .with_listener(|e: &Event<'_>| log.push(e));
    let ran = Cell::new(0);
    let ((held, _), (r, took)) = run_both(
        policy.call(async |_| takes(ms(5_000)).await),
        policy.call(async |_| {
            ran.set(ran.get() + 1);
            Ok::<u16, &str>(1)
        }),
    );
    assert_eq!(held, Ok(215));
    let Err(CallError::Rejected { rejection, last }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::BulkheadFull);
    // Two refusals retried, the third guarded (as the core counts them).
    assert_eq!((rejection.pause, rejection.attempts), (GUARD_PAUSE, 2));
    assert_eq!((rejection.last, last), (None, None));
    assert_eq!(took, ms(3_100), "1 s, 2 s, then the guarded pause");
    assert_eq!(ran.get(), 0);
    // The slot's holder ends its own call (5 s) after this one was refused.
    assert_eq!(
        log.take(),
        [
            "attempt #1: refused locally (bulkhead_full), self-imposed",
            "retry #2",
            "attempt #2: refused locally (bulkhead_full), self-imposed",
            "retry #3",
            "attempt #3: refused locally (bulkhead_full), self-imposed",
            "rejected bulkhead_full 100ms",
            "attempt #1: success after 5s"
        ]
    );
    assert_eq!(budget.available(), 1, "nothing charged to the budget");
    let snap = breaker.snapshot().unwrap();
    assert_eq!(
        (snap.window_calls, snap.window_failures),
        (1, 0),
        "the breaker saw only the call holding the slot"
    );
    assert_eq!(slots.snapshot().unwrap().in_flight, 0);
}

// ---------------------------------------------------------------------------------------------
// Keyed scope

static I2C: BreakerSettings = match BreakerSettings::builder("i2c")
    .consecutive_failures(2)
    .failure_rate(None)
    .slow_calls(None)
    .break_duration(Duration::from_secs(10))
    .jitter(false)
    .trip_window(Duration::from_secs(30))
    .build()
{
    Ok(s) => s,
    Err(_) => panic!(),
};

#[test]
#[serial(embassy_mock_driver)]
fn each_key_has_its_own_breaker() {
    fresh();
    let log = Log::default();
    let keyed: KeyedBreaker<NoopRawMutex, u8, LeanBreaker, 4> =
        KeyedBreaker::new(LeanBreaker::new(&I2C).unwrap());
    let policy = KeyedPolicy::new(&keyed, ONE_SHOT).with_listener(|e: &Event<'_>| log.push(e));
    for _ in 0..2 {
        assert_eq!(
            run_ms(policy.call(0x49, fails)).0,
            Err(CallError::Failed("nack"))
        );
    }
    assert_eq!(keyed.state(&0x49), Some(State::Open));
    assert_eq!(
        log.take(),
        [
            "attempt #1: transient failure after 0s",
            "attempt #1: transient failure after 0s",
            "closed->open"
        ]
    );
    // 0x48 is untouched.
    assert_eq!(run_ms(policy.call(0x48, answers)).0, Ok(215));
    assert_eq!(keyed.state(&0x48), Some(State::Closed));
    let (r, took) = run_ms(policy.call(0x49, answers));
    let Err(CallError::Rejected { rejection, .. }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        (rejection.reason, took),
        (RefusalReason::BreakerOpen, ms(100))
    );
    assert_eq!(
        log.take(),
        [
            "attempt #1: success after 0s",
            "attempt #1: refused locally (breaker_open)",
            "rejected breaker_open 100ms"
        ]
    );
    assert_eq!(keyed.len(), 2);
}

#[test]
#[serial(embassy_mock_driver)]
fn a_full_table_refuses_a_new_key_guarded_then_evicts_an_idle_one_but_never_an_open_one() {
    fresh();
    let keyed: KeyedBreaker<NoopRawMutex, u8, LeanBreaker, 2> =
        KeyedBreaker::new(LeanBreaker::new(&I2C).unwrap());
    let policy = KeyedPolicy::new(&keyed, ONE_SHOT);
    for _ in 0..2 {
        let _ = run_ms(policy.call(1, fails));
    }
    assert_eq!(run_ms(policy.call(2, answers)).0, Ok(215));
    // Full, and no key idle yet: a third key is refused, guarded.
    let (r, took) = run_ms(policy.call(3, answers));
    let Err(CallError::Rejected { rejection, .. }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::KeyedFull);
    assert_eq!(took, ms(100));
    assert_eq!(keyed.state(&3), None);
    // Key 2 quiet for a trip window: idle. Key 1 stays open (its break grows on each probe
    // failure; here it simply stays open past the window).
    advance(EDuration::from_secs(31));
    assert_eq!(keyed.state(&1), Some(State::HalfOpen));
    let _ = run_ms(policy.call(1, fails)); // the probe fails: open again, for 20 s
    assert_eq!(keyed.state(&1), Some(State::Open));
    assert_eq!(run_ms(policy.call(3, answers)).0, Ok(215));
    assert_eq!(keyed.state(&2), None, "the idle key was evicted");
    assert_eq!(
        keyed.state(&1),
        Some(State::Open),
        "an open breaker is never evicted"
    );
    assert_eq!(keyed.len(), 2);
}

#[test]
#[serial(embassy_mock_driver)]
fn keys_that_failed_and_went_quiet_make_room_later_and_any_key_can_be_removed() {
    fresh();
    let keyed: KeyedBreaker<NoopRawMutex, u8, LeanBreaker, 2> =
        KeyedBreaker::new(LeanBreaker::new(&I2C).unwrap());
    let policy = KeyedPolicy::new(&keyed, ONE_SHOT);
    for key in [1, 2] {
        for _ in 0..2 {
            let _ = run_ms(policy.call(key, fails));
        }
    }
    // Both open and nobody asks for them: an hour later they are stale, and a new key gets in.
    advance(EDuration::from_secs(3600));
    assert_ne!(keyed.state(&1), Some(State::Closed));
    assert_eq!(run_ms(policy.call(3, answers)).0, Ok(215));
    assert_eq!(keyed.evict_idle(), 1);
    assert_eq!(keyed.len(), 1);
    // Removing frees the place of a key whatever its state.
    for _ in 0..2 {
        let _ = run_ms(policy.call(3, fails));
    }
    assert_eq!(keyed.state(&3), Some(State::Open));
    assert!(keyed.remove(&3));
    assert!(!keyed.remove(&3));
    assert_eq!(keyed.state(&3), None);
}

// ---------------------------------------------------------------------------------------------
// Subscription retry

/// Runs `keep_subscribed` in 100 ms steps until `stop_after` of mock time, recording when each
/// connection attempt was made (seconds, rounded down to the step) and stopping it then.
fn subscribe_for(
    stop_after: EDuration,
    retry: &mut SubscriptionRetry,
    connects: impl Fn(u32) -> bool,
    serve_for: EDuration,
) -> Vec<(u32, f64)> {
    let start = now();
    let seen = RefCell::new(Vec::new());
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    {
        let mut task = pin!(keep_subscribed(
            retry,
            async |attempt| {
                seen.borrow_mut()
                    .push((attempt, (now() - start).as_millis() as f64 / 1000.0));
                if connects(attempt) {
                    Ok(())
                } else {
                    Err(())
                }
            },
            async |()| Timer::after(serve_for).await,
            stop.wait(),
        ));
        while now() - start < stop_after {
            // Twice: a yield to the executor takes no time.
            for _ in 0..2 {
                assert!(poll(task.as_mut()).is_pending(), "runs until cancelled");
            }
            advance(ms(100));
        }
        stop.signal(());
        assert_eq!(poll(task.as_mut()), Poll::Ready(()), "cancelled at once");
    }
    seen.into_inner()
}

#[test]
#[serial(embassy_mock_driver)]
fn a_subscription_is_retried_forever_1s_doubling_capped_at_120s() {
    fresh();
    let mut retry = SubscriptionRetry::new();
    let seen = subscribe_for(EDuration::from_secs(600), &mut retry, |_| false, ms(0));
    let times: Vec<f64> = seen.iter().map(|s| s.1).collect();
    // 0, then +1, +2, +4, ... +64, then +120 for ever.
    assert_eq!(
        times,
        [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 127.0, 247.0, 367.0, 487.0]
    );
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=11).collect::<Vec<_>>()
    );
    assert_eq!(retry.failures(), 11);
    assert!(matches!(
        retry.status(),
        SubscriptionStatus::Recovering { .. }
    ));
}

#[test]
#[serial(embassy_mock_driver)]
fn a_dropped_subscription_reconnects_at_once_and_the_schedule_starts_over() {
    fresh();
    let mut retry = SubscriptionRetry::new();
    // Attempts 1-3 fail (0, 1, 3 s); the 4th connects at 7 s and is served for 10 s; the
    // reconnection at 17 s fails, and its retry waits 1 s again.
    let seen = subscribe_for(
        EDuration::from_secs(20),
        &mut retry,
        |attempt| attempt == 4,
        EDuration::from_secs(10),
    );
    assert_eq!(
        seen,
        [(1, 0.0), (2, 1.0), (3, 3.0), (4, 7.0), (1, 17.0), (2, 18.0)]
    );
    assert_eq!(retry.failures(), 2, "the reconnection's two failures");
}

#[test]
#[serial(embassy_mock_driver)]
fn cancelling_ends_the_subscription_while_it_is_served() {
    fresh();
    let mut retry = SubscriptionRetry::new();
    let seen = subscribe_for(
        EDuration::from_secs(5),
        &mut retry,
        |_| true,
        EDuration::from_secs(3600),
    );
    assert_eq!(seen, [(1, 0.0)]);
    assert!(matches!(retry.status(), SubscriptionStatus::Healthy { .. }));
}

// ---------------------------------------------------------------------------------------------
// Explain

#[test]
#[serial(embassy_mock_driver)]
fn a_policy_explains_itself_with_what_its_breaker_and_budget_measure_now() {
    fresh();
    let settings = BreakerSettings::defaults("radio");
    let budget_settings = BudgetSettings::defaults("radio");
    let breaker = Breaker::<NoopRawMutex>::new(settings);
    let budget = Budget::<NoopRawMutex>::new(budget_settings);
    let policy = Policy::new(&breaker, CallSettings::DEFAULT).with_budget(&budget);
    warm(25, || policy.call(async |_| takes(ms(8)).await));
    let text = policy.explain().to_string();
    let want = Explain::new(&CallSettings::DEFAULT)
        .breaker(&settings)
        .breaker_now(breaker.snapshot().unwrap())
        .budget(&budget_settings)
        .budget_now(budget.snapshot().unwrap())
        .to_string();
    assert_eq!(text, want);
    assert!(text.starts_with("policy `radio`\n"), "{text}");
    // The median reads at most 12.5% above the 8 ms calls.
    assert!(
        text.contains("- measured now: breaker closed, normal latency 8."),
        "{text}"
    );
    assert!(
        text.contains("no failure-rate baseline yet (cold)"),
        "{text}"
    );
    assert!(text.contains("budget spent now: 0%"), "{text}");
    assert!(text.ends_with("- missing: nothing\n"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Steps together, and dropped calls

#[test]
#[serial(embassy_mock_driver)]
fn a_dropped_hedged_call_gives_both_bulkhead_slots_back() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("gateway"));
    let slots = Bulkhead::<NoopRawMutex>::new(bulkhead(2, None));
    let policy = Policy::new(&breaker, HEDGED).with_bulkhead(&slots);
    warm(40, || policy.call(async |_| takes(ms(20)).await));
    {
        let mut call = pin!(policy.call_hedged(|_| pending::<Result<u16, &str>>()));
        for _ in 0..40 {
            assert!(poll(call.as_mut()).is_pending());
            advance(ms(1));
        }
        assert_eq!(slots.snapshot().unwrap().in_flight, 2, "first and hedge");
    } // the caller drops the call
    assert_eq!(slots.snapshot().unwrap().in_flight, 0);
    assert_eq!(breaker.snapshot().unwrap().consecutive_failures, 0);
}

#[test]
#[serial(embassy_mock_driver)]
fn a_full_bulkhead_behind_a_rate_limit_spends_no_cell() {
    fresh();
    let breaker = Breaker::<NoopRawMutex>::new(BreakerSettings::defaults("uplink"));
    let limit = RateLimit::<NoopRawMutex, _>::new(RateLimiter::new(
        RateLimitSettings::builder("uplink")
            .rate(1, Duration::from_secs(10))
            .burst(5)
            .build()
            .unwrap(),
    ));
    let slots = Bulkhead::<NoopRawMutex>::new(bulkhead(1, None));
    let policy = Policy::new(&breaker, ONE_SHOT)
        .with_rate_limit(limit.part())
        .with_bulkhead(&slots);
    let ((a, _), (b, _)) = run_both(
        policy.call(async |_| takes(ms(200)).await),
        policy.call(answers),
    );
    assert_eq!(a, Ok(215));
    let Err(CallError::Rejected { rejection, .. }) = b else {
        panic!("{b:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::BulkheadFull);
    assert_eq!(limit.available(), 4, "only the admitted call took a cell");
}

#[test]
#[serial(embassy_mock_driver)]
fn a_subscription_that_drops_at_once_waits_the_schedule_between_reconnections() {
    fresh();
    let mut retry = SubscriptionRetry::new();
    let connects = Cell::new(0);
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    let mut task = pin!(keep_subscribed(
        &mut retry,
        async |_| {
            connects.set(connects.get() + 1);
            Ok::<(), ()>(())
        },
        async |()| {},
        stop.wait(),
    ));
    // Connected and dropped at once: never established, so the drops continue the schedule
    // (1 s, then 2 s) rather than reconnecting in a loop.
    assert!(poll(task.as_mut()).is_pending());
    assert_eq!(connects.get(), 1);
    assert!(poll(task.as_mut()).is_pending());
    assert_eq!(
        connects.get(),
        1,
        "no reconnection before the schedule's first delay"
    );
    advance(EDuration::from_millis(1000));
    assert!(poll(task.as_mut()).is_pending());
    assert_eq!(connects.get(), 2);
    advance(EDuration::from_millis(1999));
    assert!(poll(task.as_mut()).is_pending());
    assert_eq!(connects.get(), 2);
    advance(EDuration::from_millis(1));
    assert!(poll(task.as_mut()).is_pending());
    assert_eq!(connects.get(), 3);
    stop.signal(());
    assert_eq!(poll(task.as_mut()), Poll::Ready(()));
}

#[test]
#[serial(embassy_mock_driver)]
fn a_lost_subscription_reads_recovering_while_it_reconnects() {
    fresh();
    let mut retry = SubscriptionRetry::new();
    let connects = Cell::new(0);
    let stop: Signal<NoopRawMutex, ()> = Signal::new();
    {
        let mut task = pin!(keep_subscribed(
            &mut retry,
            async |_| {
                connects.set(connects.get() + 1);
                if connects.get() > 1 {
                    // The reconnection hangs: the subscription is lost and not back yet.
                    pending::<()>().await;
                }
                Ok::<(), ()>(())
            },
            // Established for 5 s (long past the 1 s it takes to count as established).
            async |()| Timer::after(EDuration::from_secs(5)).await,
            stop.wait(),
        ));
        assert!(poll(task.as_mut()).is_pending());
        advance(EDuration::from_secs(5));
        assert!(poll(task.as_mut()).is_pending());
        assert!(poll(task.as_mut()).is_pending());
        assert_eq!(connects.get(), 2, "reconnecting at once");
        stop.signal(());
        assert_eq!(poll(task.as_mut()), Poll::Ready(()));
    }
    assert!(
        matches!(retry.status(), SubscriptionStatus::Recovering { .. }),
        "{:?}",
        retry.status()
    );
}

// ---------------------------------------------------------------------------------------------
// Fault injection

fn chaos_settings(faults_percent: u32, slowed_percent: u32, seed: u64) -> ChaosSettings {
    ChaosSettings::builder()
        .faults(Ratio::from_percent(faults_percent).unwrap())
        .latency(
            Ratio::from_percent(slowed_percent).unwrap(),
            Duration::from_millis(30),
        )
        .seed(seed)
        .build()
        .unwrap()
}

#[test]
#[serial(embassy_mock_driver)]
fn injected_faults_repeat_with_the_seed_and_go_through_the_policy_as_real_ones() {
    fresh();
    let outcomes = |seed| {
        let chaos = Chaos::<NoopRawMutex>::new(chaos_settings(30, 0, seed));
        let v: Vec<bool> = (0..64)
            .map(|_| {
                let (r, _) = run_ms(chaos.run(async { Ok::<u16, &str>(1) }, || "injected"));
                r.is_err()
            })
            .collect();
        (v, chaos.counts())
    };
    let (a, counts) = outcomes(7);
    assert_eq!(a, outcomes(7).0, "the same seed, the same faults");
    assert_ne!(a, outcomes(8).0);
    let failed = a.iter().filter(|f| **f).count() as u64;
    assert_eq!((counts.rolls, counts.faults), (64, failed));
    assert!((8..=32).contains(&failed), "{failed} of 64 at 30%");

    // Every attempt failed: the policy retries them, then the breaker opens on the run.
    let chaos = Chaos::<NoopRawMutex>::new(chaos_settings(100, 0, 1));
    let breaker = Breaker::<NoopRawMutex>::new(valid_consecutive(3));
    let policy = Policy::new(&breaker, THREE_ATTEMPTS);
    let ran = Cell::new(0);
    let (r, _) = run_ms(policy.call(|_| {
        chaos.run(
            async {
                ran.set(ran.get() + 1);
                Ok::<u16, &str>(1)
            },
            || "injected",
        )
    }));
    assert_eq!(r, Err(CallError::Failed("injected")));
    assert_eq!(ran.get(), 0, "an injected fault never runs the operation");
    assert_eq!(chaos.counts().faults, 3);
    assert_eq!(breaker.state(), State::Open);

    // A closed gate takes no roll; a slowed attempt is held back by the latency first.
    let slow = Chaos::<NoopRawMutex>::new(chaos_settings(0, 100, 1));
    let (r, took) = run_ms(slow.run_if(false, async { Ok::<u16, &str>(1) }, || "x"));
    assert_eq!((r, took, slow.counts().rolls), (Ok(1), ms(0), 0));
    let (r, took) = run_ms(slow.run(async { Ok::<u16, &str>(1) }, || "x"));
    assert_eq!((r, took, slow.counts().slowed), (Ok(1), ms(30), 1));
}

fn valid_consecutive(n: u32) -> BreakerSettings {
    BreakerSettings::consecutive_only("chaos", n).unwrap()
}
