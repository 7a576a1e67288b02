//! Streaming calls through the std adapter, on tokio's paused clock: retried until the first
//! element (the attempt timeout bounding that wait alone), elements flowing after it, a failure
//! mid-stream ending the stream or, with a checkpoint, restarting from it within the restart
//! limit, a stall bound, and a hedged policy refusing to stream.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::{Arc, Mutex};

use futures_util::{stream, Stream, StreamExt};
use stormguard_core::{Bound, Field};
use stormguard_std::{
    BreakerSettings, BudgetSettings, CallError, Drain, Event, Metrics, Outcome, Policy,
    RefusalReason, State,
};
use tokio::time::Instant as TokioInstant;

use crate::support::{ms, no_jitter};

/// What a scripted stream does next.
#[derive(Clone, Copy, Debug)]
enum Beat {
    /// Yields this element after the wait.
    Item(u64, u32),
    /// Fails after the wait.
    Fail(u64),
    /// Goes quiet for ever.
    Quiet,
}

/// A stream playing `beats` on tokio's clock, then ending.
fn scripted(beats: Vec<Beat>) -> impl Stream<Item = Result<u32, &'static str>> + Send {
    stream::unfold(beats.into_iter(), |mut beats| async move {
        match beats.next()? {
            Beat::Item(wait, n) => {
                tokio::time::sleep(ms(wait)).await;
                Some((Ok(n), beats))
            }
            Beat::Fail(wait) => {
                tokio::time::sleep(ms(wait)).await;
                Some((Err("connection reset"), beats))
            }
            Beat::Quiet => {
                std::future::pending::<()>().await;
                None
            }
        }
    })
}

/// Records the events a policy sends, as short strings.
fn recorder() -> (Arc<Mutex<Vec<String>>>, impl Fn(&Event<'_>) + Send + Sync) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let kept = log.clone();
    let listener = move |e: &Event<'_>| {
        let line = match e {
            Event::Restarted {
                restart,
                delay,
                after,
                ..
            } => format!("restart {restart} in {delay} after {}", after.as_str()),
            Event::Retry { attempt, .. } => format!("retry {attempt}"),
            Event::Rejected { reason, .. } => format!("rejected {}", reason.as_str()),
            Event::StateChanged { to, .. } => format!("breaker {}", to.as_str()),
            _ => return,
        };
        kept.lock().unwrap().push(line);
    };
    (log, listener)
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_bounds_the_wait_for_the_first_element_alone() {
    let policy = Policy::builder("feed")
        .attempt_timeout(ms(1_000))
        .backoff(no_jitter())
        .build()
        .unwrap();
    let opened = Arc::new(Mutex::new(0));
    let count = opened.clone();
    let t0 = TokioInstant::now();
    let feed = policy
        .call_stream(move || {
            let n = {
                let mut n = count.lock().unwrap();
                *n += 1;
                *n
            };
            // The first connection is too slow to its first element; the second is not, and
            // then goes quiet for 5 s between elements, five attempt timeouts.
            let first_after = if n == 1 { 3_000 } else { 10 };
            let beats = vec![
                Beat::Item(first_after, 1),
                Beat::Item(5_000, 2),
                Beat::Item(5_000, 3),
            ];
            async move { Ok::<_, &str>(scripted(beats)) }
        })
        .unwrap();
    let got: Vec<u32> = feed.map(Result::unwrap).collect().await;
    assert_eq!(got, [1, 2, 3]);
    assert_eq!(*opened.lock().unwrap(), 2);
    // 1 s timed out, the first retry's 100 ms, 10 ms to the first element, then 2 x 5 s.
    assert_eq!(t0.elapsed(), ms(1_000 + 100 + 10 + 10_000));
}

#[tokio::test(start_paused = true)]
async fn a_failure_mid_stream_ends_it_as_that_failure_and_the_breaker_hears_it() {
    let (log, listener) = recorder();
    let policy = Policy::builder("feed")
        .breaker_settings(
            BreakerSettings::builder("feed")
                .consecutive_failures(1)
                .build()
                .unwrap(),
        )
        .backoff(no_jitter())
        .listener(listener)
        .build()
        .unwrap();
    let feed = policy
        .call_stream(|| async {
            Ok::<_, &str>(scripted(vec![
                Beat::Item(5, 1),
                Beat::Item(5, 2),
                Beat::Fail(5),
            ]))
        })
        .unwrap();
    let got: Vec<Result<u32, CallError<&str>>> = feed.collect().await;
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[..2]
            .iter()
            .map(|r| *r.as_ref().unwrap())
            .collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(matches!(got[2], Err(CallError::Failed("connection reset"))));
    assert_eq!(*log.lock().unwrap(), ["breaker open"]);
    assert_eq!(policy.breaker().unwrap().state(), State::Open);
}

/// A boxed element stream, as a feed's opener returns it.
type Feed = std::pin::Pin<Box<dyn Stream<Item = Result<u32, &'static str>> + Send>>;

/// A feed of `1..=last` that drops its connection after `per_connection` elements, opened from
/// a checkpoint; records where each connection started.
fn dropping_feed(
    last: u32,
    per_connection: usize,
    opened_from: Arc<Mutex<Vec<Option<u32>>>>,
) -> impl FnMut(Option<u32>) -> std::future::Ready<Result<Feed, &'static str>> + Send {
    move |from: Option<u32>| {
        opened_from.lock().unwrap().push(from);
        let start = from.map_or(1, |n| n + 1);
        let mut beats: Vec<Beat> = (start..=last)
            .take(per_connection)
            .map(|n| Beat::Item(10, n))
            .collect();
        if start + (per_connection as u32) <= last {
            beats.push(Beat::Fail(10));
        }
        std::future::ready(Ok(Box::pin(scripted(beats)) as Feed))
    }
}

