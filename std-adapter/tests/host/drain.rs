//! Drain-aware shutdown through the std adapter's latch, on tokio's paused clock: the core
//! decides (no new attempt or retry, deadlines clamped to the grace), the adapter wakes it.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use stormguard_std::{CallError, CallOptions, Drain, Metrics, Policy};
use tokio::time::Instant as TokioInstant;
use tokio_util::sync::CancellationToken;

use crate::support::no_jitter;

fn ms(n: u64) -> StdDuration {
    StdDuration::from_millis(n)
}

/// Begins `drain` after `after` of paused time.
fn begin_after(drain: &Drain, after: StdDuration) {
    let drain = drain.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        drain.begin();
    });
}

#[tokio::test(start_paused = true)]
async fn a_drain_stops_the_retry_but_lets_the_attempt_in_flight_finish() {
    let drain = Drain::new();
    let metrics = Metrics::new("db");
    let policy = Policy::builder("db")
        .backoff(no_jitter())
        .drain(drain.clone())
        .listener(metrics.clone())
        .build()
        .unwrap();
    let (started, finished) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    begin_after(&drain, ms(50));
    let t0 = TokioInstant::now();
    let r = policy
        .call(|_| {
            let (started, finished) = (started.clone(), finished.clone());
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(ms(200)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                Err::<u32, _>("reset")
            }
        })
        .await;
    // The attempt ran to its end (200 ms, past the drain at 50 ms); no retry followed.
    assert_eq!(
        r,
        Err(CallError::Drained {
            last: Some("reset")
        })
    );
    assert_eq!(started.load(Ordering::SeqCst), 1);
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert_eq!(t0.elapsed(), ms(200));
    let s = metrics.snapshot();
    assert_eq!((s.calls_ended("drained"), s.retries), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn the_attempt_in_flight_is_cut_at_the_grace() {
    let drain = Drain::new().with_grace(ms(1_000));
    let policy = Policy::builder("slow")
        .drain(drain.clone())
        .build()
        .unwrap();
    begin_after(&drain, ms(100));
    let t0 = TokioInstant::now();
    // 10 s of work under a 10 s attempt timeout and a 30 s deadline: the grace cuts it.
    let r = policy
        .call(|_| async {
            tokio::time::sleep(ms(10_000)).await;
            Ok::<u32, &str>(1)
        })
        .await;
    assert_eq!(r, Err(CallError::Drained { last: None }));
    assert_eq!(t0.elapsed(), ms(1_100));
}

#[tokio::test(start_paused = true)]
async fn a_drain_during_the_backoff_wait_ends_the_call_at_once() {
    let drain = Drain::new();
    let policy = Policy::builder("db")
        .backoff(
            stormguard_std::Backoff::builder()
                .base(stormguard_std::Duration::from_secs(5))
                .jitter(stormguard_std::Jitter::None)
                .build()
                .unwrap(),
        )
        .drain(drain.clone())
        .build()
        .unwrap();
    begin_after(&drain, ms(1_000));
    let attempts = AtomicU32::new(0);
    let t0 = TokioInstant::now();
    let r = policy
        .call(|_| {
            attempts.fetch_add(1, Ordering::SeqCst);
            async { Err::<u32, _>("refused") }
        })
        .await;
    // Failed at once, then waiting 5 s for the retry: the drain at 1 s ends the wait.
    assert_eq!(
        r,
        Err(CallError::Drained {
            last: Some("refused")
        })
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert_eq!(t0.elapsed(), ms(1_000));
}

#[tokio::test(start_paused = true)]
async fn a_call_begun_after_the_drain_is_refused_at_once_and_runs_nothing() {
    let shutdown = CancellationToken::new();
    let drain = Drain::from_token(shutdown.child_token());
    let policy = Policy::builder("db").drain(drain).build().unwrap();
    shutdown.cancel();
    let runs = AtomicU32::new(0);
    let t0 = TokioInstant::now();
    let r = policy
        .call(|_| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok::<u32, ()>(1) }
        })
        .await;
    assert_eq!(r, Err(CallError::Drained { last: None }));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(t0.elapsed(), ms(0)); // no guarded pause: a drain is no refusal to poll against
}

#[tokio::test(start_paused = true)]
async fn a_calls_own_drain_takes_the_place_of_the_policys() {
    let policy_drain = Drain::new();
    let policy = Policy::builder("db")
        .drain(policy_drain.clone())
        .build()
        .unwrap();
    let mine = Drain::new();
    mine.begin();
    let r = policy
        .call_with(CallOptions::new().drain_on(&mine), |_| async {
            Ok::<u32, ()>(1)
        })
        .await;
    assert_eq!(r, Err(CallError::Drained { last: None }));
    assert!(!policy_drain.is_draining());
    assert_eq!(policy.call(|_| async { Ok::<u32, ()>(2) }).await, Ok(2));
}

#[test]
fn a_blocking_call_stops_retrying_once_the_drain_begins() {
    let drain = Drain::new();
    let policy = Policy::builder("disk")
        .backoff(no_jitter())
        .drain(drain.clone())
        .build()
        .unwrap();
    let mut attempts = 0;
    let r = policy.call_blocking(|_| {
        attempts += 1;
        drain.begin(); // begins while the attempt runs: it finishes, no retry follows
        Err::<u32, _>("busy")
    });
    assert_eq!(r, Err(CallError::Drained { last: Some("busy") }));
    assert_eq!(attempts, 1);
    let r = policy.call_blocking(|_| Ok::<u32, ()>(1));
    assert_eq!(r, Err(CallError::Drained { last: None }));
}

#[tokio::test(start_paused = true)]
async fn a_drain_during_a_hedged_attempt_launches_no_hedge_and_cuts_the_attempt_at_the_grace() {
    let drain = Drain::new().with_grace(ms(5));
    let metrics = Metrics::new("search");
    let policy = Policy::builder("search")
        .hedging(true)
        .backoff(no_jitter())
        .drain(drain.clone())
        .listener(metrics.clone())
        .build()
        .unwrap();
    // Healthy calls of 20 ms teach the breaker its p95: a slower attempt would be hedged.
    for _ in 0..40 {
        let r = policy
            .call(|_| async {
                tokio::time::sleep(ms(20)).await;
                Ok::<u32, &str>(0)
            })
            .await;
        assert_eq!(r, Ok(0));
    }
    let attempts_before = metrics.snapshot().attempts;
    let invoked = AtomicU32::new(0);
    // The drain begins 2 ms into an attempt that would take 100 ms, before the hedge is due
    // (about 21 ms in).
    begin_after(&drain, ms(2));
    let t0 = TokioInstant::now();
    let r = policy
        .call(|_| {
            invoked.fetch_add(1, Ordering::SeqCst);
            async {
                tokio::time::sleep(ms(100)).await;
                Ok::<u32, &str>(1)
            }
        })
        .await;
    // The attempt ran on within the grace (2 + 5 ms), was cut there, and nothing followed it:
    // no hedge, no retry.
    assert!(matches!(r, Err(CallError::Drained { .. })), "{r:?}");
    assert_eq!(invoked.load(Ordering::SeqCst), 1);
    assert_eq!(metrics.snapshot().attempts - attempts_before, 1);
    assert_eq!(t0.elapsed(), ms(7));
}

#[tokio::test(start_paused = true)]
async fn a_drain_ends_the_wait_for_a_bulkhead_slot_at_once_and_leaves_the_queue() {
    use stormguard_core::limits::BulkheadSettings;
    use stormguard_std::Bulkhead;
    let drain = Drain::new();
    let bulkhead = Bulkhead::new(
        BulkheadSettings::builder("db")
            .max_in_flight(1)
            .bounded_wait(1, stormguard_core::Duration::from_secs(5))
            .build()
            .unwrap(),
    );
    let policy = Arc::new(
        Policy::builder("db")
            .bulkhead(bulkhead.clone())
            .drain(drain.clone())
            .build()
            .unwrap(),
    );
    // One call holds the only slot for 100 ms.
    let holder = {
        let p = Arc::clone(&policy);
        tokio::spawn(async move {
            p.call(|_| async {
                tokio::time::sleep(ms(100)).await;
                Ok::<u32, &str>(1)
            })
            .await
        })
    };
    tokio::task::yield_now().await;
    let ran = Arc::new(AtomicU32::new(0));
    let waiter = {
        let (p, ran) = (Arc::clone(&policy), Arc::clone(&ran));
        tokio::spawn(async move {
            let t0 = TokioInstant::now();
            let r = p
                .call(|_| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<u32, &str>(2) }
                })
                .await;
            (r, t0.elapsed())
        })
    };
    tokio::task::yield_now().await;
    assert_eq!((bulkhead.in_flight(), bulkhead.queued()), (1, 1));
    begin_after(&drain, ms(10));
    // The waiter ends when the drain begins, not when the slot frees (100 ms) or its wait
    // ends (5 s); it ran nothing and left the queue.
    let (r, took) = waiter.await.unwrap();
    assert_eq!(r, Err(CallError::Drained { last: None }));
    assert_eq!(took, ms(10));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(bulkhead.queued(), 0);
    // The call in flight finishes.
    assert_eq!(holder.await.unwrap(), Ok(1));
}
