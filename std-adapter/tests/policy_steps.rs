//! The policy's optional steps on tokio's paused clock: the measured attempt ceiling, the rate
//! limiter, the bulkhead (with and without its bounded wait), hedging, and explain.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use stormguard_core::{
    limits::BulkheadSettings, limits::RateLimitSettings, limits::SlidingWindowSettings,
    limits::WindowLimitSettings, Bound, BreakerSettings, Duration, Event, Field, Instant,
    RefusalReason, State, GUARD_PAUSE,
};
use stormguard_std::clock::TokioClock;
use stormguard_std::{
    Both, Bulkhead, CallError, CallOptions, Clock, Limiter, ManualClock, Metrics, Policy,
};
use tokio::time::{sleep, Instant as TokioInstant};
use tokio_util::sync::CancellationToken;

mod support;
use support::{ms, no_jitter, reset_on_first};

fn now() -> Instant {
    TokioClock::global().now()
}

async fn ok(_: u32) -> Result<u32, &'static str> {
    Ok(7)
}

/// Successful calls in a warm-up that teaches the breaker its latency baselines. The rules that
/// read them (the measured attempt ceiling, hedging, the measured backoff base, explain's normal
/// latency) arm at 20 samples (`TAIL_SAMPLES` in the core's breaker). Under miri, where a
/// warm-up call costs about 0.4 s of its clock, 24 arm them with a few to spare; the learned p95
/// and median are those of 20 ms calls all the same.
const WARM_UP: u32 = if cfg!(miri) { 24 } else { 40 };

/// `n` successful calls of 20 ms each: the breaker learns its latency baselines.
async fn warm<K: Clock, L: stormguard_std::Listener>(policy: &Policy<K, L>, n: u32) {
    for _ in 0..n {
        let r = policy
            .call(|_| async {
                sleep(ms(20)).await;
                Ok::<_, &str>(0)
            })
            .await;
        assert_eq!(r, Ok(0));
    }
}

/// Sets its flag when dropped: tells whether an attempt's future was cancelled.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Kinds of the events seen, in order.
#[derive(Clone, Default)]
struct Kinds(Arc<Mutex<Vec<&'static str>>>);

impl stormguard_std::Listener for Kinds {
    fn on_event(&self, event: &Event<'_>) {
        self.0.lock().unwrap().push(event.kind());
    }
}

impl Kinds {
    fn count(&self, kind: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|k| **k == kind)
            .count()
    }
}

// ---------------------------------------------------------------------------------------------
// The measured attempt ceiling