#[tokio::test(start_paused = true)]
async fn a_resumable_stream_restarts_from_its_checkpoint_after_the_backoff() {
    let (log, listener) = recorder();
    let policy = Policy::builder("feed")
        .backoff(no_jitter())
        .listener(listener)
        .build()
        .unwrap();
    let opened_from = Arc::new(Mutex::new(Vec::new()));
    let t0 = TokioInstant::now();
    let mut feed = policy
        .call_stream_resumable(|n: &u32| *n, dropping_feed(6, 2, opened_from.clone()))
        .unwrap();
    let mut got = Vec::new();
    while let Some(item) = feed.next().await {
        got.push(item.unwrap());
    }
    assert_eq!(got, [1, 2, 3, 4, 5, 6]);
    assert_eq!(*opened_from.lock().unwrap(), [None, Some(2), Some(4)]);
    assert_eq!(feed.restarts(), 2);
    assert_eq!(feed.last_error(), Some(&"connection reset"));
    assert_eq!(
        *log.lock().unwrap(),
        [
            "restart 1 in 100ms after transient",
            "restart 2 in 200ms after transient"
        ]
    );
    // Three connections of two elements and a failure at 10 ms each (the last without the
    // failure), and the two backoffs.
    assert_eq!(t0.elapsed(), ms(30 + 30 + 20 + 100 + 200));
}

#[tokio::test(start_paused = true)]
async fn metrics_count_the_restarts() {
    let metrics = Metrics::new("feed");
    let policy = Policy::builder("feed")
        .backoff(no_jitter())
        .listener(metrics.clone())
        .build()
        .unwrap();
    let opened_from = Arc::new(Mutex::new(Vec::new()));
    let feed = policy
        .call_stream_resumable(|n: &u32| *n, dropping_feed(6, 2, opened_from))
        .unwrap();
    let got: Vec<Result<u32, CallError<&str>>> = feed.collect().await;
    assert_eq!(got.len(), 6);
    assert_eq!(metrics.snapshot().restarts, 2);
    assert!(metrics
        .to_prometheus()
        .contains("stormguard_restarts_total{breaker=\"feed\"} 2"));
}

#[tokio::test(start_paused = true)]
async fn the_restart_limit_ends_the_stream_with_the_last_failure() {
    let policy = Policy::builder("feed")
        .backoff(no_jitter())
        .build()
        .unwrap();
    let opened_from = Arc::new(Mutex::new(Vec::new()));
    let mut feed = policy
        .call_stream_resumable(|n: &u32| *n, dropping_feed(100, 1, opened_from.clone()))
        .unwrap()
        .max_restarts(2);
    let mut got = Vec::new();
    let mut last = None;
    while let Some(item) = feed.next().await {
        match item {
            Ok(n) => got.push(n),
            Err(e) => last = Some(e),
        }
    }
    assert_eq!(got, [1, 2, 3]);
    assert!(matches!(last, Some(CallError::Failed("connection reset"))));
    assert_eq!(feed.restarts(), 2);
    assert_eq!(*opened_from.lock().unwrap(), [None, Some(1), Some(2)]);
}

