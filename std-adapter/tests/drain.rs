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

mod support;
use support::no_jitter;

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