#[tokio::test(start_paused = true)]
async fn after_warm_up_the_measured_ceiling_tightens_the_attempt_timeout() {
    let policy = Policy::builder("ceiling").max_attempts(1).build().unwrap();
    let breaker = policy.breaker().unwrap().shared();
    assert_eq!(breaker.attempt_ceiling(now()), None, "cold: no ceiling");
    warm(&policy, WARM_UP).await;
    let ceiling: StdDuration = breaker.attempt_ceiling(now()).unwrap().into();
    // 3x the p95 of 20 ms calls (the p95 reads at most 12.5% high).
    assert!(ceiling >= ms(60) && ceiling <= ms(68), "{ceiling:?}");

    // The configured attempt timeout is 10 s; the ceiling cuts a hanging attempt far sooner.
    let start = TokioInstant::now();
    let r = policy
        .call(|_| async {
            sleep(ms(5_000)).await;
            Ok::<_, &str>(1)
        })
        .await;
    assert_eq!(r, Err(CallError::TimedOut { last: None }));
    let took = start.elapsed();
    assert!(took >= ceiling && took <= ceiling + ms(1), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn the_ceiling_only_tightens_and_can_be_turned_off() {
    // A configured timeout below the ceiling stands.
    let tight = Policy::builder("tight")
        .max_attempts(1)
        .attempt_timeout(ms(30))
        .build()
        .unwrap();
    warm(&tight, WARM_UP).await;
    let start = TokioInstant::now();
    let r = tight
        .call(|_| async {
            sleep(ms(5_000)).await;
            Ok::<_, &str>(1)
        })
        .await;
    assert_eq!(r, Err(CallError::TimedOut { last: None }));
    assert_eq!(start.elapsed(), ms(30));

    // Turned off: a 200 ms answer after 20 ms ones is waited for.
    let off = Policy::builder("off")
        .max_attempts(1)
        .measured_ceiling(false)
        .build()
        .unwrap();
    warm(&off, WARM_UP).await;
    assert!(off
        .breaker()
        .unwrap()
        .shared()
        .attempt_ceiling(now())
        .is_some());
    let r = off
        .call(|_| async {
            sleep(ms(200)).await;
            Ok::<_, &str>(1)
        })
        .await;
    assert_eq!(r, Ok(1));
}

// ---------------------------------------------------------------------------------------------
// Rate limiting

#[tokio::test(start_paused = true)]
async fn a_rate_limited_call_with_no_retry_left_is_a_guarded_rejection_with_the_time_to_the_next_cell(
) {
    let limiter = Limiter::new(RateLimitSettings::per_second("search", 2).unwrap());
    let metrics = Metrics::new("search");
    let policy = Policy::builder("search")
        .max_attempts(1)
        .rate_limit(limiter.clone())
        .listener(metrics.clone())
        .build()
        .unwrap();
    assert_eq!(policy.call(ok).await, Ok(7));
    assert_eq!(policy.call(ok).await, Ok(7));
    let start = TokioInstant::now();
    let r = policy.call(ok).await;
    assert_eq!(start.elapsed(), ms(100), "the guarded pause");
    let Err(CallError::Rejected { rejection, last }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(last, None);
    assert_eq!(rejection.reason, RefusalReason::RateLimited);
    assert_eq!(rejection.pause, GUARD_PAUSE);
    // The next cell is due 500 ms after the first two; counted from the end of the pause.
    assert_eq!(rejection.retry_after, Duration::from_millis(400));
    assert_eq!(metrics.snapshot().rejected_for("rate_limited"), 1);

    sleep(rejection.retry_after.into()).await;
    assert_eq!(
        policy.call(ok).await,
        Ok(7),
        "the cell is there when promised"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_attempt_waits_for_the_next_cell_instead_of_ending_the_call() {
    let limiter = Limiter::new(RateLimitSettings::per_second("search", 2).unwrap());
    let policy = Policy::builder("search")
        .rate_limit(limiter.clone())
        .build()
        .unwrap();
    assert_eq!(policy.call(ok).await, Ok(7));
    assert_eq!(policy.call(ok).await, Ok(7));
    // The limiter is empty: the call waits its hint (the next cell, 500 ms after the first
    // two), later by a draw of up to the backoff's 100 ms base, and is served.
    let start = TokioInstant::now();
    assert_eq!(policy.call(ok).await, Ok(7));
    let waited = start.elapsed();
    assert!(waited >= ms(500) && waited <= ms(600), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn every_attempt_takes_a_cell_and_a_refused_retry_carries_the_last_error() {
    // 10 a minute: nothing refills during the test's backoff waits.
    let limiter = Limiter::new(RateLimitSettings::per_minute("api", 10).unwrap());
    let policy = Policy::builder("api")
        .rate_limit(limiter.clone())
        .no_budget()
        .backoff(no_jitter())
        .build()
        .unwrap();
    let r = policy
        .call(|attempt| async move {
            if attempt < 3 {
                Err("busy")
            } else {
                Ok(attempt)
            }
        })
        .await;
    assert_eq!(r, Ok(3));
    assert_eq!(
        limiter.available_at(now()),
        7,
        "three attempts, three cells"
    );

    // Drain to one cell: the first attempt takes it, the retry (the last attempt) is refused by
    // the limiter, and no retry is left to wait for the next cell.
    for _ in 0..6 {
        assert_eq!(policy.call(ok).await, Ok(7));
    }
    let twice = Policy::builder("api")
        .rate_limit(limiter.clone())
        .no_budget()
        .backoff(no_jitter())
        .max_attempts(2)
        .build()
        .unwrap();
    let r = twice.call(|_| async { Err::<u32, _>("down") }).await;
    let Err(CallError::Rejected { rejection, last }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::RateLimited);
    assert_eq!(rejection.attempts, 1);
    assert_eq!(last, Some("down"));
}

#[tokio::test(start_paused = true)]
async fn the_window_form_refuses_for_its_cooldown_once_exceeded() {
    let limiter = Limiter::new(
        WindowLimitSettings::builder("stream")
            .events(2)
            .window(Duration::from_secs(60))
            .cooldown(Duration::from_secs(30))
            .build()
            .unwrap(),
    );
    let policy = Policy::builder("stream")
        .max_attempts(1)
        .rate_limit(limiter)
        .build()
        .unwrap();
    assert_eq!(policy.call(ok).await, Ok(7));
    assert_eq!(policy.call(ok).await, Ok(7));
    let r = policy.call(ok).await;
    let rejection = *r.unwrap_err().rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::RateLimited);
    // The cooldown, counted from the end of the pause.
    assert_eq!(rejection.retry_after, Duration::from_secs(30) - GUARD_PAUSE);
    sleep(ms(15_000)).await;
    assert!(policy.call(ok).await.is_err(), "still cooling down");
    // Refused again after its pause, 15.1 s later: what is left of the cooldown, to the
    // nanosecond, and then the stream is served again.
    sleep(ms(14_800)).await;
    assert_eq!(policy.call(ok).await, Ok(7));
}

#[tokio::test(start_paused = true)]
async fn the_sliding_window_form_refuses_until_its_oldest_segment_leaves() {
    let limiter = Limiter::new(
        SlidingWindowSettings::builder("search")
            .quota(2)
            .window(Duration::from_secs(8)) // 8 segments of 1 s
            .build()
            .unwrap(),
    );
    let policy = Policy::builder("search")
        .max_attempts(1)
        .rate_limit(limiter.clone())
        .build()
        .unwrap();
    assert!(policy
        .explain()
        .to_string()
        .contains("- rate limit: 2 per 8s, sliding in 8 segments;"));
    assert_eq!(policy.call(ok).await, Ok(7));
    sleep(ms(3_000)).await;
    assert_eq!(policy.call(ok).await, Ok(7));
    let r = policy.call(ok).await;
    let rejection = *r.unwrap_err().rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::RateLimited);
    // The first call's segment leaves the window 7 to 8 s after that call, 3 s of which (and the
    // pause) have passed; the second call's segment stays.
    assert!(rejection.retry_after > Duration::from_secs(4) - GUARD_PAUSE);
    assert!(rejection.retry_after <= Duration::from_secs(5) - GUARD_PAUSE);
    assert_eq!(limiter.available_at(now()), 0);
    sleep(rejection.retry_after.into()).await;
    assert_eq!(limiter.available_at(now()), 1);
    assert_eq!(policy.call(ok).await, Ok(7));
    assert!(
        policy.call(ok).await.is_err(),
        "the second call's segment is still in"
    );
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_spends_no_cells() {
    let limiter = Limiter::new(RateLimitSettings::per_second("api", 1).unwrap());
    let policy = Policy::builder("api")
        .rate_limit(limiter.clone())
        .build()
        .unwrap();
    policy.isolate();
    for _ in 0..3 {
        let r = policy.call(ok).await;
        assert_eq!(
            r.unwrap_err().rejection().unwrap().reason,
            RefusalReason::Isolated
        );
    }
    assert_eq!(limiter.available_at(now()), 1);
}

// ---------------------------------------------------------------------------------------------
// The bulkhead

fn waiting_bulkhead(max_in_flight: u32, queue: u32, wait: u64) -> Bulkhead {
    Bulkhead::new(
        BulkheadSettings::builder("db")
            .max_in_flight(max_in_flight)
            .bounded_wait(queue, Duration::from_millis(wait))
            .build()
            .unwrap(),
    )
}

/// Holds one slot of `policy`'s bulkhead for `hold` (a spawned call), once the runtime yields.
fn hold_slot(policy: &Arc<Policy>, hold: StdDuration) -> tokio::task::JoinHandle<u32> {
    let p = Arc::clone(policy);
    tokio::spawn(async move {
        p.call(|_| async move {
            sleep(hold).await;
            Ok::<_, &str>(1)
        })
        .await
        .unwrap()
    })
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_with_no_retry_left_is_a_guarded_rejection() {
    let bulkhead = Bulkhead::of(1, "db").unwrap();
    let policy = Arc::new(
        Policy::builder("db")
            .max_attempts(1)
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap(),
    );
    let holder = hold_slot(&policy, ms(1_000));
    tokio::task::yield_now().await;
    assert_eq!(bulkhead.in_flight(), 1);
    let start = TokioInstant::now();
    let r = policy.call(ok).await;
    assert_eq!(start.elapsed(), ms(100));
    let rejection = *r.unwrap_err().rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::BulkheadFull);
    assert_eq!(rejection.retry_after, Duration::ZERO);
    assert_eq!(holder.await.unwrap(), 1);
    assert_eq!(bulkhead.in_flight(), 0);
    assert_eq!(policy.call(ok).await, Ok(7));
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkheads_refusal_is_retried_as_a_throttle_uncharged_and_unseen_by_the_breaker() {
    // Another caller holds the only slot for 300 ms. The refused attempt runs nothing, is
    // retried on the throttled curve once the slot is free, and costs neither a retry from
    // the budget nor any evidence against the dependency: the refusal was the caller's own.
    let bulkhead = Bulkhead::of(1, "db").unwrap();
    let other = Arc::new(
        Policy::builder("db")
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap(),
    );
    let holder = hold_slot(&other, ms(300));
    tokio::task::yield_now().await;
    assert_eq!(bulkhead.in_flight(), 1);
    let policy = Policy::builder("db")
        .bulkhead(bulkhead.clone())
        .backoff(no_jitter())
        .build()
        .unwrap();
    let runs = AtomicU32::new(0);
    let r = policy
        .call(|_| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, &str>(7) }
        })
        .await;
    assert_eq!(r, Ok(7));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the refused attempt ran nothing"
    );
    assert_eq!(holder.await.unwrap(), 1);
    let budget = policy.budget().unwrap().snapshot_at(now());
    assert_eq!(
        budget.available, 30,
        "the retry drew nothing from the full budget"
    );
    let breaker = policy.breaker().unwrap().snapshot_at(now());
    assert_eq!(
        (
            breaker.window_calls,
            breaker.window_failures,
            breaker.consecutive_failures
        ),
        (1, 0, 0),
        "the breaker saw the one attempt that ran, a success: {breaker:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn with_a_bounded_wait_a_call_gets_the_slot_when_it_frees() {
    let bulkhead = waiting_bulkhead(1, 1, 500);
    let policy = Arc::new(
        Policy::builder("db")
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap(),
    );
    let holder = hold_slot(&policy, ms(100));
    tokio::task::yield_now().await;
    let start = TokioInstant::now();
    let started = Arc::new(Mutex::new(None));
    let waiter = {
        let (p, started) = (Arc::clone(&policy), Arc::clone(&started));
        tokio::spawn(async move {
            p.call(|_| {
                *started.lock().unwrap() = Some(TokioInstant::now());
                async { Ok::<_, &str>(2) }
            })
            .await
        })
    };
    tokio::task::yield_now().await;
    assert_eq!((bulkhead.in_flight(), bulkhead.queued()), (1, 1));
    assert_eq!(waiter.await.unwrap(), Ok(2));
    assert_eq!(holder.await.unwrap(), 1);
    let started = started.lock().unwrap().unwrap();
    assert_eq!(
        started - start,
        ms(100),
        "admitted the moment the slot freed"
    );
    assert_eq!((bulkhead.in_flight(), bulkhead.queued()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_ends_without_a_slot_is_a_guarded_rejection() {
    let bulkhead = waiting_bulkhead(1, 1, 250);
    let policy = Arc::new(
        Policy::builder("db")
            .max_attempts(1)
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap(),
    );
    let _holder = hold_slot(&policy, ms(1_000));
    tokio::task::yield_now().await;
    let start = TokioInstant::now();
    let r = policy.call(ok).await;
    assert_eq!(start.elapsed(), ms(250 + 100), "the wait, then the pause");
    let rejection = *r.unwrap_err().rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::BulkheadFull);
    assert_eq!(rejection.pause, GUARD_PAUSE);
    assert_eq!(bulkhead.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_wait_is_capped_by_the_deadline() {
    let bulkhead = waiting_bulkhead(1, 1, 500);
    let holder = Arc::new(
        Policy::builder("db")
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap(),
    );
    let _held = hold_slot(&holder, ms(1_000));
    tokio::task::yield_now().await;
    let hurried = Policy::builder("db")
        .bulkhead(bulkhead.clone())
        .deadline(ms(150))
        .build()
        .unwrap();
    let start = TokioInstant::now();
    let r = hurried.call(ok).await;
    // No time left after the wait: the refusal is reported with no pause.
    assert_eq!(start.elapsed(), ms(150));
    let rejection = *r.unwrap_err().rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::BulkheadFull);
    assert_eq!(rejection.pause, Duration::ZERO);
    assert_eq!(bulkhead.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_at_once_without_waiting() {
    let bulkhead = waiting_bulkhead(1, 1, 500);
    let policy = Arc::new(
        Policy::builder("db")
            .max_attempts(1)
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap(),
    );
    let _holder = hold_slot(&policy, ms(1_000));
    let _waiter = hold_slot(&policy, ms(1_000));
    tokio::task::yield_now().await;
    assert_eq!((bulkhead.in_flight(), bulkhead.queued()), (1, 1));
    let start = TokioInstant::now();
    let r = policy.call(ok).await;
    assert_eq!(start.elapsed(), ms(100), "only the guarded pause");
    assert_eq!(
        r.unwrap_err().rejection().unwrap().reason,
        RefusalReason::BulkheadFull
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_wait_leaves_the_queue_at_once() {
    let bulkhead = waiting_bulkhead(1, 2, 500);
    let policy = Arc::new(
        Policy::builder("db")
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap(),
    );
    let _holder = hold_slot(&policy, ms(1_000));
    tokio::task::yield_now().await;

    // By the token.
    let token = CancellationToken::new();
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            sleep(ms(50)).await;
            token.cancel();
        })
    };
    let start = TokioInstant::now();
    let r = policy
        .call_with(CallOptions::new().cancel_on(&token), ok)
        .await;
    assert_eq!(r, Err(CallError::Cancelled));
    assert_eq!(start.elapsed(), ms(50));
    assert_eq!(bulkhead.queued(), 0);
    canceller.await.unwrap();

    // By dropping the call.
    let start = TokioInstant::now();
    assert!(tokio::time::timeout(ms(30), policy.call(ok)).await.is_err());
    assert_eq!(start.elapsed(), ms(30));
    assert_eq!((bulkhead.in_flight(), bulkhead.queued()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_attempt_frees_its_slot_and_wakes_a_waiter() {
    let bulkhead = waiting_bulkhead(1, 1, 500);
    let policy = Arc::new(
        Policy::builder("db")
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap(),
    );
    // The holder's call is dropped after 50 ms, in the middle of its attempt.
    let holder = {
        let p = Arc::clone(&policy);
        tokio::spawn(async move {
            tokio::time::timeout(
                ms(50),
                p.call(|_| async {
                    sleep(ms(1_000)).await;
                    Ok::<_, &str>(1)
                }),
            )
            .await
        })
    };
    tokio::task::yield_now().await;
    let start = TokioInstant::now();
    assert_eq!(policy.call(ok).await, Ok(7));
    assert_eq!(
        start.elapsed(),
        ms(50),
        "woken when the dropped attempt left"
    );
    assert!(holder.await.unwrap().is_err());
    assert_eq!((bulkhead.in_flight(), bulkhead.queued()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn retries_hold_no_slot_while_they_wait() {
    let bulkhead = Bulkhead::of(1, "db").unwrap();
    let policy = Policy::builder("db")
        .bulkhead(bulkhead.clone())
        .no_budget()
        .backoff(no_jitter())
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let r = {
        let (b, seen) = (bulkhead.clone(), Arc::clone(&seen));
        policy
            .call(move |attempt| {
                seen.lock().unwrap().push(b.in_flight());
                async move {
                    if attempt < 3 {
                        Err("busy")
                    } else {
                        Ok(attempt)
                    }
                }
            })
            .await
    };
    assert_eq!(r, Ok(3));
    assert_eq!(*seen.lock().unwrap(), [1, 1, 1], "one slot per attempt");
    assert_eq!(bulkhead.in_flight(), 0);
}

// ---------------------------------------------------------------------------------------------
// Hedging

/// A hedging policy whose breaker has learned that healthy calls take 20 ms.
async fn warm_hedging(
    name: &'static str,
) -> (Policy<TokioClock, Both<Metrics, Kinds>>, Metrics, Kinds) {
    let metrics = Metrics::new(name);
    let kinds = Kinds::default();
    let policy = Policy::builder(name)
        .hedging(true)
        .backoff(no_jitter())
        .clock(TokioClock::global())
        .listener(Both(metrics.clone(), kinds.clone()))
        .build()
        .unwrap();
    warm(&policy, WARM_UP).await;
    (policy, metrics, kinds)
}

#[tokio::test(start_paused = true)]
async fn a_measured_backoff_base_waits_a_multiple_of_the_learned_median() {
    let policy = Policy::builder("measured")
        .backoff(no_jitter())
        .measured_backoff_base(stormguard_core::Multiple::whole(4))
        .clock(TokioClock::global())
        .build()
        .unwrap();
    warm(&policy, WARM_UP).await;
    let median = policy
        .breaker()
        .unwrap()
        .shared()
        .normal_latency(now())
        .expect("the warm-up teaches a median");
    let start = TokioInstant::now();
    let r = policy
        .call(|attempt| async move {
            if attempt == 1 {
                Err("blip")
            } else {
                Ok(attempt)
            }
        })
        .await;
    assert_eq!(r, Ok(2));
    // No time but the wait: 4x the median (about 84 ms), not the configured 100 ms; tokio's
    // timer rounds a sleep up to its millisecond.
    let waited = Duration::from(start.elapsed());
    let expected = median.saturating_mul(4);
    assert!(
        waited >= expected && waited - expected < Duration::from_millis(1),
        "{waited} for {expected}"
    );
    assert!(waited < Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn the_win_rate_loop_halves_the_hedged_share_after_losing_hedges_and_a_win_restores_it() {
    let metrics = Metrics::new("win-rate");
    let policy = Policy::builder("win-rate")
        .hedging(true)
        .hedge_win_rate(true)
        .backoff(no_jitter())
        .clock(TokioClock::global())
        .listener(metrics.clone())
        .build()
        .unwrap();
    // Many calls of 20 ms: a handful of slower ones later leave the p95 where it is. The hedges
    // below must go out at the p95 of 20 ms calls (about 21 ms), before a 24 ms first attempt
    // answers: the three 24 ms answers learned before the fourth hedge must stay below 5% of
    // the samples: under miri 100 calls keep them under 3%, at half the cost.
    const LONG_WARM_UP: u32 = if cfg!(miri) { 100 } else { 200 };
    warm(&policy, LONG_WARM_UP).await;
    assert_eq!(policy.hedge_share(), Some(1024));
    assert!(policy
        .explain()
        .to_string()
        .contains("the hedge win-rate loop allows 1024/1024 of calls a hedge now"));
    // `first` is how long the first attempt takes, `hedge` how long a hedge does.
    let call = |first: u64, hedge: u64| {
        policy.call(move |attempt| async move {
            sleep(ms(if attempt == 1 { first } else { hedge })).await;
            Ok::<_, &str>(attempt)
        })
    };
    // The hedge launches at the p95 (about 21 ms) and the first attempt answers at 24 ms:
    // four losing hedges halve the share.
    for n in 1..=4 {
        let before = metrics.snapshot().attempts;
        assert_eq!(call(24, 100).await, Ok(1));
        assert_eq!(
            metrics.snapshot().attempts - before,
            2,
            "call {n} was hedged"
        );
    }
    assert_eq!(policy.hedge_share(), Some(512));
    // Every other call now: this one runs alone, though it is slow enough to hedge.
    let before = metrics.snapshot().attempts;
    assert_eq!(call(40, 5).await, Ok(1));
    assert_eq!(
        metrics.snapshot().attempts - before,
        1,
        "outside the share: no hedge"
    );
    // The next is hedged, and its hedge wins: the share doubles back.
    assert_eq!(call(40, 5).await, Ok(2));
    assert_eq!(policy.hedge_share(), Some(1024));
}

#[tokio::test(start_paused = true)]
async fn a_slow_attempt_is_hedged_and_the_first_success_wins() {
    let (policy, metrics, kinds) = warm_hedging("hedge-wins").await;
    let after: StdDuration = policy
        .breaker()
        .unwrap()
        .shared()
        .hedge_after(now())
        .unwrap()
        .into();
    assert!(after >= ms(20) && after <= ms(23), "{after:?}");
    let budget_before = policy.budget().unwrap().available();
    let attempts_before = metrics.snapshot().attempts;
    let loser_dropped = Arc::new(AtomicBool::new(false));
    let start = TokioInstant::now();
    let r = policy
        .call(|attempt| {
            let flag = DropFlag(Arc::clone(&loser_dropped));
            async move {
                if attempt == 1 {
                    let _flag = flag;
                    sleep(ms(1_000)).await; // hangs
                    Ok::<_, &str>(1)
                } else {
                    sleep(ms(20)).await;
                    Ok(2)
                }
            }
        })
        .await;
    assert_eq!(r, Ok(2));
    let took = start.elapsed();
    assert!(took >= after + ms(20) && took <= after + ms(22), "{took:?}");
    assert!(
        loser_dropped.load(Ordering::SeqCst),
        "the loser was cancelled"
    );
    assert_eq!(kinds.count("hedged"), 1);
    let snap = metrics.snapshot();
    assert_eq!(snap.hedges, 1);
    assert_eq!(snap.attempts - attempts_before, 2);
    assert_eq!(
        policy.budget().unwrap().available(),
        budget_before - 1,
        "funded as a retry"
    );
    let breaker = policy.breaker().unwrap().snapshot();
    assert_eq!(breaker.state, State::Closed);
    assert_eq!(
        breaker.consecutive_failures, 0,
        "the cancelled loser is no failure"
    );
}

#[tokio::test(start_paused = true)]
async fn the_first_attempt_still_wins_if_it_answers_first() {
    let (policy, _, kinds) = warm_hedging("first-wins").await;
    let hedge_dropped = Arc::new(AtomicBool::new(false));
    let start = TokioInstant::now();
    let r = policy
        .call(|attempt| {
            let flag = DropFlag(Arc::clone(&hedge_dropped));
            async move {
                if attempt == 1 {
                    sleep(ms(30)).await;
                    Ok::<_, &str>(1)
                } else {
                    let _flag = flag;
                    sleep(ms(1_000)).await;
                    Ok(2)
                }
            }
        })
        .await;
    assert_eq!(r, Ok(1));
    assert_eq!(start.elapsed(), ms(30));
    assert_eq!(kinds.count("hedged"), 1);
    assert!(hedge_dropped.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_failure_of_one_hedged_attempt_waits_for_the_other() {
    let (policy, _, kinds) = warm_hedging("one-fails").await;
    let r = policy
        .call(|attempt| async move {
            if attempt == 1 {
                sleep(ms(25)).await;
                Err("reset")
            } else {
                sleep(ms(20)).await;
                Ok(attempt)
            }
        })
        .await;
    assert_eq!(r, Ok(2));
    assert_eq!(kinds.count("retry"), 0, "no retry while the hedge runs");
}

#[tokio::test(start_paused = true)]
async fn when_both_fail_the_call_retries_and_the_hedge_counted_as_an_attempt() {
    let (policy, _, kinds) = warm_hedging("both-fail").await;
    let r = policy
        .call(|attempt| async move {
            match attempt {
                1 => {
                    sleep(ms(30)).await;
                    Err("first")
                }
                2 => Err("hedge"),
                _ => Ok(attempt),
            }
        })
        .await;
    assert_eq!(r, Ok(3), "the third and last attempt");
    assert_eq!((kinds.count("hedged"), kinds.count("retry")), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_declined_hedge_never_invokes_the_operation() {
    // A budget that a warm-up barely funds (a millionth of a retry per success, a thousandth
    // of one a second), emptied before the call: the core refuses the hedge.
    let budget = stormguard_std::Budget::new(
        stormguard_core::BudgetSettings::builder("declined")
            .floor_per_second_milli(1)
            .fraction_ppm(1)
            .build()
            .unwrap(),
    );
    let metrics = Metrics::new("declined");
    let kinds = Kinds::default();
    let policy = Policy::builder("declined")
        .hedging(true)
        .backoff(no_jitter())
        .budget(budget.clone())
        .clock(TokioClock::global())
        .listener(Both(metrics.clone(), kinds.clone()))
        .build()
        .unwrap();
    warm(&policy, WARM_UP).await;
    while budget.shared().try_withdraw(now()).is_ok() {}
    assert_eq!(budget.available(), 0);
    let attempts_before = metrics.snapshot().attempts;

    let invoked = AtomicU32::new(0);
    let start = TokioInstant::now();
    let r = policy
        .call(|attempt| {
            invoked.fetch_add(1, Ordering::SeqCst);
            // Slower than the learned p95 (about 21 ms), below the measured ceiling (about
            // 60 ms): the hedge's time comes while this attempt runs.
            async move {
                sleep(ms(50)).await;
                Ok::<_, &str>(attempt)
            }
        })
        .await;
    assert_eq!(r, Ok(1));
    assert_eq!(start.elapsed(), ms(50));
    assert_eq!(
        invoked.load(Ordering::SeqCst),
        1,
        "the operation ran only for the attempt that ran"
    );
    assert_eq!(kinds.count("hedged"), 0);
    assert_eq!(metrics.snapshot().attempts - attempts_before, 1);
}

#[tokio::test(start_paused = true)]
async fn never_more_than_two_attempts_in_flight() {
    let (policy, _, _) = warm_hedging("two-at-most").await;
    struct Running<'a>(&'a AtomicU32);
    impl Drop for Running<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let running = AtomicU32::new(0);
    let highest = AtomicU32::new(0);
    for _ in 0..5 {
        // Every attempt hangs until its measured ceiling cuts it (or the other one's end
        // cancels it).
        let r = policy
            .call(|_| {
                let running = &running;
                let highest = &highest;
                async move {
                    let n = running.fetch_add(1, Ordering::SeqCst) + 1;
                    let _running = Running(running);
                    highest.fetch_max(n, Ordering::SeqCst);
                    sleep(ms(200)).await;
                    Err::<u32, _>("slow failure")
                }
            })
            .await;
        assert!(r.is_err());
        assert_eq!(running.load(Ordering::SeqCst), 0);
    }
    assert_eq!(highest.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn no_hedge_when_off_or_cold() {
    // Off (the default), warm breaker.
    let plain = Policy::builder("off").build().unwrap();
    warm(&plain, WARM_UP).await;
    let calls = AtomicU32::new(0);
    // Slower than the learned p95 (about 21 ms), below the measured ceiling (about 60 ms).
    let slow = |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        async {
            sleep(ms(50)).await;
            Ok::<_, &str>(1)
        }
    };
    assert_eq!(plain.call(slow).await, Ok(1));
    assert_eq!(calls.swap(0, Ordering::SeqCst), 1);

    // On, cold breaker: nothing learned to hedge against.
    let cold = Policy::builder("cold").hedging(true).build().unwrap();
    assert_eq!(cold.call(slow).await, Ok(1));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_hedged_call_cancels_both_attempts() {
    let (policy, _, _) = warm_hedging("cancel-both").await;
    let token = CancellationToken::new();
    // Cancelled at 30 ms: the hedge went out at the p95 (about 21 ms), and neither attempt
    // has reached its measured ceiling (about 60 ms) yet.
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            sleep(ms(30)).await;
            token.cancel();
        })
    };
    let dropped = Arc::new(AtomicU32::new(0));
    struct Count(Arc<AtomicU32>);
    impl Drop for Count {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let start = TokioInstant::now();
    let r = policy
        .call_with(CallOptions::new().cancel_on(&token), |_| {
            let c = Count(Arc::clone(&dropped));
            async move {
                let _c = c;
                sleep(ms(1_000)).await;
                Ok::<_, &str>(1)
            }
        })
        .await;
    assert_eq!(r, Err(CallError::Cancelled));
    assert_eq!(start.elapsed(), ms(30));
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "both attempts were dropped"
    );
    assert_eq!(policy.breaker().unwrap().snapshot().consecutive_failures, 0);
    canceller.await.unwrap();
}

#[test]
fn the_blocking_form_never_hedges() {
    let clock = ManualClock::starting_at(Instant::from_secs(1));
    let policy = Policy::builder("blocking")
        .hedging(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    for _ in 0..WARM_UP {
        let r = policy.call_blocking(|_| {
            clock.advance(Duration::from_millis(20));
            Ok::<_, ()>(0)
        });
        assert_eq!(r, Ok(0));
    }
    let mut attempts = 0;
    let r = policy.call_blocking(|attempt| {
        attempts += 1;
        clock.advance(Duration::from_millis(500)); // far past the learned p95
        Ok::<_, ()>(attempt)
    });
    assert_eq!(r, Ok(1));
    assert_eq!(attempts, 1);
}

// ---------------------------------------------------------------------------------------------
// Explain

#[test]
fn a_default_policy_explains_itself() {
    let policy = Policy::builder("payments")
        .clock(ManualClock::starting_at(Instant::from_secs(1)))
        .build()
        .unwrap();
    let want = "\
policy `payments`
- the deadline bounds a call first: 30s, before 3 attempts could run to their timeouts (30.300s)
- worst-case timeline:
    0s: attempt 1, cut at 10s if it hangs
    10s: wait up to 100ms (exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter)
    10.100s: attempt 2, cut at 20.100s if it hangs
    20.100s: wait up to 200ms (exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter)
    20.300s: attempt 3, cut at 30s by the deadline if it hangs
    a refusal is reported after a 100ms pause (less if the deadline is nearer)
    attempts are also cut at 3x the learned p95 once the breaker knows it
- load: up to 2 retries per call (3x) only while the retry budget lasts; it holds retries to 10% of a retry per success, at least 3 per second, up to 30 banked, so in an outage the sustained load is about 1x plus the floor
    budget spent now: 0% (30 retries available)
- measured now: breaker closed, no latency baseline yet (cold), no failure-rate baseline yet (cold), trips after 5 consecutive failures
- missing: nothing
";
    assert_eq!(policy.explain().to_string(), want);
    assert_eq!(format!("{}", policy.explain()), want);
}

#[test]
fn a_bare_policy_says_what_is_missing_and_a_warm_one_what_it_measured() {
    let clock = ManualClock::starting_at(Instant::from_secs(1));
    let bare = Policy::builder("bare")
        .no_breaker()
        .no_budget()
        .no_deadline()
        .max_attempts(2)
        .backoff(no_jitter())
        .clock(clock.clone())
        .build()
        .unwrap();
    let want = "\
policy `bare`
- the attempt limit bounds a call: 2 attempts take at most 20.100s (no deadline)
- worst-case timeline:
    0s: attempt 1, cut at 10s if it hangs
    10s: wait 100ms (exponential from 100ms (1s after throttling), x2, capped at 30s, no jitter)
    10.100s: attempt 2, cut at 20.100s if it hangs
- load: up to 1 retry per call: 2x the load on a dependency that is failing every call
- missing:
    no breaker: nothing stops a call reaching a dependency that is already down
    no retry budget: in an outage every call makes all its attempts, and a fleet multiplies its load
    no deadline: a caller cannot know how long a call may take
";
    assert_eq!(bare.explain().to_string(), want);

    let warm = Policy::builder("warm")
        .clock(clock.clone())
        .build()
        .unwrap();
    for _ in 0..WARM_UP {
        let _ = warm.call_blocking(|_| {
            clock.advance(Duration::from_millis(20));
            Ok::<_, ()>(())
        });
    }
    // The learned median reads within the latency sketch's resolution of 20 ms.
    let want = "\
policy `warm`
- the deadline bounds a call first: 30s, before 3 attempts could run to their timeouts (30.300s)
- worst-case timeline:
    0s: attempt 1, cut at 10s if it hangs
    10s: wait up to 100ms (exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter)
    10.100s: attempt 2, cut at 20.100s if it hangs
    20.100s: wait up to 200ms (exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter)
    20.300s: attempt 3, cut at 30s by the deadline if it hangs
    a refusal is reported after a 100ms pause (less if the deadline is nearer)
    attempts are also cut at 3x the learned p95 once the breaker knows it
- load: up to 2 retries per call (3x) only while the retry budget lasts; it holds retries to 10% of a retry per success, at least 3 per second, up to 30 banked, so in an outage the sustained load is about 1x plus the floor
    budget spent now: 0% (30 retries available)
- measured now: breaker closed, normal latency 20.971ms, no failure-rate baseline yet (cold), trips after 5 consecutive failures
- missing: nothing
";
    assert_eq!(warm.explain().to_string(), want);
}

#[test]
fn a_hedging_policy_says_when_it_hedges() {
    let policy = Policy::builder("quotes")
        .hedging(true)
        .max_attempts(2)
        .deadline(ms(2_000))
        .attempt_timeout(ms(500))
        .clock(ManualClock::starting_at(Instant::from_secs(1)))
        .build()
        .unwrap();
    let want = "\
policy `quotes`
- the attempt limit bounds a call first: 2 attempts take at most 1.100s, inside the 2s deadline
- worst-case timeline:
    0s: attempt 1, cut at 500ms if it hangs
    500ms: wait up to 100ms (exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter)
    600ms: attempt 2, cut at 1.100s if it hangs
    a refusal is reported after a 100ms pause (less if the deadline is nearer)
    attempts are also cut at 3x the learned p95 once the breaker knows it
    an attempt still running at the learned p95 gets a hedge beside it (at most 2 in flight, the first success wins, each hedge an attempt and a retry), never while the breaker is not closed or is near its trip point
- load: up to 1 retry per call (2x) only while the retry budget lasts; it holds retries to 10% of a retry per success, at least 3 per second, up to 30 banked, so in an outage the sustained load is about 1x plus the floor
    budget spent now: 0% (30 retries available)
- measured now: breaker closed, no latency baseline yet (cold), no failure-rate baseline yet (cold), trips after 5 consecutive failures
- missing: nothing
";
    assert_eq!(policy.explain().to_string(), want);
}

#[test]
fn a_policy_explains_its_rate_limit_and_bulkhead() {
    let policy = Policy::builder("search")
        .rate_limit(Limiter::new(
            RateLimitSettings::per_second("search", 50).unwrap(),
        ))
        .bulkhead(Bulkhead::of(8, "search").unwrap())
        .build()
        .unwrap();
    let text = policy.explain().to_string();
    for line in [
        "policy `search`",
        "- rate limit: 50 per 1s, burst 50; every attempt (retries and hedges too) takes a cell",
        "- bulkhead: 8 in flight, no waiting; every attempt holds a slot while it runs",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} not in:\n{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_hedged_policy_over_a_consecutive_only_breaker_learns_and_hedges() {
    // A consecutive-only breaker keeps no statistics by itself; the hedged policy this builder
    // makes over it learns the p95, so it hedges like any other.
    let policy = Policy::builder("hedge-consecutive")
        .breaker_settings(BreakerSettings::consecutive_only("hedge-consecutive", 3).unwrap())
        .hedging(true)
        .clock(TokioClock::global())
        .build()
        .unwrap();
    let breaker = policy.breaker().unwrap();
    assert!(breaker.settings().keeps_statistics());
    assert_eq!(breaker.settings().consecutive_failures(), 3);
    warm(&policy, WARM_UP).await;
    let after: StdDuration = breaker.shared().hedge_after(now()).unwrap().into();
    assert!(after >= ms(20) && after <= ms(23), "{after:?}");
}

#[test]
fn a_hedged_policy_refuses_a_handed_in_breaker_that_learns_nothing() {
    let quiet =
        stormguard_std::Breaker::new(BreakerSettings::consecutive_only("hedge-quiet", 3).unwrap());
    let e = Policy::builder("hedge-quiet")
        .breaker(quiet.clone())
        .hedging(true)
        .build()
        .err()
        .unwrap();
    assert_eq!((e.field, e.bound), (Field::Learn, Bound::OnForHedging));
    // Unhedged, the same breaker serves.
    assert!(Policy::builder("hedge-quiet")
        .breaker(quiet)
        .build()
        .is_ok());
    // One built to learn serves a hedged policy.
    let learning = stormguard_std::Breaker::new(
        BreakerSettings::consecutive_only("hedge-quiet", 3)
            .unwrap()
            .learning(),
    );
    assert!(Policy::builder("hedge-quiet")
        .breaker(learning)
        .hedging(true)
        .build()
        .is_ok());
}

#[tokio::test(start_paused = true)]
async fn the_attempt_log_tells_a_local_limiters_refusal_from_the_dependencys_429() {
    use stormguard_core::event::AttemptEnd;
    use stormguard_std::Outcome;
    let limiter = Limiter::new(RateLimitSettings::per_second("api", 1).unwrap());
    let policy = Policy::builder("api")
        .rate_limit(limiter)
        .max_attempts(3)
        .backoff(no_jitter())
        .build()
        .unwrap();
    // Another call takes the only cell: the next comes in 1 s.
    assert_eq!(policy.call(ok).await, Ok(7));
    // The dependency's answer is a status; 429 asks for 200 ms.
    let options = CallOptions::new().classify(|r: &Result<u16, ()>| match r {
        Ok(200) => Outcome::Success,
        Ok(429) => Outcome::Throttled {
            retry_after: Some(Duration::from_millis(200)),
        },
        _ => Outcome::Transient,
    });
    let logged = policy
        .call_logged(options, |_| async { Ok::<u16, ()>(429) })
        .await;
    // No attempt left after the limiter's second refusal: the caller gets the 429 itself.
    assert_eq!(logged.result, Ok(429), "the answer");
    let ends: Vec<_> = logged.attempts.iter().map(|r| (r.attempt, r.end)).collect();
    assert_eq!(ends.len(), 3, "{}", logged.attempts);
    // 1: the local limiter refused it (the dependency was never asked); then the wait for
    // its next cell.
    assert_eq!(
        ends[0],
        (
            1,
            AttemptEnd::Refused {
                reason: RefusalReason::RateLimited
            }
        )
    );
    assert!(ends[0].1.is_self_imposed());
    // 2: the dependency's own 429, answered.
    assert!(
        matches!(
            ends[1],
            (
                2,
                AttemptEnd::Ran {
                    outcome: Outcome::Throttled { .. },
                    answered: true,
                    hedge: false,
                    ..
                }
            )
        ),
        "{:?}",
        ends[1]
    );
    assert!(!ends[1].1.is_self_imposed());
    // 3: the retry 200 ms later met the limiter again, with no attempt left.
    assert!(ends[2].1.is_self_imposed(), "{:?}", ends[2]);
    assert_eq!(
        logged.attempts.to_string(),
        "attempt 1: refused locally (rate_limited), self-imposed; \
         attempt 2: throttled after 0s, answered; \
         attempt 3: refused locally (rate_limited), self-imposed"
    );
}

#[tokio::test(start_paused = true)]
async fn the_attempt_log_shows_the_hedge_that_won_and_the_attempt_it_replaced() {
    use stormguard_core::event::AttemptEnd;
    use stormguard_std::Outcome;
    let (policy, _, _) = warm_hedging("hedge-log").await;
    let logged = policy
        .call_logged(CallOptions::new(), |attempt| async move {
            sleep(ms(if attempt == 1 { 500 } else { 5 })).await;
            Ok::<_, &str>(attempt)
        })
        .await;
    assert_eq!(logged.result, Ok(2));
    assert!(logged.attempts.hedged());
    let ends: Vec<_> = logged.attempts.iter().map(|r| (r.attempt, r.end)).collect();
    assert!(
        matches!(
            ends[..],
            [
                (
                    2,
                    AttemptEnd::Ran {
                        outcome: Outcome::Success,
                        hedge: true,
                        answered: true,
                        ..
                    }
                ),
                (
                    1,
                    AttemptEnd::Ran {
                        outcome: Outcome::Cancelled,
                        hedge: false,
                        answered: false,
                        ..
                    }
                )
            ]
        ),
        "{}",
        logged.attempts
    );
    let AttemptEnd::Ran { took, .. } = ends[0].1 else {
        unreachable!()
    };
    assert_eq!(took, Duration::from_millis(5), "the hedge's own time");
}

/// [`Kinds`], saying it does not hear attempts.
#[derive(Clone, Default)]
struct Deaf(Kinds);

impl stormguard_std::Listener for Deaf {
    fn on_event(&self, event: &Event<'_>) {
        self.0.on_event(event);
    }
    fn hears_attempts(&self) -> bool {
        false
    }
}

/// A call that fails once, then succeeds; then the same call logged. Its log fills whatever
/// the listener hears.
async fn flaky_twice<L: stormguard_std::Listener>(listener: L) {
    let flaky = |attempt: u32| async move {
        if attempt == 1 {
            Err("reset")
        } else {
            Ok(attempt)
        }
    };
    let policy = Policy::builder("heard")
        .backoff(no_jitter())
        .listener(listener)
        .build()
        .unwrap();
    assert_eq!(policy.call(flaky).await, Ok(2));
    let logged = policy.call_logged(CallOptions::new(), flaky).await;
    assert_eq!(logged.result, Ok(2));
    assert_eq!(logged.attempts.len(), 2, "the log fills either way");
}

#[tokio::test(start_paused = true)]
async fn a_listener_that_does_not_hear_attempts_is_sent_none_and_a_log_still_fills() {
    let hears = Kinds::default();
    flaky_twice(hears.clone()).await;
    assert_eq!(
        *hears.0.lock().unwrap(),
        ["attempt", "retry", "attempt", "attempt", "retry", "attempt"]
    );
    let deaf = Deaf::default();
    flaky_twice(deaf.clone()).await;
    // The logged call builds its attempt events for the log, not for this listener: it is
    // sent the call's decisions alone.
    assert_eq!(*deaf.0 .0.lock().unwrap(), ["retry", "retry"]);
}

#[tokio::test(start_paused = true)]
async fn of_two_listeners_only_the_one_that_hears_attempts_is_sent_them() {
    let (hears, deaf) = (Kinds::default(), Deaf::default());
    let policy = Policy::builder("both")
        .listener(Both(hears.clone(), deaf.clone()))
        .build()
        .unwrap();
    assert_eq!(policy.call(ok).await, Ok(7));
    assert_eq!(*hears.0.lock().unwrap(), ["attempt"]);
    assert!(deaf.0 .0.lock().unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// What a listener is told of time: a call's duration, a bulkhead wait

/// The durations a listener was told: each call's end and duration, each slot wait.
#[derive(Clone, Default)]
struct Timings {
    calls: Arc<Mutex<Vec<(stormguard_std::events::Ended, Duration)>>>,
    waits: Arc<Mutex<Vec<(Duration, bool)>>>,
}

impl stormguard_std::Listener for Timings {
    fn on_call_duration(
        &self,
        _: &stormguard_std::Name,
        ended: stormguard_std::events::Ended,
        took: Duration,
    ) {
        self.calls.lock().unwrap().push((ended, took));
    }
    fn on_slot_wait(&self, _: &stormguard_std::Name, waited: Duration, entered: bool) {
        self.waits.lock().unwrap().push((waited, entered));
    }
}

#[tokio::test(start_paused = true)]
async fn a_listener_is_told_each_calls_duration_backoff_and_rejection_pause_included() {
    use stormguard_std::events::Ended;
    let timings = Timings::default();
    let policy = Policy::builder("timed")
        .backoff(no_jitter())
        .listener(timings.clone())
        .build()
        .unwrap();
    let start = TokioInstant::now();
    let r = policy.call(|attempt| reset_on_first(attempt, ms(30))).await;
    assert_eq!(r, Ok(2));
    let retried = start.elapsed();
    assert!(retried > ms(60), "two attempts and a backoff: {retried:?}");
    policy.isolate();
    let start = TokioInstant::now();
    assert!(policy.call(ok).await.is_err());
    assert_eq!(start.elapsed(), ms(100));
    assert_eq!(
        *timings.calls.lock().unwrap(),
        [
            (Ended::Succeeded, Duration::from(retried)),
            (Ended::Rejected(RefusalReason::Isolated), GUARD_PAUSE),
        ]
    );
    // A call whose future is dropped has no end a clock saw: no duration.
    policy.reset();
    let dropped = tokio::time::timeout(
        ms(10),
        policy.call(|_| async {
            sleep(ms(50)).await;
            Ok::<_, &str>(1)
        }),
    )
    .await;
    assert!(dropped.is_err());
    assert_eq!(timings.calls.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_listener_is_told_how_long_a_call_waited_for_a_bulkhead_slot() {
    let bulkhead = waiting_bulkhead(1, 1, 250);
    let holder = Arc::new(
        Policy::builder("db")
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap(),
    );
    let timings = Timings::default();
    let policy = Policy::builder("db")
        .max_attempts(1)
        .bulkhead(bulkhead.clone())
        .listener(timings.clone())
        .build()
        .unwrap();
    assert_eq!(policy.call(ok).await, Ok(7), "a free slot: no wait");
    let held = hold_slot(&holder, ms(100));
    tokio::task::yield_now().await;
    assert_eq!(policy.call(ok).await, Ok(7), "entered when the slot freed");
    assert_eq!(held.await.unwrap(), 1);
    let _held = hold_slot(&holder, ms(1_000));
    tokio::task::yield_now().await;
    assert!(
        policy.call(ok).await.is_err(),
        "refused when the wait ran out"
    );
    assert_eq!(
        *timings.waits.lock().unwrap(),
        [
            (Duration::from_millis(100), true),
            (Duration::from_millis(250), false)
        ]
    );
}