#[tokio::test(start_paused = true)]
async fn a_stall_loses_the_stream_as_a_timeout() {
    let policy = Policy::builder("feed")
        .backoff(no_jitter())
        .build()
        .unwrap();
    let feed = policy
        .call_stream(|| async {
            Ok::<_, &str>(scripted(vec![
                Beat::Item(5, 1),
                Beat::Item(50, 2),
                Beat::Quiet,
            ]))
        })
        .unwrap()
        .stall_timeout(ms(100))
        .unwrap();
    let t0 = TokioInstant::now();
    let got: Vec<Result<u32, CallError<&str>>> = feed.collect().await;
    assert_eq!(got.len(), 3);
    assert!(matches!(got[2], Err(CallError::TimedOut { last: None })));
    // The stall bound counts from the last element.
    assert_eq!(t0.elapsed(), ms(5 + 50 + 100));

    let zero = policy
        .call_stream(|| async { Ok::<_, &str>(scripted(vec![])) })
        .unwrap()
        .stall_timeout(ms(0))
        .unwrap_err();
    assert_eq!(zero.field, Field::StallTimeout);
}

#[tokio::test(start_paused = true)]
async fn a_caller_slow_to_read_is_no_stall() {
    let policy = Policy::builder("feed").build().unwrap();
    let mut feed = policy
        .call_stream(|| async {
            Ok::<_, &str>(scripted(vec![
                Beat::Item(0, 1),
                Beat::Item(0, 2),
                Beat::Item(60, 3),
            ]))
        })
        .unwrap()
        .stall_timeout(ms(100))
        .unwrap();
    let mut got = Vec::new();
    while let Some(item) = feed.next().await {
        got.push(item.unwrap());
        // The caller takes five stall bounds over each element: the source is never waited on
        // for longer than 60 ms.
        tokio::time::sleep(ms(500)).await;
    }
    assert_eq!(got, [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_resumable_stream_restarts() {
    let policy = Policy::builder("feed")
        .backoff(no_jitter())
        .build()
        .unwrap();
    let opened = Arc::new(Mutex::new(Vec::new()));
    let seen = opened.clone();
    let mut feed = policy
        .call_stream_resumable(
            |n: &u32| *n,
            move |from: Option<u32>| {
                seen.lock().unwrap().push(from);
                let beats = match from {
                    None => vec![Beat::Item(5, 1), Beat::Quiet],
                    Some(_) => vec![Beat::Item(5, 2)],
                };
                async move { Ok::<_, &str>(scripted(beats)) }
            },
        )
        .unwrap()
        .stall_timeout(ms(100))
        .unwrap();
    let mut got = Vec::new();
    while let Some(item) = feed.next().await {
        got.push(item.unwrap());
    }
    assert_eq!(got, [1, 2]);
    assert_eq!(*opened.lock().unwrap(), [None, Some(1)]);
    assert_eq!(feed.last_loss(), Some(Outcome::TimedOut));
    assert_eq!(feed.last_error(), None);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_mid_stream_is_not_restarted_from() {
    let policy = Policy::builder("feed")
        .backoff(no_jitter())
        .build()
        .unwrap();
    let opened_from = Arc::new(Mutex::new(Vec::new()));
    let feed = policy
        .call_stream_resumable(|n: &u32| *n, dropping_feed(6, 2, opened_from.clone()))
        .unwrap()
        .classify(|_: &&str| Outcome::Permanent);
    let got: Vec<Result<u32, CallError<&str>>> = feed.collect().await;
    assert_eq!(got.len(), 3);
    assert!(matches!(got[2], Err(CallError::Failed("connection reset"))));
    assert_eq!(*opened_from.lock().unwrap(), [None]);
}

#[tokio::test(start_paused = true)]
async fn a_connection_the_breaker_refuses_ends_the_stream_as_the_rejection() {
    let policy = Policy::builder("feed").build().unwrap();
    policy.isolate();
    let feed = policy
        .call_stream(|| async { Ok::<_, &str>(scripted(vec![Beat::Item(5, 1)])) })
        .unwrap();
    let got: Vec<Result<u32, CallError<&str>>> = feed.collect().await;
    assert_eq!(got.len(), 1);
    match &got[0] {
        Err(CallError::Rejected { rejection, .. }) => {
            assert_eq!(rejection.reason, RefusalReason::Isolated);
        }
        other => panic!("expected the rejection, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn an_empty_stream_ends_without_an_item() {
    let policy = Policy::builder("feed").build().unwrap();
    let feed = policy
        .call_stream(|| async { Ok::<_, &str>(scripted(vec![])) })
        .unwrap();
    let got: Vec<Result<u32, CallError<&str>>> = feed.collect().await;
    assert!(got.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_error_the_classifier_calls_a_success_still_reaches_the_caller() {
    let policy = Policy::builder("feed")
        .backoff(no_jitter())
        .build()
        .unwrap();
    let opened_from = Arc::new(Mutex::new(Vec::new()));
    let feed = policy
        .call_stream_resumable(|n: &u32| *n, dropping_feed(6, 2, opened_from.clone()))
        .unwrap()
        .classify(|_: &&str| Outcome::Success);
    let got: Vec<Result<u32, CallError<&str>>> = feed.collect().await;
    assert_eq!(got.len(), 3);
    assert!(matches!(got[2], Err(CallError::Failed("connection reset"))));
    assert_eq!(*opened_from.lock().unwrap(), [None]);
}

#[tokio::test(start_paused = true)]
async fn a_restart_the_budget_refuses_ends_the_stream_with_the_loss() {
    let (log, listener) = recorder();
    // A budget of one retry: the first restart spends it.
    let budget = BudgetSettings::builder("feed")
        .floor_per_second(0.1)
        .build()
        .unwrap();
    let policy = Policy::builder("feed")
        .budget_settings(budget)
        .backoff(no_jitter())
        .listener(listener)
        .build()
        .unwrap();
    let opened_from = Arc::new(Mutex::new(Vec::new()));
    let mut feed = policy
        .call_stream_resumable(|n: &u32| *n, dropping_feed(100, 2, opened_from.clone()))
        .unwrap();
    let mut got = Vec::new();
    let mut last = None;
    while let Some(item) = feed.next().await {
        match item {
            Ok(n) => got.push(n),
            Err(e) => last = Some(e),
        }
    }
    assert_eq!(got, [1, 2, 3, 4]);
    assert!(matches!(last, Some(CallError::Failed("connection reset"))));
    assert_eq!(feed.restarts(), 1);
    assert_eq!(*opened_from.lock().unwrap(), [None, Some(2)]);
    assert_eq!(
        *log.lock().unwrap(),
        [
            "restart 1 in 100ms after transient",
            "rejected budget_exhausted"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_lost_during_a_drain_ends_as_drained() {
    let drain = Drain::new();
    let policy = Policy::builder("feed")
        .backoff(no_jitter())
        .drain(drain.clone())
        .build()
        .unwrap();
    let opened_from = Arc::new(Mutex::new(Vec::new()));
    let mut feed = policy
        .call_stream_resumable(|n: &u32| *n, dropping_feed(6, 2, opened_from.clone()))
        .unwrap();
    assert_eq!(feed.next().await.unwrap().unwrap(), 1);
    drain.begin();
    // The stream flows on through the drain; its loss does not restart.
    assert_eq!(feed.next().await.unwrap().unwrap(), 2);
    assert!(matches!(
        feed.next().await,
        Some(Err(CallError::Drained {
            last: Some("connection reset")
        }))
    ));
    assert!(feed.next().await.is_none());
    assert_eq!(*opened_from.lock().unwrap(), [None]);
}

#[tokio::test(start_paused = true)]
async fn connections_that_flowed_long_enough_start_the_restarts_over() {
    let policy = Policy::builder("feed")
        .backoff(no_jitter())
        .build()
        .unwrap();
    // Each connection delivers two elements 10 ms apart and fails 10 ms later: it flowed
    // 20 ms from its first element when lost.
    let run = |reset: Option<u64>| {
        let opened_from = Arc::new(Mutex::new(Vec::new()));
        let mut feed = policy
            .call_stream_resumable(|n: &u32| *n, dropping_feed(8, 2, opened_from))
            .unwrap()
            .max_restarts(1);
        if let Some(ms_) = reset {
            feed = feed.reset_restarts_after(ms(ms_)).unwrap();
        }
        async move {
            let mut got = Vec::new();
            while let Some(Ok(n)) = feed.next().await {
                got.push(n);
            }
            got
        }
    };
    assert_eq!(run(Some(20)).await, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(run(Some(25)).await, [1, 2, 3, 4]);
    assert_eq!(run(None).await, [1, 2, 3, 4]);
}

#[test]
fn a_hedged_policy_refuses_to_stream() {
    let policy = Policy::builder("feed").hedging(true).build().unwrap();
    let err = policy
        .call_stream(|| async { Ok::<_, &str>(scripted(vec![])) })
        .unwrap_err();
    assert_eq!(
        (err.field, err.bound),
        (Field::Hedging, Bound::OffForStreaming)
    );
}
